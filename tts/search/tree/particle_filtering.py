"""Particle filtering and Particle Gibbs over solution steps (Puri et al. 2025, as in its_hub).

Puri, Sudalairaj, Xu, Xu and Srivastava, "A Probabilistic Inference Approach to Inference-Time
Scaling of LLMs using Particle-Based Monte Carlo Methods" (arXiv:2502.01618), treat a step-wise
search as inference in a state-space model: the LLM is the transition model, the partial solutions
are particles, and the verifier (a PRM) is the emission model whose score of a partial solution
weighs it; instead of beam search's hard cut to the N/M best, the particles are *resampled* by
their weights, so a lower-scored partial solution still survives with some probability (the
verifier is noisy; a deterministic cut trusts it completely). The reference implementation is the
authors' library its_hub (Red-Hat-AI-Innovation-Team/its_hub, ``its_hub/algorithms/particle_gibbs.py``
at commit e4d00d1a342c7b4dadc201a7d3648237180adf22); ``tests/parity/test_particle_filtering.py``
checks that tts makes its decisions. With N particles:

1. sample N first steps (one particle each) and score each partial solution as a whole (the
   verifier's score, with its ``aggregation`` over the steps; its_hub: reward_hub's aggregation);
2. weights: softmax(log(p / (1 - p))) over all N particles, finished ones included, p the score
   clipped to [1e-7, 1 - 1e-7] (``weighting="log_odds"``, the default);
3. resample N particles from the weights (multinomial: each draw picks particle i with
   probability w_i); a finished particle that is drawn stays finished;
4. continue every unfinished particle by one step and score it; repeat from 2. The loop ends at
   the resampling that draws only finished particles: every step is resampled, the last included
   (its_hub resamples after every propagation, then finds every particle stopped);
5. the answer: the final particle with the highest score (``select="verifier"``, its_hub's
   default ``SelectionMethod.ARGMAX``; first on ties).

Why log-odds by default: its_hub, written by the paper's authors and aligned with the paper's
results ("fixes for parity with paper impl & results"), stores log(p / (1 - p)) of the PRM's score
as a particle's log-weight and resamples by the softmax of the log-weights, so weights are
proportional to the odds p / (1 - p); that is the softmax step of Algorithm 1 as the authors run
it. For scores [0.9, 0.5, 0.1] it gives [0.89, 0.10, 0.01]. Two other rules are settings:
``weighting="proportional"`` (weights proportional to p, the PRM read literally as the emission
likelihood: [0.60, 0.33, 0.07]) and ``weighting="softmax"`` (softmax of p itself, tts's rule before
it followed its_hub: [0.47, 0.32, 0.21], the best particle outweighing the worst by at most e, so
almost uniform). ``temperature`` divides the log-weights of any of them (1: the rule itself).

Particle Gibbs (their Algorithm 2; conditional SMC, Andrieu, Doucet and Holenstein 2010; its_hub's
``ParticleGibbs`` with one reference particle) runs the filter ``iterations`` times with ``n /
iterations`` particles each. From the second iteration on, one particle is the *reference*: a
final particle of the previous iteration drawn by the same weights. It keeps its own steps instead
of being sampled, keeps its slot at every resampling (it is never resampled away), and takes part
in the weights, so the other particles can be resampled onto it: a drawn copy is cut back to as
many steps as the others have taken and continues from there (branches off the reference's
prefix). As in its_hub's code the reference, a finished particle, enters every resampling with its
final score (``reference_weight="final"``); ``reference_weight="prefix"`` weighs it by its score
after the current number of steps instead (the rule its_hub's issue #54 argued for, and tts's
before it followed the code). The answer is chosen among the last iteration's final particles, as
its_hub does (``answer_from="last_iteration"``); ``answer_from="all_iterations"`` chooses among
every iteration's.

Departures from its_hub, on purpose:

- ``ParticleGibbsConfig.iterations`` defaults to 2: its_hub's class defaults to 1, which is
  particle filtering; ``iterations=1`` gives it.
- Particles that point at the same node are expanded by ONE request of ``n = copies`` (as beam
  search expands a kept node M ways), so copies branch into different continuations; its_hub sends
  one request per particle. The continuations are samples either way; every step of every problem
  is one expand call and one score call.
- A particle without a valid score (:data:`~tts.search.tree.tree_search.PENALTY`) has weight 0 while
  any particle has a valid score; when none has, resampling is uniform (its_hub's PRM always
  returns a score).
- The candidates (``SearchResult.leaves``, the trace's samples) are every iteration's final
  particles, duplicates included (n in all, so pass@n counts as many candidates as the other
  searches at the same ``n``); the answer still comes from the last iteration by default.
- ``n`` of Particle Gibbs is particles x iterations, as its_hub's ``budget``.
- Randomness: each root has its own :class:`random.Random`, seeded by the strategy from the run
  seed, the problem and the config, so a run repeats exactly on a seeded backend.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable, Sequence
from typing import ClassVar, Literal

from pydantic import Field, model_validator

from tts.backends.base import derive_seed
from tts.config import StrategyConfigBase
from tts.search.tree.stepwise import StepScorer, StepState, StepwiseSpace
from tts.search.tree.tree_search import (MAX_STEPS, Expansion, SearchResult, SearchSpace, SearchTree, StateScorer,
                                         TreeNode, grow, never_ends)
from tts.search.tree.tree_strategy import TreeSearchConfig, TreeSearchStrategy
from tts.types import Sample


Weighting = Literal["log_odds", "proportional", "softmax"]
"""How a particle's score p in [0, 1] becomes its resampling weight (see :func:`particle_weights`)."""

