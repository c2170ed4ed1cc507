"""Multi-model vote ensembles with weights from a mixed-integer program (Best-of-Infinity).

Komiyama et al. (2025, "Best-of-Infinity: Asymptotic Performance of Test-Time Compute") vote
over the samples of several models with one weight per model: the ensemble's answer is the one
with the largest weighted vote share ``sum_m w_m * share_m(a)``. As the samples per model grow,
each model's shares converge to its answer distribution, so the weights that solve the most
problems in that limit are the solution of a small mixed-integer linear program (their Sec. 4):

    maximise  sum_q z_q
    subject to  sum_m w_m (share_m(a*_q) - share_m(a)) >= margin - (1 + margin)(1 - z_q)
                    for every problem q, every wrong answer a of q,
                sum_m w_m = 1, w >= 0, z_q in {0, 1},

where ``a*_q`` is the correct answer. Problems that every weighting solves, or none can, are
dropped before solving (they do not move the optimum). :func:`fit_weights` solves it with
``scipy.optimize.milp`` (HiGHS).

Honesty: the program reads ``correct``, so :func:`cross_fit` fits the weights of each fold of
problems on the *other* folds (a dev split) and the fold is then only graded. :func:`evaluate`
replays the weighted vote with ``n`` samples per model on random orderings, next to every single
model's own vote with the same ``n``, and reports paired bootstrap intervals over problems.

Answers of different models are matched after :func:`tts.answers.normalize_answer` (a string
normalisation: ``\\frac12`` and ``0.5`` stay apart, as in one model's vote).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_matrix

from tts.answers import normalize_answer
from tts.backends.engine_log import descriptor_pointed_at
from tts.benchmarks.pool import ModelPool

logger = logging.getLogger(__name__)


class EnsembleError(ValueError):
    """Pools that cannot form an ensemble; the message says what to change."""


@dataclass(frozen=True, eq=False)
class EnsembleData:
    """Several models' samples on their common problems, with answer ids shared across models.

    Args:
        models: Model names.
        problem_ids: The problems every model has samples for.
        answers: ``(M, P, S)`` shared answer ids (-1 = no answer or padding).
        tokens: ``(M, P, S)`` generated tokens (NaN in padding or when unknown).
        counts: ``(M, P)`` real samples per model and problem.
        answer_ok: ``(P, A)`` whether each shared answer id is correct (grading only).
    """

    models: tuple[str, ...]
    problem_ids: tuple[str, ...]
    answers: np.ndarray
    tokens: np.ndarray
    counts: np.ndarray
    answer_ok: np.ndarray

    @property
    def n_answers(self) -> int:
        """Width of the shared answer ids."""
        return int(self.answer_ok.shape[1])

    def shares(self, problems: np.ndarray | None = None) -> np.ndarray:
        """``(M, P, A)`` share of each model's samples that name each answer (all samples)."""
        a = self.answers if problems is None else self.answers[:, problems]
        c = self.counts if problems is None else self.counts[:, problems]
        onehot = (a[..., None] == np.arange(self.n_answers)) & (a[..., None] >= 0)
        return onehot.sum(axis=2) / np.maximum(c, 1)[..., None]


def align(pools: Sequence[ModelPool]) -> EnsembleData:
    """Put several models' pools on their common problems with shared answer ids.

    Raises:
        EnsembleError: Fewer than two models, or no problem that all of them share.
    """
    if len(pools) < 2:
        raise EnsembleError(f"an ensemble needs at least two models, got {len(pools)}")
    common = set(pools[0].problem_ids)
    for mp in pools[1:]:
        common &= set(mp.problem_ids)
    pids = tuple(p for p in pools[0].problem_ids if p in common)
    if not pids:
        raise EnsembleError("the models share no problem id; an ensemble votes on the same problems")
    width = max(mp.n_samples for mp in pools)
    m_, p_ = len(pools), len(pids)
    answers = np.full((m_, p_, width), -1, dtype=np.int32)
    tokens = np.full((m_, p_, width), np.nan)
    counts = np.zeros((m_, p_), dtype=np.int64)
    keys: list[dict[str, int]] = [{} for _ in pids]
    ok: list[dict[int, bool]] = [{} for _ in pids]
    for m, mp in enumerate(pools):
        index = {pid: i for i, pid in enumerate(mp.problem_ids)}
        for q, pid in enumerate(pids):
            i = index[pid]
            # Map the model's own answer ids to shared ids through the normalised text.
            local = np.array([keys[q].setdefault(normalize_answer(t), len(keys[q])) for t in mp.answer_texts[i]]
                             + [-1], dtype=np.int32)
            row = mp.answers[i]
            answers[m, q, : mp.n_samples] = np.where(row >= 0, local[row], -1)
            answers[m, q, : mp.n_samples][~mp.mask[i]] = -1
            tokens[m, q, : mp.n_samples] = np.where(mp.mask[i], mp.tokens[i], np.nan)
            counts[m, q] = int(mp.mask[i].sum())
            for a, good in zip(answers[m, q, : mp.n_samples][mp.mask[i]].tolist(), mp.correct[i][mp.mask[i]].tolist()):
                if a >= 0:
                    ok[q][a] = ok[q].get(a, False) or bool(good)
    n_ans = max(1, max(len(k) for k in keys))
    answer_ok = np.zeros((p_, n_ans), dtype=bool)
    for q, d in enumerate(ok):
        for a, good in d.items():
            answer_ok[q, a] = good
    return EnsembleData(tuple(mp.model for mp in pools), pids, answers, tokens, counts, answer_ok)


