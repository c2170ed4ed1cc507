"""The parts of an offline plan (tts.budgets.offline_plan) on hand-made pools, each value worked
out by hand: the manifest summary, the nearest fitted bin, the pilot and input checks and their
messages, the ladder, the expected tokens of a further sample and the cheapest step up (each pinned
by a mutation run: docs/mutation.md).

The calibration pools here are chosen so that no random ordering changes what is read from them: a
problem's samples either all agree or all differ, and every answer of a problem is graded alike, so
the pilot agreement, the bins and the vote at every n are the same whatever the order."""

from __future__ import annotations

import logging
import re
import warnings
from collections import Counter

import numpy as np
import pytest

from tts.benchmarks.pool import ModelPool
from tts.budgets.allocator import AccuracyCurve, BudgetTooSmallError, CalibrationError, Plan
from tts.budgets.difficulty import DifficultyEstimate
from tts.budgets.offline_plan import OfflinePlan, _nearest, plan_from_pilot
from tts.budgets.replay.prefix import random_orders

NAN = np.nan


def _exactly(message: str) -> str:
    """A pattern that matches ``message`` and nothing longer."""
    return f"^{re.escape(message)}$"
SC = "self_consistency"


def _pool(answers, correct, tokens, real=None, model="cal-m") -> ModelPool:
    answers = np.array(answers, dtype=np.int32)
    shape = answers.shape
    mask = np.ones(shape, bool) if real is None else np.array(real, bool)
    return ModelPool(model=model, problem_ids=tuple(f"c{i}" for i in range(shape[0])), answers=answers,
                     answer_texts=tuple(tuple(str(a) for a in range(answers.max(initial=-1) + 1)) for _ in answers),
                     correct=np.array(correct, bool) & mask, tokens=np.where(mask, np.array(tokens, float), NAN),
                     scores=np.full(shape, NAN), sample_idx=np.where(mask, np.arange(shape[1]), -1), mask=mask)


# Four calibration problems of four samples, pilot k = 2. c0 and c1 are unanimous (agreement 1),
# c2 and c3 give four different answers (agreement 1/2); c0 and c3 are right whatever is voted
# (c3: every answer is graded right), c1 and c2 never. Mean sample lengths 10, 30, 50, 70.
# With any n_bins >= 2 the quantiles of the scores (half 0.5, half 1.0) give the edges (0.5, 1.0):
# agreement 1 -> bin 0 (c0, c1: accuracy 1/2 at every n), 1/2 -> bin 1 (c2, c3: 1/2 too), and a
# pilot without any answer (agreement 0) -> bin 2, which no calibration problem is in.
FLAT = _pool(answers=[[0, 0, 0, 0], [0, 0, 0, 0], [0, 1, 2, 3], [0, 1, 2, 3]],
             correct=[[1, 1, 1, 1], [0, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]],
             tokens=[[10] * 4, [30] * 4, [40, 60, 40, 60], [70] * 4])


def test_to_json_reports_each_problem_its_bin_agreement_tokens_and_the_curves_and_totals():
    plan = OfflinePlan(
        plans=[Plan("x", SC, 4, 256, 30.0, 0.75), Plan("y", SC, 8, 256, 12.5, 0.9)],
        difficulty=[DifficultyEstimate("x", 0.5, 1, "pilot"), DifficultyEstimate("y", 1.0, 0, "pilot")],
        edges=(0.5, 1.0),
        curves={0: AccuracyCurve(SC, (2, 4, 8), (0.8, 0.85, 0.9)), 1: AccuracyCurve(SC, (2, 4, 8), (0.5, 0.75, 0.8))},
        sample_tokens=(15.0, 2.0), pilot=2, budget=50.0, calibration_model="cal-m", calibration_problems=6,
        ns=(2, 4, 8))
    assert plan.total_cost == 42.5
    assert plan.to_json() == {
        "pilot": 2, "budget": 50.0, "expected_cost": 42.5,
        "calibration": {"model": "cal-m", "problems": 6},
        "edges": [0.5, 1.0], "ns": [2, 4, 8],
        "curves": {"0": {"2": 0.8, "4": 0.85, "8": 0.9}, "1": {"2": 0.5, "4": 0.75, "8": 0.8}},
        "problems": [
            {"problem_id": "x", "n": 4, "bin": 1, "agreement": 0.5, "sample_tokens": 15.0, "expected_cost": 30.0,
             "expected_accuracy": 0.75},
            {"problem_id": "y", "n": 8, "bin": 0, "agreement": 1.0, "sample_tokens": 2.0, "expected_cost": 12.5,
             "expected_accuracy": 0.9},
        ],
    }


