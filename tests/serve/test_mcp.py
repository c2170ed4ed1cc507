"""``tts mcp``: the ``solve`` tool seen through the official MCP SDK's own client.

Over stdio the client spawns ``python -m tts.cli mcp --backend scripted`` as an agent's MCP host
would; in process it connects to the server object (and over streamable HTTP to a thread serving
it). The scripted backend answers "42" with probability ``accuracy``, so answers, confidences and
costs are known without an engine.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

pytest.importorskip("mcp")

from mcp import Client, StdioServerParameters  # noqa: E402

from tests.fakes import WatchedScripted  # noqa: E402
from tts.backends.scripted import ScriptedGenerator  # noqa: E402
from tts.serve import ServeConfig  # noqa: E402
from tts.serve.mcp import create_mcp_server, http_app  # noqa: E402
from tts.session import Session  # noqa: E402

pytestmark = pytest.mark.timeout(120)


def _stdio(*flags: str) -> StdioServerParameters:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("TTS_API_KEY", None)
    return StdioServerParameters(command=sys.executable, args=["-m", "tts.cli", "mcp", "--backend", "scripted",
                                                               *flags], env=env)


def _error(result: Any) -> str:
    assert result.is_error, result.structured_content
    return result.content[0].text


# --- over stdio, the CLI as an MCP host starts it -------------------------------------------------

def test_stdio_lists_solve_answers_and_refuses_what_the_operator_did_not_allow() -> None:
    flags = ("--accuracy", "0.9", "--allow-strategy", "self_consistency", "--allow-strategy", "best_of_n",
             "--max-samples", "16", "--default-max-tokens", "256", "--strategy", "sc-4", "--prompt", "math")

    async def run() -> None:
        async with Client(_stdio(*flags), read_timeout_seconds=60) as client:
            tools = (await client.list_tools()).tools
            assert [t.name for t in tools] == ["solve"]
            schema = tools[0].input_schema
            assert set(schema["properties"]) == {"question", "strategy", "n", "budget", "budget_unit", "max_tokens",
                                                 "settings", "messages", "tools", "prompt", "stop"}
            assert "best_of_n, self_consistency" in schema["properties"]["strategy"]["description"]
            assert schema["properties"]["n"]["maximum"] == 16
            assert {"answer", "confidence", "cost"} <= set(tools[0].output_schema["properties"])

            ok = await client.call_tool("solve", {"question": "What is 6*7?", "strategy": "self_consistency",
                                                  "n": 8})
            assert not ok.is_error, ok.content
            out = ok.structured_content
            assert out["answer"] == "42" and out["strategy"] == "self_consistency@8" and out["samples"] == 8
            assert out["confidence"] == pytest.approx(out["votes"]["42"] / 8) and 0.5 < out["confidence"] <= 1
            cost = out["cost"]
            assert cost["tokens"] == cost["prompt_tokens"] + cost["completion_tokens"] > 0
            assert cost["calls"] >= 1
            # The scripted backend runs no model: no FLOPs or dollars of a model that did not run.
            assert [cost.get(k) for k in ("eflops", "gpu_seconds", "dollars", "priced_as")] == [None] * 4

            default = (await client.call_tool("solve", {"question": "What is 40+2?"})).structured_content
            assert default["strategy"] == "self_consistency@4"  # the operator's --strategy sc-4

            text = _error(await client.call_tool("solve", {"question": "q", "strategy": "beam"}))
            assert "strategy 'beam' is not offered on this server; use one of best_of_n, self_consistency" in text
            text = _error(await client.call_tool("solve", {"question": "q", "strategy": "majority"}))
            assert "unknown strategy 'majority'; this server offers best_of_n, self_consistency" in text
            text = _error(await client.call_tool("solve", {"question": "q", "n": 17}))
            assert "n=17 is over this server's limit of 16 samples per call" in text
            text = _error(await client.call_tool("solve", {"question": "q", "strategy": "sc-32"}))
            assert "n=32 is over this server's limit of 16" in text

    asyncio.run(run())


def test_stdio_handshake_era_client_and_budget_in_tokens() -> None:
    """A client on the initialize handshake (the pre-2026 protocol most hosts speak) gets the same
    tool; a budget of two worst-case samples caps the samples drawn and the tokens spent; --price-as
    prices the scripted backend's tokens as the model it names."""

    async def run() -> None:
        async with Client(_stdio("--default-max-tokens", "256", "--prompt", "math", "--price-as", "smollm2-135m"),
                          mode="legacy", read_timeout_seconds=60) as client:
            out = (await client.call_tool("solve", {"question": "What is 6*7?", "strategy": "self_consistency",
                                                    "n": 16, "budget": 512})).structured_content
            assert 1 <= out["samples"] <= 2 and out["cost"]["completion_tokens"] <= 512
            # Priced only because the operator named a model, and labelled as that model.
            assert out["cost"]["priced_as"] == "smollm2-135m" and out["cost"]["eflops"] > 0
            assert out["answer"] in ("42", "41", "43", None)

    asyncio.run(run())


