"""The scripted backend as a thinking model: ``<think>`` thought ``</think>`` answer.

Neither embedded model writes a thinking section, so strategies that control one (budget forcing)
are tested on this emulation (``ScriptedGenerator(thinking=True)``). A sample is written token by
token, a token being a word with the space before it (as :func:`tts.backends.thinking.text_tokens`
counts), and served as vLLM serves a thinking model with a reasoning config:

- A reply that has no thought yet opens one (``<think>``); one whose prompt leaves a thought open
  (a continuation ending inside it, e.g. after "Wait") thinks on; one whose thought is closed
  answers at once.
- The thought is a drawn number of filler words (lognormal around ``mean_tokens``, less the words
  of the thought already in the prompt), then the delimiter ``\\n</think>`` (one token, not a
  reasoning token), then the answer "The answer is \\boxed{x}." drawn from the key's distribution.
- ``thinking_budget`` B: a thought that would pass B tokens (its part in the prompt counted) is
  cut at B and the delimiter written for the model, which then answers in the same request
  (``Completion.thinking_capped``), as vLLM's ``thinking_token_budget`` does.
- ``stop`` strings and ``max_tokens`` end a sample as in :mod:`tts.backends.scripted`; the tokens
  of the thought are counted apart (``Completion.reasoning_tokens``).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from tts.backends.base import Completion, GenerationRequest
from tts.answers.reasoning import THINK_CLOSE, THINK_OPEN, thought_left_open
from tts.backends.thinking import text_tokens

_END_PIECE = "\n" + THINK_CLOSE



def emit(pieces: Sequence[str], stop: Sequence[str], max_tokens: int) -> tuple[str, str, bool, int]:
    """Pieces written one token each, as an engine writes them, until a stop string (cut from the
    text; the tokens that wrote it counted), ``max_tokens`` or the end: (text, finish_reason,
    ended_by_eos, tokens)."""
    text, finish, eos, count = "", "stop", True, 0
    longest = max((len(s) for s in stop), default=0)
    for count, piece in enumerate(pieces, start=1):
        begin = max(len(text) - longest + 1, 0)
        text += piece
        hits = [at for at in (text.find(s, begin) for s in stop if s) if at >= 0]
        if hits:
            return text[: min(hits)], "stop", False, count
        if count >= max_tokens and count < len(pieces):
            return text, "length", False, count
    return text, finish, eos, count

def _answer_pieces(answer: str | None) -> list[str]:
    if answer is None:
        return ["\n\nI", " am", " not", " sure", "."]
    return ["\n\nThe", " answer", " is", " \\", "boxed{", answer, "}", "."]


def thinking_sample(req: GenerationRequest, answer: str | None, rng: random.Random, mean_tokens: int,
                    filler: Sequence[str]) -> tuple[Completion, int]:
    """One sample of the thinking model for ``req`` (see the module docstring).

    Returns:
        The completion (text, tokens, finish reason, end of sequence, reasoning tokens, whether the
        budget cut the thought) without logprobs, and the number of its tokens, for the caller to
        add logprobs to.
    """
    reply = req.continuation
    left_open = thought_left_open(reply)
    pieces: list[str] = []
    thought = 0  # pieces [first, first + thought) are reasoning tokens
    first = 0
    capped = False
    if left_open is None and THINK_CLOSE in reply:
        pieces = _answer_pieces(answer)  # the thought is over: answer
    else:
        in_prompt = text_tokens(left_open) if left_open is not None else 0
        opened = left_open is not None
        if not opened:
            pieces.append(THINK_OPEN)
            first = 1
        drawn = max(4, int(rng.lognormvariate(math.log(mean_tokens), 0.35)))
        thought = max(drawn - in_prompt, 1)
        if req.thinking_budget is not None and in_prompt + thought > req.thinking_budget:
            thought, capped = max(req.thinking_budget - in_prompt, 0), True
        pieces += [("\n" if i == 0 and not opened else " " if i else "") + rng.choice(filler) for i in range(thought)]
        pieces.append(_END_PIECE)
        pieces += _answer_pieces(answer)
    text, finish, eos, count = emit(pieces, req.stop, req.max_tokens)
    reasoning = max(0, min(count, first + thought) - first)
    wrote_end = count > first + thought
    comp = Completion(text=text, completion_tokens=count, finish_reason=finish, ended_by_eos=eos,
                      reasoning_tokens=reasoning, thinking_capped=capped and wrote_end)
    return comp, count
