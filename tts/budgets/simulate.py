"""Replay the allocator on a sample pool and compare it with uniform sampling at matched accuracy.

Honesty (see DESIGN.md, "Honest simulation"): every decision uses only what a real run would know.

* Offline: each problem first draws ``pilot`` samples. Its difficulty bin comes from those
  samples (answers, agreement, token counts, scores) through an estimator, bin edges, accuracy
  curves and per-sample token costs that are all fitted on the *other* folds of problems
  (``folds``-fold cross-fitting). The allocator then picks n per problem. The ``correct`` field
  of a test problem is read only to grade the outcome.
* Online: every problem draws ``initial`` samples, then rounds of one more sample for every
  problem whose vote is not yet decided (:mod:`tts.budgets.online`), least confident first, until
  the budget is spent. Expected sample cost = the problem's own mean sample length so far.

Metrics, all on random orderings of each problem's samples: uniform self-consistency at
``target_n`` (tokens, accuracy); the tokens at which the allocator's mean accuracy curve first
reaches uniform's mean accuracy (less ``tolerance``), and the ratio; the allocator's accuracy when given uniform's
tokens. Intervals are 95% percentile bootstraps over orderings.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from tts.benchmarks.pool import ModelPool
from tts.budgets import difficulty as dif
from tts.budgets.allocator import DEFAULT_LADDER, greedy_allocate, greedy_path
from tts.budgets.online import decided, serve_order, stopping_stages, vote_confidence
from tts.budgets.replay import PrefixReplay, fit_bin_curves, random_orders, replay_prefixes

logger = logging.getLogger(__name__)

Mode = Literal["offline", "online"]


class SimulateConfig(BaseModel):
    """Settings of one replay of the allocator against uniform self-consistency."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    target_n: int = Field(64, ge=1)
    """Uniform baseline: self-consistency with this many samples on every problem."""
    modes: tuple[Mode, ...] = ("offline", "online")
    """Allocator modes to replay: "offline" (plan from pilot difficulty) and/or "online"."""
    orderings: int = Field(20, ge=2)
    """Random orderings of each problem's samples (replays; intervals are over these)."""
    seed: int = 0
    """Seed of orderings, folds and bootstrap."""
    folds: int = Field(5, ge=2)
    """Cross-fitting folds: curves and bins for a problem are fitted on the other folds."""
    pilot: int = Field(4, ge=1)
    """Offline: pilot samples per problem that feed its difficulty estimate (they are kept)."""
    difficulty: Literal["learned", "pilot"] = "learned"
    """Offline difficulty: logistic regression on pilot features, or pilot answer agreement."""
    n_bins: int = Field(5, ge=1)
    """Offline: quantile bins of the difficulty score (Snell et al. use 5)."""
    max_n: int | None = Field(None, ge=1)
    """Most samples per problem (default: the pool's sample count)."""
    initial: int = Field(1, ge=1)
    """Online: samples every problem draws before adaptive rounds."""
    rule: Literal["beta", "exact"] = "beta"
    """Online stopping rule (Aggarwal et al.'s Beta criterion, or exact lead)."""
    confidence: float = Field(0.95, gt=0.5, lt=1.0)
    """Online: Beta-criterion confidence at which a vote counts as decided."""
    escalate: bool = True
    """Online: when every vote is decided and budget is left, raise the bar (0.99, 0.999, exact)."""
    tolerance: float = Field(0.0, ge=0.0, lt=1.0)
    """Match uniform's accuracy up to this many accuracy points (0 = strictly reach it)."""
    bootstrap: int = Field(1000, ge=10)
    """Bootstrap resamples of the orderings for intervals."""


@dataclass(frozen=True)
class Interval:
    """A point estimate (the mean over orderings, or the value on the observed orderings for
    crossings and ratios) with a 95% percentile-bootstrap interval over orderings; intervals of
    crossings are taken over the resamples that reached the target (see ``reached``)."""

    mean: float
    lo: float
    hi: float


@dataclass(frozen=True)
class ModeResult:
    """One allocator mode's replay against the uniform baseline.

    ``tokens_to_match`` and ``token_ratio`` are None when the allocator never reached uniform's
    accuracy; ``reached`` is the share of bootstrap resamples in which it did.
    """

    mode: Mode
    tokens_to_match: Interval | None
    token_ratio: Interval | None
    reached: float
    acc_at_uniform_tokens: Interval
    tokens_at_uniform_budget: Interval
    curve_tokens: list[float] = field(repr=False)
    curve_acc: list[float] = field(repr=False)