def test_stdio_refuses_a_bad_operator_setting_before_serving() -> None:
    proc = subprocess.run([sys.executable, "-m", "tts.cli", "mcp", "--backend", "scripted", "--allow-strategy",
                           "beam", "--strategy", "sc-8"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"}, stdin=subprocess.DEVNULL)
    assert proc.returncode != 0
    assert "default strategy 'sc-8'" in proc.stderr and "not offered" in proc.stderr
    assert proc.stdout == ""  # nothing on the protocol channel


def test_stdout_to_stderr_keeps_the_protocol_channel_clean() -> None:
    """An engine started inside the block (its logs and its worker processes' output) writes to
    stderr; stdout carries only what is written after the block."""
    code = ("import os, subprocess, sys\n"
            "from tts.serve.mcp import stdout_to_stderr\n"
            "with stdout_to_stderr():\n"
            "    print('py-noise', flush=True)\n"
            "    child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(0.3); print(\"late\")'])\n"
            "print('wire', flush=True)\n"
            "child.wait()\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "wire\n"
    assert "py-noise" in proc.stderr and "late" in proc.stderr


# --- in process: the policy, the shared session, the limits ----------------------------------------

def _server(**config: Any) -> tuple[Session, Any, WatchedScripted]:
    gen = WatchedScripted(default={"42": 0.8, "41": 0.1}, seed=0, model_name="scripted")
    session = Session(generator=gen, price_as="smollm2-135m", max_tokens=256, batch_window=0.05)
    settings = {"model": "scripted", "max_samples": 16, **config}
    return session, create_mcp_server(session, ServeConfig(**{"prompt": "math", **settings})), gen


def test_settings_name_only_what_the_operator_offers() -> None:
    session, server, _ = _server(verifiers={"prm7b": {"kind": "prm", "model": "/models/prm"}}, max_tokens=512,
                                 max_budget_tokens=1000)

    async def run() -> None:
        async with Client(server) as client:
            schema = (await client.list_tools()).tools[0].input_schema
            assert "prm7b" in schema["properties"]["settings"]["description"]
            ok = await client.call_tool("solve", {"question": "What is 6*7?", "strategy": "best_of_n", "n": 4,
                                                  "settings": {"verifier": "self_certainty"}})
            assert not ok.is_error and ok.structured_content["strategy"].startswith("best_of_n")
            cases = [
                ({"strategy": "best_of_n", "settings": {"verifier": "/models/other-prm"}},
                 "settings.verifier: '/models/other-prm' is not a verifier this server offers; use one of "
                 "arithmetic, judge, logprob, prm7b, self_certainty"),
                ({"strategy": "best_of_n", "settings": {"verifier": {"kind": "prm7b", "model": "/tmp/x"}}},
                 "does not let requests set model"),
                ({"strategy": "beam", "settings": {"step_separator": "{__import__}"}},
                 "does not let requests set step_separator"),
                ({"settings": {"kind": "beam"}}, "name the strategy in 'strategy'"),
                ({"max_tokens": 513}, "max_tokens=513 is over this server's limit of 512 tokens per sample"),
                ({"budget": 2000}, "allows 2000 generated tokens, over this server's limit of 1000 per call"),
                ({"budget": 0.01, "budget_unit": "dollars"}, "over this server's limit of 1000 per call"),
                ({"budget": 100}, "does not cover one sample of up to 256 tokens"),
            ]
            for args, expected in cases:
                assert expected in _error(await client.call_tool("solve", {"question": "q", **args})), args
            refused = await client.call_tool("solve", {"question": "q", "n": 0})
            assert refused.is_error and "n" in refused.content[0].text

    try:
        asyncio.run(run())
    finally:
        session.close()


def test_calls_share_one_warm_session_and_its_batched_engine_calls() -> None:
    session, server, gen = _server()
    gen.delay = 0.1  # an engine call takes time, as a real one does: calls arriving meanwhile join the next

    async def run() -> list[Any]:
        async with Client(server) as client:
            calls = [client.call_tool("solve", {"question": f"Question {i}", "n": 4}) for i in range(8)]
            return await asyncio.gather(*calls)

    try:
        results = asyncio.run(run())
    finally:
        session.close()
    assert all(not r.is_error for r in results)
    assert session.stats["solves"] == 8
    assert len(gen.calls) < 8  # concurrent calls joined engine calls instead of one engine call each


def test_calls_past_max_concurrent_are_refused_not_queued() -> None:
    session, server, gen = _server(max_concurrent=1)
    gen.gate = threading.Event()

    async def run() -> tuple[Any, Any]:
        async with Client(server) as client:
            first = asyncio.ensure_future(client.call_tool("solve", {"question": "slow", "n": 2}))
            while session.batcher.active == 0:  # the first call is inside the engine
                await asyncio.sleep(0.01)
            second = await client.call_tool("solve", {"question": "refused", "n": 2})
            gen.gate.set()
            return await first, second

    try:
        first, second = asyncio.run(run())
    finally:
        gen.gate.set()
        session.close()
    assert not first.is_error
    assert "solving 1 calls already, its limit; retry in a moment" in _error(second)


def test_a_default_strategy_the_operator_did_not_allow_is_refused_at_start() -> None:
    gen = ScriptedGenerator(default={"42": 1.0}, seed=0, model_name="scripted")
    with Session(generator=gen, price_as=None) as session, pytest.raises(ValueError, match="not offered"):
        create_mcp_server(session, ServeConfig(prompt="math", model="scripted", strategies=("beam",), default_strategy="sc-8"))


# --- streamable HTTP, in process ------------------------------------------------------------------

def test_streamable_http_with_api_key() -> None:
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    from tts.serve.server import ServerThread

    session, server, _ = _server()
    app = http_app(server, api_key="k-123")
    try:
        with ServerThread(app) as thread:
            url = f"http://{thread.host}:{thread.port}/mcp"
            refused = httpx2.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, timeout=10)
            assert refused.status_code == 401 and "API key" in refused.text

            async def run() -> Any:
                async with httpx2.AsyncClient(headers={"Authorization": "Bearer k-123"}, timeout=30) as http:
                    async with Client(streamable_http_client(url, http_client=http)) as client:
                        assert [t.name for t in (await client.list_tools()).tools] == ["solve"]
                        return await client.call_tool("solve", {"question": "What is 6*7?", "n": 4})

            t0 = time.monotonic()
            result = asyncio.run(run())
            assert time.monotonic() - t0 < 60
    finally:
        session.close()
    assert not result.is_error and result.structured_content["samples"] == 4
    assert result.structured_content["cost"]["tokens"] > 0


def test_a_client_that_cancels_a_call_stops_its_solve() -> None:
    session, server, gen = _server()
    gen.gate = threading.Event()

    async def run() -> None:
        async with Client(server) as client:
            call = asyncio.ensure_future(client.call_tool("solve", {"question": "slow", "n": 2}))
            while session.batcher.active == 0:
                await asyncio.sleep(0.01)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            gen.gate.set()
            deadline = time.monotonic() + 10
            while session.stats["cancelled"] == 0 and time.monotonic() < deadline:
                await asyncio.sleep(0.02)

    try:
        asyncio.run(run())
    finally:
        gen.gate.set()
        session.close()
    assert session.stats["cancelled"] == 1 and session.stats["solves"] == 0


def test_cli_over_streamable_http() -> None:
    import socket

    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TTS_API_KEY": "k-env"}
    proc = subprocess.Popen([sys.executable, "-m", "tts.cli", "mcp", "--backend", "scripted", "--transport", "http",
                             "--port", str(port), "--allow-strategy", "best_of_n"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/mcp"

    async def run() -> Any:
        async with httpx2.AsyncClient(headers={"Authorization": "Bearer k-env"}, timeout=30) as http:
            async with Client(streamable_http_client(url, http_client=http)) as client:
                return await client.call_tool("solve", {"question": "What is 6*7?", "n": 4})

    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx2.post(url, json={}, timeout=5).status_code == 401:  # up, and the key from the env holds
                    break
            except httpx2.TransportError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read().decode()[-2000:]
            time.sleep(0.2)
        result = asyncio.run(run())
    finally:
        proc.terminate()
        proc.wait(20)
    assert not result.is_error, result.content
    assert result.structured_content["strategy"] == "best_of_n@4"  # the default: the first allowed strategy


def test_solve_takes_messages_and_tools_and_returns_the_calls_then_the_text() -> None:
    """An agent's loop over MCP (issue 33): the conversation and the tools go in, the chosen reply's
    tool calls come back; with the tool's result in the conversation, the chosen text comes back.
    A strategy that cannot show the model tools is refused, not run without them."""
    gen = ScriptedGenerator(seed=0, model_name="scripted")
    session = Session(generator=gen, price_as=None, max_tokens=128, batch_window=0.0)
    server = create_mcp_server(session, ServeConfig(model="scripted", max_samples=16))
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    chat = [{"role": "user", "content": "What is the weather in Paris?"}]

    async def run() -> None:
        async with Client(server) as client:
            first = await client.call_tool("solve", {"messages": chat, "tools": tools, "strategy": "tool_vote-4"})
            assert not first.is_error, first.content
            calls = first.structured_content["tool_calls"]
            assert [c["function"]["name"] for c in calls] == ["get_weather"] and first.structured_content["text"] is None
            chat2 = [*chat, {"role": "assistant", "content": None, "tool_calls": calls},
                     {"role": "tool", "tool_call_id": calls[0]["id"], "content": "18C and sunny"}]
            second = (await client.call_tool("solve", {"messages": chat2, "tools": tools, "strategy": "sc-4"}))
            out = second.structured_content
            assert out["tool_calls"] == [] and "18C and sunny" in out["text"] and out["answer"] == out["text"]
            refused = _error(await client.call_tool("solve", {"messages": chat, "tools": tools, "strategy": "beam"}))
            assert "cannot show the model tools" in refused

    try:
        asyncio.run(run())
    finally:
        session.close()


def test_a_stop_settles_a_call_early_and_refuses_a_strategy_that_cannot_stop() -> None:
    """``stop`` on the tool: the scripted model answers 42 nine times in ten, so a horizon stop
    settles long before 64 samples; the operator's default stop applies unless a call says false;
    beam cannot stop and is refused naming those that can."""
    session, server, _ = _server(stop={"rule": "beta", "wave": 4}, max_samples=64)

    async def run() -> None:
        async with Client(server) as client:
            schema = (await client.list_tools()).tools[0].input_schema
            assert "settled" in schema["properties"]["stop"]["description"]
            early = await client.call_tool("solve", {"question": "What is 6*7?", "strategy": "sc-64",
                                                     "stop": "horizon"})
            stop = early.structured_content["stop"]
            assert (stop["rule"], stop["n"]) == ("horizon", 64) and stop["drawn"] < 32
            assert early.structured_content["samples"] == stop["drawn"]
            default = (await client.call_tool("solve", {"question": "What is 6*7?", "strategy": "sc-16"})).structured_content
            assert (default["stop"]["rule"], default["stop"]["wave"]) == ("beta", 4)
            off = (await client.call_tool("solve", {"question": "What is 6*7?", "strategy": "sc-16", "stop": False}))
            assert off.structured_content["stop"] is None and off.structured_content["samples"] == 16
            refused = await client.call_tool("solve", {"question": "q", "strategy": "beam", "stop": "horizon"})
            assert "cannot stop a request early" in _error(refused) and "self_consistency" in _error(refused)
            # false on a strategy that never stops early asks for what it does anyway: accepted, as tts serve does
            beam = await client.call_tool("solve", {"question": "What is 6*7?", "strategy": "beam", "n": 2,
                                                    "stop": False})
            assert not beam.is_error and beam.structured_content["stop"] is None

    try:
        asyncio.run(run())
    finally:
        session.close()
