"""A fake OpenAI-compatible server for the LiteLLM backend's tests: answers arithmetic with a boxed
answer and token logprobs, calls the first offered tool, reports cached prompt tokens, and fails
on a schedule (``plan``)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable

from tests.fakes import LocalUpstream, chat_completion, read_json_request

ANSWER = "Two and three make five.\n\nThe answer is \\boxed{5}."
PROMPT_TOKENS = 40
CACHED_TOKENS = 32


class ChatUpstream(LocalUpstream):
    """Answers every chat completion (``plan(i)`` for request i: "ok", "single" (one choice whatever
    ``n`` asked), or an HTTP status to fail with)."""

    def __init__(self, plan: Callable[[int], str] = lambda i: "ok") -> None:
        self.plan = plan
        self.bodies: list[dict] = []
        self._lock = threading.Lock()
        super().__init__()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            body = await read_json_request(reader)
            with self._lock:
                mode = self.plan(len(self.bodies))
                self.bodies.append(body)
            if mode in ("ok", "single"):  # "single": one choice whatever n asked for, as some proxies do
                status, payload = 200, self._reply({**body, "n": 1} if mode == "single" else body)
            else:
                status, payload = int(mode), {"error": {"message": f"injected {mode}"}}
            data = json.dumps(payload).encode()
            writer.write(f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n"
                         "Connection: close\r\n\r\n".encode() + data)
            await writer.drain()
            writer.close()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.transport.abort()

    @staticmethod
    def _reply(body: dict) -> dict:
        n = int(body.get("n") or 1)
        top = [{"token": "x", "logprob": -3.0, "bytes": None}][: int(body.get("top_logprobs") or 0)]
        tokens = [{"token": t, "logprob": -0.25, "bytes": None, "top_logprobs": top} for t in ("The", " answer", " 5")]
        reply = chat_completion(body, ANSWER, tokens if body.get("logprobs") else [], PROMPT_TOKENS, n)
        if not body.get("logprobs"):
            for choice in reply["choices"]:
                choice["logprobs"] = None
            reply["usage"]["completion_tokens"] = 3 * n
        reply["usage"]["total_tokens"] = PROMPT_TOKENS + reply["usage"]["completion_tokens"]
        reply["usage"]["prompt_tokens_details"] = {"cached_tokens": CACHED_TOKENS}
        if body.get("tools"):
            tool = body["tools"][0]["function"]["name"]
            for i, choice in enumerate(reply["choices"]):
                choice["message"] = {"role": "assistant", "content": None, "tool_calls": [
                    {"id": f"call_{i}", "type": "function",
                     "function": {"name": tool, "arguments": json.dumps({"city": "Paris"})}}]}
                choice["finish_reason"] = "tool_calls"
        return reply

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._server.close)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
