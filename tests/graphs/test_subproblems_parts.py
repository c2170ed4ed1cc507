"""SCALE's roles (decomposer, assessor, subsolver) one at a time, on a model whose replies the
test writes (FunctionGenerator): the exact prompts, request settings, keys, outputs and events."""

from __future__ import annotations

import math

import pytest

from tts.backends.base import Completion, GenerationResult, Message, derive_seed
from tts.backends.function import FunctionGenerator
from tts.config import SamplingConfig
from tts.graphs.executor import GraphExecutor
from tts.graphs.graph import GraphError, NodeSpec, parse_graph
from tts.graphs.roles import Candidate, NodeContext
from tts.graphs.subproblems import ASSESSMENT, SUBPROBLEM, Assessor, Decomposer, SubSolver, parse_parts, part_key
from tts.types import Problem, Usage

PROBLEM = Problem("p", "What is 3 + 8 + 5?", "16")
SYSTEM = Message("system", "Answer briefly.")


def render(problem):
    return (SYSTEM, Message("user", f"Question: {problem.question}"))


def graph(**nodes):
    return parse_graph({"name": "g", "nodes": nodes})


def model(parts="1. What is 3 + 8?\n2. What is 11 + 5?", easy=None, verdicts=None, answers=None):
    """Decomposes into ``parts``; rates a step (key ``p#i``, ``p`` for part 0) with P(Yes) = easy[key] from
    one greedy token, or with the sampled replies verdicts[key]; answers from answers[key] (one text, or
    one per sample)."""

    def reply(req):
        text = req.messages[-1].content
        if "Break it into" in text:
            return parts
        if "Is this step easy" in text:
            if verdicts is not None:
                return verdicts[req.key]
            p = easy[req.key]
            top = {"Yes": math.log(p)} if p == 1.0 else {"Yes": math.log(p), "No": math.log(1 - p)}
            return Completion("Yes", 1, first_token_top_logprobs=top)
        return answers[req.key]

    return FunctionGenerator(reply)


def run(spec, gen, **kw):
    executor = GraphExecutor(spec, render, SamplingConfig(temperature=0.7, max_tokens=500), extract=lambda t: t.split()[-1],
                             seed=0, **kw)
    return executor.run([PROBLEM], {"policy": gen})[0]


def sent(gen, marker=None, key=None):
    """The requests whose prompt holds ``marker``, or the subsolvers' requests of ``key``."""
    if marker is not None:
        return [r for r in gen.requests if marker in r.messages[-1].content]
    return [r for r in gen.requests if r.key == key and not any(
        m in r.messages[-1].content for m in ("Break it into", "Is this step easy"))]


def test_parse_parts_reads_each_numbered_form_and_skips_the_rest():
    text = "Plan:\n  3 )  Add them.  \nSTEP 4:Multiply\nStep5) Check\n10. Ten\n100. Hundred\n1.\n7 x\n- 8. no"
    assert parse_parts(text, 9) == ["Add them.", "Multiply", "Check", "Ten"]
    assert parse_parts("1. a\n2. a\n3. b", 9) == ["a", "b"]  # a repeated question counts once
    assert parse_parts("1. a\n2. b\n3. c", 1) == ["c"]  # one part: the last
    assert parse_parts("1. a\n2. b\n3. c\n4. d", 3) == ["a", "b", "d"]
    assert parse_parts("1. a\n2. b", 2) == ["a", "b"]


def test_part_zero_is_keyed_by_the_problem_and_other_parts_by_their_number():
    assert part_key(PROBLEM, 0) == "p" and part_key(PROBLEM, 3) == "p#3"


