"""Refusals: one exception for every answer that is not a reply, and the handlers that render it.

Whatever refuses a request (the API key, the body's size and nesting, FastAPI's validation of the
body, the plan's checks against the operator's policy and caps, the rate limit, the concurrency
gate) raises :class:`APIError`; so does a route that cannot serve what was asked (an unknown
model id). FastAPI's and Starlette's own errors (validation, unknown paths) are turned into one
here. The one handler answers with the OpenAI error object ``{"error": {"message", "type",
"param", "code"}}`` (:class:`~tts.serve.responses.ErrorResponse`), whose message says what to
change, and counts the refusal in the metrics; a refused completion request is also counted in the
latency histogram under its endpoint (:class:`~tts.serve.deps.BodyLimitRoute` marks them). A
failed solve is answered through the same type (:func:`tts.serve.solving.failure`).
"""

from __future__ import annotations

import json
import time
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from tts.serve.responses import error_reply, json_bytes


class APIError(Exception):
    """A request answered with ``status`` and the OpenAI error object instead of a reply.

    Args:
        message: What went wrong and what to change (the client shows it).
        status: The HTTP status (a 4xx for a refusal).
        param: The request field to change, when one is to blame.
        code: A machine-readable reason (``invalid_api_key``, ``model_not_found``, ...).
        headers: Extra response headers (``Retry-After``, ``Connection: close``).
        reason: Its label in ``tts_rejected_requests_total``; None: not counted as a rejection.
    """

    def __init__(self, message: str, status: int = 400, param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None, reason: str | None = "bad_request") -> None:
        super().__init__(message)
        self.message, self.status, self.param, self.code = message, status, param, code
        self.headers, self.reason = headers, reason

    def response(self) -> Response:
        """The error object as a JSON response."""
        return Response(json_bytes(error_reply(self.message, self.status, self.param, self.code)),
                        status_code=self.status, headers=self.headers, media_type="application/json")


def not_json(exc: BaseException) -> APIError:
    """The refusal of a body that is not JSON text (``exc``: the parser's error)."""
    return APIError(f"the request body is not valid JSON ({exc}); send a JSON object with "
                    "Content-Type: application/json", code="invalid_json")


def invalid_body(errors: list[Any], doc: str | None = None) -> APIError:
    """The refusal of a body that failed validation: its first problem as 'field: problem'.

    ``errors`` are pydantic's (``ValidationError.errors()``) or FastAPI's, whose locations start
    with ``"body"`` and which also report JSON that does not parse (``json_invalid``, at its
    character offset in ``doc``) and a body that is not an object.
    """
    first = errors[0]
    loc_parts = list(first.get("loc", ()))
    if loc_parts[:1] == ["body"]:  # FastAPI's prefix: the whole body is the request model
        loc_parts = loc_parts[1:]
    if first["type"] == "json_invalid":
        pos = loc_parts[0] if loc_parts and isinstance(loc_parts[0], int) else 0
        reason = (first.get("ctx") or {}).get("error", "invalid JSON")
        return not_json(json.JSONDecodeError(str(reason), doc, pos) if isinstance(doc, str) else reason)
    if not loc_parts:  # the body as a whole
        got = first.get("input")
        if first["type"] == "missing":
            return APIError("the request body is empty; send a JSON object with Content-Type: application/json",
                            code="invalid_json")
        if isinstance(got, bytes | bytearray):
            return APIError("the request body is not JSON by its Content-Type; send a JSON object with "
                            "Content-Type: application/json", code="invalid_json")
        return APIError(f"the request body must be a JSON object, got {type(got).__name__}", code="invalid_json")
    loc = ".".join(str(x) for x in loc_parts)
    if first["type"] == "extra_forbidden":
        msg = (f"unknown field {loc!r}; remove it (tts settings go in the 'tts' object: strategy, n, "
               "budget, prompt, answer_only)")
    elif first["type"] == "missing":
        msg = f"field {loc!r} is required"
    else:
        msg = f"{loc}: {first['msg']}"
    more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
    return APIError(msg + more, param=loc or None)


def _from_framework(exc: Exception) -> APIError:
    """FastAPI's and Starlette's own errors as the server's: a body that failed validation (400, not
    FastAPI's 422, its first problem in the server's words), a body FastAPI could not decode (its
    400 wraps the decoder's error), unknown paths and methods (not counted as rejections)."""
    if isinstance(exc, RequestValidationError):
        return invalid_body(list(exc.errors()), exc.body if isinstance(exc.body, str) else None)
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 400 and isinstance(exc.__cause__, ValueError):
        return not_json(exc.__cause__)
    hint = " (see GET /v1/models; endpoints: /v1/chat/completions, /v1/completions, /v1/responses)" if exc.status_code == 404 else ""
    return APIError(f"{exc.detail}{hint}", exc.status_code, headers=exc.headers, reason=None)


async def _refuse(request: Request, exc: Exception) -> Response:
    """Answer a refused request and count it."""
    refusal = exc if isinstance(exc, APIError) else _from_framework(exc)
    metrics = request.app.state.tts.metrics
    if refusal.reason is not None:
        metrics.reject(refusal.reason)
    endpoint, t0 = getattr(request.state, "endpoint", None), getattr(request.state, "t0", None)
    if endpoint is not None and t0 is not None:
        metrics.observe(endpoint, refusal.status, time.perf_counter() - t0)
    return refusal.response()


def install(app: FastAPI) -> None:
    """Answer ``app``'s refusals in the OpenAI error shape."""
    for kind in (APIError, RequestValidationError, StarletteHTTPException):
        app.add_exception_handler(kind, _refuse)
