"""The shapes of what ``tts serve`` answers, as pydantic models: completions, stream chunks, model
cards, health and the OpenAI error object.

The routes declare them (``response_model`` and ``responses``), so /openapi.json describes every
reply; :mod:`tts.serve.replies` builds them from solutions and each is serialised once, by
pydantic (:func:`json_bytes`), never validated again on the way out. A field whose value is None
where OpenAI's own replies leave the key out (``reasoning_content``, ``notes``,
``completion_tokens_details``, a chunk's ``usage``) is left out here too.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


def _none(value: Any) -> bool:
    return value is None


def _omitted(description: str, default: Any = None) -> Any:
    """A field left out of the JSON while it is None (OpenAI leaves such keys out)."""
    return Field(default, exclude_if=_none, description=description)


class _Reply(BaseModel):
    """A reply part (a base, so that all can change together)."""


def json_bytes(reply: BaseModel) -> bytes:
    """``reply`` as the JSON body sent to the client (pydantic's serialiser, in one pass)."""
    return reply.__pydantic_serializer__.to_json(reply)


# --- errors ---------------------------------------------------------------------------------------

class ErrorDetail(_Reply):
    message: str
    """What went wrong and what to change."""
    type: str
    """``invalid_request_error``, ``authentication_error``, ``not_found_error``, ``rate_limit_error`` or
    ``server_error``."""
    param: str | None = None
    """The request field to change, when one is to blame."""
    code: str | None = None
    """A machine-readable reason (``invalid_api_key``, ``model_not_found``, ``budget_too_large``, ...)."""


class ErrorResponse(_Reply):
    """The body of every refusal and failure (OpenAI's error object)."""

    error: ErrorDetail


_ERROR_TYPES = {401: "authentication_error", 404: "not_found_error", 413: "invalid_request_error",
                429: "rate_limit_error"}


def error_reply(message: str, status: int, param: str | None = None, code: str | None = None) -> ErrorResponse:
    """The OpenAI error object of a ``status`` answer (the openai client shows ``message``)."""
    kind = _ERROR_TYPES.get(status, "invalid_request_error" if status < 500 else "server_error")
    return ErrorResponse(error=ErrorDetail(message=message, type=kind, param=param, code=code))


# --- usage and the tts extension -------------------------------------------------------------------

class PromptTokensDetails(_Reply):
    cached_tokens: int = 0


class CompletionTokensDetails(_Reply):
    reasoning_tokens: int
    """Completion tokens spent in reasoning sections (``<think>...</think>``)."""


class CompletionUsage(_Reply):
    """Every token spent inside the request: all samples, steps and verifier calls."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails
    completion_tokens_details: CompletionTokensDetails | None = _omitted("Only when reasoning tokens were counted.")


class ChoiceExtension(_Reply):
    """The ``tts`` object of one choice: how its answer was reached and what it cost."""

    strategy: str
    """The strategy config that ran (``self_consistency@8``; ``@3 of 16: budget`` when the budget cut n)."""
    answer: str | None
    """The chosen answer; None when no sample gave one."""
    confidence: float
    """Share of the vote or normalised score behind the answer, 0-1."""
    cost: dict[str, Any]
    """``tokens``, ``prompt_tokens``, ``completion_tokens``, ``calls``, ``wall_seconds``, and when priced
    ``eflops``, ``gpu_seconds``, ``dollars``, ``gpu``, ``priced_as``."""
    budget: dict[str, Any] | None
    """What the budget did (``amount``, ``unit``, ``as_tokens``, ``n_asked``, ``n_drawn``); None without one."""
    answers: list[Any]
    """Every sample's answer, in generation order."""
    votes: dict[str, Any]
    """Answer -> vote, for voting strategies."""
    events: dict[str, Any]
    """Counts of things that went wrong without ending the solve."""
    engine_requests: int
    """Generation requests the solve sent to the engine."""
    notes: list[str] | None = _omitted("What the server says about how the request was served.")


class ReplyExtension(_Reply):
    """The ``tts`` object of a whole reply: the first choice's answer, every choice's cost."""

    strategy: str
    answer: str | None
    confidence: float
    cost: dict[str, Any]
    answers: list[Any]
    budget: dict[str, Any] | None
    notes: list[str] | None = _omitted("What the server says about how the request was served.")


# --- chat and text completions ----------------------------------------------------------------------

class FunctionCall(_Reply):
    model_config = ConfigDict(extra="allow")

    name: str
    arguments: str
    """The arguments as JSON text."""


class MessageToolCall(_Reply):
    model_config = ConfigDict(extra="allow")

    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class TopLogprob(_Reply):
    token: str
    logprob: float
    bytes: list[int]


class TokenLogprob(_Reply):
    token: str
    logprob: float
    """The token's log-probability (-9999.0 for a token the engine masked)."""
    bytes: list[int]
    top_logprobs: list[TopLogprob]


class ChatLogprobs(_Reply):
    content: list[TokenLogprob]
    refusal: None = None


class CompletionLogprobs(_Reply):
    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]]
    text_offset: list[int]


