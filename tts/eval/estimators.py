"""Vectorised accuracy estimators over a sample pool, at every sample count n at once.

A pool holds N samples per problem; the question a sweep asks is "what would a rule score with n of
them?" for every n in 1..N. Four rules, all on one model's :class:`~tts.benchmarks.pool.ModelPool`
(the pool loader's dense ``(problems, samples)`` arrays; this module adds no loader):

* ``pass``: some sample of the n is correct. Exact, unbiased (Chen et al., 2021, "Evaluating Large
  Language Models Trained on Code", eq. 1): ``1 - C(N-c, n) / C(N, n)``.
* ``best_of_n``: the highest-scored answered sample of the n. Exact: the top score among n drawn
  is level v with probability ``[C(#<=v, n) - C(#<v, n)] / C(N, n)``; or bootstrap.
* ``vote``: plurality vote over the answers of the n. Bootstrap (no closed form used).
* ``weighted_vote``: each sample votes with a positive weight from its score. Bootstrap.

Conventions, shared by the vectorised code and the plain-Python reference :func:`loop_outcomes`:

* Subsets: a bootstrap draw is a random permutation of a problem's real samples; its first n are a
  uniform n-subset drawn without replacement (so one draw serves every n; the same draws can be
  shared by all rules and models, see :func:`draw_orders`).
* Ties (equal votes, equal scores) count the share of correct answers among the tied ones, which is
  the expectation of a uniformly random tie-break; so maj@N and best@N on the full pool are exact.
* Samples without an answer abstain from votes and are picked by ``best_of_n`` only when no drawn
  sample has an answer (then the outcome is wrong). An answer's grade is the mean ``correct`` of
  the samples carrying it (0 or 1 in any consistently graded pool).
* ``correct`` only grades the chosen answer; no decision reads it (docs/architecture.md,
  "Honest simulation").
  It does let the code skip the draws of problems whose every possible choice grades the same.

The bootstrap's per-draw outcomes are computed in :mod:`tts.benchmarks.pool_draws` (vectorised over
draws and problems); this module turns them, and the exact estimators, into curves with intervals.

Intervals: every accuracy comes with a 95% percentile-bootstrap interval over *problems*
(:func:`problem_interval`): the per-problem expected accuracy (exact, or its mean over draws, so
the draws' Monte Carlo noise is included) is resampled with replacement, 1000 times by default.

Example:
    >>> mp = load_pool("math_qwen25_rm8.jsonl.gz")["qwen2.5-math-instruct"]   # doctest: +SKIP
    >>> majority_vote(mp).at(8)                  # (accuracy, 95% low, high)  # doctest: +SKIP
    (0.925, 0.875, 0.97)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

import numpy as np

from tts.benchmarks.pool import ModelPool
from tts.benchmarks.pool_draws import RULES as SELECTION_RULES
from tts.benchmarks.pool_draws import (
    Weighting,
    best_score_outcomes,
    draw_orders,
    rule_name,
    sample_scores,
    score_levels,
    vote_outcomes,
    vote_weights,
)

Rule = str
RULES: tuple[Rule, ...] = ("pass", *(r for r, info in SELECTION_RULES.items() if not info.needs_tokens))
"""``pass`` (an oracle, not a selection) and the selection rules of the one table
(:data:`tts.benchmarks.pool_draws.RULES`) that need no token counts: vote, best_of_n, weighted_vote."""


@dataclass(frozen=True, eq=False)
class Curve:
    """Accuracy of one rule at each n, with a 95% interval over problems.

    Args:
        rule: The rule ("pass", "vote", "best_of_n", "weighted_vote").
        method: "exact" (combinatorial expectation) or "bootstrap" (mean over ``draws`` subsets).
        ns: The sample counts, ascending.
        mean, lo, hi: Accuracy and its 95% percentile-bootstrap interval over problems, per n.
        per_problem: ``(n_problems, len(ns))`` expected accuracy of each problem.
        draws: Subsets drawn per problem (0 for exact).
    """

    rule: str
    method: str
    ns: np.ndarray
    mean: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    per_problem: np.ndarray
    draws: int

    def at(self, n: int) -> tuple[float, float, float]:
        """(accuracy, low, high) at ``n`` samples."""
        hit = np.flatnonzero(self.ns == n)
        if not len(hit):
            raise KeyError(f"n={n} is not on this curve; it has n in {self.ns.tolist()}")
        i = int(hit[0])
        return float(self.mean[i]), float(self.lo[i]), float(self.hi[i])


# --- sample counts ---------------------------------------------------------------------------------------


def check_ns(pool: ModelPool, ns: Sequence[int] | np.ndarray | None) -> np.ndarray:
    """Sorted unique sample counts, default 1..(fewest samples of any problem).

    Raises:
        ValueError: An n is below 1 or above some problem's sample count.
    """
    fewest = int(pool.counts.min()) if pool.n_problems else 0
    if ns is None:
        ns = np.arange(1, fewest + 1)
    ns = np.unique(np.asarray(ns, dtype=np.int64))
    if not len(ns) or ns[0] < 1:
        raise ValueError(f"sample counts must be >= 1, got {ns.tolist()}; pass ns such as range(1, {fewest + 1})")
    if ns[-1] > fewest:
        worst = pool.problem_ids[int(np.argmin(pool.counts))]
        raise ValueError(f"n={int(ns[-1])} exceeds the {fewest} samples of problem {worst!r} of model "
                         f"{pool.model}; pass ns up to {fewest} or drop short problems with pool.subset()")
    return ns


# --- exact estimators ----------------------------------------------------------------------------


def _choose_ratio(total: int, n_max: int) -> np.ndarray:
    """``R[x, n] = C(x, n) / C(total, n)`` for x in 0..total, n in 0..n_max, as running products
    (Chen et al.'s numerically stable form; no big binomials)."""
    x = np.arange(total + 1)[:, None]
    i = np.arange(n_max)[None, :]
    factors = np.clip(x - i, 0, None) / (total - i)
    return np.concatenate([np.ones((total + 1, 1)), np.cumprod(factors, axis=1)], axis=1)


def _exact(pool: ModelPool, ns: np.ndarray, hi: np.ndarray, lo: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``sum_s w[p, s] * (R_N(hi[p, s], n) - R_N(lo[p, s], n))`` per problem and n (N = its count)."""
    out = np.zeros((pool.n_problems, len(ns)))
    counts = pool.counts
    for total in np.unique(counts).tolist():  # one table per distinct sample count
        rows = np.flatnonzero(counts == total)
        r = _choose_ratio(total, int(ns[-1]))[:, ns]
        h, lw = np.minimum(hi[rows], total), np.minimum(lo[rows], total)
        out[rows] = np.einsum("ps,psk->pk", w[rows], r[h] - r[lw])
    return out


def pass_per_problem(pool: ModelPool, ns: np.ndarray) -> np.ndarray:
    """Unbiased pass@n per problem, ``1 - C(N-c, n)/C(N, n)`` (Chen et al., 2021)."""
    c = (pool.correct & pool.mask).sum(axis=1)
    n_all = pool.counts
    # One "sample" per problem with weight 1: 1 - R(N-c) = R(N) - R(N-c).
    return _exact(pool, ns, n_all[:, None], (n_all - c)[:, None], np.ones((pool.n_problems, 1)))


def best_score_per_problem(pool: ModelPool, ns: np.ndarray, scores: np.ndarray | None = None) -> np.ndarray:
    """Exact expected best-of-n accuracy per problem (ties shared, answerless samples last)."""
    below, at_most = score_levels(pool, scores)
    ok = pool.correct & (pool.answers >= 0) & pool.mask
    # Each correct sample at level v earns its share 1/m_v of P(top drawn level = v).
    weight = np.where(ok, 1.0 / np.maximum(at_most - below, 1), 0.0)
    return _exact(pool, ns, at_most, below, weight)


# --- intervals and curves -------------------------------------------------------------------------


@lru_cache(maxsize=16)
def _resample_counts(n_problems: int, n_boot: int, seed: int) -> np.ndarray:
    """``(n_boot, n_problems)`` multinomial counts: how often each problem is drawn per resample
    (the same matrix for every curve of a pool, so curves share their resamples)."""
    counts = np.random.default_rng(seed).multinomial(n_problems, np.full(n_problems, 1.0 / n_problems), size=n_boot)
    counts.setflags(write=False)
    return counts


def problem_interval(per_problem: np.ndarray, n_boot: int = 1000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """95% percentile-bootstrap interval of the mean over problems (rows of ``per_problem``).

    Resamples problems with replacement ``n_boot`` times (multinomial counts, one matrix product
    for all columns); the bounds are widened to contain the mean where rounding would exclude it.
    """
    v = np.asarray(per_problem, dtype=np.float64)
    boot = _resample_counts(len(v), n_boot, seed) @ v / len(v)
    lo, hi = np.percentile(boot, [2.5, 97.5], axis=0)
    mean = v.mean(axis=0)
    return np.minimum(lo, mean), np.maximum(hi, mean)


def _curve(rule: str, method: str, ns: np.ndarray, per_problem: np.ndarray, draws: int, seed: int) -> Curve:
    lo, hi = problem_interval(per_problem, seed=seed)
    return Curve(rule, method, ns, per_problem.mean(axis=0), lo, hi, per_problem, draws)


def _bootstrap(pool: ModelPool, ns: np.ndarray, order: np.ndarray | None, draws: int, seed: int,
               outcomes) -> tuple[np.ndarray, int]:
    if order is None:
        order = draw_orders(pool.counts, int(ns[-1]), draws, seed)
    return outcomes(order, ns) / order.shape[1], order.shape[1]


def pass_at_k(pool: ModelPool, ns: Sequence[int] | None = None, *, seed: int = 0) -> Curve:
    """Unbiased pass@n for every n (exact); ``seed`` seeds the interval's bootstrap."""
    ns = check_ns(pool, ns)
    return _curve("pass", "exact", ns, pass_per_problem(pool, ns), 0, seed)


def majority_vote(pool: ModelPool, ns: Sequence[int] | None = None, *, draws: int = 1000, seed: int = 0,
                  order: np.ndarray | None = None) -> Curve:
    """Plurality vote accuracy for every n, bootstrapped over ``draws`` subsets (or ``order``)."""
    ns = check_ns(pool, ns)
    per, d = _bootstrap(pool, ns, order, draws, seed, lambda o, k: vote_outcomes(pool, o, None, k, per_draw=False))
    return _curve("vote", "bootstrap", ns, per, d, seed)


def weighted_vote(pool: ModelPool, ns: Sequence[int] | None = None, *, weighting: Weighting = "score",
                  scores: np.ndarray | None = None, draws: int = 1000, seed: int = 0,
                  order: np.ndarray | None = None) -> Curve:
    """Score-weighted vote accuracy for every n (weights from :func:`vote_weights`), bootstrapped."""
    ns = check_ns(pool, ns)
    w = vote_weights(pool, weighting, scores)
    per, d = _bootstrap(pool, ns, order, draws, seed, lambda o, k: vote_outcomes(pool, o, w, k, per_draw=False))
    return _curve("weighted_vote", "bootstrap", ns, per, d, seed)


def best_of_n(pool: ModelPool, ns: Sequence[int] | None = None, *, scores: np.ndarray | None = None,
              method: Literal["exact", "bootstrap"] = "exact", draws: int = 1000, seed: int = 0,
              order: np.ndarray | None = None) -> Curve:
    """Best-of-n by score for every n: exact by default, or bootstrapped like the votes."""
    ns = check_ns(pool, ns)
    if method == "exact":
        return _curve("best_of_n", "exact", ns, best_score_per_problem(pool, ns, scores), 0, seed)
    if method != "bootstrap":
        raise ValueError(f"unknown method {method!r}; use 'exact' or 'bootstrap'")
    s = sample_scores(pool, scores)
    per, d = _bootstrap(pool, ns, order, draws, seed, lambda o, k: best_score_outcomes(pool, o, s, k, per_draw=False))
    return _curve("best_of_n", "bootstrap", ns, per, d, seed)


def pool_curves(pool: ModelPool, rules: Sequence[Rule] = RULES, ns: Sequence[int] | None = None, *,
                draws: int = 1000, seed: int = 0, scores: np.ndarray | None = None,
                weighting: Weighting = "score") -> dict[str, Curve]:
    """Every requested rule's curve, exact where an estimator exists, sharing one set of draws.

    Score rules are skipped (not raised) when the pool has no scores and none are given.
    """
    ns = check_ns(pool, ns)
    scored = scores is not None or pool.has_scores
    order = None
    if any(r in ("vote", "weighted_vote") and (r == "vote" or scored) for r in map(rule_name, rules)):
        order = draw_orders(pool.counts, int(ns[-1]), draws, seed)
    out: dict[str, Curve] = {}
    for rule in map(rule_name, rules):
        if rule == "pass":
            out[rule] = pass_at_k(pool, ns, seed=seed)
        elif rule == "vote":
            out[rule] = majority_vote(pool, ns, seed=seed, order=order)
        elif rule == "best_of_n" and scored:
            out[rule] = best_of_n(pool, ns, scores=scores, seed=seed)
        elif rule == "weighted_vote" and scored:
            out[rule] = weighted_vote(pool, ns, weighting=weighting, scores=scores, seed=seed, order=order)
        elif rule not in RULES:
            raise ValueError(f"unknown rule {rule!r}; use one of {', '.join(RULES)}")
    return out
