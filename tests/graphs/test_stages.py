"""Multi-stage tasks on scripted models where the best split is known by construction.

Two stages, each on its own model: stage ``first`` answers a sub-question (part 1) on model A, stage
``final`` answers the problem on model B, which can be right only when the prompt carries the right
first answer. End-to-end success is then P(first vote right) x P(final vote right): the stage whose
vote improves most with samples should get the budget."""

from __future__ import annotations

import dataclasses

import pytest

from tests.fakes import Rewriting
from tts.backends.base import Completion
from tts.backends.scripted import ScriptedGenerator
from tts.benchmarks.demo import DEMO_PROMPT
from tts.config import SamplingConfig
from tts.graphs.executor import GraphExecutor
from tts.graphs.graph import GraphError, parse_graph
from tts.graphs.stages import (
    SplitStageEvaluator,
    even_split,
    measure_curves,
    plan_split,
    with_budgets,
)
from tts.types import Problem

EASY = {"ok": 0.95, "w1": 0.05}  # a vote of 1 is already right 95% of the time
HARD = {"ok": 0.5, **{f"w{i}": 0.09 for i in range(1, 6)}}  # right 50% per sample, mistakes scattered: a vote of 5 is right ~75%


def chain_spec(**extra):
    return parse_graph({
        "name": "chain", "models": {"b": {"model": "b"}},
        "stages": {"first": {"nodes": ["step_1"], "share": 0.5}, "final": {"nodes": ["answer"], "share": 0.5}},
        "nodes": {"decompose": {"role": "decomposer", "max_parts": 1},
                  "step_1": {"role": "subsolver", "part": 1, "inputs": ["decompose"]},
                  "answer": {"role": "subsolver", "part": 0, "model": "b", "inputs": ["decompose", "step_1"]}},
        **extra})


def _dist(template, gold):
    return {gold if k == "ok" else f"{gold}{k}": p for k, p in template.items()}


def StageA(problems, first, mean_tokens=60) -> Rewriting:  # noqa: N802 -- reads as the model it builds
    """Decomposes into one fixed sub-question; answers it from ``first`` (key ``<id>#1``)."""
    inner = ScriptedGenerator({f"{p.id}#1": _dist(first, p.metadata["g1"]) for p in problems}, seed=2,
                              mean_tokens=mean_tokens, model_name="a")

    def decompose(req, res):
        if "Break it into" in req.messages[-1].content:
            return dataclasses.replace(res, completions=(Completion("1. What is the first number?", 8),))
        return None

    return Rewriting(inner, after=decompose)


def StageB(problems, final, mean_tokens=60) -> Rewriting:  # noqa: N802 -- reads as the model it builds
    """Answers the problem from ``final`` when its prompt carries the right first answer, else
    never right."""
    dists = {}
    for p in problems:
        dists[p.id] = _dist(final, p.answer)
        dists[f"{p.id}!bad"] = {f"{p.answer}x": 0.5}
    gold1 = {p.id: p.metadata["g1"] for p in problems}

    def route(r):
        return r if f"Answer: {gold1[r.key]}." in r.messages[-1].content else dataclasses.replace(r, key=f"{r.key}!bad")

    return Rewriting(ScriptedGenerator(dists, seed=3, mean_tokens=mean_tokens, model_name="b"), before=route)


def _evaluator(problems, first, final, b_tokens=60):
    gens = {"policy": StageA(problems, first), "b": StageB(problems, final, b_tokens)}

    def solve(spec, items):
        return GraphExecutor(spec, DEMO_PROMPT.render, SamplingConfig(max_tokens=1000), seed=0).run(items, gens)

    return SplitStageEvaluator(problems, solve, lambda pairs: [a == g for a, g in pairs])


PROBLEMS = [Problem(f"q{i}", f"Question {i}?", str(100 + i), {"g1": str(i)}) for i in range(80)]
GRID = {"first": [1, 5], "final": [1, 5]}


@pytest.mark.parametrize("first, final, best", [(EASY, HARD, {"first": 1, "final": 5}),
                                                (HARD, EASY, {"first": 5, "final": 1})])
