"""``finish_reason`` through tts serve, as OpenAI's API says it: ``"length"`` when ``max_tokens`` cut
the reply sent, ``"stop"`` when it ended, ``"tool_calls"`` for calls, and a call cut mid-JSON is not a
call (issue 48, finding 10: every reply said "stop"). Over real HTTP with the openai client, on the
scripted backend, which cuts its replies at ``max_tokens`` as an engine does."""

from __future__ import annotations

import json
from functools import partial
from typing import Any

import pytest

from tts.backends.base import Completion
from tts.backends.function import FunctionGenerator
from tts.backends.scripted import ScriptedGenerator

pytestmark = pytest.mark.timeout(60)
WEATHER = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city now",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
WEATHER_Q = [{"role": "user", "content": "What is the weather in Paris?"}]
STORY = [{"role": "user", "content": "Tell me a story about a cat."}]
MATH = [{"role": "user", "content": "What is 6 * 7?"}]


@pytest.fixture
def serve(serve):
    """The server of tests/serve/conftest.py, whose session allows 512 tokens a sample."""
    return partial(serve, max_tokens=512)


def _scripted(**kw: Any) -> ScriptedGenerator:
    return ScriptedGenerator(default={"42": 0.8}, seed=0, model_name="scripted", **kw)


def test_a_reply_cut_at_max_tokens_says_length_and_a_whole_one_says_stop(serve):
    client = serve(_scripted(mean_tokens=40))
    cut = client.chat.completions.create(model="sc-4/scripted", messages=STORY, max_tokens=12)
    choice = cut.choices[0]
    assert choice.finish_reason == "length" and choice.message.content and choice.message.tool_calls is None
    assert any("raise max_tokens" in n for n in choice.model_extra["tts"]["notes"])
    whole = client.chat.completions.create(model="sc-4/scripted", messages=STORY, max_tokens=400)
    assert whole.choices[0].finish_reason == "stop" and "notes" not in whole.choices[0].model_extra["tts"]
    assert len(whole.choices[0].message.content.split()) > len(choice.message.content.split())


def test_the_math_prompt_the_completions_endpoint_and_a_stream_say_length_too(serve):
    client = serve(_scripted(), prompt="math")
    answered = client.chat.completions.create(model="sc-4/scripted", messages=MATH, max_tokens=400)
    assert answered.choices[0].finish_reason == "stop" and answered.choices[0].message.content.endswith("{42}.")
    cut = client.chat.completions.create(model="sc-4/scripted", messages=MATH, max_tokens=10)
    assert cut.choices[0].finish_reason == "length"  # every sample was cut: the "no answer" reply is the limit's
    text = client.completions.create(model="sc-4/scripted", prompt="What is 6 * 7?", max_tokens=10)
    assert text.choices[0].finish_reason == "length"
    whole = client.completions.create(model="sc-4/scripted", prompt="What is 6 * 7?", max_tokens=400)
    assert whole.choices[0].finish_reason == "stop"
    chunks = list(client.chat.completions.create(model="sc-4/scripted", messages=MATH, max_tokens=10, stream=True))
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["length"]
    # The answer alone is whole even when it was read from a cut sample: "stop".
    only = client.chat.completions.create(model="sc-4/scripted", messages=MATH, max_tokens=400,
                                          extra_body={"tts": {"answer_only": True}})
    assert only.choices[0].finish_reason == "stop" and only.choices[0].message.content == "42"


@pytest.mark.parametrize("model", ["tool_vote-4/scripted", "sc-4/scripted"])
def test_a_tool_call_cut_mid_json_is_not_a_tool_call(serve, model):
    client = serve(_scripted())
    whole = client.chat.completions.create(model=model, messages=WEATHER_Q, tools=WEATHER, max_tokens=400)
    assert whole.choices[0].finish_reason == "tool_calls" and whole.choices[0].message.tool_calls
    cut = client.chat.completions.create(model=model, messages=WEATHER_Q, tools=WEATHER, max_tokens=8)
    assert cut.choices[0].finish_reason == "length" and cut.choices[0].message.tool_calls is None
    chunks = list(client.chat.completions.create(model=model, messages=WEATHER_Q, tools=WEATHER, max_tokens=8,
                                                 stream=True))
    assert not any(c.choices[0].delta.tool_calls for c in chunks if c.choices)
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["length"]


def test_a_custom_generators_cut_reply_holding_a_whole_call_is_not_a_call(serve):
    """A generator that reads no calls itself (tts reads them) and says its reply was cut."""
    call = '{"name": "get_weather", "arguments": {"city": "Paris"}}'

    def reply(req):
        cut = req.max_tokens < 100
        return [Completion(call + ("\nand also" if cut else ""), 20, -0.3, "length" if cut else "stop")] * req.n

    client = serve(FunctionGenerator(reply, model_name="fixed"))
    whole = client.chat.completions.create(model="tool_vote-4/fixed", messages=WEATHER_Q, tools=WEATHER)
    assert whole.choices[0].finish_reason == "tool_calls"
    assert json.loads(whole.choices[0].message.tool_calls[0].function.arguments) == {"city": "Paris"}
    cut = client.chat.completions.create(model="tool_vote-4/fixed", messages=WEATHER_Q, tools=WEATHER, max_tokens=50)
    assert cut.choices[0].finish_reason == "length" and cut.choices[0].message.tool_calls is None
