"""Replay the allocator on a sample pool and compare it with uniform sampling at matched accuracy.

Honesty (docs/architecture.md, "Honest simulation"): every decision uses only what a real run would know.

* Offline: each problem first draws ``pilot`` samples. Its difficulty bin comes from those
  samples (answers, agreement, token counts, scores) through an estimator, bin edges, accuracy
  curves and per-sample token costs that are all fitted on the *other* folds of problems
  (``folds``-fold cross-fitting). Each fold is then allocated on its own, with its share of the
  budget (in proportion to its problems): one global allocation would let fold A's plans depend
  on fold B's curves, which were fitted on fold A's grades. The ``correct`` field of a problem is
  read only to grade its outcome and to fit the curves of the *other* folds.
* Online: the rule of a real ``tts eval --allocate`` run (:mod:`tts.budgets.online`): rounds of
  ``chunk`` samples for every undecided problem, least confident first, paid for call by call
  while their worst case fits the budget left. It never reads ``correct``. The worst case of a
  request is ``chunk * max_tokens`` generated tokens; pools record neither the generation limit
  nor prompt lengths, so the replay takes ``max_tokens`` from the config or else the pool's
  longest sample (the limit is at least that), and prices prompts at 0 (the pool's token counts,
  which every replay reports, are generated tokens only).

Metrics, all on random orderings of each problem's samples: uniform self-consistency at
``target_n`` (tokens, accuracy); the tokens at which the allocator's mean accuracy curve first
reaches uniform's mean accuracy (less ``tolerance``), and the ratio; the allocator's accuracy when
given uniform's tokens. Intervals are 95% percentile bootstraps over orderings.
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
from tts.budgets.online import OnlinePolicy, RateModel
from tts.budgets.replay.matched import Interval, ModeResult, compare_at_matched, flat, interval
from tts.budgets.replay.online import OnlineSequence, race_table, streak_table, vote_table, within_each
from tts.budgets.replay.oracle import oracle_ratio, oracle_samples, running_leaders
from tts.budgets.replay.prefix import (
    PrefixReplay,
    fit_bin_curves,
    random_orders,
    replay_prefixes,
)

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
    """Most samples per problem (default: offline, the pool's sample count; online, ``target_n``,
    as ``tts eval --allocate``'s ``--n-max`` defaults to 64, the size of the baseline it is
    compared with); never more than the pool holds."""
    chunk: int = Field(4, ge=1)
    """Online: samples a chosen problem gets per round (``tts eval --allocate --chunk``)."""
    rule: Literal["beta", "horizon", "dirichlet", "exact", "rate", "window"] = "horizon"
    """Online stopping rule: the leader holds up to ``max_n`` samples ("horizon", the default;
    :func:`tts.budgets.online.overturn_risk`), Aggarwal et al.'s Beta or Dirichlet criterion
    (:func:`tts.budgets.online.dirichlet_confidence`), ESC's window, exact lead, or a predicted gain per
    sample below ``min_gain`` ("rate": pass ``simulate(..., rate_model=...)``; see
    :class:`tts.budgets.online.RateModel`)."""
    min_gain: float = Field(1e-3, gt=0.0, lt=1.0)
    """Online, rule "rate": the least predicted accuracy gain per sample worth paying for."""
    confidence: float = Field(0.95, gt=0.5, lt=1.0)
    """Online: Beta-criterion confidence at which a vote counts as decided."""
    prior: float = Field(1.0, gt=0.0)
    """Online, rules "horizon" and "dirichlet": pseudo-votes per answer of the prior (1 = uniform)."""
    top_k: int = Field(5, ge=2)
    """Online, rule "dirichlet": how many of the most voted answers enter the posterior."""
    window: int = Field(8, ge=1)
    """Online, rule "window": the run of equal answers that stops a problem (ESC's window)."""
    length_weight: float = Field(0.0, ge=0.0)
    """Online, rules "horizon" and "beta": length as confidence in the race (0 = plain votes;
    :func:`tts.budgets.online.race_votes`)."""
    give_up_after: int = Field(0, ge=0)
    """Online: in the first stage, stop a problem with at least this many samples whose leader
    holds less than ``give_up_share`` of them (0 = never)."""
    give_up_share: float = Field(1 / 3, gt=0.0, le=1.0)
    """Online: see ``give_up_after``."""
    confirm_window: int = Field(0, ge=0)
    """Online, "horizon", "beta" and "dirichlet": a stop also needs the last this-many answers to agree (0 = off)."""
    ladder: tuple[float, ...] | None = None
    """Online, "horizon", "beta" and "dirichlet": the confidences the bar rises through while budget is left
    (None: :func:`tts.budgets.online.default_ladder`)."""
    escalate: bool = True
    """Online: when every vote is decided and budget is left, raise the bar (``ladder``, then exact)."""
    max_tokens: int | None = Field(None, ge=1)
    """Online: the generation limit that bounds a sample's cost at its worst (default: the pool's
    longest sample, the tightest value the pool supports)."""
    tolerance: float = Field(0.0, ge=0.0, lt=1.0)
    """Match uniform's accuracy up to this many accuracy points (0 = strictly reach it)."""
    bootstrap: int = Field(1000, ge=10)
    """Bootstrap resamples of the orderings for intervals."""


@dataclass(frozen=True, eq=False)
class ModeDecisions:
    """What one allocator mode decided in each ordering, for audits (decisions never read grades).

    Args:
        n_at_uniform: ``(orderings, problems)`` samples each problem gets at uniform's tokens.
        steps: Per ordering, per fold (online: one entry, or one per fold under a
            cross-fitted rate model, in pool indices), the decision sequence as a
            ``(2, steps)`` array: offline, the problem and its new n of each greedy upgrade;
            online, the problem and samples of each request of every round (unlimited budget).
    """

    n_at_uniform: np.ndarray
    steps: list[list[np.ndarray]]


@dataclass(frozen=True)
class SimulationResult:
    """Uniform baseline and allocator replays for one model.

    ``folds`` (the cross-fitting fold of each problem) and ``decisions`` (per mode) are kept for
    audits and left out of :meth:`to_json`.
    """

    model: str
    n_problems: int
    orderings: int
    target_n: int
    uniform_tokens: Interval
    uniform_acc: Interval
    modes: dict[str, ModeResult]
    oracle_ratio: Interval | None = None
    """Consistency oracle (:mod:`~tts.budgets.replay.oracle`): uniform's tokens over the oracle's,
    stopping at any n; an analysis bound, not an allocator."""
    oracle_ratio_chunk: Interval | None = None
    """The same oracle, stopping only at whole chunks of the online rule's ``chunk``."""
    folds: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64), repr=False, compare=False)
    decisions: dict[str, ModeDecisions] = field(default_factory=dict, repr=False, compare=False)

    def to_json(self, curves: bool = False) -> dict:
        """A JSON-ready dict; top-level ``allocator_*`` keys describe the first mode."""
        first = next(iter(self.modes.values()))
        out = {"model": self.model, "n_problems": self.n_problems, "orderings": self.orderings,
               "target": f"self_consistency@{self.target_n}", "primary_mode": first.mode,
               **flat("uniform_tokens", self.uniform_tokens), **flat("uniform_acc", self.uniform_acc),
               **flat("allocator_tokens", first.tokens_to_match),
               **flat("allocator_acc", first.acc_at_uniform_tokens),
               **flat("token_ratio", first.token_ratio), **flat("oracle_ratio", self.oracle_ratio),
               **flat("oracle_ratio_chunk", self.oracle_ratio_chunk), "modes": {}}
        for name, m in self.modes.items():
            d = asdict(m)
            if not curves:
                d.pop("curve_tokens")
                d.pop("curve_acc")
            out["modes"][name] = d
        return out


