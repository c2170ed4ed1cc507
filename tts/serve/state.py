"""What one ``tts serve`` app holds between requests: the session, the operator's config and
policy, the metrics, the concurrency gate and the token rate limit.

It lives on ``app.state.tts``; route handlers reach it through :func:`tts.serve.deps.server_state`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tts.serve.config import ServeConfig
from tts.serve.guard import ConcurrencyGate
from tts.serve.metrics import Metrics
from tts.serve.policy import ServePolicy
from tts.serve.ratelimit import TokenRateLimit


@dataclass
class ServerState:
    """One server's shared state (built by :meth:`build`)."""

    session: Any
    """The :class:`tts.session.Session` every request solves on."""
    config: ServeConfig
    policy: ServePolicy
    """What requests may name and set (:mod:`tts.serve.policy`)."""
    metrics: Metrics
    gate: ConcurrencyGate
    limiter: TokenRateLimit | None
    """Generated tokens per minute per API key; None without ``rate_limit_tokens``."""
    plain: Any
    """The prompt template of ``tts.prompt: "plain"`` and of JSON output (the question as written)."""
    listing: Any = field(default=None)
    """GET /v1/models' record of which model ids work (a :class:`tts.serve.listing.ModelListing`,
    which :func:`tts.serve.app.create_app` sets: the listing plans requests, and planning reads this
    state, so the state does not build it)."""

    @classmethod
    def build(cls, session: Any, config: ServeConfig) -> ServerState:
        """The state of a server over ``session``.

        Raises:
            ValueError: A configured verifier or strategy that cannot run (see :meth:`ServePolicy.build`).
        """
        from tts.prompts import PromptTemplate

        limiter = TokenRateLimit(config.rate_limit_tokens) if config.rate_limit_tokens is not None else None
        return cls(session=session, config=config, policy=ServePolicy.build(config, session),
                   metrics=Metrics(lambda: session.stats), gate=ConcurrencyGate(config.max_concurrent),
                   limiter=limiter, plain=PromptTemplate())
