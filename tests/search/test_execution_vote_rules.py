"""exec_vote's and public_tests' bookkeeping, with the sandboxed probes replaced by a recorder: what
is probed and how, the requests (programs, and the model's tests with ``inputs=model``), a shared
draw, a stop's waves, and the notes. (tests/search/test_execution_vote.py runs real programs.)"""

from __future__ import annotations

import pytest

from tts.answers.code import CODE
from tts.backends.base import Completion, GenerationResult, derive_seed, request_usage
from tts.backends.function import FunctionGenerator
from tts.config import SamplingConfig, StopConfig
from tts.execution.behaviour import Behaviour
from tts.prompts import CODE_PROMPT, chat_prompt
from tts.search.base import StrategyInputError
from tts.search.sampling.execution_vote import (
    TEST_PROMPT,
    ExecutionVote,
    ExecutionVoteConfig,
    PublicTestsConfig,
    PublicTestsVote,
)
from tts.types import Budget, Problem, Sample, Usage

PROMPT = 'def double(x):\n    """Twice x.\n    >>> double(2)\n    4\n    """\n'
PROBLEM = Problem("p", PROMPT, None, {"prompt": PROMPT, "entry_point": "double", "test": ""})
RENDER = chat_prompt(CODE_PROMPT)
# What each program returns for double(2) in the fake probe.
RETURNS = {"return 2 * x": "4", "return x + x": "4", "return x * 2": "4", "return x ** 2": "4", "return x + 1": "3"}


def program(body: str) -> str:
    return f"def double(x):\n    {body}"


def fenced(body: str) -> str:
    return f"```python\n{program(body)}\n```"


class Probes:
    """probe_many's stand-in: a program returns RETURNS[its body] for double(2) in 0.12345 s (passing
    when that is 4); every batch is recorded with its workers and sandbox setting."""

    def __init__(self) -> None:
        self.batches: list[tuple[list[str], int, bool, list[int]]] = []

    def __call__(self, probes, limits=None, workers=4, unsafe_no_sandbox=False):
        self.batches.append(([p.code for p in probes], workers, unsafe_no_sandbox, [len(p.examples) for p in probes]))
        out = []
        for p in probes:
            value = RETURNS[p.code.split("\n")[1].strip()]
            outputs = tuple(value for _ in p.examples)
            out.append(Behaviour(outputs, tuple(v == "4" for v in outputs), seconds=0.12345))
        return out


@pytest.fixture
def probes(monkeypatch):
    fake = Probes()
    monkeypatch.setattr("tts.search.sampling.execution_vote.probe_many", fake)
    return fake


def in_order(texts, tests=()) -> FunctionGenerator:
    """The k-th reply of a problem (over its requests, in draw order) is ``texts[k]``; a request for
    tests (key ``<id>#tests``) gets ``tests``."""
    drawn: dict[str, int] = {}

    def draw(req):
        if req.key.endswith("#tests"):
            comps = tuple(Completion(t, 7, -0.1, "stop") for t in tests[: req.n])
            return GenerationResult(comps, request_usage(40, 0, [7] * len(comps), 0.0))
        start = drawn.get(req.key, 0)
        drawn[req.key] = start + req.n
        comps = tuple(Completion(t, 5, -0.2, "stop") for t in texts[start:start + req.n])
        return GenerationResult(comps, request_usage(30, 0, [5] * len(comps), 0.0, batch_sequences=len(comps)))

    return FunctionGenerator(draw)


def vote(cls=ExecutionVote, config=None, texts=(), **kwargs):
    config = config or ExecutionVoteConfig(n=len(texts))
    return cls(config, kwargs.pop("generator", None) or in_order(list(texts)), RENDER, extract=CODE, **kwargs)


def test_each_distinct_program_is_probed_once_with_the_configs_workers(probes):
    texts = [fenced("return x ** 2"), fenced("return 2 * x"), fenced("return x ** 2"), "no code", fenced("return x + 1")]
    config = ExecutionVoteConfig(n=5, workers=3, unsafe_no_sandbox=True)
    [sol] = vote(config=config, texts=texts).solve([PROBLEM])
    [(codes, workers, unsafe, examples)] = probes.batches
    assert codes == [program("return x ** 2"), program("return 2 * x"), program("return x + 1")]
    assert (workers, unsafe, examples) == (3, True, [1, 1, 1])
    # x ** 2 and 2 * x both return 4 on double(2): one behaviour of 3 votes, the first program wins.
    assert (sol.problem_id, sol.answer, sol.confidence, sol.trace.selected) == ("p", program("return x ** 2"), 0.6, 0)
    assert sol.trace.notes == {"executions": 3, "execution_seconds": 0.37, "by": "behaviour"}  # 0.37035 s, to the ms
    assert sol.trace.strategy == "exec_vote"
    assert [(s.completion_tokens, s.mean_logprob, s.finish_reason) for s in sol.trace.samples] == [(5, -0.2, "stop")] * 5


