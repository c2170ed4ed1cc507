"""`tts serve` stays reliable in front of a slow, hanging or failing upstream, and leaves nothing
behind when it stops: a hanging upstream request holds up no other request, a request's deadline
bounds its retries, a burst reaches an OpenAI-compatible upstream at once, a cancelled request's
upstream requests are aborted, and SIGTERM shuts the engine down (no child process survives)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.fakes import LocalUpstream, chat_completion, read_json_request
from tts.backends.base import BackendError, GenerationRequest, Message
from tts.backends.openai import OpenAIGenerator
from tts.config import OpenAIBackendConfig
from tts.serve import ServeConfig, create_app
from tts.serve.server import ServerThread
from tts.session import Session

pytestmark = pytest.mark.timeout(90)
ROOT = Path(__file__).resolve().parents[2]
ANSWER = "Six times seven is \\boxed{42}."


class Upstream(LocalUpstream):
    """A minimal OpenAI chat-completions server on 127.0.0.1 that answers after ``delay`` seconds,
    never answers a prompt containing "hang" (it waits for the client to close), and records how
    many requests were in flight at once and how many its clients aborted."""

    def __init__(self, delay: float = 0.0, gather: int = 0) -> None:
        self.delay = delay
        self.gather = gather  # hold answers until this many requests are in flight (or 5 s pass)
        self.in_flight = 0
        self.most = 0
        self.requests = 0
        self.aborted = 0
        super().__init__()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:  # keep-alive: one request after another on this connection
            try:
                body = await read_json_request(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                writer.close()
                return
            self.requests += 1
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            try:
                if "hang" in json.dumps(body.get("messages", "")):
                    if await reader.read(1) == b"":  # waits until the client closes the connection
                        self.aborted += 1
                    writer.close()
                    return
                if self.delay:
                    await asyncio.sleep(self.delay)
                held = time.monotonic() + 5
                while self.in_flight < self.gather and self.most < self.gather and time.monotonic() < held:
                    await asyncio.sleep(0.01)
            finally:
                self.in_flight -= 1
            tokens = [{"token": t, "logprob": -0.1, "bytes": None, "top_logprobs": []} for t in ("Six", " 42")]
            payload = json.dumps(chat_completion(body, ANSWER, tokens, 9, int(body.get("n") or 1))).encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         + f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
            await writer.drain()

    def close(self) -> None:
        async def shutdown() -> None:  # end the connection handlers too, or their tasks die pending
            handlers = [t for t in asyncio.all_tasks() if t.get_coro().__name__ == "_handle"]
            for task in handlers:
                task.cancel()
            await asyncio.gather(*handlers, return_exceptions=True)
            # Last, and with nothing awaited after it: closing the server ends serve_forever and so
            # the loop, and a shutdown still waiting then would be destroyed pending (a warning at exit).
            self._server.close()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)


@pytest.fixture
def upstream(closing):
    """``upstream(delay=0.0, gather=0)``: an :class:`Upstream`, closed after the test."""
    return lambda delay=0.0, gather=0: closing(Upstream(delay, gather))


def _served(up: Upstream, **backend):
    settings = {"model": "m", "base_url": up.url, "timeout": 30, "concurrency": 256, **backend}
    gen = OpenAIGenerator(OpenAIBackendConfig(**settings))
    session = Session(generator=gen, price_as="smollm2-135m", max_tokens=64, batch_window=0.02)
    server = ServerThread(create_app(session, ServeConfig(prompt="math", model="m", max_budget_tokens=100_000))).start()
    return gen, session, server


def _chat(url: str, question: str, timeout: float = 20.0, model: str = "sc-4/m") -> httpx.Response:
    return httpx.post(f"{url}/chat/completions", timeout=timeout,
                      json={"model": model, "messages": [{"role": "user", "content": question}]})


def test_a_hanging_upstream_request_holds_up_no_other_request(upstream):
    up = upstream()
    gen, session, server = _served(up)
    try:
        stuck = threading.Thread(target=lambda: pytest.raises(httpx.ReadTimeout, _chat, server.url, "hang",
                                                              timeout=8))
        stuck.start()
        time.sleep(0.5)  # the hanging request is inside its upstream call now
        t0 = time.perf_counter()
        r = _chat(server.url, "What is 6 * 7?")
        assert r.status_code == 200 and r.json()["tts"]["answer"] == "42"
        assert time.perf_counter() - t0 < 5.0  # behind the stuck call it would wait for its client to go (8 s)
        stuck.join()
    finally:
        server.stop()
        session.close()
        gen.close()


def test_a_burst_reaches_the_upstream_at_once(upstream):
    up = upstream(gather=16)  # answers once all 16 are in flight, or after 5 s
    gen, session, server = _served(up)
    out: list[int] = []
    try:
        def one(i: int) -> None:
            time.sleep(0.015 * i)  # arrivals spread over ~0.25 s, as real clients' are
            out.append(_chat(server.url, f"What is 6 * 7? ({i})").status_code)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        server.stop()
        session.close()
        gen.close()
    assert out == [200] * 16
    # all 16 overlap at the upstream (one round, not one batch after another)
    assert up.most == 16, f"at most {up.most} of 16 requests reached the upstream at once"


def test_a_cancelled_request_aborts_its_upstream_requests(upstream):
    up = upstream()
    gen, session, server = _served(up)
    try:
        with pytest.raises(httpx.ReadTimeout):
            _chat(server.url, "hang", timeout=1.0)  # the client gives up and closes its connection
        deadline = time.monotonic() + 5
        # The batcher counts the abort once the generator's call has raised, after the upstream
        # saw its connection close: wait for both (on a loaded machine they are apart).
        while (up.aborted < 1 or session.batcher.stats.aborted_requests < 1) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert up.aborted == 1, "the upstream request of a cancelled request was left running"
        assert gen.aborted_requests == 1 and gen.aborted_max_tokens == 4 * 64  # sc-4: one request of n = 4
        assert session.batcher.stats.aborted_requests == 1
    finally:
        server.stop()
        session.close()
        gen.close()


def test_a_request_deadline_bounds_its_retries(upstream):
    up = upstream()
    gen = OpenAIGenerator(OpenAIBackendConfig(model="m", base_url=up.url, timeout=0.4, max_retries=10, backoff=0.01,
                                              deadline=1.5, breaker_failures=100))
    t0 = time.perf_counter()
    try:
        with pytest.raises(BackendError, match="deadline of 1.5 s"):
            gen.generate([GenerationRequest((Message("user", "hang"),))])
    finally:
        gen.close()
    assert time.perf_counter() - t0 < 2.5


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(proc: subprocess.Popen, port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert proc.poll() is None, proc.stdout.read().decode()[-3000:]
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.2)


def test_the_upstream_flags_of_tts_serve_bound_a_hanging_request(upstream):
    up = upstream()
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tts.cli", "serve", "--backend", "openai", "--base-url", up.url,
                             "--model", "m", "--price-as", "smollm2-135m", "--port", str(port),
                             "--upstream-timeout", "0.5", "--upstream-retries", "10", "--upstream-deadline", "1.5",
                             "--upstream-concurrency", "64"],
                            env={**os.environ, "HF_HUB_OFFLINE": "1"}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    try:
        _wait_healthy(proc, port, 30)
        t0 = time.perf_counter()
        r = _chat(f"http://127.0.0.1:{port}/v1", "hang", timeout=20)
        assert r.status_code in (502, 504) and "deadline" in r.json()["error"]["message"]
        assert time.perf_counter() - t0 < 4.0
    finally:
        proc.terminate()
        proc.wait(10)


_DRIVER = textwrap.dedent('''
    """tts serve on the scripted backend, with a child process standing in for an engine's."""
    import subprocess, sys
    import tts.cli.serve as serve

    build, pidfile, port = serve.build_generator, sys.argv[1], sys.argv[2]

    class WithEngineProcess:
        def __init__(self, inner):
            self.inner = inner
            self.child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
            with open(pidfile, "w") as f:
                f.write(str(self.child.pid))

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def generate(self, requests):
            return self.inner.generate(requests)

        def close(self):
            self.child.terminate()
            self.child.wait(10)
            self.inner.close()

    serve.build_generator = lambda *args, **kwargs: WithEngineProcess(build(*args, **kwargs))
    from tts.cli.app import main
    sys.argv = ["tts", "serve", "--backend", "scripted", "--port", port]
    main()
