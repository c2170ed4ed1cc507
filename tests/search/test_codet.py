"""CodeT: programs and model-written tests, chosen by dual execution agreement, in one engine call."""

from __future__ import annotations

import pytest

from tts.answers.code import CODE
from tts.backends.function import FunctionGenerator
from tts.execution.programs import assert_tests
from tts.execution.sandbox import bwrap_path
from tts.prompts import CODE_PROMPT, chat_prompt
from tts.search.sampling.codet import CodeT, CodeTConfig
from tts.types import Problem

PROMPT = 'def double(x):\n    """Twice x."""\n'
PROBLEM = Problem("p", PROMPT, "", {"prompt": PROMPT, "entry_point": "double", "test": ""})
RIGHT, SQUARE, LOOP = ("def double(x):\n    return 2 * x", "def double(x):\n    return x * x",
                       "def double(x):\n    while True:\n        pass")


def test_assert_tests_keeps_the_first_one_line_asserts_that_call_the_function():
    text = "```python\nassert double(2) == 4\nassert other(1) == 1\nassert double(3 ==\nassert double(0) == 0\n" \
           "assert double(5) == 10\n```"
    assert assert_tests(text, "double") == ["assert double(2) == 4", "assert double(0) == 0", "assert double(5) == 10"]
    assert assert_tests(text, "double", per_sample=2) == ["assert double(2) == 4", "assert double(0) == 0"]


@pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap is not installed (make install)")
def test_programs_and_tests_come_from_one_call_and_agreement_beats_a_popular_wrong_program():
    def reply(req):
        if req.key.endswith("#tests"):  # 2 == 2*2 passes the square too; the others single out the right one
            return ["```python\nassert double(2) == 4\nassert double(3) == 6\n```", "assert double(0) == 0\nassert double(-1) == -2"]
        return [f"```python\n{c}\n```" for c in (SQUARE, SQUARE, SQUARE, RIGHT, RIGHT, LOOP)]

    gen = FunctionGenerator(reply)
    [sol] = CodeT(CodeTConfig(n=6, tests_n=2), gen, chat_prompt(CODE_PROMPT), extract=CODE).solve([PROBLEM])
    assert len(gen.calls) == 1 and [r.key for r in gen.calls[0]] == ["p", "p#tests"]
    # Sets: SQUARE x3 passes {double(2), double(0)} -> 3 x 2 = 6; RIGHT x2 passes all 4 -> 2 x 4 = 8.
    assert sol.answer == RIGHT and sol.trace.notes["tests"] == 4 and sol.trace.notes["score"] == 8
    assert sol.confidence == pytest.approx(2 / 6)
    assert sol.usage.completion_tokens > 0 and sol.trace.notes["executions"] == 3


def test_without_any_test_it_falls_back_to_the_syntax_vote_and_says_so():
    gen = FunctionGenerator(lambda req: "No tests today." if req.key.endswith("#tests") else f"```python\n{RIGHT}\n```")
    [sol] = CodeT(CodeTConfig(n=2, tests_n=1), gen, chat_prompt(CODE_PROMPT), extract=CODE).solve([PROBLEM])
    assert sol.answer == RIGHT and sol.trace.notes["by"] == "syntax"
