"""The server's endpoints: /v1/chat/completions, /v1/completions, /v1/models, /health, /metrics,
and the OpenAPI schema of them all.

Every /v1 endpoint needs the API key (:func:`tts.serve.deps.caller`); the completion endpoints read
their body under the server's limits (:class:`tts.serve.deps.BodyLimitRoute`) and FastAPI
validates it against the request model (a refusal is a 400 that names the field,
:mod:`tts.serve.errors`). Then the plan is checked against the operator's policy and caps before
any compute is spent (:mod:`tts.serve.planning`), and solved (:mod:`tts.serve.solving`).
/health and /metrics stay open.

Each endpoint declares its reply (:mod:`tts.serve.responses`) and its refusals, for the OpenAPI
schema only: the handlers return responses already serialised, so FastAPI neither validates nor
encodes a reply a second time.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

from fastapi import APIRouter, Request, Security
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse, Response

from tts import tracing
from tts.serve import solving
from tts.serve.deps import BodyLimitRoute, Caller, State, caller
from tts.serve.errors import APIError
from tts.serve.metrics import CONTENT_TYPE
from tts.serve.planning import plan_request
from tts.serve.protocol import ChatRequest, CompletionRequest
from tts.serve.responses import ChatCompletion, ErrorResponse, Health, ModelCard, ModelList, TextCompletion, json_bytes

# A body without a Content-Type is read as JSON, as the server always did (FastAPI refuses it by
# default since it added the option).
_LENIENT = {"strict_content_type": False} if "strict_content_type" in inspect.signature(APIRouter).parameters else {}


def _errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI entries of the refusals an endpoint answers (all in the OpenAI error shape)."""
    why = {400: "A field to change (the message names it)", 401: "Missing or wrong API key",
           404: "A model or strategy this server does not serve", 408: "The body arrived too slowly",
           413: "The body is over the server's limit", 422: "tool_choice demanded a call and no sample made one",
           429: "Over the concurrency limit or the key's token rate (Retry-After says when to retry)",
           502: "The generation backend failed", 503: "The upstream is overloaded or the server is shutting down"}
    return {status: {"model": ErrorResponse, "description": why[status]} for status in statuses}


_SOLVE_ERRORS = _errors(400, 401, 404, 408, 413, 422, 429, 502, 503)

completions = APIRouter(prefix="/v1", route_class=BodyLimitRoute, **_LENIENT)
"""The endpoints that solve."""

models = APIRouter(prefix="/v1", dependencies=[Security(caller)], responses=_errors(401))

service = APIRouter()
"""Open to anyone who can reach the port: liveness and the Prometheus metrics."""

docs = APIRouter(include_in_schema=False)
"""The OpenAPI schema, behind the API key (``create_app`` adds the browsable page, :func:`swagger`,
only to a server without a key: a browser cannot send one)."""


async def _solve(state: State, request: Request, kind: str, body: ChatRequest | CompletionRequest,
                 who: str) -> Response:
    # The caller's trace (a `traceparent` header) is the parent of this request's span and its solves'.
    attrs = {"http.request.method": "POST", "url.path": request.url.path, "gen_ai.request.model": body.model,
             "tts.stream": bool(body.stream)}
    with tracing.span("tts.serve.request", attrs, kind="server", parent=tracing.extract_context(request.headers)) as span:
        plan = plan_request(state, kind, body)
        solving.admit(state, plan, who)
        response = await (solving.stream if body.stream else solving.answer)(state, request, plan)
        tracing.set_attributes(span, {"http.response.status_code": response.status_code})
        return response


@completions.post("/chat/completions", response_model=ChatCompletion, responses=_SOLVE_ERRORS)
async def chat_completions(body: ChatRequest, request: Request, state: State, who: Caller) -> Response:
    """A chat: the last message is the question, the model name chooses the strategy. With
    ``stream: true`` the reply is server-sent events (``StreamChunk``), then ``data: [DONE]``."""
    return await _solve(state, request, "chat", body, who)


@completions.post("/completions", response_model=TextCompletion, responses=_SOLVE_ERRORS)
async def text_completions(body: CompletionRequest, request: Request, state: State, who: Caller) -> Response:
    """One prompt (or a list of them), each a question. With ``stream: true`` the reply is server-sent
    events (``StreamChunk``), then ``data: [DONE]``."""
    return await _solve(state, request, "completions", body, who)


def _json(reply: Any, status: int = 200) -> Response:
    return Response(json_bytes(reply), status_code=status, media_type="application/json")


@models.get("/models", response_model=ModelList)
async def list_models(state: State) -> Response:
    """The model ids that work on this server (:mod:`tts.serve.listing`)."""
    ids = await asyncio.to_thread(state.listing.listed)
    return _json(ModelList(data=[state.listing.card(m) for m in ids]))


@models.get("/models/{model_id:path}", response_model=ModelCard, responses=_errors(404))
async def retrieve_model(model_id: str, state: State) -> Response:
    """One model id, or a 404 that says why it cannot be used here."""
    why = await asyncio.to_thread(state.listing.usable, model_id)
    if why is not None:
        raise APIError(why if repr(model_id) in why else f"model {model_id!r} cannot be used on this server: {why}",
                       404, param="model", code="model_not_found", reason=None)
    return _json(state.listing.card(model_id))


@service.get("/health", response_model=Health, responses={503: {"model": Health, "description": "Closed"}})
async def health(state: State) -> Response:
    """Liveness: 200 while the session is open, 503 once it is closed."""
    ok = not getattr(state.session, "closed", False)
    return _json(Health(status="ok" if ok else "closed", model=state.config.model, in_flight=state.gate.inside),
                 200 if ok else 503)


@service.get("/metrics", response_class=Response,
             responses={200: {"content": {CONTENT_TYPE: {}}, "description": "Prometheus text"}})
async def metrics(state: State) -> Response:
    """The Prometheus metrics (requests, latency, tokens, cost, engine calls, disconnects)."""
    return Response(state.metrics.render(), media_type=CONTENT_TYPE)


@docs.get("/openapi.json", dependencies=[Security(caller)])
async def openapi(request: Request) -> Response:
    """The OpenAPI schema (built once, then kept by the app)."""
    return JSONResponse(request.app.openapi())


async def swagger() -> HTMLResponse:
    """The schema as a browsable page (Swagger UI)."""
    return get_swagger_ui_html(openapi_url="/openapi.json", title="tts serve")
