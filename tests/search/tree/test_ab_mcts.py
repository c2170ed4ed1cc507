"""AB-MCTS: widen/deepen decisions follow the evidence (toy scores, no LLM), the trace records
them, the multi-model variant prefers the model whose answers score higher (scripted backend),
batching per round, and ``tts eval`` end to end."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from tts.backends.base import Completion, Message
from tts.backends.function import FunctionGenerator
from tts.backends.scripted import ScriptedGenerator
from tts.cli.app import app
from tts.config import OpenAIBackendConfig, SamplingConfig, ScriptedBackendConfig
from tts.prompts import MATH_PROMPT
from tts.registry import STRATEGIES
from tts.search.base import StrategyInputError
from tts.search.tree.ab_mcts import ROOT, ABMCTS, ABMCTSConfig, ABTree, ab_mcts_search, backend_config
from tts.types import Budget, Problem, Sample, Usage
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


# --- the models' entries --------------------------------------------------------------------------------


def test_a_model_entry_is_the_runs_backend_with_that_model_or_its_own_settings():
    policy = ScriptedGenerator.for_problems(_problems(1), accuracy=0.5, seed=7)
    assert backend_config("policy", policy) is None  # the run's own generator
    named = backend_config("strong", policy)
    assert (named.kind, named.model, named.seed, named.accuracy) == ("scripted", "strong", 7, 0.4)
    mapped = backend_config({"name": "s", "model": "m2", "accuracy": 0.85}, policy)  # the name is the trace's only
    assert (mapped.model, mapped.seed, mapped.accuracy) == ("m2", 7, 0.85)
    other = backend_config({"kind": "openai", "model": "gpt", "base_url": "http://x/v1"}, policy)
    assert (other.kind, other.model, other.base_url) == ("openai", "gpt", "http://x/v1")  # a whole config of its own
    with pytest.raises(StrategyInputError) as refused:
        backend_config({"model": "m", "accuracy": "lots"}, policy)
    assert str(refused.value) == ("ab_mcts: model 'm': accuracy='lots' is refused (input should be a valid number, "
                                  "unable to parse string as a number); change accuracy")  # one line, no pydantic URL
    tiny = ScriptedGenerator.for_problems(_problems(1), seed=5, model_name="tiny")
    settings = backend_config({"name": "s", "accuracy": 0.85}, tiny)  # no model: the run's
    assert (settings.model, settings.seed, settings.accuracy) == ("tiny", 5, 0.85)

    class Served:
        """A generator of an OpenAI-compatible server, with its backend config."""

        config = OpenAIBackendConfig(model="big", base_url="http://server/v1")

    derived = backend_config("small", Served())  # the same server, another model
    assert (derived.kind, derived.model, derived.base_url) == ("openai", "small", "http://server/v1")

    class Bare:
        """A generator without a backend config (a notebook's own)."""

    with pytest.raises(StrategyInputError, match=r"^ab_mcts: the run's generator \(Bare\) has no backend config to "
                                                 r"derive model 'strong' from; give the entry its own kind$"):
        backend_config("strong", Bare())


def test_a_labels_model_entry_shows_its_settings_but_not_its_name_or_model_twice():
    config = ABMCTSConfig(models=("policy", {"name": "strong", "model": "m", "accuracy": 0.85, "seed": 3}))
    assert config.label == "ab_mcts@8,models=policy+strong(accuracy=0.85,seed=3)"
    assert ABMCTSConfig(models=("policy", {"model": "m"})).label == "ab_mcts@8,models=policy+m"


def test_a_given_generator_that_is_the_runs_own_is_priced_as_the_run():
    problems = _problems(2)
    policy = ScriptedGenerator.for_problems(problems, accuracy=0.5, seed=2, model_name="run-model")
    other = ScriptedGenerator.for_problems(problems, accuracy=0.5, seed=3, model_name="other-model")
    sols = _strategy(policy, Oracle(), generators={"again": policy, "other": other}, n=6,
                     models=("policy", "again", "other")).solve(problems)
    priced = {}
    for sol in sols:
        for node, shape in zip(sol.trace.tree, sol.usage.shapes, strict=True):
            priced.setdefault(node["model"], set()).add(shape.model)
    assert priced["other"] == {"other-model"}
    assert priced["again"] == {""} and priced.get("policy", {""}) == {""}  # the run's model: unsaid
    assert "again" in priced


# --- the answer and the trace of one tree, built by hand ---------------------------------------------------


def _hand_tree(answers=("5", "7", None, "7", "5", "5")) -> ABTree:
    """Six answers: 0 "5" (0.2), its refinement 1 "7" (0.9, by m2), 2 no answer (0.95), 3 "7" (0.9),
    4 "5" refining 1 (0.3), 5 "5" (0.1); completion tokens 10 to 15."""
    tree = ABTree(["policy", "m2"])
    shape = [(ROOT, 0.2, "policy"), (0, 0.9, "m2"), (ROOT, 0.95, "policy"), (ROOT, 0.9, "policy"), (1, 0.3, "policy"),
             (ROOT, 0.1, "policy")]
    for (parent, score, model), answer in zip(shape, answers, strict=True):
        tree.add(parent, Sample(text=f"so {answer}", answer=answer, completion_tokens=10 + len(tree.nodes)), score, model)
    return tree


def _chosen(select: str, tree: ABTree):
    problems = _problems(1)
    strategy = ABMCTS(ABMCTSConfig(select=select, models=("policy", "m2")), ScriptedGenerator.for_problems(problems),
                      MATH_PROMPT.render, SamplingConfig(max_tokens=64), seed=1)
    events: Counter[str] = Counter()
    return strategy._solution(problems[0], tree, Usage(prompt_tokens=3), events), events


@pytest.mark.parametrize("select, answer, confidence, votes, chosen", [
    ("verifier", "7", 0.9, {}, 1),  # the best-scored answer (2 has none), the first of the tied 0.9s
    ("vote", "5", 3 / 6, {"5": 3.0, "7": 2.0}, 0),  # a plain vote: a share of all six
    ("weighted_vote", "7", 1.8 / 3.35, {"5": 0.6, "7": 1.8}, 1)])  # 0.9 + 0.9 of 3.35 in all
def test_the_answer_of_each_select_and_the_trace_of_the_tree(select, answer, confidence, votes, chosen):
    sol, events = _chosen(select, _hand_tree())
    assert (sol.answer, sol.trace.votes, sol.trace.selected) == (answer, pytest.approx(votes), chosen)
    assert sol.confidence == pytest.approx(confidence) and not events
    assert (sol.problem_id, sol.trace.strategy, sol.usage) == ("p0", "ab_mcts", Usage(prompt_tokens=3))
    assert sol.trace.scores == (0.2, 0.9, 0.95, 0.9, 0.3, 0.1)
    assert [(s.text, s.answer, s.completion_tokens) for s in sol.trace.samples] == [
        (f"so {a}", a, 10 + i) for i, a in enumerate(("5", "7", None, "7", "5", "5"))]
    assert sol.trace.notes == {"ab_mcts": {"widen": 4, "deepen": 2, "models": {"policy": 5, "m2": 1}},
                               "chosen_node": chosen}
    rows = [(n["id"], n["parent"], n["depth"], n["action"], n["model"], n["tokens"], n["score"], n["finished"])
            for n in sol.trace.tree]
    assert rows == [(0, None, 1, "widen", "policy", 10, 0.2, True), (1, 0, 2, "deepen", "m2", 11, 0.9, True),
                    (2, None, 1, "widen", "policy", 12, 0.95, True), (3, None, 1, "widen", "policy", 13, 0.9, True),
                    (4, 1, 3, "deepen", "policy", 14, 0.3, True), (5, None, 1, "widen", "policy", 15, 0.1, True)]
    assert [n["kept"] for n in sol.trace.tree] == [n["answer"] == answer for n in sol.trace.tree]  # the chosen answer's
    assert [n["text"] for n in sol.trace.tree] == [f"so {a}" for a in ("5", "7", None, "7", "5", "5")]


def test_without_an_answer_the_verifier_select_answers_nothing_and_chooses_no_node():
    sol, _ = _chosen("verifier", _hand_tree(answers=(None,) * 6))
    assert (sol.answer, sol.confidence, sol.trace.votes, sol.trace.selected) == (None, 0.0, {}, None)
    assert "chosen_node" not in sol.trace.notes and not any(n["kept"] for n in sol.trace.tree)


# --- what the strategy sends and records ------------------------------------------------------------------


def _in_scoring_order(sols):
    """Every node of one round after the other, problems in order within a round (parallel = 1)."""
    return [n for depth in range(len(sols[0].trace.tree)) for sol in sols for n in sol.trace.tree[depth:depth + 1]]


def test_every_request_carries_the_runs_sampling_and_a_seed_of_its_own_problem_model_and_place():
    from tts.backends.base import GenerationResult, derive_seed
    from tts.verifiers.base import VerifierScore

    problems = _problems(2)

    def reply(request):
        if request.key == "p1" and len(request.messages) > 2:  # p1's refinements come back empty
            return GenerationResult((), Usage())
        return Completion(f"The answer is \\boxed{{{len(request.messages)}}}.", 7, -0.25, "stop")

    gen = FunctionGenerator(reply, model_name="fn")
    scores = iter([0.9, float("nan"), 0.4, 2.0] * 10)
    seen_logprobs = []

    def score(item):
        seen_logprobs.extend(item.logprobs)
        value = next(scores)
        return VerifierScore((), value, Usage(prompt_tokens=5), invalid=int(value == 0.4))  # 0.4: one it replaced

    verifier = FunctionVerifier.of_items(score)
    strategy = ABMCTS(ABMCTSConfig(n=4, prior_a=5.0, prior_b=0.1), gen, MATH_PROMPT.render,
                      SamplingConfig(temperature=0.6, top_p=0.9, max_tokens=96), seed=3, verifier=verifier)
    sols = strategy.solve(problems)
    requests = [r for call in gen.calls for r in call]
    assert len(requests) == 8 and all((r.n, r.temperature, r.top_p, r.max_tokens) == (1, 0.6, 0.9, 96) for r in requests)
    label = strategy.config.label
    for p, sol in zip(problems, sols, strict=True):
        mine = [r for r in requests if r.key == p.id]
        nodes = sol.trace.tree
        where = ["root" if n["parent"] is None else f"node{n['parent']}" for n in nodes]
        assert [r.seed for r in mine] == [derive_seed(3, f"{p.id}|{label}|policy|{w}", k) for k, w in enumerate(where)]
        # the verifier's tokens are on the bill: 5 prompt tokens per answer
        generated = sol.usage.shapes  # one per request that came back with a reply
        assert sol.usage.calls == len(generated)
        assert sol.usage.prompt_tokens == sum(shape.prompt_tokens for shape in generated) + 4 * 5
    # Scores outside [0, 1] or NaN are counted as invalid; an empty reply is an answerless sample.
    assert sum(sol.trace.events.get("invalid_score", 0) for sol in sols) == 6  # 2 NaN, 2 above 1, 2 it replaced
    empty = sols[1].trace.events.get("no_completion", 0)
    assert empty == sum(n["parent"] is not None for n in sols[1].trace.tree) > 0
    assert all((n["text"], n["answer"], n["tokens"]) == ("", None, 0) for n in sols[1].trace.tree if n["parent"] is not None)
    assert sols[1].trace.events["no_completion"] == empty  # counted once each
    # A refinement shows the model its answer, then asks in the user's turn.
    refinements = [r for r in requests if len(r.messages) > 1 and r.messages[-2].role == "assistant"]
    assert refinements and all(r.messages[-1] == Message("user", strategy.config.instruction) for r in refinements)
    # The verifier reads each answer's mean log-probability (an empty reply has none).
    assert seen_logprobs == [None if n["text"] == "" else -0.25 for n in _in_scoring_order(sols)]


def test_the_thompson_draws_are_seeded_by_the_run_and_the_prior_is_the_configs():
    def parents(seed, **settings):
        gen = FunctionGenerator(lambda request: "The answer is \\boxed{3}.", model_name="fn")
        scores = iter([0.1, 0.9, 0.5, 0.7, 0.3] * 40)
        strategy = ABMCTS(ABMCTSConfig(n=6, **settings), gen, MATH_PROMPT.render, SamplingConfig(max_tokens=32),
                          seed=seed, verifier=FunctionVerifier.of_items(lambda item: next(scores)))
        return [[n["parent"] for n in sol.trace.tree] for sol in strategy.solve(_problems(6))]

    assert parents(1) == parents(1)  # a run repeats
    assert parents(1) != parents(2)  # another run seed, other draws (the replies are the same)
    assert parents(1) != parents(1, prior_a=20.0, prior_b=0.05)  # the prior shapes the descents


def test_a_model_entry_opens_its_own_backend_for_each_batch_of_problems_and_is_priced_on_it():
    first = _problems(3)
    second = [Problem(f"q{i}", f"Which fruit is number {i}?", fruit) for i, fruit in enumerate(["apple", "pear", "plum"])]
    policy = ScriptedGenerator.for_problems(first + second, accuracy=0.1, seed=2)
    strategy = _strategy(policy, Oracle(), n=6, models=("policy", {"name": "strong", "model": "strong-model",
                                                                    "accuracy": 0.9}))
    try:
        for problems in (first, second):  # the scripted backend answers only the problems it was opened with
            sols = strategy.solve(problems)
            nodes = [n for sol in sols for n in sol.trace.tree]
            strong = [n for n in nodes if n["model"] == "strong"]
            assert strong and any(n["answer"] in {p.answer for p in problems} for n in strong)
            priced = [s.model for sol in sols for s in sol.usage.shapes]
            assert priced.count("strong-model") == len(strong) and priced.count("") == len(nodes) - len(strong)
    finally:
        strategy.close()


def test_an_entry_equal_to_the_runs_backend_is_the_run_and_a_generator_without_a_name_goes_by_its_entry():
    problems = _problems(2)
    policy = ScriptedGenerator.for_problems(problems, accuracy=0.5, seed=2)
    policy.config = ScriptedBackendConfig(model="scripted", accuracy=0.5, seed=2)  # as a run opened from its config

    class Unnamed:
        """A generator with no model_name (a notebook's own)."""

        def generate(self, requests):
            return policy.generate(requests)

    strategy = _strategy(policy, Oracle(), generators={"plain": Unnamed()}, n=8,
                         models=("policy", {"name": "same", "accuracy": 0.5}, "plain"))
    opened = strategy._generators(problems)
    assert opened["same"] == (policy, "") and opened["policy"] == (policy, "")
    assert opened["plain"][1] == "plain"


def test_the_search_refuses_bad_settings_exactly_and_its_default_generators_repeat():
    expand, _ = _toy(0.5, 0.5)
    with pytest.raises(ValueError, match=r"^n \(0\) and parallel \(1\) must be >= 1$"):
        ab_mcts_search(1, expand, n=0)
    with pytest.raises(ValueError, match=r"^n \(2\) and parallel \(0\) must be >= 1$"):
        ab_mcts_search(1, expand, n=2, parallel=0)
    with pytest.raises(ValueError, match=r"^the Beta prior's \(a, b\) must both be > 0; got \(0.0, 1.0\)$"):
        ab_mcts_search(1, expand, n=2, prior=(0.0, 1.0))
    with pytest.raises(RuntimeError, match=r"^expand returned 0 answers for 2 jobs$"):
        ab_mcts_search(2, lambda jobs: [], n=1)
    [one] = ab_mcts_search(1, expand, n=1)  # one answer is enough: a fresh sample
    assert [node.action for node in one.nodes] == ["widen"] and one.prior == (0.5, 0.5)
    assert ab_mcts_search(1, expand, n=3, prior=(2.0, 3.0))[0].prior == (2.0, 3.0)

    def parents(seed):  # scores fixed by the job's place, so only the descents' draws can differ
        trees = ab_mcts_search(3, lambda jobs: [(None, 0.3 + 0.1 * (i % 5)) for i, _ in enumerate(jobs)], n=8)
        return [[node.parent for node in t.nodes] for t in trees]

    assert parents(0) == parents(1)  # seeded 0, 1, 2 by default: a run repeats
    assert len({str(p) for p in parents(0)}) > 1  # and each problem has its own generator


def test_budgets_are_refused_below_the_worst_case_only_and_an_entry_without_a_name_goes_by_its_kind():
    problems = _problems(2)
    strategy = _strategy(ScriptedGenerator.for_problems(problems), Oracle(), n=4)
    with pytest.raises(StrategyInputError, match=r"^got 1 budgets for 2 problems; give one per problem$"):
        strategy.solve(problems, [Budget(samples=4)])
    sols = strategy.solve(problems, [None, Budget(samples=4, tokens=4 * 128)])  # exactly the worst case runs
    assert [len(s.trace.samples) for s in sols] == [4, 4]
    with pytest.raises(StrategyInputError, match="lower n to 3"):
        strategy.solve(problems, [None, Budget(samples=3)])  # a None budget does not end the checks
    assert strategy.solve(problems, [Budget(samples=4), Budget(samples=4)])[0].answer is not None  # tokens unset
    assert ABMCTSConfig(models=("policy", {"kind": "openai", "base_url": "http://x/v1"})).label == \
        "ab_mcts@8,models=policy+openai(base_url=http://x/v1,kind=openai)"
    assert ABMCTS(ABMCTSConfig(models=({"base_url": "http://x/v1"},)), ScriptedGenerator.for_problems(problems),
                  MATH_PROMPT.render).model_names == ["policy"]


class _Fixed(random.Random):
    """A generator whose Beta draws are all ``value``, recording their (a, b)."""

    def __init__(self, value: float = 0.5) -> None:
        super().__init__(0)
        self.value, self.drawn = value, []

    def betavariate(self, alpha, beta):
        self.drawn.append((alpha, beta))
        return self.value


def test_draws_use_the_priors_a_and_b_each_in_its_place_and_a_tie_goes_to_gen():
    tree = ABTree(["m1", "m2"], prior=(2.0, 0.5))
    tree.add(ROOT, None, 0.75, "m1")  # one answer: GEN(root) has 0.75 of 1, the model m1 too
    rng = _Fixed()
    assert tree.select(rng) == (ROOT, "m1")  # GEN and CONT draw the same: GEN; the models tie: the first
    assert rng.drawn == [(2.75, 0.75), (2.0, 0.5), (2.75, 0.75), (2.0, 0.5)]  # GEN, CONT, then m1 and m2


def test_a_strategy_without_a_seed_is_seeded_0_and_a_failing_verifier_is_logged_per_round(caplog):
    problems = _problems(3)
    gen = ScriptedGenerator.for_problems(problems, accuracy=0.6)
    default = ABMCTS(ABMCTSConfig(n=4, verifier="arithmetic"), gen, MATH_PROMPT.render, verifier=Oracle())
    zero = ABMCTS(ABMCTSConfig(n=4, verifier="arithmetic"), gen, MATH_PROMPT.render, seed=0, verifier=Oracle())
    assert [[n["parent"] for n in s.trace.tree] for s in default.solve(problems)] == \
        [[n["parent"] for n in s.trace.tree] for s in zero.solve(problems)]

    def unreachable(item):
        raise ConnectionError("verifier unreachable")

    broken = FunctionVerifier.of_items(unreachable, name="oracle")
    with caplog.at_level("WARNING"):
        _strategy(gen, broken, n=2).solve(problems)
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == ["verifier oracle failed on 3 answers"] * 2


def test_the_search_gets_the_configs_prior_a_model_that_loses_results_is_refused_and_a_step_verifier_gets_steps(
        monkeypatch):
    import tts.search.tree.ab_mcts as module

    problems = _problems(2)
    gen = FunctionGenerator(lambda request: "1 + 1 = 2\n\nSo the answer is \\boxed{2}.", model_name="fn")
    seen = []
    search = module.ab_mcts_search
    monkeypatch.setattr(module, "ab_mcts_search", lambda *args, **kwargs: seen.append(args[6]) or search(*args, **kwargs))
    steps = []
    verifier = FunctionVerifier.of_items(lambda item: steps.append(item.steps) or 0.5, per_step=True)
    ABMCTS(ABMCTSConfig(n=2, prior_a=3.0, prior_b=0.25), gen, MATH_PROMPT.render, verifier=verifier).solve(problems)
    assert seen == [(3.0, 0.25)]
    assert steps and set(steps) == {("1 + 1 = 2", "So the answer is \\boxed{2}.")}  # cut into its steps

    class Lossy:
        """A generator that answers no request."""

        model_name = "lossy"

        def generate(self, requests):
            return []

    with pytest.raises(RuntimeError, match=r"^model 'policy' returned 0 results for 2 requests$"):
        _strategy(Lossy(), Oracle(), n=2).solve(problems)
