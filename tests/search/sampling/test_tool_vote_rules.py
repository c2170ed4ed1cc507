"""tool_vote's rules one at a time, on replies the test writes in draw order: what the request
carries, what the vote counts and shows, how ties and a calling minority are decided, what a shared
draw and a per-request stop do. Every expected value is worked out by hand in the test."""

from __future__ import annotations

import json
import random

import pytest

import tts.answers.kinds
from tts.answers.code import CODE
from tts.backends.base import Completion, derive_seed
from tts.backends.function import FunctionGenerator
from tts.backends.scripted import ScriptedGenerator
from tts.config import SamplingConfig, StopConfig
from tts.prompts import PLAIN_PROMPT, chat_prompt
from tts.search.sampling.tool_vote import ToolVote, ToolVoteConfig
from tts.types import Budget, Problem, RequestShape

CHAT = chat_prompt(PLAIN_PROMPT)
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def call(name: str, **args) -> str:
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": args})}\n</tool_call>'


def weather(city: str) -> str:
    return call("get_weather", city=city)


def boxed(answer: str) -> str:
    return f"so the answer is \\boxed{{{answer}}}"


def in_order(texts, tokens=None, logprob=-0.2, finish="stop") -> FunctionGenerator:
    """A model whose k-th reply of a problem (over all its requests, in draw order) is ``texts[k]``."""
    drawn: dict[str, int] = {}

    def draw(req):
        start = drawn.get(req.key, 0)
        drawn[req.key] = start + req.n
        return [Completion(t, tokens[start + i] if tokens else len(t.split()), logprob, finish)
                for i, t in enumerate(texts[start:start + req.n])]

    return FunctionGenerator(draw, model_name="tool-model")


def problem(pid: str = "turn-1", **meta) -> Problem:
    return Problem(pid, "What's the weather in Paris?", None, {"tools": TOOLS, **meta})


def canonical(city: str) -> str:
    """A call's vote key as ``trace.votes`` shows it (call_key: keys sorted, arguments as given)."""
    return json.dumps([{"arguments": {"city": city}, "name": "get_weather"}], sort_keys=True)


def test_the_request_carries_the_sampling_settings_the_seed_the_key_and_the_tool_choice():
    model = in_order([weather("Paris")] * 3)
    sampling = SamplingConfig(temperature=0.3, top_p=0.8, max_tokens=77)
    ToolVote(ToolVoteConfig(n=3), model, CHAT, sampling=sampling, seed=5).solve([problem(tool_choice="required")])
    (req,) = model.requests
    assert (req.n, req.temperature, req.top_p, req.max_tokens) == (3, 0.3, 0.8, 77)
    assert (req.seed, req.key, req.tool_choice) == (derive_seed(5, "turn-1", 0), "turn-1", '"required"')


def test_a_budget_caps_each_problems_replies():
    model = in_order([weather("Paris")] * 8)
    sols = ToolVote(ToolVoteConfig(n=8), model, CHAT).solve([problem("a"), problem("b")], [Budget(samples=2), None])
    assert [r.n for r in model.requests] == [2, 8] and [len(s.trace.samples) for s in sols] == [2, 8]


def test_the_cost_hook_plans_one_request_of_n_replies():
    assert ToolVote.planned_requests(4, 100, 50, 30) == [RequestShape(100, 30, (50, 50, 50, 50))]
    assert ToolVote.planned_requests(2, 100, 50) == [RequestShape(100, 0, (50, 50))]


