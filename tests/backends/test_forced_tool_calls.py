"""``tool_choice`` that forces a call on the vLLM backend: decoded under the JSON schema vLLM's own
server uses (structured outputs), read back as that server reads it, checked against the tools."""

from __future__ import annotations

import json

import pytest

from tts.backends.base import GenerationRequest
from tts.backends.chat import Message
from tts.backends.tool_calls import MALFORMED

pytest.importorskip("vllm")
jsonschema = pytest.importorskip("jsonschema")

from tests.tool_chat import TIME_TOOL, WEATHER_TOOL  # noqa: E402
from tts.backends.chat_render import forced_call_schema, forced_tool_choice, read_forced_calls  # noqa: E402

TOOLS = json.dumps([WEATHER_TOOL, TIME_TOOL])
NAMED = json.dumps({"type": "function", "function": {"name": "get_time"}})


def test_what_a_tool_choice_forces():
    assert forced_tool_choice(None) is None
    assert forced_tool_choice('"auto"') is None and forced_tool_choice('"none"') is None
    assert forced_tool_choice('"required"') == "required"
    assert forced_tool_choice(NAMED) == "get_time"


def test_required_admits_only_calls_of_offered_tools_and_no_prose():
    schema = forced_call_schema(TOOLS, '"required"')
    ok = [{"name": "get_time", "parameters": {"city": "Tokyo"}},
          {"name": "get_weather", "parameters": {"city": "Oslo"}}]
    jsonschema.validate(ok, schema)
    for bad in ("It is 14:05 in Tokyo.", [], [{"name": "launch_rockets", "parameters": {}}],
                [{"name": "get_time", "parameters": {}}]):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)
    calls, why = read_forced_calls(json.dumps(ok), TOOLS, '"required"')
    assert why is None and [(c.name, c.args()) for c in calls] == [("get_time", {"city": "Tokyo"}),
                                                                   ("get_weather", {"city": "Oslo"})]


def test_a_named_function_is_its_arguments_and_the_call_carries_its_name():
    schema = forced_call_schema(TOOLS, NAMED)
    jsonschema.validate({"city": "Tokyo"}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({}, schema)
    calls, why = read_forced_calls('{"city": "Tokyo"}', TOOLS, NAMED)
    assert why is None and [(c.name, c.args()) for c in calls] == [("get_time", {"city": "Tokyo"})]
    with pytest.raises(ValueError, match="not offered"):
        forced_call_schema(TOOLS, json.dumps({"type": "function", "function": {"name": "launch_rockets"}}))


def test_a_reply_cut_short_or_missing_an_argument_is_malformed_not_a_call():
    assert read_forced_calls('[{"name": "get_time", "parameters": {"ci', TOOLS, '"required"') == ((), MALFORMED)
    assert read_forced_calls('[{"name": "get_time", "parameters": {}}]', TOOLS, '"required"') == ((), MALFORMED)
    assert read_forced_calls("[]", TOOLS, '"required"') == ((), MALFORMED)


def test_the_vllm_backend_decodes_forced_calls_under_that_schema_and_only_them():
    from tts.backends.vllm import VLLMGenerator
    from tts.config import VLLMBackendConfig

    gen = object.__new__(VLLMGenerator)
    gen.config, gen.on_gpu = VLLMBackendConfig(), False
    ask = (Message("user", "What time is it in Tokyo?"),)
    forced = gen._params(GenerationRequest(ask, tools=TOOLS, tool_choice='"required"'))
    assert forced.structured_outputs.json == forced_call_schema(TOOLS, '"required"')
    named = gen._params(GenerationRequest(ask, tools=TOOLS, tool_choice=NAMED))
    assert named.structured_outputs.json == forced_call_schema(TOOLS, NAMED)
    for choice in (None, '"auto"'):
        assert gen._params(GenerationRequest(ask, tools=TOOLS, tool_choice=choice)).structured_outputs is None