def ladder_for(max_n: int, low: int = 1) -> list[int]:
    """Powers of two from the default ladder between ``low`` and ``max_n``, plus both ends."""
    ns = sorted({n for n in DEFAULT_LADDER if low <= n <= max_n} | {low, max_n})
    return [n for n in ns if n >= low]


# --- offline -----------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class _Path:
    """One fold's greedy path in one ordering: after each step, the expected cost (the budget
    it needs), the realised number of correct votes and the realised tokens."""

    budget: np.ndarray
    correct: np.ndarray
    tokens: np.ndarray


def _pilot_inputs(pool: ModelPool, reps: list[PrefixReplay], orders: np.ndarray,
                  k: int) -> tuple[np.ndarray, np.ndarray]:
    """Run-time pilot information of every (ordering, problem), from the ordering's first k samples:
    difficulty features (R, P, d) and the pilot's tokens (R, P)."""
    p_idx = np.arange(pool.n_problems)[:, None]
    feats, pilot_tok = [], []
    for r, order in enumerate(orders):
        a, t = pool.answers[p_idx, order[:, :k]], reps[r].sample_tokens[:, :k]
        sc = pool.scores[p_idx, order[:, :k]] if pool.has_scores else None
        feats.append(dif.pilot_features(a, t, sc))
        pilot_tok.append(t.sum(axis=1))
    return np.stack(feats), np.stack(pilot_tok)


