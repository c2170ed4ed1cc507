"""The Strategy contract, and the shared machinery of sample-then-aggregate strategies.

Every strategy is one class with one contract, :meth:`Strategy.solve`: problems (and optional
per-problem budgets) in, one Solution per problem out, in order. The runner relies on nothing
else, so a strategy that makes several dependent engine calls per problem (search, revision, a
collaboration graph) runs through ``tts eval`` without runner changes.

One capability is optional: strategies that aggregate i.i.d. samples (best-of-N,
self-consistency, weighted vote) can *share one draw*. :meth:`Strategy.shares_draw_with` says
whether two strategy objects could be served by the same samples, and
:meth:`Strategy.solve_together` then draws max(n) samples once and lets each config aggregate the
first n of them (the first n of N i.i.d. samples are distributed as n samples). A ladder of n is
thus evaluated at the cost of its largest member, and each member is still *priced* as if it had
run alone (see :func:`prefix_usage`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

from tts.answers import answer_keys, extract_answer
from tts.answers.kinds import call_key, is_free_text
from tts.backends.base import (
    Completion,
    GenerationRequest,
    GenerationResult,
    Generator,
    Message,
    derive_seed,
)
from tts.backends.chat import tools_json
from tts.backends.tool_calls import MALFORMED, calls_answer, reply_tool_calls
from tts.config import SamplingConfig, SamplingStrategyConfig, StopConfig, StrategyConfigBase
from tts.search.repeats import answered_calls, choose_past_repeats
from tts.search.stopping import Judge, StopRecord, VoteStop, draw_until_settled
from tts.types import Budget, RequestShape, Sample, Solution, Usage
from tts.verifiers.base import (
    Verifier,
    VerifierScore,
    VerifyItem,
    build_verifier,
    clean_score,
    score_or_fallback,
)

logger = logging.getLogger(__name__)

STEP_SEPARATOR = "\n\n"
"""What ends one step of a solution: a blank line, as in Snell et al. 2024 and search-and-learn
(whose PRMs replace it by their step tag). The step-wise search space stops each step at it, and
:func:`split_steps` cuts whole solutions at it, so both hand a verifier the same steps."""

PromptFn = Callable[[Any], tuple[Message, ...]]
ExtractFn = Callable[[str], "str | None"]


class StrategyInputError(ValueError):
    """A strategy cannot work with what it was given (its message says what to change)."""


class MissingLogprobsError(StrategyInputError):
    """A strategy that selects or weights by token log-probabilities got samples without them."""


class BudgetUse(StrEnum):
    """How a strategy takes the budget of a solve (``tts.solve``, a Session, ``tts serve``, ``tts mcp``).

    Every strategy class declares one as ``budget_use``; the session reads it and never the
    strategy's name (:func:`budget_refusal`). A budget reaches a strategy in one of two forms: a
    per-problem :class:`~tts.types.Budget` of generated tokens (the first two), or the
    :class:`~tts.budgets.pricing.ComputeBudget` itself (``PRICES_ITSELF``).
    """

    WHOLE_SAMPLES = "whole_samples"
    """It draws ``config.n`` whole samples: it gets the budget's token allowance per problem and
    draws :meth:`Strategy.samples_within` of it (:meth:`Strategy.samples_for`), so the n a budget
    lets it draw is known before it runs and the label says so (``self_consistency@4 of 16: budget``)."""
    SPENDS_ITSELF = "spends_itself"
    """It plans its own spending within the per-problem token allowance (a search, revision), or
    refuses an allowance below its worst case before generating; :meth:`Strategy.n_within` says
    the n it runs, when it knows it beforehand."""
    PRICES_ITSELF = "prices_itself"
    """It prices its own plan in the budget's unit (``auto``): its config's ``budget`` and
    ``budget_unit`` get the budget, unless the caller set them, and no token allowance is made."""
    REFUSES = "refuses"
    """It runs a fixed amount of work (a collaboration graph): a solve with a budget is refused."""


class Strategy(ABC):
    """Turns problems into Solutions using a generator. Never grades, never writes files.

    Args:
        config: The strategy's config (an instance of ``config_class``); never mutated.
        generator: The backend.
        prompt: Problem -> chat messages (the benchmark's template).
        sampling: Temperature, top-p, max tokens of each generation.
        extract: Text -> answer (default: math-verify, then regex rules).
        seed: The run seed; each request's seed is derived from it (:func:`derive_seed`).

    Class attributes a strategy declares:
        name: Its registry name.
        config_class: Its pydantic config (``kind: Literal[name]`` plus knobs).
        pool_rule: How a sample-pool replay evaluates it without an engine: ``"vote"``
            (majority over the prefix), ``"best_of_n"`` (highest pool score),
            ``"weighted_vote"`` (a vote weighted by pool scores), or None (not replayable
            from a pool: it does more than aggregate independent samples).
    """

    name: ClassVar[str]
    config_class: ClassVar[type[StrategyConfigBase]]
    pool_rule: ClassVar[str | None] = None
    takes_tools: ClassVar[bool] = False
    """Whether it shows the model a problem's tools (``metadata["tools"]``) and answers with the
    calls the samples make; a strategy that does not is refused tools rather than dropping them
    (:func:`tools_refusal`, the one rule of ``tts.solve``, a Session, ``tts serve`` and ``tts mcp``)."""
    budget_use: ClassVar[BudgetUse | None] = None
    """How it takes a solve's budget (:class:`BudgetUse`). None, a plugin that declares nothing:
    any budget is refused with a line naming this attribute (:func:`budget_refusal`)."""

    def __init__(
        self,
        config: Any,
        generator: Generator,
        prompt: PromptFn,
        sampling: SamplingConfig | None = None,
        extract: ExtractFn = extract_answer,
        seed: int = 0,
    ) -> None:
        if not isinstance(config, self.config_class):
            raise TypeError(f"{type(self).__name__} needs a {self.config_class.__name__}, got {type(config).__name__}")
        self.config = config
        self.generator = generator
        self.prompt = prompt
        self.sampling = sampling or SamplingConfig()
        self.extract = extract
        self.seed = seed
        use = self.logprobs_use()
        none = getattr(generator, "logprobs_unavailable", None)
        if use is not None and isinstance(none, str):
            raise MissingLogprobsError(
                f"{getattr(self, 'name', type(self).__name__)} {use}, but {none}; use self_consistency (or a verifier "
                "that does not read them), or a model whose provider returns logprobs")

    def logprobs_use(self) -> str | None:
        """How this strategy's answers depend on token log-probabilities ("weighs traces by ..."), or
        None when they do not. A backend that knows in advance that it returns none says why in a
        ``logprobs_unavailable`` attribute (a hosted provider through LiteLLM); such a strategy is
        then refused when it is built, before any request, instead of after its samples were paid
        for (a backend that cannot tell in advance gets :func:`require_logprobs`'s refusal)."""
        return None

    @abstractmethod
    def solve(self, problems: Sequence[Any], budgets: Sequence[Budget | None] | None = None) -> list[Solution]:
        """Solve every problem; one Solution per problem, in order.

        Args:
            problems: The problems.
            budgets: Optional per-problem budgets (same length as ``problems``); a strategy
                must stay within each one, or raise :class:`StrategyInputError` for a budget
                kind it cannot honour.
        """

    def vote(self, samples: Sequence[Sample], weights: Sequence[float] | None = None,
             ) -> tuple[str | None, float, dict[str, float], int | None]:
        """:func:`vote` with this strategy's answer kind: free text (:data:`tts.answers.kinds.TEXT`
        extraction) is selected by minimum Bayes risk, tool calls and other answers are counted
        (under the extraction's own ``answer_keys`` when it has them: programs, :mod:`tts.answers.code`)."""
        extract = getattr(self, "extract", None)
        return vote(samples, weights, free_text=is_free_text(extract), keys=getattr(extract, "answer_keys", None))

    def shares_draw_with(self, other: Strategy) -> bool:
        """Whether ``other`` can be served from the same draw of samples (default: no)."""
        return False

    def close(self) -> None:
        """Release what the strategy built for itself (a verifier's engine); the generator is the caller's."""

    @classmethod
    def solve_together(cls, strategies: Sequence[Strategy], problems: Sequence[Any]) -> list[list[Solution]]:
        """Solutions of several strategies that share a draw; one list per strategy.

        The default solves each alone; sampling strategies override it to draw once.
        """
        return [s.solve(problems) for s in strategies]

    def samples_within(self, budget: Budget | None) -> int:
        """The n this config may draw under ``budget``: ``samples`` caps it, ``tokens`` caps it at
        the samples whose worst case (``max_tokens`` each) fits. Shared by every strategy that draws
        ``config.n`` whole samples (sampling, DeepConf, certainty probing)."""
        n = self.config.n
        if budget is None:
            return n
        worst = self.sample_worst_case_tokens()
        if budget.samples is not None:
            n = min(n, budget.samples)
        if budget.tokens is not None:
            n = min(n, budget.tokens // worst)
        if n < 1:
            raise StrategyInputError(
                f"{self.name}: a budget of {budget} does not cover one sample of up to "
                f"{worst} tokens; raise the budget or lower max_tokens.")
        return n

    def n_within(self, budget: Budget) -> int | None:
        """The n this strategy runs under ``budget``, as a solve's budget record reports it
        (``n_drawn``): :meth:`samples_within` for one that draws whole samples; None for one that
        decides its spending as it goes (a search that runs as configured says its n).

        Raises:
            StrategyInputError: The budget does not cover one sample.
        """
        return self.samples_within(budget) if self.budget_use == BudgetUse.WHOLE_SAMPLES else None

    def samples_for(self, problems: Sequence[Any], budgets: Sequence[Budget | None] | None) -> list[int]:
        """The n of each problem under its budget (:meth:`samples_within`; the config's n without budgets).

        Raises:
            StrategyInputError: Not one budget per problem, or a budget below one sample.
        """
        if budgets is not None and len(budgets) != len(problems):
            raise StrategyInputError(f"got {len(budgets)} budgets for {len(problems)} problems; give one per problem")
        return [self.samples_within(b) for b in (budgets or [None] * len(problems))]

    def sample_worst_case_tokens(self) -> int:
        """Most generated tokens one sample can cost, everything it brings included (a strategy
        whose samples carry extra generation, such as certainty probing's probes, says so), so
        that :meth:`samples_within` keeps a token budget."""
        return self.sampling.max_tokens


def to_sample(c: Completion, extract: ExtractFn) -> Sample:
    """A backend completion with its answer: the canonical list of its tool calls when it makes
    some (:func:`tts.backends.tool_calls.calls_answer`), none when it attempted a call that is
    malformed, else the answer ``extract`` reads in its text."""
    if c.tool_calls:
        return Sample(text=c.text, answer=calls_answer(c.tool_calls), completion_tokens=c.completion_tokens,
                      mean_logprob=c.mean_logprob, finish_reason=c.finish_reason,
                      tool_calls=tuple(t.to_openai() for t in c.tool_calls))
    if c.tool_call_error == MALFORMED:  # an attempted call that failed is no answer, not a text answer
        return Sample(text=c.text, answer=None, completion_tokens=c.completion_tokens, mean_logprob=c.mean_logprob,
                      finish_reason=c.finish_reason)
    return Sample(
        text=c.text,
        answer=extract(c.text),
        completion_tokens=c.completion_tokens,
        mean_logprob=c.mean_logprob,
        finish_reason=c.finish_reason,
    )


def with_tool_calls(requests: Sequence[GenerationRequest], results: list[GenerationResult]) -> list[GenerationResult]:
    """Results whose completions to requests with tools all carry their checked calls: a generator
    that does not read calls itself (``Completion.tool_calls`` None: a custom generator) has them read
    by tts's lenient reader here, so that every strategy sees the calls of every backend."""
    out = []
    for req, result in zip(requests, results, strict=True):
        if req.tools is None or all(c.tool_calls is not None for c in result.completions):
            out.append(result)
            continue
        out.append(dataclasses.replace(result, completions=tuple(completion_calls(req, c) for c in result.completions)))
    return out


def completion_calls(request: GenerationRequest, c: Completion) -> Completion:
    """One completion as :func:`with_tool_calls` makes it: its calls read by tts's lenient reader
    when the request offered tools and the generator did not read them."""
    if request.tools is None or c.tool_calls is not None:
        return c
    calls, why = reply_tool_calls(c.text, request.tools, finish_reason=c.finish_reason)
    return dataclasses.replace(c, tool_calls=calls, tool_call_error=why)


def problem_tools(problem: Any) -> str | None:
    """The tools a problem offers the model (``metadata["tools"]``, OpenAI's format) as a request's
    JSON text; None when it offers none."""
    meta = getattr(problem, "metadata", None) or {}
    return tools_json(meta.get("tools")) if isinstance(meta, dict) else None


def problem_tool_choice(problem: Any) -> str | None:
    """The problem's ``metadata["tool_choice"]`` as JSON text, when it offers tools and sets one."""
    meta = getattr(problem, "metadata", None) or {}
    choice = meta.get("tool_choice") if isinstance(meta, dict) and meta.get("tools") else None
    return None if choice is None else json.dumps(choice)


def takes_tools(kind: str) -> bool:
    """Whether the registered strategy ``kind`` shows the model tools and answers with their calls
    (its class says ``takes_tools``: ``tool_vote`` and the sampling strategies)."""
    from tts.registry import STRATEGIES

    return bool(getattr(STRATEGIES.load(kind), "takes_tools", False))


def tool_strategies(allowed: Callable[[str], bool] | None = None) -> list[str]:
    """The registered strategies that take tools (:func:`takes_tools`), those ``allowed`` only when given."""
    from tts.registry import STRATEGIES

    return [k for k in STRATEGIES.names() if (allowed is None or allowed(k)) and takes_tools(k)]


def tools_refusal(kind: str, allowed: Callable[[str], bool] | None = None) -> str | None:
    """Why a solve that offers tools cannot run strategy ``kind``: one line naming it and the
    strategies that take tools (those ``allowed``); None when ``kind`` takes them. Every entry
    point (``tts.solve``, a Session, ``tts serve``, ``tts mcp``) refuses with it rather than run a
    strategy that would never show the model the tools (a step-wise search, revision, a graph)."""
    if takes_tools(kind):
        return None
    usable = ", ".join(tool_strategies(allowed)) or "none is offered here"
    return (f"strategy {kind} cannot show the model tools, so it would answer without them; use one that "
            f"can ({usable}) or leave the tools out")


def budget_use(kind: str) -> BudgetUse | None:
    """How the registered strategy ``kind`` takes a budget (its class's ``budget_use``; a plugin
    may declare the value as text, ``"whole_samples"``); None when it declares nothing.

    Raises:
        StrategyInputError: It declares a value that is not a :class:`BudgetUse`.
    """
    from tts.registry import STRATEGIES

    declared = getattr(STRATEGIES.load(kind), "budget_use", None)
    try:
        return None if declared is None else BudgetUse(declared)
    except ValueError:
        raise StrategyInputError(f"strategy {kind} declares budget_use={declared!r}; declare one of "
                                 f"{', '.join(u.value for u in BudgetUse)} (tts.search.base.BudgetUse)") from None


def budgeted_strategies() -> list[str]:
    """The registered strategies that take a budget (those whose class can be imported here)."""
    from tts.registry import STRATEGIES

    out = []
    for kind in STRATEGIES.names():
        try:
            use = budget_use(kind)
        except Exception:  # noqa: BLE001 - a plugin that cannot be imported here takes nothing
            continue
        if use is not None and use is not BudgetUse.REFUSES:
            out.append(kind)
    return out


def budget_refusal(kind: str, budget: object) -> str | None:
    """Why a solve with ``budget`` cannot run strategy ``kind``: one line saying what to change;
    None when its class takes a budget (:class:`BudgetUse`). The session asks before anything runs."""
    use = budget_use(kind)
    if use is None:
        return (f"strategy {kind} declares no budget_use, so a budget of {budget} cannot hold it; declare how it "
                "takes one on its class (budget_use = BudgetUse.WHOLE_SAMPLES, SPENDS_ITSELF or REFUSES, "
                "tts.search.base) or leave the budget out")
    if use is BudgetUse.REFUSES:
        return (f"{kind} runs a fixed amount of work and cannot be capped by a budget of {budget}; leave the budget "
                f"out (lower n instead), or use a strategy that takes one: {', '.join(budgeted_strategies())}")
    return None


def split_steps(text: str, separator: str = STEP_SEPARATOR) -> tuple[str, ...]:
    """The steps of a whole solution: ``text`` cut at ``separator``, each piece stripped, empty ones
    dropped; the steps the step-wise search space would have made of the same text.

    Example:
        >>> split_steps("2 + 3 = 5.\\n\\nThen 5 * 2 = 10.\\n\\n\\n\\nSo \\\\boxed{10}.")
        ('2 + 3 = 5.', 'Then 5 * 2 = 10.', 'So \\\\boxed{10}.')
    """
    return tuple(piece for piece in (part.strip() for part in text.split(separator)) if piece)


def scores_steps(verifier: object) -> bool:
    """Whether a verifier scores each step of a solution (a PRM, the arithmetic tool, a per-step
    judge): it declares ``step_verifier = True``. Verifiers that read a whole answer (an ORM, a
    whole-solution judge, a logprob or self-certainty scorer) do not declare it."""
    return bool(getattr(verifier, "step_verifier", False))


def solution_item(problem: Any, text: str, verifier: object, *, mean_logprob: float | None = None,
                  token_top_logprobs: tuple[tuple[float, ...], ...] | None = None) -> VerifyItem:
    """The VerifyItem of one whole (finished) solution, as ``verifier`` expects it.

    A step verifier (:func:`scores_steps`) gets the solution cut into steps by :func:`split_steps`,
    so that a PRM puts its step tag after every step and the verifier's ``aggregation`` decides, as
    in search-and-learn's best-of-N; the step logprobs are then unknown (a sample carries only its
    mean over all tokens) and left empty. Any other verifier gets the text as one step with its
    mean logprob, as before. Every strategy that scores whole solutions builds its items here.
    """
    if scores_steps(verifier):
        return VerifyItem(problem, split_steps(text), finished=True, token_top_logprobs=token_top_logprobs)
    return VerifyItem(problem, (text,), finished=True, logprobs=(mean_logprob,), token_top_logprobs=token_top_logprobs)


def prefix_usage(result_usage: Usage, samples: Sequence[Sample], total_samples: int) -> Usage:
    """Usage of the first ``len(samples)`` samples of a request that drew ``total_samples``.

    Priced as if the prefix had been drawn alone: the prompt is paid once whatever n is,
    generated tokens are those of the prefix, wall time is shared in proportion to generated
    tokens, and the engine call's concurrency (``batch_sequences``, which shares each decode
    step's weight read) shrinks in proportion to n. Inheriting the large draw's concurrency would
    price n = 1 out of a 256-sequence draw 1.8x (SmolLM2) to 3.9x (Qwen3-8B) too cheap in eFLOPs.
    """
    if len(samples) == total_samples:
        return result_usage
    shape = result_usage.shapes[0] if result_usage.shapes else RequestShape(0, 0, ())
    lengths = tuple(s.completion_tokens for s in samples)
    all_tokens = max(result_usage.completion_tokens, 1)
    batch = shape.batch_sequences
    if batch:
        # Every request of the shared call drew total_samples; alone, each would draw len(samples).
        batch = max(len(samples), round(batch * len(samples) / max(total_samples, 1)))
    return Usage(
        prompt_tokens=result_usage.prompt_tokens,
        cached_prompt_tokens=result_usage.cached_prompt_tokens,
        completion_tokens=sum(lengths),
        wall_seconds=result_usage.wall_seconds * sum(lengths) / all_tokens,
        calls=result_usage.calls,
        shapes=(RequestShape(shape.prompt_tokens, shape.cached_prompt_tokens, lengths, batch),),
    )



class VerifierStrategy(Strategy):
    """A strategy whose config names a verifier (``config.verifier``): built on first use, closed
    with the strategy unless the caller passed a ready one (tests, notebooks).

    Args:
        verifier: A ready verifier instead of building ``config.verifier`` (then not closed here).
        (the rest as :class:`Strategy`)
    """

    def __init__(self, config: Any, generator: Generator, prompt: PromptFn, sampling: SamplingConfig | None = None,
                 extract: ExtractFn = extract_answer, seed: int = 0, verifier: Verifier | None = None) -> None:
        super().__init__(config, generator, prompt, sampling, extract, seed)
        self._verifier = verifier
        self._owns_verifier = verifier is None

    @property
    def verifier(self) -> Verifier | None:
        """The verifier, built from the config on first use (None when the config names none)."""
        if self._verifier is None and getattr(self.config, "verifier", None) is not None:
            self._verifier = build_verifier(self.config.verifier, self.generator)
        return self._verifier

    def close(self) -> None:
        """Release the verifier this strategy built (a PRM or judge may own an engine)."""
        if self._owns_verifier and self._verifier is not None:
            self._verifier.close()
            self._verifier = None


class SamplingStrategy(VerifierStrategy):
    """Sample ``config.n`` completions per problem in one batched call, then aggregate; a
    verifier the config names (or a ready one passed as ``verifier=``) scores whole samples.

    A per-problem :class:`~tts.types.Budget` lowers n: ``samples`` caps it directly, ``tokens``
    caps it at the samples whose worst case (``max_tokens`` each) fits.
    """

    config_class: ClassVar[type[StrategyConfigBase]] = SamplingStrategyConfig
    needs_logprobs: ClassVar[bool] = False
    takes_tools: ClassVar[bool] = True
    """Its requests show the model a problem's tools, and a reply's calls are its answer (voted)."""
    budget_use: ClassVar[BudgetUse | None] = BudgetUse.WHOLE_SAMPLES
    draw_group: ClassVar[str] = "sampling"
    """Strategies share a draw only within one group: those whose aggregation needs more than a
    problem's id (execution votes run the problem's examples) draw in a ``solve_together`` of their own."""

    def request(self, problem: Any, n: int | None = None, drawn: int = 0) -> GenerationRequest:
        """The generation request for one problem.

        Args:
            problem: The problem.
            n: Samples to draw (default: the config's).
            drawn: Samples of this problem already drawn in this run; the request's seed depends
                on it, so a second round never repeats the first one's samples.
        """
        return GenerationRequest(
            messages=self.prompt(problem),
            n=n or self.config.n,
            temperature=self.sampling.temperature,
            top_p=self.sampling.top_p,
            max_tokens=self.sampling.max_tokens,
            logprobs=self.needs_logprobs,
            top_logprobs=self.top_logprobs_needed(),
            seed=derive_seed(self.seed, problem.id, drawn),
            key=problem.id,
            tools=problem_tools(problem),
            tool_choice=problem_tool_choice(problem),
        )

    def logprobs_use(self) -> str | None:
        """A verifier that reads log-probabilities (``reads_logprobs`` on its config), else
        ``needs_logprobs`` (best_of_n and weighted_vote rank by them when no verifier scores)."""
        verifier = getattr(self.config, "verifier", None)
        if verifier is not None:
            reads = getattr(verifier, "reads_logprobs", False)
            return f"scores samples with the {verifier.kind} verifier, which reads token log-probabilities" if reads else None
        return "ranks samples by their token log-probabilities" if self.needs_logprobs else None

    def top_logprobs_needed(self) -> int:
        """Top log-probabilities per token the configured verifier reads (self-certainty: its k), else 0."""
        return int(getattr(getattr(self.config, "verifier", None), "request_top_logprobs", 0) or 0)

    @classmethod
    def planned_requests(cls, n: int, prompt_tokens: int, gen_tokens: int, cached_tokens: int = 0) -> list[RequestShape]:
        """Cost hook: the requests this strategy makes for one problem before it runs (``tts cost``).

        Sampling strategies send one request whose ``n`` samples share the prompt.
        """
        return [RequestShape(prompt_tokens, cached_tokens, (gen_tokens,) * n)]

    def score_samples(self, problems: Sequence[Any], results: Sequence[GenerationResult]) -> list[ScoredDraw | None]:
        """Verifier scores of every sample of every problem, in ONE verifier call (None: no verifier).

        A verifier that raises does not end the run: every sample of the call scores 0 and the
        event is counted in the traces.
        """
        verifier = self.verifier
        if verifier is None:
            return [None] * len(problems)
        items = [solution_item(p, c.text, verifier, mean_logprob=c.mean_logprob, token_top_logprobs=c.token_top_logprobs)
                 for p, r in zip(problems, results, strict=True) for c in r.completions]
        scored, failed = score_or_fallback(verifier, items, VerifierScore((), 0.0), "samples")  # failed: lowest
        events: dict[str, int] = {"verifier_error": 1} if failed else {}
        out: list[ScoredDraw | None] = []
        it = iter(scored)
        for r in results:
            mine = [next(it) for _ in r.completions]
            invalid = sum(v.invalid for v in mine)
            ev = {**events, **({"invalid_score": invalid} if invalid else {})}
            out.append(ScoredDraw(tuple(clean_score(v.score)[0] for v in mine), tuple(v.usage for v in mine), ev))
        return out

    def solve(self, problems: Sequence[Any], budgets: Sequence[Budget | None] | None = None) -> list[Solution]:
        ns = self.samples_for(problems, budgets)
        if stop_of(self) is not None:
            return self.solve_until_settled(problems, ns)
        requests = [self.request(p, n=n) for p, n in zip(problems, ns, strict=True)]
        results = with_tool_calls(requests, self.generator.generate(requests))
        scored = self.score_samples(problems, results)
        return [self.aggregate_result(p.id, r, scored=sc, problem=p)
                for p, r, sc in zip(problems, results, scored, strict=True)]

    def stop_judge(self, problems: Sequence[Any], ns: Sequence[int]) -> Judge:
        """Whether a request's vote is settled: its rule (:class:`~tts.search.stopping.VoteStop`)
        over the samples' vote keys (:func:`vote_keys`, the keys this strategy's vote counts)."""
        rules = [VoteStop(stop_of(self), n) for n in ns]
        if is_free_text(getattr(self, "extract", None)) and not any(problem_tools(p) for p in problems):
            raise StrategyInputError(
                f"{self.name}: a stop counts votes, but these answers are free text (the plain prompt), chosen by "
                "similarity rather than counted, so no vote could settle; ask for answers that can be counted (the "
                "math prompt: tts.prompt \"math\", prompt=\"math\"), or leave the stop out")

        def judge(i: int, completions: Sequence[Completion]) -> str | None:
            try:
                keys = self.sample_keys([to_sample(c, self.extract) for c in completions])
            except StrategyInputError:  # replies in free text beside tool calls: they never settle a vote
                return rules[i].check([None] * len(completions))
            return rules[i].check(keys)

        return judge

    def sample_keys(self, samples: Sequence[Sample]) -> list[str | None]:
        """Each sample's key in this strategy's vote (:meth:`vote`), None where it abstains."""
        extract = getattr(self, "extract", None)
        return vote_keys(samples, is_free_text(extract), getattr(extract, "answer_keys", None))

    def solve_until_settled(self, problems: Sequence[Any], ns: Sequence[int]) -> list[Solution]:
        """Each problem's samples drawn in waves until its vote is settled (``config.stop``,
        :func:`~tts.search.stopping.draw_until_settled`), then aggregated as a whole draw would be;
        the trace's ``notes["stop"]`` says what was drawn, cancelled and why it stopped."""
        draws = draw_until_settled(self.generator, ns, stop_of(self),
                                   lambda i, k, drawn: self.request(problems[i], n=k, drawn=drawn),
                                   self.stop_judge(problems, ns), prepare=completion_calls)
        results = [d.result for d in draws]
        scored = self.settled_scores(problems, results)
        return [with_stop_record(self.aggregate_result(p.id, d.result, scored=sc, problem=p), d.record)
                for p, d, sc in zip(problems, draws, scored, strict=True)]

    def settled_scores(self, problems: Sequence[Any], results: Sequence[GenerationResult]) -> list[ScoredDraw | None]:
        """The verifier scores of the samples a stop kept (:meth:`score_samples`; a strategy whose
        stop already scored them returns those, so no sample is scored, or paid for, twice)."""
        return self.score_samples(problems, results)

    def shares_draw_with(self, other: Strategy) -> bool:
        """Same backend, prompt, sampling, extraction and seed, and neither stops early: the samples
        would be the same."""
        if stop_of(self) is not None or stop_of(other) is not None:
            return False
        return (isinstance(other, SamplingStrategy) and other.draw_group == self.draw_group
                and other.generator is self.generator
                and other.prompt == self.prompt and other.sampling == self.sampling
                and other.extract is self.extract and other.seed == self.seed)

    @classmethod
    def solve_together(cls, strategies: Sequence[Strategy], problems: Sequence[Any]) -> list[list[Solution]]:
        """ONE generator call with max(n) samples per problem; each config aggregates its first n."""
        first = strategies[0]
        if not all(isinstance(s, SamplingStrategy) and first.shares_draw_with(s) for s in strategies):
            return super().solve_together(strategies, problems)
        sampling: list[SamplingStrategy] = list(strategies)  # type: ignore[arg-type]
        n_max = max(s.config.n for s in sampling)
        logprobs = any(s.needs_logprobs for s in sampling)
        top = max(s.top_logprobs_needed() for s in sampling)
        requests = [dataclasses.replace(sampling[0].request(p, n=n_max), logprobs=logprobs, top_logprobs=top)
                    for p in problems]
        results = with_tool_calls(requests, first.generator.generate(requests))
        # One verifier call per distinct verifier config over the whole draw; configs take prefixes.
        scored: dict[str, list[ScoredDraw | None]] = {}
        for s in sampling:
            key = repr(getattr(s.config, "verifier", None))
            if key not in scored:
                scored[key] = s.score_samples(problems, results)
        return [[s.aggregate_result(p.id, r, s.config.n, sc, problem=p)
                 for p, r, sc in zip(problems, results, scored[repr(getattr(s.config, "verifier", None))], strict=True)]
                for s in sampling]

    def aggregate_result(self, problem_id: str, result: GenerationResult, n: int | None = None,
                         scored: ScoredDraw | None = None, problem: Any = None) -> Solution:
        """Aggregate the first ``n`` completions of a result (all when ``n`` is None).

        ``scored`` holds verifier scores of the whole draw; the first ``n`` are used, and their
        scoring usage is added to the solution's. ``problem`` (its conversation) lets replies that
        only repeat an answered tool call be set aside (:func:`tts.search.repeats.choose_past_repeats`).
        """
        n = n or len(result.completions)
        samples = [to_sample(c, self.extract) for c in result.completions[:n]]
        usage = prefix_usage(result.usage, samples, len(result.completions))
        answered = answered_calls(problem) if problem is not None and any(s.tool_calls for s in samples) else set()
        if scored is None:
            return choose_past_repeats(samples, answered, lambda ss: self.aggregate(problem_id, ss, usage))
        usage = usage + Usage.total(scored.usages[:n])
        scores = scored.scores[:n]
        sol = choose_past_repeats(samples, answered, lambda ss: self.aggregate(problem_id, ss, usage, scores))
        if scored.events:
            merged = dict(sol.trace.events)
            for kind, count in scored.events.items():
                merged[kind] = merged.get(kind, 0) + count
            sol = dataclasses.replace(sol, trace=dataclasses.replace(sol.trace, events=merged))
        return sol

    @abstractmethod
    def aggregate(self, problem_id: str, samples: Sequence[Sample], usage: Usage,
                  scores: Sequence[float] | None = None) -> Solution:
        """Choose the answer from the samples (``scores``: verifier scores, when configured)."""


def stop_of(strategy: Strategy) -> StopConfig | None:
    """The strategy's per-request stop (its config's ``stop``), None when it draws all of ``n``."""
    return getattr(strategy.config, "stop", None)


def with_stop_record(solution: Solution, record: StopRecord) -> Solution:
    """``solution`` whose trace notes say what its stop did (``notes["stop"]``)."""
    notes = {**solution.trace.notes, "stop": record.as_note()}
    return dataclasses.replace(solution, trace=dataclasses.replace(solution.trace, notes=notes))


@dataclass(frozen=True, slots=True)
class ScoredDraw:
    """Verifier scores of one problem's draw: a score, a scoring Usage per sample, and events."""

    scores: tuple[float, ...]
    usages: tuple[Usage, ...]
    events: dict[str, int] = field(default_factory=dict)


def require_logprobs(strategy: str, problem_id: str, samples: Sequence[Sample]) -> list[float]:
    """The samples' mean logprobs; refuses when any is missing, instead of picking silently.

    A backend that returns no logprobs would otherwise make best-of-N "the first sample" and
    weighted voting a plain vote, with nothing in the results to show it.

    Raises:
        MissingLogprobsError: Names the problem and how many samples lacked logprobs.
    """
    missing = [i for i, s in enumerate(samples) if s.mean_logprob is None]
    if missing:
        raise MissingLogprobsError(
            f"{strategy} ranks samples by token log-probabilities, but {len(missing)} of {len(samples)} samples "
            f"of problem {problem_id!r} came back without them (first: sample {missing[0]}). Use a backend that "
            "returns logprobs (vLLM does; an OpenAI-compatible server must support `logprobs`), "
            "or use self_consistency.")
    return [float(s.mean_logprob) for s in samples]  # type: ignore[arg-type]


def vote(samples: Sequence[Sample], weights: Sequence[float] | None = None, free_text: bool = False,
         keys: Callable[[Sequence[str | None]], list[str | None]] | None = None,
         ) -> tuple[str | None, float, dict[str, float], int | None]:
    """Weighted plurality vote, each answer compared by its kind (:mod:`tts.answers.kinds`).

    - When at least half of the samples call tools, only the tool-call answers vote, keyed by
      their calls with normalised arguments (:func:`tts.answers.kinds.call_key`); replies in text
      abstain. When fewer do, the replies in text decide and the calls abstain (its_hub's rule: a
      question that needs no tool is not answered by the minority that called one).
    - Replies that only repeat a call the conversation already answered are set aside before this
      vote by the caller (:meth:`SamplingStrategy.aggregate_result`, :mod:`tts.search.repeats`).
    - Free text (``free_text``: the strategy extracts :data:`tts.answers.kinds.TEXT`) is not
      counted but selected by minimum Bayes risk (:func:`select_text`).
    - Otherwise answers that math-verify finds equal vote together, keyed by
      :func:`tts.answers.answer_keys`: ``0.5``, ``\\frac{1}{2}`` and ``$1/2$`` are one answer,
      keyed by the normalised form seen first; or by ``keys`` when given (an answer kind's own
      notion of the same answer: :meth:`tts.answers.code.CodeExtract.answer_keys` for programs).

    Ties are broken deterministically: the answer whose first supporting sample came earliest
    wins. Samples without an answer abstain (their weight still counts in the denominator, so the
    confidence is the share of *all* samples behind the winner).

    Returns:
        (answer as first written, vote share in [0, 1], votes per answer (each shown as its first
        sample wrote it; equal answers are one entry), index of the first sample that carries the
        winning answer).
    """
    weights = list(weights) if weights is not None else [1.0] * len(samples)
    samples, counted = _voters(samples)
    if counted is None and free_text:
        return select_text(samples, weights)
    keys = counted if counted is not None else (keys or answer_keys)([s.answer for s in samples])
    totals: dict[str, float] = {}
    first: dict[str, int] = {}
    for i, (key, w) in enumerate(zip(keys, weights, strict=True)):
        if key is None:
            continue
        totals[key] = totals.get(key, 0.0) + w
        first.setdefault(key, i)
    denom = sum(weights)
    if not totals or denom <= 0:
        return None, 0.0, _as_written(samples, totals, first), None
    best = max(totals, key=lambda k: (totals[k], -first[k]))
    idx = first[best]
    return samples[idx].answer, totals[best] / denom, _as_written(samples, totals, first), idx


def _voters(samples: Sequence[Sample]) -> tuple[Sequence[Sample], list[str | None] | None]:
    """The samples as :func:`vote` counts them, and their keys when tool calls decide: when at least
    half of the samples call tools, the calls' keys (replies in text abstain); else the samples
    with the minority's calls set to abstain (its_hub's rule) and None (the answers' keys decide)."""
    calling = sum(1 for s in samples if s.tool_calls)
    if calling and 2 * calling >= len(samples):
        return samples, [call_key(s.answer) if s.tool_calls and s.answer is not None else None for s in samples]
    if calling:  # a minority calls: the replies in text decide (its_hub's rule), the calls abstain
        samples = [s if not s.tool_calls else dataclasses.replace(s, answer=None) for s in samples]
    return samples, None


def vote_keys(samples: Sequence[Sample], free_text: bool = False,
              keys: Callable[[Sequence[str | None]], list[str | None]] | None = None) -> list[str | None]:
    """Each sample's key in :func:`vote` (None: it abstains): what a per-request stop counts.

    Raises:
        StrategyInputError: Free-text answers, which are chosen by minimum Bayes risk, not counted.
    """
    samples, counted = _voters(samples)
    if counted is not None:
        return counted
    if free_text:
        raise StrategyInputError("a stop rule counts votes, but these answers are free text, chosen by minimum "
                                 "Bayes risk rather than counted; leave the stop out for free-text answers")
    return (keys or answer_keys)([s.answer for s in samples])


def _as_written(samples: Sequence[Sample], totals: dict[str, float], first: dict[str, int]) -> dict[str, float]:
    """The votes per answer as a person reads them: each equivalence key shown as the first sample
    of it wrote the answer ("1/2", not the key "\\frac{1}{2}"; "so 32" with its spaces), in
    the keys' order. The keys match answers; they are not for display."""
    shown: dict[str, float] = {}
    for key, total in totals.items():
        written = samples[first[key]].answer or key
        shown[written] = shown.get(written, 0.0) + total
    return shown


def select_text(samples: Sequence[Sample], weights: Sequence[float] | None = None,
                ) -> tuple[str | None, float, dict[str, float], int | None]:
    """Free-text answers chosen by minimum Bayes risk (:func:`tts.answers.free_text.mbr_select`):
    the answered sample whose text is most similar (chrF) to the others, each other sample weighted
    by its weight (a verifier's score in a weighted vote; all weights 0 or none given: uniform).

    Returns, like :func:`vote`: (the chosen text, its expected similarity to the others in [0, 1],
    that expected similarity per distinct answer, the chosen sample's index).
    """
    from tts.answers.free_text import mbr_select

    answered = [i for i, s in enumerate(samples) if s.answer is not None]
    if not answered:
        return None, 0.0, {}, None
    w = [max(float(weights[i]), 0.0) for i in answered] if weights is not None else None
    if w is not None and not any(w):
        w = None
    choice = mbr_select([samples[i].answer or "" for i in answered], w)
    utilities: dict[str, float] = {}
    for i, u in zip(answered, choice.utilities, strict=True):
        utilities[samples[i].answer or ""] = max(u, utilities.get(samples[i].answer or "", 0.0))
    idx = answered[choice.index]
    return samples[idx].answer, choice.utilities[choice.index], utilities, idx
