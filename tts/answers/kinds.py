"""Answer kinds: what "the same answer" means for a reply, so that every vote compares like with like.

A reply's answer is one of four kinds, and each has its own notion of agreement:

- a **number or expression** (the math prompt's ``\\boxed{}``): equal as values (:mod:`tts.answers.equivalence`);
- **JSON** (structured output): equal as canonical JSON values;
- **tool calls**: equal as the list of (name, normalised arguments) pairs (:func:`call_key`); a reply
  that calls tools is always of this kind, whatever else was asked;
- **free text** (a conversation answered in prose): never equal as strings, so it is not counted but
  *selected*: by minimum Bayes risk (the text most similar to the others, :mod:`tts.answers.free_text`)
  in every vote, or by Universal Self-Consistency (the ``usc`` strategy).

The kind of the text answers is the caller's: the extraction function a strategy is given says
it. :data:`TEXT` extracts free text and is marked as such (:func:`is_free_text`); math extraction
(the default) and JSON extraction are votable.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from tts.answers.free_text import text_answer


class FreeTextExtract:
    """The extraction of free-text answers: the reply's final text
    (:func:`tts.answers.free_text.text_answer`).

    Strategies that vote see :func:`is_free_text` true for it and select by minimum Bayes risk
    instead of counting equal strings.
    """

    free_text = True

    def __call__(self, text: str) -> str | None:
        return text_answer(text)

    def __repr__(self) -> str:
        return "TEXT"


TEXT = FreeTextExtract()
"""Extract answers as free text (the reply as written, its reasoning section left out)."""


def is_free_text(extract: Callable[[str], Any] | None) -> bool:
    """Whether an extraction function reads free-text answers (selected by similarity, not counted)."""
    return bool(getattr(extract, "free_text", False))


def _normalise(value: Any) -> Any:
    """Arguments as a vote key: sorted keys, trimmed case-folded strings, integral floats as ints."""
    if isinstance(value, Mapping):
        return {str(k): _normalise(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, list | tuple):
        return [_normalise(v) for v in value]
    if isinstance(value, str):
        return " ".join(value.split()).casefold()
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def call_key(answer: str, normalise: bool = True) -> str | None:
    """The vote key of a tool-call answer (the canonical JSON list of a reply's calls): the calls
    with normalised arguments (keys sorted, strings trimmed and case-folded, 2.0 == 2) when
    ``normalise``, else with the arguments as written (keys sorted); None when ``answer`` is not
    a list of calls."""
    try:
        calls = json.loads(answer)
    except (json.JSONDecodeError, TypeError, RecursionError):
        return None
    if isinstance(calls, dict):
        calls = [calls]
    if not isinstance(calls, list) or not all(isinstance(c, dict) and "name" in c for c in calls):
        return None
    norm = _normalise if normalise else (lambda v: json.loads(json.dumps(v, sort_keys=True)))
    return json.dumps([{"name": c["name"], "arguments": norm(c.get("arguments") or {})} for c in calls],
                      sort_keys=True, ensure_ascii=False)
