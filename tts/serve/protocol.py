"""Request bodies the server accepts and the OpenAI-shaped responses it returns.

Bodies are validated with pydantic; a field the server does not know is refused (a setting that
would be silently ignored is a bug). The OpenAI sampling fields are honoured for every sample a
strategy draws (``stop``, penalties, ``logit_bias``, ``response_format``, ``seed``), ``logprobs``
are the chosen sample's, ``tool_choice`` and ``reasoning_effort`` are honoured as docs/serving.md
says, and only metadata that cannot change an answer is accepted and ignored (``user``,
``metadata``, ``store``, ``service_tier``, ``parallel_tool_calls``). tts settings ride in a
``tts`` object (``extra_body={"tts": {...}}`` in the openai client).
"""

from __future__ import annotations

import itertools
import json
import math
import re
import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError


class TTSOptions(BaseModel):
    """The ``tts`` object of a request body."""

    model_config = ConfigDict(extra="forbid")

    strategy: str | dict[str, Any] | None = None
    """A strategy instead of the one in the model name: ``sc-16``, ``beam``, or a config with ``kind``."""
    n: int | None = Field(None, ge=1)
    """Samples / candidates of the strategy (its config's ``n``)."""
    budget: float | str | dict[str, Any] | None = None
    """Compute budget: tokens, or ``{"dollars": 0.01}``, ``{"eflops": 1e15}``, ``{"gpu_seconds": 2}``."""
    prompt: Literal["math", "plain"] | None = None
    """"plain": the conversation as sent, answered in free text (chosen among the samples by
    similarity), tool calls or JSON; "math": the last question asked step by step with the answer in
    \\boxed{} (votes count equal values). None: the server's default (``--prompt``, plain unless
    the operator chose math)."""
    answer_only: bool = False
    """Reply with the answer alone instead of the chosen sample's full text."""


class ChatMessage(BaseModel):
    """One OpenAI chat message (content as text or text parts), with an assistant turn's
    ``tool_calls``, a tool turn's ``tool_call_id`` and a participant's ``name``, all kept."""

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    tool_calls: list[dict[str, Any]] | None = None
    """An assistant turn's tool calls (``{"id", "type": "function", "function": {"name", "arguments"}}``)."""
    tool_call_id: str | None = None
    """A tool turn: the id of the call it answers."""
    name: str | None = None
    """The participant's (or tool's) name."""

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(str(p.get("text", "")) for p in self.content if isinstance(p, dict))
        return self.content or ""


class JSONSchemaFormat(BaseModel):
    """``response_format.json_schema``: the schema every sample must match."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: str = "response"
    """The schema's name (kept for the client; the engine needs only the schema)."""
    description: str | None = None
    """What the response is for (not sent to the engine)."""
    schema_: dict[str, Any] = Field(default_factory=dict, alias="schema")
    """The JSON schema; {} allows any JSON value."""
    strict: bool | None = None
    """Accepted; structured output always matches the schema exactly."""


