"""``tts eval --strategy NAME`` for deepconf, certainty_probe, genselect, aggregate, tool_vote and
the self_certainty scorer, on the scripted backend."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from tts.cli.app import app

runner = CliRunner(env={"COLUMNS": "220"})
NAMES = ("deepconf", "certainty_probe", "genselect", "aggregate", "tool_vote")


def test_each_strategy_runs_through_tts_eval_and_stores_a_row_per_problem(tmp_path):
    out = tmp_path / "run"
    args = ["eval", "--backend", "scripted", "--benchmark", "demo", "--limit", "4", "-n", "4", "--out", str(out),
            "--gpu", ""]
    for name in NAMES:
        args += ["-s", name]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 4 * len(NAMES)
    assert sorted(row["strategy"]["kind"] for row in rows) == sorted(NAMES * 4)
    for name in NAMES:
        assert name in r.output
    assert "probe_tokens" in r.output  # probe cost shown with the certainty_probe row


def test_self_certainty_scores_best_of_n_from_the_command_line(tmp_path):
    r = runner.invoke(app, ["eval", "--backend", "scripted", "--limit", "3", "-n", "4", "-s", "best_of_n",
                            "--verifier", "self_certainty", "--out", str(tmp_path / "r"), "--gpu", ""])
    assert r.exit_code == 0, r.output
    assert "verifier=self_certainty" in r.output
