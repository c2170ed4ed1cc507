"""Sample pools: many pre-generated samples per (model, problem), replayed without a GPU.

A pool file holds one JSON object per line (plain text or gzip, detected by magic bytes)::

    {"problem_id": str, "model": str, "sample_idx": int, "answer": str|null,
     "correct": bool|null, "num_tokens": int|null, "score": float|null, ...extra fields}

:func:`load_pool` validates every line and packs each model's samples into dense numpy arrays of
shape ``(n_problems, n_samples)`` so that replays (votes, budgets, orderings) are vectorised.
``sample_idx`` is an identifier, not generation order: replays draw random orderings themselves.

Example:
    >>> pool = load_pool("math500_reasoning_models.jsonl.gz")        # doctest: +SKIP
    >>> mp = pool["Qwen3-14B"]                                         # doctest: +SKIP
    >>> mp.correct.mean(where=mp.mask), mp.tokens.shape                # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses

import gzip
import io
import json
import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

REQUIRED_FIELDS = ("problem_id", "model", "sample_idx", "answer", "correct", "num_tokens", "score")
_GZIP_MAGIC = b"\x1f\x8b"
NO_ANSWER = -1
"""Answer id of a sample without an extractable answer, and of padding slots."""


class PoolError(ValueError):
    """A sample pool file is malformed; the message names the file, the line and the fix."""


@dataclass(frozen=True, eq=False)
class ModelPool:
    """All samples of one model, as dense ``(n_problems, n_samples)`` arrays.

    Samples of a problem are sorted by ``sample_idx``. Problems with fewer samples than the widest
    one are padded at the end of the row; ``mask`` is False there (answer id -1, correct False,
    tokens and scores NaN).

    Args:
        model: The model's name.
        problem_ids: Problem ids, in order of first appearance in the file.
        answers: Integer answer ids, unique per problem (equal strings share an id), -1 = none.
        answer_texts: Per problem, the answer string of each id (``answer_texts[p][id]``).
        correct: Grading of each sample (null grades are False); for outcome grading only.
        tokens: Generated tokens per sample, NaN when unknown.
        scores: Verifier score per sample, NaN when unknown.
        sample_idx: The file's ``sample_idx`` of each slot, -1 in padding.
        mask: True where a real sample sits.
        metadata: Per problem, the extra fields of its first line (e.g. ``level``, ``gold_answer``).
    """

    model: str
    problem_ids: tuple[str, ...]
    answers: np.ndarray
    answer_texts: tuple[tuple[str, ...], ...]
    correct: np.ndarray
    tokens: np.ndarray
    scores: np.ndarray
    sample_idx: np.ndarray
    mask: np.ndarray
    metadata: tuple[dict[str, Any], ...] = field(repr=False, default=())

    @property
    def n_problems(self) -> int:
        """Number of problems."""
        return len(self.problem_ids)

    @property
    def n_samples(self) -> int:
        """Width of the arrays (the largest sample count of any problem)."""
        return int(self.answers.shape[1])

    @property
    def counts(self) -> np.ndarray:
        """Number of real samples per problem."""
        return self.mask.sum(axis=1)

    @property
    def has_scores(self) -> bool:
        """True when every real sample carries a verifier score."""
        return bool(np.all(np.isfinite(self.scores[self.mask])))

    @property
    def has_tokens(self) -> bool:
        """True when every real sample carries a token count."""
        return bool(np.all(np.isfinite(self.tokens[self.mask])))

    def pass_rate(self) -> np.ndarray:
        """Share of correct samples per problem (ground truth: analysis only, "oracle")."""
        return self.correct.sum(axis=1) / np.maximum(self.counts, 1)

    def answer_text(self, problem: int, answer_id: int) -> str | None:
        """The answer string behind an id of problem index ``problem`` (None for -1)."""
        return None if answer_id < 0 else self.answer_texts[problem][answer_id]

    def subset(self, problems: Sequence[int] | np.ndarray) -> ModelPool:
        """A pool restricted to the given problem indices (in that order)."""
        idx = np.asarray(problems, dtype=np.int64)
        return ModelPool(
            model=self.model,
            problem_ids=tuple(self.problem_ids[i] for i in idx),
            answers=self.answers[idx],
            answer_texts=tuple(self.answer_texts[i] for i in idx),
            correct=self.correct[idx],
            tokens=self.tokens[idx],
            scores=self.scores[idx],
            sample_idx=self.sample_idx[idx],
            mask=self.mask[idx],
            metadata=tuple(self.metadata[i] for i in idx) if self.metadata else (),
        )

    def capped(self, max_tokens: int) -> ModelPool:
        """The pool as if every generation had been capped at ``max_tokens`` generated tokens.

        A sample longer than the cap would have been cut off before its final answer: it keeps no
        answer (so it abstains from votes and grades wrong) and costs ``max_tokens``; shorter samples
        are unchanged, since sampling up to the cap is the same process. This is exact for a plain
        cap (no forced answer, unlike budget forcing) when the model states its answer at the end,
        as reasoning models do; a model that states it early and rambles on loses answers a real
        cap would have kept.

        Raises:
            PoolError: Some sample has no token count, or the cap is below 1.
        """
        if max_tokens < 1:
            raise PoolError(f"a length cap must be at least 1 token, got {max_tokens}")
        if not self.has_tokens:
            raise PoolError(f"model {self.model} has samples without num_tokens; a length cap needs the "
                            "generated length of every sample")
        cut = self.mask & (self.tokens > max_tokens)
        return dataclasses.replace(self, answers=np.where(cut, -1, self.answers), correct=self.correct & ~cut,
                                   tokens=np.where(cut, float(max_tokens), self.tokens))


@dataclass(frozen=True, eq=False)
class SamplePool:
    """A validated sample pool: one :class:`ModelPool` per model.

    Args:
        path: The file it was read from (for messages).
        by_model: Model name -> its samples, in order of first appearance.
    """

    path: str
    by_model: dict[str, ModelPool]

    @property
    def models(self) -> tuple[str, ...]:
        """Model names, in order of first appearance in the file."""
        return tuple(self.by_model)

    def problems(self, model: str) -> tuple[str, ...]:
        """Problem ids that ``model`` has samples for."""
        return self[model].problem_ids

    def __getitem__(self, model: str) -> ModelPool:
        try:
            return self.by_model[model]
        except KeyError:
            raise KeyError(
                f"model {model!r} is not in pool {self.path}; choose one of {list(self.by_model)}"
            ) from None

    def __len__(self) -> int:
        return int(sum(int(mp.mask.sum()) for mp in self.by_model.values()))


def _open_text(path: Path) -> io.TextIOBase:
    with open(path, "rb") as fh:
        magic = fh.read(2)
    if magic == _GZIP_MAGIC:
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    return open(path, encoding="utf-8")


def _number(value: Any, name: str, where: str, *, integer: bool = False) -> float:
    """A JSON number or null -> float (NaN for null); anything else is a PoolError."""
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        kind = "an integer" if integer else "a number"
        raise PoolError(f"{where}: {name} must be {kind} or null, got {value!r}; fix that line")
    if integer and isinstance(value, float) and not value.is_integer():
        raise PoolError(f"{where}: {name} must be an integer or null, got {value!r}; fix that line")
    return float(value)


def iter_pool_rows(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, row)`` for every non-blank line, checking JSON and required fields.

    Raises:
        PoolError: The file is missing, a line is not a JSON object or lacks a required field.
    """
    path = Path(path)
    if not path.is_file():
        raise PoolError(f"{path}: no such pool file; pass the path of a .jsonl or .jsonl.gz pool")
    with _open_text(path) as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise PoolError(f"{path}:{lineno}: not valid JSON ({exc.msg}); fix that line") from None
            if not isinstance(row, dict):
                raise PoolError(f"{path}:{lineno}: expected a JSON object per line, got {type(row).__name__}")
            if len(row) < len(REQUIRED_FIELDS) or not all(k in row for k in REQUIRED_FIELDS):
                missing = [k for k in REQUIRED_FIELDS if k not in row]
                raise PoolError(
                    f"{path}:{lineno}: missing field(s) {', '.join(missing)}; every line needs "
                    f"{', '.join(REQUIRED_FIELDS)} (use null for unknown values)"
                )
            yield lineno, row


