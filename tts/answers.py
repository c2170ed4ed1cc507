"""Answer extraction from free-form model output.

Order of preference: the last ``\\boxed{...}`` (balanced braces), then "the answer is X", then
the last number in the text. Returns None when nothing answer-like is present; the grader counts
that as its own outcome ("no answer"), never as an error.
"""

from __future__ import annotations

import re

_ANSWER_IS = re.compile(
    r"(?:final answer|the answer)\s*(?:is|:)\s*[:\s]*(?P<ans>\$[^$]+\$|\\\(.+?\\\)|[^\n]+?)\s*(?:\.\s|\.?$|\n)",
    re.IGNORECASE,
)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?")


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


def extract_answer(text: str) -> str | None:
    """Extract the final answer from a completion.

    Args:
        text: The model's output.

    Returns:
        The answer string (not normalised), or None when the text contains no answer.

    Example:
        >>> extract_answer("so 3 + 4 = 7. The answer is 7.")
        '7'
    """
    boxed = _last_boxed(text)
    if boxed:
        return boxed
    matches = list(_ANSWER_IS.finditer(text))
    if matches:
        ans = _strip_wrapping(matches[-1].group("ans"))
        inner = _last_boxed(ans)
        if inner:
            return inner
        # "the answer is 7 apples" -> "7": keep a lone number when the phrase adds only words.
        nums = _NUMBER.findall(ans)
        if len(nums) == 1 and re.fullmatch(r"[\w\s$\-.,/]*", ans):
            return nums[0].replace(",", "")
        if ans:
            return ans
    nums = _NUMBER.findall(text)
    if nums:
        return nums[-1].replace(",", "").rstrip(".")
    return None


def normalize_answer(answer: str) -> str:
    """A canonical string for voting and string-match grading.

    Removes spaces, ``$``, ``\\text{...}`` wrappers, ``\\left``/``\\right``, trailing periods, thousands
    separators in plain numbers and ``dfrac``/``tfrac`` variants, and turns "7.0" into "7".
    """
    s = answer.strip()
    s = re.sub(r"\\text\{([^}]*)\}", r"\1", s)
    s = re.sub(r"\\(?:mathrm|textbf|mathbf)\{([^}]*)\}", r"\1", s)
    s = s.replace("\\left", "").replace("\\right", "").replace("\\!", "").replace("\\,", "")
    s = s.replace("dfrac", "frac").replace("tfrac", "frac").replace("$", "")
    s = re.sub(r"\s+", "", s).rstrip(".")
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", s):
        s = s.replace(",", "")
    if re.fullmatch(r"-?\d+\.0+", s):
        s = s.split(".")[0]
    return s
