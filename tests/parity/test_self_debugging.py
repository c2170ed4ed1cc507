"""Parity: Self-Debugging with unit-test feedback (Chen et al., 2023, arXiv:2304.05128), as
``revision`` with ``feedback=execution``.

The reference loop, transcribed (our words, our code), for one chain: generate a program; run it on
the unit tests the problem gives; if it passes them all, stop; otherwise show the model its program
and the failing test with the real execution result, and generate again; at most T rounds. Here the
given tests are the docstring's examples; a chain is ``n = rounds + 1`` with ``accept_score=1``.
"""

from __future__ import annotations

import pytest

from tts.answers.code import CODE
from tts.backends.function import FunctionGenerator
from tts.execution.sandbox import bwrap_path
from tts.prompts import CODE_PROMPT, chat_prompt
from tts.search.sequential.revision import Revision, RevisionConfig
from tts.types import Problem

PINNED = {"strategy:revision"}

pytestmark = pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap is not installed (make install)")

PROMPT = 'def inc(x):\n    """x plus one.\n    >>> inc(1)\n    2\n    >>> inc(-1)\n    0\n    """\n'
PROBLEM = Problem("p", PROMPT, "", {"prompt": PROMPT, "entry_point": "inc", "test": ""})
TESTS = [("inc(1)", 2), ("inc(-1)", 0)]
# The model's successive programs: each one a little better; it never sees the hidden tests.
PROGRAMS = ["def inc(x):\n    return x", "def inc(x):\n    return abs(x) + 1", "def inc(x):\n    return x + 1",
            "def inc(x):\n    return 1 + x"]


def self_debug_reference(programs, tests, rounds):
    """The paper's loop over a fixed sequence of model outputs: (programs tried, feedback shown)."""
    tried, shown = [], []
    for t, source in enumerate(programs[: rounds + 1]):
        tried.append(source)
        scope: dict = {}
        exec(source, scope)  # noqa: S102 - trusted, hand-written programs of this test only
        failing = [(call, want, eval(call, scope)) for call, want in tests if eval(call, scope) != want]
        if not failing or t == rounds:
            break
        shown.append(failing)
    return tried, shown


@pytest.mark.parametrize("rounds", [1, 2, 3])
def test_the_same_programs_are_tried_the_same_failures_shown_and_the_chain_stops_at_the_first_pass(rounds):
    replies = iter(PROGRAMS)
    gen = FunctionGenerator(lambda req: f"```python\n{next(replies)}\n```")
    config = RevisionConfig(n=rounds + 1, rounds=rounds, feedback="execution", accept_score=1.0, select="verifier")
    [sol] = Revision(config, gen, chat_prompt(CODE_PROMPT), extract=CODE).solve([PROBLEM])
    tried, shown = self_debug_reference(PROGRAMS, TESTS, rounds)
    assert [s.answer for s in sol.trace.samples] == tried
    for call, failing in zip(gen.calls[1:], shown, strict=True):
        ask = call[0].messages[-1].content
        for c, want, real in failing:
            assert f"`{c}` should return `{want}`, but the code returned {real!r}." in ask
    assert sol.answer == tried[-1]  # the program that passed (rounds >= 2), else the best-scored one

