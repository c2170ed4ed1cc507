"""Weighted majority vote: each sample votes with a confidence weight.

Until verifiers exist the weight is exp(mean token logprob) of the sample, a number in (0, 1]
that favours fluent, confident samples (the "confidence-weighted" voting of e.g. Kang et al.,
2025 and the weighted self-consistency variants). With a verifier, its score takes this place.
Samples without logprobs are refused rather than given a default weight.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar, Literal

from tts.config import SamplingStrategyConfig
from tts.search.base import SamplingStrategy, require_logprobs, vote
from tts.types import Sample, Solution, Trace, Usage


class WeightedVoteConfig(SamplingStrategyConfig):
    """Sample n, vote with weights exp(mean token logprob) per sample."""

    kind: Literal["weighted_vote"] = "weighted_vote"
    weight: Literal["mean_logprob"] = "mean_logprob"
    """Where weights come from: exp(mean logprob) of the sample, a confidence in (0, 1]."""


class WeightedVote(SamplingStrategy):
    """Vote with weights exp(mean logprob); confidence is the winner's share of total weight."""

    name = "weighted_vote"
    config_class: ClassVar[type] = WeightedVoteConfig
    needs_logprobs = True

    def aggregate(self, problem_id: str, samples: Sequence[Sample], usage: Usage) -> Solution:
        weights = [math.exp(lp) for lp in require_logprobs(self.name, problem_id, samples)]
        answer, share, votes, idx = vote(samples, weights)
        trace = Trace(self.name, tuple(samples), scores=tuple(weights), votes=votes, selected=idx)
        return Solution(problem_id, answer, share, usage, trace)
