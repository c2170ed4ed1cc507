"""Budgets an agent states in tokens, eFLOPs, GPU-seconds or dollars, and what a solve cost in each.

Strategies honour one budget currency: generated tokens at their worst case
(:class:`tts.types.Budget`). A budget in another unit is turned into that currency with the cost
model before the solve runs: the allowance is the largest number of worst-case samples (each
``max_tokens`` long, sharing one prompt) whose predicted cost on the session's GPU fits the
budget, times ``max_tokens``. The prediction prices samples as if they ran alone (no sharing of
weight reads with other requests), so it errs on the side of spending less than allowed. After the
solve, :meth:`Pricer.cost` prices what was really spent, in every unit.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tts.types import Usage

logger = logging.getLogger(__name__)

UNITS = ("tokens", "eflops", "gpu_seconds", "dollars")
"""The units a budget may be given in."""

_FORMS = ("a number of tokens, {'dollars': 0.01}, {'eflops': 1e15}, {'gpu_seconds': 2}, "
          "{'tokens': 4000} or {'amount': 0.01, 'unit': 'dollars'}")


class BudgetError(ValueError):
    """A budget that cannot be used; the message says what to change."""


@dataclass(frozen=True, slots=True)
class SolveBudget:
    """An amount of compute in one unit (``tokens``, ``eflops``, ``gpu_seconds`` or ``dollars``)."""

    amount: float
    unit: str = "tokens"

    def __post_init__(self) -> None:
        if self.unit not in UNITS:
            raise BudgetError(f"budget unit {self.unit!r} is unknown; use one of {', '.join(UNITS)}")
        if isinstance(self.amount, bool) or not isinstance(self.amount, (int, float)) \
                or not math.isfinite(self.amount) or self.amount <= 0:
            raise BudgetError(f"a budget must be a finite number above 0, got {self.amount!r} {self.unit}")

    @classmethod
    def parse(cls, value: Any) -> SolveBudget | None:
        """A budget from what an agent passes: a number (tokens), ``{"dollars": 0.01}``,
        ``{"amount": 0.01, "unit": "dollars"}``, ``"0.01 dollars"``, or a SolveBudget. None: no budget.

        Raises:
            BudgetError: Anything else; the message lists the accepted forms.
        """
        if value is None or isinstance(value, SolveBudget):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return cls(value, "tokens")
        if isinstance(value, str):
            parts = value.split()
            try:
                amount = float(parts[0]) if parts else math.nan
            except ValueError:
                amount = math.nan
            if 1 <= len(parts) <= 2 and not math.isnan(amount):
                return cls(amount, parts[1] if len(parts) == 2 else "tokens")
        if isinstance(value, Mapping):
            if set(value) == {"amount", "unit"} or set(value) == {"amount"}:
                return cls(value["amount"], str(value.get("unit", "tokens")))
            if len(value) == 1:
                (unit, amount), = value.items()
                return cls(amount, str(unit))
        raise BudgetError(f"cannot read a budget from {value!r}; give {_FORMS}")

    def __str__(self) -> str:
        return f"{self.amount:g} {self.unit}"


class Pricer:
    """Prices usage on one model architecture and GPU, and turns budgets into token allowances.

    Args:
        model: The model whose architecture prices the work (an alias such as ``smollm2-135m``, a
            hub id or a config.json); None: only tokens are counted.
        gpu: The GPU that prices eFLOPs, seconds and dollars (``h100``, ``l40s``, ...).
        prices: Overrides of the default dollars per GPU-hour.
    """

    def __init__(self, model: str | None, gpu: str = "h100", prices: Mapping[str, float] | None = None) -> None:
        self.model = model
        self.gpu = gpu
        self.prices = dict(prices or {})
        self.cost_model: Any = None
        self.why_unpriced = "no model to price with was given"
        if model:
            try:
                from tts.cost.ledger import cost_model_for

                self.cost_model = cost_model_for(model, gpu)
            except (ValueError, OSError) as exc:
                self.why_unpriced = f"model {model!r} on {gpu!r} cannot be priced: {exc}"
                logger.info("%s", self.why_unpriced)

    def _dollars(self, seconds: float) -> float | None:
        from tts.cost.prices import PriceError, dollars

        try:
            return dollars(seconds, self.gpu, self.prices)
        except PriceError:
            return None

    def cost(self, usage: Usage) -> dict[str, Any]:
        """What ``usage`` cost: tokens always; eFLOPs, GPU-seconds and dollars when priced."""
        out: dict[str, Any] = {"tokens": usage.total_tokens, "prompt_tokens": usage.prompt_tokens,
                               "completion_tokens": usage.completion_tokens, "calls": usage.calls,
                               "wall_seconds": round(usage.wall_seconds, 6)}
        if self.cost_model is not None:
            from tts.cost.ledger import price_usages

            cost = price_usages([("x", usage)], self.cost_model)["x"].cost if usage.shapes else None
            eflops = cost.eflops if cost else 0.0
            seconds = cost.seconds if cost else 0.0
            out.update(eflops=eflops, gpu_seconds=seconds, dollars=self._dollars(seconds), gpu=self.gpu,
                       priced_as=self.model)
        return out

    def _unit_cost(self, prompt_tokens: int, samples: int, max_tokens: int, unit: str) -> float:
        cost = self.cost_model.cost_request(prompt_tokens, [max_tokens] * samples)
        if unit == "eflops":
            return float(cost.eflops)
        if unit == "gpu_seconds":
            return float(cost.seconds)
        usd = self._dollars(cost.seconds)
        if usd is None:
            raise BudgetError(f"no dollar price for GPU {self.gpu!r}; give the session prices "
                              f"({{'{self.gpu}': USD_PER_HOUR}}) or a budget in gpu_seconds")
        return usd

    def allowance(self, budget: SolveBudget, prompt_tokens: int, max_tokens: int) -> int:
        """Generated tokens (worst case) that ``budget`` pays for.

        Raises:
            BudgetError: The unit needs a cost model the session does not have, or the budget
                does not pay for one sample of ``max_tokens``.
        """
        if budget.unit == "tokens":
            if budget.amount < max_tokens:
                raise BudgetError(f"a budget of {budget} does not cover one sample of up to {max_tokens} tokens; "
                                  "raise the budget or lower max_tokens")
            return int(budget.amount)
        if self.cost_model is None:
            raise BudgetError(f"a budget in {budget.unit} needs a cost model, but {self.why_unpriced}; "
                              "give a budget in tokens, or open the session with price_as=<model alias or config.json>")
        one = self._unit_cost(prompt_tokens, 1, max_tokens, budget.unit)
        if one > budget.amount:
            raise BudgetError(f"a budget of {budget} does not cover one sample of up to {max_tokens} tokens "
                              f"({one:.3g} {budget.unit} for {self.model} on {self.gpu}); raise the budget "
                              "or lower max_tokens")
        lo, hi = 1, 2
        while hi <= 65536 and self._unit_cost(prompt_tokens, hi, max_tokens, budget.unit) <= budget.amount:
            lo, hi = hi, hi * 2
        while hi - lo > 1:  # largest sample count whose cost fits
            mid = (lo + hi) // 2
            if self._unit_cost(prompt_tokens, mid, max_tokens, budget.unit) <= budget.amount:
                lo = mid
            else:
                hi = mid
        return lo * max_tokens
