"""Answer extraction from free-form model output, and answer normalisation.

Extraction first *locates* where the answer is stated, then *reads* it as mathematics:

1. locate: the last complete ``\\boxed{...}``; else the last "the answer is X" / "final answer: X";
   else the whole output (its last few thousand characters);
2. read: math-verify's extraction (``math_verify.parse`` with its LaTeX and expression configs)
   reads the located span, so "$\\frac{1}{3}$" is one answer, not the number 3, and "1 000" is
   1000; when it finds nothing, the regex rules read it (the box content as written, the phrase
   with a lone number kept, and finally the last number in the text).

We locate the phrase and the box ourselves: math-verify's own priorities let a check written
after "the answer is $\\frac{1}{3}$" ("2 + 2 = 4") win, and join several boxes into one set.

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
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?")
_PLAIN_NUMBER = re.compile(r"-?(?:0|[1-9]\d{0,50})(?:\.\d{1,50})?")
# LaTeX commands the parser evaluates on the spot, each with the arguments that make it slow:
# binomials and Gamma of powers or long numbers; floors, determinants, ... of towers or long numbers.
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
_NUMERIC_COMMANDS = re.compile(r"\\(?:[dt]?frac|sqrt|pi|cdot)")
_LONE_VARIABLE = re.compile(r"[A-Za-z](?:_\{?\w\}?)?'?")


# --- extraction ---------------------------------------------------------------------------------


def _last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` or ``\\fbox{...}``, respecting nested braces."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    brace = text.find("{", start)
    if brace < 0:
        # "\boxed 5" form
        m = re.match(r"\\boxed\s+([^\s$]+)", text[start:])
        return m.group(1) if m else None
    depth = 0
    for i in range(brace, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[brace + 1 : i].strip()
    return None  # unbalanced: the sample was cut off inside the box


def _strip_wrapping(ans: str) -> str:
    ans = ans.strip()
    for left, right in (("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"), ("**", "**")):
        if ans.startswith(left) and ans.endswith(right) and len(ans) >= len(left) + len(right):
            ans = ans[len(left) : len(ans) - len(right)].strip()
    return ans.rstrip(".").strip()


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


@functools.cache
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


@functools.cache
def _extraction_config() -> tuple[Any, ...]:
    mv = _math_verify()
    return (mv.LatexExtractionConfig(boxed_match_priority=0), mv.ExprExtractionConfig())


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
    still has variables ("$y = 2x + 3$") is kept whole.
    """
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


def _read_phrase(ans: str) -> str | None:
    """The answer in the text after "the answer is" (``$`` and a final period already removed)."""
    # Math-only phrases ("x=5", "\\frac{1}{3}") are read as LaTeX; phrases with words ("1 000
    # apples") as text. The reading is kept only if it holds every digit of the phrase, so
    # "x = 5 and y = 3" is not cut down to its last number.
    if _PLAIN_NUMBER.fullmatch(ans):  # the common case; math-verify would read it unchanged
        return ans
    found = _read(ans if "$" in ans or _has_word(ans) else f"${ans}$")
    if found is not None and _digits(found) == _digits(ans):
        return found
    inner = _last_boxed(ans)
    if inner:
        return inner
    # "the answer is 7 apples" -> "7": keep a lone number when the phrase adds only words.
    nums = _NUMBER.findall(ans)
    if len(nums) == 1 and re.fullmatch(r"[\w\s$\-.,/]*", ans):
        return nums[0].replace(",", "")
    return ans or None


@functools.lru_cache(maxsize=4096)
def _read_box(boxed: str) -> str:
    return _read(f"$\\boxed{{{boxed}}}$") or boxed


@functools.lru_cache(maxsize=4096)  # keyed by the tail, so the cache holds at most 4096 * MAX_CHARS
def _extract_unboxed(tail: str) -> str | None:
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
        return nums[-1].replace(",", "").rstrip(".")
    return None


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
    # 1. The last complete box, read by math-verify (or kept as written when it reads nothing).
    boxed = _last_boxed(text)
    if boxed:
        return boxed if len(boxed) > _MAX_SPAN or _PLAIN_NUMBER.fullmatch(boxed) else _read_box(boxed)
    return _extract_unboxed(text[-MAX_CHARS:])


@functools.lru_cache(maxsize=1 << 16)
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
