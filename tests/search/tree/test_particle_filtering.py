"""Particle filtering and Particle Gibbs: resampling on the toy digit space (known optimum, no LLM),
the reference particle, batching, and the strategies end to end (step model, scripted backend, CLI)."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from tts.backends.scripted import ScriptedGenerator
from tts.cli.app import app
from tts.config import SamplingConfig
from tts.prompts import MATH_PROMPT
from tts.registry import STRATEGIES
from tts.search.tree.particle_filtering import (
    ParticleFiltering,
    ParticleFilteringConfig,
    ParticleGibbs,
    ParticleGibbsConfig,
    particle_filter,
    particle_gibbs,
    particle_weights,
    resample,
)
from tts.search.tree.toy import DigitSpace, PerfectScorer, RandomScorer
from tts.types import Problem, Sample
from tts.verifiers.function import FunctionVerifier

LENGTH, BASE = 5, 4  # the toy space of the `targets` fixture (tests/search/conftest.py)


def Constant() -> FunctionVerifier:  # noqa: N802 -- reads as the verifier it builds
    """An uninformative verifier: every state scores the same."""
    return FunctionVerifier.of_items(lambda state: 0.5)


class Recording(DigitSpace):
    """A digit space that records the (state, count) requests of every expand call."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.requests: list[list] = []

    def expand(self, states, counts):
        self.requests.append(list(zip(states, counts, strict=True)))
        return super().expand(states, counts)


def _rngs(count: int, seed: int = 0) -> list[random.Random]:
    return [random.Random(seed * 100_003 + i) for i in range(count)]


# --- resampling on the toy space ----------------------------------------------------------------


def test_with_uninformative_scores_resampling_is_uniform_and_random(targets):
    # Equal scores: every particle is drawn with probability 1/n, so the offspring of the k-th
    # first-step particle is Binomial(n, 1/n): the same mean for every k (chi-square over 400
    # roots) and variance 1 - 1/n (multinomial draws, not a deterministic cut that keeps each once).
    n, roots = 8, 400
    space = DigitSpace(targets(roots, seed=11), base=BASE, seed=12)
    results = particle_filter(space, Constant(), n=n, temperature=1.0, rngs=_rngs(roots))
    offspring = []
    for r in results:
        first = [node for node in r.nodes if node.depth == 1]
        assert len(first) == n
        offspring.append([sum(c.parent == f.id for c in r.nodes) for f in first])
    per_slot = [sum(o[k] for o in offspring) for k in range(n)]
    expected = roots  # n draws per root, 1/n each
    chi2 = sum((c - expected) ** 2 / expected for c in per_slot)
    assert chi2 < 24.3, per_slot  # chi-square, 7 degrees of freedom, p = 0.001
    variance = sum((c - 1) ** 2 for o in offspring for c in o) / (roots * n)
    assert 0.75 < variance < 1.0  # 1 - 1/8 = 0.875; the sd of this estimate is about 0.03


@pytest.mark.parametrize("weighting", ["log_odds", "proportional", "softmax"])
def test_equal_scores_give_equal_weights_and_a_sharp_temperature_puts_the_weight_on_the_best(weighting):
    assert particle_weights([0.3] * 4, 1.0, weighting) == [0.25] * 4
    w = particle_weights([1.0, 0.0, 0.5, -1.0], 0.05, weighting)
    assert w[0] > 0.99 and w[3] == 0.0 and abs(sum(w) - 1) < 1e-12
    assert particle_weights([-1.0, -1.0], 1.0, weighting) == [0.5, 0.5]  # no valid score: uniform
    # NaN and infinite scores are not valid either: weight 0, and they never spoil the others' weights
    assert particle_weights([math.nan, 0.5, math.inf, 0.5], 1.0, weighting) == [0.0, 0.5, 0.0, 0.5]
    with pytest.raises(ValueError, match="temperature"):
        particle_weights([0.5], 0.0, weighting)


def test_the_weightings_order_from_greedy_to_flat_and_a_bad_one_is_refused():
    # [0.9, 0.5, 0.1]: log-odds (its_hub) is the sharpest, the softmax of raw scores the flattest
    best = {k: particle_weights([0.9, 0.5, 0.1], weighting=k)[0] for k in ("log_odds", "proportional", "softmax")}
    assert best["log_odds"] > best["proportional"] > best["softmax"]
    with pytest.raises(ValueError, match="weighting must be"):
        particle_weights([0.5], weighting="odds")
    with pytest.raises(ValidationError):
        ParticleFilteringConfig(weighting="odds")


