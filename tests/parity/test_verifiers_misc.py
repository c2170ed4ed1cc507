"""Parity: the model-free verifiers (self-certainty, logprob confidence, the arithmetic tool).

* self_certainty: Kang, Zhao & Song 2025, "Scalable Best-of-N Selection for Large Language Models
  via Self-Certainty", and their code, github.com/backprop07/Self-Certainty at commit
  b17d021eac56609741671b7a730e5aa8b3cd9546: ``src/confidence_list.py::confidence_logprob_sum``
  (per token ``-(1/V) * sum_j log p_j - log V``, averaged over the response's tokens) and
  ``src/voting_from_list.py`` (Borda vote: rank by self-certainty, ``(N - rank) ** power`` votes
  with a 0-based rank, power 0.5 by default).
* logprob: exp(mean token logprob) of each step, the geometric-mean probability the policy gave its
  own tokens (inverse perplexity). It is the likelihood baseline that confidence-based selection
  papers compare against (Kang et al. 2025 above); no paper owns it and there is no reference code,
  so its documented rule is pinned.
* arithmetic: tts's own tool verifier (no paper or reference code; the calculator annotations of
  Cobbe et al. 2021, "Training Verifiers to Solve Math Word Problems", are its inspiration). Its
  documented rule is pinned: a step scores 1 when every readable equality holds, 0 when one fails,
  ``neutral`` when it states none; solution score = aggregation over checked steps.
"""

from __future__ import annotations

import math

import pytest

from tts.types import Problem
from tts.verifiers.arithmetic import ArithmeticConfig, ArithmeticVerifier, find_equalities
from tts.verifiers.base import VerifyItem
from tts.verifiers.confidence import LogprobConfig, LogprobVerifier
from tts.verifiers.self_certainty import (
    SelfCertaintyConfig,
    SelfCertaintyVerifier,
    borda_vote,
    self_certainty,
    token_self_certainty,
)

PINNED = {"verifier:self_certainty", "verifier:logprob", "verifier:arithmetic"}

P = Problem("p", "?")


# --- self-certainty (Kang et al. 2025) ------------------------------------------------------------


def _kang_self_certainty(distributions: list[list[float]]) -> float:
    """Kang et al.'s self-certainty of a response from its full next-token distributions: per
    position, minus the vocabulary-mean log-probability minus log V (KL(U || p)); then the mean
    over positions (confidence_logprob_sum at commit b17d021)."""
    per_token = []
    for probs in distributions:
        v = len(probs)
        per_token.append(-sum(math.log(q) for q in probs) / v - math.log(v))
    return sum(per_token) / len(per_token)


FULL = [  # three positions of a 5-token vocabulary: sure, unsure, in between
    [0.96, 0.01, 0.01, 0.01, 0.01],
    [0.2, 0.2, 0.2, 0.2, 0.2],
    [0.5, 0.3, 0.1, 0.05, 0.05],
]


def test_self_certainty_is_kang_kl_from_uniform_when_the_whole_vocabulary_is_given():
    """Kang et al. (confidence_logprob_sum, commit b17d021): KL(U || p) = -(1/V) sum_j log p_j
    - log V per token, mean over tokens. Given every token's log-probability (top-k = V), tts's
    estimate has no tail to guess and must equal the reference exactly."""
    logprobs = [[math.log(q) for q in probs] for probs in FULL]
    want = _kang_self_certainty(FULL)
    assert self_certainty(logprobs, vocab_size=5) == pytest.approx(want, rel=1e-12)
    for probs, lps in zip(FULL, logprobs, strict=True):
        assert token_self_certainty(lps, 5) == pytest.approx(_kang_self_certainty([probs]), rel=1e-12)
    # The uniform position is zero KL: no certainty at all.
    assert token_self_certainty([math.log(0.2)] * 5, 5) == pytest.approx(0.0, abs=1e-12)


def test_self_certainty_from_top_k_spreads_the_tail_evenly():
    """tts's documented estimate (engines return at most 20 log-probabilities): the tail mass
    1 - sum(top k) spread over the other V - k tokens, i.e. the reference formula applied to that
    completed distribution."""
    top = [0.6, 0.25]  # V = 6: tail 0.15 over 4 tokens
    completed = top + [0.15 / 4] * 4
    got = token_self_certainty([math.log(q) for q in top], 6)
    assert got == pytest.approx(_kang_self_certainty([completed]), rel=1e-12)