def test_without_examples_the_programs_are_voted_by_syntax(probes):
    bare = Problem("q", "def double(x):\n", None, {"prompt": "def double(x):\n", "entry_point": "double", "test": ""})
    texts = [fenced("return x + 1"), fenced("return 2 * x"), fenced("return 2*x")]
    [sol] = vote(texts=texts).solve([bare])
    assert probes.batches == [([], 4, False, [])]
    assert (sol.answer, sol.confidence) == (program("return 2 * x"), pytest.approx(2 / 3))
    assert sol.trace.notes == {"executions": 0, "execution_seconds": 0.0, "by": "syntax"} and sol.problem_id == "q"


def test_public_tests_keep_the_programs_that_return_the_stated_value(probes):
    texts = [fenced("return x + 1"), fenced("return x + 1"), fenced("return 2 * x")]
    [sol] = vote(PublicTestsVote, PublicTestsConfig(n=3), texts=texts).solve([PROBLEM])
    assert (sol.answer, sol.confidence, sol.trace.notes["passed_public"]) == (program("return 2 * x"), pytest.approx(1 / 3), 1)
    assert "fallback" not in sol.trace.notes
    [none] = vote(PublicTestsVote, PublicTestsConfig(n=3), texts=texts[:2] + ["no code"]).solve([PROBLEM])
    assert (none.answer, none.confidence, none.trace.notes["passed_public"], none.trace.notes["fallback"]) == (
        program("return x + 1"), pytest.approx(2 / 3), 0, "none passed")


def test_a_long_programs_vote_is_shown_by_its_first_200_characters(probes):
    long_body = "return 2 * x  # " + "z" * 300
    RETURNS[long_body] = "4"
    [sol] = vote(texts=[fenced(long_body)]).solve([PROBLEM])
    assert list(sol.trace.votes) == [program(long_body)[:200]] and sol.answer == program(long_body)


def test_the_model_is_asked_for_tests_and_their_tokens_are_paid(probes):
    tests = ["assert double(5) == 10\nassert double(0) == 0"]
    gen = in_order([fenced("return 2 * x")] * 2, tests)
    sampling = SamplingConfig(temperature=0.4, top_p=0.8, max_tokens=99)
    config = ExecutionVoteConfig(n=2, inputs="model", inputs_n=1, inputs_per_sample=3)
    [sol] = vote(config=config, generator=gen, sampling=sampling, seed=2).solve([PROBLEM])
    (_, asked), = gen.calls
    text = TEST_PROMPT.format(count=3, entry_point="double", prompt=PROMPT.rstrip())
    assert [(m.role, m.content) for m in asked.messages] == [("user", text)]
    assert (asked.n, asked.temperature, asked.top_p, asked.max_tokens) == (1, 0.4, 0.8, 99)
    assert (asked.seed, asked.key) == (derive_seed(2, "p#tests", 0), "p#tests")
    assert probes.batches[0][3] == [3]  # double(2) from the docstring, double(5) and double(0) from the tests
    assert sol.usage.completion_tokens == 2 * 5 + 7 and sol.usage.prompt_tokens == 30 + 40


def test_a_budget_caps_the_programs_drawn(probes):
    gen = in_order([fenced("return 2 * x")] * 8)
    [sol] = vote(config=ExecutionVoteConfig(n=8), generator=gen).solve([PROBLEM], [Budget(samples=2)])
    assert [r.n for r in gen.requests] == [2] and len(sol.trace.samples) == 2


def test_voters_that_cannot_share_draw_alone_and_a_single_voter_draws_once(probes):
    gen = in_order([fenced("return 2 * x")] * 12)
    apart = ExecutionVote.solve_together([vote(config=ExecutionVoteConfig(n=4), generator=gen, seed=0),
                                          vote(config=ExecutionVoteConfig(n=8), generator=gen, seed=1)], [PROBLEM])
    assert [r.n for r in gen.requests] == [4, 8] and [len(s[0].trace.samples) for s in apart] == [4, 8]
    mixed = vote(texts=["x"])
    assert not mixed.shares_draw_with(PublicTestsVote(PublicTestsConfig(n=4), mixed.generator, RENDER, seed=1))
    assert mixed.shares_draw_with(PublicTestsVote(PublicTestsConfig(n=4), mixed.generator, RENDER, extract=CODE))
    single = in_order([fenced("return 2 * x")] * 4)
    [[sol]] = ExecutionVote.solve_together([vote(config=ExecutionVoteConfig(n=4), generator=single)], [PROBLEM])
    assert [r.n for r in single.requests] == [4] and sol.confidence == 1.0


