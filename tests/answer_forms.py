"""Hypothesis strategies for math answers: exact values and the many ways a model writes each.

Shared by the property tests of answer keys (tests/answers/) and of votes (tests/search/): a
generated answer carries the value it states, so a test can say what any correct grouping of
answers must be without computing it the way the code under test does.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from hypothesis import strategies as st

# Small numerators and denominators: values then differ by far more than any numeric tolerance
# (math-verify rounds to 6 decimals), so "different values" means different to any reader.
values = st.builds(Fraction, st.integers(-60, 60), st.integers(1, 12))
"""A signed rational value (integers included)."""


def _decimal(value: Fraction) -> str | None:
    """The finite decimal expansion of ``value``, or None when it has none."""
    den = value.denominator
    for p in (2, 5):
        while den % p == 0:
            den //= p
    if den != 1:
        return None
    digits = 0
    while (value * 10**digits).denominator != 1:
        digits += 1
    return f"{float(value):.{max(digits, 1)}f}"


def forms(value: Fraction) -> list[str]:
    """Ways of writing ``value`` that any grader must read as it: integers with ``.0``, a unit, a
    dollar sign and as a fraction of a multiple, fractions as ``p/q``, ``\\frac``, ``\\dfrac``, the
    sign inside the numerator, and finite decimals; some wrapped in ``$...$``."""
    p, q = value.numerator, value.denominator
    sign = "-" if p < 0 else ""
    a = abs(p)
    out = [f"{sign}\\frac{{{2 * a}}}{{{2 * q}}}", f"{sign}\\dfrac{{{a}}}{{{q}}}", f"\\frac{{{p}}}{{{q}}}"]
    if q == 1:
        out += [str(p), f"{p}.0", f"${p}$", f"{p}\\text{{ cm}}", f"{sign}\\${a}"]
    else:
        out += [f"{p}/{q}", f"{sign}\\frac{{{a}}}{{{q}}}", f"${sign}\\frac{{{a}}}{{{q}}}$"]
    decimal = _decimal(value)
    if decimal is not None and q != 1:
        out += [decimal, f"${decimal}$"]
    return out


@dataclass(frozen=True)
class Answer:
    """One written answer and the value it states."""

    text: str
    value: Fraction


def written(value: Fraction) -> st.SearchStrategy[Answer]:
    """One of :func:`forms` of ``value``."""
    return st.sampled_from(forms(value)).map(lambda text: Answer(text, value))


answers = values.flatmap(written)
"""Any value, written any of its ways."""
