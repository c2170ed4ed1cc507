"""Selection-rule curves on hand-sized pools: what each rule picks, the curves' columns, the noise guard's
exact switches and caps, the nearest fitted bin, and the messages that say what to change."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tts.benchmarks.pool import load_pool
from tts.budgets.allocator import AccuracyCurve, CalibrationError
from tts.budgets.strategy_curves import (
    UnknownRuleError,
    check_pool_supports,
    curve_for,
    fit_rule_curves,
    guard_rule_switches,
    parse_rules,
    rule_outcomes,
)


def _pool(tmp_path: Path, samples: dict[str, list[tuple]]):
    """One model's pool: problem -> [(answer, correct, num_tokens, score), ...]."""
    rows = [{"problem_id": p, "model": "m", "sample_idx": s, "answer": a, "correct": ok, "num_tokens": tok,
             "score": sc} for p, group in samples.items() for s, (a, ok, tok, sc) in enumerate(group)]
    path = tmp_path / "pool.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return load_pool(path)["m"]


def _all_in_order(pool, orderings: int = 1) -> np.ndarray:
    """(R, P, S) orders that take every problem's samples as listed."""
    return np.tile(np.arange(pool.n_samples), (orderings, pool.n_problems, 1))


def test_no_rule_at_all_names_the_valid_ones() -> None:
    with pytest.raises(UnknownRuleError) as err:
        parse_rules(" , ")
    assert str(err.value) == "give at least one selection rule; valid: vote, best_of_n, weighted_vote, shortest"


def test_a_missing_score_of_any_answer_is_refused_with_what_to_do(tmp_path: Path) -> None:
    # Problem b's only answer has id 0 (ids count per problem): its missing score must be noticed.
    pool = _pool(tmp_path, {"a": [("1", True, 10, 0.5), ("2", False, 10, 0.4)],
                            "b": [("3", True, 10, None), ("4", False, 10, 0.2)]})
    with pytest.raises(CalibrationError) as err:
        check_pool_supports(pool, ("vote", "best_of_n"))
    assert str(err.value) == (
        "the calibration source (model m) has no score for some samples, which strategy 'best_of_n' needs; drop "
        "best_of_n from the strategies, or calibrate on a run that recorded scores (a tts eval/sweep run of "
        "best_of_n or weighted_vote records each sample's mean logprob)")
    check_pool_supports(pool, ("vote",))  # a vote needs no score


def test_samples_without_an_answer_need_no_score(tmp_path: Path) -> None:
    # Unanswered samples and the padding of a problem with fewer samples carry no score; nothing is missing.
    pool = _pool(tmp_path, {"a": [("1", True, 10, 0.5), (None, False, 10, None), ("1", True, 10, 0.7)],
                            "b": [("2", False, 10, 0.3), ("2", False, 10, 0.2)]})
    check_pool_supports(pool, ("best_of_n", "weighted_vote"))


def test_a_pool_without_token_counts_is_refused_for_shortest(tmp_path: Path) -> None:
    pool = _pool(tmp_path, {"a": [("1", True, None, 0.5), ("1", True, None, 0.5)]})
    with pytest.raises(CalibrationError) as err:
        check_pool_supports(pool, ("shortest",), source="--calibration x.jsonl")
    assert str(err.value) == ("--calibration x.jsonl (model m) has samples without num_tokens, which strategy "
                              "'shortest' needs; drop it from the strategies")


def test_more_samples_than_a_problem_has_names_the_count(tmp_path: Path) -> None:
    pool = _pool(tmp_path, {"a": [("1", True, 10, 0.5)] * 3, "b": [("1", True, 10, 0.5)] * 2})
    with pytest.raises(CalibrationError) as err:
        rule_outcomes(pool, _all_in_order(pool), ("vote",), 3)
    assert str(err.value) == "3 samples per problem requested but some problem of m has only 2; lower the largest n"


def test_weighted_vote_weighs_scores_beyond_one_by_their_exponential(tmp_path: Path) -> None:
    # Right answer once with score 1.9; wrong answer twice with 1.0. Weighted by the score itself
    # 1.9 < 2.0 (wrong wins); by exp(score), as scores outside [0, 1] are, e^1.9 = 6.69 > 2e = 5.44.
    pool = _pool(tmp_path, {"a": [("1", True, 10, 1.9), ("2", False, 10, 1.0), ("2", False, 10, 1.0)]})
    out = rule_outcomes(pool, _all_in_order(pool), ("weighted_vote", "vote"), 3)
    assert out["weighted_vote"][0, 0].tolist() == [1.0, 1.0, 1.0]
    assert out["vote"][0, 0].tolist() == [1.0, 0.5, 0.0]  # one vote each: a tie at 2, then the wrong pair


