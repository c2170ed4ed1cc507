"""The online rule's first step passes every policy setting on: ``plan_round`` stops and orders
problems by the rule with the policy's prior, top_k, Beta stop and race, exactly as ``decided`` and
the confidences computed here directly do; problems with one sample are served after the ones
with none; the rule's own errors say what to pass. (Written from the mutation run of
budgets/online: each test fails on a bug that run planted.)"""

from __future__ import annotations

import numpy as np
import pytest

from tests.budgets.test_online_rule import _Rates
from tts.budgets.online import (
    OnlinePolicy,
    decided,
    dirichlet_confidence,
    overturn_risk,
    plan_round,
    serve_order,
    stopping_stages,
    vote_confidence,
)


def _votes(seed, problems=40, answers=5):
    rng = np.random.default_rng(seed)
    votes = np.sort(rng.integers(0, 9, size=(problems, answers)), axis=1)[:, ::-1]
    return votes, votes[:, 0], votes[:, 1], votes.sum(axis=1) + rng.integers(0, 3, size=problems)


@pytest.mark.parametrize("prior", [0.2, 3.0])
def test_horizon_stops_and_orders_by_the_policys_prior(prior):
    _, top1, top2, n = _votes(0)
    cap = np.full(len(n), 48)
    policy = OnlinePolicy(rule="horizon", prior=prior, escalate=False)
    who, _, _ = plan_round(policy, top1, top2, n, cap, 0)
    open_ = ~decided(top1, top2, n, cap, rule="horizon", confidence=0.95, prior=prior)
    conf = np.where(n > 0, 1.0 - overturn_risk(top1, top2, n, cap, prior), 0.0)
    assert who.tolist() == serve_order(conf, open_).tolist()
    default, _, _ = plan_round(OnlinePolicy(rule="horizon", escalate=False), top1, top2, n, cap, 0)
    assert who.tolist() != default.tolist()  # the prior changes the round here


@pytest.mark.parametrize("prior, top_k", [(0.3, 5), (1.0, 2), (2.0, 3)])
def test_dirichlet_stops_and_orders_by_the_policys_prior_and_top_k(prior, top_k):
    votes, top1, top2, n = _votes(1)
    cap = np.full(len(n), 48)
    policy = OnlinePolicy(rule="dirichlet", prior=prior, top_k=top_k, escalate=False, confidence=0.8)
    who, _, _ = plan_round(policy, top1, top2, n, cap, 0, votes=votes)
    open_ = ~decided(top1, top2, n, cap, rule="dirichlet", confidence=0.8, prior=prior, votes=votes, top_k=top_k)
    conf = np.zeros(len(n))
    sampled = open_ & (n > 0)
    conf[sampled] = dirichlet_confidence(votes[sampled], prior, top_k)
    assert who.tolist() == serve_order(conf, open_).tolist()
    default, _, _ = plan_round(OnlinePolicy(rule="dirichlet", escalate=False, confidence=0.8), top1, top2, n, cap,
                               0, votes=votes)
    assert who.tolist() != default.tolist()


def test_dirichlet_reads_the_five_most_voted_answers_unless_told_otherwise():
    votes = np.array([[20, 10, 10, 10, 10, 10]])
    five, six = dirichlet_confidence(votes, top_k=5)[0], dirichlet_confidence(votes, top_k=6)[0]
    bar = (five + six) / 2  # stops on five answers, not on six
    args = (np.array([20]), np.array([10]), np.array([70]), 200)
    assert decided(*args, rule="dirichlet", confidence=bar, votes=votes).tolist() == [True]
    assert decided(*args, rule="dirichlet", confidence=bar, votes=votes, top_k=6).tolist() == [False]
    for top_k, served in ((5, []), (6, [0])):
        policy = OnlinePolicy(rule="dirichlet", confidence=bar, top_k=top_k, escalate=False)
        assert plan_round(policy, *args[:3], np.array([200]), 0, votes=votes)[0].tolist() == served


