"""Universal self-consistency: sample n replies, ask the model which is the most consistent, answer with it."""

from __future__ import annotations

import pytest

from tts.answers.free_text import mbr_select
from tts.backends.base import Completion, GenerationResult, request_usage
from tts.backends.function import FunctionGenerator
from tts.backends.scripted import ScriptedGenerator
from tts.config import SamplingConfig, parse_strategy_config
from tts.eval.runner import share_groups
from tts.prompts import MATH_PROMPT
from tts.registry import STRATEGIES
from tts.search.base import StrategyInputError
from tts.search.sampling.self_consistency import SelfConsistency, SelfConsistencyConfig
from tts.search.sampling.usc import UniversalSelfConsistency, UscConfig, parse_selection
from tts.types import Budget, Problem

RAIN = Problem("rain", "Write one sentence about rain.")
CLOUD = Problem("cloud", "Write one sentence about clouds.")


def FreeTextModel(replies, selection) -> FunctionGenerator:  # noqa: N802 -- reads as the model it builds
    """Replies per problem (by the request's key), in order; a selection request (the USC prompt)
    gets ``selection[key]``; 30 prompt tokens a request. Records every call."""

    def reply(r):
        asks = bool(r.messages) and "most consistent response" in r.messages[-1].content
        texts = [selection[r.key]] if asks else replies[r.key][: r.n]
        comps = tuple(Completion(t, len(t.split()), finish_reason="stop") for t in texts)
        return GenerationResult(comps, request_usage(30, 0, [c.completion_tokens for c in comps], 0.0))

    return FunctionGenerator(reply, model_name="free-text")


REPLIES = {
    "rain": ["Rain falls softly on the town.", "<think>wet</think>\nRain falls on the quiet town.",
             "Bananas are yellow.", "Soft rain falls on the town."],
    "cloud": ["Clouds drift.", "Clouds drift slowly by.", "Clouds are made of water."],
}


def _usc(model, n=4, max_tokens=32, **cfg):
    return UniversalSelfConsistency(UscConfig(n=n, **cfg), model, MATH_PROMPT.render, SamplingConfig(max_tokens=max_tokens))


def test_answers_with_the_named_reply_batched_in_two_calls_with_both_usages():
    model = FreeTextModel(REPLIES, {"rain": "The most consistent response is Response 1.",
                                    "cloud": "The most consistent response is Response 1"})
    rain, cloud = _usc(model).solve([RAIN, CLOUD])
    assert len(model.calls) == 2 and [len(c) for c in model.calls] == [2, 2]  # draws, then selections
    assert rain.answer == "Rain falls on the quiet town." and rain.trace.selected == 1  # thought stripped
    assert "<think>" not in model.calls[1][0].messages[0].content  # and not shown to the selector
    assert cloud.answer == "Clouds drift slowly by."
    drawn = sum(len(t.split()) for t in REPLIES["rain"])
    assert rain.usage.calls == 2 and rain.usage.completion_tokens == drawn + 7
    assert rain.usage.prompt_tokens == 60 and len(rain.usage.shapes) == 2
    assert [s.answer for s in rain.trace.samples][2] == "Bananas are yellow."
    assert rain.trace.events == {}


def test_confidence_is_the_chosen_replys_mbr_utility():
    model = FreeTextModel(REPLIES, {"rain": "The most consistent response is Response 3"})
    sol = _usc(model).solve([RAIN])[0]
    finals = ["Rain falls softly on the town.", "Rain falls on the quiet town.", "Bananas are yellow.",
              "Soft rain falls on the town."]
    assert sol.confidence == pytest.approx(mbr_select(finals).utilities[3])
    outlier = _usc(FreeTextModel(REPLIES, {"rain": "The most consistent response is Response 2"})).solve([RAIN])[0]
    assert outlier.answer == "Bananas are yellow." and outlier.confidence < sol.confidence


