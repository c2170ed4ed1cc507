"""Particle filtering and Particle Gibbs pinned to their reference: Puri et al. 2025 and its_hub.

References:

* Paper: Puri, Sudalairaj, Xu, Xu & Srivastava 2025, "A Probabilistic Inference Approach to
  Inference-Time Scaling of LLMs using Particle-Based Monte Carlo Methods" (arXiv 2502.01618):
  the PRM is the emission model of a state-space model over partial solutions; Algorithm 1 (particle
  filtering) propagates every particle one step, scores it with the PRM and resamples the particles
  from a softmax over their weights; Algorithm 2 (Particle Gibbs) repeats the filter, one particle
  of each run being a reference trajectory drawn from the previous run.
* Code: Red-Hat-AI-Innovation-Team/its_hub at commit e4d00d1a342c7b4dadc201a7d3648237180adf22,
  ``its_hub/algorithms/particle_gibbs.py`` (``ParticleGibbs.infer`` and ``_propagate``,
  ``_inv_sigmoid``, ``_softmax``; ``ParticleFiltering`` is the same class with one iteration and
  no reference) and ``its_hub/integration/reward_hub.py`` (the particle's score: the PRM's score of
  the whole partial solution, under reward_hub's aggregation).

Each rule is transcribed below as a small function in our own words and code, and tts must make
the same decisions on the same inputs: the same weights at every resampling, the same final
particles, the same reference trajectories and the same chosen answer.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from tts.backends.base import Completion
from tts.backends.function import FunctionGenerator
from tts.backends.scripted import ScriptedGenerator
from tts.config import SamplingConfig
from tts.prompts import MATH_PROMPT
from tts.search.tree.particle_filtering import (
    ParticleFilteringConfig,
    ParticleGibbs,
    ParticleGibbsConfig,
    particle_filter,
    particle_gibbs,
    particle_weights,
)
from tts.types import Problem, Sample
from tts.verifiers.function import FunctionVerifier

PINNED = {"strategy:particle_filtering", "strategy:particle_gibbs"}

REF = "Red-Hat-AI-Innovation-Team/its_hub@e4d00d1a342c7b4dadc201a7d3648237180adf22"
CLIP = 1e-7  # its_hub's _inv_sigmoid clips p to [1e-7, 1 - 1e-7] before the log


# ---------------------------------------------------------------------------------------------
# The reference's rules, transcribed.
# ---------------------------------------------------------------------------------------------

def ref_log_odds(p: float) -> float:
    """particle_gibbs.py _inv_sigmoid: log(p / (1 - p)) of p clipped away from 0 and 1."""
    q = min(max(p, CLIP), 1.0 - CLIP)
    return math.log(q / (1.0 - q))


def ref_softmax(xs: Sequence[float]) -> list[float]:
    """particle_gibbs.py _softmax: exp(x - max) normalised."""
    top = max(xs)
    e = [math.exp(x - top) for x in xs]
    return [v / sum(e) for v in e]


@dataclass
class RefParticle:
    """particle_gibbs.py Particle: its steps, whether it stopped, its score after every step."""

    steps: tuple[str, ...]
    stopped: bool
    scores: list[float] = field(default_factory=list)

    def copy(self) -> RefParticle:
        return RefParticle(self.steps, self.stopped, list(self.scores))


@dataclass
class RefRun:
    weights: list[list[float]]  # the resampling distribution of every resampling, in order
    finals: list[list[tuple[str, ...]]]  # each iteration's final particles
    references: list[tuple[str, ...]]  # the reference drawn after each iteration but the last
    chosen: tuple[str, ...]  # the answer's particle: highest final weight of the last iteration


def ref_particle_gibbs(world: World, budget: int, iterations: int, rng: random.Random,
                       reference_weight: str = "final") -> RefRun:
    """ParticleGibbs.infer for one prompt (ParticleFiltering: iterations = 1).

    - particles per iteration = budget // iterations; the reference (from the second iteration
      on) takes one slot, the other ``free`` particles start empty;
    - while some particle is not stopped: every unstopped particle gets one step and the PRM's
      score of its whole partial solution; then ALL particles (stopped ones and the reference
      included) are weighted by softmax(log-odds of their score) and ``free`` of them are drawn
      with replacement; a drawn copy longer than the current step count (a copy of the reference)
      is cut back to that many steps and continues; the reference keeps its slot. So the last
      step is resampled too, and the loop ends once every drawn particle has stopped;
    - the reference enters each step's weights with its latest (= final) score: it is a stopped
      particle, and stopped particles use their final weight (``reference_weight="prefix"`` gives
      the rule its_hub's issue #54 proposed instead: its score after the current step);
    - after the iteration, the next reference is drawn from all final particles by the same
      softmax (its_hub draws one after the last iteration too, unused: not repeated here);
    - the answer: the last iteration's particle with the highest final weight (argmax, first on
      ties; ``SelectionMethod.ARGMAX``, the default).

    Order of the particle list: the reference is put first here (its_hub appends it last); a
    multinomial draw does not depend on the order, and putting it where tts does lets one seeded
    generator make the same draws in both.
    """
    per_iteration = budget // iterations
    out = RefRun([], [], [], ())
    ref: RefParticle | None = None
    for it in range(iterations):
        world.iteration = it
        free = per_iteration - (1 if ref else 0)
        particles = ([ref] if ref else []) + [RefParticle((), False) for _ in range(free)]
        t = 0
        while not all(p.stopped for p in particles):
            copies: Counter[tuple[str, ...]] = Counter()
            for p in particles:  # _propagate: each unstopped particle, one step
                if p.stopped:
                    continue
                p.steps = world.child(p.steps, copies[p.steps])
                copies[p.steps[:-1]] += 1
                p.stopped = world.terminal(p.steps)
                p.scores.append(world.value(p.steps))
            t += 1
            logw = []
            for slot, p in enumerate(particles):
                if ref is not None and slot == 0 and reference_weight == "prefix":
                    logw.append(ref_log_odds(p.scores[min(t, len(p.scores)) - 1]))
                else:
                    logw.append(ref_log_odds(p.scores[-1]))
            w = ref_softmax(logw)
            out.weights.append(w)
            drawn = [particles[i].copy() for i in rng.choices(range(len(particles)), weights=w, k=free)]
            for d in drawn:
                if len(d.steps) > t:  # a copy of the reference: its first t steps, unstopped
                    d.steps, d.scores, d.stopped = d.steps[:t], d.scores[:t], False
            particles = ([ref] if ref else []) + drawn
        out.finals.append([p.steps for p in particles])
        final_logw = [ref_log_odds(p.scores[-1]) for p in particles]
        if it + 1 < iterations:
            [j] = rng.choices(range(len(particles)), weights=ref_softmax(final_logw), k=1)
            ref = particles[j]
            out.references.append(ref.steps)
        else:
            best = max(range(len(particles)), key=lambda i: (final_logw[i], -i))
            out.chosen = particles[best].steps
    return out


# ---------------------------------------------------------------------------------------------
# A small hand-made world both run on: fixed continuations, fixed PRM scores, varied lengths.
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Path:
    root: int
    steps: tuple[str, ...]


class World:
    """Step k of a solution is named by its iteration, depth and copy index; its score is a fixed
    pseudo-random number of the whole path (some near 0 and 1, to exercise the clip); a solution
    finishes after 2, 3 or 4 steps, fixed by its first step."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.iteration = 0

    def child(self, steps: tuple[str, ...], j: int) -> tuple[str, ...]:
        return (*steps, f"i{self.iteration}d{len(steps)}c{j}")

    def terminal(self, steps: tuple[str, ...]) -> bool:
        return len(steps) >= 2 + int(steps[0].rsplit("c", 1)[1]) % 3

    def value(self, steps: tuple[str, ...]) -> float:
        u = random.Random(f"{self.seed}|{'/'.join(steps)}").random()
        return 0.0 if u < 0.05 else 1.0 if u > 0.95 else u


