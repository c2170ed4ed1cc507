"""A fake OpenAI-compatible upstream that streams (SSE) scripted traces and counts its open streams.

Each request's choices are :class:`Trace` objects from a function of the request body; a streamed
request gets one token per choice per step (``tokens_per_chunk`` tokens per chunk), the shorter
choices finishing first, then the usage and ``[DONE]``; a plain request gets the whole completion.
Like vLLM's server, it stops generating a stream once the client has gone away (its socket reads
end of file) unless ``ignore_close``: then it keeps "generating" to the end of the trace.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tests.fakes import LocalUpstream, read_json_request

PROMPT_TOKENS = 11


@dataclass(frozen=True)
class Trace:
    """One choice: its tokens, their logprobs, each position's top (token, logprob) pairs, how many
    leading tokens are reasoning (sent as ``reasoning_content``), and its finish reason."""

    tokens: tuple[str, ...]
    logprobs: tuple[float, ...]
    top: tuple[tuple[tuple[str, float], ...], ...]
    reasoning: int = 0
    finish: str = "stop"
    calls: tuple[tuple[str, str], ...] = ()  # (name, JSON arguments) of the tool calls, streamed in two halves

    def entry(self, i: int, k: int) -> dict:
        return {"token": self.tokens[i], "logprob": self.logprobs[i], "bytes": None,
                "top_logprobs": [{"token": t, "logprob": lp, "bytes": None} for t, lp in self.top[i][:k]]}


class StreamingUpstream(LocalUpstream):
    """The fake (see the module docstring). ``traces(body) -> one Trace per choice``."""

    def __init__(self, traces: Callable[[dict], Sequence[Trace]], delay: float = 0.0, ignore_close: bool = False,
                 tokens_per_chunk: int = 1, single_choice: bool = False) -> None:
        self.traces = traces
        self.delay = delay
        self.ignore_close = ignore_close
        self.tokens_per_chunk = tokens_per_chunk
        self.single_choice = single_choice
        self.bodies: list[dict] = []
        self.open_streams = 0
        self.most_open = 0
        self.sent = 0  # tokens written to clients
        self.sent_by: list[int] = []  # per streamed request, in arrival order
        self.closed_by_client = 0  # streams the client closed before their end
        self._lock = threading.Lock()
        super().__init__()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            body = await read_json_request(reader)
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.transport.abort()
            return
        with self._lock:
            self.bodies.append(body)
        traces = list(self.traces(body))[: 1 if self.single_choice else None]
        if not body.get("stream"):
            payload = json.dumps(self._whole(body, traces)).encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                         + f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
            await writer.drain()
            writer.close()
            return
        with self._lock:
            self.open_streams += 1
            self.most_open = max(self.most_open, self.open_streams)
            number = len(self.sent_by)
            self.sent_by.append(0)
        try:
            await self._stream(body, traces, reader, writer, number)
        finally:
            with self._lock:
                self.open_streams -= 1
            writer.transport.abort()

    async def _stream(self, body: dict, traces: list[Trace], reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter, number: int) -> None:
        k = int(body.get("top_logprobs") or 0)
        gone = False

        async def send(event: str) -> None:
            nonlocal gone
            if gone:
                return
            data = f"data: {event}\n\n".encode()
            try:
                writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                await writer.drain()
            except (ConnectionError, RuntimeError):
                gone = True

        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
                     b"Connection: close\r\n\r\n")
        await send(json.dumps(_chunk([{"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                                       "finish_reason": None} for i in range(len(traces))])))
        step = self.tokens_per_chunk
        for start in range(0, max((len(t.tokens) for t in traces), default=0), step):
            for i, t in enumerate(traces):
                part = range(start, min(start + step, len(t.tokens)))
                if not part:
                    continue
                reasoning = "".join(t.tokens[j] for j in part if j < t.reasoning)
                content = "".join(t.tokens[j] for j in part if j >= t.reasoning)
                delta = {"reasoning_content": reasoning} if reasoning else {}
                if content or not reasoning:
                    delta["content"] = content
                last = part[-1] == len(t.tokens) - 1
                if last:
                    for c, (name, args) in enumerate(t.calls):
                        half = len(args) // 2
                        for piece in ({"index": c, "id": f"call_{c}", "type": "function",
                                       "function": {"name": name, "arguments": args[:half]}},
                                      {"index": c, "function": {"arguments": args[half:]}}):
                            await send(json.dumps(_chunk([{"index": i, "delta": {"tool_calls": [piece]},
                                                           "logprobs": None, "finish_reason": None}])))
                await send(json.dumps(_chunk([{"index": i, "delta": delta,
                                               "logprobs": {"content": [t.entry(j, k) for j in part]},
                                               "finish_reason": t.finish if last else None}])))
                if not gone:
                    with self._lock:
                        self.sent += len(part)
                        self.sent_by[number] += len(part)
            await asyncio.sleep(self.delay)
            if (gone or reader.at_eof()) and not self.ignore_close:
                with self._lock:
                    self.closed_by_client += 1
                return
        completion = sum(len(t.tokens) for t in traces)
        await send(json.dumps(_chunk([], usage={"prompt_tokens": PROMPT_TOKENS, "completion_tokens": completion,
                                                "total_tokens": PROMPT_TOKENS + completion})))
        await send("[DONE]")
        if not gone:
            writer.write(b"0\r\n\r\n")
            await writer.drain()

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._server.close)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    @staticmethod
    def _whole(body: dict, traces: list[Trace]) -> dict:
        k = int(body.get("top_logprobs") or 0)
        choices = []
        for i, t in enumerate(traces):
            message = {"role": "assistant", "content": "".join(t.tokens[t.reasoning:])}
            if t.reasoning:
                message["reasoning_content"] = "".join(t.tokens[: t.reasoning])
            if t.calls:
                message["tool_calls"] = [{"id": f"call_{c}", "type": "function",
                                          "function": {"name": name, "arguments": args}}
                                         for c, (name, args) in enumerate(t.calls)]
            choices.append({"index": i, "message": message, "finish_reason": t.finish,
                            "logprobs": {"content": [t.entry(j, k) for j in range(len(t.tokens))]}})
        completion = sum(len(t.tokens) for t in traces)
        return {"id": "x", "object": "chat.completion", "created": 0, "model": body.get("model", "m"),
                "choices": choices, "usage": {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": completion,
                                              "total_tokens": PROMPT_TOKENS + completion}}


def _chunk(choices: list[dict], usage: dict | None = None) -> dict:
    return {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m", "choices": choices,
            "usage": usage}
