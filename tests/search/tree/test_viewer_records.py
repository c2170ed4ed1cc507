"""What a step-wise search records for a viewer (``tts show --html``): each node's own step tokens,
the chosen candidate's node, and particle filtering's weights at every resampling."""

from __future__ import annotations

import pytest

from tts.config import SamplingConfig
from tts.prompts import MATH_PROMPT
from tts.registry import STRATEGIES


def _solve(kind, step_model, addition_problems, addition_checker, **settings):
    cls = STRATEGIES.load(kind)
    strategy = cls(cls.config_class(n=8, verifier="logprob", **settings), step_model(slip=0.3, seed=4, empty=0.1),
                   MATH_PROMPT.render, SamplingConfig(max_tokens=60), seed=3, verifier=addition_checker())
    return strategy.solve(addition_problems(3, seed=1))


@pytest.mark.parametrize("kind", ["beam", "mcts", "particle_filtering"])
def test_the_chosen_node_ends_the_chosen_path_and_its_tokens_add_up(kind, step_model, addition_problems,
                                                                    addition_checker):
    for sol in _solve(kind, step_model, addition_problems, addition_checker):
        tree = {n["id"]: n for n in sol.trace.tree}
        chosen = tree[sol.trace.notes["chosen_node"]]
        assert chosen["answer"] == sol.answer
        path_tokens, at = 0, chosen
        while at is not None:
            path_tokens += at["tokens"]
            at = tree.get(at["parent"])
        sample = sol.trace.samples[sol.trace.selected]
        # a step-wise node's tokens are its own step's: along the path they add up to the candidate's
        assert path_tokens == sample.completion_tokens
        assert all(n["tokens"] >= 0 for n in tree.values())


def test_ab_mcts_records_its_chosen_node_and_each_answers_tokens():
    from tts.backends.scripted import ScriptedGenerator
    from tts.types import Problem

    problems = [Problem(f"p{i}", f"What is {i} + {i}?", str(2 * i)) for i in range(3)]
    cls = STRATEGIES.load("ab_mcts")
    strategy = cls(cls.config_class(n=6), ScriptedGenerator.for_problems(problems, accuracy=0.5, seed=1),
                   MATH_PROMPT.render, seed=3)
    for sol in strategy.solve(problems):
        chosen = sol.trace.tree[sol.trace.notes["chosen_node"]]
        assert chosen["id"] == sol.trace.selected and chosen["answer"] == sol.answer
        assert [n["tokens"] for n in sol.trace.tree] == [s.completion_tokens for s in sol.trace.samples]


@pytest.mark.parametrize("kind", ["particle_filtering", "particle_gibbs"])
def test_particle_filtering_records_every_resampling(kind, step_model, addition_problems, addition_checker):
    for sol in _solve(kind, step_model, addition_problems, addition_checker):
        steps = sol.trace.notes["particles"]
        assert len(steps) == sol.trace.events["resamples"]
        particles = 8 if kind == "particle_filtering" else 4
        tree = {n["id"]: n for n in sol.trace.tree}
        for s in steps:
            assert sum(s["weights"]) == pytest.approx(1.0, abs=1e-5) and len(s["weights"]) == len(s["nodes"])
            # every draw is recorded (a Gibbs reference keeps its slot without a draw) and marked kept
            assert sum(s["drawn"]) == particles - (1 if s["iteration"] else 0)
            assert all(tree[node]["kept"] for node, d in zip(s["nodes"], s["drawn"], strict=True) if d)
        assert {s["iteration"] for s in steps} == set(range(1 if kind == "particle_filtering" else 2))
