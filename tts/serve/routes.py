"""The server's endpoints: /v1/chat/completions, /v1/completions, /v1/models, /health, /metrics.

Every /v1 endpoint needs the API key (:func:`tts.serve.deps.caller`); the completion endpoints read
their body under the server's limits (:class:`tts.serve.deps.BodyLimitRoute`) and FastAPI
validates it against the request model (a refusal is a 400 that names the field,
:mod:`tts.serve.errors`). Then the plan is checked against the operator's policy and caps before
any compute is spent (:mod:`tts.serve.planning`), and solved (:mod:`tts.serve.solving`).
/health and /metrics stay open.
"""

from __future__ import annotations

import asyncio
import inspect

from fastapi import APIRouter, Request, Security
from fastapi.responses import JSONResponse, Response

from tts.serve import solving
from tts.serve.deps import BodyLimitRoute, Caller, State, caller
from tts.serve.errors import error_response
from tts.serve.metrics import CONTENT_TYPE
from tts.serve.planning import plan_request
from tts.serve.protocol import ChatRequest, CompletionRequest

# A body without a Content-Type is read as JSON, as the server always did (FastAPI refuses it by
# default since it added the option).
_LENIENT = {"strict_content_type": False} if "strict_content_type" in inspect.signature(APIRouter).parameters else {}

completions = APIRouter(prefix="/v1", route_class=BodyLimitRoute, **_LENIENT)
"""The endpoints that solve."""

models = APIRouter(prefix="/v1", dependencies=[Security(caller)])

service = APIRouter()
"""Open to anyone who can reach the port: liveness and the Prometheus metrics."""


async def _solve(state: State, request: Request, kind: str, body: ChatRequest | CompletionRequest,
                 who: str) -> Response:
    plan = plan_request(state, kind, body)
    solving.admit(state, plan, who)
    if body.stream:
        return await solving.stream(state, request, plan)
    return await solving.answer(state, request, plan)


@completions.post("/chat/completions")
async def chat_completions(body: ChatRequest, request: Request, state: State, who: Caller) -> Response:
    """A chat: the last message is the question, the model name chooses the strategy."""
    return await _solve(state, request, "chat", body, who)


@completions.post("/completions")
async def text_completions(body: CompletionRequest, request: Request, state: State, who: Caller) -> Response:
    """One prompt (or a list of them), each a question."""
    return await _solve(state, request, "completions", body, who)


@models.get("/models")
async def list_models(state: State) -> Response:
    """The model ids that work on this server (:mod:`tts.serve.listing`)."""
    ids = await asyncio.to_thread(state.listing.listed)
    return JSONResponse({"object": "list", "data": [state.listing.card(m) for m in ids]})


@models.get("/models/{model_id:path}")
async def retrieve_model(model_id: str, state: State) -> Response:
    """One model id, or a 404 that says why it cannot be used here."""
    why = await asyncio.to_thread(state.listing.usable, model_id)
    if why is not None:
        return error_response(why if repr(model_id) in why else
                              f"model {model_id!r} cannot be used on this server: {why}", 404, param="model",
                              code="model_not_found")
    return JSONResponse(state.listing.card(model_id))


@service.get("/health")
async def health(state: State) -> Response:
    ok = not getattr(state.session, "closed", False)
    return JSONResponse({"status": "ok" if ok else "closed", "model": state.config.model,
                         "in_flight": state.gate.inside}, status_code=200 if ok else 503)


@service.get("/metrics")
async def metrics(state: State) -> Response:
    return Response(state.metrics.render(), media_type=CONTENT_TYPE)
