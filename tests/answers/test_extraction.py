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


def _graded_equal(answer: str, gold: str) -> bool:
    """math-verify called directly, as a grader would call it: does ``answer`` state ``gold``?"""
    import math_verify

    return bool(math_verify.verify(math_verify.parse(f"${gold}$", parsing_timeout=None),
                                   math_verify.parse(f"${answer}$", parsing_timeout=None), timeout_seconds=None))


@pytest.mark.parametrize("text, gold", [
    # A decimal written without its leading zero keeps its point: ".5" is a half, not 5.
    ("The answer is .5", "0.5"),
    ("The answer is .5 apples.", "0.5"),
    ("The answer is $.25$.", "\\frac{1}{4}"),
    ("The answer is -.5 liters.", "-0.5"),
    # Units after a number with trailing zeros (math-verify reads "2.5", a digit short of the phrase).
    ("The answer is 2.50 dollars.", "2.5"),
    ("The answer is 3.0 meters.", "3"),
    # Two formulas after the phrase are both the answer (no "3$ or $4" with a delimiter inside).
    ("The answer is $3$ or $4$.", "\\{3, 4\\}"),
    ("The answer is \\(3\\) or \\(4\\).", "\\{3, 4\\}"),
    ("The answer is $3$, $4$.", "\\{3, 4\\}"),
    # The Unicode minus sign (U+2212) is a minus sign, also where only the last number is read.
    ("so we get −7", "-7"),
    ("so we get −1,250", "-1250"),
    ("The answer is −7 apples.", "-7"),
    ("the probability is ≈.5", "0.5"),
])
def test_answers_after_the_phrase_grade_as_math_verify_reads_the_gold(text, gold):
    found = extract_answer(text)
    assert found is not None and "$" not in found and "\\(" not in found, (text, found)
    assert _graded_equal(found, gold), (text, found, gold)


def test_a_decimal_without_its_leading_zero_is_not_graded_as_its_digits():
    # The bug this guards against: ".5" read as "5" after "the answer is" (math-verify's own reading of
    # "$.5$" is \frac{1}{2}, whose digits differ from the phrase's, so the lone-number rule took "5").
    assert not _graded_equal("5", "0.5")
    assert extract_answer("The answer is .5") == ".5"
    assert extract_answer("The answer is $.25$.") == ".25"
    assert extract_answer("The answer is 2.50 dollars.") == "2.50"


