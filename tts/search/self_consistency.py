"""Self-consistency: majority vote over the extracted answers of n samples (Wang et al., 2023)."""

from __future__ import annotations

from collections.abc import Sequence

from tts.search.base import SamplingStrategy, vote
from tts.types import Sample, Solution, Trace, Usage


class SelfConsistency(SamplingStrategy):
    """Return the most frequent answer; confidence is its share of the n samples."""

    name = "self_consistency"

    def aggregate(self, problem_id: str, samples: Sequence[Sample], usage: Usage) -> Solution:
        answer, share, votes, idx = vote(samples)
        trace = Trace(self.name, tuple(samples), votes=votes, selected=idx)
        return Solution(problem_id, answer, share, usage, trace)
