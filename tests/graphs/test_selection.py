"""GenSelect (tournament of selectors) and recursive self-aggregation on the graph executor."""

from __future__ import annotations

import math
import re

import pytest

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
from tts.search.base import StrategyInputError
from tts.types import Budget, RequestShape

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
    assert len(genselect_graph(GenSelectConfig(n=1)).nodes) == 2  # one candidate: a selector that passes it on
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


# What a user reads before and around a run: the cost hook's planned requests (``tts cost``), the
# sampling, temperatures and seeds the requests carry, and the refusal of a per-problem budget.

def _selections(gen) -> list:
    return [r for r in gen.requests if "Which solution is correct?" in r.messages[-1].content]


def _run_genselect(cfg: GenSelectConfig, problems=PROBLEMS[:1], **kw) -> Rewriting:
    gen = Rewriting(ScriptedGenerator.for_problems(PROBLEMS, accuracy=0.3, seed=2), after=_select)
    GenSelect(cfg, gen, DEMO_PROMPT.render, SAMPLING, **kw).solve(problems)
    return gen


def test_genselect_cost_hook_prices_the_candidates_then_one_short_selection_per_group():
    # default group 4: 16 -> 4 -> 1 is 4 + 1 selection prompts, each showing 4 candidates
    assert GenSelect.planned_requests(16, prompt_tokens=100, gen_tokens=50) == (
        [RequestShape(100, 0, (50,) * 16)] + [RequestShape(100 + 4 * 50, 0, (4,))] * 5)
    # 8 -> 2 -> 1: 2 + 1 selections; only the candidates' prompt is cached
    assert GenSelect.planned_requests(8, 100, 50, cached_tokens=30) == (
        [RequestShape(100, 30, (50,) * 8)] + [RequestShape(300, 0, (4,))] * 3)
    assert GenSelect.planned_requests(1, 100, 50) == [RequestShape(100, 0, (50,))]  # nothing to select
    # 5 -> 2 -> 1: the fifth candidate's group of one goes on without a request
    assert GenSelect.planned_requests(5, 100, 50) == [RequestShape(100, 0, (50,) * 5)] + [RequestShape(300, 0, (4,))] * 2


def test_genselect_cost_hook_plans_the_requests_a_default_run_sends():
    for n in (2, 4, 5, 8, 9, 16, 17):
        gen = _run_genselect(GenSelectConfig(n=n))
        planned = GenSelect.planned_requests(n, 100, 50)
        assert [len(s.completion_tokens) for s in planned] == [r.n for r in gen.requests], n
        assert all(r.max_tokens == 4 for r in _selections(gen))


def test_aggregate_cost_hook_prices_the_population_then_n_aggregations_per_round():
    # defaults: one round, subsets of 3 candidates in each aggregation prompt
    assert Aggregate.planned_requests(6, prompt_tokens=100, gen_tokens=50) == (
        [RequestShape(100, 0, (50,) * 6)] + [RequestShape(100 + 3 * 50, 0, (50,))] * 6)
    assert Aggregate.planned_requests(2, 100, 50, cached_tokens=30) == (
        [RequestShape(100, 30, (50,) * 2)] + [RequestShape(250, 0, (50,))] * 2)
    gen = RecordingGenerator(ScriptedGenerator.for_problems(PROBLEMS, accuracy=0.4, seed=1))
    Aggregate(AggregateConfig(n=4), gen, DEMO_PROMPT.render, SAMPLING).solve(PROBLEMS[:1])
    assert [len(s.completion_tokens) for s in Aggregate.planned_requests(4, 100, 50)] == [r.n for r in gen.requests]


def test_selection_votes_sample_at_their_temperature_and_one_vote_is_greedy():
    for r in _selections(_run_genselect(GenSelectConfig(n=4, group=4))):
        assert (r.n, r.temperature) == (1, 0.0)
    sels = _selections(_run_genselect(GenSelectConfig(n=4, group=4, votes=2, select_temperature=0.5)))
    assert sels and all((r.n, r.temperature) == (2, 0.5) for r in sels)


def test_the_runs_sampling_reaches_the_candidates_and_aggregate_temperature_the_aggregations():
    sampling = SamplingConfig(max_tokens=96, temperature=0.9, top_p=0.8)
    for temp, expected in ((0.2, 0.2), (None, 0.9)):
        gen = RecordingGenerator(ScriptedGenerator.for_problems(PROBLEMS, accuracy=0.4, seed=1))
        Aggregate(AggregateConfig(n=3, aggregate_temperature=temp), gen, DEMO_PROMPT.render, sampling).solve(PROBLEMS[:1])
        first, *aggregations = gen.requests
        assert (first.n, first.temperature, first.top_p, first.max_tokens) == (3, 0.9, 0.8, 96)
        assert len(aggregations) == 3 and all((r.temperature, r.max_tokens) == (expected, 96) for r in aggregations)
    gen = Rewriting(ScriptedGenerator.for_problems(PROBLEMS, accuracy=0.3, seed=2), after=_select)
    GenSelect(GenSelectConfig(n=4), gen, DEMO_PROMPT.render, sampling).solve(PROBLEMS[:1])
    assert (gen.requests[0].temperature, gen.requests[0].max_tokens) == (0.9, 96)


def test_the_run_seed_sets_the_request_seeds_and_aggregation_subsets():
    def run(**kw):
        gen = RecordingGenerator(ScriptedGenerator.for_problems(PROBLEMS, accuracy=0.4, seed=1))
        Aggregate(AggregateConfig(n=6, subset=3), gen, DEMO_PROMPT.render, SAMPLING, **kw).solve(PROBLEMS[:2])
        return [(r.seed, r.messages[-1].content) for r in gen.requests]

    assert run() == run(seed=0)  # the default seed is 0
    assert run(seed=5) == run(seed=5) != run(seed=0)


def test_a_per_problem_budget_is_refused_with_what_to_do_instead():
    gen = RecordingGenerator(ScriptedGenerator.for_problems(PROBLEMS, accuracy=0.4, seed=1))
    strategy = Aggregate(AggregateConfig(n=2), gen, DEMO_PROMPT.render, SAMPLING)
    assert [s.problem_id for s in strategy.solve(PROBLEMS[:2], budgets=[None, None])] == [p.id for p in PROBLEMS[:2]]
    with pytest.raises(StrategyInputError, match=r"^aggregate runs a fixed graph and cannot honour a per-problem "
                       r"budget; lower n instead, or use self_consistency for budgeted runs$"):
        strategy.solve(PROBLEMS[:2], budgets=[None, Budget(samples=4)])
