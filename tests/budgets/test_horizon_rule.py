"""The "horizon" stopping rule (the leader holds up to n_max samples) and the consistency oracle:
the risk against direct integration, stop / go on hand-made votes, and the oracle's stopping point."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate, stats

from tts.benchmarks.pool import ModelPool
from tts.budgets.online import OnlineAllocator, OnlinePolicy, decided, overturn_risk, plan_round, stopping_stages
from tts.budgets.replay.oracle import oracle_ratio, oracle_samples, running_leaders


def _risk_by_integration(v1, v2, n, n_max, prior):
    """P(runner-up catches up within the m remaining samples), integrating the Beta posterior of
    the leader's share against the binomial of its further votes."""
    m, d = n_max - n, v1 - v2
    k = np.floor((m - d) / 2)
    if m <= 0 or k < 0:
        return 0.0
    f = lambda p: stats.beta.pdf(p, v1 + prior, v2 + prior) * stats.binom.cdf(k, m, p)  # noqa: E731
    return integrate.quad(f, 0, 1, limit=200)[0]


@pytest.mark.parametrize("v1,v2,n,n_max,prior", [(4, 0, 4, 64, 1.0), (3, 1, 4, 64, 1.0), (20, 10, 30, 64, 1.0),
                                                 (8, 0, 8, 64, 0.3), (30, 22, 52, 64, 1.0), (5, 5, 12, 40, 1.0)])
def test_the_risk_is_the_beta_posteriors_chance_of_being_caught(v1, v2, n, n_max, prior):
    assert overturn_risk(v1, v2, n, n_max, prior) == pytest.approx(_risk_by_integration(v1, v2, n, n_max, prior),
                                                                   abs=1e-7)


def test_a_lead_the_remaining_samples_cannot_overturn_has_no_risk_and_a_tie_at_the_end_counts():
    assert overturn_risk(10, 1, 12, 20, 1.0) == 0.0        # lead 9 > 8 samples left
    assert overturn_risk(5, 5, 64, 64, 1.0) == 0.0         # nothing left to draw
    assert overturn_risk(9, 1, 12, 20, 1.0) > 0.0          # lead 8 = samples left: a tie is possible
    assert overturn_risk(5, 5, 10, 64, 1.0) > 0.5          # a tied race: the runner-up wins or ties often


@pytest.mark.parametrize("votes,n,n_max,stop", [
    ((4, 0), 4, 64, True),      # four unanimous: risk 0.029 <= 0.05
    ((3, 1), 4, 64, False),     # 3-1: risk 0.19
    ((7, 1), 8, 64, True),      # 7-1: risk 0.015
    ((6, 2), 8, 64, False),     # 6-2: risk 0.08
    ((30, 22), 52, 64, True),   # a lead of 8 with 12 samples left: the Beta criterion would go on
    ((20, 18), 40, 64, False),  # a near tie far from the horizon
])
def test_hand_made_votes_stop_or_go_on(votes, n, n_max, stop):
    v1, v2 = votes
    assert bool(decided([v1], [v2], [n], n_max, rule="horizon", confidence=0.95)[0]) is stop


def test_near_the_horizon_it_stops_where_the_beta_criterion_goes_on_and_far_from_it_agrees():
    assert decided([30], [22], [52], 64, rule="horizon")[0] and not decided([30], [22], [52], 64, rule="beta")[0]
    for v1, v2 in [(4, 0), (3, 1), (6, 2), (9, 3)]:
        assert decided([v1], [v2], [v1 + v2], 4096, rule="horizon")[0] == decided([v1], [v2], [v1 + v2], 4096)[0]


def test_its_stages_and_serve_order_highest_risk_first():
    assert stopping_stages("horizon", 0.95) == [("horizon", c) for c in (0.95, 0.96, 0.97, 0.98, 0.99, 0.995, 0.999)] \
        + [("exact", 0.95)]   # stopped votes reopen in fine steps of risk (FINE_LADDER)
    assert stopping_stages("beta", 0.95) == [("beta", 0.95), ("beta", 0.99), ("beta", 0.999), ("exact", 0.95)]
    policy = OnlinePolicy(n_max=64, chunk=4)
    assert policy.rule == "horizon"
    top1, top2, n = np.array([3, 2, 0, 30, 4]), np.array([1, 2, 0, 26, 0]), np.array([4, 4, 0, 56, 4])
    who, k, stage = plan_round(policy, top1, top2, n, np.full(5, 64), 0)
    # unsampled first, then the 2-2 tie, 3-1, and 30-26 with 8 left (lowest risk of the open ones).
    assert (who.tolist(), k.tolist(), stage) == ([2, 1, 0, 3], [4, 4, 4, 4], 0)


