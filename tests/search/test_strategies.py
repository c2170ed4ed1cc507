"""Strategies on the scripted backend, where the vote outcome can be worked out by hand."""

from __future__ import annotations

import math

import pytest

from tts.backends.scripted import ScriptedGenerator
from tts.config import SamplingConfig
from tts.prompts import MATH_PROMPT
from tts.search.base import MissingLogprobsError, StrategyInputError, vote
from tts.search.sampling.best_of_n import BestOfN, BestOfNConfig
from tts.search.sampling.self_consistency import SelfConsistency, SelfConsistencyConfig
from tts.search.sampling.weighted_vote import WeightedVote, WeightedVoteConfig
from tts.types import Budget, Problem, Sample, Usage
from tts.verifiers.function import FunctionVerifier

PROBLEMS = [Problem(f"p{i}", f"What is {i} + {i}?", str(2 * i)) for i in range(30)]


def _accuracy(solutions):
    gold = {p.id: p.answer for p in PROBLEMS}
    return sum(s.answer == gold[s.problem_id] for s in solutions) / len(solutions)


def test_self_consistency_beats_single_samples_when_the_gold_answer_is_the_mode():
    gen = ScriptedGenerator.for_problems(PROBLEMS, accuracy=0.45, seed=1)
    one = SelfConsistency(SelfConsistencyConfig(n=1), gen, MATH_PROMPT.render).solve(PROBLEMS)
    many = SelfConsistency(SelfConsistencyConfig(n=32), gen, MATH_PROMPT.render).solve(PROBLEMS)
    assert _accuracy(many) > _accuracy(one) + 0.2
    assert _accuracy(many) >= 0.75


def test_solution_carries_votes_confidence_usage_and_trace():
    gen = ScriptedGenerator({"p0": {"0": 0.5, "1": 0.3}}, seed=3)
    sol = SelfConsistency(SelfConsistencyConfig(n=16), gen, MATH_PROMPT.render).solve(PROBLEMS[:1])[0]
    assert len(sol.trace.samples) == 16
    assert sol.confidence == max(sol.trace.votes.values()) / 16
    assert sol.usage.completion_tokens == sum(s.completion_tokens for s in sol.trace.samples)
    assert sol.usage.calls == 1 and len(sol.usage.shapes) == 1 and len(sol.usage.shapes[0].completion_tokens) == 16
    assert sol.trace.samples[sol.trace.selected].answer == sol.answer


def test_same_seed_same_answers_and_different_seed_differs():
    a = ScriptedGenerator.for_problems(PROBLEMS, accuracy=0.3, seed=7)
    b = ScriptedGenerator.for_problems(PROBLEMS, accuracy=0.3, seed=7)
    c = ScriptedGenerator.for_problems(PROBLEMS, accuracy=0.3, seed=8)
    cfg = SelfConsistencyConfig(n=4)
    ra = [s.trace.samples for s in SelfConsistency(cfg, a, MATH_PROMPT.render).solve(PROBLEMS)]
    rb = [s.trace.samples for s in SelfConsistency(cfg, b, MATH_PROMPT.render).solve(PROBLEMS)]
    rc = [s.trace.samples for s in SelfConsistency(cfg, c, MATH_PROMPT.render).solve(PROBLEMS)]
    assert ra == rb and ra != rc


def test_vote_ties_go_to_the_answer_seen_first_and_abstentions_count_in_the_share():
    samples = [Sample("", "5"), Sample("", None), Sample("", "4"), Sample("", "4"), Sample("", "5")]
    answer, share, votes, idx = vote(samples)
    assert answer == "5" and idx == 0 and share == 2 / 5 and votes == {"5": 2.0, "4": 2.0}


def test_a_vote_never_merges_a_value_with_its_negative():
    answer, share, votes, idx = vote([Sample("a", "-3"), Sample("b", "3"), Sample("c", "3")])
    assert (answer, idx, votes) == ("3", 1, {"-3": 1.0, "3": 2.0}) and share == pytest.approx(2 / 3)
    answer, _, votes, _ = vote([Sample("a", "-\\frac{1}{2}"), Sample("b", "0.5"), Sample("c", "-0.5")])
    assert answer == "-\\frac{1}{2}" and votes == {"-\\frac{1}{2}": 2.0, "0.5": 1.0}