def test_every_step_is_resampled_the_last_one_included(targets):
    # The toy strings all finish at LENGTH steps: LENGTH resamplings, the last after every particle
    # has finished (its_hub resamples after every propagation); the final particles are its draws.
    space = DigitSpace(targets(20, seed=9), base=BASE, seed=10)
    results = particle_filter(space, PerfectScorer(space), n=8, rngs=_rngs(20))
    for r in results:
        assert r.events["resamples"] == LENGTH
        assert all(r.nodes[i].kept for i in r.leaves) and len(r.leaves) == 8


def test_a_node_is_kept_exactly_when_a_resampling_draws_it(targets):
    space = DigitSpace(targets(10, seed=3), base=BASE, seed=4)
    for r in particle_filter(space, PerfectScorer(space), n=6, temperature=0.5, rngs=_rngs(10)):
        drawn = {i for record in r.notes["particles"] for i, k in zip(record["nodes"], record["drawn"], strict=True) if k}
        assert {node.id for node in r.nodes if node.kept} == drawn
        assert len(drawn) < len(r.nodes)  # and some never were
        assert "no_children" not in r.events  # every expansion came back whole

def test_with_a_sharp_verifier_the_particles_concentrate_on_the_best_branch(targets, chosen):
    space = DigitSpace(targets(60, seed=1), base=BASE, seed=2)
    sharp = particle_filter(space, PerfectScorer(space), n=16, temperature=0.02, rngs=_rngs(60))
    flat_space = DigitSpace(targets(60, seed=1), base=BASE, seed=2)
    flat = particle_filter(flat_space, PerfectScorer(flat_space), n=16, temperature=100.0, rngs=_rngs(60))

    def share_on_target(results, space):
        # the branch: the first LENGTH - 1 digits
        hits = [leaf.state.digits[:-1] == t[:-1] for r, t in zip(results, space.targets, strict=True)
                for leaf in r.leaf_nodes]
        return sum(hits) / len(hits)

    assert all(chosen(r).state.digits == t for r, t in zip(sharp, space.targets, strict=True))
    assert all(len(r.leaves) == 16 for r in sharp)  # the n final particles, duplicates included
    assert share_on_target(sharp, space) > 0.9 and share_on_target(flat, flat_space) < 0.2


def test_with_a_random_verifier_particle_filtering_does_no_better_than_chance(targets, chosen):
    space = DigitSpace(targets(400, seed=2), base=BASE, seed=3)
    results = particle_filter(space, RandomScorer(seed=4), n=16, temperature=0.1, rngs=_rngs(400))
    mean = sum(space.value(chosen(r).state) for r in results) / len(results)
    assert abs(mean - LENGTH / BASE) < 0.25  # E = LENGTH / BASE, sd of the mean 0.05


def test_copies_of_a_particle_are_one_request_and_each_step_is_one_call_for_all_roots(targets):
    space = Recording(targets(32, seed=5), base=BASE, seed=6)
    scorer = PerfectScorer(space)
    particle_filter(space, scorer, n=8, temperature=0.1, rngs=_rngs(32))
    assert space.expand_calls == scorer.calls == LENGTH  # steps, not steps x roots
    for call in space.requests:
        nodes = [id(s) for s, _ in call]  # a node's state object (equal digits may be two nodes)
        assert len(nodes) == len(set(nodes))  # a node drawn k times is expanded once, k ways
        for root in range(32):
            assert sum(k for s, k in call if s.root == root) <= 8


