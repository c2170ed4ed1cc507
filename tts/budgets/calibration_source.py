"""Read a calibration source as one model's sample pool: a pool file, a `tts eval` run, a `tts sweep`.

The cross-strategy allocator fits its curves on graded samples of the same model on other
problems. Three sources give them:

* a sample-pool file (``.jsonl`` / ``.jsonl.gz``, :mod:`tts.benchmarks.pool`);
* a past ``tts eval`` run directory (its ``results.jsonl``; every drawn sample once, score = mean
  logprob; :mod:`tts.benchmarks.results_pool`);
* a past ``tts sweep`` directory (``sweep.json``): a pool sweep points at its pool file, a live
  sweep at its run directories ``OUT/live/<model>-seed<s>/`` (the first one holding the model).

With a ``verifier`` (``auto`` scoring its own rules with one), the samples' scores are that
verifier's, read from the runs' rows of strategies configured with it; a pool file cannot say
which verifier its scores came from, so it is refused then.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from tts.benchmarks.pool import ModelPool, PoolError, SamplePool, load_pool
from tts.benchmarks.results_pool import load_results_as_pool
from tts.budgets.allocator import CalibrationError

logger = logging.getLogger(__name__)


def _pool_file(path: Path, verifier: Any) -> SamplePool:
    if verifier is not None:
        name = getattr(verifier, "kind", verifier)
        raise CalibrationError(f"--calibration {path} is a sample-pool file, whose scores cannot be told to come from "
                               f"the verifier {name!r}; calibrate on a tts eval run (or sweep) of best_of_n or "
                               "weighted_vote with that verifier")
    return load_pool(path)


def _sweep_pools(directory: Path, verifier: Any = None) -> list[SamplePool]:
    manifest = json.loads((directory / "sweep.json").read_text())
    source = str(manifest.get("source", ""))
    if source.startswith("pool:"):
        path = Path(source[5:])
        if not path.is_absolute() and not path.exists():
            path = directory / path
        return [load_results_as_pool(path, verifier=verifier) if path.is_dir() else _pool_file(path, verifier)]
    runs = sorted(p for p in (directory / "live").glob("*") if (p / "results.jsonl").is_file())
    if not runs:
        raise CalibrationError(f"sweep {directory} has no live run with results (OUT/live/*/results.jsonl); "
                               "finish the sweep or pass one of its run directories")
    return [load_results_as_pool(r, verifier=verifier) for r in runs]


def load_calibration(source: str | Path, model: str | None = None, verifier: Any = None) -> ModelPool:
    """One model's graded samples from a calibration source (see the module docstring).

    Args:
        source: Pool file, eval run directory (or its results.jsonl), or sweep directory.
        model: The model to calibrate; a source holding one model is used whatever its name
            (with a warning when it differs), one holding several must hold this one.
        verifier: Score the samples by this verifier (name, dict or config) instead of their mean
            logprob; the source must be a run or sweep whose strategies used it.

    Raises:
        CalibrationError: Missing or unreadable source, or no samples of the model (or, with a
            verifier, none scored by it, or a pool file); the message names the source and what
            it has.
    """
    path = Path(source)
    try:
        if (path / "sweep.json").is_file():
            pools = _sweep_pools(path, verifier)
        elif path.is_dir() or path.name == "results.jsonl":
            pools = [load_results_as_pool(path, verifier=verifier)]
        elif path.is_file():
            pools = [_pool_file(path, verifier)]
        else:
            raise CalibrationError(f"--calibration {source}: no such pool file, tts eval run or tts sweep directory")
    except (PoolError, OSError, json.JSONDecodeError) as exc:
        raise CalibrationError(f"--calibration {source}: {exc}") from None
    models = [m for p in pools for m in p.models]
    for pool in pools:
        if model is not None and model in pool.by_model:
            return pool[model]
    if len(models) == 1:
        if model is not None and models[0] != model:
            logger.warning("calibration source %s holds model %r, not %r; using it anyway", source, models[0], model)
        return pools[0][models[0]]
    raise CalibrationError(f"--calibration {source} has models {models}, none of them {model!r}; pass a source "
                           "with this model's samples")
