"""Input checked at the edge, alike in ``tts serve`` and ``tts mcp`` (issue 48, findings 9, 13, 15).

A malformed tool is a 400 naming the field on every backend (it was a 500 on the scripted backend,
a 502 through an OpenAI upstream and a 200 with the bad tool in the prompt on vLLM), a ``tool``
message that answers no earlier call is a 400 as on OpenAI's API (it was a 200), and the MCP tool's
refusals are one line that names the argument (they were pydantic's dump with its link; an unknown
argument and a question that disagreed with the conversation were ignored).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tts.backends.function import RecordingGenerator
from tts.backends.scripted import ScriptedGenerator
from tts.serve import ServeConfig, create_app
from tts.session import Session

pytestmark = pytest.mark.timeout(60)
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city now", "strict": False,
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
CALLED = [*ASK, {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]}]

BAD_TOOLS = [  # (tools, the field the refusal names, words of its message)
    ([{"type": "function", "function": {"name": "f", "parameters": "oops"}}],
     "tools[0].function.parameters", "must be a JSON schema object"),
    ([{"type": "function"}], "tools[0].function", "is required"),
    ([WEATHER, {"type": "function", "function": {"name": "get weather"}}], "tools[1].function.name",
     "1 to 64 letters, digits, _ or -"),
    ([{"type": "function", "function": {"name": "x" * 65}}], "tools[0].function.name", "1 to 64"),
    ([{"type": "custom", "function": {"name": "f"}}], "tools[0].type", 'must be "function"'),
    ([{"type": "function", "function": {"name": "f", "description": 3}}], "tools[0].function.description",
     "must be text"),
    ([{"type": "function", "function": {"name": "f", "strict": "yes"}}], "tools[0].function.strict",
     "true or false"),
    ([{"type": "function", "function": {"name": "f", "params": {}}}], "tools[0].function.params",
     "not a field of an OpenAI tool"),
    ([{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}],
     "tools[0].function.parameters", "parameters are an object"),
    ([{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"city": {"type": "strin"}}}}}],
     "tools[0].function.parameters", "properties/city/type"),
]

BAD_CONVERSATIONS = [  # (messages, the field the refusal names, words of its message)
    ([*ASK, {"role": "tool", "tool_call_id": "call_1", "content": "18C"}], "messages[1].tool_call_id",
     "no earlier assistant message calls a tool"),
    ([*CALLED, {"role": "tool", "tool_call_id": "call_2", "content": "18C"}], "messages[2].tool_call_id",
     "answers no tool call of an earlier assistant message (the calls made before it have ids 'call_1')"),
    ([*CALLED, {"role": "tool", "content": "18C"}], "messages[2].tool_call_id", "is missing"),
    ([{"role": "tool", "tool_call_id": "call_1", "content": "18C"}, *CALLED], "messages[0].tool_call_id",
     "answers no tool call"),  # the call comes after its "result"
]


@pytest.fixture
def served():
    """A server on the scripted model whose requests are recorded."""
    gen = RecordingGenerator(ScriptedGenerator(seed=0, model_name="scripted"))
    with Session(generator=gen, price_as=None, max_tokens=128, batch_window=0.0) as session:
        yield TestClient(create_app(session, ServeConfig(model="scripted"))), gen


def _chat(client: TestClient, messages: list[dict[str, Any]], **body: Any) -> Any:
    return client.post("/v1/chat/completions", json={"model": "sc-2/scripted", "messages": messages, **body})


@pytest.mark.parametrize(("tools", "param", "words"), BAD_TOOLS)
def test_a_malformed_tool_is_a_400_naming_its_field_before_the_model_sees_it(served, tools, param, words):
    client, gen = served
    r = _chat(client, ASK, tools=tools)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert words in error["message"] and error["message"].startswith(param) and "\n" not in error["message"]
    assert gen.requests == []  # refused before any compute


def test_well_formed_tools_with_every_openai_field_are_served(served):
    client, gen = served
    r = _chat(client, ASK, tools=[WEATHER, {"type": "function", "function": {"name": "no-args_2"}}])
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"


@pytest.mark.parametrize(("messages", "param", "words"), BAD_CONVERSATIONS)
def test_a_tool_result_that_answers_no_earlier_call_is_a_400(served, messages, param, words):
    client, gen = served
    r = _chat(client, messages, tools=[WEATHER])
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param and words in error["message"]
    assert gen.requests == []


def test_a_tool_result_that_answers_its_call_is_served(served):
    client, _ = served
    r = _chat(client, [*CALLED, {"role": "tool", "tool_call_id": "call_1", "content": "18C and sunny"}],
              tools=[WEATHER])
    assert r.status_code == 200, r.text
    assert "18C and sunny" in r.json()["choices"][0]["message"]["content"]


# --- tts mcp: the same checks, and every refusal one line ------------------------------------------

def _mcp_errors(calls: list[dict[str, Any]]) -> list[str]:
    """The tool-error text of each ``solve`` call (in process, through the SDK's own client)."""
    from mcp import Client

    from tts.serve.mcp import create_mcp_server

    gen = ScriptedGenerator(seed=0, model_name="scripted")
    session = Session(generator=gen, price_as=None, max_tokens=128, batch_window=0.0)
    server = create_mcp_server(session, ServeConfig(model="scripted", max_samples=16))

    async def run() -> list[str]:
        async with Client(server) as client:
            results = [await client.call_tool("solve", args) for args in calls]
        assert all(r.is_error for r in results), [r.structured_content for r in results if not r.is_error]
        return [r.content[0].text for r in results]

    try:
        return asyncio.run(run())
    finally:
        session.close()


def test_mcp_refuses_malformed_tools_and_unanswered_tool_results_naming_the_field():
    calls = [{"messages": ASK, "tools": tools} for tools, _, _ in BAD_TOOLS]
    calls += [{"messages": messages, "tools": [WEATHER]} for messages, _, _ in BAD_CONVERSATIONS]
    expected = [(param, words) for _, param, words in BAD_TOOLS + BAD_CONVERSATIONS]
    for text, (param, words) in zip(_mcp_errors(calls), expected, strict=True):
        assert text.startswith(f"Error executing tool solve: {param}") and words in text, text
        assert "\n" not in text


@pytest.mark.parametrize(("args", "expected"), [
    ({"n": 0}, "n=0 is refused (input should be greater than or equal to 1); change n"),
    ({"budget": -1}, "budget=-1 is refused (input should be greater than 0); change budget"),
    ({"budget_unit": "joules"}, "budget_unit='joules' is refused (input should be 'tokens', 'eflops', "
                                "'gpu_seconds' or 'dollars'); change budget_unit"),
    ({"messages": "hello"}, "messages='hello' is refused (input should be a valid list); change messages"),
    ({"n": 0, "budget": -1}, "n=0 is refused (input should be greater than or equal to 1); budget=-1 is refused "
                             "(input should be greater than 0); change n, budget"),
    ({"samples": 4, "temprature": 0.2}, "unknown argument(s) 'samples', 'temprature'; remove them (solve takes "
                                        "question, strategy, n, budget, budget_unit, max_tokens, settings, messages, "
                                        "tools, prompt, stop)"),
])
def test_mcp_refuses_bad_and_unknown_arguments_in_one_line_that_names_them(args, expected):
    (text,) = _mcp_errors([{"question": "What is 6*7?", **args}])
    assert text == f"Error executing tool solve: {expected}"


def test_mcp_refuses_a_question_that_is_not_the_conversations():
    (text,) = _mcp_errors([{"question": "What is 2+2?", "messages": ASK}])
    assert text == ("Error executing tool solve: question 'What is 2+2?' is not the conversation's last user message "
                    "'What is the weather in Paris?'; pass the question in one of them (question may be empty "
                    "with messages) or make them the same")
