"""Budget forcing on an engine that caps the thought itself (``thinking_budget``), and the reprompt
path it replaces, on the scripted backend playing a thinking model (``thinking=True``): it writes
``<think>`` thought ``\\n</think>`` answer, a word being a token, and honours a thinking budget as
vLLM's engine does (the thought already in the prompt counts, so the opening ``<think>\\n`` costs
one token of B)."""

from __future__ import annotations

import dataclasses

import pytest

from tests.fakes import Rewriting
from tts.backends.scripted import ScriptedGenerator
from tts.config import SamplingConfig
from tts.prompts import MATH_PROMPT
from tts.search.sequential.budget_forcing import BudgetForcing, BudgetForcingConfig
from tts.types import Budget, Problem

PROBLEMS = [Problem(f"p{i}", f"What is {i} + {i}?", str(2 * i)) for i in range(4)]


def _Recording(inner, drop_budget: bool = False) -> Rewriting:  # noqa: N802 -- reads as the model it builds
    """Records every call (its requests and results); with ``drop_budget`` it claims an engine
    thinking cap but sends the requests without their budget (a backend that ignores it)."""
    return Rewriting(inner, before=(lambda r: dataclasses.replace(r, thinking_budget=None)) if drop_budget else None)


def _thinker(mean_tokens=60, **kw):
    return _Recording(ScriptedGenerator.for_problems(PROBLEMS, accuracy=0.8, seed=3, thinking=True,
                                                     mean_tokens=mean_tokens), **kw)


def _forcing(gen, max_tokens=400, **cfg):
    return BudgetForcing(BudgetForcingConfig(**cfg), gen, MATH_PROMPT.render, SamplingConfig(max_tokens=max_tokens))


def _thought_tokens(sol):
    return [n["tokens"] for n in sol.trace.tree if n["kind"] in ("think", "wait")]


def test_the_engine_caps_the_thought_in_one_request_and_the_model_answers_in_it():
    gen = _thinker(mean_tokens=80)
    sols = _forcing(gen, n=4, max_thinking_tokens=30).solve(PROBLEMS)
    assert len(gen.calls) == 1  # no answer requests: the engine wrote the delimiter, the model answered
    requests = gen.calls[0]
    assert all(r.thinking_budget == 30 and r.stop == () and r.continuation == "<think>\n" for r in requests)
    assert all(r.max_tokens == 30 + 32 + 4 for r in requests)  # B + answer_tokens + room for the delimiter
    for sol in sols:
        assert sol.trace.notes == {"thinking_cap": "engine"}
        # thoughts of ~80 words are cut by the engine: 29 generated tokens + the prompt's "\n" = B
        cut = [t for t in _thought_tokens(sol) if t == 29]
        assert sol.trace.events.get("engine_cut", 0) == len(cut) >= 1
        assert all(t <= 29 for t in _thought_tokens(sol))
        assert "forced_cap" not in sol.trace.events  # no answer prefix is forced on this path
        assert all(s.text.startswith("<think>\n") and "\n</think>\n\n" in s.text for s in sol.trace.samples)
        assert sol.answer is not None
        assert sol.usage.calls == 1


def test_without_engine_support_the_thought_is_cut_by_a_stop_string_and_the_answer_reprompted():
    gen = _thinker(mean_tokens=80)
    sols = _forcing(gen, n=4, max_thinking_tokens=30, engine_cap=False).solve(PROBLEMS)
    assert len(gen.calls) == 2  # think, then answer
    think, answer = gen.calls[0], gen.calls[1]
    assert all(r.thinking_budget is None and r.stop == ("</think>",) and r.max_tokens == 30 for r in think)
    assert all(r.thinking_budget is None and r.continuation.endswith("</think>\nFinal Answer:") for r in answer
               if "Final Answer" in r.continuation)
    for sol in sols:
        assert sol.trace.notes == {"thinking_cap": "reprompt"}
        assert "engine_cut" not in sol.trace.events and sol.trace.events.get("forced_cap", 0) >= 1
    # the plain scripted backend has no engine cap: the strategy takes the reprompt path on its own
    plain = ScriptedGenerator.for_problems(PROBLEMS, seed=3)
    assert not plain.supports_thinking_budget
    assert _forcing(plain, max_thinking_tokens=30).solve(PROBLEMS[:1])[0].trace.notes == {"thinking_cap": "reprompt"}


