"""Who may call the server and how much: the API key check and the concurrency gate."""

from __future__ import annotations

import hmac
import threading


def key_matches(header: str | None, api_key: str | None) -> bool:
    """Whether an ``Authorization`` header carries ``api_key`` (always True without a key).

    The comparison takes the same time wherever the strings differ (``hmac.compare_digest``), so
    response timing does not reveal how much of a guess was right.
    """
    if api_key is None:
        return True
    scheme, _, given = (header or "").partition(" ")
    if scheme.lower() != "bearer":
        given = ""
    return hmac.compare_digest(given.strip().encode(), api_key.encode())


class ConcurrencyGate:
    """At most ``limit`` requests inside at once; ``try_enter`` refuses rather than waits."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.inside = 0
        self._lock = threading.Lock()

    def try_enter(self) -> bool:
        with self._lock:
            if self.inside >= self.limit:
                return False
            self.inside += 1
            return True

    def leave(self) -> None:
        with self._lock:
            self.inside -= 1
