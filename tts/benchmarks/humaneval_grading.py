"""Grading code answers by running each problem's check program in the sandbox.

An answer is correct when HumanEval's check program (:func:`tts.execution.programs.check_program`)
exits 0 in the sandbox within the time limit; a program that fails an assertion, raises, does not
parse, runs out of time or memory, or is killed is wrong. A reply without code is ``no_answer``.
Why an answer is not correct (the sandbox's status and its one-line error) and how long its check
ran are the grader's :meth:`CodeGrader.note`, which the eval runner writes into the row.

A sandbox that could not run the program at all (status ``sandbox_failed``: the machine, not the
program) is no verdict: the answer is ``ungraded``, never wrong, with the reason in its note; it is
not cached, so a later call runs the check again. All checks of one call run in parallel
sandboxes, and verdicts are cached per (problem, program) for the grader's life.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from tts.benchmarks.grading import GradeNote, Outcome
from tts.execution.programs import check_program
from tts.execution.sandbox import Execution, Limits, run_many
from tts.types import Problem

logger = logging.getLogger(__name__)

SANDBOX_FAILED = "sandbox_failed"
"""The sandbox's status for a program it could not run (an infrastructure failure, no verdict)."""


class CodeGrader:
    """Grades programs by the problem's check program (a context manager, like the math grader).

    Args:
        timeout: Wall-clock seconds one check may run (HumanEval's harness allows 3; a shared
            machine needs more).
        workers: Sandboxes run at once.
        unsafe_no_sandbox: Run the checks without bubblewrap's isolation (only by this name).
    """

    def __init__(self, timeout: int = 5, workers: int = 4, unsafe_no_sandbox: bool = False) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout={timeout}: give a positive number of seconds")
        self.limits = Limits(wall_seconds=float(timeout), cpu_seconds=max(1, int(timeout)))
        self.workers = workers
        self.unsafe_no_sandbox = unsafe_no_sandbox
        self._cache: dict[tuple[str, str], bool] = {}
        self._notes: dict[tuple[str, str], GradeNote] = {}  # the last check of each program, failed sandboxes too
        self.execution_seconds = 0.0
        """Wall seconds of all checks run so far (summed over parallel sandboxes)."""

    def __enter__(self) -> CodeGrader:  # noqa: PYI034 (as Grader.__enter__)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Nothing to stop: each check's sandbox ends with its run."""

    def grade_problems(self, items: Iterable[tuple[Problem, Sequence[str | None]]]) -> list[list[Outcome]]:
        """One outcome per answer of each problem, all checks of the call run in one parallel batch.

        Raises:
            tts.execution.sandbox.SandboxUnavailableError: bubblewrap is missing (the message says
                how to install it) and the run did not opt out of the sandbox by name.
            ValueError: A problem without HumanEval's metadata (``entry_point``, ``prompt``, ``test``).
        """
        items = [(p, list(answers)) for p, answers in items]
        todo: dict[tuple[str, str], str] = {}
        for problem, answers in items:
            meta = problem.metadata
            if not all(k in meta for k in ("entry_point", "prompt", "test")):
                raise ValueError(f"problem {problem.id} has no check program (metadata entry_point, prompt, test); "
                                 "the code grader grades HumanEval-style problems only.")
            for a in answers:
                if a is not None and a.strip() and (problem.id, a) not in self._cache:
                    todo[(problem.id, a)] = check_program(meta["prompt"], a, meta["test"], meta["entry_point"])
        if todo:
            runs = run_many(list(todo.values()), self.limits, workers=self.workers,
                            unsafe_no_sandbox=self.unsafe_no_sandbox)
            for key, run in zip(todo, runs, strict=True):
                self._record(key, run)
        return [[self._outcome(p.id, a) for a in answers] for p, answers in items]

    def _record(self, key: tuple[str, str], run: Execution) -> None:
        self.execution_seconds += run.wall_seconds
        status: str = run.status
        error = " ".join(run.error.split())[:300]  # one line, bounded: a row is read by people
        reason = None if status == "ok" else f"{status}: {error}" if error else status
        self._notes[key] = GradeNote(reason, round(run.wall_seconds, 3))
        if status == SANDBOX_FAILED:  # no verdict; not cached, so that a later call runs it again
            logger.warning("%s: the sandbox could not run the check (%s); the answer is recorded as ungraded",
                           key[0], run.error)
            self._cache.pop(key, None)
            return
        self._cache[key] = status == "ok"

    def _outcome(self, problem_id: str, answer: str | None) -> Outcome:
        if answer is None or not answer.strip():
            return Outcome.NO_ANSWER
        verdict = self._cache.get((problem_id, answer))
        if verdict is None:
            return Outcome.UNGRADED
        return Outcome.CORRECT if verdict else Outcome.WRONG

    def note(self, problem: Problem, answer: str | None) -> GradeNote | None:
        """Why ``answer`` is not correct and how long its check ran (None for a reply without code,
        or a program this grader has not checked)."""
        if answer is None or not answer.strip():
            return None
        return self._notes.get((problem.id, answer))

    def grade_many(self, pairs: Iterable[tuple[str | None, str]]) -> list[Outcome]:
        """Refused: a program is graded by its problem's check program, not against a gold string."""
        raise TypeError("code answers are graded per problem (grade_problems), not against a gold string")
