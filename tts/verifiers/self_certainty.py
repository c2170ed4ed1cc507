"""Self-certainty: how far each token distribution is from uniform, from the top-k logprobs.

Kang, Zhao & Song 2025, "Scalable Best-of-N Selection for Large Language Models via
Self-Certainty": a response's self-certainty is the mean over its tokens of KL(U || p_i), the
divergence of the uniform distribution over the vocabulary from the model's next-token
distribution p_i. A model that is sure of its tokens puts its mass on few of them (large KL); one
that guesses spreads it (small KL). No extra model and no extra call: the distribution comes with
the generation.

Engines return only the top k log-probabilities of each position (k <= 20), so the rest of the
distribution is estimated: its mass r = 1 - sum of the top-k probabilities is spread evenly over the
other V - k tokens. By Jensen's inequality, an even tail gives the smallest KL for that mass, so
the estimate is a lower bound of the true KL, tight when the tail is flat:

    KL(U || p) = -log V - (1/V) * sum_j log p_j
               ~ -log V - (1/V) * (sum_{top k} log p_j + (V - k) * log(r / (V - k)))

V (``vocab_size``) matters little once V >> k. Verifier scores lie in [0, 1]; the score is
SC / (1 + SC) of the mean KL SC, a monotone map (best-of-N picks the same sample as by raw
self-certainty) that does not saturate at the values real traces have (SC of 5 to 30 nats: a
near-empty tail beyond the top 20 tokens makes the KL large).
An item without top-k log-probabilities scores 0 and is counted invalid, and a warning names the
scorers this backend cannot serve.

Kang et al. also vote with self-certainty (:func:`borda_vote`): the N samples are ranked by it and
the sample at rank r (1 = most certain) adds ``(N - r + 1) ** p`` to its answer's tally (p = 0.5 in
their code; p = 0 is the plain majority vote). As a verifier, self-certainty gives each sample its
own score, which ``best_of_n`` and ``weighted_vote`` use as is: ``best_of_n`` picks the sample
Kang et al.'s best-of-N picks (the score is a monotone map of SC), while ``weighted_vote`` weights
by the score, not by Borda rank votes; :func:`borda_vote` is the paper's vote on the same samples.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from pydantic import Field

from tts.answers import answer_keys
from tts.config import VerifierConfigBase
from tts.verifiers.base import VerifierScore, VerifyItem, clean_score

logger = logging.getLogger(__name__)


class SelfCertaintyConfig(VerifierConfigBase):
    """Score a sample by its mean KL(uniform || token distribution), estimated from the top-k logprobs."""

    kind: Literal["self_certainty"] = "self_certainty"
    reads_logprobs: ClassVar[bool] = True
    """Its scores come from the top log-probabilities of every token (a backend must return them)."""
    top_k: int = Field(20, ge=1, le=20)
    """Top log-probabilities per token to ask the backend for (at most 20)."""
    vocab_size: int = Field(50_000, ge=2)
    """V, the vocabulary size of the estimate (the result barely depends on it when V >> top_k)."""

    @property
    def request_top_logprobs(self) -> int:
        """What a sampling strategy must ask its backend for so that this scorer can work."""
        return self.top_k


def token_self_certainty(top_logprobs: Sequence[float], vocab_size: int) -> float:
    """KL(U || p) of one position, with the mass outside the given top tokens spread evenly.

    Example:
        >>> round(token_self_certainty([math.log(0.5), math.log(0.5)], 4), 4)  # 2 of 4 tokens hold all mass
        22.3327
    """
    values = [max(float(v), -100.0) for v in top_logprobs]
    k = len(values)
    if k == 0:
        raise ValueError("no top logprobs at this position")
    v = max(vocab_size, k)
    tail = 0.0
    if v > k:
        rest = max(1.0 - sum(math.exp(x) for x in values), 1e-20)  # an empty tail: a tiny, not a zero, mass
        tail = (v - k) * math.log(rest / (v - k))
    return -math.log(v) - (sum(values) + tail) / v


def self_certainty(positions: Sequence[Sequence[float]], vocab_size: int = 50_000) -> float:
    """Mean :func:`token_self_certainty` over a response's positions."""
    if not positions:
        raise ValueError("no positions: ask the backend for top_logprobs")
    return sum(token_self_certainty(p, vocab_size) for p in positions) / len(positions)


