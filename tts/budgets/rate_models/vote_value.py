"""The value of more samples for a majority vote: expected accuracy gained per sample ("gain").

An experiment that lost: as the online allocator's stopping rule (``OnlinePolicy(rule="rate",
rate_model=VoteValue(kappa))``) it never beat the Beta criterion on the hard end of the pools
(docs/stopping_rules_that_lost.md has the measurements). It stays as an opt-in rate model.

A stopping rule that only asks "is the leader ahead with confidence c?" (Aggarwal et al.'s Beta
criterion) keeps feeding a vote that is flat after many samples: 20 against 19 never reaches 95%,
so the problem is sampled to the cap, yet when two answers are drawn almost equally often, telling
them apart is worth little, since the vote barely says which one is right. This module prices
that: the posterior expected accuracy of the vote now and after ``h`` more samples; their
difference divided by ``h`` is what one more sample buys. An online allocator stops a problem when
its best rate over the horizons it may still draw falls below a bar, and serves the problems with
the highest rate first (budget moves to the votes that are close to flipping to the better answer).

Model (a decision-theoretic value of information, cf. Frazier et al. 2008's knowledge gradient,
restricted to the two leading answers):

1. Of the samples that name one of the two leading answers, a share ``theta`` names the leader;
   the posterior of ``theta`` after ``v1`` and ``v2`` votes is Beta(v1 + 1, v2 + 1), the same
   posterior as Aggarwal et al.'s criterion.
2. The leader is the correct one of the two with probability ``g(theta) = expit(kappa *
   logit(theta))``: ``kappa = inf`` says "the more frequent answer is right" (then the value is
   the knowledge gradient of picking the larger share); a finite ``kappa`` says that a small
   difference in shares says little about which answer is right, so a flat vote is worth little
   more sampling. ``kappa`` is a calibration constant: :func:`fit_kappa` fits it on graded
   problems (other problems than the ones it decides: docs/architecture.md, "Honest
   simulation").
3. The vote returns the answer with the larger posterior accuracy, so the expected accuracy now
   is ``max(E[g], 1 - E[g])`` and after ``h`` more samples (of which the two leaders get their
   current share, the rest go to other answers or none) ``E_X max(E[g | X], 1 - E[g | X])``.

Integrals are sums over a fixed grid of ``theta`` (deterministic: a live run and its replay
compute the same numbers); results are cached by vote state, since replays revisit the same
small-integer states many times.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.special import expit, gammaln

_GRID = (np.arange(512) + 0.5) / 512
_LOG_T = np.log(_GRID)
_LOG_1T = np.log1p(-_GRID)


def leader_correct(theta: np.ndarray, kappa: float) -> np.ndarray:
    """P(the leader is the correct one of the two | its share ``theta``): expit(kappa * logit)."""
    theta = np.asarray(theta, dtype=float)
    if np.isinf(kappa):
        return np.where(theta > 0.5, 1.0, np.where(theta < 0.5, 0.0, 0.5))
    return expit(kappa * (np.log(theta) - np.log1p(-theta)))


def _values(t1: np.ndarray, t2: np.ndarray, m: np.ndarray, kappa: float) -> tuple[np.ndarray, np.ndarray]:
    """Expected accuracy now and after ``m`` more two-leader votes, per state (vectorised)."""
    g = leader_correct(_GRID, kappa)
    log_w = t1[:, None] * _LOG_T + t2[:, None] * _LOG_1T  # (S, G) posterior, uniform prior
    log_w -= log_w.max(axis=1, keepdims=True)
    w = np.exp(log_w)
    z = w.sum(axis=1)
    eg = (w * g).sum(axis=1) / z
    now = np.maximum(eg, 1.0 - eg)
    later = now.copy()
    top = int(m.max(initial=0))
    if top == 0:
        return now, later
    x = np.arange(top + 1)
    for mm in np.unique(m[m > 0]).tolist():
        rows = np.nonzero(m == mm)[0]
        xs = x[: mm + 1]
        # Binomial likelihood of X votes for the leader out of mm, on the grid: (mm+1, G).
        log_b = (gammaln(mm + 1) - gammaln(xs + 1) - gammaln(mm - xs + 1))[:, None] + \
            xs[:, None] * _LOG_T + (mm - xs)[:, None] * _LOG_1T
        b = np.exp(log_b)
        u1 = (w[rows] * g) @ b.T  # (S, mm+1): P(X, leader correct) up to 1/z
        u0 = (w[rows] * (1.0 - g)) @ b.T
        later[rows] = np.maximum(u1, u0).sum(axis=1) / z[rows]
    return now, later


class VoteValue:
    """Best expected accuracy gained per sample, per vote state, with a cache.

    Args:
        kappa: How strongly a larger share means "correct" (see the module docstring);
            ``float("inf")``: the larger share is the correct one.
        horizons: Lookaheads tried, as multiples of the chunk; the distance to the cap is always
            tried too.

    Example:
        >>> vv = VoteValue(kappa=4.0)
        >>> r = vv.rate([20, 4], [19, 0], [40, 4], [80, 80], chunk=4)
        >>> bool(r[0] < r[1])  # 20 v 19 after 40 samples is worth less than 4 v 0 after 4
        True
    """

    stop_confident = False
    """As a :class:`tts.budgets.online.RateModel`: stops on the value of more samples alone."""
    cross_fitted = False
    """Its rates are closed-form (``kappa`` is a setting), so a replay runs all folds as one run."""

    def __init__(self, kappa: float = 4.0, horizons: Sequence[int] = (1, 2, 4, 8, 16)) -> None:
        if not kappa > 0:
            raise ValueError(f"kappa must be > 0 (inf = the larger share is right), got {kappa}")
        self.kappa = float(kappa)
        self.horizons = tuple(int(h) for h in horizons)
        self._cache: dict[tuple[int, int, int, int, int], float] = {}

    def rate(self, top1, top2, n, cap, chunk: int) -> np.ndarray:
        """Per problem, the best expected accuracy gain per sample over the horizons it may draw.

        Args:
            top1, top2: Votes of the two leading answers.
            n: Samples drawn (no-answer samples included).
            cap: Most samples the problem may get.
            chunk: Samples per round; horizons are multiples of it.

        Returns:
            Floats; 0 where no sample is left.
        """
        t1, t2, n, cap = (np.asarray(v, dtype=np.int64).reshape(-1) for v in (top1, top2, n, cap))
        keys = np.stack([t1, t2, n, cap], axis=1)
        uniq, inv = np.unique(keys, axis=0, return_inverse=True)
        out = np.empty(len(uniq))
        todo = []
        for i, row in enumerate(uniq.tolist()):
            got = self._cache.get((*row, chunk))
            if got is None:
                todo.append(i)
            else:
                out[i] = got
        if todo:
            out[todo] = self._compute(uniq[todo], chunk)
            for i in todo:
                self._cache[(*uniq[i].tolist(), chunk)] = float(out[i])
        return out[inv.reshape(-1)]

    def live_rate(self, top1, top2, n, n_none, n_distinct, mean_tokens, cap, chunk: int) -> np.ndarray:
        """:meth:`rate` from a live run's vote state (the :class:`tts.budgets.online.RateModel` call)."""
        return self.rate(top1, top2, n, cap, chunk)

    def replay_rates(self, pool, orders, reps, fold, cap, chunk: int) -> list[np.ndarray]:
        """Per ordering, ``(n_problems, n_samples + 1)`` rates after n samples (column n), from the
        prefix votes of that ordering (no fitting: ``fold`` is not needed)."""
        cap = np.asarray(cap, dtype=np.int64)
        size, width = pool.n_problems, pool.n_samples + 1
        n = np.broadcast_to(np.arange(width), (size, width))
        out = []
        for rep in reps:
            zeros = np.zeros((size, 1), dtype=np.int64)
            t1 = np.concatenate([zeros, rep.top1], axis=1)
            t2 = np.concatenate([zeros, rep.top2], axis=1)
            capped = np.minimum(n, cap[:, None])
            rate = self.rate(t1, t2, capped, np.broadcast_to(cap[:, None], (size, width)), chunk)
            out.append(rate.reshape(size, width))
        return out

    def _compute(self, states: np.ndarray, chunk: int) -> np.ndarray:
        t1, t2, n, cap = (states[:, j].astype(float) for j in range(4))
        left = np.maximum(cap - n, 0)
        share = np.where(n > 0, (t1 + t2) / np.maximum(n, 1), 1.0)
        best = np.zeros(len(states))
        hs = np.array(sorted({h * chunk for h in self.horizons}))
        for h in hs.tolist() + [None]:
            hh = left if h is None else np.minimum(left, h)
            m = np.rint(hh * share).astype(np.int64)
            now, later = _values(t1, t2, m, self.kappa)
            best = np.maximum(best, np.where(hh > 0, (later - now) / np.maximum(hh, 1), 0.0))
        return best