def test_vote_merges_surface_variants_of_one_answer():
    samples = [Sample("", "7.0"), Sample("", "$7$"), Sample("", "8")]
    answer, share, _, _ = vote(samples)
    assert answer == "7.0" and share == 2 / 3


def test_no_answer_anywhere_gives_none_with_zero_confidence():
    gen = ScriptedGenerator({}, seed=0)  # every sample abstains
    for cls, cfg in ((SelfConsistency, SelfConsistencyConfig(n=4)), (BestOfN, BestOfNConfig(n=4)),
                     (WeightedVote, WeightedVoteConfig(n=4))):
        sol = cls(cfg, gen, MATH_PROMPT.render).solve(PROBLEMS[:1])[0]
        assert sol.answer is None and sol.confidence == 0.0


def test_best_of_n_picks_the_highest_mean_logprob_answered_sample():
    gen = ScriptedGenerator.for_problems(PROBLEMS, accuracy=0.4, seed=2)
    sols = BestOfN(BestOfNConfig(n=8), gen, MATH_PROMPT.render).solve(PROBLEMS)
    for sol in sols:
        answered = [i for i, s in enumerate(sol.trace.samples) if s.answer is not None]
        best = max(answered, key=lambda i: sol.trace.scores[i])
        assert sol.trace.selected == best and sol.answer == sol.trace.samples[best].answer


def test_confident_minority_beats_an_unsure_majority_under_weighted_vote_but_not_plain_vote():
    # Three unsure samples say 4 (weight e^-2 each), two confident ones say 5 (weight e^-0.1 each).
    samples = [Sample("", "4", 10, -2.0)] * 3 + [Sample("", "5", 10, -0.1)] * 2
    gen = ScriptedGenerator({}, seed=0)
    weighted = WeightedVote(WeightedVoteConfig(n=5), gen, MATH_PROMPT.render).aggregate("p", samples, Usage())
    plain = SelfConsistency(SelfConsistencyConfig(n=5), gen, MATH_PROMPT.render).aggregate("p", samples, Usage())
    assert plain.answer == "4" and weighted.answer == "5"
    assert weighted.confidence == pytest.approx(2 * math.exp(-0.1) / (3 * math.exp(-2) + 2 * math.exp(-0.1)))


def test_logprob_strategies_refuse_samples_without_logprobs_instead_of_picking_silently():
    gen = ScriptedGenerator.for_problems(PROBLEMS, accuracy=0.4, seed=2, returns_logprobs=False)
    for cls, cfg in ((BestOfN, BestOfNConfig(n=4)), (WeightedVote, WeightedVoteConfig(n=4))):
        with pytest.raises(MissingLogprobsError, match="4 of 4 samples of problem 'p0'"):
            cls(cfg, gen, MATH_PROMPT.render).solve(PROBLEMS[:1])


def test_each_round_of_a_problem_gets_its_own_request_seed():
    sc = SelfConsistency(SelfConsistencyConfig(n=4), ScriptedGenerator({}), MATH_PROMPT.render, seed=3)
    seeds = {sc.request(PROBLEMS[0], drawn=d).seed for d in (0, 4, 8)} | {sc.request(PROBLEMS[1]).seed}
    assert len(seeds) == 4
    assert sc.request(PROBLEMS[0], drawn=4).seed == sc.request(PROBLEMS[0], drawn=4).seed


def test_a_per_problem_budget_lowers_n():
    gen = ScriptedGenerator.for_problems(PROBLEMS, accuracy=0.4, seed=2)
    sc = SelfConsistency(SelfConsistencyConfig(n=8), gen, MATH_PROMPT.render, SamplingConfig(max_tokens=100))
    sols = sc.solve(PROBLEMS[:3], [Budget(samples=2), None, Budget(tokens=350)])
    assert [len(s.trace.samples) for s in sols] == [2, 8, 3]
    with pytest.raises(StrategyInputError, match="does not cover one sample"):
        sc.solve(PROBLEMS[:1], [Budget(tokens=50)])


def test_weighted_vote_uses_logprob_weights():
    gen = ScriptedGenerator.for_problems(PROBLEMS, accuracy=0.4, seed=4)
    sol = WeightedVote(WeightedVoteConfig(n=8), gen, MATH_PROMPT.render).solve(PROBLEMS[:1])[0]
    assert all(0 < w <= 1 for w in sol.trace.scores)
    assert abs(sum(sol.trace.votes.values()) - sum(
        w for w, s in zip(sol.trace.scores, sol.trace.samples) if s.answer is not None)) < 1e-9


