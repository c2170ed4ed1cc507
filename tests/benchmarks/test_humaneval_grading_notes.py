"""The code grader's word on each answer (issue 48): why it is not correct, how long its check ran,
and a sandbox that could not run a check is no verdict (ungraded), never a wrong answer. The
sandbox is faked here (``run_many``), so these run with or without bubblewrap."""

from __future__ import annotations

import pytest

from tts.benchmarks.grading import GradeNote, Outcome
from tts.benchmarks.humaneval_grading import CodeGrader
from tts.execution.sandbox import Execution
from tts.types import Problem

PROBLEM = Problem("HumanEval/0", "def f():\n", "def f():\n    return 1\n",
                  {"entry_point": "f", "prompt": "def f():\n", "test": "def check(f):\n    assert f() == 1\n"})
RIGHT, WRONG, SLOW, UNLUCKY = ("def f():\n    return 1", "def f():\n    return 2", "def f():\n    while 1: pass",
                               "def f():\n    return 1  # its sandbox did not start")


@pytest.fixture
def sandbox_runs(monkeypatch):
    """A fake sandbox: each program's Execution by what its answer says; the batches it was given."""
    batches: list[int] = []
    infra_failures = [1]  # UNLUCKY's sandbox fails once, then runs

    def fake_run_many(programs, limits, workers=4, unsafe_no_sandbox=False):
        batches.append(len(programs))
        out = []
        for src in programs:
            if "return 2" in src:
                out.append(Execution("error", 1, "", "Traceback ...\nAssertionError\n", "AssertionError", 0.25))
            elif "while 1" in src:
                out.append(Execution("timeout", None, "", "", "ran past 5 s", 5.01))
            elif "did not start" in src and infra_failures:
                infra_failures.pop()
                out.append(Execution("sandbox_failed", None, "", "", "bwrap: Can't fork: Resource\n temporarily "
                                                                     "unavailable", 0.01))
            else:
                out.append(Execution("ok", 0, "", "", "", 0.125))
        return out

    monkeypatch.setattr("tts.benchmarks.humaneval_grading.run_many", fake_run_many)
    return batches


def test_each_answer_says_why_it_is_not_correct_and_how_long_its_check_ran(sandbox_runs):
    grader = CodeGrader()
    [outcomes] = grader.grade_problems([(PROBLEM, [RIGHT, WRONG, SLOW, None])])
    assert outcomes == [Outcome.CORRECT, Outcome.WRONG, Outcome.WRONG, Outcome.NO_ANSWER]
    assert [grader.note(PROBLEM, a) for a in (RIGHT, WRONG, SLOW, None)] == [
        GradeNote(None, 0.125), GradeNote("error: AssertionError", 0.25), GradeNote("timeout: ran past 5 s", 5.01),
        None]


def test_a_sandbox_that_could_not_run_the_check_is_ungraded_never_wrong_and_runs_again(sandbox_runs):
    grader = CodeGrader()
    [first] = grader.grade_problems([(PROBLEM, [UNLUCKY, WRONG, UNLUCKY])])
    assert first == [Outcome.UNGRADED, Outcome.WRONG, Outcome.UNGRADED]
    note = grader.note(PROBLEM, UNLUCKY)
    assert note.reason == "sandbox_failed: bwrap: Can't fork: Resource temporarily unavailable"  # one line
    # No verdict was cached: the next call runs the check again (and this time its sandbox starts);
    # the wrong answer's verdict was cached and does not run again.
    [second] = grader.grade_problems([(PROBLEM, [UNLUCKY, WRONG])])
    assert second == [Outcome.CORRECT, Outcome.WRONG]
    assert sandbox_runs == [2, 1] and grader.note(PROBLEM, UNLUCKY) == GradeNote(None, 0.125)
