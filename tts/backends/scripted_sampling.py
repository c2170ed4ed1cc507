"""What the scripted backend's roles (solver, chain model, judge, thinking model) share: the
seeded random streams, the filler words of a sample, cutting at stop strings and the emulated
per-token and top-k log-probabilities."""

from __future__ import annotations

import hashlib
import math
import random
import re
from collections.abc import Sequence

FILLER = ("we", "compute", "the", "value", "step", "by", "carefully", "so", "then", "check")
"""The words a scripted sample is written in (besides its steps' equations and its answer)."""
BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


def rng(*parts: object) -> random.Random:
    """A random stream fixed by ``parts`` (the backend seed, the request's key, seed, prompt, ...)."""
    digest = hashlib.sha256("|".join(map(str, parts)).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "little"))


def cut(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """``text`` up to its first stop string (excluded), and whether one was found."""
    hits = [at for at in (text.find(s) for s in stop if s) if at >= 0]
    return (text[: min(hits)], True) if hits else (text, False)


def top_logprobs(token_logprobs: Sequence[float], k: int) -> tuple[tuple[float, ...], ...]:
    """Emulated top-k log-probabilities of every position (largest first): the sampled token's
    probability p and k - 1 alternatives sharing the rest, 1 - p, geometrically, decaying faster
    when p is high. A confident position thus has far-off alternatives and a high DeepConf token
    confidence, an uncertain one close alternatives and a low one, as a real model's do."""
    out = []
    for lp in token_logprobs:
        p = math.exp(lp)
        rest = max(1.0 - p, 1e-12)
        slope = 0.2 + 2.0 * p
        base = math.log(rest * (1.0 - math.exp(-slope)))
        out.append(tuple(sorted([lp] + [base - slope * j for j in range(k - 1)], reverse=True)))
    return tuple(out)


def token_logprobs(mean_logprob: float, tokens: int, rng: random.Random) -> tuple[float, ...]:
    """Per-token logprobs whose mean is ``mean_logprob``: a few uncertain tokens among confident
    ones (exponential weights), all <= 0, as a real sample's are."""
    weights = [rng.expovariate(1.0) for _ in range(tokens)]
    scale = tokens / (sum(weights) or 1.0)
    return tuple(mean_logprob * w * scale for w in weights)