def test_the_reference_particle_survives_every_resampling_in_particle_gibbs(targets):
    # A verifier that prefers wrong digits: the reference drawn after iteration 1 scores low, yet it
    # is in the final particle set of iteration 2 (conditional SMC keeps it in its slot).
    n = 6
    space = DigitSpace(targets(40, seed=7), base=BASE, seed=8)
    contrary = FunctionVerifier.of_items(lambda s: 1.0 - space.best_value(s) / len(space.targets[s.root]))
    iterations: list[int] = []
    results = particle_gibbs(space, contrary, n=n, iterations=2, temperature=0.05, rngs=_rngs(40),
                             before_iteration=iterations.append)
    assert iterations == [0, 1]
    for r in results:
        starts = [node.id for node in r.nodes if node.parent is None]
        assert len(starts) == n + (n - 1)  # iteration 2 samples n - 1 first steps beside the reference's
        boundary = starts[n]  # first node of iteration 2
        assert len(r.leaves) == 2 * n  # the final particles of both iterations, the last one's last
        old = {leaf for leaf in r.leaves[n:] if leaf < boundary}
        assert len(old) == 1  # the reference trajectory's final node (other particles may copy it)
        [ref] = old
        node = r.nodes[ref]
        while node.parent is not None:  # the whole trajectory is iteration 1's
            node = r.nodes[node.parent]
            assert node.id < boundary
        assert r.events["references_kept"] == 1


def test_bad_arguments_are_refused(targets):
    space = DigitSpace(targets(2), base=BASE)
    with pytest.raises(ValueError, match=r"^Particle Gibbs needs n >= 2 particles per iteration: one is the reference$"):
        particle_gibbs(space, Constant(), n=1, iterations=2)
    with pytest.raises(ValueError, match=r"^reference_weight must be final or prefix, got 'middle'$"):
        particle_gibbs(space, Constant(), n=2, reference_weight="middle")
    with pytest.raises(ValueError, match="one per root"):
        particle_filter(space, Constant(), n=4, rngs=_rngs(1))
    with pytest.raises(ValueError, match=r"^n must be >= 1, got 0$"):
        particle_filter(space, Constant(), n=0)
    with pytest.raises(ValueError, match=r"^iterations must be >= 1, got 0$"):
        particle_gibbs(space, Constant(), n=2, iterations=0)


def test_a_bad_weighting_is_refused_before_anything_is_generated_and_the_default_generators_repeat(targets):
    space = Recording(targets(3), base=BASE)
    with pytest.raises(ValueError, match="weighting must be"):
        particle_filter(space, Constant(), n=4, weighting="odds")
    with pytest.raises(ValueError, match="temperature"):
        particle_gibbs(space, Constant(), n=4, temperature=0.0)
    assert space.requests == []
    runs = [particle_filter(DigitSpace(targets(3), base=BASE), Constant(), n=4) for _ in range(2)]
    assert [[leaf.state for leaf in r.leaf_nodes] for r in runs[0]] == [[leaf.state for leaf in r.leaf_nodes] for r in runs[1]]
    assert [r.notes for r in runs[0]] == [r.notes for r in runs[1]]


def test_particle_gibbs_runs_two_iterations_by_default_and_two_particles_are_enough(targets):
    space = DigitSpace(targets(3), base=BASE)
    for r in particle_gibbs(space, Constant(), n=2, rngs=_rngs(3)):  # a reference and one free particle
        assert len(r.leaves) == 4 and {rec["iteration"] for rec in r.notes["particles"]} == {0, 1}
    for r in particle_gibbs(space, Constant(), n=3, iterations=3, rngs=_rngs(3)):
        assert r.events["references_kept"] == 2  # every iteration after the first keeps its reference


def test_a_space_that_never_ends_is_refused_after_max_steps(endless):
    with pytest.raises(RuntimeError, match="after 7 steps"):
        particle_filter(endless(["0"]), Constant(), n=2, max_steps=7)
    # The toy strings finish in LENGTH steps: LENGTH resamplings are enough, one fewer is not.
    [r] = particle_filter(DigitSpace(["01230"], base=BASE), Constant(), n=2, max_steps=LENGTH)
    assert r.events["resamples"] == LENGTH and len(r.leaves) == 2
    with pytest.raises(RuntimeError, match=f"after {LENGTH - 1} steps"):
        particle_filter(DigitSpace(["01230"], base=BASE), Constant(), n=2, max_steps=LENGTH - 1)


class Barren(DigitSpace):
    """A toy space whose roots have no children: every expansion comes back empty."""

    def expand(self, states, counts):
        return [[] for _ in states]


def test_a_root_without_children_ends_each_iteration_with_no_particles_and_says_so_each_time():
    [r] = particle_gibbs(Barren(["01"], base=BASE), Constant(), n=4, iterations=3)
    assert r.events["no_children"] == 3 and r.leaves == () and "resamples" not in r.events