def test_the_decomposer_asks_once_greedily_without_the_benchmark_prompt():
    spec = graph(decompose={"role": "decomposer", "max_parts": 2},
                 answer={"role": "subsolver", "part": 0, "inputs": ["decompose"]})
    gen = model(answers={"p": "It is 16"})
    sol = run(spec, gen)
    [req] = sent(gen, "Break it into")
    assert req.messages == (Message("user", (
        "Problem: Question: What is 3 + 8 + 5?\n\nDo not solve the problem. Break it into at most 2 simpler "
        "questions that, answered in order, lead to its answer. Write one question per line, numbered 1., 2., ...")),)
    assert (req.n, req.temperature, req.key) == (1, 0.0, "p")
    assert req.seed == derive_seed(0, "p|decompose", 0)  # the node's first (and only) request
    assert sol.answer == "16" and "decomposition_fallback" not in sol.trace.events


def _ctx(role, **spec):
    node = NodeSpec.model_validate({"role": role, **spec})
    return NodeContext("x", node, render, lambda t: t.split()[-1], 0.7, 1.0, 500, 0)


def _result(*texts):
    return GenerationResult(tuple(Completion(t, 2) for t in texts), Usage())


def test_the_decomposers_outputs_are_the_problem_then_its_parts():
    ctx = _ctx("decomposer", max_parts=2)
    out = Decomposer().read(ctx, PROBLEM, [], [_result("1. What is 3 + 8?\n2. What is 11 + 5?\n3. Done")])
    assert [(c.id, c.node, c.text, c.kind, c.written) for c in out.candidates] == [
        ("x:0", "x", "What is 3 + 8 + 5?", SUBPROBLEM, False), ("x:1", "x", "What is 3 + 8?", SUBPROBLEM, False),
        ("x:2", "x", "Done", SUBPROBLEM, False)]
    assert out.events == {}
    fallback = Decomposer().read(ctx, PROBLEM, [], [_result("I would not split it.")])
    assert [c.text for c in fallback.candidates] == ["What is 3 + 8 + 5?"]
    assert fallback.events == {"decomposition_fallback": 1}
    assert Decomposer().read(ctx, PROBLEM, [], []).events == {"decomposition_fallback": 1}


def test_a_greedy_assessor_reads_one_token_of_each_step_keyed_by_its_part():
    spec = graph(decompose={"role": "decomposer", "max_parts": 2},
                 assess={"role": "assessor", "inputs": ["decompose"]},
                 answer={"role": "subsolver", "part": 0, "n": 3, "inputs": ["decompose", "assess"]})
    gen = model(easy={"p": 0.2, "p#1": 0.9, "p#2": 0.9}, answers={"p": ["is 16", "is 16", "is 15"]})
    sol = run(spec, gen)
    reqs = sent(gen, "Is this step easy")
    assert [r.key for r in reqs] == ["p", "p#1", "p#2"]
    assert all((r.n, r.temperature, r.max_tokens, r.top_logprobs) == (1, 0.0, 1, 10) for r in reqs)
    # the problem's own question (not the benchmark's rendering), one user message
    assert reqs[1].messages == (Message("user", (
        "Problem: What is 3 + 8 + 5?\n\nOne step of solving it: What is 3 + 8?\n\nIs this step easy enough to "
        "answer correctly at once, without working? Answer Yes or No.")),)
    assert reqs[0].messages[0].content.startswith("Problem: What is 3 + 8 + 5?\n\nOne step of solving it: What is 3 + 8 + 5?")
    # the original problem rated 0.2 < 0.5: hard, three samples at the run's temperature and a vote
    [answer] = sent(gen, key="p")
    assert (answer.n, answer.temperature) == (3, 0.7) and sol.answer == "16"
    assert sol.trace.events == {"hard_part": 1}


