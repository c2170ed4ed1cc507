"""AB-MCTS: widen/deepen decisions follow the evidence (toy scores, no LLM), the trace records
them, the multi-model variant prefers the model whose answers score higher (scripted backend),
batching per round, and ``tts eval`` end to end."""

from __future__ import annotations

import json
import random

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from tts.backends.scripted import ScriptedGenerator
from tts.cli.app import app
from tts.config import SamplingConfig
from tts.prompts import MATH_PROMPT
from tts.registry import STRATEGIES
from tts.search.base import StrategyInputError
from tts.search.tree.ab_mcts import ABMCTS, ABMCTSConfig, ab_mcts_search
from tts.types import Budget, Problem
from tts.verifiers.function import FunctionVerifier


def _toy(widen_mean: float, deepen_mean: float, seed: int = 0):
    """An expand function whose fresh samples score about ``widen_mean`` and refinements ``deepen_mean``."""
    rng = random.Random(seed)
    calls: list[int] = []

    def expand(jobs):
        calls.append(len(jobs))
        mean = [widen_mean if j.parent is None else deepen_mean for j in jobs]
        return [(None, min(1.0, max(0.0, rng.gauss(m, 0.1)))) for m in mean]

    return expand, calls


def _share(trees, action):
    return sum(t.choices[action] for t in trees) / sum(len(t.nodes) for t in trees)


def test_it_deepens_when_refinements_score_higher_and_widens_when_fresh_samples_do():
    rngs = [random.Random(i) for i in range(50)]
    expand, _ = _toy(widen_mean=0.2, deepen_mean=0.9)
    deep = ab_mcts_search(50, expand, n=16, rngs=rngs)
    expand, _ = _toy(widen_mean=0.9, deepen_mean=0.2)
    wide = ab_mcts_search(50, expand, n=16, rngs=[random.Random(i) for i in range(50)])
    assert _share(deep, "deepen") > 0.7 and _share(wide, "widen") > 0.7
    assert max(n.depth for t in deep for n in t.nodes) >= 4  # refinements of refinements
    # the first answer is always a fresh sample (the root has no children to descend into)
    assert all(t.nodes[0].action == "widen" and t.nodes[0].parent is None for t in deep + wide)


def test_with_equal_evidence_it_does_both():
    expand, _ = _toy(widen_mean=0.5, deepen_mean=0.5)
    trees = ab_mcts_search(50, expand, n=16, rngs=[random.Random(i) for i in range(50)])
    assert 0.25 < _share(trees, "deepen") < 0.75


def test_each_round_is_one_expand_call_for_all_problems_and_n_is_the_answer_count():
    expand, calls = _toy(0.5, 0.5)
    trees = ab_mcts_search(7, expand, n=10, parallel=4, rngs=[random.Random(i) for i in range(7)])
    assert calls == [28, 28, 14]  # rounds of 4, 4 and the last 2 descents per problem
    assert all(len(t.nodes) == 10 for t in trees)


def test_bad_arguments_are_refused():
    expand, _ = _toy(0.5, 0.5)
    with pytest.raises(ValueError, match="distinct"):
        ab_mcts_search(1, expand, n=2, models=("a", "a"))
    with pytest.raises(ValueError, match="one per problem"):
        ab_mcts_search(2, expand, n=2, rngs=[random.Random(0)])


# --- the strategy on the scripted backend --------------------------------------------------------------


def Oracle() -> FunctionVerifier:  # noqa: N802 -- reads as the verifier it builds
    """A test verifier that knows the gold answer (never a real one): 1 right, 0 wrong."""
    from tts.answers import extract_answer

    return FunctionVerifier.of_items(lambda i: float(extract_answer(i.steps[-1]) == i.problem.answer), name="oracle")


def _problems(count):
    return [Problem(f"p{i}", f"What is {i} + {i + 3}?", str(2 * i + 3)) for i in range(count)]


def _strategy(gen, verifier=None, generators=None, **cfg) -> ABMCTS:
    return ABMCTS(ABMCTSConfig(**cfg), gen, MATH_PROMPT.render, SamplingConfig(max_tokens=128), seed=1,
                  verifier=verifier, generators=generators)


