"""A solve's inputs checked before anything runs: the sampling settings, the conversation, the tools
and the question that goes with them.

:meth:`tts.session.Session.solve` checks its inputs here, and :func:`tts.solve`, ``tts mcp`` and
``tts serve`` check theirs with the same functions before they start an engine or spend compute,
so one input gets one answer in every entry point. Every error is one line that names the setting
or field and says what to change (a :class:`~tts.config.SettingsError` or a
:class:`~tts.backends.chat.ChatInputError`, both ``ValueError``).

The question and the conversation: with ``messages``, the question is the last user message that
has text. ``question`` may then be left empty (it is taken from there), and a question that is
given must be that message: a different one is refused rather than one of the two being silently
dropped (the math prompt would re-render the question in that message's place, a plain prompt
would send the conversation and ignore the question).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tts.backends.chat import ChatInputError, check_tools, messages_from_openai
from tts.config import SettingsError, settings_line

TOOL_CHOICES = ("none", "auto", "required")
"""The ``tool_choice`` words OpenAI's API takes (or an object naming one function)."""


def sampling(base: Any, temperature: float | None = None, top_p: float | None = None,
             max_tokens: int | None = None) -> Any:
    """``base`` (a :class:`~tts.config.SamplingConfig`) with the overrides that are given applied.

    Raises:
        SettingsError: A value out of range, in one line (``temperature=-1 is refused (input should
            be greater than or equal to 0); change temperature``).
    """
    from pydantic import ValidationError

    update = {k: v for k, v in (("temperature", temperature), ("top_p", top_p), ("max_tokens", max_tokens))
              if v is not None}
    if not update:
        return base
    try:
        return type(base)(**{**base.model_dump(), **update})
    except ValidationError as exc:
        raise SettingsError(settings_line(exc)) from None


def chat(question: str, messages: Sequence[Mapping[str, Any]] | None, tools: Sequence[Mapping[str, Any]] | None,
         tool_choice: Any = None) -> str:
    """Check a solve's conversation, tools and ``tool_choice``; return its question.

    The question is ``question``, or, with ``messages``, their last user message with text (see the
    module docstring): an empty ``question`` is filled from it, a different one refused.

    Raises:
        ChatInputError: A malformed tool or message, a tool result that answers no earlier call, a
            question that is not the conversation's, or a ``tool_choice`` that names no tool.
    """
    if tools is not None:
        check_tools(tools)
    _check_tool_choice(tool_choice, tools)
    if messages is None:
        return question
    parsed = messages_from_openai(messages)
    asked = next((m.content for m in reversed(parsed) if m.role == "user" and m.content.strip()), None)
    if asked is None:  # no user text (a conversation of tool results): the question only names the solve
        return question
    if not question.strip():
        return asked
    if question.strip() != asked.strip():
        raise ChatInputError(f"question {_short(question)} is not the conversation's last user message "
                             f"{_short(asked)}; pass the question in one of them (question may be empty with "
                             "messages) or make them the same", "question")
    return question


def _check_tool_choice(choice: Any, tools: Sequence[Mapping[str, Any]] | None) -> None:
    """Refuse a ``tool_choice`` that could not be honoured: without tools, or naming none of them."""
    if choice is None:
        return
    if not tools:
        raise ChatInputError("tool_choice needs tools; send the tools or leave tool_choice out", "tool_choice")
    if isinstance(choice, str) and choice in TOOL_CHOICES:
        return
    fn = choice.get("function") if isinstance(choice, Mapping) else None
    name = fn.get("name") if isinstance(fn, Mapping) else None
    if not isinstance(name, str):
        raise ChatInputError(f"tool_choice must be one of {', '.join(TOOL_CHOICES)} or "
                             f'{{"type": "function", "function": {{"name": ...}}}}, got {_short(choice)}',
                             "tool_choice")
    names = [t["function"]["name"] for t in tools]
    if name not in names:
        raise ChatInputError(f"tool_choice names {name!r}, which is not one of the tools "
                             f"({', '.join(map(repr, names))}); name one of them", "tool_choice")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "...'"


def stop(kind: str, value: Any) -> dict[str, Any]:
    """A solve's per-request ``stop`` for strategy ``kind``, as its config takes it: a rule name
    (``"horizon"``) becomes ``{"rule": name}``, a :class:`~tts.config.StopConfig` its settings.

    Raises:
        StrategyInputError: ``kind`` cannot stop early (the line names the strategies that can).
        SettingsError: A stop setting to change (one line).
    """
    from pydantic import BaseModel, ValidationError

    from tts.config import StopConfig, stop_refusal
    from tts.registry import STRATEGIES
    from tts.search.base import StrategyInputError

    if "stop" not in STRATEGIES.load(kind).config_class.model_fields:
        raise StrategyInputError(stop_refusal(kind))
    if isinstance(value, str):
        value = {"rule": value}
    elif isinstance(value, BaseModel):
        value = value.model_dump(exclude_unset=True)
    elif not isinstance(value, Mapping):
        raise SettingsError(f"stop must be a rule name (horizon, beta, dirichlet, exact, window) or a mapping such as "
                            f'{{"rule": "horizon", "wave": 8}}, got {_short(value)}')
    try:
        StopConfig.model_validate(dict(value))
    except ValidationError as exc:
        raise SettingsError(settings_line(exc, "stop")) from None
    return dict(value)
