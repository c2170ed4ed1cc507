"""`compare_at_matched`: where an allocator's curve first reaches the uniform baseline, and the
bootstrap intervals over orderings, on two or three hand-made orderings worked out by hand.

With two orderings a resample is one of three outcomes (ordering 0 twice, ordering 1 twice, or
both), so with a few hundred resamples each interval's 2.5 and 97.5 percentiles are the smallest
and largest value among the outcomes that occur."""

from __future__ import annotations

import numpy as np
import pytest

from tts.budgets.replay.matched import Interval, ModeResult, compare_at_matched, flat, interval

GRID = np.array([1.0, 2.0, 4.0])
NAN = np.nan


def _compare(acc, tok, uniform_acc, uniform_tok, at_uniform, *, seed=0, bootstrap=400, tolerance=0.0) -> ModeResult:
    return compare_at_matched("online", GRID, np.array(acc, float), np.array(tok, float), np.array(uniform_acc, float),
                              np.array(uniform_tok, float), np.array(at_uniform, float), seed=seed,
                              bootstrap=bootstrap, tolerance=tolerance)


def test_the_first_budget_that_reaches_uniform_gives_the_tokens_ratio_and_their_intervals():
    # Ordering 1 cannot afford the middle budget (NaN): accuracy 0 there, its cost left out of the curve.
    r = _compare(acc=[[0.5, 0.75, 1.0], [0.75, NAN, 0.75]], tok=[[100, 200, 400], [120, NAN, 360]],
                 uniform_acc=[0.75, 0.5], uniform_tok=[300, 200], at_uniform=[[0.875, 290], [0.5, 210]])
    # Both orderings: accuracy 0.625, 0.375, 0.875 against uniform's 0.625, reached at the first
    # budget for (100 + 120) / 2 = 110 tokens; uniform spent 250.  Ordering 0 alone reaches 0.75 at
    # the second budget (200 tokens, ratio 300 / 200); ordering 1 alone 0.5 at the first (120, 200 / 120).
    assert r.mode == "online" and r.reached == 1.0
    assert r.tokens_to_match == Interval(110.0, 110.0, 200.0)
    assert (r.token_ratio.mean, r.token_ratio.lo, r.token_ratio.hi) == pytest.approx((250 / 110, 1.5, 250 / 110))
    assert r.curve_tokens == [110.0, 200.0, 380.0] and r.curve_acc == [0.625, 0.375, 0.875]
    # Accuracy and tokens at uniform's budget, and the paired accuracy change: means and the
    # 2.5 / 97.5 percentiles of the two orderings' values.
    assert r.acc_at_uniform_tokens == Interval(0.6875, 0.509375, 0.865625)
    assert r.tokens_at_uniform_budget == Interval(250.0, 212.0, 288.0)
    assert r.acc_change == Interval(0.0625, 0.003125, 0.121875)


def test_reached_is_the_share_of_resamples_that_reach_uniform_drawn_from_seed_plus_one():
    # Ordering 0 alone never reaches its uniform's 0.75; ordering 1 alone and both together do.
    acc, tok = [[0.5, 0.625, 0.625], [0.75, NAN, 0.75]], [[100, 200, 400], [120, NAN, 360]]
    r = _compare(acc=acc, tok=tok, uniform_acc=[0.75, 0.5], uniform_tok=[300, 200],
                 at_uniform=[[0.5, 290], [0.5, 210]], seed=7, bootstrap=200)
    boot = np.random.default_rng(8).integers(0, 2, size=(200, 2))
    boot[0] = [0, 1]  # resample 0: the observed orderings
    assert r.reached == pytest.approx(1 - np.mean((boot == 0).all(axis=1)))
    assert 0.6 < r.reached < 0.9
    # Over the resamples that reached: both (110 tokens, 250 / 110) and ordering 1 alone (120, 200 / 120).
    assert r.tokens_to_match == Interval(110.0, 110.0, 120.0)
    assert (r.token_ratio.mean, r.token_ratio.lo, r.token_ratio.hi) == pytest.approx((250 / 110, 200 / 120, 250 / 110))
    other = _compare(acc=acc, tok=tok, uniform_acc=[0.75, 0.5], uniform_tok=[300, 200],
                     at_uniform=[[0.5, 290], [0.5, 210]], seed=8, bootstrap=200)
    assert other.reached != r.reached   # another seed, other resamples


