"""Frozen value types that flow between the layers of tts.

Every arrow in the evaluation flow (benchmark -> strategy -> generator -> solution -> grade) passes
one of these values. They are plain frozen dataclasses so that they are cheap to build in bulk,
hashable where useful, and serialisable with :func:`to_jsonable`.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import reduce
from itertools import chain
from typing import Any, overload


@dataclass(frozen=True, slots=True)
class Problem:
    """One question with a checkable answer.

    Args:
        id: Stable identifier, unique within its benchmark (used for resume and joins).
        question: The text shown to the model.
        answer: The gold answer as a string, or None when unknown (serving time).
        metadata: Extra fields from the source (level, subject, ...); never read by strategies.
    """

    id: str
    question: str
    answer: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True, slots=True)
class RequestShape:
    """The token shape of one generation request: what the cost model needs to price it.

    Args:
        prompt_tokens: Tokens in the prompt (including any continued partial answer).
        cached_prompt_tokens: Of those, tokens served from the prefix cache.
        completion_tokens: Generated tokens of each of the request's samples (N = len of it).
        batch_sequences: Sequences the engine ran together with this request (all samples of
            all requests of the same engine call; 0 = unknown). Decode steps read the weights once
            for the whole batch, so the cost model shares that read among them.
        model: The model that served the request when it is not the run's policy model (a PRM, a
            judge on another model, a member of a collaboration graph); "" = the policy. The
            ledger prices each request on its own model's architecture.
    """

    prompt_tokens: int
    cached_prompt_tokens: int
    completion_tokens: tuple[int, ...]
    batch_sequences: int = 0
    model: str = ""


@dataclass(frozen=True, slots=True)
class Usage:
    """Compute spent by one or more generator/verifier calls.

    Usages add up with ``+``; ``shapes`` keeps the per-request structure (prompt length, N samples,
    generated lengths) so that the cost model can price FLOPs and memory traffic exactly.
    """

    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    completion_tokens: int = 0
    wall_seconds: float = 0.0
    calls: int = 0
    shapes: tuple[RequestShape, ...] = ()
    reasoning_tokens: int = 0
    """Of ``completion_tokens``, those inside a thinking section (``<think> ... </think>``), as the
    engine's reasoning parser or the end-of-thinking delimiter split them; 0 when the model wrote
    none or the backend cannot tell. The rest of the completion tokens are answer tokens."""

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            cached_prompt_tokens=self.cached_prompt_tokens + other.cached_prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            wall_seconds=self.wall_seconds + other.wall_seconds,
            calls=self.calls + other.calls,
            shapes=self.shapes + other.shapes,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
        )

    @staticmethod
    def total(usages: Sequence[Usage]) -> Usage:
        """Sum of many usages (the empty sum is zero usage): the same as adding them with ``+`` in
        order, but built once. Adding in a loop rebuilds the frozen Usage, and its growing tuple of
        request shapes, once per term: a measurable share of a search step, which sums a usage per
        request."""
        if len(usages) == 1:
            return usages[0]
        return Usage(
            prompt_tokens=sum(u.prompt_tokens for u in usages),
            cached_prompt_tokens=sum(u.cached_prompt_tokens for u in usages),
            completion_tokens=sum(u.completion_tokens for u in usages),
            # a left fold, as ``+`` adds (sum() of floats rounds differently from Python 3.12 on)
            wall_seconds=reduce(operator.add, (u.wall_seconds for u in usages), 0.0),
            calls=sum(u.calls for u in usages),
            shapes=tuple(chain.from_iterable(u.shapes for u in usages)),
            reasoning_tokens=sum(u.reasoning_tokens for u in usages),
        )


@dataclass(frozen=True, slots=True)
class Budget:
    """A per-problem compute budget that a strategy must stay within.

    Args:
        samples: Most samples (or search expansions) the problem may get.
        tokens: Most generated tokens the problem may cost, counted at their worst case.
    """

    samples: int | None = None
    tokens: int | None = None

    def __post_init__(self) -> None:
        for name in ("samples", "tokens"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"Budget.{name} must be at least 1 (or None for no limit), got {value}")


@dataclass(frozen=True, slots=True)
class Sample:
    """One generated completion.

    Args:
        text: The generated text.
        answer: The answer extracted from it, or None when none could be found.
        completion_tokens: Number of generated tokens.
        mean_logprob: Mean token log-probability, when the backend returned logprobs.
        finish_reason: "stop", "length", ... as reported by the backend.
        tool_calls: The tool calls the completion makes, as OpenAI ``tool_calls`` entries
            (``{"id", "type", "function": {"name", "arguments"}}``); empty when it makes none. The
            sample's ``answer`` is then the canonical JSON list of the calls.
    """

    text: str
    answer: str | None = None
    completion_tokens: int = 0
    mean_logprob: float | None = None
    finish_reason: str | None = None
    tool_calls: tuple[dict[str, Any], ...] = ()

    @property
    def truncated(self) -> bool:
        """Whether ``max_tokens`` cut the completion (``finish_reason == "length"``): a reply built
        from it says so (``finish_reason: "length"``), and it holds no tool call."""
        return self.finish_reason == "length"


@dataclass(frozen=True, slots=True)
class Trace:
    """What a strategy did to reach its answer, kept for inspection and re-analysis.

    Args:
        strategy: Registry name of the strategy.
        samples: All samples drawn, in generation order.
        scores: One selection score per sample (verifier score, mean logprob, ...), if any.
        votes: Answer -> (weighted) vote, for voting strategies.
        selected: Index into ``samples`` of the chosen one, if a single sample was chosen.
        tree: Search strategies: every node of the search tree as a JSON-ready dict (``id``,
            ``parent``, ``depth``, ``text``, ``score``, ``kept``, ...), for ``tts show``: a tuple,
            or (step-wise searches) :class:`LazyRecords`, built when first read.
        events: Counts of things that went wrong without ending the run (verifier errors,
            invalid scores, empty steps, forced answers), by name.
        notes: Decisions a strategy wants on record, JSON-ready (``auto``: the strategy chosen
            for the problem and why: difficulty bin, expected accuracy, gain per unit cost).
    """

    strategy: str
    samples: tuple[Sample, ...] = ()
    scores: tuple[float, ...] = ()
    votes: dict[str, float] = field(default_factory=dict, hash=False, compare=False)
    selected: int | None = None
    tree: Sequence[dict[str, Any]] = field(default=(), hash=False, compare=False)
    events: dict[str, int] = field(default_factory=dict, hash=False, compare=False)
    notes: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True, slots=True)
class Solution:
    """A strategy's final output for one problem.

    Args:
        problem_id: The problem's id.
        answer: The chosen answer, None when no sample yielded one.
        confidence: Share of the vote (or normalised score) behind ``answer``, in [0, 1].
        usage: All compute spent on the problem, verifier calls included.
        trace: The samples, scores and votes behind the answer.
    """

    problem_id: str
    answer: str | None
    confidence: float
    usage: Usage
    trace: Trace


class LazyRecords(Sequence[dict[str, Any]]):
    """A tuple of JSON-ready records (dicts) built when first read, for traces that are often not read.

    A step-wise search of 64 problems at n = 16 has 8,192 nodes, and one dict per node cost about an
    eighth of its orchestration (``benchmarks/search_batching.py``); a server's reply or a
    ``tts.solve`` call never reads them. ``tts eval`` writes them out, so there they are built all
    the same (by :func:`to_jsonable`). Reads like a tuple (length, index, slice, iteration,
    equality with a tuple); pickles and copies as the plain tuple.

    Args:
        build: Returns the records; called at most once (then dropped, with what it held).
        length: How many records ``build`` will return (``len`` and truth need no build).
    """

    __slots__ = ("_build", "_length", "_records")

    def __init__(self, build: Callable[[], tuple[dict[str, Any], ...]], length: int) -> None:
        self._build: Callable[[], tuple[dict[str, Any], ...]] | None = build
        self._length = length
        self._records: tuple[dict[str, Any], ...] | None = None

    @property
    def records(self) -> tuple[dict[str, Any], ...]:
        """The records, built on the first read."""
        if self._records is None:
            assert self._build is not None
            records = tuple(self._build())
            if len(records) != self._length:
                raise RuntimeError(f"LazyRecords: the builder returned {len(records)} records, "
                                   f"{self._length} were announced")
            self._records, self._build = records, None
        return self._records

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[dict[str, Any], ...]: ...
    def __getitem__(self, index: int | slice) -> dict[str, Any] | tuple[dict[str, Any], ...]:
        return self.records[index]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.records)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LazyRecords):
            return self.records == other.records
        return isinstance(other, tuple) and self.records == other

    __hash__ = None  # type: ignore[assignment]  # records are dicts: unhashable, as the tuple would be

    def __repr__(self) -> str:
        return f"LazyRecords({self._length} records{'' if self._records is not None else ', not built'})"

    def __reduce__(self) -> tuple[type, tuple[tuple[dict[str, Any], ...]]]:
        return tuple, (self.records,)


def to_jsonable(value: Any) -> Any:
    """Turn nested tts values (dataclasses, tuples) into JSON-ready dicts and lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, LazyRecords)):
        return [to_jsonable(v) for v in value]
    return value
