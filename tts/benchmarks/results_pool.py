"""A past ``tts eval`` run as a sample pool: every drawn sample once, with its grade and length.

An eval run writes one ``results.jsonl`` row per (problem, strategy config); the row's trace holds
the samples that config aggregated. Configs of one run share one list of samples per problem (the
runner draws max(n) samples once and each config takes the first n), so the row with the MOST
samples holds all of them and the others hold prefixes of it. :func:`pool_rows_from_results` keeps
that row per (model, problem) and emits one pool row per sample::

    {"problem_id", "model", "sample_idx", "answer", "correct", "num_tokens", "score", "gold_answer",
     "prompt_tokens"}

``sample_idx`` is the sample's position in generation order, ``correct`` comes from the sample's
graded ``outcome`` (``"no_answer"`` counts as wrong), ``num_tokens`` from its
``completion_tokens``, ``score`` from its ``mean_logprob`` (or null) or, with a ``verifier``, from
the verifier's score of it (the row's ``trace.scores``; only rows of strategies configured with
that very verifier are read), and ``prompt_tokens`` from
the row's first request (the problem's prompt as the engine counted it, or null; ``auto`` can read
it as a difficulty feature, ``prompt_length``). The result is an ordinary
pool (:mod:`tts.benchmarks.pool`), so a past run can calibrate the offline allocator
(:mod:`tts.budgets.offline_plan`) or be replayed by ``tts budget simulate``.

Example:
    >>> pool = load_results_as_pool("runs/math500-sc")                     # doctest: +SKIP
    >>> mp = pool[pool.models[0]]                                           # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import logging
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from tts.benchmarks.append_log import read_append_log
from tts.benchmarks.pool import PoolError, SamplePool, load_pool

logger = logging.getLogger(__name__)

RESULTS_FILE = "results.jsonl"
ScoreField = Literal["mean_logprob", "none"]
_CORRECT = {"correct": True, "wrong": False, "no_answer": False, "ungraded": None}


def _iid_samples(row: dict[str, Any]) -> bool:
    """Whether the row's samples are independent draws (a voting strategy's), not a search's leaves.

    The strategy says so through its ``pool_rule``; kinds this installation does not know are left
    out rather than guessed.
    """
    from tts.registry import STRATEGIES, UnknownNameError

    kind = (row.get("strategy") or {}).get("kind")
    try:
        return STRATEGIES.load(str(kind)).pool_rule is not None
    except UnknownNameError:
        return False


def _prompt_tokens(row: dict[str, Any]) -> int | None:
    """The prompt tokens of the row's first request (one prompt, whatever the row's n), or None."""
    shapes = (row.get("usage") or {}).get("shapes") or []
    value = shapes[0].get("prompt_tokens") if shapes and isinstance(shapes[0], dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _samples(row: dict[str, Any]) -> list[dict[str, Any]]:
    trace = row.get("trace")
    samples = trace.get("samples") if isinstance(trace, dict) else None
    return samples if isinstance(samples, list) else []


def _is_prefix(short: list[dict[str, Any]], long: list[dict[str, Any]]) -> bool:
    keys = ("text", "answer", "completion_tokens")
    return all(tuple(a.get(k) for k in keys) == tuple(b.get(k) for k in keys) for a, b in zip(short, long))


def _verifier_dump(value: Any) -> dict[str, Any] | None:
    """A verifier config (a name, a dict or a config) in its full form, every default filled in,
    so that two spellings of one verifier compare equal; None for none or one this installation
    cannot read."""
    if value is None:
        return None
    from tts.config import parse_verifier_config

    try:
        return parse_verifier_config(value).model_dump()
    except ValueError:
        return None


def _has_scores(row: dict[str, Any]) -> bool:
    """Whether the row's trace holds one score per sample."""
    trace = row.get("trace")
    scores = trace.get("scores") if isinstance(trace, dict) else None
    return isinstance(scores, list) and len(scores) == len(_samples(row))


def _how_it_differs(value: Any, found: dict[str, Any] | None, wanted: dict[str, Any]) -> str | None:
    """A row's verifier (``value``, read as ``found``) as a message names it: its kind, and which
    settings differ from the wanted verifier's (names only: a setting's value, a model's path say,
    is the run owner's)."""
    if found is None:
        return None if value is None else "one this installation cannot read"
    if found["kind"] != wanted["kind"]:
        return repr(found["kind"])
    other = sorted(k for k in found.keys() | wanted.keys() if found.get(k) != wanted.get(k))
    return f"{found['kind']!r} with another {', '.join(other)}"


def pool_rows_from_results(rows: Iterable[dict[str, Any]], score: ScoreField = "mean_logprob",
                           verifier: Any = None) -> list[dict[str, Any]]:
    """Sample-pool rows from eval result rows, one per drawn sample.

    Args:
        rows: ``results.jsonl`` rows (dicts) of one or more runs.
        score: Which sample field becomes the pool's ``score``: ``"mean_logprob"`` (null where the
            backend returned no logprobs) or ``"none"`` (always null). Ignored with ``verifier``.
        verifier: A verifier (name, dict or config): the pool's ``score`` is that verifier's score
            of each sample, read from the rows of strategies configured with this same verifier
            (every setting equal); the other rows are left out.

    Returns:
        Pool rows grouped by (model, problem) in order of first appearance, samples in generation
        order. Per (model, problem) only the result row with the most samples is used.

    Raises:
        PoolError: A row lacks ``problem_id``, no row has any trace samples, or (with
            ``verifier``) no row was scored by that verifier (the message lists those that were).
    """
    if score not in ("mean_logprob", "none"):
        raise ValueError(f"score must be 'mean_logprob' or 'none', got {score!r}")
    wanted = _verifier_dump(verifier)
    if verifier is not None and wanted is None:
        raise ValueError(f"verifier {verifier!r} is not a verifier config this installation can read")
    best = _longest_rows(rows, wanted)
    out = _sample_rows(best, score, scored_by_verifier=wanted is not None)
    if not out:
        raise PoolError("none of the result rows has trace samples; a pool needs a run of a sampling "
                        "strategy (self_consistency, best_of_n, weighted_vote) that kept its traces")
    skipped = sum(not _samples(r) for r in best.values())
    if skipped:
        logger.warning("%d problems have no trace samples and are left out of the pool", skipped)
    return out