def test_a_live_run_with_the_horizon_rule_stops_unanimous_votes_after_one_chunk():
    alloc = OnlineAllocator(["easy", "contested"], budget=1e9, policy=OnlinePolicy(n_max=32, chunk=4, escalate=False))
    while call := alloc.next_call(lambda p, k: 10.0 * np.asarray(k)):
        for pid, k in call:
            for _ in range(k):
                i = alloc.problem_ids.index(pid)
                alloc.record(pid, "42" if pid == "easy" or alloc.n[i] % 2 else "41", 10.0)
    assert alloc.n.tolist() == [4, 32]


def test_the_oracle_stops_where_the_running_leader_never_changes_again():
    leaders = np.array([[1, 1, 1, 1, 1, 1, 1, 1],     # never changes: one sample
                        [2, 1, 1, 1, 1, 1, 1, 1],     # last change at the second prefix: two samples
                        [1, 1, 2, 2, 1, 1, 2, 2],     # final leader from the 7th sample on
                        [-1, 3, 3, 3, 3, 3, 3, 3]])   # no answer first
    assert oracle_samples(leaders, 8).tolist() == [1, 2, 7, 2]
    assert oracle_samples(leaders, 8, chunk=4).tolist() == [4, 4, 8, 4]
    assert oracle_samples(leaders, 4).tolist() == [1, 2, 3, 2]   # only the first target_n prefixes count
    iv = oracle_ratio(np.array([10.0, 12.0, 8.0]), np.array([2.0, 3.0, 2.0]), seed=0, bootstrap=200)
    assert iv.mean == pytest.approx(30 / 7) and iv.lo <= iv.mean <= iv.hi


def _pool_of(answers, real=None) -> ModelPool:
    """A pool of answer ids only (``-1``: no answer; ``real`` False: padding, also ``-1``)."""
    answers = np.array(answers, dtype=np.int32)
    shape = answers.shape
    return ModelPool(model="m", problem_ids=tuple(f"q{i}" for i in range(shape[0])), answers=answers,
                     answer_texts=tuple(tuple(str(a) for a in range(answers.max(initial=-1) + 1)) for _ in answers),
                     correct=np.zeros(shape, bool), tokens=np.ones(shape), scores=np.full(shape, np.nan),
                     sample_idx=np.tile(np.arange(shape[1]), (shape[0], 1)),
                     mask=np.ones(shape, bool) if real is None else np.array(real, bool))


def test_the_running_leader_is_the_majority_and_a_tie_goes_to_the_answer_seen_first():
    pool = _pool_of([[1, 0, 0, 1, 2],       # ties at 2 and 4 samples go to 1 (seen first)
                     [-1, 2, -1, 0, 0],     # nothing leads before the first answer
                     [0, 0, 3, -1, -1]],    # two padding slots
                    real=[[1] * 5, [1] * 5, [1, 1, 1, 0, 0]])
    order = np.tile(np.arange(5), (3, 1))
    assert running_leaders(pool, order).tolist() == [[1, 1, 0, 1, 1], [-1, 2, 2, 2, 0], [0, 0, 0, 0, 0]]
    # The ordering decides what comes first: problem 0 read backwards is 2, 1, 0, 0, 1.
    order[0] = [4, 3, 2, 1, 0]
    assert running_leaders(pool, order)[0].tolist() == [2, 2, 2, 0, 1]


def test_a_pool_of_one_answer_or_of_none_leads_with_it_or_with_nothing():
    one = _pool_of([[0, -1, 0]])
    assert running_leaders(one, np.array([[1, 0, 2]])).tolist() == [[-1, 0, 0]]
    none = _pool_of([[-1, -1], [-1, -1]])
    assert running_leaders(none, np.array([[0, 1], [1, 0]])).tolist() == [[-1, -1], [-1, -1]]


def test_the_oracle_ratio_is_the_observed_ratio_of_means_with_a_percentile_bootstrap_over_orderings():
    uniform, oracle = np.array([10, 12, 8, 30, 14, 9, 21, 40]), np.array([2, 3, 2, 5, 4, 1, 3, 9])
    iv = oracle_ratio(uniform, oracle, seed=3, bootstrap=400)
    # By its definition: resamples of the orderings from seed + 2, resample 0 the observed ones.
    boot = np.random.default_rng(5).integers(0, 8, size=(400, 8))
    boot[0] = np.arange(8)
    ratios = uniform[boot].mean(axis=1) / oracle[boot].mean(axis=1)
    lo, hi = np.percentile(ratios, [2.5, 97.5])
    assert (iv.mean, iv.lo, iv.hi) == (pytest.approx(144 / 29), pytest.approx(lo), pytest.approx(hi))
    assert 3.5 <= iv.lo < iv.mean < iv.hi <= 9.0   # within the per-ordering ratios 3.5 to 9
