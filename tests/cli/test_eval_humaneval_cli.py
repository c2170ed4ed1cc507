"""``tts eval --benchmark humaneval`` end to end on the scripted backend, graded in the sandbox."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tts.cli.app import app
from tts.execution.sandbox import bwrap_path

runner = CliRunner(env={"COLUMNS": "220"})
pytestmark = pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap is not installed (make install)")


def test_self_consistency_and_execution_votes_on_humaneval(tmp_path):
    out = tmp_path / "run"
    r = runner.invoke(app, ["eval", "--benchmark", "humaneval", "--backend", "scripted", "--limit", "8",
                            "-s", "self_consistency", "-s", "public_tests", "-n", "4", "--out", str(out)])
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 16 and {row["config"].split("@")[0] for row in rows} == {"self_consistency", "public_tests"}
    outcomes = {s["outcome"] for row in rows for s in row["trace"]["samples"]}
    assert {"correct", "wrong"} <= outcomes  # the scripted model writes right and wrong programs
    assert all(row["answer"] is None or "def " in row["answer"] for row in rows)
    assert sum(row["correct"] for row in rows) >= 4
    assert "self_consistency" in r.output and "public_tests" in r.output


def test_a_wrong_program_says_why_in_its_row_and_in_tts_show(tmp_path):
    """Issue 48: the grader's reason and the check's seconds are in the row, and `tts show` prints them."""
    out = tmp_path / "run"
    r = runner.invoke(app, ["eval", "--benchmark", "humaneval", "--backend", "scripted", "--limit", "8",
                            "-s", "self_consistency", "-n", "4", "--out", str(out)])
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    samples = [s for row in rows for s in row["trace"]["samples"]]
    wrong = [s for s in samples if s["outcome"] == "wrong"]
    assert wrong and all(s["grade_reason"].startswith("error: ") and s["grading_seconds"] > 0 for s in wrong)
    assert all(s["grade_reason"] is None for s in samples if s["outcome"] == "correct")
    assert all(row["grading_seconds"] > 0 for row in rows if row["answer"] is not None)
    row = next(row for row in rows if row["trace"]["samples"][0]["outcome"] == "wrong")
    shown = runner.invoke(app, ["show", str(out), row["problem_id"]])
    assert shown.exit_code == 0, shown.output
    assert row["trace"]["samples"][0]["grade_reason"][:40] in shown.output