class Space:
    """The world as a tts search space (one root); :attr:`scorer` scores its paths."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.scorer = FunctionVerifier.of_items(lambda path: world.value(path.steps))

    def initial_states(self) -> list[Path]:
        return [Path(0, ())]

    def expand(self, states, counts):
        return [[Path(s.root, self.world.child(s.steps, j)) for j in range(k)]
                for s, k in zip(states, counts, strict=True)]

    def is_terminal(self, state: Path) -> bool:
        return bool(state.steps) and self.world.terminal(state.steps)


class Recording(random.Random):
    """A seeded generator that records the weights of every draw."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.weights: list[list[float]] = []

    def choices(self, population, weights=None, *, cum_weights=None, k=1):
        self.weights.append(list(weights))
        return super().choices(population, weights=weights, k=k)


def run_tts(seed: int, budget: int, iterations: int, **settings):
    world = World(seed)
    space = Space(world)
    rng = Recording(seed)
    [result] = particle_gibbs(space, space.scorer, budget // iterations, iterations, rngs=[rng],
                              before_iteration=lambda it: setattr(world, "iteration", it), **settings)
    per = budget // iterations
    leaves = [result.nodes[i] for i in result.leaves]
    finals = [[leaf.state.steps for leaf in leaves[k * per:(k + 1) * per]] for k in range(iterations)]
    last = leaves[-per:]
    best = max(range(per), key=lambda i: (last[i].score, -i))  # the strategy's select="verifier"
    return result, rng.weights, finals, last[best].state.steps


