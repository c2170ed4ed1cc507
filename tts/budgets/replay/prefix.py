"""Vectorised replay primitives over a sample pool: orderings, prefix votes, prefix costs.

A replay draws a random ordering of each problem's samples (the pool's ``sample_idx`` is not
generation order) and treats the first n samples of the ordering as "what n samples would have
produced". Everything here is computed for every prefix length at once, as
``(n_problems, n_samples)`` arrays, so that a budget sweep costs one pass per ordering.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tts.benchmarks.pool import ModelPool
from tts.benchmarks.pool_draws import rule_name
from tts.budgets.allocator import AccuracyCurve
from tts.registry import STRATEGIES

_RULE_TABLES = {"vote": "vote_correct", "best_of_n": "best_correct"}
"""A strategy's ``pool_rule`` -> the :class:`PrefixReplay` table that grades it."""


def _declared_rule(strategy: str) -> str | None:
    """The rule a strategy class declares as ``pool_rule``, by its one name (None: not replayable)."""
    declared = getattr(STRATEGIES.load(strategy), "pool_rule", None)
    return None if declared is None else rule_name(declared)


def pool_rule(strategy: str) -> str:
    """How a pool replays ``strategy`` (its class's ``pool_rule``: "vote" or "best_of_n").

    Raises:
        UnknownNameError: The strategy is not registered.
        ValueError: The strategy cannot be replayed from a pool (it does more than aggregate
            independent samples); the message names those that can.
    """
    rule = _declared_rule(STRATEGIES.check(strategy))
    if rule is not None and rule not in _RULE_TABLES:
        able = [n for n in STRATEGIES.names() if _declared_rule(n) in _RULE_TABLES]
        raise ValueError(f"strategy {strategy!r} (pool_rule {rule!r}) has no budget replay yet; "
                         f"`tts sweep --pool` replays it at fixed n. Budget replays: {', '.join(able)}")
    if rule not in _RULE_TABLES:
        able = [n for n in STRATEGIES.names() if _declared_rule(n) in _RULE_TABLES]
        raise ValueError(f"strategy {strategy!r} cannot be replayed from a sample pool (pool_rule {rule!r}); "
                         f"use one of: {', '.join(able)}")
    return rule


def random_orders(mask: np.ndarray, n_orderings: int, rng: np.random.Generator) -> np.ndarray:
    """``(n_orderings, n_problems, n_samples)`` slot indices: each row a random permutation of
    the problem's real samples, followed by its padding slots."""
    mask = np.asarray(mask, dtype=bool)
    keys = rng.random((n_orderings, *mask.shape)) + (~mask)[None]  # padding sorts last
    return np.argsort(keys, axis=-1, kind="stable")


@dataclass(frozen=True, eq=False)
class PrefixReplay:
    """Outcomes and costs of every prefix of one ordering (index t = the first t+1 samples).

    Args:
        vote_correct: Majority vote over the prefix is correct (ties: the answer seen first).
        top1, top2: Votes of the leading and second answer in the prefix.
        best_correct: The highest-scored sample of the prefix is correct (None without scores).
        tokens: Generated tokens of the prefix (cumulative).
        sample_tokens: Tokens of the sample at each position of the ordering.
        count: Real samples per problem; prefixes beyond it repeat the last real one.
    """

    vote_correct: np.ndarray
    top1: np.ndarray
    top2: np.ndarray
    best_correct: np.ndarray | None
    tokens: np.ndarray
    sample_tokens: np.ndarray
    count: np.ndarray

    def correct_at(self, n: np.ndarray, strategy: str = "self_consistency") -> np.ndarray:
        """Per problem, whether ``strategy`` with ``n[p]`` samples is correct (never with 0).

        The strategy is replayed by its registered ``pool_rule`` (see :func:`pool_rule`).
        """
        table = getattr(self, _RULE_TABLES[pool_rule(strategy)])
        if table is None:
            raise ValueError(f"{strategy} picks by verifier score; this pool has none")
        return table[np.arange(len(table)), self._col(n)] & self._drawn(n)

    def tokens_at(self, n: np.ndarray) -> np.ndarray:
        """Per problem, the tokens of its first ``n[p]`` samples."""
        return np.where(self._drawn(n), self.tokens[np.arange(len(self.tokens)), self._col(n)], 0.0)

    def _drawn(self, n: np.ndarray) -> np.ndarray:
        return np.broadcast_to(np.asarray(n), self.count.shape) > 0

    def _col(self, n: np.ndarray) -> np.ndarray:
        n = np.broadcast_to(np.asarray(n, dtype=np.int64), self.count.shape)
        return np.clip(np.minimum(n, self.count), 1, None) - 1


