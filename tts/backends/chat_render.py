"""Rendering a structured conversation with a model's own chat template, tools included, and reading
the calls of its replies with vLLM's tool parsers (the ones vLLM's OpenAI server uses).

The vLLM backend hands :func:`template_messages` and the tools to the tokenizer's
``apply_chat_template(messages, tools=...)``, so the model sees tools and tool turns in the format it
was trained on (Qwen2.5's ``<tools>`` system block and ``<tool_response>`` turns, Llama 3.1's ipython
role, ...). A template that knows nothing of tools (SmolLM2's) would drop them silently; for such a
template, and only then, :func:`fallback_messages` writes them into the messages in the Hermes format
(:data:`TOOLS_FALLBACK`: the tools in a system message, earlier calls in ``<tool_call>`` tags, results
as user turns in ``<tool_response>`` tags), which is documented in docs/serving.md.

:class:`VLLMToolReader` reads the calls of a reply with the vLLM tool parser named in the backend
config (``tool_parser``, default ``hermes``, the parser vLLM's server uses for Qwen2.5 and Hermes);
where it reads none, tts's lenient reader (:func:`tts.backends.tool_calls.reply_tool_calls`) reads
the text, since small models write calls their parser does not read (a fenced JSON block).

A request whose ``tool_choice`` forces a call (``"required"``, or a named function) is decoded under
the JSON schema vLLM's server uses for it (:func:`forced_call_schema`) and read back as the server
reads it (:func:`read_forced_calls`): the reply is a call, never prose.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from tts.backends.chat import Message, ToolCall, function_spec
from tts.backends.tool_calls import MALFORMED, check_calls, new_call_id, reply_tool_calls, tools_from_json

logger = logging.getLogger(__name__)

TOOLS_FALLBACK = (
    "You may call one of the following tools to help with the user's request. The tools are described in JSON "
    "inside <tools></tools>:\n<tools>\n{tools}\n</tools>\n\nTo call a tool, reply with a JSON object with the tool's "
    "name and its arguments inside <tool_call></tool_call> tags:\n<tool_call>\n"
    '{{"name": "<tool name>", "arguments": {{"<argument>": "<value>"}}}}\n</tool_call>')
"""The system text that offers the tools to a model whose chat template takes none (``{tools}``: one
JSON object per line)."""


def template_takes_tools(tokenizer: Any) -> bool:
    """Whether the tokenizer's chat template renders tools (it reads a ``tools`` variable)."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        template = template.get("tool_use") or template.get("default")
    return isinstance(template, str) and "tools" in template


def template_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The messages as Hugging Face chat templates take them (tool calls with dict arguments)."""
    return [m.to_template() for m in messages]


def fallback_messages(messages: Sequence[Message], tools: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The conversation as plain (role, content) turns for a template without tools (module docstring)."""
    out: list[dict[str, str]] = []
    for m in messages:
        if m.role == "tool":
            out.append({"role": "user", "content": f"<tool_response>\n{m.content}\n</tool_response>"})
            continue
        content = m.content
        for c in m.tool_calls:
            content += f"\n<tool_call>\n{json.dumps({'name': c.name, 'arguments': c.args()}, ensure_ascii=False)}\n</tool_call>"
        out.append({"role": m.role, "content": content.strip() if m.tool_calls else content})
    if tools:
        offer = TOOLS_FALLBACK.format(tools="\n".join(json.dumps(function_spec(t), ensure_ascii=False) for t in tools))
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": f"{out[0]['content']}\n\n{offer}"}
        else:
            out.insert(0, {"role": "system", "content": offer})
    return out


def render_chat(tokenizer: Any, messages: Sequence[Message], tools_text: str | None) -> str:
    """The prompt text of a conversation: the model's chat template with the tools (or, for a template
    without tools, the fallback messages), ready for generation."""
    tools = tools_from_json(tools_text)
    if not tools and not any(m.tool_calls or m.role == "tool" for m in messages):
        plain = [{"role": m.role, "content": m.content} for m in messages]
        return tokenizer.apply_chat_template(plain, tokenize=False, add_generation_prompt=True)
    if template_takes_tools(tokenizer):
        return tokenizer.apply_chat_template(template_messages(messages), tools=tools or None, tokenize=False,
                                             add_generation_prompt=True)
    return tokenizer.apply_chat_template(fallback_messages(messages, tools), tokenize=False,
                                         add_generation_prompt=True)