@dataclass(frozen=True)
class SimulationResult:
    """Uniform baseline and allocator replays for one model."""

    model: str
    n_problems: int
    orderings: int
    target_n: int
    uniform_tokens: Interval
    uniform_acc: Interval
    modes: dict[str, ModeResult]

    def to_json(self, curves: bool = False) -> dict:
        """A JSON-ready dict; top-level ``allocator_*`` keys describe the first mode."""
        first = next(iter(self.modes.values()))
        out = {"model": self.model, "n_problems": self.n_problems, "orderings": self.orderings,
               "target": f"self_consistency@{self.target_n}", "primary_mode": first.mode,
               **_flat("uniform_tokens", self.uniform_tokens), **_flat("uniform_acc", self.uniform_acc),
               **_flat("allocator_tokens", first.tokens_to_match),
               **_flat("allocator_acc", first.acc_at_uniform_tokens),
               **_flat("token_ratio", first.token_ratio), "modes": {}}
        for name, m in self.modes.items():
            d = asdict(m)
            if not curves:
                d.pop("curve_tokens")
                d.pop("curve_acc")
            out["modes"][name] = d
        return out


def _flat(key: str, iv: Interval | None) -> dict:
    if iv is None:
        return {key: None, f"{key}_ci": None}
    return {key: iv.mean, f"{key}_ci": [iv.lo, iv.hi]}


def _interval(values: np.ndarray) -> Interval:
    v = np.asarray(values, dtype=float)
    return Interval(float(np.mean(v)), float(np.percentile(v, 2.5)), float(np.percentile(v, 97.5)))


def ladder_for(max_n: int, low: int = 1) -> list[int]:
    """Powers of two from the default ladder between ``low`` and ``max_n``, plus both ends."""
    ns = sorted({n for n in DEFAULT_LADDER if low <= n <= max_n} | {low, max_n})
    return [n for n in ns if n >= low]


# --- offline -----------------------------------------------------------------------------------------


def _offline_paths(pool: ModelPool, reps: list[PrefixReplay], orders: np.ndarray, fold: np.ndarray,
                   cfg: SimulateConfig, max_n: int, uniform_tok: np.ndarray):
    """Per ordering: budget path (cum expected cost, realised acc, realised tokens) and the
    realised result of :func:`greedy_allocate` at uniform's tokens."""
    k = min(cfg.pilot, max_n)
    ns = np.asarray(ladder_for(max_n, k))
    p_idx = np.arange(pool.n_problems)[:, None]
    # 1. Run-time pilot information of every (ordering, problem): first k samples of the ordering.
    feats, pilot_tok = [], []
    for r, order in enumerate(orders):
        a, t = pool.answers[p_idx, order[:, :k]], reps[r].sample_tokens[:, :k]
        sc = pool.scores[p_idx, order[:, :k]] if pool.has_scores else None
        feats.append(dif.pilot_features(a, t, sc))
        pilot_tok.append(t.sum(axis=1))
    feats = np.stack(feats)  # (R, P, d)
    pilot_tok = np.stack(pilot_tok)
    vote = np.stack([rep.vote_correct for rep in reps])  # (R, P, S): grading only
    mean_tok = np.nanmean(np.where(pool.mask, pool.tokens, np.nan), axis=1)
    R, P = feats.shape[:2]
    bins = np.zeros((R, P), dtype=np.int64)
    curve_acc = np.zeros((R, P, len(ns)))
    tok_per_sample = np.zeros((R, P))
    # 2. Cross-fitting: estimator, bin edges, curves and costs from the other folds only.
    for f in np.unique(fold):
        tr, te = fold != f, fold == f
        x_tr = feats[:, tr].reshape(-1, feats.shape[-1])
        if cfg.difficulty == "learned":
            y = np.tile(pool.pass_rate()[tr], R)  # training problems' outcomes calibrate the fit
            est = dif.LearnedDifficulty(l2=1.0).fit(x_tr, y)
            s_tr, s_te = est.predict(x_tr), est.predict(feats[:, te].reshape(-1, feats.shape[-1]))
        else:
            s_tr, s_te = x_tr[:, 0], feats[:, te, 0].reshape(-1)
        edges = dif.quantile_edges(s_tr, cfg.n_bins)
        b_tr = dif.assign_bins(s_tr, edges)
        b_te = dif.assign_bins(s_te, edges).reshape(R, -1)
        curves = fit_bin_curves(vote[:, tr].reshape(-1, vote.shape[-1]), b_tr, ns)
        tok_tr = np.tile(mean_tok[tr], R)
        for b in np.unique(b_te):
            if b not in curves:  # an empty training bin: fall back to all training problems
                curves[int(b)] = fit_bin_curves(vote[:, tr].reshape(-1, vote.shape[-1]),
                                                np.zeros(len(b_tr), int), ns)[0]
            sel = b_te == b
            rows = np.broadcast_to(te, (R, P)).copy()
            rows[rows] = sel.reshape(-1)
            curve_acc[rows] = curves[int(b)].accuracy
            tok_per_sample[rows] = tok_tr[b_tr == b].mean() if np.any(b_tr == b) else tok_tr.mean()
        bins[:, te] = b_te
    # 3. Per ordering: the greedy path and the allocation at uniform's tokens, graded afterwards.
    paths, at_uniform = [], []
    for r, rep in enumerate(reps):
        costs = pilot_tok[r][:, None] + (ns[None, :] - k) * tok_per_sample[r][:, None]
        start, probs, opts, cum = greedy_path(costs, curve_acc[r])
        n = ns[start].copy()
        acc0, tok0 = rep.correct_at(n).astype(float), rep.tokens_at(n)
        n_new = ns[opts]
        # Replaying the path in order: the n before each step is the problem's previous n.
        prev = np.empty(len(probs), dtype=np.int64)
        last = n.copy()
        for i, p in enumerate(probs.tolist()):
            prev[i] = last[p]
            last[p] = n_new[i]
        d_acc = rep.vote_correct[probs, np.minimum(n_new, rep.count[probs]) - 1].astype(float) - \
            rep.vote_correct[probs, np.minimum(prev, rep.count[probs]) - 1]
        d_tok = rep.tokens[probs, np.minimum(n_new, rep.count[probs]) - 1] - \
            rep.tokens[probs, np.minimum(prev, rep.count[probs]) - 1]
        base_cost = float(costs[np.arange(P), start].sum())
        paths.append((np.concatenate([[base_cost], cum]),
                      np.concatenate([[acc0.mean()], acc0.mean() + np.cumsum(d_acc) / P]),
                      np.concatenate([[tok0.sum()], tok0.sum() + np.cumsum(d_tok)])))
        choice = greedy_allocate(costs, curve_acc[r], max(float(uniform_tok[r]), base_cost))
        n_plan = ns[choice]
        at_uniform.append((rep.correct_at(n_plan).mean(), rep.tokens_at(n_plan).sum()))
    return paths, np.asarray(at_uniform)


