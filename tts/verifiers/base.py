"""The Verifier protocol: batched, order-preserving scoring of partial or full solutions.

Like :class:`~tts.backends.base.Generator`, a verifier takes many items at once (every live node
of every problem of one search step) and returns one result per item, in order, with the compute
it spent. A solution is a sequence of steps; process verifiers (PRMs, the arithmetic tool) score
each step, outcome verifiers (ORMs, judges) score the whole. Scores lie in [0, 1], higher is
better; a score that is not a finite number is replaced by 0 and counted (never propagated), so
one broken verifier call cannot decide a search.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from tts.types import Problem, Usage

logger = logging.getLogger(__name__)

Aggregation = Literal["last", "min", "prod", "mean"]
"""How step scores become one solution score (Lightman et al. 2023 use ``prod``/``min``;
Snell et al. 2024 found ``last`` best for their PRM)."""


@dataclass(frozen=True, slots=True)
class VerifyItem:
    """One (problem, partial or full solution) to score.

    Args:
        problem: The problem (its gold answer is never read by a verifier).
        steps: The solution so far, split into steps (no separators).
        finished: Whether the solution is complete (it has reached its final answer).
        logprobs: Mean token logprob of each step, where the generator returned them.
        token_top_logprobs: The top-k log-probabilities of every generated token of the item,
            where the generator returned them (scorers of the token distribution use them:
            self-certainty); None otherwise.
    """

    problem: Problem
    steps: tuple[str, ...]
    finished: bool = False
    logprobs: tuple[float | None, ...] = ()
    token_top_logprobs: tuple[tuple[float, ...], ...] | None = None


class ItemView(Protocol):
    """What a verifier may read of an item: the five attributes of :class:`VerifyItem`.

    :class:`VerifyItem` is the item everyone builds. The step-wise search passes its own states
    (:class:`~tts.search.tree.stepwise.StepState`) instead, which have the same attributes with
    the same meaning: a search step scores thousands of children, and building a VerifyItem for
    each was a tenth of the search's own CPU time and an eighth of the objects it allocates per
    child (which is what makes the garbage collector walk the whole heap). So a verifier reads
    items only through these attributes: no ``isinstance``, ``dataclasses.replace`` or hashing of
    the item itself.
    """

    @property
    def problem(self) -> Problem: ...

    @property
    def steps(self) -> tuple[str, ...]: ...

    @property
    def finished(self) -> bool: ...

    @property
    def logprobs(self) -> tuple[float | None, ...]: ...

    @property
    def token_top_logprobs(self) -> tuple[tuple[float, ...], ...] | None: ...


@dataclass(frozen=True, slots=True)
class VerifierScore:
    """What a verifier says of one item.

    Args:
        step_scores: One score in [0, 1] per step (empty for outcome-only verifiers).
        score: The item's score in [0, 1] (step scores aggregated, or the outcome score).
        usage: Compute this item's scoring cost (a PRM pass is a prefill; a tool costs nothing).
        invalid: Scores that were NaN/inf/out of range and were replaced by 0.
    """

    step_scores: tuple[float, ...]
    score: float
    usage: Usage = Usage()
    invalid: int = 0


@runtime_checkable
class Verifier(Protocol):
    """Anything that scores a batch of items, one result per item, in order."""

    name: str

    def score(self, items: Sequence[ItemView]) -> list[VerifierScore]:
        """Score all items at once (one model call where the verifier has a model); read each
        item only through the attributes of :class:`ItemView` (a VerifyItem, or a search's state)."""
        ...

    def close(self) -> None:
        """Release any engine the verifier owns."""
        ...


def clean_score(value: float) -> tuple[float, int]:
    """``(value, 0)`` for a finite score in [0, 1]; ``(0.0, 1)`` for anything else (counted)."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return 0.0, 1
    if not math.isfinite(v) or v < 0.0 or v > 1.0:
        return 0.0, 1
    return v, 0


def aggregate(step_scores: Sequence[float], how: Aggregation) -> float:
    """One score from step scores; an empty sequence scores 0.5 (no evidence either way)."""
    if not step_scores:
        return 0.5
    if how == "last":
        return float(step_scores[-1])
    if how == "min":
        return float(min(step_scores))
    if how == "prod":
        return float(math.prod(step_scores))
    if how == "mean":
        return float(sum(step_scores) / len(step_scores))
    raise ValueError(f"aggregation must be one of last, min, prod, mean; got {how!r}")


def score_or_fallback(verifier: Verifier, items: Sequence[VerifyItem], fallback: VerifierScore,
                      what: str = "items") -> tuple[list[VerifierScore], bool]:
    """Score ``items`` in ONE verifier call, without letting a broken verifier end the run.

    A verifier that raises, or returns a different number of scores than items, gives every item
    ``fallback``; the second value is then True, so the caller can count a ``verifier_error`` event.
    """
    try:
        scored = list(verifier.score(items))
        if len(scored) != len(items):
            raise RuntimeError(f"it returned {len(scored)} scores for {len(items)} {what}")
        return scored, False
    except Exception as exc:  # any failure of a user's verifier: the run goes on without its evidence
        logger.warning("verifier %s failed on %d %s (%s); each scores %g", getattr(verifier, "name", "?"),
                       len(items), what, exc, fallback.score)
        return [fallback] * len(items), True


def build_verifier(config: object, generator: object) -> Verifier:
    """The verifier a config names, through the registry (``from_config(config, generator)``).

    ``generator`` is the policy's generator: verifiers that judge with the policy model (the
    LLM judge by default) use it; others ignore it.
    """
    from tts import tracing
    from tts.registry import VERIFIERS

    verifier = VERIFIERS.load(config.kind).from_config(config, generator)  # type: ignore[attr-defined]
    return tracing.traced_verifier(verifier, str(config.kind))  # itself while tracing is off


def noise_flips(seed: int, item: VerifyItem, upto: int, rate: float) -> bool:
    """Whether a verifier's seeded noise flips its score of step ``upto`` of ``item``.

    A function of the seed, the problem and the solution up to that step, so a step scored twice
    gets the same score, as from a deterministic model; used by tool verifiers' ``noise`` knob to
    emulate process verifiers of lower quality.
    """
    if rate <= 0.0:
        return False
    key = "\x1f".join((str(seed), item.problem.id, *item.steps[: upto + 1]))
    draw = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little") / 2**64
    return draw < rate