@pytest.mark.parametrize("text, expected", [
    # Markdown emphasis around the answer, and delimiters around all of it, are markup.
    ("The answer is *42*.", "42"),
    ("The answer is ***42***.", "42"),
    ("The answer is ***\\frac{1}{2}***.", "\\frac{1}{2}"),
    ("The answer is **Tuesday.**", "Tuesday"),
    ("Final answer: **Tuesday.**", "Tuesday"),
    ("The answer is $\\text{Tuesday}$.", "\\text{Tuesday}"),
    ("The answer is $$\\text{Tuesday}$$.", "\\text{Tuesday}"),
    ("The answer is \\(\\text{Tuesday}\\).", "\\text{Tuesday}"),
    ("The answer is \\[\\text{Tuesday}\\]", "\\text{Tuesday}"),
    ("The answer is $\\$5$.", "\\$5"),  # an escaped dollar is a currency sign, not a delimiter
    ("The answer is $4X$.", "4X"),
    ("The answer is **3** or **4**.", "3 or 4"),
    ("Final answer: **B**", "B"),
    ("**The answer is\nTuesday.**", "Tuesday"),  # bold across lines: its stars are cut apart
    ("so it is $5 ;$", "5"),
    # A reading kept as written (too slow to parse) loses its delimiters all the same.
    ("The answer is $$\\binom{100000}{3}$$.", "\\binom{100000}{3}"),
    ("The answer is $\\binom{100000}{3}$.", "\\binom{100000}{3}"),
    # Numbers as plain text where only the number is read: no digit-group commas, an ASCII minus.
    ("so we get −1,250", "-1250"),
    ("The answer is −7 apples.", "-7"),
    ("The answer is .5 apples.", ".5"),
    # Delimiters with nothing between them state nothing: the output's last statement is read instead.
    ("The final answer is\n$$\n42\n$$", "42"),
    ("We get 3 + 4 = 7. The answer is $", "7"),  # cut off after the opening dollar
    ("We get 3 + 4 = 7. The answer is $$.", "7"),
    ("We get 3 + 4 = 7. The answer is \\(\\).", "7"),
    ("We get 3 + 4 = 7. The answer is ****.", "7"),
])
def test_wrappings_around_the_phrases_answer(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize("text, expected", [
    # Math that names a lone variable is prose, in every delimiter and with its punctuation inside.
    ("Thus there are \\(2\\) different values of \\(x\\).", "2"),
    ("There are $3$ choices for $X$.", "3"),
    ("Thus there are $2$ values of $x.$", "2"),
    ("Thus there are $2$ values of $x,$ both positive", "2"),
    # Capital letters are variables too: the equation is kept whole, not cut to its right side.
    ("\\boxed{2N = 24}", "2N = 24"),
    ("so $P = 2N + 1$", "P = 2N + 1"),
    ("so we get $2X$", "2X"),
    # A system, and a chain of variables, state no single value.
    ("Solving the system gives $x = 1; y = 2$", "x = 1; y = 2"),
    ("so $x=y=z$", "x=y=z"),
    # A formula the parser cannot read (cut off) is returned as written, never a crash.
    ("so the area is $2\\pi r^$", "2\\pi r^"),
    # Boxes without braces written in parts are one answer, like boxes with braces.
    ("The roots are \\boxed 2 and \\boxed 3", "2,3"),
    # A command that only starts like \boxed is not a box: the box before it is the answer.
    ("\\boxed{7}. Note that \\boxedAnswer is only our macro; the answer is 3 if the rate doubles.", "7"),
    ("\\boxed{1} and \\boxed{2}; \\boxedAnswer is our macro; the answer is 3 if the rate doubles.", "1,2"),
    # A complete box stays the answer when the output is cut off inside a later one, also a box
    # inside the phrase's computation.
    ("\\boxed{5} is my answer; the final answer for a doubled rate is $7$. Checking: \\boxed{", "5"),
    ("The answer is 12 + 30 = \\boxed{42}.\n\nTo double-check, \\boxed{", "42"),
    # Boxes too slow to parse together are joined as written.
    ("\\boxed{\\binom{100000}{3}} and \\boxed{2}", "\\binom{100000}{3}, 2"),
    # Words after the number are units, in capitals too; LaTeX commands (capitalised or not) are not words.
    ("The answer is 7 USD.", "7"),
    ("The answer is 12 CM.", "12"),
    ("The answer is 5 \\Omega.", "5 \\Omega"),
    ("The answer is \\Delta t = 5.", "\\Delta t = 5"),
])
def test_lone_variables_capital_letters_and_boxes(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize("whole, cut", [("3", "3 \\pm"), ("2", "(1, 2"), ("5", "5 \\foo"), ("3", "3 + \\frac{")])
def test_a_formula_cut_off_does_not_vote_with_the_number_it_starts_with(whole, cut):
    # math-verify reads "3 \pm" as nothing (its first reading fails); a reader that went on to the next
    # reading would find the 3 and count a cut-off answer as a vote for 3.
    from tts.answers import AnswerKeys

    keys = AnswerKeys().keys([whole, cut])
    assert keys[0] != keys[1]


def test_extraction_logs_no_warning_about_math_verifys_timeouts(monkeypatch, caplog):
    """math-verify warns once per process that its timeouts are off; they are off on purpose here
    (the inputs are bounded instead), so the warning is dropped rather than shown to every user."""
    import logging

    import math_verify.grader
    import math_verify.parser

    from tts.answers import AnswerKeys, extraction

    # As in a fresh process: math-verify has not warned yet, and tts has not set up its loggers.
    for module in (math_verify.parser, math_verify.grader):
        monkeypatch.setattr(module, "TIMEOUT_WARNING_SHOWN", False)
        monkeypatch.setattr(logging.getLogger(module.__name__), "filters", [])
    extraction._math_verify.cache_clear()
    with caplog.at_level(logging.WARNING):
        assert extract_answer("so the probability is $\\frac{1}{3}$") == "\\frac{1}{3}"
        assert AnswerKeys().keys(["0.5", "\\frac{1}{2}"]) == ["0.5", "0.5"]
    assert math_verify.parser.TIMEOUT_WARNING_SHOWN and math_verify.grader.TIMEOUT_WARNING_SHOWN
    assert not [r for r in caplog.records if "Timeout" in r.getMessage()]
    other = logging.getLogger("math_verify.parser").makeRecord("math_verify.parser", logging.WARNING, __file__, 1,
                                                                "Error parsing %r", ("x",), None)
    assert logging.getLogger("math_verify.parser").filter(other)  # its other warnings still pass


def test_a_numeric_right_side_of_up_to_40_characters_is_the_answer_and_a_longer_one_keeps_its_equation():
    forty, forty_one = "11" + "+1" * 19, "111" + "+1" * 19
    assert (len(forty), len(forty_one)) == (40, 41)
    assert extract_answer(f"so $x = {forty}$") == forty
    assert extract_answer(f"so $x = {forty_one}$") == f"x = {forty_one}"


def test_the_parser_guard_counts_bracket_nesting_up_to_30_deep():
    """Spans nested deeper than 30 brackets are kept from the LaTeX parser (it recurses for minutes
    there); the depth is the nesting, not the number of brackets, and letters are not brackets."""
    from tts.answers.extraction import _too_risky

    def nested(depth: int, inner: str = "1", step: str = "(") -> str:
        return step * depth + inner + ")" * depth

    assert not _too_risky(nested(30)) and _too_risky(nested(31))
    assert _too_risky(nested(31, step="(X+"))  # terms between the brackets do not close them
    assert not _too_risky("()" * 100)  # a hundred brackets side by side are one deep
    assert not _too_risky("()" + nested(30)) and not _too_risky("(" + nested(29) + ")" + nested(30))
    assert _too_risky("(" * 20 + ")" + nested(12) + ")" * 19)  # closing one and opening twelve: 31 deep
    assert not _too_risky("+".join(f"X^{{{k}}}" for k in range(40)))  # a polynomial in X, two deep


def test_the_parser_guard_looks_for_slow_arguments_in_the_80_characters_after_the_command():
    from tts.answers.extraction import _too_risky

    # "\binom" then 80 characters: a power at the 80th of them is the command's argument, one after
    # them is not (a small binomial followed by a power elsewhere in the answer is read as usual).
    assert _too_risky("\\binom{2}{1}" + " " * 73 + "^2")
    assert not _too_risky("\\binom{2}{1}" + " " * 74 + "^2")
    assert not _too_risky("\\binom{2}{1}" + " " * 200 + "x^2")
    assert _too_risky("\\lfloor 10^{10^{10}} \\rfloor") and not _too_risky("\\lfloor 2.5 \\rfloor")


def test_boxes_up_to_1000_characters_are_read_by_math_verify_and_longer_ones_as_written():
    """The parser's time grows with the span: a box's content (or boxes' together) over
    ``_MAX_SPAN`` = 1000 characters is returned as written; up to it, as math-verify reads it
    (``\\dfrac`` becomes ``\\frac``)."""
    def content(n: int, denominator: int = 2) -> str:
        return (f"\\dfrac{{1}}{{{denominator}}}" + "~" * n)[:n]

    assert extract_answer(f"so \\boxed{{{content(1000)}}}").startswith("\\frac{1}{2}~")
    assert extract_answer(f"so \\boxed{{{content(1001)}}}") == content(1001)
    together = extract_answer(f"so \\boxed{{{content(500)}}} and \\boxed{{{content(500, 3)}}}")
    assert "\\frac{1}{2}" in together and "\\frac{1}{3}" in together and "dfrac" not in together
    alone = extract_answer(f"so \\boxed{{{content(500)}}} and \\boxed{{{content(501, 3)}}}")
    assert "\\frac{1}{2}" not in alone and alone.startswith("\\frac{1}{3}")


@pytest.mark.parametrize("text", [
    "The answer is \\boxed{}.",
    "The answer is \\boxed{ }.",
    "so \\boxed{\\text{}}",
    "So the answer is $\\boxed{\\boxed{ }}$",
    "Final: \\fbox{}",
    "The answer is \\boxed{}\\boxed{ }.",
    "so \\fbox{\\text{ }}",
])
def test_an_empty_box_is_no_answer(text):
    # Seen on SmolLM2: "The answer is \boxed{}." was read as the answer "\boxed{}" and voted on.
    assert extract_answer(text) is None


def test_an_empty_box_does_not_hide_a_stated_answer():
    assert extract_answer("\\boxed{} so the total is 5") == "5"
    assert extract_answer("\\boxed{3} and \\boxed{}") == "3"
    assert extract_answer("The answer is \\boxed{7}.") == "7"
    # An empty box beside something else is not an empty answer.
    assert extract_answer("The answer is \\boxed{} + 1.") == "\\boxed{} + 1"
