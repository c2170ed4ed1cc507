"""POST /v1/responses (issue 51, item 4): OpenAI's Responses API on ``tts serve``.

The official client's ``responses.create`` (whole and streamed) runs a two-tool loop on the
scripted backend, every reply and event validated against the client's own Responses types
(``openai.types.responses``, strict pydantic validation, not the client's lenient construction);
a reply cut by ``max_output_tokens`` is ``incomplete`` as chat's is ``"length"``; bad input is a
400 naming the field before anything runs; and the docs' example runs as written. The
openai-agents SDK's default ``OpenAIResponsesModel`` loop is in tests/serve/test_frameworks.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from tts.backends.function import RecordingGenerator
from tts.backends.scripted import ScriptedGenerator

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[2]
TOOLS = [{"type": "function", "name": name, "description": doc, "strict": True,
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                         "additionalProperties": False}}
         for name, doc in (("get_weather", "The weather in a city now."), ("get_time", "The local time in a city now."))]
RESULTS = {"get_weather": "18C and sunny in Paris", "get_time": "14:05 local time in Tokyo"}
EVENTS = TypeAdapter(ResponseStreamEvent)


def _checked(raw: Any) -> Response:
    """A reply's JSON, validated strictly against the openai package's Response type."""
    return Response.model_validate(raw.http_response.json())


def _stream(client: openai.OpenAI, **body: Any) -> list[Any]:
    """The events of a streamed request, each validated strictly against ResponseStreamEvent."""
    with client.responses.with_streaming_response.create(stream=True, **body) as raw:
        assert raw.headers["content-type"].startswith("text/event-stream")
        events = [EVENTS.validate_json(line[len("data: "):]) for line in raw.iter_lines() if line.startswith("data: ")]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    return events


def test_the_official_client_runs_a_two_tool_loop(serve):
    """Two turns of a user, each answered by a call of the tool it names, the client runs it and
    sends back the call and its output as items; the model's last reply is text holding the result."""
    gen = RecordingGenerator(ScriptedGenerator(model_name="scripted"))
    client = serve(gen)
    items: list[Any] = [{"role": "user", "content": "What is the weather in Paris? Use get_weather."}]
    called = []
    for follow_up in ("And what time is it in Tokyo? Use get_time.", None):
        reply = _checked(client.responses.with_raw_response.create(
            model="tool_vote-4/scripted", instructions="Use the tools to answer.", input=items, tools=TOOLS))
        assert reply.status == "completed" and reply.incomplete_details is None
        [call] = reply.output
        assert call.type == "function_call" and call.call_id and call.id != call.call_id
        called.append((call.name, json.loads(call.arguments)))
        items += [call.model_dump(exclude_none=True),
                  {"type": "function_call_output", "call_id": call.call_id, "output": RESULTS[call.name]}]
        reply = _checked(client.responses.with_raw_response.create(model="tool_vote-4/scripted", input=items, tools=TOOLS))
        [message] = reply.output
        assert message.type == "message" and message.status == "completed"
        assert RESULTS[call.name] in reply.output_text
        items.append(message.model_dump(exclude_none=True))
        if follow_up:
            items.append({"role": "user", "content": follow_up})
    assert called == [("get_weather", {"city": "Paris"}), ("get_time", {"city": "Tokyo"})]
    # What the model was shown: the instructions as the system turn, both tools in chat's nested
    # form, each call as an assistant turn and each output as the tool turn answering its id.
    last = gen.requests[-1]
    assert sorted(t["function"]["name"] for t in json.loads(last.tools)) == ["get_time", "get_weather"]
    roles = [m.role for m in last.messages]
    assert roles == ["user", "assistant", "tool", "assistant", "user", "assistant", "tool"]
    assert gen.requests[0].messages[0].role == "system" and gen.requests[0].messages[0].content == "Use the tools to answer."
    assert last.messages[-2].tool_calls[0].id == last.messages[-1].tool_call_id
    assert last.messages[-1].content == RESULTS["get_time"]
    # usage counts every sample under the Responses' names; tts says how the answer was reached
    assert reply.usage.input_tokens > 0 and reply.usage.output_tokens > 0
    assert reply.usage.total_tokens == reply.usage.input_tokens + reply.usage.output_tokens
    assert reply.model_extra["tts"]["strategy"].startswith("tool_vote") and len(reply.model_extra["tts"]["answers"]) == 4