def test_a_sampling_assessor_reads_the_share_of_yes_verdicts_and_an_unreadable_step_counts_hard():
    ctx = _ctx("assessor", n=3)
    inputs = [[Candidate("d:0", "d", "whole", kind=SUBPROBLEM, written=False),
               Candidate("d:1", "d", "first", kind=SUBPROBLEM, written=False),
               Candidate("d:2", "d", "second", kind=SUBPROBLEM, written=False)]]
    reqs = Assessor().plan(ctx, PROBLEM, inputs)
    assert [r.key for r in reqs] == ["p", "p#1", "p#2"]
    assert all((r.n, r.temperature, r.max_tokens, r.top_logprobs) == (3, 0.7, 500, 0) for r in reqs)
    # one seed per step: the steps' sampled verdicts are drawn independently
    assert [r.seed for r in reqs] == [derive_seed(0, "p|x", i) for i in range(3)]
    assert reqs[2].messages == (Message("user", (
        "Problem: What is 3 + 8 + 5?\n\nOne step of solving it: second\n\nIs this step easy enough to answer "
        "correctly at once? Think briefly, then end your reply with Yes or No.")),)
    results = [_result("Fine.\nYes", "Hmm.\nNo", "Sure.\nYes"), _result("Hmm", "Not sure"), _result("No", "No", "Yes")]
    out = Assessor().read(ctx, PROBLEM, inputs, results)
    assert [(c.id, c.node, c.text, c.kind, c.written, c.about.id) for c in out.candidates] == [
        ("x:0", "x", "whole", ASSESSMENT, False, "d:0"), ("x:1", "x", "first", ASSESSMENT, False, "d:1"),
        ("x:2", "x", "second", ASSESSMENT, False, "d:2")]
    assert [c.score for c in out.candidates] == [pytest.approx(2 / 3), 0.0, pytest.approx(1 / 3)]
    assert out.events == {"invalid_assessment": 1}
    assert Assessor().read(ctx, PROBLEM, inputs, [_result("Yes")] * 3).events == {}


def test_an_assessors_own_prompt_replaces_both_templates():
    ctx = _ctx("assessor", prompt="Easy? {step} (of {question})")
    inputs = [[Candidate("d:0", "d", "whole", kind=SUBPROBLEM, written=False)]]
    [req] = Assessor().plan(ctx, PROBLEM, inputs)
    assert req.messages == (Message("user", "Easy? whole (of What is 3 + 8 + 5?)"),)


def test_a_step_rated_exactly_at_the_threshold_is_easy():
    spec = graph(decompose={"role": "decomposer", "max_parts": 1},
                 assess={"role": "assessor", "n": 2, "inputs": ["decompose"]},
                 step_1={"role": "subsolver", "part": 1, "n": 4, "easy_threshold": 0.5, "inputs": ["decompose", "assess"]},
                 answer={"role": "subsolver", "part": 0, "n": 4, "easy_threshold": 0.6,
                         "inputs": ["decompose", "assess", "step_1"]})
    # both rated 0.5: easy for step_1 (threshold 0.5), hard for the answer (threshold 0.6)
    gen = model(parts="1. What is 3 + 8?", verdicts={"p": ["Yes", "No"], "p#1": ["No", "Yes"]},
                answers={"p#1": "is 11", "p": ["is 16", "is 16", "is 15", "is 16"]})
    sol = run(spec, gen)
    [step] = sent(gen, key="p#1")
    assert (step.n, step.temperature) == (1, 0.0)
    [answer] = sent(gen, key="p")
    assert (answer.n, answer.temperature) == (4, 0.7)
    assert sol.trace.events == {"easy_part": 1, "hard_part": 1}


