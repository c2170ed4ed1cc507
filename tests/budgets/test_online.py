"""The online rule: Beta stopping, rounds least confident first, calls paid at their worst case, and
the replay (many budgets at once) making exactly the decisions of the allocator that drives a run."""

from __future__ import annotations

import numpy as np
import pytest

from tts.budgets.online import (
    OnlineAllocator,
    OnlinePolicy,
    cut_call,
    decided,
    plan_round,
    stopping_stages,
    vote_confidence,
)
from tts.budgets.replay.online import OnlineSequence


def _random_votes(rng, size, width):
    """Random answers (-1: none; answer 0 more common on some problems), costs, running vote counts
    per answer and those counts sorted: the replay's inputs for the replay = live tests."""
    answers = np.where(rng.random((size, width)) < rng.random((size, 1)), 0, rng.integers(-1, 4, (size, width)))
    costs = rng.integers(5, 100, (size, width)).astype(float)
    votes = np.cumsum((answers[..., None] == np.arange(4)) & (answers[..., None] >= 0), axis=1)
    return answers, costs, votes, np.sort(votes, axis=2)


def _drive(alloc, answer, cost, worst):
    """Run an allocator to the end; ``answer(pid, i)`` is the i-th sample's answer of a problem."""
    while call := alloc.next_call(worst):
        for pid, k in call:
            for _ in range(k):
                i = alloc.problem_ids.index(pid)
                alloc.record(pid, answer(pid, int(alloc.n[i])), cost(pid, int(alloc.n[i])))
    return alloc


def _assert_replay_is_live(seq, answers, costs, policy, budgets, worst):
    """At every budget, the replay (:class:`OnlineSequence`) draws what the live allocator driven
    sample by sample draws: the same spend bound, samples per problem and rounds."""
    drawn = seq.within(budgets, worst)
    for budget, d in zip(budgets, drawn.tolist()):
        alloc = _drive(OnlineAllocator(list(range(len(answers))), budget, policy),
                       lambda pid, i: None if answers[pid, i] < 0 else str(answers[pid, i]),
                       lambda pid, i: costs[pid, i], worst)
        assert alloc.spent <= budget
        assert alloc.n.tolist() == seq.n_at(d).tolist()
        assert [r for r in alloc.rounds if r] == seq.rounds_at(d)
    return drawn


def test_beta_criterion_matches_aggarwal_numbers():
    # Four unanimous votes: P(Beta(5, 1) > 1/2) = 1 - 0.5**5 > 0.95; three are not enough.
    assert vote_confidence(4, 0) == pytest.approx(1 - 0.5**5)
    assert vote_confidence(3, 0) < 0.95 < vote_confidence(4, 0)
    np.testing.assert_array_equal(decided([4, 3, 5], [0, 0, 5], [4, 3, 10], 64), [True, False, False])
    # Exact rule: a lead larger than the samples left cannot be overtaken.
    np.testing.assert_array_equal(decided([10, 10], [1, 1], [11, 11], [19, 30], rule="exact"), [True, False])


def test_online_stops_unanimous_problems_and_feeds_contested_ones():
    alloc = OnlineAllocator(["easy", "contested"], budget=10_000,
                            policy=OnlinePolicy(n_max=32, chunk=1, escalate=False))
    _drive(alloc, lambda pid, i: "42" if pid == "easy" or i % 2 == 0 else "41", lambda pid, i: 10.0,
           lambda p, k: 10.0 * np.asarray(k))
    assert alloc.n.tolist() == [4, 32]  # stopped at the first decided vote; never decided: all 32
    assert alloc.votes[0] == {"42": 4}
    assert alloc.spent <= alloc.budget


def test_online_respects_the_budget_and_escalates():
    alloc = _drive(OnlineAllocator(["a", "b", "c"], budget=100, policy=OnlinePolicy(n_max=64, chunk=1)),
                   lambda pid, i: "1", lambda pid, i: 10.0, lambda p, k: 10.0 * np.asarray(k))
    assert alloc.spent <= 100
    assert alloc.n.sum() == 10  # unanimous votes still buy samples while budget is left
    assert stopping_stages("beta", 0.95)[-1][0] == "exact"
    with pytest.raises(ValueError, match="positive"):
        OnlineAllocator(["a"], budget=0)


def test_rounds_serve_the_least_confident_first_in_chunks():
    policy = OnlinePolicy(n_max=6, chunk=4)
    top1, top2, n = np.array([4, 2, 1, 0]), np.array([0, 2, 1, 0]), np.array([4, 4, 5, 0])
    who, k, stage = plan_round(policy, top1, top2, n, np.full(4, 6), 0)
    # Problem 0 is decided; the never-sampled problem 3 (confidence 0) comes first, then the
    # 2-2 tie, then 1-1 with only one sample left before n_max.
    assert who.tolist() == [3, 1, 2] and k.tolist() == [4, 2, 1] and stage == 0


def test_a_call_pays_whole_requests_at_their_worst_case_then_shortens_the_head():
    p, k = np.array([0, 1, 2]), np.array([4, 4, 4])

    def worst(q, m):  # prompt of 10 plus 100 per sample
        return 10.0 + 100.0 * np.asarray(m)

    # Room for two whole requests (410 each) but not three.
    e, part = cut_call(p, k, worst, np.array([0]), np.array([0]), np.array([1000.0]))
    assert (e[0], part[0]) == (2, 0)
    # Room for less than one whole request: the head is shortened to what fits (2 samples: 210).
    e, part = cut_call(p, k, worst, np.array([2]), np.array([0]), np.array([300.0]))
    assert (e[0], part[0]) == (2, 2)
    # The rest of a shortened head is a new request (its prompt paid again): 2 left cost 210.
    e, part = cut_call(p, k, worst, np.array([2]), np.array([2]), np.array([210.0]))
    assert (e[0], part[0]) == (3, 0)
    # Not one sample fits: the run ends.
    e, part = cut_call(p, k, worst, np.array([2]), np.array([0]), np.array([100.0]))
    assert (e[0], part[0]) == (2, 0)


@pytest.mark.parametrize("rule", ["horizon", "beta"])
@pytest.mark.parametrize("seed", range(6))
def test_the_replay_at_many_budgets_makes_the_allocators_decisions(seed, rule):
    """:class:`OnlineSequence` (the replay, all budgets at once) against :class:`OnlineAllocator`
    driven sample by sample, on random votes, costs and prompt lengths: the same rounds and the
    same samples per problem at every budget, and a smaller budget draws a prefix of a larger one."""
    rng = np.random.default_rng(seed)
    size, width = 25, 40
    answers, costs, votes, top = _random_votes(rng, size, width)
    policy = OnlinePolicy(n_max=int(rng.integers(4, width + 1)), chunk=int(rng.integers(1, 6)),
                          escalate=bool(seed % 2), rule=rule)
    prompt = rng.integers(0, 30, size).astype(float)

    def worst(q, m):
        return prompt[q] + 100.0 * np.asarray(m)

    seq = OnlineSequence.build(top[..., -1], top[..., -2], costs, np.full(size, policy.n_max), policy)
    budgets = np.sort(rng.uniform(200, costs.sum() * 1.2, 10).round())
    drawn = _assert_replay_is_live(seq, answers, costs, policy, budgets, worst)
    assert np.all(np.diff(drawn) >= 0)
