"""The CLI's terminal logging: rich-formatted records, each shown once.

Some libraries give their loggers a terminal handler of their own and still let records propagate
to the root logger (huggingface_hub does, on import): every warning they log would then appear
twice, once plain and once through the CLI's rich handler. The rich handler skips what such a
handler has already written (:class:`ShownOnce`).
"""

from __future__ import annotations

import logging
import sys


class ShownOnce(logging.Filter):
    """Drops a record that a terminal handler below the root logger has already written."""

    def filter(self, record: logging.LogRecord) -> bool:
        lg: logging.Logger | None = logging.getLogger(record.name)
        while lg is not None and lg is not logging.getLogger():
            if any(_writes_to_terminal(h) and record.levelno >= h.level for h in lg.handlers):
                return False
            if not lg.propagate:
                break
            lg = lg.parent
        return True


def _writes_to_terminal(handler: logging.Handler) -> bool:
    return type(handler) is logging.StreamHandler and getattr(handler, "stream", None) in (
        sys.stderr, sys.stdout, sys.__stderr__, sys.__stdout__)


def configure(verbose: bool) -> None:
    """Log to the terminal through rich at WARNING (INFO with ``verbose``), each record once."""
    level = logging.INFO if verbose else logging.WARNING
    try:
        from rich.logging import RichHandler

        handler: logging.Handler = RichHandler(show_path=False)
    except ImportError:  # pragma: no cover - rich is a dependency
        handler = logging.StreamHandler()
    handler.addFilter(ShownOnce())
    logging.basicConfig(level=level, format="%(message)s", handlers=[handler])
