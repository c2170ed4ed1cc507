"""The executor on the scripted backend: one engine call per level per model, outputs flowing
along edges into prompts, usage per node summed into the solution and priced on each node's model."""

from __future__ import annotations

import dataclasses

import pytest

from tts.backends.function import RecordingGenerator
from tts.backends.scripted import ScriptedGenerator
from tts.benchmarks.demo import DEMO_PROMPT, generate_problems
from tts.cost.ledger import cost_model_for, price_usages
from tts.config import SamplingConfig
from tts.graphs.executor import GraphExecutor
from tts.graphs.graph import parse_graph
from tts.types import Usage

SECOND = "qwen2.5-1.5b-instruct"  # a model whose architecture the cost model knows


def _two_model_moa():
    return parse_graph({
        "name": "moa2",
        "models": {"big": {"model": SECOND}},
        "nodes": {
            "p1": {"role": "generator", "n": 2},
            "p2": {"role": "generator", "temperature": 0.3},
            "p3": {"role": "generator", "model": "big"},
            "r1": {"role": "fuser", "inputs": ["p1", "p2", "p3"]},
            "r2": {"role": "fuser", "inputs": ["p3", "p2"], "model": "big"},
            "agg": {"role": "fuser", "inputs": ["r1", "r2"], "model": "big", "temperature": 0},
        },
    })


def _run(spec, problems, sampling=SamplingConfig(max_tokens=300)):
    policy = RecordingGenerator(ScriptedGenerator.for_problems(problems, accuracy=0.5))
    big = RecordingGenerator(ScriptedGenerator.for_problems(problems, accuracy=0.5, seed=7, model_name=SECOND))
    executor = GraphExecutor(spec, DEMO_PROMPT.render, sampling, seed=3)
    sols = executor.run(problems, {"policy": policy, "big": big}, {"big": SECOND})
    return sols, policy, big


def test_one_engine_call_per_level_per_model_across_all_problems():
    problems = generate_problems(5)
    sols, policy, big = _run(_two_model_moa(), problems)
    assert len(sols) == 5 and [s.problem_id for s in sols] == [p.id for p in problems]
    # level 1: p1, p2 on the policy and p3 on big; level 2: r1 on the policy, r2 on big; level 3: agg on big
    assert len(policy.calls) == 2 and len(big.calls) == 3
    assert [len(c) for c in policy.calls] == [2 * 5, 1 * 5]  # p1 + p2 for every problem, then r1
    assert [len(c) for c in big.calls] == [5, 5, 5]
    assert {r.key for c in policy.calls + big.calls for r in c} == {p.id for p in problems}
    # node settings reach the requests: p1 draws 2, p2 samples at 0.3, agg is greedy
    first = policy.calls[0]
    assert sorted({(r.n, r.temperature) for r in first}) == [(1, 0.3), (2, 0.7)]
    assert all(r.temperature == 0 and r.max_tokens == 300 for r in big.calls[2])


def test_outputs_flow_along_edges_into_the_prompts():
    problems = generate_problems(2)
    sols, policy, big = _run(_two_model_moa(), problems)
    for sol, problem in zip(sols, problems, strict=True):
        outputs = {}
        for entry in sol.trace.tree:
            if entry["parent"] is not None:
                outputs.setdefault(entry["parent"], []).append(entry["text"].strip())
        r1_prompt = next(r for r in policy.calls[1] if r.key == problem.id).messages[-1].content
        agg_prompt = next(r for r in big.calls[2] if r.key == problem.id).messages[-1].content
        assert problem.question in r1_prompt
        for text in outputs["p1"] + outputs["p2"] + outputs["p3"]:
            assert text in r1_prompt
        for text in outputs["r1"] + outputs["r2"]:
            assert text in agg_prompt
        assert outputs["p1"][0] not in agg_prompt  # only its inputs, not its inputs' inputs
        # the benchmark's few-shot turns stay in front of a fuser's prompt (they teach the answer format)
        assert next(r for r in big.calls[2] if r.key == problem.id).messages[:-1] == DEMO_PROMPT.render(problem)[:-1]
        # the answer is the aggregator's
        agg = [e for e in sol.trace.tree if e["parent"] == "agg"]
        assert sol.answer == agg[0]["answer"] and agg[0]["kept"] == (sol.answer is not None)


