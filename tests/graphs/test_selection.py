"""GenSelect (tournament of selectors) and recursive self-aggregation on the graph executor."""

from __future__ import annotations

import math
import re

from tests.fakes import Rewriting
from tts.backends.base import Completion, GenerationResult, request_usage
from tts.backends.function import RecordingGenerator
from tts.backends.scripted import ScriptedGenerator
from tts.benchmarks.demo import DEMO_PROMPT, generate_problems
from tts.config import SamplingConfig
from tts.graphs.selection import (
    Aggregate,
    AggregateConfig,
    GenSelect,
    GenSelectConfig,
    genselect_graph,
)

PROBLEMS = generate_problems(12)
GOLD = {p.question: p.answer for p in PROBLEMS}
SAMPLING = SamplingConfig(max_tokens=128)


def _select(req, result) -> GenerationResult | None:
    """A selector that knows the gold answer: for a selection prompt its first token is the number
    of the first shown solution whose boxed answer is right (else 1)."""
    text = req.messages[-1].content
    if "Which solution is correct?" not in text:
        return None
    question = text.split("Problem:\n", 1)[1].split("\n\n", 1)[0]
    shown = re.findall(r"Solution (\d+):\n(.*?)(?=\n\nSolution \d+:|\n\nCompare)", text, re.DOTALL)
    pick = next((int(i) for i, body in shown if f"boxed{{{GOLD[question]}}}" in body), 1)
    comps = tuple(Completion(str(pick), 1, -0.1, "stop", first_token_top_logprobs={str(pick): -0.1})
                  for _ in range(req.n))
    return GenerationResult(comps, request_usage(40, 0, [1] * req.n, 0.0))


def test_the_tournament_has_log_group_levels_and_a_right_candidate_wins_when_there_is_one():
    assert len(genselect_graph(GenSelectConfig(n=4, group=4)).nodes) == 2  # one selection call
    assert len(genselect_graph(GenSelectConfig(n=16, group=4)).nodes) == 3  # 16 -> 4 -> 1
    assert len(genselect_graph(GenSelectConfig(n=17, group=4)).nodes) == 4  # 17 -> 5 -> 2 -> 1
    gen = Rewriting(ScriptedGenerator.for_problems(PROBLEMS, accuracy=0.3, seed=2), after=_select)
    sols = GenSelect(GenSelectConfig(n=16, group=4), gen, DEMO_PROMPT.render, SAMPLING).solve(PROBLEMS)
    # per problem: 4 first-level groups + 1 final = 5 selection requests
    assert sum("Which solution is correct?" in r.messages[-1].content for r in gen.requests) == 5 * len(PROBLEMS)
    for sol, p in zip(sols, PROBLEMS, strict=True):
        assert sol.trace.strategy == "genselect" and len(sol.trace.samples) == 16
        has_right = any(s.answer == p.answer for s in sol.trace.samples)
        assert (sol.answer == p.answer) == has_right
        assert sol.trace.samples[sol.trace.selected].answer == sol.answer
        assert sol.usage.calls == 1 + 5


def test_aggregation_rounds_show_random_subsets_and_cost_n_per_round():
    gen = RecordingGenerator(ScriptedGenerator.for_problems(PROBLEMS, accuracy=0.4, seed=1))
    cfg = AggregateConfig(n=6, rounds=2, subset=3)
    sols = Aggregate(cfg, gen, DEMO_PROMPT.render, SAMPLING).solve(PROBLEMS)
    aggregations = [r for r in gen.requests if "Solutions from several solvers" in r.messages[-1].content]
    assert len(aggregations) == 2 * 6 * len(PROBLEMS) and all(r.n == 1 for r in aggregations)
    assert all(r.messages[-1].content.count("Solution ") == 3 for r in aggregations)
    # subsets differ between the requests of one problem and round
    first = [r.messages[-1].content for r in aggregations if r.key == PROBLEMS[0].id][:6]
    assert len(set(first)) > 1
    for sol in sols:
        assert sol.trace.strategy == "aggregate" and len(sol.trace.samples) == 6 * 3
        assert sol.usage.calls == 1 + 12
        last = [s.answer for s in sol.trace.samples[-6:]]
        if sol.answer is not None:
            assert last.count(sol.answer) == max(last.count(a) for a in last if a is not None)
    assert math.isclose(sum(s.usage.completion_tokens for s in sols),
                        sum(x.completion_tokens for s in sols for x in s.trace.samples))