class VLLMToolReader:
    """Reads the tool calls of replies with a vLLM tool parser, then tts's lenient reader.

    Args:
        tokenizer: The engine's tokenizer (the parser needs it).
        parser: A vLLM tool parser name (``hermes``, ``llama3_json``, ``mistral``, ...; vLLM's
            ``--tool-call-parser`` names), or None for tts's lenient reader alone; an unknown
            name is refused at the first request with tools (:meth:`parser_class`).
    """

    def __init__(self, tokenizer: Any, parser: str | None) -> None:
        self.tokenizer = tokenizer
        self.name = parser
        self._cls: Any = None

    def parser_class(self) -> Any:
        """vLLM's parser class (looked up on first use, so that building a backend imports nothing).

        Raises:
            ValueError: An unknown parser name (the message lists vLLM's).
        """
        if self._cls is None and self.name is not None:
            from vllm.tool_parsers import ToolParserManager

            try:
                self._cls = ToolParserManager.get_tool_parser(self.name)
            except KeyError:
                names = ", ".join(ToolParserManager.list_registered())
                raise ValueError(f"unknown vLLM tool parser {self.name!r} (tool_parser in the vLLM backend config); "
                                 f"use one of: {names}, or none for tts's lenient reader") from None
        return self._cls

    def read(self, text: str, tools_text: str | None,
             finish_reason: str | None = None) -> tuple[tuple[ToolCall, ...], str | None]:
        """(the reply's checked calls, why it has none) as ``Completion.tool_calls`` and
        ``tool_call_error``; a reply cut at ``max_tokens`` (``finish_reason`` "length") holds none."""
        parsed: list[ToolCall] = []
        if self.parser_class() is not None:
            try:
                parsed = self._parse(text, tools_text)
            except Exception:  # noqa: BLE001 - a parser failure leaves the lenient reader to read the text
                logger.debug("vLLM tool parser %s failed on a reply", self.name, exc_info=True)
        return reply_tool_calls(text, tools_text, parsed, finish_reason)

    def _parse(self, text: str, tools_text: str | None) -> list[ToolCall]:
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

        request = ChatCompletionRequest(model="tts", messages=[{"role": "user", "content": ""}],
                                        tools=tools_from_json(tools_text) or None)
        parser = self._cls(self.tokenizer, request.tools)
        info = parser.extract_tool_calls(text, request)
        if not info.tools_called:
            return []
        return [ToolCall(c.function.name, c.function.arguments or "{}", c.id or new_call_id()) for c in info.tool_calls]


def forced_tool_choice(tool_choice_text: str | None) -> str | None:
    """The function a request's ``tool_choice`` (JSON text) forces: its name for a named function,
    ``"required"`` for any call, None when the model may answer without one (``auto``, ``none``)."""
    if tool_choice_text is None:
        return None
    choice = json.loads(tool_choice_text)
    if choice == "required":
        return "required"
    if isinstance(choice, dict):
        return str((choice.get("function") or {}).get("name") or "") or None
    return None


def forced_call_schema(tools_text: str | None, tool_choice_text: str | None) -> dict[str, Any] | None:
    """The JSON schema that makes a reply a call when ``tool_choice`` forces one, as vLLM's OpenAI
    server builds it (its ``get_json_schema_from_tools``, called here): for ``"required"`` an array
    of ``{"name", "parameters"}`` objects, one per call; for a named function that function's
    arguments object. None when nothing is forced. Decoding under it (structured outputs) is how
    vLLM's server honours ``tool_choice``; a model that would answer in prose cannot."""
    forced = forced_tool_choice(tool_choice_text)
    tools = tools_from_json(tools_text)
    if forced is None or not tools:
        return None
    from vllm.entrypoints.openai.chat_completion.protocol import (
        ChatCompletionNamedToolChoiceParam,
        ChatCompletionToolsParam,
    )
    from vllm.tool_parsers.utils import get_json_schema_from_tools

    params = [ChatCompletionToolsParam.model_validate(t) for t in tools]
    choice: Any = forced if forced == "required" else ChatCompletionNamedToolChoiceParam.model_validate(
        {"type": "function", "function": {"name": forced}})
    try:
        schema = get_json_schema_from_tools(choice, params)
    except ValueError as exc:  # a named tool that is not offered
        raise ValueError(f"tool_choice names a tool that is not offered: {exc}") from None
    return schema if isinstance(schema, dict) else json.loads(schema) if schema else None


def read_forced_calls(text: str, tools_text: str | None,
                      tool_choice_text: str | None) -> tuple[tuple[ToolCall, ...], str | None]:
    """The calls of a reply decoded under :func:`forced_call_schema` (the JSON it forces, read as
    vLLM's server reads it), checked against the tools; a reply cut short by ``max_tokens`` does
    not parse and is malformed."""
    forced = forced_tool_choice(tool_choice_text)
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return (), MALFORMED
    if forced == "required":
        if not isinstance(value, list) or not value or not all(isinstance(v, dict) for v in value):
            return (), MALFORMED
        calls = tuple(ToolCall(str(v.get("name", "")), json.dumps(v.get("parameters") or {}, ensure_ascii=False),
                               new_call_id()) for v in value)
    else:
        if not isinstance(value, dict):
            return (), MALFORMED
        calls = (ToolCall(str(forced), json.dumps(value, ensure_ascii=False), new_call_id()),)
    if check_calls(calls, tools_from_json(tools_text)) != "ok":
        return (), MALFORMED
    return calls, None
