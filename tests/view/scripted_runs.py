"""What the page tests share: the strategies each scripted run holds, running ``tts eval`` into a
folder, reading its rows, and writing a problem's page with ``tts show --html``."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from tts.cli.app import app

runner = CliRunner(env={"COLUMNS": "200"})
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "graphs"

DEMO = ("ab_mcts", "beam", "best_of_n", "budget_forcing", "certainty_probe", "deepconf", "dvts", "ets", "aggregate",
        "genselect", "generative_verification", "lookahead", "mcts", "particle_filtering", "particle_gibbs", "rebase",
        "revision", "self_consistency", "program_vote", "tir", "usc", "weighted_vote", "tool_vote")
"""Registered strategies that run on the demo benchmark as they are."""
CODE = ("exec_vote", "public_tests", "codet")
"""Strategies that need HumanEval's tests (and the sandbox)."""


def eval_run(out: Path, *args: str) -> Path:
    r = runner.invoke(app, ["eval", "--backend", "scripted", "--out", str(out), *args])
    assert r.exit_code == 0, r.output
    return out


def rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]




def show_html(run: Path, problem: str, out: Path, *extra: str) -> str:
    """``tts show RUN PROBLEM --html --out OUT``'s page."""
    r = runner.invoke(app, ["show", str(run), problem, "--html", "--out", str(out), *extra])
    assert r.exit_code == 0, r.output
    assert f"wrote {out}" in r.output.replace("\n", "")
    return out.read_text()