ReferenceWeight = Literal["final", "prefix"]
"""Which score the Particle Gibbs reference enters each resampling with (see the module docstring)."""

CLIP = 1e-7
"""Scores are clipped to [CLIP, 1 - CLIP] before a log (its_hub's ``_inv_sigmoid`` uses 1e-7)."""


def _log_weight(p: float, weighting: Weighting) -> float:
    """The unnormalised log-weight of a score under ``weighting`` (before the temperature)."""
    if weighting == "softmax":
        return p
    q = min(max(p, CLIP), 1.0 - CLIP)
    return math.log(q / (1.0 - q)) if weighting == "log_odds" else math.log(q)


def particle_weights(scores: Sequence[float], temperature: float = 1.0,
                     weighting: Weighting = "log_odds") -> list[float]:
    """Normalised resampling weights: softmax(f(score) / temperature) over the valid scores.

    f is log(p / (1 - p)) for ``log_odds`` (its_hub: weights proportional to the odds), log(p) for
    ``proportional`` (weights proportional to the score) and p itself for ``softmax`` (tts before
    it followed its_hub); p is clipped to [1e-7, 1 - 1e-7] before a log. At temperature 1 the
    scores [0.9, 0.5, 0.1] give [0.89, 0.10, 0.01], [0.60, 0.33, 0.07] and [0.47, 0.32, 0.21].

    Args:
        scores: One score per particle in [0, 1]; a negative one (PENALTY) marks a particle
            without a valid score, which gets weight 0 while any particle has a valid score.
        temperature: > 0; lower concentrates the weight on the best particles (1: the rule itself).
        weighting: ``log_odds`` (default), ``proportional`` or ``softmax``.

    Returns:
        Weights summing to 1 (uniform when no score is valid).

    Example:
        >>> [round(w, 2) for w in particle_weights([0.9, 0.5, 0.1])]
        [0.89, 0.1, 0.01]
    """
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if weighting not in ("log_odds", "proportional", "softmax"):
        raise ValueError(f"weighting must be log_odds, proportional or softmax, got {weighting!r}")
    if not scores:
        return []
    valid = [s >= 0.0 and math.isfinite(s) for s in scores]
    if not any(valid):
        return [1.0 / len(scores)] * len(scores)
    logs = [_log_weight(s, weighting) / temperature if ok else -math.inf for s, ok in zip(scores, valid, strict=True)]
    top = max(logs)
    raw = [math.exp(x - top) if ok else 0.0 for x, ok in zip(logs, valid, strict=True)]
    total = sum(raw)
    return [w / total for w in raw]


def resample(weights: Sequence[float], count: int, rng: random.Random) -> list[int]:
    """``count`` multinomial draws of particle indices with probabilities ``weights``, in draw order."""
    return rng.choices(range(len(weights)), weights=weights, k=count) if count > 0 else []


class _Filter:
    """One root's particle set across the steps of one filtering run."""

    def __init__(self, tree: SearchTree, rng: random.Random, reference: Sequence[TreeNode] = (), iteration: int = 0) -> None:
        self.tree = tree
        self.iteration = iteration
        self.rng = rng
        self.reference = list(reference)  # the reference trajectory, depth 1 first (Particle Gibbs)
        self.particles: list[TreeNode] = []  # particles[0] is the reference's when there is one
        self.done = False

    def reference_at(self, depth: int) -> TreeNode | None:
        """The reference's node at ``depth`` (its finished node once it is shorter)."""
        if not self.reference:
            return None
        return self.reference[min(depth, len(self.reference)) - 1]


