"""tts serve over real HTTP on 127.0.0.1, driven by the official openai client (sync, async, streaming),
on the scripted backend: answers, usage of every internal token, the tts extension, refusals with
the right 4xx, limits, API key, client disconnects, tool calls, metrics and health."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from typing import Any, ClassVar

import httpx
import openai
import pytest

from tests.fakes import WatchedScripted
from tts.search.base import Strategy
from tts.serve import ServeConfig, create_app
from tts.serve.server import ServerThread
from tts.session import Session

pytestmark = pytest.mark.timeout(60)
KEY = "test-key-123"


def _serve(delay: float = 0.0, **config: Any):
    gen = WatchedScripted(default={"42": 0.7, "41": 0.2}, seed=0, delay=delay, model_name="scripted")
    session = Session(generator=gen, price_as="smollm2-135m", max_tokens=256, batch_window=0.02)
    settings = {"model": "scripted", "api_key": KEY, "max_budget_tokens": 100_000, **config}
    server = ServerThread(create_app(session, ServeConfig(**{"prompt": "math", **settings}))).start()
    return gen, session, server


@pytest.fixture(scope="module")
def served():
    gen, session, server = _serve()
    yield gen, session, server
    server.stop()
    session.close()


@pytest.fixture
def client(served):
    return openai.OpenAI(base_url=served[2].url, api_key=KEY, timeout=20, max_retries=0)


def _ask(client, model="sc-8/scripted", **kw):
    return client.chat.completions.create(model=model, messages=[{"role": "user", "content": "What is 6 * 7?"}], **kw)


def test_chat_answer_with_usage_of_every_internal_token_and_the_tts_extension(client):
    r = _ask(client)
    ext = r.model_extra["tts"]
    assert r.choices[0].message.content.endswith("\\boxed{42}.") and ext["answer"] == "42"
    assert r.choices[0].finish_reason == "stop" and r.object == "chat.completion"
    assert len(ext["answers"]) == 8 and 0.4 < ext["confidence"] <= 1 and ext["strategy"] == "self_consistency@8"
    # usage counts all 8 samples, not just the one returned
    assert r.usage.completion_tokens == ext["cost"]["completion_tokens"] > len(r.choices[0].message.content.split())
    assert r.usage.total_tokens == ext["cost"]["tokens"] == r.usage.prompt_tokens + r.usage.completion_tokens
    assert ext["cost"]["dollars"] > 0 and ext["cost"]["eflops"] > 0


def test_a_search_strategy_counts_the_tokens_of_all_its_steps(client):
    r = _ask(client, model="beam-2x4/scripted")
    cost = r.choices[0].model_extra["tts"]["cost"]
    assert r.model_extra["tts"]["strategy"].startswith("beam@4") and cost["calls"] > 2  # several steps
    assert r.usage.prompt_tokens == cost["prompt_tokens"] and r.usage.completion_tokens == cost["completion_tokens"]


def test_strategy_n_and_budget_from_the_tts_object(client):
    r = _ask(client, model="scripted", n=2, extra_body={"tts": {"strategy": "bon", "n": 3, "answer_only": True,
                                                                "budget": {"tokens": 2000}}})
    assert len(r.choices) == 2 and all(c.message.content in ("42", "41", "") for c in r.choices)
    ext = r.choices[0].model_extra["tts"]
    assert ext["strategy"].startswith("best_of_n@3") and len(ext["answers"]) == 3
    assert ext["budget"] == {"amount": 2000, "unit": "tokens", "as_tokens": 2000, "n_asked": 3, "n_drawn": 3}
    assert r.usage.completion_tokens == sum(c.model_extra["tts"]["cost"]["completion_tokens"] for c in r.choices)


def test_async_client_concurrent_requests_share_engine_calls(served):
    gen, session, server = served

    async def run():
        client = openai.AsyncOpenAI(base_url=server.url, api_key=KEY, timeout=20, max_retries=0)
        return await asyncio.gather(*[client.chat.completions.create(
            model="sc-4/scripted", messages=[{"role": "user", "content": f"Question {i}"}]) for i in range(40)])

    before = session.stats["engine_calls"]
    out = asyncio.run(run())
    assert len({r.id for r in out}) == 40 and all(len(r.model_extra["tts"]["answers"]) == 4 for r in out)
    assert session.stats["engine_calls"] - before < 20  # 40 requests, batched


def test_streaming_sends_progress_then_the_answer_then_usage(client):
    chunks = list(_ask(client, model="beam-2x4/scripted", stream=True, stream_options={"include_usage": True}))
    events = [(c.model_extra or {}).get("tts", {}).get("event") for c in chunks]
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert events.count("progress") >= 2 and events.index("progress") < events.index("answer")
    assert content.endswith("}.") and chunks[-1].choices == [] and chunks[-1].usage.total_tokens > 0
    progress = [c.model_extra["tts"] for c in chunks if (c.model_extra or {}).get("tts", {}).get("event") == "progress"]
    assert [p["step"] for p in progress] == list(range(1, len(progress) + 1))
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish == ["stop"]


def test_streaming_with_the_async_client(served):
    async def run():
        client = openai.AsyncOpenAI(base_url=served[2].url, api_key=KEY, timeout=20, max_retries=0)
        stream = await client.chat.completions.create(model="sc-4/scripted", stream=True,
                                                      messages=[{"role": "user", "content": "6*7?"}])
        return [c async for c in stream]

    chunks = asyncio.run(run())
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices).endswith("}.")
    assert all(c.usage is None for c in chunks)  # no stream_options.include_usage: no usage (OpenAI's rule)


def test_completions_endpoint_answers_each_prompt(client):
    r = client.completions.create(model="sc-4/scripted", prompt=["What is 6*7?", "What is 40+2?"],
                                  extra_body={"tts": {"answer_only": True}})
    assert [c.index for c in r.choices] == [0, 1] and r.object == "text_completion"
    assert r.usage.completion_tokens == sum(c.model_extra["tts"]["cost"]["completion_tokens"] for c in r.choices)


def test_models_health_and_metrics(served, client):
    ids = [m.id for m in client.models.list()]
    assert "scripted" in ids and "sc-8/scripted" in ids and "beam-4x8/scripted" in ids
    base = served[2].url.removesuffix("/v1")
    assert httpx.get(f"{base}/health").json()["status"] == "ok"
    _ask(client)
    text = httpx.get(f"{base}/metrics").text
    assert "# TYPE tts_http_requests_total counter" in text
    assert 'tts_http_requests_total{endpoint="/v1/chat/completions",status="200"}' in text
    assert "tts_engine_calls_total" in text and 'tts_request_seconds_bucket{endpoint="/v1/chat/completions",le="+Inf"}' in text
    tokens = [line for line in text.splitlines() if line.startswith('tts_tokens_total{kind="completion"}')]
    assert tokens and float(tokens[0].split()[-1]) > 0


@pytest.mark.parametrize(("kwargs", "status", "says"), [
    ({"model": "sc-8/other"}, 404, "is not served here; this server serves 'scripted'"),
    ({"model": "majority-3/scripted"}, 404, "unknown strategy 'majority'"),
    ({"model": "scripted", "extra_body": {"tts": {"strategy": "nope"}}}, 400, "unknown strategy 'nope'"),
    ({"model": "sc-8/scripted", "n": 0}, 400, "must be between 1 and 8 on this server"),
    ({"model": "sc-8/scripted", "n": 9}, 400, "must be between 1 and 8 on this server"),
    ({"model": "sc-100/scripted"}, 400, "over this server's limit of 64; lower n"),
    ({"model": "sc-8/scripted", "max_tokens": 100000}, 400, "max_tokens=100000 is over this server's limit"),
    ({"model": "sc-8/scripted", "extra_body": {"tts": {"budget": {"tokens": 10**9}}}}, 400,
     "over this server's limit of 100000 per request; lower the budget"),
    ({"model": "sc-8/scripted", "extra_body": {"tts": {"budget": {"dollars": 1e-12}}}}, 400,
     "does not cover one sample"),
    ({"model": "sc-8/scripted", "extra_body": {"tts": {"budget": {"yen": 3}}}}, 400, "unit 'yen' is unknown"),
    ({"model": "sc-8/scripted", "extra_body": {"colour": "red"}}, 400, "unknown field 'colour'; remove it"),
    ({"model": "beam-4x8/scripted", "extra_body": {"tts": {"budget": 300}}}, 400, "lower n, max_depth or step_tokens"),
])
def test_bad_requests_get_the_right_4xx_with_what_to_change(client, kwargs, status, says):
    with pytest.raises(openai.APIStatusError) as err:
        client.chat.completions.create(messages=[{"role": "user", "content": "6*7?"}], **kwargs)
    assert err.value.status_code == status and says in err.value.message, err.value.message
    assert _ask(client).model_extra["tts"]["answer"] is not None  # the server keeps serving others


def test_malformed_json_a_wrong_key_and_an_oversized_body(served):
    url = served[2].url
    auth = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    r = httpx.post(f"{url}/chat/completions", content=b'{"model": "scripted", "messages": [', headers=auth)
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]
    r = httpx.post(f"{url}/chat/completions", content=b"[1, 2]", headers=auth)
    assert r.status_code == 400 and "must be a JSON object" in r.json()["error"]["message"]
    r = httpx.post(f"{url}/chat/completions", json={"model": "scripted"}, headers=auth)
    assert r.status_code == 400 and "'messages' is required" in r.json()["error"]["message"]
    with pytest.raises(openai.AuthenticationError, match="missing or wrong API key"):
        _ask(openai.OpenAI(base_url=url, api_key="test-key-124", max_retries=0))
    assert httpx.get(f"{url}/models").status_code == 401
    big = {"model": "scripted", "messages": [{"role": "user", "content": "x" * (2 << 20)}]}
    r = httpx.post(f"{url}/chat/completions", json=big, headers=auth)
    assert r.status_code == 413 and "over this server's limit" in r.json()["error"]["message"]


def test_past_the_concurrency_limit_requests_get_429_with_retry_after():
    gen, session, server = _serve(delay=0.5, max_concurrent=2)
    try:
        async def run():
            client = openai.AsyncOpenAI(base_url=server.url, api_key=KEY, timeout=20, max_retries=0)
            return await asyncio.gather(*[client.chat.completions.create(
                model="sc-2/scripted", messages=[{"role": "user", "content": "q"}]) for _ in range(5)],
                return_exceptions=True)

        out = asyncio.run(run())
        refused = [r for r in out if isinstance(r, openai.RateLimitError)]
        answered = [r for r in out if not isinstance(r, Exception)]
        assert len(answered) == 2 and len(refused) == 3
        assert refused[0].response.headers["retry-after"] == "1" and "retry after 1 s" in refused[0].message
    finally:
        server.stop()
        session.close()


def test_a_client_that_disconnects_cancels_its_sampling():
    gen, session, server = _serve(delay=0.3)
    try:
        client = openai.OpenAI(base_url=server.url, api_key=KEY, timeout=0.5, max_retries=0)
        with pytest.raises(openai.APITimeoutError):
            _ask(client, model="beam-2x4/scripted")  # several 0.3 s steps; the client leaves after 0.5 s
        time.sleep(1.0)
        calls = len(gen.calls)
        time.sleep(0.8)
        assert len(gen.calls) == calls <= 4  # no step after the cancel took effect
        assert session.stats["cancelled"] == 1 and session.stats["solves"] == 0
        metrics = httpx.get(f"{server.url.removesuffix('/v1')}/metrics").text
        assert "tts_client_disconnects_total 1" in metrics
    finally:
        server.stop()
        session.close()


class _ToolPicker(Strategy):
    """A test strategy that follows the tool-call convention: it reads ``Problem.metadata["tools"]``
    and answers with the canonical JSON of the call it chose (here: the first tool)."""

    name = "test_tool_pick"
    takes_tools: ClassVar[bool] = True
    budget_use: ClassVar[str] = "spends_itself"  # two samples of 16 tokens: within any budget the server gives

    def solve(self, problems, budgets=None):
        from tts.backends.base import GenerationRequest
        from tts.types import Solution, Trace

        out = []
        for p in problems:
            (result,) = self.generator.generate([GenerationRequest(self.prompt(p), n=2, max_tokens=16, key=p.id)])
            tool = p.metadata["tools"][0]["function"]["name"]
            answer = json.dumps({"name": tool, "arguments": {"expression": "6*7"}}, sort_keys=True)
            out.append(Solution(p.id, answer, 1.0, result.usage, Trace(self.name, votes={answer: 2.0})))
        return out

    def close(self):
        pass


def test_a_tool_choosing_strategy_answers_with_tool_calls(client):
    from pydantic import Field

    from tts.config import StrategyConfigBase
    from tts.registry import STRATEGIES

    class PickConfig(StrategyConfigBase):
        kind: str = "test_tool_pick"
        n: int = Field(2, ge=1)

    _ToolPicker.config_class = PickConfig
    STRATEGIES.register("test_tool_pick", _ToolPicker)
    try:
        tools = [{"type": "function", "function": {"name": "calculator", "parameters": {"type": "object"}}}]
        r = client.chat.completions.create(model="test_tool_pick/scripted", tools=tools,
                                           messages=[{"role": "user", "content": "What is 6*7? Use a tool."}])
        call = r.choices[0].message.tool_calls[0]
        assert r.choices[0].finish_reason == "tool_calls" and r.choices[0].message.content is None
        assert call.function.name == "calculator" and json.loads(call.function.arguments) == {"expression": "6*7"}
        # a sampling strategy shows the tools, and with no call among its samples answers in text
        r = client.chat.completions.create(model="sc-2/scripted", tools=tools, tool_choice="none",
                                           messages=[{"role": "user", "content": "6*7?"}])
        assert r.choices[0].message.tool_calls is None and r.choices[0].message.content.endswith("}.")
    finally:
        STRATEGIES.unregister("test_tool_pick")


def test_the_tts_serve_command_serves_the_openai_client(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "TTS_API_KEY": "from-env", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "tts.cli", "serve", "--backend", "scripted", "--port", str(port),
                             "--prompt", "math"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="from-env", timeout=10, max_retries=0)
        deadline = time.monotonic() + 30
        while True:
            try:
                r = _ask(client, model="sc-4/scripted")
                break
            except openai.APIConnectionError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read().decode()[-2000:]
                time.sleep(0.2)
        assert r.model_extra["tts"]["answer"] in ("42", "41", "43")
    finally:
        proc.terminate()
        proc.wait(10)


def test_tool_vote_answers_an_agent_with_the_voted_tool_call():
    """The real tool_vote strategy behind the server: replies that call a tool are voted on and the
    winner comes back as ``message.tool_calls`` (the convention shared with tool_vote)."""
    from tts.backends.base import Completion
    from tts.backends.function import FunctionGenerator
    from tts.registry import STRATEGIES

    if "tool_vote" not in STRATEGIES.names():
        pytest.skip("strategy tool_vote is not registered in this checkout")

    def tool_calls(r):
        """Replies with a tool call; one in four calls another tool."""
        assert "calculator" in r.tools  # the tools were offered to the model
        return [Completion('<tool_call>{"name": "%s", "arguments": {"expression": "6*7"}}</tool_call>'
                           % ("search" if i % 4 == 3 else "calculator"), 20) for i in range(r.n)]

    tools = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
             for n in ("calculator", "search")]
    with Session(generator=FunctionGenerator(tool_calls, model_name="toolbot"), price_as=None) as session, \
            ServerThread(create_app(session, ServeConfig(prompt="math", model="toolbot"))) as server:
        client = openai.OpenAI(base_url=server.url, api_key="x", timeout=20, max_retries=0)
        r = client.chat.completions.create(model="tool_vote-4/toolbot", tools=tools,
                                           messages=[{"role": "user", "content": "What is 6*7?"}])
    call = r.choices[0].message.tool_calls[0]
    assert r.choices[0].finish_reason == "tool_calls" and call.function.name == "calculator"
    assert json.loads(call.function.arguments) == {"expression": "6*7"} and r.usage.completion_tokens == 80
