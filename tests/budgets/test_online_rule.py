"""The online rule's parts at their edges: the Beta confidence against scipy's Beta distribution,
when each stopping rule stops (exactly at its bar, at n_max, never without a vote), the stages the
bar rises through, who is served first on ties, what a policy refuses and why, and what the
allocator records of each sample and hands the rate model."""

from __future__ import annotations

import numpy as np
import pytest

from tts.budgets.online import (
    OnlineAllocator,
    OnlinePolicy,
    cut_call,
    decided,
    plan_round,
    serve_order,
    stopping_stages,
    vote_confidence,
)


class _Rates:
    """A rate model that returns fixed rates and records what it was given."""

    cross_fitted = False

    def __init__(self, rates, stop_confident=True):
        self.rates, self.stop_confident, self.seen = np.asarray(rates, float), stop_confident, []

    def live_rate(self, top1, top2, n, n_none, n_distinct, mean_tokens, cap, chunk):
        self.seen.append([np.array(x, copy=True) for x in (top1, top2, n, n_none, n_distinct, mean_tokens, cap)]
                         + [chunk])
        return self.rates

    def replay_rates(self, *args):  # pragma: no cover - not used by a live run
        raise NotImplementedError


@pytest.mark.parametrize("top1, top2", [(1, 0), (2, 0), (3, 2), (10, 4), (0, 0), (7, 7)])
def test_vote_confidence_is_the_beta_probability_that_the_leader_is_ahead(top1, top2):
    from scipy.stats import beta

    assert float(vote_confidence(top1, top2)) == pytest.approx(beta(top1 + 1, top2 + 1).sf(0.5), abs=1e-12)


def test_each_rule_stops_at_n_max_even_on_a_tie():
    for rule in ("beta", "exact"):
        assert decided([2], [2], [4], 4, rule=rule).tolist() == [True]
        assert decided([2], [2], [3], 4, rule=rule).tolist() == [False]
    assert decided([2], [2], [4], 4, rule="rate", rate=[1.0]).tolist() == [True]


def test_the_beta_rule_stops_at_its_bar_inclusive_and_never_without_a_vote():
    # One vote to none: P(Beta(2, 1) > 1/2) = 0.75 exactly.
    assert decided([1], [0], [1], 64, confidence=0.75).tolist() == [True]
    assert decided([1], [0], [1], 64, confidence=0.76).tolist() == [False]
    assert decided([0], [0], [3], 64, confidence=0.5).tolist() == [False]  # no answer yet: 0.5, but no vote


def test_the_exact_rule_stops_when_the_leader_cannot_be_overtaken():
    assert decided([5], [1], [6], 9, rule="exact").tolist() == [True]  # 4 ahead, 3 samples left
    assert decided([4], [1], [6], 9, rule="exact").tolist() == [False]  # 3 ahead, 3 left: could tie


def test_the_rate_rule_stops_on_a_low_gain_once_sampled_or_a_confident_leader():
    no_vote = {"rule": "rate", "confidence": 0.01}
    # Low gain stops a sampled problem (strictly below the bar), never an unsampled one.
    assert decided([1, 1, 0, 1], [1, 1, 0, 1], [2, 1, 0, 2], 64, rate=[0.005, 0.005, 0.005, 0.01],
                   **no_vote).tolist() == [True, True, False, False]
    # A Beta-confident leader stops too when the model asks for it (at its bar, inclusive).
    rate = [1.0, 1.0, 1.0, 1.0]
    votes = ([1, 1, 0, 1], [0, 0, 0, 5], [1, 1, 1, 6])
    assert decided(*votes, 64, rate=rate, beta_confidence=0.75, **no_vote).tolist() == [True, True, False, False]
    assert decided(*votes, 64, rate=rate, beta_confidence=None, **no_vote).tolist() == [False] * 4
    assert decided(*votes, 64, rate=rate, beta_confidence=0.5, **no_vote).tolist() == [True, True, False, False]
    # A lead that is safe or n_max reached stops whatever the gain.
    assert decided([5, 1], [0, 1], [5, 8], 8, rate=[1.0, 1.0], beta_confidence=0.999, **no_vote).tolist() == [True, True]
    with pytest.raises(ValueError, match=r"^the 'rate' rule needs each problem's predicted gain per sample "
                                         r"\(RateModel\.live_rate\)$"):
        decided([1], [0], [1], 8, rule="rate")
    with pytest.raises(ValueError, match=r"^rule must be one of beta, horizon, dirichlet, exact, rate, window, got 'max'$"):
        decided([1], [0], [1], 8, rule="max")