def _run_filter(space: SearchSpace, scorer: StateScorer, filters: Sequence[_Filter], n: int,
                weigh: Callable[[Sequence[float]], list[float]], reference_weight: ReferenceWeight,
                max_steps: int) -> None:
    """Particle filtering from every root in lockstep (see the module docstring for the steps)."""
    # 1. The first step: each root expanded n ways (n - 1 besides a reference's first node).
    first = [Expansion(f.tree, None, n - (1 if f.reference else 0)) for f in filters]
    for f, kids in zip(filters, grow(space, scorer, first), strict=True):
        ref = f.reference_at(1)
        f.particles = ([ref] if ref is not None else []) + kids
        if not f.particles:
            f.tree.events["no_children"] += 1
            f.done = True
    for depth in range(1, max_steps + 1):
        live = [f for f in filters if not f.done]
        if not live:
            return
        # 2-3. Weights from the scores of all particles; resample after every step, the last one
        # included; the reference keeps its slot.
        batch: list[Expansion] = []
        owners: list[tuple[_Filter, list[int]]] = []
        for f in live:
            scores = [p.score for p in f.particles]
            if f.reference and reference_weight == "final":
                scores[0] = f.reference[-1].score  # its_hub: the (finished) reference's final score
            weights = weigh(scores)
            picks = resample(weights, n - (1 if f.reference else 0), f.rng)
            drawn = [f.particles[i] for i in picks]
            f.tree.events["resamples"] += 1
            times = Counter(picks)
            # On record for a viewer: each particle's node and weight, and how often it was drawn
            # (weights that resample almost uniformly are visible only here).
            f.tree.notes.setdefault("particles", []).append(
                {"iteration": f.iteration, "step": depth, "nodes": [p.id for p in f.particles],
                 "weights": [round(w, 6) for w in weights], "drawn": [times[i] for i in range(len(weights))]})
            for p in drawn:
                p.kept = True
            if all(p.terminal for p in drawn):  # every particle has finished (the reference had)
                f.particles = ([f.reference[-1]] if f.reference else []) + drawn
                f.done = True
                continue
            ref = f.reference_at(depth + 1)
            f.particles = ([ref] if ref is not None else []) + drawn
            # 4. Unfinished particles on the same node are one request of n = copies.
            copies: dict[int, list[int]] = {}
            for slot, p in enumerate(f.particles):
                if not p.terminal and not (ref is not None and slot == 0):
                    copies.setdefault(p.id, []).append(slot)
            for node_id, slots in copies.items():
                batch.append(Expansion(f.tree, f.tree.nodes[node_id], len(slots)))
                owners.append((f, slots))
        # One expand call and one score call for every live particle of every root.
        for (f, slots), kids in zip(owners, grow(space, scorer, batch), strict=True):
            if len(kids) < len(slots):
                f.tree.events["no_children"] += len(slots) - len(kids)
            for slot, kid in zip(slots, kids, strict=False):
                f.particles[slot] = kid
    # The last allowed resampling may have finished every root: a search of exactly max_steps steps ends.
    if not all(f.done for f in filters):
        raise never_ends(max_steps)


def _finish(f: _Filter) -> None:
    """The final particles become the root's candidates (duplicates included)."""
    for p in f.particles:
        if p.terminal:
            f.tree.take(p)


def _trajectory(tree: SearchTree, node: TreeNode) -> list[TreeNode]:
    """The nodes from the root's child down to ``node``."""
    path = [node]
    while path[-1].parent is not None:
        path.append(tree.nodes[path[-1].parent])
    return path[::-1]


def particle_filter(space: SearchSpace, scorer: StateScorer, n: int, temperature: float = 1.0,
                    rngs: Sequence[random.Random] | None = None, max_steps: int = MAX_STEPS, *,
                    weighting: Weighting = "log_odds") -> list[SearchResult]:
    """Particle filtering (Puri et al. 2025, Algorithm 1; its_hub's ``ParticleFiltering``) from
    every root of ``space`` in lockstep.

    Args:
        space: The search space (one root per problem).
        scorer: Scores states in [0, 1] (higher is better).
        n: Particles per root.
        temperature: Divides the log-weights (1: the weighting itself; lower is greedier).
        rngs: One random generator per root (default: seeded 0, 1, 2, ...).
        max_steps: Safety cap on steps.
        weighting: How scores become weights (:func:`particle_weights`): ``log_odds`` (its_hub),
            ``proportional`` or ``softmax``.

    Returns:
        One :class:`SearchResult` per root; its leaves are the n final particles (duplicates
        included), drawn in the resampling after the last step; ``kept`` marks every node that was
        drawn in a resampling. Events: ``resamples`` (resampling steps, one per step),
        ``no_children``. Notes: ``particles``, one record per resampling (``iteration``, ``step``,
        each particle's node id, weight and times drawn).

    Example:
        >>> from tts.search.tree.toy import DigitSpace, PerfectScorer
        >>> space = DigitSpace(["3102"], base=4)
        >>> [r] = particle_filter(space, PerfectScorer(space), n=16, temperature=0.05)
        >>> max(r.leaf_nodes, key=lambda node: node.score).state.digits
        '3102'
    """
    return particle_gibbs(space, scorer, n, 1, temperature, rngs, max_steps=max_steps, weighting=weighting)


