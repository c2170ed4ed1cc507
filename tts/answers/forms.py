"""Surface forms of an answer that math-verify misreads, rewritten to the value the writer meant.

Grading (:mod:`tts.benchmarks.grading`) and vote keys (:mod:`tts.answers.equivalence`) hand
answers to math-verify through :func:`as_math`, and line up vectors with :func:`align_vectors`.
Each rule changes only how a form is *read*, never which values count as equal:

- currency: ``\\$18.90`` is the amount 18.90 (left as is, ``\\$`` made math-verify read nothing:
  the answer was not wrapped in ``$...$``);
- digit groups: ``32\\,348``, ``10\\ 000`` and ``1 000`` are 32348, 10000 and 1000 (math-verify
  reads a space between numerals as a product or a sum: ``1 000`` as ``1*0`` = 0, ``32\\,348`` as
  380); only groups of exactly three digits are joined, so ``12\\,34`` is left alone;
- matrices written row by row: ``(-1&0,0&-1)`` is the 2 x 2 matrix with rows ``-1 & 0`` and
  ``0 & -1`` (``&`` separates columns and nothing else in LaTeX);
- delimiters: a bare answer is wrapped in ``$...$``; an escaped ``\\(`` inside an answer, as in
  ``(-\\infty,2)\\cup\\(3,\\infty)``, is not a math delimiter;
- vectors: an n-tuple ``(a, b, c)`` names the same vector as an n x 1 (or 1 x n) matrix with the
  same entries in the same order; ``(1, 2)`` and the column ``(2, 1)`` stay different, and a set
  ``{1, 2}`` (no order) is never a vector.

Example:
    >>> as_math("\\\\$32,\\\\!348")
    '$32,\\\\!348$'
    >>> as_math("1\\\\,000\\\\,000")
    '$1000000$'
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

# A space between digit groups: plain, thin (\,), medium (\:), thick (\;), control (\ ), tie (~).
_SEP = r"(?:\s|\\[,:; ]|~)+"
_INT_GROUPS = re.compile(rf"(?<![\d.])\d{{1,3}}(?:{_SEP}\d{{3}})+(?!\d)")
_FRAC_GROUPS = re.compile(rf"(?<=\d\.)\d{{3}}(?:{_SEP}\d{{3}})*{_SEP}\d{{1,3}}(?!\d)")
_SEP_RE = re.compile(_SEP)
_CURRENCY = re.compile(r"\\\$\s*")
_DOLLAR = re.compile(r"(?<!\\)\$")
# A bracketed group with no brackets inside whose content uses "&": a matrix written row by row.
_ROWS = re.compile(r"[(\[]([^()\[\]]*&[^()\[\]]*)[)\]]")


def _join_digit_groups(text: str) -> str:
    """``32\\,348`` -> ``32348``, ``3.141\\,592`` -> ``3.141592``; other spaces are kept."""
    def join(m: re.Match[str]) -> str:
        return _SEP_RE.sub("", m.group(0))

    return _FRAC_GROUPS.sub(join, _INT_GROUPS.sub(join, text))


def _rows_as_matrix(m: re.Match[str]) -> str:
    r"""``(a&b,c&d)`` -> ``\begin{pmatrix}a&b\\c&d\end{pmatrix}`` when every row has as many columns."""
    rows = [r.strip() for r in re.split(r",|\\\\", m.group(1))]
    columns = {r.count("&") for r in rows}
    if "" in rows or len(columns) != 1:
        return m.group(0)
    return "\\begin{pmatrix}" + "\\\\".join(rows) + "\\end{pmatrix}"


def _delimited(text: str) -> bool:
    """Whether math-verify will find a math environment in ``text`` without ``$...$`` around it."""
    if _DOLLAR.search(text) or "\\boxed" in text:
        return True
    return (text.startswith("\\(") and text.endswith("\\)")) or (text.startswith("\\[") and text.endswith("\\]"))


def as_math(answer: str) -> str:
    """An answer as math-verify input: currency signs, digit-group spaces and row-by-row
    matrices rewritten (see the module docstring), wrapped in ``$...$`` unless already delimited.

    Args:
        answer: An extracted or gold answer (LaTeX or plain text).

    Returns:
        A string for ``math_verify.parse``.
    """
    text = _CURRENCY.sub("", answer.strip())
    text = _join_digit_groups(text)
    if "&" in text and "\\begin" not in text:
        text = _ROWS.sub(_rows_as_matrix, text)
    return text if _delimited(text) else f"${text}$"


def _vector_shape(value: Any) -> tuple[int, int] | None:
    """The shape of an n x 1 or 1 x n matrix (n >= 2), else None."""
    from sympy.matrices import MatrixBase

    if isinstance(value, MatrixBase) and min(value.shape) == 1 and max(value.shape) >= 2:
        return value.shape
    return None


def _as_vector(value: Any, shape: tuple[int, int]) -> Any:
    """``value`` read as a vector of ``shape`` if it is a tuple (or ``v = tuple``) of that length."""
    import sympy

    if isinstance(value, sympy.Eq):
        vector = _as_vector(value.rhs, shape)
        return value if vector is value.rhs else sympy.Eq(value.lhs, vector, evaluate=False)
    entries = None
    if isinstance(value, sympy.Tuple):
        entries = list(value)
    elif isinstance(value, sympy.Interval) and value.left_open == value.right_open:
        # math-verify reads "(1, 2)" as an open interval (and "(2, 1)" as a tuple); next to a
        # vector, both brackets alike, it is the pair. Half-open "(1, 2]" is only ever an interval.
        entries = [value.start, value.end]
    if entries is None or len(entries) != max(shape):
        return value
    try:
        return sympy.Matrix(*shape, entries)
    except Exception:  # entries that are not expressions (intervals, sets): not a vector
        return value


def align_vectors(gold: Sequence[Any], answer: Sequence[Any]) -> tuple[list[Any], list[Any]]:
    """math-verify parses of two answers, with a tuple on one side read as a vector when the other
    side is a vector (an n x 1 or 1 x n matrix) of the same length.

    Args:
        gold: ``math_verify.parse`` of the gold answer (values and strings).
        answer: ``math_verify.parse`` of the answer.

    Returns:
        Both lists; a tuple (or ``v = tuple``) that matches the other side's vector becomes a
        matrix of that vector's shape, entries in order. Everything else is unchanged.
    """
    gold, answer = list(gold), list(answer)
    for mine, other in ((gold, answer), (answer, gold)):
        shape = next((s for s in map(_vector_shape, other) if s is not None), None)
        if shape is not None:
            mine[:] = [_as_vector(v, shape) for v in mine]
    return gold, answer
