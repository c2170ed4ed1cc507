"""Offline allocation at run time: pilot samples -> difficulty bins -> samples per problem.

``tts eval --allocate offline`` first draws ``k`` pilot samples for every problem. This module
turns them into a plan: how many samples in total (n >= k) each problem gets from the budget
left after the pilot. Following Snell et al. (2024, "Scaling LLM Test-Time Compute Optimally can
be More Effective than Scaling Model Parameters", Sec. 3.2), compute-optimal allocation bins
problems by model-predicted difficulty and gives each bin the n its accuracy curve favours:

1. Difficulty = share of the majority answer among the first k samples, for the live problems
   (their pilot) and, with the same estimator, for every problem of a *calibration* pool (its
   first k samples under random orderings). Quantile edges of the calibration scores bin both.
2. Per bin, a self-consistency accuracy-vs-n curve replayed on the calibration pool. Its
   ``correct`` field is read, which is honest because the calibration pool is a different, past
   run (e.g. :func:`tts.benchmarks.results_pool.load_results_as_pool`); the live problems'
   grades are never seen.
3. Expected cost of n samples = (n - k) * the problem's mean pilot sample length (the bin's mean
   sample length in the calibration pool when pilot lengths are missing): the pilot is sunk.
4. :func:`tts.budgets.allocator.allocate` maximises the expected number of solved problems.
"""

from __future__ import annotations