# --- online -------------------------------------------------------------------------------------------


def _online_path(rep: PrefixReplay, cfg: SimulateConfig, max_n: int):
    """One ordering's adaptive run without a budget: per sample, the budget at which it is still
    drawn, and the realised accuracy and tokens. A budget B keeps the prefix of samples whose
    threshold (running max) is <= B, exactly as :class:`OnlineAllocator` would stop."""
    P = len(rep.count)
    cap = np.minimum(rep.count, max_n)
    n = np.minimum(cap, cfg.initial)
    rows = np.arange(P)
    acc0 = rep.vote_correct[rows, n - 1].astype(float)
    spent = float(rep.tokens[rows, n - 1].sum())
    thr, d_acc, d_tok = [], [], []
    base = spent
    stages = iter(stopping_stages(cfg.rule, cfg.confidence, cfg.escalate))
    rule, conf = next(stages)
    while True:
        t1, t2 = rep.top1[rows, n - 1], rep.top2[rows, n - 1]
        open_ = ~decided(t1, t2, n, cap, rule=rule, confidence=conf)
        if not open_.any():
            rule, conf = next(stages, (None, None))
            if rule is None:
                break
            continue
        who = serve_order(vote_confidence(t1, t2), open_)
        expected = rep.tokens[who, n[who] - 1] / n[who]  # the problem's own mean so far
        thr.append(spent + np.cumsum(expected))
        d_acc.append(rep.vote_correct[who, n[who]].astype(float) - rep.vote_correct[who, n[who] - 1])
        new_tok = rep.sample_tokens[who, n[who]]
        d_tok.append(new_tok)
        spent += float(new_tok.sum())
        n[who] += 1
    if not thr:
        return np.array([base]), np.array([acc0.mean()]), np.array([base])
    thr = np.maximum.accumulate(np.concatenate(thr))
    acc = acc0.mean() + np.cumsum(np.concatenate(d_acc)) / P
    tok = base + np.cumsum(np.concatenate(d_tok))
    return np.concatenate([[base], thr]), np.concatenate([[acc0.mean()], acc]), np.concatenate([[base], tok])


# --- comparison ----------------------------------------------------------------------------------------


