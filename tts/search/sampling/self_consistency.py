"""Self-consistency: majority vote over the extracted answers of n samples (Wang et al., 2022).

The rule is the paper's (arXiv:2203.11171, Sec. 2): sample n reasoning paths, parse each one's
final answer a_i, return arg max_a sum_i 1(a_i = a). Pinned by
``tests/parity/test_voting_and_answers.py``. Where the paper is silent, tts decides as follows:

- answers are compared as values, not strings: ``0.5`` and ``\\frac{1}{2}`` are one answer, as are
  ``17 + 25 = 42``, ``**42**`` and ``42`` (:mod:`tts.answers`);
- a sample without a parseable answer votes for nothing; with no answer at all, the answer is None;
- a tie goes to the answer whose first sample came earliest (reproducible);
- the confidence is the winner's share of all n samples, answered or not (the paper's
  "consistency": the share of sampled decodes that agree with the final answer).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Literal

from tts.config import StoppingConfig
from tts.search.base import SamplingStrategy
from tts.types import Sample, Solution, Trace, Usage


class SelfConsistencyConfig(StoppingConfig):
    """Sample n, return the most frequent extracted answer (Wang et al., 2023)."""

    kind: Literal["self_consistency"] = "self_consistency"


class SelfConsistency(SamplingStrategy):
    """Return the most frequent answer; confidence is its share of the n samples."""

    name = "self_consistency"
    config_class: ClassVar[type] = SelfConsistencyConfig
    pool_rule = "vote"

    def aggregate(self, problem_id: str, samples: Sequence[Sample], usage: Usage,
                  scores: Sequence[float] | None = None) -> Solution:
        answer, share, votes, idx = self.vote(samples)
        trace = Trace(self.name, tuple(samples), votes=votes, selected=idx)
        return Solution(problem_id, answer, share, usage, trace)
