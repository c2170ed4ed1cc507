"""CodeT's bookkeeping with the sandbox replaced by a recorder that runs the (test-written) programs
in-process: which programs run against which tests, the one shared call, the notes, the share and
the refusals. (tests/search/test_codet.py runs real programs in bubblewrap.)"""

from __future__ import annotations

import json

import pytest

from tts.answers.code import CODE
from tts.backends.base import Completion, GenerationResult, derive_seed, request_usage
from tts.backends.function import FunctionGenerator
from tts.config import SamplingConfig
from tts.execution.behaviour import PROBE_LIMITS
from tts.execution.sandbox import Execution
from tts.prompts import CODE_PROMPT, chat_prompt
from tts.search.base import StrategyInputError
from tts.search.sampling.codet import CodeT, CodeTConfig, consensus
from tts.search.sampling.execution_vote import TEST_PROMPT
from tts.types import Budget, Problem

PROMPT = 'def double(x):\n    """Twice x."""\n'
PROBLEM = Problem("p", PROMPT, None, {"prompt": PROMPT, "entry_point": "double", "test": ""})
RENDER = chat_prompt(CODE_PROMPT)


def program(body: str) -> str:
    return f"def double(x):\n    {body}"


def fenced(body: str) -> str:
    return f"```python\n{program(body)}\n```"


class Sandbox:
    """run_many's stand-in: each job (tests_program replaced by a JSON of code and tests) runs its
    code and each test in-process, 0.12345 s a program; batches are recorded."""

    def __init__(self) -> None:
        self.batches: list[tuple[list[tuple[str, list[str]]], int, bool]] = []

    def __call__(self, programs, limits=None, *, workers=4, unsafe_no_sandbox=False):
        jobs = [tuple(json.loads(p.source)) for p in programs]
        self.batches.append((jobs, workers, unsafe_no_sandbox))
        self.limits = limits
        out = []
        for code, tests in jobs:
            passed = []
            for test in tests:
                scope: dict = {}
                try:
                    exec(code, scope)  # noqa: S102 - the test's own programs
                    exec(test, scope)  # noqa: S102
                    passed.append(True)
                except Exception:  # noqa: BLE001 - a failing test, whatever it raised
                    passed.append(False)
            out.append(Execution("ok", 0, json.dumps(passed), "", wall_seconds=0.12345))
        return out


@pytest.fixture
def sandbox(monkeypatch):
    fake = Sandbox()
    monkeypatch.setattr("tts.search.sampling.codet.run_many", fake)
    monkeypatch.setattr("tts.search.sampling.codet.tests_program", lambda prompt, code, entry, tests: json.dumps([code, tests]))
    monkeypatch.setattr("tts.search.sampling.codet.read_tests",
                        lambda stdout, count: tuple(json.loads(stdout)) if stdout else None)
    return fake


def model(programs, tests) -> FunctionGenerator:
    """Programs in order for a program request, ``tests`` for the test request (key ``p#tests``)."""

    def draw(req):
        texts = tests[: req.n] if req.key.endswith("#tests") else programs[: req.n]
        tokens = 7 if req.key.endswith("#tests") else 5
        comps = tuple(Completion(t, tokens, -0.1, "stop") for t in texts)
        return GenerationResult(comps, request_usage(20, 0, [tokens] * len(comps), 0.0, batch_sequences=len(comps)))

    return FunctionGenerator(draw)


def codet(gen, **config) -> CodeT:
    return CodeT(CodeTConfig(**config), gen, RENDER, SamplingConfig(temperature=0.5, top_p=0.9, max_tokens=50),
                 extract=CODE, seed=2)


TESTS = ["assert double(2) == 4\nassert double(0) == 0\nassert double(2) == 4", "assert double(3) == 6"]
RIGHT, WRONG = fenced("return 2 * x"), fenced("return x * x")


