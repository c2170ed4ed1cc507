"""The arithmetic tool verifier: checks the equalities a step states, with exact arithmetic.

A process verifier that needs no model: it finds the arithmetic equalities written in a step
("3 + 4 = 7", "12 / 4 = 3", "2 * (3 + 1) = 8", "1,200 ÷ 4 = 300"), evaluates both sides with
:class:`fractions.Fraction`, and scores the step 1.0 when every equality it states holds, 0.0
when any fails, and a neutral score when it states none it can read. Tool-checking the
calculations of a chain of thought is the cheapest process signal there is (cf. the calculator
annotations of Cobbe et al. 2021, "Training Verifiers to Solve Math Word Problems"); it never
sees the gold answer and costs no compute.

Reading equalities from prose (steps 1-4 of :func:`find_equalities`):

1. normalise the notation: ``×``, ``·``, ``\\times``, ``\\cdot`` and "2 x 6" are products,
   ``÷`` and ``\\div`` quotients, ``\\frac{a}{b}`` is ``(a)/(b)``, thousands separators go,
   ``2(3 + 1)`` gets its implied product;
2. find runs made only of numbers, ``+ - * / ( ) =`` and spaces; commas and sentence ends split
   them ("3 + 1 = 4, 4 + 7 = 10" is two equalities);
3. refuse sides that are part of something the tool cannot read: a variable or a power next to
   them ("x + 3 = 5", "2^3 = 8"), an operator written as a word ("half of 8 = 4",
   "12 = 3 times 4"), a unit glued to a number ("= 12cm"). Refused equalities are skipped, not
   failed: a misread would punish a correct step;
4. parse each side with :mod:`ast` restricted to numbers, ``+ - * /``, unary signs and
   parentheses; anything else (names, calls, powers) is unreadable. Nothing is ever evaluated
   by Python.

Chains are read as running totals, the way people and small models write them:
"3 + 4 = 7 + 1 = 8" states 3 + 4 = 7 and 7 + 1 = 8 (``running_chains``). A side written as a
decimal with d places matches a value within half a unit of its last place ("10 / 3 = 3.33").
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any, ClassVar, Literal

from pydantic import Field

from tts.answers.exact import NotPlainArithmetic as _Unreadable
from tts.answers.exact import exact_value
from tts.config import VerifierConfigBase
from tts.verifiers.base import VerifierScore, VerifyItem, aggregate, clean_score, noise_flips


class ArithmeticConfig(VerifierConfigBase):
    """Check the arithmetic equalities each step states (no model, no cost)."""

    kind: Literal["arithmetic"] = "arithmetic"
    aggregation: Literal["last", "min", "prod", "mean"] = "min"
    """How step scores become one solution score. "min" here, unlike the PRMs' "last": the tool
    checks facts, so one false equality anywhere makes the solution wrong, whereas a PRM's score
    of the last step already estimates the prospects of everything before it (search-and-learn's
    reason for "last"). No paper defines this tool, so no reference applies; "last" is a setting."""
    neutral: float = Field(0.5, ge=0.0, le=1.0)
    """Score of a step that states no equality the tool can read (no evidence either way)."""
    skip_neutral: bool = True
    """Leave steps without equalities out of the solution score, so that "3 + 4 = 7." followed
    by "The answer is 7." scores like its checked step; a solution with no checked step scores
    ``neutral``. False: neutral steps enter the aggregation like any other."""
    running_chains: bool = True
    """Read "3 + 4 = 7 + 1 = 8" as a running total (3 + 4 = 7, then 7 + 1 = 8). False: every
    side of a chain must have the same value."""
    decimal_rounding: bool = True
    """A side written as a decimal with d places matches a value within half a unit of its last
    place ("10 / 3 = 3.33"). False: decimals must be exact."""
    noise: float = Field(0.0, ge=0.0, le=1.0)
    """Probability that a checked step's score is flipped (1 <-> 0): an imperfect verifier, to
    emulate PRMs of lower quality (0.3: wrong on 30% of steps). The flip is a seeded function of
    the problem and the solution up to that step, so a step scored twice gets the same score, as
    from a deterministic model. Steps without an equality stay neutral."""
    noise_seed: int = 0
    """Seed of the noise: another seed, another verifier of the same quality."""


@dataclass(frozen=True, slots=True)
class Equality:
    """One equality a text states, as read by the tool.

    Args:
        left: The left side as normalised for parsing ("3 + 4").
        right: The right side ("7").
        holds: Whether the two sides are equal (exact arithmetic, or running-total/rounding rules).
    """

    left: str
    right: str
    holds: bool


# --- 1. notation --------------------------------------------------------------------------------

_REPLACEMENTS = (
    (re.compile(r"\\left|\\right|\\!|\\;|\\quad|\\qquad"), " "),
    (re.compile(r"(?<=\d)\\,(?=\d{3}(?!\d))"), ""),  # LaTeX thin-space thousands separator
    (re.compile(r"\\,|\\ "), " "),
    (re.compile(r"\\[dt]?frac\{([^{}]*)\}\{([^{}]*)\}"), r"((\1)/(\2))"),
    (re.compile(r"\\times|\\cdot|[×✕⋅·∙]"), "*"),
    (re.compile(r"\\div|[÷∕]"), "/"),
    (re.compile(r"[−－–](?=\s*[\d(])"), "-"),  # typographic minus (and an en dash before a number)
    (re.compile(r"＝|=="), "="),
    (re.compile(r"\\\$|\$|\\\(|\\\)|\\\[|\\\]"), " "),  # math delimiters and currency signs
    # Markdown bold around an expression ("**3 + 4 = 7**"), but not a power ("2**3").
    (re.compile(r"(?:(?<=^)|(?<=\s))\*\*(?=\S)|(?<=\S)\*\*(?=\s|$|[.,;:!?])"), " "),
    (re.compile(r"(?<=\d),(?=\d{3}(?!\d))"), ""),  # thousands separators: 1,200 -> 1200
    (re.compile(r"(?<=\d)[ \t]*[xX][ \t]*(?=[\d(])"), "*"),  # "2 x 6", "3x4"
    (re.compile(r"(?<=[\d)])[ \t]*(?=\()"), "*"),  # implied product: 2(3 + 1), (1 + 2)(3)
)


def _normalise(text: str) -> str:
    for pattern, replacement in _REPLACEMENTS:
        text = pattern.sub(replacement, text)
    return text


# --- 2. runs --------------------------------------------------------------------------------------

_RUN = re.compile(r"[0-9.+\-*/()=\t ]*=[0-9.+\-*/()=\t ]*")
_SEPARATOR = re.compile(r"\.(?!\d)")  # a period not followed by a digit ends a sentence
_MAX_SIDE = 200

# --- 3. context that makes a side unreadable ------------------------------------------------------

# Characters that may touch a side without changing its meaning.
_NEUTRAL_NEIGHBOURS = set(" \t\n\r([{:;,.\"'“”‘’?<>≤≥")
_OPERATOR_WORDS_BEFORE = frozenset({
    "of", "times", "plus", "minus", "by", "over", "twice", "half", "double", "triple", "thrice", "sqrt", "root",
    "squared", "cubed", "from", "than", "per", "and"})
_OPERATOR_WORDS_AFTER = frozenset({
    "times", "plus", "minus", "over", "squared", "cubed", "percent", "of", "by", "divided", "multiplied"})
_WORD_BEFORE = re.compile(r"([A-Za-z]+)\s*$")
_WORD_AFTER = re.compile(r"^\s*([A-Za-z]+)")
_VARIABLE_WORDS = frozenset({"a", "A", "I"})  # one-letter words that are prose, not variables


def _left_side_readable(before: str, side: str) -> bool:
    """Whether the first side of a run can be read on its own, given the text before it."""
    if before and before[-1] not in _NEUTRAL_NEIGHBOURS:
        return False  # glued to a letter, power, root, percent, backslash, ...
    if before[-2:-1].isdigit() and before[-1] in ":.,":
        return False  # a time or ratio ("2:30 = 150 minutes"), a version or list ("1.2.3", "1,2")
    stripped = before.rstrip()
    if stripped and stripped[-1] in "^√!%_\\|":
        return False
    word = _WORD_BEFORE.search(stripped)
    starts_with_operator = side[:1] in "+-*/"
    if word:
        w = word.group(1)
        if len(w) == 1 and w not in _VARIABLE_WORDS:
            return False  # a variable: "x + 3 = 5", "y - 1 = 4"
        if w.lower() in _OPERATOR_WORDS_BEFORE and not (w.lower() == "and" and _is_compound(side)):
            return False  # "half of 8 = 4", "3 times 4 = 12"; "... and 7 + 1 = 8" is a new clause
    if starts_with_operator and side[:1] != "-":
        return False  # "... x + 3 = 5" lost its left operand
    # "n - 3 = 5": a binary minus whose left operand is not a number
    return not (starts_with_operator and stripped and (stripped[-1].isalnum() or stripped[-1] in ")]}"))


def _right_side_readable(after: str) -> bool:
    """Whether the last side of a run ends where the run ends, given the text after it."""
    if after and after[0] not in _NEUTRAL_NEIGHBOURS:
        return False  # "= 12cm", "= 50%", "= 3!", "= 2^3"
    if after[:1] in (":", ",") and after[1:2].isdigit():
        return False  # "= 1:2", "= 3,5" (a ratio, a list)
    stripped = after.lstrip()
    if stripped and stripped[0] in "^√%_\\|":
        return False
    word = _WORD_AFTER.match(after)
    return not (word and word.group(1).lower() in _OPERATOR_WORDS_AFTER)  # "12 = 3 times 4", "= 4 squared"


# --- 4. exact evaluation ------------------------------------------------------------------------


def _is_compound(side: str) -> bool:
    return any(op in side.lstrip("+-") for op in "+-*/")


def _evaluate(side: str) -> Fraction:
    """The exact value of ``side``; raises _Unreadable for anything but numbers and + - * / ( );
    a division by zero raises ZeroDivisionError: the equality fails (see _link_holds)."""
    return exact_value(side, _MAX_SIDE)


def _trim_unbalanced(side: str, bracket: str, partner: str) -> str:
    """Drop brackets that open (or close) outside the equality: "(3 + 4 = 7)" has sides 3 + 4, 7."""
    side = side.strip()
    while side.count(bracket) > side.count(partner):
        if bracket == "(" and side.startswith("("):
            side = side[1:].strip()
        elif bracket == ")" and side.endswith(")"):
            side = side[:-1].strip()
        else:
            break
    return side


def _leading_number(side: str) -> Fraction | None:
    """The first operand of a running-total side ("7 + 1" -> 7), when it starts with a number."""
    match = re.match(r"\s*(\d+(?:\.\d*)?|\.\d+)", side)
    return Fraction(match.group(1)) if match else None


def _decimal_places(side: str) -> int | None:
    """d for a side that is one decimal literal with d >= 1 places ("3.33" -> 2), else None."""
    match = re.fullmatch(r"\s*-?\d*\.(\d+)\s*", side)
    return len(match.group(1)) if match else None


def _link_holds(left: str, right: str, running: bool, rounding: bool) -> bool | None:
    """Whether ``left = right`` holds; None when either side is unreadable."""
    try:
        lv = _evaluate(left)
        rv = _evaluate(right)
    except _Unreadable:
        return None
    except ZeroDivisionError:
        return False
    if lv == rv:
        return True
    if running and _is_compound(right) and _leading_number(right) == lv:
        return True  # "3 + 4 = 7 + 1 = 8": the chain continues from the total 7
    if rounding:
        for value, written in ((lv, right), (rv, left)):
            places = _decimal_places(written)
            if places is not None and abs(value - Fraction(written.strip())) <= Fraction(1, 2 * 10**places):
                return True
    return False


@lru_cache(maxsize=1 << 16)
def _equalities(text: str, running: bool, rounding: bool) -> tuple[Equality, ...]:
    norm = _normalise(text)
    found: list[Equality] = []
    for run in _RUN.finditer(norm):
        # Split the run at sentence ends; each piece keeps its position for the context checks.
        start = run.start()
        for piece in _SEPARATOR.split(run.group()):
            piece_start, start = start, start + len(piece) + 1
            if "=" not in piece:
                continue
            sides = piece.split("=")
            lead = len(piece) - len(piece.lstrip())
            first_ok = _left_side_readable(norm[:piece_start + lead], sides[0].strip())
            piece_end = piece_start + len(piece.rstrip())
            last_ok = _right_side_readable(norm[piece_end:])
            sides[0], sides[-1] = _trim_unbalanced(sides[0], "(", ")"), _trim_unbalanced(sides[-1], ")", "(")
            for i in range(len(sides) - 1):
                if (i == 0 and not first_ok) or (i == len(sides) - 2 and not last_ok):
                    continue
                left, right = sides[i].strip(), sides[i + 1].strip()
                holds = _link_holds(left, right, running, rounding)
                if holds is not None:
                    found.append(Equality(left, right, holds))
    return tuple(found)


def find_equalities(text: str, running_chains: bool = True, decimal_rounding: bool = True) -> list[Equality]:
    """The arithmetic equalities ``text`` states that the tool can read, in order.

    Args:
        text: A step or a whole solution, in prose, plain math or simple LaTeX.
        running_chains: Read "3 + 4 = 7 + 1 = 8" as 3 + 4 = 7 and 7 + 1 = 8.
        decimal_rounding: Accept "10 / 3 = 3.33" (rounded to the places written).

    Returns:
        One :class:`Equality` per readable link of every equality chain.

    Example:
        >>> [e.holds for e in find_equalities("3 + 1 = 4, 4 + 7 = 12.")]
        [True, False]
    """
    return list(_equalities(text, running_chains, decimal_rounding))


def step_score(text: str, neutral: float = 0.5, running_chains: bool = True, decimal_rounding: bool = True) -> float:
    """1.0 if every equality ``text`` states holds, 0.0 if any fails, ``neutral`` if it states none."""
    checks = _equalities(text, running_chains, decimal_rounding)
    if not checks:
        return neutral
    return 1.0 if all(e.holds for e in checks) else 0.0


class ArithmeticVerifier:
    """Scores each step by whether the arithmetic it states is right; see the module docstring.

    Args:
        config: Neutral score, aggregation and reading rules.

    Example:
        >>> from tts.types import Problem
        >>> v = ArithmeticVerifier(ArithmeticConfig())
        >>> v.score([VerifyItem(Problem("p", "What is 3 + 4?"), ("3 + 4 = 8.",))])[0].score
        0.0
    """

    name: ClassVar[str] = "arithmetic"
    config_class: ClassVar[type[ArithmeticConfig]] = ArithmeticConfig
    step_verifier: ClassVar[bool] = True
    """It checks each step: whole solutions reach it cut into steps (tts.search.base.solution_item)."""

    def __init__(self, config: ArithmeticConfig | None = None) -> None:
        self.config = config or ArithmeticConfig()

    @classmethod
    def from_config(cls, config: ArithmeticConfig, generator: Any = None) -> ArithmeticVerifier:
        """Build from a config; the generator is not used (the tool needs no model)."""
        return cls(config)

    def _score_one(self, item: VerifyItem) -> VerifierScore:
        c = self.config
        steps, checked, invalid = [], [], 0
        for at, text in enumerate(item.steps):
            has_checks = bool(_equalities(text, c.running_chains, c.decimal_rounding))
            value, bad = clean_score(step_score(text, c.neutral, c.running_chains, c.decimal_rounding))
            if has_checks and noise_flips(c.noise_seed, item, at, c.noise):
                value = 1.0 - value
            invalid += bad
            steps.append(value)
            if has_checks:
                checked.append(value)
        pool = checked if c.skip_neutral else steps
        total, bad = clean_score(aggregate(pool, c.aggregation) if pool else c.neutral)
        return VerifierScore(tuple(steps), total, invalid=invalid + bad)

    def score(self, items: Sequence[VerifyItem]) -> list[VerifierScore]:
        """One score per item, in order; no usage (a tool, not a model)."""
        return [self._score_one(item) for item in items]

    def close(self) -> None:
        """Nothing to release."""