def test_self_certainty_scores_rank_responses_as_the_reference_does():
    """Best-of-N by self-certainty (Kang et al.): the verifier's score SC / (1 + SC) is monotone in
    SC, so it ranks responses, and picks the best one, as raw self-certainty does."""
    responses = [FULL[:1], FULL[1:2], FULL[2:], FULL]
    raw = [_kang_self_certainty(r) for r in responses]
    items = [VerifyItem(P, (f"r{i}",), token_top_logprobs=tuple(tuple(math.log(q) for q in d) for d in r))
             for i, r in enumerate(responses)]
    scores = [s.score for s in SelfCertaintyVerifier(SelfCertaintyConfig(vocab_size=5, top_k=5)).score(items)]
    assert sorted(range(4), key=lambda i: raw[i]) == sorted(range(4), key=lambda i: scores[i])
    assert max(range(4), key=lambda i: raw[i]) == max(range(4), key=lambda i: scores[i])
    for sc, s in zip(raw, scores, strict=True):
        assert s == pytest.approx(max(sc, 0.0) / (1 + max(sc, 0.0)), rel=1e-12)


def _kang_borda(answers: list[str | None], certainties: list[float], power: float) -> tuple[str | None, list[float]]:
    """Kang et al.'s Borda vote (src/voting_from_list.py, commit b17d021), restated: sort the
    samples by certainty, most certain first (a stable sort, so ties keep sample order); the
    sample at 0-based rank r gets (N - r) ** power votes; each answered sample adds its votes to
    the first earlier sample with the same answer (or to itself); the winner is the first sample
    holding the largest tally."""
    n = len(answers)
    order = sorted(range(n), key=lambda i: certainties[i], reverse=True)
    weight = {i: (n - r) ** power for r, i in enumerate(order)}
    tally = [0.0] * n
    for i, a in enumerate(answers):
        if a is None:
            continue
        j = next((j for j in range(i) if answers[j] == a), i)
        tally[j] += weight[i]
    best = tally.index(max(tally))
    return (answers[best] if any(tally) else None), tally


@pytest.mark.parametrize("power", [0.0, 0.5, 1.0, 2.0])
@pytest.mark.parametrize(("answers", "certainties"), [
    # a confident minority answer against a hesitant majority
    (["7", "5", "5", "5", "7", None], [9.0, 1.0, 2.0, 1.5, 8.0, 10.0]),
    # tied certainties (stable order decides the ranks) and a tie in the final tally
    (["1", "2", "1", "2"], [3.0, 3.0, 1.0, 1.0]),
    # every answer different: the most certain wins for any power > 0; the first for power 0
    (["a", "b", "c"], [0.1, 0.3, 0.2]),
])
def test_borda_vote_is_kang_votes_with_power_p(answers, certainties, power):
    """Kang et al. Borda voting (src/voting_from_list.py, commit b17d021): the same winner and the
    same tallies per answer as the reference for p in {0, 0.5, 1, 2}; p = 0 is majority vote."""
    want, tally = _kang_borda(answers, certainties, power)
    got, votes = borda_vote(answers, certainties, power)
    assert got == want
    assert {answers[j]: v for j, v in enumerate(tally) if v} == pytest.approx(votes)


@pytest.mark.parametrize("power", [0.0, 0.5, 1.0, 2.0])
def test_weighted_vote_with_borda_weighting_is_kangs_vote(power):
    """``weighted_vote`` with ``weighting=borda`` (and the self-certainty verifier, as in the paper)
    picks Kang et al.'s Borda winner: the reference rule (src/voting_from_list.py, commit b17d021)
    transcribed in ``_kang_borda``."""
    from tts.backends.scripted import ScriptedGenerator
    from tts.prompts import MATH_PROMPT
    from tts.search.sampling.weighted_vote import WeightedVote, WeightedVoteConfig
    from tts.types import Sample, Usage

    answers = ["7", "5", "5", "5", "7", None]
    certainties = [9.0, 1.0, 2.0, 1.5, 8.0, 10.0]
    samples = [Sample(f"The answer is {a}." if a else "no idea", a) for a in answers]
    config = WeightedVoteConfig(n=6, weighting="borda", borda_power=power, verifier={"kind": "self_certainty"})
    strategy = WeightedVote(config, ScriptedGenerator({}), MATH_PROMPT.render)
    got = strategy.aggregate("p", samples, Usage(), scores=certainties)
    want, _ = _kang_borda(answers, certainties, power)
    assert got.answer == want
    assert got.trace.scores == tuple(certainties)  # the trace keeps the scorer's numbers


# --- logprob confidence ---------------------------------------------------------------------------


