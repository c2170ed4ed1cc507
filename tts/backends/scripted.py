"""A deterministic generator for tests and docs: answers drawn from per-problem distributions.

It behaves like a model whose answer to each problem is a random draw from a distribution you
specify (``{"42": 0.6, "41": 0.3}``; the missing mass means "no answer"), with realistic token
counts and log-probabilities. It behaves like a seeded engine (vLLM on GPU, ``vllm serve``): a
request that carries a seed returns the same samples every time it is sent with that seed, so a
caller that resends a seed sees its samples repeat in tests exactly as it would on such an engine.
A request without a seed continues the backend's random stream instead (fresh samples on a
repeat, like an engine-level seed). The backend's own ``seed`` changes every draw.
"""

from __future__ import annotations

import hashlib
import math
import random
import time
from collections.abc import Mapping, Sequence
from typing import Any

from tts.backends.base import Completion, GenerationRequest, GenerationResult, request_usage
from tts.types import Problem

_FILLER = ("we", "compute", "the", "value", "step", "by", "carefully", "so", "then", "check")


def _rng(*parts: object) -> random.Random:
    digest = hashlib.sha256("|".join(map(str, parts)).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "little"))


class ScriptedGenerator:
    """Draws each sample's answer from the distribution registered for the request's ``key``.

    Args:
        distributions: ``key -> {answer: probability}``; probabilities may sum to less than 1,
            the rest is samples that give no answer. Keys are usually problem ids.
        default: Distribution for keys not in ``distributions`` (default: always no answer).
        seed: Changes every draw; runs with the same seed are identical.
        mean_tokens: Mean generated tokens per sample (lognormal spread, capped by max_tokens).
        prompt_tokens_per_char: Prompt length model (about 4 characters per token).
        model_name: Name reported in results.
        returns_logprobs: Whether logprobs come back when asked (False mimics a server without
            logprob support).

    Example:
        >>> gen = ScriptedGenerator({"p1": {"4": 0.7, "5": 0.2}}, seed=0)
    """

    def __init__(
        self,
        distributions: Mapping[str, Mapping[str, float]] | None = None,
        default: Mapping[str, float] | None = None,
        seed: int = 0,
        mean_tokens: int = 120,
        prompt_tokens_per_char: float = 0.25,
        model_name: str = "scripted",
        returns_logprobs: bool = True,
    ) -> None:
        self.distributions = {k: dict(v) for k, v in (distributions or {}).items()}
        for key, dist in self.distributions.items():
            total = sum(dist.values())
            if any(p < 0 for p in dist.values()) or total > 1 + 1e-9:
                raise ValueError(f"distribution for {key!r} must be non-negative and sum to <= 1")
        self.default = dict(default or {})
        self.seed = seed
        self.mean_tokens = mean_tokens
        self.prompt_tokens_per_char = prompt_tokens_per_char
        self.model_name = model_name
        self.returns_logprobs = returns_logprobs
        self._seen_prefixes: set[str] = set()
        # Samples already drawn per (key, prompt) by requests without a seed: a repeat continues
        # the stream rather than replaying it, as an engine-level random state would.
        self._drawn: dict[tuple[str, str], int] = {}

    @classmethod
    def for_problems(
        cls, problems: Sequence[Problem], accuracy: float = 0.4, seed: int = 0, **kwargs: object
    ) -> ScriptedGenerator:
        """A generator that answers each problem correctly with probability ``accuracy``.

        Wrong mass goes to two distractors (gold+1 / "gold-wrong" style strings) and a 10%
        no-answer share, so that voting has something to do.
        """
        dists: dict[str, dict[str, float]] = {}
        for p in problems:
            gold = p.answer if p.answer is not None else "0"
            wrong = 0.9 - accuracy
            try:
                d1, d2 = str(int(gold) + 1), str(int(gold) - 1)
            except ValueError:
                d1, d2 = f"{gold}'", f"{gold}''"
            dists[p.id] = {gold: accuracy, d1: max(wrong, 0) * 0.6, d2: max(wrong, 0) * 0.4}
        return cls(dists, seed=seed, **kwargs)  # type: ignore[arg-type]

    @classmethod
    def from_config(cls, config: Any, problems: Sequence[Problem] = ()) -> ScriptedGenerator:
        """Build from a ScriptedBackendConfig: distributions from the problems' gold answers."""
        return cls.for_problems(problems, accuracy=config.accuracy, seed=config.seed, model_name=config.model)

    def _draw(self, dist: Mapping[str, float], rng: random.Random) -> str | None:
        u = rng.random()
        acc = 0.0
        for answer, p in dist.items():
            acc += p
            if u < acc:
                return answer
        return None

    def _sample(self, req: GenerationRequest, index: int, prompt: str) -> Completion:
        rng = _rng(self.seed, req.key, req.seed, req.temperature, prompt, req.continuation, index)
        dist = self.distributions.get(req.key, self.default)
        answer = self._draw(dist, rng)
        tokens = max(8, int(rng.lognormvariate(math.log(self.mean_tokens), 0.35)))
        length_capped = tokens > req.max_tokens
        tokens = min(tokens, req.max_tokens)
        words = [rng.choice(_FILLER) for _ in range(max(tokens - 8, 0))]
        if answer is not None and not length_capped:
            text = " ".join(words) + f". The answer is \\boxed{{{answer}}}."
        else:
            text = " ".join(words) + "."
        # Confident (high logprob) samples are somewhat more often the distribution's mode.
        mode = max(dist, key=dist.get) if dist else None
        mean_lp = -rng.uniform(0.05, 0.6) - (0.0 if answer == mode else 0.25)
        return Completion(
            text=text,
            completion_tokens=tokens,
            mean_logprob=mean_lp if req.logprobs and self.returns_logprobs else None,
            finish_reason="length" if length_capped else "stop",
        )

    def prompt_tokens(self, request: GenerationRequest) -> int:
        """Prompt length of a request under this backend's length model."""
        prompt = "\n".join(f"{m.role}: {m.content}" for m in request.messages) + request.continuation
        return max(1, int(len(prompt) * self.prompt_tokens_per_char))

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """Sample every request; usage counts a repeated prompt as cached (like prefix caching)."""
        results = []
        for req in requests:
            start = time.perf_counter()
            prompt = "\n".join(f"{m.role}: {m.content}" for m in req.messages) + req.continuation
            if req.seed is None:
                offset = self._drawn.get((req.key, prompt), 0)
                self._drawn[(req.key, prompt)] = offset + req.n
            else:
                offset = 0  # a seeded request is reproducible: same seed, same samples
            completions = tuple(self._sample(req, offset + i, prompt) for i in range(req.n))
            prompt_tokens = self.prompt_tokens(req)
            cached = prompt_tokens if prompt in self._seen_prefixes else 0
            self._seen_prefixes.add(prompt)
            usage = request_usage(
                prompt_tokens,
                cached,
                [c.completion_tokens for c in completions],
                time.perf_counter() - start,
                batch_sequences=sum(r.n for r in requests),
            )
            results.append(GenerationResult(completions, usage))
        return results

    def close(self) -> None:
        """Nothing to release."""
