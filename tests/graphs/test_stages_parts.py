"""The multi-stage planner's parts on hand-made evaluations, each value worked out by hand.

The graph is examples/graphs/multi_stage.yaml's shape: stage ``steps`` has two nodes (step_1,
step_2), stage ``answer`` one (answer), and the decomposer is in no stage. So a split
{steps: s, answer: a} costs ``2 s + a`` samples, and the planner's prediction is
``a0 * (g_steps(s) / a0) * (g_answer(a) / a0)`` with every accuracy smoothed as (k + 1) / (n + 2)."""

from __future__ import annotations

import logging

import pytest

from tts.graphs.graph import GraphError, load_graph_file, parse_graph
from tts.graphs.stages import (
    SplitStageEvaluator,
    StageCurve,
    StageEvaluation,
    even_split,
    measure_curves,
    plan_split,
    with_budgets,
)
from tts.types import Problem, Solution, Trace, Usage

NODES = ("decompose", "step_1", "step_2", "answer")


def spec():
    graph = load_graph_file("examples/graphs/multi_stage.yaml")
    assert list(graph.stages) == ["steps", "answer"] and graph.stages["steps"].nodes == ("step_1", "step_2")
    return graph


def ev(correct, problems=8, **tokens):
    return StageEvaluation(correct, problems, tokens)


# Reference: 4 of 8 right (smoothed 5/10 = 0.5); the decomposer's 10 tokens are the unstaged part.
REF = ev(4, decompose=10.0, step_1=20.0, step_2=20.0, answer=50.0)
STEPS_2 = ev(6, decompose=10.0, step_1=35.0, step_2=45.0, answer=50.0)  # smoothed 7/10
ANSWER_3 = ev(5, decompose=10.0, step_1=20.0, step_2=20.0, answer=140.0)  # smoothed 6/10


def curves(answer_3=ANSWER_3, steps_2=STEPS_2, ref=REF):
    return (StageCurve("steps", (1, 2), (ref, steps_2), ("step_1", "step_2")),
            StageCurve("answer", (1, 3), (ref, answer_3), ("answer",)))


def test_an_evaluation_reads_accuracy_smoothed_accuracy_and_tokens():
    e = ev(3, 4, a=10.0, b=2.5)
    assert e.accuracy == 0.75
    assert e.smoothed == pytest.approx(4 / 6)
    assert e.tokens_per_problem == 12.5
    assert ev(0, 3).smoothed == pytest.approx(1 / 5) and ev(3, 3).smoothed == pytest.approx(4 / 5)


def test_a_curve_sums_only_its_own_nodes_tokens_and_a_missing_node_counts_zero():
    curve = StageCurve("steps", (1, 2), (REF, ev(6, decompose=10.0, step_1=35.0)), ("step_1", "step_2"))
    assert curve.tokens(1) == 40.0  # 20 + 20, not the decomposer's or the answer's
    assert curve.tokens(2) == 35.0  # step_2 missing from the trace: 0


def test_with_budgets_writes_the_split_as_a_budget_and_shares():
    planned = with_budgets(spec(), {"steps": 3, "answer": 2})
    # 3 samples on each of two step nodes and 2 on the answer: a budget of 8, shares 6/8 and 2/8
    assert planned.budget == 8
    assert planned.stages["steps"].share == 0.75 and planned.stages["answer"].share == 0.25
    assert planned.stages["steps"].nodes == ("step_1", "step_2")
    assert planned.stage_samples() == {"step_1": 3, "step_2": 3, "answer": 2}
    resolved = planned.resolved()
    assert [resolved.nodes[n].n for n in NODES] == [1, 3, 3, 2]
    # everything else of the graph is kept
    assert planned.name == "multi_stage" and planned.models == {"qwen2.5-coder-1.5b": {}}
    assert planned.nodes["answer"].model == "qwen2.5-coder-1.5b"
    assert planned.nodes["step_2"].inputs == ("decompose", "step_1") and planned.nodes["decompose"].max_parts == 2


