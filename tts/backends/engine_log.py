"""Keep an engine's start-up noise off the terminal: its logs, warnings and processes' stderr go to a file.

A vLLM engine fills the terminal before the first progress bar: Triton and NUMA-binding notices,
FutureWarnings, one copy per engine process. Inside :func:`engine_log`:

1. Records of vLLM, torch, transformers, Triton and the Hugging Face hub (and tts's own engine
   messages) go to the log file; ERROR records (every level with ``tts -v``) still reach the
   terminal through the root logger's handlers.
2. Python warnings raised outside the tts package go to the file.
3. While an engine starts (:func:`capture_engine_output`, used by
   :func:`tts.backends.vllm.launch_engine`), file descriptor 2 points at the log: the engine's
   processes are spawned then and keep it as their stderr for their whole life, so their import-time
   warnings and C++ messages land there. Their stdout stays the terminal, and their vLLM loggers
   (configured through ``VLLM_LOGGING_CONFIG_PATH``, see :func:`child_environment`) write to the file
   and send ERROR records to that stdout.

Everything (handlers, levels, ``warnings.showwarning``, the descriptor) is restored on exit. When
the block fails (an exception, not a stop by Ctrl-C or SIGTERM) after an engine started in it, the
lines the log gained during it are echoed to the terminal, so the cause of a failed start is never
only in the file. Without an engine (the scripted or openai backend, a refusal before the start)
there is no engine failure to explain: the error's own message says it.

Outside such a block (tts used as a library: ``tts.solve``, ``tts.Session``, a generator of one's
own), an engine start still keeps descriptor 2 off the terminal: its processes' stderr (the
checkpoint-loading bar, Triton and NUMA notices, warnings) becomes INFO records of the logger
``tts.engine`` (:data:`ENGINE_LOGGER`), read from a pipe for the engine's whole life. Python's
default leaves INFO unshown; ``logging.basicConfig(level=logging.INFO)`` shows them. A failed
start logs its last lines at ERROR. Python's resource tracker is started before the redirect, so
that its own warnings (leaked shared memory or semaphores, at exit) still reach the real stderr.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import threading
import time
import warnings
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

ENGINE_LOG = "engine.log"
"""File name of the engine log in a run directory."""
ENGINE_LOGGER = "tts.engine"
"""Logger of the engine processes' stderr lines when no :func:`engine_log` block is active."""

# Logger name -> the lowest level shown on the terminal (without -v); everything else goes to the file.
# Their descendants that have handlers of their own (torch gives many its own stderr handler) too.
ROUTED_LOGGERS: dict[str, int] = {
    "vllm": logging.ERROR,
    "torch": logging.ERROR,
    "transformers": logging.ERROR,
    "triton": logging.ERROR,
    "huggingface_hub": logging.ERROR,
    "tts.backends": logging.WARNING,
}
# Loggers whose INFO records the file gets (the others keep their own levels: lowering torch's
# would wake up its many sub-loggers).
_INFO_TO_FILE = ("vllm", "tts.backends")
_FORMAT = "%(asctime)s %(levelname)s [%(process)d] %(name)s: %(message)s"
_TAIL_LINES = 30
_TTS_DIR = str(Path(__file__).resolve().parents[1]) + os.sep
_lock = threading.Lock()
_active: list[_EngineLog] = []


@dataclass
class _EngineLog:
    path: Path
    terminal_level: int
    config_path: str
    start_size: int
    handler: logging.Handler
    saved: dict[str, tuple[list[logging.Handler], int, bool]] = field(default_factory=dict)
    engine_started: bool = False
    """Whether an engine started in the block (:func:`capture_engine_output`): only then can a
    failure be the engine's, and the log's tail worth showing."""


class EngineFileHandler(logging.FileHandler):
    """The log file's handler (a class of its own, so that the block's end can tell it from others)."""


