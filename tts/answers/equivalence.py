"""Answer keys for voting: answers that math-verify finds equal vote under one key.

Extraction (:mod:`tts.answers.extraction`) returns answers as written; voting needs ``0.5`` and
``\\frac{1}{2}`` to count as one answer. :class:`AnswerKeys` merges normalised answers that
math-verify's ``verify`` finds equal, with parses and verdicts cached, and with the same
signal-free, bounded use of math-verify as extraction (see that module's docstring). Answers are
read as the grader reads them (:mod:`tts.answers.forms`: currency signs, digit groups, tuples
next to vectors), so a vote key groups what the grader would grade alike.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Sequence
from functools import lru_cache
from typing import Any, NamedTuple

from tts.answers.exact import NotPlainArithmetic, exact_value
from tts.answers.extraction import (
    _STRAY_STARS,
    _TEXT,
    _has_word,
    _math_verify,
    _mv_parse,
    _stated,
    normalize_answer,
)
from tts.answers.forms import align_vectors, as_math

logger = logging.getLogger(__name__)

_ENVIRONMENT = re.compile(r"\\(?:begin|end)\{[a-zA-Z*]+\}")  # \begin{pmatrix} names no word of the answer


def _tame(value: Any, max_nodes: int = 200) -> bool:
    """Whether math-verify can compare ``value`` quickly (no towers, huge powers, sums, integrals).

    Without a timeout, ``verify`` on ``10^{10^{10}}`` or ``(1/3)^{99999999}`` runs for minutes.
    Only sympy values come here (the caller drops math-verify's string parses); anything else is
    refused.
    """
    import sympy
    from sympy.matrices import MatrixBase

    if isinstance(value, MatrixBase):
        return value.rows * value.cols <= 64 and all(_tame(e, max_nodes) for e in value)
    if not isinstance(value, sympy.Basic):
        return False
    unevaluated = (sympy.Sum, sympy.Product, sympy.Integral, sympy.Limit, sympy.Derivative,
                   sympy.factorial, sympy.binomial, sympy.gamma)
    for i, node in enumerate(sympy.preorder_traversal(value)):
        if i >= max_nodes or isinstance(node, unevaluated):
            return False
        if isinstance(node, sympy.Integer) and int(node).bit_length() > 4000:
            return False
        if isinstance(node, sympy.Pow):
            exp = node.exp
            if exp.has(sympy.Pow) or any(abs(a) > 1000 for a in exp.atoms(sympy.Number)):
                return False
    return True


_SIMPLE_NUMBER = re.compile(
    r"(?P<sign>-?)(?:(?P<n>\d{1,50})/(?P<d>\d{1,50})|\\frac\{(?P<fn>\d{1,50})\}\{(?P<fd>\d{1,50})\}|(?P<i>\d{1,50}))"
)


def _simple_number(key: str) -> Any:
    """A normalised integer or fraction of integers ("12", "-3/4", "\\frac{3}{4}") as a sympy Rational."""
    m = _SIMPLE_NUMBER.fullmatch(key)
    if m is None:
        return None
    import sympy

    num, den = (m["n"], m["d"]) if m["n"] else (m["fn"], m["fd"]) if m["fn"] else (m["i"], "1")
    if int(den) == 0:
        return None
    return sympy.Rational(int(num), int(den)) * (-1 if m["sign"] else 1)


_ARITHMETIC = re.compile(r"[-+*/()\d.]{1,60}")
_OPERATOR = re.compile(r"(?<=[\d)])[-+*/]")


def _arithmetic_value(key: str) -> str | None:
    """The value of a computation on plain numbers ("40+2", "6*7", "(3+5)/2") when it is an
    integer, as a plain number ("42"); None for anything else (powers, decimals left as values)."""
    if not _ARITHMETIC.fullmatch(key) or "**" in key or "//" in key or not _OPERATOR.search(key):
        return None
    try:
        result = exact_value(key)
    except (NotPlainArithmetic, ZeroDivisionError):
        return None
    return str(result.numerator) if result.denominator == 1 else None


def vote_form(answer: str) -> str:
    """The normalised answer a vote counts: :func:`normalize_answer`, then the value it states.

    Cached (a pure function of the string): a vote reads every sample's answer, and the samples of
    one problem (and the problems of a search) repeat a few answers many times.

    Markdown bold is markup (``**31**`` and ``31**`` are 31), a computation on numbers states its
    value (``17+25=42`` and ``40+2`` are 42), so they vote under the plain number's key.

    Example:
        >>> vote_form("17 + 25 = 42"), vote_form("31**"), vote_form("x = 5")
        ('42', '31', 'x=5')
    """
    key = normalize_answer(_STRAY_STARS.sub("", answer.strip()))
    key = _stated(key)
    return _arithmetic_value(key) or key


# Wrapped, not decorated: mutmut mutates only undecorated functions (see tts.answers.extraction).
vote_form = lru_cache(maxsize=1 << 16)(vote_form)


class _Value(NamedTuple):
    """math-verify's parse of an answer, and its numeric value when it is one constant."""

    values: list[Any]
    constant: complex | None


def _constant(values: list[Any]) -> complex | None:
    """The numeric value of a single constant expression (not a percentage, set or relation)."""
    import sympy

    if len(values) != 1 or not isinstance(values[0], sympy.Expr):
        return None
    value = values[0]
    if value.free_symbols or value.has(sympy.UnevaluatedExpr):  # "50\\%" equals 50 for math-verify
        return None
    try:
        return complex(value.evalf(15))
    except Exception:  # not a finite number (zoo, nan, ...): leave it to math-verify
        return None


class AnswerKeys:
    """Vote keys under which answers that math-verify finds equal vote together.

    Each answer is first normalised (:func:`vote_form`: :func:`normalize_answer`, Markdown bold
    dropped, a computation on numbers read as its value); distinct normalised keys are then
    merged when math-verify's ``verify`` says they are equal (``0.5``, ``\\frac{1}{2}`` and
    ``\\dfrac12`` become one key). The key of a group is its first-seen normalised key, so the
    result is deterministic for a given order of answers. Parses and pairwise verdicts are cached,
    so repeated calls (the prefixes of a ladder of n) are cheap.

    Thread-safe: caches are guarded by a lock and math-verify runs without signals. Bounded: keys
    longer than ``max_len``, unparseable ones and ones whose comparison could take unbounded time
    keep their normalised key; at most ``max_pairs`` uncached comparisons run per call.

    Args:
        max_pairs: Uncached ``verify`` calls allowed per :meth:`keys` call; later keys stay apart.
        max_len: Longer normalised keys are never compared.
        max_cache: Cached entries kept before the caches are cleared.

    Example:
        >>> AnswerKeys().keys(["0.5", "\\\\frac{1}{2}", None, "2"])
        ['0.5', '0.5', None, '2']
    """

    def __init__(self, max_pairs: int = 256, max_len: int = 100, max_cache: int = 100_000) -> None:
        self.max_pairs = max_pairs
        self.max_len = max_len
        self.max_cache = max_cache
        self._lock = threading.Lock()
        self._parsed: dict[str, _Value | None] = {}
        self._same: dict[tuple[str, str], bool] = {}

    def keys(self, answers: Sequence[str | None]) -> list[str | None]:
        """One vote key per answer, in order; None stays None.

        Args:
            answers: Extracted answers (None where a sample has no answer).

        Returns:
            The group key of each answer (a normalised answer string), or None.
        """
        # 1. Normalise, remembering the first raw answer behind each distinct key (the key itself
        #    when it is a value the raw answer states: "42" for "17 + 25 = 42").
        normalised = [None if a is None else vote_form(a) for a in answers]
        first_raw: dict[str, str] = {}
        for raw, key in zip(answers, normalised, strict=True):
            if key is not None:
                first_raw.setdefault(key, raw if normalize_answer(raw) == key else key)
        # 2. Greedy grouping in first-seen order: each key joins the first earlier group it equals.
        reps: list[tuple[str, _Value]] = []  # groups whose key math-verify could read
        group = {key: key for key in first_raw}
        budget = self.max_pairs
        for key, raw in first_raw.items():
            value = self._parse(key, raw)
            if value is None:
                continue
            for rep, rep_value in reps:
                same, budget = self._equal((rep, rep_value), (key, value), budget)
                if same:
                    group[key] = rep
                    break
            else:
                reps.append((key, value))
        if budget <= 0:
            logger.debug("answer keys: comparison cap (%d) reached; some keys stay apart", self.max_pairs)
        return [None if k is None else group[k] for k in normalised]

    def _parse(self, key: str, raw: str) -> _Value | None:
        """math-verify's value for a key (parsed from its first-seen raw answer), or None."""
        with self._lock:
            if key in self._parsed:
                return self._parsed[key]
        value: _Value | None = None
        exact = _simple_number(key)
        if exact is not None:  # the common cases, without the LaTeX parser
            value = _Value([exact], complex(exact))
        # \text{...} parses as one symbol; bare words parse as products of letters.
        elif key and len(key) <= self.max_len and not _has_word(_ENVIRONMENT.sub(" ", _TEXT.sub(" ", raw))):
            found = [v for v in _mv_parse(as_math(raw)) if not isinstance(v, str)]
            if found and all(_tame(v) for v in found):
                value = _Value(found, _constant(found))
        with self._lock:
            if len(self._parsed) >= self.max_cache:
                self._parsed.clear()
            return self._parsed.setdefault(key, value)

    def _equal(self, a: tuple[str, _Value], b: tuple[str, _Value], budget: int) -> tuple[bool, int]:
        """Cached symmetric verdict for two (key, value) pairs; a fresh comparison spends budget."""
        (first, left), (second, right) = (a, b) if a[0] <= b[0] else (b, a)
        pair = (first, second)
        with self._lock:
            cached = self._same.get(pair)
        if cached is not None:
            return cached, budget
        x, y = left.constant, right.constant
        if x is not None and y is not None and not abs(x - y) <= 1e-3 * max(1.0, abs(x), abs(y)):
            return False, budget  # far apart as numbers: math-verify (6 decimals) cannot equate them
        if budget <= 0:
            return False, budget
        same = False
        try:
            gold, answer = align_vectors(left.values, right.values)  # (1,2) is the column vector [1; 2]
            same = bool(_math_verify().verify(gold, answer, timeout_seconds=None))
        except Exception:  # a failed comparison means "not shown equal"
            logger.debug("math-verify could not compare %r and %r", *pair, exc_info=True)
        with self._lock:
            if len(self._same) >= self.max_cache:
                self._same.clear()
            self._same[pair] = same
        return same, budget - 1


_DEFAULT_KEYS = AnswerKeys()


def answer_keys(answers: Sequence[str | None]) -> list[str | None]:
    """:meth:`AnswerKeys.keys` with a process-wide instance (its caches are shared).

    Example:
        >>> answer_keys(["1,000", "1000", "999"])
        ['1000', '1000', '999']
    """
    return _DEFAULT_KEYS.keys(answers)
