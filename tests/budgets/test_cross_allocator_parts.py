"""The cross-strategy allocator's parts on hand-made inputs: the ladder, the efficiency report, a
calibration's options, accuracies and summary, option costs, the plan's choices and why, and live
planning from a pilot (:mod:`tts.budgets.cross_allocator`)."""

from __future__ import annotations

import dataclasses
import json
import logging
import warnings
from pathlib import Path

import numpy as np
import pytest

from tests.budgets.test_cross_strategy import _write_pool
from tts.benchmarks.pool import load_pool
from tts.budgets.allocator import BudgetTooSmallError, CalibrationError
from tts.budgets.cross_allocator import Pricer, calibrate, choose, plan_from_pilot, pilot_feature_rows
from tts.budgets.replay.prefix import random_orders


@pytest.fixture(scope="module")
def big_pool(tmp_path_factory):
    """The three kinds of problems of test_cross_strategy's pool, 66 samples each (more than n_max's 64)."""
    return load_pool(_write_pool(tmp_path_factory.mktemp("pool") / "pool.jsonl", n_problems=30, n_samples=66))["m"]


def _pilot(i: int) -> tuple[list[str], list[int]]:
    return ["1", "1", "2", "1"], [100 + i, 200, 300, 400]


def test_live_planning_uses_its_documented_defaults(big_pool) -> None:
    """plan_from_pilot = calibrate (n up to 64 of the pool's 66, learned difficulty, 5 bins, 8
    orderings from seed 0, switch_z 3) then choose, at the pilot's mean length."""
    ids = ["a", "b"]
    answers, tokens = zip(*(_pilot(i) for i in range(2)))
    plan = plan_from_pilot(ids, answers, tokens, [10, 20], big_pool, ("vote", "best_of_n"), 30000.0, Pricer("tokens"))
    orders = random_orders(big_pool.mask, 8, np.random.default_rng(0))
    cal = calibrate(big_pool, ("vote", "best_of_n"), 4, [4, 8, 16, 32, 64], orders=orders, difficulty="learned",
                    n_bins=5, switch_z=3.0)
    assert plan.calibration.ns == (4, 8, 16, 32, 64)
    assert plan.calibration.to_json() == cal.to_json()
    # Answers "1", "1", "2", "1": a majority share of 3/4, nothing unanswered, log1p of the mean tokens.
    feats = np.array([[0.75, 0.0, np.log1p(250.0)], [0.75, 0.0, np.log1p(250.25)]])
    want = choose(ids, feats, [10, 20], [250.0, 250.25], cal, Pricer("tokens"), 30000.0)
    assert [c.to_json() for c in plan.choices] == [c.to_json() for c in want.choices]
    assert [c.problem_id for c in plan.choices] == ["a", "b"]
    assert [c.predicted_length for c in plan.choices] == [250.0, 250.25]  # (100 + i + 200 + 300 + 400) / 4


def test_live_planning_takes_its_settings(big_pool) -> None:
    answers, tokens = _pilot(0)
    kw = dict(n_max=16, difficulty="pilot", n_bins=2, orderings=3, seed=5, switch_z=0.0)
    plan = plan_from_pilot(["a"], [answers], [tokens], [10], big_pool, ("vote", "best_of_n"), 9000.0,
                           Pricer("tokens"), **kw)
    orders = random_orders(big_pool.mask, 3, np.random.default_rng(5))
    cal = calibrate(big_pool, ("vote", "best_of_n"), 4, [4, 8, 16], orders=orders, difficulty="pilot", n_bins=2,
                    switch_z=0.0)
    assert plan.calibration.to_json() == cal.to_json()
    assert plan.calibration.reference is None and len(plan.calibration.edges) == 1  # no guard; two bins


