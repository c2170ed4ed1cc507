"""Whether one vote is settled: the stopping rules of Adaptive-Consistency and tts's horizon rule.

The statistics every stop of tts reads (:mod:`tts.budgets.online` explains each rule, its paper
and its measurements): the Beta criterion (:func:`vote_confidence`), the Dirichlet criterion
(:func:`dirichlet_confidence`), the risk that the leader is overturned within the run's horizon
(:func:`overturn_risk`), and :func:`decided`, which applies a rule to many votes at once.

They live here, below the strategies, because two kinds of caller run the very same rule: the
online allocator of :mod:`tts.budgets.online`, which spends one budget over many problems
(``tts eval --allocate``, ``tts budget simulate``), and a voting strategy's own per-request stop
(``stop:`` in its config, :class:`VoteStop`), which stops sampling one problem when its vote is
settled (``tts.solve``, a Session, ``tts serve``, ``tts mcp``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from tts import tracing
from tts.backends.base import Completion, GenerationRequest, GenerationResult, Generator
from tts.backends.streaming import stream_samples
from tts.config import StopConfig
from tts.types import Usage

StopRule = Literal["beta", "horizon", "dirichlet", "exact", "rate", "window"]
STOP_RULES = ("beta", "horizon", "dirichlet", "exact", "rate", "window")


def vote_confidence(top1: np.ndarray, top2: np.ndarray) -> np.ndarray:
    """P(the leader's true share exceeds the runner-up's) = P(Beta(v1+1, v2+1) > 1/2).

    Args:
        top1: Votes of the leading answer.
        top2: Votes of the second answer (0 when there is none).
    """
    from scipy.special import betainc  # imported when used: scipy.stats alone takes ~2 s
    a = np.asarray(top1, dtype=float) + 1.0
    b = np.asarray(top2, dtype=float) + 1.0
    # P(X > 1/2) = 1 - I_{1/2}(a, b) = I_{1/2}(b, a)
    return betainc(b, a, 0.5)


# 64 nodes over the leader's Gamma mass +- 8 standard deviations: absolute error below 1e-10 for
# votes up to 300 against adaptive quadrature (48 nodes over +- 12 sd erred by up to 5e-5 there).
_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(64)


def dirichlet_confidence(votes: np.ndarray, prior: float = 1.0, top_k: int = 5) -> np.ndarray:
    """P(the leading answer has the largest share) under a Dirichlet posterior: the "dirichlet" rule.

    Adaptive-Consistency's criterion for more than two answers (Aggarwal et al. 2023): the
    answers' true shares p have the posterior Dirichlet(votes + ``prior``) (1 = their uniform
    prior), and the rule asks P(p_1 > max_{i > 1} p_i) for the leader 1. Only the ``top_k`` most
    voted answers enter (as in the authors' code, which keeps five); a vote with one answer races a
    second one with no votes, so with at most two answers this is :func:`vote_confidence`.

    Computed exactly, not by the paper's Monte Carlo: Dirichlet shares are independent
    Gamma(a_i, 1) variables G_i divided by their sum, so the leader's share is largest iff its G
    is, and P = integral over x of f_{a_1}(x) * prod_{i > 1} F_{a_i}(x) (Gamma density and CDFs), a
    smooth one-dimensional integral taken by 64-point Gauss-Legendre on the leader's Gamma mass
    (mean +- 8 standard deviations; absolute error below 1e-10 for votes up to 300, checked against
    scipy's adaptive quadrature).
    A tie for the lead gives at most 1/2 (1/m for an m-way tie).

    Args:
        votes: ``(..., K)`` votes per answer, in any order, zero-padded (K >= 1; a zero is no
            answer, except that the runner-up is always there).
        prior: Pseudo-votes of the symmetric Dirichlet prior (> 0).
        top_k: How many of the most voted answers enter the posterior (>= 2).
    """
    from scipy.special import gammainc, gammaln
    v = np.sort(np.asarray(votes, dtype=float), axis=-1)[..., ::-1]
    if v.shape[-1] < 2:
        v = np.concatenate([v, np.zeros((*v.shape[:-1], 2 - v.shape[-1]))], axis=-1)
    a = v[..., :top_k] + prior
    a1 = a[..., :1]
    lo = np.maximum(a1 - 8.0 * np.sqrt(a1) - 2.0, 0.0)
    hi = a1 + 8.0 * np.sqrt(a1) + 30.0
    x = lo + (hi - lo) * (_GL_NODES + 1.0) / 2.0  # (..., nodes)
    density = np.exp((a1 - 1.0) * np.log(x) - x - gammaln(a1))
    cdf = gammainc(a[..., 1:, None], x[..., None, :])
    cdf[..., 1:, :] = np.where(v[..., 2:top_k, None] > 0, cdf[..., 1:, :], 1.0)  # padding is no answer
    others = np.prod(cdf, axis=-2)
    p = np.sum(_GL_WEIGHTS * density * others, axis=-1) * (hi - lo)[..., 0] / 2.0
    return np.clip(p, 0.0, 1.0)


def overturn_risk(top1: np.ndarray, top2: np.ndarray, n: np.ndarray, n_max: int | np.ndarray,
                  prior: float = 1.0) -> np.ndarray:
    """P(the current leader is not the leader once ``n_max`` samples are drawn): the "horizon" rule.

    The two leading answers race for the ``n_max - n`` samples still allowed. The leader's share of
    the race has the posterior Beta(v1 + prior, v2 + prior) (Aggarwal et al.'s Beta model, with a
    symmetric prior of ``prior`` pseudo-votes each; 1 = their uniform prior), so the leader's
    further votes X out of m are Beta-binomial, and the runner-up overtakes when
    v2 + (m - X) >= v1 + X (a final tie counts as overturned). Every remaining sample is counted as
    going to the race (no third answer, no sample without an answer), which can only raise the
    risk, and a third answer overtaking is not modelled.

    Args:
        top1, top2: Votes of the two leading answers.
        n: Samples drawn so far.
        n_max: Most samples the problem may get (the horizon: the answer a run with n_max samples
            would return is what the risk is about).
        prior: Pseudo-votes of the symmetric Beta prior (> 0).
    """
    from scipy.stats import betabinom
    v1, v2, n, cap = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (top1, top2, n, n_max)))
    m = np.maximum(cap - n, 0.0)
    d = v1 - v2
    # Overturned iff the leader's further votes X <= (m - d) / 2.
    k = np.floor((m - d) / 2.0)
    risk = betabinom.cdf(np.maximum(k, 0.0), m, v1 + prior, v2 + prior)
    return np.where((k < 0) | (m <= 0), 0.0, risk)

def decided(
    top1: np.ndarray,
    top2: np.ndarray,
    n: np.ndarray,
    n_max: int | np.ndarray,
    *,
    rule: StopRule = "beta",
    confidence: float = 0.95,
    rate: np.ndarray | None = None,
    beta_confidence: float | None = None,
    prior: float = 1.0,
    race: tuple[np.ndarray, np.ndarray] | None = None,
    streak: np.ndarray | None = None,
    confirm: int = 0,
    votes: np.ndarray | None = None,
    top_k: int = 5,
) -> np.ndarray:
    """True where sampling should stop: the vote is settled or ``n_max`` samples are drawn.

    Args:
        top1, top2: Votes of the two leading answers (no-answer samples never vote).
        n: Samples drawn so far (no-answer samples included).
        n_max: Most samples a problem may get.
        rule: "beta" (Aggarwal et al.'s Beta criterion at ``confidence``), "horizon" (the leader
            stays the leader up to ``n_max`` samples with probability >= ``confidence``, see
            :func:`overturn_risk`), "dirichlet" (Aggarwal et al.'s Dirichlet criterion at
            ``confidence``, :func:`dirichlet_confidence`), "exact" (the leader cannot be overtaken
            within ``n_max``) or
            "rate" (``rate`` below ``confidence``, which is then the least expected accuracy gain
            per sample worth paying for).
        rate: For "rate": per problem, the predicted accuracy gained per sample
            (:meth:`RateModel.live_rate`).
        beta_confidence: For "rate": a leader this Beta-confident stops too (None: no such stop).
        prior: For "horizon" and "dirichlet": pseudo-votes per answer of the prior
            (:func:`overturn_risk`, :func:`dirichlet_confidence`).
        race: For "horizon" and "beta": the votes the Beta model judges, when not the plain
            ``(top1, top2)`` (:func:`race_votes`); the exact lead test always reads plain votes.
        streak: For "window" (required there): per problem, how many of the latest samples in a
            row gave the same answer (0 after a sample without one); ``confidence`` is then the
            window length.
        confirm: For "horizon", "beta" and "dirichlet": a posterior stop also needs
            ``streak >= confirm`` (0 = no such condition; the cap and the exact lead test stop
            regardless).
        votes: For "dirichlet" (required there): ``(n_problems, K)`` votes of each problem's
            answers (any order, zero-padded; :meth:`OnlineAllocator.vote_matrix`), of which the
            ``top_k`` most voted enter the posterior (:func:`dirichlet_confidence`, with
            ``prior`` pseudo-votes per answer).
    """
    top1, top2, n = (np.asarray(x) for x in (top1, top2, n))
    r1, r2 = (top1, top2) if race is None else race
    if confirm and streak is None and rule in POSTERIOR_RULES:
        raise ValueError("confirm= needs each problem's run of equal answers (streak=)")
    agree = True if not confirm or rule not in POSTERIOR_RULES else np.asarray(streak) >= confirm
    done = n >= n_max
    lead_safe = (top1 - top2) > (n_max - n)
    if rule == "exact":
        return done | lead_safe
    if rule == "beta":
        return done | lead_safe | ((top1 > 0) & agree & (vote_confidence(r1, r2) >= confidence))
    if rule == "horizon":
        return done | lead_safe | ((top1 > 0) & agree & (overturn_risk(r1, r2, n, n_max, prior) <= 1.0 - confidence))
    if rule == "dirichlet":
        if votes is None:
            raise ValueError("the 'dirichlet' rule needs each problem's votes per answer (votes=)")
        stop = done | lead_safe
        ask = ~stop & (top1 > 0) & agree  # the integral only where it can decide
        if ask.any():
            stop = stop.copy()
            stop[ask] = dirichlet_confidence(np.asarray(votes)[ask], prior, top_k) >= confidence
        return stop
    if rule == "window":
        if streak is None:
            raise ValueError("the 'window' rule needs each problem's run of equal answers (streak=)")
        return done | lead_safe | (np.asarray(streak) >= confidence)
    if rule == "rate":
        if rate is None:
            raise ValueError("the 'rate' rule needs each problem's predicted gain per sample (RateModel.live_rate)")
        sure = False if beta_confidence is None else (top1 > 0) & (vote_confidence(top1, top2) >= beta_confidence)
        return done | lead_safe | sure | ((n > 0) & (np.asarray(rate) < confidence))
    raise ValueError(f"rule must be one of {', '.join(STOP_RULES)}, got {rule!r}")


POSTERIOR_RULES = ("beta", "horizon", "dirichlet")
"""The rules that stop on a posterior probability reaching ``confidence``: they rise through a
ladder of confidences and take ``confirm_window``."""


# -- one request's stop ----------------------------------------------------------------------

REACHED_N = "n reached"
"""Why a request stopped when its rule never settled it: it drew all ``n`` samples."""


class VoteStop:
    """Whether one request's vote is settled: the rule of ``stop`` (:class:`tts.config.StopConfig`)
    applied by :func:`decided` to the request's votes, with ``n_max`` as the horizon.

    Args:
        config: The rule and its settings.
        n_max: The most samples the request may draw (the strategy's ``n``).
    """

    def __init__(self, config: StopConfig, n_max: int) -> None:
        if config.rule == "score":
            raise ValueError("stop rule 'score' stops on a sample's selection score, which only best_of_n has; "
                             f"a vote stops with one of {', '.join(r for r in STOP_RULES if r != 'rate')}")
        self.config = config
        self.n_max = n_max

    def check(self, keys: Sequence[Hashable | None]) -> str | None:
        """Why the vote of these samples is settled (their vote keys in draw order, None for a
        sample without an answer), or None while it is not."""
        counts = Counter(k for k in keys if k is not None)
        n = len(keys)
        ranked = sorted(counts.values(), reverse=True) + [0, 0]
        top1, top2 = ranked[0], ranked[1]
        streak = 0
        for k in reversed(keys):
            if k is None or k != keys[-1]:
                break
            streak += 1
        c = self.config
        bar = float(c.window) if c.rule == "window" else c.confidence
        votes = np.array([ranked[:max(c.top_k, 2)]], dtype=float)
        stop = decided(np.array([top1]), np.array([top2]), np.array([n]), self.n_max, rule=c.rule, confidence=bar,
                       prior=c.prior, streak=np.array([streak]), votes=votes, top_k=c.top_k)[0]
        if not stop:
            return None
        if n >= self.n_max:
            return REACHED_N
        if top1 - top2 > self.n_max - n:
            return f"lead of {top1 - top2} cannot be overtaken by the {self.n_max - n} samples left"
        if c.rule == "window":
            return f"the last {c.window} answers agree"
        return f"{c.rule} rule settled at confidence {c.confidence:g} ({top1} vs {top2} of {n})"


class ScoreStop:
    """best_of_n's stop (DSPy BestOfN's rule): settled once a sample's selection score reaches
    ``threshold``, or at ``n_max`` samples."""

    def __init__(self, config: StopConfig, n_max: int) -> None:
        if config.rule != "score" or config.threshold is None:
            raise ValueError(f"best_of_n stops on a score: stop: {{rule: score, threshold: ...}}, got rule {config.rule!r}")
        self.config = config
        self.n_max = n_max

    def check(self, scores: Sequence[float | None]) -> str | None:
        """Why the request is settled given its samples' scores (None: no answer, never enough), or None."""
        best = max((s for s in scores if s is not None and math.isfinite(s)), default=None)
        if best is not None and best >= self.config.threshold:
            return f"a sample scored {best:.4g} >= threshold {self.config.threshold:g}"
        return REACHED_N if len(scores) >= self.n_max else None


@dataclass
class StopRecord:
    """What a request's stop did, for its trace (``Trace.notes["stop"]``) and a server's reply.

    ``drawn``: samples that finished (and voted); ``cancelled``: samples aborted while being
    generated, with the ``cancelled_tokens`` they had generated (paid, counted in the usage);
    ``not_drawn``: samples of ``n`` never started; ``waves``: waves started.
    """

    rule: str
    n: int
    wave: int
    drawn: int = 0
    cancelled: int = 0
    cancelled_tokens: int = 0
    waves: int = 0
    reason: str = ""
    streamed: bool = False

    @property
    def not_drawn(self) -> int:
        return max(self.n - self.drawn - self.cancelled, 0)

    def as_note(self) -> dict[str, Any]:
        """JSON-ready, as the trace keeps it."""
        return {"rule": self.rule, "n": self.n, "wave": self.wave, "drawn": self.drawn, "cancelled": self.cancelled,
                "cancelled_tokens": self.cancelled_tokens, "not_drawn": self.not_drawn, "waves": self.waves,
                "reason": self.reason, "streamed": self.streamed}


@dataclass
class SettledDraw:
    """One request's samples drawn until its rule settled it: the finished samples in the order
    they finished, as one result whose usage sums every wave (cancelled partial samples included)."""

    result: GenerationResult
    record: StopRecord
    extra: dict[str, Any] = field(default_factory=dict)


Judge = Callable[[int, Sequence[Completion]], "str | None"]
"""``judge(request index, its finished samples so far) -> why it is settled, or None``."""


def draw_until_settled(generator: Generator, n_max: Sequence[int], stop: StopConfig,
                       request_for: Callable[[int, int, int], GenerationRequest], judge: Judge,
                       prepare: Callable[[GenerationRequest, Completion], Completion] = lambda r, c: c,
                       ) -> list[SettledDraw]:
    """Draw each request's samples in waves until ``judge`` settles it or it has ``n_max`` samples.

    Every open request's next wave goes to the backend together (one batch, so the engine still
    batches across requests). On a backend that streams (its
    :class:`~tts.backends.streaming.SampleStream` is ``live``) each sample is judged as it finishes,
    and a settled request's samples still in flight are cancelled; on any other backend a request
    is judged after each wave, on all the wave's samples (they are paid for, so none is dropped).

    Args:
        generator: The backend.
        n_max: Per request, the most samples (the strategy's ``n``, lowered by a budget).
        stop: The stop's settings (``wave``, ``rule``: for the record; ``judge`` applies the rule).
        request_for: ``(request index, samples in this wave, samples drawn so far) -> request``;
            the seed must depend on the samples drawn (:func:`tts.backends.base.derive_seed`).
        judge: Whether a request is settled, from its finished samples.
        prepare: Turns a finished completion into the one the judge and the strategy read (tool
            calls read for a backend that does not read them).
    """
    import scipy.special  # noqa: F401  # the rules' first judgement must not wait on importing them (~1 s)
    import scipy.stats  # noqa: F401  # while a stream's samples keep generating

    streamed = False
    finished: list[list[Completion]] = [[] for _ in n_max]
    usages: list[list[Usage]] = [[] for _ in n_max]
    records = [StopRecord(stop.rule, n, stop.wave) for n in n_max]
    open_ = [i for i in range(len(n_max)) if n_max[i] > 0]
    while open_:
        owners, requests = [], []
        for i in open_:
            k = min(stop.wave, n_max[i] - len(finished[i]))
            requests.append(request_for(i, k, len(finished[i]) + records[i].cancelled))
            owners.append(i)
            records[i].waves += 1
        attrs = {"tts.requests": len(requests), "tts.wave": stop.wave, "tts.stop.rule": stop.rule}
        with tracing.span("tts.generate.stream", attrs) as current, stream_samples(generator, requests) as stream:
            streamed = stream.live
            for item in stream:
                i = owners[item.request]
                if records[i].reason:
                    continue
                finished[i].append(prepare(requests[item.request], item.completion))
                if streamed:
                    why = judge(i, finished[i])
                    if why is not None and why != REACHED_N:
                        records[i].reason = why
                        stream.cancel([item.request])
            results = stream.results()
            tracing.set_attributes(current, {"tts.streamed": streamed, **tracing.results_attributes(results)})
        for i, result in zip(owners, results, strict=True):
            records[i].streamed = streamed
            usages[i].append(result.usage)
            records[i].cancelled += len(result.cancelled)
            records[i].cancelled_tokens += sum(result.cancelled)
            if not records[i].reason:
                why = judge(i, finished[i])
                if why is not None:
                    records[i].reason = why
                elif len(finished[i]) + records[i].cancelled >= n_max[i]:
                    records[i].reason = REACHED_N
        open_ = [i for i in open_ if not records[i].reason]
    out = []
    for i in range(len(n_max)):
        records[i].drawn = len(finished[i])
        if not records[i].reason:
            records[i].reason = REACHED_N
        out.append(SettledDraw(GenerationResult(tuple(finished[i]), Usage.total(usages[i])), records[i]))
    return out
