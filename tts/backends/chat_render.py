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
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from tts.backends.chat import Message, ToolCall, function_spec
from tts.backends.tool_calls import new_call_id, reply_tool_calls, tools_from_json

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

    def read(self, text: str, tools_text: str | None) -> tuple[tuple[ToolCall, ...], str | None]:
        """(the reply's checked calls, why it has none) as ``Completion.tool_calls`` and ``tool_call_error``."""
        parsed: list[ToolCall] = []
        if self.parser_class() is not None:
            try:
                parsed = self._parse(text, tools_text)
            except Exception:  # noqa: BLE001 - a parser failure leaves the lenient reader to read the text
                logger.debug("vLLM tool parser %s failed on a reply", self.name, exc_info=True)
        return reply_tool_calls(text, tools_text, parsed)

    def _parse(self, text: str, tools_text: str | None) -> list[ToolCall]:
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

        request = ChatCompletionRequest(model="tts", messages=[{"role": "user", "content": ""}],
                                        tools=tools_from_json(tools_text) or None)
        parser = self._cls(self.tokenizer, request.tools)
        info = parser.extract_tool_calls(text, request)
        if not info.tools_called:
            return []
        return [ToolCall(c.function.name, c.function.arguments or "{}", c.id or new_call_id()) for c in info.tool_calls]
