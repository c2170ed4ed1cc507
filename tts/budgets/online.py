"""Online allocation: sample in rounds, stop a problem once its vote is decided.

Adaptive-Consistency (Aggarwal et al. 2023, "Let's Sample Step by Step: Adaptive-Consistency for
Efficient Reasoning and Coding with LLMs") stops sampling a problem when more samples are unlikely
to change its majority answer. Two stopping rules are offered:

* ``"beta"``: the Beta criterion of Aggarwal et al. With v1 and v2 votes for the two leading
  answers, P(p1 > p2) = P(X > 1/2) for X ~ Beta(v1 + 1, v2 + 1); stop when it reaches
  ``confidence`` (they use 0.95).
* ``"exact"``: stop only when the leader cannot be overtaken by the samples still allowed
  (v1 - v2 > n_max - n): the answer is then the same as with n_max samples.

Either way a problem also stops at ``n_max`` samples. The budget that easy (quickly unanimous)
problems do not use flows to the contested ones: each round, undecided problems are served in
order of increasing confidence until the budget runs out, up to ``n_max`` samples each. When every
vote is decided and budget is left, the bar rises (:func:`stopping_stages`: the Beta criterion at
0.99, then 0.999, then the exact rule), so a larger budget keeps buying the most contested votes.

:class:`OnlineAllocator` holds the state of a real run; replays use the same
:func:`vote_confidence` / :func:`decided` / :meth:`OnlineAllocator.next_round` logic.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from scipy.special import betainc

logger = logging.getLogger(__name__)

StopRule = Literal["beta", "exact"]


def vote_confidence(top1: np.ndarray, top2: np.ndarray) -> np.ndarray:
    """P(the leader's true share exceeds the runner-up's) = P(Beta(v1+1, v2+1) > 1/2).

    Args:
        top1: Votes of the leading answer.
        top2: Votes of the second answer (0 when there is none).
    """
    a = np.asarray(top1, dtype=float) + 1.0
    b = np.asarray(top2, dtype=float) + 1.0
    # P(X > 1/2) = 1 - I_{1/2}(a, b) = I_{1/2}(b, a)
    return betainc(b, a, 0.5)


def decided(
    top1: np.ndarray,
    top2: np.ndarray,
    n: np.ndarray,
    n_max: int | np.ndarray,
    *,
    rule: StopRule = "beta",
    confidence: float = 0.95,
) -> np.ndarray:
    """True where sampling should stop: the vote is settled or ``n_max`` samples are drawn.

    Args:
        top1, top2: Votes of the two leading answers (no-answer samples never vote).
        n: Samples drawn so far (no-answer samples included).
        n_max: Most samples a problem may get.
        rule: "beta" (Aggarwal et al.'s Beta criterion at ``confidence``) or "exact"
            (the leader cannot be overtaken within ``n_max``).
    """
    top1, top2, n = (np.asarray(x) for x in (top1, top2, n))
    done = n >= n_max
    lead_safe = (top1 - top2) > (n_max - n)
    if rule == "exact":
        return done | lead_safe
    if rule == "beta":
        return done | lead_safe | ((top1 > 0) & (vote_confidence(top1, top2) >= confidence))
    raise ValueError(f"rule must be 'beta' or 'exact', got {rule!r}")


def stopping_stages(rule: StopRule = "beta", confidence: float = 0.95,
                    escalate: bool = True) -> list[tuple[StopRule, float]]:
    """The (rule, confidence) stages an online run walks through while budget is left."""
    if rule == "exact" or not escalate:
        return [(rule, confidence)]
    higher = [c for c in (0.99, 0.999) if c > confidence]
    return [("beta", confidence)] + [("beta", c) for c in higher] + [("exact", confidence)]


def top_two(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The two largest values along the last axis of a vote-count array."""
    c = np.asarray(counts)
    if c.shape[-1] == 0:
        z = np.zeros(c.shape[:-1], dtype=c.dtype)
        return z, z
    if c.shape[-1] == 1:
        return c[..., 0], np.zeros(c.shape[:-1], dtype=c.dtype)
    part = np.partition(c, -2, axis=-1)
    return part[..., -1], part[..., -2]


def serve_order(confidence: np.ndarray, open_: np.ndarray) -> np.ndarray:
    """Indices of open problems, least confident first (ties by index): who gets budget first."""
    idx = np.nonzero(open_)[0]
    return idx[np.argsort(confidence[idx], kind="stable")]


@dataclass
class OnlineAllocator:
    """Round-based adaptive sampling under a total budget, for a real run.

    Call :meth:`next_round` with the answers seen so far; it returns which problems get one more
    sample this round (least confident first). Report each round's samples with :meth:`record`.

    Args:
        budget: Total budget, in the unit of ``expected_cost``.
        expected_cost: Expected cost of one more sample of a problem (same for all, or a mapping).
        n_max: Most samples per problem.
        rule: Stopping rule ("beta" or "exact").
        confidence: Beta-criterion threshold.
        escalate: Raise the bar when every vote is decided and budget is left.

    Example:
        >>> alloc = OnlineAllocator(budget=1e6, expected_cost=2000.0, n_max=64)
        >>> alloc.next_round(["p1", "p2"])
        ['p1', 'p2']
    """

    budget: float
    expected_cost: float | Mapping[Hashable, float]
    n_max: int = 64
    rule: StopRule = "beta"
    confidence: float = 0.95
    escalate: bool = True
    spent: float = 0.0
    votes: dict[Hashable, Counter] = field(default_factory=dict)
    drawn: dict[Hashable, int] = field(default_factory=dict)
    exhausted: bool = False
    stage: int = 0

    def __post_init__(self) -> None:
        if not (self.budget > 0):
            raise ValueError(f"the budget must be a positive number, got {self.budget!r}")
        if self.n_max < 1:
            raise ValueError(f"n_max must be >= 1, got {self.n_max}")
        if not 0.5 < self.confidence < 1:
            raise ValueError(f"confidence must lie in (0.5, 1), got {self.confidence}")

    def _cost(self, pid: Hashable) -> float:
        ec = self.expected_cost
        return float(ec[pid]) if isinstance(ec, Mapping) else float(ec)

    def update_expected_cost(self, expected_cost: float | Mapping[Hashable, float]) -> None:
        """Replace the cost estimate of one more sample (e.g. with the mean observed so far).

        An earlier "budget exhausted" verdict was reached under the old estimate, so it is
        cleared: the next :meth:`next_round` decides again under the new one.
        """
        self.expected_cost = expected_cost
        self.exhausted = False

    def record(self, problem_id: Hashable, answer: str | None, cost: float) -> None:
        """Account one drawn sample: its answer (None = no answer) and its actual cost."""
        self.drawn[problem_id] = self.drawn.get(problem_id, 0) + 1
        votes = self.votes.setdefault(problem_id, Counter())
        if answer is not None:
            votes[answer] += 1
        self.spent += float(cost)

    def state(self, problem_ids: Sequence[Hashable]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(top1, top2, n) vote arrays for the given problems."""
        t1, t2, n = [], [], []
        for pid in problem_ids:
            counts = sorted(self.votes.get(pid, Counter()).values(), reverse=True) + [0, 0]
            t1.append(counts[0])
            t2.append(counts[1])
            n.append(self.drawn.get(pid, 0))
        return np.asarray(t1), np.asarray(t2), np.asarray(n)

    def next_round(self, problem_ids: Sequence[Hashable]) -> list[Hashable]:
        """Problems that get one more sample now (least confident first); [] = finished."""
        t1, t2, n = self.state(problem_ids)
        stages = stopping_stages(self.rule, self.confidence, self.escalate)
        while True:
            rule, conf_bar = stages[self.stage]
            open_ = ~decided(t1, t2, n, self.n_max, rule=rule, confidence=conf_bar)
            if open_.any() or self.stage + 1 == len(stages):
                break
            self.stage += 1
        conf = np.where(n > 0, vote_confidence(t1, t2), 0.0)
        chosen, left = [], self.budget - self.spent
        if self.exhausted:
            return chosen
        for i in serve_order(conf, open_).tolist():
            c = self._cost(problem_ids[i])
            if c > left:
                # The budget ends here: the run stops (replays stop at the same sample).
                self.exhausted = True
                break
            chosen.append(problem_ids[i])
            left -= c
        return chosen

    def answer(self, problem_id: Hashable) -> tuple[str | None, float]:
        """The current majority answer (None if no sample answered) and its vote share."""
        votes = self.votes.get(problem_id, Counter())
        if not votes:
            return None, 0.0
        ans, v = votes.most_common(1)[0]
        return ans, v / max(self.drawn.get(problem_id, 0), 1)
