"""The "gain" stopping rule (tts/budgets/rate_models/vote_value.py): the value of more samples for a vote, flat votes stop early, and the
replay makes the same decisions as the allocator that drives a run."""

from __future__ import annotations

from fractions import Fraction
from math import comb, factorial
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


def _p_leader(a: int, b: int) -> Fraction:
    """P(theta > 1/2) under Beta(a, b) for integers: P(Binomial(a + b - 1, 1/2) <= a - 1)."""
    return Fraction(sum(comb(a + b - 1, k) for k in range(a)), 2 ** (a + b - 1))


def _beta(a: int, b: int) -> Fraction:
    return Fraction(factorial(a - 1) * factorial(b - 1), factorial(a + b - 1))


def _exact_rate(t1, t2, n, cap, chunk, horizons=(1, 2, 4, 8, 16)) -> Fraction:
    """VoteValue(kappa=inf)'s rate in exact arithmetic: Beta-binomial sums instead of the grid."""
    left, share = max(cap - n, 0), Fraction(t1 + t2, n) if n else Fraction(1)
    now = max(_p_leader(t1 + 1, t2 + 1), 1 - _p_leader(t1 + 1, t2 + 1))
    best = Fraction(0)
    for h in sorted({h * chunk for h in horizons}) + [left]:
        hh = min(left, h)
        if hh == 0:
            continue
        m = round(hh * share)  # the expected two-leader votes among hh more samples
        later = sum(comb(m, x) * _beta(t1 + x + 1, t2 + m - x + 1) / _beta(t1 + 1, t2 + 1)
                    * max(_p_leader(t1 + x + 1, t2 + m - x + 1), 1 - _p_leader(t1 + x + 1, t2 + m - x + 1))
                    for x in range(m + 1))
        best = max(best, (later - now) / hh)
    return best


@pytest.mark.parametrize("chunk", [1, 4])
def test_rates_equal_the_exact_beta_binomial_value_of_more_samples(chunk):
    # (top1, top2, n, cap): one sample left (1 v 1 of 2), none left, never sampled, an only sample
    # without an answer, an only sample with one, half the samples naming neither leader, ...
    states = [(1, 1, 2, 3), (1, 1, 2, 2), (0, 0, 0, 2), (0, 0, 1, 3), (1, 0, 1, 5), (1, 1, 4, 6), (3, 1, 5, 12),
              (2, 2, 4, 9), (5, 0, 5, 40), (4, 3, 9, 30)]
    got = VoteValue(float("inf")).rate(*zip(*states), chunk=chunk)
    want = [_exact_rate(*s, chunk) for s in states]
    assert got.tolist() == pytest.approx([float(w) for w in want], abs=2e-6)
    # By hand: 1 v 1 with one sample left is worth 3/16 (the next vote makes either leader 11/16
    # likely); at the cap, and after an only sample without an answer (no votes expected), nothing.
    assert want[:4] == [Fraction(3, 16), 0, Fraction(1, 4) if chunk == 1 else Fraction(1, 8), 0]


def test_a_long_vote_has_a_finite_rate_whatever_else_is_rated_with_it():
    vv = VoteValue(float("inf"))
    together = vv.rate([600, 0], [590, 0], [1200, 0], [1220, 2], chunk=4)
    alone = VoteValue(float("inf")).rate([600], [590], [1200], [1220], chunk=4)
    # 1.62231e-05 in exact arithmetic (_exact_rate, 5 s: too slow to run here); the grid is within 0.1%.
    assert together[0] == pytest.approx(1.62231e-05, rel=2e-3)
    assert alone[0] == together[0] and together[1] == 0.125


def test_a_cached_state_gives_the_same_rate_again():
    vv = VoteValue(2.0)
    first = vv.rate([3, 1], [1, 1], [5, 2], [12, 3], chunk=4)
    again = vv.rate([1, 3, 3], [1, 1, 1], [2, 5, 5], [3, 12, 12], chunk=4)
    assert again.tolist() == [first[1], first[0], first[0]] and np.all(first > 0)


def test_the_leader_is_right_half_the_time_at_an_even_share_and_kappa_defaults_to_4():
    assert leader_correct(np.array([0.2, 0.5, 0.8]), float("inf")).tolist() == [0.0, 0.5, 1.0]
    assert VoteValue().rate([3], [1], [5], [12], 4)[0] == VoteValue(4.0).rate([3], [1], [5], [12], 4)[0]
    assert VoteValue().rate([3], [1], [5], [12], 4)[0] != VoteValue(5.0).rate([3], [1], [5], [12], 4)[0]
    for bad in (0, -1.0):
        with pytest.raises(ValueError, match=rf"^kappa must be > 0 \(inf = the larger share is right\), got {bad}$"):
            VoteValue(bad)


def test_fit_kappa_takes_0_1_grades_and_clips_unanimous_shares():
    share = [0.6, 0.7, 0.9, 0.55, 0.8, 0.65]
    leader = [1, 1, 1, 0, 1, 0]
    other = [0, 0, 0, 1, 0, 1]
    as_bool = fit_kappa(share, np.array(leader, bool), np.array(other, bool))
    assert fit_kappa(share, leader, np.array(other, bool)) == as_bool
    assert fit_kappa(share, np.array(leader, bool), other) == as_bool
    # A share of 1 counts as 1 - 1e-6: a wrong unanimous leader costs 13.8 * kappa nats (up to
    # the 1e-12 floor), so one of them outweighs ten right leaders at 3 to 1 and kappa is the smallest.
    share = [1.0] * 10 + [0.75] * 10
    leader = np.array([False] + [True] * 19)
    assert fit_kappa(share, leader, ~leader) == 0.5
    # With a hundred right leaders at 3 to 1, the floor keeps large kappas in the running.
    share = [1.0] + [0.75] * 100
    leader = np.array([False] + [True] * 100)
    assert fit_kappa(share, leader, ~leader) == 32
    with pytest.raises(ValueError, match="^no problem has exactly one of its two leading answers correct; "
                                         "kappa cannot be fitted$"):
        fit_kappa([0.6], [True], [True])
