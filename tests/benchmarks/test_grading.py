"""Grader: verdicts, "no answer", and surviving checks that hang or kill their worker process."""

import os
import time
from pathlib import Path

import pytest

from tts.benchmarks.grading import GradeNote, Grader, Outcome, _verify_in_worker
from tts.types import Problem

# Pairs that need math-verify (no string match), with their true verdicts.
BEFORE = [("\\frac{1}{2}", "0.5"), ("3", "4")]
AFTER = [("2\\sqrt{2}", "\\sqrt{8}"), ("0.25", "\\frac{1}{4}"), ("9", "10")]
C, W, U = Outcome.CORRECT, Outcome.WRONG, Outcome.UNGRADED
# The gold answer of the fault-injecting answers below, which hold a path under pytest's temp
# folder: no string a path can contain (a gold "1" was once matched inside "/tmp/pytest-1/...").
GOLD = "\\sqrt{2}"


# Fault-injecting checks: module-level so that spawned workers can unpickle them. The answer
# names a file where the worker writes its pid, so the test can see which processes ran it.
def _hangs_on_marker(gold: str, answer: str, timeout: int) -> bool:
    """Hangs forever on answers "hang:<pid file>"; math-verify otherwise."""
    if answer.startswith("hang:"):
        Path(answer.removeprefix("hang:")).write_text(str(os.getpid()))
        while True:
            time.sleep(1)
    return _verify_in_worker(gold, answer, timeout)


def _dies_on_marker(gold: str, answer: str, timeout: int) -> bool:
    """Kills its own worker on "die:<pid file>" (every time) and "die-once:<pid file>" (the first
    time; True after that); math-verify otherwise."""
    for prefix in ("die:", "die-once:"):
        if answer.startswith(prefix):
            pid_file = Path(answer.removeprefix(prefix))
            if prefix == "die-once:" and pid_file.exists():
                return True
            with pid_file.open("a") as f:
                f.write(f"{os.getpid()}\n")
            os.kill(os.getpid(), 9)
    return _verify_in_worker(gold, answer, timeout)


def _raises_on_marker(gold: str, answer: str, timeout: int) -> bool:
    """Raises on the answer "raise"; math-verify otherwise."""
    if answer == "raise":
        raise ValueError("cannot compare")
    return _verify_in_worker(gold, answer, timeout)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _pids(pid_file: Path) -> list[int]:
    return [int(line) for line in pid_file.read_text().split()]


def test_grades_equivalent_forms_and_counts_no_answer_separately():
    with Grader(timeout=5) as g:
        out = g.grade_many(
            [("\\frac{1}{2}", "0.5"), ("7", "7"), ("8", "7"), (None, "7"), ("", "7"), ("2\\sqrt{2}", "\\sqrt{8}")]
        )
    assert out == [Outcome.CORRECT, Outcome.CORRECT, Outcome.WRONG, Outcome.NO_ANSWER, Outcome.NO_ANSWER,
                   Outcome.CORRECT]


# Answers that contain the gold answer, or are contained in it, as a string: a substring is not a
# number's value ("142" is not 42, "-42" is not 42). Beside them, forms that are equal.
NEAR_MISSES = [("142", "42"), ("-42", "42"), ("42", "-42"), ("4", "42"), ("12", "2"), ("1", "10"),
               ("\\frac{1}{2}", "\\frac{1}{23}"), ("42\\%", "142\\%"), ("5", "15\\text{ cm}")]
EQUALS = [("42", "42"), ("\\frac{1}{2}", "0.5"), ("x=42", "42"), ("-\\frac{1}{2}", "-0.5")]


def test_verdicts_agree_with_math_verify_called_directly():
    """The grader is math-verify OR a normalised string match: on answers that contain the gold
    answer as a substring (a shortcut that matched substrings would call "142" right for 42) its
    verdicts are math-verify's own, computed here without the grader's workers or shortcut."""
    from math_verify import parse, verify

    pairs = NEAR_MISSES + EQUALS
    reference = [verify(parse(gold), parse(answer)) for answer, gold in pairs]
    assert reference == [False] * len(NEAR_MISSES) + [True] * len(EQUALS)  # the reference itself
    with Grader(timeout=5) as g:
        out = g.grade_many(pairs)
    assert out == [C if ok else W for ok in reference]


