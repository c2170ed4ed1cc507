"""FastAPI dependencies of the server: its state, the API key, and request bodies read under limits.

- :func:`server_state`: the app's :class:`~tts.serve.state.ServerState`.
- Every dependency is ``async``: FastAPI runs a plain function on a worker thread.
- :func:`caller`: the API key check (``Authorization: Bearer <key>``, compared in constant time) as a
  ``Security`` dependency; its value is whose token bucket the request draws on.
- :class:`BodyLimitRoute`: the route class of the endpoints that take a body. FastAPI reads a body
  before it solves any dependency, so these routes check the key first (a stranger's body is never
  read), then read the body within ``max_body_bytes`` and ``body_timeout`` and bound its nesting,
  and only then let FastAPI parse and validate it against the endpoint's pydantic model.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import time
from collections.abc import Callable, Coroutine
from typing import Annotated, Any

from fastapi import Depends, Request, Response, Security
from fastapi.routing import APIRoute
from fastapi.security import APIKeyHeader
from pydantic import BaseModel, ValidationError

from tts.serve.config import ServeConfig
from tts.serve.errors import APIError
from tts.serve.guard import key_matches, rate_key
from tts.serve.state import ServerState


def state_of(request: Request) -> ServerState:
    """The state of the app serving ``request``."""
    return request.app.state.tts


async def server_state(request: Request) -> ServerState:
    """The state dependency. Async, as every dependency here: FastAPI runs a plain function on a
    worker thread, two thread hops per dependency per request for an attribute lookup."""
    return request.app.state.tts


def authorize(config: ServeConfig, authorization: str | None) -> str:
    """Whose token bucket a request with this ``Authorization`` header draws on.

    Raises:
        APIError: 401 when the server has a key and the header does not carry it.
    """
    if not key_matches(authorization, config.api_key):
        raise APIError("missing or wrong API key; send the server's key as 'Authorization: Bearer <key>' "
                       "(the openai client's api_key)", 401, code="invalid_api_key", reason="auth")
    return rate_key(authorization, config.api_key)


_authorization = APIKeyHeader(name="Authorization", auto_error=False, scheme_name="Bearer",
                              description="Bearer <the server's key> (the openai client's api_key)")


async def caller(request: Request, authorization: Annotated[str | None, Security(_authorization)]) -> str:
    """The API key dependency: whose token bucket the request draws on (see :func:`authorize`)."""
    return authorize(state_of(request).config, authorization)


State = Annotated[ServerState, Depends(server_state)]
Caller = Annotated[str, Security(caller)]


async def read_body(request: Request, config: ServeConfig) -> bytes:
    """The request body, refused past ``max_body_bytes`` (413) or ``body_timeout`` (408).

    A declared Content-Length over the limit is refused before a byte is read; a stalled upload
    must not hold its connection, so the 408 closes it.
    """
    declared = request.headers.get("content-length")
    limit = config.max_body_bytes
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise APIError(f"the request body has {declared} bytes, over this server's limit of {limit}; send a "
                       "shorter prompt or fewer messages", 413, code="body_too_large", reason="body_too_large")
    chunks, size = [], 0
    try:
        async with asyncio.timeout(config.body_timeout):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise APIError(f"the request body is over this server's limit of {limit} bytes; send a shorter "
                                   "prompt or fewer messages", 413, code="body_too_large", reason="body_too_large")
                chunks.append(chunk)
    except TimeoutError:
        raise APIError(f"the request body did not arrive within {config.body_timeout:g} s, this server's limit; "
                       "send the whole body at once", 408, code="body_timeout", headers={"Connection": "close"},
                       reason="body_timeout") from None
    return b"".join(chunks)


_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = [1 if b in b"[{" else -1 for b in range(256)]


def json_depth(raw: bytes) -> int:
    """How deep arrays and objects nest in JSON text (brackets inside strings do not count), read
    without parsing it (linear time, no recursion)."""
    brackets = _JSON_STRING.sub(b"", raw).translate(None, _NOT_BRACKET)
    return max(itertools.accumulate(map(_STEP.__getitem__, brackets)), default=0)


def check_depth(raw: bytes, max_depth: int) -> None:
    """Refuse a body nested more than ``max_depth`` arrays and objects deep, before it is parsed.

    Raises:
        APIError: Nested too deep (400).
    """
    if json_depth(raw) > max_depth:
        raise APIError(f"the request body is nested more than {max_depth} levels deep (arrays and objects "
                       "inside each other); send a flatter body", code="invalid_json")


class _LimitedRequest(Request):
    """A request whose body is read by :func:`read_body` (FastAPI's "custom Request" pattern)."""

    async def body(self) -> bytes:
        if not hasattr(self, "_body"):
            self._body = await read_body(self, state_of(self).config)
        return self._body


class BodyLimitRoute(APIRoute):
    """A route whose body is read under the server's limits, after the API key check.

    The request is marked with its endpoint and start time, so that a refusal is counted in the
    latency histogram (:func:`tts.serve.errors.refuse`).

    A JSON body that its request model accepts is parsed and validated in one pass by pydantic
    (``model_validate_json``) and the endpoint called with it, the state and the caller: FastAPI's
    own handler (its dependency solving, ``json.loads``, then validation) was a fifth of the
    server's own work per request. Any other body (not JSON by its Content-Type, malformed,
    refused by the model) goes through FastAPI's handler as before, so refusals keep their words.
    """

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handle = super().get_route_handler()
        endpoint, call = self.path, self.endpoint
        model = getattr(getattr(self.body_field, "field_info", None), "annotation", None)
        fast = isinstance(model, type) and issubclass(model, BaseModel)

        async def limited(request: Request) -> Response:
            request.state.endpoint, request.state.t0 = endpoint, time.perf_counter()
            state = state_of(request)
            config = state.config
            who = authorize(config, request.headers.get("authorization"))  # before a byte of the body is read
            request = _LimitedRequest(request.scope, request.receive)
            raw = await request.body()
            check_depth(raw, config.max_json_depth)  # before it is parsed
            if fast and _json_typed(request.headers.get("content-type")):
                try:
                    body = model.model_validate_json(raw)
                except ValidationError:
                    pass  # FastAPI's handler words the refusal
                else:
                    return await call(body=body, request=request, state=state, who=who)
            return await handle(request)

        return limited


def _json_typed(content_type: str | None) -> bool:
    """Whether FastAPI would read a body with this Content-Type as JSON (none, or application/json)."""
    return not content_type or content_type.partition(";")[0].strip().lower() == "application/json"
