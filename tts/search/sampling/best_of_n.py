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

from tts.backends.base import Completion, GenerationResult
from tts.config import StoppingConfig, VerifierConfig
from tts.search.base import (
    SamplingStrategy,
    ScoredDraw,
    StrategyInputError,
    require_logprobs,
    solution_item,
    stop_of,
    to_sample,
)
from tts.search.stopping import Judge, ScoreStop
from tts.types import Sample, Solution, Trace, Usage
from tts.verifiers.base import VerifierScore, clean_score, score_or_fallback


class BestOfNConfig(StoppingConfig):
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

    def stop_judge(self, problems: Sequence[Any], ns: Sequence[int]) -> Judge:
        """Stop a problem at its first answered sample whose selection score reaches the stop's
        ``threshold`` (DSPy BestOfN's rule: ``stop: {rule: score, threshold: ...}``): each sample is
        scored as it finishes, by the verifier (one call per judgement, for the new samples only)
        or by its mean token log-probability; the scores are kept for the selection."""
        stop = stop_of(self)
        if stop is None or stop.rule != "score":
            raise StrategyInputError(f"best_of_n stops on a score: stop: {{rule: score, threshold: ...}} (the selection "
                                     f"score at which to stop), got rule {getattr(stop, 'rule', None)!r}")
        rules = [ScoreStop(stop, n) for n in ns]
        # Per problem: (score, scoring usage, invalid values) of each sample as it was judged, and
        # the verifier calls that failed, counted as score_samples counts them without a stop.
        self._stop_scores: dict[int, list[tuple[float | None, Usage, int]]] = {i: [] for i in range(len(ns))}
        self._stop_failures: dict[int, int] = {i: 0 for i in range(len(ns))}

        def judge(i: int, completions: Sequence[Completion]) -> str | None:
            kept = self._stop_scores[i]
            new = list(completions[len(kept):])
            verifier = self.verifier
            if verifier is None:
                scored = [(c.mean_logprob, Usage(), 0) for c in new]
                if any(c.mean_logprob is None for c in new):
                    require_logprobs(self.name, problems[i].id, [to_sample(c, self.extract) for c in new])
            else:
                items = [solution_item(problems[i], c.text, verifier, mean_logprob=c.mean_logprob,
                                       token_top_logprobs=c.token_top_logprobs) for c in new]
                values, failed = score_or_fallback(verifier, items, VerifierScore((), 0.0), "samples")
                self._stop_failures[i] += failed
                scored = [(clean_score(v.score)[0], v.usage, v.invalid) for v in values]
            kept.extend(scored)
            answered = [score if to_sample(c, self.extract).answer is not None else None
                        for c, (score, _, _) in zip(completions, kept, strict=True)]
            return rules[i].check(answered)

        return judge

    def settled_scores(self, problems: Sequence[Any], results: Sequence[GenerationResult]) -> list[ScoredDraw | None]:
        """The scores the stop gave as the samples finished (no sample is scored twice); None
        without a verifier (the mean logprobs are read again)."""
        if self.verifier is None:
            return [None] * len(problems)
        out: list[ScoredDraw | None] = []
        for i, result in enumerate(results):
            kept = self._stop_scores[i][:len(result.completions)]
            invalid = sum(bad for _, _, bad in kept)
            events = {**({"verifier_error": self._stop_failures[i]} if self._stop_failures[i] else {}),
                      **({"invalid_score": invalid} if invalid else {})}
            out.append(ScoredDraw(tuple(float(sc or 0.0) for sc, _, _ in kept), tuple(u for _, u, _ in kept), events))
        return out
