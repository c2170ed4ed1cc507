"""The request bodies the server accepts (the replies' shapes are :mod:`tts.serve.responses`).

Bodies are validated with pydantic; a field the server does not know is refused (a setting that
would be silently ignored is a bug). The OpenAI sampling fields are honoured for every sample a
strategy draws (``stop``, penalties, ``logit_bias``, ``response_format``, ``seed``), ``logprobs``
are the chosen sample's, ``tool_choice`` and ``reasoning_effort`` are honoured as docs/serving.md
says, and only metadata that cannot change an answer is accepted and ignored (``user``,
``metadata``, ``store``, ``service_tier``, ``parallel_tool_calls``). tts settings ride in a
``tts`` object (``extra_body={"tts": {...}}`` in the openai client).

Every shape on the wire (these bodies, the replies of :mod:`tts.serve.responses`, the MCP tool's
result) derives from :class:`WireModel`, so each field's docstring is its description in
/openapi.json and in the tool's schema.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError


class WireModel(BaseModel):
    """The base of every shape tts accepts or sends over a wire: a field's docstring becomes its
    pydantic description (``use_attribute_docstrings``), which the OpenAPI and MCP schemas show to
    clients. A field without a docstring has no description, and tests/serve/test_schema_docs.py
    fails."""

    model_config = ConfigDict(use_attribute_docstrings=True)


class TTSOptions(WireModel):
    """The ``tts`` object of a request body."""

    model_config = ConfigDict(extra="forbid")

    strategy: str | dict[str, Any] | None = None
    """A strategy instead of the one in the model name: ``sc-16``, ``beam``, or a config with ``kind``."""
    n: int | None = Field(None, ge=1)
    """Samples / candidates of the strategy (its config's ``n``)."""
    budget: float | str | dict[str, Any] | None = None
    """Compute budget: tokens, or ``{"dollars": 0.01}``, ``{"eflops": 1e15}``, ``{"gpu_seconds": 2}``."""
    stop: str | dict[str, Any] | bool | None = None
    """Stop sampling once the vote is settled: a rule (``"horizon"``, ``"beta"``, ``"dirichlet"``,
    ``"exact"``, ``"window"``) or its settings (``{"rule": "horizon", "confidence": 0.95, "wave": 8}``;
    best_of_n: ``{"rule": "score", "threshold": 0.9}``); ``false`` turns the server's default stop
    off. The reply's ``tts.stop`` says what was drawn, cancelled and why it stopped."""
    prompt: Literal["math", "plain"] | None = None
    """"plain": the conversation as sent, answered in free text (chosen among the samples by
    similarity), tool calls or JSON; "math": the last question asked step by step with the answer in
    \\boxed{} (votes count equal values). None: the server's default (``--prompt``, plain unless
    the operator chose math)."""
    answer_only: bool = False
    """Reply with the answer alone instead of the chosen sample's full text."""


class ChatMessage(WireModel):
    """One OpenAI chat message (content as text or text parts), with an assistant turn's
    ``tool_calls``, a tool turn's ``tool_call_id`` and a participant's ``name``, all kept."""

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    """Who speaks: ``system`` and ``developer`` set the rules, ``user`` asks, ``assistant`` answered
    (or called tools), ``tool`` returns a call's result."""
    content: str | list[dict[str, Any]] | None = None
    """The text, or a list of parts whose ``text`` entries are joined (other parts are ignored);
    None for an assistant turn that only calls tools."""
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


class JSONSchemaFormat(WireModel):
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


class ResponseFormat(WireModel):
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


class NamedFunction(WireModel):
    """The function ``tool_choice`` names."""

    model_config = ConfigDict(extra="forbid")

    name: str
    """The function's name, one of ``tools``."""


class NamedToolChoice(WireModel):
    """``tool_choice`` naming one function: the reply must call it."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["function"] = "function"
    """Always ``function``."""
    function: NamedFunction
    """The function to call."""


REASONING_EFFORT_SHARE: dict[str, float] = {"minimal": 0.125, "low": 0.25, "medium": 0.5, "high": 1.0}
"""The share of the server's per-request token budget (``max_budget_tokens``) that each
``reasoning_effort`` gives a request that sets no ``tts.budget``."""


class _Common(WireModel):
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
    tts: TTSOptions = Field(default_factory=TTSOptions)  # a model default would be deep-copied per request
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
