"""`tts eval` stopped by SIGTERM (kill, timeout, a job scheduler) ends through its cleanup, like Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time


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
