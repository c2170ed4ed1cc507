"""Token confidence from top-k log-probabilities, and the in-engine confidence stop (DeepConf).

DeepConf (Fu, Wang, Tian & Zhao 2025, "Deep Think with Confidence") measures how sure a model is
at each generated position from the k most likely tokens there:

    C_i = -(1/k) * sum_{j=1..k} log P_i(j)                     (token confidence)

A peaked distribution (top token near probability 1, the others far below) gives a large C_i; a
flat one a small C_i. The *group confidence* is the mean C_i over a sliding window of tokens, and
a trace whose group confidence falls below a threshold is stopped while it is being generated
(DeepConf online): its remaining tokens are never paid for.

This module is pure Python and backend-neutral: the backends use :class:`ConfidenceStop` (what a
request asks for), :func:`token_confidence` and :func:`first_stop` to carry out and to recognise a
stop; the DeepConf strategy and the self-certainty scorer use the same functions on the top-k
log-probabilities a backend returns (``Completion.token_top_logprobs``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

EXTRA_ARG = "tts_confidence_stop"
"""Key of a confidence stop in vLLM's ``SamplingParams.extra_args``:
``{"threshold": float, "window": int, "top_k": int, "eos": int}``."""

CONFIDENCE_STOPPED = "confidence"
"""``Completion.finish_reason`` of a sample that the engine ended because its group confidence
fell below the request's threshold."""


@dataclass(frozen=True, slots=True)
class ConfidenceStop:
    """Ask the backend to end a sample once its group confidence drops below ``threshold``.

    Args:
        threshold: Group confidence (mean token confidence over ``window`` tokens) below which
            the sample is ended with the end-of-sequence token.
        window: Tokens per group; no sample is stopped before it has generated this many.
        top_k: Tokens per position in the token confidence (k of DeepConf's C_i); at most 20.
    """

    threshold: float
    window: int = 64
    top_k: int = 20

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ValueError(f"ConfidenceStop.window must be at least 1 token, got {self.window}")
        if not 1 <= self.top_k <= 20:
            raise ValueError(f"ConfidenceStop.top_k must be in 1..20 (the engines' top-logprobs limit), got {self.top_k}")
        if not math.isfinite(self.threshold):
            raise ValueError(f"ConfidenceStop.threshold must be a finite number, got {self.threshold}")


def token_confidence(top_logprobs: Sequence[float], k: int = 20) -> float:
    """DeepConf's C_i of one position: minus the mean of its ``k`` largest log-probabilities.

    Args:
        top_logprobs: Log-probabilities of the most likely tokens at the position (any order; the
            sampled token may be among them). Fewer than ``k`` values: the mean of those given.
        k: How many of the largest to average.

    Example:
        >>> round(token_confidence([-0.01, -5.0, -9.0], k=3), 3)
        4.67
    """
    values = sorted((float(v) for v in top_logprobs if not math.isnan(float(v))), reverse=True)[:k]
    if not values:
        raise ValueError("no top logprobs at this position: ask the backend for top_logprobs")
    # A -inf alternative (a masked token) would make C infinite; a large finite value says the same.
    return -sum(max(v, -100.0) for v in values) / len(values)


def token_confidences(positions: Sequence[Sequence[float]], k: int = 20) -> list[float]:
    """:func:`token_confidence` of every position of a sample."""
    return [token_confidence(p, k) for p in positions]


def group_confidences(confidences: Sequence[float], window: int) -> list[float]:
    """Mean token confidence of every ``window`` consecutive tokens (one group when shorter).

    Example:
        >>> group_confidences([1.0, 3.0, 5.0], 2)
        [2.0, 4.0]
    """
    if window < 1:
        raise ValueError(f"window must be at least 1 token, got {window}")
    values = list(confidences)
    if not values:
        return []
    size = min(window, len(values))
    total = sum(values[:size])
    out = [total / size]
    for i in range(size, len(values)):
        total += values[i] - values[i - size]
        out.append(total / size)
    return out


def first_stop(confidences: Sequence[float], stop: ConfidenceStop, slack: float = 0.0) -> int | None:
    """The position at which an engine applying ``stop`` ends the sample, or None.

    The first position p >= window - 1 whose group (positions p - window + 1 .. p) has a mean
    confidence below ``stop.threshold + slack``: the engine writes the end token there, so a
    stopped sample has p + 1 tokens. ``slack`` absorbs float rounding when a backend recognises a
    stop from returned log-probabilities.
    """
    w = stop.window
    if len(confidences) < w:
        return None
    total = sum(confidences[:w])
    limit = (stop.threshold + slack) * w
    if total < limit:
        return w - 1
    for p in range(w, len(confidences)):
        total += confidences[p] - confidences[p - w]
        if total < limit:
            return p
    return None