def test_a_bin_without_a_curve_reads_the_nearest_fitted_bin_the_harder_one_on_ties(caplog):
    curves = {b: AccuracyCurve(SC, (1,), (b / 10,)) for b in (0, 2, 5)}
    with caplog.at_level(logging.INFO, logger="tts.budgets.offline_plan"):
        assert _nearest(curves, 2) is curves[2]
        assert not caplog.records  # a fitted bin is read as it is, without a word
        assert _nearest(curves, 1) is curves[2]  # 0 and 2 are both 1 away: the harder one
        assert _nearest(curves, 3) is curves[2]  # 1 away from 2, 2 away from 5
        assert _nearest(curves, 4) is curves[5]
        assert _nearest(curves, 9) is curves[5]
        assert _nearest(curves, -1) is curves[0]
    assert caplog.messages[0] == "difficulty bin 1 has no calibration problems; using bin 2's curve"
    assert caplog.messages[-1] == "difficulty bin -1 has no calibration problems; using bin 0's curve"


def test_every_field_of_a_plan_on_a_calibration_pool_no_ordering_changes(caplog):
    # Live pilots (k = 2): x unanimous (bin 0), y two answers (bin 1), z none (agreement 0: bin 2,
    # read with bin 1's curve, the nearest). All curves are flat at 1/2, so no step up gains and
    # every problem keeps its pilot: n = 2, no further cost. Integer ids are read as strings.
    with caplog.at_level(logging.INFO, logger="tts.budgets.offline_plan"), \
            caplog.at_level(logging.DEBUG, logger="tts.budgets.allocator"):
        res = plan_from_pilot([7, "y", "z"], [["a", "a"], ["a", "b"], [None, None]], [[3, 5], [None, 8], [0, 0]],
                              FLAT, 1_000.0, ladder=(2, 4, 64), max_tokens=321)
    assert res.pilot == 2 and res.ns == (2, 4) and res.budget == 1_000.0 and isinstance(res.budget, float)
    assert res.calibration_model == "cal-m" and res.calibration_problems == 4
    assert res.edges == (0.5, 1.0) and all(type(e) is float for e in res.edges)
    assert set(res.curves) == {0, 1}
    assert [(c.strategy, c.ns, c.accuracy) for c in res.curves.values()] == [(SC, (2, 4), (0.5, 0.5))] * 2
    assert res.difficulty == [DifficultyEstimate("7", 1.0, 0, "pilot"), DifficultyEstimate("y", 0.5, 1, "pilot"),
                              DifficultyEstimate("z", 0.0, 2, "pilot")]
    assert all(type(d.score) is float and type(d.bin) is int for d in res.difficulty)
    # Tokens per further sample: x its pilot's mean, y the mean of its known count, z's 0 raised to 1.
    assert res.sample_tokens == (4.0, 8.0, 1.0) and all(type(t) is float for t in res.sample_tokens)
    assert res.plans == [Plan("7", SC, 2, 321, 0.0, 0.5), Plan("y", SC, 2, 321, 0.0, 0.5),
                         Plan("z", SC, 2, 321, 0.0, 0.5)]
    assert res.total_cost == 0.0
    assert "ladder values [64] exceed the calibration pool's 4 samples and are dropped" in caplog.messages
    assert "difficulty bin 2 has no calibration problems; using bin 1's curve" in caplog.messages
    assert caplog.messages[-1] == "offline plan: 3 problems, pilot 2, 0 of 1000 tokens, mean n 2.00"
    assert caplog.messages[-2] == "allocated 0 of 1000 tokens over 3 problems"  # the allocator's, in tokens
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_problem_without_pilot_tokens_costs_its_bins_calibration_mean_else_the_whole_pools():
    # Calibration means per problem: 10, 30, 50, 70, so bin 0 (c0, c1) 20, bin 1 (c2, c3) 60, and
    # the pool 40 for bin 2, which no calibration problem is in.
    res = plan_from_pilot(["x", "y", "z", "w"], [["a", "a"], ["a", "b"], [None, None], ["a", "b"]],
                          [[None, None], [None, None], [None, None], [1, 2]], FLAT, 1_000.0, ladder=(4,))
    assert res.sample_tokens == (20.0, 60.0, 40.0, 1.5)
    same = plan_from_pilot(["x", "y", "z", "w"], [["a", "a"], ["a", "b"], [None, None], ["a", "b"]],
                           None, FLAT, 1_000.0, ladder=(4,))
    assert same.sample_tokens == (20.0, 60.0, 40.0, 60.0)  # no tokens at all: every problem its bin's mean
    with warnings.catch_warnings():  # a pilot without token counts is no numpy warning ("mean of empty slice")
        warnings.simplefilter("error")
        plan_from_pilot(["x"], [["a", "a"]], [[None, None]], FLAT, 1_000.0, ladder=(4,))
    untimed = _pool(answers=[[0, 0, 0, 0]], correct=[[1] * 4], tokens=[[NAN] * 4])
    with pytest.raises(CalibrationError, match=_exactly(
            "some problems have no pilot token counts and the calibration pool has none either; pass pilot_tokens "
            "or a calibration pool with num_tokens")):
        plan_from_pilot(["x", "y"], [["a", "a"], ["a", "b"]], [[4, 4], [None, None]], untimed, 1_000.0, ladder=(4,))
    assert plan_from_pilot(["x"], [["a", "a"]], [[4, 4]], untimed, 1_000.0, ladder=(4,)).sample_tokens == (4.0,)


