"""The parts of an escalation option around its fit (tts.budgets.escalation): which configs a past
run offers as options, which keep the pilot, the plan file's summary, and the accuracy and cost a
problem reads per bin (each pinned by a mutation run: docs/mutation.md)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tts.budgets.allocator import CalibrationError
from tts.budgets.escalation import Escalation, escalation_options, read_escalation_runs, reuses_pilot


@pytest.mark.parametrize(("strategy", "pilot", "keeps"), [
    ({"kind": "best_of_n", "verifier": "arithmetic", "n": 8}, 4, True),
    ({"kind": "weighted_vote", "verifier": "prm", "n": 5}, 4, True),
    ({"kind": "best_of_n", "verifier": "arithmetic", "n": 4}, 4, False),  # nothing left to draw
    ({"kind": "best_of_n", "verifier": "arithmetic"}, 4, False),  # no n: nothing to draw
    ({"kind": "best_of_n", "verifier": "arithmetic"}, 0, False),  # ... even with no pilot
    ({"kind": "best_of_n", "n": 8}, 4, False),  # no verifier: the allocator's own curve
    ({"kind": "rebase", "verifier": "arithmetic", "n": 8}, 4, False),  # a search runs afresh
    ({"kind": "rebase", "n": 8}, 4, False),
])
def test_only_a_verifier_scored_sampling_option_with_samples_to_draw_keeps_the_pilot(strategy, pilot, keeps):
    assert reuses_pilot(strategy, pilot) is keeps


def _write(path: Path, rows: list[dict]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _row(pid: str, config: str, strategy: dict, correct, tokens: int = 10) -> dict:
    usage = {"prompt_tokens": tokens, "completion_tokens": tokens, "calls": 1, "shapes": []}
    return {"problem_id": pid, "config": config, "strategy": strategy, "correct": correct, "usage": usage}


def test_a_run_offers_each_graded_search_config_and_skips_sampling_auto_and_ungraded_rows(tmp_path):
    rows = [_row("p1", "rebase@2", {"kind": "rebase", "n": 2}, None),  # ungraded first: skipped, not the end
            _row("p1", "self_consistency@4", {"kind": "self_consistency", "n": 4}, True),
            _row("p1", "auto", {"kind": "auto"}, True),
            _row("p2", "rebase@2", {"kind": "rebase", "n": 2}, True, tokens=7),
            _row("p3", "rebase@2", {"kind": "rebase", "n": 2}, False),
            _row("p2", "beam@4", {"kind": "beam", "n": 4}, False)]
    runs = read_escalation_runs(_write(tmp_path / "run", rows))
    assert [(r.label, r.strategy, r.correct) for r in runs] == [
        ("rebase@2", {"kind": "rebase", "n": 2}, {"p2": True, "p3": False}),
        ("beam@4", {"kind": "beam", "n": 4}, {"p2": False})]
    assert runs[0].usage["p2"].prompt_tokens == 7
    (only,) = read_escalation_runs(tmp_path / "run", only="beam@4")
    assert only.label == "beam@4"


def test_a_run_without_a_graded_search_says_what_it_holds(tmp_path):
    rows = [_row("p1", "self_consistency@4", {"kind": "self_consistency", "n": 4}, True),
            _row("p1", "auto", {"kind": "auto"}, True)]
    run = _write(tmp_path / "run", rows)
    with pytest.raises(CalibrationError) as err:
        read_escalation_runs(run)
    assert str(err.value) == (f"--escalate {run} has no graded search or verification config; it holds "
                              "['auto', 'self_consistency@4'] (run `tts eval -s rebase ...` on the calibration "
                              "problems and pass that run)")
    with pytest.raises(CalibrationError) as err:
        read_escalation_runs(run, only="rebase@2")
    assert "has no graded config 'rebase@2'; it holds" in str(err.value)
    empty = _write(tmp_path / "empty", [])
    with pytest.raises(CalibrationError, match="it holds nothing"):
        read_escalation_runs(empty)
    with pytest.raises(CalibrationError) as err:
        read_escalation_runs(tmp_path / "missing")
    assert str(err.value).startswith(f"--escalate {tmp_path / 'missing'}: ") and "no such results file" in str(err.value)


class _Model:
    def predict(self, features):
        assert features.dtype == float
        return features[:, 0] / 10.0


def _escalation(**kw) -> Escalation:
    base = dict(label="rebase@2", strategy={"kind": "rebase", "n": 2},
                accuracy=np.array([-1.0, 0.3, 0.9]), raw_accuracy=np.array([0.5, 0.3, 0.95]),
                cost=np.array([100.0, 200.0, 300.0]), weight=np.array([0.0, 2.5, 3.5]),
                matched_n=np.array([4, 8, 16]), allowed=np.array([False, False, True]))
    return Escalation(**{**base, **kw})


def test_the_plan_file_summary_holds_each_bins_measurements_rounded():
    e = _escalation(raw_accuracy=np.array([0.123456, 0.5, 1.0]), cost=np.array([100.123, 2.0, 3.456]),
                    weight=np.array([0.0, 1.234, 2.5]))
    assert e.to_json() == {"label": "rebase@2", "accuracy": [0.1235, 0.5, 1.0], "cost": [100.12, 2.0, 3.46],
                           "problems": [0.0, 1.23, 2.5], "matched_n": [4, 8, 16], "allowed": [False, False, True],
                           "learned": False}
    assert _escalation(model=_Model(), ceiling=np.array([-1.0, 0.2, np.inf])).to_json()["learned"] is True


def test_a_problem_reads_its_bins_accuracy_with_bins_out_of_range_held_at_the_ends():
    e = _escalation()
    bins = np.array([-1, 0, 1, 2, 7, 1.9])
    assert e.predicted_accuracy(bins).tolist() == [0.5, 0.5, 0.3, 0.95, 0.95, 0.3]  # before the guard
    assert e.expected_accuracy(bins).tolist() == [-1.0, -1.0, 0.3, 0.9, 0.9, 0.3]  # the guarded accuracy


def test_a_learned_option_predicts_per_problem_under_its_bins_ceiling():
    e = _escalation(model=_Model(), ceiling=np.array([-1.0, 0.2, np.inf]))
    features = [[5], [5], [5], [9]]  # ints: the model reads floats
    bins = np.array([0, 1, 2, 9])
    assert e.predicted_accuracy(bins, features).tolist() == [0.5, 0.5, 0.5, 0.9]
    assert e.expected_accuracy(bins, features).tolist() == [-1.0, 0.2, 0.5, 0.9]
    assert e.expected_accuracy(bins).tolist() == [-1.0, 0.3, 0.9, 0.9]  # no features: the bins' accuracy
    no_ceiling = _escalation(model=_Model())
    assert no_ceiling.expected_accuracy(bins, features).tolist() == [-1.0, 0.3, 0.9, 0.9]


def test_options_stack_each_escalations_accuracy_and_cost_per_problem():
    a, b = _escalation(), _escalation(label="beam@4", accuracy=np.array([0.1, 0.2, 0.4]),
                                      cost=np.array([10.0, 20.0, 40.0]))
    acc, cost = escalation_options([a, b], np.array([0, 2, 5, -1]))
    assert acc.tolist() == [[-1.0, 0.1], [0.9, 0.4], [0.9, 0.4], [-1.0, 0.1]]
    assert cost.tolist() == [[100.0, 10.0], [300.0, 40.0], [300.0, 40.0], [100.0, 10.0]]
    acc, cost = escalation_options([a], np.array([2.0, 1.0]))  # bins as floats are bin numbers
    assert acc.tolist() == [[0.9], [0.3]] and cost.tolist() == [[300.0], [200.0]]
    learned = _escalation(model=_Model(), ceiling=np.array([1.0, 1.0, 1.0]))
    acc, _ = escalation_options([learned], np.array([1]), np.array([[7.0]]))
    assert acc.tolist() == [[0.7]]


def test_the_fit_logs_each_bins_accuracy_allowance_and_cost(tmp_path, caplog):
    from tests.budgets.test_cross_strategy import _write_pool
    from tests.budgets.test_escalation import _write_search_run
    from tts.benchmarks.pool import load_pool
    from tts.budgets.cross_allocator import Pricer, calibrate
    from tts.budgets.escalation import fit_escalation
    from tts.budgets.replay.prefix import random_orders

    pool = load_pool(_write_pool(tmp_path / "pool.jsonl", scores=False))["m"]
    orders = random_orders(pool.mask, 2, np.random.default_rng(0))
    cal = calibrate(pool, ("vote",), 4, [4, 8], orders=orders, n_bins=3)
    (run,) = read_escalation_runs(_write_search_run(tmp_path / "run", lambda p: p % 3 == 0, tokens=2001,
                                                    n_problems=30))
    for accuracy, said in (("bin", ""), ("learned", "; accuracy per problem from a learned model")):
        caplog.clear()
        with caplog.at_level("INFO", logger="tts.budgets.escalation"):
            e = fit_escalation(run, pool, cal, orders, Pricer("tokens"), 3.0, accuracy)
        assert [r.getMessage() for r in caplog.records if r.name == "tts.budgets.escalation"] == [
            f"escalation rebase@2: per-bin accuracy {np.round(e.raw_accuracy, 3).tolist()} (allowed "
            f"{e.allowed.tolist()}), cost {np.round(e.cost, 1).tolist()} tokens{said}"]
        assert len(e.accuracy) == len(e.cost) == len(cal.edges) + 1  # one entry per difficulty bin
    (two,) = read_escalation_runs(_write_search_run(tmp_path / "two", lambda p: p == 0, n_problems=2))
    assert fit_escalation(two, pool, cal, orders, Pricer("tokens")).label == "rebase@2"  # two problems suffice
    (one,) = read_escalation_runs(_write_search_run(tmp_path / "one", lambda p: True, n_problems=1))
    with pytest.raises(CalibrationError) as err:
        fit_escalation(one, pool, cal, orders, Pricer("tokens"))
    assert str(err.value) == (f"--escalate rebase@2: only 1 of its problems are in the calibration source "
                              f"({pool.n_problems} problems); run the search on the calibration problems")


# --- fit_escalation on a pool small enough to work out by hand -------------------------------------
#
# Pool order a, f, b, c, d (f is not in the search run, so the shared problems sit at pool indices
# 0, 2, 3, 4); four samples each, answer 0 right except on d. Two orderings: as written, and
# reversed. The pilot is two samples. The calibration's bins are set per ordering (five bins, the
# last empty); the pricer prices n reference samples at n x the bin's mean pilot length.

from tts.benchmarks.pool import ModelPool  # noqa: E402
from tts.budgets.escalation import EscalationRun, fit_escalation  # noqa: E402

_ANSWERS = [[0, 0, 0, 0], [0, 0, 0, 0], [0, 1, 1, 1], [0, 0, 0, 1], [1, 1, 1, 1]]
_TOKENS = [[10, 10, 10, 10], [99, 99, 99, 99], [20, 22, 24, 26], [30, 30, 34, 34], [40, 40, 40, 40]]
_BINS = [np.array([0, 2, 1, 2]), np.array([0, 1, 1, 3])]  # per ordering, over a, b, c, d


def _hand_pool(prompts=(None,) * 5) -> ModelPool:
    answers = np.array(_ANSWERS)
    correct = (answers == 0) & (np.arange(5) != 4)[:, None]
    return ModelPool(model="m", problem_ids=("a", "f", "b", "c", "d"), answers=answers,
                     answer_texts=(("1", "2"),) * 5, correct=correct, tokens=np.array(_TOKENS, dtype=float),
                     scores=np.full((5, 4), np.nan), sample_idx=np.tile(np.arange(4), (5, 1)),
                     mask=np.ones((5, 4), dtype=bool),
                     metadata=tuple({} if p is None else {"prompt_tokens": p} for p in prompts))


class _Curve:
    def at(self, n):
        return 0.5 + n / 100


class _Calibration:
    pilot, edges, ns, curves = 2, [0.1, 0.2, 0.3, 0.4], [3, 4], {("vote", 0): _Curve(), ("vote", 1): _Curve()}

    def __init__(self, reference=None, rules=("vote",), prompt_length=False, bins=_BINS, edges=None):
        self.reference, self.rules, self.prompt_length = reference, rules, prompt_length
        self.seen: list[np.ndarray] = []
        self._bins = bins
        if edges is not None:
            self.edges = edges

    def bins(self, features):
        self.seen.append(features)
        return self._bins[len(self.seen) - 1]


class _Pricer:
    unit = "tokens"

    def __init__(self):
        self.options = []

    def usage(self, usage):
        return float(usage)

    def option(self, rule, index, length, pilot, n):
        self.options.append((rule, index, round(length, 3), pilot, n))
        return length * n


_ORDERS = np.stack([np.tile(np.arange(4), (5, 1)), np.tile(np.arange(4)[::-1], (5, 1))])


def _hand_run(strategy=None, ok=(True, True, True, False), cost_a=15) -> EscalationRun:
    a, b, c, d = ok
    return EscalationRun("rebase@2", strategy or {"kind": "rebase", "n": 2},
                         {"a": a, "b": b, "c": c, "d": d, "e": True},  # e: not in the pool
                         {"a": cost_a, "b": 100, "c": 90, "d": 60, "e": 1000})


def test_each_bins_accuracy_cost_matched_n_and_guard_worked_out_by_hand(caplog):
    cal, pricer = _Calibration(), _Pricer()
    with caplog.at_level("INFO", logger="tts.budgets.escalation"):
        e = fit_escalation(_hand_run(), _hand_pool(), cal, _ORDERS, pricer, z=0.85)
    assert caplog.messages == ["escalation rebase@2: per-bin accuracy [1.0, 1.0, 0.5, 0.0, 0.75] (allowed "
                               "[False, False, True, False, False]), cost [15.0, 93.3, 80.0, 60.0, 66.2] tokens"]
    # The pilot features each ordering bins by: majority share, no-answer share, log(1 + mean tokens).
    assert [f.tolist() for f in cal.seen] == [
        [[1.0, 0.0, np.log1p(10)], [0.5, 0.0, np.log1p(21)], [1.0, 0.0, np.log1p(30)], [1.0, 0.0, np.log1p(40)]],
        [[1.0, 0.0, np.log1p(10)], [1.0, 0.0, np.log1p(25)], [0.5, 0.0, np.log1p(34)], [1.0, 0.0, np.log1p(40)]]]
    # Bin shares: 0 {a: 1}; 1 {b: 1/2, c: 1}; 2 {b: 1/2, d: 1/2}; 3 {d: 1/2}; 4 none.
    assert e.weight.tolist() == [1.0, 1.5, 1.0, 0.5, 0.0]
    assert e.raw_accuracy.tolist() == pytest.approx([1.0, 1.0, 0.5, 0.0, 0.75])  # bin 4: over all problems
    assert e.cost.tolist() == pytest.approx([15.0, 140 / 1.5, 80.0, 60.0, 66.25])
    # Matched n: the largest n in (3, 4) with n x the bin's mean pilot length within its cost, else the pilot.
    # Mean pilot lengths: bin 0 10, bin 1 (30 + 25 + 34) / 3, bin 2 (21 + 40) / 2, bin 3 40.
    assert e.matched_n.tolist() == [2, 3, 2, 2, 2]
    assert pricer.options == [("vote", 0, 10.0, 2, 3), ("vote", 0, 10.0, 2, 4),
                              ("vote", 0, 29.667, 2, 3), ("vote", 0, 29.667, 2, 4),
                              ("vote", 0, 30.5, 2, 3), ("vote", 0, 30.5, 2, 4),
                              ("vote", 0, 40.0, 2, 3), ("vote", 0, 40.0, 2, 4)]
    # Paired gains over the vote at matched n: bin 1 (b 1 - 0, c 1 - 1) 1/3 with se sqrt(2/9) = 0.471,
    # 0.707 se; bin 2 (b 1 - 1/2, d 0 - 0) 1/4 with se 1/4, 1 se; bins 0 and 3 one problem each.
    assert e.allowed.tolist() == [False, False, True, False, False]
    assert json.dumps(e.to_json()["allowed"]) == "[false, false, true, false, false]"  # booleans in the plan file
    assert e.ceiling.tolist() == pytest.approx([0.52 - 1e-9, 0.53 - 1e-9, np.inf, -1e-9, -1.0], abs=1e-12)
    assert e.accuracy.tolist() == pytest.approx([0.52 - 1e-9, 0.53 - 1e-9, 0.5, -1e-9, -1.0], abs=1e-12)
    assert (e.label, e.strategy, e.model) == ("rebase@2", {"kind": "rebase", "n": 2}, None)
    # The guard's z at the boundaries: 1/3 > 0.7 x 0.471 (bin 1 allowed); bin 2 just above 1 se is not.
    assert fit_escalation(_hand_run(), _hand_pool(), _Calibration(), _ORDERS, _Pricer(),
                          z=0.7).allowed.tolist() == [False, True, True, False, False]
    assert fit_escalation(_hand_run(), _hand_pool(), _Calibration(), _ORDERS, _Pricer(),
                          z=1.0).allowed.tolist() == [False, False, False, False, False]
    # z = 0 trusts every bin that holds a problem.
    trusted = fit_escalation(_hand_run(), _hand_pool(), _Calibration(), _ORDERS, _Pricer(), z=0.0)
    assert trusted.allowed.tolist() == [True, True, True, True, False]
    assert trusted.accuracy.tolist() == [1.0, 1.0, 0.5, 0.0, -1.0]


def test_the_reference_rule_is_the_calibrations_reference_and_else_its_first_rule():
    named = fit_escalation(_hand_run(), _hand_pool(), _Calibration(reference="vote", rules=("shortest",)),
                           _ORDERS, _Pricer(), z=0.85)
    assert named.allowed.tolist() == [False, False, True, False, False]
    assert named.ceiling[:2].tolist() == pytest.approx([0.52 - 1e-9, 0.53 - 1e-9], abs=1e-12)
    # "shortest" as the first rule and no reference: its picks (the shortest sample) are what the
    # search is paired against, and it has no curves here, so a guarded bin is capped at its raw mean.
    pricer = _Pricer()
    first = fit_escalation(_hand_run(), _hand_pool(), _Calibration(rules=("shortest", "vote")), _ORDERS,
                           pricer, z=0.0)
    assert {o[0] for o in pricer.options} == {"shortest"}
    assert first.allowed.tolist() == [True, True, True, True, False]


def test_an_option_that_keeps_the_pilot_costs_only_its_other_samples():
    kept = fit_escalation(_hand_run({"kind": "best_of_n", "verifier": "arithmetic", "n": 4}), _hand_pool(),
                          _Calibration(), _ORDERS, _Pricer(), z=0.85)
    assert kept.cost.tolist() == pytest.approx([7.5, 70 / 1.5, 40.0, 30.0, 33.125])  # (4 - 2) / 4 of each
    fresh = fit_escalation(_hand_run({"kind": "best_of_n", "verifier": "arithmetic", "n": 2}), _hand_pool(),
                           _Calibration(), _ORDERS, _Pricer(), z=0.85)
    assert fresh.cost.tolist() == pytest.approx([15.0, 140 / 1.5, 80.0, 60.0, 66.25])


def test_prompt_lengths_of_the_shared_problems_join_the_features_when_the_calibration_uses_them():
    cal = _Calibration(prompt_length=True)
    fit_escalation(_hand_run(), _hand_pool(prompts=(100, 7, 200, 300, 400)), cal, _ORDERS, _Pricer(), z=0.85)
    assert [f[:, 3].tolist() for f in cal.seen] == [np.log1p([100, 200, 300, 400]).tolist()] * 2


def test_a_learned_accuracy_fits_every_orderings_features_with_the_problems_outcome():
    from tts.budgets.difficulty import LearnedDifficulty

    cal = _Calibration()
    e = fit_escalation(_hand_run(), _hand_pool(), cal, _ORDERS, _Pricer(), z=0.85, accuracy="learned")
    want = LearnedDifficulty(l2=1.0).fit(np.concatenate(cal.seen), np.array([1.0, 1, 1, 0, 1, 1, 1, 0]))
    probe = np.array([[1.0, 0.0, 2.0], [0.5, 0.0, 3.5], [1.0, 0.0, 3.7]])
    assert e.model.predict(probe).tolist() == pytest.approx(want.predict(probe).tolist(), abs=1e-9)
    assert e.raw_accuracy.tolist() == pytest.approx([1.0, 1.0, 0.5, 0.0, 0.75])  # the bins are kept beside it
    # Every problem right (or every one wrong): nothing to learn, the bins stay.
    for ok in ((True,) * 4, (False,) * 4):
        same = fit_escalation(_hand_run(ok=ok), _hand_pool(), _Calibration(), _ORDERS, _Pricer(), z=0.85,
                              accuracy="learned")
        assert same.model is None


def test_the_matched_n_may_cost_exactly_what_the_search_does():
    # a costs 30: three samples of its 10-token pilots cost exactly as much, so bin 0 matches n = 3.
    e = fit_escalation(_hand_run(cost_a=30), _hand_pool(), _Calibration(), _ORDERS, _Pricer(), z=0.85)
    assert e.matched_n.tolist() == [3, 3, 2, 2, 2]


def test_every_empty_bin_gets_the_overall_numbers_not_only_the_first():
    e = fit_escalation(_hand_run(), _hand_pool(), _Calibration(edges=[0.1, 0.2, 0.3, 0.4, 0.5]), _ORDERS,
                       _Pricer(), z=0.85)
    assert e.weight.tolist() == [1.0, 1.5, 1.0, 0.5, 0.0, 0.0]
    assert e.raw_accuracy[4:].tolist() == [0.75, 0.75] and e.cost[4:].tolist() == [66.25, 66.25]
    assert e.accuracy[4:].tolist() == [-1.0, -1.0] and e.ceiling[4:].tolist() == [-1.0, -1.0]


def test_the_log_rounds_each_bins_accuracy_to_three_places(caplog):
    with caplog.at_level("INFO", logger="tts.budgets.escalation"):
        fit_escalation(_hand_run(ok=(True, False, True, False)), _hand_pool(), _Calibration(), _ORDERS, _Pricer(),
                       z=0.85)
    assert caplog.messages[0].startswith("escalation rebase@2: per-bin accuracy [1.0, 0.667, 0.0, 0.0, 0.5] ")


# Bins {a: 1/2, b: 1, c: 1} in bin 1, d alone in bins 2 and 3 (one ordering each), a alone in bin 0.
_BINS_2 = [np.array([1, 1, 1, 2]), np.array([0, 1, 1, 3])]


def test_the_guard_pairs_each_problem_with_the_reference_over_its_own_orderings_in_the_bin():
    # Bin 1: matched n = 3 (mean pilot length 24, cost 79). The vote of three samples: a right (its one
    # ordering in the bin), b wrong in both, c right in both. Every problem right with the search:
    # gains a 0, b 1, c 0 with weights 1/2, 1, 1: gain 0.4, se sqrt(0.24 / 2) = 0.346, 1.15 se.
    run = _hand_run(ok=(True, True, True, True))
    at = {z: fit_escalation(run, _hand_pool(), _Calibration(bins=_BINS_2), _ORDERS, _Pricer(), z=z) for z in (1.0, 1.3)}
    assert at[1.0].matched_n[1] == 3 and at[1.0].weight.tolist() == [0.5, 2.5, 0.5, 0.5, 0.0]
    assert at[1.0].allowed.tolist() == [False, True, False, False, False]
    # One problem in a bin (d in bins 2 and 3, right where the vote is wrong): a gain of 1 with no
    # spread to judge it by is never trusted.
    assert at[1.3].allowed.tolist() == [False, False, False, False, False]
