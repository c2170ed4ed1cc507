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
