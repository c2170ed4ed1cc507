"""Request bodies the server accepts and the OpenAI-shaped responses it returns.

Bodies are validated with pydantic; a field the server does not know is refused (a setting that
would be silently ignored is a bug), except a few OpenAI fields that do not change the answer
(``user``, ``tool_choice``, ``parallel_tool_calls``, ``stream_options``). tts settings ride in a
``tts`` object (``extra_body={"tts": {...}}`` in the openai client).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class TTSOptions(BaseModel):
    """The ``tts`` object of a request body."""

    model_config = ConfigDict(extra="forbid")

    strategy: str | dict[str, Any] | None = None
    """A strategy instead of the one in the model name: ``sc-16``, ``beam``, or a config with ``kind``."""
    n: int | None = Field(None, ge=1)
    """Samples / candidates of the strategy (its config's ``n``)."""
    budget: float | str | dict[str, Any] | None = None
    """Compute budget: tokens, or ``{"dollars": 0.01}``, ``{"eflops": 1e15}``, ``{"gpu_seconds": 2}``."""
    prompt: Literal["math", "plain"] = "math"
    """"math": the question is asked step by step with the answer in \\boxed{}; "plain": sent as written."""
    answer_only: bool = False
    """Reply with the answer alone instead of the chosen sample's full text."""


class ChatMessage(BaseModel):
    """One OpenAI chat message (content as text or text parts)."""

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(str(p.get("text", "")) for p in self.content if isinstance(p, dict))
        return self.content or ""


class _Common(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str
    n: int = 1
    temperature: float | None = Field(None, ge=0.0, le=5.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    max_tokens: int | None = Field(None, ge=1)
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    seed: int | None = None
    user: str | None = None
    tts: TTSOptions = TTSOptions()


class ChatRequest(_Common):
    """POST /v1/chat/completions."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None


class CompletionRequest(_Common):
    """POST /v1/completions (a prompt or a list of prompts; each is one question)."""

    prompt: str | list[str]


class BadRequest(ValueError):
    """A request to refuse with a 4xx; ``param`` names the field to change."""

    def __init__(self, message: str, status: int = 400, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.param = param
        self.code = code


def parse_body(raw: bytes, model: type[BaseModel]) -> Any:
    """Validate a JSON body; a BadRequest that says which field to change otherwise."""
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadRequest(f"the request body is not valid JSON ({exc}); send a JSON object with "
                         "Content-Type: application/json", code="invalid_json") from None
    if not isinstance(data, dict):
        raise BadRequest(f"the request body must be a JSON object, got {type(data).__name__}", code="invalid_json")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(x) for x in first["loc"])
        msg = first["msg"]
        if first["type"] == "extra_forbidden":
            msg = (f"unknown field {loc!r}; remove it (tts settings go in the 'tts' object: strategy, n, "
                   "budget, prompt, answer_only)")
        elif first["type"] == "missing":
            msg = f"field {loc!r} is required"
        else:
            msg = f"{loc}: {msg}"
        more = f" (and {len(exc.errors()) - 1} more problem(s))" if len(exc.errors()) > 1 else ""
        raise BadRequest(msg + more, param=loc or None) from None


def error_body(message: str, status: int, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    """The OpenAI error object (the openai client shows ``message``)."""
    kind = {401: "authentication_error", 404: "not_found_error", 413: "invalid_request_error",
            429: "rate_limit_error"}.get(status, "invalid_request_error" if status < 500 else "server_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def now() -> int:
    return int(time.time())


def usage_block(solutions: list[Any]) -> dict[str, Any]:
    """OpenAI ``usage`` over every token spent inside: all samples, steps and verifier calls."""
    prompt = sum(s.usage.prompt_tokens for s in solutions)
    completion = sum(s.usage.completion_tokens for s in solutions)
    cached = sum(s.usage.cached_prompt_tokens for s in solutions)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached}}


def tts_block(solution: Any) -> dict[str, Any]:
    """The ``tts`` extension of one choice: answer, confidence, cost and every sample's answer."""
    trace = solution.trace
    return {
        "strategy": solution.strategy,
        "answer": solution.answer,
        "confidence": solution.confidence,
        "cost": solution.cost,
        "budget": solution.budget,
        "answers": [s.answer for s in trace.samples],
        "votes": dict(trace.votes),
        "events": dict(trace.events),
        "engine_requests": solution.usage.calls,
    }


def message_text(solution: Any, answer_only: bool) -> str:
    """The reply text: the chosen sample's text (its reasoning and answer), or the answer alone."""
    trace = solution.trace
    if not answer_only and trace.selected is not None and 0 <= trace.selected < len(trace.samples):
        return trace.samples[trace.selected].text
    if solution.answer is None:
        return "" if answer_only else "No answer was found."
    return solution.answer if answer_only else f"The answer is \\boxed{{{solution.answer}}}."


def tool_call(solution: Any) -> list[dict[str, Any]] | None:
    """``message.tool_calls`` from a tool-choosing strategy's answer (canonical JSON
    ``{"name": ..., "arguments": {...}}``); None when the answer is not such a call."""
    if solution.answer is None:
        return None
    try:
        call = json.loads(solution.answer)
    except (TypeError, json.JSONDecodeError):
        return None
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return None
    args = call.get("arguments", {})
    return [{"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
             "function": {"name": call["name"], "arguments": args if isinstance(args, str) else json.dumps(args)}}]