def _row_fields(row: dict[str, Any], where: str) -> tuple[str | int, str, int, str | None, bool | None, float, float]:
    """One pool row's required fields, type-checked and coerced: (problem_id, model, sample_idx,
    answer, correct, num_tokens, score). A numeric answer becomes its text, 0/1 for correct a bool,
    a missing token count or score NaN.

    Raises:
        PoolError: A field of the wrong type, naming ``where`` (file:line).
    """
    pid, model, sidx, ans, ok = (row["problem_id"], row["model"], row["sample_idx"], row["answer"],
                                 row["correct"])
    if not isinstance(pid, (str, int)) or isinstance(pid, bool):
        raise PoolError(f"{where}: problem_id must be a string, got {pid!r}")
    if not isinstance(model, str):
        raise PoolError(f"{where}: model must be a string, got {model!r}")
    if not isinstance(sidx, int) or isinstance(sidx, bool):
        raise PoolError(f"{where}: sample_idx must be an integer, got {sidx!r}")
    if ans is not None and not isinstance(ans, str):
        if isinstance(ans, (int, float)) and not isinstance(ans, bool):
            ans = str(ans)
        else:
            raise PoolError(f"{where}: answer must be a string or null, got {ans!r}")
    if ok is not None and not isinstance(ok, bool):
        if ok in (0, 1) and not isinstance(ok, float):
            ok = bool(ok)
        else:
            raise PoolError(f"{where}: correct must be true, false or null, got {ok!r}")
    tok = _number(row["num_tokens"], "num_tokens", where, integer=True)
    score = _number(row["score"], "score", where)
    return pid, model, sidx, ans, ok, tok, score


