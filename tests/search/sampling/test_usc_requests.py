"""USC's two requests as sent (the draw, then the greedy selection with the paper's prompt), its
cost hook and budgets at their edges, and a chosen reply without a final text."""

from __future__ import annotations

import pytest

from tts.backends.base import Completion, GenerationResult, derive_seed, request_usage
from tts.backends.function import FunctionGenerator
from tts.config import SamplingConfig
from tts.search.base import StrategyInputError
from tts.search.sampling.usc import USC_TEMPLATE, UniversalSelfConsistency, UscConfig
from tts.types import Budget, Problem, RequestShape

RAIN = Problem("rain", "Write one sentence about rain.")


def model(replies, selection) -> FunctionGenerator:
    """``replies`` to a draw, ``selection`` to the selection request; 30 prompt tokens a request."""

    def reply(r):
        asks = bool(r.messages) and "most consistent response" in r.messages[-1].content
        texts = [selection] if asks else replies[: r.n]
        comps = tuple(Completion(t, len(t.split()), finish_reason="stop") for t in texts)
        return GenerationResult(comps, request_usage(30, 0, [c.completion_tokens for c in comps], 0.0))

    return FunctionGenerator(reply)


def usc(gen, n=3, **config):
    sampling = SamplingConfig(temperature=0.6, top_p=0.9, max_tokens=32)
    return UniversalSelfConsistency(UscConfig(n=n, **config), gen, lambda p: (), sampling, seed=4)


def test_the_draw_and_the_selection_request_as_sent():
    gen = model(["Rain falls.", "<think>wet</think>Rain pours.", "Sun."], "The most consistent response is Response 1")
    sol = usc(gen, selection_max_tokens=16).solve([RAIN])[0]
    (draw,), (select,) = gen.calls
    assert (draw.n, draw.temperature, draw.top_p, draw.max_tokens) == (3, 0.6, 0.9, 32)
    assert (draw.seed, draw.key) == (derive_seed(4, "rain", 0), "rain")
    assert (select.n, select.temperature, select.top_p, select.max_tokens) == (1, 0.0, 1.0, 16)
    assert (select.seed, select.key) == (derive_seed(4, "rain", 1), "rain")
    shown = "Response 0: Rain falls.\n\nResponse 1: Rain pours.\n\nResponse 2: Sun."
    assert [(m.role, m.content) for m in select.messages] == [
        ("user", USC_TEMPLATE.format(question="Write one sentence about rain.", responses=shown))]
    assert (sol.problem_id, sol.answer, sol.trace.selected, sol.trace.strategy) == ("rain", "Rain pours.", 1, "usc")
    assert sol.trace.notes == {"usc": "The most consistent response is Response 1"}


def test_a_chosen_reply_that_is_all_thought_is_no_answer_with_no_confidence():
    gen = model(["<think>cut off", "Rain falls.", "Rain falls."], "The most consistent response is Response 0")
    sol = usc(gen).solve([RAIN])[0]
    assert (sol.answer, sol.confidence, sol.trace.selected) == (None, 0.0, 0)
    alone = usc(model(["<think>cut off"], ""), n=1).solve([RAIN])[0]  # one reply: no selection, still no answer
    assert (alone.answer, alone.confidence) == (None, 0.0)
    shown = gen.calls[1][0].messages[0].content  # a reply without a final text is shown empty
    assert "Response 0: \n\nResponse 1: Rain falls.\n\nResponse 2: Rain falls." in shown


def test_a_reply_without_a_final_text_counts_as_empty_in_the_confidence():
    """X marks the spot twice and one reply that is all thought: the chosen reply's chrF against
    the other two, the thought one counted as "" (0) and its twin (1): 0.5."""
    gen = model(["X marks the spot.", "<think>cut off", "X marks the spot."], "The most consistent response is Response 0")
    sol = usc(gen).solve([RAIN])[0]
    assert (sol.answer, sol.confidence) == ("X marks the spot.", 0.5)


def test_two_replies_are_selected_between_and_an_empty_selection_reply_falls_back_to_the_first():
    gen = model(["Rain falls.", "Rain pours."], "The most consistent response is Response 1")
    sol = usc(gen, n=2).solve([RAIN])[0]
    assert (len(gen.calls), sol.answer, sol.trace.selected) == (2, "Rain pours.", 1)
    silent = FunctionGenerator(lambda r: GenerationResult(
        () if r.max_tokens == 64 else (Completion("Rain falls.", 2), Completion("Rain pours.", 2)),
        request_usage(30, 0, [] if r.max_tokens == 64 else [2, 2], 0.0)))
    sol = usc(silent, n=2).solve([RAIN])[0]
    assert (sol.answer, sol.trace.events, sol.trace.notes) == ("Rain falls.", {"usc_unparsed": 1}, {"usc": ""})


def test_no_reply_drawn_is_no_answer():
    gen = FunctionGenerator(lambda r: GenerationResult((), request_usage(30, 0, [], 0.0)))
    sol = usc(gen).solve([RAIN])[0]
    assert (sol.problem_id, sol.answer, sol.confidence, sol.trace.strategy, sol.trace.samples) == ("rain", None, 0.0, "usc", ())
    assert (sol.usage.prompt_tokens, sol.usage.calls) == (30, 1)
    assert len(gen.calls) == 1  # no selection of nothing


def test_the_cost_hook_plans_the_draw_and_a_selection_holding_every_reply():
    """The selection's prompt: the question plus n replies of gen_tokens and about 4 tokens of
    "Response i: " each, plus 50 of instructions; its reply is the default 64 tokens."""
    assert UniversalSelfConsistency.planned_requests(4, 100, 20, 10) == [
        RequestShape(100, 10, (20, 20, 20, 20)), RequestShape(100 + 4 * 24 + 50, 0, (64,))]
    assert UniversalSelfConsistency.planned_requests(1, 100, 20) == [RequestShape(100, 0, (20,))]
    assert UniversalSelfConsistency.planned_requests(2, 100, 20) == [
        RequestShape(100, 0, (20, 20)), RequestShape(100 + 2 * 24 + 50, 0, (64,))]


def test_budgets_at_their_edges():
    """max_tokens 32, selection 64: 32 tokens are exactly one reply (which needs no selection);
    samples and tokens together take the smaller n; no budget is the config's n."""
    strategy = usc(model([], ""), n=4)
    assert strategy.samples_within(None) == 4
    assert strategy.samples_within(Budget(tokens=32)) == 1
    assert strategy.samples_within(Budget(samples=8)) == 4
    assert strategy.samples_within(Budget(samples=3, tokens=64 + 2 * 32)) == 2
    assert strategy.samples_within(Budget(samples=2, tokens=10_000)) == 2
    with pytest.raises(StrategyInputError, match=r"does not cover one reply of up to 32 tokens; raise the budget or lower max_tokens\.$"):
        strategy.samples_within(Budget(tokens=31))
