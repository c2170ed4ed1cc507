"""A graph search's evaluation of one split: each graph runs with the run's sampling and seed, its
answers are graded against the gold answers in problem order, and accuracy, tokens and requests
are per problem; the evaluator refuses a split it cannot grade, in one line naming the problems."""

from __future__ import annotations

import pytest

from tts.backends.base import derive_seed
from tts.backends.scripted import ScriptedGenerator
from tts.benchmarks.demo import DEMO_PROMPT
from tts.benchmarks.grading import Outcome
from tts.config import SamplingConfig
from tts.graphs.graph import GraphError, parse_graph
from tts.graphs.search import Evaluation
from tts.graphs.search_eval import MemoEvaluator, SplitEvaluator
from tts.types import Problem

PROBLEMS = [Problem("p1", "What is 1 + 1?", "2"), Problem("p2", "What is 2 + 2?", "4"),
            Problem("p3", "What is 3 + 3?", "6")]
# One generator node of two samples: one request per problem.
GRAPH = parse_graph({"name": "one", "nodes": {"a": {"role": "generator", "n": 2}}})


class Recording(ScriptedGenerator):
    """The scripted backend (always right here), keeping every request and result."""

    def __init__(self) -> None:
        super().__init__({p.id: {p.answer: 1.0} for p in PROBLEMS})
        self.requests, self.results = [], []

    def generate(self, requests):
        results = super().generate(requests)
        self.requests += requests
        self.results += results
        return results


def _grade_right_on(golds, seen):
    """A grader that calls an answer correct only when its gold is one of ``golds``."""
    def grade(pairs):
        seen.append(list(pairs))
        return [Outcome.CORRECT if a == g and g in golds else Outcome.WRONG for a, g in pairs]
    return grade


def test_accuracy_tokens_and_requests_are_per_problem_and_graded_in_order():
    gen, seen = Recording(), []
    [ev] = SplitEvaluator(PROBLEMS, gen, DEMO_PROMPT.render, _grade_right_on({"2", "6"}, seen))([GRAPH])
    assert seen == [[("2", "2"), ("4", "4"), ("6", "6")]]  # (answer, gold) per problem, in order
    assert len(gen.requests) == 3 and [r.n for r in gen.requests] == [2, 2, 2]
    tokens = sum(r.usage.total_tokens for r in gen.results)
    assert tokens > 3
    assert ev == Evaluation(accuracy=2 / 3, tokens_per_problem=tokens / 3, requests_per_problem=1.0, problems=3)


def test_each_graph_runs_with_the_runs_seed_and_sampling():
    gen = Recording()
    SplitEvaluator(PROBLEMS[:1], gen, DEMO_PROMPT.render, _grade_right_on({"2"}, []))([GRAPH])
    [default] = gen.requests
    assert default.seed == derive_seed(0, "p1|a", 0)  # the run seed defaults to 0
    assert (default.temperature, default.top_p, default.max_tokens) == (0.7, 1.0, 256)
    gen = Recording()
    sampling = SamplingConfig(temperature=0.3, top_p=0.5, max_tokens=77)
    SplitEvaluator(PROBLEMS[:1], gen, DEMO_PROMPT.render, _grade_right_on({"2"}, []), sampling, seed=7)([GRAPH])
    [req] = gen.requests
    assert req.seed == derive_seed(7, "p1|a", 0)
    assert (req.temperature, req.top_p, req.max_tokens) == (0.3, 0.5, 77)


def test_a_split_it_cannot_grade_is_refused_in_one_line():
    grade = _grade_right_on(set(), [])
    with pytest.raises(GraphError) as empty:
        SplitEvaluator([], Recording(), DEMO_PROMPT.render, grade)
    assert str(empty.value) == "a graph evaluation split is empty; give it at least one problem"
    ungraded = [Problem(f"q{k}", "?") for k in range(4)]
    with pytest.raises(GraphError) as missing:
        SplitEvaluator(PROBLEMS[:1] + ungraded, Recording(), DEMO_PROMPT.render, grade)
    assert str(missing.value) == "problems q0, q1, q2 have no gold answer; a search split needs them"


def test_the_memo_evaluates_each_distinct_graph_once():
    other = parse_graph({"name": "two", "nodes": {"a": {"role": "generator", "n": 3}}})
    calls = []

    def evaluate(specs):
        calls.append([s.name for s in specs])
        return [Evaluation(0.1 * s.nodes["a"].n, 10.0, 1.0, 3) for s in specs]

    memo = MemoEvaluator(evaluate)
    first = memo([GRAPH, other, GRAPH])
    assert calls == [["one", "two"]] and [e.accuracy for e in first] == pytest.approx([0.2, 0.3, 0.2])
    again = memo([other, GRAPH])
    assert calls == [["one", "two"]] and again == [first[1], first[0]]