# ---------------------------------------------------------------------------------------------
# The tests.
# ---------------------------------------------------------------------------------------------

def test_the_default_weight_is_its_hubs_softmax_of_log_odds_and_the_others_are_settings():
    """its_hub (particle_gibbs.py _propagate, infer) stores log(p / (1 - p)) of the PRM score as a
    particle's log-weight and resamples by softmax(log-weights), i.e. weights proportional to the
    odds p / (1 - p). For the issue's scores [0.9, 0.5, 0.1] that is [0.89, 0.10, 0.01] (tts
    before the fix: softmax(score / 1) = [0.47, 0.32, 0.21]); weights proportional to the score
    (the PRM read as the emission likelihood) are [0.60, 0.33, 0.07]."""
    scores = [0.9, 0.5, 0.1]
    reference = ref_softmax([ref_log_odds(p) for p in scores])
    assert particle_weights(scores) == pytest.approx(reference, abs=1e-12)  # the default
    assert particle_weights(scores, weighting="log_odds") == pytest.approx(reference, abs=1e-12)
    assert [round(w, 2) for w in particle_weights(scores)] == [0.89, 0.10, 0.01]
    assert [round(w, 2) for w in particle_weights(scores, weighting="proportional")] == [0.60, 0.33, 0.07]
    assert [round(w, 2) for w in particle_weights(scores, weighting="softmax")] == [0.47, 0.32, 0.21]
    assert ParticleFilteringConfig().weighting == "log_odds" and ParticleGibbsConfig().weighting == "log_odds"
    assert ParticleFilteringConfig().temperature == 1.0


def test_scores_of_0_and_1_are_clipped_as_its_hub_clips_them():
    """_inv_sigmoid clips p to [1e-7, 1 - 1e-7]: a score of 1 or 0 gives a finite log-odds, so a
    particle scored 0 keeps a tiny weight and two particles scored 1 share the weight."""
    for scores in ([1.0, 0.0, 0.5], [1.0, 1.0, 0.0], [0.0, 0.0]):
        reference = ref_softmax([ref_log_odds(p) for p in scores])
        assert particle_weights(scores) == pytest.approx(reference, rel=1e-9, abs=1e-300)
        assert all(w > 0 for w in particle_weights(scores))
    proportional = particle_weights([0.0, 0.5], weighting="proportional")
    assert proportional[0] == pytest.approx(2e-7, rel=1e-6) and all(math.isfinite(w) for w in proportional)


@pytest.mark.parametrize("seed", range(12))
def test_particle_filtering_makes_its_hubs_decisions(seed):
    """ParticleFiltering = ParticleGibbs with one iteration and no reference (particle_gibbs.py):
    budget particles; propagate, score, resample after EVERY step, the last included (the loop
    resamples, then finds every particle stopped); the answer is the final particle with the
    highest weight. Same weights at every resampling, same final particles, same answer."""
    budget = 6
    rng = Recording(seed)
    expected = ref_particle_gibbs(World(seed), budget, 1, rng)
    result, weights, finals, chosen = run_tts(seed, budget, 1)
    assert len(weights) == len(rng.weights) == len(expected.weights)
    for got, want in zip(weights, rng.weights, strict=True):
        assert got == pytest.approx(want, rel=1e-9, abs=1e-300)
    assert finals == expected.finals
    assert chosen == expected.chosen
    assert result.events["resamples"] == len(expected.weights)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("reference_weight", ["final", "prefix"])