def test_stopping_stages_raise_the_bar_in_order():
    assert stopping_stages() == [("beta", 0.95), ("beta", 0.99), ("beta", 0.999), ("exact", 0.95)]
    assert stopping_stages("beta", 0.99) == [("beta", 0.99), ("beta", 0.999), ("exact", 0.99)]
    assert stopping_stages("beta", 0.995) == [("beta", 0.995), ("beta", 0.999), ("exact", 0.995)]
    assert stopping_stages("beta", 0.95, escalate=False) == [("beta", 0.95)]
    assert stopping_stages("exact", 0.9) == [("exact", 0.9)]
    assert stopping_stages("rate") == [("rate", 1e-3), ("rate", 1e-3 / 4), ("rate", 1e-3 / 16),
                                       ("rate", 1e-3 / 64), ("exact", 0.95)]
    assert stopping_stages("rate", 0.9, escalate=False, min_gain=0.01) == [("rate", 0.01)]


def test_ties_in_confidence_are_served_in_problem_order():
    confidence = np.array([i % 3 for i in range(40)], dtype=float)  # long enough for an unstable sort to show
    open_ = np.ones(40, dtype=bool)
    open_[[3, 4]] = False
    order = serve_order(confidence, open_).tolist()
    assert order == sorted((i for i in range(40) if open_[i]), key=lambda i: (confidence[i], i))


@pytest.mark.parametrize("settings, message", [
    ({"n_max": 0}, "n_max and chunk must be >= 1, got n_max=0, chunk=4"),
    ({"chunk": 0}, "n_max and chunk must be >= 1, got n_max=64, chunk=0"),
    ({"confidence": 0.5}, "confidence must lie in (0.5, 1), got 0.5"),
    ({"confidence": 1.0}, "confidence must lie in (0.5, 1), got 1.0"),
    ({"confidence": 1.5}, "confidence must lie in (0.5, 1), got 1.5"),
    ({"rule": "max"}, "rule must be one of beta, horizon, dirichlet, exact, rate, window, got 'max'"),
    ({"min_gain": 0.0}, "min_gain must lie in (0, 1) (accuracy per sample), got 0.0"),
    ({"min_gain": 1.0}, "min_gain must lie in (0, 1) (accuracy per sample), got 1.0"),
    ({"min_gain": 1.5}, "min_gain must lie in (0, 1) (accuracy per sample), got 1.5"),
    ({"rule": "rate"}, ("rule 'rate' needs rate_model= (anything with live_rate and replay_rates; "
                        "see tts.budgets.rate_models for two)")),
    ({"prior": 0.0}, "prior must be > 0 (pseudo-votes of the Beta prior), got 0.0"),
    ({"window": 0}, "window must be >= 1 (samples in a row with one answer), got 0"),
    ({"length_weight": -0.5}, "length_weight must be >= 0 (0 = plain votes), got -0.5"),
    ({"ladder": (0.9, 0.5)}, "every ladder confidence must lie in (0.5, 1), got (0.9, 0.5)"),
    ({"ladder": (0.9, 1.0)}, "every ladder confidence must lie in (0.5, 1), got (0.9, 1.0)"),
    ({"give_up_share": 0.0}, "give_up_after must be >= 0 (0 = off) and give_up_share in (0, 1], got 0, 0.0"),
    ({"give_up_share": 1.5}, "give_up_after must be >= 0 (0 = off) and give_up_share in (0, 1], got 0, 1.5"),
    ({"top_k": 1}, "top_k must be >= 2 (answers in the Dirichlet posterior), got 1"),
    ({"length_weight": 1.0, "rule": "exact"}, "length_weight weighs the Beta race of 'horizon' and 'beta', not rule 'exact'"),
])
def test_a_policy_refuses_settings_saying_what_to_change(settings, message):
    with pytest.raises(ValueError) as err:
        OnlinePolicy(**settings)
    assert str(err.value) == message


