"""What a sampling strategy asks the backend for, and how it books what came back: the request of
each problem (n, sampling settings, seed, tools), budgets that lower n, one shared draw for
several configs (each taking its first n samples), and the usage of a prefix of a draw priced as if
it had been drawn alone (numbers worked out by hand below)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tts.answers.free_text import mbr_select
from tts.answers.kinds import TEXT
from tts.backends.base import Completion, derive_seed
from tts.backends.function import FunctionGenerator
from tts.config import SamplingConfig
from tts.prompts import MATH_PROMPT
from tts.search.base import (
    Strategy,
    StrategyInputError,
    prefix_usage,
    problem_tool_choice,
    problem_tools,
    select_text,
    solution_item,
)
from tts.search.sampling.best_of_n import BestOfN, BestOfNConfig
from tts.search.sampling.self_consistency import SelfConsistency, SelfConsistencyConfig
from tts.search.sampling.weighted_vote import WeightedVote, WeightedVoteConfig
from tts.types import Budget, Problem, RequestShape, Sample, Solution, Trace, Usage
from tts.verifiers.base import VerifierScore, VerifyItem
from tts.verifiers.function import FunctionVerifier

TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {}}}}]


def _prompt(problem):
    return MATH_PROMPT.render(problem)


def _samples(*lengths: int) -> list[Sample]:
    return [Sample("x", "1", n) for n in lengths]


# --- prefix_usage ----------------------------------------------------------------------------

def test_a_prefix_of_a_draw_is_priced_as_if_drawn_alone():
    drawn = Usage(prompt_tokens=100, cached_prompt_tokens=40, completion_tokens=60, wall_seconds=3.0, calls=1,
                  shapes=(RequestShape(100, 40, (10, 20, 30), 12),))
    usage = prefix_usage(drawn, _samples(10, 20), 3)
    # Prompt once whatever n; 30 of the 60 tokens: half the wall time; 2 of 3 samples: the engine
    # call's 12 sequences become round(12 * 2 / 3) = 8.
    assert usage == Usage(prompt_tokens=100, cached_prompt_tokens=40, completion_tokens=30, wall_seconds=1.5, calls=1,
                          shapes=(RequestShape(100, 40, (10, 20), 8),))
    assert prefix_usage(drawn, _samples(10, 20, 30), 3) is drawn  # the whole draw: its own usage


@pytest.mark.parametrize(("batch", "taken", "total", "expected"), [
    (12, 1, 3, 4), (5, 1, 2, 2),  # round(2.5) = 2: Python rounds half to even
    (7, 1, 2, 4),  # round(3.5) = 4
    (1, 1, 4, 1),  # round(0.25) = 0, but a request's own samples are at least its batch
    (3, 2, 4, 2),  # round(1.5) = 2
    (0, 1, 3, 0),  # unknown concurrency stays unknown
])
def test_the_engine_calls_concurrency_shrinks_with_n(batch, taken, total, expected):
    drawn = Usage(prompt_tokens=5, completion_tokens=4 * total, wall_seconds=1.0, calls=1,
                  shapes=(RequestShape(5, 0, (4,) * total, batch),))
    assert prefix_usage(drawn, _samples(*(4,) * taken), total).shapes[0].batch_sequences == expected


def test_a_prefix_with_all_of_a_one_token_draws_tokens_takes_all_its_time():
    drawn = Usage(prompt_tokens=5, completion_tokens=1, wall_seconds=2.0, calls=1, shapes=(RequestShape(5, 0, (1, 0)),))
    assert prefix_usage(drawn, _samples(1), 2).wall_seconds == 2.0


def test_a_prefix_of_a_usage_without_shapes_or_tokens():
    drawn = Usage(prompt_tokens=7, completion_tokens=0, wall_seconds=2.0, calls=2)
    usage = prefix_usage(drawn, _samples(0), 2)
    assert usage.shapes == (RequestShape(0, 0, (0,), 0),)
    assert (usage.prompt_tokens, usage.completion_tokens, usage.wall_seconds, usage.calls) == (7, 0, 0.0, 2)


# --- the request -----------------------------------------------------------------------------

def test_problem_tools_and_tool_choice_as_request_json():
    with_tools = Problem("p", "q", metadata={"tools": TOOLS, "tool_choice": {"type": "function",
                                                                           "function": {"name": "add"}}})
    assert json.loads(problem_tools(with_tools)) == TOOLS
    assert json.loads(problem_tool_choice(with_tools)) == {"type": "function", "function": {"name": "add"}}
    assert problem_tool_choice(Problem("p", "q", metadata={"tools": TOOLS})) is None
    assert problem_tool_choice(Problem("p", "q", metadata={"tool_choice": "required"})) is None  # no tools: none
    assert problem_tool_choice(Problem("p", "q", metadata={"tools": TOOLS, "tool_choice": "required"})) == '"required"'
    assert problem_tools(Problem("p", "q")) is None and problem_tool_choice(Problem("p", "q")) is None
    assert problem_tools("a bare string problem") is None and problem_tool_choice(object()) is None

    class Odd:
        metadata = ("tools",)

    assert problem_tools(Odd()) is None and problem_tool_choice(Odd()) is None


def test_a_request_carries_the_configs_n_sampling_seed_and_the_problems_tools():
    gen = FunctionGenerator(lambda r: "\\boxed{1}")
    sc = SelfConsistency(SelfConsistencyConfig(n=5), gen, _prompt,
                         SamplingConfig(temperature=0.3, top_p=0.9, max_tokens=77), seed=11)
    problem = Problem("p7", "What?", metadata={"tools": TOOLS, "tool_choice": "auto"})
    req = sc.request(problem)
    assert (req.n, req.temperature, req.top_p, req.max_tokens) == (5, 0.3, 0.9, 77)
    assert (req.logprobs, req.top_logprobs, req.key) == (False, 0, "p7")
    assert req.messages == MATH_PROMPT.render(problem)
    assert req.seed == derive_seed(11, "p7", 0)
    assert json.loads(req.tools) == TOOLS and req.tool_choice == '"auto"'
    later = sc.request(problem, n=3, drawn=5)
    assert later.n == 3 and later.seed == derive_seed(11, "p7", 5) != req.seed


def test_a_verifier_that_reads_top_logprobs_gets_them_requested():
    gen = FunctionGenerator(lambda r: "\\boxed{1}")
    bon = BestOfN(BestOfNConfig(n=2, verifier={"kind": "self_certainty", "top_k": 7}), gen, _prompt)
    assert bon.top_logprobs_needed() == 7 and bon.request(Problem("p", "q")).top_logprobs == 7
    assert SelfConsistency(SelfConsistencyConfig(n=2), gen, _prompt).top_logprobs_needed() == 0
    assert BestOfN(BestOfNConfig(n=2, verifier={"kind": "arithmetic"}), gen, _prompt).top_logprobs_needed() == 0


# --- budgets ----------------------------------------------------------------------------------

def test_a_budget_lowers_n():
    sc = SelfConsistency(SelfConsistencyConfig(n=8), FunctionGenerator(lambda r: "1"), _prompt,
                         SamplingConfig(max_tokens=100))
    assert sc.samples_within(None) == 8
    assert sc.samples_within(Budget(samples=3)) == 3 and sc.samples_within(Budget(samples=20)) == 8
    assert sc.samples_within(Budget(tokens=500)) == 5 and sc.samples_within(Budget(tokens=599)) == 5
    assert sc.samples_within(Budget(tokens=100)) == 1
    assert sc.samples_within(Budget(samples=2, tokens=500)) == 2 and sc.samples_within(Budget(samples=6, tokens=300)) == 3
    with pytest.raises(StrategyInputError) as err:
        sc.samples_within(Budget(tokens=99))
    assert str(err.value) == (f"self_consistency: a budget of {Budget(tokens=99)} does not cover one sample of up to "
                              "100 tokens; raise the budget or lower max_tokens.")


def test_solve_draws_each_problems_budgeted_n():
    gen = FunctionGenerator(lambda r: ["\\boxed{1}", "\\boxed{2}"])
    sc = SelfConsistency(SelfConsistencyConfig(n=4), gen, _prompt, SamplingConfig(max_tokens=10))
    problems = [Problem("a", "q"), Problem("b", "q")]
    sols = sc.solve(problems, [Budget(samples=3), None])
    assert [r.n for r in gen.requests] == [3, 4] and len(gen.calls) == 1
    assert [len(s.trace.samples) for s in sols] == [3, 4] and [s.answer for s in sols] == ["1", "1"]
    with pytest.raises(StrategyInputError, match=r"^got 1 budgets for 2 problems; give one per problem$"):
        sc.solve(problems, [None])


# --- one draw for several configs -------------------------------------------------------------

def _replies(request):
    return [Completion(f"\\boxed{{{a}}}", 3, mean_logprob=lp, finish_reason="stop")
            for a, lp in [(7, -0.1), (8, -0.2), (8, -0.3), (9, -0.05), (8, -0.9), (9, -0.2)]]


def test_configs_that_share_a_draw_take_its_first_n_samples_from_one_call():
    gen = FunctionGenerator(_replies)
    small = SelfConsistency(SelfConsistencyConfig(n=2), gen, _prompt, seed=3)
    big = SelfConsistency(SelfConsistencyConfig(n=6), gen, _prompt, seed=3)
    ranked = BestOfN(BestOfNConfig(n=4), gen, _prompt, seed=3)  # logprob ranking: asks for logprobs
    problems = [Problem("a", "q"), Problem("b", "q")]
    out = SelfConsistency.solve_together([small, big, ranked], problems)
    assert len(gen.calls) == 1 and [r.n for r in gen.requests] == [6, 6]
    assert all(r.logprobs for r in gen.requests) and all(r.top_logprobs == 0 for r in gen.requests)
    assert [r.seed for r in gen.requests] == [derive_seed(3, "a", 0), derive_seed(3, "b", 0)]
    s_small, s_big, s_ranked = (sols[0] for sols in out)
    assert [len(s.trace.samples) for s in (s_small, s_big, s_ranked)] == [2, 6, 4]
    assert s_small.answer == "7" and s_big.answer == "8"  # 7 first of a 1-1 tie; 8 three of six
    assert s_ranked.answer == "9"  # the best mean logprob among the first four: -0.05
    # Each solution is priced as its own prefix: 2, 6 and 4 samples of 3 tokens.
    assert [s.usage.completion_tokens for s in (s_small, s_big, s_ranked)] == [6, 18, 12]
    # Alone, each gives the same solution as in the shared draw.
    assert big.solve(problems[:1])[0].answer == "8" and small.solve(problems[:1])[0].answer == "7"


def test_configs_that_do_not_share_a_draw_are_solved_apart():
    gen = FunctionGenerator(_replies)
    a = SelfConsistency(SelfConsistencyConfig(n=2), gen, _prompt, seed=1)
    b = SelfConsistency(SelfConsistencyConfig(n=3), gen, _prompt, seed=2)  # another seed: other samples
    out = SelfConsistency.solve_together([a, b], [Problem("p", "q")])
    assert len(gen.calls) == 2 and [r.n for r in gen.requests] == [2, 3]
    assert [len(sols[0].trace.samples) for sols in out] == [2, 3]
    assert not a.shares_draw_with(b) and a.shares_draw_with(a)
    hot = SelfConsistency(SelfConsistencyConfig(n=2), gen, _prompt, SamplingConfig(temperature=1.0), seed=1)
    other = SelfConsistency(SelfConsistencyConfig(n=2), FunctionGenerator(_replies), _prompt, seed=1)
    assert not a.shares_draw_with(hot) and not a.shares_draw_with(other)
    assert not a.shares_draw_with(SelfConsistency(SelfConsistencyConfig(n=2), gen, lambda p: _prompt(p), seed=1))
    assert not a.shares_draw_with(SelfConsistency(SelfConsistencyConfig(n=2), gen, _prompt, extract=str, seed=1))


def _Scorer(table, fail=False, seen=None) -> FunctionVerifier:  # noqa: N802 -- reads as the verifier it builds
    """A ready verifier: a whole-solution score from a table of answers; counts its calls; ``seen``
    keeps the problem and top logprobs of every item."""

    def reward(item):
        if seen is not None:
            seen.append((item.problem.id, item.token_top_logprobs))
        if fail:
            raise RuntimeError("scorer down")
        # a table value None: the verifier could not score it (reported as 0 and one invalid score)
        value = table[item.steps[0]]
        return VerifierScore((), value or 0.0, usage=Usage(prompt_tokens=10), invalid=int(value is None))

    return FunctionVerifier.of_items(reward, name="table")


def test_a_ready_verifier_scores_the_shared_draw_once_and_each_config_takes_its_prefix():
    texts = ["\\boxed{4}", "\\boxed{5}", "\\boxed{4}"]
    gen = FunctionGenerator(lambda r: texts)
    scorer = _Scorer({"\\boxed{4}": 0.2, "\\boxed{5}": 0.9})
    two = WeightedVote(WeightedVoteConfig(n=2), gen, _prompt, verifier=scorer)
    three = WeightedVote(WeightedVoteConfig(n=3), gen, _prompt, verifier=scorer)
    out = WeightedVote.solve_together([two, three], [Problem("p", "q"), Problem("r", "q")])
    assert len(gen.calls) == 1 and scorer.calls == [6]  # one verifier call over 2 problems x 3 samples
    assert [sols[0].answer for sols in out] == ["5", "5"]  # 0.9 beats 0.2 and 0.2 + 0.2 = 0.4
    assert [sols[0].trace.votes for sols in out] == [{"4": 0.2, "5": 0.9}, {"4": 0.4, "5": 0.9}]
    # Each solution's usage adds the scoring of its own samples only: 10 prompt tokens each.
    assert out[1][0].usage.prompt_tokens - out[0][0].usage.prompt_tokens == 10
    assert two.solve([Problem("p", "q")])[0].usage.prompt_tokens == out[0][0].usage.prompt_tokens  # as alone


def test_a_verifier_that_fails_scores_every_sample_0_and_is_counted():
    gen = FunctionGenerator(lambda r: ["\\boxed{4}", "\\boxed{5}", "\\boxed{5}"])
    scorer = _Scorer({}, fail=True)
    wv = WeightedVote(WeightedVoteConfig(n=3), gen, _prompt, verifier=scorer)
    [sol] = wv.solve([Problem("p", "q")])
    assert scorer.calls == [3] and sol.trace.events == {"verifier_error": 1, "unweighted_vote": 1}
    assert sol.trace.scores == (0.0, 0.0, 0.0)
    assert sol.answer == "5" and sol.trace.votes == {"4": 1.0, "5": 2.0}  # no weight at all: a plain vote


def test_scores_the_verifier_could_not_give_are_counted_and_out_of_range_ones_weigh_nothing():
    gen = FunctionGenerator(lambda r: ["\\boxed{4}", "\\boxed{5}", "\\boxed{5}", "\\boxed{6}"])
    scorer = _Scorer({"\\boxed{4}": 0.5, "\\boxed{5}": None, "\\boxed{6}": 1.5})
    [sol] = WeightedVote(WeightedVoteConfig(n=4), gen, _prompt, verifier=scorer).solve([Problem("p", "q")])
    assert sol.trace.events == {"invalid_score": 2}
    assert sol.trace.scores == (0.5, 0.0, 0.0, 0.0)  # 1.5 is no probability: cleaned to 0
    assert sol.answer == "4" and sol.trace.votes == {"4": 0.5, "5": 0.0, "6": 0.0}


# --- building blocks every strategy shares ----------------------------------------------------

def test_planned_requests_one_request_of_n_samples_sharing_the_prompt():
    assert SelfConsistency.planned_requests(3, 100, 50) == [RequestShape(100, 0, (50, 50, 50))]
    assert SelfConsistency.planned_requests(2, 100, 50, cached_tokens=40) == [RequestShape(100, 40, (50, 50))]


def test_a_whole_solution_as_the_verifier_reads_it():
    problem = Problem("p", "q")
    text = "2 + 2 = 4.\n\nSo \\boxed{4}."
    top = ((-0.1, -2.0), (-0.3, -1.5))

    class Steps:
        step_verifier = True

    assert solution_item(problem, text, Steps(), mean_logprob=-0.2, token_top_logprobs=top) == VerifyItem(
        problem, ("2 + 2 = 4.", "So \\boxed{4}."), finished=True, logprobs=(), token_top_logprobs=top)
    assert solution_item(problem, text, object(), mean_logprob=-0.2, token_top_logprobs=top) == VerifyItem(
        problem, (text,), finished=True, logprobs=(-0.2,), token_top_logprobs=top)


def test_a_closed_strategy_builds_a_fresh_verifier_when_used_again():
    bon = BestOfN(BestOfNConfig(n=2, verifier={"kind": "arithmetic"}), FunctionGenerator(lambda r: "1"), _prompt)
    first = bon.verifier
    bon.close()
    again = bon.verifier
    assert again is not first and again is not None and callable(again.score)


def test_one_strategy_alone_is_solved_together_too():
    gen = FunctionGenerator(_replies)
    sc = SelfConsistency(SelfConsistencyConfig(n=3), gen, _prompt)
    [[sol]] = SelfConsistency.solve_together([sc], [Problem("a", "q")])
    assert sol.problem_id == "a" and sol.answer == "8" and len(gen.calls) == 1


def test_a_shared_draw_asks_for_the_most_top_logprobs_any_config_needs():
    gen = FunctionGenerator(_replies)
    plain = SelfConsistency(SelfConsistencyConfig(n=2), gen, _prompt)
    certain = BestOfN(BestOfNConfig(n=3, verifier={"kind": "self_certainty", "top_k": 5}), gen, _prompt)
    assert plain.shares_draw_with(certain)
    out = SelfConsistency.solve_together([plain, certain], [Problem("a", "q"), Problem("b", "q")])
    assert [r.top_logprobs for r in gen.requests] == [5, 5] and [r.n for r in gen.requests] == [3, 3]
    assert [[s.problem_id for s in sols] for sols in out] == [["a", "b"], ["a", "b"]]


class _Alone(Strategy):
    """A strategy with nothing to share: the base class's defaults."""

    name = "alone"
    config_class = SelfConsistencyConfig

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.solved = 0

    def solve(self, problems, budgets=None):
        self.solved += 1
        return [Solution(p.id, "1", 1.0, Usage(), Trace(self.name, ())) for p in problems]


