"""DeepConf: vote with the traces' own token confidence, and stop weak traces while they generate.

Fu, Wang, Tian & Zhao 2025, "Deep Think with Confidence"; reference code facebookresearch/deepconf
(``deepconf/utils.py``, ``deepconf/wrapper.py``, ``deepconf/processors.py``; pinned in
``tests/parity/test_deepconf.py``). Token confidence C_i is minus the mean of the top-k
log-probabilities at position i (:mod:`tts.backends.confidence`); a trace's confidence is one of
(``measure``):

* ``lowest_group``: the lowest mean C_i over any ``window`` consecutive tokens (the paper's
  lowest group confidence, its best single signal; the reference's ``min_window``);
* ``bottom_window``: the mean of the lowest 10% of the trace's group confidences (bottom-10%;
  as in the reference, floor(10% of the groups), at least one);
* ``tail``: the mean C_i of the last ``window`` tokens, where the answer is written;
* ``mean``: the mean C_i of the whole trace (the paper's average-trace-confidence baseline).

A trace shorter than ``window`` is one group: its mean C_i.

**Offline** (``mode: offline``): draw n traces in one call; among the traces with an answer, keep
those whose confidence is at or above the (1 - ``keep``) percentile of theirs (the paper's
top-eta% filter, eta = 10% or 90%; the reference's ``filter_top_confidence``) and take a vote
weighted by that confidence among them.

**Online** (``mode: online``, the default):

1. Warm-up: ``warmup`` traces per problem (one call for all problems; the paper's N_init = 16,
   against budgets of 256-512 traces; with n <= warmup every trace is a warm-up trace, nothing
   is stopped in the engine, and online DeepConf only filters by the warm-up bar). The stop
   threshold of a problem is the (1 - keep) quantile of its warm-up traces' lowest group
   confidences (keep = 0.1: DeepConf-low, the 90th percentile; keep = 0.9: DeepConf-high, the 10th).
2. The remaining traces (n - warmup, in rounds of ``chunk``) are generated with that threshold as
   a :class:`~tts.backends.confidence.ConfidenceStop`: the backend ends a trace while it is being
   generated, as soon as its group confidence falls below the threshold (vLLM in process: a logits
   processor forces the end token; an OpenAI-compatible server: tts streams the trace with its top
   logprobs and closes the stream, and the server aborts it), so its remaining tokens are never
   generated.
3. Who votes (as the reference's online voting): a trace whose lowest group confidence is at or
   above the threshold. So a warm-up trace below the bar does not vote (about 1 - keep of them,
   by construction), a stopped trace does not, and neither does a finished trace below the bar
   that the engine never checked (one shorter than the window).
4. Adaptive sampling: a problem whose consensus share beta = V(a) / sum_b V(b) (the paper's: the
   sums run over answers, so over the voting traces that have one) reaches ``consensus`` (tau)
   after a round gets no more traces.
5. The answer is the vote of the voting traces, weighted by their confidence (``measure``).

Where tts departs from the reference, and the setting that gives the reference behaviour:

* ``window`` defaults to 64 tokens, the reference's scripts to 2048: tts's default models write
  traces of tens to a few hundred tokens, where a 2048-token window would make every trace one
  group and the in-engine stop would never fire. ``window=2048`` gives the reference's value.
* Adaptive sampling: the paper checks beta after every trace; tts checks after each round of
  ``chunk`` traces (default: all the rest in one round, one engine call, as the reference's
  script draws them; it has no consensus check). ``chunk=1`` is the paper's per-trace check;
  ``consensus=None`` the reference script's fixed budget.
* The online vote is weighted by ``measure``; the reference's online vote always uses the lowest
  group confidence, which is the default ``measure``. (Its ``deepthink`` also computes an
  unweighted majority over the same voters and reports that as the final answer when its
  ``compute_multiple_voting`` is on; tts follows the paper's and the basic vote's weighting. An
  unweighted vote of all traces is ``self_consistency``.)
* Answers vote together when math-verify finds them equal (:func:`tts.search.base.vote`); the
  reference compares the extracted strings.
* Confidences are not rounded; the reference rounds C_i and group means to 3 decimals. Its
  post-hoc C_i averages every log-probability vLLM returns (the top 20 and, when it is not among
  them, the sampled token); tts uses the top k everywhere, as the reference's in-engine stop does.
* Old tts behaviour, kept as settings: ``warmup_votes="all"`` (every warm-up trace votes),
  ``consensus_over="all"`` (unanswered voting traces count in beta's denominator),
  ``offline_filter="top_share"`` (keep the ceil(keep * n) most confident of all n traces).

The OpenAI backend stops traces through the server (:mod:`tts.backends.openai_stream`): at the
same token as the in-engine stop on the same traces; its usage counts the tokens received, which
may run a chunk past the stop. A backend that cannot stop traces while they generate
(``supports_confidence_stop`` missing, e.g. a plain function backend) still gets the same answers:
the stop is applied to the finished traces afterwards, but every token is paid, the trace says so
(event ``stop_after_generation``) and a warning is logged. A backend that returns no top-k
log-probabilities is refused.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from tts.backends.base import GenerationRequest, derive_seed
from tts.backends.confidence import CONFIDENCE_STOPPED, ConfidenceStop, first_stop, group_confidences, token_confidences
from tts.config import StrategyConfigBase
from tts.search.base import BudgetUse, MissingLogprobsError, Strategy, StrategyInputError, to_sample, vote
from tts.types import Budget, RequestShape, Sample, Solution, Trace, Usage

logger = logging.getLogger(__name__)

Measure = Literal["lowest_group", "bottom_window", "tail", "mean"]


REFERENCE_WARMUP = 16
"""The paper's and the reference's N_init: warm-up traces that set a problem's threshold."""


