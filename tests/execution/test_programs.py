"""Check programs and probes around a model-written function, and the docstring examples they read."""

from __future__ import annotations

import pytest

from tts.execution.behaviour import Probe, probe_many
from tts.execution.programs import Example, check_program, doctest_examples
from tts.execution.sandbox import Execution, bwrap_path, run_many

PROMPT = 'def add(a, b):\n    """Add two numbers.\n    >>> add(1, 2)\n    3\n    >>> add(-1, 1)\n    0\n    """\n'
TEST = "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(0, 0) == 0\n"
needs_bwrap = pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap is not installed (make install)")


def test_doctest_and_inline_examples_are_read_as_calls_and_values():
    assert doctest_examples(PROMPT, "add") == [Example("add(1, 2)", "3"), Example("add(-1, 1)", "0")]
    inline = 'def f(s):\n    """\n    f("ab") == 2\n    f("") ➞ 0\n    For example, f(\'x\') returns 1.\n    """\n'
    assert doctest_examples(inline, "f") == [Example('f("ab")', "2"), Example('f("")', "0"), Example("f('x')", "1")]
    assert doctest_examples('def f(x):\n    """No examples."""\n', "f") == []


@needs_bwrap
def test_the_check_program_passes_a_whole_function_and_a_body_and_fails_a_wrong_one():
    whole = "def add(a, b):\n    return a + b"
    body = "    return a + b\n"
    wrong = "def add(a, b):\n    return a - b"
    runs = run_many([check_program(PROMPT, c, TEST, "add") for c in (whole, body, wrong)])
    assert [r.status for r in runs] == ["ok", "ok", "error"]
    assert "AssertionError" in runs[2].error


@needs_bwrap
def test_a_probe_records_values_exceptions_and_the_stated_values_it_matches():
    examples = (Example("add(1, 2)", "3"), Example("add('a', 1)"))
    right, noisy, broken = probe_many([
        Probe(PROMPT, "add", "def add(a, b):\n    return a + b", examples),
        Probe(PROMPT, "add", "def add(a, b):\n    print('hi')\n    return a - b", examples),
        Probe(PROMPT, "add", "def add(a, b):\n    return a +", examples),
    ])
    assert right.outputs == ("3", "!TypeError") and right.passed == (True, None) and right.passes_public
    assert noisy.outputs == ("-1", "!TypeError") and not noisy.passes_public  # its print is not an output
    assert broken.outputs is None and broken.key is None and "SyntaxError" in broken.error


def test_a_probe_whose_sandbox_failed_says_so_and_has_no_behaviour(monkeypatch):
    failed = Execution("sandbox_failed", None, "", "", "bwrap: Can't fork")
    monkeypatch.setattr("tts.execution.behaviour.run_many", lambda programs, *a, **k: [failed] * len(programs))
    (b,) = probe_many([Probe(PROMPT, "add", "def add(a, b):\n    return a + b", (Example("add(1, 2)", "3"),))])
    assert (b.outputs, b.key, b.error) == (None, None, "sandbox_failed: bwrap: Can't fork")