import logging
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tts.benchmarks.pool import ModelPool
from tts.budgets.allocator import (
    DEFAULT_LADDER,
    AccuracyCurve,
    BudgetTooSmallError,
    CalibrationError,
    Plan,
    StrategyCandidate,
    allocate,
    check_budget,
)
from tts.budgets.difficulty import DifficultyEstimate, assign_bins, majority_share, quantile_edges
from tts.budgets.replay.prefix import fit_bin_curves, random_orders, replay_prefixes

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class OfflinePlan:
    """An offline allocation and what it was derived from (for the run manifest).

    Args:
        plans: One plan per live problem, in input order; ``n`` counts the pilot samples and
            ``expected_cost`` only the samples still to draw.
        difficulty: Pilot difficulty of each live problem (source "pilot"), binned by ``edges``.
        edges: Quantile edges of the calibration problems' pilot agreement.
        curves: Difficulty bin -> self-consistency accuracy curve from the calibration pool.
        sample_tokens: Expected generated tokens per further sample, per live problem.
        pilot: Pilot samples per problem (k).
        budget: Tokens available after the pilot.
        calibration_model: The calibration pool's model.
        calibration_problems: Calibration problems used (those with at least k samples).
        ns: The total sample counts the allocator chose from (k first).
    """

    plans: list[Plan]
    difficulty: list[DifficultyEstimate]
    edges: tuple[float, ...]
    curves: dict[int, AccuracyCurve]
    sample_tokens: tuple[float, ...]
    pilot: int
    budget: float
    calibration_model: str
    calibration_problems: int
    ns: tuple[int, ...]

    @property
    def total_cost(self) -> float:
        """Expected tokens of the samples the plans add to the pilot."""
        return float(sum(p.expected_cost for p in self.plans))

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready summary for the run manifest (per-problem n, bins and the curves)."""
        return {
            "pilot": self.pilot, "budget": self.budget, "expected_cost": self.total_cost,
            "calibration": {"model": self.calibration_model, "problems": self.calibration_problems},
            "edges": list(self.edges), "ns": list(self.ns),
            "curves": {str(b): dict(zip(map(str, c.ns), c.accuracy)) for b, c in self.curves.items()},
            "problems": [
                {"problem_id": p.problem_id, "n": p.n, "bin": d.bin, "agreement": d.score,
                 "sample_tokens": t, "expected_cost": p.expected_cost,
                 "expected_accuracy": p.expected_accuracy}
                for p, d, t in zip(self.plans, self.difficulty, self.sample_tokens)
            ],
        }


def _answer_ids(answers: Sequence[Sequence[str | None]], k: int) -> np.ndarray:
    """``(n_problems, k)`` integer ids, equal strings sharing an id per problem, -1 = no answer."""
    ids = np.full((len(answers), k), -1, dtype=np.int64)
    for i, row in enumerate(answers):
        seen: dict[str, int] = {}
        for j, a in enumerate(row):
            if a is not None:
                ids[i, j] = seen.setdefault(str(a), len(seen))
    return ids


def _nearest(curves: Mapping[int, AccuracyCurve], b: int) -> AccuracyCurve:
    """The curve of bin ``b``, or of the nearest fitted bin (the harder one on ties)."""
    if b in curves:
        return curves[b]
    best = min(curves, key=lambda c: (abs(c - b), -c))
    logger.info("difficulty bin %d has no calibration problems; using bin %d's curve", b, best)
    return curves[best]


def _pilot_size(pilot_answers: Sequence[Sequence[str | None]], pilot: int | None) -> int:
    sizes = {len(a) for a in pilot_answers}
    if len(sizes) > 1:
        raise ValueError(f"every problem needs the same number of pilot samples, got sizes {sorted(sizes)}; "
                         "draw k pilot samples for each problem")
    k = sizes.pop()
    if pilot is not None and pilot != k:
        raise ValueError(f"pilot={pilot} but each problem has {k} pilot answers; pass pilot={k} or draw "
                         f"{pilot} pilot samples")
    if k < 1:
        raise ValueError("offline allocation needs at least one pilot sample per problem; set pilot >= 1")
    return k


def plan_from_pilot(
    problem_ids: Sequence[str],
    pilot_answers: Sequence[Sequence[str | None]],
    pilot_tokens: Sequence[Sequence[int | None]] | None,
    calibration: ModelPool,
    budget: float,
    *,
    ladder: Sequence[int] = DEFAULT_LADDER,
    pilot: int | None = None,
    n_bins: int = 5,
    orderings: int = 8,
    seed: int = 0,
    max_tokens: int | None = None,
) -> OfflinePlan:
    """Plan self-consistency sample counts from pilot samples and a calibration pool.

    Args:
        problem_ids: The live problems (unique ids).
        pilot_answers: Per problem, the extracted answers of its k pilot samples (None = none).
        pilot_tokens: Per problem, the generated tokens of each pilot sample (None entries, or
            None for all, fall back to the calibration pool's mean for the problem's bin).
        calibration: Samples of a past run of the same model on other problems, with grades.
        budget: Generated tokens to spend AFTER the pilot (the pilot's tokens are already paid).
        ladder: Total sample counts to choose from; values below k are dropped, k is added, and
            values above the calibration pool's sample count are dropped (no curve there).
        pilot: k; by default the number of pilot answers per problem (which must all match).
        n_bins: Quantile difficulty bins (Snell et al. use 5).
        orderings: Random orderings of the calibration samples averaged into the curves.
        seed: Seed of those orderings.
        max_tokens: Per-sample generation limit written into the plans.

    Returns:
        An :class:`OfflinePlan`; every plan has ``n >= k`` and the expected costs sum to at most
        ``budget``.

    Raises:
        CalibrationError: A calibration pool without enough samples (or token counts).
        BudgetError: A budget that is not positive or cannot pay for any problem's first step
            up from the pilot (:class:`~tts.budgets.allocator.BudgetTooSmallError`).
        ValueError: Mismatched inputs.
    """
    ids = [str(p) for p in problem_ids]
    _check_live_inputs(ids, pilot_answers, pilot_tokens, orderings)
    k = _pilot_size(pilot_answers, pilot)
    shared = set(ids) & set(calibration.problem_ids)
    if shared:  # the curves would have seen these problems' grades (docs/architecture.md, "Honest simulation")
        logger.warning("%d of %d problems are also in the calibration pool; their plans use their own "
                       "grades, so do not report the result as achievable", len(shared), len(ids))
    # 1. Calibration difficulty from each problem's first k samples of random orderings.
    keep, cal, ns = _calibration_ladder(calibration, k, ladder)
    # 2. Per-bin accuracy-vs-n curves of self-consistency, replayed on the same orderings.
    edges, cal_bins, curves = _calibration_curves(cal, k, ns, orderings, seed, n_bins)
    live_scores = majority_share(_answer_ids(pilot_answers, k))
    live_bins = assign_bins(live_scores, edges)
    # 3. Expected tokens per further sample: the problem's pilot mean, else its bin's calibration mean.
    per_sample = _tokens_per_sample(pilot_tokens, len(ids), cal, cal_bins, live_bins, orderings)
    index = {pid: i for i, pid in enumerate(ids)}
    # 4. Allocate: n = k costs nothing more; budget too small for any upgrade is an error.
    _check_first_step(budget, per_sample, ns, k)
    by_bin = {b: [_nearest(curves, b)] for b in np.unique(live_bins).tolist()}
    plans = allocate(ids, live_bins.tolist(), float(budget),
                     [StrategyCandidate("self_consistency", n, max_tokens) for n in ns],
                     lambda pid, _s, n: (n - k) * per_sample[index[pid]], by_bin, unit="tokens")
    difficulty = [DifficultyEstimate(pid, float(s), int(b), "pilot")
                  for pid, s, b in zip(ids, live_scores, live_bins)]
    logger.info("offline plan: %d problems, pilot %d, %.6g of %.6g tokens, mean n %.2f", len(ids), k,
                sum(p.expected_cost for p in plans), float(budget), np.mean([p.n for p in plans]))
    return OfflinePlan(plans, difficulty, tuple(float(e) for e in edges), curves,
                       tuple(float(t) for t in per_sample), k, float(budget), calibration.model,
                       len(keep), tuple(ns))


def _check_live_inputs(ids: list[str], pilot_answers: Sequence[Sequence[str | None]],
                       pilot_tokens: Sequence[Sequence[int | None]] | None, orderings: int) -> None:
    """Refuse live inputs of :func:`plan_from_pilot` that cannot be planned (ValueError, saying what
    to give): no problems, repeated ids, pilot lists not one per problem, orderings below 1."""
    if not ids:
        raise ValueError("give at least one problem to allocate over")
    if len(set(ids)) != len(ids):
        raise ValueError("problem ids must be unique; each problem gets one plan")
    if len(pilot_answers) != len(ids) or (pilot_tokens is not None and len(pilot_tokens) != len(ids)):
        raise ValueError(f"{len(ids)} problems but {len(pilot_answers)} pilot answer lists"
                         + ("" if pilot_tokens is None else f" and {len(pilot_tokens)} token lists")
                         + "; give one list per problem")
    if orderings < 1:
        raise ValueError(f"orderings must be >= 1, got {orderings}")


def _calibration_ladder(calibration: ModelPool, k: int, ladder: Sequence[int]
                        ) -> tuple[np.ndarray, ModelPool, list[int]]:
    """The calibration problems with at least k samples (their indices, and that subset) and the
    ladder of n to plan over: k, then the ladder's values up to the subset's sample count.

    Raises:
        CalibrationError: No calibration problem has k samples, or no ladder value lies between
            k and the calibration pool's sample count.
    """
    keep = np.nonzero(calibration.counts >= k)[0]
    if len(keep) == 0:
        raise CalibrationError(f"no calibration problem has {k} samples; use a calibration run with at "
                               f"least {k} samples per problem or lower the pilot")
    cal = calibration.subset(keep)
    ns = sorted({int(n) for n in ladder if k <= n <= cal.n_samples} | {k})
    if len(ns) < 2:
        raise CalibrationError(f"no ladder value lies between the pilot ({k}) and the calibration pool's "
                               f"{cal.n_samples} samples per problem; lower the pilot or use a larger "
                               "ladder and calibration run")
    dropped = [int(n) for n in ladder if n > cal.n_samples]
    if dropped:
        logger.info("ladder values %s exceed the calibration pool's %d samples and are dropped",
                    dropped, cal.n_samples)
    return keep, cal, ns


def _calibration_curves(cal: ModelPool, k: int, ns: list[int], orderings: int, seed: int,
                        n_bins: int) -> tuple[np.ndarray, np.ndarray, Any]:
    """Difficulty bins and per-bin curves fitted on the calibration pool over random orderings.

    Each (ordering, problem) is scored by the majority share of its first k samples (what a live
    problem's pilot shows); the scores' quantiles make the bin edges, and self-consistency's
    accuracy at each n of ``ns``, replayed on the same orderings, is fitted per bin. Returns the
    edges, the calibration bins (orderings x problems, flattened) and the curves.
    """
    orders = random_orders(cal.mask, orderings, np.random.default_rng(seed))
    p_idx = np.arange(cal.n_problems)[:, None]
    cal_scores = np.concatenate([majority_share(cal.answers[p_idx, o[:, :k]]) for o in orders])
    edges = quantile_edges(cal_scores, n_bins)
    cal_bins = assign_bins(cal_scores, edges)
    vote = np.concatenate([replay_prefixes(cal, o).vote_correct for o in orders])
    curves = fit_bin_curves(vote, cal_bins, ns)
    return edges, cal_bins, curves


def _tokens_per_sample(pilot_tokens: Sequence[Sequence[int | None]] | None, n_live: int, cal: ModelPool,
                       cal_bins: np.ndarray, live_bins: np.ndarray, orderings: int) -> np.ndarray:
    """Expected generated tokens of each live problem's further samples: the mean of its pilot's
    known token counts, else the calibration mean of its difficulty bin (of all calibration
    problems for an empty bin); at least 1, as a zero-length sample still costs a request.

    Raises:
        CalibrationError: A problem without pilot token counts and a calibration pool without any.
    """
    own = np.full(n_live, np.nan)
    if pilot_tokens is not None:
        for i, toks in enumerate(pilot_tokens):
            known = [float(t) for t in toks if t is not None]
            own[i] = np.mean(known) if known else np.nan
    if np.isnan(own).any():
        if not cal.has_tokens:
            raise CalibrationError("some problems have no pilot token counts and the calibration pool has "
                                   "none either; pass pilot_tokens or a calibration pool with num_tokens")
        cal_mean = np.tile(np.nanmean(np.where(cal.mask, cal.tokens, np.nan), axis=1), orderings)
        for b in np.unique(live_bins[np.isnan(own)]).tolist():
            in_bin = cal_bins == b
            fill = cal_mean[in_bin].mean() if in_bin.any() else cal_mean.mean()
            own[np.isnan(own) & (live_bins == b)] = fill
    return np.maximum(own, 1.0)  # a zero-length sample still costs a request


def _check_first_step(budget: float, per_sample: np.ndarray, ns: list[int], k: int) -> None:
    """Refuse a budget that is not a positive number, or that cannot buy the cheapest step up from
    the pilot (n = k -> the next ladder value on the cheapest problem), naming the minimum."""
    cheapest_step = float(np.min(per_sample) * (ns[1] - k))
    if isinstance(budget, numbers.Real) and 0 < budget < cheapest_step:
        raise BudgetTooSmallError(
            f"a budget of {float(budget):.6g} tokens after the pilot cannot buy any step up from it (the "
            f"cheapest, n={k} -> {ns[1]}, costs {cheapest_step:.6g} tokens); raise the budget to at least "
            f"{cheapest_step:.6g} tokens or add a ladder value just above the pilot", cheapest_step)
    check_budget(budget, np.array([cheapest_step]), "tokens")  # a positive number, else what to pass