def replay_prefixes(pool: ModelPool, order: np.ndarray) -> PrefixReplay:
    """Replay one ordering (``(n_problems, n_samples)`` slot indices) of a model's samples."""
    p_idx = np.arange(pool.n_problems)[:, None]
    ans = pool.answers[p_idx, order]
    ok = pool.correct[p_idx, order]
    real = pool.mask[p_idx, order]
    valid = real & (ans >= 0)
    n_ans = int(pool.answers.max(initial=-1)) + 1
    s = pool.n_samples
    # 1. Votes per answer id for every prefix; ties go to the answer that appeared first.
    onehot = (ans[..., None] == np.arange(n_ans)) & valid[..., None]
    cum = np.cumsum(onehot, axis=1, dtype=np.int32)
    seen = onehot.any(axis=1)
    first = np.where(seen, np.argmax(onehot, axis=1), s)
    leader = np.argmax(cum * (s + 1) - first[:, None, :], axis=2) if n_ans else np.zeros(ans.shape, int)
    # Correctness of each answer id (every sample with the same answer string is graded alike).
    ans_ok = np.zeros((pool.n_problems, max(n_ans, 1)), dtype=bool)
    ans_ok[np.nonzero(valid)[0], ans[valid]] = ok[valid]
    if n_ans >= 2:
        part = np.partition(cum, -2, axis=2)
        top1, top2 = part[..., -1], part[..., -2]
    else:
        top1 = cum[..., 0] if n_ans else np.zeros(ans.shape, np.int32)
        top2 = np.zeros_like(top1)
    vote_ok = (top1 > 0) & ans_ok[p_idx, leader]
    # 2. Best-of-n: the running arg-max of the score (first of equal scores).
    best_ok = None
    if pool.has_scores:
        sc = np.where(real, pool.scores[p_idx, order], -np.inf)
        run_max = np.maximum.accumulate(sc, axis=1)
        prev = np.concatenate([np.full((len(sc), 1), -np.inf), run_max[:, :-1]], axis=1)
        pos = np.maximum.accumulate(np.where(sc > prev, np.arange(s), 0), axis=1)
        best_ok = ok[p_idx, pos]
    tok = np.where(real, np.nan_to_num(pool.tokens[p_idx, order], nan=0.0), 0.0)
    return PrefixReplay(vote_ok, top1, top2, best_ok, np.cumsum(tok, axis=1), tok, pool.counts)


def fit_bin_curves(
    correct: np.ndarray,
    bins: np.ndarray,
    ns: Sequence[int],
    strategy: str = "self_consistency",
) -> dict[int, AccuracyCurve]:
    """Accuracy-vs-n curve per difficulty bin from replayed outcomes.

    Args:
        correct: ``(n_cases, n_samples)`` prefix correctness (e.g. ``PrefixReplay.vote_correct``
            of calibration problems, stacked over orderings).
        bins: ``(n_cases,)`` bin of each case.
        ns: The n values of the curve.
        strategy: The registered strategy the outcomes belong to (recorded in the curves).

    Returns:
        Bin -> curve, for every bin that has at least one case.
    """
    correct = np.asarray(correct, dtype=float)
    bins = np.asarray(bins)
    cols = np.minimum(np.asarray(ns), correct.shape[1]) - 1
    out = {}
    for b in np.unique(bins).tolist():
        acc = correct[bins == b][:, cols].mean(axis=0)
        out[int(b)] = AccuracyCurve(strategy, tuple(int(n) for n in ns), tuple(float(a) for a in acc))
    return out