def test_the_smallest_policies_are_valid():
    assert OnlinePolicy(n_max=1, chunk=1).n_max == 1
    # Every setting at the edge of what it accepts (one past it is refused above).
    edge = OnlinePolicy(window=1, ladder=(0.501, 0.999), give_up_share=1.0, top_k=2, prior=1e-9)
    assert (edge.window, edge.top_k, edge.give_up_share) == (1, 2, 1.0)
    assert OnlinePolicy(rule="beta", length_weight=1.0).length_weight == 1.0  # the race weighs 'beta' too
    assert OnlinePolicy(rule="rate", rate_model=_Rates([0.1])).rule == "rate"
    assert OnlineAllocator(["p"], budget=0.5).budget == 0.5


def test_the_rate_rules_beta_bar_rises_with_the_stages():
    policy = OnlinePolicy(rule="rate", rate_model=_Rates([0.1]))
    assert [policy.beta_stop(s) for s in range(5)] == [0.95, 0.99, 0.999, 0.999, 0.999]
    high = OnlinePolicy(rule="rate", confidence=0.99, rate_model=_Rates([0.1]))
    assert [high.beta_stop(s) for s in range(3)] == [0.99, 0.999, 0.999]
    assert OnlinePolicy(rule="rate", rate_model=_Rates([0.1], stop_confident=False)).beta_stop(0) is None
    assert OnlinePolicy().beta_stop(0) is None


def test_a_rate_round_serves_the_highest_gain_first_and_unsampled_problems_before_all():
    policy = OnlinePolicy(rule="rate", n_max=16, chunk=4, rate_model=_Rates([0.1]))
    n = np.array([4, 4, 0, 4])
    votes = np.array([2, 2, 0, 2]), np.array([2, 2, 0, 2])
    who, k, stage = plan_round(policy, *votes, n, np.full(4, 16), 0, rate=np.array([0.2, 0.5, 0.0, 0.3]))
    assert (who.tolist(), k.tolist(), stage) == ([2, 1, 3, 0], [4, 4, 4, 4], 0)
    with pytest.raises(ValueError, match=r"^the 'rate' rule needs each problem's predicted gain per sample: pass "
                                         r"rate= \(RateModel\.live_rate in a run, RateModel\.replay_rates in a replay\)$"):
        plan_round(policy, *votes, n, np.full(4, 16), 0)


def test_a_beta_round_serves_the_least_confident_first_and_unsampled_problems_first():
    policy = OnlinePolicy(n_max=16, chunk=4, rule="beta")
    top1, top2, n = np.array([3, 2, 0, 3]), np.array([1, 2, 0, 0]), np.array([4, 4, 0, 3])
    who, k, stage = plan_round(policy, top1, top2, n, np.array([16, 16, 16, 6]), 0)
    # Confidence: 0 unsampled, 0.5 tied, 0.8125 for 3-1, 0.9375 for 3-0; the last has 3 samples left.
    assert (who.tolist(), k.tolist(), stage) == ([2, 1, 0, 3], [4, 4, 4, 3], 0)