def test_usage_is_summed_per_node_and_priced_on_each_nodes_model():
    problems = generate_problems(3)
    sols, policy, big = _run(_two_model_moa(), problems)
    for sol in sols:
        nodes = [e for e in sol.trace.tree if e["parent"] is None]
        assert sum(e["completion_tokens"] for e in nodes) == sol.usage.completion_tokens
        assert sum(e["prompt_tokens"] for e in nodes) == sol.usage.prompt_tokens
        assert sol.usage.calls == sum(e["requests"] for e in nodes) == 2 + 1 + 1 + 1 + 1  # p1, p2, p3, r1, r2, agg
        models = [s.model for s in sol.usage.shapes]
        assert models.count(SECOND) == 3 and models.count("") == 3  # p3, r2, agg on big; the rest the policy's
    # the ledger prices the big model's requests on its own architecture
    small = cost_model_for("smollm2-135m", "h100")
    large = cost_model_for(SECOND, "h100")
    usage = Usage.total([s.usage for s in sols])
    mine = Usage(shapes=tuple(s for s in usage.shapes if not s.model))
    theirs = Usage(shapes=tuple(dataclasses.replace(s, model="") for s in usage.shapes if s.model))
    priced = price_usages([("g", s.usage) for s in sols], small)["g"].cost
    expected = small.cost_usage(mine).eflops + large.cost_usage(theirs).eflops
    assert priced.eflops == pytest.approx(expected, rel=1e-9)
    assert priced.eflops > small.cost_usage(Usage(shapes=mine.shapes + theirs.shapes)).eflops


def test_critiques_reach_the_reviser_and_a_verifier_picks_the_answer():
    spec = parse_graph({"nodes": {
        "gen": {"role": "generator", "n": 2},
        "crit": {"role": "critic", "inputs": ["gen"]},
        "rev": {"role": "reviser", "inputs": ["gen", "crit"]},
        "judge": {"role": "verifier", "inputs": ["rev"]},
    }})
    problems = generate_problems(3)
    policy = RecordingGenerator(ScriptedGenerator.for_problems(problems, accuracy=0.6))
    sols = GraphExecutor(spec, DEMO_PROMPT.render, seed=1).run(problems, {"policy": policy})
    assert len(policy.calls) == 4  # one call per level
    for sol, problem in zip(sols, problems, strict=True):
        tree = {e["id"]: e for e in sol.trace.tree}
        revisions = [r for r in policy.calls[2] if r.key == problem.id]
        assert len(revisions) == 2  # one revision per generated solution, each with its own critique
        for i, req in enumerate(revisions):
            prompt = req.messages[-1].content
            assert tree[f"gen:{i}"]["text"].strip() in prompt and tree[f"crit:{i}"]["text"].strip() in prompt
            assert tree[f"gen:{1 - i}"]["text"].strip() not in prompt
        # the judge's verdicts are scores, the best-scored revision gives the answer
        scores = [tree[f"judge:{i}"]["score"] for i in range(2)]
        assert all(0 <= s <= 1 for s in scores)
        best = max(range(2), key=lambda i: (scores[i], -i))
        assert sol.answer == tree[f"rev:{best}"]["answer"] and sol.confidence == pytest.approx(scores[best])
        # samples are the written solutions: 2 generated + 2 revised; critiques are not answers
        assert len(sol.trace.samples) == 4 and sol.trace.selected == 2 + best


def test_a_voter_weighs_the_answers_of_its_inputs_without_a_model_call():
    spec = parse_graph({"nodes": {"a": {"role": "generator", "n": 5}, "b": {"role": "generator", "n": 3},
                                  "vote": {"role": "voter", "inputs": ["a", "b"]}}})
    problems = generate_problems(4)
    policy = RecordingGenerator(ScriptedGenerator.for_problems(problems, accuracy=0.6))
    sols = GraphExecutor(spec, DEMO_PROMPT.render, seed=2).run(problems, {"policy": policy})
    assert len(policy.calls) == 1  # the voter's level makes no call
    for sol in sols:
        answers = [s.answer for s in sol.trace.samples]
        assert len(answers) == 8
        if sol.answer is not None:
            assert sum(a == sol.answer for a in answers) == max(answers.count(a) for a in set(answers) if a)
            assert sol.confidence == pytest.approx(answers.count(sol.answer) / 8)
            assert sol.trace.votes and sol.trace.samples[sol.trace.selected].answer == sol.answer