def test_particle_gibbs_makes_its_hubs_decisions(seed, reference_weight):
    """ParticleGibbs.infer with num_iterations = 3, num_ref_particles = 1: budget // iterations
    particles per iteration, one of them the reference from the second iteration on; the
    reference is drawn from the final particles by softmax(log-odds); it is never propagated,
    keeps its slot at every resampling, enters the weights with its final score (its_hub's
    code; "prefix", the rule of its_hub issue #54, with its score after the current step), and
    a drawn copy of it is cut back to the current step and continues. The answer is read off the
    last iteration only."""
    budget, iterations = 12, 3
    rng = Recording(seed)
    expected = ref_particle_gibbs(World(seed), budget, iterations, rng, reference_weight)
    result, weights, finals, chosen = run_tts(seed, budget, iterations, reference_weight=reference_weight)
    # Every draw, in order: the resamplings of each iteration, then the next reference's draw.
    assert len(weights) == len(rng.weights) == len(expected.weights) + iterations - 1
    for got, want in zip(weights, rng.weights, strict=True):
        assert got == pytest.approx(want, rel=1e-9, abs=1e-300)
    assert finals == expected.finals
    for it in range(1, iterations):
        assert finals[it][0] == expected.references[it - 1]  # the reference keeps its slot
    assert chosen == expected.chosen
    assert result.events["resamples"] == len(expected.weights)


def test_particle_gibbs_default_answer_is_read_off_the_last_iteration():
    """its_hub's ParticleGibbsResult.the_one is responses_lst[-1][selected_index]: the answer is
    chosen among the LAST iteration's particles, by the highest weight (SelectionMethod.ARGMAX,
    np.argmax: first on ties). tts keeps every iteration's particles as candidates (pass@n) and
    chooses among the last iteration's; answer_from="all_iterations" chooses among all."""
    cfg = ParticleGibbsConfig(n=6, iterations=2)
    assert cfg.select == "verifier" and cfg.answer_from == "last_iteration"
    assert ParticleFilteringConfig().select == "verifier"
    problems = [Problem("p0", "What is 1 + 1?", "2")]
    gen = ScriptedGenerator.for_problems(problems, accuracy=0.5, seed=1)
    samples = tuple(Sample(text=a, answer=a) for a in ["9", "9", "7", "2", "3", "2"])
    scores = (0.99, 0.2, 0.3, 0.8, 0.8, 0.1)  # the first iteration holds the best-scored particle

    def select(**settings):
        strategy = ParticleGibbs(ParticleGibbsConfig(n=6, iterations=2, verifier="arithmetic", **settings), gen,
                                 MATH_PROMPT.render, SamplingConfig(max_tokens=64), seed=1)
        return strategy._select(samples, scores, Counter())

    answer, confidence, _, index = select()
    assert (answer, index) == ("2", 3) and confidence == pytest.approx(0.8)  # first of the tied 0.8s
    answer, _, _, index = select(answer_from="all_iterations")
    assert (answer, index) == ("9", 0)
    answer, _, votes, _ = select(select="weighted_vote")  # the weighted vote, also over the last iteration
    assert answer == "2" and set(votes) == {"2", "3"}


def test_particle_gibbs_iterations_one_is_particle_filtering():
    """its_hub's ParticleGibbs defaults to num_iterations = 1 (then it is ParticleFiltering); tts's
    particle_gibbs defaults to 2, the fewest that make it Gibbs (documented; iterations=1 gives
    its_hub's default). With one iteration both functions make the same decisions."""
    assert ParticleGibbsConfig().iterations == 2
    a = run_tts(3, 6, 1)
    world = World(3)
    space = Space(world)
    rng = Recording(3)
    [b] = particle_filter(space, space.scorer, 6, rngs=[rng])
    assert rng.weights == a[1] and [n.state.steps for n in b.leaf_nodes] == a[2][0]


# ---------------------------------------------------------------------------------------------
# Where a particle stops: its_hub's rule is tts's with force_answer=False.
# ---------------------------------------------------------------------------------------------

STOP_TOKEN = "The answer is"  # the stop_token benchmarks/side_by_side.py gives its_hub (its driver's)


def ref_is_stopped(steps_so_far: Sequence[str], next_step: str, max_steps: int) -> bool:
    """step_generation.py StepGeneration.aforward: a particle stops once it has taken a step with
    ``max_steps`` steps already behind it (so after max_steps + 1 steps), or when its new step
    contains ``stop_token``. Nothing else is sent for it: no forced answer."""
    return len(steps_so_far) >= max_steps or STOP_TOKEN in next_step


def ref_response(steps: Sequence[str], separator: str) -> str:
    """step_generation.py _post_process(steps, stopped=True), step_token a string and the stop
    strings left out of the output: the steps joined by the step token. The side-by-side driver
    reads the answer off this text with tts's extractor."""
    return separator.join(steps)


