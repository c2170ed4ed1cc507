"""What a result row records of its grading (issue 48): why the answer is not correct and how long
its check ran, for the answer and each sample; a sandbox that could not run a check makes the row
``ungraded`` (never wrong); rows written before these fields read and resume as before."""

from __future__ import annotations

import json

import pytest

from tts.benchmarks.humaneval_grading import CodeGrader
from tts.config import EvalConfig
from tts.eval.report import summarize
from tts.eval.rows import ResultRow
from tts.eval.runner import grade_batch, run_eval
from tts.execution.sandbox import Execution
from tts.search.sampling.self_consistency import SelfConsistencyConfig
from tts.types import Problem, Sample, Solution, Trace, Usage

PROBLEM = Problem("HumanEval/0", "def f():\n", "def f():\n    return 1\n",
                  {"entry_point": "f", "prompt": "def f():\n", "test": "def check(f):\n    assert f() == 1\n"})
RIGHT, WRONG, UNLUCKY = "def f():\n    return 1", "def f():\n    return 2", "def f():\n    return 3"


@pytest.fixture(autouse=True)
def fake_sandbox(monkeypatch):
    def run_many(programs, limits, workers=4, unsafe_no_sandbox=False):
        by = {"return 1": Execution("ok", 0, "", "", "", 0.5),
              "return 2": Execution("error", 1, "", "", "AssertionError", 0.75),
              "return 3": Execution("sandbox_failed", None, "", "", "bwrap: Can't fork", 0.01)}
        return [next(x for k, x in by.items() if k in src) for src in programs]

    monkeypatch.setattr("tts.benchmarks.humaneval_grading.run_many", run_many)


def _solution(answer, *samples):
    trace = Trace("self_consistency", tuple(Sample(text=a or "", answer=a) for a in samples))
    return Solution(PROBLEM.id, answer, 0.5, Usage(), trace)


def test_a_row_says_why_its_answer_is_wrong_and_how_long_the_check_ran():
    [row] = grade_batch([PROBLEM], [[(SelfConsistencyConfig(n=3), _solution(WRONG, RIGHT, WRONG, None))]],
                        CodeGrader(), "m", "scripted")
    assert (row.outcome, row.grade_reason, row.grading_seconds) == ("wrong", "error: AssertionError", 0.75)
    samples = row.trace["samples"]
    assert [(s["outcome"], s.get("grade_reason"), s.get("grading_seconds")) for s in samples] == [
        ("correct", None, 0.5), ("wrong", "error: AssertionError", 0.75), ("no_answer", None, None)]
    assert row.coverage
    again = ResultRow.model_validate(json.loads(json.dumps(row.to_json())))  # as stored and read back
    assert again.grade_reason == "error: AssertionError" and again.grading_seconds == 0.75


def test_a_sandbox_that_could_not_run_the_check_makes_the_row_ungraded_not_wrong():
    rows = grade_batch([PROBLEM], [[(SelfConsistencyConfig(n=1), _solution(UNLUCKY, UNLUCKY)),
                                    (SelfConsistencyConfig(n=2), _solution(WRONG, UNLUCKY, WRONG))]],
                       CodeGrader(), "m", "scripted")
    infra, wrong = rows
    assert (infra.outcome, infra.correct, infra.grade_reason) == ("ungraded", False, "sandbox_failed: bwrap: Can't fork")
    assert infra.trace["samples"][0]["outcome"] == "ungraded"
    assert wrong.outcome == "wrong" and wrong.trace["samples"][0]["outcome"] == "ungraded"
    by = {s.config: s for s in summarize(rows)}
    assert by["self_consistency@1"].ungraded == 1 and by["self_consistency@2"].ungraded == 0


def test_rows_without_the_grading_fields_still_read_and_resume(tmp_path):
    cfg = EvalConfig.model_validate({"data": {"benchmark": "demo", "limit": 4},
                                     "strategies": [{"kind": "self_consistency", "n": 2}],
                                     "backend": {"kind": "scripted"}})
    first = run_eval(cfg, tmp_path)
    answered = [r for r in first.rows if r.answer is not None]
    assert answered and all(r.grade_reason is None and r.grading_seconds is not None for r in answered)  # math: timed
    path = tmp_path / "results.jsonl"
    old = [json.loads(x) for x in path.read_text().splitlines()]
    for raw in old:  # as a run written before these fields
        raw.pop("grade_reason"), raw.pop("grading_seconds")
    path.write_text("".join(json.dumps(raw) + "\n" for raw in old))
    again = run_eval(cfg, tmp_path)
    assert again.skipped == 4 and len(again.rows) == 4
    assert [r.correct for r in again.rows] == [r.correct for r in first.rows]
