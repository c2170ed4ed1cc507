"""The "gain" stopping rule (tts/budgets/rate_models/vote_value.py): the value of more samples for a vote, flat votes stop early, and the
replay makes the same decisions as the allocator that drives a run."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from tests.budgets.test_online import _drive
from tts.budgets.online import OnlineAllocator, OnlinePolicy, plan_round
from tts.budgets.rate_models.vote_value import VoteValue, fit_kappa, leader_correct
from tts.budgets.replay.online import OnlineSequence


def test_a_vote_that_stays_flat_is_worth_less_with_every_sample():
    vv = VoteValue(kappa=1.0)
    # 2 v 2 after 4 samples, 20 v 19 after 40, 30 v 29 after 60, 12 v 0 after 12, 20 v 19 at the cap.
    r = vv.rate([2, 20, 30, 12, 20], [2, 19, 29, 0, 19], [4, 40, 60, 12, 80], [80] * 5, chunk=4)
    assert r[0] > r[1] > r[2] > 0
    assert r[3] < 1e-4  # unanimous: nothing left to learn
    assert r[4] == 0.0  # no sample left
    # A stronger link between share and correctness makes the same flat vote worth more.
    assert VoteValue(kappa=float("inf")).rate([20], [19], [40], [80], 4)[0] > r[1]


def test_gain_rule_stops_a_flat_vote_that_the_beta_rule_runs_to_the_cap():
    def answer(pid, i):  # "flat": two answers alternate forever; "easy": always the same
        return "1" if pid == "easy" or i % 2 == 0 else "2"

    common = dict(n_max=64, chunk=4, escalate=False)
    beta = _drive(OnlineAllocator(["easy", "flat"], 1e9, OnlinePolicy(**common)), answer,
                  lambda p, i: 1.0, lambda p, k: np.asarray(k, float))
    gain = _drive(OnlineAllocator(["easy", "flat"], 1e9, OnlinePolicy(rule="rate", min_gain=5e-3, rate_model=VoteValue(1.0), **common)),
                  answer, lambda p, i: 1.0, lambda p, k: np.asarray(k, float))
    assert beta.n.tolist() == [4, 64]
    assert gain.n[0] <= 8 and gain.n[1] < 64


def test_gain_rounds_serve_the_highest_value_first():
    policy = OnlinePolicy(n_max=80, chunk=4, rule="rate", min_gain=1e-4, escalate=False, rate_model=VoteValue(1.0))
    top1, top2, n = np.array([20, 3, 2, 0]), np.array([19, 1, 2, 0]), np.array([40, 4, 4, 0])
    rates = VoteValue(1.0).rate(top1, top2, n, np.full(4, 80), 4)
    who, k, _ = plan_round(policy, top1, top2, n, np.full(4, 80), 0, rates)
    assert who[0] == 3  # never sampled: first
    assert list(who[1:]) == sorted(who[1:].tolist(), key=lambda i: -rates[i])


@pytest.mark.parametrize("seed", range(4))
def test_the_replay_makes_the_allocators_decisions_under_the_gain_rule(seed):
    rng = np.random.default_rng(seed)
    size, width = 20, 32
    answers = np.where(rng.random((size, width)) < rng.random((size, 1)), 0, rng.integers(-1, 3, (size, width)))
    costs = rng.integers(5, 100, (size, width)).astype(float)
    votes = np.cumsum((answers[..., None] == np.arange(3)) & (answers[..., None] >= 0), axis=1)
    top = np.sort(votes, axis=2)
    value = VoteValue(1.0)
    policy = OnlinePolicy(n_max=width, chunk=int(rng.integers(1, 5)), rule="rate", min_gain=2e-3,
                          escalate=bool(seed % 2), rate_model=value)

    def worst(q, m):
        return 100.0 * np.asarray(m)

    # The replay's table of rates after n samples, built from the prefix votes of the ordering.
    pool = SimpleNamespace(n_problems=size, n_samples=width)
    rep = SimpleNamespace(top1=top[..., -1], top2=top[..., -2])
    (rates,) = value.replay_rates(pool, None, [rep], None, np.full(size, width), policy.chunk)
    seq = OnlineSequence.build(top[..., -1], top[..., -2], costs, np.full(size, width), policy, rates)
    for budget in np.sort(rng.uniform(500, costs.sum(), 4).round()).tolist():
        d = int(seq.within(np.array([budget]), worst)[0])
        alloc = _drive(OnlineAllocator(list(range(size)), budget, policy),
                       lambda pid, i: None if answers[pid, i] < 0 else int(answers[pid, i]),
                       lambda pid, i: costs[pid, i], worst)
        assert alloc.spent <= budget
        assert alloc.n.tolist() == seq.n_at(d).tolist()


def test_fit_kappa_tells_a_deciding_share_from_a_coin_flip():
    rng = np.random.default_rng(0)
    share = rng.uniform(0.5, 1.0, 4000)
    always = fit_kappa(share, np.ones(4000, bool), np.zeros(4000, bool))
    proportional = rng.random(4000) < share  # the leader is right as often as its share
    assert always >= 16
    assert fit_kappa(share, proportional, ~proportional) == pytest.approx(1.0, abs=0.5)
    assert leader_correct(np.array([0.5]), 3.0)[0] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="kappa"):
        fit_kappa(share, np.zeros(4000, bool), np.zeros(4000, bool))
    with pytest.raises(ValueError, match="rule must be one of"):
        OnlinePolicy(rule="vibes")
