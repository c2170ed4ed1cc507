"""revision with feedback=execution (Self-Debugging): failing docstring examples fed back, passing chains stop."""

from __future__ import annotations

import pytest

from tts.answers.code import CODE
from tts.backends.function import FunctionGenerator
from tts.execution.sandbox import bwrap_path
from tts.prompts import CODE_PROMPT, chat_prompt
from tts.search.base import StrategyInputError
from tts.search.sequential.revision import Revision, RevisionConfig
from tts.types import Problem

pytestmark = pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap is not installed (make install)")

PROMPT = 'def double(x):\n    """Twice x.\n    >>> double(2)\n    4\n    >>> double(0)\n    0\n    """\n'
PROBLEM = Problem("p", PROMPT, "", {"prompt": PROMPT, "entry_point": "double", "test": ""})
WRONG, RIGHT = "def double(x):\n    return x + 2", "def double(x):\n    return x + x"


def _model(req):
    """Writes x + 2 (right at 2, wrong at 0) first; fixes it only when told what an example returned."""
    return f"```python\n{RIGHT if 'should return' in req.messages[-1].content else WRONG}\n```"


def _config(**kw):
    return RevisionConfig(n=kw.pop("n", 2), rounds=1, feedback="execution", **kw)


def test_the_failing_example_and_the_real_output_are_fed_back_and_the_fix_is_chosen():
    gen = FunctionGenerator(_model)
    [sol] = Revision(_config(accept_score=1.0, select="verifier"), gen, chat_prompt(CODE_PROMPT), extract=CODE).solve([PROBLEM])
    revision_prompt = gen.calls[1][0].messages[-1].content
    assert "- `double(0)` should return `0`, but the code returned 2.\nPlease fix the Python code." in revision_prompt
    assert "`double(2)`" not in revision_prompt  # a passing example is not listed
    assert gen.calls[1][0].messages[-2].content == f"```python\n{WRONG}\n```"  # the previous attempt, as its reply
    assert sol.answer == RIGHT and sol.trace.scores == (0.5, 1.0)
    assert sol.trace.notes["execution_seconds"] > 0


def test_a_chain_whose_program_passes_stops_there():
    gen = FunctionGenerator(lambda req: f"```python\n{RIGHT}\n```")
    [sol] = Revision(_config(accept_score=1.0), gen, chat_prompt(CODE_PROMPT), extract=CODE).solve([PROBLEM])
    assert len(gen.calls) == 1 and sol.trace.scores == (1.0,)


def test_feedback_says_what_the_program_returned_or_raised():
    def model(req):
        return "```python\ndef double(x):\n    return 1 // x\n```"
    gen = FunctionGenerator(model)
    Revision(_config(), gen, chat_prompt(CODE_PROMPT), extract=CODE).solve([PROBLEM])
    ask = gen.calls[1][0].messages[-1].content
    assert "`double(2)` should return `4`, but the code returned 0." in ask
    assert "`double(0)` should return `0`, but the code raised ZeroDivisionError." in ask
    assert ask.endswith(RevisionConfig().instruction)


def test_execution_feedback_is_refused_with_a_verifier_and_on_problems_without_a_function():
    with pytest.raises(ValueError, match="drop the verifier"):
        RevisionConfig(n=2, rounds=1, feedback="execution", verifier="logprob")
    gen = FunctionGenerator(lambda req: "4")
    with pytest.raises(StrategyInputError, match="use --benchmark humaneval"):
        Revision(_config(), gen, chat_prompt(CODE_PROMPT), extract=CODE).solve([Problem("q", "2+2?", "4")])
