"""The logprob verifier and DeepConf's confidences at their edges: rounding, windows, defaults, messages."""

from __future__ import annotations

import math

import pytest

from tts.types import Problem
from tts.verifiers.confidence import LogprobConfig, LogprobVerifier, lowest_group_confidence, tail_confidence
from tts.verifiers.base import VerifyItem

P = Problem("p", "?")


def test_a_logprob_a_hair_above_zero_is_certainty_and_one_past_the_rounding_is_not_a_probability():
    assert tail_confidence([1e-6]) == 1.0  # engines round certain tokens a hair above 0
    assert lowest_group_confidence([1e-6, 0.0], window=1) == 1.0
    with pytest.raises(ValueError) as err:
        tail_confidence([-0.1, 2e-6])
    assert str(err.value) == "token logprobs must be numbers <= 0, got 2e-06"
    item = VerifyItem(P, ("a", "b"), logprobs=(5e-7, 2e-6))
    score = LogprobVerifier(LogprobConfig(aggregation="min")).score([item])[0]
    assert score.step_scores == (1.0, 0.0) and score.invalid == 1


def test_windows_and_tails_of_one_token_and_their_messages():
    assert lowest_group_confidence([-1.0, 0.0], window=1) == pytest.approx(math.exp(-1.0))
    assert tail_confidence([-1.0, 0.0], tail=1) == 1.0
    for fn, what in ((lowest_group_confidence, "window"), (tail_confidence, "tail")):
        with pytest.raises(ValueError) as err:
            fn([-0.1], 0)
        assert str(err.value) == f"{what} must be at least 1 token, got 0"
        with pytest.raises(ValueError) as err:
            fn([], 4)
        assert str(err.value) == "no token logprobs: ask the backend for logprobs (GenerationRequest(logprobs=True))"


def test_the_default_window_and_tail_are_2048_tokens():
    weak_start = [-3.0] * 1 + [0.0] * 2048  # the first token is in one 2048-window only
    assert tail_confidence(weak_start) == 1.0  # the last 2048 tokens are all certain
    assert lowest_group_confidence(weak_start) == math.exp(-3.0 / 2048)  # not one window of all 2049


def test_the_first_window_counts_once():
    # window 2 over [-1, -1, 0, 0]: the first window (mean -1) is the lowest; wrapping around into a
    # negative index would mix in the last tokens.
    assert lowest_group_confidence([-1.0, -1.0, 0.0, 0.0], window=2) == pytest.approx(math.exp(-1.0))
    assert lowest_group_confidence([0.0, 0.0, -1.0, -1.0], window=3) == pytest.approx(math.exp(-2.0 / 3))


def test_steps_without_logprobs_score_zero_each_and_are_counted_once_each():
    verifier = LogprobVerifier.from_config(LogprobConfig(aggregation="mean"))
    assert verifier.config.aggregation == "mean"
    none = verifier.score([VerifyItem(P, ("a", "b", "c"), logprobs=())])[0]
    assert none.step_scores == (0.0, 0.0, 0.0) and none.score == 0.0 and none.invalid == 3
    part = verifier.score([VerifyItem(P, ("a", "b", "c"), logprobs=(-1.0,))])[0]
    assert part.step_scores == (pytest.approx(math.exp(-1.0)), 0.0, 0.0) and part.invalid == 2
    bad_twice = verifier.score([VerifyItem(P, ("a", "b", "c"), logprobs=(1.0, 1.0, -1.0))])[0]
    assert bad_twice.invalid == 2 and bad_twice.score == pytest.approx(math.exp(-1.0) / 3)


def test_an_outcome_item_without_steps_scores_its_logprobs_and_has_no_step_scores():
    score = LogprobVerifier(LogprobConfig(aggregation="min")).score([VerifyItem(P, (), logprobs=(-1.0, -2.0))])[0]
    assert score.step_scores == () and score.score == pytest.approx(math.exp(-2.0)) and score.invalid == 0


def test_logprobs_beyond_the_steps_are_not_read():
    score = LogprobVerifier(LogprobConfig(aggregation="min")).score([VerifyItem(P, ("a",), logprobs=(-1.0, -5.0))])[0]
    assert score.step_scores == (pytest.approx(math.exp(-1.0)),) and score.score == pytest.approx(math.exp(-1.0))
