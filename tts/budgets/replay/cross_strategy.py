"""Replay the cross-strategy allocator on a sample pool against the best single strategy.

``tts budget simulate --strategies vote,best_of_n,...`` and ``benchmarks/cross_strategy.py``.
Honesty as in :mod:`tts.budgets.replay.simulate`: problems are split into folds; a fold's difficulty
model, bin edges and per-(rule, bin) curves are fitted on the OTHER folds
(:func:`tts.budgets.cross_allocator.calibrate`), its plans use only its own pilot samples
(answers, lengths), and each fold is allocated with its share of the budget. ``correct`` grades
the outcome and fits the other folds' curves; it never decides a problem's own plan.

Compared at matched cost (realised cost, in the chosen unit, over random orderings):

* uniform: one rule at the same n on every problem, for every rule and n of the ladder; the
  "best single strategy" is the rule with the highest uniform accuracy at ``target_n`` (chosen
  in hindsight on all problems, which favours the baseline);
* each rule alone under the allocator (n per problem), and the cross-strategy allocator
  (rule and n per problem).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from tts.benchmarks.pool import ModelPool
from tts.budgets.allocator import greedy_path
from tts.budgets.cross_allocator import (
    Difficulty,
    Pricer,
    calibrate,
    ladder,
    option_costs,
    pilot_feature_rows,
)
from tts.budgets.replay.prefix import random_orders
from tts.budgets.replay.matched import Interval, ModeResult, compare_at_matched, interval
from tts.budgets.strategy_curves import SWITCH_Z, rule_outcomes

logger = logging.getLogger(__name__)


class CrossConfig(BaseModel):
    """Settings of one cross-strategy replay."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rules: tuple[str, ...] = ("vote", "shortest")
    """Selection rules to choose from (:data:`~tts.benchmarks.pool_draws.RULES`)."""
    target_n: int = Field(64, ge=1)
    """Uniform baseline's n; the best single rule at this n sets the accuracy and cost to match."""
    orderings: int = Field(10, ge=2)
    """Random orderings of each problem's samples (intervals are over these)."""
    seed: int = 0
    folds: int = Field(5, ge=2)
    pilot: int = Field(4, ge=1)
    difficulty: Difficulty = "learned"
    n_bins: int = Field(5, ge=1)
    switch_z: float = Field(SWITCH_Z, ge=0)
    """Noise guard: switch from the best pooled rule only where a gain exceeds this many standard
    errors (0: trust every fitted curve, as before the guard)."""
    max_n: int | None = Field(None, ge=1)
    tolerance: float = Field(0.0, ge=0.0, lt=1.0)
    bootstrap: int = Field(1000, ge=10)


@dataclass(frozen=True)
class CrossResult:
    """Uniform rules, single-rule allocators and the cross-strategy allocator on one model."""

    model: str
    unit: str
    rules: tuple[str, ...]
    target_n: int
    best_single: str
    uniform: dict[str, dict[str, Interval]]
    """Rule -> {"acc", "cost"} at target_n."""
    allocators: dict[str, ModeResult]
    """"cross" and each rule alone: cost to match the best single rule at target_n, and accuracy at its cost."""
    frontier: list[dict[str, float | None]]
    """At each uniform cost of the best rule (n on the ladder): mean accuracy of uniform best rule,
    best single-rule allocator and cross allocator."""
    chosen: dict[str, float]
    """Share of problems the cross allocator gives each rule at the best rule's target cost."""
    plans: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.int64), repr=False, compare=False)
    """``(orderings, problems)`` option index (into ``options``) the cross allocator chose at that cost, for audits."""
    options: tuple[tuple[str, int], ...] = ()
    """The (rule, n) options, in the order of ``plans``."""

    def to_json(self) -> dict[str, Any]:
        """JSON-ready (curves left out)."""
        def mode(m: ModeResult) -> dict[str, Any]:
            d = asdict(m)
            d.pop("curve_tokens")
            d.pop("curve_acc")
            d.pop("mode")
            d["cost_to_match"], d["cost_ratio"] = d.pop("tokens_to_match"), d.pop("token_ratio")
            d["acc_at_best_single_cost"], d["cost_at_best_single_budget"] = (d.pop("acc_at_uniform_tokens"),
                                                                            d.pop("tokens_at_uniform_budget"))
            return d

        return {"model": self.model, "unit": self.unit, "rules": list(self.rules), "target_n": self.target_n,
                "best_single": self.best_single,
                "uniform": {r: {k: asdict(v) for k, v in d.items()} for r, d in self.uniform.items()},
                "allocators": {k: mode(v) for k, v in self.allocators.items()},
                "frontier": self.frontier, "chosen": self.chosen}


