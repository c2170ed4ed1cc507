"""Which problems stay contested: a cross-fitted predictor of what more samples still buy.

An experiment that lost: as the online allocator's stopping rule (``OnlinePolicy(rule="rate",
rate_model=ContestedRule(...))``) it lost to the Beta criterion on the worst model of every set
(docs/stopping_rules_that_lost.md has the measurements). It stays as an opt-in rate model.

The Beta criterion of Aggarwal et al. (:mod:`tts.budgets.online`) stops a vote once its leader is
ahead with confidence; a vote that stays flat (20 against 19 after 40 samples) never gets there
and is sampled to the cap, although more samples rarely change whether it is right. The "gain"
rule (``vote_value.py`` beside this file) prices that with a fixed model of how vote shares relate to
correctness. This module *learns* it instead, from the model's own graded samples on other
problems:

* **Features** of a problem's vote after ``n`` samples, all known at run time
  (:func:`state_features`): the two leaders' shares, the no-answer share, the share of distinct
  answers, the leader's margin in standard errors, the Beta confidence, log ``n``, the share of
  the cap still left, and the log mean length of the samples so far.
* **Labels**: on graded problems, whether the vote at the cap is right where the vote after ``n``
  samples was wrong ("up") or the reverse ("down"). Two logistic models
  (:class:`tts.budgets.difficulty.LearnedDifficulty`) give P(up) and P(down); their difference is
  the expected accuracy that sampling this problem to the cap still buys (it is negative where
  more samples tend to lose a lucky leader).
* **Rate**: that gain divided by the samples left to the cap: accuracy per sample, the unit of
  the online rule's ``min_gain`` bar. The "contested" stopping rule
  (:func:`tts.budgets.online.decided`) stops a problem whose rate falls below the bar, or whose
  leader is Beta-confident, and serves the highest rates first.

Honesty (docs/architecture.md, "Honest simulation"): a problem's rate comes from a model fitted on *other*
problems (:func:`cross_fitted_rates` fits one model per fold on the other folds); the ``correct``
field of a problem never reaches its own decisions. A live run fits the model once on a
calibration pool (:func:`fit_pool`) and passes it to :class:`tts.budgets.online.OnlineAllocator`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tts.benchmarks.pool import ModelPool
from tts.budgets.difficulty import LearnedDifficulty
from tts.budgets.online import vote_confidence
from tts.budgets.replay.prefix import PrefixReplay

FEATURES = ("leader share", "runner-up share", "no-answer share", "distinct share", "margin (s.e.)",
            "beta confidence", "log n", "share of cap left", "log mean tokens")
"""The columns of :func:`state_features`, in order."""


def state_features(top1, top2, n, n_none, n_distinct, mean_tokens, cap) -> np.ndarray:
    """Run-time features of votes (one row per vote state; arrays broadcast).

    Args:
        top1, top2: Votes of the two leading answers.
        n: Samples drawn (no-answer samples included); a row with ``n == 0`` gets zeros.
        n_none: Samples without an answer.
        n_distinct: Distinct answers among the samples.
        mean_tokens: Mean generated tokens of the samples drawn.
        cap: Most samples the problem may get.

    Returns:
        ``(*shape, len(FEATURES))`` floats.
    """
    top1, top2, n, n_none, n_distinct, mean_tokens, cap = np.broadcast_arrays(
        *(np.asarray(v, dtype=float) for v in (top1, top2, n, n_none, n_distinct, mean_tokens, cap)))
    m = np.maximum(n, 1.0)
    cols = [top1 / m, top2 / m, n_none / m, n_distinct / m,
            (top1 - top2) / np.sqrt(top1 + top2 + 1.0), vote_confidence(top1, top2),
            np.log(m), np.clip(cap - n, 0, None) / np.maximum(cap, 1.0), np.log1p(np.nan_to_num(mean_tokens))]
    out = np.stack(cols, axis=-1)
    return np.where((n > 0)[..., None], out, 0.0)


def prefix_features(pool: ModelPool, order: np.ndarray, rep: PrefixReplay, cap: np.ndarray) -> np.ndarray:
    """``(n_problems, n_samples, d)`` features after each prefix of one ordering (column t = the
    first t + 1 samples), from answers and token counts only (never ``correct``)."""
    p_idx = np.arange(pool.n_problems)[:, None]
    ans = pool.answers[p_idx, order]
    real = pool.mask[p_idx, order]
    valid = real & (ans >= 0)
    width = max(int(pool.answers.max(initial=-1)) + 1, 1)
    seen = np.maximum.accumulate((ans[..., None] == np.arange(width)) & valid[..., None], axis=1)
    n = np.minimum(np.arange(1, pool.n_samples + 1)[None, :], pool.counts[:, None])
    return state_features(rep.top1, rep.top2, n, np.cumsum(real & (ans < 0), axis=1), seen.sum(axis=2),
                          rep.tokens / n, cap[:, None])


@dataclass
class ContestedModel:
    """P(the vote at the cap gains / loses against the vote now), from vote features.

    Args:
        l2: Ridge penalty of both logistic fits, per training row (standardised features).
    """

    l2: float = 0.05
    _up: LearnedDifficulty | None = None
    _down: LearnedDifficulty | None = None

    def fit(self, features: np.ndarray, vote_now: np.ndarray, vote_cap: np.ndarray) -> ContestedModel:
        """Fit on graded vote states of calibration problems (never the problems it will decide).

        Args:
            features: ``(rows, d)`` :func:`state_features`.
            vote_now, vote_cap: Per row, whether the vote now / at the cap is correct.
        """
        x = np.asarray(features, dtype=float).reshape(-1, len(FEATURES))
        now, cap = (np.asarray(v, dtype=bool).reshape(-1) for v in (vote_now, vote_cap))
        if len(x) == 0:
            raise ValueError("no graded vote states to fit the contested model on; the calibration pool "
                             "needs problems with at least two samples")
        # The rows are many vote states of few problems (orderings x decision points), so the
        # ridge penalty is per row: l2 = 0.05 weighs like a prior worth 5% of the data.
        strength = self.l2 * len(x)
        self._up = LearnedDifficulty(strength).fit(x, (cap & ~now).astype(float))
        self._down = LearnedDifficulty(strength).fit(x, (now & ~cap).astype(float))
        return self

    def gain(self, features: np.ndarray) -> np.ndarray:
        """Expected accuracy that sampling to the cap still buys: P(up) - P(down), per row."""
        if self._up is None or self._down is None:
            raise RuntimeError("call fit() (or fit_pool) before gain()")
        x = np.asarray(features, dtype=float)
        flat = x.reshape(-1, x.shape[-1])
        return (self._up.predict(flat) - self._down.predict(flat)).reshape(x.shape[:-1])

    def rate(self, features: np.ndarray, n: np.ndarray, cap: np.ndarray) -> np.ndarray:
        """Expected accuracy gained per sample still allowed (0 where none is left)."""
        left = np.asarray(cap, dtype=float) - np.asarray(n, dtype=float)
        return np.where(left > 0, self.gain(features) / np.maximum(left, 1.0), 0.0)

    def live_rate(self, top1, top2, n, n_none, n_distinct, mean_tokens, cap) -> np.ndarray:
        """:meth:`rate` from a live run's vote state (what :class:`OnlineAllocator` calls)."""
        return self.rate(state_features(top1, top2, n, n_none, n_distinct, mean_tokens, cap), n, cap)