def test_a_streamed_reply_sends_openais_events_and_the_same_response(serve):
    client = serve(ScriptedGenerator(model_name="scripted"), max_tokens=4096)
    events = _stream(client, model="sc-4/scripted", input="What is the weather in Paris? Use get_weather.", tools=TOOLS)
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert kinds[-5:-1] == ["response.output_item.added", "response.function_call_arguments.delta",
                            "response.function_call_arguments.done", "response.output_item.done"]
    done = events[-1].response
    assert {e.response.id for e in events if hasattr(e, "response")} == {done.id}
    [call] = done.output
    delta, finished, item = events[-4], events[-3], events[-2].item
    assert delta.delta == finished.arguments == call.arguments and finished.name == call.name == "get_weather"
    assert item.call_id == call.call_id and json.loads(call.arguments) == {"city": "Paris"}
    # a text reply: the deltas make up the text of the final message
    events = _stream(client, model="sc-4/scripted", input=[
        {"role": "user", "content": "What is the weather in Paris?"},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": RESULTS["get_weather"]}], tools=TOOLS)
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert RESULTS["get_weather"] in text and events[-1].response.output_text == text
    assert [e.type for e in events if e.type.startswith("response.content_part")] == [
        "response.content_part.added", "response.content_part.done"]


def test_the_official_clients_stream_helper_accumulates_the_response(serve):
    """``client.responses.stream`` checks the events' identities and order as it accumulates them."""
    client = serve(ScriptedGenerator(model_name="scripted"), max_tokens=4096)
    with client.responses.stream(model="tool_vote-4/scripted", input="What time is it in Tokyo? Use get_time.",
                                 tools=TOOLS) as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_response()
    assert kinds[-1] == "response.completed" and final.output[0].name == "get_time"


def test_a_reply_cut_by_max_output_tokens_is_incomplete_as_chats_is_length(serve):
    client = serve(ScriptedGenerator(default={"42": 1.0}, model_name="scripted"))
    ask = "What is 6 * 7? Think it through."
    chat = client.chat.completions.create(model="sc-2/scripted", max_tokens=5, messages=[{"role": "user", "content": ask}])
    assert chat.choices[0].finish_reason == "length"
    reply = _checked(client.responses.with_raw_response.create(model="sc-2/scripted", input=ask, max_output_tokens=5))
    assert reply.status == "incomplete" and reply.incomplete_details.reason == "max_output_tokens"
    assert reply.output[0].status == "incomplete" and reply.max_output_tokens == 5
    assert reply.output_text and any("max_tokens cut" in n for n in reply.model_extra["tts"]["notes"])
    events = _stream(client, model="sc-2/scripted", input=ask, max_output_tokens=5)
    assert events[-1].type == "response.incomplete" and events[-1].response.incomplete_details.reason == "max_output_tokens"
    whole = _checked(client.responses.with_raw_response.create(model="sc-2/scripted", input=ask, max_output_tokens=2000))
    assert whole.status == "completed" and whole.incomplete_details is None


def test_tts_options_policy_and_the_api_key_are_the_chat_paths(serve):
    client = serve(ScriptedGenerator(default={"42": 0.8, "41": 0.2}, seed=1, model_name="scripted"),
                   prompt="math", api_key="secret", max_samples=8)
    reply = _checked(client.responses.with_raw_response.create(
        model="scripted", input="What is 6 * 7?", extra_body={"tts": {"strategy": "sc", "n": 6, "answer_only": True}}))
    tts = reply.model_extra["tts"]
    assert tts["strategy"] == "self_consistency@6" and len(tts["answers"]) == 6
    assert reply.output_text == tts["answer"] == "42"
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model="scripted", input="What is 6 * 7?", extra_body={"tts": {"n": 64}})
    assert err.value.body["param"] == "tts.n"
    stranger = openai.OpenAI(base_url=str(client.base_url), api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        stranger.responses.create(model="scripted", input="What is 6 * 7?")


def test_the_token_rate_limit_reserves_a_responses_budget_as_chats(serve):
    """600 generated tokens a minute: a request reserves its budget and gets back what it did not
    spend; the next whole-bucket request is a 429 with Retry-After before it runs, a smaller one
    fits, and a budget over the bucket is a 400 (it could never run)."""
    gen = RecordingGenerator(ScriptedGenerator(default={"42": 1.0}, model_name="scripted"))
    client = serve(gen, rate_limit_tokens=600)
    ask = {"model": "sc-4/scripted", "input": "What is 6 * 7?", "max_output_tokens": 100}
    first = client.responses.create(**ask, extra_body={"tts": {"budget": 600}})
    assert first.usage.output_tokens > 100  # 4 samples: the bucket keeps less than 500
    with pytest.raises(openai.RateLimitError) as err:
        client.responses.create(**ask, extra_body={"tts": {"budget": 600}})
    assert err.value.body["code"] == "rate_limit_exceeded" and int(err.value.response.headers["retry-after"]) >= 1
    assert "600 generated tokens a minute" in err.value.body["message"] and len(gen.requests) == 1
    client.responses.create(**{**ask, "max_output_tokens": 20}, extra_body={"tts": {"budget": 80}})
    assert len(gen.requests) == 2
    with pytest.raises(openai.BadRequestError, match="600"):
        client.responses.create(**ask, extra_body={"tts": {"budget": 5000}})


def test_a_reasoning_models_thinking_is_a_reasoning_item(serve):
    client = serve(ScriptedGenerator(default={"42": 1.0}, model_name="scripted", thinking=True), max_tokens=2048)
    reply = _checked(client.responses.with_raw_response.create(model="sc-2/scripted", input="What is 6 * 7?"))
    reasoning, message = reply.output
    assert reasoning.type == "reasoning" and reasoning.content[0].text.strip()
    assert "<think>" not in message.content[0].text and "</think>" not in message.content[0].text
    assert reply.usage.output_tokens_details.reasoning_tokens > 0
    # sent back with the conversation, it is accepted and left out of the prompt
    again = client.responses.create(model="sc-2/scripted", input=[
        {"role": "user", "content": "What is 6 * 7?"}, reasoning.model_dump(exclude_none=True),
        message.model_dump(exclude_none=True), {"role": "user", "content": "And 6 * 8?"}])
    assert again.status == "completed"


def test_a_demanded_call_that_no_sample_makes_is_a_422_whole_and_a_failed_response_streamed(serve):
    """``tool_choice: "required"`` after a tool result: the scripted model answers in prose, so no
    sample calls; never text with a 200 (chat's rule), and a stream ends with ``response.failed``."""
    client = serve(ScriptedGenerator(model_name="scripted"))
    body = {"model": "tool_vote-4/scripted", "tools": TOOLS, "tool_choice": "required", "input": [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": RESULTS["get_weather"]}]}
    with pytest.raises(openai.UnprocessableEntityError) as err:
        client.responses.create(**body)
    assert err.value.body["code"] == "no_tool_call"
    events = _stream(client, **body)
    assert [e.type for e in events[-2:]] == ["error", "response.failed"]
    assert events[-2].code == "no_tool_call" and events[-1].response.error.code == "server_error"
    assert events[-1].response.status == "failed" and "tool_choice demands a tool call" in events[-2].message
    assert not [e for e in events if e.type.startswith("response.output_item")]


BAD = [
    ({"previous_response_id": "resp_1"}, "previous_response_id", "stores no responses"),
    ({"store": True}, "store", "stores no responses"),
    ({"conversation": "conv_1"}, "conversation", "stores no responses"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input", "item_reference"),
    ({"input": [{"type": "computer_call", "id": "c"}]}, "input", "'computer_call'"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "http://x/y.png"}]}]},
     "input.0.content.0.type", "text only"),
    ({"input": [{"type": "function_call_output", "call_id": "call_9", "output": "x"}]}, "input[0].call_id",
     "answers no tool call"),
    ({"input": [{"type": "function_call", "name": "get_time", "arguments": "{}"}]}, "input.0.call_id",
     "required"),
    ({"tools": [{"type": "web_search"}]}, "tools[0].type", "function tools only"),
    ({"tools": [{"type": "function", "name": "f", "parameters": {"type": "array"}}]}, "tools[0].parameters",
     "JSON schema"),
    ({"tools": [{"type": "function", "name": "f", "colour": "red"}]}, "tools[0].colour", "remove it"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "name": "nope"}}, "tool_choice", "not one of the tools"),
    ({"tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": []}}, "tool_choice", "none, auto, required"),
    ({"max_output_tokens": 10**6}, "max_output_tokens", "max_output_tokens"),
    ({"truncation": "auto"}, "truncation", ""),
    ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema", "needs its schema"),
    ({"seed": 3}, "seed", "unknown field"),
    ({"input": ""}, "input", "input is empty"),
    ({"tool_choice": "any"}, "tool_choice", "give none, auto, required"),
    ({"include": ["message.output_text.logprobs"]}, "include", "/v1/chat/completions"),
]


