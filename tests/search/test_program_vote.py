"""program_vote: the model writes programs, the sandbox runs them, their printed answers are voted."""

from __future__ import annotations

import pytest

from tts.backends.function import FunctionGenerator, RecordingGenerator
from tts.backends.scripted import ScriptedGenerator
from tts.benchmarks.chains import ChainsBenchmark
from tts.execution import sandbox
from tts.execution.sandbox import SandboxUnavailableError, bwrap_path
from tts.prompts import MATH_PROMPT, chat_prompt
from tts.search.sampling.program_vote import ProgramVote, ProgramVoteConfig
from tts.types import Problem

pytestmark = pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap is not installed (make install)")

PROBLEM = Problem("p", "What is 6 times 7?", "42")


def _fenced(code: str, prose: str = "") -> str:
    return f"{prose}```python\n{code}\n```"


def _make(replies, **config):
    gen = FunctionGenerator(lambda req: replies)
    return ProgramVote(ProgramVoteConfig(n=len(replies), **config), gen, chat_prompt(MATH_PROMPT)), gen


def test_the_interpreter_decides_not_the_prose():
    """The reply's prose claims 99; its program prints 42: the answer is what the program printed."""
    pv, _ = _make([_fenced("print('six times seven is')\nprint(6 * 7)", "The answer is \\boxed{99}.\n")])
    [sol] = pv.solve([PROBLEM])
    assert sol.answer == "42"
    assert sol.trace.samples[0].answer == "42"
    assert sol.trace.notes["executions"] == 1 and sol.trace.notes["failed"] == 0


def test_printed_forms_of_one_value_vote_together_and_failures_vote_for_nothing():
    replies = [
        _fenced("print(1/2)"),                      # 0.5
        _fenced("print('The answer is 1/2')"),      # 1/2
        _fenced("print(3)"),
        _fenced("print(3)"),
        _fenced("raise ValueError('no')"),          # an error: no answer
        _fenced("while True:\n    pass"),           # a time-out: no answer
        "I cannot write a program for this.",       # no code
    ]
    pv, _ = _make(replies, timeout=1)
    [sol] = pv.solve([Problem("q", "Half of one?", "1/2")])
    answers = [s.answer for s in sol.trace.samples]
    assert answers[4:] == [None, None, None]
    assert sol.trace.notes["failed"] == 3
    # 0.5 and 1/2 are one answer with two votes; 3 has two votes and came later: the tie goes to the earlier.
    assert sol.answer in ("0.5", "1/2")
    assert sol.confidence == pytest.approx(2 / 7)


def test_every_program_of_every_problem_runs_in_one_batch_after_one_engine_call(monkeypatch):
    problems = ChainsBenchmark().load(limit=6)
    gen = ScriptedGenerator.for_problems(problems, seed=3)
    batches = []
    real = sandbox.run_many

    def counting(programs, *args, **kwargs):
        batches.append(len(programs))
        return real(programs, *args, **kwargs)

    monkeypatch.setattr("tts.search.sampling.program_vote.run_many", counting)

    rec = RecordingGenerator(gen)
    render = chat_prompt(MATH_PROMPT)  # one prompt function, as a run gives its strategies (they share the draw)
    small, large = (ProgramVote(ProgramVoteConfig(n=n), rec, render) for n in (2, 4))
    per_config = ProgramVote.solve_together([small, large], problems)
    assert len(rec.calls) == 1 and [r.n for r in rec.calls[0]] == [4] * 6
    assert len(batches) == 1 and 0 < batches[0] <= 24
    # The program prompt replaced the benchmark's; every sample's answer is its program's output.
    assert all("Write a Python program" in r.messages[-1].content for r in rec.calls[0])
    for sols in per_config:
        for p, s in zip(problems, sols, strict=True):
            assert s.problem_id == p.id
    right = sum(s.answer == p.answer for s, p in zip(per_config[1], problems, strict=True))
    assert right >= 5  # transcription slips are rare in the scripted model; the interpreter does the arithmetic
    # The smaller config votes on the first 2 samples of the same draw.
    assert [x.text for x in per_config[0][0].trace.samples] == [x.text for x in per_config[1][0].trace.samples[:2]]


def test_without_bubblewrap_it_refuses_with_the_fix(monkeypatch):
    monkeypatch.setattr(sandbox, "bwrap_path", lambda: None)
    pv, _ = _make([_fenced("print(42)")])
    with pytest.raises(SandboxUnavailableError, match="bubblewrap"):
        pv.solve([PROBLEM])


def test_a_program_that_prints_a_dict_votes_for_nothing():
    """Issue 48: a program ending with its environment's repr was read as -8 (from 'C.UTF-8')."""
    pv, _ = _make([_fenced("import os\nprint(dict(os.environ, LANG='C.UTF-8'))"), _fenced("print(6 * 7)")])
    [sol] = pv.solve([PROBLEM])
    assert [s.answer for s in sol.trace.samples] == [None, "42"]
    assert sol.answer == "42" and sol.trace.notes["failed"] == 1