def borda_weights(certainties: Sequence[float], power: float) -> list[float]:
    """Kang et al.'s rank votes: the sample ranked r of N by certainty (ties keep sample order,
    the earlier ranks higher) votes (N - r + 1) ** power."""
    n = len(certainties)
    order = sorted(range(n), key=lambda i: -certainties[i])  # stable: ties keep sample order
    out = [0.0] * n
    for rank, i in enumerate(order):
        out[i] = float(n - rank) ** power
    return out


def borda_vote(answers: Sequence[str | None], certainties: Sequence[float],
               power: float = 0.5) -> tuple[str | None, dict[str, float]]:
    """Kang et al.'s Borda vote: rank the samples by self-certainty, weigh rank r by (N - r + 1) ** power.

    Every sample takes a rank (ties keep the samples' order; the earlier ranks higher); samples
    without an answer add nothing. Equal answers (by :func:`~tts.answers.answer_keys`) pool their
    votes; among answers with the same total, the one whose first sample comes first wins.

    Args:
        answers: Each sample's extracted answer (None: no answer).
        certainties: Each sample's self-certainty (any monotone map of it ranks the same).
        power: p; 0 gives the plain majority vote.

    Returns:
        The winning answer (the first sample's spelling; None when no sample has one) and the
        votes of each answer key.

    Example:
        >>> borda_vote(["7", "5", "5"], [9.0, 1.0, 2.0], power=1.0)  # 3 votes for 7; 1 + 2 for 5
        ('7', {'7': 3.0, '5': 3.0})
    """
    if len(answers) != len(certainties):
        raise ValueError(f"got {len(answers)} answers and {len(certainties)} certainties; give one per sample")
    if power < 0:
        raise ValueError(f"power must be >= 0 (0 is majority vote), got {power}")
    weight = borda_weights(certainties, power)
    keys = answer_keys(list(answers))
    votes: dict[str, float] = {}
    first: dict[str, int] = {}
    for i, (answer, key) in enumerate(zip(answers, keys, strict=True)):
        if answer is None or key is None:
            continue
        votes[key] = votes.get(key, 0.0) + weight[i]
        first.setdefault(key, i)
    if not votes:
        return None, {}
    top = max(votes.values())
    winner = min((k for k, v in votes.items() if v == top), key=first.__getitem__)
    return answers[first[winner]], votes


class SelfCertaintyVerifier:
    """SC / (1 + SC) of each item's self-certainty SC (an outcome score: the whole response).

    Example:
        >>> from tts.types import Problem
        >>> sure = VerifyItem(Problem("p", "?"), ("a",), token_top_logprobs=((-0.01, -6.0),))
        >>> unsure = VerifyItem(Problem("p", "?"), ("b",), token_top_logprobs=((-1.0, -1.2),))
        >>> a, b = SelfCertaintyVerifier().score([sure, unsure])
        >>> a.score > b.score
        True
    """

    name: ClassVar[str] = "self_certainty"
    config_class: ClassVar[type[SelfCertaintyConfig]] = SelfCertaintyConfig

    def __init__(self, config: SelfCertaintyConfig | None = None) -> None:
        self.config = config or SelfCertaintyConfig()
        self._warned = False

    @classmethod
    def from_config(cls, config: SelfCertaintyConfig, generator: Any = None) -> SelfCertaintyVerifier:
        """Build from a config; the generator is not used (the logprobs come with the items)."""
        return cls(config)

    def _score_one(self, item: VerifyItem) -> VerifierScore:
        if not item.token_top_logprobs:
            if not self._warned:
                self._warned = True
                logger.warning("self_certainty: items came without top-k logprobs (this backend returns none, or the "
                               "strategy did not ask); they score 0. Unavailable here: self_certainty and deepconf; "
                               "use the logprob scorer if the backend returns sampled-token logprobs")
            return VerifierScore((), 0.0, invalid=1)
        raw = self_certainty(item.token_top_logprobs, self.config.vocab_size)
        raw = max(raw, 0.0)
        score, bad = clean_score(raw / (1.0 + raw))
        return VerifierScore((), score, invalid=bad)

    def score(self, items: Sequence[VerifyItem]) -> list[VerifierScore]:
        """One score per item, in order."""
        return [self._score_one(item) for item in items]

    def close(self) -> None:
        """Nothing to release."""
