"""Reading tool calls from what a model wrote, checking them against the tools offered, and the
canonical form in which calls are compared (the answer of a reply that calls tools).

Backends read calls first with the engine's own parser (vLLM's tool parsers, an upstream's
``message.tool_calls``). Small models often write a call the parser does not read (Qwen2.5-Coder-1.5B
writes a fenced JSON block, not the ``<tool_call>`` tags of its own template), so
:func:`read_tool_calls` is tts's lenient reader,
the documented fallback: ``<tool_call>`` blocks, else fenced JSON blocks, else the first ``{...}``
of the reply; each block an object ``{"name", "arguments"}`` (or ``parameters``, or OpenAI's
``{"function": {...}}``) or a list of them, also with doubled outer braces (``{{...}}``, copied from
the example in Qwen2.5's template).

:func:`check_calls` keeps a reply's calls only when every one names an offered tool, has its
required arguments and arguments that are an object; otherwise the reply holds a malformed call
(it votes for nothing). :func:`calls_answer` is the canonical JSON list of the calls (argument keys
sorted), the "answer" every strategy compares.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from tts.backends.base import LENGTH
from tts.backends.chat import ToolCall, function_spec

_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)

NO_CALL, MALFORMED = "no_tool_call", "malformed_tool_call"
"""Why a reply holds no usable call: nothing that looks like one, or one that is broken or not offered."""


def new_call_id() -> str:
    """A fresh OpenAI-style call id."""
    return f"call_{uuid.uuid4().hex[:24]}"


def _sorted(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _sorted(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, list):
        return [_sorted(v) for v in value]
    return value


def canonical(name: str, arguments: Mapping[str, Any]) -> str:
    """The canonical JSON of one call: ``{"name": ..., "arguments": {...}}``, argument keys sorted."""
    return json.dumps({"name": name, "arguments": _sorted(dict(arguments))}, ensure_ascii=False)


def calls_answer(calls: Sequence[ToolCall]) -> str:
    """The answer of a reply that calls tools: the canonical JSON list of its calls, in order."""
    return json.dumps([{"name": c.name, "arguments": _sorted(c.args())} for c in calls], ensure_ascii=False)


def answer_calls(answer: str | None) -> list[dict[str, Any]] | None:
    """The calls of a :func:`calls_answer` (also a single call's :func:`canonical` JSON); None when
    ``answer`` is not such an answer (text, a number)."""
    if not answer or answer[:1] not in "[{":
        return None
    try:
        value = json.loads(answer)
    except (json.JSONDecodeError, RecursionError):
        return None
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(c, dict) and isinstance(c.get("name"), str)
                            and isinstance(c.get("arguments", {}), dict) and set(c) <= {"name", "arguments"}
                            for c in items):
        return None
    return [{"name": c["name"], "arguments": c.get("arguments", {})} for c in items]


def _blocks(text: str) -> list[str]:
    """Candidate JSON texts of a reply: ``<tool_call>`` blocks, else fenced blocks, else the first {...}."""
    blocks = _TOOL_CALL.findall(text)
    if blocks:
        return blocks
    fenced = _FENCE.findall(text)
    if fenced:
        return fenced
    start = min((i for i in (text.find("{"), text.find("[{")) if i >= 0), default=-1)
    end = max(text.rfind("}"), text.rfind("]"))
    return [text[start: end + 1]] if start >= 0 and end > start else []


def _undoubled(block: str) -> str:
    """A call written with doubled braces (``{{"name": ...}}``), as Qwen2.5's chat template shows
    its example call (a format string's escaping the model copies), with the outer pair undoubled."""
    if block.startswith("{{") and block.endswith("}}"):
        inner = block[1:-1]
        try:
            json.loads(inner)
            return inner
        except (json.JSONDecodeError, ValueError, RecursionError):
            return block
    return block


def _one(obj: Any) -> tuple[ToolCall | None, str]:
    if isinstance(obj, Mapping) and isinstance(obj.get("function"), Mapping):
        obj = obj["function"]  # the OpenAI message shape {"type": "function", "function": {...}}
    if not isinstance(obj, Mapping) or not isinstance(obj.get("name"), str):
        return None, MALFORMED if isinstance(obj, Mapping) and "name" in obj else NO_CALL
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except (json.JSONDecodeError, ValueError):
            return None, MALFORMED
    if not isinstance(args, Mapping):
        return None, MALFORMED
    return ToolCall(obj["name"], json.dumps(dict(args), ensure_ascii=False), new_call_id()), "ok"


def read_tool_calls(text: str) -> tuple[tuple[ToolCall, ...], str]:
    """Every call of a reply, read leniently (module docstring).

    Returns:
        ``(calls, "ok")``, or ``((), why)`` with why :data:`NO_CALL` or :data:`MALFORMED` (a
        ``<tool_call>`` block or an object naming a tool that does not parse).
    """
    calls: list[ToolCall] = []
    for block in _blocks(text):
        block = _undoubled(block.strip())
        try:
            obj = json.loads(block)
        except (json.JSONDecodeError, ValueError, RecursionError):
            # Broken JSON is a malformed call inside <tool_call> tags or when it names a tool; other
            # braces (a \boxed{4}, a set) are prose, not an attempt at a call.
            if "<tool_call>" in text or '"name"' in block:
                return (), MALFORMED
            continue
        for item in (obj if isinstance(obj, list) and obj else [obj]):
            call, why = _one(item)
            if call is None:
                if why == MALFORMED:
                    return (), MALFORMED
                continue
            calls.append(call)
    return (tuple(calls), "ok") if calls else ((), NO_CALL)


def check_calls(calls: Sequence[ToolCall], tools: Sequence[Mapping[str, Any]] | None) -> str:
    """``"ok"`` when every call names an offered tool and carries its required arguments (no tools
    given: every call is accepted), else :data:`MALFORMED`."""
    if not tools:
        return "ok"
    specs = {function_spec(t).get("name"): function_spec(t) for t in tools}
    for call in calls:
        spec = specs.get(call.name)
        if spec is None:
            return MALFORMED
        try:
            args = json.loads(call.arguments) if call.arguments.strip() else {}
        except (json.JSONDecodeError, RecursionError):
            return MALFORMED
        if not isinstance(args, dict):
            return MALFORMED
        required = (spec.get("parameters") or {}).get("required") or ()
        if any(r not in args for r in required):
            return MALFORMED
    return "ok"


def uncut_calls(text: str, calls: tuple[ToolCall, ...], why: str | None,
                finish_reason: str | None) -> tuple[tuple[ToolCall, ...], str | None]:
    """The calls of a reply (``calls``, ``why``: what a reader found) as ``Completion.tool_calls`` and
    ``tool_call_error``, once it is known whether ``max_tokens`` cut it (``finish_reason`` "length").

    A cut-off call is not a call: its arguments may stop mid-way, later calls may be missing, and a
    lenient reader may still find a complete-looking block before the cut. A cut reply that holds
    or began a call (calls read, a malformed one, a ``<tool_call>`` tag, an object naming a tool)
    is therefore malformed, never a call; cut prose stays prose (no call).
    """
    if finish_reason != LENGTH:
        return calls, why
    brace = text.find("{")
    if calls or why == MALFORMED or "<tool_call>" in text or (brace >= 0 and '"name"' in text[brace:]):
        return (), MALFORMED
    return calls, why


def tools_from_json(text: str | None) -> list[dict[str, Any]]:
    """The tools of a request's ``tools`` JSON text ([] for None)."""
    return json.loads(text) if text else []


def reply_tool_calls(text: str, tools: str | None, parsed: Sequence[ToolCall] | None = None,
                     finish_reason: str | None = None) -> tuple[tuple[ToolCall, ...], str | None]:
    """The checked calls of one reply to a request that offered ``tools`` (JSON text), and why it
    has none (``Completion.tool_calls`` and ``tool_call_error``).

    ``parsed``: the calls the engine's own parser read (vLLM's tool parser, an upstream's
    ``message.tool_calls``); when it read none, tts's lenient reader (:func:`read_tool_calls`) reads
    the text. Calls that fail :func:`check_calls` make the reply malformed (no calls), and so does
    a call in a reply that ``max_tokens`` cut (``finish_reason`` "length"; :func:`uncut_calls`).
    """
    calls, why = (tuple(parsed), "ok") if parsed else read_tool_calls(text)
    if not calls:
        return uncut_calls(text, (), why, finish_reason)
    if check_calls(calls, tools_from_json(tools)) != "ok":
        return (), MALFORMED
    return uncut_calls(text, calls, None, finish_reason)
