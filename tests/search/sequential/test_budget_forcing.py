"""Budget forcing: where the thought is cut, how often "Wait" is appended, what is left untouched.

Neither embedded model writes a thinking section, so the logic is tested on ``_Thinker``, a
scripted model that does: each thinking request writes ``think[key]`` words (a word is a token)
and then the end-of-thinking delimiter, as a thinking model served by vLLM with the delimiter as a
stop string would (the delimiter is cut from the text and its token counted). After the thought,
it answers ``answers[key]``.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tts.backends.base import Completion
from tts.backends.function import FunctionGenerator
from tts.backends.scripted import ScriptedGenerator
from tts.config import SamplingConfig
from tts.prompts import MATH_PROMPT
from tts.search.base import StrategyInputError
from tts.search.sequential.budget_forcing import BudgetForcing, BudgetForcingConfig
from tts.types import Budget, Problem

PROBLEMS = [Problem("short", "What is 1 + 1?", "2"), Problem("long", "What is 2 + 2?", "4")]


class _Thinker(FunctionGenerator):
    """A thinking model: ``think[key]`` words of thought per request, then ``</think>``; then its answer."""

    def __init__(self, think, answers, end="</think>"):
        super().__init__(self._complete, model_name="thinker")
        self.think, self.answers, self.end = think, answers, end

    def _complete(self, req):
        if self.end not in req.continuation:  # thinking (or thinking on after "Wait")
            words = self.think[req.key]
            if words + 1 <= req.max_tokens and self.end in req.stop:
                return Completion(" ".join(["hmm"] * words) + " ", words + 1, finish_reason="stop", ended_by_eos=False)
            cut = min(words, req.max_tokens)
            return Completion(" ".join(["hmm"] * cut), cut, finish_reason="length", ended_by_eos=False)
        if req.continuation.endswith("\\boxed{"):  # a forced answer: the box is closed
            return Completion(f"{self.answers[req.key]}}}$.", 3, finish_reason="stop", ended_by_eos=True)
        return Completion(f"\nThe answer is $\\boxed{{{self.answers[req.key]}}}$.", 6, finish_reason="stop",
                          ended_by_eos=True)


def _forcing(gen, sampling=None, **cfg):
    sampling = sampling or SamplingConfig(max_tokens=500)
    return BudgetForcing(BudgetForcingConfig(**cfg), gen, MATH_PROMPT.render, sampling)


def test_a_thought_past_the_cap_is_cut_at_exactly_b_tokens_and_its_answer_forced():
    gen = _Thinker({"short": 10, "long": 50}, {"short": "2", "long": "4"})
    sols = _forcing(gen, max_thinking_tokens=20).solve(PROBLEMS)
    assert len(gen.calls) == 2 and all(r.max_tokens == 20 and r.stop == ("</think>",) for r in gen.calls[0])
    answers = {r.key: r.continuation for r in gen.calls[1]}
    # the long thought: 20 words, then a newline, the delimiter and s1's answer prefix are forced
    assert answers["long"] == "<think>\n" + " ".join(["hmm"] * 20) + "\n</think>\nFinal Answer:"
    short, long_ = sols
    assert long_.answer == "4" and long_.trace.samples[0].finish_reason == "forced"
    assert long_.trace.events == {"forced_cap": 1}
    assert long_.trace.samples[0].completion_tokens == 20 + 6
    assert long_.trace.samples[0].text == answers["long"] + "\nThe answer is $\\boxed{4}$."
    # the short thought ended on its own: continued after its delimiter, nothing forced
    assert answers["short"] == "<think>\n" + " ".join(["hmm"] * 10) + " </think>"
    assert short.answer == "2" and short.trace.events == {} and short.trace.samples[0].finish_reason == "stop"


def test_wait_is_appended_exactly_k_times_when_the_thought_stays_below_the_minimum():
    gen = _Thinker({"short": 10, "long": 10}, {"short": "2", "long": "4"})
    sol = _forcing(gen, min_thinking_tokens=1000, max_waits=3).solve(PROBLEMS[:1])[0]
    assert len(gen.calls) == 1 + 3 + 1  # think, three "Wait" rounds, answer
    final = gen.calls[-1][0].continuation
    assert final.count("Wait") == 3 and final.count("</think>") == 1 and final.endswith("</think>")
    for k, call in enumerate(gen.calls[1:4], start=1):  # each extension continues the thought minus its end
        assert call[0].continuation.endswith("Wait") and call[0].continuation.count("Wait") == k
        assert "</think>" not in call[0].continuation and call[0].stop == ("</think>",)
    assert sol.trace.events == {"waits": 3}
    assert sol.trace.samples[0].completion_tokens == 4 * 11 + 6  # four thought pieces, then the answer
    assert [n["kind"] for n in sol.trace.tree] == ["think", "wait", "wait", "wait", "answer"]


def test_extension_stops_once_the_minimum_is_reached_and_never_passes_the_cap():
    gen = _Thinker({"short": 10, "long": 10}, {"short": "2", "long": "4"})
    sol = _forcing(gen, min_thinking_tokens=15, max_waits=5).solve(PROBLEMS[:1])[0]
    assert sol.trace.events == {"waits": 1} and len(gen.calls) == 3  # 11 < 15, then 22 >= 15
    gen = _Thinker({"short": 10, "long": 10}, {"short": "2", "long": "4"})
    sol = _forcing(gen, max_thinking_tokens=25, min_thinking_tokens=25, max_waits=5).solve(PROBLEMS[:1])[0]
    # 11 + 11 tokens, then only 3 left: the third piece is cut there and the answer forced
    assert [r.max_tokens for c in gen.calls[:3] for r in c] == [25, 14, 3]
    assert sol.trace.events == {"forced_cap": 1, "waits": 2}
    assert sol.trace.samples[0].completion_tokens == 25 + 6 and sol.answer == "2"


def test_usage_counts_every_generated_token_thought_extensions_and_forced_answers():
    gen = _Thinker({"short": 30, "long": 8}, {"short": "2", "long": "4"})
    sols = _forcing(gen, n=3, max_thinking_tokens=20, min_thinking_tokens=12, max_waits=1).solve(PROBLEMS)
    for sol in sols:
        assert sol.usage.completion_tokens == sum(s.completion_tokens for s in sol.trace.samples)
        assert len(sol.trace.samples) == 3 and sol.confidence == 1.0
    short, long_ = sols
    assert short.usage.calls == 1 + 3 and short.trace.events == {"forced_cap": 3}  # cut at 20, forced
    # 9 tokens < 12: one "Wait", 9 more (18 < 20), then the thought ends on its own: nothing forced
    assert long_.usage.calls == 1 + 3 + 3 and long_.trace.events == {"waits": 3}
    assert all(s.completion_tokens == 9 + 9 + 6 for s in long_.trace.samples)
    assert len(gen.calls) == 3  # think, one wait round, answer: all problems together


def test_a_model_without_a_thinking_section_still_gets_an_answer_on_the_scripted_backend():
    problems = [Problem(f"p{i}", f"What is {i} + {i}?", str(2 * i)) for i in range(6)]
    gen = ScriptedGenerator.for_problems(problems, accuracy=0.6, seed=1)
    sols = _forcing(gen, n=4, sampling=SamplingConfig(max_tokens=300), force_after_eos=True,
                    answer_prefix="\nFinal answer: $\\boxed{").solve(problems)
    for sol in sols:  # it ends its message inside the "thought": the answer is forced after it
        assert all(s.answer is not None and s.finish_reason == "forced" for s in sol.trace.samples)
        assert sol.trace.events == {"forced_eos": 4}


def test_budgets_lower_n_and_a_budget_below_one_sample_is_refused():
    gen = _Thinker({"short": 5, "long": 5}, {"short": "2", "long": "4"})
    bf = _forcing(gen, n=8, max_thinking_tokens=100, answer_tokens=20)
    sols = bf.solve(PROBLEMS, [Budget(samples=2), Budget(tokens=360)])
    assert [len(s.trace.samples) for s in sols] == [2, 3]  # 360 // (100 + 20)
    with pytest.raises(StrategyInputError, match="does not cover one sample of up to 120 tokens"):
        bf.solve(PROBLEMS[:1], [Budget(tokens=100)])


def test_delimiters_and_forcing_strings_are_settings():
    gen = _Thinker({"short": 40, "long": 2}, {"short": "2", "long": "4"}, end="<|end_think|>")
    cfg = dict(think_start="", think_end="<|end_think|>", answer_prefix=" So: \\boxed{", wait=" But wait,",
               max_thinking_tokens=10, min_thinking_tokens=5, max_waits=1)
    sols = _forcing(gen, **cfg).solve(PROBLEMS)
    heads = {r.key: r.continuation for r in gen.calls[-1]}
    assert heads["short"] == " ".join(["hmm"] * 10) + "\n<|end_think|> So: \\boxed{"
    assert heads["long"] == "hmm hmm  But wait,hmm hmm <|end_think|>"
    assert [s.answer for s in sols] == ["2", "4"]


def test_inconsistent_settings_are_refused_with_what_to_change():
    with pytest.raises(ValidationError, match="Set both"):
        BudgetForcingConfig(min_thinking_tokens=100)
    with pytest.raises(ValidationError, match="Set both"):
        BudgetForcingConfig(max_waits=2)
    with pytest.raises(ValidationError, match="above max_thinking_tokens"):
        BudgetForcingConfig(max_thinking_tokens=50, min_thinking_tokens=100, max_waits=1)
    assert BudgetForcingConfig(n=4, max_thinking_tokens=256).label == "budget_forcing@4,max_thinking_tokens=256"
