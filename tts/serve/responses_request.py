"""POST /v1/responses: OpenAI's Responses API request, read and translated into a chat request.

The Responses API (what the openai-agents SDK's default model class and Codex speak) carries the
conversation as ``input`` items (messages, ``function_call`` items the model made,
``function_call_output`` items with their results), the system prompt as ``instructions``, and
tools in a flat function format (``{"type": "function", "name", "parameters"}``). The body is
validated here (a 400 naming the field, ``input.2.call_id``), then translated into the
:class:`~tts.serve.protocol.ChatRequest` of the same conversation, so a Responses request runs on
the chat path: the same strategies, tool checks and voting, ``tts`` options, policy, rate limit and
API key. :mod:`tts.serve.responses_reply` writes the result back as a Response.

The server keeps no state between requests: ``previous_response_id``, ``conversation``,
``store: true``, ``background`` and ``item_reference`` items would need stored responses, which
are an operator's concern (a database, retention, access control), so they are refused with what
to send instead (the whole conversation in ``input``, as the openai-agents SDK does by default).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Discriminator, Field, Tag, TypeAdapter, ValidationError, field_validator
from pydantic_core import PydanticCustomError

from tts.serve.errors import APIError, invalid_body
from tts.serve.protocol import ChatRequest, TTSOptions, WireModel

STATELESS = ("this server stores no responses (stored state is the operator's concern); send the whole "
             "conversation in input")
"""Why a field that needs stored responses is refused, and what to send instead."""


class ContentPart(WireModel):
    """One part of a message item's content: text only (``input_text`` in what a user sends,
    ``output_text`` in an earlier assistant reply; a ``refusal`` is read as its text)."""

    model_config = ConfigDict(extra="ignore")

    type: str
    """``input_text``, ``output_text`` or ``refusal``; images, files and audio are refused."""
    text: str | None = None
    """The text of an ``input_text`` or ``output_text`` part."""
    refusal: str | None = None
    """The text of a ``refusal`` part."""

    @field_validator("type")
    @classmethod
    def _text_only(cls, v: str) -> str:
        if v not in ("input_text", "output_text", "text", "refusal"):
            raise PydanticCustomError("content", "a content part of type {kind} cannot be read: this model reads "
                                      "text only; send input_text parts or a string", {"kind": repr(v)})
        return v

    def plain(self) -> str:
        return (self.refusal if self.type == "refusal" else self.text) or ""


def _joined(content: str | list[ContentPart]) -> str:
    return content if isinstance(content, str) else "".join(p.plain() for p in content)


_PARTS = TypeAdapter(list[ContentPart])


def _text_or_parts(v: Any, handler: Any) -> Any:
    """Text, or text parts validated as a list: a refusal names the part (``content.0.type``), not
    the branch of the union it failed (``content.list[ContentPart].0.type``)."""
    return handler(v) if isinstance(v, str) else _PARTS.validate_python(v)


class _Item(WireModel):
    """An input item. Fields that only describe an earlier reply (``id``, ``status``, annotations,
    logprobs) are accepted and not used: they cannot change an answer, and clients send their
    earlier output items back as they received them."""

    model_config = ConfigDict(extra="ignore")


class MessageItem(_Item):
    """A message: what a user (or the system) said, or an earlier assistant reply."""

    type: Literal["message"] = "message"
    """``message`` (may be left out)."""
    role: Literal["user", "system", "developer", "assistant"]
    """Who speaks: ``system`` and ``developer`` set the rules, ``user`` asks, ``assistant`` answered."""
    content: str | list[ContentPart]
    """The text, or a list of text parts."""

    _content = field_validator("content", mode="wrap")(_text_or_parts)


class FunctionCallItem(_Item):
    """A function call the model made in an earlier turn."""

    type: Literal["function_call"]
    """Always ``function_call``."""
    call_id: str = Field(min_length=1)
    """The call's id; its ``function_call_output`` answers it by this id."""
    name: str
    """The function called."""
    arguments: str = "{}"
    """The arguments as JSON text."""


class FunctionCallOutputItem(_Item):
    """The result of a function call, sent back by the client."""

    type: Literal["function_call_output"]
    """Always ``function_call_output``."""
    call_id: str = Field(min_length=1)
    """The id of the ``function_call`` it answers (an earlier item)."""
    output: str | list[ContentPart]
    """The result as text (or text parts)."""

    _output = field_validator("output", mode="wrap")(_text_or_parts)


class ReasoningItem(_Item):
    """A reasoning item of an earlier reply, sent back: accepted and left out of the prompt (a
    model's chat template drops the thinking of earlier turns too)."""

    type: Literal["reasoning"]
    """Always ``reasoning``."""