def test_weighted_vote_weighs_scores_in_the_unit_interval_by_the_score(tmp_path: Path) -> None:
    # Right answer once with 1.0; wrong twice with 0.45: by the score 1.0 > 0.9 (right wins); by exp it would lose
    # (e^1 = 2.72 < 2 e^0.45 = 3.14).
    pool = _pool(tmp_path, {"a": [("2", False, 10, 0.45), ("1", True, 10, 1.0), ("2", False, 10, 0.45)]})
    out = rule_outcomes(pool, _all_in_order(pool), ("weighted_vote",), 3)
    assert out["weighted_vote"][0, 0].tolist() == [0.0, 1.0, 1.0]


def test_weighted_vote_with_negative_scores_weighs_by_the_exponential(tmp_path: Path) -> None:
    # Mean logprobs (negative): exp weighting; -0.1 once beats -1.5 twice (0.905 > 2 x 0.223).
    pool = _pool(tmp_path, {"a": [("2", False, 10, -1.5), ("2", False, 10, -1.5), ("1", True, 10, -0.1)]})
    out = rule_outcomes(pool, _all_in_order(pool), ("weighted_vote",), 3)
    assert out["weighted_vote"][0, 0].tolist() == [0.0, 0.0, 1.0]


def test_shortest_picks_the_shortest_answered_sample_whatever_the_scores(tmp_path: Path) -> None:
    # The right answer is the shortest answered sample but scores lowest; an unanswered sample is shorter still.
    pool = _pool(tmp_path, {"a": [("2", False, 300, 0.9), (None, False, 20, 0.95), ("1", True, 100, 0.1),
                                  ("3", False, 200, 0.5)],
                            "b": [("5", True, 50, 0.2), ("6", False, 400, 0.8), ("6", False, 400, 0.8)]})
    out = rule_outcomes(pool, _all_in_order(pool), ("shortest", "best_of_n"), 3)  # b has 3 samples, 1 slot padded
    assert out["shortest"][0].tolist() == [[0.0, 0.0, 1.0], [1.0, 1.0, 1.0]]
    assert out["best_of_n"][0].tolist() == [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0]]


def test_curves_average_each_bins_cases_at_the_given_ns() -> None:
    table = np.array([[0.0, 0.1, 0.2, 0.3], [0.2, 0.3, 0.4, 0.5], [1.0, 0.9, 0.8, 0.7]])
    curves = fit_rule_curves({"vote": table}, np.array([0, 0, 1]), [2, 4])
    assert set(curves) == {("vote", 0), ("vote", 1)}
    assert curves[("vote", 0)] == AccuracyCurve("vote", (2, 4), (pytest.approx(0.2), pytest.approx(0.4)))
    assert curves[("vote", 1)].strategy == "vote" and curves[("vote", 1)].accuracy == pytest.approx((0.9, 0.7))


def _guard_case():
    """Three bins of cases (orderings x problems), outcomes at n = 1 and 2.

    Bin 0: problem p0 (two cases) and p1 (one); best_of_n is right everywhere, vote misses p0 at
    n = 2 and half of p1. Bin 1: one problem (p2, two cases) only best_of_n solves. Bin 2: five
    problems only vote solves, which makes vote the reference (pooled 13.5/20 against 10/20)."""
    vote = np.array([[1, 0], [1, 0], [1, 0.5]] + [[0, 0]] * 2 + [[1, 1]] * 5)
    bon = np.array([[1, 1]] * 3 + [[1, 1]] * 2 + [[0, 0]] * 5, dtype=float)
    bins = np.array([0, 0, 0, 1, 1, 2, 2, 2, 2, 2])
    groups = np.array([0, 0, 1, 2, 2, 3, 4, 5, 6, 7])
    return {"vote": vote, "best_of_n": bon}, bins, groups