def test_with_budgets_resets_a_staged_nodes_own_n_and_keeps_an_unstaged_ones():
    data = {"name": "two", "stages": {"s": {"nodes": ["gen"], "share": 1.0}},
            "nodes": {"gen": {"role": "generator", "n": 5}, "judge": {"role": "reviser", "n": 3, "inputs": ["gen"]}}}
    planned = with_budgets(parse_graph(data), {"s": 2})
    assert planned.budget == 2 and planned.stages["s"].share == 1.0
    resolved = planned.resolved()
    assert resolved.nodes["gen"].n == 2 and resolved.nodes["judge"].n == 3


def test_with_budgets_refuses_a_graph_without_stages_and_a_wrong_set_of_stages():
    no_stages = parse_graph({"name": "plain", "nodes": {"g": {"role": "generator"}}})
    with pytest.raises(GraphError) as err:
        with_budgets(no_stages, {})
    assert str(err.value) == "graph 'plain' has no stages: section; name its stages to split a budget over them"
    with pytest.raises(GraphError) as err:
        with_budgets(spec(), {"answer": 1})
    assert str(err.value) == "budgets name stages ['answer'], the graph has ['answer', 'steps']"
    with pytest.raises(GraphError) as err:
        with_budgets(spec(), {"answer": 1, "steps": 1, "extra": 1})
    assert str(err.value) == "budgets name stages ['answer', 'extra', 'steps'], the graph has ['answer', 'steps']"


class Recorder:
    """An evaluator that returns a fixed evaluation per split and records the splits it was asked."""

    def __init__(self, results):
        self.results, self.asked = results, []

    def __call__(self, graph):
        samples = graph.stage_samples()
        split = (samples["step_1"], samples["answer"])
        assert samples["step_2"] == samples["step_1"]
        self.asked.append(split)
        return self.results[split]


def test_measure_curves_moves_one_stage_at_a_time_from_the_smallest_budgets(caplog):
    evaluate = Recorder({(1, 1): REF, (2, 1): STEPS_2, (4, 1): ev(7, step_1=60.0), (1, 3): ANSWER_3})
    # the grids are read sorted and without repeats; a stage name not in the graph is ignored
    with caplog.at_level(logging.INFO, logger="tts.graphs.stages"):
        reference, got = measure_curves(spec(), {"steps": [4, 1, 2, 2], "answer": [3, 1], "other": [9]}, evaluate)
    assert evaluate.asked == [(1, 1), (2, 1), (4, 1), (1, 3)]
    assert reference is REF
    assert [c.stage for c in got] == ["steps", "answer"]
    assert got[0].budgets == (1, 2, 4) and got[1].budgets == (1, 3)
    assert got[0].evaluations[0] is REF and got[0].evaluations[1] is STEPS_2 and got[1].evaluations == (REF, ANSWER_3)
    assert got[0].nodes == ("step_1", "step_2") and got[1].nodes == ("answer",)
    assert [r.getMessage() for r in caplog.records] == [
        "stages: reference {'steps': 1, 'answer': 1} -> accuracy 0.500",
        "stages: steps at 2 -> accuracy 0.750, 80 stage tokens/problem",
        "stages: steps at 4 -> accuracy 0.875, 60 stage tokens/problem",  # step_2 not in the trace: 0
        "stages: answer at 3 -> accuracy 0.625, 140 stage tokens/problem"]


def test_measure_curves_takes_a_grid_of_one_budget_and_refuses_empty_or_zero_grids():
    evaluate = Recorder({(1, 1): REF})
    reference, got = measure_curves(spec(), {"steps": [1], "answer": [1]}, evaluate)
    assert evaluate.asked == [(1, 1)] and [c.evaluations for c in got] == [(REF,), (REF,)]
    for grid in ({"steps": [], "answer": [1]}, {"steps": [0, 2], "answer": [1]}):
        with pytest.raises(GraphError) as err:
            measure_curves(spec(), grid, Recorder({}))
        expected = {s: tuple(sorted(set(g))) for s, g in grid.items()}
        assert str(err.value) == f"every stage needs a grid of budgets >= 1, got {expected}"