def _checkpoints(cap: int, chunk: int) -> np.ndarray:
    """Prefix sizes the online rule decides at (multiples of the chunk below the cap, and 1..3)."""
    return np.unique(np.concatenate([np.arange(1, min(chunk, cap)), np.arange(chunk, cap, chunk)]))


def _training_rows(feats: Sequence[np.ndarray], reps: Sequence[PrefixReplay], rows: np.ndarray,
                   cap: np.ndarray, chunk: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stacked (features, vote now, vote at cap) of ``rows`` at the rule's decision points."""
    xs, nows, caps = [], [], []
    for f, rep in zip(feats, reps):
        for c in np.unique(cap[rows]).tolist():
            sel = rows[cap[rows] == c]
            ts = _checkpoints(int(c), chunk) - 1
            if not len(ts) or not len(sel):
                continue
            xs.append(f[sel][:, ts].reshape(-1, f.shape[-1]))
            nows.append(rep.vote_correct[sel][:, ts].reshape(-1))
            caps.append(np.repeat(rep.vote_correct[sel, c - 1], len(ts)))
    if not xs:
        return np.zeros((0, len(FEATURES))), np.zeros(0, bool), np.zeros(0, bool)
    return np.concatenate(xs), np.concatenate(nows), np.concatenate(caps)


def cross_fitted_rates(pool: ModelPool, orders: np.ndarray, reps: Sequence[PrefixReplay], fold: np.ndarray,
                       cap: np.ndarray, chunk: int, l2: float = 0.05) -> list[np.ndarray]:
    """Per ordering, ``(n_problems, n_samples + 1)`` predicted rate after ``n`` samples (column n;
    column 0 = inf: a problem never sampled is served first).

    The rate of a problem in fold f comes from a :class:`ContestedModel` fitted on the problems of
    the other folds (their graded prefixes in the same orderings); its own grades are never read.
    """
    cap = np.asarray(cap, dtype=np.int64)
    feats = [prefix_features(pool, o, rep, cap) for o, rep in zip(orders, reps)]
    n = np.arange(1, pool.n_samples + 1)[None, :]
    out = [np.full((pool.n_problems, pool.n_samples + 1), np.inf) for _ in reps]
    for f in np.unique(fold).tolist():
        train, test = np.nonzero(fold != f)[0], np.nonzero(fold == f)[0]
        model = ContestedModel(l2).fit(*_training_rows(feats, reps, train, cap, chunk))
        for r, x in enumerate(feats):
            out[r][test, 1:] = model.rate(x[test], n, cap[test, None])
    return out


def fit_pool(pool: ModelPool, *, cap: int | None = None, chunk: int = 4, orderings: int = 8, seed: int = 0,
             l2: float = 0.05) -> ContestedModel:
    """Fit a :class:`ContestedModel` on every problem of a calibration pool (for a live run on
    *other* problems), over ``orderings`` random orderings of each problem's samples."""
    from tts.budgets.replay.prefix import random_orders, replay_prefixes

    if pool.n_samples < 2:
        raise ValueError(f"the calibration pool of {pool.model!r} has {pool.n_samples} sample per problem; "
                         "fitting which votes stay contested needs at least 2")
    caps = np.minimum(pool.counts, cap or pool.n_samples)
    orders = random_orders(pool.mask, orderings, np.random.default_rng(seed))
    reps = [replay_prefixes(pool, o) for o in orders]
    feats = [prefix_features(pool, o, rep, caps) for o, rep in zip(orders, reps)]
    return ContestedModel(l2).fit(*_training_rows(feats, reps, np.arange(pool.n_problems), caps, chunk))


@dataclass
class ContestedRule:
    """The "contested" stopping rule as a :class:`tts.budgets.online.RateModel`.

    A replay cross-fits one :class:`ContestedModel` per fold (:func:`cross_fitted_rates`); a live
    run needs ``model``, fitted on a calibration pool of other problems (:func:`fit_pool`). A
    Beta-confident leader stops too.
    """

    model: ContestedModel | None = None
    l2: float = 0.05
    stop_confident: bool = True
    cross_fitted: bool = True

    def live_rate(self, top1, top2, n, n_none, n_distinct, mean_tokens, cap, chunk: int) -> np.ndarray:
        """The fitted model's rate from a live run's vote state."""
        if self.model is None:
            raise ValueError("a live run of the contested rule needs model=fit_pool(calibration_pool)")
        return self.model.live_rate(top1, top2, n, n_none, n_distinct, mean_tokens, cap)

    def replay_rates(self, pool, orders, reps, fold, cap, chunk: int) -> list[np.ndarray]:
        """Cross-fitted rates per ordering (:func:`cross_fitted_rates`)."""
        return cross_fitted_rates(pool, orders, reps, fold, cap, chunk, self.l2)