class DeepConfConfig(StrategyConfigBase):
    """Confidence-weighted, confidence-filtered voting; online, low-confidence traces stopped in the engine."""

    kind: Literal["deepconf"] = "deepconf"
    n: int = Field(16, ge=1, le=4096)
    """Most traces per problem (warm-up included)."""
    mode: Literal["online", "offline"] = "online"
    """``online``: warm-up, then traces stopped in the engine below the warm-up threshold;
    ``offline``: n full traces, filtered and weighted by confidence afterwards."""
    measure: Measure = "lowest_group"
    """Trace confidence used for filtering and as the vote weight (online: also for the threshold)."""
    keep: float = Field(0.9, gt=0.0, le=1.0)
    """eta: offline, the share of answered traces kept (those at or above the 1 - keep quantile of
    their confidences); online, the warm-up quantile 1 - keep sets the threshold (0.9:
    DeepConf-high, 0.1: DeepConf-low)."""
    window: int = Field(64, ge=1)
    """Tokens per group (sliding window) and of the tail. The reference uses 2048 (set
    ``window=2048`` for it); 64 suits the short traces of small models (see the module docstring)."""
    top_k: int = Field(20, ge=1, le=20)
    """k of the token confidence (top log-probabilities per position)."""
    warmup: int | None = Field(None, ge=1, le=4096)
    """Online: warm-up traces per problem that set its threshold. None: the paper's and the
    reference's N_init = 16, capped at n; a number above n is refused. With n <= warmup no trace
    is generated under the in-engine stop: raise n (the reference draws 256-512) or lower warmup
    for that."""
    warmup_votes: Literal["above_threshold", "all"] = "above_threshold"
    """Online: which warm-up traces vote. ``above_threshold`` (the reference): those whose lowest
    group confidence is at or above the threshold; ``all``: every warm-up trace (old tts rule)."""
    chunk: int | None = Field(None, ge=1, le=4096)
    """Online: traces per round after the warm-up; None: all the rest in one round; 1: the
    paper's consensus check after every trace."""
    consensus: float | None = Field(0.95, gt=0.0, le=1.0)
    """Online: stop sampling a problem once its consensus share reaches this (the paper's tau);
    None: always draw n traces (the reference script's fixed budget)."""
    consensus_over: Literal["answered", "all"] = "answered"
    """Online: the consensus share's denominator. ``answered`` (the paper's beta): the weight of
    the voting traces that have an answer; ``all``: of every voting trace (old tts rule)."""
    offline_filter: Literal["percentile", "top_share"] = "percentile"
    """Offline: ``percentile`` (the reference): among the traces with an answer, keep those at or
    above the (1 - keep) percentile of their confidences; ``top_share`` (old tts rule): the
    ceil(keep * n) most confident of all n traces, ties to the earlier."""

    @model_validator(mode="after")
    def _consistent(self) -> DeepConfConfig:
        if self.mode == "online" and self.warmup is not None and self.warmup > self.n:
            raise ValueError(f"warmup ({self.warmup}) is more than n ({self.n}): the warm-up traces are part of the "
                             "n; lower warmup or raise n.")
        return self

    @property
    def warmup_traces(self) -> int:
        """Warm-up traces per problem: ``warmup``, or the reference's 16 capped at n when unset."""
        return self.warmup if self.warmup is not None else min(REFERENCE_WARMUP, self.n)


