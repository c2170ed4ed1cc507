"""The scripted backend's programs: plausible solutions to coding problems, some of them wrong.

For a problem with a reference solution (HumanEval's prompt plus canonical body), the scripted
model writes either that solution or one of two *mutants*, the reference with one small slip a
programmer makes (a comparison turned around or made inclusive, ``+`` for ``-``, a constant off by
one, ``True`` for ``False``), each in a fenced block after a sentence of prose, as chat models
answer. Whether a mutant is wrong is for the check program to say: most fail their tests, a few
behave the same. Everything here is deterministic in the solution.
"""

from __future__ import annotations

import ast
import random
import re

_SWAP_COMPARE = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
                 ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is}
_SWAP_BINOP = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Add, ast.FloorDiv: ast.Mod, ast.Mod: ast.FloorDiv,
               ast.Div: ast.Mult}


def _function(tree: ast.Module, entry_point: str) -> ast.AST:
    """The entry point's definition (the last one of that name), or the whole module."""
    found = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == entry_point]
    return found[-1] if found else tree


def _slips(func: ast.AST) -> list[tuple[ast.AST, str]]:
    """The nodes where a slip can be made, in source order, each with the kind of slip."""
    spots = []
    for node in ast.walk(func):
        if isinstance(node, ast.Compare) and type(node.ops[0]) in _SWAP_COMPARE:
            spots.append((node, "compare"))
        elif isinstance(node, ast.BinOp) and type(node.op) in _SWAP_BINOP:
            spots.append((node, "binop"))
        elif isinstance(node, ast.Constant) and type(node.value) in (bool, int) and not isinstance(node.value, str):
            spots.append((node, "constant"))
    return sorted(spots, key=lambda s: (getattr(s[0], "lineno", 0), getattr(s[0], "col_offset", 0)))


def _apply(node: ast.AST, kind: str) -> None:
    if kind == "compare":
        node.ops[0] = _SWAP_COMPARE[type(node.ops[0])]()
    elif kind == "binop":
        node.op = _SWAP_BINOP[type(node.op)]()
    elif isinstance(node.value, bool):
        node.value = not node.value
    else:
        node.value = node.value + 1


def mutants(solution: str, entry_point: str, count: int = 2) -> list[str]:
    """Up to ``count`` distinct programs that differ from ``solution`` by one slip in ``entry_point``
    (spread over its body); a solution that does not parse, or offers no place to slip, gets a
    function that returns None."""
    try:
        spots = _slips(_function(ast.parse(solution), entry_point))
    except SyntaxError:
        spots = []
    out: list[str] = []
    for i in range(len(spots)):
        tree = ast.parse(solution)
        node, kind = _slips(_function(tree, entry_point))[(i * 7) % len(spots)]
        _apply(node, kind)
        text = ast.unparse(tree)
        if text not in out:
            out.append(text)
        if len(out) == count:
            break
    while len(out) < count:
        out.append(f"def {entry_point}(*args):\n    return {'None' if not out else '0'}")
    return out


_INTROS = ("Here is a solution:", "Sure! The function can be written as follows.",
           "We iterate over the input and build the result.", "This implementation handles the edge cases:")


def code_reply(program: str | None, rng: random.Random) -> str:
    """A reply that answers with ``program`` in a fenced block (or, when None, only talks about it)."""
    intro = rng.choice(_INTROS)
    if program is None:
        return f"{intro} The idea is to check each element and keep the ones that satisfy the condition."
    return f"{intro}\n\n```python\n{program}\n```\n\nThis runs in linear time."


_DOCTEST = re.compile(r">>>\s*([A-Za-z_]\w*\(.*\))\s*\n\s*([^\n>][^\n]*)")


def tests_reply(request_text: str, rng: random.Random, slip: float = 0.2) -> str:
    """A reply to a request for test cases: one ``assert`` per example of the docstring in the
    request (``>>> call`` then its value), each stating a wrong value with probability ``slip``
    (an int one more, anything else None), in a fenced block."""
    lines = []
    for call, value in _DOCTEST.findall(request_text):
        value = value.strip()
        if rng.random() < slip:
            value = str(int(value) + 1) if re.fullmatch(r"-?\d+", value) else "None"
        lines.append(f"assert {call} == {value}")
    rng.shuffle(lines)
    return "Here are some tests:\n\n```python\n" + "\n".join(lines) + "\n```" if lines else "I cannot think of tests."


PROGRAM_REQUEST = re.compile(r"Write a Python program that computes the answer", re.IGNORECASE)
"""How the scripted model recognises a request for a program whose printed output is the answer."""

_PY_OP = {"+": "+", "-": "-", "*": "*", "/": "//"}


def chain_program_reply(start: int, ops: list[str], rng: random.Random, slip: float) -> str:
    """A program that works a chain of operations (``"+ 5"``, ``"* 2"``) out and prints the result.

    Transcribing is all the model does; the interpreter does the arithmetic. Each operation is
    written wrong with probability ``slip`` (its operand off by one), and one program in twenty is
    cut off mid-statement (a syntax error: no answer)."""
    lines = [f"x = {start}"]
    for op in ops:
        sym, _, arg = op.partition(" ")
        value = int(arg)
        if rng.random() < slip:
            value += rng.choice((-1, 1))
        lines.append(f"x = x {_PY_OP.get(sym, sym)} {value}")
    lines.append("print(x)")
    if rng.random() < 0.05:
        lines[-1] = "print(x"
    return "Here is a program that follows the operations in order.\n\n```python\n" + "\n".join(lines) + "\n```\n"


def value_program_reply(answer: str | None, rng: random.Random) -> str:
    """A program that prints ``answer`` (computed as a literal would be); prose alone without one."""
    if answer is None:
        return "I am not sure how to write this as a program."
    literal = answer if re.fullmatch(r"-?\d+(?:\.\d+)?", answer) else repr(answer)
    return f"```python\nresult = {literal}\nprint(result)\n```"


TIR_REQUEST = re.compile(r"running Python code where it helps", re.IGNORECASE)
"""How the scripted model recognises a tool-integrated reasoning request (``tir``)."""
_SHOWN_OUTPUT = re.compile(r"```output\n(.*?)\n```", re.DOTALL)


def tir_reply(continuation: str, program: str) -> str:
    """A tool-integrated reply: before any output is shown, prose and ``program`` in a block (the
    engine stops at its closing fence); once an output is shown, the answer it printed, boxed (an
    error shown back gets no answer)."""
    shown = _SHOWN_OUTPUT.findall(continuation)
    if not shown:
        return f"Let me compute this with code.\n```python\n{program}\n```\n"
    last = shown[-1].strip().splitlines()[-1] if shown[-1].strip() else ""
    if not re.fullmatch(r"-?\d+(?:\.\d+)?", last):
        return "\nThe program did not give a number, so I cannot tell."
    return f"\nThe program printed {last}, so the answer is \\boxed{{{last}}}."