@dataclass(frozen=True)
class WeightFit:
    """Weights from :func:`fit_weights` and what the program saw.

    Args:
        weights: ``(M,)`` on the simplex.
        solved: Problems solved in the limit by the weighted vote (of those given).
        free: Problems that every weighting solves; ``contested``: those the program decided.
    """

    weights: np.ndarray
    solved: int
    free: int
    contested: int


def fit_weights(shares: np.ndarray, answer_ok: np.ndarray, *, margin: float = 1e-3,
                time_limit: float = 60.0) -> WeightFit:
    """Per-model weights that maximise the problems a weighted vote solves in the limit (a MILP).

    Args:
        shares: ``(M, P, A)`` answer shares of each model on the dev problems.
        answer_ok: ``(P, A)`` correctness of each answer (dev problems only).
        margin: How much the correct answer's weighted share must exceed every wrong one's.
        time_limit: Seconds HiGHS may take; its best solution so far is used after that.

    Returns:
        A :class:`WeightFit`; ties between optimal weightings are broken by HiGHS.
    """
    shares = np.asarray(shares, dtype=float)
    m_, p_, a_ = shares.shape
    ok = np.asarray(answer_ok, dtype=bool)
    # Per problem: the best correct answer by total share, and every wrong answer any model names.
    star = np.argmax(np.where(ok[None], shares, -1.0).sum(axis=0), axis=1)  # (P,)
    has_star = ok.any(axis=1)
    diff = shares[:, np.arange(p_), star][..., None] - shares  # (M, P, A): star minus each answer
    wrong = ~ok & (shares.sum(axis=0) > 0)  # (P, A)
    lo, hi = diff.min(axis=0), diff.max(axis=0)  # over models: weighted diff lies in [lo, hi]
    free = has_star & np.all(~wrong | (lo >= margin), axis=1)
    hopeless = ~has_star | np.any(wrong & (hi < margin), axis=1)
    contested = np.nonzero(~free & ~hopeless)[0]
    if not len(contested):
        return WeightFit(np.full(m_, 1.0 / m_), int(free.sum()), int(free.sum()), 0)
    rows_q, rows_a = np.nonzero(wrong[contested])
    k = len(rows_q)
    # Variables: w (M), then z (one per contested problem).
    nz = len(contested)
    # Constraint rows: sum_m w_m diff[m, q, a] - (1 + margin) z_q >= margin - (1 + margin)
    data_w = diff[:, contested[rows_q], rows_a].T  # (K, M)
    r = np.repeat(np.arange(k), m_)
    c = np.tile(np.arange(m_), k)
    big = 1.0 + margin
    a_mat = coo_matrix((np.concatenate([data_w.ravel(), np.full(k, -big)]),
                        (np.concatenate([r, np.arange(k)]), np.concatenate([c, m_ + rows_q]))),
                       shape=(k, m_ + nz)).tocsr()
    cons = [LinearConstraint(a_mat, margin - big, np.inf),
            LinearConstraint(np.concatenate([np.ones(m_), np.zeros(nz)])[None], 1.0, 1.0)]
    cost = np.concatenate([np.zeros(m_), -np.ones(nz)])
    # HiGHS writes some lines from C++ to descriptor 1 even with disp off, which broke
    # `tts budget ensemble --json`'s output: the solve writes into /dev/null.
    with open(os.devnull, "w") as null, descriptor_pointed_at(1, null.fileno()):
        res = milp(cost, constraints=cons, integrality=np.concatenate([np.zeros(m_), np.ones(nz)]),
                   bounds=Bounds(0, 1), options={"time_limit": time_limit, "disp": False})
    if res.x is None:
        raise EnsembleError(f"the weight program found no solution ({res.message}); "
                            "pass more dev problems or a smaller margin")
    w = np.clip(res.x[:m_], 0, None)
    w = w / w.sum()
    return WeightFit(w, int(free.sum() + round(-res.fun)), int(free.sum()), nz)


def cross_fit(data: EnsembleData, folds: int = 5, seed: int = 0, **kwargs) -> tuple[np.ndarray, np.ndarray]:
    """Weights for each problem fitted on the other folds (the problem's own grade unused).

    Returns:
        ``(weights, fold)``: ``(P, M)`` weights per problem and ``(P,)`` the fold of each problem.
    """
    p_ = len(data.problem_ids)
    if folds < 2 or p_ < folds:
        raise EnsembleError(f"need at least 2 folds and as many problems; got {folds} folds, {p_} problems")
    fold = np.random.default_rng(seed).permutation(p_) % folds
    shares = data.shares()
    weights = np.zeros((p_, len(data.models)))
    for f in range(folds):
        dev = fold != f
        fit = fit_weights(shares[:, dev], data.answer_ok[dev], **kwargs)
        weights[fold == f] = fit.weights
        logger.info("fold %d: weights %s (dev solved %d of %d)", f, np.round(fit.weights, 3), fit.solved, dev.sum())
    return weights, fold


