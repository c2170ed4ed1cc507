"""Answer extraction on the forms models write that tests/answers/test_answers.py does not cover:
``\\boxed 5`` and ``\\fbox``, boxes written in parts, computations stated in the answer, the
wrappings around "the answer is ...", and text that only looks like a box.

Each expected answer is the one a reader of the output would grade, written by hand.
"""

from __future__ import annotations

import time

import pytest

from tts.answers import extract_answer


@pytest.mark.parametrize("text, expected", [
    # boxes without braces, and \fbox
    ("so the total is \\boxed 5", "5"),
    ("so the total is \\boxed 5 \\text{apples}", "5"),
    ("so the total is \\boxed 12.", "12"),
    ("so \\boxed 5, out of 12 tries", "5"),
    ("so \\boxed 5 of the 12 cases", "5"),
    ("\\fbox{42}", "42"),
    ("first \\fbox{3}, then \\fbox{4}", "4"),
    ("first \\boxed{3}, then \\fbox{4}", "4"),
    ("first \\fbox{3}, then \\boxed{4}", "4"),
    ("\\fbox{(2, 2)} and \\fbox{(6, 2)}", "(2, 2),(6, 2)"),
    # a box at the very start of the output is still the answer, whatever follows
    ("\\boxed{5} is my answer; the answer is 7 if the rate is doubled", "5"),
    ("\\boxed{\\frac{1}{2}} (the answer is 3 for the other case)", "\\frac{1}{2}"),
    # boxes written in parts, adjacent or joined, are one answer; a lone "\boxed" is not a box
    ("\\boxed{(2, 2)}\\boxed{(6, 2)}", "(2, 2),(6, 2)"),
    ("\\boxed{1}, \\boxed{2} and \\boxed{3}", "1,2,3"),
    ("\\boxed{1}, \\boxed{2}, \\boxed{3}, \\boxed{4}", "1,2,3,4"),
    ("Put the result in \\boxed: \\boxed{3}", "3"),
    ("Write \\boxed, then: \\boxed{2} and \\boxed{3}", "2,3"),
    ("Use \\boxedtext to mark it. The total is 5", "5"),
    ("\\boxed{7}, as \\boxedAnswer shows", "7"),
    ("\\boxed{7}, as \\fboxStyle shows", "7"),
    # a computation on numbers states its value; an equation with a variable is kept whole
    ("\\boxed{17 + 25 = 42}", "42"),
    ("\\boxed{3 \\times 4 = 12}", "12"),
    ("\\boxed{\\frac{1}{2} = 0.5}", "0.5"),
    ("\\boxed{x = 5}", "x=5"),
    ("\\boxed{3a = 12}", "3a=12"),
    ("\\boxed{12 = 3a}", "12=3a"),
    ("The answer is $17 + 25 = 42$.", "42"),
    ("The answer is $6 \\cdot 7 = 42$.", "42"),
    ("the answer is $a = b = 17 = x$.", "17"),
    ("the answer is $\\frac{3}{56}.$", "\\frac{3}{56}"),
    # the wrappings of "the answer is ..."
    ("The answer is \\(x+1\\).", "x+1"),
    ("The answer is \\(\\frac{1}{4}\\).", "\\frac{1}{4}"),
    ("The final answer is \\[ 5 \\]", "5"),
    ("The final answer is \\[ \\frac{2}{3} \\]", "\\frac{2}{3}"),
    ("The answer is **42**.", "42"),
    ("The answer is **\\frac{1}{6}**.", "\\frac{1}{6}"),
    ("The answer is 42.**", "42"),
    ("**The answer is 42**", "42"),
    ("The answer is $$\\frac{5}{8}$$.", "\\frac{5}{8}"),
    ("The answer is 3.5.", "3.5"),
    ("The answer is $x = 7$; the check holds.", "x=7"),
    ("The answer is 1,000 apples.", "1000"),
    ("The answer is 12,500 dollars.", "12500"),
    ("the answer is 3 apples and 4 pears.", "3 apples and 4 pears"),
    # no phrase, no box: the last statement of the output
    ("So $96 + 48 = 144$", "144"),
    ("so $y = 2x + 3$", "y=2x+3"),
    ("The values of $x$ are found from $x = 83$", "83"),
    ("We need $k-1=1$, and $k=2$", "2"),
    ("We need $k-1=1$, or $k=2$", "2"),
    ("Then $n = 2 \\cdot 10^{3} + 5$", "2\\cdot10^{3}+5"),
    ("Then $a = \\sqrt{2}$", "\\sqrt{2}"),
    ("$$x = \\frac{1}{2}$$", "\\frac{1}{2}"),
    ("The length is $\\ell = 12 \\text{ cm}$", "12"),
])
def test_extracts_the_answer_a_reader_would_grade(text, expected):
    found = extract_answer(text)
    assert found is not None and found.replace(" ", "") == expected.replace(" ", ""), (text, found)


@pytest.mark.parametrize("span", [
    "\\binom{1000000}{500000}", "\\dbinom{2^{20}}{3}", "\\Gamma(10^{6}!)", "\\lfloor 2^{2^{40}} \\rfloor",
    "(" * 40 + "1" + ")" * 40,
])
def test_spans_that_would_make_the_parser_evaluate_for_minutes_are_read_as_written(span):
    start = time.monotonic()
    assert extract_answer(f"So we get \\boxed{{{span}}}") == span
    assert time.monotonic() - start < 5