def test_strategies_share_no_draw_by_default_and_are_solved_one_by_one():
    gen = FunctionGenerator(lambda r: "1")
    a, b = _Alone(SelfConsistencyConfig(), gen, _prompt), _Alone(SelfConsistencyConfig(), gen, _prompt)
    assert not a.shares_draw_with(b) and not a.shares_draw_with(a)
    out = Strategy.solve_together([a, b], [Problem("p", "q")])
    assert (a.solved, b.solved) == (1, 1) and [sols[0].problem_id for sols in out] == ["p", "p"]


def test_a_strategy_votes_with_its_extractions_answer_kind():
    texts = ["the cat sat on the mat", "a dog ran in the park", "a dog ran in a park", "the dog ran in the park"]
    samples = [Sample(t, t) for t in texts]
    free = SelfConsistency(SelfConsistencyConfig(n=4), FunctionGenerator(lambda r: "x"), _prompt, extract=TEXT)
    assert free.vote(samples) == select_text(samples)  # similarity, not a count of equal strings
    counted = SelfConsistency(SelfConsistencyConfig(n=4), FunctionGenerator(lambda r: "x"), _prompt)
    assert counted.vote(samples)[1] == 0.25  # four different answers, one vote each


def test_free_text_selection_called_directly():
    texts = ["the cat sat on the mat", "a dog ran in the park", "a dog ran in a park", "the dog ran in the park"]
    samples = [Sample(t, t) for t in texts]
    assert select_text(samples) == select_text(samples, [1.0] * 4) == select_text(samples, [0.0] * 4)
    # The same text twice with different weights keeps the better of its two utilities.
    twice = samples + [Sample(texts[1], texts[1])]
    weights = [0.2, 0.05, 0.1, 0.7, 1.0]  # the first copy agrees with the heavy second one: its utility is higher
    choice = mbr_select([s.answer for s in twice], weights)
    utilities = select_text(twice, weights)[2]
    assert choice.utilities[1] > choice.utilities[4]
    assert utilities[texts[1]] == max(choice.utilities[1], choice.utilities[4])
    # An empty answer is the empty text: it agrees with nothing.
    empty = [Sample("", ""), Sample("XXXX", "XXXX"), Sample("XXXX", "XXXX")]
    answer, share, utilities, idx = select_text(empty)
    assert (answer, idx, share) == ("XXXX", 1, 0.5) and utilities[""] == 0.0 and set(utilities) == {"", "XXXX"}