@dataclass
class _PoolColumns:
    """A pool file's rows as parallel plain lists (fast to append), before packing into arrays.

    ``models`` numbers the models and ``problems[m]`` model m's problem ids, both in first-seen
    order; ``m``, ``p`` and ``s`` are each row's model number, problem number and sample_idx;
    ``meta`` holds the extra fields of each (model, problem)'s first row that has any.
    """

    models: dict[str, int] = field(default_factory=dict)
    problems: list[dict[str, int]] = field(default_factory=list)
    m: list[int] = field(default_factory=list)
    p: list[int] = field(default_factory=list)
    s: list[int] = field(default_factory=list)
    ans: list[str | None] = field(default_factory=list)
    ok: list[bool] = field(default_factory=list)
    tok: list[float] = field(default_factory=list)
    score: list[float] = field(default_factory=list)
    meta: dict[tuple[int, int], dict[str, Any]] = field(default_factory=dict)


def _read_columns(path: str | Path) -> _PoolColumns:
    """Parse and validate ``path`` row by row into columns.

    Raises:
        PoolError: A bad row (see :func:`_row_fields`), a duplicate (problem_id, model,
            sample_idx) key, or an empty file.
    """
    cols = _PoolColumns()
    seen: dict[tuple[int, int, int], int] = {}
    for lineno, row in iter_pool_rows(path):
        where = f"{path}:{lineno}"
        pid, model, sidx, ans, ok, tok, score = _row_fields(row, where)
        m = cols.models.setdefault(model, len(cols.models))
        if m == len(cols.problems):
            cols.problems.append({})
        pmap = cols.problems[m]
        pid = str(pid)
        p = pmap.setdefault(pid, len(pmap))
        key = (m, p, sidx)
        if key in seen:
            raise PoolError(
                f"{where}: duplicate sample (problem_id={pid!r}, model={model!r}, sample_idx={sidx}), "
                f"first seen on line {seen[key]}; give each sample of a problem its own sample_idx"
            )
        seen[key] = lineno
        if len(row) > len(REQUIRED_FIELDS) and (m, p) not in cols.meta:
            cols.meta[(m, p)] = {k: v for k, v in row.items() if k not in REQUIRED_FIELDS}
        cols.m.append(m)
        cols.p.append(p)
        cols.s.append(sidx)
        cols.ans.append(ans)
        cols.ok.append(bool(ok))
        cols.tok.append(tok)
        cols.score.append(score)
    if not cols.m:
        raise PoolError(f"{path}: the pool is empty; it needs one JSON sample per line")
    return cols