def _fold_expectations(pool: ModelPool, feats: np.ndarray, vote: np.ndarray, mean_tok: np.ndarray,
                       fold: np.ndarray, f: int, cfg: SimulateConfig, ns: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Fold ``f``'s problems, and per ordering the expected accuracy (R, P_f, len(ns)) and tokens
    per further sample (R, P_f) of each of them, cross-fitted: the difficulty estimator, bin edges,
    curves and token means come from the other folds only. A bin no training problem falls in
    uses all training problems."""
    R = feats.shape[0]
    tr, te = fold != f, np.nonzero(fold == f)[0]
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
    v_tr = vote[:, tr].reshape(-1, vote.shape[-1])
    curves = fit_bin_curves(v_tr, b_tr, ns)
    tok_tr = np.tile(mean_tok[tr], R)
    acc = np.zeros((R, len(te), len(ns)))
    per_sample = np.zeros((R, len(te)))
    for b in np.unique(b_te).tolist():
        if b not in curves:  # an empty training bin: fall back to all training problems
            curves[b] = fit_bin_curves(v_tr, np.zeros(len(b_tr), int), ns)[0]
        sel = b_te == b
        acc[sel] = curves[b].accuracy
        per_sample[sel] = tok_tr[b_tr == b].mean() if np.any(b_tr == b) else tok_tr.mean()
    return te, acc, per_sample


def _graded_path(rep: PrefixReplay, te: np.ndarray, costs: np.ndarray, accs: np.ndarray,
                 ns: np.ndarray) -> tuple[_Path, np.ndarray]:
    """One fold's greedy path in one ordering, planned on expected ``costs`` and ``accs`` and graded
    afterwards on the replay: cumulative expected cost, realised correct count and tokens after each
    upgrade; and the upgrades as a (2, steps) array of (problem, new n)."""
    start, probs, opts, cum = greedy_path(costs, accs)
    n = ns[start].copy()
    rows = te[probs]  # the upgraded problems, as pool indices
    n_new = ns[opts]
    # Replaying the path in order: the n before each step is the problem's previous n.
    prev = np.empty(len(probs), dtype=np.int64)
    last = n.copy()
    for i, q in enumerate(probs.tolist()):
        prev[i] = last[q]
        last[q] = n_new[i]
    cnt = rep.count[rows]
    d_ok = rep.vote_correct[rows, np.minimum(n_new, cnt) - 1].astype(float) - \
        rep.vote_correct[rows, np.minimum(prev, cnt) - 1]
    d_tok = rep.tokens[rows, np.minimum(n_new, cnt) - 1] - rep.tokens[rows, np.minimum(prev, cnt) - 1]
    ok0 = float(rep.vote_correct[te, np.minimum(n, rep.count[te]) - 1].sum())
    tok0 = float(rep.tokens[te, np.minimum(n, rep.count[te]) - 1].sum())
    base = float(costs[np.arange(len(te)), start].sum())
    path = _Path(np.concatenate([[base], cum]), np.concatenate([[ok0], ok0 + np.cumsum(d_ok)]),
                 np.concatenate([[tok0], tok0 + np.cumsum(d_tok)]))
    return path, np.stack([rows, n_new])


def _offline(pool: ModelPool, reps: list[PrefixReplay], orders: np.ndarray, fold: np.ndarray,
             cfg: SimulateConfig, max_n: int):
    """Per ordering and fold: the greedy path and the plan maker, with everything a fold's
    decisions use fitted on the other folds."""
    k = min(cfg.pilot, max_n)
    ns = np.asarray(ladder_for(max_n, k))
    # 1. Run-time pilot information of every (ordering, problem): first k samples of the ordering.
    feats, pilot_tok = _pilot_inputs(pool, reps, orders, k)
    vote = np.stack([rep.vote_correct for rep in reps])  # (R, P, S): curves of OTHER folds, grading
    mean_tok = np.nanmean(np.where(pool.mask, pool.tokens, np.nan), axis=1)
    folds: dict[int, np.ndarray] = {}  # fold -> its problems
    costs_of: dict[int, np.ndarray] = {}  # fold -> (R, P_f, len(ns)) expected cost of each n
    accs_of: dict[int, np.ndarray] = {}  # fold -> expected accuracy of each n, from other folds
    for f in np.unique(fold).tolist():
        # 2. Cross-fitting: estimator, bin edges, curves and costs from the other folds only.
        te, acc, per_sample = _fold_expectations(pool, feats, vote, mean_tok, fold, f, cfg, ns)
        folds[f] = te
        costs_of[f] = pilot_tok[:, te, None] + (ns[None, None, :] - k) * per_sample[:, :, None]
        accs_of[f] = acc
    # 3. Per ordering and fold: the greedy path, graded afterwards.
    paths: list[dict[int, _Path]] = []
    steps: list[list[np.ndarray]] = []
    for r, rep in enumerate(reps):
        paths.append({})
        steps.append([])
        for f, te in folds.items():
            paths[r][f], upgrades = _graded_path(rep, te, costs_of[f][r], accs_of[f][r], ns)
            steps[r].append(upgrades)

    def plan(r: int, budget: float) -> np.ndarray:
        """n per problem that ordering r's plans give at a total budget (each fold its share)."""
        n = np.zeros(pool.n_problems, dtype=np.int64)
        for f, te in folds.items():
            costs = costs_of[f][r]
            share = max(budget * len(te) / pool.n_problems, float(costs.min(axis=1).sum()))
            n[te] = ns[greedy_allocate(costs, accs_of[f][r], share)]
        return n

    return paths, steps, plan


def _offline_on_grid(paths: list[dict[int, _Path]], fold: np.ndarray, grid: np.ndarray):
    """(R, G) realised accuracy and tokens at each total budget, each fold at its share."""
    n_problems = len(fold)
    acc = np.zeros((len(paths), len(grid)))
    tok = np.zeros_like(acc)
    for r, by_fold in enumerate(paths):
        for f, path in by_fold.items():
            i = np.searchsorted(path.budget, grid * np.sum(fold == f) / n_problems, side="right") - 1
            ok = i >= 0
            acc[r] += np.where(ok, path.correct[np.maximum(i, 0)], np.nan)
            tok[r] += np.where(ok, path.tokens[np.maximum(i, 0)], np.nan)
    return acc / n_problems, tok


# --- online -------------------------------------------------------------------------------------------


def _online(pool: ModelPool, reps: list[PrefixReplay], cfg: SimulateConfig, max_n: int,
            orders: np.ndarray, fold: np.ndarray, rate_model: RateModel | None = None):
    """Per ordering, the online runs at unlimited budget, the worst-case bound they are paid under.

    Returns ``(units, worst)``: per ordering, a list of ``(problems, sequence, (ok, tokens))``:
    the run's problems (pool indices), its :class:`OnlineSequence` (indices local to those
    problems) and its per-sample accuracy and token increments. One run holds every problem,
    except under a rate model fitted on graded problems (``cross_fitted``), whose rates for a fold
    come from the other folds: there
    each fold is a run of its own with its share of the budget (as offline), so that no problem's
    rounds or budget depend on rates fitted on its own grades (a global run would couple them
    through the shared stages and budget cuts).
    """
    policy = OnlinePolicy(n_max=max_n, chunk=cfg.chunk, rule=cfg.rule, confidence=cfg.confidence,
                          escalate=cfg.escalate, min_gain=cfg.min_gain, rate_model=rate_model, prior=cfg.prior,
                          window=cfg.window, length_weight=cfg.length_weight,
                          give_up_after=cfg.give_up_after, give_up_share=cfg.give_up_share, ladder=cfg.ladder,
                          confirm_window=cfg.confirm_window, top_k=cfg.top_k)
    cap = np.minimum(pool.counts, max_n)
    max_tokens = float(cfg.max_tokens or np.nanmax(np.where(pool.mask, pool.tokens, np.nan)))

    def worst(p: np.ndarray, k: np.ndarray) -> np.ndarray:
        return np.asarray(k, dtype=float) * max_tokens

    rates: list[np.ndarray | None] = [None] * len(reps)
    groups = [np.arange(pool.n_problems)]
    if cfg.rule == "rate":
        rates = rate_model.replay_rates(pool, orders, reps, fold, cap, cfg.chunk)
        if rate_model.cross_fitted:  # each fold's rates come from the other folds: one run per fold
            groups = [np.nonzero(fold == f)[0] for f in np.unique(fold).tolist()]
    units = []
    p_idx = np.arange(pool.n_problems)[:, None]
    for order, rep, rate in zip(orders, reps, rates):
        units.append([])
        drawn = np.where(pool.mask[p_idx, order], pool.answers[p_idx, order], -1)  # answers in drawing order
        race = race_table(drawn, rep.sample_tokens, cfg.length_weight) if cfg.length_weight else None
        streak = streak_table(drawn) if cfg.rule == "window" or cfg.confirm_window else None
        votes = vote_table(drawn, cfg.top_k) if cfg.rule == "dirichlet" else None
        for te in groups:
            seq = OnlineSequence.build(rep.top1[te], rep.top2[te], rep.sample_tokens[te], cap[te], policy,
                                       None if rate is None else rate[te],
                                       None if race is None else (race[0][te], race[1][te]),
                                       None if streak is None else streak[te],
                                       None if votes is None else votes[te])
            q, c = te[seq.sample_problem], seq.columns
            now = rep.vote_correct[q, c].astype(float)
            before = np.where(c > 0, rep.vote_correct[q, np.maximum(c - 1, 0)], False)
            units[-1].append((te, seq, (np.concatenate([[0.0], np.cumsum(now - before)]),
                                        np.concatenate([[0.0], np.cumsum(rep.sample_tokens[q, c])]))))
    return units, worst


def _grid(lo: float, hi: float) -> np.ndarray:
    return np.geomspace(max(lo, 1.0), max(hi, lo * 1.01, 2.0), 400)


def simulate(pool: ModelPool, cfg: SimulateConfig | None = None, rate_model: RateModel | None = None) -> SimulationResult:
    """Replay uniform self-consistency and the allocator (offline and/or online) on one model.

    Args:
        pool: One model's samples (``load_pool(path)[model]``); needs token counts.
        cfg: Settings; defaults to :class:`SimulateConfig`'s.
        rate_model: Online rule "rate": what predicts each vote's gain per sample.

    Returns:
        Uniform tokens/accuracy at ``target_n`` and, per mode, the tokens needed to match its
        accuracy, the ratio, and the accuracy at uniform's tokens, with 95% intervals; the
        decisions of every ordering are kept in ``decisions`` for audits.
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
    decisions: dict[str, ModeDecisions] = {}
    oracle = _oracle(pool, orders, reps, cfg, uniform_tok)
    for mode in cfg.modes:
        if mode == "offline":
            paths, steps, plan = _offline(pool, reps, orders, fold, cfg, max_n)
            shares = {f: np.sum(fold == f) / pool.n_problems for f in paths[0]}
            lo = min(max(p.budget[0] / shares[f] for f, p in by_fold.items()) for by_fold in paths)
            hi = max(max(p.budget[-1] / shares[f] for f, p in by_fold.items()) for by_fold in paths)
            grid = _grid(lo, max(hi, uniform_tok.max()) * 1.01)
            acc, tok = _offline_on_grid(paths, fold, grid)
            n_u = np.stack([plan(r, float(ut)) for r, ut in enumerate(uniform_tok)])
            at_u = np.array([(rep.correct_at(n).mean(), rep.tokens_at(n).sum()) for rep, n in zip(reps, n_u)])
        else:
            online_max = min(cfg.max_n or cfg.target_n, pool.n_samples)
            units, worst = _online(pool, reps, cfg, online_max, orders, fold, rate_model)
            flat = [(r, te, seq, g) for r, us in enumerate(units) for te, seq, g in us]
            lo = min(float(rep.sample_tokens[:, 0].sum()) for rep in reps)
            hi = max(max(sum(float(g[1][-1]) for _, _, g in us) for us in units), uniform_tok.max()) * 1.01
            grid = _grid(lo, hi)
            acc = np.zeros((len(reps), len(grid)))
            tok = np.zeros_like(acc)
            n_u = np.zeros((len(reps), pool.n_problems), dtype=np.int64)
            at_u = np.zeros((len(reps), 2))
            # Each run gets its problems' share of every budget (one run: all of it).
            budgets = np.stack([np.append(grid, uniform_tok[r]) * len(te) / pool.n_problems for r, te, _, _ in flat])
            for (r, te, seq, (ok, tk)), drawn in zip(flat, within_each([u[2] for u in flat], budgets, worst)):
                acc[r] += ok[drawn[:-1]] / pool.n_problems
                tok[r] += tk[drawn[:-1]]
                at_u[r] += ok[drawn[-1]] / pool.n_problems, tk[drawn[-1]]
                n_u[r, te] = seq.n_at(int(drawn[-1]))
            steps = [[np.stack([te[seq.p], seq.k]) for te, seq, _ in us] for us in units]
        modes[mode] = compare_at_matched(mode, grid, acc, tok, uniform_acc, uniform_tok, at_u, seed=cfg.seed,
                                         bootstrap=cfg.bootstrap, tolerance=cfg.tolerance)
        decisions[mode] = ModeDecisions(n_u, steps)
        logger.info("%s %s: %s", pool.model, mode, modes[mode].token_ratio)
    return SimulationResult(pool.model, pool.n_problems, cfg.orderings, cfg.target_n,
                            interval(uniform_tok), interval(uniform_acc), modes, *oracle, fold, decisions)


def _oracle(pool: ModelPool, orders: np.ndarray, reps: list[PrefixReplay], cfg: SimulateConfig,
            uniform_tok: np.ndarray) -> tuple[Interval, Interval]:
    """The consistency oracle's token ratio to uniform, stopping at any n and at whole chunks."""
    tok = np.zeros((2, len(reps)))
    for r, (order, rep) in enumerate(zip(orders, reps)):
        lead = running_leaders(pool, order)
        for i, chunk in enumerate((1, cfg.chunk)):
            tok[i, r] = rep.tokens_at(oracle_samples(lead, cfg.target_n, chunk)).sum()
    return tuple(oracle_ratio(uniform_tok, t, seed=cfg.seed, bootstrap=cfg.bootstrap) for t in tok)
