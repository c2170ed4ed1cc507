"""Who may call the server and how much: the API key check, the rate-limit identity and the concurrency gate."""

from __future__ import annotations

import hashlib
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


def rate_key(header: str | None, api_key: str | None) -> str:
    """Whose token bucket a request draws on: its API key, or the whole server when the server
    has no key (then any bearer a client sends is no identity: a new one must not buy a new
    bucket). Call after :func:`key_matches` accepted the request."""
    if api_key is None:
        return ""
    scheme, _, given = (header or "").partition(" ")
    return hashlib.sha256(given.strip().encode()).hexdigest()[:16] if scheme.lower() == "bearer" else ""


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