def _realised_costs(pool: ModelPool, orders: np.ndarray, ns: list[int], k: int, pricer: Pricer
                    ) -> tuple[np.ndarray, np.ndarray]:
    """(R, P, len(ns)) realised cost of the first n samples drawn as pilot k + the rest (allocator),
    and as one n-sample request (uniform). Pools record no prompts: prompts cost 0."""
    p_idx = np.arange(pool.n_problems)[:, None]
    lengths = np.stack([np.nan_to_num(pool.tokens[p_idx, o]) for o in orders]).astype(np.int64)  # (R, P, S)
    if pricer.unit == "samples" or (pricer.unit == "tokens" and pricer.verifier is None):
        cum = np.cumsum(np.ones_like(lengths) if pricer.unit == "samples" else lengths, axis=2)
        c = cum[:, :, np.asarray(ns) - 1].astype(float)
        return c, c
    alloc = np.zeros((*lengths.shape[:2], len(ns)))
    unif = np.zeros_like(alloc)
    for r in range(lengths.shape[0]):
        for p in range(lengths.shape[1]):
            row = lengths[r, p].tolist()
            pilot = pricer.request(0, row[:k])
            for j, n in enumerate(ns):
                alloc[r, p, j] = pilot + pricer.request(0, row[k:n])
                unif[r, p, j] = pricer.request(0, row[:n])
    return alloc, unif


def _ladder_for(pool: ModelPool, cfg: CrossConfig, pricer: Pricer) -> tuple[int, int, list[int]]:
    """Check that ``pool`` can be replayed under ``cfg``; the most samples every problem has (up to
    ``max_n``), the pilot size k and the ladder of n (``target_n`` included).

    Raises:
        ValueError: Token counts missing for a token-priced unit, fewer problems than folds, or a
            target n beyond the samples every problem has.
    """
    if not pool.has_tokens and pricer.unit != "samples":
        raise ValueError(f"model {pool.model!r} has samples without num_tokens; price it in samples "
                         "(--budget-unit samples) or use a pool with token counts")
    if pool.n_problems < cfg.folds:
        raise ValueError(f"{pool.n_problems} problems cannot be split into {cfg.folds} folds; lower --folds")
    have = int(pool.counts.min())
    n_max = min(cfg.max_n or have, have)
    if cfg.target_n > n_max:
        raise ValueError(f"target n={cfg.target_n} exceeds the {n_max} samples every problem has; pick n <= {n_max}")
    k = min(cfg.pilot, cfg.target_n)
    ns = ladder(k, n_max)
    if cfg.target_n not in ns:
        ns = sorted(set(ns) | {cfg.target_n})
    return n_max, k, ns


def _expected_option_values(pool: ModelPool, cfg: CrossConfig, k: int, ns: list[int], orders: np.ndarray,
                            outcomes: dict[str, np.ndarray], fold: np.ndarray, real_alloc: np.ndarray,
                            options: list[tuple[str, int]], pricer: Pricer) -> tuple[np.ndarray, np.ndarray]:
    """(R, P, O) expected cost and accuracy of every (rule, n) option per ordering and problem.

    A fold's values come from a calibration fitted on the OTHER folds, read at the fold's own pilot
    features (its first k samples in each ordering); the cost is the realised pilot plus the
    predicted rest. So a problem's plan never sees its own grades.
    """
    rules = tuple(cfg.rules)
    p_idx = np.arange(pool.n_problems)[:, None]
    feats = np.stack([pilot_feature_rows(pool.answers[p_idx, o[:, :k]], np.nan_to_num(pool.tokens[p_idx, o[:, :k]]))
                      for o in orders])  # (R, P, d)
    pilot_len = np.stack([np.nan_to_num(pool.tokens[p_idx, o[:, :k]]).mean(axis=1) for o in orders])  # (R, P)
    R = orders.shape[0]
    exp_cost = np.zeros((R, pool.n_problems, len(options)))
    exp_acc = np.zeros_like(exp_cost)
    for f in np.unique(fold).tolist():
        tr, te = np.nonzero(fold != f)[0], np.nonzero(fold == f)[0]
        cal = calibrate(pool, rules, k, ns, orders=orders, outcomes=outcomes, problems=tr,
                        difficulty=cfg.difficulty, n_bins=cfg.n_bins, switch_z=cfg.switch_z)
        for r in range(R):
            exp_acc[r, te] = cal.accuracy(cal.bins(feats[r, te]))
            exp_cost[r, te] = real_alloc[r, te, 0][:, None] + option_costs(pricer, options, [0] * len(te),
                                                                           pilot_len[r, te], k)
    return exp_cost, exp_acc


