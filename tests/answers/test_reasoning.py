"""The one rule for where a thought ends: at the first ``</think>``, for every reader in tts.

A reply that writes ``</think>`` twice (an answer that quotes the tag) is where readers with their
own rules disagreed: the free-text answer used to keep only the text after the last one while the
server's reply and the token counts split at the first.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import tts
from tts.answers.free_text import text_answer
from tts.answers.reasoning import THINK_CLOSE, split_reasoning, thought_left_open
from tts.backends.base import GenerationRequest, Message
from tts.backends.scripted import ScriptedGenerator
from tts.backends.thinking import split_ids, split_token_texts

QUOTING = "<think>\nthe tag ends it\n</think>\n\nClose the thought with </think>, then answer."


def test_the_thought_ends_at_the_first_close_and_a_later_one_is_answer():
    assert split_reasoning(QUOTING) == ("the tag ends it", "Close the thought with </think>, then answer.")
    assert split_reasoning("opened by the template</think> 42") == ("opened by the template", "42")
    assert split_reasoning("<think>cut by max_tokens") == ("cut by max_tokens", "")
    assert split_reasoning("no thought at all") == (None, "no thought at all")


@pytest.mark.parametrize("reply", [
    QUOTING,
    "<think>a</think> b </think> c",
    "template-opened</think> x </think> y",
    "<think>unclosed",
    "plain",
])
def test_the_free_text_answer_is_the_answer_the_server_shows(reply):
    # text_answer (what USC and MBR compare) and split_reasoning (the server's content, a session's
    # reasoning) must read the same reply the same way.
    assert text_answer(reply) == (split_reasoning(reply)[1].strip() or None)


def test_token_counts_end_the_thought_where_the_text_split_does():
    tokens = ["<think>", "a", " b", "</think>", " Close", " with", " </think>", "."]
    split = split_token_texts(tokens, False, "<think>", THINK_CLOSE)
    assert split.reasoning_tokens == 2 and split.closed
    assert split_reasoning("".join(tokens))[0] == "a b"
    ids = split_ids([], [1, 7, 7, 2, 8, 2, 9], start_ids=[1], end_ids=[2])
    assert ids.reasoning_tokens == 2


def test_a_continuation_leaves_a_thought_open_only_after_its_last_open():
    assert thought_left_open("<think>6*7 is 42. Wait") == "6*7 is 42. Wait"
    assert thought_left_open("<think>a</think> b") is None
    assert thought_left_open("<think>a</think> b <think> again") == " again"
    assert thought_left_open("no thought") is None


def test_the_scripted_thinking_model_reads_a_continuation_by_the_same_rule():
    gen = ScriptedGenerator({"q": {"42": 1.0}}, thinking=True, mean_tokens=20)
    ask = (Message("user", "What is 6 * 7?"),)
    closed, reopened = gen.generate([
        GenerationRequest(ask, key="q", continuation="<think>a</think> b"),
        GenerationRequest(ask, key="q", continuation="<think>a</think> b <think> again", seed=3),
    ])
    assert closed.completions[0].reasoning_tokens == 0  # the thought is over: it answers
    assert reopened.completions[0].reasoning_tokens > 0  # a thought is open: it thinks on
    assert "<think>" not in reopened.completions[0].text  # ... without opening another


def test_the_delimiters_are_written_in_one_module():
    # Readers import THINK_OPEN / THINK_CLOSE from tts.answers.reasoning instead of spelling them.
    root = Path(tts.__file__).parent
    spelled = [str(p.relative_to(root)) for p in root.rglob("*.py")
               if any(f'{q}</think>{q}' in p.read_text(encoding="utf-8") for q in ('"', "'"))]
    assert spelled == ["answers/reasoning.py"]
