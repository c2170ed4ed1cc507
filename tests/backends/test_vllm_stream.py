"""VLLMGenerator.stream_samples over a fake vLLM engine: samples in the order they finish, aborts
sent to the engine, usage with the cancelled samples' partial tokens, and an engine left with no
request after a cancel, an abandoned read or a failed step (the real engine: test_vllm_stream_engine)."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest

from tests.fakes import FakeLLM
from tts.backends.base import BackendError, GenerationRequest, Message
from tts.backends.streaming import stream_samples

pytest.importorskip("vllm")


class FakeEngine:
    """Stands in for vLLM's ``LLMEngine``: the k-th request added draws ``lengths[k]`` samples (one
    length each; its ``n`` must match), each one token per step; like vLLM with a CUMULATIVE
    output kind, a step returns one output per sample that advanced, the sample's tokens so far,
    with its finish reason in the step it reaches its length. Records every call."""

    def __init__(self, lengths: list[list[int]], fail_at_step: int | None = None) -> None:
        self.lengths, self.fail_at_step = lengths, fail_at_step
        self.added: list[str] = []
        self.params: list[Any] = []
        self.aborted: list[str] = []
        self.steps = 0
        self.running: dict[str, dict[str, Any]] = {}

    def add_request(self, request_id: str, prompt: dict, params: Any) -> str:
        lengths = self.lengths[len(self.added)]
        assert len(lengths) == params.n, "the test's lengths must match the request's n"
        self.added.append(request_id)
        self.params.append(params)
        self.running[request_id] = {"prompt": list(prompt["prompt_token_ids"]), "lengths": lengths,
                                    "made": [0] * len(lengths), "open": set(range(len(lengths))),
                                    "max_tokens": params.max_tokens}
        return request_id + "-internal"

    def has_unfinished_requests(self) -> bool:
        return bool(self.running)

    def step(self) -> list[Any]:
        self.steps += 1
        if self.steps == self.fail_at_step:
            raise RuntimeError("engine core died")
        outputs = []
        for rid, req in list(self.running.items()):
            for j in sorted(req["open"]):
                req["made"][j] += 1
                made = req["made"][j]
                done = made >= req["lengths"][j]
                if done:
                    req["open"].discard(j)
                finish = None if not done else ("length" if made >= req["max_tokens"] else "stop")
                sample = SimpleNamespace(index=j, text=f"{rid[-1]}{j}", token_ids=[7] * made, cumulative_logprob=None,
                                         logprobs=None, finish_reason=finish, stop_reason=None)
                outputs.append(SimpleNamespace(request_id=rid, outputs=[sample], prompt_token_ids=req["prompt"],
                                               num_cached_tokens=3, finished=not req["open"]))
            if not req["open"]:
                del self.running[rid]
        return outputs

    def abort_request(self, request_ids: list[str]) -> None:
        self.aborted.extend(request_ids)
        for rid in request_ids:
            self.running.pop(rid, None)


class _Tokenizer:
    eos_token_id = 0

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True):
        return " ".join(m["content"] for m in messages)

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [5] * len(text.split())}


def _generator(engine: FakeEngine):
    """A VLLMGenerator over ``engine`` (no real engine starts); its ``generate`` answers from FakeLLM."""
    from tts.backends.vllm import VLLMGenerator
    from tts.config import VLLMBackendConfig

    gen = object.__new__(VLLMGenerator)
    gen.config = VLLMBackendConfig()
    gen.model_name, gen.on_gpu = gen.config.model, False
    llm = FakeLLM([1, 2, 3], "g{i}")
    llm.llm_engine = engine
    gen._llm, gen._tokenizer = llm, _Tokenizer()
    return gen


def _ask(text: str, n: int, **kw: Any) -> GenerationRequest:
    return GenerationRequest((Message("user", text),), n=n, max_tokens=kw.pop("max_tokens", 8), **kw)


A = _ask("six times seven", 4)  # prompt: 3 tokens
B = _ask("name a colour please", 1)  # prompt: 4 tokens


def test_samples_come_in_the_order_they_finish_and_usage_is_generates():
    engine = FakeEngine([[3, 1, 4, 2], [2]])
    gen = _generator(engine)
    with stream_samples(gen, [A, B]) as stream:
        assert stream.live  # the engine's own stream, not one generate call
        seen = [(f.request, f.completion.text, f.completion.completion_tokens) for f in stream]
        a, b = stream.results()
    assert seen == [(0, "01", 1), (0, "03", 2), (1, "10", 2), (0, "00", 3), (0, "02", 4)]
    assert [c.text for c in a.completions] == ["01", "03", "00", "02"]  # finish order
    assert a.completions[0].finish_reason == "stop" and a.completions[0].ended_by_eos
    assert a.usage.completion_tokens == 10 and b.usage.completion_tokens == 2
    assert (a.usage.prompt_tokens, a.usage.cached_prompt_tokens, b.usage.prompt_tokens) == (3, 3, 4)
    assert a.usage.shapes[0].batch_sequences == 5  # as generate: every sequence of the call
    assert a.cancelled == b.cancelled == () and engine.aborted == []
    assert [p.output_kind.name for p in engine.params] == ["CUMULATIVE"] * 2  # each sample's progress, every step
    assert [p.n for p in engine.params] == [4, 1]  # one request of n, fanned out by vLLM
    assert not engine.has_unfinished_requests() and engine.steps == 4


def test_cancel_after_the_first_sample_aborts_the_rest_and_counts_their_partial_tokens():
    engine = FakeEngine([[5, 1, 6, 3], [4, 8]])
    gen = _generator(engine)
    b2 = _ask("name a colour please", 2)
    with stream_samples(gen, [A, b2]) as stream:
        got = []
        for f in stream:
            got.append(f.completion.text)
            stream.cancel()
        a, b = stream.results()
    assert got == ["01"]
    assert sorted(engine.aborted) == sorted(engine.added) and not engine.has_unfinished_requests()
    assert [c.text for c in a.completions] == ["01"] and a.cancelled == (1, 1, 1)  # one step each
    assert a.usage.completion_tokens == 1 + 3 and a.usage.shapes[0].completion_tokens == (1, 1, 1, 1)
    assert b.completions == () and b.cancelled == (1, 1) and b.usage.completion_tokens == 2
    assert b.usage.prompt_tokens == 4  # sent and prefilled before the cancel
    [after] = gen.generate([B])  # the engine is free again
    assert after.completions[0].text == "g0"


def test_cancelling_one_request_leaves_the_others_running():
    engine = FakeEngine([[5, 1, 6, 3], [4]])
    gen = _generator(engine)
    with stream_samples(gen, [A, B]) as stream:
        got = []
        for f in stream:
            got.append((f.request, f.completion.text))
            if f.request == 0:
                stream.cancel([0])
        a, b = stream.results()
    assert got == [(0, "01"), (1, "10")]
    assert engine.aborted == [engine.added[0]]
    assert a.cancelled == (1, 1, 1) and b.cancelled == () and b.usage.completion_tokens == 4


def test_a_reader_that_stops_early_leaves_no_request_in_the_engine():
    engine = FakeEngine([[5, 1, 6, 3]])
    gen = _generator(engine)
    with stream_samples(gen, [A]) as stream:
        for _ in stream:
            break
        [a] = stream.results()
    assert engine.aborted == engine.added and not engine.has_unfinished_requests()
    assert len(a.completions) == 1 and a.cancelled == (1, 1, 1)
    assert gen.generate([B])[0].completions


def test_a_failed_engine_step_aborts_the_stream_and_frees_the_engine():
    engine = FakeEngine([[5, 1, 6, 3]], fail_at_step=2)
    gen = _generator(engine)
    with pytest.raises(RuntimeError, match="engine core died"), stream_samples(gen, [A]) as stream:
        for _ in stream:
            pass
    assert engine.aborted == engine.added and not engine.has_unfinished_requests()
    assert gen.generate([B])[0].completions  # the guard was released


def test_the_engine_serves_one_caller_at_a_time():
    engine = FakeEngine([[2, 1, 3, 2]])
    gen = _generator(engine)
    stream = gen.stream_samples([A])
    it = iter(stream)
    next(it)  # the stream's request is in the engine now
    with pytest.raises(BackendError, match="open sample stream of the same thread"):
        gen.generate([B])  # LLM.generate would step the stream's requests away
    other = threading.Thread(target=gen.generate, args=([B],))
    other.start()
    other.join(0.2)
    assert other.is_alive()  # waits for the stream
    assert len(list(it)) == 3
    other.join(30)
    assert not other.is_alive()


def test_greedy_samples_are_one_engine_sample_yielded_n_times_and_counted_once():
    engine = FakeEngine([[3]])
    gen = _generator(engine)
    with gen.stream_samples([_ask("six times seven", 3, temperature=0.0)]) as stream:
        texts = [f.completion.text for f in stream]
        [r] = stream.results()
    assert texts == ["00"] * 3 and engine.params[0].n == 1
    assert len(r.completions) == 3 and r.usage.completion_tokens == 3
    engine = FakeEngine([[3]])
    with _generator(engine).stream_samples([_ask("six times seven", 3, temperature=0.0)]) as stream:
        for _ in stream:
            stream.cancel()  # a stop after the first copy gets no more copies
        [r] = stream.results()
    assert len(r.completions) == 1 and r.cancelled == () and r.usage.completion_tokens == 3
    assert engine.aborted == []  # the engine had finished it: nothing to abort


def test_a_stream_cancelled_before_it_is_read_sends_nothing():
    engine = FakeEngine([[3, 1, 4, 2]])
    gen = _generator(engine)
    with gen.stream_samples([A]) as stream:
        stream.cancel()
        assert list(stream) == []
        [a] = stream.results()
    assert engine.added == [] and engine.steps == 0
    assert a.completions == () and a.cancelled == (0, 0, 0, 0)
    assert a.usage.completion_tokens == 0 and a.usage.prompt_tokens == 0


def test_results_of_an_unread_stream_read_it_to_the_end():
    engine = FakeEngine([[2, 1, 3, 2]])
    [a] = _generator(engine).stream_samples([A]).results()
    assert [c.completion_tokens for c in a.completions] == [1, 2, 2, 3]
    with pytest.raises(IndexError, match="not in 0..0"):
        _generator(FakeEngine([[1]])).stream_samples([B]).cancel([1])