''')


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_shuts_the_engine_down_and_no_child_survives(tmp_path, sig):
    driver, pidfile, port = tmp_path / "driver.py", tmp_path / "engine.pid", _free_port()
    driver.write_text(_DRIVER)
    proc = subprocess.Popen([sys.executable, str(driver), str(pidfile), str(port)], cwd=ROOT,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    child = None
    try:
        _wait_healthy(proc, port, 30)
        child = int(pidfile.read_text())
        assert _alive(child)
        proc.send_signal(sig)
        proc.wait(15)
        deadline = time.monotonic() + 5
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(child), f"the engine's process {child} survived the server's exit on {sig.name}"
    finally:
        if proc.poll() is None:
            proc.kill()
        if child is not None and _alive(child):
            os.kill(child, signal.SIGKILL)


@pytest.mark.heavy  # a server with an engine of its own: outside `make test`, run with -m heavy
@pytest.mark.timeout(600)  # a real engine's start-up alone took 76 s here; the module's 90 s left no margin
def test_sigterm_leaves_no_vllm_engine_process_behind():
    """The real engine: `tts serve` on vLLM, SIGTERM, then none of its descendants may survive."""
    pytest.importorskip("vllm")
    psutil = pytest.importorskip("psutil")
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tts.cli", "serve", "--backend", "vllm", "--port", str(port),
                             "--max-model-len", "1024", "--kv-cache-gib", "1"],
                            env={**os.environ, "HF_HUB_OFFLINE": "1"}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    children: list = []
    try:
        _wait_healthy(proc, port, 600)
        children = psutil.Process(proc.pid).children(recursive=True)
        assert children, "vLLM's engine core should run in a child process"
        proc.send_signal(signal.SIGTERM)
        proc.wait(120)
        _, alive = psutil.wait_procs(children, timeout=30)
        assert not alive, f"survived SIGTERM: {[(p.pid, p.name()) for p in alive]}"
    finally:
        if proc.poll() is None:
            proc.kill()
        for p in children:
            if p.is_running():
                p.kill()
