"""Weighted majority vote: each sample votes with a confidence weight.

Without a verifier the weight is exp(mean token logprob) of the sample, a number in (0, 1] that
favours fluent, confident samples (the "confidence-weighted" voting of e.g. Kang et al., 2025 and
the weighted self-consistency variants); samples without logprobs are refused rather than given
a default weight. With a verifier, its score is the weight: verifier-weighted majority voting,
which Liu et al. (2025) found the strongest simple rule with PRMs. With a step verifier (a PRM)
each sample is cut into steps at blank lines (:func:`~tts.search.base.split_steps`) and its
aggregated score (``aggregation``, default "last") is its vote; the answer with the largest sum
of votes wins, the one seen first on ties: search-and-learn's weighted best-of-N
(huggingface/search-and-learn, ``src/sal/utils/math.py``, ``find_answer_with_largest_sum``;
pinned in tests/parity/test_prm_and_aggregation.py). The confidence is the winner's share of all
the weight (the reference reports none). When the verifier scores every answered sample 0, tts
falls back to a plain vote (counted as ``unweighted_vote``), where the reference picks the first.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar, Literal

from pydantic import Field

from tts.config import StoppingConfig, VerifierConfig
from tts.search.base import SamplingStrategy, require_logprobs
from tts.types import Sample, Solution, Trace, Usage
from tts.verifiers.self_certainty import borda_weights


class WeightedVoteConfig(StoppingConfig):
    """Sample n, vote with weights exp(mean token logprob) per sample."""

    kind: Literal["weighted_vote"] = "weighted_vote"
    verifier: VerifierConfig | None = None
    """Weigh each sample by this verifier's score; None = by exp(mean token logprob)."""
    weighting: Literal["score", "borda"] = "score"
    """"score": each sample votes with its weight (score or exp(mean logprob)); "borda": Kang et
    al. (2025)'s Borda vote, which the self-certainty paper uses: samples are ranked by weight and
    rank r of N votes (N - r + 1) ** ``borda_power`` (:func:`tts.verifiers.self_certainty.borda_weights`)."""
    borda_power: float = Field(0.5, ge=0.0, le=10.0)
    """p of the Borda vote; 0 is the plain majority vote, larger p trusts the top ranks more."""


class WeightedVote(SamplingStrategy):
    """Vote with weights exp(mean logprob); confidence is the winner's share of total weight."""

    pool_rule = "weighted_vote"

    name = "weighted_vote"
    config_class: ClassVar[type] = WeightedVoteConfig
    needs_logprobs = True

    def aggregate(self, problem_id: str, samples: Sequence[Sample], usage: Usage,
                  scores: Sequence[float] | None = None) -> Solution:
        if scores is not None:
            weights = list(scores)
        else:
            weights = [math.exp(lp) for lp in require_logprobs(self.name, problem_id, samples)]
        shown = tuple(weights)  # the trace keeps the verifier's (or logprob) weights
        if self.config.weighting == "borda":
            weights = borda_weights(weights, self.config.borda_power)
        events = {}
        if not any(w > 0 for w, s in zip(weights, samples, strict=True) if s.answer is not None):
            # The verifier rejects every answered sample: no weight is informative, so count the
            # answers plainly rather than return no answer (and say so in the trace).
            weights = [1.0] * len(samples)
            events = {"unweighted_vote": 1} if any(s.answer is not None for s in samples) else {}
        answer, share, votes, idx = self.vote(samples, weights)
        trace = Trace(self.name, tuple(samples), scores=shown, votes=votes, selected=idx, events=events)
        return Solution(problem_id, answer, share, usage, trace)

