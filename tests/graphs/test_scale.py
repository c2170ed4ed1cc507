"""SCALE as a graph on a scripted model: decomposition parsed, easy steps get one greedy sample and
hard ones k samples, earlier answers carried forward into later prompts, usage counted per node."""

from __future__ import annotations

import dataclasses
import math

import pytest

from tests.fakes import Rewriting
from tts.backends.base import Completion
from tts.backends.scripted import ScriptedGenerator
from tts.benchmarks.demo import DEMO_PROMPT
from tts.config import SamplingConfig
from tts.graphs.executor import GraphExecutor
from tts.graphs.graph import GraphError, load_graph_file, parse_graph
from tts.graphs.subproblems import parse_parts
from tts.types import Problem

EXAMPLE = "examples/graphs/scale.yaml"
PROBLEM = Problem("p", "What is 3 + 8 + 5?", "16")


def Router(parts: str, easy: dict[int, float], dists: dict[str, dict[str, float]]) -> Rewriting:  # noqa: N802
    """A scripted model that also decomposes and rates steps: the decomposer gets ``parts``, the
    assessor P(Yes) = ``easy[part]``; answers are drawn per request key (``p#1``, ``p#2``, ``p``)."""

    def decompose_and_rate(req, res):
        text = req.messages[-1].content
        if "Break it into" in text:
            return dataclasses.replace(res, completions=(Completion(parts, 20),))
        if "Is this step easy" in text:
            p = easy[int(req.key.split("#")[1]) if "#" in req.key else 0]
            top = {"Yes": math.log(p), "No": math.log(1 - p)}
            return dataclasses.replace(res, completions=(Completion("Yes" if p > 0.5 else "No", 1,
                                                                    first_token_top_logprobs=top),))
        return None

    return Rewriting(ScriptedGenerator(dists, seed=1), after=decompose_and_rate)


def _run(easy, parts="1. What is 3 + 8?\n2. What is 11 + 5?"):
    spec = load_graph_file(EXAMPLE)
    gen = Router(parts, easy, {"p#1": {"11": 1.0}, "p#2": {"16": 0.6, "15": 0.3}, "p": {"16": 0.9}})
    sol = GraphExecutor(spec, DEMO_PROMPT.render, SamplingConfig(max_tokens=1000), seed=0).run([PROBLEM],
                                                                                             {"policy": gen})[0]
    return sol, gen


def by_node(gen):
    out = {}
    for call in gen.calls:
        for req in call:
            text = req.messages[-1].content
            node = ("decompose" if "Break it into" in text else "assess" if "Is this step easy" in text
                    else {"p#1": "step_1", "p#2": "step_2", "p": "answer"}[req.key])
            out.setdefault(node, []).append(req)
    return out


def test_parse_parts_reads_numbered_lines_and_keeps_the_last():
    assert parse_parts("Sure.\n1. What is 3 + 8?\n2) What is 11 + 5?\nStep 3: done", 3) == [
        "What is 3 + 8?", "What is 11 + 5?", "done"]
    assert parse_parts("1. a\n2. b\n3. c\n4. d", 2) == ["a", "d"]
    assert parse_parts("no numbered lines here", 3) == []


def test_easy_steps_get_one_greedy_sample_and_hard_steps_k():
    sol, gen = _run({1: 0.9, 2: 0.2, 0: 0.3})
    reqs = by_node(gen)
    assert [(r.n, r.temperature) for r in reqs["step_1"]] == [(1, 0.0)]  # easy: one greedy sample
    assert [r.n for r in reqs["step_2"]] == [4] and reqs["step_2"][0].temperature > 0  # hard: 4 and a vote
    assert [r.n for r in reqs["answer"]] == [4]
    assert len(reqs["assess"]) == 3  # the original problem and both steps are rated
    assert sol.trace.events["easy_part"] == 1 and sol.trace.events["hard_part"] == 2
    assert sol.answer == "16"


def test_earlier_answers_are_carried_forward_into_later_prompts():
    _, gen = _run({1: 0.9, 2: 0.9, 0: 0.9})
    reqs = by_node(gen)
    assert "Steps solved so far" not in reqs["step_1"][0].messages[-1].content
    assert "Now answer this: What is 3 + 8?" in reqs["step_1"][0].messages[-1].content
    step2 = reqs["step_2"][0].messages[-1].content
    assert "Step 1: What is 3 + 8? Answer: 11." in step2 and "Now answer this: What is 11 + 5?" in step2
    final = reqs["answer"][0].messages[-1].content
    assert "Step 1: What is 3 + 8? Answer: 11." in final and "Step 2: What is 11 + 5? Answer: 16." in final
    # the benchmark's few-shot turns are kept, so a small model keeps its answer format
    assert reqs["answer"][0].messages[:-1] == DEMO_PROMPT.render(PROBLEM)[:-1]


def test_usage_counts_every_request_of_every_node():
    sol, gen = _run({1: 0.9, 2: 0.2, 0: 0.9})
    sent = [r for call in gen.calls for r in call]
    assert sol.usage.calls == len(sent) == 1 + 3 + 1 + 1 + 1
    tree = {e["id"]: e for e in sol.trace.tree if e["parent"] is None}
    assert sum(e["requests"] for e in tree.values()) == len(sent)
    assert sol.usage.completion_tokens == sum(e["completion_tokens"] for e in tree.values())
    assert tree["step_2"]["completion_tokens"] > tree["step_1"]["completion_tokens"]  # 4 samples vs 1
    assert len(gen.calls) == 5  # one engine call per level: decompose, assess, step_1, step_2, answer


def test_a_reply_without_numbered_steps_falls_back_to_the_whole_problem():
    sol, gen = _run({0: 0.9}, parts="I cannot split this.")
    reqs = by_node(gen)
    assert "step_1" not in reqs and "step_2" not in reqs and len(reqs["assess"]) == 1
    assert reqs["answer"][0].messages == DEMO_PROMPT.render(PROBLEM)  # the plain prompt, one greedy sample
    assert sol.trace.events["decomposition_fallback"] == 1 and sol.answer == "16"


@pytest.mark.parametrize("nodes, names", [
    ({"d": {"role": "decomposer"}, "s": {"role": "subsolver", "inputs": ["d"], "max_parts": 2}},
     ["node 's'", "does not use max_parts"]),
    ({"g": {"role": "generator"}, "s": {"role": "subsolver", "inputs": ["g"]}},
     ["node 's'", "first input is the decomposer"]),
    ({"d": {"role": "decomposer"}, "f": {"role": "fuser", "inputs": ["d"]}}, ["node 'f'", "feed subproblems"]),
])
def test_miswired_scale_graphs_are_refused_naming_the_node(nodes, names):
    with pytest.raises(GraphError) as err:
        parse_graph({"nodes": nodes})
    for name in names:
        assert name in str(err.value)