def test_accuracy_within_the_tolerance_of_uniform_counts_as_matching_even_at_the_boundary():
    kwargs = dict(acc=[[0.5, 0.75, 1.0], [0.75, 0.5, 0.75]], tok=[[100, 200, 400], [120, 240, 360]],
                  uniform_acc=[0.75, 0.75], uniform_tok=[300, 300], at_uniform=[[0.75, 300], [0.75, 300]], bootstrap=1)
    # Mean accuracy 0.625, 0.625, 0.875 against 0.75: reached at the third budget without tolerance,
    assert _compare(**kwargs).tokens_to_match == Interval(380.0, 380.0, 380.0)
    # and at the first with a tolerance of exactly the gap (0.125).
    r = _compare(**kwargs, tolerance=0.125)
    assert r.tokens_to_match == Interval(110.0, 110.0, 110.0)
    assert r.token_ratio == Interval(300 / 110, 300 / 110, 300 / 110)
    assert _compare(**kwargs, tolerance=0.0625).tokens_to_match.mean == 380.0


def test_an_allocator_that_never_reaches_uniform_on_the_observed_orderings_has_no_tokens_to_match():
    # Both orderings: accuracy 0.75 against uniform's 0.875: never. Ordering 1 alone (1.0 against 0.75) does.
    r = _compare(acc=[[0.5, 0.5, 0.5], [1.0, 1.0, 1.0]], tok=[[10, 20, 40], [10, 20, 40]],
                 uniform_acc=[1.0, 0.75], uniform_tok=[40, 40], at_uniform=[[0.5, 40], [1.0, 40]], seed=1)
    assert r.tokens_to_match is None and r.token_ratio is None
    assert 0.1 < r.reached < 0.4   # the resamples of ordering 1 alone: about a quarter
    assert r.curve_acc == [0.75, 0.75, 0.75] and r.acc_change.mean == pytest.approx(-0.125)


def test_reaching_uniform_only_where_an_ordering_cannot_afford_the_budget_has_no_finite_cost():
    # At the second budget ordering 1 has no cost (NaN: unaffordable, accuracy 0) but ordering 0's
    # accuracy 1.0 lifts the mean to uniform's 0.5: reached, at no finite cost, so no tokens to match.
    r = _compare(acc=[[0.0, 1.0, 1.0], [0.0, NAN, NAN]], tok=[[10, 20, 40], [10, NAN, NAN]],
                 uniform_acc=[0.5, 0.5], uniform_tok=[40, 40], at_uniform=[[1.0, 40], [0.0, 40]], bootstrap=1)
    assert r.reached == 1.0 and r.tokens_to_match is None and r.token_ratio is None
    assert r.curve_tokens == [10.0, 20.0, 40.0] and r.curve_acc == [0.0, 0.5, 0.5]


def test_interval_is_the_mean_and_the_2_5_and_97_5_percentiles_and_flat_writes_it_for_json():
    assert interval(np.array([1, 2, 3, 4])) == Interval(2.5, 1.075, 3.925)
    assert flat("token_ratio", Interval(1.5, 1.25, 2.0)) == {"token_ratio": 1.5, "token_ratio_ci": [1.25, 2.0]}
    assert flat("token_ratio", None) == {"token_ratio": None, "token_ratio_ci": None}


def test_when_every_ordering_reaches_at_the_first_budget_the_intervals_are_percentiles_of_its_mean_cost():
    # Eight orderings, each already at uniform's accuracy at the first budget: every resample
    # needs the mean first-budget cost of its orderings, and the ratio is uniform's mean cost over it.
    first_cost = np.array([100.0, 130, 90, 250, 170, 110, 300, 140])
    uniform_cost = np.array([400.0, 420, 380, 900, 500, 410, 1000, 450])
    acc = np.ones((8, 3))
    tok = np.stack([first_cost, 2 * first_cost, 4 * first_cost], axis=1)
    r = compare_at_matched("offline", GRID, acc, tok, np.full(8, 0.75), uniform_cost,
                           np.column_stack([np.ones(8), uniform_cost]), seed=3, bootstrap=500, tolerance=0.0)
    boot = np.random.default_rng(4).integers(0, 8, size=(500, 8))
    boot[0] = np.arange(8)
    need, ratio = first_cost[boot].mean(axis=1), uniform_cost[boot].mean(axis=1) / first_cost[boot].mean(axis=1)
    assert r.reached == 1.0
    t, q = r.tokens_to_match, r.token_ratio
    assert (t.mean, t.lo, t.hi) == pytest.approx((161.25, *np.percentile(need, [2.5, 97.5])))
    assert (q.mean, q.lo, q.hi) == pytest.approx((4460 / 1290, *np.percentile(ratio, [2.5, 97.5])))
    assert r.tokens_to_match.lo < 161.25 < r.tokens_to_match.hi
