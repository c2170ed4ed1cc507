"""Thinking sections of a reply: where the thought ends, how many tokens it took, whether a
thinking budget ended it.

A thinking model writes ``<think> ... </think>`` and then its answer (the delimiters are the
model's: vLLM's reasoning parsers and ``ReasoningConfig`` name them). Backends use these helpers to
count a completion's reasoning tokens apart from its answer tokens and to say whether the engine's
thinking budget (``GenerationRequest.thinking_budget``) wrote the end of the thought. They work on
token ids (the vLLM engine) or on token texts (an OpenAI-compatible server's logprobs); the
delimiter tokens themselves are not reasoning tokens, as vLLM's parsers count them. The rule for
where a thought ends (the first end delimiter) is :mod:`tts.answers.reasoning`'s, which also splits
text (``split_reasoning``, re-exported here for the backends' callers).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tts.answers.reasoning import THINK_CLOSE, THINK_OPEN, split_reasoning

if TYPE_CHECKING:
    from tts.backends.base import Completion

__all__ = ["THINK_CLOSE", "THINK_OPEN", "ThoughtSplit", "count_reasoning_tokens", "open_thought", "split_ids",
           "split_reasoning", "split_token_texts", "text_tokens"]


def _find(seq: Sequence[int], sub: Sequence[int], start: int = 0) -> int:
    """Index of the first occurrence of ``sub`` in ``seq`` at or after ``start``; -1 if none."""
    k = len(sub)
    if not k:
        return -1
    for i in range(start, len(seq) - k + 1):
        if seq[i] == sub[0] and list(seq[i:i + k]) == list(sub):
            return i
    return -1


def _rfind(seq: Sequence[int], sub: Sequence[int]) -> int:
    """Index of the last occurrence of ``sub`` in ``seq``; -1 if none."""
    k = len(sub)
    if not k:
        return -1
    for i in range(len(seq) - k, -1, -1):
        if seq[i] == sub[0] and list(seq[i:i + k]) == list(sub):
            return i
    return -1


def open_thought(prompt_ids: Sequence[int], start_ids: Sequence[int], end_ids: Sequence[int]) -> int | None:
    """Tokens of the thought the prompt leaves open (after its last start delimiter, with no end
    delimiter after it), as vLLM's thinking budget counts them; None when no thought is open."""
    last_start = _rfind(prompt_ids, start_ids)
    if last_start < 0 or _rfind(prompt_ids, end_ids) > last_start:
        return None
    return len(prompt_ids) - (last_start + len(start_ids))


@dataclass(frozen=True, slots=True)
class ThoughtSplit:
    """How a completion divides into thought and answer.

    Args:
        reasoning_tokens: Generated tokens inside the thinking section (delimiters excluded).
        closed: The completion wrote the end-of-thinking delimiter.
        capped: A thinking budget ended the thought: it closed when the thought (its part in the
            prompt included) had reached the budget, the rule by which vLLM forces the delimiter.
    """

    reasoning_tokens: int
    closed: bool
    capped: bool


def split_ids(prompt_ids: Sequence[int], output_ids: Sequence[int], start_ids: Sequence[int],
              end_ids: Sequence[int], budget: int | None = None) -> ThoughtSplit:
    """Split a completion's token ids at the end-of-thinking delimiter.

    The thought is open from the prompt (a chat template or a continuation that opened it) or
    opened by the completion itself; a completion that opens none has no reasoning tokens.

    Example:
        >>> split_ids([5, 1], [7, 7, 2, 9], start_ids=[1], end_ids=[2], budget=2)
        ThoughtSplit(reasoning_tokens=2, closed=True, capped=True)
    """
    in_prompt = open_thought(prompt_ids, start_ids, end_ids)
    if in_prompt is None:
        at = _find(output_ids, start_ids)
        if at < 0:
            return ThoughtSplit(0, False, False)
        begin, in_prompt = at + len(start_ids), 0
    else:
        begin = 0
    end = _find(output_ids, end_ids, begin)
    if end < 0:
        return ThoughtSplit(len(output_ids) - begin, False, False)
    tokens = end - begin
    return ThoughtSplit(tokens, True, budget is not None and in_prompt + tokens >= budget)


_PIECE = re.compile(r"\s*\S+|\s+$")


def text_tokens(text: str) -> int:
    """A rough token count of ``text`` without a tokenizer: its words (with the space before them)
    and a trailing run of whitespace. Used where no tokenizer is at hand (a remote server's open
    thought in the prompt, the scripted model, whose tokens are these pieces)."""
    return len(_PIECE.findall(text))


def split_token_texts(tokens: Sequence[str], prompt_open: bool, start: str, end: str) -> ThoughtSplit:
    """:func:`split_ids` on token texts (an OpenAI-compatible server's logprobs): the thought ends
    at the first token whose text holds ``end``. ``prompt_open``: the request's prompt leaves a
    thought open; otherwise a token holding ``start`` opens one. ``capped`` is left False (the
    caller knows the budget and the prompt's share of the thought)."""
    begin = 0
    if not prompt_open:
        opened = next((i for i, t in enumerate(tokens) if start and start in t), None)
        if opened is None:
            return ThoughtSplit(0, False, False)
        begin = opened + 1
    closed = next((i for i in range(begin, len(tokens)) if end in tokens[i]), None)
    if closed is None:
        return ThoughtSplit(len(tokens) - begin, False, False)
    return ThoughtSplit(closed - begin, True, False)


def count_reasoning_tokens(completions: Iterable[Completion]) -> int:
    """The reasoning tokens of a request's completions: the one count behind ``Usage.reasoning_tokens``
    (the ledger, the eval table and the server's ``completion_tokens_details`` all read that).

    Each completion's own count where its backend made one (token ids or logprob tokens split at
    the end delimiter); else, for a backend that sees no tokens of the thought (a function, a
    server without logprobs, an engine without the model's delimiters), its thinking section's
    share of its tokens by characters (:func:`split_reasoning`).

    Example:
        >>> from tts.backends.base import Completion
        >>> count_reasoning_tokens([Completion("<think>abcd</think>efgh", 10, reasoning_tokens=3),
        ...                         Completion(f"<think>{'a' * 15}</think>{'b' * 10}", 8),  # 15 of 40 chars
        ...                         Completion("no thought", 3)])
        6
    """
    total = 0
    for c in completions:
        if c.reasoning_tokens is not None:
            total += c.reasoning_tokens
            continue
        thought, _ = split_reasoning(c.text)
        if thought:
            total += min(c.completion_tokens, round(c.completion_tokens * len(thought) / max(len(c.text), 1)))
    return total