def test_plan_split_multiplies_the_stages_gains_and_keeps_what_fits_in_samples():
    plan = plan_split(spec(), REF, curves(), total=7)
    # predictions: (1,1) 0.5; (2,1) 0.5 * 0.7/0.5 = 0.7; (1,3) 0.6; (2,3) 0.5 * 1.4 * 1.2 = 0.84
    # costs in samples: 2 s + a = 3, 5, 5, 7: a total of exactly 7 affords all four
    assert dict(plan.budgets) == {"steps": 2, "answer": 3}
    assert plan.predicted == pytest.approx(0.84) and plan.cost == 7.0 and plan.unit == "samples"
    assert [(dict(b), round(p, 9), c) for b, p, c in plan.options] == [
        ({"steps": 2, "answer": 3}, 0.84, 7.0), ({"steps": 2, "answer": 1}, 0.7, 5.0),
        ({"steps": 1, "answer": 3}, 0.6, 5.0), ({"steps": 1, "answer": 1}, 0.5, 3.0)]
    assert plan.reference is REF and plan.curves == curves()
    assert plan.spec == with_budgets(spec(), {"steps": 2, "answer": 3})
    smaller = plan_split(spec(), REF, curves(), total=6.5)
    assert dict(smaller.budgets) == {"steps": 2, "answer": 1} and smaller.cost == 5.0
    assert [dict(b) for b, _, _ in smaller.options] == [{"steps": 2, "answer": 1}, {"steps": 1, "answer": 3},
                                                        {"steps": 1, "answer": 1}]


def test_a_total_a_rounding_error_below_a_cost_still_affords_it():
    # 7 - 1e-9 + 1e-9 is 7.0 in floating point: the split costing exactly 7 samples fits
    plan = plan_split(spec(), REF, curves(), total=7 - 1e-9)
    assert dict(plan.budgets) == {"steps": 2, "answer": 3} and plan.cost == 7.0


def test_plan_split_in_tokens_adds_the_unstaged_nodes_reference_tokens():
    # fixed: the decomposer's 10; steps 40 at 1, 80 at 2; answer 50 at 1, 140 at 3
    plan = plan_split(spec(), REF, curves(), total=230, unit="tokens")
    assert dict(plan.budgets) == {"steps": 2, "answer": 3} and plan.cost == 230.0 and plan.unit == "tokens"
    assert sorted(c for _, _, c in plan.options) == [100.0, 140.0, 190.0, 230.0]
    under = plan_split(spec(), REF, curves(), total=200, unit="tokens")
    assert dict(under.budgets) == {"steps": 2, "answer": 1} and under.cost == 140.0


def test_plan_split_takes_the_cheaper_of_two_equal_predictions():
    tie = ev(6, decompose=10.0, step_1=20.0, step_2=20.0, answer=140.0)  # the answer at 3 as good as the steps at 2
    plan = plan_split(spec(), REF, curves(answer_3=tie), total=200, unit="tokens")
    # (2,1) and (1,3) both predict 0.5 * 1.4 = 0.7; they cost 140 and 190 tokens
    assert dict(plan.budgets) == {"steps": 2, "answer": 1} and plan.cost == 140.0
    assert [c for _, _, c in plan.options] == [140.0, 190.0, 100.0]


def test_a_prediction_above_one_is_held_at_one():
    low = ev(0, decompose=10.0, step_1=20.0, step_2=20.0, answer=50.0)  # smoothed 1/10
    full = ev(8, decompose=10.0, step_1=20.0, step_2=20.0, answer=50.0)  # smoothed 9/10
    plan = plan_split(spec(), low, curves(answer_3=full, steps_2=full, ref=low), total=7)
    # 0.1 * 9 * 9 = 8.1, held at 1; (2,1) and (1,3) are 0.9
    assert plan.predicted == 1.0 and dict(plan.budgets) == {"steps": 2, "answer": 3}
    assert [round(p, 9) for _, p, _ in plan.options] == [1.0, 0.9, 0.9, 0.1]


