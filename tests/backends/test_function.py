"""The shared test fakes: a model written as a function, and a recorder around any generator."""

from __future__ import annotations

import pytest

from tts.backends.base import (
    Completion,
    GenerationRequest,
    GenerationResult,
    Message,
    request_usage,
)
from tts.backends.function import FunctionGenerator, RecordingGenerator
from tts.backends.scripted import ScriptedGenerator


def _request(text: str, n: int = 1) -> GenerationRequest:
    return GenerationRequest(messages=(Message("user", text),), n=n)


def test_a_function_model_cycles_its_replies_over_n_and_counts_usage_like_a_backend():
    gen = FunctionGenerator(lambda r: ["The answer is 4.", Completion("5", 7, -0.5)] if "2 + 2" in r.messages[-1].content
                            else "no idea")
    first, second = gen.generate([_request("What is 2 + 2?", n=3), _request("Why?")])
    assert [c.text for c in first.completions] == ["The answer is 4.", "5", "The answer is 4."]
    assert first.usage.completion_tokens == 4 + 7 + 4 and first.usage.prompt_tokens == 5 and first.usage.calls == 1
    assert [c.text for c in second.completions] == ["no idea"]
    assert len(gen.calls) == 1 and len(gen.requests) == 2


def test_a_reply_that_is_a_whole_result_is_the_requests_result_as_it_is():
    own = GenerationResult((Completion("only one", 2),), request_usage(30, 0, [2], 0.5))
    gen = FunctionGenerator(lambda r: own if r.n == 3 else "other")
    first, second = gen.generate([_request("q", n=3), _request("q")])
    assert first is own and first.usage.prompt_tokens == 30 and len(first.completions) == 1
    assert [c.text for c in second.completions] == ["other"] and gen.results == [[own, second]]


def test_a_reply_function_that_returns_nothing_is_an_error():
    with pytest.raises(ValueError, match="returned no reply"):
        FunctionGenerator(lambda r: []).generate([_request("q")])


def test_a_recorder_keeps_each_call_and_answers_as_the_model_it_wraps():
    inner = ScriptedGenerator(default={"42": 1.0}, seed=0)
    gen = RecordingGenerator(inner)
    (result,) = gen.generate([_request("What is 6 * 7?", n=2)])
    gen.generate([_request("again")])
    assert [len(call) for call in gen.calls] == [1, 1] and gen.requests[1].messages[-1].content == "again"
    assert len(result.completions) == 2 and gen.model_name == inner.model_name
    assert gen.results[0] == [result] and len(gen.results) == 2  # what each call returned, in order


def test_a_function_generator_keeps_what_it_returned():
    gen = FunctionGenerator(lambda r: ["a", "b"])
    (result,) = gen.generate([_request("q", n=3)])
    assert gen.results == [[result]] and [c.text for c in result.completions] == ["a", "b", "a"]
