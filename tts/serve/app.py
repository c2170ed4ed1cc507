"""The FastAPI app of ``tts serve``: OpenAI-compatible endpoints over a :class:`~tts.session.Session`.

Every request is checked before any compute is spent (API key, body size, JSON, fields, model and
strategy, ``n``, ``max_tokens``, budget, concurrency) and refused with a 4xx whose message says what
to change; the server keeps serving the others. The pieces, one concept each:

- :mod:`tts.serve.routes`: the endpoints (an ``APIRouter``);
- :mod:`tts.serve.deps`: the dependencies (the server's state, the API key) and the route class
  that reads bodies under the server's limits;
- :mod:`tts.serve.protocol`: the request models FastAPI validates, and the response shapes;
- :mod:`tts.serve.errors`: refusals in the OpenAI error shape (FastAPI's validation errors too);
- :mod:`tts.serve.planning`: what a request may run (:mod:`tts.serve.policy` holds the operator's
  allow-list and caps, shared with the MCP tool);
- :mod:`tts.serve.solving` and :mod:`tts.serve.replies`: running a plan and shaping its answer;
- :mod:`tts.serve.listing`: which model ids GET /v1/models lists;
- :mod:`tts.serve.metrics`: the Prometheus metrics (``prometheus_client``, a registry per app).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from tts.serve import errors, routes
from tts.serve.config import ServeConfig
from tts.serve.state import ServerState


def create_app(session: Any, config: ServeConfig | None = None) -> FastAPI:
    """The server app over ``session`` (which the caller opens and closes).

    Args:
        session: A :class:`tts.session.Session`.
        config: Limits and the served model name (default: ServeConfig with the session's model).

    Raises:
        ValueError: A configured verifier or strategy that cannot run with the session's settings.
    """
    config = config or ServeConfig(model=session.model_name or "tts")
    state = ServerState.build(session, config)
    app = FastAPI(title="tts serve", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.tts = state
    app.state.session, app.state.config, app.state.metrics = session, config, state.metrics
    app.state.policy = state.policy
    errors.install(app)
    for router in (routes.completions, routes.models, routes.service):
        app.include_router(router)
    return app
