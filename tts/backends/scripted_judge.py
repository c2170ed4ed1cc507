"""The scripted backend as an LLM judge, so that verifiers that ask the policy model for a
verdict can be tested.

A request whose last message asks for "Yes or No" is a verdict request. The judged answer is the
last ``\\boxed{...}`` in that message; the probability of "Yes" is drawn high (0.55-0.95) when it
is the mode of the key's distribution, low (0.05-0.45) when it is another answer and in between
(0.2-0.6) when there is none, fixed per judged text. The verdict's first-token top logprobs
(``top_logprobs``) put ``verdict_mass`` on "Yes"/"No" and the rest on a few other first tokens;
sampled verdicts end in "Yes." or "No." (greedy: the likelier one).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from tts.backends.base import Completion, GenerationRequest
from tts.backends.scripted_sampling import BOXED, FILLER, cut, rng, token_logprobs

VERDICT_REQUEST = re.compile(r"\byes\s+or\s+no\b", re.IGNORECASE)
"""What the last message of a verdict request asks for."""
OTHER_FIRST_TOKENS = ("The", "I", "To", "Let", "This")
"""First tokens a judge puts its remaining probability on when it does not answer Yes/No at once."""


def p_yes(dist: Mapping[str, float], seed: int, req: GenerationRequest, prompt: str) -> float:
    """The judge's probability that the text a verdict request judges is right (``dist``: the
    distribution of the request's key, whose mode the judge believes)."""
    mode = max(dist, key=dist.get) if dist else None
    boxed = BOXED.findall(req.messages[-1].content + req.continuation) if req.messages else []
    answer = boxed[-1].strip() if boxed else None
    low, high = (0.2, 0.6) if answer is None else (0.55, 0.95) if answer == mode else (0.05, 0.45)
    return rng(seed, "verdict", req.key, prompt).uniform(low, high)


def verdict_sample(req: GenerationRequest, index: int, prompt: str, p: float, seed: int, verdict_mass: float,
                   returns_logprobs: bool) -> Completion:
    """Sample ``index`` of a verdict request whose judged text is right with probability ``p``."""
    stream = rng(seed, "verdict-sample", req.key, req.seed, req.temperature, prompt, index)
    yes_mass, no_mass = verdict_mass * p, verdict_mass * (1 - p)
    other = (1.0 - verdict_mass) / len(OTHER_FIRST_TOKENS)
    choices = {"Yes": yes_mass, "No": no_mass, **dict.fromkeys(OTHER_FIRST_TOKENS, other)}
    if req.temperature == 0:
        first = max(choices, key=lambda t: choices[t])
    else:
        first = stream.choices(list(choices), weights=list(choices.values()))[0]
    if req.max_tokens <= 2:
        text, tokens = first, 1
    else:
        verdict = first if first in ("Yes", "No") else None
        words = [stream.choice(FILLER) for _ in range(min(req.max_tokens - 4, stream.randint(6, 40)))]
        text = " ".join(words) + (f". {verdict}." if verdict else ".")
        tokens = min(req.max_tokens, len(words) + 3)
    text, stopped = cut(text, req.stop)
    if stopped:
        tokens = min(tokens, len(text.split()) + 1)
    mean_lp = math.log(max(choices[first], 1e-9)) / tokens - stream.uniform(0.05, 0.4)
    top = None
    if req.top_logprobs and returns_logprobs:
        ranked = sorted(((t, q) for t, q in choices.items() if q > 0), key=lambda tq: -tq[1])
        top = {t: math.log(q) for t, q in ranked[: req.top_logprobs]}
    logprobs = req.logprobs and returns_logprobs
    return Completion(
        text=text,
        completion_tokens=tokens,
        mean_logprob=mean_lp if logprobs else None,
        finish_reason="stop",
        token_logprobs=token_logprobs(mean_lp, tokens, stream) if logprobs else None,
        first_token_top_logprobs=top,
    )