# --- construction, tool calls, the vote's edges -------------------------------------------------

def test_a_strategy_needs_its_own_config_and_seeds_from_0():
    gen = FunctionGenerator(lambda r: "1")
    with pytest.raises(TypeError, match=r"^SelfConsistency needs a SelfConsistencyConfig, got BestOfNConfig$"):
        SelfConsistency(BestOfNConfig(), gen, _prompt)
    sc = SelfConsistency(SelfConsistencyConfig(n=2), gen, _prompt)
    assert sc.seed == 0 and sc.request(Problem("p", "q")).seed == derive_seed(0, "p", 0)
    assert _Alone(SelfConsistencyConfig(), gen, _prompt).seed == 0


def test_a_strategy_closes_the_verifier_it_built_and_never_the_callers():
    gen = FunctionGenerator(lambda r: "\\boxed{1}")
    built = BestOfN(BestOfNConfig(n=2, verifier={"kind": "arithmetic"}), gen, _prompt)
    closed: list[str] = []
    v = built.verifier
    v.close = lambda: closed.append("built")
    built.close()
    assert closed == ["built"]
    mine = _Scorer({})
    mine.close = lambda: closed.append("mine")
    lent = WeightedVote(WeightedVoteConfig(n=2), gen, _prompt, verifier=mine)
    lent.close()
    assert closed == ["built"] and lent.verifier is mine