def test_the_pilot_size_is_every_problems_answer_count_and_must_be_at_least_one():
    with pytest.raises(ValueError, match=_exactly(
            "every problem needs the same number of pilot samples, got sizes [1, 2]; draw k pilot samples "
            "for each problem")):
        plan_from_pilot(["x", "y", "z"], [["a", "a"], ["a"], ["b", "b"]], None, FLAT, 1e3)
    with pytest.raises(ValueError, match=_exactly(
            "pilot=3 but each problem has 2 pilot answers; pass pilot=2 or draw 3 pilot samples")):
        plan_from_pilot(["x"], [["a", "a"]], None, FLAT, 1e3, pilot=3)
    with pytest.raises(ValueError, match=_exactly(
            "offline allocation needs at least one pilot sample per problem; set pilot >= 1")):
        plan_from_pilot(["x"], [[]], None, FLAT, 1e3)
    # pilot given and equal to the answers per problem; one pilot sample is enough.
    assert plan_from_pilot(["x"], [["a", "a"]], None, FLAT, 1e3, pilot=2).pilot == 2
    assert plan_from_pilot(["x"], [["a"]], None, FLAT, 1e3, ladder=(4,)).ns == (1, 4)


def test_live_inputs_that_cannot_be_planned_are_refused_saying_what_to_give():
    with pytest.raises(ValueError, match=_exactly("give at least one problem to allocate over")):
        plan_from_pilot([], [], None, FLAT, 1e3)
    with pytest.raises(ValueError, match=_exactly("problem ids must be unique; each problem gets one plan")):
        plan_from_pilot(["x", "x"], [["a", "a"], ["a", "a"]], None, FLAT, 1e3)
    with pytest.raises(ValueError, match=_exactly("2 problems but 3 pilot answer lists; give one list per problem")):
        plan_from_pilot(["x", "y"], [["a", "a"]] * 3, None, FLAT, 1e3)
    with pytest.raises(ValueError, match=_exactly(
            "2 problems but 2 pilot answer lists and 1 token lists; give one list per problem")):
        plan_from_pilot(["x", "y"], [["a", "a"]] * 2, [[1, 1]], FLAT, 1e3)
    with pytest.raises(ValueError, match=_exactly("orderings must be >= 1, got 0")):
        plan_from_pilot(["x"], [["a", "a"]], None, FLAT, 1e3, orderings=0)
    assert plan_from_pilot(["x"], [["a", "a"]], None, FLAT, 1e3, orderings=1).curves[0].accuracy == (0.5, 0.5)


