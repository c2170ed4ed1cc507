"""Sequential revision on the scripted backend: rounds, critiques, selection and budgets."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tts.backends.function import RecordingGenerator
from tts.backends.scripted import ScriptedGenerator
from tts.config import SamplingConfig
from tts.prompts import MATH_PROMPT
from tts.search.base import StrategyInputError
from tts.search.sequential.revision import Revision, RevisionConfig, plan_attempts
from tts.types import Budget, Problem, Usage
from tts.verifiers.base import VerifierScore
from tts.verifiers.function import FunctionVerifier

PROBLEMS = [Problem(f"p{i}", f"What is {i} + {i}?", str(2 * i)) for i in range(4)]


def _recording(*args, **kwargs) -> RecordingGenerator:
    """The scripted backend (built as ``ScriptedGenerator.for_problems`` when given problems),
    remembering every generate call's requests."""
    if args and isinstance(args[0], list):
        return RecordingGenerator(ScriptedGenerator.for_problems(*args, **kwargs))
    return RecordingGenerator(ScriptedGenerator(*args, **kwargs))


def _AnswerVerifier(score_of, default=0.25) -> FunctionVerifier:  # noqa: N802 -- reads as the verifier it builds
    """Scores an attempt ``score_of[answer]`` (by its boxed answer); counts calls; costs 10 prompt tokens."""

    def reward(problem, text):
        score = next((s for a, s in score_of.items() if f"\\boxed{{{a}}}" in text), default)
        return VerifierScore((), score, Usage(prompt_tokens=10, calls=1))

    return FunctionVerifier(reward, name="answer")


def _revision(gen, ready=None, sampling=None, **cfg):
    """A Revision; ``ready`` is a verifier object used in place of the config's (which must name one)."""
    return Revision(RevisionConfig(**cfg), gen, MATH_PROMPT.render, sampling, verifier=ready)


def test_s_chains_of_r_rounds_make_r_plus_1_generate_calls_and_s_times_r_plus_1_attempts():
    gen = _recording(PROBLEMS, accuracy=0.5, seed=1)
    sols = _revision(gen, n=9, rounds=2).solve(PROBLEMS)  # S = 3 chains x R = 2 rounds
    assert len(gen.calls) == 3  # one call per round, all chains of all problems together
    assert [len(c) for c in gen.calls] == [4, 12, 12]  # round 0: one n=3 request per problem; then one per chain
    assert all(r.n == 3 for r in gen.calls[0]) and all(r.n == 1 for c in gen.calls[1:] for r in c)
    for sol in sols:
        assert len(sol.trace.samples) == 9
        nodes = {n["id"]: n for n in sol.trace.tree}
        assert sorted((n["chain"], n["round"]) for n in nodes.values()) == [(c, r) for c in range(3) for r in range(3)]
        for node in nodes.values():  # every revision hangs under its chain's previous attempt
            assert node["parent"] is None if node["round"] == 0 else nodes[node["parent"]]["round"] == node["round"] - 1
        assert sol.usage.calls == 1 + 3 * 2
        assert sol.usage.completion_tokens == sum(s.completion_tokens for s in sol.trace.samples)


def test_the_revision_prompt_holds_the_problem_the_previous_attempt_and_the_critique():
    gen = _recording(PROBLEMS[:1], accuracy=0.5, seed=2)
    verifier = _AnswerVerifier({}, default=0.25)
    sol = _revision(gen, verifier, n=2, rounds=1, verifier="arithmetic", critique=True).solve(PROBLEMS[:1])[0]
    first = sol.trace.samples[0]
    revise = gen.calls[1][0].messages
    assert revise[:-2] == MATH_PROMPT.render(PROBLEMS[0])
    assert revise[-2].role == "assistant" and revise[-2].content == first.text
    assert revise[-1].role == "user"
    assert revise[-1].content.startswith("A checker gave your solution a score of 0.25")
    assert "corrected solution" in revise[-1].content
    assert len(verifier.calls) == 2  # one verifier call per round
    # Without critique the same verifier scores the attempts but says nothing in the prompt.
    gen2 = _recording(PROBLEMS[:1], accuracy=0.5, seed=2)
    _revision(gen2, _AnswerVerifier({}), n=2, rounds=1, verifier="arithmetic").solve(PROBLEMS[:1])
    assert "score" not in gen2.calls[1][0].messages[-1].content


def test_the_answer_is_chosen_across_all_attempts_by_vote_or_by_verifier():
    # "4" is the model's usual answer; the verifier only trusts the rarer "5".
    gen = ScriptedGenerator({"p2": {"4": 0.75, "5": 0.25}}, seed=3)
    verifier = _AnswerVerifier({"5": 0.9, "4": 0.1})
    by_vote = _revision(gen, verifier, n=16, rounds=3, verifier="arithmetic").solve([PROBLEMS[2]])[0]
    by_verifier = _revision(gen, verifier, n=16, rounds=3, verifier="arithmetic",
                            select="verifier").solve([PROBLEMS[2]])[0]
    answers = [s.answer for s in by_vote.trace.samples]
    assert answers.count("4") > answers.count("5") > 0
    assert by_vote.answer == "4" and by_vote.confidence == answers.count("4") / 16
    assert by_verifier.answer == "5" and by_verifier.confidence == 0.9
    assert by_verifier.trace.samples[by_verifier.trace.selected].answer == "5"
    # (an attempt cut off before its answer gets the verifier's default score, 0.25)
    assert by_verifier.trace.scores == tuple({"5": 0.9, "4": 0.1}.get(a, 0.25) for a in
                                             (s.answer for s in by_verifier.trace.samples))
    kept = [n for n in by_verifier.trace.tree if n["kept"]]
    assert kept and all(n["answer"] == "5" for n in kept)


