"""Grading BFCL answers with BFCL's own checker, run in bfcl-eval's environment.

The checker (``bfcl_eval.eval_checker.ast_eval.ast_checker``) is not rewritten here: a worker process
started with bfcl-eval's Python (:mod:`tts.benchmarks.bfcl_worker`) runs it. One worker serves a
grader for its whole life (importing bfcl_eval takes seconds: it imports every model handler), and
the answers of a whole batch of problems go to it in one request.

What is sent per answer mirrors what bfcl-eval's eval runner feeds its checker for an FC model: the
answer's calls (:func:`tts.backends.tool_calls.answer_calls`) decoded as
``OpenAICompletionsHandler.decode_ast`` decodes ``message.tool_calls``, a list of
``{name: {argument: value}}`` with names as the model wrote them; the functions as BFCL's data file
has them (without the language hint the model saw, as ``evaluate_task`` loads them); the
possible-answer record; the category and language. An answer that is not a call list decodes to
no call: right for irrelevance (BFCL: a reply without a call, or whose calls decode to nothing, is
right there), counted as ``no_answer`` (so wrong) elsewhere, without asking the worker.

Verdicts are cached per (problem id, answer) for the grader's life. A worker that dies, or does not
answer a request within ``deadline`` seconds, is killed; the answers of that request are recorded
as ``ungraded`` (no verdict, never cached) and the next request starts a fresh worker. A worker that
cannot start (bfcl-eval missing or broken) raises :class:`BFCLSetupError` saying how to fix it.
"""

from __future__ import annotations

import json
import logging
import selectors
import subprocess
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import IO, Any

from tts.backends.tool_calls import answer_calls
from tts.benchmarks.bfcl_setup import BFCLSetupError, bfcl_python, is_irrelevance
from tts.benchmarks.grading import Outcome
from tts.types import Problem

logger = logging.getLogger(__name__)

WORKER = Path(__file__).with_name("bfcl_worker.py")
_STARTUP_SECONDS = 120.0  # importing bfcl_eval on a machine busy with an inference engine


def decoded_calls(answer: str | None) -> list[dict[str, Any]] | None:
    """An answer's calls as BFCL's FC decoder gives them, ``[{name: {argument: value}}, ...]``;
    None when the answer is not a call list (text, None, an empty list)."""
    calls = answer_calls(answer)
    return None if calls is None else [{c["name"]: c["arguments"]} for c in calls]