def test_results_must_answer_every_request():
    from tts.backends.base import GenerationResult
    from tts.search.base import with_tool_calls

    sc = SelfConsistency(SelfConsistencyConfig(n=1), FunctionGenerator(lambda r: "1"), _prompt)
    requests = [sc.request(Problem("a", "q")), sc.request(Problem("b", "q"))]
    one = GenerationResult(completions=(Completion("1", 1),), usage=Usage())
    with pytest.raises(ValueError):
        with_tool_calls(requests, [one])
    # A request without tools: its result passes untouched, whatever its completions say of calls.
    assert with_tool_calls(requests[:1], [one])[0] is one


def test_the_verifier_reads_each_samples_problem_and_top_logprobs_and_a_failure_is_logged(caplog):
    top = ((-0.1, -2.5),)
    gen = FunctionGenerator(lambda r: [Completion("\\boxed{4}", 1, token_top_logprobs=top), "\\boxed{5}"])
    seen = []
    recording = _Scorer({"\\boxed{4}": 0.3, "\\boxed{5}": 0.6}, seen=seen)
    wv = WeightedVote(WeightedVoteConfig(n=2), gen, _prompt, verifier=recording)
    sols = wv.solve([Problem("a", "q"), Problem("b", "q")])
    assert seen == [("a", top), ("a", None), ("b", top), ("b", None)]
    assert [s.problem_id for s in sols] == ["a", "b"] and [s.answer for s in sols] == ["5", "5"]
    with pytest.raises(ValueError):
        wv.score_samples([Problem("a", "q")], [gen.generate([wv.request(Problem("a", "q"))])[0]] * 2)
    down = WeightedVote(WeightedVoteConfig(n=2), gen, _prompt, verifier=_Scorer({}, fail=True))
    down.solve([Problem("c", "q")])
    assert "verifier table failed on 2 samples (scorer down); each scores 0" in [r.getMessage() for r in caplog.records]