def test_when_every_vote_is_decided_the_round_moves_to_the_next_stage():
    policy = OnlinePolicy(n_max=64, chunk=4, ladder=(0.99, 0.999))
    top1, top2, n = np.array([6, 30]), np.array([0, 0]), np.array([6, 30])  # 0.992 and all but certain
    who, _, stage = plan_round(policy, top1, top2, n, np.full(2, 64), 0)
    assert (who.tolist(), stage) == ([0], 2)  # 0.95 and 0.99 met; 0.999 is not for 6-0
    assert plan_round(policy, top1, top2, n, np.full(2, 64), 2)[2] == 2  # never back down


def test_a_call_that_fits_nothing_or_has_nothing_left_is_empty():
    worst = lambda p, k: 10.0 * np.asarray(k, float)
    p, k = np.array([0, 1]), np.array([4, 4])
    e, part = cut_call(p, k, worst, [0], [0], [80.0])
    assert (e.tolist(), part.tolist()) == ([2], [0])  # both whole: exactly the budget
    e, part = cut_call(p, k, worst, [0], [0], [79.0])
    assert (e.tolist(), part.tolist()) == ([1], [0])  # the first whole, the second does not fit beside it
    e, part = cut_call(p, k, worst, [1], [1], [30.0])
    assert (e.tolist(), part.tolist()) == ([2], [0])  # the 3 samples left of the head fit exactly
    e, part = cut_call(p, k, worst, [1], [1], [29.0])
    assert (e.tolist(), part.tolist()) == ([1], [2])  # shortened to 2 of its 3
    e, part = cut_call(p, k, worst, [0], [0], [9.0])
    assert (e.tolist(), part.tolist()) == ([0], [0])  # not one sample: finished
    e, part = cut_call(p, k, worst, [2], [0], [1e9])
    assert (e.tolist(), part.tolist()) == ([2], [0])  # nothing left in the round
    e, part = cut_call(p, k, worst, [0], [0], [1e9], end=[1])
    assert e.tolist() == [1]  # never past end
    e, part = cut_call(np.array([], dtype=np.int64), np.array([], dtype=np.int64), worst, [0, 0], [0, 0], [5.0, 5.0])
    assert (e.tolist(), part.tolist(), part.dtype) == ([0, 0], [0, 0], np.int64)


def test_the_allocator_records_votes_tokens_and_unanswered_samples():
    alloc = OnlineAllocator(["a", "b"], budget=100.0)
    for answer, cost, tokens in (("4", 2.0, 30), ("5", 3.0, None), (None, 1.0, 10), ("4", 1.0, 20)):
        alloc.record("a", answer, cost, tokens)
    assert (alloc.n.tolist(), alloc.n_none.tolist()) == ([4, 0], [1, 0])
    assert (alloc.top1.tolist(), alloc.top2.tolist()) == ([2, 0], [1, 0])
    assert (alloc.tokens.tolist(), alloc.spent) == ([63.0, 0.0], 7.0)


def test_a_rate_model_sees_the_votes_so_far_and_unsampled_problems_come_first():
    model = _Rates([0.2, 0.5, 0.3])
    alloc = OnlineAllocator(["a", "b", "c"], budget=1e6, policy=OnlinePolicy(rule="rate", n_max=8, chunk=2,
                                                                          rate_model=model))
    worst = lambda p, k: np.asarray(k, float)
    assert alloc.next_call(worst) == [("a", 2), ("b", 2), ("c", 2)]
    for pid, answers in (("a", ["1", "1"]), ("b", ["1", None]), ("c", ["2", "3"])):
        for answer in answers:
            alloc.record(pid, answer, 1.0, tokens=10.0)
    assert alloc.next_call(worst) == [("b", 2), ("c", 2), ("a", 2)]  # the highest predicted gain first
    top1, top2, n, n_none, distinct, mean_tokens, cap, chunk = model.seen[-1]
    assert (top1.tolist(), top2.tolist(), n.tolist(), n_none.tolist()) == ([2, 1, 1], [0, 0, 1], [2, 2, 2], [0, 1, 0])
    assert (distinct.tolist(), mean_tokens.tolist(), cap.tolist(), chunk) == ([1, 1, 2], [10.0, 10.0, 10.0], [8, 8, 8], 2)
    assert model.seen[0][5].tolist() == [0.0, 0.0, 0.0]  # no samples yet: no division by zero


