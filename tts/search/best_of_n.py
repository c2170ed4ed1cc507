"""Best-of-N: keep the single sample with the highest selection score.

The score is a verifier's when one is configured; until then, the sample's mean token
log-probability (a model-internal confidence). Samples without an answer are only chosen when no
sample has one. Ties go to the earliest sample.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tts.search.base import SamplingStrategy
from tts.types import Sample, Solution, Trace, Usage


class BestOfN(SamplingStrategy):
    """Select the best-scored answered sample; confidence is softmax weight of the selected one."""

    name = "best_of_n"
    needs_logprobs = True

    def aggregate(self, problem_id: str, samples: Sequence[Sample], usage: Usage) -> Solution:
        scores = [s.mean_logprob if s.mean_logprob is not None else 0.0 for s in samples]
        answered = [i for i, s in enumerate(samples) if s.answer is not None]
        if not answered:
            trace = Trace(self.name, tuple(samples), scores=tuple(scores))
            return Solution(problem_id, None, 0.0, usage, trace)
        best = max(answered, key=lambda i: (scores[i], -i))
        # Confidence: the selected sample's share of exp(score) mass among answered samples.
        mass = [math.exp(scores[i]) for i in answered]
        confidence = math.exp(scores[best]) / sum(mass)
        trace = Trace(self.name, tuple(samples), scores=tuple(scores), selected=best)
        return Solution(problem_id, samples[best].answer, confidence, usage, trace)