def _budget_grid(exp_cost: np.ndarray, unif_cost: np.ndarray, fold: np.ndarray,
                 sets: dict[str, list[int]], n_problems: int) -> np.ndarray:
    """300 total budgets, geometric, from where every fold of every ordering can pay its cheapest
    plans under every option set (each fold gets its share of the total) to past the dearest."""
    R = exp_cost.shape[0]
    lo = max(float(exp_cost[r][np.ix_(np.nonzero(fold == f)[0], cols)].min(axis=1).sum()) * n_problems
             / np.sum(fold == f) for r in range(R) for f in np.unique(fold).tolist() for cols in sets.values())
    hi = float(max(exp_cost.max(axis=2).sum(axis=1).max(), unif_cost.max()) * 1.01)
    return np.geomspace(max(lo, 1e-300), max(hi, lo * 1.01), 300)


def _fold_path(c: np.ndarray, a: np.ndarray, g: np.ndarray, pd: np.ndarray, share: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """One fold's greedy upgrade path, planned on expected cost ``c`` and accuracy ``a`` (problems x
    options) and read at each budget ``share``: the realised correct count and realised cost
    (``g``, ``pd``) of the plans that fit, NaN where a share cannot pay the cheapest plans.
    Also the path itself (start options, upgraded problems, their new options, upgrades per share)."""
    start, probs, opts, cum = greedy_path(c, a)
    steps = np.searchsorted(cum, share, side="right")  # upgrades that fit each share
    rows = np.arange(c.shape[0])
    base = float(c[rows, start].sum())
    cur = start.copy()
    d_ok = np.zeros(len(probs))
    d_paid = np.zeros(len(probs))
    for i, (q, o) in enumerate(zip(probs.tolist(), opts.tolist())):
        d_ok[i], d_paid[i] = g[q, o] - g[q, cur[q]], pd[q, o] - pd[q, cur[q]]
        cur[q] = o
    ok0, paid0 = float(g[rows, start].sum()), float(pd[rows, start].sum())
    cok = np.concatenate([[ok0], ok0 + np.cumsum(d_ok)])
    cpd = np.concatenate([[paid0], paid0 + np.cumsum(d_paid)])
    fits = share >= base * (1 - 1e-12)
    return np.where(fits, cok[steps], np.nan), np.where(fits, cpd[steps], np.nan), (start, probs, opts, steps)


def _replay_set(cols: list[int], grid: np.ndarray, u_cost: np.ndarray, frontier_budgets: np.ndarray,
                fold: np.ndarray, exp_cost: np.ndarray, exp_acc: np.ndarray, got: np.ndarray, paid: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The allocator restricted to options ``cols``, per ordering, each fold allocated its share.

    Returns accuracy and realised cost at each budget of ``grid`` (R, G); accuracy and cost at the
    best single rule's uniform cost of each ordering (R, 2); accuracy at each frontier budget
    (R, F); and the option (index into all options) each problem ends with at that uniform cost (R, P).
    """
    R, n_problems = exp_cost.shape[:2]
    acc = np.zeros((R, len(grid)))
    cost = np.zeros_like(acc)
    at_u = np.zeros((R, 2))
    pts = np.zeros((R, len(frontier_budgets)))
    picks = np.zeros((R, n_problems), dtype=np.int64)
    for r in range(R):
        budgets = np.concatenate([grid, [u_cost[r]], frontier_budgets])
        ok_sum = np.zeros(len(budgets))
        cost_sum = np.zeros(len(budgets))
        for f in np.unique(fold).tolist():
            te = np.nonzero(fold == f)[0]
            ok, spent, (start, probs, opts, steps) = _fold_path(
                exp_cost[r][np.ix_(te, cols)], exp_acc[r][np.ix_(te, cols)], got[r][np.ix_(te, cols)],
                paid[r][np.ix_(te, cols)], budgets * len(te) / n_problems)
            ok_sum += ok
            cost_sum += spent
            fin = start.copy()  # which option each problem ends with at the best rule's target cost
            for q, o in zip(probs[: steps[len(grid)]].tolist(), opts[: steps[len(grid)]].tolist()):
                fin[q] = o
            picks[r, te] = np.asarray(cols)[fin]
        acc[r], cost[r] = ok_sum[: len(grid)] / n_problems, cost_sum[: len(grid)]
        at_u[r] = ok_sum[len(grid)] / n_problems, cost_sum[len(grid)]
        pts[r] = ok_sum[len(grid) + 1:] / n_problems
    return acc, cost, at_u, pts, picks


def _frontier(ns: list[int], rules: tuple[str, ...], best: str, frontier_budgets: np.ndarray,
              unif_acc: dict[str, np.ndarray], at_points: dict[str, np.ndarray]) -> list[dict[str, float | None]]:
    """At each uniform cost of the best rule (n on the ladder): mean accuracy of the uniform best
    rule, of the best rule at that n in hindsight, of the best single-rule allocator and of the
    cross allocator (None where the budget cannot pay every fold's pilot)."""
    def mean(x: np.ndarray) -> float | None:
        return float(np.mean(x)) if np.all(np.isfinite(x)) else None

    frontier = []
    for j, n in enumerate(ns):
        singles = [v for v in (mean(at_points[r][:, j]) for r in rules) if v is not None]
        single = max(singles) if singles else None
        frontier.append({"n": int(n), "cost": float(frontier_budgets[j]),
                         "uniform_best": float(unif_acc[best][:, j].mean()),
                         "uniform_any_best": float(max(unif_acc[r][:, j].mean() for r in rules)),
                         "single_allocator_best": single, "cross": mean(at_points["cross"][:, j])})
    return frontier


def cross_replay(pool: ModelPool, cfg: CrossConfig | None = None, pricer: Pricer | None = None) -> CrossResult:
    """Replay the cross-strategy allocator, each rule alone, and uniform rules on one model.

    Args:
        pool: One model's samples with token counts (and scores for score-based rules).
        cfg: Settings.
        pricer: Cost unit (default tokens). A pricer with a verifier adds its passes to the expected
            costs of score-based rules but not yet to the realised ones (no caller passes one:
            ``tts budget simulate`` and benchmarks/cross_strategy.py price generation only).

    Raises:
        CalibrationError: The pool lacks what a rule needs (the message names it).
        ValueError: Too few problems or samples for the settings.
    """
    cfg = cfg or CrossConfig()
    pricer = pricer or Pricer("tokens")
    n_max, k, ns = _ladder_for(pool, cfg, pricer)
    rules = tuple(cfg.rules)
    rng = np.random.default_rng(cfg.seed)
    fold = rng.permutation(pool.n_problems) % cfg.folds
    orders = random_orders(pool.mask, cfg.orderings, rng)
    outcomes = rule_outcomes(pool, orders, rules, n_max)  # rule -> (R, P, n_max); grading and other folds' curves
    real_alloc, real_unif = _realised_costs(pool, orders, ns, k, pricer)
    options = [(r, n) for r in rules for n in ns]
    n_col = {n: j for j, n in enumerate(ns)}
    sets = {"cross": list(range(len(options)))}
    sets.update({r: [j for j, (rr, _) in enumerate(options) if rr == r] for r in rules})
    # 1. Expected costs and accuracies of every option, fitted on the other folds.
    exp_cost, exp_acc = _expected_option_values(pool, cfg, k, ns, orders, outcomes, fold, real_alloc, options, pricer)
    # Realised correctness and cost of each option.
    got = np.stack([outcomes[r][:, :, n - 1] for r, n in options], axis=2)  # (R, P, O)
    paid = np.stack([real_alloc[:, :, n_col[n]] for _, n in options], axis=2)
    # 2. Uniform rules at every n.
    unif_acc = {r: np.stack([outcomes[r][:, :, n - 1].mean(axis=1) for n in ns], axis=1) for r in rules}  # (R, N)
    unif_cost = real_unif.sum(axis=1)  # (R, N)
    t = n_col[cfg.target_n]
    best = max(rules, key=lambda r: unif_acc[r][:, t].mean())
    u_acc, u_cost = unif_acc[best][:, t], unif_cost[:, t]
    # 3. Greedy paths per ordering and fold, read at a grid of budgets (each fold its share).
    grid = _budget_grid(exp_cost, unif_cost, fold, sets, pool.n_problems)
    frontier_budgets = unif_cost.mean(axis=0)
    allocators: dict[str, ModeResult] = {}
    at_points: dict[str, np.ndarray] = {}
    for name, cols in sets.items():
        acc, cost, at_u, at_points[name], picks = _replay_set(cols, grid, u_cost, frontier_budgets, fold,
                                                              exp_cost, exp_acc, got, paid)
        allocators[name] = compare_at_matched(name, grid, acc, cost, u_acc, u_cost, np.nan_to_num(at_u), seed=cfg.seed,
                                              bootstrap=cfg.bootstrap, tolerance=cfg.tolerance)
        if name == "cross":  # which rule each problem ends with at the best rule's target cost
            chosen = {r: float(np.mean([options[j][0] == r for j in picks.ravel().tolist()])) for r in rules}
            plans = picks
    frontier = _frontier(ns, rules, best, frontier_budgets, unif_acc, at_points)
    uniform = {r: {"acc": interval(unif_acc[r][:, t]), "cost": interval(unif_cost[:, t])} for r in rules}
    logger.info("%s: best single %s; cross ratio %s", pool.model, best, allocators["cross"].token_ratio)
    return CrossResult(pool.model, pricer.unit, rules, cfg.target_n, best, uniform, allocators, frontier, chosen,
                       plans, tuple(options))