def test_the_votes_show_each_call_once_normalised_and_the_replies_keep_their_numbers():
    """3 of 4 replies call: Paris and " paris " are one call (2 votes), London 1; the reply in text
    votes for nothing and shows no key."""
    texts = [weather("Paris"), weather(" paris "), weather("London"), "I think it is sunny."]
    model = in_order(texts, tokens=[11, 12, 13, 14], logprob=-0.5, finish="tool_calls")
    sol = ToolVote(ToolVoteConfig(n=4), model, CHAT).solve([problem()])[0]
    assert sol.trace.votes == {canonical("paris"): 2.0, canonical("london"): 1.0}
    assert (sol.problem_id, sol.trace.selected, sol.confidence) == ("turn-1", 0, 0.5)
    assert [s.completion_tokens for s in sol.trace.samples] == [11, 12, 13, 14]
    assert {(s.mean_logprob, s.finish_reason) for s in sol.trace.samples} == {(-0.5, "tool_calls")}


def test_arguments_compared_as_written_when_normalising_is_off():
    """Paris, London, " paris ", London: normalised, paris and london tie 2 to 2 and the first seen
    (Paris) wins; as written, London's 2 beat Paris's 1 and " paris "'s 1."""
    texts = [weather("Paris"), weather("London"), weather(" paris "), weather("London")]
    normalised = ToolVote(ToolVoteConfig(n=4), in_order(texts), CHAT).solve([problem()])[0]
    assert (normalised.trace.selected, normalised.confidence) == (0, 0.5)
    exact = ToolVote(ToolVoteConfig(n=4, normalize_arguments=False), in_order(texts), CHAT).solve([problem()])[0]
    assert json.loads(exact.answer) == [{"name": "get_weather", "arguments": {"city": "London"}}]
    assert (exact.trace.selected, exact.confidence) == (1, 0.5)
    assert exact.trace.votes == {canonical("Paris"): 1.0, canonical("London"): 2.0, canonical(" paris "): 1.0}


def test_parallel_replies_whose_first_calls_agree_are_unanimous():
    """The first calls are all Paris: 3 of 3 agree, and the first reply comes back whole (its
    second call is Rome, the others' Oslo: counting the second calls would give Oslo 2 of 3)."""
    both, other = weather("Paris") + "\n" + weather("Rome"), weather("Paris") + "\n" + weather("Oslo")
    sol = ToolVote(ToolVoteConfig(n=3), in_order([both, other, other]), CHAT).solve([problem()])[0]
    assert [c["arguments"]["city"] for c in json.loads(sol.answer)] == ["Paris", "Rome"]
    assert (sol.trace.selected, sol.confidence) == (0, 1.0)


def test_a_random_tie_is_drawn_from_the_run_seed_and_the_problem_id():
    """Paris and London tie 1 to 1 in every problem; ``ties="random"`` draws with
    Random(derive_seed(seed, problem id, 1)), so a rerun gives the same choices and both occur."""
    ids = [f"p{i}" for i in range(10)]
    model = in_order([weather("Paris"), weather("London")])
    strategy = ToolVote(ToolVoteConfig(n=2, ties="random"), model, CHAT, seed=7)
    cities = [json.loads(s.answer)[0]["arguments"]["city"] for s in strategy.solve([problem(i) for i in ids])]
    drawn = [["Paris", "London"][random.Random(derive_seed(7, i, 1)).choice([0, 1])] for i in ids]
    assert cities == drawn and set(cities) == {"Paris", "London"}


def test_a_calling_minority_abstains_and_the_replies_in_text_vote():
    """3 of 7 reply with the same call, 4 in text with 4, 5, 6, 7: the calls abstain (under half
    call), so the text answers tie 1 to 1 and the first (4) wins with 1/7."""
    texts = [weather("Paris")] * 3 + [boxed(a) for a in "4567"]
    sol = ToolVote(ToolVoteConfig(n=7), in_order(texts), CHAT).solve([problem()])[0]
    assert (sol.problem_id, sol.answer, sol.confidence, sol.trace.selected) == ("turn-1", "4", pytest.approx(1 / 7), 3)
    assert [s.answer for s in sol.trace.samples[:3]] == [None] * 3
    assert sol.trace.votes == {"4": 1.0, "5": 1.0, "6": 1.0, "7": 1.0}
    assert sol.trace.strategy == "tool_vote" and sol.trace.events == {"no_tool_call": 4, "answered_in_text": 1}
    assert sol.usage.completion_tokens == sum(len(t.split()) for t in texts)