def _item_kind(item: Any) -> str:
    return item.get("type", "message") if isinstance(item, dict) else getattr(item, "type", "message")


InputItem = Annotated[Annotated[MessageItem, Tag("message")] | Annotated[FunctionCallItem, Tag("function_call")]
                      | Annotated[FunctionCallOutputItem, Tag("function_call_output")]
                      | Annotated[ReasoningItem, Tag("reasoning")], Discriminator(_item_kind)]


_ITEMS: dict[str, type[_Item]] = {"message": MessageItem, "function_call": FunctionCallItem,
                                  "function_call_output": FunctionCallOutputItem, "reasoning": ReasoningItem}


class JSONFormat(WireModel):
    """``text.format``: free text, any JSON object, or JSON that matches a schema (the flat form of
    chat's ``response_format``)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    type: Literal["text", "json_object", "json_schema"]
    """``text`` (the default), ``json_object`` or ``json_schema`` (then ``schema`` is required)."""
    name: str | None = None
    """The schema's name (kept for the client)."""
    description: str | None = None
    """What the response is for (not sent to the engine)."""
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    """The JSON schema, for type ``json_schema``."""
    strict: bool | None = None
    """Accepted; structured output always matches the schema exactly."""


class TextConfig(WireModel):
    """``text``: the output's format."""

    model_config = ConfigDict(extra="forbid")

    format: JSONFormat | None = None
    """``{"type": "text"}``, ``{"type": "json_object"}`` or ``{"type": "json_schema", "name", "schema"}``."""


class Reasoning(WireModel):
    """``reasoning``: how much the request may spend."""

    model_config = ConfigDict(extra="forbid")

    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"] | None = None
    """Without ``tts.budget``: the share of the server's token budget (none and minimal 1/8, low 1/4,
    medium 1/2, high, xhigh and max all of it), as chat's ``reasoning_effort``."""
    summary: Literal["auto", "concise", "detailed"] | None = None
    """Accepted; no summary is written (a reasoning model's thinking comes whole, in a reasoning item)."""
    generate_summary: Literal["auto", "concise", "detailed"] | None = None
    """Accepted, as ``summary``."""


_EFFORT = {"none": "minimal", "minimal": "minimal", "low": "low", "medium": "medium", "high": "high",
           "xhigh": "high", "max": "high"}