def test_configs_that_differ_in_inputs_are_evaluated_together_each_on_its_own_draw(probes):
    """``tts eval -s exec_vote -s exec_vote:inputs=model``: on main the two were grouped as one
    draw, fell through to the plain sampling path and stopped with "call solve(), not aggregate()"."""
    from tts.eval.runner import share_groups, solve_all

    gen = in_order([fenced("return 2 * x")] * 12, ["assert double(1) == 2"])
    docstring = vote(config=ExecutionVoteConfig(n=4), generator=gen)
    model = vote(config=ExecutionVoteConfig(n=8, inputs="model", inputs_n=2), generator=gen)
    assert share_groups([docstring, model]) == [[0], [1]]
    [four], [eight] = solve_all([docstring, model], [PROBLEM])
    assert [[r.n for r in call] for call in gen.calls] == [[4], [8, 2]]
    assert (four.answer, len(four.trace.samples), len(eight.trace.samples)) == (program("return 2 * x"), 4, 8)
    assert probes.batches[1][3] == [2]  # double(2), and double(1) from the model's test


def test_a_stop_probes_each_new_program_once_and_seeds_each_wave(probes):
    """2 * x, no code, x + x, x * 2 one a wave: three programs returning 4 settle the horizon
    rule (n = 8) at 4 drawn; each program was probed once, in the wave that drew it."""
    texts = [fenced("return 2 * x"), "no code", fenced("return x + x"), fenced("return x * 2")] + ["x"] * 4
    gen = in_order(texts)
    config = ExecutionVoteConfig(n=8, workers=2, unsafe_no_sandbox=True, stop=StopConfig(wave=1))
    [sol] = vote(config=config, generator=gen, seed=6).solve([PROBLEM])
    assert (sol.problem_id, sol.answer, sol.trace.notes["stop"]["drawn"]) == ("p", program("return 2 * x"), 4)
    assert [(b[0], b[1], b[2]) for b in probes.batches] == [
        ([program("return 2 * x")], 2, True), ([program("return x + x")], 2, True), ([program("return x * 2")], 2, True)]
    assert [(r.n, r.seed) for r in gen.requests] == [(1, derive_seed(6, "p", d)) for d in range(4)]


def test_a_stop_of_public_tests_counts_only_the_programs_that_pass():
    """x + 1 twice (fails the example), then 2 * x, x + x, x * 2: the failing pair does not settle
    the vote; the three passing programs do, at 5 drawn."""
    texts = [fenced("return x + 1"), fenced("return x + 1"), fenced("return 2 * x"), fenced("return x + x"),
             fenced("return x * 2")] + ["x"] * 3
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("tts.search.sampling.execution_vote.probe_many", Probes())
        strategy = vote(PublicTestsVote, PublicTestsConfig(n=8, stop=StopConfig(wave=1)), generator=in_order(texts))
        [sol] = strategy.solve([PROBLEM])
    assert (sol.answer, sol.trace.notes["stop"]["drawn"]) == (program("return 2 * x"), 5)


def test_a_stop_without_examples_counts_the_syntax_vote(probes):
    bare = Problem("q", "def double(x):\n", None, {"prompt": "def double(x):\n", "entry_point": "double", "test": ""})
    texts = [fenced("return 2 * x"), fenced("return 2*x"), fenced("return 2 * x")] + ["x"] * 5
    [sol] = vote(config=ExecutionVoteConfig(n=8, stop=StopConfig(wave=1)), generator=in_order(texts)).solve([bare])
    assert (sol.answer, sol.trace.notes["stop"]["drawn"], probes.batches) == (program("return 2 * x"), 3, [])


def test_a_replayed_pool_is_refused_saying_to_call_solve():
    with pytest.raises(StrategyInputError, match="call solve"):
        vote(texts=["x"]).aggregate("p", [Sample("x", "x")], Usage())


