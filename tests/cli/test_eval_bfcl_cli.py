"""``tts eval --benchmark bfcl:<category>`` end to end on the scripted backend, graded by BFCL's checker.

Skipped, saying so, where bfcl-eval's environment is absent (``make bfcl-env`` builds it).
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
from typer.testing import CliRunner

from tts.benchmarks.bfcl import BFCLSetupError, bfcl_python, data_dir
from tts.cli.app import app

runner = CliRunner(env={"COLUMNS": "220"})


def _has_bfcl() -> bool:
    try:
        data_dir(bfcl_python())
        return True
    except BFCLSetupError:
        return False


pytestmark = pytest.mark.skipif(not _has_bfcl(), reason="bfcl-eval's environment is absent: run `make bfcl-env` "
                                                        "(or set TTS_BFCL_PYTHON) to run the BFCL eval")


def _rows(out):
    return [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]


def test_bfcl_simple_with_tool_vote_and_self_consistency(tmp_path):
    out = tmp_path / "run"
    r = runner.invoke(app, ["eval", "--benchmark", "bfcl:simple", "--backend", "scripted", "--limit", "5",
                            "-s", "tool_vote", "-s", "self_consistency", "-n", "1", "-n", "4", "--out", str(out)])
    assert r.exit_code == 0, r.output
    rows = _rows(out)
    assert Counter(row["config"] for row in rows) == Counter(
        {"tool_vote@1": 5, "tool_vote@4": 5, "self_consistency@1": 5, "self_consistency@4": 5})
    assert {row["problem_id"] for row in rows} == {f"simple_python_{i}" for i in range(5)}
    # Graded by BFCL's checker: answers are call lists; each sample has its verdict, and the scripted
    # model's prose replies (no call) count as no answer, not as right.
    samples = Counter(s["outcome"] for row in rows for s in row["trace"]["samples"])
    assert samples["correct"] > 0 and samples["no_answer"] > 0, samples
    for row in rows:
        assert row["outcome"] in ("correct", "wrong", "no_answer")
        assert row["correct"] == (row["outcome"] == "correct")
        if row["correct"]:
            assert json.loads(row["answer"])[0]["name"] == json.loads(row["gold"])[0]["name"]
    acc = {c: sum(r["correct"] for r in rows if r["config"] == c) for c in ("tool_vote@1", "tool_vote@4")}
    assert acc["tool_vote@4"] >= acc["tool_vote@1"] and acc["tool_vote@4"] >= 4, acc
    # The model was shown the tools as offered to an FC model, names without dots.
    assert "math_factorial" in json.dumps([row["answer"] for row in rows])


def test_bfcl_irrelevance_is_right_when_no_tool_is_called(tmp_path):
    out = tmp_path / "irr"
    r = runner.invoke(app, ["eval", "--benchmark", "bfcl:irrelevance", "--backend", "scripted", "--limit", "3",
                            "-s", "self_consistency", "-n", "2", "--out", str(out)])
    assert r.exit_code == 0, r.output
    rows = _rows(out)
    assert len(rows) == 3
    for row in rows:
        called = row["answer"] is not None and row["answer"].startswith("[{")
        assert row["correct"] == (not called), row["answer"]