def test_one_call_draws_programs_and_tests_and_each_program_runs_once_against_the_distinct_tests(sandbox):
    """Tests: double(2) == 4, double(0) == 0 (the repeat dropped), double(3) == 6. x * x passes the
    first two, 2 * x all three: 2 * x's set scores 1 program x 3 tests = 3, x * x's 2 x 2 = 4."""
    gen = model([RIGHT, WRONG, WRONG, "no code"], TESTS)
    [sol] = codet(gen, n=4, tests_n=2, tests_per_sample=3, workers=3, unsafe_no_sandbox=True).solve([PROBLEM])
    [(code_req, test_req)] = gen.calls
    assert (code_req.n, test_req.n, test_req.seed, test_req.key) == (4, 2, derive_seed(2, "p#tests", 0), "p#tests")
    assert test_req.messages[0].content == TEST_PROMPT.format(count=3, entry_point="double", prompt=PROMPT.rstrip())
    tests = ["assert double(2) == 4", "assert double(0) == 0", "assert double(3) == 6"]
    [(jobs, workers, unsafe)] = sandbox.batches
    assert jobs == [(program("return 2 * x"), tests), (program("return x * x"), tests)] and (workers, unsafe) == (3, True)
    assert sandbox.limits is PROBE_LIMITS  # the probes' limits, not run_many's defaults
    assert (sol.problem_id, sol.answer, sol.trace.selected, sol.confidence) == ("p", program("return x * x"), 1, 0.5)
    assert sol.trace.votes == {"111": 3.0, "110": 4.0}
    assert sol.trace.notes == {"tests": 3, "executions": 2, "execution_seconds": 0.247, "by": "dual agreement", "score": 4.0}
    assert sol.usage.completion_tokens == 4 * 5 + 2 * 7 and sol.trace.strategy == "codet"
    assert [s.answer for s in sol.trace.samples] == [program("return 2 * x"), program("return x * x"),
                                                     program("return x * x"), None]


def test_tests_but_no_program_is_no_answer(sandbox):
    [sol] = codet(model(["no code", "none either"], TESTS), n=2, tests_n=2).solve([PROBLEM])
    assert (sol.answer, sol.confidence, sol.trace.selected, sol.trace.notes["score"]) == (None, 0.0, None, 0.0)


def test_tests_per_sample_caps_each_test_sample(sandbox):
    gen = model([RIGHT], TESTS)
    [sol] = codet(gen, n=1, tests_n=2, tests_per_sample=1).solve([PROBLEM])
    assert sandbox.batches[0][0][0][1] == ["assert double(2) == 4", "assert double(3) == 6"] and sol.trace.notes["tests"] == 2


def test_a_smaller_config_chooses_among_its_first_programs_with_all_the_tests(sandbox):
    gen = model([RIGHT, WRONG, WRONG], TESTS)
    one, three = CodeT.solve_together([codet(gen, n=1, tests_n=2), codet(gen, n=3, tests_n=2)], [PROBLEM])
    assert len(gen.calls) == 1 and [r.n for r in gen.calls[0]] == [3, 2]
    assert (one[0].answer, one[0].confidence, one[0].trace.notes["executions"]) == (program("return 2 * x"), 1.0, 1)
    assert one[0].usage.completion_tokens == 5 + 2 * 7
    assert one[0].usage.shapes[0].batch_sequences == 1  # 1 of the 3 programs' sequences, priced as drawn alone


def test_configs_with_other_tests_or_seeds_draw_apart(sandbox):
    gen = model([RIGHT] * 4, TESTS)
    CodeT.solve_together([codet(gen, n=2, tests_n=2), codet(gen, n=2, tests_n=1)], [PROBLEM])
    CodeT.solve_together([codet(gen, n=2, tests_per_sample=5), codet(gen, n=2, tests_per_sample=4)], [PROBLEM])
    assert len(gen.calls) == 4


def test_no_test_falls_back_to_the_syntax_vote_and_says_so(sandbox):
    gen = model([RIGHT, WRONG, WRONG], ["I will not write tests."])
    [sol] = codet(gen, n=3, tests_n=1).solve([PROBLEM])
    assert (sol.answer, sol.trace.notes, sandbox.batches[0][0]) == (
        program("return x * x"), {"tests": 0, "executions": 0, "execution_seconds": 0.0, "by": "syntax"}, [])


def test_budgets_are_refused_and_a_problem_without_a_function_names_codet(sandbox):
    with pytest.raises(StrategyInputError, match="^codet does not take per-problem budgets yet"):
        codet(model([RIGHT], TESTS), n=1).solve([PROBLEM], [Budget(samples=1)])
    [sol] = codet(model([RIGHT], TESTS), n=1, tests_n=1).solve([PROBLEM], [None])
    assert sol.answer == program("return 2 * x")
    with pytest.raises(StrategyInputError, match="^codet runs programs"):
        codet(model([RIGHT], TESTS), n=1).solve([Problem("x", "2 + 2?", "4")])


def test_consensus_scores_programs_times_tests_passed_and_ties_go_to_the_earliest():
    assert consensus([None, None]) == (None, 0.0, {})
    assert consensus([(True, False), (False, True), None, (True, False)]) == (0, 2.0, {"10": 2.0, "01": 1.0})
    assert consensus([(False, True), (True, False)]) == (0, 1.0, {"01": 1.0, "10": 1.0})
