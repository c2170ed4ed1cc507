"""The OpenAI backend's streams (tts.backends.openai_stream) against a fake SSE upstream that counts
its open streams: samples in finish order, cancellation that closes the upstream's streams, and
DeepConf's confidence stop through the server, replayed on the scripted backend's traces."""

from __future__ import annotations

import dataclasses
import json
import threading
import time

import pytest

from tests.backends.stream_upstream import PROMPT_TOKENS, StreamingUpstream, Trace
from tests.fakes import read_json_request
from tts.backends.base import BackendError, GenerationRequest, Message
from tts.backends.confidence import ConfidenceStop

pytestmark = pytest.mark.timeout(30)

Q = (Message("user", "What is 2 + 3?"),)


@pytest.fixture
def upstream(closing):
    """``upstream(traces, **settings)``: a :class:`StreamingUpstream`, closed after the test."""
    return lambda traces, **kw: closing(StreamingUpstream(traces, **kw))


def _gen(url: str, **kw):
    from tts.backends.openai import OpenAIGenerator
    from tts.config import OpenAIBackendConfig

    settings = {"timeout": 5.0, "max_retries": 3, "backoff": 0.01, "request_seeds": "always", **kw}
    return OpenAIGenerator(OpenAIBackendConfig(base_url=url, model="m", **settings))


def _trace(length: int, tag: str, reasoning: int = 0, finish: str = "stop") -> Trace:
    tokens = tuple(f" {tag}{j}" for j in range(length - 1)) + (f" \\boxed{{{tag}}}",)
    return Trace(tokens, tuple(-0.1 - j / 100 for j in range(length)),
                 tuple(((t, -0.1), ("x", -2.0 - j / 10)) for j, t in enumerate(tokens)), reasoning, finish)


def _by_length(lengths: tuple[int, ...]):
    """Choice i of a request of seed s: a trace of lengths[(s + i) % len], reasoning in choice 0."""
    def traces(body: dict) -> list[Trace]:
        seed = int(body.get("seed") or 0)
        return [_trace(lengths[(seed + i) % len(lengths)], f"s{seed + i}-", reasoning=3 if seed + i == 0 else 0,
                       finish="length" if lengths[(seed + i) % len(lengths)] == max(lengths) else "stop")
                for i in range(int(body.get("n") or 1))]
    return traces


def _wait(condition, seconds: float = 2.0) -> float:
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > seconds:
            raise AssertionError(f"not within {seconds} s")
        time.sleep(0.005)
    return time.monotonic() - start


def test_samples_come_in_finish_order_and_are_the_completions_generate_builds(upstream):
    up = upstream(_by_length((9, 4, 6)), delay=0.002)
    gen = _gen(up.url)
    req = GenerationRequest(Q, n=3, max_tokens=64, top_logprobs=2, seed=0)
    (whole,) = gen.generate([req])
    with gen.stream_samples([req]) as stream:
        got = list(stream)
        (res,) = stream.results()
    assert up.bodies[-1]["stream"] and up.bodies[-1]["stream_options"] == {"include_usage": True}
    assert [f.completion.completion_tokens for f in got] == [4, 6, 9]  # the shortest finished first
    assert sorted(f.completion.completion_tokens for f in got) == sorted(c.completion_tokens for c in whole.completions)
    # the same Completion, field by field (text, reasoning put back, logprobs, top-k, finish "length")
    assert {f.completion for f in got} == set(whole.completions)
    assert any(c.finish_reason == "length" for c in res.completions)
    assert any(c.text.startswith("<think>") for c in res.completions)
    assert res.completions == tuple(f.completion for f in got) and res.cancelled == ()
    assert res.usage.prompt_tokens == whole.usage.prompt_tokens == PROMPT_TOKENS
    assert res.usage.completion_tokens == whole.usage.completion_tokens == 19