class ResponsesRequest(WireModel):
    """POST /v1/responses."""

    model_config = ConfigDict(extra="forbid")

    model: str
    """``<model>`` or ``<strategy>/<model>`` (``sc-16/<model>``); GET /v1/models lists them."""
    input: str | list[InputItem]
    """The question, or the conversation as items: messages, ``function_call`` and
    ``function_call_output`` items (earlier ``reasoning`` items are accepted and left out)."""
    instructions: str | None = None
    """The system prompt, put before the conversation."""
    tools: list[dict[str, Any]] | None = None
    """Function tools in the Responses' flat format ``{"type": "function", "name", "description",
    "parameters", "strict"}``, for strategies that choose a tool call (tool_vote, sc, bon, wv)."""
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    """``none``, ``auto``, ``required`` or ``{"type": "function", "name": ...}``, as chat's ``tool_choice``."""
    parallel_tool_calls: bool | None = None
    """Accepted; the chosen reply is returned with all its calls."""
    max_output_tokens: int | None = Field(None, ge=1)
    """Most tokens of each sample (not of the whole solve: that is the budget)."""
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    """Sampling temperature of every sample; 0 is greedy."""
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    """Nucleus sampling mass of every sample."""
    stream: bool = False
    """Send the Response as server-sent events (``response.created`` ... ``response.completed``)."""
    stream_options: dict[str, Any] | None = None
    """Accepted and ignored (``include_obfuscation``: nothing is obfuscated here)."""
    text: TextConfig | None = None
    """The output's format: JSON output is voted as values, as chat's ``response_format``."""
    reasoning: Reasoning | None = None
    """``effort``: the share of the server's budget a request without ``tts.budget`` may spend."""
    include: list[Literal["reasoning.encrypted_content"]] | None = None
    """Accepted: no reasoning is encrypted here (the reasoning item carries its text)."""
    truncation: Literal["disabled"] | None = None
    """Only ``disabled``: a conversation is never cut to fit (the engine refuses one too long)."""
    store: bool | None = None
    """Only false (or left out): this server stores no responses."""
    previous_response_id: str | None = None
    """Refused when set: this server stores no responses; send the whole conversation in ``input``."""
    conversation: str | dict[str, Any] | None = None
    """Refused when set: this server stores no conversations; send the whole conversation in ``input``."""
    background: bool | None = None
    """Only false: a background response would need storing."""
    metadata: dict[str, str] | None = None
    """Accepted and echoed in the Response (not stored)."""
    user: str | None = None
    """Accepted and ignored (an end-user id)."""
    safety_identifier: str | None = None
    """Accepted and ignored (an end-user id)."""
    prompt_cache_key: str | None = None
    """Accepted and ignored (the engine's prefix cache needs no key)."""
    service_tier: str | None = None
    """Accepted and ignored (one tier here)."""
    tts: TTSOptions = Field(default_factory=TTSOptions)
    """tts settings: strategy, n, budget, stop, prompt, answer_only."""

    @field_validator("input", mode="wrap")
    @classmethod
    def _items(cls, v: Any, handler: Any) -> Any:
        """Each item validated by the model of its type, a refusal naming the item's field
        (``input.2.call_id``) rather than a branch of the union it failed."""
        if v == "" or v == []:
            raise PydanticCustomError("input", "input is empty; send the question, or the conversation as items")
        if isinstance(v, str):
            return v
        if not isinstance(v, list):
            raise PydanticCustomError("input", "input must be the question as a string or a list of items such as "
                                      '[{"role": "user", "content": "..."}], got {kind}', {"kind": type(v).__name__})
        items = []
        for i, item in enumerate(v):
            kind = _item_kind(item)
            if kind == "item_reference":
                raise PydanticCustomError("input", f"input[{i}] is an item_reference: {STATELESS}")
            if kind not in _ITEMS:
                raise PydanticCustomError("input", "input[{i}] has type {kind}; this server takes message, "
                                          "function_call, function_call_output and reasoning items",
                                          {"i": i, "kind": repr(kind)})
            try:
                items.append(_ITEMS[kind].model_validate(item))
            except ValidationError as exc:
                raise ValidationError.from_exception_data("input", [
                    {"type": PydanticCustomError(e["type"], e["msg"]),  # already worded: no placeholders left
                     "loc": (i, *e["loc"]), "input": e["input"]} for e in exc.errors()]) from None
        return items

    @field_validator("tool_choice", mode="before")
    @classmethod
    def _check_tool_choice(cls, v: Any) -> Any:
        if v is not None and not isinstance(v, dict) and v not in ("none", "auto", "required"):
            raise PydanticCustomError("tool_choice", 'give none, auto, required or {"type": "function", "name": ...}, '
                                      "got {v}", {"v": repr(v)[:60]})
        return v

    @field_validator("include", mode="before")
    @classmethod
    def _check_include(cls, v: Any) -> Any:
        for i, what in enumerate(v if isinstance(v, list) else []):
            if what != "reasoning.encrypted_content":
                raise PydanticCustomError("include", "include[{i}]={what} cannot be included here (only "
                                          "reasoning.encrypted_content is accepted); for token log-probabilities use "
                                          "POST /v1/chat/completions with logprobs", {"i": i, "what": repr(what)[:60]})
        return v

    @field_validator("store", "background")
    @classmethod
    def _not_stored(cls, v: bool | None) -> bool | None:
        if v:
            raise PydanticCustomError("stateless", f"{STATELESS}, then send false or leave it out")
        return v

    @field_validator("previous_response_id", "conversation")
    @classmethod
    def _no_state(cls, v: Any) -> Any:
        if v is not None:
            raise PydanticCustomError("stateless", f"{STATELESS} instead")
        return v


def _messages(body: ResponsesRequest) -> tuple[list[dict[str, Any]], list[str]]:
    """The chat messages of a request's instructions and input, and where each came from
    (``instructions``, ``input[3]``): consecutive ``function_call`` items become one assistant turn
    with their calls, joined to the assistant message just before them."""
    messages: list[dict[str, Any]] = []
    origins: list[str] = []
    if body.instructions:
        messages.append({"role": "system", "content": body.instructions})
        origins.append("instructions")
    if isinstance(body.input, str):
        return [*messages, {"role": "user", "content": body.input}], [*origins, "input"]
    for i, item in enumerate(body.input):
        if isinstance(item, MessageItem):
            messages.append({"role": item.role, "content": _joined(item.content)})
            origins.append(f"input[{i}]")
        elif isinstance(item, FunctionCallItem):
            call = {"id": item.call_id, "type": "function",
                    "function": {"name": item.name, "arguments": item.arguments}}
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
                origins.append(f"input[{i}]")
        elif isinstance(item, FunctionCallOutputItem):
            messages.append({"role": "tool", "tool_call_id": item.call_id, "content": _joined(item.output)})
            origins.append(f"input[{i}]")
    return messages, origins


