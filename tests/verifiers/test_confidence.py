import math

import pytest

from tts.backends.base import GenerationRequest, Message
from tts.backends.scripted import ScriptedGenerator
from tts.config import parse_verifier_config
from tts.types import Problem, Usage
from tts.verifiers.base import VerifyItem, build_verifier
from tts.verifiers.confidence import LogprobConfig, LogprobVerifier, lowest_group_confidence, tail_confidence

PROBLEM = Problem("p", "What is 2 + 2?")


def _item(steps, logprobs):
    return VerifyItem(PROBLEM, tuple(steps), logprobs=tuple(logprobs))


def test_steps_score_exp_mean_logprob_and_aggregate():
    verifier = LogprobVerifier(LogprobConfig(aggregation="min"))
    result = verifier.score([_item(["a", "b"], [-0.1, -0.7])])[0]
    assert result.step_scores == pytest.approx((math.exp(-0.1), math.exp(-0.7)))
    assert result.score == pytest.approx(math.exp(-0.7)) and result.invalid == 0 and result.usage == Usage()
    last = LogprobVerifier(LogprobConfig(aggregation="last")).score([_item(["a", "b"], [-0.7, -0.1])])[0]
    assert last.score == pytest.approx(math.exp(-0.1))


def test_a_more_confident_item_scores_higher():
    scores = LogprobVerifier().score([_item(["x"], [-2.0]), _item(["x"], [-0.05])])
    assert scores[1].score > scores[0].score


def test_an_item_without_logprobs_scores_zero_and_is_counted():
    verifier = build_verifier(parse_verifier_config("logprob"), None)
    no_logprobs, missing_step, nan = verifier.score([
        _item(["a", "b"], []), _item(["a", "b"], [-0.1, None]), _item(["a"], [math.nan])])
    assert no_logprobs.score == 0.0 and no_logprobs.invalid == 2
    assert missing_step.step_scores[1] == 0.0 and missing_step.invalid == 1 and missing_step.score == 0.0
    assert nan.score == 0.0 and nan.invalid == 1
    assert verifier.score([VerifyItem(PROBLEM, ())])[0].invalid == 1  # nothing at all: never 1.0


def test_a_positive_logprob_is_not_a_probability():
    result = LogprobVerifier().score([_item(["a"], [0.5])])[0]
    assert result.score == 0.0 and result.invalid == 1


def test_lowest_group_confidence_finds_the_weakest_window():
    lps = [-0.01] * 50 + [-3.0] * 5 + [-0.01] * 50
    assert lowest_group_confidence(lps, window=5) == pytest.approx(math.exp(-3.0))
    assert lowest_group_confidence(lps, window=2048) == pytest.approx(math.exp(sum(lps) / len(lps)))
    # a trace with one shaky stretch ranks below an evenly confident one of the same mean
    even = [sum(lps) / len(lps)] * len(lps)
    assert lowest_group_confidence(lps, window=10) < lowest_group_confidence(even, window=10)


def test_tail_confidence_reads_the_end():
    assert tail_confidence([-3.0] * 10 + [-0.1] * 4, tail=4) == pytest.approx(math.exp(-0.1))
    assert tail_confidence([-0.1] * 10 + [-3.0] * 4, tail=4) == pytest.approx(math.exp(-3.0))
    assert tail_confidence([-1.0, -3.0], tail=100) == pytest.approx(math.exp(-2.0))


@pytest.mark.parametrize("bad", [[], [0.5], [math.nan]])
def test_deepconf_functions_refuse_what_is_not_logprobs(bad):
    with pytest.raises(ValueError):
        lowest_group_confidence(bad, window=4)
    with pytest.raises(ValueError):
        tail_confidence(bad, tail=4)


def test_deepconf_functions_refuse_an_empty_window():
    with pytest.raises(ValueError, match="window"):
        lowest_group_confidence([-0.1], window=0)
    with pytest.raises(ValueError, match="tail"):
        tail_confidence([-0.1], tail=0)


def test_works_on_scripted_token_logprobs():
    gen = ScriptedGenerator({"p": {"4": 0.6, "5": 0.3}}, seed=0)
    req = GenerationRequest((Message("user", "What is 2 + 2?"),), n=8, logprobs=True, key="p")
    for c in gen.generate([req])[0].completions:
        assert len(c.token_logprobs) == c.completion_tokens
        assert sum(c.token_logprobs) / len(c.token_logprobs) == pytest.approx(c.mean_logprob)
        assert 0.0 < tail_confidence(c.token_logprobs, tail=32) <= 1.0
        assert 0.0 < lowest_group_confidence(c.token_logprobs, window=16) <= 1.0
