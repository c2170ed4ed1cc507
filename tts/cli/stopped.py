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
import json
import signal
from collections.abc import Iterator
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
    raise SignalExit(signum)


@dataclass
class RunProgress:
    """What a stopped run reports: its directory and, once known, problems done of the total.

    Call it as an eval progress callback (``progress(done, total)``); a run whose progress is
    not counted in problems (an allocated run) leaves ``done`` None and the results file counts.
    """

    out: Path | None = None
    total: int | None = None
    done: int | None = None

    def __call__(self, done: int, total: int) -> None:
        self.done, self.total = done, total

    def problems_done(self) -> int:
        """Problems done: as last reported, else the distinct problems in OUT/results.jsonl."""
        if self.done is not None:
            return self.done
        rows = self.out / "results.jsonl" if self.out is not None else None
        if rows is None or not rows.is_file():
            return 0
        ids = set()
        with rows.open(encoding="utf-8") as fh:
            for line in fh:
                with contextlib.suppress(ValueError, AttributeError):
                    ids.add(json.loads(line).get("problem_id"))
        ids.discard(None)
        return len(ids)

    def sentence(self, how: str) -> str:
        """``stopped by SIGTERM after 48 of 100 problems; results so far in runs/X; run the same
        command to resume`` (shorter when the stop came before the run had a directory)."""
        if self.out is None or self.total is None:
            return f"stopped by {how} before the run started"
        return (f"stopped by {how} after {self.problems_done()} of {self.total} problems; results so far in "
                f"{self.out}; run the same command to resume")


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