def test_max_tokens_caps_samples_and_strategies_never_mutate_configs():
    cfg = SelfConsistencyConfig(n=4)
    gen = ScriptedGenerator.for_problems(PROBLEMS, seed=0, mean_tokens=200)
    sol = SelfConsistency(cfg, gen, MATH_PROMPT.render, SamplingConfig(max_tokens=20)).solve(PROBLEMS[:1])[0]
    assert all(s.completion_tokens <= 20 and s.finish_reason == "length" for s in sol.trace.samples)
    assert cfg == SelfConsistencyConfig(n=4)


def test_smaller_n_on_a_prefix_of_samples_matches_drawing_that_prefix():
    gen = ScriptedGenerator.for_problems(PROBLEMS, accuracy=0.4, seed=5)
    sc16 = SelfConsistency(SelfConsistencyConfig(n=16), gen, MATH_PROMPT.render)
    res = gen.generate([sc16.request(PROBLEMS[0])])[0]
    sol4 = sc16.aggregate_result("p0", res, n=4)
    assert sol4.trace.samples == tuple(sc16.aggregate_result("p0", res).trace.samples[:4])
    assert sol4.usage.completion_tokens == sum(s.completion_tokens for s in sol4.trace.samples)
    assert sol4.usage.prompt_tokens == res.usage.prompt_tokens


def test_equal_answers_written_differently_vote_together():
    # Without equivalence keys "7" would win 2 votes to 1+1+1; 1/2 written three ways has 3 votes.
    samples = [Sample("", "7"), Sample("", "0.5"), Sample("", "\\frac{1}{2}"), Sample("", "7"), Sample("", "1/2")]
    answer, share, votes, idx = vote(samples)
    assert answer == "0.5" and idx == 1 and share == 3 / 5 and votes == {"7": 2.0, "0.5": 3.0}


def _CountingVerifier(good) -> FunctionVerifier:  # noqa: N802 -- reads as the verifier it builds
    """Scores a sample 1.0 when its text holds ``good``; counts its calls; costs 10 prompt tokens."""
    from tts.verifiers.base import VerifierScore

    return FunctionVerifier(lambda problem, text: VerifierScore((), 1.0 if good in text else 0.0,
                                                                Usage(prompt_tokens=10, calls=1)), name="counting")


def test_verifier_scored_strategies_score_every_sample_of_every_problem_in_one_call():
    from tts.eval.runner import solve_all

    gen = ScriptedGenerator.for_problems(PROBLEMS[:5], accuracy=0.3, seed=3)
    bon = BestOfN(BestOfNConfig(n=8, verifier="arithmetic"), gen, MATH_PROMPT.render)
    wv = WeightedVote(WeightedVoteConfig(n=8, verifier="arithmetic"), gen, MATH_PROMPT.render)
    fake = _CountingVerifier("\\boxed{")  # any answered sample scores 1
    bon._verifier = wv._verifier = fake
    sols_bon, sols_wv = solve_all([bon, wv], PROBLEMS[:5])
    assert len(fake.calls) == 1  # both configs share one verifier config: one call for the shared draw
    for sol in sols_bon:
        assert sol.usage.prompt_tokens >= 8 * 10  # the verifier's usage is counted in the solution
        assert all(sc == (1.0 if s.answer is not None else 0.0) for s, sc in zip(sol.trace.samples, sol.trace.scores))


def test_a_verifier_that_raises_scores_samples_lowest_and_the_event_is_counted():
    def down(problem, text):
        raise RuntimeError("verifier down")

    gen = ScriptedGenerator.for_problems(PROBLEMS[:2], accuracy=0.5, seed=3)
    bon = BestOfN(BestOfNConfig(n=4, verifier="arithmetic"), gen, MATH_PROMPT.render)
    bon._verifier = FunctionVerifier(down, name="counting")
    sols = bon.solve(PROBLEMS[:2])
    assert all(s.trace.events == {"verifier_error": 1} and set(s.trace.scores) == {0.0} for s in sols)