def test_a_rate_model_reads_mean_tokens_from_one_sample_on_and_a_low_gain_stops_after_one():
    model = _Rates([0.0, 0.5], stop_confident=False)
    alloc = OnlineAllocator(["a", "b"], budget=1e6, policy=OnlinePolicy(rule="rate", n_max=3, chunk=1,
                                                                     rate_model=model))
    worst = lambda p, k: np.asarray(k, float)
    assert alloc.next_call(worst) == [("a", 1), ("b", 1)]
    alloc.record("a", "1", 1.0, tokens=30.0)
    alloc.record("b", "2", 1.0, tokens=50.0)
    assert alloc.next_call(worst) == [("b", 1)]  # a's predicted gain (0) stops it after its one sample
    assert model.seen[-1][5].tolist() == [30.0, 50.0]  # tokens per sample, after one sample each


def test_a_run_whose_every_vote_is_decided_ends_finished():
    alloc = OnlineAllocator(["a"], budget=1e6, policy=OnlinePolicy(n_max=2, chunk=2))
    worst = lambda p, k: np.asarray(k, float)
    assert alloc.next_call(worst) == [("a", 2)]
    alloc.record("a", "1", 1.0)
    alloc.record("a", "1", 1.0)
    assert alloc.next_call(worst) == [] and alloc.finished is True
    assert alloc.next_call(worst) == [] and alloc.rounds == [{"a": 2}]


def test_a_shortened_request_is_finished_by_the_next_call_and_an_empty_call_ends_the_run():
    alloc = OnlineAllocator(["a", "b"], budget=6.0, policy=OnlinePolicy(n_max=4, chunk=4))
    worst = lambda p, k: np.asarray(k, float)
    assert alloc.next_call(worst) == [("a", 4)]  # b does not fit beside it
    for _ in range(4):
        alloc.record("a", "1", 1.0)
    assert alloc.next_call(worst) == [("b", 2)]  # shortened to what is left
    alloc.record("b", "1", 1.0)
    alloc.record("b", "1", 1.0)
    assert alloc.next_call(worst) == [] and alloc.finished
    assert alloc.next_call(worst) == [] and alloc.rounds == [{"a": 4, "b": 2}]


def test_the_horizon_risk_defaults_to_aggarwal_et_als_uniform_prior():
    from scipy.stats import betabinom

    from tts.budgets.online import overturn_risk

    # 3 votes to 1 after 4 of 8 samples: overturned if the leader gets at most 1 of the 4 left.
    expected = betabinom.cdf(1, 4, 3 + 1, 1 + 1)
    assert float(overturn_risk(3, 1, 4, 8)) == pytest.approx(expected, abs=1e-12)
    assert float(overturn_risk(3, 1, 4, 8, prior=2.0)) == pytest.approx(betabinom.cdf(1, 4, 5, 3), abs=1e-12)


def test_every_sample_without_an_answer_is_counted_and_the_race_reads_generated_tokens_not_cost():
    alloc = OnlineAllocator(["a"], budget=1e6, policy=OnlinePolicy(length_weight=1.0))
    for answer, cost, tokens in ((None, 5.0, 40.0), (None, 5.0, 40.0), ("1", 5.0, 100.0), ("1", 5.0, 100.0),
                                 ("2", 5.0, 300.0)):
        alloc.record("a", answer, cost, tokens)
    assert alloc.n_none.tolist() == [2] and alloc.n.tolist() == [5]
    r1, r2 = alloc.race()
    from tts.budgets.online import race_votes

    e1, e2 = race_votes([2], [200.0], [1], [300.0], 1.0)  # by tokens; by cost both answers' mean is 5
    np.testing.assert_allclose([r1, r2], [e1, e2])
    assert r1[0] == pytest.approx(3 * (2 / 100) / (2 / 100 + 1 / 300))