def particle_gibbs(space: SearchSpace, scorer: StateScorer, n: int, iterations: int = 2, temperature: float = 1.0,
                   rngs: Sequence[random.Random] | None = None, before_iteration: Callable[[int], None] | None = None,
                   max_steps: int = MAX_STEPS, *, weighting: Weighting = "log_odds",
                   reference_weight: ReferenceWeight = "final") -> list[SearchResult]:
    """Particle Gibbs (Puri et al. 2025, Algorithm 2; its_hub's ``ParticleGibbs``): ``iterations``
    particle filters of ``n`` particles; from the second on, one particle is the reference
    trajectory drawn at the end of the previous one (by weight), which is never resampled away.

    Args:
        space, scorer, n, temperature, rngs, max_steps, weighting: As :func:`particle_filter` (n
            is the particles of one iteration).
        iterations: Filtering runs; 1 is plain particle filtering.
        before_iteration: Called with the iteration's index before it starts (the step-wise
            space changes its seeds there, so an iteration never resends an earlier one's).
        reference_weight: The score the reference enters every resampling with: ``final`` (its
            whole trajectory's, as its_hub's code does) or ``prefix`` (its score after as many
            steps as the other particles have taken).

    Returns:
        One :class:`SearchResult` per root; its leaves are every iteration's final particles, in
        iteration order (the reference first from the second iteration on). Events also count
        ``references_kept``: final particle sets that held their iteration's reference.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if iterations < 1:
        raise ValueError(f"iterations must be >= 1, got {iterations}")
    if iterations > 1 and n < 2:
        raise ValueError("Particle Gibbs needs n >= 2 particles per iteration: one is the reference")
    if reference_weight not in ("final", "prefix"):
        raise ValueError(f"reference_weight must be final or prefix, got {reference_weight!r}")
    particle_weights([0.5], temperature, weighting)  # refuses a bad temperature or weighting up front

    def weigh(scores: Sequence[float]) -> list[float]:
        return particle_weights(scores, temperature, weighting)

    trees = [SearchTree(root) for root in space.initial_states()]
    rngs = list(rngs) if rngs is not None else [random.Random(i) for i in range(len(trees))]
    if len(rngs) != len(trees):
        raise ValueError(f"got {len(rngs)} random generators for {len(trees)} roots; give one per root")
    references: list[list[TreeNode]] = [[] for _ in trees]
    filters: list[_Filter] = []
    for it in range(iterations):
        if before_iteration is not None:
            before_iteration(it)
        filters = [_Filter(t, rng, ref, it) for t, rng, ref in zip(trees, rngs, references, strict=True)]
        _run_filter(space, scorer, filters, n, weigh, reference_weight, max_steps)
        for i, f in enumerate(filters):
            if f.reference and f.particles and f.particles[0] is f.reference[-1]:
                f.tree.events["references_kept"] += 1
            _finish(f)
            finished = [p for p in f.particles if p.terminal]
            if it + 1 < iterations and finished:
                # The next reference: one final particle drawn by weight (its_hub: the same softmax).
                [j] = resample(weigh([p.score for p in finished]), 1, f.rng)
                references[i] = _trajectory(f.tree, finished[j])
    return [t.result() for t in trees]


# --- strategies -----------------------------------------------------------------------------------


class ParticleFilteringConfig(TreeSearchConfig):
    """Particle filtering: n partial solutions resampled every step by their verifier scores
    (default: softmax of the scores' log-odds, as its_hub)."""

    kind: Literal["particle_filtering"] = "particle_filtering"
    weighting: Weighting = "log_odds"
    """How a verifier score p becomes a resampling weight: ``log_odds`` (default; its_hub, the
    authors' library: softmax of log(p / (1 - p)), weights proportional to the odds),
    ``proportional`` (weights proportional to p: the PRM read as the emission likelihood) or
    ``softmax`` (softmax of p itself: tts's rule before it followed its_hub; with p in [0, 1] the
    best particle outweighs the worst by at most e, so it resamples almost uniformly)."""
    temperature: float = Field(1.0, gt=0.0, le=100.0)
    """Divides the log-weights before they are normalised: 1 is the weighting itself; lower
    resamples more greedily (near 0: every particle onto the best), higher more uniformly (like
    independent sampling)."""
    select: Literal["verifier", "weighted_vote"] = "verifier"
    """How the answer is chosen among the final particles: ``verifier`` (default; its_hub: the
    particle with the highest weight, i.e. the best score) or ``weighted_vote`` (a vote weighted by
    verifier score, duplicates counting as often as they were drawn)."""


class ParticleGibbsConfig(ParticleFilteringConfig):
    """Particle Gibbs: particle filtering repeated, each iteration keeping a reference particle from the last."""

    kind: Literal["particle_gibbs"] = "particle_gibbs"  # type: ignore[assignment]
    iterations: int = Field(2, ge=1, le=64)
    """Filtering runs; each has n / iterations particles, one of which (from the second run on) is
    the reference trajectory drawn from the previous run. n must be a multiple of it. (its_hub's
    class defaults to 1, which is particle filtering; 2 is the fewest that make it Gibbs.)"""
    reference_weight: ReferenceWeight = "final"
    """The score the reference trajectory enters every resampling with: ``final`` (default; its_hub's
    code: the reference is a finished particle and weighs by its whole trajectory's score) or
    ``prefix`` (its score after as many steps as the other particles have taken: the rule its_hub's
    issue #54 proposed, and tts's before it followed the code)."""
    answer_from: Literal["last_iteration", "all_iterations"] = "last_iteration"
    """Which final particles the answer is chosen among: ``last_iteration`` (default; its_hub reads
    it off the last iteration) or ``all_iterations`` (every iteration's). Either way every
    iteration's final particles are the trace's candidates (n in all, for pass@n)."""

    @model_validator(mode="after")
    def _iterations_divide_n(self) -> ParticleGibbsConfig:
        if self.n % self.iterations or (self.iterations > 1 and self.n // self.iterations < 2):
            raise ValueError(f"n ({self.n}) must be a multiple of iterations ({self.iterations}) with at least 2 "
                             f"particles per iteration (one is the reference): n counts the particles of all "
                             f"iterations. Set n to a multiple of {self.iterations} (>= {2 * self.iterations}) "
                             "or lower iterations.")
        return self

    @property
    def particles(self) -> int:
        """Particles per iteration."""
        return self.n // self.iterations


class ParticleFiltering(TreeSearchStrategy):
    """Particle filtering over solution steps (Puri et al. 2025); see :func:`particle_filter`."""

    name = "particle_filtering"
    config_class: ClassVar[type[StrategyConfigBase]] = ParticleFilteringConfig

    def _rngs(self, space: StepwiseSpace) -> list[random.Random]:
        return [random.Random(derive_seed(self.seed, f"{p.id}|{self.config.label}", 0)) for p in space.problems]

    def search(self, space: StepwiseSpace, scorer: StepScorer) -> list[SearchResult[StepState]]:
        c = self.config
        return particle_filter(space, scorer, c.n, c.temperature, self._rngs(space), weighting=c.weighting)


class ParticleGibbs(ParticleFiltering):
    """Particle Gibbs over solution steps (Puri et al. 2025); see :func:`particle_gibbs`."""

    name = "particle_gibbs"
    config_class: ClassVar[type[StrategyConfigBase]] = ParticleGibbsConfig

    def search(self, space: StepwiseSpace, scorer: StepScorer) -> list[SearchResult[StepState]]:
        c = self.config
        key = space.seed_key

        def before_iteration(it: int) -> None:
            space.seed_key = f"{key}|iteration{it}" if it else key  # new seeds for every iteration's samples

        return particle_gibbs(space, scorer, c.particles, c.iterations, c.temperature, self._rngs(space),
                              before_iteration=before_iteration, weighting=c.weighting,
                              reference_weight=c.reference_weight)

    def _select(self, samples: Sequence[Sample], scores: Sequence[float],
                events: Counter[str]) -> tuple[str | None, float, dict[str, float], int | None]:
        """The answer among the last iteration's final particles (the last ``particles`` candidates)
        unless ``answer_from="all_iterations"``."""
        c = self.config
        if c.answer_from == "all_iterations" or len(samples) <= c.particles:
            return super()._select(samples, scores, events)
        start = len(samples) - c.particles
        answer, confidence, votes, index = super()._select(samples[start:], scores[start:], events)
        return answer, confidence, votes, None if index is None else start + index
