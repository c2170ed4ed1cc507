"""A reply cut at ``max_tokens`` says so in every backend (``finish_reason == "length"``,
``Completion.truncated``), and a call in a cut reply is no call (issue 48, finding 10)."""

from __future__ import annotations

import json
from types import SimpleNamespace

from tts.backends.base import GenerationRequest, Message
from tts.backends.tool_calls import MALFORMED, NO_CALL

TOOLS = json.dumps([{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city now",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])
ASK = (Message("user", "What is the weather in Paris?"),)
# A whole call in a fenced block, then the reply goes on until max_tokens cuts it: a lenient reader
# finds the call, but the model meant more (another call, or arguments it never wrote).
CALL_THEN_CUT = '```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```\nAnd then I will also ch'


def _vllm_output(text: str, finish_reason: str, stop_reason: object = None) -> SimpleNamespace:
    """A stand-in for vLLM's ``CompletionOutput`` (the fields the backend reads)."""
    return SimpleNamespace(index=0, text=text, token_ids=list(range(len(text.split()))), cumulative_logprob=None,
                           logprobs=None, finish_reason=finish_reason, stop_reason=stop_reason)


def _vllm(output: SimpleNamespace, tools: str | None = None):
    from tts.backends.chat_render import VLLMToolReader
    from tts.backends.vllm import engine_completion

    req = GenerationRequest(ASK, max_tokens=12, tools=tools)
    return engine_completion(output, req, [1, 2, 3], VLLMToolReader(None, None), None)


def test_vllms_length_is_a_truncated_completion_and_its_stop_is_not():
    cut = _vllm(_vllm_output("The weather in Paris is usually mild in the", "length"))
    assert cut.finish_reason == "length" and cut.truncated and cut.ended_by_eos is False
    ended = _vllm(_vllm_output("It is sunny.", "stop"))
    assert ended.finish_reason == "stop" and not ended.truncated and ended.ended_by_eos is True
    at_stop_string = _vllm(_vllm_output("Step one", "stop", stop_reason="\n\n"))
    assert not at_stop_string.truncated and at_stop_string.ended_by_eos is False


def test_a_vllm_reply_cut_after_a_whole_looking_call_holds_no_call():
    whole = _vllm(_vllm_output(CALL_THEN_CUT, "stop"), TOOLS)
    assert [c.name for c in whole.tool_calls] == ["get_weather"]  # the same text, not cut: a call
    cut = _vllm(_vllm_output(CALL_THEN_CUT, "length"), TOOLS)
    assert cut.truncated and cut.tool_calls == () and cut.tool_call_error == MALFORMED
    mid_json = _vllm(_vllm_output('```json\n{"name": "get_weather", "argum', "length"), TOOLS)
    assert mid_json.tool_calls == () and mid_json.tool_call_error == MALFORMED  # began a call: no text answer
    prose = _vllm(_vllm_output("Paris is a city in France where the", "length"), TOOLS)
    assert prose.tool_calls == () and prose.tool_call_error == NO_CALL  # cut prose stays prose


def test_an_upstream_choice_cut_at_length_holds_no_call_whatever_the_server_parsed():
    from tts.backends.openai import OpenAIGenerator

    def response(finish_reason: str) -> SimpleNamespace:
        call = SimpleNamespace(id="call_1", function=SimpleNamespace(name="get_weather", arguments='{"city": "Paris"}'))
        message = SimpleNamespace(content=None, tool_calls=[call])
        return SimpleNamespace(choices=[SimpleNamespace(index=0, message=message, logprobs=None,
                                                        finish_reason=finish_reason)], usage=None)

    req = GenerationRequest(ASK, max_tokens=12, tools=TOOLS)
    [called] = OpenAIGenerator._parse(req, response("tool_calls"), 0.1).completions
    assert [c.name for c in called.tool_calls] == ["get_weather"] and not called.truncated
    [cut] = OpenAIGenerator._parse(req, response("length"), 0.1).completions
    assert cut.truncated and cut.tool_calls == () and cut.tool_call_error == MALFORMED


def test_the_scripted_backend_cuts_a_tool_reply_at_max_tokens():
    from tts.backends.scripted import ScriptedGenerator

    gen = ScriptedGenerator(seed=1)
    [whole] = gen.generate([GenerationRequest(ASK, n=4, max_tokens=256, tools=TOOLS, seed=3)])
    [cut] = gen.generate([GenerationRequest(ASK, n=4, max_tokens=6, tools=TOOLS, seed=3)])  # the same draws
    assert sum(bool(c.tool_calls) for c in whole.completions) == 3
    assert all(not c.truncated and c.ended_by_eos for c in whole.completions)
    for short, full in zip(cut.completions, whole.completions, strict=True):
        assert short.truncated and short.completion_tokens == 6 and short.ended_by_eos is False
        assert full.text.startswith(short.text) and len(short.text) < len(full.text)
        assert short.tool_calls == () and short.tool_call_error == (MALFORMED if full.tool_calls else NO_CALL)
