"""A graph search's space: its decisions and which of them a choice depends on, the exact graph a
choice decodes to (inputs, models, a name from the graph's content), what makes two graphs the
same, the YAML file a graph is written as, the requests a graph costs per problem, and one-line
refusals of a space file that cannot be read."""

from __future__ import annotations

import hashlib
import json

import pytest

from tts.graphs.graph import GraphError, parse_graph
from tts.graphs.search_space import GraphSearchSpace, canonical_key, expected_requests, graph_yaml, load_search_space


def test_decisions_and_the_ones_a_choice_depends_on():
    space = GraphSearchSpace(depths=(1, 3), widths=(1, 2), samples=(1,), outputs=("voter", "fuser"))
    assert list(space.decisions()) == ["depth", "width", "samples", "output", "role_1", "role_2", "model_0_0",
                                       "model_0_1", "model_1_0", "model_1_1", "model_2_0", "model_2_1", "model_out"]
    choice = {"depth": 3, "width": 2, "output": "fuser"}
    assert space.active(choice) == ["depth", "width", "samples", "output", "role_1", "role_2", "model_0_0",
                                    "model_0_1", "model_1_0", "model_1_1", "model_2_0", "model_2_1", "model_out"]
    assert space.active({"depth": 2, "width": 1, "output": "voter"}) == [  # a voter runs no model
        "depth", "width", "samples", "output", "role_1", "model_0_0", "model_1_0"]


def test_a_choice_decodes_to_its_layered_graph_named_by_its_content():
    space = GraphSearchSpace(models={"a": {"accuracy": 0.9}, "b": {"accuracy": 0.2}}, node_models=("policy", "a", "b"),
                             depths=(2,), widths=(3,), samples=(4,), outputs=("fuser",))
    choice = {"depth": 2, "width": 3, "samples": 4, "output": "fuser", "role_1": "reviser", "model_out": "a",
              **{f"model_{layer}_{i}": "policy" for layer in range(2) for i in range(3)}, "model_1_1": "a"}
    spec = space.build(choice)
    # each later node reads its counterpart first, then the rest of the layer before
    assert {name: list(spec.node_inputs(name)) for name in spec.nodes} == {
        "l0_0": [], "l0_1": [], "l0_2": [], "l1_0": ["l0_0", "l0_1", "l0_2"], "l1_1": ["l0_1", "l0_0", "l0_2"],
        "l1_2": ["l0_2", "l0_0", "l0_1"], "out": ["l1_0", "l1_1", "l1_2"]}
    assert {name: (n.role, n.model, n.n) for name, n in spec.nodes.items()} == {
        "l0_0": ("generator", "policy", 4), "l0_1": ("generator", "policy", 4), "l0_2": ("generator", "policy", 4),
        "l1_0": ("reviser", "policy", 1), "l1_1": ("reviser", "a", 1), "l1_2": ("reviser", "policy", 1),
        "out": ("fuser", "a", 1)}
    assert spec.models == {"a": {"accuracy": 0.9}}  # only the models the graph uses
    # The name: the space's stem and the first 8 hex digits of the sha256 of the graph's content.
    body = ('{"models": {"a": {"accuracy": 0.9}}, "nodes": {'
            '"l0_0": {"n": 4, "role": "generator"}, "l0_1": {"n": 4, "role": "generator"}, '
            '"l0_2": {"n": 4, "role": "generator"}, '
            '"l1_0": {"inputs": ["l0_0", "l0_1", "l0_2"], "role": "reviser"}, '
            '"l1_1": {"inputs": ["l0_1", "l0_0", "l0_2"], "model": "a", "role": "reviser"}, '
            '"l1_2": {"inputs": ["l0_2", "l0_0", "l0_1"], "role": "reviser"}, '
            '"out": {"inputs": ["l1_0", "l1_1", "l1_2"], "model": "a", "role": "fuser"}}}')
    assert spec.name == "searched-" + hashlib.sha256(body.encode()).hexdigest()[:8]


def test_a_graph_the_loader_refuses_is_refused_naming_the_space():
    space = GraphSearchSpace(name="mine", models={"a": {"kind": 5}}, node_models=("a",), depths=(1,), widths=(1,),
                             samples=(1,), outputs=("voter",))
    with pytest.raises(GraphError, match=r"^search space 'mine': model 'a': Unknown backend '5'"):
        space.build({"depth": 1, "width": 1, "samples": 1, "output": "voter", "model_0_0": "a"})


