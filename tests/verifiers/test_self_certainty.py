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
from tts.verifiers.self_certainty import (
    SelfCertaintyConfig,
    SelfCertaintyVerifier,
    borda_vote,
    borda_weights,
    self_certainty,
    token_self_certainty,
)

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


# --- exact values at the edges of the estimate, and the messages -------------------------------------


def test_impossible_logprobs_are_clamped_and_an_overfull_top_k_leaves_a_tiny_tail():
    # log p below -100 counts as -100 (V = k: no tail): -log 2 - (0 - 100) / 2
    assert token_self_certainty([0.0, -1e9], 2) == pytest.approx(50 - math.log(2), rel=1e-12)
    # top-k mass of 1.2 (rounding in a backend): the 2 other tokens share 1e-20, not a negative mass
    assert token_self_certainty([math.log(0.6)] * 2, 4) == pytest.approx(
        -math.log(4) - (2 * math.log(0.6) + 2 * math.log(1e-20 / 2)) / 4, rel=1e-12)
    # one top token: the other V - 1 = 3 share the remaining half
    assert token_self_certainty([math.log(0.5)], 4) == pytest.approx(
        -math.log(4) - (math.log(0.5) + 3 * math.log(0.5 / 3)) / 4, rel=1e-12)
    # the default vocabulary is 50,000 tokens
    positions = [[math.log(0.6), math.log(0.3)], [math.log(0.9)]]
    assert self_certainty(positions) == pytest.approx(
        (token_self_certainty(positions[0], 50_000) + token_self_certainty(positions[1], 50_000)) / 2, rel=1e-12)
    # more top tokens than the vocabulary size given: V is taken as k
    assert token_self_certainty([math.log(0.5)] * 3, 2) == pytest.approx(-math.log(3) - math.log(0.5), rel=1e-12)


def test_no_logprobs_at_a_position_or_no_positions_say_what_is_missing():
    with pytest.raises(ValueError, match=r"^no top logprobs at this position$"):
        token_self_certainty([], 10)
    with pytest.raises(ValueError, match=r"^no positions: ask the backend for top_logprobs$"):
        self_certainty([], 10)


def test_the_score_is_sc_over_one_plus_sc_with_the_configured_vocabulary_and_never_below_zero():
    item = VerifyItem(Problem("p", "?"), ("a",), token_top_logprobs=((math.log(0.5), math.log(0.5)),))
    sc = token_self_certainty([math.log(0.5)] * 2, 4)
    (score,) = SelfCertaintyVerifier.from_config(SelfCertaintyConfig(vocab_size=4), None).score([item])
    assert (score.score, score.invalid, score.step_scores) == (pytest.approx(sc / (1 + sc), rel=1e-12), 0, ())
    overfull = VerifyItem(Problem("p", "?"), ("a",), token_top_logprobs=((math.log(0.5),) * 3,))
    (score,) = SelfCertaintyVerifier(SelfCertaintyConfig(vocab_size=2)).score([overfull])  # SC < 0: scores 0
    assert (score.score, score.invalid) == (0.0, 0)
    broken = VerifyItem(Problem("p", "?"), ("a",), token_top_logprobs=((math.nan, -1.0),))
    (score,) = SelfCertaintyVerifier().score([broken])  # a NaN logprob: no score, counted
    assert (score.score, score.invalid) == (0.0, 1)
    assert SelfCertaintyConfig(top_k=7).request_top_logprobs == 7


def test_items_without_logprobs_are_warned_about_once(caplog):
    verifier = SelfCertaintyVerifier.from_config(SelfCertaintyConfig(), object())
    none = VerifyItem(Problem("p", "?"), ("c",))
    assert [(s.score, s.invalid, s.step_scores) for s in verifier.score([none, none])] == [(0.0, 1, ())] * 2
    verifier.score([none])
    warned = [r for r in caplog.records if r.name == "tts.verifiers.self_certainty"]
    assert len(warned) == 1 and warned[0].levelname == "WARNING"
    assert warned[0].getMessage() == (
        "self_certainty: items came without top-k logprobs (this backend returns none, or the strategy did not ask); "
        "they score 0. Unavailable here: self_certainty and deepconf; use the logprob scorer if the backend returns "
        "sampled-token logprobs")


def test_borda_refuses_mismatched_lists_and_a_negative_power_in_one_line():
    with pytest.raises(ValueError, match=r"^got 2 answers and 1 certainties; give one per sample$"):
        borda_vote(["1", "2"], [1.0])
    with pytest.raises(ValueError, match=r"^power must be >= 0 \(0 is majority vote\), got -0.5$"):
        borda_vote(["1"], [1.0], power=-0.5)
    assert borda_vote(["1"], [1.0], power=0.0) == ("1", {"1": 1.0})  # power 0 is allowed
    assert borda_vote([None, None], [1.0, 2.0]) == (None, {})
    assert borda_vote([None, "5", "5"], [1.0, 2.0, 3.0], power=1.0) == ("5", {"5": 5.0})  # the rest still vote
    # the default power is Kang et al.'s 0.5: sqrt(3) for the sure 7 against 1 + sqrt(2) for 5
    assert borda_vote(["7", "5", "5"], [9.0, 1.0, 2.0]) == ("5", {"7": pytest.approx(3 ** 0.5),
                                                                 "5": pytest.approx(1 + 2 ** 0.5)})


def test_borda_weights_rank_by_certainty_and_ties_keep_sample_order():
    assert borda_weights([1.0, 3.0, 3.0, 2.0], 1.0) == [1.0, 4.0, 3.0, 2.0]
    assert borda_weights([1.0, 3.0, 3.0, 2.0], 2.0) == [1.0, 16.0, 9.0, 4.0]
    # equal tallies: the answer whose first sample comes first wins, in that sample's spelling
    assert borda_vote(["0.5", "2", "1/2", "2"], [4.0, 3.0, 1.0, 2.0], power=1.0) == ("0.5", {"0.5": 5.0, "2": 5.0})
    assert borda_vote(["7", "5"], [1.0, 2.0], power=0.0) == ("7", {"7": 1.0, "5": 1.0})  # first, not smallest