def test_each_check_is_timed_and_a_verdict_needs_no_reason():
    half = Problem("p", "Half of one?", "\\frac{1}{2}")
    with Grader(timeout=5) as g:
        [out] = g.grade_problems([(half, ["0.5", "3", "\\frac{1}{2}", None])])
        assert out == [C, W, C, Outcome.NO_ANSWER]
        checked, wrong, matched, missing = (g.note(half, a) for a in ("0.5", "3", "\\frac{1}{2}", None))
    # math-verify in a worker; a time to the microsecond (a wrong answer's check can take under 0.5 ms,
    # which three decimals recorded as 0.0)
    # (under the grader's 5 s: a check that took longer would have been stopped)
    assert checked.reason is None and 0 < checked.seconds < 5
    assert wrong.reason is None and 0 < wrong.seconds < 5  # "not equal" is its own reason
    assert matched == GradeNote(None, 0.0) and missing is None  # a string match runs no check


def test_a_check_that_raises_is_ungraded_with_the_exception_as_its_reason(caplog):
    with Grader(timeout=5, check=_raises_on_marker) as g:
        assert g.grade_many([("raise", GOLD), ("3", "4")]) == [U, W]
        note = g.note(Problem("p", "?", GOLD), "raise")
    assert note.reason == "the check raised ValueError: cannot compare" and 0 < note.seconds < 20
    assert "raised ValueError: cannot compare; recorded as ungraded" in caplog.text


def test_a_problem_without_a_gold_answer_has_its_checks_noted_against_the_empty_gold():
    with Grader(timeout=5) as g:
        gold_less = Problem("p", "?", None)
        assert g.grade_problems([(gold_less, ["5"])]) == [[W]]
        note = g.note(gold_less, "5")
    assert note is not None and note.reason is None and 0 < note.seconds < 5


def test_unparseable_answer_is_wrong_not_an_error():
    with Grader(timeout=2) as g:
        assert g.grade("\\frac{{{", "3") is Outcome.WRONG


@pytest.mark.timeout(60)
def test_a_check_that_hangs_is_ungraded_its_worker_killed_and_the_others_graded(tmp_path):
    culprit = (f"hang:{tmp_path / 'pid'}", GOLD)
    with Grader(timeout=1, deadline=2, check=_hangs_on_marker) as g:
        start = time.monotonic()
        out = g.grade_many([*BEFORE, culprit, *AFTER])
        elapsed = time.monotonic() - start
        assert out == [C, W, U, C, C, W]
        assert elapsed < 20  # spawn + deadline + respawn, not the old 3 * timeout + 30 s per hang
        assert not _alive(int((tmp_path / "pid").read_text())), "the hung worker must be killed"
        # Why it has no verdict is the grader's note (the eval runner writes it into the row).
        note = g.note(Problem("p", "?", GOLD), culprit[0])
        assert note.reason == "the check did not finish within 2 s (its worker was killed)"
        assert isinstance(note.seconds, float) and 2 <= note.seconds < 5  # stopped at its 2 s deadline
        # The same Grader still works; the culprit stays ungraded here without a second wait.
        start = time.monotonic()
        assert g.grade_many([culprit, ("1.5", "\\frac{3}{2}"), ("2", "3")]) == [U, C, W]
        assert time.monotonic() - start < 2


@pytest.mark.timeout(60)
def test_b_check_that_kills_its_worker_is_retried_once_then_ungraded(tmp_path):
    culprit = (f"die:{tmp_path / 'pids'}", GOLD)
    with Grader(timeout=1, workers=2, check=_dies_on_marker) as g:
        assert g.grade_many([*BEFORE, culprit, *AFTER]) == [C, W, U, C, C, W]
        pids = _pids(tmp_path / "pids")
        assert len(set(pids)) == 2, "one retry, on a fresh worker"
        assert not any(_alive(p) for p in pids)
        assert g.grade_many([culprit, ("1.5", "\\frac{3}{2}"), ("2", "3")]) == [U, C, W]
        assert g.note(Problem("p", "?", GOLD), culprit[0]).reason == "the check crashed its worker twice (exit code -9)"


@pytest.mark.timeout(60)
def test_a_worker_crash_that_does_not_recur_is_graded_on_retry(tmp_path):
    flaky = (f"die-once:{tmp_path / 'pids'}", GOLD)
    with Grader(timeout=1, check=_dies_on_marker) as g:
        assert g.grade_many([*BEFORE, flaky, *AFTER]) == [C, W, C, C, C, W]
    assert len(_pids(tmp_path / "pids")) == 1


def test_check_must_be_a_module_level_function():
    with pytest.raises(TypeError, match="module-level function"):
        Grader(check=lambda gold, answer, timeout: True)
