"""Best-of-N: keep the single sample with the highest selection score.

The score is a verifier's when the config names one (``verifier: arithmetic``, ``judge``, ``prm``,
...: all samples of all problems scored in one verifier call), else the sample's mean token
log-probability (a model-internal confidence); with a verifier, equal verifier scores are told
apart by mean logprob. A backend that returns no logprobs is refused
(:func:`~tts.search.base.require_logprobs`), never silently turned into "first sample". Samples
without an answer are only chosen when no sample has one. Ties go to the earliest sample.

With a step verifier (a PRM, the arithmetic tool, a per-step judge) each sample is cut into steps
at blank lines (:func:`~tts.search.base.split_steps`, the step-wise search's steps) and the
verifier's ``aggregation`` (default "last") makes one score of them: search-and-learn's best-of-N
(huggingface/search-and-learn, ``src/sal/search/best_of_n.py``; pinned in
tests/parity/test_prm_and_aggregation.py). Departures: equal scores go to the higher mean logprob
before the earliest sample (the reference takes the earliest), and an unanswered sample is chosen
only when no sample has an answer; ``aggregation: min`` gives tts's former default.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar, Literal

from tts.config import SamplingStrategyConfig, VerifierConfig
from tts.search.base import SamplingStrategy, require_logprobs
from tts.types import Sample, Solution, Trace, Usage


class BestOfNConfig(SamplingStrategyConfig):
    """Sample n, keep the one with the best selection score."""

    kind: Literal["best_of_n"] = "best_of_n"
    verifier: VerifierConfig | None = None
    """Score samples with this verifier (a registered name or its config); None = by the sample's
    mean token log-probability."""


class BestOfN(SamplingStrategy):
    """Select the best-scored answered sample; confidence is softmax weight of the selected one."""

    name = "best_of_n"
    config_class: ClassVar[type] = BestOfNConfig
    needs_logprobs = True
    pool_rule = "best_of_n"

    def aggregate(self, problem_id: str, samples: Sequence[Sample], usage: Usage,
                  scores: Sequence[float] | None = None) -> Solution:
        verified = scores is not None
        scores = list(scores) if verified else require_logprobs(self.name, problem_id, samples)
        answered = [i for i, s in enumerate(samples) if s.answer is not None]
        if not answered:
            trace = Trace(self.name, tuple(samples), scores=tuple(scores))
            return Solution(problem_id, None, 0.0, usage, trace)
        # Verifier scores tie often (a tool check gives 0, 0.5 or 1): the model's own confidence
        # (mean logprob, where the backend returned it) breaks the tie, then the earliest sample.
        tie = [s.mean_logprob if verified and s.mean_logprob is not None else -math.inf for s in samples]
        best = max(answered, key=lambda i: (scores[i], tie[i], -i))
        # Confidence: the selected sample's share of exp(score) mass among answered samples.
        mass = [math.exp(scores[i]) for i in answered]
        confidence = math.exp(scores[best]) / sum(mass)
        trace = Trace(self.name, tuple(samples), scores=tuple(scores), selected=best)
        return Solution(problem_id, samples[best].answer, confidence, usage, trace)