class _Worker:
    """The checker process: bfcl-eval's Python running :mod:`tts.benchmarks.bfcl_worker`."""

    def __init__(self, python: Path) -> None:
        self.python = python
        self.stderr: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 (closed in stop())
        # -I: isolated from PYTHONPATH and user site-packages (tts's own path must not leak in).
        self.process = subprocess.Popen([str(python), "-I", str(WORKER)], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=self.stderr, bufsize=0)
        self._buffer = b""
        message = self.read(_STARTUP_SECONDS)
        if message is None or "fatal" in message or not message.get("ready"):
            why = (message or {}).get("fatal") or f"it did not start ({self.tail()})"
            self.stop()
            raise BFCLSetupError(f"BFCL's checker could not run with {python}: {why}. Rebuild its environment "
                                 "with `make bfcl-env` (or fix $TTS_BFCL_PYTHON).")

    def tail(self) -> str:
        """The end of the worker's stderr (for messages)."""
        self.stderr.seek(0)
        text = self.stderr.read().decode(errors="replace").strip()
        return text[-800:] if text else f"exit code {self.process.poll()}"

    def read(self, seconds: float) -> dict[str, Any] | None:
        """One JSON line from the worker within ``seconds``; None if it died or stayed silent."""
        deadline = time.monotonic() + seconds
        out = self.process.stdout
        assert out is not None
        with selectors.DefaultSelector() as sel:
            sel.register(out, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    return None
                chunk = out.read(1 << 16)
                if not chunk:  # EOF: the worker exited
                    return None
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return json.loads(line)

    def ask(self, items: list[dict[str, Any]], seconds: float) -> list[dict[str, Any]] | None:
        """The worker's results for ``items``; None when it died or missed the deadline."""
        try:
            assert self.process.stdin is not None
            self.process.stdin.write((json.dumps({"items": items}) + "\n").encode())
            self.process.stdin.flush()
        except OSError:
            return None
        reply = self.read(seconds)
        return None if reply is None else reply.get("results")

    def stop(self) -> None:
        """End the process: close its input (it exits), kill it if it does not."""
        try:
            if self.process.stdin is not None:
                self.process.stdin.close()
            self.process.wait(5)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait(5)
        if self.process.stdout is not None:
            self.process.stdout.close()
        self.stderr.close()


class BFCLGrader:
    """Grades answers to BFCL problems with BFCL's checker; a context manager owning its worker.

    Args:
        timeout: Unused by BFCL's checker (it has no per-check limit); kept so that a benchmark's
            grader takes the run's ``grading_timeout`` like the default grader.
        deadline: Seconds one request (a batch of answers) may take before the worker is killed
            and its answers recorded as ungraded.
        python: bfcl-eval's Python (default: :func:`tts.benchmarks.bfcl_setup.bfcl_python`).
    """

    def __init__(self, timeout: int = 5, deadline: float = 300.0, python: Path | None = None) -> None:
        if deadline <= 0:
            raise ValueError(f"deadline={deadline}: give a positive number of seconds")
        self.timeout = timeout
        self.deadline = deadline
        self._python = python
        self._worker: _Worker | None = None
        self._cache: dict[tuple[str, str], bool] = {}
        self.last_errors: dict[tuple[str, str], list[Any]] = {}
        """BFCL's error record of each wrong answer graded (by problem id and answer), for inspection."""

    def __enter__(self) -> BFCLGrader:  # noqa: PYI034 (as Grader.__enter__)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the worker process."""
        if self._worker is not None:
            self._worker.stop()
            self._worker = None

    def grade_problems(self, items: Iterable[tuple[Problem, Sequence[str | None]]]) -> list[list[Outcome]]:
        """Grade each problem's answers (one worker request for all of them).

        Args:
            items: (a problem loaded by :mod:`tts.benchmarks.bfcl`, its answers).

        Returns:
            One list of outcomes per problem, in order.

        Raises:
            ValueError: A problem that is not a BFCL problem (no ``category`` or functions in its metadata).
            BFCLSetupError: The checker's environment cannot run.
        """
        items = [(p, list(answers)) for p, answers in items]
        out: list[list[Outcome | None]] = [[None] * len(answers) for _, answers in items]
        pending: dict[tuple[str, str], tuple[dict[str, Any], list[tuple[int, int]]]] = {}
        # 1. Answers that are no call list, and cached verdicts, need no worker.
        for i, (problem, answers) in enumerate(items):
            meta = problem.metadata if isinstance(problem.metadata, dict) else {}
            category = meta.get("category")
            if not isinstance(category, str) or "bfcl_functions" not in meta:
                raise ValueError(f"problem {problem.id!r} is not a BFCL problem (its metadata has no category and "
                                 "bfcl_functions); grade it with the benchmark it was loaded from.")
            for j, answer in enumerate(answers):
                calls = decoded_calls(answer)
                if calls is None:
                    out[i][j] = Outcome.CORRECT if is_irrelevance(category) else Outcome.NO_ANSWER
                    continue
                key = (problem.id, str(answer))
                if key in self._cache:
                    out[i][j] = Outcome.CORRECT if self._cache[key] else Outcome.WRONG
                    continue
                if key not in pending:
                    request = {"category": category, "language": meta.get("language", "python"),
                               "functions": meta["bfcl_functions"], "ground_truth": meta.get("bfcl_ground_truth"),
                               "calls": calls}
                    pending[key] = (request, [])
                pending[key][1].append((i, j))
        # 2. The rest in one request to the worker.
        if pending:
            keys = list(pending)
            results = self._ask([pending[k][0] for k in keys])
            for key, result in zip(keys, results, strict=True):
                valid = None if result is None else result.get("valid")
                if valid is None:
                    outcome = Outcome.UNGRADED
                else:
                    self._cache[key] = bool(valid)
                    outcome = Outcome.CORRECT if valid else Outcome.WRONG
                    if not valid:
                        self.last_errors[key] = result.get("error", [])
                for i, j in pending[key][1]:
                    out[i][j] = outcome
        return [[o if o is not None else Outcome.UNGRADED for o in row] for row in out]

    def grade_problem(self, problem: Problem, answers: Sequence[str | None]) -> list[Outcome]:
        """Grade the answers to one problem."""
        return self.grade_problems([(problem, answers)])[0]

    def grade_many(self, pairs: Iterable[tuple[str | None, str]]) -> list[Outcome]:
        """Refused: a BFCL answer is graded against its problem's possible answers, not a gold string."""
        raise TypeError("BFCL answers are graded against their problem (functions, possible answers): call "
                        "grade_problems([(problem, answers), ...]) instead of grade_many.")

    def _ask(self, requests: list[dict[str, Any]]) -> list[dict[str, Any] | None]:
        """The worker's results, a fresh worker started if needed; all None when it fails."""
        if self._worker is None:
            self._worker = _Worker(self._python or bfcl_python())
        results = self._worker.ask(requests, self.deadline)
        if results is None or len(results) != len(requests):
            logger.warning("BFCL's checker died or missed its %gs deadline on %d answers (%s); they are recorded "
                           "as ungraded", self.deadline, len(requests), self._worker.tail())
            self._worker.stop()
            self._worker = None
            return [None] * len(requests)
        for r in results:
            if r.get("valid") is None:
                logger.warning("BFCL's checker failed on an answer (%s); recorded as ungraded", r.get("error"))
        return results