_FLAT_TOOL = '{"type": "function", "name": ..., "description": ..., "parameters": {...}}'


def _chat_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tools in chat's nested format; a tool that is not a function is refused (tts runs the
    model, not OpenAI's hosted tools)."""
    out = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type") != "function":
            kind = tool.get("type") if isinstance(tool, dict) else type(tool).__name__
            raise APIError(f"tools[{i}] has type {kind!r}; this server offers the model function tools only, "
                           f"each {_FLAT_TOOL}", param=f"tools[{i}].type")
        out.append({"type": "function", "function": {k: v for k, v in tool.items() if k != "type"}})
    return out


def _chat_tool_choice(choice: Any) -> Any:
    """``tool_choice`` in chat's form (a named function nests its name)."""
    if not isinstance(choice, dict):
        return choice
    if choice.get("type") != "function" or not isinstance(choice.get("name"), str) or set(choice) - {"type", "name"}:
        raise APIError(f"tool_choice {choice!r} is not one this server takes; give none, auto, required or "
                       '{"type": "function", "name": ...}', param="tool_choice")
    return {"type": "function", "function": {"name": choice["name"]}}


def _response_format(text: TextConfig | None) -> dict[str, Any] | None:
    fmt = text.format if text is not None else None
    if fmt is None or fmt.type != "json_schema":
        return None if fmt is None else {"type": fmt.type}
    if fmt.schema_ is None:
        raise APIError('text.format of type json_schema needs its schema: {"type": "json_schema", "name": ..., '
                       '"schema": {...}}', param="text.format.schema")
    return {"type": "json_schema", "json_schema": {"name": fmt.name or "response", "description": fmt.description,
                                                   "schema": fmt.schema_, "strict": fmt.strict}}


def chat_request(body: ResponsesRequest) -> tuple[ChatRequest, list[str]]:
    """The :class:`ChatRequest` a Responses request runs as, and where each of its messages came
    from (for :func:`renamed`).

    Raises:
        APIError: A tool, ``tool_choice`` or format this server cannot run (400 naming the field).
    """
    messages, origins = _messages(body)
    fields = {"model": body.model, "messages": messages, "stream": body.stream, "tts": body.tts,
              "temperature": body.temperature, "top_p": body.top_p, "max_completion_tokens": body.max_output_tokens,
              "tools": _chat_tools(body.tools) if body.tools is not None else None,
              "tool_choice": _chat_tool_choice(body.tool_choice), "parallel_tool_calls": body.parallel_tool_calls,
              "response_format": _response_format(body.text), "user": body.user,
              "reasoning_effort": _EFFORT[body.reasoning.effort] if body.reasoning and body.reasoning.effort else None}
    try:
        chat = ChatRequest.model_validate({k: v for k, v in fields.items() if v is not None})
    except ValidationError as exc:
        raise renamed(invalid_body(list(exc.errors())), origins) from None
    return chat, origins


_CHAT_NAMES = {"max_tokens": "max_output_tokens", "max_completion_tokens": "max_output_tokens",
               "reasoning_effort": "reasoning.effort", "response_format": "text.format",
               "tool_call_id": "call_id"}
_NESTED_TOOL = '{"type": "function", "function": {"name": ..., "description": ..., "parameters": {...}}}'
_MESSAGE = re.compile(r"messages\[(\d+)\]")
_WORDS = re.compile(r"\b(" + "|".join(map(re.escape, _CHAT_NAMES)) + r")\b")


def renamed(exc: APIError, origins: list[str]) -> APIError:
    """A refusal of the chat path in the Responses' names: ``messages[2].tool_call_id`` becomes
    ``input[3].call_id``, ``tools[0].function.parameters`` ``tools[0].parameters``, ``max_tokens``
    ``max_output_tokens``; the message and ``param`` both."""
    def rename(text: str) -> str:
        text = _MESSAGE.sub(lambda m: origins[int(m.group(1))] if int(m.group(1)) < len(origins) else m.group(0), text)
        text = re.sub(r"(tools\[\d+\])\.function\b", r"\1", text)
        text = text.replace(_NESTED_TOOL, _FLAT_TOOL)
        return _WORDS.sub(lambda m: _CHAT_NAMES[m.group(1)], text)

    out = APIError(rename(exc.message), exc.status, rename(exc.param) if exc.param else None, exc.code,
                   exc.headers, exc.reason)
    if exc.param == "messages":
        out.param = "input"
        out.message = exc.message.replace("user message", "user message in input")
    return out