def test_best_of_n_by_the_arithmetic_verifier_prefers_samples_whose_sums_hold():
    samples = [Sample("2 + 2 = 5, so \\boxed{5}", "5", 10, -0.1), Sample("2 + 2 = 4, so \\boxed{4}", "4", 10, -2.0)]
    gen = ScriptedGenerator({}, seed=0)
    bon = BestOfN(BestOfNConfig(n=2, verifier="arithmetic"), gen, MATH_PROMPT.render)
    from tts.backends.base import Completion, GenerationResult

    result = GenerationResult(tuple(Completion(s.text, 10, s.mean_logprob) for s in samples), Usage())
    (scored,) = bon.score_samples([PROBLEMS[2]], [result])
    sol = bon.aggregate_result("p2", result, scored=scored)
    assert sol.answer == "4"  # by logprob alone "5" would win


def test_a_verifier_that_rejects_every_sample_leaves_a_plain_vote_not_no_answer():
    samples = [Sample("2 + 2 = 5 \\boxed{5}", "5", 10, -0.5)] * 2 + [Sample("2 + 2 = 3 \\boxed{3}", "3", 10, -0.1)]
    wv = WeightedVote(WeightedVoteConfig(n=3, verifier="arithmetic"), ScriptedGenerator({}), MATH_PROMPT.render)
    sol = wv.aggregate("p", samples, Usage(), scores=[0.0, 0.0, 0.0])
    assert sol.answer == "5" and sol.trace.events == {"unweighted_vote": 1} and sol.trace.scores == (0.0, 0.0, 0.0)


def test_equal_verifier_scores_are_told_apart_by_the_models_confidence():
    samples = [Sample("a", "5", 10, -1.5), Sample("b", "4", 10, -0.2), Sample("c", "6", 10, -0.1)]
    bon = BestOfN(BestOfNConfig(n=3, verifier="arithmetic"), ScriptedGenerator({}), MATH_PROMPT.render)
    assert bon.aggregate("p", samples, Usage(), scores=[1.0, 1.0, 0.5]).answer == "4"


def test_best_of_n_full_ties_go_to_the_earliest_answered_sample():
    """Equal scores and equal logprobs (the documented rule, and search-and-learn's np.argmax): the
    earliest answered sample wins, by mean logprob and under a verifier alike."""
    samples = [Sample("a", None, 10, -0.1), Sample("b", "4", 10, -0.5), Sample("c", "5", 10, -0.5),
               Sample("d", "6", 10, -0.5)]
    by_logprob = BestOfN(BestOfNConfig(n=4), ScriptedGenerator({}), MATH_PROMPT.render)
    sol = by_logprob.aggregate("p", samples, Usage())
    assert (sol.answer, sol.trace.selected) == ("4", 1)
    verified = BestOfN(BestOfNConfig(n=4, verifier="arithmetic"), ScriptedGenerator({}), MATH_PROMPT.render)
    sol = verified.aggregate("p", samples, Usage(), scores=[1.0, 0.5, 0.5, 0.5])
    assert (sol.answer, sol.trace.selected) == ("4", 1)


def test_a_step_verifier_scores_each_step_of_a_sample_and_its_aggregation_decides():
    # The arithmetic tool checks each step (the sample is cut at blank lines, as the step-wise search
    # cuts it): under the default "last" the last checked step decides, under "min" any wrong step.
    from tts.backends.base import Completion, GenerationResult

    text = "2 + 2 = 5.\n\n5 + 1 = 6.\n\nSo \\boxed{6}."
    result = GenerationResult((Completion(text, 10, -0.1),), Usage())
    for how, want in (("last", 1.0), ("min", 0.0)):
        bon = BestOfN(BestOfNConfig(n=1, verifier={"kind": "arithmetic", "aggregation": how}),
                      ScriptedGenerator({}), MATH_PROMPT.render)
        (scored,) = bon.score_samples([PROBLEMS[2]], [result])
        assert scored.scores == (want,)
    # A verifier that reads whole answers (the logprob scorer) still gets the sample as one step.
    bon = BestOfN(BestOfNConfig(n=1, verifier="logprob"), ScriptedGenerator({}), MATH_PROMPT.render)
    (scored,) = bon.score_samples([PROBLEMS[2]], [result])
    assert scored.scores == (pytest.approx(math.exp(-0.1)),)