def Picks(choice, logprobs=True, markup=""):  # noqa: N802 - reads as the fake model it builds
    """A judge model that always names solution ``choice`` (as text and, with ``logprobs``, as its
    first token's top logprobs), optionally in markdown (``**2**``)."""
    from tts.backends.base import Completion
    from tts.backends.function import FunctionGenerator

    first = f"{markup}{choice}"
    top = {first: -0.1, "1": -2.5} if logprobs else None
    return FunctionGenerator(lambda request: Completion(f"{first}{markup}", 1, first_token_top_logprobs=top),
                             model_name="picker")


@pytest.mark.parametrize("logprobs", [True, False])
def test_a_ranker_on_another_model_picks_the_solution_it_names(logprobs):
    spec = parse_graph({"models": {"judge": {"model": "picker"}}, "nodes": {
        "gen": {"role": "generator", "n": 3},
        "rank": {"role": "ranker", "inputs": ["gen"], "model": "judge"}}})
    problems = generate_problems(2)
    policy = ScriptedGenerator.for_problems(problems, accuracy=0.5)
    judge = Picks(2, logprobs)
    sols = GraphExecutor(spec, DEMO_PROMPT.render).run(problems, {"policy": policy, "judge": judge}, {"judge": "picker"})
    assert len(judge.requests) == 2 and all(r.temperature == 0 and "Solution 3:" in r.messages[-1].content
                                            for r in judge.requests)
    for sol in sols:
        assert sol.trace.selected == 1 and sol.answer == sol.trace.samples[1].answer
        assert sol.confidence > 0.5 and not sol.trace.events
        assert [s.model for s in sol.usage.shapes] == ["", "picker"]


@pytest.mark.parametrize("markup", ["**", "#"])
def test_a_ranker_reads_a_number_in_markdown_as_the_selector_does(markup):
    """Chat models often bold their choice: a first token ``**2`` names solution 2 for the ranker
    as it does for GenSelect's selector (both read choices with one function)."""
    spec = parse_graph({"models": {"judge": {"model": "picker"}}, "nodes": {
        "gen": {"role": "generator", "n": 3},
        "rank": {"role": "ranker", "inputs": ["gen"], "model": "judge"}}})
    problems = generate_problems(2)
    sols = GraphExecutor(spec, DEMO_PROMPT.render).run(
        problems, {"policy": ScriptedGenerator.for_problems(problems, accuracy=0.5), "judge": Picks(2, markup=markup)},
        {"judge": "picker"})
    assert [sol.trace.selected for sol in sols] == [1, 1]
    assert all(sol.confidence > 0.5 for sol in sols)


def test_a_ranker_whose_reply_names_no_solution_counts_it_and_keeps_the_first():
    spec = parse_graph({"nodes": {"gen": {"role": "generator", "n": 3}, "rank": {"role": "ranker", "inputs": ["gen"]}}})
    problems = generate_problems(2)
    sols = GraphExecutor(spec, DEMO_PROMPT.render).run(problems, {"policy": ScriptedGenerator.for_problems(problems)})
    for sol in sols:  # the scripted model writes words, never a number, and no first-token alternatives
        assert sol.trace.events == {"invalid_rank": 1}
        assert sol.trace.selected == 0 and sol.confidence == pytest.approx(1 / 3)


# --- the trace a user reads (`tts show`), the requests' settings and the refusals, exactly ---

def _chain():
    return parse_graph({"name": "chain", "nodes": {
        "g": {"role": "generator", "n": 2, "max_tokens": 50}, "c": {"role": "critic", "inputs": ["g"]},
        "f": {"role": "fuser", "inputs": ["g"]}, "r": {"role": "reviser", "inputs": ["g", "c"]},
        "v": {"role": "verifier", "inputs": ["r"]}, "o": {"role": "voter", "inputs": ["v", "f"]}}})


