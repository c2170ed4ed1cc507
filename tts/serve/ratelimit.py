"""A token rate limit per API key: one token bucket per key, refilled continuously.

A request reserves its worst case (the generated tokens its budget allows) before it runs and
gets back what it did not spend when it finishes, so a key never spends more than the bucket's
size plus its refill, however many of its requests run at once. A request that does not fit waits
for the bucket: :meth:`TokenRateLimit.reserve` says how many seconds until it would fit.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable


class TokenRateLimit:
    """At most ``per_minute`` generated tokens a minute for each key.

    Each key has a bucket of ``per_minute`` tokens (full at first) refilled at ``per_minute / 60``
    tokens a second.

    Args:
        per_minute: The bucket size and its refill per minute.
        clock: Seconds, monotonic (tests pass a fake one).

    Example:
        >>> limit = TokenRateLimit(600, clock=lambda: 0.0)
        >>> limit.reserve("k", 500), limit.reserve("k", 200)
        (0, 10)
    """

    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        if per_minute < 1:
            raise ValueError(f"per_minute must be at least 1, got {per_minute}")
        self.per_minute = per_minute
        self.per_second = per_minute / 60.0
        self._clock = clock
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, when)

    def _level(self, key: str, now: float) -> float:
        tokens, when = self._buckets.get(key, (float(self.per_minute), now))
        return min(float(self.per_minute), tokens + (now - when) * self.per_second)

    def available(self, key: str) -> float:
        """Tokens in ``key``'s bucket now."""
        with self._lock:
            return self._level(key, self._clock())

    def reserve(self, key: str, tokens: int) -> int:
        """Take ``tokens`` from ``key``'s bucket: 0 when taken, else the whole seconds until the
        bucket holds them (nothing is taken then).

        Raises:
            ValueError: ``tokens`` is more than the bucket ever holds.
        """
        if tokens > self.per_minute:
            raise ValueError(f"{tokens} tokens is more than a minute's {self.per_minute}")
        with self._lock:
            now = self._clock()
            level = self._level(key, now)
            if level >= tokens:
                self._buckets[key] = (level - tokens, now)
                return 0
            return max(1, math.ceil((tokens - level) / self.per_second))

    def refund(self, key: str, tokens: int) -> None:
        """Give back ``tokens`` of a reservation that were not spent."""
        if tokens <= 0:
            return
        with self._lock:
            now = self._clock()
            self._buckets[key] = (min(float(self.per_minute), self._level(key, now) + tokens), now)