def test_one_vote_can_settle_a_race_of_two_answers():
    # Dirichlet(2, 1) over two answers: P(leader ahead) = 0.75, above a bar of 0.7.
    one = (np.array([1]), np.array([0]), np.array([1]), 16)
    assert decided(*one, rule="dirichlet", confidence=0.7, votes=np.array([[1, 0]]), top_k=2).tolist() == [True]
    # Horizon with a sharp prior: the next sample ties with probability 0.01.
    assert decided(*one[:3], 2, rule="horizon", prior=0.01).tolist() == [True]
    assert decided(*one[:3], 2, rule="horizon").tolist() == [False]


def test_the_rate_rules_beta_bar_stops_a_confident_leader_whatever_its_rate():
    top1, top2, n = np.array([12, 3]), np.array([0, 2]), np.array([12, 6])
    rates = _Rates([0.5, 0.5])  # both worth sampling by gain alone
    policy = OnlinePolicy(rule="rate", rate_model=rates, escalate=False)
    who, _, _ = plan_round(policy, top1, top2, n, np.full(2, 64), 0, rate=rates.rates)
    assert who.tolist() == [1]  # 12-0 is Beta-confident at 0.95: stopped


@pytest.mark.parametrize("rule", ["beta", "horizon", "rate", "dirichlet"])
def test_problems_never_sampled_are_served_before_one_with_a_single_sample(rule):
    top1, top2, n = np.array([0, 1, 0]), np.array([0, 0, 0]), np.array([0, 1, 0])
    extra = {}
    if rule == "rate":
        rates = _Rates([0.5, 0.5, 0.5])
        extra = {"rate_model": rates}
    policy = OnlinePolicy(rule=rule, escalate=False, **extra)
    kwargs = {"rate": np.array([0.5, 0.5, 0.5])} if rule == "rate" else {}
    if rule == "dirichlet":
        kwargs = {"votes": np.array([[0, 0], [1, 0], [0, 0]])}
    who, _, _ = plan_round(policy, top1, top2, n, np.full(3, 64), 0, **kwargs)
    assert who.tolist() == [0, 2, 1]


def test_dirichlet_serves_unsampled_problems_before_a_sampled_three_way_tie():
    # The tie's confidence (1/3) is below an unsampled problem's Dirichlet value (1/2 for zero
    # votes): the unsampled problems must still come first, at confidence 0.
    votes = np.array([[0, 0, 0], [1, 1, 1], [0, 0, 0]])
    who, _, _ = plan_round(OnlinePolicy(rule="dirichlet", escalate=False), votes[:, 0], votes[:, 1],
                           np.array([0, 3, 0]), np.full(3, 64), 0, votes=votes)
    assert who.tolist() == [0, 2, 1]


def test_with_length_weight_the_race_orders_the_problems():
    top1, top2, n = np.array([3, 3]), np.array([1, 1]), np.array([4, 4])
    policy = OnlinePolicy(rule="beta", length_weight=1.0, escalate=False)
    race = (np.array([3.5, 2.0]), np.array([0.5, 2.0]))  # problem 1's race is a tie: least confident
    assert vote_confidence(*race).tolist()[0] < 0.95
    who, _, _ = plan_round(policy, top1, top2, n, np.full(2, 64), 0, race=race)
    assert who.tolist() == [1, 0]


def test_without_escalation_the_window_rule_has_one_stage():
    assert stopping_stages("window", 4, escalate=False) == [("window", 4.0)]
    assert stopping_stages("window", 4)[-1] == ("exact", 0.95)


def test_the_rules_say_what_to_pass():
    one = (np.array([3]), np.array([1]), np.array([4]), 16)
    with pytest.raises(ValueError) as err:
        decided(*one, rule="beta", confirm=2)
    assert str(err.value) == "confirm= needs each problem's run of equal answers (streak=)"
    with pytest.raises(ValueError) as err:
        decided(*one, rule="dirichlet")
    assert str(err.value) == "the 'dirichlet' rule needs each problem's votes per answer (votes=)"
    with pytest.raises(ValueError) as err:
        decided(*one, rule="window", confidence=3)
    assert str(err.value) == "the 'window' rule needs each problem's run of equal answers (streak=)"
    with pytest.raises(ValueError) as err:
        plan_round(OnlinePolicy(rule="dirichlet"), *one[:3], np.array([16]), 0)
    assert str(err.value) == ("the 'dirichlet' rule needs each problem's votes per answer: pass votes= "
                              "(OnlineAllocator.vote_matrix in a run, replay.online.vote_table in a replay)")
