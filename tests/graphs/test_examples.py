"""The shipped example graphs load and run through the runner and the CLI (scripted backend), and a
second model named in a graph is opened beside the run's and priced as itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tts.cli.app import app
from tts.config import EvalConfig
from tts.eval.runner import run_eval
from tts.graphs.graph import load_graph_file

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples" / "graphs").glob("*.yaml"))


def test_the_four_examples_are_shipped():
    assert {p.stem for p in EXAMPLES} >= {"mixture_of_agents", "debate", "generate_critique_revise", "sample_then_fuse"}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_each_example_runs_through_the_runner(path, tmp_path):
    spec = load_graph_file(path)
    cfg = EvalConfig.model_validate({"data": {"benchmark": "demo", "limit": 5}, "backend": {"kind": "scripted"},
                                     "strategies": [{"kind": "graph", "graph": spec.model_dump(mode="json")}]})
    result = run_eval(cfg, tmp_path)
    assert [s.config for s in result.summaries] == [f"graph:{spec.name}"]
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 5
    graph = spec.digraph()
    for row in rows:
        nodes = {e["id"]: e for e in row["trace"]["tree"] if e["parent"] is None}
        assert set(nodes) == set(graph.nodes)
        assert row["usage"]["calls"] == sum(e["requests"] for e in nodes.values()) > 0
        assert row["trace"]["samples"] and row["usage"]["completion_tokens"] > 0
        used = {s["model"] for s in row["usage"]["shapes"]}
        assert used == ({"", *spec.models} if spec.models else {""})


def test_a_second_model_answers_every_batch_and_is_priced_as_itself(tmp_path):
    graph = {"name": "two", "models": {"qwen2.5-1.5b-instruct": {}},
             "nodes": {"sample": {"role": "generator", "n": 2},
                       "fuse": {"role": "fuser", "inputs": ["sample"], "n": 4, "model": "qwen2.5-1.5b-instruct"}}}
    cfg = EvalConfig.model_validate({"data": {"benchmark": "demo", "limit": 5}, "backend": {"kind": "scripted", "accuracy": 0.5},
                                     "batch_size": 2, "strategies": [{"kind": "graph", "graph": graph}]})
    run_eval(cfg, tmp_path)
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    for row in rows:  # every batch, not only the first, gets answers from the second model
        fused = [e for e in row["trace"]["tree"] if e["parent"] == "fuse"]
        assert len(fused) == 4 and any(e["answer"] is not None for e in fused)
        models = [s["model"] for s in row["usage"]["shapes"]]
        assert models == ["", "qwen2.5-1.5b-instruct"]


def test_tts_eval_graph_beside_self_consistency(tmp_path):
    r = CliRunner(env={"COLUMNS": "220"}).invoke(app, [
        "eval", "--graph", str(EXAMPLES[0]), "-s", "self_consistency", "-n", "4", "--backend", "scripted",
        "--benchmark", "demo", "--limit", "4", "--out", str(tmp_path / "run")])
    assert r.exit_code == 0, r.output
    assert f"graph:{load_graph_file(EXAMPLES[0]).name}" in r.output and "self_consistency" in r.output
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert [s["kind"] for s in run["config"]["strategies"]] == ["self_consistency", "graph"]
    shown = CliRunner(env={"COLUMNS": "220"}).invoke(app, ["show", str(tmp_path / "run"), "demo-000"])
    assert shown.exit_code == 0 and "on policy)" in shown.output


def test_a_model_entry_equal_to_the_runs_backend_is_served_by_the_runs_generator():
    from tts.backends.scripted import ScriptedGenerator
    from tts.benchmarks.demo import DEMO_PROMPT, generate_problems
    from tts.graphs.graph import parse_graph
    from tts.graphs.strategy import GraphStrategy, GraphStrategyConfig

    problems = generate_problems(2)
    policy = ScriptedGenerator.for_problems(problems)
    spec = parse_graph({"models": {"same": {"model": "scripted"}, "other": {"model": "scripted-2"}},
                        "nodes": {"a": {"role": "generator", "model": "same"},
                                  "b": {"role": "fuser", "inputs": ["a"], "model": "other"}}})
    strategy = GraphStrategy(GraphStrategyConfig(graph=spec), policy, DEMO_PROMPT.render)
    sols = strategy.solve(problems)
    assert [s.model for s in sols[0].usage.shapes] == ["", "scripted-2"]  # no second engine for "same"
    strategy.close()
