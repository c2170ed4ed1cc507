"""Escalation options for ``strategy="auto"``: search or verification strategies, calibrated per bin.

A sample pool replays only rules that aggregate independent samples (vote, best-of-N, ...). Step
searches (REBASE, beam, lookahead, particle filtering) and verification cannot be replayed from
samples, so their calibration is a past ``tts eval`` run of the search on the calibration
problems: per problem, whether it was right and what it cost. The plan's online stage is the
pilot: each live problem's pilot samples put it in a difficulty bin, and the search becomes one
more option of that problem, with its bin's accuracy and cost:

* bins of the calibration problems come from the calibration pool's pilots (the same problems,
  sampled by the sampling strategy), over the pool's random orderings, so a problem contributes
  to a bin in the share of orderings whose pilot lands there;
* an escalated problem runs the search afresh (its pilot is paid and not reused), so the option
  costs the search's mean cost in its bin (priced from the run's recorded request shapes);
* its accuracy is its bin's mean (``accuracy="bin"``, the default), or, with ``accuracy="learned"``,
  a logistic model of the option's own correctness on the same pilot features, fitted on the
  calibration problems and read per problem: a bin holds problems alike in their predicted pass
  rate, which need not be alike in what an option buys on them (on ``chains`` the middle bin
  mixes two-step chains, where a search gains, with four-step ones whose pilots agree on a wrong
  answer, where nothing does);
* noise guard (as :func:`tts.budgets.strategy_curves.guard_rule_switches`): in each bin the
  search keeps its accuracy only when its paired gain over the reference rule at matched cost
  (the largest n whose extra samples cost no more than the search) exceeds ``z`` standard errors,
  clustered by problem; elsewhere it is capped below that rule, so it is never chosen on a tie.

Snell et al. (2024, Sec. 5) find search beats best-of-N on hard and medium problems at low
budgets and loses on easy ones: the per-bin curves let the allocator find that (or not) from
measurements instead of assuming it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tts.benchmarks.pool import ModelPool, PoolError
from tts.benchmarks.results_pool import read_results
from tts.budgets.allocator import CalibrationError
from tts.budgets.difficulty import LearnedDifficulty, pool_pilot_features, pool_prompt_lengths
from tts.cost.ledger import usage_from_json
from tts.budgets.strategy_curves import SWITCH_Z, rule_outcomes

logger = logging.getLogger(__name__)

SAMPLING_KINDS = frozenset({"self_consistency", "best_of_n", "weighted_vote"})
"""Strategies the cross-strategy allocator already covers with per-n curves (no escalation),
unless they score with a verifier: the allocator's curves score by mean logprob, so best-of-N or
a weighted vote by a verifier (a PRM, the arithmetic tool) is an escalation option like a search."""


def _covered_by_curves(strategy: dict[str, Any]) -> bool:
    """Whether the allocator's own per-n curves already cover this config (sampling, no verifier)."""
    return strategy.get("kind") in SAMPLING_KINDS and not strategy.get("verifier")


def reuses_pilot(strategy: dict[str, Any], pilot: int) -> bool:
    """Whether an escalation option keeps the problem's pilot samples: best-of-N or a weighted vote
    by a verifier draws only its other ``n - pilot`` samples and scores all n, where a search runs
    afresh (its pilot is paid and not reused)."""
    return strategy.get("kind") in SAMPLING_KINDS and bool(strategy.get("verifier")) and int(strategy.get("n", 0)) > pilot


@dataclass(frozen=True)
class EscalationRun:
    """One strategy configuration's per-problem results from a past run."""

    label: str
    strategy: dict[str, Any]
    correct: dict[str, bool]
    usage: dict[str, Any]


def read_escalation_runs(source: str | Path, only: str | None = None) -> list[EscalationRun]:
    """Every non-sampling strategy configuration in a past ``tts eval`` run.

    Args:
        source: Run directory (or its results.jsonl).
        only: Keep only this config label (e.g. ``rebase@4``); default all search configs.

    Raises:
        CalibrationError: Unreadable run, or no search configuration (the message lists what it holds).
    """
    try:
        rows = read_results(source)
    except PoolError as exc:
        raise CalibrationError(f"--escalate {source}: {exc}") from None
    runs: dict[str, EscalationRun] = {}
    seen = set()
    for row in rows:
        label, strat = str(row.get("config")), dict(row.get("strategy") or {})
        seen.add(label)
        if _covered_by_curves(strat) or strat.get("kind") == "auto" or (only and label != only):
            continue
        if row.get("correct") is None:
            continue  # ungraded rows cannot calibrate
        run = runs.setdefault(label, EscalationRun(label, strat, {}, {}))
        run.correct[str(row["problem_id"])] = bool(row["correct"])
        run.usage[str(row["problem_id"])] = usage_from_json(row["usage"])
    if not runs:
        what = f"config {only!r}" if only else "search or verification config"
        raise CalibrationError(f"--escalate {source} has no graded {what}; it holds {sorted(seen) or 'nothing'} "
                               "(run `tts eval -s rebase ...` on the calibration problems and pass that run)")
    return list(runs.values())


