"""The verifier helpers every search and selection goes through: scores cleaned into [0, 1],
step scores aggregated into one, a broken verifier replaced by a fallback, and seeded noise."""

from __future__ import annotations

import logging
import math

import pytest

from tts.types import Problem, Usage
from tts.verifiers.base import (
    VerifierScore,
    VerifyItem,
    aggregate,
    clean_score,
    noise_flips,
    score_or_fallback,
)


@pytest.mark.parametrize("value, cleaned", [(0.0, (0.0, 0)), (1.0, (1.0, 0)), (0.25, (0.25, 0)), ("0.5", (0.5, 0)),
                                            (-1e-9, (0.0, 1)), (1.000001, (0.0, 1)), (math.nan, (0.0, 1)),
                                            (math.inf, (0.0, 1)), (None, (0.0, 1)), ("high", (0.0, 1))])
def test_a_score_outside_0_1_or_not_a_number_becomes_0_and_is_counted(value, cleaned):
    assert clean_score(value) == cleaned


@pytest.mark.parametrize("how, expected", [("last", 0.5), ("min", 0.2), ("prod", 0.9 * 0.2 * 0.5),
                                           ("mean", (0.9 + 0.2 + 0.5) / 3)])
def test_step_scores_aggregate_as_named(how, expected):
    assert aggregate([0.9, 0.2, 0.5], how) == pytest.approx(expected, abs=1e-15)
    assert type(aggregate((1, 1), how)) is float


def test_no_steps_score_one_half_and_an_unknown_aggregation_is_refused():
    assert aggregate([], "min") == 0.5
    with pytest.raises(ValueError, match="one of last, min, prod, mean; got 'max'"):
        aggregate([0.1], "max")  # type: ignore[arg-type]


ITEMS = [VerifyItem(Problem("p", "q", "1"), ("a",)), VerifyItem(Problem("p", "q", "1"), ("b",))]
FALLBACK = VerifierScore((), 0.25)


class _Verifier:
    name = "fake"

    def __init__(self, scores=None, error=None):
        self.scores, self.error, self.calls = scores, error, 0

    def score(self, items):
        self.calls += 1
        if self.error:
            raise self.error
        return self.scores


def test_a_verifier_scores_all_items_in_one_call():
    scores = [VerifierScore((0.9,), 0.9, Usage(prompt_tokens=3)), VerifierScore((), 0.1)]
    verifier = _Verifier(scores)
    assert score_or_fallback(verifier, ITEMS, FALLBACK) == (scores, False) and verifier.calls == 1


@pytest.mark.parametrize("verifier, why", [(_Verifier(error=RuntimeError("model down")), "model down"),
                                          (_Verifier([VerifierScore((), 0.9)]), "it returned 1 scores for 2 candidates")])
def test_a_verifier_that_raises_or_miscounts_gives_every_item_the_fallback(verifier, why, caplog):
    with caplog.at_level(logging.WARNING, logger="tts.verifiers.base"):
        assert score_or_fallback(verifier, ITEMS, FALLBACK, what="candidates") == ([FALLBACK, FALLBACK], True)
    (record,) = caplog.records
    assert record.getMessage() == f"verifier fake failed on 2 candidates ({why}); each scores 0.25"


def test_the_warning_names_items_and_a_verifier_without_a_name(caplog):
    class Nameless:
        def score(self, items):
            return []

    with caplog.at_level(logging.WARNING, logger="tts.verifiers.base"):
        assert score_or_fallback(Nameless(), ITEMS, FALLBACK)[1]
    assert caplog.records[0].getMessage() == (
        "verifier ? failed on 2 items (it returned 0 scores for 2 items); each scores 0.25")


def test_a_config_builds_its_registered_verifier_with_the_policy_generator():
    from tts.backends.scripted import ScriptedGenerator
    from tts.verifiers.base import build_verifier
    from tts.verifiers.judge import JudgeConfig, LLMJudge

    generator = ScriptedGenerator({})
    config = JudgeConfig(votes=2)
    judge = build_verifier(config, generator)
    assert isinstance(judge, LLMJudge) and judge.config is config and judge.generator is generator


def test_noise_flips_at_its_rate_repeatably_and_depends_on_the_steps_so_far():
    problem = Problem("p", "q", "1")
    items = [VerifyItem(problem, (f"step {i}", "then", "end")) for i in range(2000)]
    flips = [noise_flips(7, item, 1, 0.3) for item in items]
    assert abs(sum(flips) / len(flips) - 0.3) < 0.04
    # The draws themselves are part of a seeded run's record: the same flips as in earlier versions.
    assert sum(flips) == 629 and [i for i, f in enumerate(flips[:20]) if f] == [6, 13, 17]
    assert flips == [noise_flips(7, item, 1, 0.3) for item in items]  # the same step, the same draw
    assert flips != [noise_flips(8, item, 1, 0.3) for item in items]  # the seed matters
    assert flips != [noise_flips(7, VerifyItem(Problem("p2", "q", "1"), item.steps), 1, 0.3) for item in items]
    # Only the steps up to the one scored: a later step does not change an earlier step's draw.
    later = [VerifyItem(problem, (*item.steps[:2], "other end")) for item in items]
    assert flips == [noise_flips(7, item, 1, 0.3) for item in later]
    assert flips != [noise_flips(7, item, 2, 0.3) for item in items]
    assert not any(noise_flips(7, item, 1, 0.0) for item in items)
    assert all(noise_flips(7, item, 1, 1.0) for item in items)
