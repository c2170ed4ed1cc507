"""The online replay of ``simulate`` against the live allocator: for every rule setting, the replay's
decisions, samples per problem at uniform's tokens, accuracy and tokens are those of
:class:`~tts.budgets.online.OnlineAllocator` driven sample by sample on the same orderings, as a
``tts eval --allocate`` run with the config's settings would be (:mod:`tts.budgets.replay.simulate`)."""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pytest

from tests.budgets.replay.test_simulate import _pool
from tests.budgets.test_online import _drive
from tts.budgets.online import OnlineAllocator, OnlinePolicy
from tts.budgets.rate_models.vote_value import VoteValue
from tts.budgets.replay.prefix import random_orders, replay_prefixes
from tts.budgets.replay.simulate import SimulateConfig, simulate

COMMON = dict(target_n=16, modes=("online",), orderings=2, folds=3, bootstrap=10)
POLICY_FIELDS = ("chunk", "rule", "confidence", "escalate", "prior", "window", "length_weight", "give_up_after",
                 "give_up_share", "ladder", "confirm_window", "top_k")


def _orders(pool, cfg: SimulateConfig) -> np.ndarray:
    """The replay's orderings: the seed draws the folds first, then the orderings."""
    rng = np.random.default_rng(cfg.seed)
    rng.permutation(pool.n_problems)
    return random_orders(pool.mask, cfg.orderings, rng)


def _live(pool, order, cfg: SimulateConfig, budget: float, rate_model=None) -> OnlineAllocator:
    """A live run on one ordering: each problem's samples arrive in the ordering's order, each
    request paid at its worst case (``max_tokens`` per sample: the config's, else the pool's longest)."""
    n_max = min(cfg.max_n or cfg.target_n, pool.n_samples)
    policy = OnlinePolicy(n_max=n_max, min_gain=cfg.min_gain, rate_model=rate_model,
                          **{f: getattr(cfg, f) for f in POLICY_FIELDS})
    longest = cfg.max_tokens or float(np.nanmax(pool.tokens[pool.mask]))

    def answer(p, i):
        a = pool.answers[p, order[p, i]]
        return None if a < 0 else str(a)

    return _drive(OnlineAllocator(list(range(pool.n_problems)), budget, policy), answer,
                  lambda p, i: float(pool.tokens[p, order[p, i]]), lambda p, k: longest * np.asarray(k, dtype=float))


SETTINGS = [{}, {"rule": "beta", "confidence": 0.8}, {"escalate": False}, {"prior": 4.0},
            {"rule": "window", "window": 3}, {"length_weight": 1.0}, {"give_up_after": 8, "give_up_share": 0.6},
            {"ladder": (0.97, 0.99)}, {"confirm_window": 3}, {"rule": "dirichlet", "top_k": 2},
            {"rule": "dirichlet"}, {"max_n": 8}, {"max_n": 24}, {"chunk": 3}, {"max_tokens": 5000},
            {"rule": "rate", "min_gain": 5e-3}, {"rule": "rate", "min_gain": 2e-2}]


def _with_holes(pool):
    """The pool with the last 6 samples of every third problem missing (fewer samples there)."""
    mask = pool.mask.copy()
    mask[::3, -6:] = False
    return dataclasses.replace(pool, mask=mask, answers=np.where(mask, pool.answers, -1),
                               tokens=np.where(mask, pool.tokens, np.nan), correct=pool.correct & mask)


# With holes, only settings whose n stays within the 18 samples every problem has: the replay stops a
# problem at its pool's samples, which a live run (with no pool behind it) has no reason to do.
CASES = [(s, False) for s in SETTINGS] + [(s, True) for s in SETTINGS if s.get("max_n", 16) <= 18]


@pytest.mark.parametrize(("setting", "holes"), CASES, ids=lambda v: (
    ("holes" if v else "full") if isinstance(v, bool) else ",".join(f"{k}={x}" for k, x in v.items()) or "defaults"))
def test_the_online_replay_decides_what_a_live_run_with_its_settings_decides(setting, holes) -> None:
    pool = _with_holes(_pool()) if holes else _pool()
    cfg = SimulateConfig(**COMMON, **setting)
    # Rule "rate" with a closed-form rate model (not fitted on grades: one run over every problem).
    rates = VoteValue(1.0) if cfg.rule == "rate" else None
    res = simulate(pool, cfg, rate_model=rates)
    decisions = res.decisions["online"]
    acc_u, tok_u, acc_all, tok_all = [], [], [], []
    for r, order in enumerate(_orders(pool, cfg)):
        rep = replay_prefixes(pool, order)
        # Unlimited budget: the same requests, round by round, problem by problem.
        everything = _live(pool, order, cfg, 1e12, rates)
        requests = [[p, k] for rnd in everything.rounds for p, k in rnd.items()]
        steps = decisions.steps[r]
        assert len(steps) == 1
        assert steps[0].T.tolist() == requests
        acc_all.append(rep.correct_at(everything.n).mean())
        tok_all.append(rep.tokens_at(everything.n).sum())
        # At uniform's tokens (self-consistency at target_n on every problem of this ordering).
        uniform_tokens = float(rep.tokens_at(np.full(pool.n_problems, cfg.target_n)).sum())
        at_uniform = _live(pool, order, cfg, uniform_tokens, rates)
        assert decisions.n_at_uniform[r].tolist() == at_uniform.n.tolist()
        acc_u.append(rep.correct_at(at_uniform.n).mean())
        tok_u.append(rep.tokens_at(at_uniform.n).sum())
    online = res.modes["online"]
    assert online.mode == "online"
    assert online.acc_at_uniform_tokens.mean == pytest.approx(np.mean(acc_u))
    assert online.tokens_at_uniform_budget.mean == pytest.approx(np.mean(tok_u), rel=1e-12)
    # The curve's last budget buys everything the rule draws.
    assert online.curve_acc[-1] == pytest.approx(np.mean(acc_all))
    assert online.curve_tokens[-1] == pytest.approx(np.mean(tok_all), rel=1e-12)