class EngineTerminalHandler(logging.StreamHandler):
    """An engine process's handler for the records that stay on the terminal (its stdout).

    Once the run is being stopped (Ctrl-C, SIGTERM: :func:`mark_stopping` creates ``stop_marker``)
    it writes nothing: an engine torn down mid-step logs its workers' end as a fatal error with a
    traceback (``RuntimeError: cancelled``), which is no error of a stopped run. The file keeps it.
    """

    def __init__(self, stream: Any = None, stop_marker: str | None = None) -> None:
        super().__init__(stream)
        self.stop_marker = stop_marker

    def emit(self, record: logging.LogRecord) -> None:
        if self.stop_marker is not None and os.path.exists(self.stop_marker):
            return
        super().emit(record)


class _ToTerminal(logging.Handler):
    """Hands records at or above its level to the root logger's handlers (the terminal's)."""

    def emit(self, record: logging.LogRecord) -> None:
        handlers = logging.getLogger().handlers or [logging.lastResort]
        for handler in handlers:
            if handler is not None and record.levelno >= handler.level:
                handler.handle(record)


def _terminal_level() -> int:
    """ERROR, or INFO when the user asked for details (``tts -v`` sets the tts loggers to INFO)."""
    return logging.INFO if logging.getLogger("tts").isEnabledFor(logging.INFO) else logging.ERROR


def _stop_marker(config_path: str) -> str:
    """The file whose existence tells a block's engine processes that the run is being stopped."""
    return config_path + ".stopping"


def _vllm_logging_config(path: Path, terminal_level: int, config_path: str) -> dict[str, Any]:
    """A ``logging.config.dictConfig`` for the vLLM logger of every engine process."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"tts_engine": {"format": _FORMAT}},
        "handlers": {
            "tts_engine_file": {"class": f"{__name__}.EngineFileHandler", "filename": str(path), "mode": "a",
                                "encoding": "utf-8", "formatter": "tts_engine", "level": "DEBUG"},
            # The processes' stderr is the log file itself; their stdout is the terminal.
            "tts_engine_terminal": {"class": f"{__name__}.EngineTerminalHandler", "stream": "ext://sys.stdout",
                                    "stop_marker": _stop_marker(config_path),
                                    "formatter": "tts_engine", "level": logging.getLevelName(terminal_level)},
        },
        "loggers": {"vllm": {"handlers": ["tts_engine_file", "tts_engine_terminal"], "propagate": False,
                             "level": "DEBUG" if os.environ.get("VLLM_LOGGING_LEVEL", "").upper() == "DEBUG" else "INFO"}},
    }


def _routed_loggers() -> dict[str, int]:
    """The routed loggers and the descendants that would bypass them (own handlers, no propagation)."""
    names = dict(ROUTED_LOGGERS)
    for name, lg in list(logging.Logger.manager.loggerDict.items()):
        if not isinstance(lg, logging.Logger) or not (lg.handlers or not lg.propagate):
            continue
        parent = next((r for r in ROUTED_LOGGERS if name.startswith(r + ".")), None)
        if parent is not None:
            names[name] = ROUTED_LOGGERS[parent]
    return names


def _route_loggers(state: _EngineLog) -> None:
    for name, quiet_level in _routed_loggers().items():
        lg = logging.getLogger(name)
        state.saved[name] = (list(lg.handlers), lg.level, lg.propagate)
        terminal = _ToTerminal(min(quiet_level, state.terminal_level))
        lg.handlers = [state.handler, terminal]
        if name in _INFO_TO_FILE:
            lg.setLevel(min(logging.INFO, lg.getEffectiveLevel()))
        lg.propagate = False


def _restore_loggers(state: _EngineLog) -> None:
    """Each routed logger as it was, plus the handlers a library attached during the block.

    vLLM's own logging configuration (our dictConfig, applied in this process too) is dropped; a
    library that attached a handler of its own (transformers does on first use) keeps it, and
    keeps the propagation it set (such libraries turn it off).
    """
    ours = (EngineFileHandler, EngineTerminalHandler, _ToTerminal)
    for name, (handlers, level, propagate) in state.saved.items():
        lg = logging.getLogger(name)
        foreign = [h for h in lg.handlers if h not in handlers and h is not state.handler and not isinstance(h, ours)]
        for handler in lg.handlers:
            if isinstance(handler, EngineFileHandler):
                handler.close()
        lg.handlers = handlers + foreign
        lg.setLevel(level)
        lg.propagate = propagate and not foreign
    state.handler.close()


def _log_warning(state: _EngineLog, previous: Any) -> Any:
    def showwarning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                    file: Any = None, line: str | None = None) -> None:
        if file is not None or str(filename).startswith(_TTS_DIR):
            previous(message, category, filename, lineno, file, line)  # tts's own warnings stay visible
            return
        text = warnings.formatwarning(message, category, filename, lineno, line).rstrip()
        state.handler.handle(logging.makeLogRecord(
            {"name": "py.warnings", "levelno": logging.WARNING, "levelname": "WARNING", "msg": text}))

    return showwarning


def _tail_since(path: Path, offset: int) -> list[str]:
    try:
        with path.open("rb") as fh:
            fh.seek(offset)
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if line.strip()][-_TAIL_LINES:]


@contextmanager
def engine_log(path: Path | str) -> Iterator[Path]:
    """Send engine noise to ``path`` (appended) while the block runs; errors stay on the terminal.

    Args:
        path: The log file, e.g. ``OUT/engine.log`` (its directory is created).

    Yields:
        The log file's path.

    Example:
        >>> with engine_log(run_dir / ENGINE_LOG):  # doctest: +SKIP
        ...     result = run_eval(config, run_dir)
    """
    path = Path(path).absolute()
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = EngineFileHandler(path, mode="a", encoding="utf-8", delay=True)
    handler.setFormatter(logging.Formatter(_FORMAT))
    terminal_level = _terminal_level()
    fd, config_path = tempfile.mkstemp(prefix="tts-vllm-logging-", suffix=".json")
    with os.fdopen(fd, "w") as fh:
        json.dump(_vllm_logging_config(path, terminal_level, config_path), fh)
    state = _EngineLog(path, terminal_level, config_path, path.stat().st_size if path.exists() else 0, handler)
    previous_showwarning = warnings.showwarning
    with _lock:
        _route_loggers(state)
        warnings.showwarning = _log_warning(state, previous_showwarning)
        _active.append(state)
    failed = False  # a stop (Ctrl-C, SIGTERM's SystemExit) is no failure: no tail for it
    try:
        yield path
    except Exception:
        failed = True
        raise
    finally:
        with _lock:
            _active.remove(state)
            if warnings.showwarning is not previous_showwarning:
                warnings.showwarning = previous_showwarning
            _restore_loggers(state)
        for leftover in (config_path, _stop_marker(config_path)):
            with suppress(FileNotFoundError):
                os.unlink(leftover)
        if failed and state.engine_started:
            tail = _tail_since(path, state.start_size)
            if tail:
                logger.error("the engine log %s ends with:\n%s", path, "\n".join(tail))


def mark_stopping() -> None:
    """Tell the engines of every active block that the run is being stopped (see
    :class:`EngineTerminalHandler`); called by the CLI's Ctrl-C and SIGTERM handlers."""
    with _lock:
        markers = [_stop_marker(state.config_path) for state in _active]
    for marker in markers:
        with suppress(OSError):
            Path(marker).touch()


