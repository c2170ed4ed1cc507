"""Grading: math-verify OR normalised string match, in worker processes with a time limit.

math-verify's own timeout relies on signals, which only work in a process's main thread, and
symbolic comparison can hang on adversarial input; so each check runs in a worker process (main
thread there) and the caller also waits with a deadline. Results are cached per (answer, gold).
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import multiprocessing as mp
from collections.abc import Iterable
from enum import Enum

from tts.answers import normalize_answer

logger = logging.getLogger(__name__)


class Outcome(str, Enum):
    """How one answer was graded. "no_answer" is its own outcome, counted as wrong in accuracy."""

    CORRECT = "correct"
    WRONG = "wrong"
    NO_ANSWER = "no_answer"


def _verify_in_worker(gold: str, answer: str, timeout: int) -> bool:
    """Runs in a worker process: math-verify parse + verify with its signal-based timeout."""
    from math_verify import parse, verify

    def _as_math(s: str) -> str:
        # math-verify looks for LaTeX environments; wrap bare answers so they parse as math.
        return s if "$" in s or "\\(" in s or "\\boxed" in s else f"${s}$"

    try:
        g = parse(_as_math(gold), parsing_timeout=timeout)
        a = parse(_as_math(answer), parsing_timeout=timeout)
        if not g or not a:
            return False
        return bool(verify(g, a, timeout_seconds=timeout))
    except Exception:  # a parse failure is "not equal", never a crash of the run
        return False


class Grader:
    """Grades answers against gold answers; use as a context manager to own the worker pool.

    Args:
        timeout: Seconds allowed for one math-verify check before it counts as "not equal".
        workers: Worker processes.
    """

    def __init__(self, timeout: int = 5, workers: int = 1) -> None:
        self.timeout = timeout
        self.workers = workers
        self._pool: cf.ProcessPoolExecutor | None = None
        self._cache: dict[tuple[str, str], bool] = {}

    def __enter__(self) -> Grader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _ensure_pool(self) -> cf.ProcessPoolExecutor:
        if self._pool is None:
            # spawn, not fork: the parent may hold an inference engine with threads.
            self._pool = cf.ProcessPoolExecutor(self.workers, mp_context=mp.get_context("spawn"))
        return self._pool

    def close(self) -> None:
        """Stop the worker processes."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def grade_many(self, pairs: Iterable[tuple[str | None, str]]) -> list[Outcome]:
        """Grade ``(answer, gold)`` pairs; answers that string-match skip math-verify.

        Args:
            pairs: (extracted answer or None, gold answer).

        Returns:
            One Outcome per pair, in order.
        """
        pairs = list(pairs)
        out: list[Outcome | None] = [None] * len(pairs)
        pending: dict[tuple[str, str], list[int]] = {}
        for i, (answer, gold) in enumerate(pairs):
            if answer is None or not answer.strip():
                out[i] = Outcome.NO_ANSWER
                continue
            key = (answer, gold)
            if key in self._cache:
                out[i] = Outcome.CORRECT if self._cache[key] else Outcome.WRONG
            elif normalize_answer(answer) == normalize_answer(gold):
                self._cache[key] = True
                out[i] = Outcome.CORRECT
            else:
                pending.setdefault(key, []).append(i)
        if pending:
            pool = self._ensure_pool()
            futures = {k: pool.submit(_verify_in_worker, k[1], k[0], self.timeout) for k in pending}
            for key, fut in futures.items():
                try:
                    ok = fut.result(timeout=self.timeout * 3 + 30)
                except (cf.TimeoutError, cf.process.BrokenProcessPool) as exc:
                    logger.warning("grading %r vs %r failed (%s); counted as wrong", *key, exc)
                    ok = False
                    self.close()  # a hung worker poisons the pool; start a fresh one
                    pool = self._ensure_pool()
                self._cache[key] = ok
                for i in pending[key]:
                    out[i] = Outcome.CORRECT if ok else Outcome.WRONG
        return [o if o is not None else Outcome.WRONG for o in out]

    def grade(self, answer: str | None, gold: str) -> Outcome:
        """Grade one answer."""
        return self.grade_many([(answer, gold)])[0]