def test_the_planner_gives_the_budget_to_the_stage_whose_curve_rises(first, final, best):
    spec = chain_spec()
    evaluate = _evaluator(PROBLEMS, first, final)
    reference, curves = measure_curves(spec, GRID, evaluate)
    assert [c.stage for c in curves] == ["first", "final"] and all(c.budgets == (1, 5) for c in curves)
    plan = plan_split(spec, reference, curves, total=6)
    assert dict(plan.budgets) == best and plan.cost == 6
    # the planned split, run end to end, beats the opposite split at the same total
    other = {s: 6 - b for s, b in best.items()}
    planned, opposite = evaluate(plan.spec), evaluate(with_budgets(spec, other))
    assert planned.accuracy > opposite.accuracy + 0.1
    # 1 reference + one more budget per stage: three evaluations measured the curves
    assert len({id(ev) for c in curves for ev in c.evaluations}) == 3


def test_the_planned_split_is_a_graph_file_whose_stages_run_at_their_share():
    spec = chain_spec()
    planned = with_budgets(spec, {"first": 1, "final": 5})
    assert planned.budget == 6 and planned.stages["final"].share == pytest.approx(5 / 6)
    assert planned.stage_samples() == {"step_1": 1, "answer": 5}
    resolved = planned.resolved()
    assert resolved.nodes["answer"].n == 5 and resolved.nodes["step_1"].n == 1 and resolved.budget is None
    import yaml

    from tts.graphs.search_space import graph_yaml
    again = parse_graph(yaml.safe_load(graph_yaml(planned)))
    assert again.stage_samples() == {"step_1": 1, "answer": 5}


def test_a_token_budget_counts_each_stages_measured_tokens():
    spec = chain_spec()
    # model B writes 4x longer samples: at a token total that B at 5 cannot fit, the budget moves
    evaluate = _evaluator(PROBLEMS, EASY, HARD, b_tokens=240)
    reference, curves = measure_curves(spec, GRID, evaluate)
    final = next(c for c in curves if c.stage == "final")
    assert final.tokens(5) > 3 * final.tokens(1)
    plan = plan_split(spec, reference, curves, total=6, unit="samples")
    cheap = plan_split(spec, reference, curves, total=final.tokens(5) * 0.8, unit="tokens")
    assert dict(plan.budgets) == {"first": 1, "final": 5}
    assert cheap.budgets["final"] == 1 and cheap.cost <= final.tokens(5) * 0.8
    with pytest.raises(GraphError, match="cheapest costs"):
        plan_split(spec, reference, curves, total=1, unit="samples")
    assert even_split(spec, GRID, plan_split(spec, reference, curves, 10)) == {"first": 5, "final": 5}


@pytest.mark.parametrize("extra, names", [
    ({"budget": 6, "stages": {"a": {"nodes": ["step_1"], "share": 0.5}}}, ["shares sum to 0.5"]),
    ({"budget": 6, "stages": {"a": {"nodes": ["ghost"], "share": 1.0}}}, ["stage 'a'", "'ghost' is not a node"]),
    ({"budget": 6}, ["add a stages: section"]),
    ({"budget": 6, "stages": {"a": {"nodes": ["decompose", "step_1", "answer"], "share": 1.0}}},
     ["node 'decompose'", "draws no samples"]),
])
def test_bad_stages_are_refused_naming_the_stage_or_node(extra, names):
    data = chain_spec().model_dump(mode="json", exclude={"stages", "budget"})
    with pytest.raises(GraphError) as err:
        parse_graph({**data, **extra})
    for name in names:
        assert name in str(err.value)


def test_tts_stage_plan_writes_a_planned_graph_and_its_held_out_result(tmp_path):
    import json

    from typer.testing import CliRunner

    from tts.cli.app import app
    from tts.graphs.graph import load_graph_file

    r = CliRunner(env={"COLUMNS": "200"}).invoke(app, [
        "stage-plan", "--graph", "examples/graphs/multi_stage.yaml", "--total", "6", "--grid", "1,2",
        "--backend", "scripted", "--dev", "4", "--test", "4", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    summary = json.loads((tmp_path / "summary.json").read_text())
    planned = load_graph_file(tmp_path / "planned.yaml")
    assert planned.stage_samples() == {"step_1": summary["budgets"]["steps"], "step_2": summary["budgets"]["steps"],
                                       "answer": summary["budgets"]["answer"]}
    assert summary["cost"] <= 6 and set(summary["curves"]) == {"steps", "answer"}
    assert summary["test_planned"]["problems"] == 4 and summary["test_planned"]["tokens_per_problem"] > 0
    bad = CliRunner().invoke(app, ["stage-plan", "--graph", "examples/graphs/scale.yaml", "--total", "6",
                                   "--backend", "scripted"])
    assert bad.exit_code != 0 and "no stages" in bad.output
