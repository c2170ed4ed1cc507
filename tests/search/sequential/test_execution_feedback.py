"""Self-Debugging's feedback worked out by hand, with a recording stand-in for the sandbox's probes."""

from __future__ import annotations

import pytest

import tts.search.sequential.execution_feedback as feedback_module
from tts.execution.behaviour import Behaviour
from tts.execution.programs import Example
from tts.search.sequential.execution_feedback import execution_feedback, feedback_text
from tts.types import Problem

PROMPT = 'def double(x):\n    """Twice x.\n    >>> double(2)\n    4\n    >>> double(0)\n    0\n    """\n'
CODING = Problem("c", PROMPT, "", {"prompt": PROMPT, "entry_point": "double"})
NO_VALUES = Problem("n", "def f():\n    pass\n", "", {"prompt": "def f():\n    pass\n", "entry_point": "f"})
EXAMPLES = [Example(f"f({k})", str(k)) for k in range(5)]


def test_the_feedback_lists_up_to_three_failing_examples_one_a_line():
    wrong = Behaviour(tuple("9" for _ in EXAMPLES), (False,) * 5)
    assert feedback_text(EXAMPLES, wrong) == (
        "The code above is wrong. Running it on the examples of the docstring:\n"
        "- `f(0)` should return `0`, but the code returned 9.\n- `f(1)` should return `1`, but the code returned 9.\n"
        "- `f(2)` should return `2`, but the code returned 9.\nPlease fix the Python code.")
    assert feedback_text(EXAMPLES, None) == (
        "The reply above contains no Python code. Please write the function in a ```python code block.")
    assert feedback_text(EXAMPLES[:1], Behaviour(("0",), (True,))) == ""


def test_programs_run_in_one_sandboxed_batch_and_each_gets_its_score_feedback_and_seconds(monkeypatch):
    probed = []

    def probe_many(probes, workers, unsafe_no_sandbox):
        probed.append((len(probes), workers, unsafe_no_sandbox))
        return [Behaviour(("4", "2"), (True, False), seconds=0.5) for _ in probes]

    monkeypatch.setattr(feedback_module, "probe_many", probe_many)
    out = execution_feedback([CODING, NO_VALUES], [(1, "def f(): pass"), (0, "def double(x): return x + 2"),
                                                   (1, None), (0, None)])
    assert probed == [(1, 4, False)]  # only the coding problem's program with stated values runs
    assert out[:3] == [(None, "", 0.0), (0.5, feedback_text([Example("double(2)", "4"), Example("double(0)", "0")],
                                                          Behaviour(("4", "2"), (True, False))), 0.5), (None, "", 0.0)]
    assert out[3] == (0.0, feedback_text([], None), 0.0)
    with pytest.raises(ValueError, match="problem 'q' has no 'prompt' and 'entry_point' metadata"):
        execution_feedback([Problem("q", "2+2?", "4", {"prompt": PROMPT})], [(0, "x")])