def active_log() -> Path | None:
    """The log file of the innermost :func:`engine_log` block, or None outside one."""
    with _lock:
        return _active[-1].path if _active else None


def child_environment() -> dict[str, str]:
    """Environment for engine processes started now: their vLLM logging config, inside a block.

    Empty outside :func:`engine_log`, and when the user turned vLLM's logging configuration off
    (``VLLM_CONFIGURE_LOGGING=0``, with which vLLM refuses a config file) or gave their own
    (a user's ``VLLM_LOGGING_CONFIG_PATH`` wins anyway).
    """
    with _lock:
        state = _active[-1] if _active else None
    if state is None or os.environ.get("VLLM_CONFIGURE_LOGGING", "1") == "0":
        return {}
    return {"VLLM_LOGGING_CONFIG_PATH": state.config_path}


class _StderrToLogger(threading.Thread):
    """Reads an engine's stderr pipe until its last writer exits, one log record per line.

    Lines read while the start-up redirect is on are held and logged once it is off
    (:meth:`release`): a handler writing to this process's stderr would otherwise write into the
    pipe it reads. The tqdm bars' carriage returns end lines too.
    """

    def __init__(self, read_fd: int) -> None:
        super().__init__(name="tts-engine-stderr", daemon=True)
        self._fd = read_fd
        self._lock = threading.Lock()
        self._held: list[str] | None = []
        self.tail: deque[str] = deque(maxlen=_TAIL_LINES)
        self._log = logging.getLogger(ENGINE_LOGGER)

    def run(self) -> None:
        pending = b""
        with os.fdopen(self._fd, "rb", buffering=0) as pipe:
            while chunk := pipe.read(65536):
                *lines, pending = (pending + chunk).replace(b"\r", b"\n").split(b"\n")
                for line in lines:
                    self._line(line)
        self._line(pending)

    def _line(self, raw: bytes) -> None:
        text = raw.decode("utf-8", "replace").rstrip()
        if not text.strip():
            return
        with self._lock:
            self.tail.append(text)
            if self._held is not None:
                self._held.append(text)
                return
        self._log.info("%s", text)

    def release(self) -> None:
        """Log the held lines and log every later line as it comes."""
        with self._lock:
            held, self._held = self._held or [], None
        for text in held:
            self._log.info("%s", text)