def test_live_planning_refuses_pilots_it_cannot_read(big_pool) -> None:
    msg = r"^every problem needs the same number \(>= 1\) of pilot samples$"
    with pytest.raises(ValueError, match=msg):
        plan_from_pilot([], [], [], [], big_pool, ("vote",), 100.0, Pricer("tokens"))
    with pytest.raises(ValueError, match=msg):
        plan_from_pilot(["a", "b"], [["1", "2"], ["1"]], [[5, 5], [5]], [1, 1], big_pool, ("vote",), 100.0,
                        Pricer("tokens"))
    with pytest.raises(ValueError, match=msg):
        plan_from_pilot(["a"], [[]], [[]], [1], big_pool, ("vote",), 100.0, Pricer("tokens"))
    # A one-sample pilot is a pilot.
    plan = plan_from_pilot(["a"], [["1"]], [[100]], [0], big_pool, ("vote",), 5000.0, Pricer("tokens"))
    assert plan.calibration.pilot == 1 and plan.calibration.ns[0] == 1


def test_live_planning_needs_more_calibration_samples_than_the_pilot(tmp_path: Path) -> None:
    pool = load_pool(_write_pool(tmp_path / "p.jsonl", n_problems=12, n_samples=16))["m"]
    k15 = ["1"] * 15
    plan = plan_from_pilot(["a"], [k15], [[100] * 15], [0], pool, ("vote",), 5000.0, Pricer("tokens"), n_bins=2)
    assert plan.calibration.ns == (15, 16)  # 16 samples: one more than the pilot is enough
    with pytest.raises(CalibrationError, match=r"has only 16 samples for some problem; it needs more than the "
                                               r"pilot's 16 \(calibrate on a run with more samples"):
        plan_from_pilot(["a"], [["1"] * 16], [[100] * 16], [0], pool, ("vote",), 5000.0, Pricer("tokens"))


def test_live_planning_warns_when_a_problem_is_also_a_calibration_problem(big_pool, caplog) -> None:
    answers, tokens = _pilot(0)
    with caplog.at_level(logging.WARNING, logger="tts.budgets.cross_allocator"):
        plan_from_pilot(["p1", "x", "p2"], [answers] * 3, [tokens] * 3, [0] * 3, big_pool, ("vote",), 30000.0,
                        Pricer("tokens"), n_bins=2)
    assert ("2 of 3 problems are also calibration problems; their plans saw their own grades, so do not report "
            "the result as achievable") in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="tts.budgets.cross_allocator"):
        plan_from_pilot(["x"], [answers], [tokens], [0], big_pool, ("vote",), 30000.0, Pricer("tokens"), n_bins=2)
    assert "calibration problems" not in caplog.text


def test_pilot_feature_rows_are_agreement_unanswered_log_length_and_log_prompt() -> None:
    rows = pilot_feature_rows(np.array([[0, 0, 1, -1], [2, 2, 2, 2]]), np.array([[9, 9, 9, 9], [0, 1, 2, 3]]))
    np.testing.assert_allclose(rows, [[0.5, 0.25, np.log(10)], [1.0, 0.0, np.log1p(1.5)]])
    rows = pilot_feature_rows(np.array([[0, 1]]), np.array([[3, 3]]), prompt_lengths=[99])
    np.testing.assert_allclose(rows, [[0.5, 0.0, np.log(4), np.log(100)]])


def test_an_efficiency_report_must_hold_a_positive_median_ratio(tmp_path: Path) -> None:
    from tts.budgets.cross_allocator import efficiency_from_report

    path = tmp_path / "cal.json"
    for bad in ({"engine": []}, {"engine": {"median_ratio": "fast"}}, {"engine": {}}):
        path.write_text(json.dumps(bad))
        with pytest.raises(ValueError, match=f"^{path} has no engine.median_ratio; write it with `tts cost "
                                             f"calibrate --engine --json > {path}`$"):
            efficiency_from_report(path)
    for bad in (0, -1.5):
        path.write_text(json.dumps({"engine": {"median_ratio": bad}}))
        with pytest.raises(ValueError, match=f"engine.median_ratio is {float(bad)}; it must be a positive factor"):
            efficiency_from_report(str(path))
    path.write_text(json.dumps({"engine": {"median_ratio": "0.5"}}))
    assert efficiency_from_report(path) == 0.5


# --- a hand-made calibration: two rules, n in (2, 4), two bins split at a pilot agreement of 0.5 ---


