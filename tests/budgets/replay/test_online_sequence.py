"""The online replay on small hand-made orderings: who a round serves first, where budgets stop a
run, several orderings advanced together, and the race / vote tables of one answer or none.

(tests/budgets/test_online.py and the rule tests check the replay against the live allocator on
random votes; these pin the cases those do not reach: problems whose pool holds fewer samples than
``n_max``, orderings laid end to end, a sequence with nothing to draw.)"""

from __future__ import annotations

import numpy as np

from tts.budgets.online import OnlinePolicy
from tts.budgets.replay.online import OnlineSequence, race_table, streak_table, vote_table, within_each


def _tops(answers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    votes = np.cumsum((answers[..., None] == np.arange(2)) & (answers[..., None] >= 0), axis=1)
    top = np.sort(votes, axis=2)
    return top[..., -1], top[..., -2]


def _worst(q, m):  # 10 tokens a sample, no prompt: every sample costs its worst case
    return 10.0 * np.asarray(m)


# Window rule, one sample a request. The pool holds 3, 2, 2 and 1 samples of the four problems.
WINDOW_ANSWERS = np.array([[0, 0, 0, 0], [0, -1, -1, 0], [-1, -1, -1, -1], [-1, -1, -1, -1]])


def _window_sequence() -> OnlineSequence:
    policy = OnlinePolicy(rule="window", window=4, n_max=4, chunk=1)
    return OnlineSequence.build(*_tops(WINDOW_ANSWERS), np.full((4, 4), 10.0), np.array([3, 2, 2, 1]), policy,
                                streak=streak_table(WINDOW_ANSWERS))


def _race_sequence() -> OnlineSequence:
    # Problem 1 has no answer after its first sample (an empty race), problem 0 one vote.
    answers, costs = np.array([[0, 0, 0], [-1, -1, 0], [0, 0, -1]]), np.full((3, 3), 10.0)
    policy = OnlinePolicy(rule="horizon", n_max=2, chunk=1, length_weight=1.0)
    return OnlineSequence.build(*_tops(answers), costs, np.array([2, 2, 1]), policy,
                                race=race_table(answers, costs, 1.0))


def test_a_round_serves_the_problem_without_a_vote_first_and_stops_each_at_its_pools_samples():
    seq = _window_sequence()
    # Round 1: one sample each. Round 2: problem 3 has its one sample; problem 2 (no vote, least
    # confident) before problems 0 and 1 (one vote each, by index).
    assert seq.p.tolist() == [0, 1, 2, 3, 2, 0, 1] and seq.k.tolist() == [1] * 7
    assert seq.round_end.tolist() == [4, 4, 4, 4, 7, 7, 7]
    assert seq.columns.tolist() == [0, 0, 0, 0, 1, 1, 1]
    assert seq.rounds_at(7) == [{0: 1, 1: 1, 2: 1, 3: 1}, {0: 1, 1: 1, 2: 1}]
    assert seq.rounds_at(5) == [{0: 1, 1: 1, 2: 1, 3: 1}, {2: 1}]
    assert seq.n_at(5).tolist() == [1, 1, 2, 1]


def test_the_race_of_a_problem_without_an_answer_is_served_before_one_with_a_vote():
    assert _race_sequence().p.tolist() == [0, 1, 2, 1, 0]


def test_budgets_stop_at_whole_samples_and_orderings_laid_end_to_end_stop_as_each_alone():
    window, race = _window_sequence(), _race_sequence()
    # 35 pays three samples of round 1; 45 all four (5 left: not one more sample); 70 all seven.
    assert window.within(np.array([35.0, 45.0, 70.0]), _worst).tolist() == [3, 4, 7]
    assert race.within(np.array([20.0, 1000.0, 0.0]), _worst).tolist() == [2, 5, 0]
    both = within_each([window, race], np.array([[35.0, 45.0, 70.0], [20.0, 1000.0, 0.0]]), _worst)
    assert both.tolist() == [[3, 4, 7], [2, 5, 0]]
    # The other way round, and with budgets that would carry a call across from one to the other.
    assert within_each([race, window], np.array([[45.0, 1000.0], [65.0, 1000.0]]), _worst).tolist() == [[4, 5], [6, 7]]


def test_a_sequence_with_nothing_to_draw_draws_nothing_at_any_budget():
    policy = OnlinePolicy(n_max=4, chunk=2)
    seq = OnlineSequence.build(*_tops(WINDOW_ANSWERS), np.ones((4, 4)), np.zeros(4, int), policy)
    assert (seq.p.tolist(), seq.k.tolist(), seq.round_end.tolist(), seq.first.tolist()) == ([], [], [], [0])
    assert seq.within(np.array([0.0, 1e6]), _worst).tolist() == [0, 0]
    assert within_each([seq, seq], np.array([[5.0], [1e6]]), _worst).tolist() == [[0], [0]]
    assert seq.n_at(seq.within(np.array([1e6]), _worst)[0]).tolist() == [0, 0, 0, 0]   # a count n_at takes
    # Beside orderings that draw, before and after them: still nothing, and theirs as alone.
    race = _race_sequence()
    assert within_each([seq, race, seq], np.array([[1e6], [1000.0], [1e6]]), _worst).tolist() == [[0], [5], [0]]


def test_one_answer_races_alone_and_no_answer_has_an_empty_race_and_no_votes():
    answers, tokens = np.array([[0, 0, -1]]), np.array([[10.0, 30.0, 5.0]])
    r1, r2 = race_table(answers, tokens, 1.0)
    assert r1.tolist() == [[1.0, 2.0, 2.0]] and r2.tolist() == [[0.0, 0.0, 0.0]]
    # The same as beside a problem with another answer (where the table has two answers).
    w1, w2 = race_table(np.array([[0, 0, -1], [1, 1, 1]]), np.array([[10.0, 30.0, 5.0], [1.0, 1.0, 1.0]]), 1.0)
    assert (w1[0].tolist(), w2[0].tolist()) == (r1[0].tolist(), r2[0].tolist())
    z1, z2 = race_table(np.array([[-1, -1]]), np.array([[10.0, 30.0]]), 1.0)
    assert z1.tolist() == [[0.0, 0.0]] and z2.tolist() == [[0.0, 0.0]]
    assert vote_table(np.array([[0, -1, 0]]), 2).tolist() == [[[1, 0], [1, 0], [2, 0]]]
    assert vote_table(np.array([[-1, -1]]), 2).tolist() == [[[0, 0], [0, 0]]]


def test_a_request_too_dear_for_the_room_is_drawn_in_parts_each_paid_at_its_own_worst_case():
    # One request of 4 samples; each costs 1 token but is paid 10 at its worst case.
    top1 = np.array([[1, 2, 3, 4]])
    seq = OnlineSequence.build(top1, np.zeros_like(top1), np.ones((1, 4)), np.array([4]), OnlinePolicy(n_max=4, chunk=4))
    assert (seq.p.tolist(), seq.k.tolist()) == ([0], [4])
    # 25: 2 samples fit (20), 2 are spent, and the other 2 (20) fit in the 23 left. 12: one sample at
    # a time (11 left, then 10, then 9: not one more). 5: not one sample.
    assert seq.within(np.array([25.0, 12.0, 5.0]), _worst).tolist() == [4, 3, 0]
