"""One caller's bad request must not fail the other callers batched with it, and a generator that
takes concurrent calls (an HTTP upstream) is called at once from each solve, never serialised
behind another solve's engine call."""

from __future__ import annotations

import threading
import time

import pytest

from tests.fakes import ConcurrentScripted, WatchedScripted
from tts.backends.base import BackendError, GenerationRequest, Message
from tts.session.batching import (
    BatchingGenerator,
    CallContext,
    SolveCancelled,
    set_context,
)

pytestmark = pytest.mark.timeout(30)


def Poisoned() -> WatchedScripted:  # noqa: N802 -- reads as the model it builds
    """Fails any engine call that holds a request whose key starts with "poison"."""
    return WatchedScripted(default={"42": 1.0}, seed=0, delay=0.01, refuse="poison")


def _request(key: str) -> GenerationRequest:
    return GenerationRequest((Message("user", f"What is 6 * 7? ({key})"),), n=2, key=key)


def _burst(batcher: BatchingGenerator, keys: list[str]) -> dict[str, object]:
    """One thread per key, all queued in the same window; key -> results or the error raised."""
    out: dict[str, object] = {}
    start = threading.Barrier(len(keys))

    def call(key: str) -> None:
        batcher.begin()
        try:
            start.wait()
            out[key] = batcher.generate([_request(key)])
        except Exception as exc:
            out[key] = exc
        finally:
            batcher.end()

    threads = [threading.Thread(target=call, args=(k,)) for k in keys]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def test_a_poisoned_request_fails_only_its_own_caller():
    gen = Poisoned()
    batcher = BatchingGenerator(gen, window=0.2)
    keys = [f"ok{i}" for i in range(29)] + ["poison"]
    try:
        out = _burst(batcher, keys)
    finally:
        batcher.stop()
    assert isinstance(out["poison"], BackendError) and "poison" in str(out["poison"])
    innocent = {k: v for k, v in out.items() if k != "poison"}
    failed = [k for k, v in innocent.items() if isinstance(v, BaseException)]
    assert not failed, f"{len(failed)} innocent callers failed: {innocent[failed[0]]}"
    assert all(len(v[0].completions) == 2 for v in innocent.values())
    assert gen.calls[0] == 30  # one batched call first, then the retries without the offender
    assert batcher.stats.isolated_failures == 1


def test_two_poisoned_callers_each_get_their_own_error():
    gen = Poisoned()
    batcher = BatchingGenerator(gen, window=0.2)
    try:
        out = _burst(batcher, ["poison-a", "ok1", "ok2", "poison-b", "ok3", "ok4", "ok5"])
    finally:
        batcher.stop()
    assert "poison-a" in str(out["poison-a"]) and "poison-b" in str(out["poison-b"])
    assert all(not isinstance(out[k], BaseException) for k in ("ok1", "ok2", "ok3", "ok4", "ok5"))


def Concurrent() -> ConcurrentScripted:  # noqa: N802 -- reads as the model it builds
    """A generator that takes concurrent calls (as an HTTP upstream does); each call takes 0.3 s."""
    return ConcurrentScripted(default={"42": 1.0}, seed=0, delay=0.3)


def test_a_generator_that_takes_concurrent_calls_is_not_serialised():
    gen = Concurrent()
    batcher = BatchingGenerator(gen, window=0.05)
    t0 = time.perf_counter()
    try:
        out = _burst(batcher, [f"k{i}" for i in range(16)])
    finally:
        batcher.stop()
    assert all(not isinstance(v, BaseException) for v in out.values())
    assert gen.most == 16  # every solve's call runs at once
    assert time.perf_counter() - t0 < 1.5


def test_cancelling_a_solve_aborts_its_call_in_flight():
    gen = Concurrent()
    batcher = BatchingGenerator(gen, window=0.0)
    ctx = CallContext()
    out: dict[str, object] = {}

    def call() -> None:
        set_context(ctx)
        try:
            out["r"] = batcher.generate([_request("k")])
        except BaseException as exc:
            out["r"] = exc
        finally:
            set_context(None)

    t = threading.Thread(target=call)
    t.start()
    time.sleep(0.05)
    ctx.cancel()
    t.join(5)
    batcher.stop()
    assert isinstance(out["r"], SolveCancelled)
    assert gen.cancels[0] is ctx.cancelled  # the generator saw the solve's cancel flag


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_on_vllm_a_request_the_engine_refuses_fails_only_its_caller(vllm_generator):
    """The real engine refuses a whole call when one prompt is over the context; the batcher
    splits the call, so only that caller fails."""
    batcher = BatchingGenerator(vllm_generator, window=0.5)
    long = GenerationRequest((Message("user", "seven " * 3000),), n=1, max_tokens=8)
    out: dict[str, object] = {}
    start = threading.Barrier(5)

    def call(key: str) -> None:
        batcher.begin()
        try:
            start.wait()
            req = long if key == "poison" else GenerationRequest((Message("user", f"Say {key}."),), n=2, max_tokens=8)
            out[key] = batcher.generate([req])
        except Exception as exc:
            out[key] = exc
        finally:
            batcher.end()

    threads = [threading.Thread(target=call, args=(k,)) for k in ("a", "b", "poison", "c", "d")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    batcher.stop()
    assert all(not isinstance(out[k], BaseException) and len(out[k][0].completions) == 2 for k in "abcd"), out
