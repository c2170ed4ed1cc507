"""Self-certainty scorer: the KL estimate, its registry entry, and use by best_of_n / weighted_vote."""

from __future__ import annotations

import math

import pytest

from tts.backends.scripted import ScriptedGenerator
from tts.benchmarks.demo import DEMO_PROMPT, generate_problems
from tts.registry import VERIFIERS
from tts.search.sampling.best_of_n import BestOfN, BestOfNConfig
from tts.search.sampling.weighted_vote import WeightedVote, WeightedVoteConfig
from tts.types import Problem
from tts.verifiers.base import VerifyItem
from tts.verifiers.self_certainty import SelfCertaintyConfig, SelfCertaintyVerifier, token_self_certainty

PROBLEMS = generate_problems(30)


def test_the_estimate_is_exact_when_the_tail_is_flat():
    v = 10
    probs = [0.5, 0.2] + [0.3 / 8] * 8  # top 2 given, the other 8 share 0.3 evenly
    exact = sum((1 / v) * math.log((1 / v) / p) for p in probs)
    assert token_self_certainty([math.log(0.5), math.log(0.2)], v) == pytest.approx(exact)
    assert token_self_certainty([math.log(0.1)] * 10, v) == pytest.approx(0.0, abs=1e-9)  # uniform: no certainty


def test_confident_tokens_score_higher_and_missing_logprobs_score_zero_counted():
    sure = VerifyItem(Problem("p", "?"), ("a",), token_top_logprobs=((-0.01, -7.0, -8.0),) * 5)
    unsure = VerifyItem(Problem("p", "?"), ("b",), token_top_logprobs=((-1.0, -1.2, -1.5),) * 5)
    none = VerifyItem(Problem("p", "?"), ("c",))
    a, b, c = VERIFIERS.load("self_certainty")(SelfCertaintyConfig()).score([sure, unsure, none])
    assert 0 <= b.score < a.score <= 1
    assert c.score == 0.0 and c.invalid == 1


def test_best_of_n_and_weighted_vote_ask_for_top_logprobs_and_select_by_self_certainty():
    gen = ScriptedGenerator.for_problems(PROBLEMS, accuracy=0.35, seed=1)
    sols = BestOfN(BestOfNConfig(n=8, verifier="self_certainty"), gen, DEMO_PROMPT.render).solve(PROBLEMS)
    verifier = SelfCertaintyVerifier()
    for sol in sols:
        answered = [i for i, s in enumerate(sol.trace.samples) if s.answer is not None]
        if answered:
            assert sol.trace.selected == max(answered, key=lambda i: (sol.trace.scores[i], -i))
    # the scores are the scorer's on the completions' top logprobs (the request asked for 20 per token)
    req = BestOfN(BestOfNConfig(n=2, verifier="self_certainty"), gen, DEMO_PROMPT.render).request(PROBLEMS[0])
    assert req.top_logprobs == 20
    comp = gen.generate([req])[0].completions[0]
    item = VerifyItem(PROBLEMS[0], (comp.text,), True, token_top_logprobs=comp.token_top_logprobs)
    assert len(comp.token_top_logprobs) == comp.completion_tokens and verifier.score([item])[0].score > 0
    wv = WeightedVote(WeightedVoteConfig(n=8, verifier="self_certainty"), gen, DEMO_PROMPT.render).solve(PROBLEMS[:3])
    assert all(s.trace.scores and all(0 < x < 1 for x in s.trace.scores) for s in wv)


def test_a_backend_without_logprobs_is_not_scored_silently(caplog):
    gen = ScriptedGenerator.for_problems(PROBLEMS[:2], returns_logprobs=False)
    sols = WeightedVote(WeightedVoteConfig(n=4, verifier="self_certainty"), gen, DEMO_PROMPT.render).solve(PROBLEMS[:2])
    assert all(s.trace.events.get("invalid_score") == 4 for s in sols)
    assert "Unavailable here: self_certainty and deepconf" in caplog.text