def test_the_trace_shows_every_node_and_output_and_keeps_the_chosen_chain():
    from tts.backends.base import derive_seed

    problems = generate_problems(1)
    policy = RecordingGenerator(ScriptedGenerator.for_problems(problems, accuracy=0.5))
    [sol] = GraphExecutor(_chain(), DEMO_PROMPT.render, SamplingConfig(top_p=0.5)).run(problems, {"policy": policy})
    tree = {e["id"]: e for e in sol.trace.tree}
    node_keys = {"id", "parent", "depth", "node", "role", "model", "inputs", "requests", "completion_tokens",
                 "prompt_tokens", "text", "score", "kept"}
    out_keys = {"id", "parent", "depth", "node", "kind", "text", "answer", "score", "about", "completion_tokens", "kept"}
    assert all(set(e) == (node_keys if e["parent"] is None else out_keys) for e in sol.trace.tree)
    assert {k: v for k, v in tree["o"].items() if k not in ("completion_tokens", "prompt_tokens")} == {
        "id": "o", "parent": None, "depth": 4, "node": "o", "role": "voter", "model": "-", "inputs": ["v", "f"],
        "requests": 0, "text": "o (voter on -)", "score": None, "kept": True}
    assert (tree["g"]["model"], tree["g"]["text"], tree["g"]["requests"], tree["c"]["requests"]) == (
        "policy", "g (generator on policy)", 1, 2)
    assert tree["g"]["completion_tokens"] == tree["g:0"]["completion_tokens"] + tree["g:1"]["completion_tokens"] == 100
    assert [(tree[i]["depth"], tree[i]["node"], tree[i]["kind"], tree[i]["about"]) for i in ("g:0", "c:1", "r:1")] == [
        (0, "g", "solution", None), (1, "c", "critique", "g:1"), (2, "r", "solution", "g:1")]
    # the answer's chain back to the sample it came from is kept, nothing else
    kept = {i for i, e in tree.items() if e["parent"] is not None and e["kept"]}
    [vote] = [i for i in kept if i.startswith("o:")]
    chain, c = set(), vote
    while c is not None:
        chain.add(c)
        c = tree[c]["about"]
    assert kept == chain and len(chain) == 4 and any(i.startswith("g:") for i in chain)
    # samples: every written output (generators, the fuser, the reviser; no critiques, scores, votes)
    written = [e for e in sol.trace.tree if e["parent"] in ("g", "f", "r")]
    assert [(s.text, s.answer, s.completion_tokens, s.mean_logprob) for s in sol.trace.samples] == [
        (e["text"], e["answer"], e["completion_tokens"], None) for e in written]
    assert [s.finish_reason for s in sol.trace.samples][:2] == ["length", "length"]  # cut at the node's 50 tokens
    assert sol.trace.strategy == "graph"
    # requests: the node's max_tokens, else the run's; the run's top_p; seeds from the run seed (default 0)
    first = policy.calls[0][0]
    assert (first.max_tokens, first.top_p, first.seed) == (50, 0.5, derive_seed(0, f"{problems[0].id}|g", 0))
    assert {(r.max_tokens, r.top_p) for r in policy.calls[1]} == {(256, 0.5)}


def test_a_missing_generator_or_a_short_reply_is_refused_in_one_line():
    problems = generate_problems(1)
    spec = _two_model_moa()
    with pytest.raises(ValueError) as missing:
        GraphExecutor(spec, DEMO_PROMPT.render).run(problems, {"policy": ScriptedGenerator.for_problems(problems)})
    assert str(missing.value) == "no generator for model(s) big of graph 'moa2'"
    two = parse_graph({"name": "two", "models": {"a": {}, "b": {}}, "nodes": {
        "x": {"role": "generator", "model": "b"}, "y": {"role": "fuser", "inputs": ["x"], "model": "a"}}})
    with pytest.raises(ValueError, match=r"^no generator for model\(s\) a, b of graph 'two'$"):
        GraphExecutor(two, DEMO_PROMPT.render).run(problems, {"policy": ScriptedGenerator.for_problems(problems)})

    class Short(ScriptedGenerator):
        def generate(self, requests):
            return super().generate(requests)[:-1]

    with pytest.raises(RuntimeError) as short:
        GraphExecutor(_chain(), DEMO_PROMPT.render).run(problems, {"policy": Short.for_problems(problems)})
    assert str(short.value) == "model 'policy' returned 0 results for 1 requests"


def test_select_without_candidates_or_with_zero_scores():
    from tts.graphs.executor import select
    from tts.graphs.roles import Candidate

    assert select([]) == (None, 0.0, None, {})
    zero = [Candidate("v:0", "v", "x", answer="3", score=0.0), Candidate("v:1", "v", "y", answer="4", score=0.0)]
    answer, confidence, chosen, votes = select(zero)
    assert (answer, confidence, chosen, votes) == ("3", 0.0, zero[0], {})
