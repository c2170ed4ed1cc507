"""A reasoning model's thinking section in text: the one rule for where a thought ends.

A thinking model writes ``<think> ... </think>`` and then its answer. Every reader in tts that
parts thought from answer in text uses this module: the answer of a free-text reply
(:func:`tts.answers.free_text.text_answer`), the server's ``reasoning_content`` and answer-only
replies, a session's reasoning notes, the OpenAI-compatible backend's and the scripted thinking
model's view of a continuation. The token-level readers (:mod:`tts.backends.thinking`) follow the
same rule on token ids.

The rule: **the thought ends at the first** ``</think>``. That is where the model ended it, and
where vLLM ends it: its reasoning parsers for DeepSeek-R1 and Qwen3 (``BaseThinkingReasoningParser.
extract_reasoning``) partition the output at the first end token, and its thinking budget writes
the end token once, after which the model is answering. Whatever follows, a later ``</think>``
included (an answer that quotes the tag), is answer: splitting at the last one would cut the head
off such an answer and would disagree with the reasoning tokens the backends count up to the first.
An opening ``<think>`` is optional (a chat template may open the thought in the prompt); a reply
that opens a thought and never closes it (cut by ``max_tokens``) is all thought and has no answer.
"""

from __future__ import annotations

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
"""The delimiters of a thinking section as most open reasoning models write them (Qwen3, DeepSeek-R1,
and vLLM's default reasoning parsers)."""


def split_reasoning(text: str) -> tuple[str | None, str]:
    """(thinking section, answer) of a reasoning model's reply, split at the first ``</think>``.

    The section is the text before it (an opening ``<think>`` dropped), the answer the text after
    it, both stripped. A reply that opens a section and never closes it is all thought (the answer
    is ``""``); a reply with no section at all is all answer (the section is None).

    Example:
        >>> split_reasoning("<think>\\n6*7=42\\n</think>\\n\\nIt is 42.")
        ('6*7=42', 'It is 42.')
        >>> split_reasoning("<think>a</think> Use </think> to close it.")
        ('a', 'Use </think> to close it.')
    """
    head, sep, tail = text.partition(THINK_CLOSE)
    if sep:
        stripped = head.lstrip()
        if stripped.startswith(THINK_OPEN):
            stripped = stripped[len(THINK_OPEN):]
        return stripped.strip(), tail.strip()
    if text.lstrip().startswith(THINK_OPEN):
        return text.lstrip()[len(THINK_OPEN):].strip(), ""
    return None, text


def thought_left_open(text: str) -> str | None:
    """The thought ``text`` leaves open at its end (what follows its last ``<think>`` when no
    ``</think>`` follows that), or None when none is open: how a continuation that stops inside a
    thought (after "Wait") is read, as vLLM reads a prompt for its thinking budget.

    Example:
        >>> thought_left_open("<think>6*7 is 42. Wait")
        '6*7 is 42. Wait'
        >>> thought_left_open("<think>42</think> 42.") is None
        True
    """
    opened = text.rfind(THINK_OPEN)
    if opened < 0 or text.find(THINK_CLOSE, opened) >= 0:
        return None
    return text[opened + len(THINK_OPEN):]
