"""tts as a library keeps vLLM's noise off the terminal: ``tts.solve`` in a plain script.

The engine's processes write the checkpoint-loading bar, Triton and NUMA notices and warnings to
their stderr; outside ``tts eval`` (which has a log file) those lines become records of the
``tts.engine`` logger. At exit Python's resource tracker must find nothing leaked (the engine is
stopped with enough grace to unlink its shared memory and semaphores).

It runs in a fresh interpreter, not on the session's shared engine: the loading bar is printed
when an engine starts and the leak report when the process exits, and both are what is tested.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import logging, sys
import tts

class Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines = []
    def emit(self, record):
        self.lines.append(record.getMessage())

if __name__ == "__main__":
    lines = Lines()
    logging.getLogger("tts.engine").addHandler(lines)
    logging.getLogger("tts.engine").setLevel(logging.INFO)
    sol = tts.solve("What is 7 + 7?", n=2, max_tokens=16, backend={"kind": "vllm", "max_model_len": 512,
                                                                    "kv_cache_gib": 1})
    print("ANSWER", sol.answer is not None or sol.trace is not None, flush=True)
    print("LOGGED", any("Loading" in line for line in lines.lines), flush=True)
"""

NOISE = ("Loading safetensors", "it/s]", "leaked shared_memory", "leaked semaphore", "resource_tracker",
         "Triton is installed", "NUMA binding", "FutureWarning")


@pytest.mark.heavy  # a script that starts an engine of its own: outside `make test`, run with -m heavy
def test_solve_in_a_script_prints_no_engine_noise_and_leaks_nothing(tmp_path):
    pytest.importorskip("vllm")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    (tmp_path / "solve.py").write_text(SCRIPT)
    done = subprocess.run([sys.executable, str(tmp_path / "solve.py")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ANSWER True" in done.stdout
    assert "LOGGED True" in done.stdout, "the loading bar did not reach the tts.engine logger"
    found = [n for n in NOISE if n in done.stderr]
    assert not found, f"{found} on stderr:\n{done.stderr[-3000:]}"
