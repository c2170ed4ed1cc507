"""program_vote's bookkeeping, with the sandbox replaced by a recorder: which programs run, with
which limits and workers, how each config of a shared draw and each wave of a stop reads them, and
the vote over a replayed pool. (tests/search/test_program_vote.py runs real programs.)"""

from __future__ import annotations

import re

import pytest

from tts.backends.base import Completion, derive_seed
from tts.backends.function import FunctionGenerator
from tts.config import StopConfig
from tts.execution.sandbox import Execution
from tts.prompts import MATH_PROMPT, chat_prompt
from tts.search.sampling.program_vote import ProgramVote, ProgramVoteConfig
from tts.types import Budget, Problem, Sample, Usage

PROBLEM = Problem("p", "What is 6 times 7?", "42")
RENDER = chat_prompt(MATH_PROMPT)
TOOLS = [{"type": "function", "function": {"name": "calc", "parameters": {"type": "object", "properties": {}}}}]


def fenced(code: str) -> str:
    return f"```python\n{code}\n```"


class Sandbox:
    """run_many's stand-in: ``print(X)`` prints X in 0.12345 s, anything else fails; every batch is
    recorded with its limits, workers and sandbox setting."""

    def __init__(self) -> None:
        self.batches: list[tuple[list[str], object, int, bool]] = []

    def __call__(self, programs, limits=None, *, workers=4, unsafe_no_sandbox=False):
        self.batches.append(([p.source for p in programs], limits, workers, unsafe_no_sandbox))
        out = []
        for p in programs:
            printed = re.fullmatch(r"print\((.*)\)", p.source.strip())
            out.append(Execution("ok", 0, printed.group(1) + "\n", "", wall_seconds=0.12345) if printed
                       else Execution("error", 1, "", "", "SyntaxError", wall_seconds=0.12345))
        return out


@pytest.fixture
def sandbox(monkeypatch):
    fake = Sandbox()
    monkeypatch.setattr("tts.search.sampling.program_vote.run_many", fake)
    return fake


def in_order(texts) -> FunctionGenerator:
    """The k-th reply of a problem, over all its requests in draw order, is ``texts[k]``."""
    drawn: dict[str, int] = {}

    def draw(req):
        start = drawn.get(req.key, 0)
        drawn[req.key] = start + req.n
        return [Completion(t, 5, -0.1, "stop") for t in texts[start:start + req.n]]

    return FunctionGenerator(draw)


def test_the_programs_run_once_each_with_the_configs_limits_and_workers(sandbox):
    texts = [fenced("print(42)"), fenced("print(42)"), fenced("print(7)"), "no code here"]
    config = ProgramVoteConfig(n=4, timeout=2.5, workers=3, unsafe_no_sandbox=True)
    model = in_order(texts)
    with_tools = Problem("p", "What is 6 times 7?", "42", {"tools": TOOLS, "tool_choice": "required"})
    [sol] = ProgramVote(config, model, RENDER, seed=9).solve([with_tools])
    (req,) = model.requests  # the program prompt, without the problem's tools
    assert (req.seed, req.key, req.tools, req.tool_choice) == (derive_seed(9, "p", 0), "p", None, None)
    assert "Write a Python program" in req.messages[-1].content
    [(sources, limits, workers, unsafe)] = sandbox.batches
    assert sources == ["print(42)", "print(7)"] and (workers, unsafe) == (3, True)
    assert (limits.wall_seconds, limits.cpu_seconds) == (2.5, 2)
    assert (sol.problem_id, sol.answer, sol.confidence) == ("p", "42", 0.5)
    # two distinct programs ran, 0.12345 s each: 0.2469 s, kept to the millisecond
    assert sol.trace.notes == {"executions": 2, "execution_seconds": 0.247, "failed": 1}  # the reply without code
    assert (sol.trace.strategy, sol.trace.votes, sol.trace.selected) == ("program_vote", {"42": 2.0, "7": 1.0}, 0)
    assert sol.usage.completion_tokens == 4 * 5
    assert [(s.text, s.completion_tokens, s.mean_logprob, s.finish_reason) for s in sol.trace.samples] == [
        (t, 5, -0.1, "stop") for t in texts]


