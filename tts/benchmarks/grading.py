"""Grading: math-verify OR normalised string match, in worker processes with a time limit.

math-verify's own timeout relies on signals, which only work in a process's main thread, and
symbolic comparison can hang on adversarial input (inside C code that no signal interrupts); so
each check runs in a worker process (main thread there) and the caller also waits with a deadline.
Verdicts are cached per (answer, gold).

Timeouts and crashes: the grader runs a small pool of its own spawn workers, sends each worker one
check at a time and gives that check a deadline. A check past its deadline has its worker killed
(SIGKILL: a hung worker survives a process-pool shutdown) and replaced by a fresh one; a worker that
dies during a check (segfault, OOM kill) is replaced and the check retried once. Checks still
waiting were never handed to the culprit's worker, so they simply go to the fresh one: only the
culprit is affected. It is recorded as ``Outcome.UNGRADED`` (not wrong), logged with a warning and
remembered for the rest of this Grader's life only, never cached as a verdict. Why an answer has no
verdict, and how long each math-verify check ran, are the grader's :meth:`Grader.note` (the eval
runner writes them into the row).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import pickle
import signal
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from multiprocessing.connection import Connection, wait

from tts.answers import normalize_answer
from tts.types import Problem

logger = logging.getLogger(__name__)

Check = Callable[[str, str, int], bool]
"""A check: ``(gold, answer, timeout) -> equal``; a picklable module-level function."""

_Key = tuple[str, str]  # (answer, gold)

_STARTUP_SECONDS = 120.0  # spawn + imports on a machine busy with an inference engine
_MAX_STARTUP_FAILURES = 3  # fresh workers dying in a row before ready: a broken setup, not an answer


class Outcome(str, Enum):
    """How one answer was graded. "no_answer" is its own outcome, counted as wrong in accuracy.

    "ungraded" means the check could not be completed (it timed out, or its worker crashed twice):
    the answer has no verdict, which is neither correct nor wrong.
    """

    CORRECT = "correct"
    WRONG = "wrong"
    NO_ANSWER = "no_answer"
    UNGRADED = "ungraded"


@dataclass(frozen=True)
class GradeNote:
    """What a grader can say about one answer beyond its outcome: why it is not correct and how long
    its check took. A grader that can say this has ``note(problem, answer) -> GradeNote | None``
    (the eval runner writes it into the row; :class:`tts.benchmarks.humaneval_grading.CodeGrader`).

    Args:
        reason: One line: why the answer is not correct or has no verdict (``timeout: ran past 5 s``,
            ``error: AssertionError``, ``sandbox_failed: ...``); None when it is correct.
        seconds: Wall seconds of the answer's check (a check shared by several answers counts for each).
    """

    reason: str | None
    seconds: float | None = None


def _verify_in_worker(gold: str, answer: str, timeout: int) -> bool:
    """Runs in a worker process: math-verify parse + verify with its signal-based timeout.

    Both sides are read through :func:`tts.answers.forms.as_math` (currency signs, digit groups,
    row-by-row matrices, ``$...$``) and a tuple is compared with a vector entry by entry
    (:func:`tts.answers.forms.align_vectors`).
    """
    from math_verify import parse, verify

    from tts.answers.forms import align_vectors, as_math

    try:
        g = parse(as_math(gold), parsing_timeout=timeout)
        a = parse(as_math(answer), parsing_timeout=timeout)
        if not g or not a:
            return False
        g, a = align_vectors(g, a)
        return bool(verify(g, a, timeout_seconds=timeout))
    except Exception:  # a parse failure is "not equal", never a crash of the run
        return False


def _worker_main(conn: Connection, check: Check, timeout: int) -> None:
    """A worker's loop: warm up, say "ready", then answer one ``(gold, answer)`` check at a time."""
    # Ctrl-C reaches the whole process group; the parent decides what happens to its workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A trivial check first, so that imports (sympy: seconds) are not charged to a real deadline;
    # if it fails, the real checks will report the failure.
    with contextlib.suppress(Exception):
        check("0", "0", timeout)
    conn.send(("ready", None))
    while True:
        try:
            task = conn.recv()
        except EOFError:  # the parent went away
            return
        if task is None:
            return
        gold, answer = task
        try:
            conn.send(("ok", bool(check(gold, answer, timeout))))
        except Exception as exc:
            conn.send(("error", f"{type(exc).__name__}: {exc}"))