def trace_confidence(top: Sequence[Sequence[float]], measure: Measure, window: int, k: int) -> float:
    """A trace's confidence from the top-k log-probabilities of its positions (see the module docstring)."""
    conf = token_confidences(top, k)
    if not conf:
        return 0.0
    if measure == "mean":
        return sum(conf) / len(conf)
    if measure == "tail":
        tail = conf[-window:]
        return sum(tail) / len(tail)
    groups = group_confidences(conf, window)
    if measure == "lowest_group":
        return min(groups)
    lowest = sorted(groups)[: max(1, int(len(groups) * 0.1))]  # the reference's floor, at least one
    return sum(lowest) / len(lowest)


def quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile of ``values`` with linear interpolation (numpy's default)."""
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def consensus_share(samples: Sequence[Sample], weights: Sequence[float],
                    over: Literal["answered", "all"] = "answered") -> float:
    """The weighted vote share of the leading answer among voting ``samples``.

    ``answered``: the paper's beta = V(a) / sum_b V(b), the sums over answers, so a sample without
    an answer is in neither; ``all``: the share of all the samples' weight (old tts rule).
    """
    _, share, totals, _ = vote(samples, weights)
    if over == "all" or not totals:
        return share
    answered = sum(totals.values())
    return max(totals.values()) / answered if answered > 0 else 0.0


class _Problem:
    """One problem's traces so far: samples, confidences, which were stopped, which vote, and usage."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.samples: list[Sample] = []
        self.confidence: list[float] = []
        self.lowest: list[float] = []
        self.stopped: list[bool] = []
        self.votes: list[bool] = []
        self.usage = Usage()
        self.threshold: float | None = None
        self.warm = 0
        self.done = False
        self.stopped_after = 0

    def share(self, over: Literal["answered", "all"]) -> float:
        voting = [i for i, v in enumerate(self.votes) if v]
        if not voting:
            return 0.0
        return consensus_share([self.samples[i] for i in voting], [self.confidence[i] for i in voting], over)


class DeepConf(Strategy):
    """DeepConf, offline or online (see the module docstring)."""

    name = "deepconf"
    config_class: ClassVar[type[StrategyConfigBase]] = DeepConfConfig
    budget_use = BudgetUse.WHOLE_SAMPLES  # it may stop sooner on confidence
    pool_rule = None

    def logprobs_use(self) -> str:
        """Always: a trace's weight is its token confidence."""
        return "weighs traces by token confidence (the top log-probabilities of every position)"

    def _request(self, problem: Any, n: int, drawn: int, stop: ConfidenceStop | None) -> GenerationRequest:
        return GenerationRequest(
            messages=self.prompt(problem), n=n, temperature=self.sampling.temperature, top_p=self.sampling.top_p,
            max_tokens=self.sampling.max_tokens, logprobs=True, top_logprobs=self.config.top_k,
            seed=derive_seed(self.seed, problem.id, drawn), key=problem.id, confidence_stop=stop)

    def _top(self, problem: Any, completion: Any) -> tuple[tuple[float, ...], ...]:
        top = completion.token_top_logprobs
        if top is None:
            raise MissingLogprobsError(
                f"deepconf weighs traces by token confidence from the top-{self.config.top_k} log-probabilities of "
                f"every position, but a trace of problem {problem.id!r} came back without them. Unavailable on this "
                "backend: deepconf and the self_certainty scorer (top logprobs per token); best_of_n, weighted_vote "
                "and the logprob scorer need at least the sampled tokens' logprobs. Use a backend that returns "
                "top_logprobs (vLLM does; an OpenAI-compatible server must support `top_logprobs`), or use "
                "self_consistency.")
        return top

    def solve(self, problems: Sequence[Any], budgets: Sequence[Budget | None] | None = None) -> list[Solution]:
        if budgets is not None and len(budgets) != len(problems):
            raise StrategyInputError(f"got {len(budgets)} budgets for {len(problems)} problems; give one per problem")
        c = self.config
        states = [_Problem(self.samples_within(b)) for b in (budgets or [None] * len(problems))]
        in_engine = bool(getattr(self.generator, "supports_confidence_stop", False))
        if c.mode == "online" and not in_engine:
            logger.warning("deepconf online: backend %s cannot stop traces inside the engine; the stop is applied "
                           "after generation and saves no tokens", type(self.generator).__name__)
        # 1. Warm-up (online) or the whole draw (offline): one call for all problems.
        first = [min(c.warmup_traces, s.n) if c.mode == "online" else s.n for s in states]
        self._round(problems, states, first, None, in_engine)
        if c.mode == "online":
            for s in states:
                s.warm = len(s.samples)
                s.threshold = quantile(s.lowest, 1.0 - c.keep)
                self._online_votes(s)
                s.done = self._enough(s)
            # 2-4. Rounds with the in-engine stop until n traces or consensus.
            while True:
                sizes = [0 if s.done else min(c.chunk or s.n, s.n - len(s.samples)) for s in states]
                if not any(sizes):
                    break
                stops = [ConfidenceStop(s.threshold, c.window, c.top_k) if s.threshold is not None else None
                         for s in states]
                self._round(problems, states, sizes, stops, in_engine)
                for s in states:
                    self._online_votes(s)
                    s.done = s.done or self._enough(s)
        else:
            for s in states:
                self._filter(s)
        # 5. The confidence-weighted vote of the voting traces.
        return [self._solution(p, s, in_engine) for p, s in zip(problems, states, strict=True)]

    def _enough(self, s: _Problem) -> bool:
        if len(s.samples) >= s.n:
            return True
        return self.config.consensus is not None and s.share(self.config.consensus_over) >= self.config.consensus

    def _online_votes(self, s: _Problem) -> None:
        """Online: a trace votes when its lowest group confidence is at or above the threshold
        (the reference's rule; stopped traces, and finished ones below the bar that the engine
        never checked, do not); ``warmup_votes="all"`` lets every warm-up trace vote."""
        bar = s.threshold if s.threshold is not None else -math.inf
        every_warm = self.config.warmup_votes == "all"
        s.votes = [not stopped and (low >= bar or (every_warm and i < s.warm))
                   for i, (low, stopped) in enumerate(zip(s.lowest, s.stopped, strict=True))]

    def _round(self, problems: Sequence[Any], states: list[_Problem], sizes: list[int],
               stops: list[ConfidenceStop | None] | None, in_engine: bool) -> None:
        """One generate call: ``sizes[i]`` traces of problem i (none when 0); traces are scored and recorded."""
        c = self.config
        todo = [i for i, size in enumerate(sizes) if size > 0]
        requests = [self._request(problems[i], sizes[i], len(states[i].samples),
                                  stops[i] if stops is not None and in_engine else None) for i in todo]
        results = self.generator.generate(requests)
        for i, result in zip(todo, results, strict=True):
            s = states[i]
            s.usage = s.usage + result.usage
            for comp in result.completions:
                top = self._top(problems[i], comp)
                stopped = comp.finish_reason == CONFIDENCE_STOPPED
                stop = stops[i] if stops is not None else None
                if stop is not None and not in_engine:
                    # The backend could not stop it: apply the same rule to the finished trace.
                    at = first_stop(token_confidences(top, c.top_k), stop)
                    stopped = at is not None and at < len(top) - 1
                    s.stopped_after += stopped
                sample = to_sample(comp, self.extract)
                if stopped:
                    sample = Sample(sample.text, None, sample.completion_tokens, sample.mean_logprob, CONFIDENCE_STOPPED)
                s.samples.append(sample)
                s.confidence.append(trace_confidence(top, c.measure, c.window, c.top_k) if top else 0.0)
                s.lowest.append(trace_confidence(top, "lowest_group", c.window, c.top_k) if top else 0.0)
                s.stopped.append(stopped)

    def _filter(self, s: _Problem) -> None:
        """Offline: which traces vote (``offline_filter``, see the config)."""
        c = self.config
        if c.offline_filter == "top_share":
            kept = max(1, math.ceil(c.keep * len(s.samples)))
            order = sorted(range(len(s.samples)), key=lambda i: (-s.confidence[i], i))
            chosen = set(order[:kept])
            s.votes = [i in chosen for i in range(len(s.samples))]
            return
        answered = [i for i, x in enumerate(s.samples) if x.answer is not None]
        if not answered:
            s.votes = [False] * len(s.samples)
            return
        bar = quantile([s.confidence[i] for i in answered], 1.0 - c.keep)
        s.votes = [x.answer is not None and s.confidence[i] >= bar for i, x in enumerate(s.samples)]

    def _solution(self, problem: Any, s: _Problem, in_engine: bool) -> Solution:
        voting = [i for i, v in enumerate(s.votes) if v]
        answer, share, votes, idx = self.vote([s.samples[i] for i in voting], [s.confidence[i] for i in voting])
        stopped = sum(1 for x in s.samples if x.finish_reason == CONFIDENCE_STOPPED)
        events = {}
        if stopped:
            events["stopped_low_confidence"] = stopped
        if s.stopped_after:
            events["stop_after_generation"] = s.stopped_after
        if self.config.mode == "offline":
            events["filtered_out"] = len(s.samples) - len(voting)
        else:  # finished (not stopped) traces that the threshold kept out of the vote, warm-up included
            events["below_threshold"] = sum(1 for st, v in zip(s.stopped, s.votes, strict=True) if not st and not v)
        tree = ({"id": "threshold", "parent": None, "depth": 0, "text": f"threshold {s.threshold:.4g}",
                 "score": s.threshold, "kept": True},) if s.threshold is not None else ()
        trace = Trace(self.name, tuple(s.samples), scores=tuple(s.confidence), votes=votes,
                      selected=voting[idx] if idx is not None else None, tree=tree,
                      events={k: v for k, v in events.items() if v})
        return Solution(problem.id, answer, share, s.usage, trace)

    @classmethod
    def planned_requests(cls, n: int, prompt_tokens: int, gen_tokens: int, cached_tokens: int = 0) -> list[RequestShape]:
        """Cost hook (``tts cost``): at most n traces from one prompt (no trace stopped, no early consensus)."""
        return [RequestShape(prompt_tokens, cached_tokens, (gen_tokens,) * n)]
