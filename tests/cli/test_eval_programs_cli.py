"""``tts eval`` with program-aided strategies (``program_vote``, ``tir``) on the scripted backend."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tts.cli.app import app
from tts.execution.sandbox import bwrap_path

runner = CliRunner(env={"COLUMNS": "220"})
pytestmark = pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap is not installed (make install)")


def test_programs_run_on_chains_and_their_seconds_are_a_column_of_their_own(tmp_path):
    out = tmp_path / "run"
    r = runner.invoke(app, ["eval", "--benchmark", "chains", "--backend", "scripted", "--limit", "6",
                            "--set", "data.steps=[12, 24]", "-s", "program_vote", "-s", "tir", "-s", "self_consistency",
                            "-n", "2", "--out", str(out)])
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    by = {}
    for row in rows:
        by.setdefault(row["strategy"]["kind"], []).append(row)
    assert {k: len(v) for k, v in by.items()} == {"program_vote": 6, "tir": 6, "self_consistency": 6}
    for kind in ("program_vote", "tir"):
        assert all(row["trace"]["notes"]["execution_seconds"] > 0 for row in by[kind])
    assert all("```output" in s["text"] for row in by["tir"] for s in row["trace"]["samples"])
    assert "exec s" in r.output and "seconds model-written programs ran in the sandbox" in r.output.replace("\n", " ")
