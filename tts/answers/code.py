"""Code answers: the program a reply writes, and when two programs count as the same answer.

A reply answers a coding problem with a program, written as users of chat models expect: in a
fenced block (```` ```python ````; the last block that defines a function wins, else the last
block), or, without a fence, as bare code starting at the first line that begins a definition or
an import. A reply without code is "no answer", never an error.

Without running anything, two programs are the same answer when their syntax trees are the same
once comments, docstrings and formatting are dropped (:func:`code_key`): the vote of plain
self-consistency. Programs that agree *in behaviour* (the same outputs on the same inputs) are
grouped by executing them (:mod:`tts.execution.behaviour`), which needs the problem's inputs and
is done by the execution strategies.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_CODE_START = re.compile(r"^(?:def |async def |class |from \S+ import |import |@)", re.MULTILINE)
_NOT_PYTHON = {"bash", "sh", "shell", "console", "text", "json", "yaml", "output", "c", "cpp", "java",
               "javascript", "js"}


def _fenced_blocks(text: str) -> list[str]:
    """The contents of the reply's fenced blocks that may be Python (untagged or tagged python)."""
    return [body for lang, body in _FENCE.findall(text) if lang.lower() not in _NOT_PYTHON and body.strip()]


def extract_code(text: str) -> str | None:
    """The program a reply writes, or None when it writes none.

    1. Fenced blocks: the last one that defines a function, else the last one.
    2. Otherwise bare code: from the first line starting with ``def``, ``class``, ``import``,
       ``from ... import`` or a decorator to the end of the reply, cut at the first line after
       it that is prose (not indented, not blank, and not parseable with what came before).

    Example:
        >>> extract_code("Here:\\n```python\\ndef f(x):\\n    return x\\n```\\nDone.")
        'def f(x):\\n    return x'
    """
    if not isinstance(text, str) or not text.strip():
        return None
    blocks = _fenced_blocks(text)
    if blocks:
        defining = [b for b in blocks if re.search(r"^\s*(?:async\s+)?def ", b, re.MULTILINE)]
        code = (defining or blocks)[-1].strip("\n").rstrip()
    else:
        start = _CODE_START.search(text)
        code = _bare_code(text[start.start():]) if start else None
    return definitions_only(code) if code else None


def extract_script(text: str) -> str | None:
    """The script a reply writes to be run as it is (program-aided answers, whose output is the
    answer): the last fenced Python block, top-level statements kept (its ``print`` is the point);
    without a fence, bare code as :func:`extract_code` reads it. None when the reply has no code.

    Example:
        >>> extract_script("Compute:\n```python\nx = 7\nx += 5\nprint(x)\n```")
        'x = 7\nx += 5\nprint(x)'
    """
    if not isinstance(text, str) or not text.strip():
        return None
    blocks = _fenced_blocks(text)
    if blocks:
        return blocks[-1].strip("\n").rstrip() or None
    start = _CODE_START.search(text)
    return _bare_code(text[start.start():]) if start else None


_KEPT = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign,
         ast.AnnAssign)


def definitions_only(code: str) -> str | None:
    """``code`` without its top-level statements that run something (example calls, prints, an
    ``if __name__ == "__main__":`` block): imports, definitions and assignments are kept, as
    EvalPlus's sanitiser keeps them, so that a solution's demo never runs inside its tests. Code
    that does not parse (a function body, a syntax error) is kept as written; code with nothing
    left is no answer."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError):
        return code
    lines = code.splitlines()
    kept = ["\n".join(lines[min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))]) - 1:
                             node.end_lineno]) for node in tree.body if isinstance(node, _KEPT)]
    return "\n\n".join(kept) or None


def _bare_code(text: str) -> str | None:
    """The longest prefix of ``text`` that parses as Python, dropping trailing prose lines."""
    lines = text.splitlines()
    for end in range(len(lines), 0, -1):
        candidate = "\n".join(lines[:end]).rstrip()
        if not candidate:
            continue
        try:
            ast.parse(candidate)
        except (SyntaxError, ValueError):
            continue
        return candidate
    return "\n".join(lines).rstrip() or None  # unparseable code is still the reply's answer (it fails its tests)


class _DropDocstrings(ast.NodeTransformer):
    """Removes docstrings (comments are gone once parsed): they do not change what a program does."""

    def _strip(self, node: ast.AST) -> ast.AST:
        self.generic_visit(node)
        body = getattr(node, "body", None)
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]
        return node

    visit_Module = visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _strip


def code_key(code: str | None) -> str | None:
    """The vote key of a program without running it: its syntax tree with docstrings, comments and
    formatting dropped; the text with whitespace collapsed when it does not parse; None for None."""
    if code is None or not code.strip():
        return None
    try:
        tree = _DropDocstrings().visit(ast.parse(code))
    except (SyntaxError, ValueError, RecursionError):
        return " ".join(code.split())
    return ast.dump(tree, annotate_fields=False, include_attributes=False)


class CodeExtract:
    """The extraction of code answers (:func:`extract_code`), votable by :func:`code_key`.

    Strategies see ``answer_keys`` and vote with it instead of the math equivalence keys, so that
    programs are never compared as numbers.
    """

    code = True

    def __call__(self, text: str) -> str | None:
        return extract_code(text)

    @staticmethod
    def answer_keys(answers: Sequence[str | None]) -> list[str | None]:
        """One vote key per program (:func:`code_key`)."""
        return [code_key(a) for a in answers]

    def __repr__(self) -> str:
        return "CODE"


CODE = CodeExtract()
"""Extract answers as programs (fenced block or bare code), voted on by syntax tree."""


def is_code(extract: object) -> bool:
    """Whether an extraction function reads programs (:data:`CODE`)."""
    return bool(getattr(extract, "code", False))