def test_two_graphs_are_the_same_whatever_their_name_description_and_node_order():
    nodes = {"a": {"role": "generator", "n": 2}, "b": {"role": "fuser", "inputs": ["a"]}}
    one = parse_graph({"name": "one", "description": "first", "nodes": nodes})
    two = parse_graph({"name": "two", "description": "second", "nodes": dict(reversed(nodes.items()))})
    assert canonical_key(one) == canonical_key(two)
    other = parse_graph({"name": "one", "description": "first", "nodes": {**nodes, "a": {"role": "generator", "n": 3}}})
    assert canonical_key(other) != canonical_key(one)


def test_a_graph_is_written_as_the_yaml_a_user_reads_and_the_loader_loads():
    spec = parse_graph({"name": "g", "description": "d",
                        "nodes": {"a": {"role": "generator", "n": 2}, "b": {"role": "fuser", "inputs": ["a"]}}})
    text = graph_yaml(spec)
    assert text == ("name: g\ndescription: d\nnodes:\n  a:\n    role: generator\n    n: 2\n"
                    "  b:\n    role: fuser\n    inputs:\n    - a\n")  # only what differs from the defaults
    import yaml

    assert canonical_key(parse_graph(yaml.safe_load(text))) == canonical_key(spec)


def test_expected_requests_follow_each_roles_shape():
    spec = parse_graph({"name": "g", "nodes": {
        "g1": {"role": "generator", "n": 4},  # 1 request, 4 solutions
        "g2": {"role": "generator", "n": 2},  # 1 request, 2 solutions
        "c": {"role": "critic", "inputs": ["g1", "g2"]},  # one per solution seen: 6 requests, no solutions
        "r": {"role": "reviser", "inputs": ["g1", "c", "g2"], "n": 2},  # one per first input's solution: 4, 8
        "v": {"role": "verifier", "inputs": ["r"]},  # 8 requests, the 8 solutions scored
        "k": {"role": "ranker", "inputs": ["v", "g2"], "max_candidates": 3},  # 1 request, min(10, 3) solutions
        "x": {"role": "aggregator", "inputs": ["k"], "n": 5},  # any other role: 1 request, n solutions
        "f": {"role": "fuser", "inputs": ["x"], "n": 3},  # 1 request, 3 solutions
        "o": {"role": "voter", "inputs": ["f"]}}})  # no request
    assert expected_requests(spec) == 1 + 1 + 6 + 4 + 8 + 1 + 1 + 1 + 0
    voted = parse_graph({"name": "h", "nodes": {"g": {"role": "generator", "n": 4}, "o": {"role": "voter", "inputs": ["g"]},
                                                "v": {"role": "verifier", "inputs": ["o"]}}})
    assert expected_requests(voted) == 1 + 0 + 1  # a voter passes on one solution
    ranked = parse_graph({"name": "k", "nodes": {"g": {"role": "generator", "n": 4},
                                                 "k": {"role": "ranker", "inputs": ["g"], "max_candidates": 3},
                                                 "v": {"role": "verifier", "inputs": ["k"]}}})
    assert expected_requests(ranked) == 1 + 1 + 3  # a ranker passes on its best max_candidates


def test_a_space_file_is_read_or_refused_in_one_line(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text("")
    assert load_search_space(path) == GraphSearchSpace()  # an empty file: the default space
    path.write_text("depths: [1, 2\n")
    with pytest.raises(GraphError) as bad_yaml:
        load_search_space(path)
    assert str(bad_yaml.value).startswith(f"{path} is not valid YAML: while parsing a flow sequence in ")
    assert "\n" not in str(bad_yaml.value) and "expected ',' or ']', but got" in str(bad_yaml.value)
    for text, message in (
            ("depths: [9]\n", "space: Value error, depths: [9] outside 1..4; choose values in that range"),
            ("depths: [1, x]\n", "depths.1: Input should be a valid integer, unable to parse string as an integer"),
            ("widths: x\nsamples: y\n", "widths: Input should be a valid tuple")):
        path.write_text(text)
        with pytest.raises(GraphError) as refused:
            load_search_space(path)
        assert str(refused.value) == f"{path}: {message}"
