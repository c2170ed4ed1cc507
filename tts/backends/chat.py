"""Chat messages with their structure: tool calls, tool results, names, and the tools offered.

A conversation reaches a backend as :class:`Message` values that keep what an agent sent: an
assistant turn's tool calls (id, name, arguments), a ``tool`` turn's ``tool_call_id``, a
participant's ``name``. Nothing is flattened to text here: the vLLM backend renders them with the
model's own chat template (``apply_chat_template(messages, tools=...)``), an OpenAI-compatible
upstream receives them as they came. :func:`messages_from_openai` reads OpenAI chat messages and
refuses what a text model cannot take (image or audio parts) instead of dropping it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

ROLES = ("system", "user", "assistant", "tool")
"""The roles a message may have (OpenAI's ``developer`` is read as ``system``)."""


class ChatInputError(ValueError):
    """A conversation that cannot be given to the model as it is (the message says what to change)."""


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
                                     "only: send the content as text parts or a string")
            texts.append(str(part.get("text", "")))
        return "".join(texts)
    raise ChatInputError(f"messages[{index}].content must be a string or a list of text parts, "
                         f"got {type(content).__name__}")


def _calls(raw: Any, index: int) -> tuple[ToolCall, ...]:
    if not raw:
        return ()
    calls = []
    for j, call in enumerate(raw):
        fn = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            raise ChatInputError(f"messages[{index}].tool_calls[{j}] needs function.name; send OpenAI's shape "
                                 '{"id": ..., "type": "function", "function": {"name": ..., "arguments": "{...}"}}')
        args = fn.get("arguments", "{}")
        args = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        calls.append(ToolCall(fn["name"], args or "{}", str(call.get("id") or "")))
    return tuple(calls)


def messages_from_openai(messages: Sequence[Mapping[str, Any]]) -> tuple[Message, ...]:
    """OpenAI chat messages as :class:`Message` values, structure kept.

    ``developer`` turns become ``system`` turns; text content parts are joined; any other part
    (an image, audio) is refused with :class:`ChatInputError`, as is an unknown role.
    """
    out = []
    for i, m in enumerate(messages):
        role = str(m.get("role", "user"))
        role = "system" if role == "developer" else role
        if role not in ROLES:
            raise ChatInputError(f"messages[{i}] has role {role!r}; use one of {', '.join(ROLES)} (or developer)")
        if role == "function":  # pragma: no cover - refused above; OpenAI's old name for tool turns
            role = "tool"
        name = m.get("name")
        call_id = m.get("tool_call_id")
        out.append(Message(role, _text(m.get("content"), i), _calls(m.get("tool_calls"), i),
                           None if call_id is None else str(call_id), None if name is None else str(name)))
    return tuple(out)


def tools_json(tools: Sequence[Mapping[str, Any]] | None) -> str | None:
    """The tools offered, as the JSON text a request carries (None for no tools)."""
    return json.dumps([dict(t) for t in tools], ensure_ascii=False) if tools else None


def function_spec(tool: Mapping[str, Any]) -> Mapping[str, Any]:
    """The function description of an OpenAI tool entry (``{"type": "function", "function": {...}}``)."""
    fn = tool.get("function")
    return fn if isinstance(fn, Mapping) else tool