def test_plan_split_refuses_a_total_below_the_cheapest_split_naming_it():
    with pytest.raises(GraphError) as err:
        plan_split(spec(), REF, curves(), total=2)
    assert str(err.value) == "no split of the stages fits a total of 2 samples; the cheapest costs 3"
    with pytest.raises(GraphError) as err:
        plan_split(spec(), REF, curves(), total=99.5, unit="tokens")
    assert str(err.value) == "no split of the stages fits a total of 99.5 tokens; the cheapest costs 100"


def test_the_even_split_is_the_largest_shared_budget_that_fits():
    both = (StageCurve("steps", (1, 2, 4), (REF, STEPS_2, STEPS_2), ("step_1", "step_2")),
            StageCurve("answer", (1, 2, 3), (REF, ANSWER_3, ANSWER_3), ("answer",)))
    grid = {"steps": [1, 2, 4], "answer": [3, 2, 1]}
    # shared budgets 1 and 2; {2, 2} costs 6 samples, {1, 1} 3
    assert even_split(spec(), grid, plan_split(spec(), REF, both, 6)) == {"steps": 2, "answer": 2}
    assert even_split(spec(), grid, plan_split(spec(), REF, both, 5)) == {"steps": 1, "answer": 1}
    # the only shared budget, 2, does not fit 5 samples
    odd = (StageCurve("steps", (1, 2), (REF, STEPS_2), ("step_1", "step_2")),
           StageCurve("answer", (2, 3), (REF, ANSWER_3), ("answer",)))
    plan = plan_split(spec(), REF, odd, 5)
    assert even_split(spec(), {"steps": [1, 2], "answer": [2, 3]}, plan) is None


def _solution(pid, answer, tree):
    return Solution(pid, answer, 1.0, Usage(), Trace("graph", tree=tree))


def test_a_split_evaluator_grades_every_problem_and_averages_each_nodes_top_level_tokens():
    problems = [Problem("p1", "q1", "5"), Problem("p2", "q2", "7")]
    seen = {}

    def solve(graph, items):
        seen["solve"] = (graph, items)
        return [_solution("p1", "5", [
                    {"id": "a", "parent": None, "node": "a", "prompt_tokens": 10, "completion_tokens": 4},
                    {"id": "a/0", "parent": "a", "node": "a", "prompt_tokens": 100, "completion_tokens": 100},
                    {"id": "x", "parent": None, "prompt_tokens": 1000, "completion_tokens": 0},
                    {"id": "b", "node": "b", "prompt_tokens": 3, "completion_tokens": 3}]),
                _solution("p2", "8", [{"id": "a", "parent": None, "node": "a", "prompt_tokens": 20,
                                       "completion_tokens": 6}])]

    def grade(pairs):
        seen["pairs"] = list(pairs)
        return [1, 0]

    graph = spec()
    result = SplitStageEvaluator(problems, solve, grade)(graph)
    assert seen["solve"] == (graph, problems) and seen["pairs"] == [("5", "5"), ("8", "7")]
    # a: (14 + 26) / 2 problems; b: 6 / 2; the child entry and the node-less entry are not counted
    assert result == StageEvaluation(1, 2, {"a": 20.0, "b": 3.0})


def test_a_split_evaluator_refuses_a_solver_that_returns_too_few_solutions():
    problems = [Problem("p1", "q1", "5"), Problem("p2", "q2", "7")]
    evaluate = SplitStageEvaluator(problems, lambda g, items: [_solution("p1", "5", [])], lambda pairs: [True] * len(pairs))
    with pytest.raises(ValueError, match="argument 2 is longer than argument 1"):
        evaluate(spec())


@pytest.mark.parametrize("problems", [[], [Problem("p1", "q1", "5"), Problem("p2", "q2")]])
def test_a_split_evaluator_needs_problems_with_gold_answers(problems):
    with pytest.raises(GraphError) as err:
        SplitStageEvaluator(problems, lambda g, p: [], lambda pairs: [])
    assert str(err.value) == "a stage-planning split needs at least one problem, each with a gold answer"
