"""Vectorised accuracy estimators over a sample pool, at every sample count n at once.

A pool holds N samples per problem; the question a sweep asks is "what would a rule score with n of
them?" for every n in 1..N. Four rules, all on one model's :class:`~tts.benchmarks.pool.ModelPool`
(the pool loader's dense ``(problems, samples)`` arrays; this module adds no loader):

* ``pass``: some sample of the n is correct. Exact, unbiased (Chen et al., 2021, "Evaluating Large
  Language Models Trained on Code", eq. 1): ``1 - C(N-c, n) / C(N, n)``.
* ``best_score``: the highest-scored answered sample of the n. Exact: the top score among n drawn
  is level v with probability ``[C(#<=v, n) - C(#<v, n)] / C(N, n)``; or bootstrap.
* ``majority``: plurality vote over the answers of the n. Bootstrap (no closed form used).
* ``weighted_vote``: each sample votes with a positive weight from its score. Bootstrap.

Conventions, shared by the vectorised code and the plain-Python reference :func:`loop_outcomes`:

* Subsets: a bootstrap draw is a random permutation of a problem's real samples; its first n are a
  uniform n-subset drawn without replacement (so one draw serves every n; the same draws can be
  shared by all rules and models, see :func:`draw_orders`).
* Ties (equal votes, equal scores) count the share of correct answers among the tied ones, which is
  the expectation of a uniformly random tie-break; so maj@N and best@N on the full pool are exact.
* Samples without an answer abstain from votes and are picked by ``best_score`` only when no drawn
  sample has an answer (then the outcome is wrong). An answer's grade is the mean ``correct`` of
  the samples carrying it (0 or 1 in any consistently graded pool).
* ``correct`` only grades the chosen answer; no decision reads it (DESIGN.md, "Honest simulation").
  It does let the code skip the draws of problems whose every possible choice grades the same.

Vectorised: the bootstrap walks the prefix positions 1..n once (a Python loop of at most n steps);
each step is a few numpy operations over all draws and problems at once. There is no loop over
draws or problems; problems whose every possible choice grades the same need no draws at all.

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

Rule = Literal["pass", "majority", "best_score", "weighted_vote"]
RULES: tuple[Rule, ...] = ("pass", "majority", "best_score", "weighted_vote")
Weighting = Literal["score", "exp", "sigmoid"]
_DENSE_COLUMNS = 8
"""Problems with up to this many repeated answers keep one vote array per answer."""
_CHUNK_SLICE = 1 << 16
"""Bootstrap draws are processed in chunks of about this many (draw, problem) pairs, so that one
prefix step's arrays stay in cache."""


