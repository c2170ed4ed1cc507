"""Online allocation: sample in rounds, stop a problem once its vote is decided.

Adaptive-Consistency (Aggarwal et al. 2023, "Let's Sample Step by Step: Adaptive-Consistency for
Efficient Reasoning and Coding with LLMs") stops sampling a problem when more samples are unlikely
to change its majority answer. The stopping rules:

* ``"horizon"`` (default): the question Adaptive-Consistency asks, asked about the run's own
  horizon. Aggarwal et al. stop when P(p1 > p2) under the Beta posterior reaches ``confidence``:
  a question about infinitely many samples. A run never draws more than ``n_max``, and what it
  must match is the answer ``n_max`` samples would give (uniform self-consistency@n_max), so this
  rule stops when P(the leader is still the leader after ``n_max`` samples) reaches
  ``confidence``, under the same Beta posterior (:func:`overturn_risk`, Beta-binomial). Far from
  ``n_max`` it behaves like the Beta criterion; near it, a lead the remaining samples can hardly
  overturn stops early. A departure from the paper, measured in docs/budgets.md; rounds serve
  the highest risk first.
* ``"beta"``: the Beta criterion of Aggarwal et al. With v1 and v2 votes for the two leading
  answers, P(p1 > p2) = P(X > 1/2) for X ~ Beta(v1 + 1, v2 + 1); stop when it reaches
  ``confidence`` (they use 0.95).
* ``"dirichlet"``: Adaptive-Consistency's Dirichlet criterion, their rule for votes with more
  than two answers: stop when the probability that the leader has the largest share, under a
  Dirichlet posterior over the answers' shares with a uniform prior (``prior`` pseudo-votes per
  answer, 1 = uniform), reaches ``confidence`` (:func:`dirichlet_confidence`). As in the
  authors' code, only the ``top_k`` most voted answers (5) enter the posterior, and a vote with a
  single answer races a second answer with no votes (so two answers or fewer give exactly the
  "beta" rule). The probability is computed by a one-dimensional Gauss-Legendre integral (exact to
  about 1e-9) instead of the paper's Monte Carlo over the simplex: deterministic, 48 x
  (``top_k`` - 1) incomplete-gamma evaluations per open problem (about 30 ms for 500 problems
  with five answers on a shared 2-core machine). Same ladder as "beta". Measured and not the
  default (docs/budgets.md, "Third pass").
* ``"window"``: ESC's window rule (Li et al. 2024, "Escape Sky-high Cost: Early-stopping
  Self-Consistency for Multi-step Reasoning"): stop once the last ``window`` samples all gave the
  same answer (zero answer entropy within the window); the answer is still the majority of every
  sample. Here the window slides over the samples drawn (ESC's windows are disjoint; with
  ``window == chunk`` the two agree at round ends). Measured and not the default
  (docs/stopping_rules_that_lost.md).
* ``"exact"``: stop only when the leader cannot be overtaken by the samples still allowed
  (v1 - v2 > n_max - n): the answer is then the same as with n_max samples.
* ``"rate"``: stop when one more sample is predicted to buy less than ``min_gain`` expected
  accuracy; rounds then serve the highest predicted gain first. The prediction comes from a
  :class:`RateModel` the caller supplies (``OnlinePolicy(rate_model=...)``); none ships in the
  library, because the two models tried (a closed-form value of more samples, and a predictor
  fitted on other problems' graded votes) lost to ``"beta"`` on every pool where they were
  measured. They live on, with their measurements, in ``tts.budgets.rate_models`` (docs/stopping_rules_that_lost.md).

Length as confidence (``OnlinePolicy(length_weight=alpha)``, "horizon" and "beta"; 0 = off, the
default): the pools carry no log-probabilities, but a sample's length is a confidence a live run
has too (shorter reasoning traces are more often right). With it, the race the Beta model judges
is between the two leading answers' *length-weighted* votes: answer k with c_k votes of mean length
L_k weighs c_k * L_k^-alpha, and the race's c1 + c2 votes are split in that proportion
(:func:`race_votes`), so a leader whose samples are shorter than the runner-up's stops sooner and
one whose samples are longer goes on. The answer is still the plain majority, and the exact lead
test reads plain votes. Measured and not the default (docs/stopping_rules_that_lost.md).

ESC's window as a confirmation (``OnlinePolicy(confirm_window=w)``, "horizon", "beta" and
"dirichlet"; 0 = off, the default): the posterior's stop also needs the last ``w`` answers to agree, so a lead whose
latest samples are mixed goes on. Measured and not the default (docs/stopping_rules_that_lost.md).

Giving up on spread-out votes (``OnlinePolicy(give_up_after=n0, give_up_share=s)``; 0 = off, the
default): in the first stage only, a problem with at least ``n0`` samples whose leader holds less
than a share ``s`` of them stops, as answer-entropy stopping would: a vote that spread out is
rarely right even at ``n_max``. Later stages reopen it while budget is left. Measured and not the
default (docs/stopping_rules_that_lost.md).

Either way a problem also stops at ``n_max`` samples. When every vote is decided and budget is
left, the bar rises (:func:`stopping_stages`: the same criterion at 0.99, then 0.999, then the
exact rule ("beta" and "dirichlet"); for "horizon" in finer steps, 0.96, 0.97, 0.98, 0.99, 0.995, 0.999, so that stopped
votes are reopened riskiest first (:data:`FINE_LADDER`); for "rate", ``min_gain`` / 4, / 16, / 64, then the exact rule, with the Beta
confidence of a model that also stops confident leaders rising along: 0.95, 0.99, 0.999), so a
larger budget keeps buying the most contested votes.

One rule, used by the real run (``tts eval --allocate``) and by every replay
(``tts budget simulate``), in two steps:

1. **Decide** (:func:`plan_round`): from the votes so far, each round gives every undecided
   problem ``chunk`` more samples (fewer near ``n_max``), least confident first. A round depends
   only on samples already drawn, never on the budget.
2. **Pay** (:func:`cut_call`): the round's requests go to the engine in order, as many per call
   as fit the budget left *at their worst case* (every sample at the generation limit, prompt
   uncached), so the budget is never exceeded whatever the samples turn out to cost. When not even
   the next whole request fits, it is shortened to the samples that fit; when not one sample
   fits, the run ends.

Because rounds never depend on the budget, a run with budget B draws a prefix of the run with
unlimited budget: a replay computes the rounds once and evaluates every budget on that sequence
(:class:`tts.budgets.replay.online.OnlineSequence`), and :class:`OnlineAllocator` drives a real run with the same two
functions.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np
from scipy.special import expit

from tts.search.stopping import (  # the rule of one vote; this module runs it over many
    POSTERIOR_RULES,
    STOP_RULES,
    StopRule,
    decided,
    dirichlet_confidence,
    overturn_risk,
    vote_confidence,
)

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from tts.benchmarks.pool import ModelPool
    from tts.budgets.replay.prefix import PrefixReplay

WorstCase = Callable[[np.ndarray, np.ndarray], np.ndarray]
"""``worst(problem_index, k) -> cost``: the most one request of ``k`` samples of a problem can
cost (elementwise over broadcast arrays; non-decreasing in ``k``)."""


def race_votes(count1: np.ndarray, length1: np.ndarray, count2: np.ndarray, length2: np.ndarray,
               alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """The two leading answers' votes, re-split by length: the race of ``length_weight``.

    Answer k (``count_k`` votes, ``length_k`` their summed tokens) weighs
    ``e_k = count_k * (length_k / count_k) ** -alpha``; the race keeps ``count1 + count2`` votes
    and splits them as ``e1 : e2``. ``alpha = 0`` (or a runner-up without votes) returns the counts.
    The first of the two returned is the leader by weighted votes, which may be the runner-up by
    count: the race then says the vote is not settled.

    Args:
        count1, length1: Votes of the leading answer and the tokens of those samples.
        count2, length2: The same for the runner-up (0, 0 when there is none).
        alpha: How strongly a shorter mean length counts as confidence (>= 0).
    """
    c1, s1, c2, s2 = (np.asarray(x, dtype=float) for x in (count1, length1, count2, length2))
    if alpha == 0:
        return c1, c2
    # The split e1 / (e1 + e2), from log weights: at a large alpha both weights underflow to 0 and
    # the split would be lost (every vote went to the count leader at alpha ~100).
    l1, l2 = race_log_weight(c1, s1, alpha), race_log_weight(c2, s2, alpha)
    both_empty = np.isneginf(l1) & np.isneginf(l2)
    with np.errstate(invalid="ignore"):
        share = np.where(both_empty, 1.0, expit(np.where(both_empty, 0.0, l1 - l2)))
    tot = c1 + c2
    r1 = tot * share
    return r1, tot - r1


def race_log_weight(count: np.ndarray, length: np.ndarray, alpha: float) -> np.ndarray:
    """The log of an answer's weight in the length-weighted race, ``count * (length / count) **
    -alpha`` (-inf without votes): :func:`race_votes` splits the race by it, and it ranks answers
    with equal votes. Logs, because the weight itself underflows for long samples at a large alpha."""
    c, s = np.asarray(count, dtype=float), np.asarray(length, dtype=float)
    safe_c = np.maximum(c, 1.0)
    return np.where(c > 0, np.log(safe_c) - alpha * np.log(np.maximum(s, 1.0) / safe_c), -np.inf)



LADDER = (0.99, 0.999)
"""The confidences "beta" rises through once every vote is decided (then "exact")."""

FINE_LADDER = (0.96, 0.97, 0.98, 0.99, 0.995, 0.999)
"""The confidences "horizon" rises through (then "exact"): stopped votes are reopened in finer
steps of risk, the riskiest first (issue 36: it raised MATH-500's median and worst at one seed
of the orderings and GPQA's worst at another, and lowered no pool; docs/budgets.md)."""


def default_ladder(rule: str) -> tuple[float, ...]:
    """The escalation ladder a rule rises through unless told otherwise: :data:`FINE_LADDER` for
    "horizon", :data:`LADDER` for the others."""
    return FINE_LADDER if rule == "horizon" else LADDER


def stopping_stages(rule: StopRule = "beta", confidence: float = 0.95,
                    escalate: bool = True, min_gain: float = 1e-3,
                    ladder: tuple[float, ...] | None = None) -> list[tuple[StopRule, float]]:
    """The (rule, bar) stages an online run walks through while budget is left.

    The bar is the posterior confidence for "beta", "horizon" and "dirichlet", the least gain per
    sample for "rate" and the window length (passed as ``confidence``) for "window". ``ladder``:
    the confidences those three rise through (those above ``confidence``), before the exact rule
    (None: :func:`default_ladder`).
    """
    if rule == "rate":
        stages: list[tuple[StopRule, float]] = [(rule, min_gain)]
        if escalate:
            stages += [(rule, min_gain / f) for f in (4, 16, 64)] + [("exact", confidence)]
        return stages
    if rule == "window":  # confidence = the window; it doubles, twice, then the exact rule
        w = float(confidence)
        return [(rule, w)] + ([(rule, 2 * w), (rule, 4 * w), ("exact", 0.95)] if escalate else [])
    if rule == "exact" or not escalate:
        return [(rule, confidence)]
    higher = [c for c in sorted(default_ladder(rule) if ladder is None else ladder) if c > confidence]
    return [(rule, confidence)] + [(rule, c) for c in higher] + [("exact", confidence)]


def serve_order(confidence: np.ndarray, open_: np.ndarray) -> np.ndarray:
    """Indices of open problems, least confident first (ties by index): who gets budget first."""
    idx = np.nonzero(open_)[0]
    return idx[np.argsort(confidence[idx], kind="stable")]


class RateModel(Protocol):
    """A prediction of what one more sample of each vote buys, for the "rate" stopping rule.

    ``stop_confident``: whether a Beta-confident leader also stops (at the confidence of the
    current stage), besides a low predicted gain. ``cross_fitted``: whether :meth:`replay_rates`
    fits on graded problems, so that a replay must run each fold apart (no problem's rounds may
    depend on a model fitted on its own grade).
    """

    stop_confident: bool
    cross_fitted: bool

    def live_rate(self, top1: np.ndarray, top2: np.ndarray, n: np.ndarray, n_none: np.ndarray,
                  n_distinct: np.ndarray, mean_tokens: np.ndarray, cap: np.ndarray, chunk: int) -> np.ndarray:
        """Per problem, the predicted accuracy gained per sample, from its vote so far."""
        ...

    def replay_rates(self, pool: ModelPool, orders: np.ndarray, reps: Sequence[PrefixReplay], fold: np.ndarray,
                     cap: np.ndarray, chunk: int) -> list[np.ndarray]:
        """Per ordering, ``(n_problems, n_samples + 1)`` rates after ``n`` samples (column n) of
        that ordering, each problem's from a model fitted on other folds if fitted at all."""
        ...


@dataclass(frozen=True)
class OnlinePolicy:
    """The settings of the online rule (the same for a real run and its replays).

    Args:
        n_max: Most samples per problem.
        chunk: Samples a chosen problem gets per round, drawn as one request.
        rule: Stopping rule ("horizon", "beta", "dirichlet", "exact", "window" or "rate").
        confidence: Beta-criterion threshold.
        escalate: Raise the bar when every vote is decided and budget is left.
        min_gain: "rate": the least predicted accuracy gain per sample worth paying for.
        rate_model: "rate": the model that predicts it (required there).
        prior: "horizon" and "dirichlet": pseudo-votes per answer of the prior
            (:func:`overturn_risk`, :func:`dirichlet_confidence`; 1 = uniform, the paper's).
        window: "window": the run of equal answers that stops a problem (ESC's window).
        length_weight: "horizon" and "beta": how strongly a shorter mean sample length counts
            as confidence in the race (:func:`race_votes`; 0 = plain votes, the default).
        confirm_window: "horizon", "beta" and "dirichlet": a stop also needs the last
            ``confirm_window`` answers to agree (ESC's window as a confirmation; 0 = off, the
            default).
        ladder: "horizon", "beta" and "dirichlet": the confidences the bar rises through once
            every vote is decided (None: :func:`default_ladder`, :data:`FINE_LADDER` for "horizon"
            and :data:`LADDER` for the others; a finer one reopens stopped votes in finer steps of
            risk).
        top_k: "dirichlet": how many of the most voted answers enter the posterior (5, as in the
            authors' code).
        give_up_after, give_up_share: In the first stage, stop a problem with at least
            ``give_up_after`` samples whose leader holds less than ``give_up_share`` of them
            (0 = never give up, the default).
    """

    n_max: int = 64
    chunk: int = 4
    rule: StopRule = "horizon"
    confidence: float = 0.95
    escalate: bool = True
    min_gain: float = 1e-3
    rate_model: RateModel | None = field(default=None, compare=False)
    prior: float = 1.0
    window: int = 8
    length_weight: float = 0.0
    give_up_after: int = 0
    give_up_share: float = 1 / 3
    ladder: tuple[float, ...] | None = None
    confirm_window: int = 0
    top_k: int = 5

    def __post_init__(self) -> None:
        if self.n_max < 1 or self.chunk < 1:
            raise ValueError(f"n_max and chunk must be >= 1, got n_max={self.n_max}, chunk={self.chunk}")
        if not 0.5 < self.confidence < 1:
            raise ValueError(f"confidence must lie in (0.5, 1), got {self.confidence}")
        if self.rule not in STOP_RULES:
            raise ValueError(f"rule must be one of {', '.join(STOP_RULES)}, got {self.rule!r}")
        if not self.prior > 0:
            raise ValueError(f"prior must be > 0 (pseudo-votes of the Beta prior), got {self.prior}")
        if self.window < 1:
            raise ValueError(f"window must be >= 1 (samples in a row with one answer), got {self.window}")
        if not self.length_weight >= 0:
            raise ValueError(f"length_weight must be >= 0 (0 = plain votes), got {self.length_weight}")
        if self.ladder is not None and not all(0.5 < c < 1 for c in self.ladder):
            raise ValueError(f"every ladder confidence must lie in (0.5, 1), got {self.ladder}")
        if self.give_up_after < 0 or not 0 < self.give_up_share <= 1:
            raise ValueError(f"give_up_after must be >= 0 (0 = off) and give_up_share in (0, 1], got "
                             f"{self.give_up_after}, {self.give_up_share}")
        if self.confirm_window < 0 or (self.confirm_window and self.rule not in POSTERIOR_RULES):
            raise ValueError(f"confirm_window (>= 0) confirms the posterior stop of 'horizon', 'beta' and "
                             f"'dirichlet', got {self.confirm_window} with rule {self.rule!r}")
        if self.top_k < 2:
            raise ValueError(f"top_k must be >= 2 (answers in the Dirichlet posterior), got {self.top_k}")
        if self.length_weight and self.rule not in ("horizon", "beta"):
            raise ValueError(f"length_weight weighs the Beta race of 'horizon' and 'beta', not rule {self.rule!r}")
        if not 0 < self.min_gain < 1:
            raise ValueError(f"min_gain must lie in (0, 1) (accuracy per sample), got {self.min_gain}")
        if self.rule == "rate" and self.rate_model is None:
            raise ValueError("rule 'rate' needs rate_model= (anything with live_rate and replay_rates; "
                             "see tts.budgets.rate_models for two)")

    def beta_stop(self, stage: int) -> float | None:
        """"rate": the Beta confidence that also stops a leader at ``stage`` (it rises with the
        stages, as the "beta" rule's does), or None where the model stops on gain alone."""
        if self.rule != "rate" or not self.rate_model.stop_confident:
            return None
        ladder = [self.confidence] + [c for c in (0.99, 0.999) if c > self.confidence]
        return ladder[min(stage, len(ladder) - 1)]

    @property
    def stages(self) -> list[tuple[StopRule, float]]:
        """The stopping stages of this policy (see :func:`stopping_stages`)."""
        bar = float(self.window) if self.rule == "window" else self.confidence
        return stopping_stages(self.rule, bar, self.escalate, self.min_gain, self.ladder)


def plan_round(policy: OnlinePolicy, top1: np.ndarray, top2: np.ndarray, n: np.ndarray, cap: np.ndarray,
               stage: int, rate: np.ndarray | None = None, race: tuple[np.ndarray, np.ndarray] | None = None,
               streak: np.ndarray | None = None,
               votes: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, int]:
    """Step 1 of the rule: who gets how many more samples this round.

    Args:
        policy: The rule's settings.
        top1, top2: Votes of each problem's two leading answers so far.
        n: Samples drawn so far per problem.
        cap: Most samples per problem (``policy.n_max``; a replay lowers it to the samples its
            pool holds).
        stage: Current stopping stage (index into ``policy.stages``); 0 at the start of a run.
        rate: "rate" (required there): each problem's predicted accuracy gain per sample
            (:meth:`RateModel.live_rate`, or a replay's table from :meth:`RateModel.replay_rates`).
        race: ``policy.length_weight > 0`` (required there): the length-weighted race votes
            (:func:`race_votes`).
        streak: "window" and ``confirm_window`` (required there): each problem's latest run of
            equal answers.
        votes: "dirichlet" (required there): ``(n_problems, K)`` votes per answer
            (:meth:`OnlineAllocator.vote_matrix`, or a replay's :func:`~tts.budgets.replay.online.vote_table`).

    Returns:
        ``(problems, k, stage)``: problem indices least confident first (ties by index), the
        samples each gets, and the stage reached. No problems = the run is complete.
    """
    stages = policy.stages
    if policy.rule == "rate" and rate is None:
        raise ValueError("the 'rate' rule needs each problem's predicted gain per sample: pass rate= "
                         "(RateModel.live_rate in a run, RateModel.replay_rates in a replay)")
    if (policy.rule == "window" or policy.confirm_window) and streak is None:
        raise ValueError("rule 'window' and confirm_window need each problem's run of equal answers: pass streak=")
    if policy.length_weight and race is None:
        raise ValueError("length_weight > 0 needs the length-weighted race votes: pass race= (race_votes)")
    if policy.rule == "dirichlet" and votes is None:
        raise ValueError("the 'dirichlet' rule needs each problem's votes per answer: pass votes= "
                         "(OnlineAllocator.vote_matrix in a run, replay.online.vote_table in a replay)")
    while True:
        rule, bar = stages[stage]
        open_ = ~decided(top1, top2, n, cap, rule=rule, confidence=bar, rate=rate,
                         beta_confidence=policy.beta_stop(stage), prior=policy.prior, race=race, streak=streak,
                         confirm=policy.confirm_window, votes=votes, top_k=policy.top_k)
        if stage == 0 and policy.give_up_after:  # spread-out votes stop in the first stage only
            open_ &= ~((n >= policy.give_up_after) & (top1 < policy.give_up_share * n))
        if open_.any() or stage + 1 == len(stages):
            break
        stage += 1
    r1, r2 = (top1, top2) if race is None else race
    conf = np.where(n > 0, vote_confidence(r1, r2), 0.0)
    if policy.rule == "horizon":  # the highest risk of being overturned first
        conf = np.where(n > 0, 1.0 - overturn_risk(r1, r2, n, cap, policy.prior), 0.0)
    if policy.rule == "dirichlet":  # the least Dirichlet-confident first
        conf = np.zeros(len(n))
        sampled = np.nonzero(open_ & (n > 0))[0]
        conf[sampled] = dirichlet_confidence(np.asarray(votes)[sampled], policy.prior, policy.top_k)
    if policy.rule == "rate":  # the highest predicted gain first (never-sampled problems first)
        conf = np.where(n > 0, -rate, -np.inf)
    who = serve_order(conf, open_)
    return who, np.minimum(policy.chunk, cap[who] - n[who]).astype(np.int64), stage


def cut_call(p: np.ndarray, k: np.ndarray, worst: WorstCase, j: np.ndarray, done: np.ndarray,
             room: np.ndarray, end: np.ndarray | None = None,
             cum: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Step 2 of the rule: how much of a round's remaining requests the next engine call sends.

    Vectorised over independent runs (a real run passes one; a replay one per budget). The call
    takes the longest run of whole requests from ``j`` whose worst-case costs sum to at most
    ``room`` (request ``j`` counting only its ``k[j] - done`` samples not yet drawn); when not
    even that one fits, it is shortened to the most samples that fit; when not one sample fits,
    the call is empty and the run is finished.

    Args:
        p, k: The round's requests in order: problem index and samples.
        worst: Worst-case cost of a request (see :data:`WorstCase`).
        j: Per run, the next request not fully drawn.
        done: Per run, samples of request ``j`` already drawn by an earlier shortened call.
        room: Per run, budget left.
        end: Per run, the index after the last request the call may reach (default ``len(p)``).
        cum: ``[0, cumsum(worst(p, k))]`` when the caller already has it (a replay calls this
            many times on one sequence whose worst cases do not change).

    Returns:
        ``(e, part)`` per run: requests ``j .. e-1`` are sent whole (``e > j``); otherwise
        request ``j`` is sent with ``part`` samples (0 = nothing fits: finished).
    """
    j = np.asarray(j, dtype=np.int64)
    done = np.asarray(done, dtype=np.int64)
    room = np.asarray(room, dtype=float)
    end = np.full(j.shape, len(p), dtype=np.int64) if end is None else np.asarray(end, dtype=np.int64)
    if len(p) == 0:
        return j.copy(), np.zeros(j.shape, dtype=np.int64)
    if cum is None:
        cum = np.concatenate([[0.0], np.cumsum(np.asarray(worst(p, k), dtype=float))])
    jj = np.minimum(j, len(p) - 1)
    rest = k[jj] - done
    head = np.asarray(worst(p[jj], rest), dtype=float)
    after = room - head
    fits = (after >= 0) & (j < end)
    # The largest e with cum[e] - cum[j + 1] <= after: requests j+1 .. e-1 fit beside the head.
    e = np.searchsorted(cum, cum[jj + 1] + np.maximum(after, 0.0), side="right") - 1
    e = np.where(fits, np.clip(e, jj + 1, end), j)
    part = np.zeros(j.shape, dtype=np.int64)
    short = np.nonzero(~fits & (j < end))[0]
    if len(short):
        ks = np.arange(1, int(rest[short].max()) + 1)
        wk = np.asarray(worst(p[jj[short]][:, None], ks[None, :]), dtype=float)
        part[short] = ((wk <= room[short, None]) & (ks[None, :] < rest[short, None])).sum(axis=1)
    return e, part


@dataclass
class OnlineAllocator:
    """The online rule driving a real run: votes and spend so far, the round in progress.

    Call :meth:`next_call` for the requests of the next engine call, draw them, and report each
    sample with :meth:`record`; an empty call means the run is finished.

    Args:
        problem_ids: The problems, in order (ties in confidence are served in this order).
        budget: Total budget, in the unit of the costs passed to :meth:`record`.
        policy: The rule's settings.

    Example:
        >>> alloc = OnlineAllocator(["p1", "p2"], budget=1e6, policy=OnlinePolicy(n_max=8, chunk=4))
        >>> alloc.next_call(lambda p, k: 100.0 * k)
        [('p1', 4), ('p2', 4)]
    """

    problem_ids: Sequence[Hashable]
    budget: float
    policy: OnlinePolicy = field(default_factory=OnlinePolicy)
    spent: float = 0.0
    stage: int = 0
    finished: bool = False
    rounds: list[dict[Hashable, int]] = field(default_factory=list)
    """Samples given per problem in each round (the decisions, for the run record)."""

    def __post_init__(self) -> None:
        if not (self.budget > 0):
            raise ValueError(f"the budget must be a positive number, got {self.budget!r}")
        self.problem_ids = list(self.problem_ids)
        size = len(self.problem_ids)
        self._index = {pid: i for i, pid in enumerate(self.problem_ids)}
        self.votes: list[Counter] = [Counter() for _ in range(size)]
        self.n = np.zeros(size, dtype=np.int64)
        self.top1 = np.zeros(size, dtype=np.int64)
        self.top2 = np.zeros(size, dtype=np.int64)
        self.n_none = np.zeros(size, dtype=np.int64)
        self.tokens = np.zeros(size)
        self.answer_tokens: list[Counter] = [Counter() for _ in range(size)]
        self.streak = np.zeros(size, dtype=np.int64)
        self._last: list[str | None] = [None] * size
        self._cap = np.full(size, self.policy.n_max, dtype=np.int64)
        self._round: tuple[np.ndarray, np.ndarray] | None = None
        self._j = 0
        self._done = 0

    def record(self, problem_id: Hashable, answer: str | None, cost: float, tokens: float | None = None) -> None:
        """Account one drawn sample: its answer (None = no answer), its actual cost and its
        generated tokens (default: the cost; only a "rate" model reads them)."""
        i = self._index[problem_id]
        self.n[i] += 1
        self.tokens[i] += float(cost if tokens is None else tokens)
        if answer is None:
            self.n_none[i] += 1
            self.streak[i] = 0
        else:
            self.streak[i] = self.streak[i] + 1 if self._last[i] == answer and self.streak[i] else 1
            self.votes[i][answer] += 1
            self.answer_tokens[i][answer] += float(cost if tokens is None else tokens)
            counts = sorted(self.votes[i].values(), reverse=True) + [0]
            self.top1[i], self.top2[i] = counts[0], counts[1]
        self._last[i] = answer
        self.spent += float(cost)

    def vote_matrix(self) -> np.ndarray:
        """``(n_problems, top_k)`` votes of each problem's ``policy.top_k`` most voted answers,
        most first, zero-padded: the input of the "dirichlet" rule."""
        k = self.policy.top_k
        out = np.zeros((len(self.votes), k))
        for i, votes in enumerate(self.votes):
            counts = sorted(votes.values(), reverse=True)[:k]
            out[i, :len(counts)] = counts
        return out

    def race(self) -> tuple[np.ndarray, np.ndarray]:
        """The length-weighted race votes of every problem (:func:`race_votes`): the two answers
        first by votes, then by weight ``votes * mean_length ** -alpha``."""
        alpha = self.policy.length_weight
        out = np.zeros((4, len(self.votes)))
        for i, (votes, toks) in enumerate(zip(self.votes, self.answer_tokens)):
            ranked = sorted(((c, race_log_weight(c, toks[a], alpha), a) for a, c in votes.items()),
                            key=lambda x: (x[0], x[1]), reverse=True)[:2]
            for j, (c, _, a) in enumerate(ranked):
                out[2 * j, i], out[2 * j + 1, i] = c, toks[a]
        return race_votes(out[0], out[1], out[2], out[3], alpha)

    def next_call(self, worst: WorstCase) -> list[tuple[Hashable, int]]:
        """The (problem id, samples) requests of the next engine call; [] = finished.

        Args:
            worst: Worst-case cost of a request, called with problem indices (positions in
                ``problem_ids``) and sample counts.
        """
        if self.finished:
            return []
        if self._round is None or self._j >= len(self._round[0]):
            # 1. A new round, decided from the samples drawn so far.
            rate = None
            if self.policy.rule == "rate":
                distinct = np.array([len(v) for v in self.votes])
                rate = self.policy.rate_model.live_rate(self.top1, self.top2, self.n, self.n_none, distinct,
                                                        self.tokens / np.maximum(self.n, 1), self._cap,
                                                        self.policy.chunk)
                rate = np.where(self.n > 0, rate, np.inf)
            race = self.race() if self.policy.length_weight else None
            votes = self.vote_matrix() if self.policy.rule == "dirichlet" else None
            who, k, self.stage = plan_round(self.policy, self.top1, self.top2, self.n, self._cap, self.stage, rate,
                                            race, self.streak, votes)
            if not len(who):
                self.finished = True
                return []
            self._round, self._j, self._done = (who, k), 0, 0
            self.rounds.append({})
        # 2. As much of it as the budget left pays for at its worst case.
        p, k = self._round
        e, part = cut_call(p, k, worst, np.array([self._j]), np.array([self._done]),
                           np.array([self.budget - self.spent]))
        e, part = int(e[0]), int(part[0])
        if e > self._j:
            call = [(int(p[self._j]), int(k[self._j]) - self._done)]
            call += [(int(p[i]), int(k[i])) for i in range(self._j + 1, e)]
            self._j, self._done = e, 0
        elif part > 0:
            call = [(int(p[self._j]), part)]
            self._done += part
        else:
            self.finished = True
            return []
        given = self.rounds[-1]
        for i, m in call:
            pid = self.problem_ids[i]
            given[pid] = given.get(pid, 0) + m
        return [(self.problem_ids[i], m) for i, m in call]