def test_event_counts_of_the_scoring_add_to_the_aggregations_own():
    class Reporting(WeightedVote):
        def aggregate(self, problem_id, samples, usage, scores=None):
            sol = super().aggregate(problem_id, samples, usage, scores)
            return dataclasses.replace(sol, trace=dataclasses.replace(sol.trace, events={"invalid_score": 1}))

    gen = FunctionGenerator(lambda r: ["\\boxed{4}", "\\boxed{5}"])
    [sol] = Reporting(WeightedVoteConfig(n=2), gen, _prompt, verifier=_Scorer({"\\boxed{4}": None, "\\boxed{5}": 0.5})
                      ).solve([Problem("p", "q")])
    assert sol.trace.events == {"invalid_score": 2}  # its own 1 and the scorer's 1


def _call(name: str, args: str, ident: str) -> Sample:
    from tts.backends.chat import ToolCall
    from tts.search.base import to_sample

    return to_sample(Completion("", 4, finish_reason="tool_calls", tool_calls=(ToolCall(name, args, ident),)), str)


def test_when_most_samples_call_tools_only_the_calls_vote():
    from tts.answers.kinds import call_key
    from tts.search.base import vote

    a, b = _call("add", '{"a": 1, "b": 2}', "1"), _call("add", '{"b": 2, "a": 1}', "2")
    malformed = Sample("", None, 3, tool_calls=({"id": "x"},))
    samples = [a, Sample("3", "3"), b, malformed]
    answer, share, votes, idx = vote(samples)
    # The votes show the call as the first sample made it; the key matched b's reordered arguments.
    assert (answer, share, idx) == (a.answer, 0.5, 0) and votes == {a.answer: 2.0}
    assert call_key(a.answer) == call_key(b.answer)


