"""Difficulty estimators: how likely is one sample of a model to solve a problem?

Two estimators, both from information a run has before it decides how much to spend:

* pilot agreement (:func:`majority_share`): the share of the majority answer among k pilot
  samples drawn at run time (no answer counts as disagreement), Snell et al.'s "model-predicted
  difficulty" (2024, "Scaling LLM Test-Time Compute Optimally can be More Effective than Scaling
  Model Parameters", Sec. 3.2). The offline planner bins problems by it.
* :class:`LearnedDifficulty`: an L2-regularised logistic regression from pilot features
  (:func:`pilot_features`: agreement, no-answer share, pilot length, pilot score) to P(correct),
  fitted on *other* problems (the replay's cross-fitting folds).

Binning: quantile edges fitted on one set of problems (:func:`quantile_edges`; Snell et al. use 5
bins) and applied to others (:func:`assign_bins`). Difficulty from ground truth is not offered:
an allocator reported as achievable must never see it (docs/architecture.md,
"Honest simulation").
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit

logger = logging.getLogger(__name__)

Source = Literal["pilot", "learned"]


@dataclass(frozen=True, slots=True)
class DifficultyEstimate:
    """The estimated difficulty of one problem.

    Args:
        problem_id: The problem's id.
        score: Estimated pass rate of one sample, in [0, 1] (higher = easier).
        bin: Difficulty bin, 0 = easiest.
        source: "pilot" (pilot agreement) or "learned" (:class:`LearnedDifficulty`).
    """

    problem_id: str
    score: float
    bin: int
    source: Source


# --- binning -------------------------------------------------------------------------------------


def quantile_edges(scores: Sequence[float] | np.ndarray, n_bins: int = 5) -> np.ndarray:
    """Score cut points that split ``scores`` into ``n_bins`` bins of (nearly) equal size.

    Fit the edges on one set of problems and apply them to others with :func:`assign_bins`.
    Tied scores stay in one bin, so fewer than ``n_bins`` bins may be used.
    """
    if n_bins < 1:
        raise ValueError(f"n_bins must be >= 1, got {n_bins}")
    s = np.asarray(scores, dtype=float)
    if s.size == 0:
        raise ValueError("cannot fit quantile bins on zero problems; pass at least one score")
    return np.unique(np.quantile(s, np.linspace(0, 1, n_bins + 1)[1:-1]))


def assign_bins(scores: Sequence[float] | np.ndarray, edges: Sequence[float] | np.ndarray) -> np.ndarray:
    """Bin index per score given ascending cut points; 0 = the highest scores (easiest).

    A score equal to an edge goes to the easier side.
    """
    s = np.asarray(scores, dtype=float)
    e = np.sort(np.asarray(edges, dtype=float))
    return (len(e) - np.searchsorted(e, s, side="right")).astype(np.int64)


# --- pilot sampling --------------------------------------------------------------------------------


def majority_share(answers: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """Share of the most common answer among each row's samples; no answer (-1) never counts.

    Args:
        answers: ``(n_problems, k)`` integer answer ids, -1 = no answer.
        mask: Which slots hold real samples (default: all).

    Returns:
        ``(n_problems,)`` floats in [0, 1]; 0 for a row without any answer.
    """
    a = np.asarray(answers)
    m = np.ones(a.shape, dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    n = m.sum(axis=1)
    valid = m & (a >= 0)
    width = int(a.max(initial=-1)) + 1
    if width == 0:
        return np.zeros(a.shape[0])
    onehot = np.zeros((a.shape[0], width), dtype=np.int64)
    rows = np.nonzero(valid)[0]
    np.add.at(onehot, (rows, a[valid]), 1)
    return onehot.max(axis=1) / np.maximum(n, 1)


# --- learned ---------------------------------------------------------------------------------------


def pilot_features(
    answers: np.ndarray,
    tokens: np.ndarray | None = None,
    scores: np.ndarray | None = None,
    *,
    prompt_lengths: Sequence[float] | None = None,
    levels: Sequence[float] | None = None,
) -> np.ndarray:
    """Run-time features per problem for :class:`LearnedDifficulty`.

    Columns: majority-answer share, share without an answer, then when given: log mean pilot
    tokens, mean pilot score, log prompt length, benchmark level.
    """
    a = np.asarray(answers)
    cols = [majority_share(a), (a < 0).mean(axis=1)]
    if tokens is not None:
        t = np.asarray(tokens, dtype=float)
        known = np.isfinite(t).sum(axis=1)  # a pilot that came back empty: NaN, without numpy's warning
        cols.append(np.log1p(np.where(known > 0, np.nansum(t, axis=1) / np.maximum(known, 1), np.nan)))
    if scores is not None:
        cols.append(np.nanmean(np.asarray(scores, dtype=float), axis=1))
    if prompt_lengths is not None:
        cols.append(np.log1p(np.asarray(prompt_lengths, dtype=float)))
    if levels is not None:
        cols.append(np.asarray(levels, dtype=float))
    return np.column_stack(cols)


def pool_prompt_lengths(pool: object, problems: Sequence[int] | np.ndarray | None = None) -> np.ndarray:
    """Each problem's prompt tokens as its calibration source recorded them (a pool's per-problem
    ``prompt_tokens`` field: a ``tts eval`` run's pools carry it), for the ``prompt length``
    feature of :func:`pilot_features`.

    Raises:
        ValueError: A problem of the source has no prompt length; the message says what gives one.
    """
    meta = getattr(pool, "metadata", ()) or ()
    idx = range(len(meta)) if problems is None else np.asarray(problems).tolist()
    values = [meta[i].get("prompt_tokens") if i < len(meta) else None for i in idx]
    missing = sum(not isinstance(v, (int, float)) or isinstance(v, bool) or v <= 0 for v in values)
    if missing or not values:
        raise ValueError(f"{missing or 'all'} calibration problems have no prompt length (a pool row's "
                         "prompt_tokens); calibrate on a tts eval run, which records it, or leave the prompt "
                         "length out of the difficulty features")
    return np.asarray(values, dtype=float)


def pool_pilot_features(pool: object, problems: np.ndarray, order: np.ndarray, k: int,
                        prompt_lengths: np.ndarray | None = None) -> np.ndarray:
    """:func:`pilot_features` (no scores) of ``problems`` (pool indices) from the first ``k`` samples
    of one ``(P, S)`` random ``order`` of a pool, plus ``prompt_lengths`` (of those problems,
    :func:`pool_prompt_lengths`) when given: the columns a calibration fits on and an escalation
    bins by."""
    idx = np.asarray(problems)
    cols = order[idx, :k]
    return pilot_features(pool.answers[idx[:, None], cols],  # type: ignore[attr-defined]
                          np.nan_to_num(pool.tokens[idx[:, None], cols]).astype(float),  # type: ignore[attr-defined]
                          prompt_lengths=prompt_lengths)


class LearnedDifficulty:
    """Logistic regression from run-time features to P(one sample is correct).

    Fitted with L-BFGS on the L2-regularised mean log loss; features are standardised on the
    training set (the intercept is not penalised).

    Example:
        >>> est = LearnedDifficulty(l2=1.0).fit(X_train, y_train)              # doctest: +SKIP
        >>> bins = assign_bins(est.predict(X_test), quantile_edges(est.predict(X_train)))  # doctest: +SKIP
    """

    def __init__(self, l2: float = 1.0) -> None:
        if not l2 >= 0:
            raise ValueError(f"l2 must be >= 0, got {l2}")
        self.l2 = float(l2)
        self.coef_: np.ndarray | None = None
        self.intercept_: float = 0.0
        self._mu: np.ndarray | None = None
        self._sd: np.ndarray | None = None

    def fit(self, features: np.ndarray, targets: np.ndarray, weights: np.ndarray | None = None
            ) -> LearnedDifficulty:
        """Fit on ``(n, d)`` features and targets in [0, 1] (0/1 outcomes or pass rates).

        Pass rates as targets with ``weights`` = sample counts give the binomial likelihood.
        """
        x = np.asarray(features, dtype=float)
        y = np.asarray(targets, dtype=float)
        if x.ndim != 2 or len(x) != len(y) or len(y) == 0:
            raise ValueError(f"need (n, d) features and n targets, got {x.shape} and {y.shape}")
        if np.any((y < 0) | (y > 1)):
            raise ValueError("targets must lie in [0, 1] (outcomes or pass rates)")
        w = np.ones(len(y)) if weights is None else np.asarray(weights, dtype=float)
        w = w / w.sum()
        self._mu = x.mean(axis=0)
        sd = x.std(axis=0)
        # A column constant on the calibration problems (rounding leaves an sd of ~1e-14, not 0) says
        # nothing: scaled by its rounding error, a run-time value off that constant would swamp
        # every other feature, so it keeps the scale 1 (its weight is then fitted to 0).
        self._sd = np.where(sd > 1e-9 * np.maximum(1.0, np.abs(self._mu)), sd, 1.0)
        z = (x - self._mu) / self._sd
        d = z.shape[1]

        def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
            logits = z @ theta[:d] + theta[d]
            # log(1 + e^t) - y t, written stably.
            nll = np.sum(w * (np.logaddexp(0.0, logits) - y * logits))
            r = w * (expit(logits) - y)
            grad = np.concatenate([z.T @ r + self.l2 * theta[:d] / len(y), [r.sum()]])
            return nll + 0.5 * self.l2 * float(theta[:d] @ theta[:d]) / len(y), grad

        res = minimize(loss, np.zeros(d + 1), jac=True, method="L-BFGS-B")
        if not res.success:
            logger.warning("logistic difficulty fit did not converge: %s", res.message)
        self.coef_, self.intercept_ = res.x[:d], float(res.x[d])
        return self

    def predict(self, features: np.ndarray) -> np.ndarray:
        """Predicted P(correct) per row."""
        if self.coef_ is None:
            raise RuntimeError("call fit() before predict()")
        z = (np.asarray(features, dtype=float) - self._mu) / self._sd
        return expit(z @ self.coef_ + self.intercept_)