def test_a_shared_draw_with_the_models_tests_pays_their_tokens_in_every_config(probes):
    gen = in_order([fenced("return 2 * x")] * 4, ["assert double(1) == 2"] * 2)
    small, large = (vote(config=ExecutionVoteConfig(n=n, inputs="model", inputs_n=2), generator=gen) for n in (2, 4))
    [two], [four] = ExecutionVote.solve_together([small, large], [PROBLEM])
    assert [[r.n for r in call] for call in gen.calls] == [[4, 2]]
    assert (two.usage.completion_tokens, four.usage.completion_tokens) == (2 * 5 + 2 * 7, 4 * 5 + 2 * 7)
    # n = 2 of a 4-sequence engine call is priced as the 2 sequences it would have run alone
    assert (two.usage.shapes[0].batch_sequences, four.usage.shapes[0].batch_sequences) == (2, 4)


def test_configs_whose_model_tests_differ_in_number_draw_apart():
    gen = in_order([])
    base = vote(config=ExecutionVoteConfig(n=4, inputs="model", inputs_n=2, inputs_per_sample=5), generator=gen)
    fewer_samples = vote(config=ExecutionVoteConfig(n=4, inputs="model", inputs_n=1, inputs_per_sample=5), generator=gen)
    fewer_tests = vote(config=ExecutionVoteConfig(n=4, inputs="model", inputs_n=2, inputs_per_sample=3), generator=gen)
    same = vote(config=ExecutionVoteConfig(n=8, inputs="model", inputs_n=2, inputs_per_sample=5), generator=gen)
    assert [base.shares_draw_with(s) for s in (fewer_samples, fewer_tests, same)] == [False, False, True]


def test_model_inputs_for_a_problem_without_a_function_are_refused_naming_the_strategy():
    with pytest.raises(StrategyInputError, match=r"^exec_vote runs programs on a coding problem's examples; problem 'x'"):
        vote(config=ExecutionVoteConfig(n=2, inputs="model"), texts=["a", "b"]).solve([Problem("x", "2 + 2?", "4")])


def test_a_stop_with_model_inputs_is_refused_saying_what_to_use():
    config = ExecutionVoteConfig(n=4, inputs="model", stop=StopConfig())
    with pytest.raises(StrategyInputError) as err:
        vote(config=config, texts=["x"] * 4).solve([PROBLEM])
    assert str(err.value) == ("exec_vote with inputs=model draws the model's tests before voting; a stop judges programs "
                              "as they come, on the docstring's examples: use inputs=docstring with a stop, or leave the "
                              "stop out")


def test_a_stop_of_public_tests_where_none_pass_counts_all_behaviours(probes):
    """x + 1 every time (3 where 4 is stated): none passes, so the behaviours count as they are and
    the horizon rule settles at 3, as exec_vote would."""
    strategy = vote(PublicTestsVote, PublicTestsConfig(n=8, stop=StopConfig(wave=1)), generator=in_order([fenced("return x + 1")] * 8))
    [sol] = strategy.solve([PROBLEM])
    assert (sol.answer, sol.trace.notes["stop"]["drawn"], sol.trace.notes["fallback"]) == (program("return x + 1"), 3, "none passed")


def test_probing_a_draw_without_model_inputs_runs_the_docstrings_examples(probes):
    strategy = vote(texts=[fenced("return 2 * x"), "no code"])
    draw = GenerationResult((Completion(fenced("return 2 * x"), 5), Completion("no code", 2)), request_usage(30, 0, [5, 2], 0.0))
    [[behaviour, none]] = strategy.probe([PROBLEM], [draw])
    assert (behaviour.key, none, probes.batches[0][3]) == ('["4"]', None, [1])


def test_a_problem_without_a_function_is_refused_naming_the_strategy():
    with pytest.raises(StrategyInputError) as err:
        vote(PublicTestsVote, PublicTestsConfig(n=2), texts=["a", "b"]).solve([Problem("x", "2 + 2?", "4")])
    assert str(err.value) == ("public_tests runs programs on a coding problem's examples; problem 'x' has no 'prompt' and "
                              "'entry_point' metadata (use --benchmark humaneval, or self_consistency for other problems).")
    half = Problem("y", "double", None, {"prompt": PROMPT})  # a prompt but no entry_point
    with pytest.raises(StrategyInputError, match=r"^exec_vote runs programs .* problem 'y'"):
        vote(config=ExecutionVoteConfig(n=2, stop=StopConfig()), texts=["a", "b"]).solve([half])


def test_each_model_test_sample_gives_at_most_inputs_per_sample_inputs(probes):
    gen = in_order([fenced("return 2 * x")], ["assert double(5) == 10\nassert double(0) == 0"])
    config = ExecutionVoteConfig(n=1, inputs="model", inputs_n=1, inputs_per_sample=1)
    vote(config=config, generator=gen).solve([PROBLEM])
    assert probes.batches[0][3] == [2]  # double(2) from the docstring, double(5) from the test's first assert
