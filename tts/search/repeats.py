"""Replies that only repeat a tool call the conversation already holds a result for.

Small models often call the same tool again after its result came back instead of answering; an
agent that runs the repeat gets the same result and asks again, until its turn limit. On
Qwen2.5-Coder-1.5B, after a ``get_time`` result, 2 of 4 samples repeated the call and 2 answered
in text. Every strategy that answers with the samples' tool calls (``tool_vote`` and the sampling
strategies: self-consistency, best-of-N, weighted vote) chooses past such repeats with one rule,
:func:`choose_past_repeats`, so the model name an agent points at does not change what a repeat
gets:

1. the repeats abstain as replies without an answer: among the other replies the usual rule
   decides (a text answer, or a new call when at least half of the replies call; the strategy's
   own vote, selection or scores);
2. when that leaves no answer (the other replies are malformed, empty, or a calling minority), the
   repeats abstain as calls without a vote: a new call among the others wins;
3. when no other reply answers at all, every reply that answered repeated a call: the repeat the
   replies agree on is returned (event ``only_repeated_tool_calls``). It is the model's unanimous
   next action, and the only reply an agent can act on: an empty reply is a dead end that a
   framework shows its user as an empty answer, and a sentence written by tts would put words in
   the model's mouth. A tool whose result changes (polling a job) works this way too, and an
   agent's turn limit bounds a loop; the next turn draws fresh samples.

The chosen solution's trace keeps the repeats as the model wrote them, and its events count them
(``repeated_tool_call``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Collection, Sequence
from typing import Any

from tts.answers.kinds import call_key
from tts.backends.chat import Message, messages_from_openai
from tts.backends.tool_calls import calls_answer
from tts.types import Sample, Solution

REPEATED = "repeated_tool_call"
"""Event: a reply that only repeated calls whose results the conversation already holds."""

ONLY_REPEATED = "only_repeated_tool_calls"
"""Event: no reply answered except by repeating an answered call, so a repeat was returned."""


def answered_calls(problem: Any, normalise: bool = True) -> set[str]:
    """The keys (:func:`tts.answers.kinds.call_key`) of the calls in the problem's conversation
    (``metadata["messages"]``) that a ``tool`` turn answered."""
    meta = getattr(problem, "metadata", None) or {}
    raw = meta.get("messages") if isinstance(meta, dict) else None
    if not raw:
        return set()
    messages = raw if all(isinstance(m, Message) for m in raw) else messages_from_openai(raw)
    results = {m.tool_call_id for m in messages if m.role == "tool" and m.tool_call_id}
    keys = {call_key(calls_answer([c]), normalise) for m in messages if m.role == "assistant"
            for c in m.tool_calls or () if c.id in results}
    return {k for k in keys if k is not None}


def repeats_answered_call(sample: Sample, answered: Collection[str], normalise: bool = True) -> bool:
    """Whether every call ``sample`` makes (its ``answer``: the canonical list of its calls) is one
    whose result the conversation holds (``answered``, from :func:`answered_calls`)."""
    if not answered or not sample.tool_calls or sample.answer is None:
        return False
    try:
        calls = json.loads(sample.answer)
    except (json.JSONDecodeError, RecursionError):
        return False
    if not isinstance(calls, list) or not calls:
        return False
    return all(call_key(json.dumps([c]), normalise) in answered for c in calls)


def choose_past_repeats(samples: Sequence[Sample], answered: Collection[str],
                        choose: Callable[[list[Sample]], Solution], normalise: bool = True) -> Solution:
    """``choose`` (a strategy's vote or selection over samples) with the replies that only repeat an
    answered call set aside, in the module's three steps; ``choose`` sees lists as long as
    ``samples`` (the indices, scores and weights stay aligned).

    Returns:
        ``choose``'s solution, its trace holding the repeats as written and counting them.
    """
    repeats = [repeats_answered_call(s, answered, normalise) for s in samples]
    count = sum(repeats)
    if not count:
        return choose(list(samples))
    as_text = [dataclasses.replace(s, answer=None, tool_calls=()) if r else s for s, r in zip(samples, repeats, strict=True)]
    events = {REPEATED: count}
    sol = choose(as_text)
    if sol.answer is None:  # nothing in text: a new call by a minority of the replies still beats a repeat
        sol = choose([dataclasses.replace(s, answer=None) if r else s for s, r in zip(samples, repeats, strict=True)])
    if sol.answer is None:  # every reply that answered repeated a call: the repeats vote
        sol = choose(list(samples))
        events[ONLY_REPEATED] = 1
    trace = sol.trace
    shown = trace.samples
    if len(shown) == len(samples):  # the repeats as the model wrote them
        shown = tuple(s if r else t for s, t, r in zip(samples, shown, repeats, strict=True))
    merged = dict(trace.events)
    for kind, k in events.items():
        merged[kind] = merged.get(kind, 0) + k
    return dataclasses.replace(sol, trace=dataclasses.replace(trace, samples=shown, events=merged))
