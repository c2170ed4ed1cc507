"""exec_vote and public_tests: programs voted on by what they do on the docstring's examples."""

from __future__ import annotations

import pytest

from tts.answers.code import CODE
from tts.backends.function import FunctionGenerator
from tts.execution.sandbox import bwrap_path
from tts.prompts import CODE_PROMPT, chat_prompt
from tts.search.base import StrategyInputError
from tts.search.sampling.execution_vote import (
    ExecutionVote,
    ExecutionVoteConfig,
    PublicTestsConfig,
    PublicTestsVote,
)
from tts.search.sampling.self_consistency import SelfConsistency, SelfConsistencyConfig
from tts.types import Problem

pytestmark = pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap is not installed (make install)")

PROMPT = 'def double(x):\n    """Twice x.\n    >>> double(2)\n    4\n    >>> double(-1)\n    -2\n    """\n'
PROBLEM = Problem("p", PROMPT, PROMPT + "    return 2 * x\n", {"prompt": PROMPT, "entry_point": "double", "test": ""})
# Three right programs written three ways; two copies of one wrong program (a syntax-tree majority).
RIGHT = ["def double(x):\n    return 2 * x", "def double(x):\n    return x + x", "def double(x):\n    return x * 2"]
WRONG = "def double(x):\n    return x ** 2"


def _reply(programs):
    return FunctionGenerator(lambda req: [f"```python\n{c}\n```" for c in programs])


def _make(cls, config, programs):
    return cls(config, _reply(programs), chat_prompt(CODE_PROMPT), extract=CODE)


def test_programs_that_behave_alike_outvote_a_repeated_wrong_program():
    programs = [WRONG, RIGHT[0], WRONG, RIGHT[1], RIGHT[2]]
    [sc] = _make(SelfConsistency, SelfConsistencyConfig(n=5), programs).solve([PROBLEM])
    [ex] = _make(ExecutionVote, ExecutionVoteConfig(n=5), programs).solve([PROBLEM])
    assert sc.answer == WRONG  # by syntax, the repeated wrong program is the plurality
    assert ex.answer == RIGHT[0] and ex.confidence == pytest.approx(3 / 5)
    assert ex.trace.notes["by"] == "behaviour" and ex.trace.notes["executions"] == 4
    assert ex.trace.notes["execution_seconds"] > 0


def test_public_tests_keep_only_programs_that_return_the_stated_values():
    # The wrong program is the behavioural majority too; the docstring's values rule it out.
    programs = [WRONG, WRONG, WRONG, "def double(x):\n    return x << 1", RIGHT[0]]
    [ex] = _make(ExecutionVote, ExecutionVoteConfig(n=5), programs).solve([PROBLEM])
    [pt] = _make(PublicTestsVote, PublicTestsConfig(n=5), programs).solve([PROBLEM])
    assert ex.answer == WRONG
    assert pt.answer == "def double(x):\n    return x << 1" and pt.trace.notes["passed_public"] == 2


def test_when_no_program_passes_the_vote_is_over_all_and_says_so():
    [pt] = _make(PublicTestsVote, PublicTestsConfig(n=3), [WRONG, "def double(x):\n    return 0", WRONG]).solve([PROBLEM])
    assert pt.answer == WRONG and pt.trace.notes["fallback"] == "none passed"


def test_a_draw_is_shared_by_a_ladder_of_execution_votes_but_not_with_other_strategies():
    gen = _reply([WRONG, RIGHT[0], RIGHT[1]])
    render = chat_prompt(CODE_PROMPT)
    small, big = (ExecutionVote(ExecutionVoteConfig(n=n), gen, render, extract=CODE) for n in (1, 3))
    sc = SelfConsistency(SelfConsistencyConfig(n=3), gen, render, extract=CODE)
    assert small.shares_draw_with(big) and not sc.shares_draw_with(big) and not big.shares_draw_with(sc)
    one, three = ExecutionVote.solve_together([small, big], [PROBLEM])
    assert len(gen.calls) == 1 and gen.calls[0][0].n == 3
    assert one[0].answer == WRONG and three[0].answer == RIGHT[0]


def test_problems_without_a_function_to_run_are_refused_saying_what_to_use():
    with pytest.raises(StrategyInputError, match="self_consistency for other problems"):
        _make(ExecutionVote, ExecutionVoteConfig(n=1), RIGHT).solve([Problem("q", "What is 2+2?", "4")])


# A docstring without any example call: only inputs the model writes can tell programs apart.
BARE = 'def clamp(x):\n    """x limited to the range 0..10."""\n'
BARE_PROBLEM = Problem("c", BARE, BARE + "    return max(0, min(10, x))\n", {"prompt": BARE, "entry_point": "clamp", "test": ""})
CLAMP_RIGHT = ["def clamp(x):\n    return max(0, min(10, x))", "def clamp(x):\n    return min(10, max(0, x))",
               "def clamp(x):\n    return 0 if x < 0 else 10 if x > 10 else x"]
CLAMP_WRONG = "def clamp(x):\n    return min(10, x)"  # wrong below 0
# The model's tests: calls worth making, one with a wrong claimed value (the claim is not used).
TESTS = "assert clamp(-5) == -5\nassert clamp(3) == 3\nassert clamp(42) == 10\nprint('done')"


def _clamp_model(programs):
    return FunctionGenerator(lambda req: TESTS if req.key.endswith("#tests")
                             else [f"```python\n{c}\n```" for c in programs])


def test_model_written_inputs_group_programs_the_docstring_cannot_tell_apart():
    programs = [CLAMP_WRONG, CLAMP_RIGHT[0], CLAMP_WRONG, CLAMP_RIGHT[1], CLAMP_RIGHT[2]]
    render = chat_prompt(CODE_PROMPT)
    [plain] = ExecutionVote(ExecutionVoteConfig(n=5), _clamp_model(programs), render, extract=CODE).solve([BARE_PROBLEM])
    gen = _clamp_model(programs)
    [model] = ExecutionVote(ExecutionVoteConfig(n=5, inputs="model", inputs_n=2), gen, render,
                            extract=CODE).solve([BARE_PROBLEM])
    assert plain.trace.notes["by"] == "syntax" and plain.answer == CLAMP_WRONG
    assert model.trace.notes["by"] == "behaviour" and model.answer == CLAMP_RIGHT[0]
    assert model.confidence == pytest.approx(3 / 5)
    # One engine call holds the programs and the input tests; the tests' tokens are paid for.
    assert len(gen.calls) == 1 and [r.key for r in gen.calls[0]] == ["c", "c#tests"]
    assert gen.calls[0][1].n == 2 and "clamp" in gen.calls[0][1].messages[-1].content
    assert model.usage.completion_tokens == plain.usage.completion_tokens + 2 * len(TESTS.split())


def test_the_values_model_tests_claim_do_not_filter_public_tests():
    """clamp(-5) == -5 is the model's wrong guess: public_tests filters on the docstring only."""
    programs = [CLAMP_RIGHT[0], CLAMP_WRONG]
    [pt] = PublicTestsVote(PublicTestsConfig(n=2, inputs="model"), _clamp_model(programs), chat_prompt(CODE_PROMPT),
                           extract=CODE).solve([BARE_PROBLEM])
    assert pt.trace.notes["passed_public"] == 2 and pt.answer == CLAMP_RIGHT[0]