def test_the_trace_records_every_widen_and_deepen_choice_and_refinements_read_their_parent():
    problems = _problems(8)
    gen = ScriptedGenerator.for_problems(problems, accuracy=0.5, seed=2)
    calls = []
    original = gen.generate

    def recording(requests):
        calls.append(list(requests))
        return original(requests)

    gen.generate = recording
    sols = _strategy(gen, Oracle(), n=6).solve(problems)
    for sol in sols:
        notes, tree = sol.trace.notes["ab_mcts"], sol.trace.tree
        assert notes["widen"] + notes["deepen"] == 6 == len(tree) == len(sol.trace.samples)
        assert sum(n["action"] == "deepen" for n in tree) == notes["deepen"]
        assert all((n["parent"] is None) == (n["action"] == "widen") for n in tree)
        assert all(n["model"] == "policy" for n in tree) and notes["models"] == {"policy": 6}
    # a refinement request carries the answer it refines as the assistant's turn, then the instruction
    texts = {n["text"] for sol in sols for n in sol.trace.tree}
    refinements = [r for call in calls for r in call if len(r.messages) > len(MATH_PROMPT.render(problems[0]))]
    assert refinements and all(r.messages[-2].role == "assistant" and r.messages[-2].content in texts
                               and "corrected solution" in r.messages[-1].content for r in refinements)
    assert len(calls) == 6  # one generate call per round (parallel = 1) for all 8 problems
    assert len({(r.key, r.seed) for call in calls for r in call}) == 48  # no seed sent twice


def test_the_multi_model_variant_prefers_the_model_whose_answers_score_higher():
    problems = _problems(30)
    weak = ScriptedGenerator.for_problems(problems, accuracy=0.1, seed=3)
    strong = ScriptedGenerator.for_problems(problems, accuracy=0.85, seed=4, model_name="strong-model")
    verifier = Oracle()
    sols = _strategy(weak, verifier, generators={"strong": strong}, n=12, parallel=2,
                     models=("policy", "strong")).solve(problems)
    calls = {"policy": 0, "strong": 0}
    for sol in sols:
        for model, count in sol.trace.notes["ab_mcts"]["models"].items():
            calls[model] += count
    assert calls["strong"] > 2 * calls["policy"], calls
    assert sum(s.answer == p.answer for s, p in zip(sols, problems, strict=True)) >= 27
    # requests to the other model are priced on it; one verifier call per round for all answers
    shapes = [s for sol in sols for s in sol.usage.shapes]
    assert sum(s.model == "strong-model" for s in shapes) == calls["strong"]
    assert sum(s.model == "" for s in shapes) == calls["policy"]
    assert verifier.calls == [60] * 6


def test_models_from_config_open_their_own_scripted_backend(tmp_path):
    out = tmp_path / "ab"
    args = ["eval", "--backend", "scripted", "--benchmark", "demo", "--limit", "4", "-s", "ab_mcts", "-n", "4",
            "--set", "models=[policy, {model: strong, accuracy: 0.85}]", "--set", "parallel=2", "--out", str(out)]
    r = CliRunner(env={"COLUMNS": "250"}).invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "ab_mcts" in r.output and "models=policy+strong(accuracy=0.85)" in r.output
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 4
    for row in rows:
        notes = row["trace"]["notes"]["ab_mcts"]
        assert notes["widen"] + notes["deepen"] == 4 and set(notes["models"]) == {"policy", "strong"}
        assert {n["model"] for n in row["trace"]["tree"]} <= {"policy", "strong"}


def test_tts_eval_runs_ab_mcts_on_the_scripted_backend(tmp_path):
    out = tmp_path / "ab1"
    r = CliRunner(env={"COLUMNS": "220"}).invoke(app, ["eval", "--backend", "scripted", "--benchmark", "demo",
                                                       "--limit", "3", "-s", "ab_mcts", "-n", "4", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "ab_mcts" in r.output and len((out / "results.jsonl").read_text().splitlines()) == 3


def test_config_and_budgets_say_what_to_change():
    with pytest.raises(ValidationError, match="models must be distinct"):
        ABMCTSConfig(models=("policy", "policy"))
    assert ABMCTSConfig(n=8).label == "ab_mcts@8"
    assert ABMCTSConfig(n=8, parallel=4, models=("policy", "qwen2.5-coder-1.5b")).label == \
        "ab_mcts@8,parallel=4,models=policy+qwen2.5-coder-1.5b"
    assert STRATEGIES.load("ab_mcts") is ABMCTS and ABMCTS.pool_rule is None
    problems = _problems(1)
    strategy = _strategy(ScriptedGenerator.for_problems(problems), Oracle(), n=8)
    with pytest.raises(StrategyInputError, match="lower n to 4"):
        strategy.solve(problems, [Budget(samples=4)])
    with pytest.raises(StrategyInputError, match="worst case of 1024"):
        strategy.solve(problems, [Budget(tokens=1000)])


def test_a_verifier_that_raises_does_not_end_the_run():
    def unreachable(item):
        raise ConnectionError("verifier unreachable")

    problems = _problems(3)
    broken = FunctionVerifier.of_items(unreachable, name="oracle")
    sols = _strategy(ScriptedGenerator.for_problems(problems, accuracy=0.6), broken, n=4).solve(problems)
    for sol in sols:
        assert sol.trace.events["verifier_error"] == 4 and len(sol.trace.samples) == 4
        assert sol.trace.events["unweighted_vote"] == 1  # every score 0: a plain vote decides