def test_each_step_sees_the_voted_answers_of_the_steps_before_it():
    spec = graph(decompose={"role": "decomposer", "max_parts": 2},
                 step_1={"role": "subsolver", "part": 1, "n": 3, "inputs": ["decompose"]},
                 step_2={"role": "subsolver", "part": 2, "n": 1, "inputs": ["decompose", "step_1"]},
                 answer={"role": "subsolver", "part": 0, "n": 1, "inputs": ["decompose", "step_1", "step_2"]})
    gen = model(answers={"p#1": ["so 11", "so 12", "so 11"], "p#2": "so 16", "p": "so 16"})
    sol = run(spec, gen)
    [s1], [s2], [final] = sent(gen, key="p#1"), sent(gen, key="p#2"), sent(gen, key="p")
    assert s1.messages == (SYSTEM, Message("user", "Question: What is 3 + 8 + 5?\n\nNow answer this: What is 3 + 8?"))
    assert s2.messages == (SYSTEM, Message("user", (
        "Question: What is 3 + 8 + 5?\n\nSteps solved so far:\nStep 1: What is 3 + 8? Answer: 11.\n\n"
        "Now answer this: What is 11 + 5?")))
    assert final.messages[-1].content == (
        "Question: What is 3 + 8 + 5?\n\nSteps solved so far:\nStep 1: What is 3 + 8? Answer: 11.\n"
        "Step 2: What is 11 + 5? Answer: 16.\n\nNow answer this: the problem above.")
    assert all(r.n == n for r, n in ((s1, 3), (s2, 1), (final, 1))) and sol.answer == "16"
    assert sol.trace.events == {"hard_part": 3}  # no assessor: every part is hard


def test_the_steps_skip_inputs_without_solutions_and_steps_without_an_answer():
    sub = Candidate("d:1", "d", "What is 3 + 8?", kind=SUBPROBLEM, written=False)
    other = Candidate("d:2", "d", "What is 11 + 5?", kind=SUBPROBLEM, written=False)
    solved = [Candidate("s:0", "s", "so 11", answer="11", about=sub), Candidate("s:1", "s", "so 12", answer="12", about=sub),
              Candidate("s:2", "s", "so 12", answer="12", about=sub)]
    unanswered = [Candidate("t:0", "t", "no idea", answer=None, about=other)]
    loose = [Candidate("u:0", "u", "so 5", answer="5"), Candidate("u:1", "u", "crit", answer="7", kind="critique", about=sub)]
    inputs = [[sub, other], [], solved, unanswered, loose]
    assert SubSolver.steps(inputs) == [("What is 3 + 8?", "12")]


def test_a_part_zero_with_its_own_prompt_uses_it_even_without_earlier_steps():
    spec = graph(decompose={"role": "decomposer", "max_parts": 2},
                 answer={"role": "subsolver", "part": 0, "prompt": "Solve: {question} [{steps}] ({step})",
                         "inputs": ["decompose"]})
    gen = model(answers={"p": "so 16"})
    run(spec, gen)
    [req] = sent(gen, key="p")
    assert req.messages == (SYSTEM, Message("user", "Solve: Question: What is 3 + 8 + 5? [] (the problem above.)"))


def test_a_subsolver_reads_its_own_parts_rating_and_passes_its_samples_on():
    ctx = _ctx("subsolver", part=2, n=2, easy_threshold=0.7)
    whole = Candidate("d:0", "d", "whole", kind=SUBPROBLEM, written=False)
    first = Candidate("d:1", "d", "first", kind=SUBPROBLEM, written=False)
    second = Candidate("d:2", "d", "second", kind=SUBPROBLEM, written=False)
    ratings = [Candidate("a:0", "a", "whole", kind=ASSESSMENT, score=0.1, about=whole, written=False),
               Candidate("a:1", "a", "first", kind=ASSESSMENT, score=0.2, about=first, written=False),
               Candidate("a:2", "a", "second", kind=ASSESSMENT, score=0.8, about=second, written=False)]
    inputs = [[whole, first, second], ratings]
    assert SubSolver()._target(ctx, inputs) == (second, 0.8)
    [req] = SubSolver().plan(ctx, PROBLEM, inputs)
    assert (req.n, req.temperature, req.key, req.seed) == (1, 0.0, "p#2", derive_seed(0, "p|x", 0))
    out = SubSolver().read(ctx, PROBLEM, inputs, [_result("so 4", "so 5")])
    assert [(c.id, c.node, c.text, c.answer, c.about.id) for c in out.candidates] == [
        ("x:0", "x", "so 4", "4", "d:2"), ("x:1", "x", "so 5", "5", "d:2")]
    assert out.events == {"easy_part": 1}
    # no rating of its own part: hard
    unrated = [[whole, first, second], ratings[:2]]
    assert SubSolver()._target(ctx, unrated) == (second, None)
    [hard] = SubSolver().plan(ctx, PROBLEM, unrated)
    assert (hard.n, hard.temperature, hard.key, hard.seed) == (2, 0.7, "p#2", derive_seed(0, "p|x", 0))
    assert SubSolver().read(ctx, PROBLEM, unrated, [_result("so 4")]).events == {"hard_part": 1}
    # a part the decomposition did not make: no request, no output
    missing = [[whole, first], ratings[:2]]
    assert SubSolver()._target(ctx, missing) == (None, None)
    assert SubSolver().plan(ctx, PROBLEM, missing) == []
    assert SubSolver().read(ctx, PROBLEM, missing, [_result("so 4")]).candidates == ()
    assert SubSolver().read(ctx, PROBLEM, inputs, []).candidates == ()
    # only the input right after the decomposer is read as ratings
    late = [[whole, first, second], [], ratings]
    assert SubSolver()._target(ctx, late) == (second, None)


