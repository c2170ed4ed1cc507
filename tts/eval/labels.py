"""Config labels as reports group and sort them: one curve per config whatever its n, and names
ordered with the numbers inside them read as numbers."""

from __future__ import annotations

import re


def config_line(label: str) -> str:
    """The curve (table line) a config belongs to: its label without its ``@n``, so that configs
    that differ only in n share a line: ``best_of_n@16,verifier=arithmetic`` ->
    ``best_of_n,verifier=arithmetic`` (a run-name suffix, ``self_consistency@16 [sample]``, is kept)."""
    base, bracket, run = label.partition(" [")
    head, at, rest = base.partition("@")
    settings = rest.partition(",")[2] if at else ""
    line = f"{head},{settings}" if settings else head
    return f"{line} [{run}" if bracket else line


def natural_key(*texts: str) -> list[int | str]:
    """Sort key that orders numbers inside names by value (``max_tokens=4000`` before
    ``max_tokens=16000``, level 2 before level 10)."""
    return [int(part) if part.isdigit() else part for text in texts for part in re.split(r"(\d+)", text)]
