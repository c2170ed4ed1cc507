"""``tts eval`` where bubblewrap is missing (issue 48): a run that will execute model-written code is
refused in one line before any engine starts, and the opt-outs by name (``--set
unsafe_no_sandbox=true`` for the strategies, ``--set data.unsafe_no_sandbox=true`` for HumanEval's
grading) really run it. ``bwrap_path`` is patched to None, so these run with or without bubblewrap."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tts.backends import factory
from tts.cli.app import app
from tts.execution import sandbox

runner = CliRunner(env={"COLUMNS": "220"})


@pytest.fixture
def no_bwrap(monkeypatch):
    """No bubblewrap, and a count of the generators (engines) the run started."""
    monkeypatch.setattr(sandbox, "bwrap_path", lambda: None)
    started = []
    real = factory.create_generator

    def counting(*args, **kwargs):
        started.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(factory, "create_generator", counting)
    return started


@pytest.mark.parametrize(("benchmark", "strategy", "names"), [
    ("humaneval", "self_consistency", ["humaneval's grading runs"]),
    ("humaneval", "exec_vote", ["exec_vote, humaneval's grading run"]),
    ("humaneval", "public_tests", ["public_tests, humaneval's grading run"]),
    ("chains", "program_vote", ["program_vote runs"]),
])
def test_without_bubblewrap_a_run_that_runs_code_stops_in_one_line_before_the_engine(
        no_bwrap, tmp_path, benchmark, strategy, names):
    out = tmp_path / "run"
    r = runner.invoke(app, ["eval", "--benchmark", benchmark, "--backend", "scripted", "--limit", "2",
                            "-s", strategy, "-n", "2", "--out", str(out)])
    assert r.exit_code == 2, (r.output, r.exception)
    assert no_bwrap == []  # refused before any generator was built
    message = r.output.strip()
    assert message.startswith("error:") and "\n" not in message and "Traceback" not in message
    assert all(name in message for name in names)
    assert "apt-get install bubblewrap" in message
    assert ("--set data.unsafe_no_sandbox=true" in message) == (benchmark == "humaneval")
    assert ("--set unsafe_no_sandbox=true" in message) == (strategy != "self_consistency")
    assert not (out / "results.jsonl").exists() or not (out / "results.jsonl").read_text().strip()


def test_a_run_that_runs_no_code_needs_no_bubblewrap(no_bwrap, tmp_path):
    r = runner.invoke(app, ["eval", "--benchmark", "chains", "--backend", "scripted", "--limit", "2",
                            "-s", "self_consistency", "-n", "2", "--out", str(tmp_path / "run")])
    assert r.exit_code == 0, r.output
    assert len(no_bwrap) == 1


def test_the_grading_opt_out_by_name_reaches_humanevals_grader(no_bwrap, tmp_path):
    """``--set data.unsafe_no_sandbox=true`` used to reach only the benchmark object that loaded the
    problems, not the one that graded them: the run still refused after generating."""
    out = tmp_path / "run"
    r = runner.invoke(app, ["eval", "--benchmark", "humaneval", "--backend", "scripted", "--limit", "2",
                            "-s", "self_consistency", "-n", "2", "--set", "data.unsafe_no_sandbox=true",
                            "--out", str(out)])
    assert r.exit_code == 0, (r.output, r.exception)
    rows = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 2
    # Graded by running the checks (unsandboxed): the scripted model's reference programs pass.
    assert any(s["outcome"] == "correct" for row in rows for s in row["trace"]["samples"])


def test_the_strategies_opt_out_by_name_runs_their_programs(no_bwrap, tmp_path):
    out = tmp_path / "run"
    r = runner.invoke(app, ["eval", "--benchmark", "chains", "--backend", "scripted", "--limit", "2",
                            "-s", "program_vote", "-n", "2", "--set", "unsafe_no_sandbox=true", "--out", str(out)])
    assert r.exit_code == 0, (r.output, r.exception)
    rows = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(row["trace"]["notes"]["executions"] > 0 for row in rows)


def test_checks_the_sandbox_could_not_run_are_ungraded_in_the_table_and_in_tts_show(monkeypatch, tmp_path):
    """A sandbox that cannot start (status ``sandbox_failed``) is the machine's failure: the rows are
    ungraded, never wrong, the table counts them apart and says so, and `tts show` gives the reason."""
    monkeypatch.setattr(sandbox, "bwrap_path", lambda: "/usr/bin/bwrap")

    def no_sandbox_starts(programs, limits, workers=4, unsafe_no_sandbox=False):
        return [sandbox.Execution("sandbox_failed", None, "", "", "bwrap: Can't fork", 0.01) for _ in programs]

    monkeypatch.setattr("tts.benchmarks.humaneval_grading.run_many", no_sandbox_starts)
    out = tmp_path / "run"
    r = runner.invoke(app, ["eval", "--benchmark", "humaneval", "--backend", "scripted", "--limit", "3",
                            "-s", "self_consistency", "-n", "2", "--out", str(out)])
    assert r.exit_code == 0, (r.output, r.exception)
    rows = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    coded = [row for row in rows if row["answer"] is not None]
    assert coded and all(row["outcome"] == "ungraded" and not row["correct"] for row in coded)
    assert all(row["grade_reason"] == "sandbox_failed: bwrap: Can't fork" for row in coded)
    assert not any(s["outcome"] == "wrong" for row in rows for s in row["trace"]["samples"])
    assert "ungraded" in r.output and f"sandbox failures: {len(coded)} answer(s)" in r.output
    shown = runner.invoke(app, ["show", str(out), coded[0]["problem_id"]])
    assert "why: sandbox_failed: bwrap: Can't fork" in shown.output and "not a wrong answer" in shown.output
