"""tir's rules worked out by hand with a recording stand-in for the sandbox: the requests and
seeds of every round, the limits each program runs under, what the model is shown, the notes and
usage of a solution, and configs that share one draw."""

from __future__ import annotations

import re

import pytest

import tts.search.sequential.tool_integrated as tir_module
from tts.backends.base import Completion, derive_seed
from tts.backends.function import FunctionGenerator
from tts.config import SamplingConfig
from tts.execution.sandbox import Execution, Limits
from tts.prompts import MATH_PROMPT, TIR_PROMPT, chat_prompt
from tts.search.sequential.tool_integrated import (
    CLOSE_FENCE,
    OUTPUT_MARK,
    ToolIntegratedConfig,
    ToolIntegratedReasoning,
    shown_output,
)
from tts.types import Budget, Problem, Sample, Usage

PROBLEM = Problem("a", "What is 6 times 7?", "42")
PROMPT = chat_prompt(MATH_PROMPT)  # one object: configs share a draw only with the same prompt


@pytest.fixture
def sandbox(monkeypatch):
    """The sandbox's run_many, recorded: each program 'prints' ``outputs[code]`` in 0.12345 s."""
    calls: list[dict] = []
    outputs = {"print(6 * 7)": "42\n"}

    def run_many(programs, limits, workers, unsafe_no_sandbox):
        calls.append({"codes": [p.source for p in programs], "limits": limits, "workers": workers,
                      "unsafe": unsafe_no_sandbox})
        return [Execution("ok", 0, outputs.get(p.source, ""), "", wall_seconds=0.12345) for p in programs]

    monkeypatch.setattr(tir_module, "run_many", run_many)
    return calls


def _model(calls_per_sample: int = 1) -> FunctionGenerator:
    """Writes ``print(6 * 7)`` (stopped at its closing fence, 8 tokens) until it has seen
    ``calls_per_sample`` outputs, then boxes the last one (6 tokens)."""
    def reply(req):
        shown = re.findall(r"```output\n(.*?)\n```", req.continuation, re.DOTALL)
        if len(shown) < calls_per_sample:
            text = "Let me run it.\n```python\nprint(6 * 7)"
            return Completion(text if req.stop else text + "\n```\n", 8, finish_reason="stop")
        return Completion(f"\nSo \\boxed{{{shown[-1]}}}.", 6, finish_reason="stop")
    return FunctionGenerator(reply)


def _tir(gen, sampling=None, seed=0, **config) -> ToolIntegratedReasoning:
    return ToolIntegratedReasoning(ToolIntegratedConfig(**config), gen, PROMPT,
                                   sampling or SamplingConfig(max_tokens=200), seed=seed)


def test_every_round_requests_and_seeds_and_the_limits_programs_run_under(sandbox):
    gen = _model()
    sampling = SamplingConfig(temperature=0.3, top_p=0.8, max_tokens=200)
    [sol] = _tir(gen, sampling, seed=7, n=2, timeout=2.5, workers=3).solve([PROBLEM])
    [first], second = gen.calls
    assert first.messages == chat_prompt(TIR_PROMPT)(PROBLEM) and first.tools is None and first.tool_choice is None
    assert (first.n, first.temperature, first.top_p, first.max_tokens) == (2, 0.3, 0.8, 200)
    assert first.stop == (CLOSE_FENCE, OUTPUT_MARK) and first.seed == derive_seed(7, "a", 0)
    shown = "Let me run it.\n```python\nprint(6 * 7)\n```\n```output\n42\n```\n"
    assert [(r.n, r.continuation, r.max_tokens, r.stop) for r in second] == [(1, shown, 192, first.stop)] * 2
    assert [r.seed for r in second] == [derive_seed(7, "a", 1000 + j) for j in (0, 1)]
    assert sandbox == [{"codes": ["print(6 * 7)"] * 2, "limits": Limits(wall_seconds=2.5, cpu_seconds=2), "workers": 3,
                        "unsafe": False}]
    assert (sol.problem_id, sol.answer, sol.confidence, sol.trace.strategy) == ("a", "42", 1.0, "tir")
    assert [s.completion_tokens for s in sol.trace.samples] == [8 + 6] * 2
    assert sol.trace.votes == {"42": 2.0} and sol.trace.selected == 0
    # 0.12345 s per program, two programs: rounded to the millisecond
    assert sol.trace.notes == {"executions": 2, "execution_seconds": 0.247}
    assert sol.usage.completion_tokens == 2 * (8 + 6) and sol.usage.calls == 1 + 2


def test_a_short_timeout_still_gets_a_cpu_second_and_the_last_call_is_not_stopped(sandbox):
    gen = _model(calls_per_sample=10)
    [sol] = _tir(gen, n=1, timeout=0.5, max_calls=2).solve([PROBLEM])
    assert [c["limits"] for c in sandbox] == [Limits(wall_seconds=0.5, cpu_seconds=1)] * 2
    assert [c[0].stop for c in gen.calls] == [(CLOSE_FENCE, OUTPUT_MARK), (CLOSE_FENCE, OUTPUT_MARK), ()]
    assert [c[0].seed for c in gen.calls[1:]] == [derive_seed(0, "a", 1000), derive_seed(0, "a", 2000)]
    assert sol.trace.notes == {"executions": 2, "execution_seconds": 0.247}  # one sample's two runs add up
    assert sol.trace.samples[0].finish_reason == "stop"
    assert (sol.usage.completion_tokens, sol.usage.calls) == (3 * 8, 3)  # every round's tokens


