"""A run's rows for the pages, and the one-line errors a reader gets when the run or problem is not there."""

from __future__ import annotations

import difflib
from pathlib import Path

from tts.benchmarks.append_log import read_append_log
from tts.eval.rows import ResultRow


class ViewError(ValueError):
    """Bad input to a view (no such run, no such problem): a one-line message that says what to pass."""


def load_rows(run: Path) -> list[ResultRow]:
    """Every row of a run directory's ``results.jsonl`` (or of that file itself)."""
    if not run.exists():
        raise ViewError(f"{run} does not exist; pass a tts eval run directory (the one holding results.jsonl).")
    path = run / "results.jsonl" if run.is_dir() else run
    if not path.is_file():
        raise ViewError(f"{run} holds no results.jsonl; pass a tts eval run directory (tts eval --out DIR).")
    return [ResultRow.model_validate(r) for r in read_append_log(path)]


def rows_for(rows: list[ResultRow], problem_id: str, config: str | None = None, where: str = "the run") -> list[ResultRow]:
    """The rows of ``problem_id`` (and ``config``, when given), in the run's order.

    Raises:
        ViewError: no such problem (its closest ids named) or no such config for it (its configs named).
    """
    mine = [r for r in rows if r.problem_id == problem_id]
    if not mine:
        ids = list(dict.fromkeys(r.problem_id for r in rows))
        close = difflib.get_close_matches(problem_id, ids, n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(close)}?" if close else f"its problems include {', '.join(ids[:3])}"
        raise ViewError(f"no problem {problem_id!r} in {where} ({len(ids)} problems); {hint}")
    if config is not None:
        chosen = [r for r in mine if r.config == config]
        if not chosen:
            configs = list(dict.fromkeys(r.config for r in mine))
            raise ViewError(f"problem {problem_id!r} has no config {config!r} in {where}; its configs: {', '.join(configs)}")
        return chosen
    return mine