class AssistantMessage(_Reply):
    role: Literal["assistant"] = "assistant"
    content: str | None
    """The chosen sample's text (its reasoning section apart); None when it calls tools."""
    tool_calls: list[MessageToolCall] | None = _omitted("The chosen reply's calls, when it calls tools.")
    reasoning_content: str | None = _omitted("A reasoning model's thinking (vLLM's field).")


class ChatChoice(_Reply):
    index: int
    message: AssistantMessage
    finish_reason: Literal["stop", "tool_calls", "length"]
    """``"length"``: ``max_tokens`` cut the reply (never a tool call then)."""
    logprobs: ChatLogprobs | None = None
    tts: ChoiceExtension


class ChatCompletion(_Reply):
    """The answer of POST /v1/chat/completions (not streamed)."""

    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: CompletionUsage
    """Every token spent inside the request, not only the chosen reply's."""
    tts: ReplyExtension


class CompletionChoice(_Reply):
    index: int
    text: str
    finish_reason: Literal["stop", "length"] = "stop"
    """``"length"``: ``max_tokens`` cut the text."""
    logprobs: CompletionLogprobs | None = None
    tts: ChoiceExtension


class TextCompletion(_Reply):
    """The answer of POST /v1/completions (not streamed)."""

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: CompletionUsage
    tts: ReplyExtension


# --- streams ----------------------------------------------------------------------------------------

class Delta(_Reply):
    role: Literal["assistant"] | None = _omitted("The first chunk of a choice.")
    content: str | None = _omitted("The answer's text.")
    tool_calls: list[dict[str, Any]] | None = _omitted("The answer's calls, each with its ``index``.")


class ChatChunkChoice(_Reply):
    index: int
    delta: Delta
    finish_reason: Literal["stop", "tool_calls", "length"] | None = None
    logprobs: None = None


class CompletionChunkChoice(_Reply):
    index: int
    text: str
    finish_reason: Literal["stop", "length"] | None = None
    logprobs: None = None


class StreamChunk(_Reply):
    """One server-sent event of a streamed reply: progress (``tts.event = "progress"``), a choice's
    answer and finish (``"answer"``), then the usage."""

    id: str
    object: Literal["chat.completion.chunk", "text_completion"]
    created: int
    model: str
    choices: list[ChatChunkChoice] | list[CompletionChunkChoice]
    usage: CompletionUsage | None = _omitted("The last chunk, with stream_options.include_usage.")
    tts: dict[str, Any] | None = _omitted("The event: progress (step, samples, tokens) or answer.")


# --- models and health ------------------------------------------------------------------------------

class ModelCard(_Reply):
    id: str
    """A model id a request may name (``sc-8/<model>``)."""
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "tts"


class ModelList(_Reply):
    """GET /v1/models: the ids that work with this server's configuration."""

    object: Literal["list"] = "list"
    data: list[ModelCard]


class Health(_Reply):
    status: Literal["ok", "closed"]
    model: str
    in_flight: int
    """Requests being solved now."""
