"""A run stopped by Ctrl-C or SIGTERM ends with one line: how far it got, where its results are,
and that the same command resumes it.

SIGTERM (``kill``, ``timeout``, a job scheduler) raises :class:`SignalExit` in the main thread
(:func:`exit_on_signal`, installed by :func:`tts.cli.app.main`), so that every ``finally`` block
runs as with Ctrl-C: the results store is closed and the engine shut down. :func:`said_on_stop`
then says what was kept. Neither is a failure: the engine log's tail is shown only when an engine
failed (:mod:`tts.backends.engine_log`).
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import typer

INTERRUPTED = 128 + signal.SIGINT
"""Exit status of a run stopped by Ctrl-C (the shell's convention, 128 + the signal)."""


class SignalExit(SystemExit):
    """SystemExit(128 + signal) raised by :func:`exit_on_signal`; remembers the signal's name."""

    def __init__(self, signum: int) -> None:
        super().__init__(128 + signum)
        self.signame = signal.Signals(signum).name


def exit_on_signal(signum: int, frame: object) -> None:
    """A signal handler: end the command through its ``finally`` blocks, like Ctrl-C."""
    _quiet_engines()
    raise SignalExit(signum)


def interrupt_on_signal(signum: int, frame: object) -> None:
    """Ctrl-C's handler: Python's own (KeyboardInterrupt), the engines told first (below)."""
    _quiet_engines()
    raise KeyboardInterrupt


def _quiet_engines() -> None:
    """A stop is no engine failure: the engines' shutdown errors stay in the engine log, off the
    terminal (:func:`tts.backends.engine_log.mark_stopping`)."""
    from tts.backends.engine_log import mark_stopping  # stdlib only; lazy so `tts --help` stays light

    mark_stopping()


@dataclass
class RunProgress:
    """What a stopped run reports: its directory and, once known, how many of its ``unit`` (an
    eval's problems, a sweep's cells) are done, of how many.

    Call it as a progress callback (``progress(done, total)``). ``saved`` counts what the run's
    files hold, when the command can say: the stop may land after a batch was written and before
    its progress was reported, and the line must give what a resume will skip.
    """

    out: Path | None = None
    total: int | None = None
    done: int | None = None
    unit: str = "problems"
    saved: Callable[[], int] | None = None

    def __call__(self, done: int, total: int) -> None:
        self.done, self.total = done, total

    def count_done(self) -> int:
        """What the run's files hold (``saved``), else the last progress reported, else 0."""
        if self.saved is not None:
            with contextlib.suppress(OSError, ValueError):  # unreadable or damaged: the progress heard
                return self.saved()
        return self.done or 0

    def sentence(self, how: str) -> str:
        """``stopped by SIGTERM after 48 of 100 problems; results so far in runs/X; run the same
        command to resume`` (shorter when the stop came before the run had a directory)."""
        if self.out is None:
            return f"stopped by {how} before the run started"
        of = f" of {self.total}" if self.total is not None else ""
        return (f"stopped by {how} after {self.count_done()}{of} {self.unit}; results so far in {self.out}; "
                "run the same command to resume")


@contextlib.contextmanager
def said_on_stop(progress: RunProgress) -> Iterator[None]:
    """Print ``progress``'s one line when the block is stopped by Ctrl-C (then exit 130) or by a
    signal handled by :func:`exit_on_signal` (then exit 128 + that signal)."""
    try:
        yield
    except KeyboardInterrupt:
        typer.echo(progress.sentence("Ctrl-C"), err=True)
        raise typer.Exit(INTERRUPTED) from None
    except SignalExit as exc:
        typer.echo(progress.sentence(exc.signame), err=True)
        raise