def test_streamed_tool_calls_are_the_calls_generate_reads(upstream):
    """Tool-call deltas (id and name first, the arguments in pieces) make the same checked calls."""
    tools = json.dumps([{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])

    def traces(body):
        base = _trace(3, "c")
        return [dataclasses.replace(base, finish="tool_calls", calls=(("get_weather", '{"city": "Paris"}'),)),
                dataclasses.replace(base, finish="length", calls=(("get_weather", '{"city": "Pa'),))]

    gen = _gen(upstream(traces).url)
    req = GenerationRequest(Q, n=2, max_tokens=64, tools=tools)
    (whole,) = gen.generate([req])
    with gen.stream_samples([req]) as stream:
        got = [f.completion for f in stream]
    assert sorted(got, key=lambda c: c.finish_reason) == sorted(whole.completions, key=lambda c: c.finish_reason)
    called = next(c for c in got if c.finish_reason == "tool_calls")
    assert [(t.name, json.loads(t.arguments)) for t in called.tool_calls] == [("get_weather", {"city": "Paris"})]
    assert not next(c for c in got if c.finish_reason == "length").tool_calls  # a cut call is no call


def test_generate_with_a_confidence_stop_streams_and_its_cancel_closes_the_streams(upstream):
    """``generate`` sends requests with a confidence stop as one-sample streams (seeds seed + i); a
    caller's cancel Event aborts them: BackendError, and no upstream stream is left open."""
    up = upstream(_by_length((400,)), delay=0.002)
    gen = _gen(up.url)
    cancel = threading.Event()
    def cancel_once_streaming() -> None:
        _wait(lambda: len(up.sent_by) == 3 and up.sent >= 30)
        cancel.set()

    threading.Thread(target=cancel_once_streaming, daemon=True).start()
    never = ConfidenceStop(threshold=-1.0, window=4, top_k=2)  # confidences are >= 0: never stops
    with pytest.raises(BackendError, match="cancelled"):
        gen.generate([GenerationRequest(Q, n=3, max_tokens=512, seed=7, top_logprobs=2, confidence_stop=never)],
                     cancel=cancel)
    assert sorted(b["seed"] for b in up.bodies) == [7, 8, 9] and all(b["n"] == 1 for b in up.bodies)
    _wait(lambda: up.open_streams == 0, 1.0)
    assert up.closed_by_client == 3 and gen.aborted_requests == 1


def test_cancel_closes_the_upstream_streams_and_counts_their_partial_tokens(upstream):
    up = upstream(_by_length((400, 5, 400)), delay=0.01)
    gen = _gen(up.url)
    reqs = [GenerationRequest(Q, n=3, max_tokens=512, seed=0), GenerationRequest(Q, n=1, max_tokens=512, seed=1)]
    stream = gen.stream_samples(reqs)
    it = iter(stream)
    first = next(it)
    assert first.completion.completion_tokens == 5  # request 0's short choice or request 1's
    _wait(lambda: up.sent > 60)
    stream.cancel([0])
    took = _wait(lambda: up.open_streams == 0 or (len(up.sent_by) == 2 and up.closed_by_client == 1), 1.0)
    rest = list(it)
    results = stream.results()
    assert took < 0.5 and up.closed_by_client >= 1
    assert all(f.request == 1 for f in rest)  # nothing of the cancelled request after the cancel
    zero = results[0]
    assert len(zero.completions) + len(zero.cancelled) == 3
    assert all(0 < t < 400 for t in zero.cancelled)
    counted = zero.usage.completion_tokens
    stream0 = up.sent_by[[b["seed"] for b in up.bodies].index(0)]
    assert stream0 - 3 * 3 <= counted <= stream0  # what the upstream sent, less the steps in flight
    assert gen.aborted_requests == 1 and gen.aborted_max_tokens >= 2 * 512 - counted


def test_a_client_that_leaves_mid_wave_leaves_no_upstream_stream_open(upstream):
    up = upstream(_by_length((300, 3, 300, 300)), delay=0.002)
    gen = _gen(up.url)
    with gen.stream_samples([GenerationRequest(Q, n=4, max_tokens=512, seed=0),
                             GenerationRequest(Q, n=2, max_tokens=512, seed=2)]) as stream:
        for _ in stream:
            break  # the first sample is enough; the with block's exit cancels the rest
    _wait(lambda: up.open_streams == 0, 1.0)
    time.sleep(0.2)  # and it stays so: no request is sent after the exit
    # every stream the upstream opened (the second request's may never have been sent) was closed early
    assert up.open_streams == 0 and 1 <= up.closed_by_client == len(up.sent_by) <= 2 and up.sent < 2 * 300


def test_an_upstream_that_ignores_the_close_is_still_correct_only_slower(upstream):
    up = upstream(_by_length((4, 300)), delay=0.005, ignore_close=True)
    gen = _gen(up.url)
    stream = gen.stream_samples([GenerationRequest(Q, n=2, max_tokens=512, seed=0)])
    it = iter(stream)
    assert next(it).completion.completion_tokens == 4
    start = time.monotonic()
    stream.cancel()
    assert list(it) == []
    (res,) = stream.results()
    assert time.monotonic() - start < 0.75  # the client is done at once (the trace takes 1.5 s)
    assert res.completions[0].completion_tokens == 4 and len(res.cancelled) == 1 and 0 < res.cancelled[0] < 300
    assert up.open_streams == 1  # the upstream keeps generating the closed stream to its end...
    _wait(lambda: up.open_streams == 0, 15.0)  # ...and then lets it go (1.5 s, slower on a loaded machine)
    (again,) = gen.generate([GenerationRequest(Q, n=2, max_tokens=512, seed=0)])  # and the backend still works
    assert sorted(c.completion_tokens for c in again.completions) == [4, 300]


def test_a_server_with_one_choice_per_stream_still_gives_n_samples(upstream):
    up = upstream(_by_length((5, 7, 9)), single_choice=True)
    gen = _gen(up.url)
    with gen.stream_samples([GenerationRequest(Q, n=3, max_tokens=64, seed=0)]) as stream:
        got = list(stream)
        (res,) = stream.results()
    assert sorted(f.completion.completion_tokens for f in got) == [5, 7, 9]  # seeds 0, 1, 2 as generate splits
    assert res.usage.completion_tokens == 21 and res.usage.prompt_tokens == 3 * PROMPT_TOKENS
    assert gen.single_choice and [b["n"] for b in up.bodies] == [3, 1, 1]


def test_a_failure_before_the_first_chunk_is_retried_as_a_plain_request_is(upstream):
    class FirstFails(StreamingUpstream):
        async def _handle(self, reader, writer):
            if self.bodies:
                return await super()._handle(reader, writer)
            self.bodies.append(await read_json_request(reader))
            writer.write(b"HTTP/1.1 503 X\r\nContent-Type: application/json\r\nContent-Length: 2\r\n"
                         b"Connection: close\r\n\r\n{}")
            await writer.drain()
            writer.close()

    up = FirstFails(_by_length((5, 7)))
    try:
        gen = _gen(up.url)
        with gen.stream_samples([GenerationRequest(Q, n=2, max_tokens=64, seed=0)]) as stream:
            assert sorted(f.completion.completion_tokens for f in stream) == [5, 7]
        assert len(up.bodies) == 2 and gen.retries == 1
    finally:
        up.close()


def test_a_stream_that_breaks_after_output_started_is_an_error_not_a_retry(upstream):
    class Breaking(StreamingUpstream):
        async def _stream(self, body, traces, reader, writer, number):
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
            data = b'data: {"id":"x","object":"chat.completion.chunk","created":0,"model":"m","choices":[{"index":0,' \
                   b'"delta":{"content":"Hi"},"logprobs":null,"finish_reason":null}]}\n\n'
            writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            await writer.drain()

    up = Breaking(_by_length((5,)))
    try:
        gen = _gen(up.url)
        with pytest.raises(BackendError, match="after output had started"):
            list(gen.stream_samples([GenerationRequest(Q, n=1, max_tokens=64)]))
        assert len(up.bodies) == 1  # not retried
    finally:
        up.close()


# -- DeepConf online through the server, replayed on the scripted backend's traces -------------


def _replay_setup(problems):
    """Traces of the scripted backend: sample ``i`` of a request of seed ``s`` is its one-sample
    draw of seed ``s + i`` (as the OpenAI backend splits a request with a confidence stop). The fake
    upstream serves them whole, token by token; :class:`Engine` is the scripted backend drawing the
    same samples with its in-engine confidence stop."""
    import functools

    from tts.backends.base import GenerationResult
    from tts.backends.scripted import ScriptedGenerator
    from tts.benchmarks.demo import DEMO_PROMPT

    scripted = ScriptedGenerator.for_problems(problems, accuracy=0.35, seed=1)
    by_prompt = {DEMO_PROMPT.render(p)[-1].content: p for p in problems}

    @functools.cache  # each trace is drawn once for the three runs
    def one(p, seed, stop=None):
        req = GenerationRequest(DEMO_PROMPT.render(p), n=1, max_tokens=256, logprobs=True, top_logprobs=20,
                                seed=seed, key=p.id, confidence_stop=stop)
        return scripted.generate([req])[0]

    def traces(body: dict) -> list[Trace]:
        p = by_prompt[body["messages"][-1]["content"]]
        out = []
        for i in range(int(body.get("n") or 1)):
            c = one(p, int(body["seed"]) + i).completions[0]
            size = -(-len(c.text) // c.completion_tokens)  # the text cut into completion_tokens tokens
            tokens = tuple(c.text[j * size:(j + 1) * size] for j in range(c.completion_tokens))
            out.append(Trace(tokens, c.token_logprobs,
                             tuple(tuple((f"t{r}", v) for r, v in enumerate(top)) for top in c.token_top_logprobs),
                             finish=c.finish_reason))
        return out

    class Engine:
        supports_confidence_stop = True

        def generate(self, requests):
            out = []
            for r in requests:
                p = next(q for q in problems if q.id == r.key)
                parts = [one(p, r.seed + i, r.confidence_stop) for i in range(r.n)]
                completions = tuple(part.completions[0] for part in parts)
                usage = parts[0].usage
                for part in parts[1:]:
                    usage = usage + part.usage
                out.append(GenerationResult(completions, dataclasses.replace(usage, prompt_tokens=PROMPT_TOKENS)))
            return out

    class AfterGeneration(Engine):
        supports_confidence_stop = False

    return traces, Engine(), AfterGeneration()


@pytest.mark.parametrize("tokens_per_chunk", [1, 4])
def test_deepconf_through_the_server_stops_where_the_in_engine_stop_does(upstream, tokens_per_chunk):
    """The replay: the same traces, served by the fake upstream, stop at the token where the
    in-engine rule stops them; DeepConf's answers match, and it saves within 5% of what the
    in-engine stop saves (exactly as much with one token per chunk, as vLLM streams)."""
    from tts.benchmarks.demo import DEMO_PROMPT, generate_problems
    from tts.config import SamplingConfig
    from tts.search.sampling.deepconf import DeepConf, DeepConfConfig

    problems = generate_problems(3)
    traces, engine, after = _replay_setup(problems)
    up = upstream(traces, tokens_per_chunk=tokens_per_chunk)
    cfg = DeepConfConfig(n=10, warmup=4, keep=0.1, window=16, consensus=None)

    def run(gen):
        return DeepConf(cfg, gen, DEMO_PROMPT.render, SamplingConfig(max_tokens=256), seed=0).solve(problems)

    served, in_engine, unstopped = run(_gen(up.url)), run(engine), run(after)
    stopped = 0
    for s, e, u in zip(served, in_engine, unstopped, strict=True):
        assert s.answer == e.answer == u.answer
        assert [x.completion_tokens for x in s.trace.samples] == [x.completion_tokens for x in e.trace.samples]
        assert [x.finish_reason for x in s.trace.samples] == [x.finish_reason for x in e.trace.samples]
        assert "stop_after_generation" not in s.trace.events
        stopped += s.trace.events.get("stopped_low_confidence", 0)
    assert stopped > 10
    tokens = [sum(x.usage.completion_tokens for x in sols) for sols in (served, in_engine, unstopped)]
    ratio = (tokens[2] - tokens[0]) / (tokens[2] - tokens[1])
    print(f"tokens_per_chunk={tokens_per_chunk}: unstopped {tokens[2]}, in-engine {tokens[1]}, "
          f"through the server {tokens[0]}: saves {ratio:.3f} of what the in-engine stop saves")
    assert ratio >= 0.95
    # what a stopped stream costs past the stop: the rest of the chunk that carried the stop
    assert 0 <= tokens[0] - tokens[1] <= (tokens_per_chunk - 1) * stopped