def _calibration(ns=(2, 4), **kw):
    from tts.budgets.allocator import AccuracyCurve
    from tts.budgets.cross_allocator import Calibration

    acc = {("vote", 0): (0.8, 0.9), ("vote", 1): (0.3, 0.5), ("best_of_n", 0): (0.7, 0.95),
           ("best_of_n", 1): (0.4, 0.45)}
    curves = {key: AccuracyCurve(key[0], tuple(ns), a) for key, a in acc.items()}
    return Calibration(("vote", "best_of_n"), ns[0], tuple(ns), "pilot", np.array([0.5]), curves, **kw)


# Problem a agrees 0.9 (bin 0, the easy one), b 0.25 (bin 1); the last column is never read by "pilot".
FEATS = np.array([[0.9, 0.0, 5.0], [0.25, 0.0, 5.0]])


def test_a_calibration_bins_scores_and_lays_out_its_options_rule_major() -> None:
    cal = _calibration()
    np.testing.assert_array_equal(cal.scores(FEATS), [0.9, 0.25])
    # A score on the edge goes to the easier bin.
    assert cal.bins(np.array([[0.9], [0.5], [0.49]])).tolist() == [0, 0, 1]
    assert cal.options() == [("vote", 2), ("vote", 4), ("best_of_n", 2), ("best_of_n", 4)]
    np.testing.assert_array_equal(cal.accuracy(np.array([0, 1])), [[0.8, 0.9, 0.7, 0.95], [0.3, 0.5, 0.4, 0.45]])


def test_a_calibration_summary_names_every_curve_rounded_to_four_places() -> None:
    from tts.budgets.allocator import AccuracyCurve

    cal = _calibration(reference="vote", switches={("best_of_n", 0): [4]})
    cal.curves[("vote", 0)] = AccuracyCurve("vote", (2, 4), (0.123456, 0.9))
    assert cal.to_json() == {
        "rules": ["vote", "best_of_n"], "pilot": 2, "ns": [2, 4], "difficulty": "pilot", "edges": [0.5],
        "curves": {"best_of_n/bin0": {"2": 0.7, "4": 0.95}, "best_of_n/bin1": {"2": 0.4, "4": 0.45},
                   "vote/bin0": {"2": 0.1235, "4": 0.9}, "vote/bin1": {"2": 0.3, "4": 0.5}},
        "reference": "vote", "switches": {"best_of_n/bin0": [4]}}
    assert list(cal.to_json()["curves"]) == ["best_of_n/bin0", "best_of_n/bin1", "vote/bin0", "vote/bin1"]


def test_with_no_budget_beyond_the_pilot_each_problem_keeps_its_pilot_under_its_best_rule() -> None:
    plan = choose(["a", "b"], FEATS, [10, 10], [100.0, 50.0], _calibration(), Pricer("tokens"), 0.0)
    a, b = plan.choices
    # a: vote at 2 (0.8) beats best_of_n at 2 (0.7); b: best_of_n (0.4) beats vote (0.3). Nothing spent.
    assert a.to_json() == {"problem_id": "a", "rule": "vote", "strategy": "self_consistency", "n": 2, "bin": 0,
                           "difficulty": 0.9, "predicted_length": 100.0, "expected_accuracy": 0.8,
                           "expected_cost": 0.0, "pilot_accuracy": 0.8, "gain_per_cost": 0.0,
                           "alternatives": {"vote": 0.8, "best_of_n": 0.7}, "escalation": None}
    assert (b.rule, b.strategy, b.n, b.bin, b.expected_accuracy, b.pilot_accuracy, b.gain_per_cost, b.alternatives) == (
        "best_of_n", "best_of_n", 2, 1, 0.4, 0.4, 0.0, {"vote": 0.3, "best_of_n": 0.4})
    assert plan.expected_cost == 0.0 and plan.budget == 0.0 and plan.unit == "tokens"