def test_when_few_samples_call_tools_the_replies_in_text_decide():
    from tts.search.base import vote

    samples = [_call("add", '{"a": 1, "b": 2}', "1"), Sample("3", "3"), Sample("3.0", "3")]
    assert vote(samples) == ("3", 2 / 3, {"3": 2.0}, 1)


def test_the_vote_needs_one_weight_per_sample_and_no_weight_means_no_answer():
    from tts.search.base import vote

    samples = [Sample("1", "1"), Sample("2", "2"), Sample("1", "1")]
    with pytest.raises(ValueError):
        vote(samples, [1.0, 1.0])
    assert vote(samples, [0.0, 0.0, 0.0]) == (None, 0.0, {"1": 0.0, "2": 0.0}, None)


def test_a_reply_that_writes_a_call_in_its_text_does_not_vote_with_the_calls():
    from tts.search.base import vote

    a, b = _call("add", '{"a": 1, "b": 2}', "1"), _call("add", '{"a": 1, "b": 2}', "2")
    written = Sample(a.answer, a.answer)  # the same JSON, but in text: no call was made
    answer, share, votes, idx = vote([a, written, b])
    assert (answer, idx) == (a.answer, 0) and votes == {a.answer: 2.0} and share == 2 / 3


class _Caseless:
    """An extraction with its own notion of the same answer (as code extraction has for programs)."""

    def __call__(self, text):
        return text

    @staticmethod
    def answer_keys(answers):
        return [a.casefold() if a is not None else None for a in answers]