@dataclass(frozen=True)
class Escalation:
    """A search strategy as one more option per problem: its accuracy and cost in each difficulty bin.

    Args:
        label: The config label of the calibration run (``rebase@4,step_separator=', '``).
        strategy: The strategy config (``kind`` and settings) the live run builds.
        accuracy: Per bin, the mean correctness on calibration problems (guarded; see the module).
        raw_accuracy: Per bin, before the guard.
        cost: Per bin, the mean cost in the plan's unit.
        weight: Per bin, calibration problems behind it (shares over orderings).
        matched_n: Per bin, the reference rule's n at matched cost the guard compared with.
        allowed: Per bin, whether the guard let the search be chosen there.
        model: With ``accuracy="learned"``: P(the option is right) from a problem's pilot features,
            used in place of its bin's mean (None: the bin's mean).
        ceiling: Per bin, the most a learned accuracy may be there: below the reference rule where
            the guard did not allow the option, -1 where no calibration problem fell, else +inf.
    """

    label: str
    strategy: dict[str, Any]
    accuracy: np.ndarray
    raw_accuracy: np.ndarray
    cost: np.ndarray
    weight: np.ndarray
    matched_n: np.ndarray
    allowed: np.ndarray
    model: LearnedDifficulty | None = None
    ceiling: np.ndarray | None = None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready summary (for traces and plan files)."""
        return {"label": self.label, "accuracy": np.round(self.raw_accuracy, 4).tolist(),
                "cost": np.round(self.cost, 2).tolist(), "problems": np.round(self.weight, 2).tolist(),
                "matched_n": self.matched_n.tolist(), "allowed": self.allowed.tolist(),
                "learned": self.model is not None}

    def predicted_accuracy(self, bins: np.ndarray, features: np.ndarray | None = None) -> np.ndarray:
        """Per problem, before the guard: the learned model's prediction (given ``features``), else
        its bin's mean."""
        b = np.clip(np.asarray(bins, dtype=int), 0, len(self.raw_accuracy) - 1)
        if self.model is None or features is None:
            return self.raw_accuracy[b]
        return self.model.predict(np.asarray(features, dtype=float))

    def expected_accuracy(self, bins: np.ndarray, features: np.ndarray | None = None) -> np.ndarray:
        """Per problem, what the plan uses: :meth:`predicted_accuracy` held under its bin's ceiling
        (the guard, and -1 for empty bins)."""
        b = np.clip(np.asarray(bins, dtype=int), 0, len(self.accuracy) - 1)
        if self.model is None or features is None or self.ceiling is None:
            return self.accuracy[b]
        return np.minimum(self.predicted_accuracy(b, features), self.ceiling[b])