def _outside_refs(schema: Any) -> list[str]:
    """The ``$ref`` / ``$dynamicRef`` / ``$schema``-less references of a schema that do not point
    inside it (anything not starting with ``#``): URLs and file paths a resolver might fetch."""
    found, stack = [], [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("$ref", "$dynamicRef", "$recursiveRef") and isinstance(value, str) and not value.startswith("#"):
                    found.append(value)
                else:
                    stack.append(value)
        elif isinstance(node, list):
            stack.extend(node)
    return found


class ResponseFormat(BaseModel):
    """``response_format``: free text, any JSON object, or JSON that matches a schema."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["text", "json_object", "json_schema"]
    """``text`` (the default), ``json_object`` or ``json_schema`` (then ``json_schema`` is required)."""
    json_schema: JSONSchemaFormat | None = None
    """The schema, for type ``json_schema``."""

    @model_validator(mode="after")
    def _schema_given(self) -> ResponseFormat:
        if self.type == "json_schema" and self.json_schema is None:
            raise PydanticCustomError("json_schema", "type json_schema needs a json_schema object with the schema: "
                                      '{"type": "json_schema", "json_schema": {"name": ..., "schema": {...}}}')
        if self.json_schema is not None:
            outside = _outside_refs(self.json_schema.schema_)
            if outside:  # the engine's grammar compiler must never be asked to fetch a URL or read a file
                raise PydanticCustomError("json_schema", "json_schema.schema refers outside itself ({ref}); only local "
                                          "references such as '#/$defs/name' are allowed: inline the referenced schema",
                                          {"ref": outside[0][:100]})
            try:  # refused here, not by the engine, where it would fail a batch shared with other requests
                from jsonschema import Draft202012Validator
                from jsonschema.exceptions import SchemaError
            except ImportError:
                return self
            try:
                Draft202012Validator.check_schema(self.json_schema.schema_)
            except SchemaError as exc:
                raise PydanticCustomError("json_schema", "json_schema.schema is not a valid JSON schema: {why}",
                                          {"why": " ".join(str(exc.message).split())[:200]}) from None
        return self

    def schema_text(self) -> str | None:
        """The schema as JSON text for the engine; None for free text."""
        if self.type == "text":
            return None
        if self.type == "json_object" or self.json_schema is None:
            return json.dumps({"type": "object"})
        return json.dumps(self.json_schema.schema_)


class NamedFunction(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    """The function's name, one of ``tools``."""


class NamedToolChoice(BaseModel):
    """``tool_choice`` naming one function: the reply must call it."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["function"] = "function"
    """Always ``function``."""
    function: NamedFunction
    """The function to call."""


REASONING_EFFORT_SHARE: dict[str, float] = {"minimal": 0.125, "low": 0.25, "medium": 0.5, "high": 1.0}
"""The share of the server's per-request token budget (``max_budget_tokens``) that each
``reasoning_effort`` gives a request that sets no ``tts.budget``."""


class _Common(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str
    """``<model>`` or ``<strategy>/<model>`` (``sc-16/<model>``); GET /v1/models lists them."""
    n: int = 1
    """Choices, each an independent solve."""
    temperature: float | None = Field(None, ge=0.0, le=5.0)
    """Sampling temperature of every sample; 0 is greedy (then a strategy's n samples are one sample repeated)."""
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    """Nucleus sampling mass of every sample."""
    max_tokens: int | None = Field(None, ge=1)
    """Most tokens of each sample (not of the whole solve: that is the budget)."""
    stream: bool = False
    """Send progress events, then the answer, as server-sent events."""
    stream_options: dict[str, Any] | None = None
    """``{"include_usage": true}``: a last chunk with the usage."""
    seed: int | None = None
    """The seed the samples' seeds derive from; the ``tts`` extension says when the engine ignores it."""
    stop: str | list[str] | None = None
    """Up to 4 strings that end each sample (not included in the text)."""
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    """Penalty on tokens already present, for every sample."""
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    """Penalty on tokens by how often they appeared, for every sample."""
    logit_bias: dict[str, float] | None = None
    """Token id (as a string) -> bias in -100..100, for every sample."""
    response_format: ResponseFormat | None = None
    """``json_object`` / ``json_schema``: every sample is JSON (the engine's structured output) and
    the vote is over the parsed JSON values."""
    reasoning_effort: Literal["minimal", "low", "medium", "high"] | None = None
    """Without ``tts.budget``: the share of the server's token budget the request may spend
    (minimal 1/8, low 1/4, medium 1/2, high all of it)."""
    user: str | None = None
    """Accepted and ignored (an end-user id)."""
    metadata: dict[str, str] | None = None
    """Accepted and ignored (the server stores nothing)."""
    store: bool | None = None
    """Accepted and ignored (the server stores nothing)."""
    service_tier: str | None = None
    """Accepted and ignored (one tier here)."""
    tts: TTSOptions = TTSOptions()
    """tts settings: strategy, n, budget, prompt, answer_only."""

    @field_validator("stop")
    @classmethod
    def _check_stop(cls, v: str | list[str] | None) -> str | list[str] | None:
        stops = [v] if isinstance(v, str) else (v or [])
        if len(stops) > 4 or any(not s for s in stops):
            raise PydanticCustomError("stop", "give at most 4 non-empty stop strings")
        return v

    @field_validator("logit_bias")
    @classmethod
    def _check_bias(cls, v: dict[str, float] | None) -> dict[str, float] | None:
        for token, bias in (v or {}).items():
            if not token.strip().isdigit():
                raise PydanticCustomError("logit_bias", "keys are token ids such as \"50256\", got {token}",
                                          {"token": repr(token)})
            if not -100 <= bias <= 100:
                raise PydanticCustomError("logit_bias", "the bias of token {token} is {bias}; give -100..100",
                                          {"token": token, "bias": bias})
        return v

    def stops(self) -> tuple[str, ...]:
        """``stop`` as a tuple."""
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())

    def bias(self) -> tuple[tuple[int, float], ...]:
        """``logit_bias`` as (token id, bias) pairs."""
        return tuple((int(t), float(b)) for t, b in (self.logit_bias or {}).items())

    def logprobs_asked(self) -> int | None:
        """None when no logprobs are asked; else the alternatives per token to return."""
        return None


class ChatRequest(_Common):
    """POST /v1/chat/completions."""

    messages: list[ChatMessage] = Field(min_length=1)
    """The chat; its last message holds the question."""
    max_completion_tokens: int | None = Field(None, ge=1)
    """``max_tokens`` under its newer name."""
    tools: list[dict[str, Any]] | None = None
    """OpenAI tool definitions, for strategies that choose a tool call (tool_vote)."""
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    """``none``: answer in text, tools not shown; ``auto``: a tool-choosing strategy calls a tool;
    ``required`` or a named function: it must (other strategies are refused)."""
    parallel_tool_calls: bool | None = None
    """Accepted; the chosen reply is returned with all its calls."""
    logprobs: bool | None = None
    """Return the token log-probabilities of the chosen sample."""
    top_logprobs: int | None = Field(None, ge=0, le=20)
    """With ``logprobs``: the most likely alternatives at each token (0..20)."""

    @field_validator("tool_choice", mode="before")
    @classmethod
    def _check_tool_choice(cls, v: Any) -> Any:
        if isinstance(v, str) and v not in ("none", "auto", "required"):
            raise PydanticCustomError("tool_choice", "give none, auto, required or "
                                      "{\"type\": \"function\", \"function\": {\"name\": ...}}, got {v}",
                                      {"v": repr(v)})
        return v

    @field_validator("top_logprobs")
    @classmethod
    def _check_top_logprobs(cls, v: int | None, info: ValidationInfo) -> int | None:
        if v and not info.data.get("logprobs"):
            raise PydanticCustomError("top_logprobs", "top_logprobs needs logprobs: true")
        return v

    def logprobs_asked(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None


class CompletionRequest(_Common):
    """POST /v1/completions (a prompt or a list of prompts; each is one question)."""

    prompt: str | list[str]
    """One question, or a list of them."""
    logprobs: int | None = Field(None, ge=0, le=5)
    """Return the chosen sample's token log-probabilities with this many alternatives (0..5)."""

    def logprobs_asked(self) -> int | None:
        return self.logprobs


class BadRequest(ValueError):
    """A request to refuse with a 4xx; ``param`` names the field to change."""

    def __init__(self, message: str, status: int = 400, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.param = param
        self.code = code


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
        BadRequest: Nested too deep.
    """
    if json_depth(raw) > max_depth:
        raise BadRequest(f"the request body is nested more than {max_depth} levels deep (arrays and objects "
                         "inside each other); send a flatter body", code="invalid_json")


def not_json(exc: BaseException) -> BadRequest:
    """The refusal of a body that is not JSON text (``exc``: the parser's error)."""
    return BadRequest(f"the request body is not valid JSON ({exc}); send a JSON object with "
                      "Content-Type: application/json", code="invalid_json")


def invalid_body(errors: list[Any], doc: str | None = None) -> BadRequest:
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
            return BadRequest("the request body is empty; send a JSON object with Content-Type: application/json",
                              code="invalid_json")
        if isinstance(got, bytes | bytearray):
            return BadRequest("the request body is not JSON by its Content-Type; send a JSON object with "
                              "Content-Type: application/json", code="invalid_json")
        return BadRequest(f"the request body must be a JSON object, got {type(got).__name__}", code="invalid_json")
    loc = ".".join(str(x) for x in loc_parts)
    if first["type"] == "extra_forbidden":
        msg = (f"unknown field {loc!r}; remove it (tts settings go in the 'tts' object: strategy, n, "
               "budget, prompt, answer_only)")
    elif first["type"] == "missing":
        msg = f"field {loc!r} is required"
    else:
        msg = f"{loc}: {first['msg']}"
    more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
    return BadRequest(msg + more, param=loc or None)


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
    block = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
             "prompt_tokens_details": {"cached_tokens": cached}}
    # The engine's count (Usage.reasoning_tokens: every thought generated inside, from the backend's
    # reasoning parser or delimiter) where the backend gives one; else the session's count of the
    # thinking sections of the trace's samples.
    reasoning = sum(s.usage.reasoning_tokens or getattr(s, "reasoning_tokens", 0) for s in solutions)
    if reasoning:  # vLLM's and OpenAI's field: the completion tokens spent in reasoning sections
        block["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return block


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


def _chosen_text(solution: Any) -> str | None:
    trace = solution.trace
    if trace.selected is not None and 0 <= trace.selected < len(trace.samples):
        return trace.samples[trace.selected].text
    return None


def message_text(solution: Any, answer_only: bool, without_reasoning: bool = False, plain: bool = False) -> str:
    """The reply text: the chosen sample's text (its reasoning and answer), or the answer alone.

    ``without_reasoning``: leave out a reasoning section (``<think>...</think>``), which chat
    replies return apart as ``reasoning_content`` (:func:`reasoning_text`). ``plain``: the prompt was
    the conversation as sent; no answer is then an empty text (the ``tts`` extension says why), where
    the math prompt's reply says "No answer was found."."""
    from tts.backends.thinking import split_reasoning

    chosen = _chosen_text(solution)
    if not answer_only and chosen is not None:
        return split_reasoning(chosen)[1] if without_reasoning else chosen
    if solution.answer is None:  # a conversation as sent gets an empty reply, not a made-up sentence
        return "" if answer_only or plain else "No answer was found."
    return solution.answer if answer_only else f"The answer is \\boxed{{{solution.answer}}}."


def reasoning_text(solution: Any, answer_only: bool) -> str | None:
    """The chosen sample's reasoning section (vLLM's ``reasoning_content``); None without one."""
    from tts.backends.thinking import split_reasoning

    chosen = _chosen_text(solution)
    return None if answer_only or chosen is None else split_reasoning(chosen)[0]


LOGPROB_FLOOR = -9999.0
"""What a log-probability of minus infinity is sent as (JSON has no infinity): the token was
masked, e.g. by structured output. vLLM's own OpenAI server sends the same number."""


def _finite(logprob: float) -> float:
    return logprob if math.isfinite(logprob) else LOGPROB_FLOOR


def logprobs_block(solution: Any, kind: str, answer_only: bool) -> dict[str, Any] | None:
    """The chosen sample's token log-probabilities in OpenAI's shape (chat: ``content`` entries;
    completions: ``tokens``/``token_logprobs``/``top_logprobs``/``text_offset``); None when they
    were not asked, the reply is the answer alone, or no single engine sample wrote the text."""
    tokens = getattr(solution, "logprobs", None)
    if tokens is None or answer_only:
        return None
    if kind == "chat":
        def entry(token: str, logprob: float) -> dict[str, Any]:
            return {"token": token, "logprob": _finite(logprob), "bytes": list(token.encode())}

        return {"content": [{**entry(t, lp), "top_logprobs": [entry(a, alp) for a, alp in alts]}
                            for t, lp, alts in tokens], "refusal": None}
    offsets, at = [], 0
    for t, _, _ in tokens:
        offsets.append(at)
        at += len(t)
    return {"tokens": [t for t, _, _ in tokens], "token_logprobs": [_finite(lp) for _, lp, _ in tokens],
            "top_logprobs": [{a: _finite(alp) for a, alp in alts} for _, _, alts in tokens], "text_offset": offsets}


def tool_calls(solution: Any) -> list[dict[str, Any]] | None:
    """``message.tool_calls`` of a solution whose answer is tool calls: the chosen sample's calls
    with their ids, or calls built from a canonical call answer (fresh ids); None when the answer is
    not tool calls (text)."""
    from tts.backends.tool_calls import answer_calls, new_call_id

    trace = solution.trace
    if solution.answer is None:
        return None
    if trace.selected is not None and 0 <= trace.selected < len(trace.samples):
        chosen = trace.samples[trace.selected]
        if chosen.tool_calls and chosen.answer == solution.answer:
            return [{**c, "id": c.get("id") or new_call_id()} for c in chosen.tool_calls]
    calls = answer_calls(solution.answer)
    if calls is None:
        return None
    return [{"id": new_call_id(), "type": "function",
             "function": {"name": c["name"], "arguments": json.dumps(c["arguments"], ensure_ascii=False)}}
            for c in calls]
