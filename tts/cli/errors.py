"""Turning library errors into one-line messages and exit code 2, without tracebacks."""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Iterator

import typer
from rich.console import Console

err_console = Console(stderr=True)
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def _user_errors() -> tuple[type[BaseException], ...]:
    from pydantic import ValidationError

    from tts.backends.base import BackendError
    from tts.benchmarks.append_log import CorruptLogError
    from tts.benchmarks.datasets import DatasetError
    from tts.cost.prices import PriceError
    from tts.eval.store import RunMismatchError
    from tts.eval.sweep import SweepError
    from tts.execution.sandbox import SandboxUnavailableError
    from tts.models import ModelError
    from tts.registry import UnknownNameError
    from tts.search.base import StrategyInputError

    return (ValidationError, BackendError, DatasetError, RunMismatchError, CorruptLogError, ModelError, UnknownNameError,
            StrategyInputError, FileNotFoundError, PriceError, SweepError, SandboxUnavailableError)


def format_error(exc: BaseException) -> str:
    """A readable message; pydantic errors become "field: problem" lines."""
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        lines = []
        for e in exc.errors():
            loc = ".".join(str(x) for x in e["loc"] if not isinstance(x, int)) or "config"
            lines.append(f"{loc}: {e['msg']}")
        return "Invalid configuration:\n  " + "\n  ".join(lines)
    return str(exc)


def fail(message: str) -> typer.Exit:
    """Print ``message`` (plain text: ``tts[vllm]`` stays as written) after a red ``error:`` to stderr
    and return the exit to raise (code 2)."""
    from rich.markup import escape

    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(code=2)


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Report expected errors (bad input, unreachable server, a full disk, ...) as messages, not tracebacks."""
    try:
        yield
    except _user_errors() as exc:
        raise fail(format_error(exc)) from None
    except OSError as exc:
        if exc.errno not in _DISK_FULL:
            raise
        where = f" (writing {exc.filename})" if exc.filename else ""
        raise fail(f"no space left on the disk{where}; free some space and run the same command again (tts eval "
                   "and tts sweep resume from the results they saved; --out writes a new run elsewhere).") from None
