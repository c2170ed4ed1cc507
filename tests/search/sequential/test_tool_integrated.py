"""tir: the model's code runs while it reasons, and it reads the output before going on."""

from __future__ import annotations

import re

import pytest

from tts.backends.base import Completion
from tts.backends.function import FunctionGenerator
from tts.execution.sandbox import bwrap_path
from tts.prompts import MATH_PROMPT, chat_prompt
from tts.search.sequential.tool_integrated import (
    CLOSE_FENCE,
    ToolIntegratedConfig,
    ToolIntegratedReasoning,
    pending_program,
)
from tts.types import Problem
from tts.config import SamplingConfig

pytestmark = pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap is not installed (make install)")

PROBLEMS = [Problem("a", "What is 6 times 7?", "42"), Problem("b", "What is 2 to the 10th?", "1024")]
PROGRAMS = {"a": "print(6 * 7)", "b": "print(2 ** 10)"}


@pytest.mark.parametrize(("text", "pending"), [
    ("We compute.\n```python\nx = 6 * 7\nprint(x)", "x = 6 * 7\nprint(x)"),      # stopped at the closing fence
    ("We compute.\n```python\nprint(1)\n```\n", "print(1)"),                        # closed, nothing after
    ("```python\nprint(1)\n```\n```output", "print(1)"),                            # ToRA's marker written
    ("```python\nprint(1)\n```\n```output\n1\n```\nSo the answer is 1.", None),     # already run and read
    ("The answer is \\boxed{4}.", None),                                            # no code
    ("```\nplain fence\n```", None),                                                # not a python block
])
def test_a_sample_is_stopped_for_its_last_python_block_only_when_nothing_follows_it(text, pending):
    assert pending_program(text) == pending


def _model(calls_per_sample: int = 1):
    """Writes a program (as if the engine stopped at its closing fence) until it has seen
    ``calls_per_sample`` outputs, then answers with the last printed value, boxed."""

    def reply(req):
        shown = re.findall(r"```output\n(.*?)\n```", req.continuation, re.DOTALL)
        if len(shown) < calls_per_sample:
            assert CLOSE_FENCE in req.stop or not req.stop
            text = f"Let me run it.\n```python\n{PROGRAMS[req.key]}"
            return Completion(text if req.stop else text + "\n```\n", 8, finish_reason="stop")
        return Completion(f"\nIt printed {shown[-1]}, so the answer is \\boxed{{{shown[-1]}}}.", 6, finish_reason="stop")

    return FunctionGenerator(reply)


def _tir(gen, n=2, **config):
    return ToolIntegratedReasoning(ToolIntegratedConfig(n=n, **config), gen, chat_prompt(MATH_PROMPT),
                                   SamplingConfig(max_tokens=200))


def test_outputs_are_shown_back_and_the_answer_comes_from_the_interpreter():
    gen = _model()
    sols = _tir(gen).solve(PROBLEMS)
    assert [s.answer for s in sols] == ["42", "1024"]
    # Round 1: one request per problem (n = 2); round 2: ONE call with every live sample of both problems.
    assert len(gen.calls) == 2 and [r.n for r in gen.calls[0]] == [2, 2]
    assert [r.key for r in gen.calls[1]] == ["a", "a", "b", "b"] and all(r.n == 1 for r in gen.calls[1])
    assert all("```output\n42\n```" in r.continuation for r in gen.calls[1][:2])
    assert all("running Python code" in r.messages[-1].content for r in gen.calls[0])
    assert sols[0].trace.notes["executions"] == 2 and sols[0].trace.notes["execution_seconds"] > 0
    # Every round's generated tokens count: 8 + 6 per sample.
    assert sols[0].usage.completion_tokens == 2 * (8 + 6)


def test_after_max_calls_a_sample_is_no_longer_stopped_and_ends():
    gen = _model(calls_per_sample=10)  # would run code forever
    [sol, _] = _tir(gen, n=1, max_calls=3).solve(PROBLEMS)
    assert sol.trace.notes["executions"] == 3
    assert len(gen.calls) == 4 and gen.calls[-1][0].stop == () and gen.calls[-2][0].stop != ()
    text = sol.trace.samples[0].text
    assert text.count("```output\n42\n```") == 3 and text.endswith("```python\nprint(6 * 7)\n```\n")


def test_an_error_is_shown_to_the_model_as_one_line():
    seen = []

    def reply(req):
        seen.append(req.continuation)
        if "```output" not in req.continuation:
            return Completion("```python\nprint(undefined_name)", 4, finish_reason="stop")
        return Completion("\nThe code failed; the answer is \\boxed{0}.", 6, finish_reason="stop")

    [sol] = _tir(FunctionGenerator(reply), n=1).solve(PROBLEMS[:1])
    assert "```output\nNameError: name 'undefined_name' is not defined\n```" in seen[-1]
    assert sol.answer == "0"


def test_a_sample_out_of_tokens_is_not_continued():
    gen = _model()
    tir = ToolIntegratedReasoning(ToolIntegratedConfig(n=1), gen, chat_prompt(MATH_PROMPT), SamplingConfig(max_tokens=8))
    [sol, _] = tir.solve(PROBLEMS)
    assert len(gen.calls) == 1 and sol.trace.notes["executions"] == 0
    assert sol.trace.samples[0].finish_reason == "length" and "```output" not in sol.trace.samples[0].text
