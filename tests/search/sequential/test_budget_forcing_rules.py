"""Budget forcing's rules worked out by hand on models whose thoughts and answers a function
writes: the requests and seeds as sent, the trace's tree, where a thought counts as cut, when the
answer is forced and its braces closed, the engine path's split of one reply into thought and
answer, its over-budget warning, refusals and the cost hook."""

from __future__ import annotations

import logging
import re

import pytest

from tts.backends.base import Completion, derive_seed
from tts.backends.function import FunctionGenerator
from tts.config import SamplingConfig
from tts.prompts import MATH_PROMPT
from tts.search.base import StrategyInputError
from tts.search.sequential.budget_forcing import BudgetForcing, BudgetForcingConfig, _close_braces
from tts.types import Budget, Problem, RequestShape

PROBLEM = Problem("p", "What is 2 + 2?", "4")


def _model(thoughts, answer=lambda head: "\nSo \\boxed{4}.", engine=False) -> FunctionGenerator:
    """Thinking requests get ``thoughts`` (completions, cycled over n); answer requests ``answer(head)``."""
    def reply(req):
        thinking = req.thinking_budget is not None if engine else "</think>" not in req.continuation
        if thinking:
            return thoughts
        return Completion(answer(req.continuation), 3, finish_reason="stop", ended_by_eos=True)
    gen = FunctionGenerator(reply, model_name="thinker")
    if engine:
        gen.supports_thinking_budget = True  # the engine caps the thought (vLLM with a reasoning config)
    return gen


def _think(text, tokens, finish="stop", eos=False, **kw) -> Completion:
    return Completion(text, tokens, finish_reason=finish, ended_by_eos=eos, **kw)


def _forcing(gen, sampling=None, seed=0, **cfg) -> BudgetForcing:
    sampling = sampling or SamplingConfig(max_tokens=500)
    return BudgetForcing(BudgetForcingConfig(**cfg), gen, MATH_PROMPT.render, sampling, seed=seed)


def _forced_4_else_5(head):
    return " \\boxed{4}" if head.endswith("Final Answer:") else "\nSo \\boxed{5}."


# --- the reprompt path ---------------------------------------------------------------------------


def test_a_cut_and_a_finished_thought_requests_seeds_and_tree(caplog):
    gen = _model([_think("a b c d e", 5, finish="length"), _think("a b ", 3)], _forced_4_else_5)
    bf = _forcing(gen, SamplingConfig(temperature=0.4, top_p=0.9, max_tokens=500), seed=5, n=2, max_thinking_tokens=5)
    with caplog.at_level(logging.WARNING):
        [sol] = bf.solve([PROBLEM])
    label = bf.config.label
    [think], answers = gen.calls
    assert (think.n, think.temperature, think.top_p, think.max_tokens, think.stop) == (2, 0.4, 0.9, 5, ("</think>",))
    assert think.seed == derive_seed(5, f"p|{label}|think", 0)
    assert [(r.temperature, r.top_p, r.max_tokens, r.stop) for r in answers] == [(0.4, 0.9, 32, ())] * 2
    assert [r.seed for r in answers] == [derive_seed(5, f"p|{label}|{k}|answer", 0) for k in (0, 1)]
    assert [r.continuation for r in answers] == ["<think>\na b c d e\n</think>\nFinal Answer:", "<think>\na b </think>"]
    assert (sol.problem_id, sol.answer, sol.confidence) == ("p", "4", 0.5)  # a tie: the earlier answer
    assert sol.trace.strategy == "budget_forcing" and sol.trace.votes == {"4": 1.0, "5": 1.0}
    assert sol.trace.selected == 0 and sol.trace.events == {"forced_cap": 1}
    assert [(s.finish_reason, s.completion_tokens) for s in sol.trace.samples] == [("forced", 8), ("stop", 6)]
    none = {"score": None}
    assert sol.trace.tree == (
        {"id": "0.0", "parent": None, "depth": 0, "kind": "think", "text": "a b c d e", "tokens": 5, **none,
         "answer": None, "forced": False, "kept": True},
        {"id": "0.1", "parent": "0.0", "depth": 1, "kind": "answer", "text": "\nFinal Answer: \\boxed{4}", "tokens": 3,
         **none, "answer": "4", "forced": True, "kept": True},
        {"id": "1.0", "parent": None, "depth": 0, "kind": "think", "text": "a b ", "tokens": 3, **none,
         "answer": None, "forced": False, "kept": False},
        {"id": "1.1", "parent": "1.0", "depth": 1, "kind": "answer", "text": "\nSo \\boxed{5}.", "tokens": 3,
         **none, "answer": "5", "forced": False, "kept": False})
    assert "ran past" not in caplog.text  # the reprompt path cuts the thought itself: never over budget