def parity_model(answers: float) -> FunctionGenerator:
    """A chat model for the stop rule: each sample (fixed by the request's seed, continuation and
    index) is an arithmetic step, or with probability ``answers`` a step stating "The answer is N.";
    it never ends its message. Records its requests."""

    def sample(req, i: int) -> Completion:
        rng = random.Random(f"{req.seed}|{req.continuation}|{i}")
        a, b = rng.randrange(1, 20), rng.randrange(1, 20)
        text = f"{STOP_TOKEN} {a + b}." if rng.random() < answers else f"{a} + {b} = {a + b}"
        return Completion(text, 6, -0.5, "stop", ended_by_eos=False)

    return FunctionGenerator(lambda req: [sample(req, i) for i in range(req.n)], model_name="parity-model")


def text_score() -> FunctionVerifier:
    """A verifier whose score of a partial solution is a fixed pseudo-random number of its text."""
    return FunctionVerifier.of_items(lambda item: random.Random("/".join(item.steps)).random())


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("answers", [0.0, 0.15])
def test_without_forcing_a_particle_stops_where_its_hubs_stops_and_says_what_its_text_says(answers, seed):
    """its_hub (StepGeneration.aforward) stops a particle when its step contains the stop token or
    after max_steps + 1 steps, sends nothing more for it, and returns its steps joined by the step
    token. tts with force_answer=False and max_depth = max_steps + 1 (benchmarks/side_by_side.py
    passes its_hub depth - 1): every final particle stopped exactly where that rule stops it, its
    candidate text is its_hub's response and its answer is what tts's extractor reads off that
    response; every request the search sent is a step request (where no step states an answer, n
    samples per problem at each of the max_steps + 1 steps: its_hub's requests). The default (force_answer=True) departs: a particle
    at the cap without an answer costs one more request, whose forced answer ends its text."""
    from tts.answers import extract_answer
    from tts.search.tree.particle_filtering import ParticleFiltering
    from tts.search.tree.stepwise import ANSWER_NUDGE

    max_steps, n, sep = 3, 6, "\n\n"
    problems = [Problem(f"p{i}", f"What is {i} + {seed}?", str(i + seed)) for i in range(3)]

    def run(force_answer: bool):
        model = parity_model(answers)
        config = ParticleFilteringConfig(n=n, max_depth=max_steps + 1, verifier="arithmetic", heal_separator=False,
                                         force_answer=force_answer)
        strategy = ParticleFiltering(config, model, MATH_PROMPT.render, SamplingConfig(max_tokens=1000), seed=seed,
                                     verifier=text_score())
        return model, strategy.solve(problems)

    model, sols = run(False)
    for sol in sols:
        assert len(sol.trace.samples) == n
        nodes = {node["id"]: node for node in sol.trace.tree}
        for sample in sol.trace.samples:
            steps = tuple(sample.text.split(sep))
            # Stopped here by its_hub's rule, and not one step earlier.
            assert ref_is_stopped(steps[:-1], steps[-1], max_steps)
            assert not any(ref_is_stopped(steps[:k], steps[k], max_steps) for k in range(len(steps) - 1))
            assert sample.text == ref_response(steps, sep)
            assert sample.answer == extract_answer(ref_response(steps, sep)) is not None
        assert all(node["forced"] is None for node in nodes.values())
    requests = [r for call in model.calls for r in call]
    assert not any(r.continuation.endswith(ANSWER_NUDGE) for r in requests)
    assert all(r.continuation == "" or r.continuation.endswith(sep) for r in requests)  # whole separator, as its_hub
    assert len(model.calls) <= max_steps + 1  # one call per step for all problems, none after the cap
    if not answers:  # no step states an answer: every particle stopped at the cap, with its last number
        assert all(len(s.text.split(sep)) == max_steps + 1 for sol in sols for s in sol.trace.samples)
        assert all(sol.trace.events["stopped_depth"] >= n for sol in sols)
        # its_hub sends one request per unstopped particle and step: n per problem at each of the
        # max_steps + 1 steps; tts the same samples, copies of a particle as one request of n = copies.
        assert len(model.calls) == max_steps + 1
        assert all(sum(r.n for r in call if r.key == p.id) == n for call in model.calls for p in problems)

    forced_model, forced = run(True)
    assert any(r.continuation.endswith(ANSWER_NUDGE) for call in forced_model.calls for r in call)
    assert any("Therefore, the final answer is" in s.text for sol in forced for s in sol.trace.samples)
