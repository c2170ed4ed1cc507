"""Search over collaboration graphs: a distribution over graph choices, Agent-REINFORCE and baselines.

Source of the idea: Agent-REINFORCE (2025 work on finding compute-optimal multi-LLM collaboration
graphs for test-time scaling, "which collaboration graph"; cited from memory, its authors and
title could not be checked here), which samples graphs (models, roles, width, depth) from a
distribution, scores them on a dev set and updates the distribution from the feedback. What is
implemented here is the plain REINFORCE form of that loop (a policy-gradient update of
categorical logits), without an LLM agent proposing the updates:

1. The space (:class:`~tts.graphs.search_space.GraphSearchSpace`) is a set of categorical
   decisions: depth, width, samples of each first-layer generator, the role of each later layer,
   the model of every node and the output node's role (and model). Every choice decodes to an
   ordinary, validated :class:`~tts.graphs.graph.GraphSpec`.
2. Each round samples K graphs from softmax(logits), evaluates them on the dev split (an
   :data:`Evaluator`: the graph strategy plus the grader, see :mod:`tts.graphs.search_eval`)
   and moves the logits of the decisions each graph used along ``advantage * (onehot - p)``,
   the advantage being the reward minus the leave-one-out mean of the round, scaled by the
   spread of the rewards seen so far.
3. Reward: dev accuracy, minus ``cost_penalty`` x tokens per problem.
4. Identical graphs (same canonical spec) are evaluated once; repeats cost nothing and do not
   count. The search stops when the budget (distinct evaluations, and optionally dev tokens) is
   spent or when rounds stop proposing new graphs. Random search and greedy coordinate ascent
   (one decision changed at a time, improvements kept, random restarts) run under the same budget.

Honesty: only the dev split is ever passed to a search; the caller evaluates the chosen graph on
the held-out split once, after the search (see ``tts graph-search``).
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field, model_validator

from tts.config import FrozenConfig
from tts.graphs.graph import GraphError, GraphSpec
from tts.graphs.search_space import (
    Choice,
    GraphSearchSpace,
    canonical_key,
    expected_requests,
    graph_yaml,
    load_search_space,
)
from tts.registry import Registry

__all__ = ["Evaluation", "Evaluator", "GraphSearchConfig", "GraphSearchResult", "GraphSearchSpace", "canonical_key",
           "expected_requests", "graph_yaml", "load_search_space", "search_graphs"]

logger = logging.getLogger(__name__)

@dataclass(frozen=True)
class Evaluation:
    """One graph's result on one split.

    Args:
        accuracy: Share of the split's problems answered correctly.
        tokens_per_problem: Mean prompt + completion tokens spent per problem.
        requests_per_problem: Mean generation requests per problem.
        problems: Problems in the split.
    """

    accuracy: float
    tokens_per_problem: float
    requests_per_problem: float
    problems: int

    @property
    def tokens(self) -> int:
        """Tokens the evaluation spent in all."""
        return round(self.tokens_per_problem * self.problems)


Evaluator = Callable[[Sequence[GraphSpec]], list[Evaluation]]
"""Graphs -> their evaluations on one split, in order (batch-first)."""


class GraphSearchConfig(FrozenConfig):
    """How to search a :class:`GraphSearchSpace`, and with what budget."""

    method: str = "reinforce"
    """Search method (``SEARCH_METHODS``): reinforce, random or greedy."""
    max_evaluations: int = Field(30, ge=1)
    """Distinct graphs evaluated on the dev split at most (cached repeats are free)."""
    max_tokens: int | None = Field(None, ge=1)
    """Dev tokens all evaluations may spend; an evaluation starts only when its predicted tokens
    (its requests x the most tokens per request seen so far) fit. None: no token budget."""
    cost_penalty: float = Field(0.0, ge=0.0)
    """Reward = dev accuracy - cost_penalty x tokens per problem (0: accuracy alone)."""
    samples_per_round: int = Field(4, ge=2, le=64)
    """Graphs sampled per REINFORCE round (K; the leave-one-out baseline needs two)."""
    learning_rate: float = Field(2.0, gt=0.0, le=100.0)
    """Step size of the logit update (advantages are in units of the rewards' spread)."""
    patience: int = Field(8, ge=1)
    """Stop after this many rounds (REINFORCE, random: of K draws) that propose no new graph."""
    seed: int = Field(0)
    """Seed of the search's own draws."""

    @model_validator(mode="after")
    def _known_method(self) -> GraphSearchConfig:
        SEARCH_METHODS.check(self.method)
        return self


@dataclass(frozen=True)
class GraphSearchResult:
    """The outcome of one search.

    Args:
        method: The search method.
        best: The graph with the highest dev reward.
        dev: Its dev evaluation.
        reward: Its dev reward.
        evaluations: Distinct graphs evaluated.
        tokens: Dev tokens spent by all evaluations.
        found_at: Distinct evaluations done when ``best`` was evaluated.
        curve: Best dev reward after each distinct evaluation.
        stopped: Why the search stopped.
    """

    method: str
    best: GraphSpec
    dev: Evaluation
    reward: float
    evaluations: int
    tokens: int
    found_at: int
    curve: tuple[float, ...]
    stopped: str


@dataclass
class _Ledger:
    """The cache and the budget: every evaluation of a search goes through it."""

    space: GraphSearchSpace
    config: GraphSearchConfig
    evaluate: Evaluator
    cache: dict[str, tuple[GraphSpec, Evaluation, float]] = field(default_factory=dict)
    curve: list[float] = field(default_factory=list)
    tokens: int = 0
    best_key: str | None = None
    found_at: int = 0
    stopped: str = ""

    def reward(self, ev: Evaluation) -> float:
        return ev.accuracy - self.config.cost_penalty * ev.tokens_per_problem

    def _predicted_tokens(self, spec: GraphSpec) -> float | None:
        """Dev tokens ``spec`` should cost: its requests x the most tokens per request seen (None
        before the first evaluation)."""
        if not self.cache:
            return None
        evals = [e for _, e, _ in self.cache.values()]
        per_request = max(e.tokens_per_problem / max(e.requests_per_problem, 1e-9) for e in evals)
        return expected_requests(spec) * evals[0].problems * per_request

    def rewards(self, choices: Sequence[Choice]) -> list[float | None]:
        """Rewards of the choices' graphs (None: not evaluated, the budget is spent)."""
        specs = [self.space.build(c) for c in choices]
        keys = [canonical_key(s) for s in specs]
        admitted: dict[str, GraphSpec] = {}
        planned = 0.0
        for key, spec in zip(keys, specs, strict=True):
            if key in self.cache or key in admitted:
                continue
            if len(self.cache) + len(admitted) >= self.config.max_evaluations:
                self.stopped = f"evaluation budget ({self.config.max_evaluations}) spent"
                break
            if self.config.max_tokens is not None:
                predicted = self._predicted_tokens(spec)
                # Nothing seen yet: only the first graph may run, alone, to measure the cost.
                if (predicted is None and admitted) or (
                        predicted is not None and self.tokens + planned + predicted > self.config.max_tokens):
                    self.stopped = f"token budget ({self.config.max_tokens}) spent"
                    break
                planned += predicted or 0.0
            admitted[key] = spec
        if admitted:
            for (key, spec), ev in zip(admitted.items(), self.evaluate(list(admitted.values())), strict=True):
                reward = self.reward(ev)
                self.cache[key] = (spec, ev, reward)
                self.tokens += ev.tokens
                if self.best_key is None or reward > self.cache[self.best_key][2]:
                    self.best_key, self.found_at = key, len(self.cache)
                self.curve.append(self.cache[self.best_key][2])
                logger.info("graph search: %s dev accuracy %.3f, %.0f tokens/problem, reward %.4f (%d/%d)",
                            spec.name, ev.accuracy, ev.tokens_per_problem, reward, len(self.cache),
                            self.config.max_evaluations)
        return [self.cache[k][2] if k in self.cache else None for k in keys]

    @property
    def spent(self) -> bool:
        return bool(self.stopped)


def _softmax(logits: Sequence[float]) -> list[float]:
    top = max(logits)
    exps = [math.exp(x - top) for x in logits]
    return [e / sum(exps) for e in exps]


def _draw(rng: random.Random, decisions: dict[str, tuple[Any, ...]], logits: dict[str, list[float]]) -> Choice:
    return {d: rng.choices(values, weights=_softmax(logits[d]))[0] for d, values in decisions.items()}


def _reinforce(ledger: _Ledger, rng: random.Random) -> None:
    """REINFORCE with a leave-one-out baseline over the space's categorical decisions."""
    decisions = ledger.space.decisions()
    logits = {d: [0.0] * len(v) for d, v in decisions.items()}
    stale = 0
    while not ledger.spent and stale < ledger.config.patience:
        before = len(ledger.cache)
        batch = [_draw(rng, decisions, logits) for _ in range(ledger.config.samples_per_round)]
        scored = [(c, r) for c, r in zip(batch, ledger.rewards(batch), strict=True) if r is not None]
        stale = stale + 1 if len(ledger.cache) == before else 0
        if len(scored) < 2:
            continue
        seen = [r for _, _, r in ledger.cache.values()]
        mean_seen = sum(seen) / len(seen)
        scale = max(math.sqrt(sum((r - mean_seen) ** 2 for r in seen) / len(seen)), 1e-6)
        total = sum(r for _, r in scored)
        for choice, reward in scored:
            advantage = (reward - (total - reward) / (len(scored) - 1)) / scale
            for d in ledger.space.active(choice):
                probs = _softmax(logits[d])
                k = decisions[d].index(choice[d])
                step = ledger.config.learning_rate * advantage / len(scored)
                logits[d] = [x + step * ((i == k) - p) for i, (x, p) in enumerate(zip(logits[d], probs, strict=True))]


def _random(ledger: _Ledger, rng: random.Random) -> None:
    """Draws from the initial (uniform) distribution until the budget is spent."""
    decisions = ledger.space.decisions()
    uniform = {d: [0.0] * len(v) for d, v in decisions.items()}
    stale = 0
    while not ledger.spent and stale < ledger.config.patience:
        before = len(ledger.cache)
        ledger.rewards([_draw(rng, decisions, uniform) for _ in range(ledger.config.samples_per_round)])
        stale = stale + 1 if len(ledger.cache) == before else 0


def _greedy(ledger: _Ledger, rng: random.Random) -> None:
    """Coordinate ascent from a random start: change one decision at a time, keep improvements;
    restart from a fresh random graph at a local optimum."""
    decisions = ledger.space.decisions()
    uniform = {d: [0.0] * len(v) for d, v in decisions.items()}
    stale = 0
    while not ledger.spent and stale < ledger.config.patience:
        before = len(ledger.cache)
        current = _draw(rng, decisions, uniform)
        best = ledger.rewards([current])[0]
        improved = best is not None
        while improved and not ledger.spent:
            improved = False
            order = ledger.space.active(current)
            rng.shuffle(order)
            for d in order:
                for value in decisions[d]:
                    if value == current[d] or ledger.spent:
                        continue
                    candidate = {**current, d: value}
                    reward = ledger.rewards([candidate])[0]
                    if reward is not None and best is not None and reward > best:
                        current, best, improved = candidate, reward, True
                        break
        stale = stale + 1 if len(ledger.cache) == before else 0


SEARCH_METHODS = Registry("graph search method", {"reinforce": _reinforce, "random": _random, "greedy": _greedy})
"""Search methods: ``fn(ledger, rng)`` spending the ledger's budget."""


def search_graphs(space: GraphSearchSpace, config: GraphSearchConfig, evaluate_dev: Evaluator) -> GraphSearchResult:
    """Search ``space`` for the graph with the best dev reward within the config's budget.

    Args:
        space: The graphs to choose from.
        config: Method, budget, cost penalty, seed.
        evaluate_dev: Evaluates graphs on the dev split (the only split the search sees).

    Returns:
        The best graph found, its dev evaluation and the search's spending.

    Raises:
        GraphError: Nothing could be evaluated (a budget too small for one graph).
    """
    ledger = _Ledger(space, config, evaluate_dev)
    SEARCH_METHODS.load(config.method)(ledger, random.Random(config.seed))
    if ledger.best_key is None:
        raise GraphError(f"graph search evaluated no graph ({ledger.stopped or 'no graph proposed'}); "
                         "raise --budget or the token budget")
    best, ev, reward = ledger.cache[ledger.best_key]
    return GraphSearchResult(config.method, best, ev, reward, len(ledger.cache), ledger.tokens, ledger.found_at,
                        tuple(ledger.curve), ledger.stopped or "no new graphs proposed (converged)")