def test_a_request_shortened_twice_is_completed_and_never_drawn_past():
    # Worst case 10 a sample, 1 actually spent: the budget of 35 pays 3 samples' worst case, then 3,
    # then the last 2 of the request whole; the round gives exactly its 8 samples.
    alloc = OnlineAllocator(["a"], budget=35.0, policy=OnlinePolicy(n_max=8, chunk=8))
    worst = lambda p, k: 10.0 * np.asarray(k, float)
    calls = []
    while call := alloc.next_call(worst):
        calls.append(call)
        for pid, k in call:
            for i in range(k):
                alloc.record(pid, str(int(alloc.n[0])), 1.0)  # every answer different: never decided early
    assert calls == [[("a", 3)], [("a", 3)], [("a", 2)]] and alloc.n.tolist() == [8]
    assert alloc.rounds == [{"a": 8}]


def test_costs_below_one_unit_never_buy_a_request_past_the_budget():
    # Budgets in dollars (or any unit where one request costs less than 1): room 0.6 pays the first
    # request's 0.5 and not the second's.
    e, part = cut_call(np.array([0, 1]), np.array([1, 1]), lambda p, k: 0.5 * np.asarray(k, float),
                       np.array([0]), np.array([0]), np.array([0.6]))
    assert (e.tolist(), part.tolist()) == ([1], [0])
    e, _ = cut_call(np.array([0, 1]), np.array([1, 1]), lambda p, k: 0.5 * np.asarray(k, float),
                    np.array([0]), np.array([0]), np.array([1.0]))
    assert e.tolist() == [2]


@pytest.mark.parametrize("settings", [{"rule": "window"}, {"rule": "horizon", "confirm_window": 4}])
def test_a_round_that_needs_runs_of_equal_answers_says_so_when_they_are_missing(settings):
    zeros = np.zeros(2, dtype=np.int64)
    with pytest.raises(ValueError, match=r"^rule 'window' and confirm_window need each problem's run of equal "
                                         r"answers: pass streak=$"):
        plan_round(OnlinePolicy(**settings), zeros, zeros, zeros, np.full(2, 8), 0)


def test_a_length_weighted_round_without_its_race_says_so_and_with_it_stops_on_the_race():
    from tts.budgets.online import race_votes

    one = lambda x: np.array([x])
    with pytest.raises(ValueError, match=r"^length_weight > 0 needs the length-weighted race votes: pass race= "
                                         r"\(race_votes\)$"):
        plan_round(OnlinePolicy(length_weight=1.0), one(6), one(2), one(8), one(64), 0)
    # 6-2 after 8 of 64: plain votes go on (risk 0.08); a leader thinking four times shorter stops,
    # so the round moves past the first stage.
    race = race_votes(one(6), one(6 * 2000), one(2), one(2 * 8000), 1.0)
    assert plan_round(OnlinePolicy(), one(6), one(2), one(8), one(64), 0)[2] == 0
    assert plan_round(OnlinePolicy(length_weight=1.0), one(6), one(2), one(8), one(64), 0, race=race)[2] > 0


def test_a_leader_holding_exactly_the_give_up_share_is_not_given_up():
    policy = OnlinePolicy(give_up_after=8, give_up_share=0.5)
    who, _, stage = plan_round(policy, np.array([4]), np.array([2]), np.array([8]), np.array([64]), 0)
    assert who.tolist() == [0] and stage == 0  # 4 of 8 is not less than half
    who, _, stage = plan_round(policy, np.array([3]), np.array([2]), np.array([8]), np.array([64]), 0)
    assert stage > 0  # 3 of 8 is given up in the first stage (and reopened later)