def fit_escalation(run: EscalationRun, pool: ModelPool, calibration: Any, orders: np.ndarray, pricer: Any,
                   z: float = SWITCH_Z, accuracy: str = "bin") -> Escalation:
    """Per-bin accuracy and cost of ``run``'s strategy, binned by the calibration pool's pilots.

    Args:
        run: The search's results on calibration problems.
        pool: The sampling calibration pool (the same model on those problems).
        calibration: The fitted :class:`~tts.budgets.cross_allocator.Calibration` (its bins, reference).
        orders: ``(R, P, S)`` orderings of the pool's samples (the ones the calibration used).
        pricer: :class:`~tts.budgets.cross_allocator.Pricer` of the plan's unit.
        z: Noise guard in standard errors (0: trust the bins as measured).
        accuracy: ``bin``: an escalated problem's expected accuracy is its bin's mean; ``learned``:
            a logistic model of this option's correctness on the pilot features (the calibration's
            columns), per problem. The guard applies per bin either way.

    Raises:
        CalibrationError: Fewer than two problems in both the run and the pool, or an unknown
            ``accuracy``.
    """
    if accuracy not in ("bin", "learned"):
        raise CalibrationError(f"escalation accuracy must be 'bin' or 'learned', got {accuracy!r}")
    shared = [i for i, pid in enumerate(pool.problem_ids) if pid in run.correct]
    if len(shared) < 2:
        raise CalibrationError(f"--escalate {run.label}: only {len(shared)} of its problems are in the calibration "
                               f"source ({pool.n_problems} problems); run the search on the calibration problems")
    idx = np.asarray(shared)
    k, n_bins = calibration.pilot, len(calibration.edges) + 1
    ok = np.array([float(run.correct[pool.problem_ids[i]]) for i in idx])
    cost = np.array([pricer.usage(run.usage[pool.problem_ids[i]]) for i in idx])
    if reuses_pilot(run.strategy, k):  # the pilot's k of its n samples are already paid
        cost = cost * (int(run.strategy["n"]) - k) / int(run.strategy["n"])
    p_idx = idx[:, None]
    prompts = pool_prompt_lengths(pool, idx) if calibration.prompt_length else None
    feats = [pool_pilot_features(pool, idx, o, k, prompts) for o in orders]
    bins = np.stack([calibration.bins(f) for f in feats])  # (R, P_shared)
    lengths = np.stack([np.nan_to_num(pool.tokens[p_idx, o[idx, :k]]).mean(axis=1) for o in orders])
    ref = calibration.reference or calibration.rules[0]
    ref_out = rule_outcomes(pool, orders, (ref,), max(calibration.ns))[ref][:, idx]  # (R, P_shared, n_max)
    raw, mean_cost, weight = (np.zeros(n_bins) for _ in range(3))
    matched = np.full(n_bins, k)
    allowed = np.zeros(n_bins, dtype=bool)
    ceiling = np.full(n_bins, np.inf)
    overall = (float(ok.mean()), float(cost.mean()))
    for b in range(n_bins):
        sel = bins == b  # (R, P)
        share = sel.mean(axis=0)  # each problem's weight in this bin
        weight[b] = share.sum()
        if weight[b] == 0:  # no calibration problem here: the overall numbers, and no switch
            raw[b], mean_cost[b] = overall
            ceiling[b] = -1.0
            continue
        raw[b] = float(np.average(ok, weights=share))
        mean_cost[b] = float(np.average(cost, weights=share))
        length = float(lengths[sel].mean())
        fits = [n for n in calibration.ns if pricer.option(ref, 0, length, k, n) <= mean_cost[b]]
        matched[b] = max(fits) if fits else k
        # Paired per problem: the search's correctness minus the reference's mean over this bin's orderings.
        ref_p = np.where(sel, ref_out[:, :, matched[b] - 1], 0.0).sum(axis=0) / np.maximum(sel.sum(axis=0), 1)
        live = share > 0
        d, w = (ok - ref_p)[live], share[live]
        gain = float(np.average(d, weights=w))
        m = int(live.sum())
        se = float(np.sqrt(np.average((d - gain) ** 2, weights=w) / max(m - 1, 1))) if m > 1 else np.inf
        allowed[b] = gain > z * se if z > 0 else True
        if not allowed[b]:  # capped just below the reference rule there, so never chosen on a tie
            ref_acc = calibration.curves[(ref, b)].at(int(matched[b])) if (ref, b) in calibration.curves else raw[b]
            ceiling[b] = ref_acc - 1e-9
    acc = np.minimum(raw, ceiling)  # the guarded per-bin accuracy (-1 where no calibration problem fell)
    model = None
    if accuracy == "learned" and 0.0 < ok.mean() < 1.0:  # a constant outcome has nothing to learn: the bins stay
        # Every ordering's pilot features of a problem, each with the problem's outcome (as the
        # calibration fits the pass rate on every ordering).
        model = LearnedDifficulty(l2=1.0).fit(np.concatenate(feats), np.tile(ok, len(feats)))
    logger.info("escalation %s: per-bin accuracy %s (allowed %s), cost %s %s%s", run.label,
                np.round(raw, 3).tolist(), allowed.tolist(), np.round(mean_cost, 1).tolist(), pricer.unit,
                "; accuracy per problem from a learned model" if model is not None else "")
    return Escalation(run.label, run.strategy, acc, raw, mean_cost, weight, matched, allowed, model, ceiling)


def escalation_options(escalations: Sequence[Escalation], bins: np.ndarray,
                       features: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(P, E)`` expected accuracy and cost of each escalation for problems in ``bins`` (with
    ``features``, the problems' pilot features, a learned escalation predicts per problem)."""
    b = np.asarray(bins, dtype=int)
    acc = np.stack([e.expected_accuracy(b, features) for e in escalations], axis=1)
    cost = np.stack([e.cost[np.clip(b, 0, len(e.cost) - 1)] for e in escalations], axis=1)
    return acc, cost
