"""Surviving an unreliable server: retries with back-off and jitter, and a circuit breaker.

Retries (``backoff_delay``) use exponential back-off with *full jitter* (a uniform draw between
0 and the capped exponential), which spreads the retries of many clients that failed together
("Exponential Backoff And Jitter", AWS Architecture Blog, 2015). The breaker
(:class:`CircuitBreaker`) counts the callers that failed in a row, not the attempts: once
``failures`` different callers (a caller: one ``generate`` call, all its requests and retries) saw
the server fail with no success between, it opens and calls fail at once for a cool-down, then one
probe is let through (half-open): success closes it, failure opens it again; calls that arrive
while the probe is out wait for its outcome. A server that stays down thus costs each caller one
fast, clear error instead of minutes of timeouts.

Why callers and not attempts: a server may drop the connection (or answer 5xx) on one request's
bad input, every time it is retried, while it serves everyone else. Counted by attempts, that one
request's retries alone opened the breaker and every other client got "circuit open" for the
cool-down. Counted by callers, one request cannot open it however often it is retried; a server
that is really down fails many callers at once (each concurrent request is one) and opens it as
soon as ``failures`` of them have failed. What the server refuses as the caller's fault (a 4xx
other than 408/409/425/429) is never counted: the backends do not report it as a failure.

An HTTP attempt (:class:`Attempt`) can be aborted from another thread and has a deadline:
:func:`abortable_http_client` builds an ``httpx.Client`` whose sockets belong, while a read or
write is under way, to the attempt that the calling thread runs (:func:`attempt_scope`), so
``Attempt.abort()`` shuts that socket down (the blocked read returns at once and the server sees
the connection close: vLLM then aborts the request and frees its KV cache), and every read and
write waits at most until the attempt's deadline (a request's retries never run past it).
Connections are still pooled and kept alive: a socket is bound to an attempt only while the
attempt's thread uses it.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import os
import random
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from tts.backends.base import BackendError


def backoff_delay(attempt: int, base: float, cap: float = 30.0, rng: random.Random | None = None) -> float:
    """Seconds to wait before retry ``attempt`` (1 = first retry): uniform in [0, min(cap, base * 2^(attempt-1))]."""
    return (rng or random).uniform(0.0, min(cap, base * 2 ** (attempt - 1)))


def shown_url(url: str | None) -> str:
    """A server's URL as error messages show it (they may reach a client): scheme, host, port and
    path, without user, password or query (where API keys sometimes ride)."""
    from urllib.parse import urlsplit, urlunsplit

    if not url:
        return "(no URL configured)"
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        if ":" in host:  # an IPv6 address goes back in brackets
            host = f"[{host}]"
        netloc = f"{host}:{parts.port}" if parts.port else host
    except ValueError:
        return url.split("?", 1)[0].rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


class CircuitOpenError(RuntimeError):
    """The breaker is open: the server failed too often just now; the message says when it is tried again."""


class CircuitBreaker:
    """Closed -> open after ``failures`` callers in a row failed -> half-open after ``cooldown`` s.

    Thread-safe; one breaker is shared by every request to one server. A caller names itself in
    :meth:`failure` (``source``): its failed attempts count once (module docstring).
    """

    def __init__(self, failures: int = 5, cooldown: float = 30.0, clock: object = time.monotonic) -> None:
        self.threshold = failures
        self.cooldown = cooldown
        self._clock = clock
        self._lock = threading.Condition()
        self.consecutive = 0
        """Failed attempts since the last success (all callers')."""
        self._failed: set[int] = set()  # ids of the sources that failed since the last success
        self._sources: list[object] = []  # those sources, kept alive so that their ids stay theirs
        self.opened_at: float | None = None
        self._probing = False
        self.last_error = ""
        self.times_opened = 0

    @property
    def state(self) -> str:
        """"closed", "open" or "half-open"."""
        with self._lock:
            return self._state()

    def _state(self) -> str:
        if self.opened_at is None:
            return "closed"
        return "half-open" if self._clock() - self.opened_at >= self.cooldown else "open"  # type: ignore[operator]

    def before(self, wait: float = 30.0) -> None:
        """Call before an attempt; while a half-open probe is out, waits up to ``wait`` s for it.

        Raises:
            CircuitOpenError: The breaker is open (or the probe failed).
        """
        with self._lock:
            deadline = time.monotonic() + wait
            while True:
                state = self._state()
                if state == "closed":
                    return
                if state == "half-open" and not self._probing:
                    self._probing = True
                    return
                left = deadline - time.monotonic()
                if state == "open" or left <= 0:
                    break
                self._lock.wait(left)  # the probe is out: its outcome decides
            wait_s = max(0.0, self.cooldown - (self._clock() - self.opened_at))  # type: ignore[operator]
            raise CircuitOpenError(
                f"circuit open after {self.failed_callers} requests in a row failed (last: {self.last_error}); "
                f"the server is tried again in {wait_s:.1f} s")

    @property
    def failed_callers(self) -> int:
        """Different callers that failed since the last success."""
        return len(self._failed)

    def success(self) -> None:
        with self._lock:
            self.consecutive = 0
            self._failed.clear()
            self._sources.clear()
            self.opened_at = None
            self._probing = False
            self._lock.notify_all()

    def failure(self, error: str, source: object = None) -> None:
        """An attempt failed for a reason that may be the server's (``error`` says it).

        ``source``: the caller the attempt belongs to (any object, compared by identity); a
        caller's failures count once. None: the attempt is its own caller.
        """
        with self._lock:
            self.consecutive += 1
            self.last_error = error
            source = object() if source is None else source
            if id(source) not in self._failed and len(self._failed) < self.threshold:  # enough to open it
                self._failed.add(id(source))
                self._sources.append(source)
            if self._probing or len(self._failed) >= self.threshold:
                if self.opened_at is None or self._probing:
                    self.times_opened += 1
                self.opened_at = self._clock()  # type: ignore[operator]
                self._probing = False
                self._lock.notify_all()


class Attempt:
    """One HTTP attempt: its deadline (``time.monotonic()`` seconds, or None) and, while its thread
    reads or writes, its socket; :meth:`abort` from any thread ends it."""

    def __init__(self, deadline: float | None = None) -> None:
        self.deadline = deadline
        self.aborted = False
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()

    def bind(self, sock: socket.socket | None) -> None:
        with self._lock:
            self._sock = sock
            aborted = self.aborted
        if aborted and sock is not None:
            _shutdown(sock)

    def release(self) -> None:
        """The attempt is over: its connection may go back to the pool, aborting no longer touches it."""
        with self._lock:
            self._sock = None

    def abort(self) -> None:
        """End the attempt: its socket is shut down (the read in flight fails, the server sees a close)."""
        with self._lock:
            self.aborted = True
            sock = self._sock
        if sock is not None:
            _shutdown(sock)

    def timeout(self, timeout: float | None) -> float | None:
        """``timeout`` cut to the time left before the deadline (a tiny positive number once past it)."""
        if self.deadline is None:
            return timeout
        left = max(self.deadline - time.monotonic(), 1e-3)
        return left if timeout is None else min(timeout, left)


class Stopped(Exception):
    """Another request of the batch failed for good, or the call was cancelled: this one stops."""


def wait_for_all(futures: Iterable[cf.Future[Any]], cancel: threading.Event | None,
                 translate: Callable[[BaseException], BaseException], cancelled: str) -> None:
    """Wait until every request of one call is done, failing fast.

    The first request that failed for good raises (``translate`` turns its exception into the
    backend's error); a request that raised :class:`Stopped` only followed another's failure and is
    not the cause. Once ``cancel`` is set while requests are pending, raises ``cancelled`` as a
    BackendError (polled every 50 ms: a thread cannot be woken by an event and a future at once).
    The caller stops what is still running.
    """
    pending = set(futures)
    while pending:
        done, pending = cf.wait(pending, timeout=None if cancel is None else 0.05, return_when=cf.FIRST_EXCEPTION)
        for f in done:
            exc = f.exception()
            if exc is not None and not isinstance(exc, Stopped):
                error = translate(exc)
                if error is exc:
                    raise exc
                raise error from exc
        if pending and cancel is not None and cancel.is_set():
            raise BackendError(cancelled)


class Malformed(Exception):
    """The server answered 200 with a body that is not a usable answer (retried as a failure)."""


class AttemptGroup:
    """The requests of one call (or one stream): a stop flag and the attempts in flight, to abort them."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self._attempts: set[Attempt] = set()
        self._lock = threading.Lock()

    def add(self, attempt: Attempt) -> None:
        with self._lock:
            self._attempts.add(attempt)
        if self.stop.is_set():
            attempt.abort()

    def discard(self, attempt: Attempt) -> None:
        with self._lock:
            self._attempts.discard(attempt)

    def abort(self) -> None:
        """Stop retrying and shut down the connections of the attempts in flight."""
        self.stop.set()
        with self._lock:
            attempts = list(self._attempts)
        for a in attempts:
            a.abort()


def _shutdown(sock: socket.socket) -> None:
    """Shut the connection down through a duplicate descriptor: the thread blocked reading ``sock``
    wakes up at once, and a TLS socket's own state is left to that thread."""
    with contextlib.suppress(OSError, ValueError):
        dup = socket.socket(fileno=os.dup(sock.fileno()))
        try:
            dup.shutdown(socket.SHUT_RDWR)
        finally:
            dup.close()


_current = threading.local()


@contextlib.contextmanager
def attempt_scope(attempt: Attempt) -> Iterator[Attempt]:
    """HTTP done by this thread inside the block belongs to ``attempt``."""
    _current.attempt = attempt
    try:
        yield attempt
    finally:
        _current.attempt = None
        attempt.release()


def _attempt() -> Attempt | None:
    return getattr(_current, "attempt", None)


def abortable_http_client(timeout: float, max_connections: int | None = None) -> Any:
    """An ``httpx.Client`` whose requests obey the calling thread's :class:`Attempt` (abort, deadline).

    The network backend of httpx's connection pool is wrapped; with an httpx that builds its pool
    differently, the client is a plain one (attempts are then bounded by ``timeout`` only).
    """
    import httpcore
    import httpx

    limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=100)
    transport = httpx.HTTPTransport(limits=limits)
    pool = getattr(transport, "_pool", None)
    backend = getattr(pool, "_network_backend", None)
    if isinstance(pool, httpcore.ConnectionPool) and backend is not None:
        pool._network_backend = _Backend(backend, httpcore)
    return httpx.Client(transport=transport, timeout=timeout, follow_redirects=True)