def _on_grid(paths, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(R, G) realised accuracy and tokens of each ordering's path at each budget of the grid."""
    acc = np.full((len(paths), len(grid)), np.nan)
    tok = np.full_like(acc, np.nan)
    for r, (budget, a, t) in enumerate(paths):
        i = np.searchsorted(budget, grid, side="right") - 1
        ok = i >= 0
        acc[r, ok], tok[r, ok] = a[i[ok]], t[i[ok]]
    return acc, tok


def _compare(mode: Mode, paths, uniform_acc: np.ndarray, uniform_tok: np.ndarray,
             at_uniform: np.ndarray, cfg: SimulateConfig) -> ModeResult:
    lo = max(min(p[0][0] for p in paths), 1.0)
    hi = max(max(p[0][-1] for p in paths), uniform_tok.max()) * 1.01
    grid = np.geomspace(lo, hi, 400)
    acc, tok = _on_grid(paths, grid)
    acc = np.nan_to_num(acc, nan=0.0)
    tok = np.where(np.isnan(tok), np.inf, tok)
    rng = np.random.default_rng(cfg.seed + 1)
    boot = rng.integers(0, len(paths), size=(cfg.bootstrap, len(paths)))
    boot[0] = np.arange(len(paths))  # resample 0 = the observed orderings
    mean_acc = acc[boot].mean(axis=1)  # (B, G)
    mean_tok = tok[boot].mean(axis=1)
    target = uniform_acc[boot].mean(axis=1)
    hit = mean_acc >= target[:, None] - cfg.tolerance - 1e-12
    reached = hit.any(axis=1)
    first = np.argmax(hit, axis=1)
    need = np.where(reached, mean_tok[np.arange(len(boot)), first], np.nan)
    ratio = uniform_tok[boot].mean(axis=1) / need
    ok = reached & np.isfinite(need)
    tokens_iv = ratio_iv = None
    if ok[0]:
        tokens_iv = Interval(float(need[0]), *np.percentile(need[ok], [2.5, 97.5]).tolist())
        ratio_iv = Interval(float(ratio[0]), *np.percentile(ratio[ok], [2.5, 97.5]).tolist())
    return ModeResult(mode, tokens_iv, ratio_iv, float(reached.mean()), _interval(at_uniform[:, 0]),
                      _interval(at_uniform[:, 1]), np.nanmean(tok, axis=0).tolist(),
                      acc.mean(axis=0).tolist())


def simulate(pool: ModelPool, cfg: SimulateConfig | None = None) -> SimulationResult:
    """Replay uniform self-consistency and the allocator (offline and/or online) on one model.

    Args:
        pool: One model's samples (``load_pool(path)[model]``); needs token counts.
        cfg: Settings; defaults to :class:`SimulateConfig`'s.

    Returns:
        Uniform tokens/accuracy at ``target_n`` and, per mode, the tokens needed to match its
        accuracy, the ratio, and the accuracy at uniform's tokens, with 95% intervals.
    """
    cfg = cfg or SimulateConfig()
    if not pool.has_tokens:
        raise ValueError(f"model {pool.model!r} has samples without num_tokens; a token-budget replay "
                         "needs every sample's token count")
    if pool.n_problems < cfg.folds:
        raise ValueError(f"{pool.n_problems} problems cannot be split into {cfg.folds} folds; "
                         "lower --folds or use a bigger pool")
    max_n = min(cfg.max_n or pool.n_samples, pool.n_samples)
    if cfg.target_n > pool.n_samples:
        raise ValueError(f"target n={cfg.target_n} exceeds the pool's {pool.n_samples} samples per problem; "
                         f"pick n <= {pool.n_samples}")
    rng = np.random.default_rng(cfg.seed)
    fold = rng.permutation(pool.n_problems) % cfg.folds
    orders = random_orders(pool.mask, cfg.orderings, rng)
    reps = [replay_prefixes(pool, o) for o in orders]
    target = np.full(pool.n_problems, cfg.target_n)
    uniform_acc = np.array([rep.correct_at(target).mean() for rep in reps])
    uniform_tok = np.array([rep.tokens_at(target).sum() for rep in reps])
    modes: dict[str, ModeResult] = {}
    for mode in cfg.modes:
        if mode == "offline":
            paths, at_u = _offline_paths(pool, reps, orders, fold, cfg, max_n, uniform_tok)
        else:
            paths = [_online_path(rep, cfg, max_n) for rep in reps]
            at_u = []
            for (budget, a, t), ut in zip(paths, uniform_tok):
                i = max(int(np.searchsorted(budget, ut, side="right")) - 1, 0)
                at_u.append((a[i], t[i]))
            at_u = np.asarray(at_u)
        modes[mode] = _compare(mode, paths, uniform_acc, uniform_tok, at_u, cfg)
        logger.info("%s %s: %s", pool.model, mode, modes[mode].token_ratio)
    return SimulationResult(pool.model, pool.n_problems, cfg.orderings, cfg.target_n,
                            _interval(uniform_tok), _interval(uniform_acc), modes)