def test_an_extension_that_stops_exactly_at_the_cap_counts_as_cut_and_its_answer_is_forced():
    gen = _model([_think("h " * 10, 11)])  # every thought piece: 10 words and the delimiter
    bf = _forcing(gen, seed=3, max_thinking_tokens=22, min_thinking_tokens=22, max_waits=1)
    [sol] = bf.solve([PROBLEM])
    think, [wait], [answer] = gen.calls
    assert wait.max_tokens == 11 and wait.seed == derive_seed(3, f"p|{bf.config.label}|0|wait0", 0)
    assert sol.trace.events == {"forced_cap": 1, "waits": 1}
    assert answer.continuation.endswith("Wait" + "h " * 10 + "\n</think>\nFinal Answer:")


def test_a_thought_that_reaches_the_minimum_exactly_is_not_extended():
    gen = _model([_think("h " * 10, 11)])
    [sol] = _forcing(gen, max_thinking_tokens=100, min_thinking_tokens=11, max_waits=1).solve([PROBLEM])
    assert len(gen.calls) == 2 and sol.trace.events == {}


def test_force_after_eos_forces_only_a_thought_the_model_ended_with_end_of_sequence():
    gen = _model([_think("a b ", 3), _think("c d", 2, eos=True)])
    [sol] = _forcing(gen, n=2, force_after_eos=True).solve([PROBLEM])
    assert [r.continuation for r in gen.calls[1]] == ["<think>\na b </think>", "<think>\nc d</think>\nFinal Answer:"]
    assert sol.trace.events == {"forced_eos": 1}


def test_a_forced_answer_has_its_open_braces_closed():
    prefix = "\nFinal answer: $\\boxed{"
    gen = _model([_think("a b c", 3, finish="length")], lambda head: "\\frac{1}{2}")
    [sol] = _forcing(gen, max_thinking_tokens=3, answer_prefix=prefix).solve([PROBLEM])
    assert sol.answer == "\\frac{1}{2}"  # read from "...\boxed{\frac{1}{2}}", not "{\frac{1}{2}"
    assert _close_braces("\\boxed{\\frac{1}{2}") == "\\boxed{\\frac{1}{2}}" and _close_braces("{4}}") == "{4}}"


def test_an_unforced_answer_cut_at_answer_tokens_has_its_braces_closed_and_a_finished_one_is_read_as_written():
    def cut_answer(req):
        if "</think>" not in req.continuation:
            return [_think("a b ", 3)]  # the thought ends by itself: no forcing
        return Completion("\nSo \\boxed{\\frac{1}{2}", 32, finish_reason="length")
    [sol] = _forcing(FunctionGenerator(cut_answer, model_name="thinker")).solve([PROBLEM])
    assert sol.answer == "\\frac{1}{2}" and sol.trace.samples[0].finish_reason == "length"
    assert sol.trace.events == {}  # not forced
    gen = _model([_think("a b ", 3)], lambda head: "\nSo \\boxed{\\frac{1}{2}")  # ended with eos, not cut: as written
    [sol] = _forcing(gen).solve([PROBLEM])
    assert sol.answer == "{\\frac{1}{2}"  # the box as the model left it


# --- the engine path -----------------------------------------------------------------------------------