class Sparse(DigitSpace):
    """A toy space that returns at most one child of a partial string (a root gets all it asks for),
    and counts per root the children it did not return."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.missing: Counter[int] = Counter()

    def expand(self, states, counts):
        out = []
        for state, kids in zip(states, super().expand(states, counts), strict=True):
            out.append(kids if not state.digits else kids[:1])
            self.missing[state.root] += len(kids) - len(out[-1])
        return out


def test_children_an_expansion_does_not_return_are_counted_per_root(targets):
    space = Sparse(targets(5, seed=1), base=BASE)
    results = particle_filter(space, Constant(), n=6, rngs=_rngs(5))
    assert [r.events["no_children"] for r in results] == [space.missing[i] for i in range(5)]
    assert all(space.missing[i] > 1 for i in range(5))
    assert all(len(r.leaves) == 6 for r in results)  # a particle left without its child waits and goes on

def test_zero_draws_are_no_draws_whatever_the_weights():
    rng = random.Random(0)
    assert resample([], 0, rng) == [] and resample([0.0, 0.0], 0, rng) == []
    assert rng.random() == random.Random(0).random()  # and they take nothing from the generator


# --- config ----------------------------------------------------------------------------------------


def test_particle_gibbs_n_counts_all_iterations_and_the_message_says_what_to_change():
    cfg = ParticleGibbsConfig(n=16, iterations=4)
    assert cfg.particles == 4 and cfg.label == "particle_gibbs@16,iterations=4"
    with pytest.raises(ValidationError, match=r"n \(6\) must be a multiple of iterations \(4\)"):
        ParticleGibbsConfig(n=6, iterations=4)
    with pytest.raises(ValidationError, match="at least 2 particles"):
        ParticleGibbsConfig(n=3, iterations=3)
    assert ParticleFilteringConfig(n=8, temperature=0.5).label == "particle_filtering@8,temperature=0.5"
    assert ParticleFilteringConfig(n=8, weighting="softmax").label == "particle_filtering@8,weighting=softmax"
    assert ParticleGibbsConfig(n=8, reference_weight="prefix").label == "particle_gibbs@8,reference_weight=prefix"
    assert STRATEGIES.load("particle_filtering") is ParticleFiltering
    assert STRATEGIES.load("particle_gibbs") is ParticleGibbs


# --- the strategies end to end ---------------------------------------------------------------------


def _strategy(cls, model, seed=1, **cfg):
    config = cls.config_class(verifier="arithmetic", **cfg)
    return cls(config, model, MATH_PROMPT.render, SamplingConfig(max_tokens=256), seed=seed)


def test_particle_filtering_repairs_slips_a_single_path_keeps(step_model, addition_problems):
    problems = addition_problems(40, seed=4)

    def accuracy(solutions):
        return sum(s.answer == p.answer for s, p in zip(solutions, problems, strict=True)) / len(problems)

    single = _strategy(ParticleFiltering, step_model(slip=0.4, seed=5), n=1).solve(problems)
    model = step_model(slip=0.4, seed=5)
    pf = _strategy(ParticleFiltering, model, n=8, temperature=0.1).solve(problems)
    assert accuracy(single) < 0.5 and accuracy(pf) > 0.85
    # every step: one generator call for all 40 problems (no forced answers here)
    assert len(model.calls) == 4 and len({r.key for r in model.calls[1]}) == 40
    for sol in pf:
        assert len(sol.trace.samples) == 8 and sol.trace.events["resamples"] >= 3
    assert sum(s.usage.completion_tokens for s in pf) == model.usage.completion_tokens  # every token on a bill


def test_particle_gibbs_iterations_draw_new_samples_and_keep_the_reference(step_model, addition_problems):
    problems = addition_problems(10, seed=2)
    model = step_model(slip=0.5, seed=3)
    sols = _strategy(ParticleGibbs, model, n=8, iterations=2, temperature=0.5).solve(problems)
    # iteration 2's first steps are new draws: the root's request seeds differ between iterations
    roots = [r for call in model.calls for r in call if not r.continuation]
    assert len(roots) == 20 and len({(r.key, r.seed) for r in roots}) == 20
    for sol in sols:
        assert sol.trace.events["references_kept"] == 1 and len(sol.trace.samples) == 8
        assert sol.answer is not None


@pytest.mark.parametrize("kind", ["particle_filtering", "particle_gibbs"])
def test_tts_eval_runs_it_on_the_scripted_backend(kind, tmp_path):
    out = tmp_path / kind
    r = CliRunner(env={"COLUMNS": "220"}).invoke(app, ["eval", "--backend", "scripted", "--benchmark", "demo",
                                                       "--limit", "4", "-s", kind, "-n", "4", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert f"{kind}" in r.output and "resamples" in r.output
    assert len((out / "results.jsonl").read_text().splitlines()) == 4


def test_runs_on_the_scripted_backend_with_the_judge_verifier():
    problems = [Problem(f"p{i}", f"What is {i} + {i}?", str(2 * i)) for i in range(6)]
    gen = ScriptedGenerator.for_problems(problems, accuracy=0.6, seed=3)
    strategy = ParticleFiltering(ParticleFilteringConfig(n=4, max_depth=3, verifier="judge"), gen,
                                 MATH_PROMPT.render, SamplingConfig(max_tokens=128), seed=2)
    sols = strategy.solve(problems)
    assert [s.problem_id for s in sols] == [p.id for p in problems]
    assert all(len(s.trace.samples) == 4 and s.usage.completion_tokens > 0 for s in sols)



def test_tts_eval_takes_force_answer_false_and_forces_no_answer(tmp_path):
    import json

    runs = {}
    for setting in ("true", "false"):
        out = tmp_path / setting
        r = CliRunner(env={"COLUMNS": "220"}).invoke(app, [
            "eval", "--backend", "scripted", "--benchmark", "demo", "--limit", "4", "-s", "particle_filtering",
            "-n", "4", "--set", "max_depth=1", "--set", f"force_answer={setting}", "--out", str(out)])
        assert r.exit_code == 0, r.output
        runs[setting] = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert {row["config"] for row in runs["false"]} == {"particle_filtering@4,max_depth=1,force_answer=False"}
    assert {row["config"] for row in runs["true"]} == {"particle_filtering@4,max_depth=1"}  # the default goes unsaid
    # max_depth=1: every path that did not state an answer in its first step must stop there.
    stopped = [row for row in runs["false"] if row["trace"]["events"].get("stopped_depth")]
    assert stopped and not any(k.startswith("forced_") for row in runs["false"] for k in row["trace"]["events"])
    assert all(s["finish_reason"] != "forced" for row in runs["false"] for s in row["trace"]["samples"])
    assert any(row["trace"]["events"].get("forced_depth") for row in runs["true"])


# --- the strategies pass their settings and seeds to the search ---------------------------------------


def _drawn(solution) -> list[list[int]]:
    """How often each particle was drawn at every resampling of one problem (the trace's record)."""
    return [record["drawn"] for record in solution.trace.notes["particles"]]


@pytest.mark.parametrize("cls, settings", [(ParticleFiltering, {"n": 6}), (ParticleGibbs, {"n": 8, "iterations": 2})])
def test_a_problems_resampling_depends_on_the_run_seed_the_problem_and_not_its_place(cls, settings, step_model):
    # A model that never slips writes the same steps whatever the seed, so every difference in the
    # draws is the resampling's own generator: seeded by the run seed, the problem and the config.
    same = "What is 1 + 2 + 3 + 4?"
    problems = [Problem(f"p{i}", same, "10") for i in range(4)]

    def run(order, seed=1):
        return {s.problem_id: _drawn(s)
                for s in _strategy(cls, step_model(slip=0.0), seed=seed, **settings).solve(order)}

    first = run(problems)
    assert run(problems[::-1]) == first  # the place in the batch changes nothing
    assert run(problems) == first  # a run repeats exactly
    assert len({str(d) for d in first.values()}) > 1  # equal questions, different problems: their own draws
    other = run(problems, seed=2)
    assert any(other[p.id] != first[p.id] for p in problems)  # another run seed draws anew


def _text_score() -> FunctionVerifier:
    """A score of a partial solution that changes with every step: a fixed pseudo-random number of its text."""
    return FunctionVerifier.of_items(lambda item: random.Random("/".join(item.steps)).random())


@pytest.mark.parametrize("cls, settings", [
    (ParticleFiltering, {"n": 6, "weighting": "softmax", "temperature": 0.5}),
    (ParticleGibbs, {"n": 8, "iterations": 2, "weighting": "proportional", "temperature": 0.5,
                     "reference_weight": "prefix"}),
    (ParticleGibbs, {"n": 8, "iterations": 2, "weighting": "softmax", "reference_weight": "final"})])
def test_every_resampling_weighs_the_verifiers_scores_by_the_configs_settings(cls, settings, step_model,
                                                                             addition_problems):
    config = cls.config_class(verifier="arithmetic", **settings)
    strategy = cls(config, step_model(slip=0.3, seed=5), MATH_PROMPT.render, SamplingConfig(max_tokens=256), seed=1,
                   verifier=_text_score())
    particles = getattr(config, "particles", config.n)
    for sol in strategy.solve(addition_problems(3, seed=1)):
        scores = {node["id"]: node["score"] for node in sol.trace.tree}
        assert all(0.0 <= s <= 1.0 for s in scores.values())  # every node scored by the verifier, none failed
        records = sol.trace.notes["particles"]
        iterations = getattr(config, "iterations", 1)
        for it in range(iterations):  # one record per resampling, steps counted from 1 in each iteration
            steps = [r["step"] for r in records if r["iteration"] == it]
            assert steps == list(range(1, len(steps) + 1)) and len(steps) >= 2
        assert len(records) == sol.trace.events["resamples"]
        for r in records:
            assert sum(r["drawn"]) == particles - (1 if r["iteration"] else 0)  # the reference is never drawn
            want = [scores[i] for i in r["nodes"]]
            if r["iteration"] and config.reference_weight == "final":
                want[0] = sol.trace.scores[particles]  # the reference (the 2nd iteration's first candidate): its final score
            assert r["weights"] == [round(w, 6) for w in particle_weights(want, config.temperature, config.weighting)]


def test_particle_gibbs_reads_the_answer_and_its_index_off_the_last_iteration():
    problems = [Problem("p0", "What is 1 + 1?", "2")]
    gen = ScriptedGenerator.for_problems(problems, accuracy=0.5, seed=1)

    def select(samples, scores, **settings):
        strategy = ParticleGibbs(ParticleGibbsConfig(n=6, iterations=2, verifier="arithmetic", **settings), gen,
                                 MATH_PROMPT.render, SamplingConfig(max_tokens=64), seed=1)
        events: Counter[str] = Counter()
        return strategy._select(tuple(samples), tuple(scores), events), events

    answered = [Sample(text=a, answer=a) for a in ["9", "9", "7", "3", "2", "5"]]
    (answer, confidence, _, index), _ = select(answered, (0.99, 0.2, 0.3, 0.4, 0.8, 0.1))
    assert (answer, confidence, index) == ("2", 0.8, 4)  # the last iteration's second: candidate 3 + 1
    unanswered = answered[:3] + [Sample(text="no answer", answer=None)] * 3
    assert select(unanswered, (0.99, 0.2, 0.3, 0.4, 0.8, 0.1))[0] == (None, 0.0, {}, None)
    # No valid score to weigh a vote by: a plain vote, on record in the events, in either reading.
    for answer_from in ("last_iteration", "all_iterations"):
        (answer, _, votes, _), events = select(answered, [-1.0] * 6, select="weighted_vote", answer_from=answer_from)
        assert events["unweighted_vote"] == 1
        assert votes == ({"3": 1, "2": 1, "5": 1} if answer_from == "last_iteration"
                         else {"9": 2, "7": 1, "3": 1, "2": 1, "5": 1})


def test_two_particle_gibbs_configs_of_one_run_never_resend_each_others_seeds(step_model, addition_problems):
    # Every iteration's seeds come from the config's label (and the iteration), so two configs of
    # one run draw their own samples, not copies of each other's.
    seeds = []
    for temperature in (0.5, 1.0):
        model = step_model(slip=0.5, seed=3)
        _strategy(ParticleGibbs, model, n=8, iterations=2, temperature=temperature).solve(addition_problems(3, seed=2))
        seeds.append({r.seed for call in model.calls for r in call})
    assert len(seeds[0]) >= 6 and not seeds[0] & seeds[1]
