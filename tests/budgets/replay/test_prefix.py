"""The replay primitives on hand-made pools, every prefix worked out by hand: the vote and its
tie rule, the two leading counts, best-of-n's running arg-max, tokens, orderings, bin curves.

Grades (``correct``) only ever grade a prefix's choice; they never choose."""

from __future__ import annotations

import numpy as np
import pytest

from tts.benchmarks.pool import ModelPool
from tts.budgets.replay.prefix import fit_bin_curves, pool_rule, random_orders, replay_prefixes

NAN = np.nan


def _pool(answers, correct, tokens=None, scores=None, real=None) -> ModelPool:
    answers = np.array(answers, dtype=np.int32)
    shape = answers.shape
    return ModelPool(model="m", problem_ids=tuple(f"q{i}" for i in range(shape[0])), answers=answers,
                     answer_texts=tuple(tuple(str(a) for a in range(answers.max(initial=-1) + 1)) for _ in answers),
                     correct=np.array(correct, bool), tokens=np.ones(shape) if tokens is None else np.array(tokens, float),
                     scores=np.full(shape, NAN) if scores is None else np.array(scores, float),
                     sample_idx=np.tile(np.arange(shape[1]), (shape[0], 1)),
                     mask=np.ones(shape, bool) if real is None else np.array(real, bool))


def _identity(pool: ModelPool) -> np.ndarray:
    return np.tile(np.arange(pool.n_samples), (pool.n_problems, 1))


