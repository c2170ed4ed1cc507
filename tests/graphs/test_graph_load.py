"""A graph file is refused at load, in one line naming the node, for everything that could not run."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from tts.cli.app import app
from tts.graphs.graph import GraphError, levels, load_graph_file, parse_graph

GEN = {"role": "generator"}


@pytest.mark.parametrize(("graph", "names"), [
    ({"nodes": {"a": GEN, "b": {"role": "reviser", "inputs": ["a"]}, "c": {"role": "reviser", "inputs": ["b", "d"]},
                "d": {"role": "reviser", "inputs": ["c"]}}}, ["'c'", "cycle", "c -> d -> c"]),
    ({"nodes": {"a": GEN, "b": {"role": "fuser", "inputs": ["a", "ghost"]}}}, ["node 'b'", "'ghost'", "not a node"]),
    ({"nodes": {"a": GEN}, "edges": [["a", "nowhere"]]}, ["edge a -> nowhere", "'nowhere'"]),
    ({"nodes": {"a": GEN, "b": {"role": "summarizer", "inputs": ["a"]}}},
     ["node 'b'", "Unknown role 'summarizer'", "critic, decomposer, fuser, generator", "subsolver, verifier, voter"]),
    ({"models": {"coder": {"model": "qwen2.5-coder-1.5b"}},
      "nodes": {"a": GEN, "b": {"role": "fuser", "inputs": ["a"], "model": "qwen-72b"}}},
     ["node 'b'", "'qwen-72b' is not configured", "policy, coder"]),
    ({"nodes": {"a": GEN, "f": {"role": "fuser"}}, "output": "f"}, ["node 'f'", "a fuser needs inputs"]),
    ({"nodes": {"a": GEN, "b": {"role": "generator", "inputs": ["a"]}}}, ["node 'b'", "a generator takes no inputs"]),
    ({"nodes": {"a": GEN, "c": {"role": "critic", "inputs": ["a"]}, "r": {"role": "reviser", "inputs": ["c", "a"]}}},
     ["node 'r'", "list the solutions' node first"]),
    ({"nodes": {"a": GEN, "v": {"role": "voter", "inputs": ["a"], "temperature": 0.3}}},
     ["node 'v'", "a voter does not use temperature"]),
    ({"nodes": {"a": GEN, "j": {"role": "verifier", "inputs": ["a"], "max_tokens": 64}}},
     ["node 'j'", "set n > 1"]),
    ({"nodes": {"a": GEN, "f": {"role": "fuser", "inputs": ["a"], "prompt": "{question} {solutions}"}}},
     ["node 'f'", "{candidates}", "got {question}, {solutions}"]),
    ({"nodes": {"a": GEN, "b": GEN}}, ["2 sinks (a, b)", "output: NODE"]),
    ({"nodes": {"a": GEN, "c": {"role": "critic", "inputs": ["a"]}}}, ["node 'c' gives the answer", "writes no solutions"]),
    ({"models": {"policy": {}}, "nodes": {"a": GEN}}, ["'policy' is the run's own model"]),
    ({"models": {"big": {"modle": "x"}}, "nodes": {"a": GEN}}, ["model 'big'", "modle is not a backend setting"]),
])
def test_a_graph_that_cannot_run_is_refused_naming_the_node(graph, names):
    with pytest.raises(GraphError) as err:
        parse_graph(graph, "g.yaml")
    message = str(err.value)
    assert "\n" not in message and message.startswith("g.yaml: ")
    for name in names:
        assert name in message


def test_the_cli_refuses_a_bad_graph_in_one_line_with_exit_code_2(tmp_path):
    bad = tmp_path / "cyclic.yaml"
    bad.write_text("nodes:\n  a: {role: reviser, inputs: [b]}\n  b: {role: reviser, inputs: [a]}\n")
    r = CliRunner(env={"COLUMNS": "300"}).invoke(app, ["eval", "--graph", str(bad), "--backend", "scripted",
                                                       "--limit", "2", "--out", str(tmp_path / "run")])
    assert r.exit_code == 2
    assert "node 'a' is on a cycle" in r.output and len(r.output.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()
    r = CliRunner().invoke(app, ["eval", "--graph", str(tmp_path / "missing.yaml"), "--backend", "scripted"])
    assert r.exit_code == 2 and "does not exist" in r.output


def test_levels_follow_the_edges_and_a_file_name_names_the_graph(tmp_path):
    path = tmp_path / "moa_small.yaml"
    path.write_text("nodes:\n  p1: {role: generator}\n  p2: {role: generator, n: 2}\n"
                    "  r: {role: fuser, inputs: [p1, p2]}\n  v: {role: voter}\nedges: [[r, v], [p2, v]]\n")
    spec = load_graph_file(path)
    assert spec.name == "moa_small" and spec.sink() == "v"
    assert levels(spec.digraph()) == [["p1", "p2"], ["r"], ["v"]]
    assert spec.node_inputs("v") == ("r", "p2")
    # a full dump (as results rows store it) loads again
    assert parse_graph(spec.model_dump(mode="json")) == spec