def test_the_guard_keeps_a_gain_beyond_z_clustered_standard_errors_and_caps_the_rest() -> None:
    # Per-problem mean gains of best_of_n over vote (each problem weighs 1 whatever its number of cases):
    # bin 0 at n = 2: p0 -> 1, p1 -> 0.5: mean 0.75, sd (ddof 1) 0.3536, se 0.25; at n = 1 no gain.
    # Bin 1 has one problem: no standard error, so never a switch; bin 2 loses.
    outcomes, bins, groups = _guard_case()
    ns = [1, 2]
    curves = fit_rule_curves(outcomes, bins, ns)
    assert curves[("vote", 0)].accuracy == pytest.approx((1.0, 1 / 6))
    guarded, ref, allowed = guard_rule_switches(curves, outcomes, bins, groups, ns, z=2.9)
    assert ref == "vote"
    assert allowed == {("best_of_n", 0): [2], ("best_of_n", 1): [], ("best_of_n", 2): []}  # 0.75 > 2.9 x 0.25
    # Capped just below the reference where no switch is allowed; kept where it is.
    assert guarded[("best_of_n", 0)].strategy == "best_of_n"
    assert guarded[("best_of_n", 0)].accuracy == pytest.approx((1.0 - 1e-9, 1.0), abs=1e-12)
    assert guarded[("best_of_n", 1)].accuracy == pytest.approx((-1e-9, -1e-9), abs=1e-12)
    assert guarded[("best_of_n", 2)].accuracy == (0.0, 0.0)
    assert all(guarded[("vote", b)] is curves[("vote", b)] for b in range(3))
    # 0.75 < 3.1 x 0.25: at z = 3.1 the gain is noise (with ddof 0 the se would be 0.177 and it would pass).
    _, _, allowed = guard_rule_switches(curves, outcomes, bins, groups, ns, z=3.1)
    assert allowed[("best_of_n", 0)] == []


def test_a_guard_of_zero_keeps_every_curve_and_a_negative_one_is_refused() -> None:
    outcomes, bins, groups = _guard_case()
    curves = fit_rule_curves(outcomes, bins, [1, 2])
    guarded, _, allowed = guard_rule_switches(curves, outcomes, bins, groups, [1, 2], z=0)
    assert allowed == {("best_of_n", b): [1, 2] for b in range(3)}  # even where it gains nothing or loses
    assert guarded == curves
    _, _, allowed = guard_rule_switches(curves, outcomes, bins, groups, [1, 2], z=0.5)  # a fraction is fine
    assert allowed[("best_of_n", 0)] == [2]
    with pytest.raises(ValueError) as err:
        guard_rule_switches(curves, outcomes, bins, groups, [1, 2], z=-1)
    assert str(err.value) == "z must be >= 0 standard errors, got -1"


def test_a_rule_that_exactly_ties_the_reference_is_never_switched_to() -> None:
    same = np.array([[0.0, 1.0], [1.0, 1.0], [0.0, 0.0]])
    outcomes = {"vote": same, "shortest": same.copy()}
    bins, groups = np.zeros(3, dtype=int), np.arange(3)
    curves = fit_rule_curves(outcomes, bins, [1, 2])
    guarded, ref, allowed = guard_rule_switches(curves, outcomes, bins, groups, [1, 2], z=1.0)
    assert ref == "vote" and allowed == {("shortest", 0): []}
    assert guarded[("shortest", 0)].accuracy == pytest.approx((1 / 3 - 1e-9, 2 / 3 - 1e-9), abs=1e-12)


def test_a_bins_curve_falls_back_to_the_nearest_fitted_bin_the_harder_on_ties() -> None:
    curves = {(r, b): AccuracyCurve(r, (1,), (b / 10 + (r == "vote"),)) for r in ("vote", "best_of_n")
              for b in (0, 2, 5)}
    assert curve_for(curves, "vote", 2) is curves[("vote", 2)]
    assert curve_for(curves, "best_of_n", 1) is curves[("best_of_n", 2)]  # bin 0 and 2 are as near: the harder
    assert curve_for(curves, "best_of_n", 4) is curves[("best_of_n", 5)]
    assert curve_for(curves, "vote", 9) is curves[("vote", 5)]
    assert curve_for(curves, "vote", -3) is curves[("vote", 0)]
    with pytest.raises(CalibrationError) as err:
        curve_for(curves, "shortest", 0)
    assert str(err.value) == "no calibration curve for strategy 'shortest'; calibrate with it"