def test_reasoning_and_answer_tokens_are_counted_apart_on_both_paths():
    for engine in (True, False):
        gen = _thinker(mean_tokens=40)
        sols = _forcing(gen, n=3, max_thinking_tokens=50, engine_cap=engine).solve(PROBLEMS)
        backend = sum(r.usage.reasoning_tokens for results in gen.results for r in results)
        assert sum(s.usage.reasoning_tokens for s in sols) == backend > 0  # every thought token the backend counted
        for sol in sols:
            assert sol.usage.completion_tokens == sum(s.completion_tokens for s in sol.trace.samples)
            assert 0 < sol.usage.reasoning_tokens < sol.usage.completion_tokens  # the answers are not reasoning
            if engine:  # one request per sample: the thought is exactly the reasoning count
                assert sol.usage.reasoning_tokens == sum(_thought_tokens(sol))
            else:  # a thought cut by its stop string counts the delimiter's token, which is not reasoning
                assert sum(_thought_tokens(sol)) - 3 <= sol.usage.reasoning_tokens <= sum(_thought_tokens(sol))


def test_the_wait_extension_reprompts_and_the_dropped_engine_answers_stay_in_the_usage():
    gen = _thinker(mean_tokens=20)
    sol = _forcing(gen, n=2, max_thinking_tokens=200, min_thinking_tokens=150, max_waits=2).solve(PROBLEMS[:1])[0]
    first, waits = gen.calls[0][0], gen.calls[1:-1]
    assert first.thinking_budget == 200 and first.stop == ()
    assert waits and all(r.stop == ("</think>",) and r.continuation.endswith("Wait") and r.thinking_budget is None
                         for reqs in waits for r in reqs)
    answers = gen.calls[-1]
    assert all(r.continuation.endswith("</think>") for r in answers) and len(answers) == 2
    assert sol.trace.notes == {"thinking_cap": "engine", "answers_reprompted": 2}
    assert sol.trace.events["waits"] >= 2
    spent = sum(r.usage.completion_tokens for results in gen.results for r in results)
    dropped = gen.results[0][0].usage.completion_tokens - sum(_thought_tokens_first(gen))
    assert sol.usage.completion_tokens == spent == sum(s.completion_tokens for s in sol.trace.samples) + dropped


def _thought_tokens_first(gen):
    return [c.reasoning_tokens for c in gen.results[0][0].completions]


def test_a_backend_that_ignores_the_budget_is_caught_and_its_thoughts_answered_by_reprompt(caplog):
    gen = _thinker(mean_tokens=300, drop_budget=True)  # says it caps, then lets the thought run
    sol = _forcing(gen, n=2, max_thinking_tokens=20).solve(PROBLEMS[:1])[0]
    assert sol.trace.events["over_budget"] == 2 and "engine_cut" not in sol.trace.events
    assert sol.trace.notes == {"thinking_cap": "engine", "answers_reprompted": 2}
    assert len(gen.calls) == 2 and "ran past the thinking budget" in caplog.text
    assert all(s.answer is not None for s in sol.trace.samples)


def test_budgets_count_the_engine_delimiter_room():
    bf = _forcing(_thinker(), n=8, max_thinking_tokens=100, answer_tokens=20)
    sols = bf.solve(PROBLEMS[:1], [Budget(tokens=368)])
    assert len(sols[0].trace.samples) == 2  # 368 // (100 + 20 + 4); the reprompt path's worst case would allow 3
    reprompt = _forcing(_thinker(), n=8, max_thinking_tokens=100, answer_tokens=20, engine_cap=False)
    assert len(reprompt.solve(PROBLEMS[:1], [Budget(tokens=368)])[0].trace.samples) == 3


def test_the_scripted_backend_refuses_a_thinking_budget_unless_it_plays_a_thinking_model():
    from tts.backends.base import GenerationRequest, Message

    req = GenerationRequest((Message("user", "1+1?"),), thinking_budget=5)
    with pytest.raises(ValueError, match="thinking=True"):
        ScriptedGenerator({}).generate([req])