def test_a_strategy_votes_under_its_extractions_own_answer_keys():
    samples = [Sample("Yes", "Yes"), Sample("no", "no"), Sample("YES", "YES")]
    sc = SelfConsistency(SelfConsistencyConfig(n=3), FunctionGenerator(lambda r: "x"), _prompt, extract=_Caseless())
    assert sc.vote(samples) == ("Yes", 2 / 3, {"Yes": 2.0, "no": 1.0}, 0)


def test_votes_of_one_written_answer_under_two_keys_are_summed_in_what_is_shown():
    """A strategy's own keys may split one written answer (a program that prints differently from
    run to run, in exec_vote): the vote shown for that answer is the sum of its keys' votes."""
    from tts.search.base import vote

    samples = [Sample("x", "x"), Sample("x", "x"), Sample("y", "y"), Sample("x", "x")]
    answer, share, votes, idx = vote(samples, keys=lambda answers: ["k1", "k2", "k3", "k1"])
    assert (answer, share, idx) == ("x", 0.5, 0) and votes == {"x": 3.0, "y": 1.0}


# --- the small helpers the pipeline reads: calls from text, tools, stops, n under a budget ----------

def test_calls_are_read_from_a_replys_text_only_where_tools_were_offered_and_a_cut_call_is_none():
    import json as _json

    from tts.backends.base import Completion, GenerationRequest, Message
    from tts.search.base import completion_calls

    tools = _json.dumps([{"type": "function", "function": {"name": "lookup", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}}])
    text = '{"name": "lookup", "arguments": {"city": "Paris"}}'
    offered = GenerationRequest((Message("user", "x"),), n=1, max_tokens=10, tools=tools)
    plain = Completion(text, 12, None, "stop")
    assert completion_calls(GenerationRequest((Message("user", "x"),), n=1, max_tokens=10), plain) is plain
    read = Completion(text, 12, None, "stop", tool_calls=())
    assert completion_calls(offered, read) is read  # the backend read them already
    [call] = completion_calls(offered, plain).tool_calls
    assert (call.name, _json.loads(call.arguments)) == ("lookup", {"city": "Paris"})
    cut = completion_calls(offered, Completion(text, 12, None, "length"))
    assert (cut.tool_calls, cut.tool_call_error) == ((), "malformed_tool_call")  # max_tokens cut it: no call


def test_a_strategy_that_declares_nothing_takes_no_tools_and_no_budget():
    from tts.registry import STRATEGIES
    from tts.search.base import Strategy, budget_use, stop_of, takes_tools, tools_refusal

    class Bare(Strategy):
        """A plugin strategy that says nothing of tools or budgets (Strategy's defaults)."""

    STRATEGIES.register("a_bare_plugin", Bare)
    try:
        assert takes_tools("a_bare_plugin") is False and budget_use("a_bare_plugin") is None
        assert tools_refusal("a_bare_plugin", allowed=lambda kind: False) == (
            "strategy a_bare_plugin cannot show the model tools, so it would answer without them; use one that can "
            "(none is offered here) or leave the tools out")
        assert tools_refusal("a_bare_plugin", allowed=lambda kind: kind in ("tool_vote", "self_consistency")) == (
            "strategy a_bare_plugin cannot show the model tools, so it would answer without them; use one that can "
            "(self_consistency, tool_vote) or leave the tools out")
    finally:
        STRATEGIES.unregister("a_bare_plugin")

    class NoStop:
        config = object()  # a config without a stop field

    assert stop_of(NoStop()) is None
