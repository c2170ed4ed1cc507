"""What the pool upstream (``pool_upstream.py``) serves: the shared-rate model, and the pool's problems,
sample orders and replies.

:class:`SharedRate` is processor sharing in virtual time (a fixed total of tokens per second
shared by the choices in flight), exact and deterministic so it is testable without a clock.
:class:`PoolReplay` finds the problem a request asks about, draws its stored samples in a seeded
order, and :func:`reply_tokens` writes a sample as exactly its stored number of tokens ending in
its stored answer. See ``pool_upstream.py``'s docstring for the rules as a client sees them.
"""

from __future__ import annotations

import logging
import math
import threading
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tts.benchmarks.datasets import FileBenchmark
from tts.benchmarks.pool import ModelPool, load_pool

logger = logging.getLogger("pool_upstream")

FILLER = " think"
"""The filler token's text: no digits and no "answer" phrase, so extraction reads nothing from it."""
TEXT_FIELDS = ("problem", "question", "prompt")
"""Extra fields of a pool row that hold the problem's text, if a pool carries it."""


# --- the rate model ------------------------------------------------------------------------------


class SharedRate:
    """Processor sharing in virtual time: ``tokens_per_second`` shared equally by the choices in flight.

    With k choices in flight each generates ``min(R / k, stream_cap)`` tokens per virtual second;
    when one finishes, the others speed up. Everything is computed exactly from the times given, so
    the model is deterministic and testable without a real clock.
    """

    def __init__(self, tokens_per_second: float, stream_cap: float | None = None) -> None:
        if not tokens_per_second > 0:
            raise ValueError(f"tokens_per_second must be positive, got {tokens_per_second}")
        if stream_cap is not None and not stream_cap > 0:
            raise ValueError(f"the per-stream rate must be positive, got {stream_cap}")
        self.rate = float(tokens_per_second)
        self.cap = stream_cap
        self.now = 0.0
        self._left: dict[Any, float] = {}
        self._total: dict[Any, float] = {}
        self.finished_at: dict[Any, float] = {}

    def per_stream(self, k: int) -> float:
        """Tokens per virtual second of each of ``k`` choices in flight."""
        r = self.rate / max(k, 1)
        return r if self.cap is None else min(r, self.cap)

    def __len__(self) -> int:
        return len(self._left)

    def add(self, key: Any, tokens: float, now: float) -> None:
        """Start a choice of ``tokens`` tokens at virtual time ``now``."""
        self.advance(now)
        self._total[key] = self._left[key] = float(tokens)

    def remove(self, key: Any, now: float) -> None:
        """Stop a choice (finished or cancelled) and forget it."""
        self.advance(now)
        self._left.pop(key, None)
        self._total.pop(key, None)
        self.finished_at.pop(key, None)

    def generated(self, key: Any) -> float:
        """Tokens generated so far by a choice still known."""
        return self._total[key] - self._left.get(key, 0.0)

    def advance(self, now: float) -> list[Any]:
        """Move the clock to ``now``; returns the choices that finished on the way, in finishing order."""
        done: list[Any] = []
        dt = now - self.now
        while dt > 0 and self._left:
            r = self.per_stream(len(self._left))
            least = min(self._left.values())
            step = min(dt, least / r)
            self.now += step
            dt -= step
            for key in list(self._left):
                self._left[key] -= step * r
                if self._left[key] <= 1e-9 * max(1.0, self._total[key]):
                    del self._left[key]
                    self.finished_at[key] = self.now
                    done.append(key)
        self.now = max(self.now, now)
        return done

    def next_finish(self) -> float | None:
        """Virtual time at which the next choice finishes if nothing joins, None when idle."""
        if not self._left:
            return None
        return self.now + min(self._left.values()) / self.per_stream(len(self._left))


# --- the pool: which problem, which samples, what reply ------------------------------------------


