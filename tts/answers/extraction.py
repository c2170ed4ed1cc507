"""Answer extraction from free-form model output, and answer normalisation.

Extraction first *locates* where the answer is stated, then *reads* it as mathematics:

1. locate: the last complete ``\\boxed{...}``, together with the boxes right before it when only
   joiners stand between them (``\\boxed{(2, 2)} \\text{ and } \\boxed{(6, 2)}`` is one answer, a
   set); else the last "the answer is X" / "final answer: X"; else the whole output (its last few
   thousand characters, Markdown bold ``**42**`` read as 42);
2. read: math-verify's extraction (``math_verify.parse`` with its LaTeX and expression configs)
   reads the located span, so "$\\frac{1}{3}$" is one answer, not the number 3, and "1 000" is
   1000; when it finds nothing, the regex rules read it (the box content as written, the phrase
   with a lone number kept, and finally the last number in the text). A computation on numbers
   states its value: ``17 + 25 = 42`` is read as 42, while ``x = 5`` is kept whole.

We locate the phrase and the boxes ourselves: math-verify's own priorities let a check written
after "the answer is $\\frac{1}{3}$" ("2 + 2 = 4") win, and join every box of an output into one
set, including boxes far apart ("first \\boxed{3}, then \\boxed{4}" is 4, not {3, 4}).

math-verify's timeouts use ``signal.alarm``, which only works in a process's main thread and
would also replace any alarm the caller set (pytest-timeout, a server). Strategies extract in
worker threads, so every call here runs with math-verify's timeouts off, and the inputs are
bounded instead: only the last :data:`MAX_CHARS` characters are read, spans that would make the
LaTeX parser evaluate eagerly (``\\binom`` of huge numbers, deep nesting) are left to the regex
rules, and :class:`AnswerKeys` compares only small, tame expressions. The grader keeps its own
process-isolated time limit (see :mod:`tts.benchmarks.grading`).

Returns None when nothing answer-like is present; the grader counts that as its own outcome
("no answer"), never as an error.
"""

from __future__ import annotations

import functools
import logging
import re
from typing import Any

logger = logging.getLogger(__name__)

MAX_CHARS = 4000
"""Extraction reads only this many characters from the end of an output."""

_MAX_SPAN = 1000  # a located span longer than this is not handed to the LaTeX parser
_MAX_DEPTH = 30  # bracket nesting beyond this makes the LaTeX parser recurse for minutes

_ANSWER_IS = re.compile(
    r"(?:final answer|the answer)\s*(?:is|:)\s*[:\s]*(?P<ans>\$[^$]+\$|\\\(.+?\\\)|[^\n]+?)\s*(?:\.\s|\.?$|\n)",
    re.IGNORECASE,
)
# Numbers as written: ".5" (a decimal without its leading zero; read as "5" it lost its point) and
# the Unicode minus sign "−7" (U+2212, read as "7" it lost its sign) included; see _as_number.
_NUMBER = re.compile(r"[-\u2212]?(?:\d[\d,]*(?:\.\d+)?|(?<![\w.])\.\d+)(?:/\d+)?")
_PLAIN_NUMBER = re.compile(r"-?(?:(?:0|[1-9]\d{0,50})(?:\.\d{1,50})?|\.\d{1,50})")
# LaTeX commands the parser evaluates on the spot, each with the arguments that make it slow:
# binomials and Gamma of powers or long numbers; floors, determinants, ... of towers or long numbers
# (each looked for in the 80 characters after the command).
_EAGER = (
    (re.compile(r"\\(?:[dt]?binom|choose|Gamma)(?![a-zA-Z])"), re.compile(r"\d{5,}|\^|!")),
    (re.compile(r"\\(?:gamma|det|lfloor|lceil|operatorname|floor|ceil)(?![a-zA-Z])"),
     re.compile(r"\d{5,}|\^\s*\{[^{}]*\^|\^\s*\{?\s*\d{4,}")),
)
_SET_MEMBER = re.compile(r"^[A-Za-z]\s*\\in\s*")
_EQUALS = re.compile(r"(?<![\\<!>])=")
_TEXT = re.compile(r"\\text\{[^{}]*\}")
_MATH_ENV = re.compile(r"\$\$.*?\$\$|(?<!\\)\$[^$]*\$|\\\(.*?\\\)", re.DOTALL)  # paired left to right
_JOINED_ENVS = re.compile(r"(\$|\\\]|\\\))(\s*(?:,?\s*and|,?\s*or|,)\s*)(?=\$|\\\[|\\\()")
_NUMERIC_COMMANDS = re.compile(r"\\(?:[dt]?frac|sqrt|pi|cdot|times|div|left|right)")
# Markdown bold around an answer ("**42**"), not Python's power ("2**3"): no operand on either side.
_BOLD = re.compile(r"(?<![\w)\]}*])\*\*(?=[^\s*])([^\n]*?[^\s*])\*\*(?![\w(*])")
_STRAY_STARS = re.compile(r"^\*{2,}\s*|\s*\*{2,}$")
# Between two boxes that state one answer together: spaces, punctuation, "and", spacing
# commands, math delimiters, and \text{...} without digits ("\boxed{(2, 2)} \quad \text{and} \quad \boxed{(6, 2)}").
# Not "or": "\boxed{15\frac{39}{40}}, or \boxed{\frac{639}{40}}" writes one answer twice.
_BOX_JOINER = re.compile(
    r"(?:\s|[,;~]|\band\b|\\q?quad\b|\\[,:;! ]|\$|\\[()\[\]]|\\(?:text|mbox|textrm)\{(?![^{}]*\bor\b)[^{}\d]*\})*"
)
_LONE_VARIABLE = re.compile(r"[A-Za-z](?:_\{?\w\}?)?'?")
_BOX_COMMAND = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")  # not \boxedAnswer, a command of its own


