"""What a program printed, read as program_vote's answer: the last line as one value, never a number
found inside other text (issue 48: ``{'LANG': 'C.UTF-8'}`` was read as -8)."""

from __future__ import annotations

import pytest

from tts.answers.extraction import normalize_answer
from tts.execution.sandbox import Execution
from tts.search.sampling.program_vote import printed_answer


def _printed(stdout: str) -> str | None:
    return printed_answer(Execution("ok", 0, stdout, ""))


@pytest.mark.parametrize(("line", "value"), [
    ("42", "42"), ("-3", "-3"), ("0.5", "0.5"), ("1/2", "1/2"), ("-0.25", "-0.25"),
    ("\\frac{1}{2}", "\\frac{1}{2}"), ("\\dfrac{1}{2}", "\\frac{1}{2}"), ("$42$", "42"), ("\\boxed{7}", "7"),
    ("(1, 2)", "(1, 2)"), ("2\\sqrt{2}", "2\\sqrt{2}"),
    ("1e-05", "0.00001"), ("1.5e+20", "150000000000000000000"),  # Python's float print, not "e - 5"
    ("The answer is 42.", "42"), ("answer: 1/2", "1/2"),
])
def test_a_line_that_is_one_value_is_the_answer(line, value):
    assert _printed(f"working...\n{line}\n\n") == value


@pytest.mark.parametrize("line", [
    "{'LANG': 'C.UTF-8', 'PATH': '/usr/bin'}",  # a dict: its digits are no answer
    "{'a': 1}", "C.UTF-8", "step 3: 7", "42 apples", "total = 17 + 25 = 42 items",
    "3 4",  # print(3, 4): two values
    "[1 2]",  # a numpy array
    "True", "nan", "sqrt(2)/2",
])
def test_a_line_with_digits_inside_other_text_is_no_answer(line):
    assert _printed(f"42\n{line}\n") is None  # the last line decides, not an earlier number


def test_a_failed_or_silent_program_is_no_answer():
    assert printed_answer(Execution("error", 1, "42\n", "", "ValueError: no")) is None
    assert _printed("\n  \n") is None


def test_printed_forms_of_one_value_vote_as_one():
    assert {normalize_answer(_printed(x)) for x in ("42", "42.", "The answer is 42", "$42$")} == {"42"}


@pytest.mark.parametrize(("line", "value"), [
    ("1e+50", "1" + "0" * 50), ("1e-50", "0." + "0" * 49 + "1"),  # up to 50 digits of magnitude: written out
    ("1e+51", None), ("1e-51", None),  # beyond: no answer rather than a 52-digit number
    ("3X", "3X"),  # a trailing letter stays: not read as 3
    ('"42"', None),  # a quoted string is text, not the number
    ("\\(3\\)", "3"),  # inline math is read as written, not wrapped again
    ("$3$, $4$", None), ("$3$,4", None),  # two values, or a reading that drops a digit: no answer
])
def test_the_edges_of_one_printed_value(line, value):
    assert _printed(line) == value