def test_replies_without_calls_or_answers_give_no_answer_and_say_so():
    texts = ["I cannot tell.", "No idea."]
    sol = ToolVote(ToolVoteConfig(n=2), in_order(texts), CHAT).solve([problem()])[0]
    assert (sol.answer, sol.trace.selected, sol.trace.events) == (None, None, {"no_tool_call": 2})
    required = ToolVote(ToolVoteConfig(n=2, text_fallback=False), in_order(texts), CHAT).solve([problem()])[0]
    assert (required.problem_id, required.answer, required.confidence) == ("turn-1", None, 0.0)
    assert (required.trace.strategy, required.trace.events) == ("tool_vote", {"no_tool_call": 2})
    assert required.usage.completion_tokens == 3 + 2


def test_a_repeat_is_the_call_as_written_when_normalising_is_off():
    """The conversation holds get_weather(Paris) and its result; two replies call it again exactly,
    two answer: the repeats abstain (compared as written), so the text is the answer."""
    messages = [{"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "18C"}]
    texts = [weather("Paris"), "It is 18C in Paris.", weather("Paris"), "It is 18C in Paris."]
    sol = ToolVote(ToolVoteConfig(n=4, normalize_arguments=False), in_order(texts), CHAT,
                   extract=tts.answers.kinds.TEXT).solve([problem(messages=messages)])[0]
    assert sol.answer == "It is 18C in Paris." and sol.trace.events["repeated_tool_call"] == 2


def test_shared_draws_need_the_same_generator_prompt_sampling_extraction_and_seed():
    model, other = in_order([]), in_order([])
    base = ToolVote(ToolVoteConfig(n=4), model, CHAT, seed=0)
    assert base.shares_draw_with(ToolVote(ToolVoteConfig(n=8, match="name_and_arguments"), model, CHAT, seed=0))
    differing = [ToolVote(ToolVoteConfig(n=4), other, CHAT, seed=0),
                 ToolVote(ToolVoteConfig(n=4), model, chat_prompt(PLAIN_PROMPT), seed=0),
                 ToolVote(ToolVoteConfig(n=4), model, CHAT, sampling=SamplingConfig(temperature=0.1), seed=0),
                 ToolVote(ToolVoteConfig(n=4), model, CHAT, extract=tts.answers.kinds.TEXT, seed=0),
                 ToolVote(ToolVoteConfig(n=4), model, CHAT, seed=1),
                 ToolVote(ToolVoteConfig(n=4, stop=StopConfig()), model, CHAT, seed=0)]
    assert [base.shares_draw_with(s) for s in differing] == [False] * 6
    assert not differing[-1].shares_draw_with(base)


def test_voters_that_cannot_share_draw_alone_and_a_single_voter_draws_once():
    model = in_order([weather("Paris")] * 12)
    four, eight = ToolVote(ToolVoteConfig(n=4), model, CHAT, seed=0), ToolVote(ToolVoteConfig(n=8), model, CHAT, seed=1)
    apart = ToolVote.solve_together([four, eight], [problem()])
    assert [r.n for r in model.requests] == [4, 8] and [len(s[0].trace.samples) for s in apart] == [4, 8]
    assert [r.seed for r in model.requests] == [derive_seed(0, "turn-1", 0), derive_seed(1, "turn-1", 0)]
    single = in_order([weather("Paris")] * 4)
    [[sol]] = ToolVote.solve_together([ToolVote(ToolVoteConfig(n=4), single, CHAT)], [problem()])
    assert [r.n for r in single.requests] == [4] and sol.confidence == 1.0


def test_a_smaller_voter_of_a_shared_scripted_draw_is_priced_as_its_own_batch():
    """Two problems, n = 2 and 4 share one engine call of 2 x 4 sequences; alone, n = 2 would have
    run 2 x 2 = 4 sequences together (the cost model shares each decode step's weight read)."""
    gen = ScriptedGenerator()
    problems = [Problem(f"t{i}", "What is the weather in Paris?", None,
                        {"tools": TOOLS, "messages": [{"role": "user", "content": "What is the weather in Paris?"}]})
                for i in range(2)]
    small, large = ToolVote.solve_together([ToolVote(ToolVoteConfig(n=n), gen, CHAT) for n in (2, 4)], problems)
    assert [s.usage.shapes[0].batch_sequences for s in large] == [8, 8]
    assert [s.usage.shapes[0].batch_sequences for s in small] == [4, 4]
    assert small[0].usage.completion_tokens == sum(x.completion_tokens for x in large[0].trace.samples[:2])


def test_each_wave_of_a_stop_is_seeded_by_the_replies_drawn_before_it():
    """Unanimous calls, one reply a wave: the horizon rule stops at 3 (tests/search/test_request_stop.py)."""
    model = in_order([weather("Paris")] * 8)
    sol = ToolVote(ToolVoteConfig(n=8, stop=StopConfig(wave=1)), model, CHAT, seed=3).solve([problem()])[0]
    assert sol.trace.notes["stop"]["drawn"] == 3 and sol.confidence == 1.0
    assert [(r.n, r.seed) for r in model.requests] == [(1, derive_seed(3, "turn-1", d)) for d in range(3)]


def window(n: int = 8) -> ToolVoteConfig:
    return ToolVoteConfig(n=n, stop=StopConfig(rule="window", window=2, wave=1))


def test_a_stop_counts_the_calls_while_at_least_half_of_the_replies_call():
    """Paris, Rome, then text 4s, one reply a wave, stop when 2 answers in a row agree. At 3 and 4
    replies 2 call (at least half): the calls count, [Paris, Rome, -, -] is not settled; at 5 the
    texts count, [-, -, 4, 4, 4] is: 5 drawn, and the text vote gives 4 with 3 of 5."""
    texts = [weather("Paris"), weather("Rome")] + [boxed("4")] * 6
    sol = ToolVote(window(), in_order(texts), CHAT).solve([problem()])[0]
    assert (sol.trace.notes["stop"]["drawn"], sol.answer, sol.confidence) == (5, "4", pytest.approx(3 / 5))


def test_a_calling_minority_does_not_settle_a_stop():
    """4, 5, 6, Paris, Paris, 7, 7: the two calls are a minority, so they abstain from the stop as
    from the vote; 7, 7 settles at 7 and the text vote gives 7 with 2 of 7."""
    texts = [boxed("4"), boxed("5"), boxed("6"), weather("Paris"), weather("Paris"), boxed("7"), boxed("7"), boxed("8")]
    sol = ToolVote(window(), in_order(texts), CHAT).solve([problem()])[0]
    assert (sol.trace.notes["stop"]["drawn"], sol.answer, sol.confidence) == (7, "7", pytest.approx(2 / 7))


def test_a_stop_over_replies_in_free_text_draws_all_n_and_one_over_programs_counts_their_keys():
    """Free text is chosen by minimum Bayes risk, never counted: all 4 are drawn although they agree.
    Programs are counted by their syntax trees (CODE's keys): two programs that differ only in a
    comment and spacing agree, so the window of 2 settles at 2."""
    prose = ToolVote(window(4), in_order(["It is sunny."] * 4), CHAT, extract=tts.answers.kinds.TEXT)
    assert prose.solve([problem()])[0].trace.notes["stop"]["drawn"] == 4
    programs = ["```python\nx = 1  # one\nprint(x)\n```", "```python\nx=1\nprint( x )\n```"] + ["```python\nprint(2)\n```"] * 2
    code = ToolVote(window(4), in_order(programs), CHAT, extract=CODE).solve([problem()])[0]
    assert (code.trace.notes["stop"]["drawn"], code.confidence) == (2, 1.0)
