"""A backend completion becomes a Sample every strategy reads the same way: its text, answer,
token count, mean logprob and finish reason carried over, the answer from tool calls when it makes
some and none when its attempted call is malformed; logprob strategies refuse samples without."""

from __future__ import annotations

import json

import pytest

from tts.backends.base import Completion
from tts.backends.chat import ToolCall
from tts.backends.tool_calls import MALFORMED
from tts.search.base import MissingLogprobsError, require_logprobs, to_sample
from tts.types import Sample


def _extract(text: str) -> str:
    return text.upper()


def test_a_text_completion_keeps_every_field_and_its_extracted_answer():
    c = Completion("the answer is x", 7, mean_logprob=-0.25, finish_reason="length")
    assert to_sample(c, _extract) == Sample("the answer is x", "THE ANSWER IS X", 7, -0.25, "length")


def test_a_completion_with_tool_calls_answers_with_its_calls():
    call = ToolCall("add", '{"b": 2, "a": 1}', "call_1")
    c = Completion("", 5, mean_logprob=-0.5, finish_reason="tool_calls", tool_calls=(call,))
    sample = to_sample(c, _extract)
    assert json.loads(sample.answer) == [{"name": "add", "arguments": {"a": 1, "b": 2}}]
    assert (sample.text, sample.completion_tokens, sample.mean_logprob, sample.finish_reason) == ("", 5, -0.5,
                                                                                                   "tool_calls")
    assert sample.tool_calls == (call.to_openai(),)


def test_a_malformed_call_is_no_answer_not_a_text_answer():
    c = Completion('<tool_call>{"name": ', 9, mean_logprob=-1.0, finish_reason="stop", tool_calls=(),
                   tool_call_error=MALFORMED)
    assert to_sample(c, _extract) == Sample('<tool_call>{"name": ', None, 9, -1.0, "stop")


def test_logprob_strategies_say_which_problem_and_how_many_samples_lack_logprobs():
    samples = [Sample("a", "1", 1, -0.5), Sample("b", "1", 1, None), Sample("c", "1", 1, None)]
    with pytest.raises(MissingLogprobsError) as err:
        require_logprobs("best_of_n", "p3", samples)
    assert str(err.value) == (
        "best_of_n ranks samples by token log-probabilities, but 2 of 3 samples of problem 'p3' came back "
        "without them (first: sample 1). Use a backend that returns logprobs (vLLM does; an OpenAI-compatible "
        "server must support `logprobs`), or use self_consistency.")
    assert require_logprobs("best_of_n", "p3", samples[:1]) == [-0.5]
