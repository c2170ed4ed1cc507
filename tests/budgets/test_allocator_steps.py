"""The offline allocator step by step: each hull rule, each phase of the greedy, each message, worked out by hand."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from tts.budgets.allocator import (
    AccuracyCurve,
    BudgetError,
    BudgetTooSmallError,
    Candidate,
    allocate,
    check_budget,
    greedy_allocate,
    greedy_path,
    option_matrices,
    upper_concave_hull,
)


def _hull(costs, accs, start=0):
    return upper_concave_hull(np.asarray(costs, dtype=float), np.asarray(accs, dtype=float), start)


def test_an_accuracy_curve_refuses_mismatched_or_unsorted_n_with_its_message():
    with pytest.raises(ValueError) as err:
        AccuracyCurve("self_consistency", (1, 2), (0.5,))
    assert str(err.value) == "an accuracy curve needs as many accuracies as n values (at least one)"
    with pytest.raises(ValueError, match="at least one"):
        AccuracyCurve("self_consistency", (), ())
    with pytest.raises(ValueError) as err:
        AccuracyCurve("self_consistency", (2, 1), (0.5, 0.6))
    assert str(err.value) == "curve n values must be strictly increasing, got (2, 1)"


def test_the_hull_keeps_concave_points_and_drops_the_rest():
    assert _hull([1, 2, 3, 4], [0.1, 0.3, 0.4, 0.45]) == [0, 1, 2, 3]  # slopes 0.2, 0.1, 0.05
    assert _hull([1, 2, 3], [0.25, 0.5, 0.75]) == [0, 2]  # a point on the line is dropped
    assert _hull([2, 4, 6, 8], [0.2, 0.6, 0.7, 0.9]) == [0, 1, 3]  # 6 lies below the line 4 -> 8
    assert _hull([1, 2, 3], [0.9, 0.5, 0.95], start=1) == [1, 2]  # cheaper than the start: never
    assert _hull([1, 3, 2], [0.1, 0.5, 0.4]) == [0, 2, 1]  # walked by cost, not by index
    assert _hull([1, 2, 2], [0.1, 0.3, 0.5]) == [0, 2]  # of equal costs the most accurate
    assert _hull([1, 2, 3], [0.1, 0.5, 0.4]) == [0, 1]  # dearer and less accurate: dominated
    assert _hull([1, 2, 3], [0.1, 0.5, 0.5]) == [0, 1]  # dearer and no more accurate: dominated


def test_greedy_allocate_refuses_malformed_matrices_with_one_message():
    shape = "costs and accs must both be (n_problems, n_options), got"
    for costs, accs in (((2, 2), (2, 3)), ((3,), (3,)), ((2, 0), (2, 0))):
        with pytest.raises(ValueError) as err:
            greedy_allocate(np.ones(costs), np.ones(accs), 10.0)
        assert str(err.value) == f"{shape} {costs}, {accs}"
    for bad in (-1.0, np.inf):
        with pytest.raises(ValueError) as err:
            greedy_allocate(np.array([[1.0, bad]]), np.array([[0.1, 0.2]]), 10.0)
        assert str(err.value) == "every option's cost must be a finite number >= 0; check the cost function"
    assert greedy_allocate(np.array([[0.0, 1.0]]), np.array([[0.1, 0.2]]), 1.0).tolist() == [1]  # free is fine


def test_no_problems_get_no_choices():
    choice = greedy_allocate(np.zeros((0, 3)), np.zeros((0, 3)), 1.0)
    assert choice.shape == (0,) and choice.dtype.kind == "i"


def test_each_problem_starts_at_its_most_accurate_cheapest_option():
    assert greedy_allocate(np.array([[1.0, 1.0, 2.0]]), np.array([[0.2, 0.5, 0.6]]), 1.0).tolist() == [1]


def test_segments_go_by_gain_per_unit_cost():
    # One upgrade fits: A gains 0.2 for 2 (0.1 a unit), B 0.3 for 2 (0.15 a unit): B's.
    costs = np.array([[1.0, 3.0], [10.0, 12.0]])
    accs = np.array([[0.0, 0.2], [0.0, 0.3]])
    assert greedy_allocate(costs, accs, 13.0).tolist() == [0, 1]
    # Below one unit of cost as well (0.4 each: 0.025 against 0.75 a unit).
    small = np.array([[0.1, 0.5], [0.1, 0.5]])
    assert greedy_allocate(small, np.array([[0.0, 0.01], [0.0, 0.3]]), 0.6).tolist() == [0, 1]


def test_an_upgrade_that_does_not_fit_leaves_room_for_a_smaller_one():
    # A's segment (0.4 a unit of 1e-6) is too dear; B's smaller one fits and is taken.
    costs = np.array([[1e-7, 5e-7], [1e-7, 2e-7]])
    accs = np.array([[0.0, 0.4], [0.0, 0.05]])
    assert greedy_allocate(costs, accs, 3e-7).tolist() == [0, 1]


def test_the_rest_of_the_budget_buys_the_best_option_off_the_hull():
    # Both hull segments are too dear; the options below the hulls that fit go by gain per unit cost.
    costs = np.array([[0.1, 0.2, 0.5], [0.1, 0.3, 0.5], [0.1, 0.2, 0.9]])
    accs = np.array([[0.0, 0.1, 0.6], [0.0, 0.15, 0.8], [0.0, 0.02, 0.9]])
    assert greedy_allocate(costs[:2], accs[:2], 0.4).tolist() == [1, 0]  # 1.0 a unit against 0.75
    assert greedy_allocate(costs, accs, 0.6).tolist() == [1, 1, 0]  # then the next that fits
    # A single problem: option 1 (0.1 for 1) fits, option 2 (0.3 for 2) does not.
    assert greedy_allocate(np.array([[1.0, 2.0, 3.0]]), np.array([[0.0, 0.1, 0.3]]), 2.0).tolist() == [1]


def test_round_off_past_the_budget_is_undone():
    # Within the running sum's 1e-12 slack but over the budget when summed exactly: undone.
    assert greedy_allocate(np.array([[1.0, 1.0 + 5e-13]]), np.array([[0.1, 0.2]]), 1.0).tolist() == [0]
    off_hull = np.array([[1.0, 1.0 + 1.5e-12, 3.0], [1.0, 1.0, 1.0]])
    assert greedy_allocate(off_hull, np.array([[0.0, 0.1, 0.3], [0.0, 0.0, 0.0]]), 2.0).tolist() == [0, 0]


def test_greedy_path_lists_every_segment_by_gain_per_unit_cost():
    costs = np.array([[1.0, 2.0, 4.0], [1.0, 3.0, 5.0], [2.0, 2.0, 3.0]])
    accs = np.array([[0.0, 0.3, 0.35], [0.0, 0.2, 0.5], [0.1, 0.4, 0.5]])
    start, problem, option, cum = greedy_path(costs, accs)
    assert start.tolist() == [0, 0, 1]
    # slopes: 0.3 (p0 -> 1), 0.125 (p1 -> 2; option 1 lies below its hull), 0.1 (p2 -> 2), 0.025 (p0 -> 2)
    assert problem.tolist() == [0, 1, 2, 0] and option.tolist() == [1, 2, 2, 2]
    assert cum.tolist() == [5.0, 9.0, 10.0, 12.0]
    start, problem, option, cum = greedy_path(np.array([[1.0], [2.0]]), np.array([[0.5], [0.5]]))
    assert start.tolist() == [0, 0] and problem.dtype == np.int64 and option.size == 0 == cum.size


def test_check_budget_messages_and_edges():
    with pytest.raises(BudgetError) as err:
        check_budget("lots", np.array([1.0]))
    assert str(err.value) == "the budget must be a number, got 'lots'"
    with pytest.raises(BudgetError) as err:
        check_budget(0, np.array([1.0, 2.0]))
    assert str(err.value) == ("the budget must be a positive number, got 0; pass at least 3 (the cheapest "
                              "configuration of every problem)")
    with pytest.raises(BudgetTooSmallError) as err:
        check_budget(2.5, np.array([1.0, 2.0]), "tokens")
    assert str(err.value).startswith("a budget of 2.5 tokens cannot pay") and err.value.minimum == 3.0
    check_budget(0.5, np.array([0.25]))  # a budget below one unit is a budget
    check_budget(1 - 1e-12, np.array([1.0]))  # equal up to round-off


def test_option_matrices_price_each_strategy_and_say_what_is_missing():
    curves = {0: [AccuracyCurve("self_consistency", (1, 4), (0.2, 0.6)), AccuracyCurve("best_of_n", (1, 4), (0.2, 0.4))]}
    cands = [Candidate("self_consistency", 4), Candidate("best_of_n", 4)]
    price = {"self_consistency": 10.0, "best_of_n": 30.0}
    costs, accs = option_matrices(["a"], [0], cands, lambda pid, s, n: price[s] * n, curves)
    assert costs.tolist() == [[40.0, 120.0]] and accs.tolist() == [[0.6, 0.4]]
    with pytest.raises(ValueError) as err:
        option_matrices(["a", "b"], [0], cands, lambda *a: 1.0, curves)
    assert str(err.value) == "2 problems but 1 difficulty bins; give one bin each"
    with pytest.raises(ValueError) as err:
        option_matrices(["a"], [0], [Candidate("weighted_vote", 4)], lambda *a: 1.0, curves)
    assert str(err.value) == ("bin 0 has no curve for strategy 'weighted_vote'; fit one or drop that strategy "
                              "from the candidates")


def test_allocate_names_each_plans_problem_and_accuracy_and_logs_the_spend(caplog):
    curves = {0: [AccuracyCurve("self_consistency", (1, 4), (0.2, 0.6))]}
    cands = [Candidate("self_consistency", 1), Candidate("self_consistency", 4)]
    with caplog.at_level(logging.DEBUG, logger="tts.budgets.allocator"):
        plans = allocate(["a", "b"], [0, 0], 500.0, cands, lambda pid, s, n: 100.0 * n, curves)
    assert [(p.problem_id, p.n, p.expected_accuracy) for p in plans] == [("a", 4, 0.6), ("b", 1, 0.2)]
    assert "allocated 500 of 500 tokens over 2 problems" in caplog.messages
    with pytest.raises(ValueError) as err:
        allocate(["a"], [0], 500.0, [], lambda *a: 1.0, curves)
    assert str(err.value) == "give at least one candidate configuration, e.g. candidate_ladder()"


def test_the_start_decides_the_first_segments_gain():
    # Problem 0 starts at option 1 (0.5, not 0.2, at cost 1): its segment gains 0.1 a unit, less than
    # problem 1's 0.25, so the one upgrade the budget allows is problem 1's.
    costs = np.array([[1.0, 1.0, 2.0], [1.0, 2.0, 2.0]])
    accs = np.array([[0.2, 0.5, 0.6], [0.0, 0.25, 0.0]])
    assert greedy_allocate(costs, accs, 3.0).tolist() == [1, 1]


def test_an_upgrade_off_the_hull_past_the_budget_by_round_off_is_undone():
    costs = np.array([[1.0, 2.0, 3.0], [1.0 + 1.5e-12] * 3])
    accs = np.array([[0.0, 0.1, 0.3], [0.0, 0.0, 0.0]])
    assert greedy_allocate(costs, accs, 3.0).tolist() == [0, 0]


def test_greedy_path_keeps_problems_with_equal_gains_in_their_order():
    slopes = np.where(np.arange(100) % 2 == 0, 0.5, 0.25)
    _, problem, _, _ = greedy_path(np.tile([1.0, 2.0], (100, 1)), np.stack([np.zeros(100), slopes], axis=1))
    assert problem.tolist() == list(range(0, 100, 2)) + list(range(1, 100, 2))
