"""The "contested" stopping rule: a predictor fitted on other problems never reads a problem's own
grade, a flat vote stops where the Beta rule samples it to the cap, and the replay makes the
decisions a live allocator makes with the same predictor."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tts.benchmarks.pool import ModelPool
from tts.budgets.rate_models.contested import (
    ContestedRule,
    ContestedModel,
    cross_fitted_rates,
    fit_pool,
    prefix_features,
)
from tts.budgets.difficulty import majority_share
from tts.budgets.online import OnlineAllocator, OnlinePolicy, plan_round
from tts.budgets.replay.online import OnlineSequence
from tts.budgets.replay.prefix import random_orders, replay_prefixes
from tts.budgets.replay.simulate import SimulateConfig, simulate

CFG = SimulateConfig(target_n=16, orderings=3, folds=3, modes=("online",), rule="rate", min_gain=1e-3,
                     bootstrap=10)


def _pool(seed=0, problems=45, samples=24) -> ModelPool:
    """Mostly easy, short problems and some contested, long ones (answer ids; 0 is the gold)."""
    rng = np.random.default_rng(seed)
    rate = np.where(np.arange(problems) < problems * 2 // 3, 0.9, rng.uniform(0.3, 0.7, problems))[:, None]
    ok = rng.random((problems, samples)) < rate
    answers = np.where(ok, 0, rng.integers(-1, 4, (problems, samples))).astype(np.int32)
    ok &= answers == 0
    tokens = np.where(rate > 0.8, 300, 1500) * rng.uniform(0.5, 1.5, (problems, samples))
    return ModelPool(
        model="m", problem_ids=tuple(f"q{i}" for i in range(problems)), answers=answers,
        answer_texts=tuple(("42", "1", "2", "3") for _ in range(problems)), correct=ok, tokens=tokens.round(),
        scores=np.full((problems, samples), np.nan), sample_idx=np.tile(np.arange(samples), (problems, 1)),
        mask=np.ones((problems, samples), bool))


def _flip(pool: ModelPool, problem: int) -> ModelPool:
    """The same samples, but the problem's gold is the answer that is second at the end."""
    correct = pool.correct.copy()
    ids, counts = np.unique(pool.answers[problem][pool.answers[problem] >= 0], return_counts=True)
    correct[problem] = pool.answers[problem] == ids[np.argsort(counts)[-2]]
    return dataclasses.replace(pool, correct=correct)


def test_a_problems_own_grade_never_reaches_its_rates():
    pool = _pool()
    rng = np.random.default_rng(3)
    fold = rng.permutation(pool.n_problems) % 3
    orders = random_orders(pool.mask, 2, rng)
    cap = pool.counts.copy()
    base = cross_fitted_rates(pool, orders, [replay_prefixes(pool, o) for o in orders], fold, cap, 4)
    j = int(np.argmin(majority_share(pool.answers)))  # the most contested problem
    flipped = _flip(pool, j)
    other = cross_fitted_rates(flipped, orders, [replay_prefixes(flipped, o) for o in orders], fold, cap, 4)
    for a, b in zip(base, other):
        assert np.array_equal(a[j], b[j])  # its own rates: fitted without it
        assert not np.array_equal(a[fold != fold[j]], b[fold != fold[j]])  # the other folds trained on it


@pytest.mark.parametrize("problem", [5, 40])
def test_flipping_one_problems_grade_leaves_its_own_decisions(problem):
    """Each fold is its own run under "contested", so the flipped grade (which moves the other
    folds' models) cannot reach this problem's rounds or its samples at uniform's tokens."""
    pool = _pool()
    base = simulate(pool, CFG, rate_model=ContestedRule())
    other = simulate(_flip(pool, problem), CFG, rate_model=ContestedRule())
    f = int(base.folds[problem])
    on, on2 = base.decisions["online"], other.decisions["online"]
    assert np.array_equal(on.n_at_uniform[:, problem], on2.n_at_uniform[:, problem])
    for a, b in zip(on.steps, on2.steps):
        assert np.array_equal(a[f], b[f])  # the whole run of its fold
    assert other.uniform_acc != base.uniform_acc  # the grade did change the outcome