def load_pool(path: str | Path) -> SamplePool:
    """Read and validate a sample pool file (plain or gzip JSONL).

    Args:
        path: The pool file.

    Returns:
        The pool, with one dense :class:`ModelPool` per model.

    Raises:
        PoolError: With file and line number, for a missing field, a duplicate
            (problem_id, model, sample_idx) key, a non-numeric token count or score, a wrongly
            typed field, invalid JSON, or an empty file.
    """
    # 1. Parse and validate row by row, keeping columns in plain lists (fast to append).
    cols = _read_columns(path)
    # 2. Pack each model into dense arrays, samples sorted by sample_idx within a problem.
    m_arr = np.asarray(cols.m, dtype=np.int64)
    p_arr = np.asarray(cols.p, dtype=np.int64)
    s_arr = np.asarray(cols.s, dtype=np.int64)
    order = np.lexsort((s_arr, p_arr, m_arr))
    arrays = (p_arr, s_arr, np.asarray(cols.ok, dtype=bool), np.asarray(cols.tok, dtype=np.float64),
              np.asarray(cols.score, dtype=np.float64))
    by_model: dict[str, ModelPool] = {}
    for model, m in cols.models.items():
        by_model[model] = _pack_model(path, model, m, order[m_arr[order] == m], cols, *arrays)
    return SamplePool(path=str(path), by_model=by_model)


def _pack_model(path: str | Path, model: str, m: int, rows: np.ndarray, cols: _PoolColumns, p_arr: np.ndarray,
                s_arr: np.ndarray, ok_arr: np.ndarray, tok_arr: np.ndarray, score_arr: np.ndarray) -> ModelPool:
    """Model ``m``'s rows (``rows``: indices into the columns, sorted by problem then sample_idx)
    as dense (problems, samples) arrays; a problem with fewer samples than the most is padded,
    its missing slots masked out. Answers become ids per problem, in first-seen order."""
    pr = p_arr[rows]
    n_prob = len(cols.problems[m])
    counts = np.bincount(pr, minlength=n_prob)
    width = int(counts.max())
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    slot = np.arange(len(rows)) - starts[pr]
    shape = (n_prob, width)
    mask = np.zeros(shape, dtype=bool)
    mask[pr, slot] = True
    answers = np.full(shape, NO_ANSWER, dtype=np.int32)
    texts: list[dict[str, int]] = [{} for _ in range(n_prob)]
    ids = np.empty(len(rows), dtype=np.int32)
    for j, (r, p) in enumerate(zip(rows.tolist(), pr.tolist())):
        a = cols.ans[r]
        ids[j] = NO_ANSWER if a is None else texts[p].setdefault(a, len(texts[p]))
    answers[pr, slot] = ids
    correct = np.zeros(shape, dtype=bool)
    correct[pr, slot] = ok_arr[rows]
    tokens = np.full(shape, np.nan)
    tokens[pr, slot] = tok_arr[rows]
    scores = np.full(shape, np.nan)
    scores[pr, slot] = score_arr[rows]
    sidx = np.full(shape, -1, dtype=np.int64)
    sidx[pr, slot] = s_arr[rows]
    packed = ModelPool(
        model=model,
        problem_ids=tuple(cols.problems[m]),
        answers=answers,
        answer_texts=tuple(tuple(t) for t in texts),
        correct=correct,
        tokens=tokens,
        scores=scores,
        sample_idx=sidx,
        mask=mask,
        metadata=tuple(cols.meta.get((m, p), {}) for p in range(n_prob)),
    )
    if counts.min() != width:
        logger.info("%s: model %s has %d-%d samples per problem; padded with a mask",
                    path, model, counts.min(), width)
    return packed