@dataclass(frozen=True)
class EnsembleResult:
    """Held-out accuracy of the ensemble and of every single model, per samples-per-model n.

    ``acc[n]``: mean accuracy over orderings, per system ("ensemble", then each model).
    ``gap[n]``: ensemble minus each model, with a paired 95% bootstrap interval over problems.
    ``tokens[n]``: mean generated tokens per problem, per system.
    """

    ns: list[int]
    models: list[str]
    weights: np.ndarray
    acc: dict[int, dict[str, tuple[float, float, float]]]
    gap: dict[int, dict[str, tuple[float, float, float]]]
    tokens: dict[int, dict[str, float]]
    extra: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        """A JSON-ready dict."""
        return {"ns": self.ns, "models": self.models, "weights_mean": self.weights.mean(axis=0).tolist(),
                "acc": {str(n): v for n, v in self.acc.items()}, "gap": {str(n): v for n, v in self.gap.items()},
                "tokens": {str(n): v for n, v in self.tokens.items()}, **self.extra}


def _vote(answers: np.ndarray, weights: np.ndarray, n_answers: int, jitter: np.ndarray) -> np.ndarray:
    """Weighted plurality per problem; ``answers`` (M, P, n), ``weights`` (P, M); -1 = no answer.

    Only answers named by a model with a positive weight can win: a single model's vote (one-hot
    weights) that names no answer has none, whatever the other models named.
    """
    onehot = (answers[..., None] == np.arange(n_answers)) & (answers[..., None] >= 0)
    score = np.einsum("mpsa,pm->pa", onehot, weights) + jitter  # jitter breaks ties at random
    named = np.einsum("mpsa,pm->pa", onehot, (weights > 0).astype(float)) > 0
    score = np.where(named, score, -np.inf)
    best = np.argmax(score, axis=1)
    return np.where(np.isfinite(score.max(axis=1)), best, -1)


def evaluate(data: EnsembleData, weights: np.ndarray, ns: Sequence[int], orderings: int = 20, seed: int = 0,
             bootstrap: int = 2000) -> EnsembleResult:
    """Replay the weighted vote and each single model's vote with ``n`` samples per model.

    Args:
        data: The aligned samples.
        weights: ``(P, M)`` per-problem weights (from :func:`cross_fit`).
        ns: Samples per model (at most the fewest any model has on a problem).
        orderings: Random orderings of each model's samples; accuracies are averaged over them.
        seed: Seed of orderings, tie-breaking and bootstrap.
        bootstrap: Resamples of problems for the paired intervals.
    """
    m_, p_, s_ = data.answers.shape
    least = int(data.counts.min())
    if max(ns) > least:
        raise EnsembleError(f"n={max(ns)} samples per model exceeds the fewest a model has on a problem ({least})")
    rng = np.random.default_rng(seed)
    systems = ["ensemble", *data.models]
    w_all = np.concatenate([weights[None], np.broadcast_to(np.eye(m_)[:, None, :], (m_, p_, m_))], axis=0)
    correct = {n: np.zeros((len(systems), p_)) for n in ns}
    toks = {n: np.zeros(len(systems)) for n in ns}
    rows = np.arange(p_)
    for _ in range(orderings):
        keys = rng.random((m_, p_, s_)) + (np.arange(s_)[None, None] >= data.counts[..., None])
        order = np.argsort(keys, axis=2)
        ans = np.take_along_axis(data.answers, order, axis=2)
        tok = np.take_along_axis(np.nan_to_num(data.tokens), order, axis=2)
        jitter = rng.random((p_, data.n_answers)) * 1e-9
        for n in ns:
            per_model_tok = tok[:, :, :n].sum(axis=2).mean(axis=1)  # (M,)
            for i, w in enumerate(w_all):
                pick = _vote(ans[:, :, :n], w, data.n_answers, jitter)
                correct[n][i] += (pick >= 0) & data.answer_ok[rows, np.maximum(pick, 0)]
                used = w.mean(axis=0) > 0 if i == 0 else np.eye(m_)[i - 1] > 0
                toks[n][i] += per_model_tok[used].sum()
    boot = rng.integers(0, p_, size=(bootstrap, p_))
    acc, gap, tokens = {}, {}, {}
    for n in ns:
        c = correct[n] / orderings
        acc[n] = {s: _boot_iv(c[i], boot) for i, s in enumerate(systems)}
        gap[n] = {s: _boot_iv(c[0] - c[i], boot) for i, s in enumerate(systems) if i}
        tokens[n] = {s: float(toks[n][i] / orderings) for i, s in enumerate(systems)}
    return EnsembleResult(list(ns), list(data.models), weights, acc, gap, tokens)


def _boot_iv(per_problem: np.ndarray, boot: np.ndarray) -> tuple[float, float, float]:
    means = per_problem[boot].mean(axis=1)
    return float(per_problem.mean()), float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))