def test_what_the_model_is_shown_of_a_run():
    ok = Execution("ok", 0, "\n" + "x" * 20 + "\n", "")
    assert shown_output(ok, 20) == "x" * 20 and shown_output(ok, 19) == "x" * 19 + "\n..."
    assert shown_output(Execution("error", 1, "", "...", error="NameError: name 'y' is not defined"), 20) == (
        "NameError: name 'y' is not defined")
    assert shown_output(Execution("timeout", None, "", ""), 20) == "timeout"


def test_configs_that_differ_only_in_n_share_one_draw_and_each_votes_among_its_first_samples(sandbox):
    def reply(req):
        if "```output" in req.continuation:
            return Completion("\nSo \\boxed{42}.", 6, finish_reason="stop")
        return [Completion("\\boxed{7}", 3, finish_reason="stop"),
                Completion("Let me run it.\n```python\nprint(6 * 7)", 8, finish_reason="stop"),
                Completion("Let me run it.\n```python\nprint(6 * 7)", 8, finish_reason="stop")]
    gen = FunctionGenerator(reply)
    one, three = _tir(gen, n=1), _tir(gen, n=3)
    [[sol1], [sol3]] = ToolIntegratedReasoning.solve_together([one, three], [PROBLEM])
    assert len(gen.calls) == 2 and gen.calls[0][0].n == 3  # one draw of max(n)
    assert (sol1.answer, sol1.confidence, sol1.trace.notes["executions"]) == ("7", 1.0, 0)
    assert sol1.usage.completion_tokens == 3 and sol1.usage.calls == 1  # its share of round 1 only
    assert (sol3.answer, sol3.confidence) == ("42", pytest.approx(2 / 3)) and sol3.trace.notes["executions"] == 2
    assert sol3.usage.completion_tokens == 3 + 2 * (8 + 6)
    # The larger config first, or alone: still one draw per group.
    [[sol3b], [sol1b]] = ToolIntegratedReasoning.solve_together([three, one], [PROBLEM])
    assert len(gen.calls) == 4 and (sol3b.answer, sol1b.answer) == ("42", "7")
    [[alone]] = ToolIntegratedReasoning.solve_together([one], [PROBLEM])
    assert alone.answer == "7" and len(gen.calls) == 5


def test_configs_that_differ_in_more_than_n_each_run_their_programs(sandbox):
    gen = _model()  # every first sample stops to run print(6 * 7)
    one, other = _tir(gen, n=1), _tir(gen, n=1, max_calls=2)
    [[a], [b]] = ToolIntegratedReasoning.solve_together([one, other], [PROBLEM])
    assert (a.answer, a.trace.notes["executions"]) == (b.answer, b.trace.notes["executions"]) == ("42", 1)
    assert len(gen.calls) == 4 and len(sandbox) == 2  # two loops of two rounds, one batch of programs each


def test_a_replayed_pool_is_voted():
    samples = [Sample("x", "4", 3), Sample("y", "5", 3), Sample("z", "5", 3)]
    sol = _tir(_model(), n=3).aggregate("a", samples, Usage(completion_tokens=9))
    assert (sol.problem_id, sol.answer, sol.confidence, sol.trace.selected) == ("a", "5", pytest.approx(2 / 3), 1)
    assert sol.trace.votes == {"4": 1.0, "5": 2.0} and sol.trace.strategy == "tir" and sol.usage.completion_tokens == 9
    assert sol.trace.samples == tuple(samples)


def test_the_program_is_run_as_written_and_its_output_shown_as_printed():
    assert tir_module.pending_program("```python\nprint(1)\n```\n```output\n") == "print(1)"
    assert tir_module.pending_program("```python\nX = 6 * 7\nprint(X)") == "X = 6 * 7\nprint(X)"
    assert tir_module.pending_program("```python\n  # the sum\nprint(1)") == "  # the sum\nprint(1)"
    assert shown_output(Execution("ok", 0, "\n  42  \n", ""), 20) == "  42  "
    assert shown_output(Execution("ok", 0, "X 42 X\n", ""), 20) == "X 42 X"


def test_a_written_output_marker_is_replaced_by_the_real_output(sandbox):
    def reply(req):
        if "```output\n42" in req.continuation:
            return Completion("\nSo \\boxed{42}.", 6, finish_reason="stop")
        return Completion("  Let me run it.\n```python\nprint(6 * 7)\n```\n```output\n", 8, finish_reason="stop")
    gen = FunctionGenerator(reply)
    [sol] = _tir(gen, n=1).solve([PROBLEM])
    assert gen.calls[1][0].continuation == "  Let me run it.\n```python\nprint(6 * 7)\n```\n```output\n42\n```\n"
    assert sol.answer == "42"


def test_a_reply_cut_by_length_is_done_and_its_program_is_not_run(sandbox):
    gen = FunctionGenerator(lambda req: Completion("```python\nprint(6 * 7)", 8, finish_reason="length"))
    [sol] = _tir(gen, n=1).solve([PROBLEM])
    assert len(gen.calls) == 1 and sandbox == [] and sol.trace.notes["executions"] == 0
    assert sol.trace.samples[0].finish_reason == "length"


def test_a_budget_lowers_the_samples_drawn(sandbox):
    gen = _model()
    [sol] = _tir(gen, n=3).solve([PROBLEM], [Budget(samples=1)])
    assert gen.calls[0][0].n == 1 and len(sol.trace.samples) == 1


def test_a_later_draw_has_its_own_seed_and_a_problems_tools_are_never_offered():
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {}}}}]
    problem = Problem("a", "What is 6 times 7?", "42", {"tools": tools, "tool_choice": "auto"})
    req = _tir(_model(), n=2).request(problem, drawn=3)
    assert req.seed == derive_seed(0, "a", 3) and req.tools is None and req.tool_choice is None