def test_a_sub_second_timeout_still_allows_one_cpu_second(sandbox):
    ProgramVote(ProgramVoteConfig(n=1, timeout=0.5), in_order([fenced("print(1)")]), RENDER).solve([PROBLEM])
    stopping = ProgramVoteConfig(n=1, timeout=1.5, stop=StopConfig(wave=1))
    ProgramVote(stopping, in_order([fenced("print(1)")]), RENDER).solve([PROBLEM])
    assert [(b[1].wall_seconds, b[1].cpu_seconds) for b in sandbox.batches] == [(0.5, 1), (1.5, 1)]


def test_a_budget_caps_the_programs_drawn(sandbox):
    model = in_order([fenced("print(42)")] * 8)
    [sol] = ProgramVote(ProgramVoteConfig(n=8), model, RENDER).solve([PROBLEM], [Budget(samples=2)])
    assert [r.n for r in model.requests] == [2] and len(sol.trace.samples) == 2


def test_voters_that_cannot_share_draw_alone_and_a_single_voter_draws_once(sandbox):
    model = in_order([fenced("print(42)")] * 12)
    four = ProgramVote(ProgramVoteConfig(n=4), model, RENDER, seed=0)
    eight = ProgramVote(ProgramVoteConfig(n=8), model, RENDER, seed=1)
    apart = ProgramVote.solve_together([four, eight], [PROBLEM])
    assert [r.n for r in model.requests] == [4, 8] and [len(s[0].trace.samples) for s in apart] == [4, 8]
    single = in_order([fenced("print(42)")] * 4)
    [[sol]] = ProgramVote.solve_together([ProgramVote(ProgramVoteConfig(n=4), single, RENDER)], [PROBLEM])
    assert [r.n for r in single.requests] == [4] and (sol.answer, sol.confidence) == ("42", 1.0)


def test_a_stop_runs_each_new_program_once_per_wave_with_the_limits_and_seeds_each_wave(sandbox):
    """42, no code, 42, 42 one a wave: the horizon rule (n = 8) is settled after three 42s, at 4
    drawn; print(42) ran once, in the first wave's batch, and the reply without code ran nothing."""
    texts = [fenced("print(42)"), "I will not write code.", fenced("print(42)"), fenced("print(42)")] + ["x"] * 4
    model = in_order(texts)
    config = ProgramVoteConfig(n=8, timeout=3, workers=2, unsafe_no_sandbox=True, stop=StopConfig(wave=1))
    [sol] = ProgramVote(config, model, RENDER, seed=4).solve([PROBLEM])
    assert (sol.problem_id, sol.answer, sol.trace.notes["stop"]["drawn"]) == ("p", "42", 4)
    assert [b[0] for b in sandbox.batches] == [["print(42)"]]
    (_, limits, workers, unsafe), = sandbox.batches
    assert (limits.wall_seconds, limits.cpu_seconds, workers, unsafe) == (3, 3, 2, True)
    assert [(r.n, r.seed) for r in model.requests] == [(1, derive_seed(4, "p", d)) for d in range(4)]


def test_a_replayed_pool_is_voted_on_its_printed_answers():
    samples = [Sample("a", "42"), Sample("b", None), Sample("c", "7"), Sample("d", "42.0")]
    usage = Usage(prompt_tokens=10, completion_tokens=20)
    pv = ProgramVote(ProgramVoteConfig(n=4), in_order([]), RENDER)
    sol = pv.aggregate("p", samples, usage)
    assert (sol.problem_id, sol.answer, sol.confidence, sol.usage) == ("p", "42", 0.5, usage)
    assert (sol.trace.strategy, sol.trace.samples, sol.trace.selected) == ("program_vote", tuple(samples), 0)
    assert sol.trace.votes == {"42": 2.0, "7": 1.0}