# --- extraction ---------------------------------------------------------------------------------


def _box_at(text: str, start: int) -> tuple[str, int] | None:
    """Content and end of the box starting at ``start`` (nested braces respected), or None."""
    brace = text.find("{", start)
    if brace < 0 or text[start:brace].strip() not in ("\\boxed", "\\fbox"):
        # "\boxed 5" form
        m = re.match(r"\\boxed\s+([^\s${}]+)", text[start:])
        return (m.group(1), start + m.end()) if m else None
    depth = 0
    for i in range(brace, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[brace + 1 : i].strip(), i + 1
    return None  # unbalanced: the sample was cut off inside the box


def _last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` or ``\\fbox{...}``, respecting nested braces.

    A command that only starts like one (``\\boxedAnswer``) is not a box, as in :func:`_last_boxes`.
    """
    last = None
    for last in _BOX_COMMAND.finditer(text):
        pass
    if last is None:
        return None
    found = _box_at(text, last.start())
    return found[0] if found else None


def _last_boxes(text: str) -> list[str]:
    """The contents of the last box and of the boxes right before it that state one answer with it.

    Boxes separated only by joiners (``,``, "and", ``\\quad``, ``\\text{ and }``, math delimiters;
    see ``_BOX_JOINER``) are one answer written in parts, as math-verify reads them:
    ``\\boxed{(2, 2)} and \\boxed{(6, 2)}`` is the set of both pairs. Any other text between two
    boxes ("first \\boxed{3}, then \\boxed{4}") leaves the last box alone.
    """
    starts = [m.start() for m in _BOX_COMMAND.finditer(text)]
    last = _box_at(text, starts[-1]) if starts else None
    if last is None:
        return []
    run = [(starts[-1], last[0])]
    for start in reversed(starts[:-1]):  # walk back only while boxes are joined: linear in the run
        found = _box_at(text, start)
        if found is None or found[1] > run[0][0] or not _BOX_JOINER.fullmatch(text[found[1] : run[0][0]]):
            break
        run.insert(0, (start, found[0]))
    contents = [c for _, c in run if c]
    return list(dict.fromkeys(contents))  # "\\boxed{5} and \\boxed{5}" states 5 once


def _strip_wrapping(ans: str) -> str:
    """The phrase's answer without the math delimiters and Markdown emphasis around it.

    A pair is taken off only when it wraps the whole answer: "$3$ or $4$" is two formulas, not
    one with "3$ or $4" inside ("\\$" is a dollar sign, not a delimiter). A lone delimiter
    ("the answer is $", cut off) leaves nothing.
    """
    ans = ans.strip()
    # Math delimiters, and Markdown italics; bold ("**42**", "***42***") is two or more stars, taken
    # off at either end by _STRAY_STARS.
    for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"), ("*", "*")):
        inner = ans[len(left) : len(ans) - len(right)]
        if ans.startswith(left) and ans.endswith(right) and not re.search(
                f"(?<!\\\\)(?:{re.escape(left)}|{re.escape(right)})", inner):
            ans = inner.strip()
    return _STRAY_STARS.sub("", ans).rstrip(".").strip()  # "42.**": bold cut apart by the phrase


def _too_risky(span: str) -> bool:
    """Whether the LaTeX parser could spend unbounded time on ``span`` (it has no timeout here)."""
    depth = deepest = 0
    for ch in span:
        if ch in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in ")]}":
            depth = max(depth - 1, 0)
    if deepest > _MAX_DEPTH:
        return True
    return any(slow.search(span, m.end(), m.end() + 80) for command, slow in _EAGER for m in command.finditer(span))


def _math_verify() -> Any:
    """Import math-verify once (it pulls in sympy: not at ``import tts`` time)."""
    import math_verify

    class _DropTimeoutOffWarning(logging.Filter):
        # Timeouts are off on purpose (see the module docstring); the inputs are bounded instead.
        def filter(self, record: logging.LogRecord) -> bool:
            return not str(record.msg).startswith("Timeout is disabled")

    for name in ("math_verify.parser", "math_verify.grader"):
        logging.getLogger(name).addFilter(_DropTimeoutOffWarning())
    return math_verify


# The memo caches in this module wrap their function after its definition instead of decorating
# it: mutmut (benchmarks/mutation.py) mutates only undecorated functions, and the wrapped function
# is the same either way.
_math_verify = functools.cache(_math_verify)


def _extraction_config() -> tuple[Any, ...]:
    mv = _math_verify()
    return (mv.LatexExtractionConfig(boxed_match_priority=0), mv.ExprExtractionConfig())


_extraction_config = functools.cache(_extraction_config)


def _mv_parse(span: str) -> list[Any]:
    """math-verify's reading of ``span``: ``[value, string]``, ``[string]`` (unparsed) or ``[]``.

    ``extraction_mode="first_match"`` keeps the value and the string from the same (rightmost,
    highest-priority) match; "any_match" may pair one match's value with another's string.
    """
    if len(span) > 2 * MAX_CHARS or _too_risky(span):
        return []
    try:
        return _math_verify().parse(span, _extraction_config(), extraction_mode="first_match", parsing_timeout=None)
    except Exception:  # a reader failure means "not read", never a crashed run
        logger.debug("math-verify could not read %r", span[:200], exc_info=True)
        return []


def _tidy(answer: str) -> str:
    """Sentence punctuation off; a chain "a = b = c" states c; "x \\in [0,1)" states the interval."""
    answer = answer.strip().rstrip(".,;").rstrip()  # "$\frac{3}{56}.$" ends a sentence
    parts = [p.strip() for p in _EQUALS.split(answer)]
    if len(parts) > 2 and "," not in answer and ";" not in answer:
        # math-verify's value is the last member too; "... = 17 = x" names 17.
        stated = [p for p in parts if p and not _LONE_VARIABLE.fullmatch(p)]
        answer = stated[-1] if stated else answer
    return _SET_MEMBER.sub("", answer)


def _numeric(side: str) -> bool:
    """Whether one side of an equation is a number or a computation on numbers (no variables)."""
    return bool(side) and re.search(r"\d", side) is not None and not re.search(
        r"[A-Za-z]", _NUMERIC_COMMANDS.sub("", side))


def _stated(answer: str) -> str:
    """The value a computation states: ``17 + 25 = 42`` states 42 (a final ``a = b`` whose sides
    are both numeric); ``x = 5`` and ``y = 2x + 3`` are kept whole."""
    parts = _EQUALS.split(answer)
    if len(parts) == 2 and _numeric(parts[0].strip()) and _numeric(parts[1].strip()):
        return parts[1].strip()
    return answer


def _read(span: str) -> str | None:
    """The answer string math-verify reads in ``span``, tidied, or None."""
    found = _mv_parse(span)
    if not found or not isinstance(found[-1], str):
        return None
    return _tidy(found[-1]) or None


def _unwrap_lone_variable(m: re.Match[str]) -> str:
    inner = m.group(0).strip("$").removeprefix("\\(").removesuffix("\\)").strip().rstrip(".,;")
    return inner if _LONE_VARIABLE.fullmatch(inner) else m.group(0)


def _read_unanchored(tail: str) -> str | None:
    """The last mathematical statement of an output that does not say which part is the answer.

    Math naming a lone variable ("values of $x$") is read as prose; environments in a row
    ("$k-1=1$, and $k=2$") are read apart, so the last one counts (math-verify would join them
    into one answer, and report the first when one part does not parse); a computation ending in
    a value ("$96 + 48 = 144$", "$x = 83$") states that value, while an equation whose right side
    still has variables ("$y = 2x + 3$") or is longer than 40 characters (a computation still
    being written out) is kept whole.
    """
    if _MATH_ENV.fullmatch(tail.strip()):  # the whole output is one formula: "$E$" is the answer
        prose = tail
    else:
        prose = _JOINED_ENVS.sub(r"\1\2; ", _MATH_ENV.sub(_unwrap_lone_variable, tail))
    found = _mv_parse(prose)
    if not found or not isinstance(found[-1], str):
        return None
    answer = _tidy(found[-1])
    parts = _EQUALS.split(answer)
    if len(parts) == 2:
        right = parts[1].strip()
        if right and len(right) <= 40 and not re.search(r"[A-Za-z]", _NUMERIC_COMMANDS.sub("", right)):
            return right
    return answer or None


def _has_word(text: str) -> bool:
    """Whether ``text`` has a word of two or more letters outside LaTeX commands ("apples", "no")."""
    return re.search(r"[A-Za-z]{2,}", re.sub(r"\\[A-Za-z]+", " ", text)) is not None


def _digits(text: str) -> str:
    return re.sub(r"\D", "", text)


def _as_number(found: str) -> str:
    """A number found by ``_NUMBER`` as plain text: "1,250" is 1250, "−7" (Unicode minus) is -7."""
    return found.replace(",", "").replace("\u2212", "-")


def _read_phrase(ans: str) -> str | None:
    """The answer in the text after "the answer is" (``$`` and a final period already removed)."""
    # Math-only phrases ("x=5", "\\frac{1}{3}") are read as LaTeX; phrases with words ("1 000
    # apples") as text. The reading is kept only if it holds every digit of the phrase, so
    # "x = 5 and y = 3" is not cut down to its last number.
    if _PLAIN_NUMBER.fullmatch(ans):  # the common case; math-verify would read it unchanged
        return ans
    found = _read(ans if "$" in ans or _has_word(ans) else f"${ans}$")
    if found is not None and _digits(found) == _digits(ans):
        return _stated(found)
    inner = _last_boxed(ans)
    if inner:
        return inner
    # "the answer is 7 apples" -> "7": keep a lone number when the phrase adds only words.
    nums = _NUMBER.findall(ans)
    if len(nums) == 1 and re.fullmatch(r"[\w\s$\-\u2212.,/]*", ans):
        return _as_number(nums[0])
    return ans or None


def _read_box(boxed: str) -> str:
    """A single box's content read by math-verify (kept as written when it reads nothing)."""
    return _stated(_read(f"$\\boxed{{{boxed}}}$") or boxed)


_read_box = functools.lru_cache(maxsize=4096)(_read_box)


def _read_boxes(boxes: tuple[str, ...]) -> str:
    """Several boxes that state one answer, read together by math-verify (a set: "(2, 2),(6, 2)")."""
    joined = ", ".join(f"\\boxed{{{b}}}" for b in boxes)
    return _read(f"${joined}$") or ", ".join(boxes)


def _extract_unboxed(tail: str) -> str | None:
    """The answer of an output with no box: its last "the answer is X", else its last statement."""
    # 2. The last "the answer is X".
    matches = list(_ANSWER_IS.finditer(tail))
    if matches:
        ans = _strip_wrapping(matches[-1].group("ans"))
        if ans:
            return _read_phrase(ans[:_MAX_SPAN])
    # 3. The whole output, read by math-verify; 4. its last number.
    found = _read_unanchored(tail)
    if found is not None:
        return found
    nums = _NUMBER.findall(tail)
    if nums:
        return _as_number(nums[-1])
    return None


# Keyed by the tail, so the cache holds at most 4096 * MAX_CHARS characters.
_extract_unboxed = functools.lru_cache(maxsize=4096)(_extract_unboxed)


def extract_answer(text: str) -> str | None:
    """Extract the final answer from a completion, read as mathematics.

    Safe to call from any thread (no signals); bounded in time by reading only the last
    :data:`MAX_CHARS` characters. Readings are cached (per box, and per tail of an output).

    Args:
        text: The model's output.

    Returns:
        The answer string as stated (LaTeX kept, surrounding words and ``$`` dropped), or None
        when the text contains no answer.

    Example:
        >>> extract_answer("so 3 + 4 = 7. The answer is 7.")
        '7'
        >>> extract_answer("the probability is $\\\\frac{1}{3}$.")
        '\\\\frac{1}{3}'
    """
    # 1. The last complete box (with the boxes just before it that complete it: "\\boxed{1} and
    # \\boxed{2}"), read by math-verify (or kept as written when it reads nothing).
    # An empty box ("\\boxed{}", "\\boxed{ }", "\\boxed{\\text{}}") states nothing: it is read as no box.
    boxes = _last_boxes(text[-MAX_CHARS:]) if "\\boxed" in text or "\\fbox" in text else []
    boxes = [b for b in boxes if not _blank(b)]
    if len(boxes) > 1 and sum(map(len, boxes)) <= _MAX_SPAN:
        return _read_boxes(tuple(boxes))
    boxed = _last_boxed(text)
    if boxed and not _blank(boxed):
        return boxed if len(boxed) > _MAX_SPAN or _PLAIN_NUMBER.fullmatch(boxed) else _read_box(boxed)
    # Markdown bold is markup: "**42**" states 42 (Python's "2**3" is left alone).
    found = _extract_unboxed(_BOLD.sub(r"\1", text[-MAX_CHARS:]))
    # 5. "The answer is \\boxed{}." states no answer (the phrase reader would keep the empty box).
    return None if found is not None and _blank(found) else found


_EMPTY_BOX = re.compile(r"\\(?:boxed|fbox)\s*\{\s*(?:\\text\{\s*\}\s*)?\}")
"""A box with nothing in it: ``\\boxed{}``, ``\\boxed{ }``, ``\\fbox{\\text{ }}``."""


def _blank(answer: str) -> bool:
    """Whether an answer states nothing once its empty boxes (nested ones too: "\\boxed{\\boxed{}}"),
    ``\\text{}`` wrappers and spaces are taken off ("\\boxed{}\\boxed{ }" is blank, "\\boxed{} + 1" is not)."""
    inner, previous = answer, None
    while inner != previous:
        previous, inner = inner, _EMPTY_BOX.sub("", inner)
    return normalize_answer(inner) == ""


def normalize_answer(answer: str) -> str:
    """A canonical string for voting and string-match grading.

    Removes spaces, ``$`` and the currency sign ``\\$``, ``\\text{...}`` wrappers,
    ``\\left``/``\\right``, trailing periods, thousands separators in plain numbers and
    ``dfrac``/``tfrac`` variants, and turns "7.0" into "7".
    """
    s = answer.strip()
    s = re.sub(r"\\text\{([^}]*)\}", r"\1", s)
    s = re.sub(r"\\(?:mathrm|textbf|mathbf)\{([^}]*)\}", r"\1", s)
    s = s.replace("\\left", "").replace("\\right", "").replace("\\!", "").replace("\\,", "")
    s = s.replace("dfrac", "frac").replace("tfrac", "frac").replace("\\$", "").replace("$", "")
    s = re.sub(r"\s+", "", s).rstrip(".")
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", s):
        s = s.replace(",", "")
    if re.fullmatch(r"-?\d+\.0+", s):
        s = s.split(".")[0]
    return s


normalize_answer = functools.lru_cache(maxsize=1 << 16)(normalize_answer)
