"""Append-only JSONL logs that a killed writer may have left half-written.

Results, sample logs and pools are all written one JSON object per line and fsync-ed as they go;
this reader tells a kill mid-write (only the last line can be damaged: drop it) from corruption
(a damaged line before the last: refuse, never silently truncate what follows).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


class CorruptLogError(ValueError):
    """A results or samples log damaged before its last line (not by a kill mid-write)."""


def read_append_log(path: Path, repair: bool = False) -> list[dict[str, Any]]:
    """The JSON rows of an append-only log that a killed writer may have left half-written.

    A SIGKILL can only damage the line being written, so a last line that is not a complete JSON
    object ending in a newline is dropped (with ``repair``, also cut off the file so that later
    appends start on a clean line). A damaged line anywhere else is not a kill but corruption,
    and is refused rather than silently dropping what follows it.

    Args:
        path: The JSONL file.
        repair: Truncate the damaged last line in place.

    Raises:
        CorruptLogError: A line before the last is not a JSON object; the message names file and line.
    """
    lines = path.read_bytes().splitlines(keepends=True)
    rows: list[dict[str, Any]] = []
    good_bytes = 0
    for lineno, raw in enumerate(lines, start=1):
        if not raw.strip():
            good_bytes += len(raw)
            continue
        try:
            row = json.loads(raw)
        except json.JSONDecodeError:
            row = None
        if not isinstance(row, dict) or not raw.endswith(b"\n"):
            if lineno < len(lines):
                raise CorruptLogError(f"{path}, line {lineno}: not a JSON object; fix or delete that line")
            logger.warning("ignoring a half-written last line of %s", path)
            if repair:
                with path.open("r+b") as fh:
                    fh.truncate(good_bytes)
            break
        rows.append(row)
        good_bytes += len(raw)
    return rows
