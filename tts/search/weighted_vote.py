"""Weighted majority vote: each sample votes with a confidence weight.

Until verifiers exist the weight is exp(mean token logprob) of the sample, a number in (0, 1]
that favours fluent, confident samples (the "confidence-weighted" voting of e.g. Kang et al.,
2025 and the weighted self-consistency variants). With a verifier, its score takes this place.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tts.search.base import SamplingStrategy, vote
from tts.types import Sample, Solution, Trace, Usage


class WeightedVote(SamplingStrategy):
    """Vote with weights exp(mean logprob); confidence is the winner's share of total weight."""

    name = "weighted_vote"
    needs_logprobs = True

    def aggregate(self, problem_id: str, samples: Sequence[Sample], usage: Usage) -> Solution:
        weights = [math.exp(s.mean_logprob) if s.mean_logprob is not None else 1.0 for s in samples]
        answer, share, votes, idx = vote(samples, weights)
        trace = Trace(self.name, tuple(samples), scores=tuple(weights), votes=votes, selected=idx)
        return Solution(problem_id, answer, share, usage, trace)
