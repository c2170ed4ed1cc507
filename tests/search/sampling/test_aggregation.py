"""What the sampling strategies' ``aggregate`` hands back, field by field: the problem, the
answer, its confidence, the usage passed through, and a trace that names the strategy and keeps
every sample, score, vote and event (what ``tts show`` and the results store read)."""

from __future__ import annotations

import math

import pytest

from tts.backends.scripted import ScriptedGenerator
from tts.prompts import MATH_PROMPT
from tts.search.base import MissingLogprobsError
from tts.search.sampling.best_of_n import BestOfN, BestOfNConfig
from tts.search.sampling.self_consistency import SelfConsistency, SelfConsistencyConfig
from tts.search.sampling.weighted_vote import WeightedVote, WeightedVoteConfig
from tts.types import Sample, Solution, Trace, Usage

USAGE = Usage(prompt_tokens=7, completion_tokens=30, calls=1)


def _strategy(cls, config):
    return cls(config, ScriptedGenerator({}), MATH_PROMPT.render)


def test_best_of_n_solution_and_trace():
    samples = (Sample("a", None, 10, -0.1), Sample("b", "4", 10, -0.5), Sample("c", "5", 10, -2.0))
    sol = _strategy(BestOfN, BestOfNConfig(n=3)).aggregate("p7", samples, USAGE)
    # The selected sample's share of exp(score) among answered samples.
    confidence = math.exp(-0.5) / (math.exp(-0.5) + math.exp(-2.0))
    assert sol == Solution("p7", "4", pytest.approx(confidence), USAGE,
                           Trace("best_of_n", samples, scores=(-0.1, -0.5, -2.0), selected=1))


def test_best_of_n_without_any_answer_keeps_the_trace():
    samples = (Sample("a", None, 10, -0.1), Sample("b", None, 10, -0.5))
    sol = _strategy(BestOfN, BestOfNConfig(n=2)).aggregate("p7", samples, USAGE)
    assert sol == Solution("p7", None, 0.0, USAGE, Trace("best_of_n", samples, scores=(-0.1, -0.5)))


def test_best_of_n_breaks_a_verifier_tie_by_logprob_and_a_sample_without_one_ranks_last():
    """Under a verifier, logprobs only break ties; a sample whose backend gave none ranks below
    every sample that has one, even an earlier one."""
    samples = (Sample("a", "3", 10, None), Sample("b", "4", 10, -3.0), Sample("c", "5", 10, -9.0))
    bon = _strategy(BestOfN, BestOfNConfig(n=3, verifier="arithmetic"))
    sol = bon.aggregate("p", samples, USAGE, scores=[1.0, 1.0, 0.0])
    assert (sol.answer, sol.trace.selected, sol.trace.scores) == ("4", 1, (1.0, 1.0, 0.0))


def test_logprob_strategies_name_themselves_when_logprobs_are_missing():
    samples = [Sample("a", "3", 10, None)]
    for cls, cfg in ((BestOfN, BestOfNConfig(n=1)), (WeightedVote, WeightedVoteConfig(n=1))):
        with pytest.raises(MissingLogprobsError, match=f"^{cls.name} ranks samples .* problem 'p9'"):
            _strategy(cls, cfg).aggregate("p9", samples, USAGE)


def test_self_consistency_solution_and_trace():
    samples = (Sample("a", "4"), Sample("b", "5"), Sample("c", "4"), Sample("d", None))
    sol = _strategy(SelfConsistency, SelfConsistencyConfig(n=4)).aggregate("p3", samples, USAGE)
    assert sol == Solution("p3", "4", 0.5, USAGE, Trace("self_consistency", samples, selected=0))
    assert sol.trace.votes == {"4": 2.0, "5": 1.0}


def test_weighted_vote_solution_and_trace():
    samples = (Sample("a", "4", 10, math.log(0.9)), Sample("b", "5", 10, math.log(0.85)),
               Sample("c", "5", 10, math.log(0.8)))
    sol = _strategy(WeightedVote, WeightedVoteConfig(n=3)).aggregate("p4", samples, USAGE)
    assert sol == Solution("p4", "5", pytest.approx(1.65 / 2.55), USAGE,
                           Trace("weighted_vote", samples, scores=pytest.approx((0.9, 0.85, 0.8)), selected=1))
    assert sol.trace.votes == pytest.approx({"4": 0.9, "5": 1.65}) and sol.trace.events == {}


def test_weighted_vote_by_borda_rank_votes_rank_r_of_n_with_n_minus_r_plus_1_to_the_power():
    """Ranks by score 0.9 > 0.85 > 0.8 vote 3^2, 2^2 and 1^2: the top-ranked answer wins where the
    scores themselves (0.9 against 0.85 + 0.8) would not; the trace keeps the scores."""
    samples = (Sample("a", "4"), Sample("b", "5"), Sample("c", "5"))
    wv = _strategy(WeightedVote, WeightedVoteConfig(n=3, verifier="arithmetic", weighting="borda", borda_power=2.0))
    sol = wv.aggregate("p", samples, USAGE, scores=[0.9, 0.85, 0.8])
    assert (sol.answer, sol.confidence, sol.trace.votes) == ("4", 9 / 14, {"4": 9.0, "5": 5.0})
    assert sol.trace.scores == (0.9, 0.85, 0.8) and sol.trace.selected == 0


def test_scores_for_another_number_of_samples_are_refused():
    samples = (Sample("a", "4"), Sample("b", "5"))
    wv = _strategy(WeightedVote, WeightedVoteConfig(n=2, verifier="arithmetic"))
    with pytest.raises(ValueError, match="zip"):
        wv.aggregate("p", samples, USAGE, scores=[0.0, 0.0, 0.0])


def test_a_weighted_vote_whose_verifier_rejects_every_answer_counts_each_answer_once():
    samples = (Sample("a", "4"), Sample("b", "5"), Sample("c", "5"), Sample("d", None))
    wv = _strategy(WeightedVote, WeightedVoteConfig(n=4, verifier="arithmetic"))
    sol = wv.aggregate("p", samples, USAGE, scores=[0.0, 0.0, 0.0, 0.7])
    assert (sol.answer, sol.confidence, sol.trace.votes) == ("5", 0.5, {"4": 1.0, "5": 2.0})
    assert sol.trace.events == {"unweighted_vote": 1} and sol.trace.scores == (0.0, 0.0, 0.0, 0.7)
    nothing = wv.aggregate("p", samples[3:], USAGE, scores=[0.0])  # no answer at all: nothing to record
    assert (nothing.answer, nothing.trace.events) == (None, {})
