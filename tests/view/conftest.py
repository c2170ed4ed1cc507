"""Runs on the scripted backend for the page tests: one ``tts eval`` of every strategy that runs on
the demo benchmark, a collaboration graph, ``auto`` from a calibration run, and HumanEval's code
strategies (where bubblewrap is installed); each made once per test session."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.view.scripted_runs import CODE, DEMO, EXAMPLES, eval_run
from tts.execution.sandbox import bwrap_path


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory) -> Path:
    strategies = [a for s in DEMO for a in ("-s", s)]
    return eval_run(tmp_path_factory.mktemp("demo") / "run", "--benchmark", "demo", "--limit", "1", "-n", "4",
                    *strategies)


@pytest.fixture(scope="session")
def graph_run(tmp_path_factory) -> Path:
    return eval_run(tmp_path_factory.mktemp("graph") / "run", "--graph", str(EXAMPLES / "sample_then_fuse.yaml"),
                    "--benchmark", "demo", "--limit", "1")


@pytest.fixture(scope="session")
def auto_run(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("auto")
    cal = eval_run(base / "cal", "--benchmark", "demo", "--limit", "6", "-s", "self_consistency", "-s", "best_of_n",
                   "-n", "8", "--max-tokens", "48")
    return eval_run(base / "run", "--benchmark", "demo", "--limit", "1", "-s", "auto", "--budget", "6000",
                    "--calibration", str(cal), "--set", "strategies=[self_consistency, best_of_n]", "--max-tokens", "48")


@pytest.fixture(scope="session")
def humaneval_run(tmp_path_factory) -> Path:
    if bwrap_path() is None:
        pytest.skip("bubblewrap is not installed (make install): HumanEval's programs are checked in its sandbox")
    strategies = [a for s in ("self_consistency", *CODE) for a in ("-s", s)]
    return eval_run(tmp_path_factory.mktemp("humaneval") / "run", "--benchmark", "humaneval", "--limit", "2",
                    "-n", "4", *strategies)
