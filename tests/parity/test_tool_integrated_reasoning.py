"""Parity: ToRA's tool-integrated reasoning loop (tir).

Reference, transcribed as a small function (our words, our code): Gou et al. (2023), "ToRA: A
Tool-Integrated Reasoning Agent for Mathematical Problem Solving" (arXiv:2309.17452), Sec. 2.2 and
its inference procedure: generate until the program's end, execute the program, append its output
in an ``output`` block, continue from the whole text; at most a fixed number of tool calls, then
the model finishes on its own; the answer is read from the final text.

The model here is a deterministic function of the text so far, so the reference and tts must
produce the same final text and answer. Programs are the test's own (run in-process by the
reference, in the sandbox by tts).
"""

from __future__ import annotations

import contextlib
import io
import re

import pytest

from tts.answers.extraction import extract_answer
from tts.backends.base import Completion
from tts.backends.function import FunctionGenerator
from tts.config import SamplingConfig
from tts.execution.sandbox import bwrap_path
from tts.prompts import MATH_PROMPT, chat_prompt
from tts.search.sequential.tool_integrated import ToolIntegratedConfig, ToolIntegratedReasoning
from tts.types import Problem

PINNED = {"strategy:tir"}

pytestmark = pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap is not installed (make install)")

# A model that needs k programs: each prints the next term of a sequence, then it answers.
STEPS = ["print(3 * 4)", "print(12 + 30)", "print(42 // 2)", "print(21 - 1)"]


def model(text: str, stopped: bool) -> str:
    """The next segment, given the text so far: the next program (its closing fence eaten by the
    stop string when ``stopped``) while programs remain, else the answer from the last output."""
    outputs = re.findall(r"```output\n(.*?)\n```", text, re.DOTALL)
    if len(outputs) < len(STEPS):
        return f"Step {len(outputs) + 1}.\n```python\n{STEPS[len(outputs)]}" + ("" if stopped else "\n```\n")
    return f"\nSo the answer is \\boxed{{{outputs[-1]}}}."


def tora(max_calls: int) -> tuple[str, str | None]:
    """ToRA's loop: generate, run the pending program, append its output, until no program is
    pending or the calls are used up (then one unstopped continuation)."""
    text, calls = "", 0
    while True:
        last = calls >= max_calls
        text += model(text, stopped=not last)
        if last or "```python\n" not in text.rsplit("```output", 1)[-1]:
            break
        code = text.rsplit("```python\n", 1)[1].removesuffix("\n```\n")
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(code, {})  # noqa: S102 - the test's own programs
        text += f"\n```\n```output\n{out.getvalue().strip()}\n```\n"
        calls += 1
    return text, extract_answer(text)


@pytest.mark.parametrize("max_calls", [1, 2, 4, 6])
def test_tir_runs_toras_loop(max_calls):
    gen = FunctionGenerator(lambda req: Completion(model(req.continuation, stopped=bool(req.stop)), 5,
                                                   finish_reason="stop"))
    tir = ToolIntegratedReasoning(ToolIntegratedConfig(n=1, max_calls=max_calls), gen, chat_prompt(MATH_PROMPT),
                                  SamplingConfig(max_tokens=500))
    [sol] = tir.solve([Problem("p", "Follow the steps.", "20")])
    text, answer = tora(max_calls)
    assert sol.trace.samples[0].text == text
    assert sol.answer == answer
    assert sol.trace.notes["executions"] == min(max_calls, len(STEPS))