class UpstreamError(Exception):
    """A request the upstream cannot answer: an HTTP status and a one-line OpenAI error message."""

    def __init__(self, status: int, message: str, code: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.message, self.code = status, message, code


def _norm(text: str) -> str:
    return " ".join(text.split())


@dataclass(frozen=True)
class Sample:
    """One stored sample as served: its slot in the pool, its answer and its stored length."""

    sample_idx: int
    answer: str | None
    tokens: int


class PoolReplay:
    """A loaded pool with its problem lookup and the seeded sample order of every (model, problem)."""

    def __init__(self, pool_path: str | Path, *, seed: int = 0, problems: Sequence[str | Path] = (),
                 missing_tokens: int = 1000) -> None:
        self.pool = load_pool(pool_path)
        self.seed = int(seed)
        self._row = {m: {pid: p for p, pid in enumerate(mp.problem_ids)} for m, mp in self.pool.by_model.items()}
        self._ids = {pid for rows in self._row.values() for pid in rows}
        self._texts: dict[str, str] = {}  # normalised problem text -> id
        for mp in self.pool.by_model.values():
            for pid, meta in zip(mp.problem_ids, mp.metadata or ()):
                text = next((meta[f] for f in TEXT_FIELDS if isinstance(meta.get(f), str)), None)
                if text:
                    self._texts.setdefault(_norm(text), pid)
        for path in problems:
            self._add_problem_file(Path(path))
        self._by_length = sorted(self._texts.items(), key=lambda kv: -len(kv[0]))
        self._samples: dict[tuple[str, str], list[Sample]] = {}
        self._cursor: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()
        self.missing_tokens = int(missing_tokens)
        for m, mp in self.pool.by_model.items():
            if not mp.has_tokens:
                logger.warning("model %s of %s has samples without num_tokens; they are served as %d tokens",
                               m, pool_path, self.missing_tokens)

    def _add_problem_file(self, path: Path) -> None:
        matched = 0
        for problem in FileBenchmark().load(path):
            if problem.id in self._ids:
                self._texts.setdefault(_norm(problem.question), problem.id)
                matched += 1
        if not matched:
            raise ValueError(f"{path}: none of its problem ids is in the pool; pass the benchmark file of this pool")
        logger.info("%s: texts of %d of the pool's %d problems", path, matched, len(self._ids))

    @property
    def models(self) -> tuple[str, ...]:
        """The pool's model names."""
        return self.pool.models

    def model(self, name: str) -> ModelPool:
        """A model's samples, or a 404 naming the models there are."""
        if name not in self.pool.by_model:
            raise UpstreamError(404, f"model {name!r} is not in this pool; use one of {list(self.models)}",
                                "model_not_found")
        return self.pool[name]

    def find_problem(self, message: str, problem_id: str | None = None) -> str:
        """The problem a request asks about (see the module docstring for the order), or a 404."""
        if problem_id is not None:
            if str(problem_id) in self._ids:
                return str(problem_id)
            raise UpstreamError(404, f"problem id {problem_id!r} is not in this pool", "problem_not_found")
        text = _norm(message)
        if text in self._texts:
            return self._texts[text]
        if text in self._ids:
            return text
        for known, pid in self._by_length:
            if known in text:
                return pid
        words = [w.strip(".,;:!?()[]\"'") for w in text.split()]
        found = [w for w in words if w in self._ids]
        if found:
            return max(found, key=len)
        raise UpstreamError(404, f"no problem of this pool matches the last user message ({text[:60]!r}); send a "
                                 "problem's text (start the server with --problems FILE for texts) or its id",
                            "problem_not_found")

    def samples(self, model: str, pid: str) -> list[Sample]:
        """The stored samples of (model, problem), in the pool's order."""
        key = (model, pid)
        if key not in self._samples:
            mp = self.model(model)
            if pid not in self._row[model]:
                raise UpstreamError(404, f"model {model!r} has no samples of problem {pid!r}", "problem_not_found")
            p = self._row[model][pid]
            out = []
            for slot in np.flatnonzero(mp.mask[p]).tolist():
                tok = mp.tokens[p, slot]
                out.append(Sample(int(mp.sample_idx[p, slot]), mp.answer_text(p, int(mp.answers[p, slot])),
                                  self.missing_tokens if math.isnan(tok) else int(tok)))
            self._samples[key] = out
        return self._samples[key]

    def restart(self, seed: int | None = None) -> None:
        """Every shared order starts again from its beginning (under a new server seed when given)."""
        with self._lock:
            self._cursor.clear()
            if seed is not None:
                self.seed = int(seed)

    def _order(self, model: str, pid: str, count: int, seed: int | None) -> np.ndarray:
        entropy = [self.seed & 0xFFFFFFFF, zlib.crc32(model.encode()), zlib.crc32(pid.encode())]
        if seed is not None:
            entropy += [1, int(seed) & 0xFFFFFFFFFFFFFFFF]
        return np.random.default_rng(entropy).permutation(count)

    def draw(self, model: str, pid: str, n: int, seed: int | None = None) -> list[Sample]:
        """``n`` samples of (model, problem): the next ones of the shared order, or a seeded request's own."""
        pool = self.samples(model, pid)
        order = self._order(model, pid, len(pool), seed)
        if seed is not None:
            start = 0
        else:
            with self._lock:
                start = self._cursor.get((model, pid), 0)
                self._cursor[(model, pid)] = start + n
        return [pool[int(order[(start + i) % len(pool)])] for i in range(n)]


def reply_tokens(sample: Sample) -> list[str]:
    """The reply's tokens: filler, then ``\\n\\n\\boxed{ANSWER}`` in three tokens (merged when the stored
    length is shorter); exactly ``sample.tokens`` of them."""
    n = sample.tokens
    if n <= 0:
        return []
    tail = [] if sample.answer is None else ["\n\n\\boxed{", sample.answer, "}"]
    if len(tail) > n:
        tail = tail[: n - 1] + ["".join(tail[n - 1:])]
    return [FILLER] * (n - len(tail)) + tail