class _Worker:
    """One spawn worker process, its pipe, and the check it is running (if any)."""

    def __init__(self, check: Check, timeout: int) -> None:
        # spawn, not fork: the parent may hold an inference engine with threads.
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker_main, args=(child, check, timeout), daemon=True,
                                   name="tts-grader")
        self.process.start()
        child.close()  # the parent must not hold the child's end, or a dead worker never reads as EOF
        self.ready = False
        self.key: _Key | None = None
        self.started = 0.0  # when the current check was sent
        self.deadline = time.monotonic() + _STARTUP_SECONDS
        self.exitcode: int | None = None  # set by stop()

    def assign(self, key: _Key, seconds: float) -> None:
        """Send one check; raises OSError if the worker died while idle."""
        self.conn.send((key[1], key[0]))
        self.key = key
        self.started = time.monotonic()
        self.deadline = self.started + seconds

    def stop(self, kill: bool = False) -> None:
        """Stop the process: politely when idle, SIGKILL when hung, dead or ``kill``."""
        if not kill and self.ready and self.key is None and self.process.is_alive():
            try:
                self.conn.send(None)
                self.process.join(1)
            except OSError:
                pass
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)
        self.exitcode = self.process.exitcode
        self.conn.close()
        if self.exitcode is not None:
            self.process.close()  # frees its sentinel: long runs may replace many workers


