"""What a failed solve answers: its HTTP status, a one-line message for the client, and a code.

A prompt over the model's context is the client's to fix (400), however the backend said it; an
upstream's 429 or 503 keeps its status and Retry-After; an upstream's refusal of the request as
malformed (400, 413, 422) is the client's to fix too (400, or 413, with the upstream's message); a
strategy's refusal of its inputs is a 400; a backend failure a 502, naming the server that failed.
Internals (class names, tracebacks) stay in the server's log.
"""

from __future__ import annotations

import logging
import re
from typing import Any

logger = logging.getLogger(__name__)


def solve_error(exc: BaseException) -> tuple[int, str, str]:
    """(status, one-line message, code) of a solve that failed.

    A prompt over the model's context is the client's to fix (400), however the backend said
    it: the vLLM backend's own check, vLLM's client errors, an upstream's 400 (vLLM's server
    or OpenAI's ``context_length_exceeded``). An upstream 429 or 503 keeps its status (its
    Retry-After goes on with :func:`solve_headers`). Internals (class names, tracebacks) stay
    in the log.
    """
    from tts.backends.base import BackendError
    from tts.search.base import StrategyInputError

    chain = _causes(exc)
    upstream = next((e for e in chain if isinstance(getattr(e, "status_code", None), int)), None)
    status = upstream.status_code if upstream is not None else None
    if any(_too_long(e) for e in chain) and (status in (None, 400, 413, 422)):
        return (400, f"the prompt does not fit the model's context: {_context_detail(chain)}; shorten the "
                "messages or lower max_tokens", "context_length_exceeded")
    if status in (429, 503):
        wait = solve_headers(exc)
        after = f"; retry after {wait['Retry-After']} s" if wait else "; retry later"
        return (status, f"the model server behind tts is {'rate limiting' if status == 429 else 'overloaded'} "
                f"(HTTP {status}){after}", "upstream_rate_limited" if status == 429 else "upstream_unavailable")
    if status in CLIENT_FAULTS:  # the request was malformed (a bad tool, a bad value): the client's to fix
        return (413 if status == 413 else 400, f"the model server behind tts refused the request (HTTP {status}): "
                f"{one_line(upstream, _upstream_message(upstream))}", "invalid_request")
    if any(_vllm_client_error(e) for e in chain):
        return 400, one_line(next(e for e in chain if _vllm_client_error(e))), "invalid_request"
    if isinstance(exc, (StrategyInputError, ValueError)):
        return 400, one_line(exc), "invalid_strategy_input"
    if isinstance(exc, BackendError):  # its message names the server (its URL, without credentials)
        return 502, f"the generation backend failed: {one_line(exc, links=True)}", "backend_error"
    if isinstance(exc, RuntimeError) and "closed" in str(exc):
        return 503, "the server is shutting down; retry on another instance", "shutting_down"
    logger.error("solve failed", exc_info=exc)
    return 500, "internal error while solving (the server's log has the details); please report it", "internal_error"


CLIENT_FAULTS = (400, 413, 422)
"""An upstream's statuses that refuse a request as malformed: the client's fault, answered as such,
never counted against the upstream's health (the breaker). 401, 403 and 404 refuse tts's own
settings (its API key, its model name), which the client cannot change: a 502."""


def solve_headers(exc: BaseException) -> dict[str, str] | None:
    """The upstream's Retry-After (of a 429 or 503 inside ``exc``), to pass on; None without one."""
    for e in _causes(exc):
        if getattr(e, "status_code", None) in (429, 503):
            value = str(getattr(getattr(e, "response", None), "headers", {}).get("retry-after") or "").strip()
            if value and len(value) <= 64 and value.replace(" ", "").replace(",", "").replace(":", "").isalnum():
                return {"Retry-After": value}
    return None


_CONTEXT = re.compile(r"maximum context length|maximum model length|max_model_len|context_length_exceeded|"
                      r"context window", re.IGNORECASE)


def _causes(exc: BaseException) -> list[BaseException]:
    """``exc`` and what it wraps: causes, contexts and a retry wrapper's last error."""
    out: list[BaseException] = []
    stack: list[Any] = [exc]
    while stack:
        e = stack.pop()
        if not isinstance(e, BaseException) or any(e is seen for seen in out):
            continue
        out.append(e)
        stack += [getattr(e, "last", None), e.__context__, e.__cause__]
    return out


def _upstream_message(e: BaseException) -> str:
    """An upstream error's own message (the openai client's ``body``: vLLM's ``{"message"}`` or
    OpenAI's ``{"error": {"message"}}``), else the exception's text."""
    body = getattr(e, "body", None)
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        body = body["error"]
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return body["message"]
    return str(e)


def _too_long(e: BaseException) -> bool:
    """Whether ``e`` says a prompt is over the model's context (how vLLM, its server and OpenAI say it)."""
    return getattr(e, "code", None) == "context_length_exceeded" or bool(_CONTEXT.search(_upstream_message(e)))


def _context_detail(chain: list[BaseException]) -> str:
    """What the innermost error said about the context, as one line for a client (no internal
    request keys, no advice meant for the operator)."""
    e = next(e for e in reversed(chain) if _too_long(e))
    text = re.sub(r"Prompt of request \S+ has", "the prompt has", one_line(e, _upstream_message(e)))
    sentences = [x for x in re.split(r"(?<=\.)\s+", text)
                 if x and not x.startswith(("Please", "Make sure", "Raise", "Error code"))]
    return " ".join(sentences).rstrip(".") or "the prompt is too long"


def _vllm_client_error(e: BaseException) -> bool:
    """vLLM's errors caused by the request (``VLLMClientError``; vLLM answers them with a 4xx),
    recognised without importing vllm."""
    return any(c.__name__ == "VLLMClientError" for c in type(e).__mro__)


def one_line(exc: BaseException, text: str | None = None, links: bool = False) -> str:
    """A message on one line for a client: pydantic's first error as 'field: problem', no
    links (``links``: keep them, for a message that names the server that failed), no pydantic
    type tags or model class names."""
    from pydantic import ValidationError

    if isinstance(exc, ValidationError) and text is None:
        errors = exc.errors()
        first = errors[0]
        loc = ".".join(str(x) for x in first["loc"])
        msg = f"{loc!r} is required" if first["type"] == "missing" else (f"{loc}: {first['msg']}" if loc else first["msg"])
        return msg + (f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else "")
    text = str(exc) if text is None else text
    text = re.sub(r"\d+ validation errors? for \S+", "", text)
    text = re.sub(r"\s*For further information visit \S+", "", text)
    text = re.sub(r"\s*\[type=[^\]]*\]", "", text)
    if not links:
        text = re.sub(r"https?://\S+", "", text)
    return " ".join(text.split()) or "the request failed"