def test_the_ladder_runs_from_the_pilot_to_the_calibration_samples_and_keeps_problems_with_k_of_them():
    # c0 has 4 samples, c1 exactly 2 (k), c2 only 1: c0 and c1 are kept. The pool is 4 wide.
    cal = _pool(answers=[[0, 0, 0, 0], [0, 1, -1, -1], [0, -1, -1, -1]], correct=[[1] * 4, [0] * 4, [1] * 4],
                tokens=[[5] * 4, [7] * 4, [9] * 4], real=[[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]])
    res = plan_from_pilot(["x"], [["a", "a"]], None, cal, 1e3, ladder=(1, 2, 3, 4, 8))
    assert res.calibration_problems == 2 and res.ns == (2, 3, 4)
    # x (unanimous) is in c0's bin: its samples cost c0's 5 tokens (the padding slots count for nothing).
    assert res.sample_tokens == (5.0,)
    # With k = 3 only c0 has enough samples; one calibration problem is enough to plan with.
    one = plan_from_pilot(["x"], [["a", "a", "a"]], None, cal, 1e3, ladder=(4,))
    assert one.calibration_problems == 1 and one.ns == (3, 4) and one.curves[0].accuracy == (1.0, 1.0)
    assert plan_from_pilot(["x"], [["a", "a"]], None, cal, 1e3, ladder=(4,)).ns == (2, 4)
    with pytest.raises(CalibrationError, match=_exactly(
            "no ladder value lies between the pilot (2) and the calibration pool's 4 samples per problem; lower "
            "the pilot or use a larger ladder and calibration run")):
        plan_from_pilot(["x"], [["a", "a"]], None, cal, 1e3, ladder=(1, 2, 8))
    with pytest.raises(CalibrationError, match=_exactly(
            "no calibration problem has 5 samples; use a calibration run with at least 5 samples per problem "
            "or lower the pilot")):
        plan_from_pilot(["x"], [["a"] * 5], None, cal, 1e3)


def test_a_budget_below_the_cheapest_step_up_names_it_and_one_equal_to_it_is_enough():
    # The cheapest step: n = 2 -> 4 on x, whose samples cost 4 tokens: 2 * 4 = 8 tokens.
    args = (["x", "y"], [["a", "a"], ["a", "b"]], [[3, 5], [10, 10]], FLAT)
    with pytest.raises(BudgetTooSmallError, match=_exactly(
            "a budget of 7.5 tokens after the pilot cannot buy any step up from it (the cheapest, n=2 -> 4, costs "
            "8 tokens); raise the budget to at least 8 tokens or add a ladder value just above the pilot")) as err:
        plan_from_pilot(*args, 7.5, ladder=(4, 8))
    assert err.value.minimum == 8.0
    with pytest.raises(BudgetTooSmallError, match=_exactly(
            "a budget of 0.5 tokens after the pilot cannot buy any step up from it (the cheapest, n=2 -> 4, costs "
            "8 tokens); raise the budget to at least 8 tokens or add a ladder value just above the pilot")):
        plan_from_pilot(*args, 0.5, ladder=(4, 8))
    assert plan_from_pilot(*args, 8.0, ladder=(4, 8)).budget == 8.0
    with pytest.raises(ValueError, match=_exactly(
            "the budget must be a positive number, got -1.0; pass at least 8 tokens (the cheapest configuration of "
            "every problem)")):
        plan_from_pilot(*args, -1.0, ladder=(4, 8))


