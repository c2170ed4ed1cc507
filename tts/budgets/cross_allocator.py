"""Choose a selection rule AND a sample count per problem under one total budget.

The plan of a ``strategy="auto"`` run and of the cross-strategy replay
(:mod:`tts.budgets.replay.cross_strategy`). Snell et al. (2024, "Scaling LLM Test-Time Compute Optimally",
Sec. 3.2) pick the strategy per difficulty bin; here each problem's options are every
(rule, n) with n on a ladder starting at the pilot size k, and :func:`greedy_allocate` takes hull
segments across all problems' options by expected accuracy gained per unit cost (a
multiple-choice knapsack; see :mod:`tts.budgets.allocator`):

1. Pilot: k samples per problem (they are kept: every rule here aggregates independent samples,
   so the pilot serves whichever rule is chosen).
2. Difficulty from run-time pilot features (:func:`tts.budgets.difficulty.pilot_features`:
   agreement, no-answer share, log mean length), either the pilot agreement itself or a logistic
   model fitted on calibration problems; quantile bins fitted on the calibration problems.
3. Per (rule, bin), an accuracy-vs-n curve replayed on the calibration problems (a past run or
   pool: other problems than the ones planned; the replay cross-fits by folds instead).
4. Cost of an option from the cost model (:class:`~tts.budgets.pricing.Pricer`): its extra n - k samples at the
   problem's predicted length (the mean of its pilot samples), in tokens, Kinetics eFLOPs,
   GPU-seconds (roofline seconds x the measured efficiency factor of ``tts cost calibrate
   --engine``) or dollars; score-based rules add a verifier pass per sample when the verifier's
   architecture is given (logprob scores come free with generation).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from tts.benchmarks.pool import ModelPool
from tts.budgets import difficulty as dif
from tts.budgets.allocator import (
    DEFAULT_LADDER,
    AccuracyCurve,
    BudgetTooSmallError,
    CalibrationError,
    check_budget,
    greedy_allocate,
)
from tts.budgets.escalation import Escalation, escalation_options
from tts.budgets.pricing import PLAN_UNITS, Pricer, make_pricer  # noqa: F401  (the one pricer, re-exported)
from tts.budgets.replay.prefix import random_orders
from tts.budgets.strategy_curves import (
    RULES,
    SWITCH_Z,
    curve_for,
    fit_rule_curves,
    guard_rule_switches,
    rule_outcomes,
)

logger = logging.getLogger(__name__)

Unit = Literal["tokens", "eflops", "gpu_seconds", "dollars", "samples"]
UNITS: tuple[str, ...] = PLAN_UNITS
"""Budget units; ``samples`` (one per sample drawn, verifier passes free) is for pools without token counts."""
Difficulty = Literal["pilot", "learned"]


# --- cost -------------------------------------------------------------------------------------------


def efficiency_from_report(path: str | Path) -> float:
    """The efficiency factor (measured / roofline seconds) from ``tts cost calibrate --engine --json``.

    Raises:
        ValueError: The file has no ``engine.median_ratio`` (run the calibration with ``--engine``).
    """
    data = json.loads(Path(path).read_text())
    try:
        value = float(data["engine"]["median_ratio"])
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"{path} has no engine.median_ratio; write it with `tts cost calibrate --engine --json "
                         f"> {path}`") from None
    if not value > 0:
        raise ValueError(f"{path}: engine.median_ratio is {value}; it must be a positive factor")
    return value


# --- calibration --------------------------------------------------------------------------------------


def ladder(k: int, n_max: int, steps: Sequence[int] = DEFAULT_LADDER) -> list[int]:
    """Sample counts from the pilot size k up to n_max: k, the ladder's values between, n_max."""
    return sorted({n for n in steps if k < n <= n_max} | {k, n_max})