@pytest.mark.parametrize("nodes, message", [
    ({"g": {"role": "generator"}, "d": {"role": "decomposer", "inputs": ["g"]}},
     "a decomposer takes no inputs (it splits the problem itself)"),
    ({"g": {"role": "generator"}, "a": {"role": "assessor", "inputs": ["g"]}},
     "an assessor reads one input: the decomposer whose sub-problems it rates"),
    ({"d": {"role": "decomposer"}, "e": {"role": "decomposer"}, "a": {"role": "assessor", "inputs": ["d", "e"]}},
     "an assessor reads one input: the decomposer whose sub-problems it rates"),
    ({"d": {"role": "decomposer"}, "a": {"role": "assessor", "temperature": 0.5, "inputs": ["d"]}},
     "with n = 1 an assessor reads P(Yes) from one greedy token, so temperature and max_tokens do not apply; "
     "remove them, or set n > 1 to sample reasoned verdicts"),
    ({"d": {"role": "decomposer"}, "a": {"role": "assessor", "max_tokens": 5, "inputs": ["d"]}},
     "with n = 1 an assessor reads P(Yes) from one greedy token"),
    ({"g": {"role": "generator"}, "s": {"role": "subsolver", "inputs": ["g"]}},
     "a subsolver's first input is the decomposer whose sub-problem it answers"),
    ({"d": {"role": "decomposer"}, "a": {"role": "assessor", "inputs": ["d"]}, "g": {"role": "generator"},
      "s": {"role": "subsolver", "inputs": ["d", "a", "a"]}},
     "a subsolver reads the decomposer, then optionally one assessor, then earlier subsolvers; list its inputs in that order"),
    ({"d": {"role": "decomposer"}, "g": {"role": "generator"}, "s": {"role": "subsolver", "inputs": ["d", "g", "d"]}},
     "a subsolver reads the decomposer, then optionally one assessor, then earlier subsolvers"),
])
def test_miswired_nodes_are_refused_with_the_roles_message(nodes, message):
    with pytest.raises(GraphError) as err:
        parse_graph({"nodes": nodes, "output": list(nodes)[-1]})
    assert f": {message}" in str(err.value)


def test_well_wired_nodes_are_accepted():
    spec = graph(d={"role": "decomposer"}, a={"role": "assessor", "n": 3, "temperature": 0.5, "max_tokens": 9, "inputs": ["d"]},
                 s1={"role": "subsolver", "part": 1, "inputs": ["d", "a"]},
                 s2={"role": "subsolver", "part": 2, "inputs": ["d", "s1"]},
                 s0={"role": "subsolver", "inputs": ["d", "a", "s1", "s2"]})
    assert spec.sink() == "s0"