def test_live_problems_also_in_the_calibration_pool_are_named_in_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="tts.budgets.offline_plan"):
        plan_from_pilot(["c1", "c3", "new"], [["a", "a"]] * 3, None, FLAT, 1e3)
    assert caplog.messages == ["2 of 3 problems are also in the calibration pool; their plans use their own grades, "
                               "so do not report the result as achievable"]


def _vote(answers: list[int], ok: dict[int, bool]) -> bool:
    """Whether the plurality answer of ``answers`` (-1 = none; ties: the answer seen first) is right."""
    counts = Counter(a for a in answers if a >= 0)
    if not counts:
        return False
    top = max(counts.values())
    return ok[next(a for a in answers if counts.get(a) == top)]


def test_by_default_eight_seeded_orderings_make_five_quantile_bins_and_the_curves_of_their_votes():
    # Ten calibration problems of 8 samples with mixed answers, so that the orderings matter; the
    # expected edges and curves are recomputed here from the definition: the first k = 4 samples of
    # each problem in 8 orderings drawn with seed 0, the 20/40/60/80% quantiles of their agreement,
    # and per bin the share of (ordering, problem) whose first n samples vote right.
    rng = np.random.default_rng(36)  # a pool whose edges differ with 4, 5 or 6 bins
    answers = [[int(a) for a in rng.choice(width, 8)] for width in (1, 2, 2, 3, 3, 4, 4, 5, 6, 8)]
    cal = _pool(answers=answers, correct=[[a == 0 for a in row] for row in answers],
                tokens=[[20 + p] * 8 for p in range(10)])
    orders = random_orders(cal.mask, 8, np.random.default_rng(0))
    scores, right = [], []
    for o in orders:
        for p in range(10):
            seq = [answers[p][j] for j in o[p]]
            scores.append(max(Counter(seq[:4]).values()) / 4)
            right.append([_vote(seq[:n], {a: a == 0 for a in seq}) for n in (4, 8)])
    edges = np.unique(np.quantile(scores, [0.2, 0.4, 0.6, 0.8]))
    bins = len(edges) - np.searchsorted(edges, scores, side="right")
    right = np.array(right, float)
    res = plan_from_pilot(["x", "y"], [["a", "b", "c", "a"], ["a", "a", "a", "a"]], [[10, 10, 10, 10], [5, 5, 5, 5]],
                          cal, 40.0)
    assert res.ns == (4, 8) and res.edges == pytest.approx(tuple(edges), abs=0, rel=1e-12)
    assert len(res.edges) >= 3  # enough distinct agreements for the number of bins to matter
    assert sorted(res.curves) == np.unique(bins).tolist()
    for b, curve in res.curves.items():
        assert curve.accuracy == pytest.approx(tuple(right[bins == b].mean(axis=0)))
    # x (agreement 1/2) is in the hardest bin, whose vote gains from 4 to 8 samples; y (unanimous)
    # in the easiest, where it does not. The budget pays x's 4 more samples of 10 tokens exactly.
    assert [d.bin for d in res.difficulty] == [len(edges) - 1, 0]
    assert res.curves[len(edges) - 1].accuracy[1] > res.curves[len(edges) - 1].accuracy[0]
    assert res.curves[0].accuracy[1] == res.curves[0].accuracy[0]
    assert [p.n for p in res.plans] == [8, 4] and res.total_cost == 40.0
    for plan, d, toks in zip(res.plans, res.difficulty, (10.0, 5.0)):
        assert plan.expected_cost == (plan.n - 4) * toks
        assert plan.expected_accuracy == pytest.approx(res.curves[d.bin].at(plan.n))
    assert [d.score for d in res.difficulty] == [0.5, 1.0]
