"""``tts show``: one problem of a run, its votes, samples and search tree."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from tts.cli.app import app
from tts.eval.rows import ResultRow
from tts.types import Usage

runner = CliRunner(env={"COLUMNS": "200"})


def _run_with(tmp_path, **trace):
    row = ResultRow(problem_id="p1", config="beam@4", strategy={"kind": "self_consistency", "n": 4}, model="m",
                    backend="scripted", answer="7", gold="7", outcome="correct", correct=True, coverage=True,
                    confidence=0.75, usage=Usage(completion_tokens=40, calls=2),
                    trace={"strategy": "x", "samples": [{"text": "3 + 4 = 7", "answer": "7", "outcome": "correct",
                                                         "completion_tokens": 5}], **trace})
    (tmp_path / "results.jsonl").write_text(json.dumps(row.to_json()) + "\n")
    return tmp_path


def test_a_voting_trace_is_shown_as_its_votes_and_samples(tmp_path):
    r = runner.invoke(app, ["show", str(_run_with(tmp_path, votes={"7": 3.0, "8": 1.0})), "p1"])
    assert r.exit_code == 0, r.output
    assert "votes" in r.output and "0.75" in r.output and "3 + 4 = 7" in r.output


def test_a_search_trace_is_shown_as_a_tree_of_kept_and_pruned_steps(tmp_path):
    tree = [{"id": 0, "parent": None, "depth": 0, "text": "Start: 3 + 4", "score": 0.9, "kept": True},
            {"id": 1, "parent": 0, "depth": 1, "text": "3 + 4 = 7", "score": 1.0, "kept": True},
            {"id": 2, "parent": 0, "depth": 1, "text": "3 + 4 = 8", "score": 0.0, "kept": False}]
    r = runner.invoke(app, ["show", str(_run_with(tmp_path, tree=tree)), "p1"])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    start = next(i for i, line in enumerate(lines) if "Start: 3 + 4" in line)
    assert any("3 + 4 = 8" in line and "0.00" in line for line in lines[start + 1:])


def test_an_unknown_problem_says_so(tmp_path):
    r = runner.invoke(app, ["show", str(_run_with(tmp_path)), "nope"])
    assert r.exit_code == 2 and "no results for problem 'nope'" in r.output


def _code_run(tmp_path, **row):
    base = dict(problem_id="HumanEval/3", config="self_consistency@2", strategy={"kind": "self_consistency", "n": 2},
                model="m", backend="scripted", answer="def f(): return [0]", gold="def f(): return 1",
                outcome="wrong", correct=False, coverage=True, confidence=0.5, usage=Usage(completion_tokens=40, calls=1),
                trace={"strategy": "self_consistency", "samples": [
                    {"text": "def f(): return [0]", "answer": "def f(): return [0]", "outcome": "wrong",
                     "grade_reason": "timeout: ran past 5 s", "grading_seconds": 5.01},
                    {"text": "def f(): return 1", "answer": "def f(): return 1", "outcome": "correct",
                     "grade_reason": None, "grading_seconds": 0.12}]})
    (tmp_path / "results.jsonl").write_text(json.dumps(ResultRow(**{**base, **row}).to_json()) + "\n")
    return tmp_path


def test_a_wrong_answer_shows_why_and_how_long_its_check_ran(tmp_path):
    run = _code_run(tmp_path, grade_reason="timeout: ran past 5 s", grading_seconds=5.01)
    r = runner.invoke(app, ["show", str(run), "HumanEval/3"])
    assert r.exit_code == 0, r.output
    assert "graded wrong: why: timeout: ran past 5 s; check ran 5.01 s" in r.output
    assert "why (grader)" in r.output  # the samples table's column
    assert "def f(): return [0]" in r.output  # a program's brackets are printed, not read as markup


def test_a_sandbox_failure_shows_as_no_verdict(tmp_path):
    run = _code_run(tmp_path, outcome="ungraded", grade_reason="sandbox_failed: bwrap: Can't fork", grading_seconds=0.0)
    r = runner.invoke(app, ["show", str(run), "HumanEval/3"])
    assert r.exit_code == 0, r.output
    assert "why: sandbox_failed: bwrap: Can't fork" in r.output and "not a wrong answer" in r.output


def test_rows_written_before_grading_reasons_show_as_before(tmp_path):
    raw = json.loads((_run_with(tmp_path) / "results.jsonl").read_text())
    raw.pop("grade_reason"), raw.pop("grading_seconds")
    (tmp_path / "results.jsonl").write_text(json.dumps(raw) + "\n")
    r = runner.invoke(app, ["show", str(tmp_path), "p1"])
    assert r.exit_code == 0, r.output
    assert "3 + 4 = 7" in r.output and "graded" not in r.output and "why" not in r.output