def _longest_rows(rows: Iterable[dict[str, Any]], wanted: dict[str, Any] | None) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (model, problem), the result row with the most samples (the first such row on ties);
    with ``wanted`` (a verifier's dump), only rows scored by that verifier as configured."""
    best: dict[tuple[str, str], dict[str, Any]] = {}
    not_prefix = 0
    seen_verifiers: list[str] = []
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or "problem_id" not in row:
            raise PoolError(f"result row {i + 1} has no problem_id; pass rows of a tts eval results.jsonl")
        if not _iid_samples(row):
            continue
        if wanted is not None:
            value = (row.get("strategy") or {}).get("verifier")
            found = _verifier_dump(value)
            if found != wanted or not _has_scores(row):
                named = _how_it_differs(value, found, wanted) if found != wanted else None
                if named is not None and named not in seen_verifiers:
                    seen_verifiers.append(named)
                continue
        key = (str(row.get("model") or "unknown"), str(row["problem_id"]))
        kept = best.get(key)
        if kept is None or len(_samples(row)) > len(_samples(kept)):
            best[key] = row
        if kept is not None:
            short, long = sorted((_samples(row), _samples(kept)), key=len)
            not_prefix += not _is_prefix(short, long)
    if not_prefix:
        logger.warning("%d result rows hold samples that are not a prefix of their problem's longest "
                       "trace; only the longest trace of each problem becomes the pool", not_prefix)
    if wanted is not None and not best:
        raise PoolError(f"no result row of a sampling strategy scored its samples with the verifier {wanted['kind']!r} "
                        "as configured; "
                        + (f"the rows' verifiers are: {'; '.join(seen_verifiers)}. " if seen_verifiers else "no row has one. ")
                        + "Calibrate on a run of best_of_n or weighted_vote with this verifier "
                        "(tts eval -s best_of_n -s weighted_vote --verifier ...).")
    return best


def _sample_rows(best: dict[tuple[str, str], dict[str, Any]], score: ScoreField,
                 scored_by_verifier: bool) -> list[dict[str, Any]]:
    """One pool row per sample of the kept result rows, samples in generation order."""
    out: list[dict[str, Any]] = []
    for (model, pid), row in best.items():
        prompt = _prompt_tokens(row)
        verified = row["trace"]["scores"] if scored_by_verifier else None
        for idx, s in enumerate(_samples(row)):
            tokens = s.get("completion_tokens")
            if verified is not None:
                value = verified[idx]
            else:
                value = s.get("mean_logprob") if score == "mean_logprob" else None
            out.append({
                "problem_id": pid,
                "model": model,
                "sample_idx": idx,
                "answer": s.get("answer"),
                "correct": _CORRECT.get(s.get("outcome")),
                "num_tokens": tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else None,
                "score": float(value) if isinstance(value, (int, float)) else None,
                "gold_answer": row.get("gold"),
                "prompt_tokens": prompt,
            })
    return out


def write_pool(rows: Iterable[dict[str, Any]], path: str | Path) -> Path:
    """Write pool rows as JSON lines; gzip-compressed when ``path`` ends in ``.gz``.

    Returns:
        The path written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def read_results(source: str | Path) -> list[dict[str, Any]]:
    """The rows of a run's ``results.jsonl`` (``source`` = the run directory or the file itself).

    A half-written last line (a run killed mid-write) is dropped with a warning, as on resume.

    Raises:
        PoolError: The file is missing or a line other than the last is not a JSON object.
    """
    path = Path(source)
    if path.is_dir():
        path = path / RESULTS_FILE
    if not path.is_file():
        raise PoolError(f"{path}: no such results file; pass a tts eval run directory or its {RESULTS_FILE}")
    try:
        return read_append_log(path)
    except ValueError as exc:
        raise PoolError(str(exc)) from None


def load_results_as_pool(source: str | Path, score: ScoreField = "mean_logprob", verifier: Any = None) -> SamplePool:
    """Load a past eval run as a validated :class:`SamplePool`.

    Args:
        source: The run directory (holding ``results.jsonl``) or the results file.
        score, verifier: See :func:`pool_rows_from_results`.

    Returns:
        The pool, validated and packed by :func:`tts.benchmarks.pool.load_pool`; its ``path`` is
        the results file.
    """
    path = Path(source)
    path = path / RESULTS_FILE if path.is_dir() else path
    rows = pool_rows_from_results(read_results(path), score=score, verifier=verifier)
    # The pool loader validates and packs files; a temporary file keeps one parser for both.
    with tempfile.TemporaryDirectory(prefix="tts-pool-") as tmp:
        pool = load_pool(write_pool(rows, Path(tmp) / "pool.jsonl"))
    return dataclasses.replace(pool, path=str(path))
