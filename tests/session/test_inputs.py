"""The library checks a solve's input as the server and MCP do (issue 48, findings 9, 13, 15).

``tts.solve`` and ``Session.solve`` refuse malformed tools (they raised AttributeError mid-solve,
or reached the model), a tool result that answers no earlier call (it was sent), a sampling
setting out of range in one line (it was pydantic's dump with its link), and a question that is
not the conversation's (one of the two was silently dropped).
"""

from __future__ import annotations

import pytest

import tts
from tts.backends.chat import ChatInputError
from tts.backends.function import RecordingGenerator
from tts.backends.scripted import ScriptedGenerator
from tts.session import Session

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def _recording() -> RecordingGenerator:
    return RecordingGenerator(ScriptedGenerator(seed=0, model_name="scripted"))


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"temperature": -1}, "temperature=-1 is refused (input should be greater than or equal to 0); change temperature"),
    ({"max_tokens": 0}, "max_tokens=0 is refused (input should be greater than or equal to 1); change max_tokens"),
])
def test_a_sampling_setting_out_of_range_is_one_line_naming_it(kwargs, message):
    with pytest.raises(ValueError) as err:
        tts.solve("What is 2+3?", backend="scripted", n=2, **kwargs)
    assert str(err.value) == message
    with pytest.raises(ValueError) as err:  # a session refuses it before it opens its backend
        Session("scripted", **kwargs)
    assert str(err.value) == message


def test_session_solve_refuses_a_bad_override_in_one_line():
    with Session(generator=_recording(), price_as=None) as s, pytest.raises(ValueError) as err:
        s.solve("What is 2+3?", n=1, top_p=0)
    assert str(err.value) == "top_p=0 is refused (input should be greater than 0); change top_p"


@pytest.mark.parametrize(("tools", "param", "words"), [
    ([{"type": "function", "function": {"name": "f", "parameters": "oops"}}], "tools[0].function.parameters",
     "must be a JSON schema object"),
    ([WEATHER, {"type": "function"}], "tools[1].function", "is required"),
    (["get_weather"], "tools[0]", "must be an object"),
    ({"type": "function", "function": {"name": "f"}}, "tools", "must be a list of tool objects"),
])
def test_a_malformed_tool_is_refused_naming_its_field_before_the_model_sees_it(tools, param, words):
    gen = _recording()
    with pytest.raises(ChatInputError) as err:
        tts.solve("", strategy="tool_vote", n=2, generator=gen, messages=ASK, tools=tools)
    assert err.value.param == param and str(err.value).startswith(param) and words in str(err.value)
    assert isinstance(err.value, ValueError) and gen.requests == []


@pytest.mark.parametrize(("messages", "param"), [
    ([*ASK, {"role": "tool", "tool_call_id": "call_1", "content": "18C"}], "messages[1].tool_call_id"),
    ([*ASK, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
      {"role": "tool", "tool_call_id": "call_9", "content": "18C"}], "messages[2].tool_call_id"),
    ("What is the weather in Paris?", "messages"),
])
def test_a_tool_result_that_answers_no_earlier_call_is_refused(messages, param):
    gen = _recording()
    with pytest.raises(ChatInputError) as err:
        tts.solve("", n=2, generator=gen, messages=messages, tools=[WEATHER])
    assert err.value.param == param and str(err.value).startswith(param) and gen.requests == []


def test_a_question_that_is_not_the_conversations_is_refused_and_an_empty_one_is_taken_from_it():
    gen = _recording()
    chat = [{"role": "user", "content": "What is 3+3?"}]
    with pytest.raises(ChatInputError, match="question 'What is 2\\+2\\?' is not the conversation's last user message "
                                             "'What is 3\\+3\\?'; pass the question in one of them") as err:
        tts.solve("What is 2+2?", n=2, generator=gen, messages=chat)
    assert err.value.param == "question" and gen.requests == []
    tts.solve("", n=2, generator=gen, messages=chat)  # the math prompt renders the conversation's question
    assert gen.requests and all("What is 3+3?" in r.messages[-1].content for r in gen.requests)
    tts.solve("  What is 3+3?\n", n=2, generator=gen, messages=chat)  # the same text, spaces aside


def test_session_tool_choice_must_name_one_of_the_tools():
    with Session(generator=_recording(), price_as=None) as s:
        with pytest.raises(ChatInputError, match="tool_choice names 'get_time', which is not one of the tools"):
            s.solve("", n=1, messages=ASK, tools=[WEATHER],
                    tool_choice={"type": "function", "function": {"name": "get_time"}})
        with pytest.raises(ChatInputError, match="tool_choice needs tools"):
            s.solve("", n=1, messages=ASK, tool_choice="required")
        sol = s.solve("", n=1, messages=ASK, tools=[WEATHER],
                      tool_choice={"type": "function", "function": {"name": "get_weather"}})
    assert sol.trace.samples[0].tool_calls[0]["function"]["name"] == "get_weather"
