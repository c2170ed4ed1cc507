"""Check programs and probes around a model-written function, and the docstring examples they read."""

from __future__ import annotations

import pytest

from tts.execution.behaviour import Behaviour, Probe, probe_many
from tts.execution.programs import Example, check_program, doctest_examples
from tts.execution.sandbox import Execution, Limits, bwrap_path, run_many

PROMPT = 'def add(a, b):\n    """Add two numbers.\n    >>> add(1, 2)\n    3\n    >>> add(-1, 1)\n    0\n    """\n'
TEST = "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(0, 0) == 0\n"
LIMITS_SMALL = Limits(wall_seconds=2.0, cpu_seconds=1)
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


def test_a_behaviours_vote_key_and_public_tests():
    assert Behaviour(("3", "!TypeError")).key == '["3", "!TypeError"]' and Behaviour(None).key is None
    assert Behaviour((), ()).key == "[]"  # no examples: every program the same behaviour
    assert Behaviour(("3",), (True,)).passes_public and Behaviour(("3",), (None,)).passes_public
    assert Behaviour((), ()).passes_public  # vacuously: no stated value
    assert not Behaviour(("3", "4"), (True, False)).passes_public and not Behaviour(None, ()).passes_public


def test_probe_many_runs_each_probe_as_asked_and_reads_each_run(monkeypatch):
    """One Behaviour per probe, in order, from each run's output; a run without the results (or with
    another count of them) has no behaviour and says why."""
    from tts.execution.behaviour import PROBE_LIMITS
    from tts.execution.programs import PROBE_MARK

    examples = (Example("add(1, 2)", "3"), Example("add(0, 0)"))
    rows = PROBE_MARK + '[["3", true], ["0", null]]\n'
    runs = [Execution("ok", 0, "noise\n" + rows, "", "", 0.25), Execution("ok", 0, PROBE_MARK + '[["3", true]]\n', ""),
            Execution("ok", 0, "", "", "", 0.5), Execution("timeout", None, rows, "", "ran past 10 s", 10.0),
            Execution("error", 1, "", "", "NameError: x")]
    seen = []

    def fake_run_many(programs, limits, workers, unsafe_no_sandbox):
        seen.append((programs, limits, workers, unsafe_no_sandbox))
        return runs[:len(programs)]

    monkeypatch.setattr("tts.execution.behaviour.run_many", fake_run_many)
    probes = [Probe(PROMPT, "add", f"def add(a, b):\n    return a + b + {i}", examples) for i in range(5)]
    got = probe_many(probes)
    assert got[0] == Behaviour(("3", "0"), (True, None), 0.25, "")
    assert got[1] == Behaviour(None, (), 0.0, "ok: the probe printed nothing")  # one result of two
    assert got[2] == Behaviour(None, (), 0.5, "ok: the probe printed nothing")
    assert got[3] == Behaviour(None, (), 10.0, "ran past 10 s")  # results of a run that did not end are not read
    assert got[4] == Behaviour(None, (), 0.0, "NameError: x")
    programs, limits, workers, unsafe = seen[0]
    assert (limits, workers, unsafe) == (PROBE_LIMITS, 4, False) and len(programs) == 5
    assert "return a + b + 3" in programs[3].source and "add(0, 0)" in programs[3].source
    probe_many(probes[:1], limits=LIMITS_SMALL, workers=2, unsafe_no_sandbox=True)
    assert seen[1][1:] == (LIMITS_SMALL, 2, True)
