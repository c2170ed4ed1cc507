"""Exact values of plain arithmetic (tts.answers.exact): the value a stated computation votes as,
and what the arithmetic verifiers check an equality with.

Checked against an independent reference: expressions built from random fractions, whose value is
computed on the tree with Python's Fraction arithmetic before it is written out as text.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tts.answers.exact import MAX_DIGITS, NotPlainArithmetic, exact_value


def _number(value: Fraction) -> str:
    """A non-negative fraction written as a decimal when it has a short one, else as p/q in brackets."""
    if value.denominator == 1:
        return str(value.numerator)
    if value.denominator in (2, 4, 5, 8, 10, 20, 25, 50, 100):
        text = f"{float(value):.6f}".rstrip("0")
        assert Fraction(text) == value
        return text
    return f"({value.numerator} / {value.denominator})"


leaves = st.builds(Fraction, st.integers(0, 99), st.sampled_from([1, 1, 2, 3, 4, 5, 7, 10])).map(
    lambda v: (v, _number(v)))


def _combine(children):
    def unary(pair):
        value, text = pair
        return st.sampled_from([(-value, f"-{text}"), (value, f"+{text}"), (-value, f"-({text})")])

    def binary(pair):
        (a, ta), (b, tb) = pair
        ops = [(a + b, f"({ta} + {tb})"), (a - b, f"({ta} - {tb})"), (a * b, f"{ta} * {tb}"),
               (a * b, f"({ta})*({tb})")]
        if b != 0:
            ops.append((a / b, f"({ta}) / ({tb})"))
        return st.sampled_from(ops)

    return children.flatmap(unary) | st.tuples(children, children).flatmap(binary)


expressions = st.recursive(leaves, _combine, max_leaves=6)


@given(expressions)
def test_the_value_of_a_computation_is_exact(expression):
    value, text = expression
    assert exact_value(text) == value


@pytest.mark.parametrize("text, value", [
    ("-0.1", Fraction(-1, 10)), ("0.1 * 3", Fraction(3, 10)), ("-5", -5), ("+5", 5), ("--5", 5),
    ("-(2 - 5)", 3), ("- 3 * 2", -6), ("3 - -2", 5), ("(3 + 5) / 2", 4), ("1 / 3 + 1 / 6", Fraction(1, 2)),
    ("  7  ", 7), ("0.000001", Fraction(1, 10**6)), ("1" * MAX_DIGITS, int("1" * MAX_DIGITS)),
])
def test_signs_decimals_and_brackets(text, value):
    assert exact_value(text) == value


def test_a_text_of_max_chars_is_read_and_a_longer_one_refused():
    text = "+".join(["1"] * 99) + "+10"  # 200 characters, the default limit
    assert len(text) == 200 and exact_value(text) == 109
    longer = text + "0"
    with pytest.raises(NotPlainArithmetic) as refused:
        exact_value(longer)
    assert refused.value.args == (longer,)
    assert exact_value(longer, max_chars=201) == 199
    with pytest.raises(NotPlainArithmetic):
        exact_value("1 + 2", max_chars=4)


@pytest.mark.parametrize("text", [
    "2**3", "7 // 2", "7 % 2", "1 << 3", "5 & 3", "~1", "not 1", "x", "2 * x", "abs(-3)", "sqrt(4)", "1j",
    "True", "'3'", "[1]", "1 if 2 else 3", "1 < 2",
])
def test_anything_but_numbers_and_plus_minus_times_divide_is_refused(text):
    with pytest.raises(NotPlainArithmetic) as refused:
        exact_value(text)
    assert refused.value.args[0]  # says what it refused (the construct, as the parser saw it)


@pytest.mark.parametrize("text, named", [
    ("3 +", "3 +"), ("import os", "import os"), ("1; 2", "1; 2"), ("1 = 1", "1 = 1"),
    ("2 * " + "1" * (MAX_DIGITS + 1), "1" * (MAX_DIGITS + 1)), ("0." + "1" * MAX_DIGITS, "0." + "1" * MAX_DIGITS),
])
def test_unreadable_text_and_overlong_numbers_are_refused_by_name(text, named):
    with pytest.raises(NotPlainArithmetic, match=named.replace("+", r"\+").replace(".", r"\.")):
        exact_value(text)


@pytest.mark.parametrize("text", ["", "   "])
def test_an_empty_text_is_refused(text):
    with pytest.raises(NotPlainArithmetic):
        exact_value(text)


def test_a_division_by_zero_is_left_to_the_caller():
    with pytest.raises(ZeroDivisionError):
        exact_value("1 / (2 - 2)")
