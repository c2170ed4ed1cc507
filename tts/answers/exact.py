"""Exact values of plain arithmetic on numbers ("3 + 4 * 2", "(3 + 5) / 2", "-0.1"), as fractions.

Shared by vote keys (a stated computation votes as its value) and the arithmetic verifier (a stated
equality holds exactly or not). Numbers are read from the text, so 0.1 is exactly 1/10; only + - * /,
unary signs and brackets are arithmetic, anything else is refused.
"""

from __future__ import annotations

import ast
from fractions import Fraction

MAX_DIGITS = 40
"""Most digits one number may have (bounds the work on adversarial text)."""


class NotPlainArithmetic(ValueError):
    """A text that is not plain arithmetic on numbers."""


def exact_value(text: str, max_chars: int = 200) -> Fraction:
    """The exact value of ``text``.

    Raises:
        NotPlainArithmetic: Empty, longer than ``max_chars``, or anything but numbers and + - * / ( ).
        ZeroDivisionError: A division by zero (the caller decides what that means).

    Example:
        >>> exact_value("(3 + 5) / 2"), exact_value("0.1 * 3")
        (Fraction(4, 1), Fraction(3, 10))
    """
    text = text.strip()
    if not text or len(text) > max_chars:
        raise NotPlainArithmetic(text)
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise NotPlainArithmetic(text) from exc
    return _value(tree.body, text)


def _value(node: ast.AST, source: str) -> Fraction:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        literal = source[node.col_offset:node.end_col_offset]  # type: ignore[misc]
        if sum(c.isdigit() for c in literal) > MAX_DIGITS:
            raise NotPlainArithmetic(literal)
        return Fraction(literal)  # from the text, so 0.1 is exactly 1/10
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = _value(node.operand, source)
        return -inner if isinstance(node.op, ast.USub) else inner
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
        left, right = _value(node.left, source), _value(node.right, source)
        if isinstance(node.op, ast.Add):
            return left + right
        if isinstance(node.op, ast.Sub):
            return left - right
        if isinstance(node.op, ast.Mult):
            return left * right
        return left / right
    raise NotPlainArithmetic(ast.dump(node))
