"""Confidence from the generator's own token log-probabilities: no extra model, no extra cost.

The ``logprob`` verifier scores each step by exp(mean token logprob), the geometric-mean
probability the policy gave its own tokens (the inverse perplexity of the step): the likelihood
baseline of confidence-based best-of-N. It is not Kang et al.'s self-certainty (2025, "Scalable
Best-of-N Selection for LLMs via Self-Certainty"), which measures the whole next-token distribution
against uniform: that is the ``self_certainty`` scorer. No paper owns this rule; its parity test
(``tests/parity/test_verifiers_misc.py``) pins the documented one.
An item whose generator returned no logprobs scores 0 and is counted as invalid: a missing
signal must never pass for a confident one.

DeepConf (Fu, Wang, Tian & Zhao 2025, "Deep Think with Confidence") finds that a trace's weakest
stretch says more than its average: :func:`lowest_group_confidence` (the least confident sliding
window of tokens) and :func:`tail_confidence` (the last tokens, where the answer is written) work
on the per-token logprobs a backend returns in ``Completion.token_logprobs``. DeepConf's token
confidence is the negative mean logprob of the top-k candidates at each position; with only the
sampled token's logprob (what every backend returns) we use its analogue, the geometric-mean
probability of the sampled tokens in the window, which lies in [0, 1] like every verifier score.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from tts.config import VerifierConfigBase
from tts.verifiers.base import VerifierScore, VerifyItem, aggregate, clean_score


class LogprobConfig(VerifierConfigBase):
    """Score steps by the policy's own confidence, exp(mean token logprob) of each step."""

    kind: Literal["logprob"] = "logprob"
    reads_logprobs: ClassVar[bool] = True
    """Its scores are the policy's token log-probabilities (a strategy using it needs a backend that returns them)."""


_ROUNDING = 1e-6  # engines return logprobs a hair above 0 for certain tokens


def _confidence(mean_logprob: float) -> float:
    """exp(mean logprob), in [0, 1] for logprobs <= 0. A clearly positive logprob (not a
    probability) or NaN comes out above 1 or NaN, for clean_score to count as invalid."""
    if math.isnan(mean_logprob):
        return math.nan
    if mean_logprob > _ROUNDING:
        return math.inf
    return math.exp(min(mean_logprob, 0.0))


def _checked(token_logprobs: Sequence[float], size: int, what: str) -> list[float]:
    if size < 1:
        raise ValueError(f"{what} must be at least 1 token, got {size}")
    values = [float(v) for v in token_logprobs]
    if not values:
        raise ValueError("no token logprobs: ask the backend for logprobs (GenerationRequest(logprobs=True))")
    bad = next((v for v in values if math.isnan(v) or v > _ROUNDING), None)
    if bad is not None:
        raise ValueError(f"token logprobs must be numbers <= 0, got {bad}")
    return values


def lowest_group_confidence(token_logprobs: Sequence[float], window: int = 2048) -> float:
    """The confidence of the least confident ``window`` consecutive tokens (DeepConf's lowest
    group confidence, on sampled-token logprobs).

    Args:
        token_logprobs: Log-probability of each generated token (``Completion.token_logprobs``).
        window: Tokens per sliding group (DeepConf uses 2048 on long traces); a shorter
            sequence is one group.

    Returns:
        min over windows of exp(mean logprob of the window), in [0, 1].

    Raises:
        ValueError: No logprobs, a value that is not a logprob (NaN or above 0), or a window
            below 1.

    Example:
        >>> round(lowest_group_confidence([0.0, 0.0, -2.0, -2.0, 0.0], window=2), 3)
        0.135
    """
    values = _checked(token_logprobs, window, "window")
    size = min(window, len(values))
    total = sum(values[:size])
    lowest = total
    for i in range(size, len(values)):  # slide the window one token at a time: O(n)
        total += values[i] - values[i - size]
        lowest = min(lowest, total)
    return _confidence(lowest / size)


def tail_confidence(token_logprobs: Sequence[float], tail: int = 2048) -> float:
    """The confidence of the last ``tail`` tokens (DeepConf's tail confidence): where a trace
    writes its conclusion, a weak ending is a warning sign.

    Args:
        token_logprobs: Log-probability of each generated token.
        tail: Tokens at the end to average over (all of them when the sequence is shorter).

    Returns:
        exp(mean logprob of the last ``tail`` tokens), in [0, 1].

    Raises:
        ValueError: No logprobs, a value that is not a logprob, or a tail below 1.
    """
    values = _checked(token_logprobs, tail, "tail")[-tail:]
    return _confidence(sum(values) / len(values))


class LogprobVerifier:
    """exp(mean token logprob) per step, aggregated with the config's ``aggregation``.

    A step without a logprob scores 0 and counts as invalid; so does an item with none at all.
    Costs no usage: the logprobs came with the generation.

    Example:
        >>> from tts.types import Problem
        >>> item = VerifyItem(Problem("p", "?"), ("a", "b"), logprobs=(-0.1, -0.5))
        >>> round(LogprobVerifier(LogprobConfig(aggregation="min")).score([item])[0].score, 3)
        0.607
    """

    name: ClassVar[str] = "logprob"
    config_class: ClassVar[type[LogprobConfig]] = LogprobConfig

    def __init__(self, config: LogprobConfig | None = None) -> None:
        self.config = config or LogprobConfig()

    @classmethod
    def from_config(cls, config: LogprobConfig, generator: Any = None) -> LogprobVerifier:
        """Build from a config; the generator is not used (the logprobs come with the items)."""
        return cls(config)

    def _score_one(self, item: VerifyItem) -> VerifierScore:
        logprobs = tuple(item.logprobs) + (None,) * (len(item.steps) - len(item.logprobs))
        if not any(lp is not None for lp in logprobs):
            return VerifierScore(tuple(0.0 for _ in item.steps), 0.0, invalid=max(len(item.steps), 1))
        steps, invalid = [], 0
        for lp in logprobs[: len(item.steps)] if item.steps else logprobs:
            value, bad = clean_score(_confidence(float(lp))) if lp is not None else (0.0, 1)
            steps.append(value)
            invalid += bad
        total, bad = clean_score(aggregate(steps, self.config.aggregation))
        return VerifierScore(tuple(steps) if item.steps else (), total, invalid=invalid + bad)

    def score(self, items: Sequence[VerifyItem]) -> list[VerifierScore]:
        """One score per item, in order."""
        return [self._score_one(item) for item in items]

    def close(self) -> None:
        """Nothing to release."""