@dataclass(frozen=True, eq=False)
class Curve:
    """Accuracy of one rule at each n, with a 95% interval over problems.

    Args:
        rule: The rule ("pass", "majority", "best_score", "weighted_vote").
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


# --- inputs ---------------------------------------------------------------------------------------


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


def sample_scores(pool: ModelPool, scores: np.ndarray | None = None) -> np.ndarray:
    """The selection scores (pool's, or ``scores``, same shape), checked finite on answered samples.

    Raises:
        ValueError: An answered sample has no (or a non-finite) score.
    """
    s = pool.scores if scores is None else np.asarray(scores, dtype=np.float64)
    if s.shape != pool.answers.shape:
        raise ValueError(f"scores have shape {s.shape}, the pool {pool.answers.shape}; pass one score per slot")
    bad = int((~np.isfinite(s) & pool.mask & (pool.answers >= 0)).sum())
    if bad:
        raise ValueError(f"{bad} samples of model {pool.model} have no finite score; score-based rules need "
                         f"one per sample (pass scores=..., e.g. -pool.tokens, or use rule 'majority')")
    return s


def vote_weights(pool: ModelPool, weighting: Weighting = "score", scores: np.ndarray | None = None) -> np.ndarray:
    """Positive vote weights of the answered samples (0 elsewhere) from scores: the score itself,
    ``exp(score - problem max)`` or its logistic sigmoid (for logit-like scores such as a
    reward model's).

    Raises:
        ValueError: Unknown weighting, missing scores, or a weight that is not > 0.
    """
    answered = pool.mask & (pool.answers >= 0)
    s = np.where(answered, sample_scores(pool, scores), 0.0)  # abstentions cast no vote
    if weighting == "score":
        w = s
    elif weighting == "exp":
        top = np.max(np.where(answered, s, -np.inf), axis=1, keepdims=True, initial=-np.inf)
        w = np.exp(s - np.where(np.isfinite(top), top, 0.0))
    elif weighting == "sigmoid":
        w = 0.5 * (1.0 + np.tanh(0.5 * s))
    else:
        raise ValueError(f"unknown weighting {weighting!r}; use 'score', 'exp' or 'sigmoid'")
    if np.any((w <= 0) & answered):
        raise ValueError(f"weighted vote needs weights > 0, but model {pool.model} has weights <= 0 with "
                         f"weighting={weighting!r}; use weighting='exp' or 'sigmoid' for such scores")
    return np.where(answered, w, 0.0)


def draw_orders(counts: np.ndarray, n_max: int, draws: int, seed: int | np.random.Generator = 0) -> np.ndarray:
    """Random subsets, as ``(n_max, draws, n_problems)`` slot indices, prefix position first: for
    each draw and problem, the first ``n_max`` of a uniformly random permutation of the problem's
    real samples (slots ``0..counts[p]-1``), so that its first n are a uniform n-subset.

    Raises:
        ValueError: ``n_max`` exceeds some problem's sample count.
    """
    rng = np.random.default_rng(seed)
    counts = np.asarray(counts, dtype=np.int64)
    width = int(counts.max())
    if n_max > counts.min():
        raise ValueError(f"n_max={n_max} exceeds the fewest samples of a problem ({counts.min()}); lower it")
    dtype = np.uint8 if width <= 256 else np.int32
    if np.all(counts == width):  # every row full: shuffle in place, no sort
        rows = np.tile(np.arange(width, dtype=dtype), (draws * len(counts), 1))
        rng.permuted(rows, axis=1, out=rows)
        perm = rows.reshape(draws, len(counts), width)
    else:
        keys = rng.random((draws, len(counts), width))
        keys[:, np.arange(width)[None, :] >= counts[:, None]] = np.inf  # padding sorts last
        perm = np.argsort(keys, axis=-1).astype(dtype)
    return np.ascontiguousarray(perm[..., :n_max].transpose(2, 0, 1))


# --- per-draw outcomes (vectorised) ---------------------------------------------------------------


def _score_levels(pool: ModelPool, scores: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Per slot, how many real samples rank strictly below it and how many at or below it, by
    score, with answerless samples below every answered one (equal scores, equal ranks)."""
    s = sample_scores(pool, scores)
    p_n, width = s.shape
    key = np.where(pool.mask, np.where(pool.answers >= 0, s, -np.inf), np.inf).ravel()
    row = np.repeat(np.arange(p_n), width)
    order = np.lexsort((key, row))
    kv, rw = key[order], row[order]
    new = np.ones(len(kv), dtype=bool)
    new[1:] = (kv[1:] != kv[:-1]) | (rw[1:] != rw[:-1])
    run = np.cumsum(new) - 1
    first = np.flatnonzero(new)
    below = np.empty(len(kv), dtype=np.int64)
    below[order] = first[run] - rw * width
    at_most = np.empty(len(kv), dtype=np.int64)
    at_most[order] = below[order] + np.bincount(run)[run]
    return below.reshape(p_n, width), at_most.reshape(p_n, width)


def _shortcuts(pool: ModelPool) -> tuple[np.ndarray, np.ndarray]:
    """Problems whose outcome needs no draws, for every rule here: all real samples answered and
    correct (1), no answered sample correct (0); and those whose answered samples are all correct
    but some abstain (the outcome is "some answered sample drawn yet"). Returns (constant outcome
    or NaN, the second mask)."""
    answered = pool.mask & (pool.answers >= 0)
    n_ans, n_ok = answered.sum(axis=1), (answered & pool.correct).sum(axis=1)
    const = np.where(n_ok == 0, 0.0, np.where(n_ok == pool.counts, 1.0, np.nan))
    return const, (n_ok > 0) & (n_ok == n_ans) & (n_ans < pool.counts)


def _codes(o: np.ndarray, *tables: np.ndarray) -> list[np.ndarray]:
    """``table[p, o[t, d, p]]`` of each table for an ``(n, D, P)`` order: one contiguous slice per
    prefix step."""
    flat = o.astype(np.int32)
    flat += (np.arange(o.shape[2], dtype=np.int32) * tables[0].shape[1])[None, None, :]
    return [np.take(tab.ravel(), flat) for tab in tables]


def _scan(step, grade: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Tie-shared correctness of "the entries with the largest x so far" after each prefix.

    ``step(t)`` gives x at position t for all (draw, problem) at once; ``grade[t]`` the grade of
    the entry at t. An entry equal to the running maximum joins the tie; a larger one starts a new
    tie. The loop runs over prefix positions (at most n), each step vectorised over all draws and
    problems.

    Returns:
        ``(len(cols), D, P)`` outcomes ``good / ties`` at the prefixes ``cols + 1``.
    """
    want = {int(c): i for i, c in enumerate(cols)}
    out = np.empty((len(cols), *grade.shape[1:]))
    top = ties = good = None
    for t in range(int(cols[-1]) + 1):
        x, g = step(t), grade[t]
        if t == 0:
            top = x.copy()
            ties = np.ones(x.shape, dtype=np.int16)
            good = g.astype(np.int16 if g.dtype == bool else np.float64)
        else:
            rose = x > top
            np.maximum(top, x, out=top)
            eq = x == top
            keep = ~rose
            ties *= keep
            ties += eq
            good *= keep
            good += (eq & g) if g.dtype == bool else eq * g
        if t in want:
            np.divide(good, ties, out=out[want[t]])
    return out


def _first_answered(answered: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """``(len(cols), D, P)``: some answered sample among the first ``cols + 1`` (a running OR)."""
    want = {int(c): i for i, c in enumerate(cols)}
    out = np.empty((len(cols), *answered.shape[1:]))
    seen = np.zeros(answered.shape[1:], dtype=bool)
    for t in range(int(cols[-1]) + 1):
        seen |= answered[t]
        if t in want:
            out[want[t]] = seen
    return out


def _slot_tables(pool: ModelPool) -> tuple[np.ndarray, np.ndarray]:
    """Per slot: its repeated answer's vote column (0, 1, ...), -1 without an answer, -2 when the
    answer occurs once in the problem; and the grade of its answer (mean ``correct`` of its samples)."""
    answered = pool.mask & (pool.answers >= 0)
    n_ans = max(int(pool.answers.max(initial=-1)) + 1, 1)
    p_idx, s_idx = np.nonzero(answered)
    key = p_idx * n_ans + pool.answers[p_idx, s_idx]
    count = np.bincount(key, minlength=pool.n_problems * n_ans).reshape(-1, n_ans)
    right = np.bincount(key, weights=pool.correct[p_idx, s_idx], minlength=count.size).reshape(-1, n_ans)
    repeated = count >= 2
    column = np.where(repeated, np.cumsum(repeated, axis=1) - 1, -2)
    rows, a = np.arange(pool.n_problems)[:, None], np.maximum(pool.answers, 0)
    cls = np.where(answered, column[rows, a], -1).astype(np.int16)
    grade = np.where(answered, right[rows, a] / np.maximum(count[rows, a], 1), 0.0)
    return cls, grade


def _run(pool: ModelPool, order: np.ndarray, cols: np.ndarray, per_draw: bool, chunk_fn,
         group: np.ndarray | None = None) -> np.ndarray:
    """Outcomes of all problems: constants filled in, "some answered sample drawn" problems by a
    running OR, the rest by ``chunk_fn(o, rows)`` over chunks of draws (``o``: ``(n, Dc, B)``),
    one call per ``group`` label of the problems."""
    if order.ndim != 3 or order.shape[2] != pool.n_problems or order.shape[0] < cols[-1] + 1:
        raise ValueError(f"order has shape {order.shape}; it needs (>= {cols[-1] + 1}, draws, {pool.n_problems}), "
                         f"e.g. draw_orders(pool.counts, n_max, draws)")
    if np.any(order[: cols[-1] + 1].max(axis=(0, 1)) >= pool.counts):
        raise ValueError("order picks slots beyond some problem's samples; draw it for this pool with "
                         "draw_orders(pool.counts, n_max, draws)")
    d_n = order.shape[1]
    const, first = _shortcuts(pool)
    out = np.zeros((len(cols), d_n, pool.n_problems) if per_draw else (pool.n_problems, len(cols)))
    fixed = np.isfinite(const)
    if per_draw:
        out[:, :, fixed] = const[fixed]
    else:
        out[fixed] = d_n * const[fixed][:, None]
    answered = pool.mask & (pool.answers >= 0)
    rest = ~fixed & ~first
    group = np.zeros(pool.n_problems, dtype=int) if group is None else group
    todo = [(np.flatnonzero(first), True)] + [(np.flatnonzero(rest & (group == g)), False)
                                               for g in np.unique(group[rest]).tolist()]
    for rows, is_first in todo:
        if not len(rows):
            continue
        step = max(1, _CHUNK_SLICE // len(rows))
        for d0 in range(0, d_n, step):
            o = order[: cols[-1] + 1, d0:d0 + step][:, :, rows]
            res = _first_answered(_codes(o, answered[rows])[0], cols) if is_first else chunk_fn(o, rows)
            if per_draw:
                out[:, d0:d0 + step, rows] = res
            else:
                out[rows] += res.sum(axis=1).T
    return out


def _cols(order: np.ndarray, ns: np.ndarray | None) -> np.ndarray:
    return np.arange(order.shape[0]) if ns is None else np.asarray(ns, dtype=np.intp) - 1


def vote_outcomes(pool: ModelPool, order: np.ndarray, weights: np.ndarray | None = None,
                  ns: np.ndarray | None = None, *, per_draw: bool = True) -> np.ndarray:
    """Per prefix, draw and problem, the (tie-shared) correctness of the plurality vote.

    Args:
        pool: One model's samples.
        order: ``(n_max, D, P)`` slot indices (:func:`draw_orders`).
        weights: Per-slot vote weights (> 0, :func:`vote_weights`); None = one vote each.
        ns: Prefix lengths to return (default all ``1..n_max``).
        per_draw: False = return the sum over draws, ``(P, len(ns))`` (saves memory).

    Returns:
        ``(len(ns), D, P)`` floats in [0, 1].
    """
    cols = _cols(order, ns)
    cls_all, grade_all = _slot_tables(pool)
    width = int(cls_all.max(initial=-1)) + 2  # vote columns plus one scratch column
    integral = bool(np.all(grade_all == np.round(grade_all)))
    # One gather per chunk: column (or the scratch one), repeated?, single? and grade packed.
    col = np.where(cls_all >= 0, cls_all, width - 1)
    packed = (col * 8 + (cls_all >= 0) * 4 + (cls_all == -2) * 2 + (grade_all > 0.5)).astype(np.int16)
    small = np.int8 if order.shape[0] < 127 else np.int16

    def chunk(o: np.ndarray, rows: np.ndarray) -> np.ndarray:
        tables = [packed[rows]] + ([] if integral else [grade_all[rows]]) + ([] if weights is None else [weights[rows]])
        code, *more = _codes(o, *tables)
        col_t, rep = code >> 3, (code & 4).astype(bool)
        grade = (code & 1).astype(bool) if integral else more.pop(0)
        single = ((code >> 1) & 1).astype(small)
        w = None if weights is None else more.pop(0)
        if w is not None:
            single = w * single
        # Running votes of every (draw, problem, repeated answer); x at step t is the votes of the
        # answer drawn at t, after it (an answer seen once in the problem: its own vote). Votes
        # only grow, so the answers tied at the top are exactly the steps whose x equals the
        # running maximum (see _scan). Sums are the same float additions, in draw order, as a
        # sequential tally (adding 0.0 elsewhere changes nothing), so exact ties stay ties.
        n_cols = int(cls_all[rows].max(initial=-1)) + 1
        dtype = small if w is None else np.float64
        if n_cols <= _DENSE_COLUMNS:  # few answers: one array per column, plain arithmetic
            votes = np.zeros((max(n_cols, 1), *o.shape[1:]), dtype=dtype)
            which = np.arange(max(n_cols, 1), dtype=col_t.dtype)[:, None, None]

            def step(t: int) -> np.ndarray:
                hit = col_t[t] == which
                np.add(votes, hit if w is None else hit * w[t], out=votes)
                return np.where(rep[t], (votes * hit).sum(axis=0, dtype=dtype), single[t])
        else:  # many answers: one flat array, gather and scatter at the drawn answer's column
            base = np.arange(o.shape[1] * o.shape[2], dtype=np.int32).reshape(o.shape[1:]) * width
            flat = np.zeros(base.size * width, dtype=dtype)

            def step(t: int) -> np.ndarray:
                slot = base + col_t[t]
                v = flat[slot] + (1 if w is None else w[t])
                flat[slot] = v
                return np.where(rep[t], v, single[t])

        return _scan(step, grade, cols)

    n_rep = cls_all.max(axis=1, initial=-1) + 1
    return _run(pool, order, cols, per_draw, chunk, np.searchsorted([1, 2, 4, _DENSE_COLUMNS], n_rep))


def best_score_outcomes(pool: ModelPool, order: np.ndarray, scores: np.ndarray | None = None,
                        ns: np.ndarray | None = None, *, per_draw: bool = True) -> np.ndarray:
    """Per prefix, draw and problem, the (tie-shared) correctness of the best-scored answered sample.

    Args and returns as :func:`vote_outcomes`; ``scores`` overrides the pool's (same shape).
    """
    cols = _cols(order, ns)
    below, _ = _score_levels(pool, scores)
    # Scores are replaced by their rank in the problem (same order, same ties, small integers),
    # packed with the grade: one gather. Answerless samples rank -1, under every answered one.
    level = np.where(pool.answers >= 0, below, -1)
    packed = (level * 2 + (pool.correct & (pool.answers >= 0))).astype(np.int16 if pool.n_samples < 16000 else np.int32)

    def chunk(o: np.ndarray, rows: np.ndarray) -> np.ndarray:
        code = _codes(o, packed[rows])[0]
        x = code >> 1
        return _scan(lambda t: x[t], (code & 1).astype(bool), cols)

    return _run(pool, order, cols, per_draw, chunk)


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
    below, at_most = _score_levels(pool, scores)
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
    return _curve("majority", "bootstrap", ns, per, d, seed)


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
        return _curve("best_score", "exact", ns, best_score_per_problem(pool, ns, scores), 0, seed)
    if method != "bootstrap":
        raise ValueError(f"unknown method {method!r}; use 'exact' or 'bootstrap'")
    s = sample_scores(pool, scores)
    per, d = _bootstrap(pool, ns, order, draws, seed, lambda o, k: best_score_outcomes(pool, o, s, k, per_draw=False))
    return _curve("best_score", "bootstrap", ns, per, d, seed)


def pool_curves(pool: ModelPool, rules: Sequence[Rule] = RULES, ns: Sequence[int] | None = None, *,
                draws: int = 1000, seed: int = 0, scores: np.ndarray | None = None,
                weighting: Weighting = "score") -> dict[str, Curve]:
    """Every requested rule's curve, exact where an estimator exists, sharing one set of draws.

    Score rules are skipped (not raised) when the pool has no scores and none are given.
    """
    ns = check_ns(pool, ns)
    scored = scores is not None or pool.has_scores
    order = None
    if any(r in ("majority", "weighted_vote") and (r == "majority" or scored) for r in rules):
        order = draw_orders(pool.counts, int(ns[-1]), draws, seed)
    out: dict[str, Curve] = {}
    for rule in rules:
        if rule == "pass":
            out[rule] = pass_at_k(pool, ns, seed=seed)
        elif rule == "majority":
            out[rule] = majority_vote(pool, ns, seed=seed, order=order)
        elif rule == "best_score" and scored:
            out[rule] = best_of_n(pool, ns, scores=scores, seed=seed)
        elif rule == "weighted_vote" and scored:
            out[rule] = weighted_vote(pool, ns, weighting=weighting, scores=scores, seed=seed, order=order)
        elif rule not in RULES:
            raise ValueError(f"unknown rule {rule!r}; use one of {', '.join(RULES)}")
    return out


# --- reference loop -------------------------------------------------------------------------------


def loop_outcomes(pool: ModelPool, order: np.ndarray, rule: Literal["majority", "best_score", "weighted_vote"],
                  weights: np.ndarray | None = None) -> np.ndarray:
    """The same outcomes as :func:`vote_outcomes` / :func:`best_score_outcomes`, by a plain Python
    loop over draws, problems and prefixes (the baseline of ``benchmarks/pool_estimators.py`` and
    the tests' reference). ``weights`` are vote weights for "weighted_vote", scores for
    "best_score"; slow by design."""
    answers, correct, order_l = pool.answers.tolist(), pool.correct.tolist(), order.transpose(1, 2, 0).tolist()
    w = None if weights is None else np.asarray(weights, dtype=np.float64).tolist()
    if rule == "best_score" and w is None:
        w = sample_scores(pool).tolist()
    grades = []
    for p in range(pool.n_problems):  # an answer's grade: the mean correct of its samples
        tally: dict[int, list[int]] = {}
        for s in range(int(pool.counts[p])):
            if answers[p][s] >= 0:
                tally.setdefault(answers[p][s], []).append(correct[p][s])
        grades.append({a: sum(v) / len(v) for a, v in tally.items()})
    out = np.zeros(order.shape)  # (n_max, D, P), like order
    for d, per_draw in enumerate(order_l):
        for p, slots in enumerate(per_draw):
            totals: dict[int, float] = {}
            best, ties, good = -np.inf, 0, 0
            for t, s in enumerate(slots):
                a = answers[p][s]
                if rule == "best_score":
                    if a >= 0 and w[p][s] > best:
                        best, ties, good = w[p][s], 1, int(correct[p][s])
                    elif a >= 0 and w[p][s] == best:
                        ties, good = ties + 1, good + int(correct[p][s])
                    out[t, d, p] = good / ties if ties else 0.0
                    continue
                if a >= 0:
                    totals[a] = totals.get(a, 0) + (1 if w is None else w[p][s])
                if totals:
                    top = max(totals.values())
                    tied = sorted(k for k, v in totals.items() if v == top)
                    out[t, d, p] = sum(grades[p][k] for k in tied) / len(tied)
    return out
