"""Refusals: the OpenAI error shape of every 4xx, and the handlers that render them.

Whatever refuses a request (the API key, the body's size, FastAPI's validation of the body, the
server's own checks of what it asks for, the rate limit, the concurrency gate) raises; the handlers
installed here answer with ``{"error": {"message", "type", "param", "code"}}``, whose message says
what to change, and count the refusal in the metrics. A refused completion request is also counted
in the latency histogram under its endpoint (:class:`~tts.serve.deps.BodyLimitRoute` marks them).
"""

from __future__ import annotations

import time

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from tts.serve import protocol
from tts.serve.protocol import BadRequest


class APIError(Exception):
    """A request refused with ``status``; ``reason`` is its label in ``tts_rejected_requests_total``
    (None: not counted as a rejection)."""

    def __init__(self, message: str, status: int, param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None, reason: str | None = "bad_request") -> None:
        super().__init__(message)
        self.message, self.status, self.param, self.code = message, status, param, code
        self.headers, self.reason = headers, reason

    @classmethod
    def bad_request(cls, exc: BadRequest) -> APIError:
        return cls(str(exc), exc.status, exc.param, exc.code)


def error_response(message: str, status: int, param: str | None = None, code: str | None = None,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    """The OpenAI error object as a response."""
    return JSONResponse(protocol.error_body(message, status, param, code), status_code=status, headers=headers)


def refuse(request: Request, exc: APIError) -> JSONResponse:
    """Answer a refused request and count it."""
    metrics = request.app.state.tts.metrics
    if exc.reason is not None:
        metrics.reject(exc.reason)
    endpoint, t0 = getattr(request.state, "endpoint", None), getattr(request.state, "t0", None)
    if endpoint is not None and t0 is not None:
        metrics.observe(endpoint, exc.status, time.perf_counter() - t0)
    return error_response(exc.message, exc.status, exc.param, exc.code, exc.headers)


async def _api_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, APIError)
    return refuse(request, exc)


async def _bad_request(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, BadRequest)
    return refuse(request, APIError.bad_request(exc))


async def _invalid(request: Request, exc: Exception) -> JSONResponse:
    """FastAPI's validation of a body: 400 (not FastAPI's 422), its first problem in the server's words."""
    assert isinstance(exc, RequestValidationError)
    doc = exc.body if isinstance(exc.body, str) else None
    return refuse(request, APIError.bad_request(protocol.invalid_body(list(exc.errors()), doc)))


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    """Starlette's and FastAPI's own errors: unknown paths and methods, and a body FastAPI could not
    decode (its 400 wraps the decoder's error)."""
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 400 and isinstance(exc.__cause__, ValueError):
        return refuse(request, APIError.bad_request(protocol.not_json(exc.__cause__)))
    hint = " (see GET /v1/models; endpoints: /v1/chat/completions, /v1/completions)" if exc.status_code == 404 else ""
    return error_response(f"{exc.detail}{hint}", exc.status_code, headers=exc.headers)


def install(app: FastAPI) -> None:
    """Answer ``app``'s refusals in the OpenAI error shape."""
    app.add_exception_handler(APIError, _api_error)
    app.add_exception_handler(BadRequest, _bad_request)
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(StarletteHTTPException, _http_error)
