"""A verifier made of a Python function: a reward you write, scored like any verifier.

The twin of :class:`~tts.backends.function.FunctionGenerator`, and what DSPy calls a
``reward_fn``: a rule you can state in code (a unit test passes, a format is kept, an answer is in
a known set) becomes a verifier for best-of-n, a weighted vote or a step-wise search, with no class
of your own::

    from tts.verifiers.function import FunctionVerifier

    def reward(problem, text):
        return 1.0 if "\\\\boxed{" in text else 0.0

    best = BestOfN(BestOfNConfig(n=8), generator, MATH_PROMPT.render, verifier=FunctionVerifier(reward))

Three forms, by what the function reads:

- ``FunctionVerifier(reward)``: ``reward(problem, text) -> score``, an outcome score of the
  solution's text (its steps joined by a blank line).
- ``FunctionVerifier(reward, per_step=True, aggregation="min")``: ``reward(problem, steps) ->
  one score per step``, as a process reward model gives; the item's score aggregates them, and
  the verifier declares ``step_verifier`` so strategies hand it whole solutions cut into steps.
- ``FunctionVerifier.of_items(reward)``: ``reward(item) -> score``, for a rule that reads more of
  the item (whether it is finished, its logprobs) or a search's own states.

A score is a number in [0, 1]; one that is not (NaN, inf, out of range, not a number) counts as 0
and as one invalid score, as every verifier does. A function that returns a
:class:`~tts.verifiers.base.VerifierScore` decides everything itself (its step scores, usage and
invalid count are passed on unchanged). A function that raises fails the whole ``score`` call, which
the strategies count as a ``verifier_error`` and go on without. The verifier spends no compute
(its usage is zero) unless the function says otherwise in a VerifierScore.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, get_args

from tts.types import Problem
from tts.verifiers.base import Aggregation, ItemView, VerifierScore, aggregate, clean_score

StepReward = Callable[[Problem, tuple[str, ...]], "Sequence[float] | VerifierScore"]
"""``(problem, steps) -> one score per step`` (or a whole :class:`VerifierScore`)."""

TextReward = Callable[[Problem, str], "float | VerifierScore"]
"""``(problem, text) -> score`` (or a whole :class:`VerifierScore`)."""


def _outcome(value: Any) -> VerifierScore:
    if isinstance(value, VerifierScore):
        return value
    score, invalid = clean_score(value)
    return VerifierScore((), score, invalid=invalid)


class FunctionVerifier:
    """A verifier whose scores a function writes (see the module for the three forms).

    Args:
        reward: ``(problem, text) -> score``, or with ``per_step``, ``(problem, steps) -> one score
            per step``; either may return a :class:`VerifierScore` instead.
        per_step: Whether ``reward`` scores each step (a process reward) rather than the whole.
        aggregation: How step scores become the item's score (``last``, ``min``, ``prod``,
            ``mean``); only with ``per_step``.
        name: The name traces and warnings report.

    Attributes:
        calls: The number of items of every ``score`` call, in order (a test asserts that a
            strategy scored everything in one call; a reward that changes with the call reads
            ``len(calls)``, which already counts the call in progress).
    """

    def __init__(self, reward: TextReward | StepReward, *, per_step: bool = False,
                 aggregation: Aggregation = "last", name: str = "function") -> None:
        if not callable(reward):
            raise TypeError(f"FunctionVerifier needs a function of (problem, text); got {type(reward).__name__}")
        if aggregation not in get_args(Aggregation):
            raise ValueError(f"aggregation must be one of {', '.join(get_args(Aggregation))}; got {aggregation!r}")
        if aggregation != "last" and not per_step:
            raise ValueError("aggregation combines step scores: pass per_step=True with it, or leave it out")
        self.name = name
        self.calls: list[int] = []
        self.step_verifier = per_step
        self._reward = reward
        self._aggregation = aggregation
        self._of_items = False

    @classmethod
    def of_items(cls, reward: Callable[[Any], float | VerifierScore], *, per_step: bool = False,
                 name: str = "function") -> FunctionVerifier:
        """A verifier of ``reward(item) -> score``: the function reads the item itself (any
        attribute of :class:`~tts.verifiers.base.ItemView`, or a search space's own states).

        Args:
            reward: ``item -> score`` (a number, or a whole :class:`VerifierScore`).
            per_step: Whether to declare ``step_verifier`` (strategies then pass whole solutions
                cut into steps); the function still returns one score per item.
            name: The name traces and warnings report.
        """
        verifier = cls(reward, name=name)
        verifier.step_verifier = per_step
        verifier._of_items = True
        return verifier

    def _score_item(self, item: ItemView) -> VerifierScore:
        if self._of_items:
            return _outcome(self._reward(item))  # type: ignore[call-arg]
        if not self.step_verifier:
            return _outcome(self._reward(item.problem, "\n\n".join(item.steps)))  # type: ignore[call-arg]
        value = self._reward(item.problem, item.steps)  # type: ignore[arg-type]
        if isinstance(value, VerifierScore):
            return value
        values = list(value)  # type: ignore[arg-type]
        if len(values) != len(item.steps):
            raise ValueError(f"a per-step reward returned {len(values)} scores for {len(item.steps)} steps")
        cleaned = [clean_score(v) for v in values]
        steps = tuple(score for score, _ in cleaned)
        return VerifierScore(steps, aggregate(steps, self._aggregation), invalid=sum(bad for _, bad in cleaned))

    def score(self, items: Sequence[ItemView]) -> list[VerifierScore]:
        """One score per item, in order (the function is called once per item)."""
        self.calls.append(len(items))
        return [self._score_item(item) for item in items]

    def close(self) -> None:
        """Nothing to release: a function holds no engine."""