def pilot_feature_rows(answers: np.ndarray, tokens: np.ndarray,
                       prompt_lengths: Sequence[float] | np.ndarray | None = None) -> np.ndarray:
    """Run-time difficulty features of ``(P, k)`` answer ids and token counts (no scores, so a live
    pilot without logprobs and a calibration run with them give the same columns), and with
    ``prompt_lengths`` (one per problem, in tokens) the log prompt length as a last column."""
    return dif.pilot_features(np.asarray(answers), np.asarray(tokens, dtype=float), prompt_lengths=prompt_lengths)


@dataclass(frozen=True, eq=False)
class Calibration:
    """Difficulty model, bin edges and per-(rule, bin) curves fitted on calibration problems."""

    rules: tuple[str, ...]
    pilot: int
    ns: tuple[int, ...]
    difficulty: Difficulty
    edges: np.ndarray
    curves: dict[tuple[str, int], AccuracyCurve]
    estimator: dif.LearnedDifficulty | None = None
    mean_tokens: float = float("nan")
    reference: str | None = None
    """The rule the noise guard compares others with (None: no guard)."""
    switches: dict[tuple[str, int], list[int]] = field(default_factory=dict)
    """Per (rule, bin), the ns where the guard lets a rule other than the reference be chosen."""
    prompt_length: bool = False
    """Whether the features end with the log prompt length (``pilot_feature_rows(..., prompt_lengths)``)."""

    def scores(self, features: np.ndarray) -> np.ndarray:
        """Difficulty score per row of features (higher = easier)."""
        f = np.asarray(features, dtype=float)
        return f[:, 0] if self.estimator is None else self.estimator.predict(f)

    def bins(self, features: np.ndarray) -> np.ndarray:
        """Difficulty bin per row of features."""
        return dif.assign_bins(self.scores(features), self.edges)

    def accuracy(self, bins: np.ndarray) -> np.ndarray:
        """``(P, len(rules) * len(ns))`` expected accuracy of each option (rule-major)."""
        out = np.empty((len(bins), len(self.rules) * len(self.ns)))
        for i, b in enumerate(np.asarray(bins).tolist()):
            out[i] = np.concatenate([curve_for(self.curves, r, int(b)).accuracy for r in self.rules])
        return out

    def options(self) -> list[tuple[str, int]]:
        """The (rule, n) options, in the column order of :meth:`accuracy`."""
        return [(r, n) for r in self.rules for n in self.ns]

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready summary (edges and curves) for plan files and traces."""
        return {"rules": list(self.rules), "pilot": self.pilot, "ns": list(self.ns), "difficulty": self.difficulty,
                "edges": [float(e) for e in self.edges],
                "curves": {f"{r}/bin{b}": dict(zip(map(str, c.ns), np.round(c.accuracy, 4).tolist()))
                           for (r, b), c in sorted(self.curves.items())},
                "reference": self.reference,
                "switches": {f"{r}/bin{b}": ns for (r, b), ns in sorted(self.switches.items())}}


def calibrate(pool: ModelPool, rules: Sequence[str], pilot: int, ns: Sequence[int], *, orders: np.ndarray,
              outcomes: Mapping[str, np.ndarray] | None = None, problems: np.ndarray | None = None,
              difficulty: Difficulty = "learned", n_bins: int = 5, switch_z: float = SWITCH_Z,
              prompt_length: bool = False) -> Calibration:
    """Fit difficulty, bins and per-(rule, bin) curves on ``problems`` of ``pool`` (default all).

    Args:
        pool: Calibration samples, graded.
        rules: Selection rules to fit curves for.
        pilot: k, the pilot samples whose features bin a problem.
        ns: Sample counts of the curves (k first).
        orders: ``(R, P, S)`` random orderings of the pool's samples.
        outcomes: Precomputed :func:`rule_outcomes` for these orders (the replay shares them).
        problems: Indices of the calibration problems (the replay passes the other folds).
        difficulty: "pilot" (agreement) or "learned" (logistic model on pilot features).
        n_bins: Quantile bins.
        switch_z: Noise guard: a rule other than the best pooled one is chosen in a bin only where its
            gain there exceeds this many standard errors
            (:func:`~tts.budgets.strategy_curves.guard_rule_switches`); 0 trusts every curve.
        prompt_length: Add each problem's log prompt length to the learned difficulty's features
            (the pool must record it: :func:`~tts.budgets.difficulty.pool_prompt_lengths`).

    Raises:
        CalibrationError: No problems, or ``prompt_length`` with pilot difficulty or with a pool
            that lacks prompt lengths.
    """
    idx = np.arange(pool.n_problems) if problems is None else np.asarray(problems)
    if len(idx) == 0:
        raise CalibrationError("the calibration source has no problems")
    if prompt_length and difficulty != "learned":
        raise CalibrationError("the prompt length is a feature of the learned difficulty; use difficulty=learned")
    try:
        prompts = dif.pool_prompt_lengths(pool, idx) if prompt_length else None
    except ValueError as exc:
        raise CalibrationError(str(exc)) from None
    n_top = max(ns)
    if outcomes is None:
        outcomes = rule_outcomes(pool, orders, rules, n_top)
    r_n = orders.shape[0]
    feats = np.concatenate([dif.pool_pilot_features(pool, idx, o, pilot, prompts) for o in orders])
    est = None
    if difficulty == "learned":
        est = dif.LearnedDifficulty(l2=1.0).fit(feats, np.tile(pool.pass_rate()[idx], r_n))
        s = est.predict(feats)
    else:
        s = feats[:, 0]
    edges = dif.quantile_edges(s, n_bins)
    bins = dif.assign_bins(s, edges)
    table = {r: np.asarray(outcomes[r])[:, idx].reshape(-1, np.asarray(outcomes[r]).shape[-1]) for r in rules}
    curves = fit_rule_curves(table, bins, ns)
    ref, switches = None, {}
    if len(rules) > 1 and switch_z > 0:
        curves, ref, switches = guard_rule_switches(curves, table, bins, np.tile(idx, r_n), ns, switch_z)
    mean_tok = float(np.nanmean(np.where(pool.mask[idx], pool.tokens[idx], np.nan))) if pool.has_tokens else float("nan")
    return Calibration(tuple(rules), pilot, tuple(int(n) for n in ns), difficulty, edges, curves, est, mean_tok,
                       ref, switches, prompt_length)


# --- planning -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Choice:
    """The plan of one problem and why.

    Args:
        problem_id: The problem.
        rule: Selection rule chosen (:data:`~tts.benchmarks.pool_draws.RULES`).
        strategy: The registered strategy that runs it (None for pool-only rules).
        n: Total samples (pilot included).
        bin: Difficulty bin (0 = easiest).
        difficulty: The difficulty score (estimated pass rate, or pilot agreement).
        predicted_length: Predicted generated tokens per sample (mean of the pilot).
        expected_accuracy: The chosen option's accuracy on its bin's curve.
        expected_cost: Its expected cost beyond the pilot, in the plan's unit.
        pilot_accuracy: The best rule's expected accuracy with the pilot alone.
        gain_per_cost: (expected_accuracy - pilot_accuracy) / expected_cost; 0 when nothing was added.
        alternatives: Each rule's expected accuracy at the chosen n (what the others would give).
    """

    problem_id: str
    rule: str
    strategy: str | None
    n: int
    bin: int
    difficulty: float
    predicted_length: float
    expected_accuracy: float
    expected_cost: float
    pilot_accuracy: float
    gain_per_cost: float
    alternatives: dict[str, float]
    escalation: str | None = None
    """The search config label when the problem was escalated (:mod:`tts.budgets.escalation`); then
    ``rule`` is that label, ``strategy`` its kind and ``n`` its n, and the pilot is not reused."""

    def to_json(self) -> dict[str, Any]:
        """JSON-ready fields (for a trace or a plan file)."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class CrossPlan:
    """One plan per problem, the budget it was made under and the calibration it used."""

    choices: list[Choice]
    unit: str
    budget: float
    calibration: Calibration

    @property
    def expected_cost(self) -> float:
        """Expected cost of everything beyond the pilot."""
        return float(sum(c.expected_cost for c in self.choices))

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready plan file."""
        return {"unit": self.unit, "budget": self.budget, "expected_cost": self.expected_cost,
                "calibration": self.calibration.to_json(), "problems": [c.to_json() for c in self.choices]}


def option_costs(pricer: Pricer, options: Sequence[tuple[str, int]], prompt_tokens: Sequence[int],
                 lengths: Sequence[float], k: int, cached: Sequence[int] | None = None) -> np.ndarray:
    """``(P, options)`` expected cost beyond the pilot of every option of every problem (``cached``:
    prompt tokens per problem expected from the prefix cache; default all)."""
    cache: dict[tuple[str, int, int, int, int], float] = {}
    out = np.empty((len(lengths), len(options)))
    hits = list(prompt_tokens) if cached is None else list(cached)
    for i, (pt, length, hit) in enumerate(zip(prompt_tokens, lengths, hits, strict=True)):
        m = max(1, int(round(float(length))))
        for j, (rule, n) in enumerate(options):
            key = (rule, int(pt), m, n, int(hit))
            if key not in cache:
                cache[key] = pricer.option(rule, int(pt), m, k, n, int(hit))
            out[i, j] = cache[key]
    return out


def choose(problem_ids: Sequence[str], features: np.ndarray, prompt_tokens: Sequence[int],
           lengths: Sequence[float], calibration: Calibration, pricer: Pricer, budget: float,
           cached: Sequence[int] | None = None, escalations: Sequence[Escalation] = ()) -> CrossPlan:
    """Plan (rule, n) per problem from pilot features within ``budget`` (beyond the pilot).

    ``cached``: per problem, the prompt tokens the extra request is expected to find in the prefix
    cache (a live run passes what the engine cached for the pilot; default all). ``escalations``:
    search strategies as further options of every problem, at their bin's accuracy and cost.

    Raises:
        BudgetTooSmallError: A negative budget (the pilot already cost more than the total);
            the message gives the minimum.
    """
    k = calibration.pilot
    options = calibration.options()
    bins = calibration.bins(features)
    scores = calibration.scores(features)
    accs = calibration.accuracy(bins)
    costs = option_costs(pricer, options, prompt_tokens, lengths, k, cached)
    n_sampling = len(options)
    if escalations:
        e_acc, e_cost = escalation_options(escalations, bins, features)
        accs, costs = np.hstack([accs, e_acc]), np.hstack([costs, e_cost])
    # What each escalation would give each problem, before the guard (the trace's alternatives).
    shown = {e.label: e.predicted_accuracy(bins, features) for e in escalations}
    if budget < 0:
        raise BudgetTooSmallError(f"the pilot already cost {-budget:.6g} {pricer.unit} more than the budget; raise "
                                  f"the budget by at least that much, or lower the pilot", -float(budget))
    if budget == 0:
        choice = np.lexsort((-accs, costs), axis=1)[:, 0]
    else:
        check_budget(budget, costs.min(axis=1), pricer.unit)
        choice = greedy_allocate(costs, accs, budget)
    at_k = [j for j, (_, n) in enumerate(options) if n == k]
    out = []
    for i, pid in enumerate(problem_ids):
        j = int(choice[i])
        base = float(accs[i, at_k].max())
        cost = float(costs[i, j])
        gain = (float(accs[i, j]) - base) / cost if cost > 0 else 0.0
        if j >= n_sampling:  # escalated to a search
            esc = escalations[j - n_sampling]
            n = int(esc.strategy.get("n", 0))
            alts = {r: float(curve_for(calibration.curves, r, int(bins[i])).at(max(n, k))) for r in calibration.rules}
            alts.update({label: float(acc[i]) for label, acc in shown.items()})
            out.append(Choice(str(pid), esc.label, str(esc.strategy.get("kind")), n, int(bins[i]), float(scores[i]),
                              float(lengths[i]), float(accs[i, j]), cost, base, gain, alts, esc.label))
            continue
        rule, n = options[j]
        alts = {r: float(accs[i, options.index((r, n))]) for r in calibration.rules}
        alts.update({label: float(acc[i]) for label, acc in shown.items()})
        out.append(Choice(str(pid), rule, RULES[rule].strategy, n, int(bins[i]), float(scores[i]), float(lengths[i]),
                          float(accs[i, j]), cost, base, gain, alts))
    logger.info("cross plan: %d problems, %.6g of %.6g %s; rules %s", len(out), sum(c.expected_cost for c in out),
                budget, pricer.unit, {r: sum(c.rule == r for c in out)
                                      for r in [*calibration.rules, *(e.label for e in escalations)]})
    return CrossPlan(out, pricer.unit, float(budget), calibration)


def plan_from_pilot(problem_ids: Sequence[str], pilot_answers: Sequence[Sequence[str | None]],
                    pilot_tokens: Sequence[Sequence[int]], prompt_tokens: Sequence[int], calibration_pool: ModelPool,
                    rules: Sequence[str], budget: float, pricer: Pricer, *, n_max: int = 64,
                    difficulty: Difficulty = "learned", n_bins: int = 5, orderings: int = 8, seed: int = 0,
                    switch_z: float = SWITCH_Z) -> CrossPlan:
    """Live planning: calibrate on a past run or pool (other problems), then :func:`choose`.

    Args:
        problem_ids: The live problems.
        pilot_answers: Per problem, the (normalised) answers of its k pilot samples.
        pilot_tokens: Per problem, the generated tokens of each pilot sample.
        prompt_tokens: Per problem, its prompt length.
        calibration_pool: Graded samples of the same model on other problems.
        rules: Selection rules to choose from.
        budget: What may be spent beyond the pilot, in ``pricer.unit``.
        pricer: Prices options.
        n_max: Most samples per problem (capped at the calibration's fewest samples per problem).

    Raises:
        CalibrationError: The calibration source lacks a rule's scores, or has too few samples.
        BudgetTooSmallError: See :func:`choose`.
    """
    from tts.budgets.offline_plan import _answer_ids

    k = len(pilot_answers[0]) if pilot_answers else 0
    if k < 1 or any(len(a) != k for a in pilot_answers):
        raise ValueError("every problem needs the same number (>= 1) of pilot samples")
    have = int(calibration_pool.counts.min())
    if have < k + 1:
        raise CalibrationError(f"the calibration source has only {have} samples for some problem; it needs more than "
                               f"the pilot's {k} (calibrate on a run with more samples, or lower the pilot)")
    shared = set(map(str, problem_ids)) & set(calibration_pool.problem_ids)
    if shared:
        logger.warning("%d of %d problems are also calibration problems; their plans saw their own grades, so do "
                       "not report the result as achievable", len(shared), len(problem_ids))
    ns = ladder(k, min(n_max, have))
    orders = random_orders(calibration_pool.mask, orderings, np.random.default_rng(seed))
    cal = calibrate(calibration_pool, rules, k, ns, orders=orders, difficulty=difficulty, n_bins=n_bins,
                    switch_z=switch_z)
    feats = pilot_feature_rows(_answer_ids(pilot_answers, k), np.asarray(pilot_tokens, dtype=float))
    lengths = [float(np.mean(t)) if len(t) else cal.mean_tokens for t in pilot_tokens]
    return choose(problem_ids, feats, prompt_tokens, lengths, cal, pricer, budget)

