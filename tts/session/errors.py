"""Library errors on one line, saying what to change: the form :func:`tts.solve` and
:class:`~tts.session.Session` raise settings errors in.

A pydantic ``ValidationError`` prints as a multi-line dump with a URL; a caller (an agent, a
server client, a terminal) needs the setting, what is wrong with it and what to change.
:func:`settings_line` makes that line; :class:`SettingsError` carries it. This is the lowest
layer that raises settings errors to callers; the server (``tts.serve.failures.one_line``) and
the CLI (``tts.cli.errors.format_error``) format the same errors in their own words.
"""

from __future__ import annotations

import re
from typing import Any


class SettingsError(ValueError):
    """A setting the library refuses; the one-line message names it and says what to change."""


def settings_line(exc: BaseException, what: str = "") -> str:
    """One line for a settings error: each pydantic error as ``field=value is refused (problem)``, then what
    to change; any other error's first line without links. ``what`` prefixes it (``strategy
    'self_consistency'``).

    Example: ``n=0`` for self-consistency reads
    ``strategy 'self_consistency': n=0 is refused (input should be greater than or equal to 1); change n``.
    """
    from pydantic import ValidationError

    prefix = f"{what}: " if what else ""
    if isinstance(exc, ValidationError):
        parts, fields = [], []
        for e in exc.errors():
            loc = ".".join(str(x) for x in e["loc"] if not isinstance(x, int))
            msg = str(e["msg"])
            msg = msg[:1].lower() + msg[1:]
            if e["type"] == "missing":
                parts.append(f"{loc} is required")
            elif e["type"] == "extra_forbidden":
                parts.append(f"{loc} is not a setting of it")
            elif loc:
                parts.append(f"{loc}={_short(e.get('input'))} is refused ({msg})")
            else:
                parts.append(msg)
            if loc and loc not in fields:
                fields.append(loc)
        change = f"; change {', '.join(fields)}" if fields else ""
        return prefix + "; ".join(parts) + change
    text = str(exc)
    text = re.sub(r"\s*For further information visit \S+", "", text)
    text = re.sub(r"\s*\[type=[^\]]*\]", "", text)
    text = re.sub(r"https?://\S+", "", text)
    return prefix + (" ".join(text.split()) or type(exc).__name__)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