def _start_resource_tracker() -> None:
    """Start multiprocessing's resource tracker now, with this process's real stderr.

    The engine's processes would start it inside the redirect; it outlives this process and
    reports leaked shared memory and semaphores at exit, which must stay visible.
    """
    try:
        from multiprocessing import resource_tracker

        resource_tracker.ensure_running()
    except Exception:  # no tracker on this platform: nothing to keep visible
        logger.debug("resource tracker not started", exc_info=True)


@contextmanager
def descriptor_pointed_at(which: int, fd: int) -> Iterator[None]:
    """Point descriptor ``which`` (1: stdout, 2: stderr) at ``fd`` while the block runs, then give
    it back (Python's buffered stream flushed at both ends, so text lands where it was written
    for). What C and C++ code writes to the descriptor (an engine's workers, a solver) follows it."""
    saved = os.dup(which)
    try:
        _flush(which)
        os.dup2(fd, which)
        try:
            yield
        finally:
            _flush(which)
            os.dup2(saved, which)
    finally:
        os.close(saved)


@contextmanager
def _capture_to_logger() -> Iterator[None]:
    """Point descriptor 2 at a pipe read into the ``tts.engine`` logger while the block runs."""
    read_fd, write_fd = os.pipe()
    reader = _StderrToLogger(read_fd)
    reader.start()
    failed = False
    try:
        with descriptor_pointed_at(2, write_fd):
            try:
                yield
            except Exception:  # not a stop (KeyboardInterrupt, SystemExit, GeneratorExit)
                failed = True
                raise
    finally:
        os.close(write_fd)  # the engine's processes hold the other copies: EOF when they exit
        reader.release()
        if failed:
            reader.join(timeout=2)  # a failed start's processes are gone or going: read their last words
            if reader.tail:
                logging.getLogger(ENGINE_LOGGER).error("the engine's processes wrote:\n%s", "\n".join(reader.tail))


@contextmanager
def capture_engine_output() -> Iterator[None]:
    """Point file descriptor 2 at the active engine log while the block runs (engine start-up).

    Processes spawned in the block inherit the log as their stderr for their whole life; this
    process gets its own stderr back at the end. Outside :func:`engine_log`, their stderr goes to
    the ``tts.engine`` logger instead (module docstring). When descriptor 2 is closed (no stderr),
    it does nothing.
    """
    try:
        os.fstat(2)
    except OSError:
        yield
        return
    _start_resource_tracker()
    with _lock:
        state = _active[-1] if _active else None
    if state is None:
        with _capture_to_logger():
            yield
        return
    state.engine_started = True
    path = state.path
    log_fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(log_fd, f"----- {time.strftime('%Y-%m-%d %H:%M:%S')} engine start (pid {os.getpid()}): "
                         "output of the engine's processes follows -----\n".encode())
        with descriptor_pointed_at(2, log_fd):
            yield
    finally:
        os.close(log_fd)


def _flush(which: int) -> None:
    """Flush Python's buffered stdout (1) or stderr (2), so that text lands on the descriptor it
    was written for."""
    for stream in (sys.stdout, sys.__stdout__) if which == 1 else (sys.stderr, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass
