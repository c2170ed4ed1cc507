"""The graph file's parts one by one: stage budgets worked out by hand, every refusal's exact
message, the model entries' settings per backend kind, node order within a level, and how a file's
name and source reach the spec and its errors."""

from __future__ import annotations

import pytest

from tts.graphs.graph import GraphError, levels, load_graph_file, parse_graph

GEN = {"role": "generator"}


def _refusal(data, source="g.yaml"):
    with pytest.raises(GraphError) as err:
        parse_graph(data, source)
    return str(err.value)


def _staged(budget=8, draft=0.75, fuse=0.25, **nodes):
    """g1, g2 (stage draft) -> f (stage fuse) -> v (a voter in no stage)."""
    return {"budget": budget,
            "stages": {"draft": {"nodes": ["g1", "g2"], "share": draft}, "fuse": {"nodes": ["f"], "share": fuse}},
            "nodes": {"g1": GEN, "g2": GEN, "f": {"role": "fuser", "inputs": ["g1", "g2"]},
                      "v": {"role": "voter", "inputs": ["f"]}, **nodes}}


def test_a_stage_share_of_the_budget_is_split_evenly_over_its_nodes_and_rounded():
    # draft: 0.75 x 8 / 2 nodes = 3 each; fuse: 0.25 x 8 / 1 node = 2
    assert parse_graph(_staged()).stage_samples() == {"g1": 3, "g2": 3, "f": 2}
    # draft: 0.25 x 2 / 2 = 0.25 rounds to 0, held at 1; fuse: 0.75 x 2 = 1.5 rounds to 2
    assert parse_graph(_staged(budget=2, draft=0.25, fuse=0.75)).stage_samples() == {"g1": 1, "g2": 1, "f": 2}
    # stages without a budget are labels only: no node's n comes from them
    labels = {k: v for k, v in _staged().items() if k != "budget"}
    assert parse_graph(labels).stage_samples() == {}


def test_the_resolved_graph_sets_each_staged_nodes_n_and_drops_the_budget():
    spec = parse_graph(_staged())
    resolved = spec.resolved()
    expected = parse_graph({
        "stages": {"draft": {"nodes": ["g1", "g2"], "share": 0.75}, "fuse": {"nodes": ["f"], "share": 0.25}},
        "nodes": {"g1": {"role": "generator", "n": 3}, "g2": {"role": "generator", "n": 3},
                  "f": {"role": "fuser", "inputs": ["g1", "g2"], "n": 2}, "v": {"role": "voter", "inputs": ["f"]}}})
    assert resolved == expected
    assert resolved.budget is None and resolved.nodes["v"] == spec.nodes["v"]
    assert resolved.model_dump() == expected.model_dump()
    # without a budget the graph runs as written
    plain = parse_graph({"nodes": {"g": {"role": "generator", "n": 5}}})
    assert plain.resolved() == plain and plain.resolved().nodes["g"].n == 5


@pytest.mark.parametrize(("change", "message"), [
    ({"budget": 8, "stages": {}}, "budget: a budget is split over stages; add a stages: section (or remove budget)"),
    ({"stages": {"draft": {"nodes": ["g1", "ghost"], "share": 1.0}}},
     "stage 'draft': 'ghost' is not a node of the graph (nodes: g1, g2, f, v)"),
    ({"stages": {"draft": {"nodes": ["g1", "g2"], "share": 0.5}, "again": {"nodes": ["g2"], "share": 0.5}}},
     "stage 'again': node 'g2' is already in stage 'draft'; a node belongs to one stage"),
    ({"stages": {"draft": {"nodes": ["g1", "g2"], "share": 0.5}, "vote": {"nodes": ["v"], "share": 0.5}}},
     "stage 'vote': node 'v' is a voter, which draws no samples, so a budget share cannot scale it; "
     "leave it out of the stage"),
    ({"stages": {"draft": {"nodes": ["g1", "g2"], "share": 0.3}, "fuse": {"nodes": ["f"], "share": 0.2}}},
     "stages: the shares sum to 0.5; with a budget they must sum to 1"),
])
def test_a_bad_stage_is_refused_with_its_exact_message(change, message):
    assert _refusal({**_staged(), **change}) == f"g.yaml: {message}"


def test_a_staged_node_may_not_set_its_own_n_with_a_budget():
    data = _staged()
    data["nodes"]["g2"] = {"role": "generator", "n": 2}
    assert _refusal(data) == "g.yaml: node 'g2': its n comes from stage 'draft''s share of the budget; remove n"
    # without a budget the stages are labels: n stays, and a voter may be in one
    data.pop("budget")
    data["stages"]["fuse"] = {"nodes": ["f", "v"], "share": 0.25}
    spec = parse_graph(data)
    assert spec.nodes["g2"].n == 2 and spec.resolved().nodes["g2"].n == 2


def test_without_a_budget_a_node_is_still_refused_in_two_stages():
    data = {k: v for k, v in _staged().items() if k != "budget"}
    data["stages"] = {"all": {"nodes": ["g1", "g2", "f"], "share": 1.0}, "late": {"nodes": ["f"], "share": 0.5}}
    assert _refusal(data) == "g.yaml: stage 'late': node 'f' is already in stage 'all'; a node belongs to one stage"


def test_a_model_entry_of_a_given_kind_takes_only_that_kinds_settings():
    # max_model_len is a vLLM setting: any entry may set it, but not one that says it is scripted
    assert parse_graph({"models": {"m": {"max_model_len": 512}}, "nodes": {"a": {"role": "generator", "model": "m"}}})
    assert _refusal({"models": {"m": {"kind": "scripted", "max_model_len": 512, "base_url": "x"}},
                     "nodes": {"a": GEN}}) == (
        "g.yaml: model 'm': base_url, max_model_len is not a backend setting; use settings of a backend config "
        "(accuracy, kind, model, seed, thinking)")
    ok = parse_graph({"models": {"m": {"kind": "scripted", "accuracy": 0.9}},
                      "nodes": {"a": {"role": "generator", "model": "m"}}})
    assert ok.models == {"m": {"kind": "scripted", "accuracy": 0.9}}
    assert _refusal({"models": {"m": {"kind": "nope"}}, "nodes": {"a": GEN}}).startswith(
        "g.yaml: model 'm': Unknown backend 'nope'.")


@pytest.mark.parametrize(("nodes", "message"), [
    ({"a": {"role": "generator", "model": "big"}},
     "node 'a': model 'big' is not configured; use one of: policy (or add it to the models: section)"),
    ({"a": GEN, "f": {"role": "fuser", "inputs": ["a"], "part": 2}},
     "node 'f': a fuser does not use part; remove it (a fuser takes max_candidates, max_tokens, model, n, prompt, "
     "temperature)"),
    ({"a": GEN, "v": {"role": "voter", "inputs": ["a"], "n": 2, "max_tokens": 9}},
     "node 'v': a voter does not use max_tokens, n; remove them (a voter takes no settings)"),
    ({"a": {"role": "generator", "prompt": "Solve {question"}},
     "node 'a': prompt is not a valid template (expected '}' before end of string); write fields as {question} and "
     "double literal braces ({{ }})"),
    ({"a": {"role": "generator", "prompt": "Solve it."}},
     "node 'a': a generator prompt must use {question} and no other field; got no fields"),
    ({"a": {"role": "generator", "prompt": "{question} {hint}"}},
     "node 'a': a generator prompt must use {question} and no other field; got {hint}, {question}"),
    ({"a": GEN, "f": {"role": "fuser", "inputs": ["a"], "prompt": "Pick one of {candidates}"}},
     "node 'f': a fuser prompt must use {question} and may use {candidates}; got {candidates}"),
    ({"a": GEN, "r": {"role": "reviser", "inputs": ["a"], "prompt": "{solution}"}},
     "node 'r': a reviser prompt must use {question} and may use {solution}, {context}; got {solution}"),
    ({"a": {"role": "reviser", "inputs": ["a"]}}, "node 'a' lists itself as an input; a graph may not have cycles"),
    ({"a": GEN, "b": {"role": "fuser", "inputs": ["a", "x"]}},
     "node 'b': input 'x' is not a node of the graph; define it or remove it (nodes: a, b)"),
    ({}, "the graph has no nodes; add a nodes: section"),
    ({"a": GEN, "c": {"role": "critic", "inputs": ["a"]}},
     "node 'c' gives the answer but a critic writes no solutions; make a node that does (generator, reviser, fuser, "
     "verifier, ranker, voter) the output"),
])
def test_a_bad_node_is_refused_with_its_exact_message(nodes, message):
    assert _refusal({"nodes": nodes}) == f"g.yaml: {message}"


def test_edges_and_outputs_are_refused_with_their_exact_messages():
    assert _refusal({"nodes": {"a": GEN, "b": GEN}, "edges": [["a", "c"]]}) == (
        "g.yaml: edge a -> c: 'c' is not a node of the graph; define it or remove the edge (nodes: a, b)")
    assert _refusal({"nodes": {"a": GEN, "b": GEN}, "output": "c"}) == (
        "g.yaml: output 'c' is not a node of the graph (nodes: a, b)")
    assert _refusal({"nodes": {"a": GEN, "b": GEN}}) == (
        "g.yaml: the graph has 2 sinks (a, b); say which node gives the answer with output: NODE")
    # an output among several sinks is what the graph answers with
    spec = parse_graph({"nodes": {"a": GEN, "b": GEN}, "output": "b"})
    assert spec.sink() == "b"


def test_every_node_of_the_digraph_carries_its_spec():
    spec = parse_graph({"nodes": {"a": {"role": "generator", "n": 3}, "f": {"role": "fuser", "inputs": ["a"]}}})
    graph = spec.digraph()
    assert graph.nodes["a"]["spec"] == spec.nodes["a"] and graph.nodes["a"]["spec"].n == 3
    assert graph.nodes["f"]["spec"].role == "fuser"


def test_nodes_of_one_level_keep_the_files_order_not_the_alphabets():
    spec = parse_graph({"nodes": {"zeta": GEN, "beta": GEN, "alpha": GEN,
                                  "fuse": {"role": "fuser", "inputs": ["alpha", "beta", "zeta"]}}})
    assert levels(spec.digraph()) == [["zeta", "beta", "alpha"], ["fuse"]]


def test_field_errors_name_the_source_and_the_fields_path():
    assert _refusal({"nodes": {"a": {"role": "generator", "n": 0}}}) == (
        "g.yaml: nodes.a.n: Input should be greater than or equal to 1")
    assert _refusal({"name": "a b", "nodes": {"a": GEN}}, "mine.yaml") == (
        "mine.yaml: name: String should match pattern '^[A-Za-z0-9_.-]+$'")
    # a graph's own refusal is passed on as it is, not as pydantic's "Value error, ..."
    assert _refusal({"nodes": {"a": GEN, "b": GEN}}) == (
        "g.yaml: the graph has 2 sinks (a, b); say which node gives the answer with output: NODE")
    with pytest.raises(GraphError) as err:
        parse_graph(["a", "b"])
    assert str(err.value) == "graph: a graph file is a mapping with a nodes: section, got list"
    with pytest.raises(GraphError) as err:
        parse_graph({"nodes": {"a": {"role": "generator", "n": 0}}})
    assert str(err.value) == "graph: nodes.a.n: Input should be greater than or equal to 1"


def test_a_graph_file_is_named_by_its_stem_unless_it_names_itself(tmp_path):
    named = tmp_path / "file_stem.yaml"
    named.write_text("name: own_name\nnodes:\n  a: {role: generator}\n")
    assert load_graph_file(named).name == "own_name"
    bare = tmp_path / "file_stem2.yaml"
    bare.write_text("nodes:\n  a: {role: generator}\n")
    assert load_graph_file(bare).name == "file_stem2"


def test_a_graph_files_errors_start_with_its_path(tmp_path):
    listed = tmp_path / "listed.yaml"
    listed.write_text("- a\n- b\n")
    with pytest.raises(GraphError) as err:
        load_graph_file(listed)
    assert str(err.value) == f"{listed}: a graph file is a mapping with a nodes: section, got list"
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodes:\n  a: {role: generator, n: 0}\n")
    with pytest.raises(GraphError) as err:
        load_graph_file(bad)
    assert str(err.value) == f"{bad}: nodes.a.n: Input should be greater than or equal to 1"
    broken = tmp_path / "broken.yaml"
    broken.write_text("nodes: a: b\n")
    with pytest.raises(GraphError) as err:
        load_graph_file(broken)
    # the YAML error's four lines (problem, place, the line, a caret under column 9) joined into one
    assert str(err.value) == (f'{broken} is not valid YAML: mapping values are not allowed here in '
                              '"<unicode string>", line 1, column 9: nodes: a: b ^')
