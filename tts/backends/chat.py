"""Chat messages with their structure: tool calls, tool results, names, and the tools offered.

A conversation reaches a backend as :class:`Message` values that keep what an agent sent: an
assistant turn's tool calls (id, name, arguments), a ``tool`` turn's ``tool_call_id``, a
participant's ``name``. Nothing is flattened to text here: the vLLM backend renders them with the
model's own chat template (``apply_chat_template(messages, tools=...)``), an OpenAI-compatible
upstream receives them as they came. :func:`messages_from_openai` reads OpenAI chat messages and
refuses what a text model cannot take (image or audio parts) instead of dropping it, and a tool
result that answers no earlier call (OpenAI's API refuses both). :func:`check_tools` holds the
tools offered to OpenAI's tool schema. Every entry point (the library, ``tts serve``, ``tts mcp``)
checks its input with these before any compute is spent; the errors name the field to change.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

ROLES = ("system", "user", "assistant", "tool")
"""The roles a message may have (OpenAI's ``developer`` is read as ``system``)."""


class ChatInputError(ValueError):
    """A conversation or tool list that cannot be given to the model as it is: the one-line message
    says what to change, ``param`` names the field (``messages[2].tool_call_id``,
    ``tools[0].function.parameters``) when one is to blame."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call of a tool, as a model wrote it or an agent sent it back.

    Args:
        name: The function's name.
        arguments: Its arguments as JSON text (an object), as OpenAI's ``function.arguments``.
        id: The call's id (``call_...``); a ``tool`` message answers it by this id.
    """

    name: str
    arguments: str = "{}"
    id: str = ""

    def args(self) -> dict[str, Any]:
        """The arguments as a dict ({} when they do not parse to an object)."""
        try:
            value = json.loads(self.arguments) if self.arguments.strip() else {}
        except (json.JSONDecodeError, RecursionError):
            return {}
        return value if isinstance(value, dict) else {}

    def to_openai(self) -> dict[str, Any]:
        """OpenAI's ``tool_calls`` entry."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(frozen=True, slots=True)
class Message:
    """One chat message.

    Args:
        role: "system", "user", "assistant" or "tool".
        content: Its text ("" for an assistant turn that only calls tools).
        tool_calls: An assistant turn's tool calls.
        tool_call_id: A ``tool`` turn: the id of the call it answers.
        name: The participant's or tool's name, when given.
    """

    role: str
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None

    def to_openai(self) -> dict[str, Any]:
        """The message as OpenAI's API takes it (arguments as JSON text)."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [c.to_openai() for c in self.tool_calls]
            if not self.content:
                out["content"] = None
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            out["name"] = self.name
        return out

    def to_template(self) -> dict[str, Any]:
        """The message as Hugging Face chat templates take it: a tool call's arguments as a dict
        (templates write them with ``tojson``; a string would be written as a quoted string)."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.args()}}
                                 for c in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            out["name"] = self.name
        return out


def _text(content: Any, index: int) -> str:
    """A message's text: a string, or OpenAI content parts of which only text ones are accepted."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        texts = []
        for part in content:
            kind = part.get("type") if isinstance(part, Mapping) else None
            if kind not in ("text", "input_text", None) or not isinstance(part, Mapping):
                raise ChatInputError(f"messages[{index}] has a content part of type {kind!r}; this model reads text "
                                     "only: send the content as text parts or a string", f"messages[{index}].content")
            texts.append(str(part.get("text", "")))
        return "".join(texts)
    raise ChatInputError(f"messages[{index}].content must be a string or a list of text parts, "
                         f"got {type(content).__name__}", f"messages[{index}].content")


def _calls(raw: Any, index: int) -> tuple[ToolCall, ...]:
    if not raw:
        return ()
    calls = []
    for j, call in enumerate(raw):
        fn = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            raise ChatInputError(f"messages[{index}].tool_calls[{j}] needs function.name; send OpenAI's shape "
                                 '{"id": ..., "type": "function", "function": {"name": ..., "arguments": "{...}"}}',
                                 f"messages[{index}].tool_calls[{j}]")
        args = fn.get("arguments", "{}")
        args = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        calls.append(ToolCall(fn["name"], args or "{}", str(call.get("id") or "")))
    return tuple(calls)


def messages_from_openai(messages: Sequence[Mapping[str, Any]]) -> tuple[Message, ...]:
    """OpenAI chat messages as :class:`Message` values, structure kept.

    ``developer`` turns become ``system`` turns; text content parts are joined; any other part
    (an image, audio) is refused with :class:`ChatInputError`, as is an unknown role, and a
    ``tool`` turn whose ``tool_call_id`` is missing or answers no call of an earlier assistant
    turn (as OpenAI's API refuses it: the model would read a result of a call it never made).
    """
    if isinstance(messages, str | bytes) or not isinstance(messages, Sequence):
        raise ChatInputError("messages must be a list of chat messages such as "
                             f'[{{"role": "user", "content": "..."}}], got {type(messages).__name__}', "messages")
    out = []
    called: list[str] = []  # the ids of the calls made so far, in order
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            raise ChatInputError(f'messages[{i}] must be an object such as {{"role": "user", "content": "..."}}, '
                                 f"got {type(m).__name__}", f"messages[{i}]")
        role = str(m.get("role", "user"))
        role = "system" if role == "developer" else role
        if role not in ROLES:
            raise ChatInputError(f"messages[{i}] has role {role!r}; use one of {', '.join(ROLES)} (or developer)",
                                 f"messages[{i}].role")
        name = m.get("name")
        call_id = m.get("tool_call_id")
        message = Message(role, _text(m.get("content"), i), _calls(m.get("tool_calls"), i),
                          None if call_id is None else str(call_id), None if name is None else str(name))
        if role == "tool":
            _check_answers_a_call(message, i, called)
        called.extend(c.id for c in message.tool_calls if c.id)
        out.append(message)
    return tuple(out)


def _check_answers_a_call(message: Message, index: int, called: list[str]) -> None:
    """Refuse a tool result without the id of a call an earlier assistant turn made."""
    param = f"messages[{index}].tool_call_id"
    made = (f"the calls made before it have ids {', '.join(repr(c) for c in called[-5:])}" if called
            else "no earlier assistant message calls a tool")
    if not message.tool_call_id:
        raise ChatInputError(f"{param} is missing: a tool message must answer a call of an earlier assistant message "
                             f"by its id ({made}); set it, or send the tool's result as a user message", param)
    if message.tool_call_id not in called:
        raise ChatInputError(f"{param}={message.tool_call_id!r} answers no tool call of an earlier assistant message "
                             f"({made}); send the assistant message with that call before its result, or fix the id",
                             param)


def tools_json(tools: Sequence[Mapping[str, Any]] | None) -> str | None:
    """The tools offered, as the JSON text a request carries (None for no tools)."""
    return json.dumps([dict(t) for t in tools], ensure_ascii=False) if tools else None


def function_spec(tool: Mapping[str, Any]) -> Mapping[str, Any]:
    """The function description of an OpenAI tool entry (``{"type": "function", "function": {...}}``)."""
    fn = tool.get("function")
    return fn if isinstance(fn, Mapping) else tool


# --- the tools offered: OpenAI's tool schema ------------------------------------------------------

TOOL_NAME_PATTERN = r"^[a-zA-Z0-9_-]{1,64}$"
"""A function name OpenAI's API accepts (1-64 letters, digits, underscores, hyphens)."""

_TOOL_SHAPE = '{"type": "function", "function": {"name": ..., "description": ..., "parameters": {...}}}'


class FunctionDefinition(BaseModel):
    """``tools[].function``: what the model is told about one function (OpenAI's fields, no others)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    name: str = Field(pattern=TOOL_NAME_PATTERN)
    """The name the model calls it by."""
    description: str | None = None
    """What it does, for the model."""
    parameters: dict[str, Any] | None = None
    """Its arguments as a JSON schema object; left out: it takes none."""
    strict: bool | None = None
    """OpenAI's structured-output flag for the arguments (accepted; passed on as sent)."""


class ToolDefinition(BaseModel):
    """One entry of ``tools``: a function the model may call."""

    model_config = ConfigDict(extra="forbid", strict=True)

    type: Literal["function"]
    """Always ``function`` (the only kind of tool a chat model is shown)."""
    function: FunctionDefinition


def check_tools(tools: Any) -> list[dict[str, Any]]:
    """The tools as sent (a list of dicts), each checked against OpenAI's tool schema.

    Checked: the list, each entry's ``type`` (``function``) and ``function`` object, its ``name``
    (:data:`TOOL_NAME_PATTERN`), ``description`` (text), ``parameters`` (a JSON schema object,
    ``type: object`` when it names a type) and ``strict`` (true/false), and no other fields. A
    malformed tool is refused here rather than rendered into a prompt, sent to an upstream that
    answers 400, or met by a strategy halfway through a solve.

    Raises:
        ChatInputError: The first problem, its ``param`` the field (``tools[0].function.parameters``).
    """
    if isinstance(tools, str | bytes | Mapping) or not isinstance(tools, Sequence):
        raise ChatInputError(f"tools must be a list of tool objects such as [{_TOOL_SHAPE}], "
                             f"got {type(tools).__name__}", "tools")
    for i, tool in enumerate(tools):
        try:
            ToolDefinition.model_validate(tool)
        except ValidationError as exc:
            raise _tool_error(exc.errors()[0], i) from None
        parameters = tool["function"].get("parameters")
        if parameters is not None:
            problem = _schema_problem(json.dumps(parameters, sort_keys=True, default=str))
            if problem:
                param = f"tools[{i}].function.parameters"
                raise ChatInputError(f"{param} is not a valid JSON schema ({problem}); send an object schema such "
                                     'as {"type": "object", "properties": {"city": {"type": "string"}}}', param)
    return [dict(t) for t in tools]


def _tool_error(error: Mapping[str, Any], index: int) -> ChatInputError:
    """One pydantic error of ``tools[index]`` as a line that names the field and what to send."""
    loc = tuple(error["loc"])
    param = f"tools[{index}]" + "".join(f".{part}" for part in loc)
    got = error.get("input")
    got_text = f"{type(got).__name__} {_short(got)}" if got is not None else "null"
    if error["type"] == "missing":
        message = f"{param} is required; send each tool as {_TOOL_SHAPE}"
    elif error["type"] == "extra_forbidden":
        fields = "type, function" if len(loc) == 1 else "name, description, parameters, strict"
        message = f"{param} is not a field of an OpenAI tool (it has {fields}); remove it"
    elif not loc:
        message = f"{param} must be an object {_TOOL_SHAPE}, got {got_text}"
    elif loc == ("type",):
        message = f"{param} must be \"function\" (the only kind of tool here), got {got_text}"
    elif loc == ("function",):
        message = f"{param} must be an object {{\"name\": ..., \"parameters\": {{...}}}}, got {got_text}"
    elif loc == ("function", "name"):
        message = f"{param}={_short(got)} is not a function name; use 1 to 64 letters, digits, _ or -"
    elif loc == ("function", "parameters"):
        message = (f"{param} must be a JSON schema object such as {{\"type\": \"object\", \"properties\": "
                   f"{{...}}}} (or left out), got {got_text}")
    elif loc == ("function", "description"):
        message = f"{param} must be text (or left out), got {got_text}"
    elif loc == ("function", "strict"):
        message = f"{param} must be true or false (or left out), got {got_text}"
    else:  # pragma: no cover - every field of the two models is named above
        message = f"{param}: {str(error['msg'])[:1].lower()}{str(error['msg'])[1:]}, got {got_text}"
    return ChatInputError(message, param)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


@functools.lru_cache(maxsize=256)
def _schema_problem(schema_json: str) -> str | None:
    """What is wrong with a tool's parameters schema (given as sorted JSON text, so that an agent's
    tools, sent again every turn, are checked once); None when it is a valid object schema."""
    schema = json.loads(schema_json)
    if "type" in schema and schema["type"] != "object":
        return f"its type is {schema['type']!r}; a function's parameters are an object, \"type\": \"object\""
    try:
        from jsonschema import Draft202012Validator
        from jsonschema.exceptions import best_match
    except ImportError:  # pragma: no cover - a dependency of the MCP SDK, always installed with tts
        return None
    error = best_match(Draft202012Validator(Draft202012Validator.META_SCHEMA).iter_errors(schema))
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path)
    return f"{where + ': ' if where else ''}{' '.join(str(error.message).split())[:160]}"
