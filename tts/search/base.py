"""The Strategy protocol and the shared machinery of sample-then-aggregate strategies.

Best-of-N, self-consistency and weighted voting all draw n independent samples per problem and
differ only in how they pick the answer. They share :class:`SamplingStrategy`: one batched
generator call for all problems, then a per-problem ``aggregate``. Because aggregation only needs
the samples, the runner can draw max(n) samples once and evaluate smaller n on prefixes of them
(the first n of N i.i.d. samples are distributed as n samples), which is how ladders of n are
evaluated at the cost of the largest.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from tts.answers import extract_answer, normalize_answer
from tts.backends.base import (
    Completion,
    GenerationRequest,
    GenerationResult,
    Generator,
    Message,
    derive_seed,
)
from tts.config import SamplingConfig
from tts.types import RequestShape, Sample, Solution, Usage

PromptFn = Callable[[Any], tuple[Message, ...]]
ExtractFn = Callable[[str], "str | None"]


class Strategy(ABC):
    """Turns problems into Solutions using a generator. Never grades, never writes files."""

    name: ClassVar[str]

    @abstractmethod
    def solve(self, problems: Sequence[Any]) -> list[Solution]:
        """Solve every problem; returns one Solution per problem, in order."""


def to_sample(c: Completion, extract: ExtractFn) -> Sample:
    """A backend completion with its extracted answer."""
    return Sample(
        text=c.text,
        answer=extract(c.text),
        completion_tokens=c.completion_tokens,
        mean_logprob=c.mean_logprob,
        finish_reason=c.finish_reason,
    )


def prefix_usage(result_usage: Usage, samples: Sequence[Sample], total_samples: int) -> Usage:
    """Usage of the first ``len(samples)`` samples of a request that drew ``total_samples``.

    The prompt is paid once whatever n is; generated tokens are those of the prefix; wall time is
    shared in proportion to generated tokens.
    """
    shape = result_usage.shapes[0] if result_usage.shapes else RequestShape(0, 0, ())
    lengths = tuple(s.completion_tokens for s in samples)
    if len(samples) == total_samples:
        return result_usage
    all_tokens = max(result_usage.completion_tokens, 1)
    return Usage(
        prompt_tokens=result_usage.prompt_tokens,
        cached_prompt_tokens=result_usage.cached_prompt_tokens,
        completion_tokens=sum(lengths),
        wall_seconds=result_usage.wall_seconds * sum(lengths) / all_tokens,
        calls=result_usage.calls,
        shapes=(RequestShape(shape.prompt_tokens, shape.cached_prompt_tokens, lengths, shape.batch_sequences),),
    )


class SamplingStrategy(Strategy):
    """Sample ``config.n`` completions per problem in one batched call, then aggregate.

    Args:
        config: The strategy's config (has ``n``).
        generator: The backend.
        prompt: Problem -> chat messages.
        sampling: Temperature, top-p, max tokens.
        extract: Text -> answer (default: boxed / "the answer is" / last number).
        seed: Base seed for per-request seeds.
    """

    needs_logprobs: ClassVar[bool] = False

    def __init__(
        self,
        config: Any,
        generator: Generator,
        prompt: PromptFn,
        sampling: SamplingConfig | None = None,
        extract: ExtractFn = extract_answer,
        seed: int = 0,
    ) -> None:
        self.config = config
        self.generator = generator
        self.prompt = prompt
        self.sampling = sampling or SamplingConfig()
        self.extract = extract
        self.seed = seed

    def request(self, problem: Any, n: int | None = None, drawn: int = 0) -> GenerationRequest:
        """The generation request for one problem.

        Args:
            problem: The problem.
            n: Samples to draw (default: the config's).
            drawn: Samples of this problem already drawn in this run; the request's seed depends
                on it, so a second round never repeats the first one's samples.
        """
        return GenerationRequest(
            messages=self.prompt(problem),
            n=n or self.config.n,
            temperature=self.sampling.temperature,
            top_p=self.sampling.top_p,
            max_tokens=self.sampling.max_tokens,
            logprobs=self.needs_logprobs,
            seed=derive_seed(self.seed, problem.id, drawn),
            key=problem.id,
        )

    def solve(self, problems: Sequence[Any]) -> list[Solution]:
        results = self.generator.generate([self.request(p) for p in problems])
        return [self.aggregate_result(p.id, r) for p, r in zip(problems, results, strict=True)]

    def aggregate_result(self, problem_id: str, result: GenerationResult, n: int | None = None) -> Solution:
        """Aggregate the first ``n`` completions of a result (all when ``n`` is None)."""
        n = n or self.config.n
        samples = [to_sample(c, self.extract) for c in result.completions[:n]]
        usage = prefix_usage(result.usage, samples, len(result.completions))
        return self.aggregate(problem_id, samples, usage)

    @abstractmethod
    def aggregate(self, problem_id: str, samples: Sequence[Sample], usage: Usage) -> Solution:
        """Choose the answer from the samples."""


def vote(samples: Sequence[Sample], weights: Sequence[float] | None = None) -> tuple[str | None, float, dict[str, float], int | None]:
    """Weighted plurality vote over normalised answers.

    Ties are broken deterministically: the answer whose first supporting sample came earliest
    wins. Samples without an answer abstain (their weight still counts in the denominator, so the
    confidence is the share of *all* samples behind the winner).

    Returns:
        (answer as first written, vote share in [0, 1], votes per normalised answer, index of the
        first sample that carries the winning answer).
    """
    weights = list(weights) if weights is not None else [1.0] * len(samples)
    totals: dict[str, float] = {}
    first: dict[str, int] = {}
    for i, (s, w) in enumerate(zip(samples, weights, strict=True)):
        if s.answer is None:
            continue
        key = normalize_answer(s.answer)
        totals[key] = totals.get(key, 0.0) + w
        first.setdefault(key, i)
    denom = sum(weights)
    if not totals or denom <= 0:
        return None, 0.0, totals, None
    best = max(totals, key=lambda k: (totals[k], -first[k]))
    idx = first[best]
    return samples[idx].answer, totals[best] / denom, totals, idx