class Grader:
    """Grades answers against gold answers; use as a context manager to own the worker processes.

    Args:
        timeout: Seconds math-verify allows itself for one parse or comparison before it counts
            as "not equal" (its own signal-based limit, inside the worker).
        workers: Worker processes.
        deadline: Seconds the grader waits for one whole check before it kills the worker and
            records the answer as ungraded; default ``3 * timeout + 5`` (two parses and a
            comparison, each allowed ``timeout``, plus slack).
        check: The check run in the workers, ``(gold, answer, timeout) -> bool``; a module-level
            function (it is pickled to spawned processes). Default: math-verify. Tests inject faults.

    Example:
        >>> with Grader(timeout=5) as g:  # doctest: +SKIP
        ...     g.grade_many([("\\\\frac{1}{2}", "0.5"), (None, "7")])
        [<Outcome.CORRECT: 'correct'>, <Outcome.NO_ANSWER: 'no_answer'>]
    """

    def __init__(self, timeout: int = 5, workers: int = 1, deadline: float | None = None,
                 check: Check = _verify_in_worker) -> None:
        if workers < 1:
            raise ValueError(f"workers={workers}: a Grader needs at least 1 worker process")
        if deadline is not None and deadline <= 0:
            raise ValueError(f"deadline={deadline}: give a positive number of seconds, or None")
        try:
            pickle.dumps(check)
        except (pickle.PicklingError, AttributeError, TypeError) as exc:
            raise TypeError(f"check {check!r} must be a module-level function: it is sent to "
                            f"spawned worker processes ({exc})") from exc
        self.timeout = timeout
        self.workers = workers
        self.deadline = deadline if deadline is not None else 3 * timeout + 5
        self.check = check
        self._workers: list[_Worker] = []
        self._cache: dict[_Key, bool] = {}
        self._ungraded: set[_Key] = set()  # this Grader only: a later run may well grade them
        self._notes: dict[_Key, GradeNote] = {}  # each check's seconds, and why it gave no verdict
        self._startup_failures = 0

    def __enter__(self) -> Grader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the worker processes (busy ones are killed)."""
        workers, self._workers = self._workers, []
        for w in workers:
            w.stop()

    def grade_many(self, pairs: Iterable[tuple[str | None, str]]) -> list[Outcome]:
        """Grade ``(answer, gold)`` pairs; answers that string-match skip math-verify.

        Args:
            pairs: (extracted answer or None, gold answer).

        Returns:
            One Outcome per pair, in order; ``UNGRADED`` where the check could not be completed.
        """
        pairs = list(pairs)
        out: list[Outcome | None] = [None] * len(pairs)
        pending: dict[_Key, list[int]] = {}
        # 1. No answer, cached verdicts and string matches need no worker.
        for i, (answer, gold) in enumerate(pairs):
            if answer is None or not answer.strip():
                out[i] = Outcome.NO_ANSWER
                continue
            key = (answer, gold)
            if key in self._cache:
                out[i] = Outcome.CORRECT if self._cache[key] else Outcome.WRONG
            elif key in self._ungraded:
                out[i] = Outcome.UNGRADED
            elif normalize_answer(answer) == normalize_answer(gold):
                self._cache[key] = True
                self._notes[key] = GradeNote(None, 0.0)  # equal as strings: no worker check
                out[i] = Outcome.CORRECT
            else:
                pending.setdefault(key, []).append(i)
        # 2. The rest go to math-verify in the workers.
        if pending:
            for key, ok in self._run_checks(list(pending)).items():
                if ok is None:
                    self._ungraded.add(key)
                    outcome = Outcome.UNGRADED
                else:
                    self._cache[key] = ok
                    outcome = Outcome.CORRECT if ok else Outcome.WRONG
                for i in pending[key]:
                    out[i] = outcome
        return [o if o is not None else Outcome.UNGRADED for o in out]

    def grade(self, answer: str | None, gold: str) -> Outcome:
        """Grade one answer."""
        return self.grade_many([(answer, gold)])[0]

    def note(self, problem: Problem, answer: str | None) -> GradeNote | None:
        """How long math-verify checked ``answer`` against the problem's gold (0 for a string match)
        and, when the check gave no verdict, why; None for no answer or an answer not graded here."""
        if answer is None or not answer.strip():
            return None
        return self._notes.get((answer, problem.answer or ""))

    def grade_problems(self, items: Iterable[tuple[Problem, Sequence[str | None]]]) -> list[list[Outcome]]:
        """Grade each problem's answers against its gold answer, all in one :meth:`grade_many` call.

        The interface the eval runner grades through: a benchmark whose answers need more than a gold
        string (BFCL: the functions and possible answers) supplies a grader with the same method.

        Returns:
            One list of outcomes per problem, in order.
        """
        items = [(p, list(answers)) for p, answers in items]
        flat = iter(self.grade_many([(a, p.answer or "") for p, answers in items for a in answers]))
        return [[next(flat) for _ in answers] for _, answers in items]

    def _run_checks(self, keys: list[_Key]) -> dict[_Key, bool | None]:
        """Run the checks on the workers, replacing hung or dead ones; None = no verdict."""
        results: dict[_Key, bool | None] = {}
        queue = deque(keys)
        crashes: Counter[_Key] = Counter()
        while queue or any(w.key is not None for w in self._workers):
            # 1. Enough workers for the work outstanding (replacing any that were removed).
            busy = sum(w.key is not None for w in self._workers)
            while len(self._workers) < min(self.workers, len(queue) + busy):
                self._workers.append(_Worker(self.check, self.timeout))
            # 2. One check to each idle, ready worker.
            for w in list(self._workers):
                if queue and w.ready and w.key is None:
                    try:
                        w.assign(queue[0], self.deadline)
                        queue.popleft()
                    except OSError:  # died while idle: nobody's fault, the check stays queued
                        self._drop(w, "died while idle")
            # 3. Wait for a message, a death, or the nearest deadline.
            waiting = [w for w in self._workers if w.key is not None or not w.ready]
            if not waiting:
                continue
            left = min(w.deadline for w in waiting) - time.monotonic()
            wait([w.conn for w in self._workers] + [w.process.sentinel for w in self._workers],
                 timeout=max(0.0, left))
            # 4. Collect results; replace workers that died or missed their deadline.
            for w in list(self._workers):
                self._collect(w, queue, crashes, results)
        return results

    def _collect(self, w: _Worker, queue: deque[_Key], crashes: Counter[_Key],
                 results: dict[_Key, bool | None]) -> None:
        """Handle whatever one worker has to say: ready, a verdict, its death, or its silence."""
        try:
            msg = w.conn.recv() if w.conn.poll() else None
        except (EOFError, OSError):
            msg = ("dead", None)
        if msg is None and not w.process.is_alive():
            msg = ("dead", None)
        if msg is None:
            if time.monotonic() < w.deadline:
                return
            msg = ("late", None)
        kind, value = msg
        key = w.key
        if kind == "ready":
            w.ready, w.deadline, self._startup_failures = True, float("inf"), 0
        elif kind in ("ok", "error"):
            w.key, w.deadline = None, float("inf")
            seconds = round(time.monotonic() - w.started, 6)
            if kind == "error":
                logger.warning("grading %r vs %r raised %s; recorded as ungraded", *key, value)
            self._notes[key] = GradeNote(None if kind == "ok" else f"the check raised {value}", seconds)
            results[key] = value if kind == "ok" else None
        elif not w.ready:
            self._drop(w, "did not start" if kind == "late" else "died while starting")
            self._startup_failures += 1
            if self._startup_failures >= _MAX_STARTUP_FAILURES:
                raise RuntimeError(
                    f"{self._startup_failures} grading workers in a row failed to start (exit code "
                    f"{w.exitcode}); check that {self.check!r} and math-verify import in a "
                    "fresh Python process"
                )
        elif key is None:
            self._drop(w, "died while idle")
        elif kind == "late":
            seconds = round(time.monotonic() - w.started, 6)
            self._drop(w, f"killed after {self.deadline:g}s on {key!r}")
            logger.warning("grading %r vs %r did not finish within %gs; its worker was killed and "
                           "the answer is recorded as ungraded", *key, self.deadline)
            self._notes[key] = GradeNote(f"the check did not finish within {self.deadline:g} s (its worker was "
                                         "killed)", seconds)
            results[key] = None
        else:
            self._drop(w, f"died on {key!r}")
            crashes[key] += 1
            if crashes[key] >= 2:
                logger.warning("grading %r vs %r crashed its worker twice (exit code %s); the "
                               "answer is recorded as ungraded", *key, w.exitcode)
                self._notes[key] = GradeNote(f"the check crashed its worker twice (exit code {w.exitcode})")
                results[key] = None
            else:
                logger.warning("grading %r vs %r crashed its worker (exit code %s); retrying once",
                               *key, w.exitcode)
                queue.appendleft(key)

    def _drop(self, w: _Worker, why: str) -> None:
        """Kill one worker for real and forget it; the next loop starts a fresh one if needed."""
        logger.debug("grading worker %s %s", w.process.pid, why)
        w.stop(kill=True)
        self._workers.remove(w)