def test_the_result_names_its_model_orderings_and_uniforms_cost_and_logs_each_mode(caplog) -> None:
    pool = _pool()
    cfg = SimulateConfig(**COMMON)
    with caplog.at_level(logging.INFO, logger="tts.budgets.replay.simulate"):
        res = simulate(pool, cfg)
    reps = [replay_prefixes(pool, o) for o in _orders(pool, cfg)]
    target = np.full(pool.n_problems, 16)
    tokens = [rep.tokens_at(target).sum() for rep in reps]
    acc = [rep.correct_at(target).mean() for rep in reps]
    assert (res.model, res.n_problems, res.orderings, res.target_n) == ("m", 45, 2, 16)
    assert res.uniform_tokens.mean == pytest.approx(np.mean(tokens))
    assert (res.uniform_tokens.lo, res.uniform_tokens.hi) == pytest.approx(
        (np.percentile(tokens, 2.5), np.percentile(tokens, 97.5)))
    assert res.uniform_acc.mean == pytest.approx(np.mean(acc))
    ratio = res.modes["online"].token_ratio
    assert [r.getMessage() for r in caplog.records if r.name == "tts.budgets.replay.simulate"] == [f"m online: {ratio}"]


def test_the_consistency_oracle_stops_a_unanimous_problem_at_its_first_sample_or_first_chunk() -> None:
    """Every problem answers alike in all its samples, each of one length: the oracle knows the final
    vote from the first sample (from the first chunk, when it stops at whole chunks), so uniform's
    tokens are target_n (target_n / chunk) times the oracle's, in every ordering."""
    from tts.benchmarks.pool import ModelPool

    problems, samples = 6, 16
    lengths = np.arange(1, problems + 1)[:, None] * 100.0
    pool = ModelPool(model="m", problem_ids=tuple(f"q{i}" for i in range(problems)),
                     answers=np.tile(np.arange(problems, dtype=np.int32)[:, None] % 2, (1, samples)),
                     answer_texts=tuple(("1", "2") for _ in range(problems)),
                     correct=np.ones((problems, samples), bool), tokens=np.repeat(lengths, samples, axis=1),
                     scores=np.full((problems, samples), np.nan), sample_idx=np.tile(np.arange(samples), (problems, 1)),
                     mask=np.ones((problems, samples), bool))
    res = simulate(pool, SimulateConfig(target_n=16, chunk=4, modes=("online",), orderings=3, folds=2, bootstrap=10))
    assert (res.oracle_ratio.mean, res.oracle_ratio.lo, res.oracle_ratio.hi) == pytest.approx((16.0, 16.0, 16.0))
    assert (res.oracle_ratio_chunk.mean, res.oracle_ratio_chunk.lo, res.oracle_ratio_chunk.hi) == pytest.approx(
        (4.0, 4.0, 4.0))


def test_with_a_cross_fitted_rate_model_each_fold_runs_apart_and_the_results_add_up_over_folds() -> None:
    """A rate model fitted on graded problems gives each fold its own run; the accuracy and tokens
    at uniform's budget are those of the samples every fold's run drew, over all problems."""
    from tts.budgets.rate_models.contested import ContestedRule

    pool = _pool()
    cfg = SimulateConfig(**COMMON, rule="rate", min_gain=1e-3)
    res = simulate(pool, cfg, rate_model=ContestedRule())
    decisions = res.decisions["online"]
    folds = sorted(set(res.folds.tolist()))
    acc, tok, acc_all, tok_all = [], [], [], []
    for r, order in enumerate(_orders(pool, cfg)):
        rep = replay_prefixes(pool, order)
        steps = decisions.steps[r]
        assert len(steps) == len(folds) == 3
        for f, fold_steps in zip(folds, steps):  # each run requests only its fold's problems
            assert set(fold_steps[0].tolist()) <= set(np.flatnonzero(res.folds == f).tolist())
        # Everything the runs draw (the curve's last budget): each problem's requests added up.
        n_all = np.zeros(pool.n_problems, dtype=int)
        for fold_steps in steps:
            np.add.at(n_all, fold_steps[0], fold_steps[1])
        acc_all.append(rep.correct_at(n_all).mean())
        tok_all.append(rep.tokens_at(n_all).sum())
        n = decisions.n_at_uniform[r]
        assert (n > 0).all()
        acc.append(rep.correct_at(n).mean())
        tok.append(rep.tokens_at(n).sum())
    online = res.modes["online"]
    assert online.acc_at_uniform_tokens.mean == pytest.approx(np.mean(acc), rel=1e-12)
    assert online.tokens_at_uniform_budget.mean == pytest.approx(np.mean(tok), rel=1e-12)
    assert online.curve_acc[-1] == pytest.approx(np.mean(acc_all), rel=1e-12)
    assert online.curve_tokens[-1] == pytest.approx(np.mean(tok_all), rel=1e-12)