@pytest.mark.parametrize("reply", ["I cannot decide.", "The most consistent response is Response 7", ""])
def test_an_unreadable_or_out_of_range_choice_falls_back_to_the_first_reply_and_is_counted(reply):
    sol = _usc(FreeTextModel(REPLIES, {"rain": reply})).solve([RAIN])[0]
    assert sol.answer == "Rain falls softly on the town." and sol.trace.selected == 0
    assert sol.trace.events == {"usc_unparsed": 1} and sol.trace.notes["usc"] == reply


@pytest.mark.parametrize(("reply", "n", "index"), [
    ("The most consistent response is Response 3.", 4, 3),
    ("**The most consistent response is Response 2**", 4, 2),
    ("The most consistent response is response #0", 4, 0),
    ("Response 1 is the most consistent.", 4, 1),
    ("Response 0 and Response 2 agree. The most consistent response is Response 2", 4, 2),  # the phrase wins
    ("<think>Response 0 looks odd</think>The most consistent response is Response 1", 4, 1),
    ("The most consistent response is Response 4", 4, None),
    ("None of them.", 4, None),
])
def test_parse_selection(reply, n, index):
    assert parse_selection(reply, n) == index


def test_one_reply_sends_no_selection_request():
    model = FreeTextModel(REPLIES, {})
    sol = _usc(model, n=1).solve([RAIN])[0]
    assert len(model.calls) == 1 and sol.answer == "Rain falls softly on the town."
    assert sol.trace.notes == {} and sol.usage.calls == 1


def test_budgets_count_the_selection_requests_worst_case():
    model = FreeTextModel(REPLIES, {"rain": "The most consistent response is Response 0"})
    usc = _usc(model, n=4, max_tokens=32, selection_max_tokens=64)
    assert usc.samples_within(Budget(samples=2)) == 2
    # 4 * 32 + 64 = 192 covers all four; 191 leaves room for three replies and the selection.
    assert usc.samples_within(Budget(tokens=192)) == 4
    assert usc.samples_within(Budget(tokens=191)) == 3
    assert usc.samples_within(Budget(tokens=40)) == 1  # one reply fits, and needs no selection
    with pytest.raises(StrategyInputError, match="does not cover one reply"):
        usc.samples_within(Budget(tokens=31))
    sol = usc.solve([RAIN], [Budget(tokens=191)])[0]
    assert len(sol.trace.samples) == 3 and model.calls[0][0].n == 3
    assert model.calls[1][0].max_tokens == 64


def test_registered_parsed_and_never_shares_a_draw_with_plain_sampling_strategies():
    assert STRATEGIES.load("usc") is UniversalSelfConsistency
    cfg = parse_strategy_config({"kind": "usc", "n": 3, "selection_max_tokens": 128})
    assert isinstance(cfg, UscConfig) and cfg.n == 3
    model = FreeTextModel(REPLIES, {})
    sc = SelfConsistency(SelfConsistencyConfig(n=4), model, MATH_PROMPT.render)
    # Its aggregation is a model call of its own: grouped with self-consistency, the shared-draw
    # path would aggregate its samples without ever asking the model.
    assert share_groups([sc, _usc(model)]) == [[0], [1]]
    assert share_groups([_usc(model), sc]) == [[0], [1]]


def test_runs_on_the_scripted_thinking_model():
    problems = [Problem("a", "What is 2 + 2?", "4"), Problem("b", "What is 3 + 3?", "6")]
    gen = ScriptedGenerator.for_problems(problems, accuracy=0.6, thinking=True)
    sols = _usc(gen, n=4, max_tokens=256).solve(problems)
    for sol in sols:
        assert sol.answer is None or "<think>" not in sol.answer and "</think>" not in sol.answer
        assert len(sol.trace.samples) == 4 and sol.usage.calls == 2 and 0.0 <= sol.confidence <= 1.0
        # the scripted model does not answer a selection prompt in the paper's form
        assert sol.trace.events == {"usc_unparsed": 1} and sol.trace.selected == 0