def test_logprob_is_the_geometric_mean_token_probability_per_step():
    """Rule: a step's score is exp(its mean token logprob); the item's score aggregates the step
    scores with the config's aggregation; a step without logprobs scores 0 and is invalid."""
    item = VerifyItem(P, ("a", "b", "c"), logprobs=(-0.1, -0.7, -0.3))
    for how, agg in (("min", min), ("last", lambda s: s[-1]), ("mean", lambda s: sum(s) / len(s)),
                     ("prod", math.prod)):
        got = LogprobVerifier(LogprobConfig(aggregation=how)).score([item])[0]
        steps = [math.exp(x) for x in (-0.1, -0.7, -0.3)]
        assert got.step_scores == pytest.approx(steps, rel=1e-12)
        assert got.score == pytest.approx(agg(steps), rel=1e-12)
        assert got.invalid == 0
    gap = VerifyItem(P, ("a", "b"), logprobs=(-0.1, None))
    missing = LogprobVerifier(LogprobConfig(aggregation="min")).score([gap])[0]
    assert missing.step_scores == pytest.approx([math.exp(-0.1), 0.0]) and missing.invalid == 1


# --- arithmetic tool ------------------------------------------------------------------------------


def _documented_step(holds: list[bool], neutral: float) -> float:
    """The documented step rule: no readable equality -> neutral; all hold -> 1; any fails -> 0."""
    if not holds:
        return neutral
    return 1.0 if all(holds) else 0.0


@pytest.mark.parametrize(("text", "holds"), [
    ("3 + 4 = 7.", [True]),
    ("12 / 4 = 3 and 2 * (3 + 1) = 8", [True, True]),
    ("1,200 ÷ 4 = 300", [True]),
    ("3 + 1 = 4, 4 + 7 = 12.", [True, False]),
    ("3 + 4 = 7 + 1 = 8", [True, True]),  # a running total
    ("10 / 3 = 3.33", [True]),  # rounded to the places written
    ("x + 3 = 5 and 2^3 = 8", []),  # unreadable: skipped, not failed
    ("The answer is 7.", []),
    ("She sold 48/2 = <<48/2=24>>24 clips.", None),  # a GSM8K calculator annotation: see below
])
def test_arithmetic_reads_equalities_and_scores_steps_by_the_documented_rule(text, holds):
    """The tool's documented reading (module docstring of tts/verifiers/arithmetic.py) and step
    rule, on hand-made steps; a GSM8K calculator annotation (Cobbe et al. 2021) holds."""
    found = [e.holds for e in find_equalities(text)]
    if holds is None:  # the annotation's equalities are right, however many the tool reads
        assert found and all(found)
        holds = found
    assert found == holds
    v = ArithmeticVerifier(ArithmeticConfig(neutral=0.5))
    got = v.score([VerifyItem(P, (text,))])[0]
    assert got.step_scores == (pytest.approx(_documented_step(holds, 0.5)),)


def test_arithmetic_solution_score_skips_unchecked_steps_unless_told():
    """Documented solution rule: with ``skip_neutral`` (default) the aggregation runs over the
    checked steps only (none checked: ``neutral``); without it, neutral steps enter it too."""
    steps = ("3 + 4 = 7.", "So we are done.", "7 * 2 = 15.")
    on = ArithmeticVerifier(ArithmeticConfig(aggregation="mean")).score([VerifyItem(P, steps)])[0]
    off = ArithmeticVerifier(ArithmeticConfig(aggregation="mean", skip_neutral=False)).score([VerifyItem(P, steps)])[0]
    assert on.step_scores == (1.0, 0.5, 0.0)
    assert on.score == pytest.approx(0.5)  # mean(1, 0)
    assert off.score == pytest.approx(0.5)  # mean(1, 0.5, 0)
    last = ArithmeticVerifier(ArithmeticConfig(aggregation="last")).score([VerifyItem(P, steps[:2])])[0]
    assert last.score == 1.0  # the last CHECKED step
    none = ArithmeticVerifier(ArithmeticConfig(neutral=0.3)).score([VerifyItem(P, ("No numbers here.",))])[0]
    assert none.score == pytest.approx(0.3)


def test_arithmetic_whole_solution_fails_on_any_false_step_by_default():
    """tts's own rule (no reference): the tool checks facts, so a solution scores by its weakest
    checked step ("min"), not by its last one as a PRM does; best-of-N cuts a whole solution into
    steps before the tool sees it, so an early false equality is not hidden by a true last one."""
    from tts.search.base import solution_item

    verifier = ArithmeticVerifier(ArithmeticConfig())
    text = "2 + 2 = 5.\n\n5 + 1 = 6.\n\nThe answer is 6."
    item = solution_item(P, text, verifier)
    assert item.steps == ("2 + 2 = 5.", "5 + 1 = 6.", "The answer is 6.")
    assert verifier.score([item])[0].score == 0.0
    last = ArithmeticVerifier(ArithmeticConfig(aggregation="last", skip_neutral=True))
    assert last.score([solution_item(P, text, last)])[0].score == 1.0  # the setting for a PRM-like rule