# Problem 0: answer 0 is right; ties at 2 and 4 samples go to 1 (seen first), the second-highest
# score 0.9 repeats at sample 4 and the first one stays best. Problem 1: no answer first, answer 2
# right, an unknown token count (counted 0), two padding slots (never drawn).
POOL = _pool(answers=[[1, 0, 0, 1, 2], [-1, 2, 2, -1, -1]],
             correct=[[0, 1, 1, 0, 0], [0, 1, 1, 0, 0]],
             tokens=[[10, 20, 30, 40, 50], [5, NAN, 7, NAN, NAN]],
             scores=[[0.5, 0.9, 0.2, 0.9, 0.1], [0.3, 0.1, 0.4, NAN, NAN]],
             real=[[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])


def test_every_prefix_of_an_ordering_gets_its_vote_its_two_leading_counts_its_best_sample_and_its_tokens():
    rep = replay_prefixes(POOL, _identity(POOL))
    assert rep.vote_correct.tolist() == [[False, False, True, False, False], [False, True, True, True, True]]
    assert rep.top1.tolist() == [[1, 1, 2, 2, 2], [0, 1, 2, 2, 2]]
    assert rep.top2.tolist() == [[0, 1, 1, 2, 2], [0, 0, 0, 0, 0]]
    # Best-of-n: the first of equal scores stays best (sample 1, not sample 3); padding never is.
    assert rep.best_correct.tolist() == [[False, True, True, True, True], [False, False, True, True, True]]
    assert rep.tokens.tolist() == [[10, 30, 60, 100, 150], [5, 5, 12, 12, 12]]
    assert rep.sample_tokens.tolist() == [[10, 20, 30, 40, 50], [5, 0, 7, 0, 0]]
    assert rep.count.tolist() == [5, 3]


def test_the_ordering_decides_the_prefixes_and_a_late_sample_without_answer_grades_nothing():
    # Problem 0 read as 2, 1, 0, 0, 1: 2 leads the three-way tie, then 0, then 1 and 0 tie (1 first).
    # Problem 1 read as 2, 2, (no answer): the right answer 2 stays right after the answerless sample.
    rep = replay_prefixes(POOL, np.array([[4, 3, 2, 1, 0], [1, 2, 0, 3, 4]]))
    assert rep.vote_correct.tolist() == [[False, False, False, True, False], [True, True, True, True, True]]
    assert rep.top1.tolist()[0] == [1, 1, 1, 2, 2] and rep.top2.tolist()[0] == [0, 1, 1, 1, 2]
    # Scores 0.1, 0.9, 0.2, 0.9, 0.5: sample 3 (score 0.9, wrong) is best from the second prefix on.
    assert rep.best_correct.tolist()[0] == [False, False, False, False, False]
    assert rep.best_correct.tolist()[1] == [True, True, True, True, True]   # 0.1, 0.4, 0.3: the right 0.4 wins
    assert rep.tokens.tolist()[1] == [0, 7, 12, 12, 12]


def test_the_two_leading_counts_among_many_answers():
    # Six answers: 5 leads with 3 votes, 4 is second with 2, the others have 1.
    pool = _pool([[0, 1, 2, 3, 4, 5, 5, 4, 5]], [[0, 0, 0, 0, 0, 1, 1, 0, 1]])   # 5 is right
    rep = replay_prefixes(pool, _identity(pool))
    assert rep.top1.tolist() == [[1, 1, 1, 1, 1, 1, 2, 2, 3]]
    assert rep.top2.tolist() == [[0, 1, 1, 1, 1, 1, 1, 2, 2]]
    # Answer 0 leads the ties of one vote, 5 leads at 7 samples, 4 (seen first) the 2-2 tie at 8.
    assert rep.vote_correct.tolist() == [[False] * 6 + [True, False, True]]


def test_pools_of_two_one_and_no_answers():
    two = replay_prefixes(pool := _pool([[1, 1, 0]], [[1, 1, 0]]), _identity(pool))
    assert (two.top1.tolist(), two.top2.tolist(), two.vote_correct.tolist()) == ([[1, 2, 2]], [[0, 0, 1]], [[True] * 3])
    one = replay_prefixes(pool := _pool([[0, -1, 0]], [[1, 0, 1]]), _identity(pool))
    assert (one.top1.tolist(), one.top2.tolist(), one.vote_correct.tolist()) == ([[1, 1, 2]], [[0, 0, 0]], [[True] * 3])
    none = replay_prefixes(pool := _pool([[-1, -1]], [[0, 0]]), _identity(pool))
    assert (none.top1.tolist(), none.top2.tolist(), none.vote_correct.tolist()) == ([[0, 0]], [[0, 0]], [[False] * 2])


def test_n_samples_of_a_replay_clip_to_the_real_samples_and_zero_draws_nothing():
    rep = replay_prefixes(POOL, _identity(POOL))
    assert rep.tokens_at(np.array([1, 1])).tolist() == [10, 5]
    assert rep.tokens_at(np.array([0, 5])).tolist() == [0, 12]        # 5 of problem 1's 3 real samples: all 3
    assert rep.tokens_at(np.array([4.0, 2.0])).tolist() == [100, 5]   # whole numbers as floats
    assert rep.tokens_at(3).tolist() == [60, 12]
    assert rep.correct_at(np.array([3, 0])).tolist() == [True, False]
    assert rep.correct_at(np.array([1, 2]), "best_of_n").tolist() == [False, False]
    assert rep.correct_at(np.array([2, 3]), "best_of_n").tolist() == [True, True]


def test_best_of_n_without_scores_says_the_pool_has_none():
    rep = replay_prefixes(pool := _pool([[0, 1]], [[1, 0]]), _identity(pool))
    assert rep.best_correct is None
    with pytest.raises(ValueError, match=r"^best_of_n picks by verifier score; this pool has none$"):
        rep.correct_at(np.array([1]), "best_of_n")


def test_a_strategy_without_a_budget_replay_names_those_that_have_one():
    with pytest.raises(ValueError) as exc:
        pool_rule("beam")
    message = str(exc.value)
    assert message.startswith("strategy 'beam' cannot be replayed from a sample pool (pool_rule None); use one of: ")
    able = message.rsplit(": ", 1)[1].split(", ")
    assert {"self_consistency", "best_of_n"} <= set(able) and "beam" not in able and "weighted_vote" not in able
    with pytest.raises(ValueError) as exc:
        pool_rule("weighted_vote")
    able = str(exc.value).rsplit("Budget replays: ", 1)[1].split(", ")
    assert {"self_consistency", "best_of_n"} <= set(able) and "weighted_vote" not in able


def test_orderings_shuffle_the_real_samples_and_leave_padding_last():
    mask = np.array([[1, 0, 1, 1, 0], [1, 1, 1, 1, 1]], bool)
    orders = random_orders(mask, 200, np.random.default_rng(0))
    assert orders.shape == (200, 2, 5)
    assert all(sorted(o[0, :3]) == [0, 2, 3] and sorted(o[0, 3:]) == [1, 4] for o in orders)
    assert all(sorted(o[1]) == [0, 1, 2, 3, 4] for o in orders)
    firsts = np.bincount(orders[:, 0, 0], minlength=5)
    assert firsts[[1, 4]].tolist() == [0, 0] and firsts[[0, 2, 3]].min() > 40   # each real sample first about 1/3
    again = random_orders(mask, 200, np.random.default_rng(0))
    assert np.array_equal(orders, again)


def test_bin_curves_average_each_bins_prefix_outcomes_at_each_n():
    correct = np.array([[1, 0, 1], [0, 0, 1], [1, 1, 1], [0, 1, 0]], bool)
    curves = fit_bin_curves(correct, np.array([0, 1, 0, 1]), [1, 2, 5])   # n = 5 reads the last column (3)
    assert set(curves) == {0, 1}
    assert curves[0].strategy == "self_consistency" and curves[0].ns == (1, 2, 5)
    assert curves[0].accuracy == (1.0, 0.5, 1.0) and curves[1].accuracy == (0.0, 0.5, 0.5)
    assert fit_bin_curves(correct, np.array([3, 3, 3, 3]), [2], "best_of_n")[3].accuracy == (0.5,)
    assert fit_bin_curves(correct, np.array([3, 3, 3, 3]), [2], "best_of_n")[3].strategy == "best_of_n"
