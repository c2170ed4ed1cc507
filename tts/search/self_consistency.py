"""Self-consistency: majority vote over the extracted answers of n samples (Wang et al., 2023)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Literal

from tts.config import SamplingStrategyConfig
from tts.search.base import SamplingStrategy, vote
from tts.types import Sample, Solution, Trace, Usage


class SelfConsistencyConfig(SamplingStrategyConfig):
    """Sample n, return the most frequent extracted answer (Wang et al., 2023)."""

    kind: Literal["self_consistency"] = "self_consistency"


class SelfConsistency(SamplingStrategy):
    """Return the most frequent answer; confidence is its share of the n samples."""

    name = "self_consistency"
    config_class: ClassVar[type] = SelfConsistencyConfig
    pool_rule = "vote"

    def aggregate(self, problem_id: str, samples: Sequence[Sample], usage: Usage,
                  scores: Sequence[float] | None = None) -> Solution:
        answer, share, votes, idx = vote(samples)
        trace = Trace(self.name, tuple(samples), votes=votes, selected=idx)
        return Solution(problem_id, answer, share, usage, trace)