class _FlatIsWorthless:
    """A stand-in predictor: a vote whose two leaders are within one vote of each other after 8
    samples buys nothing more; any other vote buys 0.1 accuracy per sample."""

    stop_confident = True
    cross_fitted = True

    def live_rate(self, top1, top2, n, n_none, n_distinct, mean_tokens, cap, chunk):
        flat = (np.asarray(n) >= 8) & (np.abs(np.asarray(top1) - np.asarray(top2)) <= 1)
        return np.where(flat, 0.0, 0.1)


def _drive(alloc, answer):
    while call := alloc.next_call(lambda p, k: np.asarray(k, float)):
        for pid, k in call:
            for _ in range(k):
                i = alloc.problem_ids.index(pid)
                alloc.record(pid, answer(pid, int(alloc.n[i])), 1.0, tokens=100.0)
    return alloc


def test_contested_rule_stops_a_flat_vote_that_the_beta_rule_runs_to_the_cap():
    def answer(pid, i):  # "flat": two answers alternate forever; "easy": always the same
        return "1" if pid == "easy" or i % 2 == 0 else "2"

    common = dict(n_max=64, chunk=4, escalate=False)
    beta = _drive(OnlineAllocator(["easy", "flat"], 1e9, OnlinePolicy(**common)), answer)
    contested = _drive(OnlineAllocator(["easy", "flat"], 1e9, OnlinePolicy(rule="rate", rate_model=_FlatIsWorthless(),
                                                                            **common)), answer)
    assert beta.n.tolist() == [4, 64]
    assert contested.n.tolist() == [4, 8]


def test_the_rate_rule_needs_a_model_and_rates_and_a_live_contested_run_a_fitted_model():
    with pytest.raises(ValueError, match="rate_model"):
        OnlinePolicy(rule="rate")
    policy = OnlinePolicy(rule="rate", rate_model=ContestedRule())
    with pytest.raises(ValueError, match="predicted gain per sample"):
        plan_round(policy, np.array([1]), np.array([0]), np.array([1]), np.array([64]), 0)
    with pytest.raises(ValueError, match="fit_pool"):
        OnlineAllocator(["a"], 1e6, policy).next_call(lambda p, k: np.asarray(k, float))


def test_the_replay_makes_the_live_allocators_decisions_with_the_same_predictor():
    calib, pool = _pool(seed=1), _pool(seed=2, problems=20)
    model = fit_pool(calib, chunk=4, orderings=3)
    assert isinstance(model, ContestedModel)
    policy = OnlinePolicy(n_max=24, chunk=4, rule="rate", min_gain=2e-3, rate_model=ContestedRule(model))
    order = random_orders(pool.mask, 1, np.random.default_rng(0))[0]
    rep = replay_prefixes(pool, order)
    cap = pool.counts.copy()
    x = prefix_features(pool, order, rep, cap)
    n = np.arange(1, pool.n_samples + 1)[None, :]
    rates = np.concatenate([np.full((pool.n_problems, 1), np.inf), model.rate(x, n, cap[:, None])], axis=1)
    seq = OnlineSequence.build(rep.top1, rep.top2, rep.sample_tokens, cap, policy, rates)

    ans = pool.answers[np.arange(pool.n_problems)[:, None], order]
    tok = rep.sample_tokens
    ids = list(pool.problem_ids)
    alloc = OnlineAllocator(ids, 1e12, policy)
    while call := alloc.next_call(lambda p, k: np.asarray(k, float)):
        for pid, k in call:
            i = ids.index(pid)
            for _ in range(k):
                t = int(alloc.n[i])
                alloc.record(pid, None if ans[i, t] < 0 else str(ans[i, t]), float(tok[i, t]), tokens=float(tok[i, t]))
    assert alloc.n.tolist() == seq.n_at(len(seq.sample_problem)).tolist()
    assert [{ids.index(p): k for p, k in r.items()} for r in alloc.rounds] == seq.rounds_at(len(seq.sample_problem))
