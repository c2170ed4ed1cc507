"""The one budget type and the one pricer: what an amount of compute is, and what work costs in it.

:class:`ComputeBudget` is a budget as a user states it, in one unit: ``tokens``, ``eflops``
(Kinetics FLOP-equivalents), ``gpu_seconds`` or ``dollars``. :func:`tts.solve`, :class:`tts.Session`,
the server's ``tts.budget`` and the ``auto`` strategy's budget all read it with
:meth:`ComputeBudget.parse` (a number is tokens; ``{"dollars": 0.01}``, ``"0.01 dollars"``, ...).

:class:`Pricer` prices work on one model architecture and GPU (:mod:`tts.cost`), for two callers:

* a single solve (Session, server): :meth:`Pricer.allowance` turns a budget into the generated
  tokens its strategy may spend at their worst case (the strategies' currency,
  :class:`tts.types.Budget`), and :meth:`Pricer.cost` reports what a solve spent in every unit;
* the allocators (``auto``, the cross-strategy plan and replay, escalation): :meth:`Pricer.request`,
  :meth:`Pricer.usage`, :meth:`Pricer.verify` and :meth:`Pricer.option` price work in the
  pricer's plan ``unit`` (which may also be ``samples``, for pools without token counts).

Tokens. A token of a budget is a token the engine is paid to process, and two quantities of them
are counted, each under its own name (docs/budgets.md, "What a token of a budget is"):

* **generated tokens**: what a solve's budget in ``tokens`` holds (``tts.solve``, a Session,
  ``tts serve``'s ``tts.budget`` and ``--max-budget-tokens``, ``tts mcp``), counted at their
  worst case, ``max_tokens`` a sample, before the solve runs (:meth:`Pricer.allowance`, the
  record's ``as_tokens``, :attr:`tts.types.Budget.tokens`). A solve's prompt is fixed by its
  question and read once, so the budget leaves it out, and the server can reserve the worst case.
* **processed tokens**: what an allocator's plan in ``tokens`` counts (``auto``, ``tts eval
  --allocate``, the replays): generated plus *uncached* prompt tokens of every request
  (:meth:`Pricer.request`, :meth:`Pricer.usage`), because its problems' prompts differ and the
  prefix cache decides what a second request costs. Processed tokens are never fewer than the
  generated ones, so ``auto`` run by a solve with a budget in tokens stays within that many
  generated tokens too.

The other units (eFLOPs, GPU-seconds, dollars) price prompt reads in both.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

UNITS: tuple[str, ...] = ("tokens", "eflops", "gpu_seconds", "dollars")
"""The units a budget may be given in."""
PLAN_UNITS: tuple[str, ...] = (*UNITS, "samples")
"""Units an allocator may plan in: a budget's units plus ``samples`` (one per sample drawn,
verifier passes free), for sample pools without token counts."""

FORMS = ("a number of tokens, {'dollars': 0.01}, {'eflops': 1e15}, {'gpu_seconds': 2}, "
         "{'tokens': 4000} or {'amount': 0.01, 'unit': 'dollars'}")
"""The forms :meth:`ComputeBudget.parse` accepts, as error messages list them."""


class BudgetError(ValueError):
    """A budget that cannot be used; the message says what to change. The one budget error of tts:
    the session, the server, ``auto`` and the allocators (:mod:`tts.budgets.allocator`) raise it."""


@dataclass(frozen=True, slots=True)
class ComputeBudget:
    """An amount of compute in one unit (``tokens``, ``eflops``, ``gpu_seconds`` or ``dollars``).

    Example:
        >>> ComputeBudget.parse({"dollars": 0.01})
        ComputeBudget(amount=0.01, unit='dollars')
        >>> str(ComputeBudget.parse(4000))
        '4000 tokens'
    """

    amount: float
    unit: str = "tokens"

    def __post_init__(self) -> None:
        if self.unit not in UNITS:
            raise BudgetError(f"budget unit {self.unit!r} is unknown; use one of {', '.join(UNITS)}")
        if isinstance(self.amount, bool) or not isinstance(self.amount, (int, float)) \
                or not math.isfinite(self.amount) or self.amount <= 0:
            raise BudgetError(f"a budget must be a finite number above 0, got {self.amount!r} {self.unit}")

    @classmethod
    def parse(cls, value: Any, unit: str | None = None) -> ComputeBudget | None:
        """A budget from what a caller passes: a number (tokens, or ``unit`` when given),
        ``{"dollars": 0.01}``, ``{"amount": 0.01, "unit": "dollars"}``, ``"0.01 dollars"``, or a
        ComputeBudget. None: no budget.

        Raises:
            BudgetError: Anything else; the message lists the accepted forms.
        """
        if value is None or isinstance(value, ComputeBudget):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return cls(value, unit or "tokens")
        if isinstance(value, str):
            parts = value.split()
            try:
                amount = float(parts[0]) if parts else math.nan
            except ValueError:
                amount = math.nan
            if 1 <= len(parts) <= 2 and not math.isnan(amount):
                return cls(amount, parts[1] if len(parts) == 2 else (unit or "tokens"))
        if isinstance(value, Mapping):
            if set(value) == {"amount", "unit"} or set(value) == {"amount"}:
                return cls(value["amount"], str(value.get("unit", unit or "tokens")))
            if len(value) == 1:
                (key, amount), = value.items()
                return cls(amount, str(key))
        raise BudgetError(f"cannot read a budget from {value!r}; give {FORMS}")

    def as_dict(self) -> dict[str, Any]:
        """``{"amount": ..., "unit": ...}``, JSON-ready."""
        return {"amount": self.amount, "unit": self.unit}

    def __str__(self) -> str:
        return f"{self.amount:g} {self.unit}"


@dataclass(frozen=True, eq=False)
class Pricer:
    """Prices work on one model architecture and GPU, in any unit (see the module docstring).

    Build it with :meth:`for_model` (or :func:`make_pricer` for an allocator, which must price).

    Args:
        unit: The unit an allocator plans in (:data:`PLAN_UNITS`); a solve's budget brings its own.
        cost_model: The generator's cost model (None: only tokens and samples are priced).
        efficiency: Measured seconds per roofline second (``tts cost calibrate --engine``'s
            median ratio); multiplies gpu_seconds and dollars, not eFLOPs (a FLOP count, not a time).
        usd_per_hour: Price of the GPU, for dollars (default: from ``gpu`` and ``prices``).
        verifier: Cost model of a verifier that reads each scored sample once (one prefill of
            prompt plus sample); None = scores come with generation (mean logprob).
        model: The model the cost model describes (reported as ``priced_as``).
        gpu: The GPU that prices eFLOPs, seconds and dollars.
        prices: Overrides of the default dollars per GPU-hour.
        why_unpriced: Why there is no cost model (said when a unit needs one).
        token_price: A hosted model's per-token price (:class:`tts.cost.token_prices.TokenPrice`,
            from the backend: LiteLLM's table), which prices dollars where there is no cost model
            (a hosted model publishes no architecture); None: none.
    """

    unit: str = "tokens"
    cost_model: Any = None
    efficiency: float = 1.0
    usd_per_hour: float | None = None
    verifier: Any = None
    model: str | None = None
    gpu: str = "h100"
    prices: Mapping[str, float] = field(default_factory=dict)
    why_unpriced: str = "no model to price with was given"
    token_price: Any = None

    def __post_init__(self) -> None:
        if self.unit not in PLAN_UNITS:
            raise ValueError(f"unknown budget unit {self.unit!r}; use one of {', '.join(PLAN_UNITS)}")
        if self.unit not in ("tokens", "samples") and self.cost_model is None:
            raise ValueError(f"budget unit {self.unit} needs the model's cost model (its architecture and a GPU)")
        if self.unit == "dollars" and self.usd_per_hour is None and self._usd_per_hour() is None:
            raise ValueError("budget unit dollars needs the GPU's price per hour")
        if not self.efficiency > 0:
            raise ValueError(f"efficiency must be a positive factor, got {self.efficiency}")

    @classmethod
    def for_model(cls, model: str | None, gpu: str = "h100", prices: Mapping[str, float] | None = None, *,
                  unit: str = "tokens", efficiency: float = 1.0, verifier_model: str | None = None,
                  strict: bool = False, deployment: Mapping[str, Any] | None = None) -> Pricer:
        """A pricer for a tts model name (alias, directory, hub id, config.json) on a named GPU.

        Args:
            deployment: How the model is deployed (``tensor_parallel``, ``quantization``:
                :func:`tts.cost.deployment.deployment_of` of the engine's config); None: one GPU,
                the checkpoint's dtype.
            strict: Raise when the model cannot be priced (an allocator needs the price);
                otherwise the pricer counts tokens only and says why in ``why_unpriced``.

        Raises:
            ValueError: ``strict`` and an unknown architecture or GPU, or a unit that needs one.
        """
        if unit not in PLAN_UNITS:
            raise ValueError(f"unknown budget unit {unit!r}; use one of {', '.join(PLAN_UNITS)}")
        cost_model = ver = None
        why = "no model to price with was given"
        if model:
            from tts.cost.ledger import cost_model_for

            try:
                cost_model = cost_model_for(model, gpu, **dict(deployment or {}))
                ver = cost_model_for(verifier_model, gpu) if verifier_model else None
            except (ValueError, OSError) as exc:
                if strict:
                    raise
                why = f"model {model!r} on {gpu!r} cannot be priced: {exc}"
                logger.info("%s", why)
        elif strict and unit not in ("tokens", "samples"):
            raise ValueError(f"budget unit {unit} needs the model (its architecture prices the work)")
        usd = None
        if unit == "dollars":
            from tts.cost.prices import usd_per_hour

            usd = usd_per_hour(gpu, prices)
        return cls(unit, cost_model, efficiency, usd, ver, model, gpu, dict(prices or {}), why)

    # --- money -----------------------------------------------------------------------------------

    def _usd_per_hour(self) -> float | None:
        if self.usd_per_hour is not None:
            return self.usd_per_hour
        from tts.cost.prices import PriceError, usd_per_hour

        try:
            return usd_per_hour(self.gpu, self.prices)
        except PriceError:
            return None

    def _in(self, unit: str, cost: Any) -> float | None:
        """A cost model's :class:`~tts.cost.cost_model.Cost` in ``unit`` (None: no dollar price)."""
        if unit == "eflops":
            return float(cost.eflops)
        seconds = float(cost.gpu_seconds) * self.efficiency  # every GPU of a tensor-parallel replica is paid for
        if unit == "gpu_seconds":
            return seconds
        usd = self._usd_per_hour()
        return None if usd is None else seconds / 3600.0 * usd

    # --- a single solve --------------------------------------------------------------------------

    def cost(self, usage: Any) -> dict[str, Any]:
        """What ``usage`` (a :class:`~tts.types.Usage`) cost: tokens always (``tokens`` is prompt
        plus completion, as OpenAI's ``total_tokens``; a token budget counts ``completion_tokens``);
        eFLOPs, GPU-seconds and dollars (None without a price for the GPU) when priced."""
        out: dict[str, Any] = {"tokens": usage.total_tokens, "prompt_tokens": usage.prompt_tokens,
                               "completion_tokens": usage.completion_tokens, "calls": usage.calls,
                               "wall_seconds": round(usage.wall_seconds, 6)}
        if self.cost_model is not None:
            from tts.cost.ledger import price_usages

            cost = price_usages([("x", usage)], self.cost_model)["x"].cost if usage.shapes else None
            eflops = cost.eflops if cost else 0.0
            seconds = cost.gpu_seconds * self.efficiency if cost else 0.0
            usd = self._usd_per_hour()
            out.update(eflops=eflops, gpu_seconds=seconds, dollars=None if usd is None else seconds / 3600.0 * usd,
                       gpu=self.gpu, priced_as=self.model)
        elif self.token_price is not None:  # a hosted model: its provider bills tokens
            out.update(dollars=self.token_price.usd(usage.prompt_tokens, usage.cached_prompt_tokens,
                                                    usage.completion_tokens),
                       priced_as=f"{self.model} per token ({self.token_price.source})")
        return out

    def _samples_cost(self, prompt_tokens: int, samples: int, max_tokens: int, unit: str) -> float:
        value = self._in(unit, self.cost_model.cost_request(prompt_tokens, [max_tokens] * samples))
        if value is None:
            raise BudgetError(f"no dollar price for GPU {self.gpu!r}; give prices ({{'{self.gpu}': USD_PER_HOUR}}) "
                              "or a budget in gpu_seconds")
        return value

    def allowance(self, budget: ComputeBudget, prompt_tokens: int, max_tokens: int) -> int:
        """Generated tokens (worst case) that ``budget`` pays for in one solve: the budget itself
        in tokens, else the largest number of ``max_tokens`` samples sharing one prompt of
        ``prompt_tokens`` whose predicted cost fits, times ``max_tokens``. The prediction prices
        the samples as if they ran alone (no weight reads shared with other requests), so it errs
        on the side of spending less than allowed.

        Raises:
            BudgetError: The unit needs a cost model this pricer does not have, or the budget
                does not pay for one sample of ``max_tokens``.
        """
        if budget.unit == "tokens":
            if budget.amount < max_tokens:
                raise BudgetError(f"a budget of {budget} does not cover one sample of up to {max_tokens} tokens; "
                                  "raise the budget or lower max_tokens")
            return int(budget.amount)
        if self.cost_model is None and self.token_price is not None and budget.unit == "dollars":
            # Each sample billed its prompt (the worst case: a provider without n is sent n requests).
            one = self.token_price.usd(prompt_tokens, 0, max_tokens)
            if one <= 0:  # a free model: the budget limits nothing (the cap of the search below)
                return 65536 * max_tokens
            if one > budget.amount:
                raise BudgetError(f"a budget of {budget} does not cover one sample of up to {max_tokens} tokens "
                                  f"(${one:.3g} for {self.model}); raise the budget or lower max_tokens")
            # Whole samples, the quotient read to one part in 10^9 of the budget: floor division alone
            # is one short wherever the quotient of a round budget rounds below a whole number (11
            # samples' price bought 10 at $0.0165 a sample; $0.018 bought 17 at $0.001).
            return math.floor(budget.amount / one * (1 + 1e-9)) * max_tokens
        if self.cost_model is None:
            raise BudgetError(f"a budget in {budget.unit} needs a cost model, but {self.why_unpriced}; "
                              "give a budget in tokens, or open the session with price_as=<model alias or config.json> "
                              "(tts serve, tts mcp: --price-as)")
        one = self._samples_cost(prompt_tokens, 1, max_tokens, budget.unit)
        if one > budget.amount:
            raise BudgetError(f"a budget of {budget} does not cover one sample of up to {max_tokens} tokens "
                              f"({one:.3g} {budget.unit} for {self.model} on {self.gpu}); raise the budget "
                              "or lower max_tokens")
        lo, hi = 1, 2
        while hi <= 65536 and self._samples_cost(prompt_tokens, hi, max_tokens, budget.unit) <= budget.amount:
            lo, hi = hi, hi * 2
        while hi - lo > 1:  # largest sample count whose cost fits
            mid = (lo + hi) // 2
            if self._samples_cost(prompt_tokens, mid, max_tokens, budget.unit) <= budget.amount:
                lo = mid
            else:
                hi = mid
        return lo * max_tokens

    # --- an allocator's plan, in ``unit`` --------------------------------------------------------

    def _plan(self, cost: Any) -> float:
        value = self._in(self.unit, cost)
        return 0.0 if value is None else value  # __post_init__ refused dollars without a price

    def request(self, prompt_tokens: int, lengths: Sequence[int], cached: int = 0) -> float:
        """One request of ``len(lengths)`` samples sharing a prompt, ``cached`` of its tokens in
        the prefix cache, in ``unit``."""
        if not len(lengths):
            return 0.0
        if self.unit == "samples":
            return float(len(lengths))
        if self.unit == "tokens":
            return float(sum(lengths) + prompt_tokens - cached)
        return self._plan(self.cost_model.cost_request(int(prompt_tokens), [int(x) for x in lengths], int(cached)))

    def usage(self, usage: Any) -> float:
        """What a recorded :class:`~tts.types.Usage` cost in ``unit`` (generated + uncached prompt
        tokens, or priced request by request from its shapes)."""
        if self.unit == "samples":
            return float(sum(len(s.completion_tokens) for s in usage.shapes))
        if self.unit == "tokens":
            return float(usage.completion_tokens + usage.prompt_tokens - usage.cached_prompt_tokens)
        return self._plan(self.cost_model.cost_usage(usage))

    def verify(self, prompt_tokens: int, lengths: Sequence[int]) -> float:
        """A verifier pass over each sample (0 without a verifier cost model)."""
        if self.verifier is None or not len(lengths) or self.unit == "samples":
            return 0.0
        if self.unit == "tokens":
            return float(sum(prompt_tokens + x for x in lengths))
        return sum(self._plan(self.verifier.cost_request(int(prompt_tokens + x), [])) for x in lengths)

    def option(self, rule: str, prompt_tokens: int, length: float, k: int, n: int, cached: int | None = None) -> float:
        """Expected cost of taking a problem from its k pilot samples to n under ``rule``: the
        n - k extra samples at the predicted ``length`` in one more request, whose prompt has
        ``cached`` tokens in the prefix cache (default all; a live run passes what the engine
        reported caching for the pilot), plus a verifier pass over all n when the rule reads scores."""
        from tts.budgets.strategy_curves import RULES

        m = max(1, round(length))
        hit = prompt_tokens if cached is None else min(int(cached), prompt_tokens)
        extra = self.request(prompt_tokens, [m] * (n - k), cached=hit) if n > k else 0.0
        return extra + (self.verify(prompt_tokens, [m] * n) if RULES[rule].needs_scores else 0.0)


def make_pricer(unit: str, model: str | None = None, gpu: str = "h100", efficiency: float = 1.0,
                prices: Mapping[str, float] | None = None, verifier_model: str | None = None,
                deployment: Mapping[str, Any] | None = None) -> Pricer:
    """An allocator's :class:`Pricer` in ``unit`` for a tts model name on a named GPU, deployed as
    ``deployment`` says (:meth:`Pricer.for_model`).

    Raises:
        ValueError: Unknown unit, architecture, GPU or price (the message says what to pass).
    """
    if unit in ("tokens", "samples"):
        return Pricer(unit, gpu=gpu, prices=dict(prices or {}))
    return Pricer.for_model(model, gpu, prices, unit=unit, efficiency=efficiency, verifier_model=verifier_model,
                            strict=True, deployment=deployment)