def test_a_budget_buys_the_best_gain_per_token_first(caplog) -> None:
    # Going to n = 4 costs 2 more samples: 200 tokens for a (100 a sample), 100 for b (50), prompts cached.
    # b: vote 0.4 -> 0.5 is 0.001 a token; a: 0.8 -> best_of_n's 0.95 is 0.00075 a token.
    with caplog.at_level(logging.INFO, logger="tts.budgets.cross_allocator"):
        plan = choose(["a", "b"], FEATS, [10, 10], [100.0, 50.0], _calibration(), Pricer("tokens"), 300.0)
    assert "cross plan: 2 problems, 300 of 300 tokens; rules {'vote': 1, 'best_of_n': 1}" in caplog.messages
    a, b = plan.choices
    assert (a.rule, a.n, a.expected_accuracy, a.expected_cost, a.pilot_accuracy) == ("best_of_n", 4, 0.95, 200.0, 0.8)
    assert a.gain_per_cost == pytest.approx(0.15 / 200)
    assert a.alternatives == {"vote": 0.9, "best_of_n": 0.95}  # every rule at the chosen n
    assert (b.rule, b.n, b.expected_accuracy, b.expected_cost, b.pilot_accuracy) == ("vote", 4, 0.5, 100.0, 0.4)
    assert b.gain_per_cost == pytest.approx(0.1 / 100)
    assert plan.expected_cost == 300.0
    plan = choose(["a", "b"], FEATS, [10, 10], [100.0, 50.0], _calibration(), Pricer("tokens"), 250.0)
    assert [(c.rule, c.n) for c in plan.choices] == [("vote", 2), ("vote", 4)]
    # A budget under one token is still a budget: nothing bought, nothing refused.
    plan = choose(["a", "b"], FEATS, [10, 10], [100.0, 50.0], _calibration(), Pricer("tokens"), 0.5)
    assert [(c.rule, c.n) for c in plan.choices] == [("vote", 2), ("best_of_n", 2)]


def test_the_extra_request_pays_the_prompt_tokens_it_will_not_find_cached() -> None:
    # 4 of the 10 prompt tokens cached: the n = 4 request pays 2 samples and the other 6 prompt tokens.
    plan = choose(["a", "b"], FEATS, [10, 10], [100.0, 50.0], _calibration(), Pricer("tokens"), 1000.0, cached=[4, 4])
    assert [c.expected_cost for c in plan.choices] == [206.0, 106.0]


def test_the_gain_per_cost_of_a_purchase_under_one_unit() -> None:
    # In samples, n 2 -> 3 costs exactly one unit: a's best_of_n gains 0.95 - 0.8 for it, b's vote
    # only 0.5 - 0.4, so a budget of 1 buys a's.
    plan = choose(["a", "b"], FEATS, [10, 10], [100.0, 50.0], _calibration(ns=(2, 3)), Pricer("samples"), 1.0)
    a, b = plan.choices
    assert (a.rule, a.n, a.expected_cost) == ("best_of_n", 3, 1.0) and a.gain_per_cost == pytest.approx(0.15)
    assert (b.n, b.gain_per_cost) == (2, 0.0)


def test_a_pilot_that_cost_more_than_the_budget_says_by_how_much() -> None:
    with pytest.raises(BudgetTooSmallError) as err:
        choose(["a"], FEATS[:1], [10], [100.0], _calibration(), Pricer("tokens"), -12.5)
    assert str(err.value) == ("the pilot already cost 12.5 tokens more than the budget; raise the budget by at least "
                              "that much, or lower the pilot")
    assert err.value.minimum == 12.5


def test_a_budget_below_the_cheapest_verifier_scored_plan_names_the_unit() -> None:
    # best_of_n alone, each sample read once more by a verifier: the 2-sample pilot costs 2 x (10 + 100).
    cal = dataclasses.replace(_calibration(), rules=("best_of_n",))
    with pytest.raises(BudgetTooSmallError, match=r"^a budget of 100 tokens cannot pay even the cheapest "
                                                  r"configuration of every problem; raise it to at least 220 tokens"):
        choose(["a"], FEATS[:1], [10], [100.0], cal, Pricer("tokens", verifier=object()), 100.0)


def _escalation(strategy):
    from tts.budgets.escalation import Escalation

    # Guarded accuracy 0.9 in both bins (0.92 and 0.91 before the guard), 50 tokens a problem.
    return Escalation("rebase@4", strategy, np.array([0.9, 0.9]), np.array([0.92, 0.91]), np.array([50.0, 50.0]),
                      np.ones(2), np.array([2, 2]), np.array([True, True]))


