"""Surviving an unreliable server: retries with back-off and jitter, and a circuit breaker.

Retries (``backoff_delay``) use exponential back-off with *full jitter* (a uniform draw between
0 and the capped exponential), which spreads the retries of many clients that failed together
("Exponential Backoff And Jitter", AWS Architecture Blog, 2015). The breaker
(:class:`CircuitBreaker`) counts consecutive failed attempts; past a threshold it opens and calls
fail at once for a cool-down, then one probe is let through (half-open): success closes it,
failure opens it again; calls that arrive while the probe is out wait for its outcome. A server
that stays down thus costs each caller one fast, clear error
instead of minutes of timeouts.
"""

from __future__ import annotations

import random
import threading
import time


def backoff_delay(attempt: int, base: float, cap: float = 30.0, rng: random.Random | None = None) -> float:
    """Seconds to wait before retry ``attempt`` (1 = first retry): uniform in [0, min(cap, base * 2^(attempt-1))]."""
    return (rng or random).uniform(0.0, min(cap, base * 2 ** (attempt - 1)))


class CircuitOpenError(RuntimeError):
    """The breaker is open: the server failed too often just now; the message says when it is tried again."""


class CircuitBreaker:
    """Closed -> open after ``failures`` consecutive failures -> half-open after ``cooldown`` s.

    Thread-safe; one breaker is shared by every request to one server.
    """

    def __init__(self, failures: int = 5, cooldown: float = 30.0, clock: object = time.monotonic) -> None:
        self.threshold = failures
        self.cooldown = cooldown
        self._clock = clock
        self._lock = threading.Condition()
        self.consecutive = 0
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
                f"circuit open after {self.consecutive} consecutive failures (last: {self.last_error}); "
                f"the server is tried again in {wait_s:.1f} s")

    def success(self) -> None:
        with self._lock:
            self.consecutive = 0
            self.opened_at = None
            self._probing = False
            self._lock.notify_all()

    def failure(self, error: str) -> None:
        with self._lock:
            self.consecutive += 1
            self.last_error = error
            if self._probing or self.consecutive >= self.threshold:
                if self.opened_at is None or self._probing:
                    self.times_opened += 1
                self.opened_at = self._clock()  # type: ignore[operator]
                self._probing = False
                self._lock.notify_all()