@pytest.mark.parametrize("change,param,words", BAD, ids=[p for _, p, _ in BAD])
def test_bad_input_is_a_400_naming_the_field_before_anything_runs(serve, change, param, words):
    gen = RecordingGenerator(ScriptedGenerator(model_name="scripted"))
    client = serve(gen)
    body = {"model": "tool_vote-4/scripted", "input": "What time is it in Tokyo?", **change}
    with pytest.raises(openai.BadRequestError) as err:
        client.post("/responses", body=body, cast_to=object)
    error = err.value.body
    assert error["param"] == param and words in error["message"] and "\n" not in error["message"], error
    assert gen.requests == []


def test_a_strategy_the_operator_did_not_allow_is_a_404_and_the_schema_describes_the_endpoint(serve):
    client = serve(ScriptedGenerator(model_name="scripted"))
    with pytest.raises(openai.NotFoundError) as err:
        client.responses.create(model="nope-4/scripted", input="hi")
    assert err.value.body["param"] == "model"
    schema = httpx.get(str(client.base_url).rstrip("/").removesuffix("/v1") + "/openapi.json").json()
    post = schema["paths"]["/v1/responses"]["post"]
    assert post["responses"]["200"]["content"]["text/event-stream"]["schema"]["$ref"].endswith("/ResponseStreamEvent")
    assert post["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("/ResponsesRequest")


# --- the docs' example ------------------------------------------------------------------------------

SECTION = "## Responses API"


def test_the_docs_responses_example_runs_against_tts_serve(serve, monkeypatch, capsys):
    """The python block of docs/serving.md's Responses API section, run as written against a live
    server on the scripted model (the snippet reads ``TTS_BASE_URL``)."""
    text = (ROOT / "docs" / "serving.md").read_text()
    assert SECTION + "\n" in text, f"docs/serving.md lost its section {SECTION!r}"
    body = text.split(SECTION + "\n", 1)[1].split("\n## ", 1)[0]
    [snippet] = re.findall(r"```python\n(.*?)```", body, flags=re.DOTALL)
    [model] = set(re.findall(r'"tool_vote-\d+/([\w.-]+)"', snippet))
    client = serve(ScriptedGenerator(model_name=model))
    monkeypatch.setenv("TTS_BASE_URL", str(client.base_url))
    exec(compile(snippet, "<docs/serving.md Responses API>", "exec"), {"__name__": "__docs__"})  # noqa: S102 - the docs, run as written
    printed = capsys.readouterr().out
    assert "18C and sunny in Paris" in printed, printed