@pytest.mark.parametrize("strategy, n, alts", [({"kind": "rebase"}, 0, {"vote": 0.3, "best_of_n": 0.4}),
                                                ({"kind": "rebase", "n": 4}, 4, {"vote": 0.5, "best_of_n": 0.45})])
def test_an_escalated_problem_records_the_search_and_what_each_rule_would_give_at_its_n(strategy, n, alts,
                                                                                       caplog) -> None:
    # b: the search's 0.9 for 50 tokens (0.01 a token) beats every rule; a budget of 50 buys only it.
    with caplog.at_level(logging.INFO, logger="tts.budgets.cross_allocator"):
        plan = choose(["a", "b"], FEATS, [10, 10], [100.0, 50.0], _calibration(), Pricer("tokens"), 50.0,
                      escalations=[_escalation(strategy)])
    assert "cross plan: 2 problems, 50 of 50 tokens; rules {'vote': 1, 'best_of_n': 0, 'rebase@4': 1}" in caplog.messages
    a, b = plan.choices
    assert b.to_json() == {"problem_id": "b", "rule": "rebase@4", "strategy": "rebase", "n": n, "bin": 1,
                           "difficulty": 0.25, "predicted_length": 50.0, "expected_accuracy": 0.9,
                           "expected_cost": 50.0, "pilot_accuracy": 0.4, "gain_per_cost": pytest.approx(0.01),
                           "alternatives": {**alts, "rebase@4": 0.91}, "escalation": "rebase@4"}
    # a keeps its pilot; its alternatives show the search before the guard.
    assert (a.rule, a.n, a.escalation, a.alternatives) == ("vote", 2, None, {"vote": 0.8, "best_of_n": 0.7,
                                                                           "rebase@4": 0.92})


def test_a_plan_file_holds_the_budget_the_costs_and_the_calibration() -> None:
    cal = _calibration()
    plan = choose(["a", "b"], FEATS, [10, 10], [100.0, 50.0], cal, Pricer("tokens"), 300.0)
    assert plan.to_json() == {"unit": "tokens", "budget": 300.0, "expected_cost": 300.0,
                              "calibration": cal.to_json(), "problems": [c.to_json() for c in plan.choices]}
    assert [p["n"] for p in plan.to_json()["problems"]] == [4, 4]


def _tiny_pool():
    from tts.benchmarks.pool import ModelPool

    # Four problems, four samples; answer 0 is right. The first two samples agree on p0 and p2 only;
    # all four agree most on p2, then p1.
    answers = np.array([[0, 0, 1, 2], [0, 1, 0, 0], [0, 0, 0, 0], [0, 1, 2, 3]], dtype=np.int32)
    return ModelPool(model="m", problem_ids=("p0", "p1", "p2", "p3"), answers=answers,
                     answer_texts=tuple(("0", "1", "2", "3") for _ in range(4)), correct=answers == 0,
                     tokens=np.array([[10.0] * 4, [20.0] * 4, [30.0] * 4, [100.0] * 4]),
                     scores=np.full((4, 4), np.nan), sample_idx=np.tile(np.arange(4), (4, 1)),
                     mask=np.ones((4, 4), bool))


def test_a_pilot_calibration_bins_by_the_first_k_samples_agreement() -> None:
    pool = _tiny_pool()
    orders = np.tile(np.arange(4), (1, 4, 1))  # one ordering: the samples as drawn
    cal = calibrate(pool, ("vote",), 2, [2, 4], orders=orders, difficulty="pilot", n_bins=2)
    # Two-sample agreement 1, 0.5, 1, 0.5: the edge is their median, 0.75 (all four samples would give 0.625).
    np.testing.assert_array_equal(cal.edges, [0.75])
    assert cal.estimator is None and cal.difficulty == "pilot"
    assert cal.reference is None and cal.switches == {}  # one rule: nothing for the noise guard to compare
    np.testing.assert_array_equal(cal.scores(np.array([[0.5, 0.0], [1.0, 0.0]])), [0.5, 1.0])
    assert cal.mean_tokens == 40.0  # (10 + 20 + 30 + 100) / 4
    # Calibrated on p0 and p1 only: their tokens alone.
    assert calibrate(pool, ("vote",), 2, [2, 4], orders=orders, problems=np.array([0, 1]), difficulty="pilot",
                     n_bins=2).mean_tokens == 15.0
    with pytest.raises(CalibrationError, match="^the calibration source has no problems$"):
        calibrate(pool, ("vote",), 2, [2, 4], orders=orders, problems=np.array([], dtype=int), difficulty="pilot")


