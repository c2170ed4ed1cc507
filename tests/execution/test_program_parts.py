"""The text around a model-written function (tts.execution.programs), read and run in-process: the
tests a reply states, the examples a docstring shows, and what the test and probe programs print
(each pinned by a mutation run: docs/mutation.md). The programs run here with exec, no sandbox:
they are ours, around a fixed, harmless function."""

from __future__ import annotations

import contextlib
import io

from tts.execution import programs
from tts.execution.programs import (PROBE_MARK, Example, assert_tests, defines, doctest_examples, probe_program,
                                    read_probe, read_tests)

PROMPT = 'def f(x):\n    """Add one."""\n'
CODE = "def f(x):\n    return x + 1\n"


def _run(program: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(program, "<program>", "exec"), {"__name__": "__main__"})
    return out.getvalue()


def test_a_replys_tests_are_its_one_line_asserts_that_call_the_function_in_order():
    reply = "\n".join(["Tests:", "assert f(1) == 2", "   assert f(2) == 3   ", "assert g(1) == 1", "assert f(3) == (",
                       "assert f(4) == 5; x = 1", "print(f(1))", "assertf(1)", "assert f(5) == 6"])
    assert assert_tests(reply, "f") == ["assert f(1) == 2", "assert f(2) == 3", "assert f(5) == 6"]
    assert assert_tests(reply, "f", per_sample=2) == ["assert f(1) == 2", "assert f(2) == 3"]
    assert assert_tests(reply, "f", per_sample=1) == ["assert f(1) == 2"]


def test_test_inputs_are_the_calls_the_tests_make_once_each_without_their_claimed_values():
    tests = ["assert f(1) == 2", "assert f(1) == 3", "assert f(2, [1, (2)]) == 0", "assert g(1)", "assert f(1 == 2",
             "assert h(f(7)) == 1"]
    assert programs.test_inputs(tests, "f") == [Example("f(1)"), Example("f(2, [1, (2)])"), Example("f(7)")]


def test_a_docstrings_examples_are_read_in_both_forms_once_each():
    prompt = "\n".join([
        "def f(x):",  # the signature is not an example
        '    """Add one.',
        "    >>> f(1)", "    2",
        "    >>> f(2)", "    >>> f(3)", "    4",  # f(2) shows no value
        "    f(5) ➞ 25.", "    f(6) returns 36,", "    f(7) => not python(", "    f(8) == 64;",
        "    >>> print(f(9))", "    9",  # not a call of f first
        "    f(2) -> 3",  # a later example fills the value an earlier one lacked
        "    f(1) -> 99",  # ... but never replaces one
        "    f(10)", "    >>>f(12)", "    13",  # no space after the prompt
        '    """', "    >>> f(11)", "    12"])  # a value on the last line
    assert doctest_examples(prompt, "f") == [
        Example("f(1)", "2"), Example("f(2)", "3"), Example("f(3)", "4"), Example("f(5)", "25"), Example("f(6)", "36"),
        Example("f(7)", ""), Example("f(8)", "64"), Example("f(10)", ""), Example("f(12)", "13"), Example("f(11)", "12")]


def test_the_tests_program_says_which_tests_pass_after_what_the_function_prints():
    tests = ["assert f(1) == 2", "assert f(1) == 3", "print('noise'); assert f(0) == 1", "raise SystemExit",
             "assert f('a')"]
    out = _run(programs.tests_program(PROMPT, CODE, "f", tests))
    assert read_tests(out, 5) == (True, False, True, False, False)
    assert read_tests(out, 4) is None  # not the tests asked for
    assert read_tests("the program died", 5) is None
    assert read_tests(f"printed {PROBE_MARK}[true]\n", 1) == (True,)


def test_the_probe_records_each_value_or_exception_and_checks_expected_values():
    examples = [Example("f(1)", "2"), Example("f(1)", "3"), Example("f('a')"), Example("f(2)"), Example("f('a')", "1")]
    out = _run(probe_program(PROMPT, CODE, "f", examples))
    assert read_probe(out) == [("2", True), ("2", False), ("!TypeError", None), ("3", None), ("!TypeError", False)]
    for broken in ("no mark", f"{PROBE_MARK}not json", f"{PROBE_MARK}", f'{PROBE_MARK}{{"a": 1}}'):
        assert read_probe(broken) is None
    assert read_probe(f"{PROBE_MARK}[[1, null]]\n{PROBE_MARK}[[\"x\", true]]\nafter") == [("x", True)]  # the last mark


def test_a_whole_function_is_told_from_a_body():
    assert defines(CODE, "f") and defines("  async  def f (x):\n    pass", "f")
    assert not defines("    return x + 1\n", "f") and not defines("def f2(x):\n    pass", "f")
    assert not defines("def g(x):\n    return f(x)", "f")


def test_a_doctest_on_the_last_line_has_no_value_and_one_before_the_last_line_has():
    assert doctest_examples("    >>> f(1)", "f") == [Example("f(1)", "")]
    assert doctest_examples(">>> f(1)\n2", "f") == [Example("f(1)", "2")]


def test_a_whole_function_after_other_lines_is_told_from_a_body():
    assert defines("import math\n\n\ndef f(x):\n    return math.floor(x)\n", "f")
    assert defines("async def f(x):\n    return x\n", "f")
    assert not defines("    return f(x - 1)\n", "f")


def test_a_whole_function_goes_after_the_prompt_trimmed_at_its_end_only():
    prompt = '\nfrom typing import List\n\n\ndef f(x: List[int]) -> int:\n    """Sum."""\n\n'
    assert programs.solution_source(prompt, "def f(x):\n    return sum(x)", "f") == (
        '\nfrom typing import List\n\n\ndef f(x: List[int]) -> int:\n    """Sum."""\n    pass\n\n\n'
        "def f(x):\n    return sum(x)\n")


def test_a_docstrings_examples_are_calls_and_values_not_signatures_statements_or_broken_calls():
    prompt = "\n".join([
        "async def f(x):",  # an async signature names the parameters: no example
        '    """',
        "    >>> f(f(2))",  # a nested call is read whole
        "    4",
        "    >>> f(1)",
        "    y = 2",  # a statement, not a value
        "    f(1 2) == 3",  # not a valid call
        "    f(3) == f(3)",  # the value after the first call
        "    f(5) == MAX.",  # the trailing full stop goes, the name stays whole
        '    """',
    ])
    assert doctest_examples(prompt, "f") == [Example("f(f(2))", "4"), Example("f(1)", ""), Example("f(3)", "f(3)"),
                                             Example("f(5)", "MAX")]
