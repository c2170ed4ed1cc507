"""Per-draw outcomes of the selection rules over random subsets of a sample pool, vectorised.

Shared by the bootstrap estimators of :mod:`tts.eval.estimators` and the per-rule curves of
:mod:`tts.budgets.strategy_curves`, so it lives beside the pool, below both. A draw is a random permutation of a problem's
real samples, whose first n are a uniform n-subset (:func:`draw_orders`), and the outcome of a
rule on a prefix is the tie-shared correctness of its choice (the conventions are in
:mod:`tts.eval.estimators`). The code walks the prefix positions 1..n once (a Python loop of at most
n steps); each step is a few numpy operations over all draws and problems at once. There is no loop
over draws or problems; problems whose every possible choice grades the same need no draws at all.
:func:`loop_outcomes` is the plain-Python reference the tests and the benchmark compare against.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from tts.benchmarks.pool import ModelPool

Weighting = Literal["score", "exp", "sigmoid"]


@dataclass(frozen=True)
class RuleInfo:
    """A selection rule: the live strategy that runs it (None: pool only) and what it needs."""

    strategy: str | None
    needs_scores: bool
    needs_tokens: bool = False


RULES: dict[str, RuleInfo] = {
    "vote": RuleInfo("self_consistency", False),
    "best_of_n": RuleInfo("best_of_n", True),
    "weighted_vote": RuleInfo("weighted_vote", True),
    "shortest": RuleInfo(None, False, True),
}
"""The selection rules a sample pool replays, by their one name: the ``pool_rule`` a strategy
class declares, the rules of :mod:`tts.eval.estimators`, ``tts sweep --pool`` and the
cross-strategy allocators (:mod:`tts.budgets.strategy_curves`)."""

RULE_ALIASES = {"self_consistency": "vote", "majority": "vote", "best_score": "best_of_n"}
"""Other names a rule is accepted by: the strategy that runs it, and ``best_score``, what pool
replays called ``best_of_n`` before there was one table (kept so configs and plugins that say it work)."""


def rule_name(name: str) -> str:
    """The rule's one name for ``name`` (an alias resolved; anything else returned as it is)."""
    return RULE_ALIASES.get(name, name)
_DENSE_COLUMNS = 8
"""Problems with up to this many repeated answers keep one vote array per answer."""
_CHUNK_SLICE = 1 << 16
"""Bootstrap draws are processed in chunks of about this many (draw, problem) pairs, so that one
prefix step's arrays stay in cache."""


# --- inputs ---------------------------------------------------------------------------------------


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
                         f"one per sample (pass scores=..., e.g. -pool.tokens, or use rule 'vote')")
    return s


def vote_weights(pool: ModelPool, weighting: Weighting = "score", scores: np.ndarray | None = None) -> np.ndarray:
    """Vote weights of the answered samples (0 elsewhere) from scores: the score itself,
    ``exp(score - problem max)`` or its logistic sigmoid (for logit-like scores such as a
    reward model's). A score of 0 (a verifier that rejects the sample) is a weight of 0: the
    sample adds nothing to its answer, as in the live weighted_vote (see :func:`vote_outcomes`).

    Raises:
        ValueError: Unknown weighting, missing scores, or a negative weight.
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
    if np.any((w < 0) & answered):
        raise ValueError(f"weighted vote needs weights >= 0, but model {pool.model} has negative weights with "
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


def score_levels(pool: ModelPool, scores: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
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
        weights: Per-slot vote weights (>= 0, :func:`vote_weights`); None = one vote each. A
            prefix whose answered samples all weigh 0 is counted as a plain vote, the live
            weighted_vote's fallback when its verifier rejects every sample.
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
        once = ((code >> 1) & 1).astype(small)
        w = None if weights is None else more.pop(0)
        out = tally(o, rows, col_t, rep, grade, once, w)
        if w is not None:  # prefixes whose answered samples all weigh 0: a plain vote, as the live rule
            weighted = np.cumsum(w, axis=0)[cols] > 0
            if not weighted.all():
                out = np.where(weighted, out, tally(o, rows, col_t, rep, grade, once, None))
        return out

    def tally(o: np.ndarray, rows: np.ndarray, col_t: np.ndarray, rep: np.ndarray, grade: np.ndarray,
              once: np.ndarray, w: np.ndarray | None) -> np.ndarray:
        single = once if w is None else w * once

        def weighed(t: int, x: np.ndarray) -> np.ndarray:
            # A sample of weight 0 adds nothing: its answer's tally is the one it had at its last
            # weighted sample, already in the tie there, so it must not join a tie again.
            return x if w is None else np.where(w[t] > 0, x, -1.0)
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
                return weighed(t, np.where(rep[t], (votes * hit).sum(axis=0, dtype=dtype), single[t]))
        else:  # many answers: one flat array, gather and scatter at the drawn answer's column
            base = np.arange(o.shape[1] * o.shape[2], dtype=np.int32).reshape(o.shape[1:]) * width
            flat = np.zeros(base.size * width, dtype=dtype)

            def step(t: int) -> np.ndarray:
                slot = base + col_t[t]
                v = flat[slot] + (1 if w is None else w[t])
                flat[slot] = v
                return weighed(t, np.where(rep[t], v, single[t]))

        return _scan(step, grade, cols)

    n_rep = cls_all.max(axis=1, initial=-1) + 1
    return _run(pool, order, cols, per_draw, chunk, np.searchsorted([1, 2, 4, _DENSE_COLUMNS], n_rep))


def best_score_outcomes(pool: ModelPool, order: np.ndarray, scores: np.ndarray | None = None,
                        ns: np.ndarray | None = None, *, per_draw: bool = True) -> np.ndarray:
    """Per prefix, draw and problem, the (tie-shared) correctness of the best-scored answered sample.

    Args and returns as :func:`vote_outcomes`; ``scores`` overrides the pool's (same shape).
    """
    cols = _cols(order, ns)
    below, _ = score_levels(pool, scores)
    # Scores are replaced by their rank in the problem (same order, same ties, small integers),
    # packed with the grade: one gather. Answerless samples rank -1, under every answered one.
    level = np.where(pool.answers >= 0, below, -1)
    packed = (level * 2 + (pool.correct & (pool.answers >= 0))).astype(np.int16 if pool.n_samples < 16000 else np.int32)

    def chunk(o: np.ndarray, rows: np.ndarray) -> np.ndarray:
        code = _codes(o, packed[rows])[0]
        x = code >> 1
        return _scan(lambda t: x[t], (code & 1).astype(bool), cols)

    return _run(pool, order, cols, per_draw, chunk)


# --- reference loop -------------------------------------------------------------------------------


def loop_outcomes(pool: ModelPool, order: np.ndarray, rule: Literal["vote", "best_of_n", "weighted_vote"],
                  weights: np.ndarray | None = None) -> np.ndarray:
    """The same outcomes as :func:`vote_outcomes` / :func:`best_score_outcomes`, by a plain Python
    loop over draws, problems and prefixes (the baseline of ``benchmarks/pool_estimators.py`` and
    the tests' reference). ``weights`` are vote weights for "weighted_vote", scores for
    "best_of_n"; slow by design."""
    answers, correct, order_l = pool.answers.tolist(), pool.correct.tolist(), order.transpose(1, 2, 0).tolist()
    w = None if weights is None else np.asarray(weights, dtype=np.float64).tolist()
    if rule == "best_of_n" and w is None:
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
                if rule == "best_of_n":
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