def test_a_calibration_has_five_bins_unless_told_otherwise(big_pool) -> None:
    orders = random_orders(big_pool.mask, 2, np.random.default_rng(0))
    default = calibrate(big_pool, ("vote",), 4, [4, 8], orders=orders)
    assert default.to_json() == calibrate(big_pool, ("vote",), 4, [4, 8], orders=orders, n_bins=5,
                                          difficulty="learned").to_json()
    assert default.difficulty == "learned" and default.estimator.l2 == 1.0


def test_the_noise_guards_z_is_the_one_given(big_pool) -> None:
    orders = random_orders(big_pool.mask, 4, np.random.default_rng(0))

    def allowed(z):
        cal = calibrate(big_pool, ("vote", "best_of_n"), 4, [4, 8, 16], orders=orders, n_bins=3, switch_z=z)
        return {key: set(ns) for key, ns in cal.switches.items()}

    strict, default = allowed(20.0), allowed(3.0)
    # A higher bar lets fewer of best_of_n's ns through, somewhere strictly fewer.
    assert all(strict[key] <= default[key] for key in default) and strict != default


def test_the_mean_sample_length_leaves_out_masked_samples() -> None:
    import dataclasses

    pool = _tiny_pool()
    mask = pool.mask.copy()
    mask[3, 3] = False  # p3's last sample is padding: its tokens (set to 1000) must not count
    tokens = pool.tokens.copy()
    tokens[3, 3] = 1000.0
    pool = dataclasses.replace(pool, mask=mask, tokens=tokens)
    cal = calibrate(pool, ("vote",), 2, [2, 3], orders=np.tile(np.arange(4), (1, 4, 1)), difficulty="pilot", n_bins=2)
    assert cal.mean_tokens == pytest.approx((40 + 80 + 120 + 300) / 15)


def test_a_predicted_length_under_half_a_token_is_priced_as_one_token() -> None:
    from tts.budgets.cross_allocator import option_costs

    costs = option_costs(Pricer("tokens"), [("vote", 2), ("vote", 4)], [10, 10], [0.3, 2.6], 2)
    np.testing.assert_array_equal(costs, [[0.0, 2.0], [0.0, 6.0]])  # 2 samples of 1 token; of 3 tokens


def test_a_pilot_without_token_counts_is_planned_at_the_calibrations_mean_length(tmp_path: Path) -> None:
    pool = load_pool(_write_pool(tmp_path / "p.jsonl", n_problems=12, n_samples=16))["m"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # planned quietly: no numpy "Mean of empty slice" for the empty token list
        plan = plan_from_pilot(["a"], [["1", "1"]], [[]], [0], pool, ("vote",), 5000.0, Pricer("tokens"), n_bins=2)
    assert plan.choices[0].predicted_length == pytest.approx(plan.calibration.mean_tokens)
    assert plan.calibration.mean_tokens == pytest.approx(float(np.nanmean(pool.tokens)))


def test_a_pool_missing_some_token_counts_has_no_mean_sample_length() -> None:
    import dataclasses

    pool = _tiny_pool()
    tokens = pool.tokens.copy()
    tokens[0, 0] = np.nan  # one sample without a count: the mean is unknown, not the mean of the rest
    pool = dataclasses.replace(pool, tokens=tokens)
    assert not pool.has_tokens
    cal = calibrate(pool, ("vote",), 2, [2, 4], orders=np.tile(np.arange(4), (1, 4, 1)), difficulty="pilot", n_bins=2)
    assert np.isnan(cal.mean_tokens)  # auto then prices its minimum at max_tokens
