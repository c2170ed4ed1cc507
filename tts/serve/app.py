"""The FastAPI app of ``tts serve``: OpenAI-compatible endpoints over a :class:`~tts.session.Session`.

Every request is checked before any compute is spent (API key, body size, JSON, fields, model and
strategy, ``n``, ``max_tokens``, budget, concurrency) and refused with a 4xx whose message says what
to change; the server keeps serving the others. The pieces, one concept each:

- :mod:`tts.serve.routes`: the endpoints (``APIRouter``s);
- :mod:`tts.serve.deps`: the dependencies (the server's state, the API key) and the route class
  that reads bodies under the server's limits;
- :mod:`tts.serve.protocol`: the request models FastAPI validates;
- :mod:`tts.serve.responses`: the reply models (what /openapi.json describes);
- :mod:`tts.serve.errors`: the one refusal type and its handler (the OpenAI error shape);
- :mod:`tts.serve.planning`: what a request may run (:mod:`tts.serve.policy` holds the operator's
  allow-list and caps, shared with the MCP tool);
- :mod:`tts.serve.solving` and :mod:`tts.serve.replies`: running a plan and shaping its answer;
- :mod:`tts.serve.responses_request` and :mod:`tts.serve.responses_reply`: the Responses API
  (POST /v1/responses), translated into a chat plan and its answer written back as a Response;
- :mod:`tts.serve.listing`: which model ids GET /v1/models lists;
- :mod:`tts.serve.metrics`: the Prometheus metrics (``prometheus_client``, a registry per app).

The OpenAPI schema is served at /openapi.json (with ``docs``, the default), behind the API key
like every /v1 endpoint; the browsable page at /docs only on a server without a key.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic.json_schema import models_json_schema

from tts.serve import errors, routes
from tts.serve.config import ServeConfig
from tts.serve.listing import ModelListing
from tts.serve.planning import plan_request
from tts.serve.responses import StreamChunk
from tts.serve.responses_reply import ResponseStreamEvent
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
    state.listing = ModelListing(session, config.model, lambda body: plan_request(state, "chat", body))
    app = FastAPI(title="tts serve", summary="Test-time compute strategies behind an OpenAI-compatible API",
                  docs_url=None, redoc_url=None, openapi_url=None)
    app.state.tts = state
    app.state.session, app.state.config, app.state.metrics = session, config, state.metrics
    app.state.policy = state.policy
    errors.install(app)
    for router in (routes.completions, routes.models, routes.service):
        app.include_router(router)
    if config.docs:
        app.include_router(routes.docs)
        if config.api_key is None:
            app.add_api_route("/docs", routes.swagger, methods=["GET"], include_in_schema=False)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's schema of the app, plus the streamed replies: ``text/event-stream`` of
    :class:`~tts.serve.responses.StreamChunk` beside each completion endpoint's JSON reply, and of
    :class:`~tts.serve.responses_reply.ResponseStreamEvent` beside /v1/responses'."""
    if app.openapi_schema is None:
        schema = get_openapi(title=app.title, version=app.version, summary=app.summary, routes=app.routes)
        _, defs = models_json_schema([(StreamChunk, "serialization"), (ResponseStreamEvent, "serialization")],
                                     ref_template="#/components/schemas/{model}")
        schema.setdefault("components", {}).setdefault("schemas", {}).update(defs.get("$defs", {}))
        for path, event in (("/v1/chat/completions", "StreamChunk"), ("/v1/completions", "StreamChunk"),
                            ("/v1/responses", "ResponseStreamEvent")):
            content = schema["paths"][path]["post"]["responses"]["200"]["content"]
            content["text/event-stream"] = {"schema": {"$ref": f"#/components/schemas/{event}"}}
        app.openapi_schema = schema
    return app.openapi_schema