def test_the_engine_reply_is_split_at_the_first_delimiter_and_a_put_back_opener_is_dropped():
    capped = _think("<think>\nhmm hmm</think>\n\\boxed{4}", 9, eos=True, reasoning_tokens=3, thinking_capped=True)
    gen = _model([capped], engine=True)
    bf = _forcing(gen, seed=2, max_thinking_tokens=10)
    [sol] = bf.solve([PROBLEM])
    [[think]] = gen.calls  # one request thinks and answers
    assert think.seed == derive_seed(2, f"p|{bf.config.label}|think", 0) and think.thinking_budget == 10
    assert sol.trace.samples[0].text == "<think>\n\nhmm hmm</think>\n\\boxed{4}"
    assert sol.trace.samples[0].finish_reason == "stop" and sol.trace.events == {"engine_cut": 1}
    assert [(n["kind"], n["text"], n["tokens"]) for n in sol.trace.tree] == [("think", "\nhmm hmm", 3),
                                                                            ("answer", "\n\\boxed{4}", 6)]
    # No reasoning count: the tokens are shared by characters; a delimiter quoted in the answer stays in it.
    text = "hmm hmm hmm</think> \\boxed{4} </think>"
    plain = _think(text, 8, eos=True, thinking_capped=False)
    [sol] = _forcing(_model([plain], engine=True), max_thinking_tokens=10).solve([PROBLEM])
    think, answer = sol.trace.tree
    assert (think["text"], think["tokens"]) == ("hmm hmm hmm", round(8 * 11 / len(text))) == ("hmm hmm hmm", 2)
    assert (answer["text"], answer["tokens"]) == (" \\boxed{4} </think>", 6) and sol.trace.events == {}


def test_an_engine_thought_without_a_delimiter_is_answered_by_reprompt_forced_after_eos():
    ended = _think("hmm hmm", 4, eos=True)
    gen = _model([ended], engine=True)
    [sol] = _forcing(gen, max_thinking_tokens=10, force_after_eos=True).solve([PROBLEM])
    assert gen.calls[1][0].continuation == "<think>\nhmm hmm</think>\nFinal Answer:"
    assert sol.trace.events == {"forced_eos": 1} and sol.trace.samples[0].completion_tokens == 4 + 3
    assert sol.trace.notes == {"thinking_cap": "engine", "answers_reprompted": 1}


def test_an_engine_capped_thought_below_the_minimum_is_not_extended():
    capped = _think("hmm</think> \\boxed{4}", 12, reasoning_tokens=9, thinking_capped=True)
    gen = _model([capped], engine=True)
    [sol] = _forcing(gen, max_thinking_tokens=10, min_thinking_tokens=10, max_waits=1).solve([PROBLEM])
    assert len(gen.calls) == 1 and sol.trace.events == {"engine_cut": 1}


def test_only_a_thought_past_the_budget_is_over_budget_and_the_warning_names_the_backend(caplog):
    at_cap = _think("hmm</think> \\boxed{4}", 12, reasoning_tokens=10, thinking_capped=True)
    over = _think("hmm " * 15, 15, reasoning_tokens=15)
    gen = _model([at_cap, over], engine=True)
    with caplog.at_level(logging.WARNING, logger="tts.search.sequential.budget_forcing"):
        [sol] = _forcing(gen, n=2, max_thinking_tokens=10).solve([PROBLEM])
    assert sol.trace.events == {"engine_cut": 1, "forced_cap": 1, "over_budget": 1}
    assert caplog.messages == ["budget_forcing: 1 thoughts ran past the thinking budget of 10 tokens that the backend "
                               "(thinker) declared it enforces; its server or engine may ignore the budget (check its "
                               "reasoning config)"]
    caplog.clear()
    del gen.model_name  # a backend that does not say its model
    with caplog.at_level(logging.WARNING, logger="tts.search.sequential.budget_forcing"):
        _forcing(gen, n=2, max_thinking_tokens=10).solve([PROBLEM])
    assert "the backend (?) declared" in caplog.text


# --- refusals and the cost hook ----------------------------------------------------------------------


def test_refusals_say_what_to_change():
    bf = _forcing(_model([_think("a ", 2)]), n=4, max_thinking_tokens=100, answer_tokens=20)
    with pytest.raises(StrategyInputError, match=re.escape(
            f"budget_forcing: a budget of {Budget(tokens=100)} does not cover one sample of up to 120 tokens "
            "(B=100 thinking + 20 answer); raise the budget or lower max_thinking_tokens / answer_tokens.")):
        bf.solve([PROBLEM], [Budget(tokens=100)])
    with pytest.raises(StrategyInputError, match=r"^got 1 budgets for 2 problems; give one per problem$"):
        bf.solve([PROBLEM, PROBLEM], [None])


def test_the_cost_hook_shapes_exactly():
    assert BudgetForcing.planned_requests(2, 100, 50) == [RequestShape(100, 0, (50, 50)),
                                                         RequestShape(150, 150, (32,)), RequestShape(150, 150, (32,))]
    assert BudgetForcing.planned_requests(1, 100, 50, cached_tokens=20) == [RequestShape(100, 20, (50,)),
                                                                           RequestShape(150, 150, (32,))]
