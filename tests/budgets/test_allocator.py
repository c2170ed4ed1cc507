"""The offline allocator: budget safety, optimality on concave curves, errors."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from tts.budgets.allocator import (
    AccuracyCurve,
    BudgetError,
    BudgetTooSmallError,
    StrategyCandidate,
    allocate,
    candidate_ladder,
    greedy_allocate,
    greedy_path,
    upper_concave_hull,
)

LADDER = (1, 2, 4, 8)


def _concave_instance(rng, n_problems=4):
    """Costs n * c_p, accuracies concave in cost (a_max * (1 - exp(-rate * n)))."""
    ns = np.asarray(LADDER, dtype=float)
    per_sample = rng.uniform(1.0, 3.0, size=(n_problems, 1))
    costs = per_sample * ns
    rate = rng.uniform(0.05, 1.0, size=(n_problems, 1))
    accs = rng.uniform(0.3, 1.0, size=(n_problems, 1)) * (1 - np.exp(-rate * ns))
    return costs, accs


def _brute_force(costs, accs, budget):
    best = -1.0
    for choice in itertools.product(range(costs.shape[1]), repeat=costs.shape[0]):
        c = sum(costs[p, j] for p, j in enumerate(choice))
        if c <= budget + 1e-9:  # the sum order differs from the allocator's
            best = max(best, sum(accs[p, j] for p, j in enumerate(choice)))
    return best


def _value(accs, choice):
    return float(accs[np.arange(len(accs)), choice].sum())


def test_never_exceeds_the_budget_on_random_instances():
    rng = np.random.default_rng(0)
    for _ in range(200):
        n_p, n_o = rng.integers(1, 12), rng.integers(1, 7)
        costs = rng.uniform(0.0, 10.0, size=(n_p, n_o))
        accs = rng.uniform(0.0, 1.0, size=(n_p, n_o))  # not even concave or monotone
        need = costs.min(axis=1).sum()
        budget = need + rng.exponential(1.0) * costs.sum() / 3
        choice = greedy_allocate(costs, accs, budget)
        assert math.fsum(costs[np.arange(n_p), choice]) <= budget


def test_reaches_the_brute_force_optimum_at_greedy_breakpoints():
    rng = np.random.default_rng(1)
    for _ in range(20):
        costs, accs = _concave_instance(rng)
        _, _, _, cum = greedy_path(costs, accs)
        for budget in cum + 1e-9:  # breakpoints, up to the sum's float round-off
            assert _value(accs, greedy_allocate(costs, accs, budget)) == pytest.approx(
                _brute_force(costs, accs, budget), abs=1e-9)


def test_within_one_segment_of_optimum_and_never_worse_than_uniform():
    rng = np.random.default_rng(2)
    for _ in range(20):
        costs, accs = _concave_instance(rng)
        max_gain = np.diff(accs, axis=1).max()
        for budget in np.linspace(math.fsum(costs[:, 0]), math.fsum(costs[:, -1]), 9):
            got = _value(accs, greedy_allocate(costs, accs, budget))
            assert got >= _brute_force(costs, accs, budget) - max_gain - 1e-9
            # Uniform: the largest common n that fits.
            fits = [j for j in range(len(LADDER)) if math.fsum(costs[:, j]) <= budget]
            assert got >= accs[:, max(fits)].sum() - 1e-9


def test_equal_problems_get_the_uniform_optimum():
    # Identical concave curves: spending evenly is optimal, and the greedy finds it.
    costs = np.tile(np.asarray(LADDER, float), (3, 1))
    accs = np.tile([0.5, 0.7, 0.8, 0.85], (3, 1))
    np.testing.assert_array_equal(greedy_allocate(costs, accs, 12.0), [2, 2, 2])


def test_hull_drops_points_below_the_concave_envelope():
    costs = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    accs = np.array([0.1, 0.15, 0.6, 0.55, 0.7])
    assert upper_concave_hull(costs, accs, 0) == [0, 2, 4]


@pytest.mark.parametrize("budget", [0, -5.0, float("nan"), 3.9])
def test_impossible_budgets_say_what_to_change(budget):
    costs = np.array([[1.0, 2.0], [3.0, 6.0]])
    accs = np.array([[0.5, 0.6], [0.2, 0.4]])
    with pytest.raises(BudgetError, match="at least 4") as err:
        greedy_allocate(costs, accs, budget)
    # Too small and not a positive number are told apart by type, not by message.
    assert isinstance(err.value, BudgetTooSmallError) == (budget == 3.9)
    if budget == 3.9:
        assert err.value.minimum == 4.0


def test_an_accuracy_curve_interpolates_in_log2_n_and_holds_its_ends():
    curve = AccuracyCurve("self_consistency", (1, 16, 64), (0.2, 0.6, 0.7))
    assert [curve.at(n) for n in (1, 16, 64)] == pytest.approx([0.2, 0.6, 0.7])  # the measured points
    assert curve.at(2) == pytest.approx(0.3)  # a quarter of the way from log2 1 to log2 16 (linear in n: 0.227)
    assert curve.at(4) == pytest.approx(0.4)  # halfway (linear in n: 0.28)
    assert curve.at(32) == pytest.approx(0.65)  # halfway from 16 to 64 in log2 n (linear in n: 0.627)
    assert curve.at(128) == pytest.approx(0.7) and curve.at(1024) == pytest.approx(0.7)  # held beyond the last n
    assert AccuracyCurve("best_of_n", (4, 8), (0.5, 0.6)).at(1) == pytest.approx(0.5)  # and before the first


def test_allocate_returns_plans_within_budget():
    curves = {
        0: [AccuracyCurve("self_consistency", (1, 64), (0.95, 0.97))],
        1: [AccuracyCurve("self_consistency", (1, 2, 4, 8, 16, 32, 64), (0.3, 0.35, 0.45, 0.55, 0.6, 0.62, 0.63))],
    }
    per_bin_tokens = {0: 100.0, 1: 500.0}
    ids = [f"q{i}" for i in range(10)]
    bins = [0] * 8 + [1] * 2
    cost = lambda pid, strategy, n: n * per_bin_tokens[bins[ids.index(pid)]]  # noqa: E731
    cands = candidate_ladder(max_tokens=4096)
    plans = allocate(ids, bins, 20_000.0, cands, cost, curves)
    assert sum(p.expected_cost for p in plans) <= 20_000.0
    assert all(p.strategy == "self_consistency" and p.max_tokens == 4096 for p in plans)
    assert min(p.n for p in plans[8:]) > max(p.n for p in plans[:8])  # hard problems get more
    with pytest.raises(BudgetTooSmallError, match="at least 1800 tokens"):
        allocate(ids, bins, 100.0, cands, cost, curves)
    with pytest.raises(ValueError, match="no accuracy curves for difficulty bin 2"):
        allocate(ids[:1], [2], 1e6, cands, cost, curves)
    with pytest.raises(ValueError, match="n >= 1"):
        StrategyCandidate("best_of_n", 0)


def test_candidates_take_any_registered_strategy_name():
    from tts.registry import STRATEGIES, UnknownNameError

    assert StrategyCandidate("weighted_vote", 4).strategy == "weighted_vote"
    with pytest.raises(UnknownNameError, match="Unknown strategy 'majority'"):
        StrategyCandidate("majority", 4)
    STRATEGIES.register("my_vote", "tts.search.sampling.self_consistency:SelfConsistency")
    try:
        assert [c.strategy for c in candidate_ladder(["my_vote"], ladder=(1, 2))] == ["my_vote"] * 2
    finally:
        STRATEGIES.unregister("my_vote")
