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
