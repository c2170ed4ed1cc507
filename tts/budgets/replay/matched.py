"""An allocator against a uniform baseline at matched cost: where its accuracy curve reaches the
baseline's, with bootstrap intervals over orderings.

Both replays (:mod:`~tts.budgets.replay.simulate`: offline and online allocation against uniform
self-consistency; :mod:`~tts.budgets.replay.cross_strategy`: the cross-strategy allocator against
the best single rule) end the same way: per ordering, the allocator's realised accuracy and cost
on a grid of budgets, and the baseline's accuracy and cost. :func:`compare_at_matched` turns
those into the budget at which the allocator first matches the baseline, the cost ratio, and the
allocator's accuracy at the baseline's cost, each with a 95% percentile-bootstrap interval over
orderings.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Interval:
    """A point estimate (the mean over orderings, or the value on the observed orderings for
    crossings and ratios) with a 95% percentile-bootstrap interval over orderings; intervals of
    crossings are taken over the resamples that reached the target (see ``reached``)."""

    mean: float
    lo: float
    hi: float


@dataclass(frozen=True)
class ModeResult:
    """One allocator's replay against the uniform baseline (``mode``: "offline", "online", or the
    cross-strategy allocator's name).

    ``tokens_to_match`` and ``token_ratio`` are None when the allocator never reached uniform's
    accuracy; ``reached`` is the share of bootstrap resamples in which it did.
    """

    mode: str
    tokens_to_match: Interval | None
    token_ratio: Interval | None
    reached: float
    acc_at_uniform_tokens: Interval
    tokens_at_uniform_budget: Interval
    curve_tokens: list[float] = field(repr=False)
    curve_acc: list[float] = field(repr=False)
    acc_change: Interval | None = None
    """The allocator's accuracy at uniform's tokens minus uniform's, paired per ordering."""


def flat(key: str, iv: Interval | None) -> dict:
    """``{key: mean, key_ci: [lo, hi]}`` for a JSON report (both None without an interval)."""
    if iv is None:
        return {key: None, f"{key}_ci": None}
    return {key: iv.mean, f"{key}_ci": [iv.lo, iv.hi]}


def interval(values: np.ndarray) -> Interval:
    """The mean of per-ordering values and their 2.5 and 97.5 percentiles."""
    v = np.asarray(values, dtype=float)
    return Interval(float(np.mean(v)), float(np.percentile(v, 2.5)), float(np.percentile(v, 97.5)))


def compare_at_matched(mode: str, grid: np.ndarray, acc: np.ndarray, tok: np.ndarray, uniform_acc: np.ndarray,
                       uniform_tok: np.ndarray, at_uniform: np.ndarray, *, seed: int, bootstrap: int,
                       tolerance: float) -> ModeResult:
    """Bootstrap over orderings: the first budget of ``grid`` at which the mean accuracy reaches
    uniform's.

    Args:
        mode: The allocator's name in the result.
        grid: ``(G,)`` budgets, increasing.
        acc, tok: ``(R, G)`` realised accuracy and cost per ordering and budget (NaN: unaffordable).
        uniform_acc, uniform_tok: ``(R,)`` the baseline's accuracy and cost per ordering.
        at_uniform: ``(R, 2)`` the allocator's accuracy and cost at the baseline's budget.
        seed: Seeds the resamples (``seed + 1``, as the replays always did).
        bootstrap: Resamples of the orderings; resample 0 is the observed orderings.
        tolerance: Accuracy points below uniform's that still count as matching.
    """
    acc = np.nan_to_num(acc, nan=0.0)
    tok = np.where(np.isnan(tok), np.inf, tok)
    rng = np.random.default_rng(seed + 1)
    boot = rng.integers(0, len(acc), size=(bootstrap, len(acc)))
    boot[0] = np.arange(len(acc))  # resample 0 = the observed orderings
    mean_acc = acc[boot].mean(axis=1)  # (B, G)
    mean_tok = tok[boot].mean(axis=1)
    target = uniform_acc[boot].mean(axis=1)
    hit = mean_acc >= target[:, None] - tolerance - 1e-12
    reached = hit.any(axis=1)
    first = np.argmax(hit, axis=1)
    need = np.where(reached, mean_tok[np.arange(len(boot)), first], np.nan)
    ratio = uniform_tok[boot].mean(axis=1) / need
    ok = reached & np.isfinite(need)
    tokens_iv = ratio_iv = None
    if ok[0]:
        tokens_iv = Interval(float(need[0]), *np.percentile(need[ok], [2.5, 97.5]).tolist())
        ratio_iv = Interval(float(ratio[0]), *np.percentile(ratio[ok], [2.5, 97.5]).tolist())
    return ModeResult(mode, tokens_iv, ratio_iv, float(reached.mean()), interval(at_uniform[:, 0]),
                      interval(at_uniform[:, 1]), np.nanmean(np.where(np.isinf(tok), np.nan, tok), axis=0).tolist(),
                      acc.mean(axis=0).tolist(), interval(at_uniform[:, 0] - uniform_acc))