class _Backend:
    """An httpcore network backend whose streams obey the calling thread's Attempt."""

    def __init__(self, inner: Any, httpcore: Any) -> None:
        self.inner = inner
        self.httpcore = httpcore

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Any = None) -> Any:
        a = _attempt()
        timeout = a.timeout(timeout) if a is not None else timeout
        return _Stream(self.inner.connect_tcp(host, port, timeout, local_address, socket_options), self.httpcore)

    def connect_unix_socket(self, path: str, timeout: float | None = None, socket_options: Any = None) -> Any:
        return _Stream(self.inner.connect_unix_socket(path, timeout, socket_options), self.httpcore)

    def sleep(self, seconds: float) -> None:
        self.inner.sleep(seconds)


class _Stream:
    """A network stream whose reads and writes bind its socket to the current Attempt."""

    def __init__(self, inner: Any, httpcore: Any) -> None:
        self.inner = inner
        self.httpcore = httpcore

    def _enter(self, timeout: float | None) -> float | None:
        a = _attempt()
        if a is None:
            return timeout
        if a.aborted:
            raise self.httpcore.ReadError("the request was aborted")
        a.bind(self.inner.get_extra_info("socket"))
        return a.timeout(timeout)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self.inner.read(max_bytes, self._enter(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.inner.write(buffer, self._enter(timeout))

    def close(self) -> None:
        self.inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None) -> Any:
        return _Stream(self.inner.start_tls(ssl_context, server_hostname, timeout), self.httpcore)

    def get_extra_info(self, info: str) -> Any:
        return self.inner.get_extra_info(info)