def fit_kappa(share: np.ndarray, leader_ok: np.ndarray, other_ok: np.ndarray,
              grid: Sequence[float] = (0.5, 1, 1.5, 2, 3, 4, 6, 8, 12, 16, 24, 32)) -> float:
    """The ``kappa`` that best predicts which of two leading answers is correct (max likelihood).

    Args:
        share: Per graded problem, the leader's share of the two leaders' votes (in [1/2, 1]).
        leader_ok, other_ok: Whether the leader / the runner-up is correct. Problems where
            neither or both are correct say nothing about ``kappa`` and are skipped.
        grid: Candidate values.

    Raises:
        ValueError: No problem has exactly one of its two leaders correct.
    """
    share = np.clip(np.asarray(share, dtype=float), 1e-6, 1 - 1e-6)
    one = np.asarray(leader_ok, bool) ^ np.asarray(other_ok, bool)
    if not one.any():
        raise ValueError("no problem has exactly one of its two leading answers correct; kappa cannot be fitted")
    s, y = share[one], np.asarray(leader_ok, bool)[one]
    probs = [np.clip(leader_correct(s, k), 1e-12, 1 - 1e-12) for k in grid]
    ll = [np.sum(np.where(y, np.log(q), np.log1p(-q))) for q in probs]
    return float(grid[int(np.argmax(ll))])
