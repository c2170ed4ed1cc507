"""``wait_for_all``: how the OpenAI and LiteLLM backends wait for the concurrent requests of one call.

A call fails on its first real failure (not on the requests that only stopped because of it), and a
caller's cancel ends the wait within a poll while requests are still running.
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
import time

import pytest

from tts.backends.base import BackendError, GenerationRequest
from tts.backends.resilience import Stopped, wait_for_all


class _Translated(BackendError):
    pass


def _translate(exc: BaseException) -> BaseException:
    return _Translated(f"upstream: {exc}")


@pytest.fixture
def pool():
    with cf.ThreadPoolExecutor(4) as p:
        yield p


def test_the_first_real_failure_raises_translated_while_others_still_run(pool):
    release = threading.Event()
    slow = pool.submit(release.wait, 5)
    failed = pool.submit(lambda: (_ for _ in ()).throw(ValueError("HTTP 500")))
    start = time.monotonic()
    try:
        with pytest.raises(_Translated, match="upstream: HTTP 500") as info:
            wait_for_all([slow, failed], None, _translate, "cancelled")
    finally:
        release.set()
    assert time.monotonic() - start < 2  # did not wait for the slow request
    assert isinstance(info.value.__cause__, ValueError)


def test_an_untranslated_failure_is_raised_as_it_is(pool):
    error = ValueError("no route")
    failed = pool.submit(lambda: (_ for _ in ()).throw(error))
    with pytest.raises(ValueError) as info:
        wait_for_all([failed], None, lambda exc: exc, "cancelled")
    assert info.value is error


def test_requests_that_only_stopped_are_not_a_failure(pool):
    stopped = pool.submit(lambda: (_ for _ in ()).throw(Stopped()))
    done = pool.submit(lambda: 3)
    wait_for_all([stopped, done], threading.Event(), _translate, "cancelled")  # returns: nothing failed
    assert done.result() == 3


def test_a_cancel_ends_the_wait_with_the_callers_message(pool):
    release = threading.Event()
    slow = pool.submit(release.wait, 5)
    cancel = threading.Event()
    threading.Timer(0.1, cancel.set).start()
    start = time.monotonic()
    try:
        with pytest.raises(BackendError, match="^the call to m was cancelled$"):
            wait_for_all([slow], cancel, _translate, "the call to m was cancelled")
    finally:
        release.set()
    assert time.monotonic() - start < 2


def test_a_cancel_set_after_every_request_finished_changes_nothing(pool):
    cancel = threading.Event()
    cancel.set()
    done = pool.submit(lambda: 1)
    done.result()
    wait_for_all([done], cancel, _translate, "cancelled")  # nothing pending: no error


def test_the_openai_backend_aborts_a_cancelled_call_and_counts_what_it_dropped(monkeypatch):
    """Through the backend: a plain (non-streamed) call cancelled while its requests run raises, and
    the requests in flight are aborted and counted with their token ceilings."""
    from tts.backends.openai import OpenAIGenerator
    from tts.config import OpenAIBackendConfig

    gen = OpenAIGenerator(OpenAIBackendConfig(base_url="http://127.0.0.1:9/v1", model="m", timeout=5.0))
    aborted = threading.Event()

    def one(req, call):
        call.stop.wait(5)  # a request in flight until the call is aborted
        aborted.set()
        raise Stopped()

    monkeypatch.setattr(gen, "_one", one)
    cancel = threading.Event()
    threading.Timer(0.1, cancel.set).start()
    with pytest.raises(BackendError, match="was cancelled"):
        gen.generate([GenerationRequest("q", n=2, max_tokens=30), GenerationRequest("r", n=1, max_tokens=10)],
                     cancel=cancel)
    assert aborted.wait(2)
    assert gen.aborted_requests == 2 and gen.aborted_max_tokens == 2 * 30 + 10
    gen.close()