def test_verifier_usage_is_counted_and_accept_score_stops_a_chain():
    gen = _recording({"p1": {"2": 0.5, "3": 0.5}}, seed=4)
    verifier = _AnswerVerifier({"2": 1.0}, default=0.0)
    sol = _revision(gen, verifier, n=12, rounds=3, verifier="arithmetic", accept_score=0.8).solve([PROBLEMS[1]])[0]
    by_chain = {}
    for node in sol.trace.tree:
        by_chain.setdefault(node["chain"], []).append(node)
    for nodes in by_chain.values():
        nodes.sort(key=lambda n: n["round"])
        accepted = [k for k, n in enumerate(nodes) if n["answer"] == "2"]
        # a chain stops right after its first accepted attempt, else runs all 3 rounds
        assert len(nodes) == (accepted[0] + 1 if accepted else 4)
    assert len(sol.trace.samples) < 12
    generated = sum(gen.prompt_tokens(r) for c in gen.calls for r in c)
    assert sol.usage.prompt_tokens == generated + 10 * len(sol.trace.samples)  # policy + verifier


def test_budgets_keep_the_rounds_and_cut_chains_then_rounds():
    gen = _recording(PROBLEMS, accuracy=0.5, seed=5)
    rev = _revision(gen, sampling=SamplingConfig(max_tokens=100), n=9, rounds=2)
    sols = rev.solve(PROBLEMS, [Budget(samples=7), Budget(samples=2), Budget(tokens=350), None])
    shapes = [sorted((n["chain"], n["round"]) for n in s.trace.tree) for s in sols]
    assert shapes[0] == [(c, r) for c in range(2) for r in range(3)]  # 7 allowed: 2 chains x 3 attempts
    assert shapes[1] == [(0, 0), (0, 1)]  # 2 allowed: one chain, one revision
    assert shapes[2] == [(0, 0), (0, 1), (0, 2)]  # 350 tokens at 100 per attempt: 3 attempts
    assert len(shapes[3]) == 9
    assert len(gen.calls) == 3  # problems with fewer rounds drop out; still one call per round
    with pytest.raises(StrategyInputError, match="does not cover one attempt"):
        rev.solve(PROBLEMS[:1], [Budget(tokens=50)])
    assert plan_attempts(4, 1, 5) == (2, 1) and plan_attempts(4, 3, 2) == (1, 1)


def test_a_broken_verifier_scores_attempts_zero_and_the_run_goes_on():
    def down(problem, text):
        raise RuntimeError("judge down")

    gen = ScriptedGenerator.for_problems(PROBLEMS[:2], accuracy=0.5, seed=6)
    sols = _revision(gen, FunctionVerifier(down, name="answer"), n=4, rounds=1, verifier="arithmetic", critique=True).solve(PROBLEMS[:2])
    assert all(s.trace.events == {"verifier_error": 2} and set(s.trace.scores) == {0.0} for s in sols)


def test_configs_that_would_ignore_a_setting_are_refused_with_what_to_change():
    with pytest.raises(ValidationError, match="multiple of rounds \\+ 1"):
        RevisionConfig(n=5, rounds=1)
    with pytest.raises(ValidationError, match="critique needs a verifier"):
        RevisionConfig(n=4, critique=True)
    with pytest.raises(ValidationError, match="select=verifier needs a verifier"):
        RevisionConfig(n=4, select="verifier")
    with pytest.raises(ValidationError, match="critique_template must format"):
        RevisionConfig(n=4, verifier="arithmetic", critique=True, critique_template="{grade}")
    cfg = RevisionConfig(n=8, rounds=3, verifier="judge", select="verifier")
    assert cfg.chains == 2 and cfg.label == "revision@8,rounds=3,verifier=judge,select=verifier"


def test_the_real_judge_critiques_with_the_policy_model_and_its_usage_is_counted():
    gen = _recording(PROBLEMS[:2], accuracy=0.5, seed=7)
    rev = Revision(RevisionConfig(n=4, rounds=1, verifier="judge", critique=True), gen, MATH_PROMPT.render)
    sols = rev.solve(PROBLEMS[:2])
    policy = [c for c in gen.calls if "Yes or No" not in c[0].messages[-1].content]
    assert len(policy) == 2 and len(gen.calls) == 4  # two rounds, each followed by one judge call
    judged = sum(len(c) for c in gen.calls) - sum(len(c) for c in policy)
    assert judged == 8  # every attempt of both problems was judged once
    for sol in sols:
        assert all(0.0 <= s <= 1.0 for s in sol.trace.scores)
        assert sol.usage.calls == 1 + 2 + 4  # round 0, two revisions, four verdicts


def test_the_cost_hook_plans_one_first_request_and_one_request_per_revision():
    shapes = Revision.planned_requests(8, prompt_tokens=100, gen_tokens=50)  # default rounds=1: 4 chains
    assert [len(s.completion_tokens) for s in shapes] == [4, 1, 1, 1, 1]
    assert all(s.prompt_tokens > 150 and s.cached_prompt_tokens == 100 for s in shapes[1:])
