"""Per-request stops (``stop:`` on a voting strategy): where each rule stops, by hand-computed votes.

The samples come from a model whose replies the test writes, one after another in draw order, so
the vote after every sample is known. The stopping points below are worked out by hand from the
rules' formulas (n = 8, confidence 0.95):

* "horizon": after k unanimous samples the leader is overturned within 8 only if it gets at most
  floor((8 - 2k) / 2) of the 8 - k samples left, X ~ BetaBinomial(8 - k, k + 1, 1). k = 2:
  P(X <= 2 | 6, 3, 1) = 0.0119 + 0.0357 + 0.0714 = 0.119 > 0.05; k = 3: P(X <= 1 | 5, 4, 1) =
  0.0079 + 0.0317 = 0.040 <= 0.05: stops at 3.
* "beta" (and "dirichlet", which is "beta" with two answers or fewer): P(Beta(k + 1, 1) > 1/2) =
  1 - 2^-(k+1): 0.9375 at k = 3, 0.969 at k = 4: stops at 4.
* "exact": the lead k cannot be overtaken by the 8 - k left once k > 8 - k: stops at 5.
* "window" (window 3): three equal answers in a row: stops at 3.

Alternating answers (4, 5, 4, 5, ...) never settle: every rule draws all 8.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence

import pytest

from tts.answers.code import CODE
from tts.backends.base import Completion, GenerationRequest, GenerationResult, Message, request_usage
from tts.backends.streaming import SimulatedStream
from tts.config import StopConfig, parse_strategy_config
from tts.search.base import StrategyInputError
from tts.execution.sandbox import bwrap_path
from tts.search.sampling.best_of_n import BestOfN, BestOfNConfig
from tts.search.sampling.execution_vote import ExecutionVote, ExecutionVoteConfig
from tts.search.sampling.program_vote import ProgramVote, ProgramVoteConfig
from tts.search.sampling.self_consistency import SelfConsistency, SelfConsistencyConfig
from tts.search.sampling.tool_vote import ToolVote, ToolVoteConfig
from tts.search.sampling.weighted_vote import WeightedVote, WeightedVoteConfig
from tts.search.stopping import ScoreStop, VoteStop
from tts.types import Problem
from tts.verifiers.function import FunctionVerifier

UNANIMOUS = ["4"] * 8
ALTERNATING = ["4", "5"] * 4


class Scripted:
    """A model whose k-th sample of a problem (in draw order, over every request) is ``answers[k]``,
    ``tokens[k]`` tokens long with mean logprob ``logprobs[k]``; with ``stream`` it streams them
    shortest first, as an engine decoding them together would, and can cancel."""

    model_name = "scripted-sequence"

    def __init__(self, answers: Sequence[str], tokens: Sequence[int] | None = None,
                 logprobs: Sequence[float] | None = None, stream: bool = False, calls: bool = False,
                 texts: Sequence[str] | None = None) -> None:
        self.answers = list(answers)
        self.texts = list(texts) if texts is not None else None
        self.tokens = list(tokens or [10 + i for i in range(len(answers))])
        self.logprobs = list(logprobs or [-0.1] * len(answers))
        self.calls = calls
        self.drawn: dict[str, int] = defaultdict(int)
        self.requests: list[GenerationRequest] = []
        if stream:
            self.stream_samples = lambda requests: SimulatedStream(self, requests)

    def _text(self, answer: str) -> str:
        if self.texts is not None:
            return self.texts[self.answers.index(answer)] if answer in self.answers else answer
        if self.calls:
            return f'{{"name": "lookup", "arguments": {{"city": "{answer}"}}}}'
        return f"so the answer is \\boxed{{{answer}}}"

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        out = []
        for req in requests:
            self.requests.append(req)
            start = self.drawn[req.key]
            self.drawn[req.key] += req.n
            comps = tuple(Completion(self._text(self.answers[k]), self.tokens[k], self.logprobs[k], "stop")
                          for k in range(start, start + req.n))
            out.append(GenerationResult(comps, request_usage(20, 0, [c.completion_tokens for c in comps], 0.0)))
        return out

    def close(self) -> None:
        pass


def prompt(problem):
    return (Message("user", problem.question),)


PROBLEM = Problem("p", "What is 2 + 2?", "4")


def solve(strategy_class, config, generator, **kwargs):
    return strategy_class(config, generator, prompt, seed=0, **kwargs).solve([PROBLEM])[0]


@pytest.mark.parametrize("rule, settings, stops_at", [
    ("horizon", {}, 3), ("beta", {}, 4), ("dirichlet", {}, 4), ("exact", {}, 5), ("window", {"window": 3}, 3),
])
def test_self_consistency_stops_where_the_hand_computed_vote_is_settled(rule, settings, stops_at):
    gen = Scripted(UNANIMOUS)
    sol = solve(SelfConsistency, SelfConsistencyConfig(n=8, stop=StopConfig(rule=rule, wave=1, **settings)), gen)
    stop = sol.trace.notes["stop"]
    assert (sol.answer, len(sol.trace.samples), stop["drawn"], stop["not_drawn"]) == ("4", stops_at, stops_at, 8 - stops_at)
    assert sum(r.n for r in gen.requests) == stops_at  # nothing more was asked of the model
    assert sol.usage.completion_tokens == sum(10 + i for i in range(stops_at))


@pytest.mark.parametrize("rule", ["horizon", "beta", "dirichlet", "exact", "window"])
def test_a_contested_vote_draws_all_n(rule):
    gen = Scripted(ALTERNATING)
    sol = solve(SelfConsistency, SelfConsistencyConfig(n=8, stop=StopConfig(rule=rule, wave=1, window=3)), gen)
    assert (len(sol.trace.samples), sol.trace.notes["stop"]["reason"]) == (8, "n reached")
    assert sol.answer == "4"  # 4 votes each: the earliest answer wins the tie, as without a stop
    fixed = solve(SelfConsistency, SelfConsistencyConfig(n=8), Scripted(ALTERNATING))
    assert (fixed.answer, fixed.usage.completion_tokens) == (sol.answer, sol.usage.completion_tokens)


def test_waves_are_judged_whole_on_a_backend_that_cannot_stream():
    """Waves of 2 without streaming: unsettled after 2, settled after 4 (horizon stops at 3 or
    more unanimous); the 4th sample was generated with the 3rd, so it is kept and votes."""
    gen = Scripted(UNANIMOUS)
    sol = solve(SelfConsistency, SelfConsistencyConfig(n=8, stop=StopConfig(wave=2)), gen)
    stop = sol.trace.notes["stop"]
    assert [r.n for r in gen.requests] == [2, 2]
    assert (stop["drawn"], stop["waves"], stop["cancelled"], stop["streamed"]) == (4, 2, 0, False)
    assert len({r.seed for r in gen.requests}) == 2  # a later wave never repeats an earlier one's seed


def test_a_streamed_wave_is_cancelled_once_settled_and_its_partial_tokens_are_paid():
    """All 8 at once, streamed shortest first (10, 11, 12, ... tokens): settled when the 3rd
    finishes (12 tokens); the other 5 are cancelled, each having generated 12 tokens."""
    gen = Scripted(UNANIMOUS, stream=True)
    sol = solve(SelfConsistency, SelfConsistencyConfig(n=8, stop=StopConfig(wave=8)), gen)
    stop = sol.trace.notes["stop"]
    assert (stop["drawn"], stop["cancelled"], stop["cancelled_tokens"], stop["not_drawn"]) == (3, 5, 60, 0)
    assert stop["streamed"] is True
    assert sol.usage.completion_tokens == 10 + 11 + 12 + 60  # the finished samples and the partial ones
    assert sol.usage.shapes[0].completion_tokens == (10, 11, 12, 12, 12, 12, 12, 12)


def test_a_streamed_stop_reads_samples_in_the_order_they_finish():
    """The longest samples say 5; the three shortest say 4 and finish first, so the vote settles on 4."""
    answers = ["5", "5", "5", "5", "5", "4", "4", "4"]
    tokens = [90, 80, 70, 60, 50, 10, 11, 12]
    sol = solve(SelfConsistency, SelfConsistencyConfig(n=8, stop=StopConfig(wave=8)), Scripted(answers, tokens, stream=True))
    assert (sol.answer, sol.trace.notes["stop"]["drawn"]) == ("4", 3)


def test_weighted_vote_stops_on_the_plain_votes_and_answers_by_weight():
    gen = Scripted(UNANIMOUS)
    sol = solve(WeightedVote, WeightedVoteConfig(n=8, stop=StopConfig(wave=1)), gen)
    assert (sol.answer, sol.trace.notes["stop"]["drawn"]) == ("4", 3)
    assert sol.trace.scores == pytest.approx((0.9048,) * 3, abs=1e-4)  # exp(-0.1): the logprob weights


def test_best_of_n_stops_at_the_first_sample_whose_score_reaches_the_threshold():
    """DSPy BestOfN's rule with a plain Python function as the verifier: scores 0.1, 0.5, 0.95, ...;
    threshold 0.9: the third sample stops it, and it is the one chosen."""
    scores = {"so the answer is \\boxed{1}": 0.1, "so the answer is \\boxed{2}": 0.5, "so the answer is \\boxed{3}": 0.95}
    verifier = FunctionVerifier(lambda problem, text: scores.get(text, 0.0))
    gen = Scripted(["1", "2", "3", "4", "5", "6", "7", "8"])
    config = BestOfNConfig(n=8, stop=StopConfig(rule="score", threshold=0.9, wave=1))
    sol = solve(BestOfN, config, gen, verifier=verifier)
    assert (sol.answer, sol.trace.notes["stop"]["drawn"], sol.trace.scores) == ("3", 3, (0.1, 0.5, 0.95))


def test_best_of_n_without_a_verifier_stops_on_the_mean_logprob():
    gen = Scripted(["1", "2", "3", "4"], logprobs=[-2.0, -1.0, -0.2, -0.1])
    config = BestOfNConfig(n=4, stop=StopConfig(rule="score", threshold=-0.5, wave=1))
    sol = solve(BestOfN, config, gen)
    assert (sol.answer, sol.trace.notes["stop"]["drawn"]) == ("3", 3)


def test_best_of_n_below_the_threshold_draws_all_n():
    gen = Scripted(["1", "2", "3", "4"], logprobs=[-2.0, -1.0, -0.9, -0.8])
    sol = solve(BestOfN, BestOfNConfig(n=4, stop=StopConfig(rule="score", threshold=-0.5, wave=2)), gen)
    assert (sol.answer, sol.trace.notes["stop"]["drawn"], sol.trace.notes["stop"]["reason"]) == ("4", 4, "n reached")


def test_tool_vote_stops_once_the_calls_agree():
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    problem = Problem("t", "Weather in Paris?", None, metadata={"tools": tools})
    gen = Scripted(["Paris"] * 8, calls=True)
    sol = ToolVote(ToolVoteConfig(n=8, stop=StopConfig(wave=1)), gen, prompt, seed=0).solve([problem])[0]
    assert sol.trace.notes["stop"]["drawn"] == 3
    assert json.loads(sol.answer) == [{"name": "lookup", "arguments": {"city": "Paris"}}]
    contested = Scripted(["Paris", "Rome"] * 4, calls=True)
    sol = ToolVote(ToolVoteConfig(n=8, stop=StopConfig(wave=1)), contested, prompt, seed=0).solve([problem])[0]
    assert sol.trace.notes["stop"]["drawn"] == 8


def test_a_budget_lowers_the_horizon():
    """A budget of 4 samples makes 4 the horizon: after 2 unanimous samples the leader is overturned
    within 4 only if both remaining go to another answer and tie it: P(X = 0 | 2, 3, 1) = 0.1 > 0.05;
    after 3 the lead of 3 cannot be overtaken by the 1 left."""
    from tts.types import Budget

    gen = Scripted(UNANIMOUS)
    strategy = SelfConsistency(SelfConsistencyConfig(n=8, stop=StopConfig(wave=1)), gen, prompt)
    sol = strategy.solve([PROBLEM], [Budget(samples=4)])[0]
    assert sol.trace.notes["stop"]["n"] == 4
    assert sol.trace.notes["stop"]["drawn"] == 3
    assert sol.trace.notes["stop"]["reason"].startswith("lead of 3 cannot be overtaken")


def test_a_stop_on_a_strategy_that_cannot_stop_is_refused_naming_those_that_can():
    with pytest.raises(ValueError) as err:
        parse_strategy_config({"kind": "beam", "stop": {"rule": "horizon"}})
    message = str(err.value)
    assert "beam cannot stop a request early" in message
    for kind in ("self_consistency", "weighted_vote", "best_of_n", "tool_vote"):
        assert kind in message


@pytest.mark.parametrize("settings, says", [
    ({"confidence": 1.2}, "confidence"), ({"wave": 0}, "wave"), ({"rule": "rate"}, "rule"),
    ({"rule": "score"}, "needs a threshold"), ({"threshold": 0.5}, "does not read it"),
])
def test_a_stop_setting_out_of_range_is_one_line(settings, says):
    with pytest.raises(ValueError) as err:
        parse_strategy_config({"kind": "self_consistency", "stop": settings})
    assert says in str(err.value)


def test_a_vote_refuses_the_score_rule_and_best_of_n_refuses_a_vote_rule():
    with pytest.raises(ValueError, match="only best_of_n"):
        solve(SelfConsistency, SelfConsistencyConfig(n=4, stop=StopConfig(rule="score", threshold=0.5)), Scripted(UNANIMOUS))
    with pytest.raises(StrategyInputError, match="best_of_n stops on a score"):
        solve(BestOfN, BestOfNConfig(n=4, stop=StopConfig(rule="horizon")), Scripted(UNANIMOUS))


def test_strategies_with_a_stop_never_share_a_draw():
    gen = Scripted(UNANIMOUS)
    a = SelfConsistency(SelfConsistencyConfig(n=8, stop=StopConfig()), gen, prompt)
    b = SelfConsistency(SelfConsistencyConfig(n=4), gen, prompt)
    assert not a.shares_draw_with(b) and not b.shares_draw_with(a)


needs_bwrap = pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap is not installed (make install)")


@needs_bwrap
def test_program_vote_stops_on_the_printed_answers():
    """Programs printing 6 * 7 three ways: their printed answers agree, so horizon stops at 3 (and
    the text of the programs, all different, never decides); each program ran once."""
    programs = ["print(6 * 7)", "print(42)", "x = 40\nprint(x + 2)", "print(41)"] + ["print(42)"] * 4
    texts = [f"```python\n{c}\n```" for c in programs]
    gen = Scripted([str(i) for i in range(8)], texts=texts)
    config = ProgramVoteConfig(n=8, stop=StopConfig(wave=1))
    sol = ProgramVote(config, gen, prompt, seed=0).solve([PROBLEM])[0]
    assert (sol.answer, sol.trace.notes["stop"]["drawn"], sol.trace.notes["executions"]) == ("42", 3, 3)


@needs_bwrap
def test_exec_vote_stops_on_the_programs_behaviour():
    """Three programs that double x written three ways behave alike on the docstring's examples:
    horizon stops at 3; exec_vote with the model's own tests as inputs is refused a stop."""
    code_prompt = 'def double(x):\n    """Twice x.\n    >>> double(2)\n    4\n    """\n'
    problem = Problem("c", code_prompt, None, {"prompt": code_prompt, "entry_point": "double", "test": ""})
    programs = ["def double(x):\n    return 2 * x", "def double(x):\n    return x + x",
                "def double(x):\n    return x * 2"] + ["def double(x):\n    return x ** 2"] * 5
    gen = Scripted([str(i) for i in range(8)], texts=[f"```python\n{c}\n```" for c in programs])
    strategy = ExecutionVote(ExecutionVoteConfig(n=8, stop=StopConfig(wave=1)), gen, prompt, extract=CODE)
    sol = strategy.solve([problem])[0]
    assert (sol.answer, sol.trace.notes["stop"]["drawn"]) == (programs[0], 3)
    with pytest.raises(StrategyInputError, match="inputs=model"):
        ExecutionVote(ExecutionVoteConfig(n=8, inputs="model", stop=StopConfig()), gen, prompt, extract=CODE).solve([problem])


# --- the rule of one request, asked directly ------------------------------------------------------

def test_the_exact_rule_reads_the_leader_and_runner_up_whatever_their_order():
    """Five 4s and one 5 of 8: a lead of 4 cannot be overtaken by the 2 samples left (the leader is
    the most voted answer, not the first or the last counted)."""
    rule = VoteStop(StopConfig(rule="exact"), 8)
    assert rule.check(["5"] + ["4"] * 5) == "lead of 4 cannot be overtaken by the 2 samples left"
    assert rule.check(["5", "5"] + ["4"] * 4) is None  # a lead of 2 with 2 left: a tie is still possible
    assert rule.check(["4"] * 4 + ["5"] * 4) == "n reached"


def test_the_window_rule_counts_only_the_latest_run_of_equal_answers():
    rule = VoteStop(StopConfig(rule="window", window=3), 64)
    assert rule.check(["5", "4", "4", "4"]) == "the last 3 answers agree"
    assert rule.check(["4", "4", "5", "4"]) is None
    assert rule.check(["4", "4", None, "4"]) is None  # a sample without an answer breaks the run


def test_the_dirichlet_rule_takes_the_stops_top_k_and_prior():
    """Six a, two b, two c of 64 at confidence 0.9: racing only the top two answers (top_k 2) settles
    it; all three in the posterior (top_k 5), or a stronger prior (4 pseudo-votes), do not."""
    keys = ["a"] * 6 + ["b"] * 2 + ["c"] * 2
    stop = lambda **kw: VoteStop(StopConfig(rule="dirichlet", confidence=0.9, **kw), 64).check(keys)  # noqa: E731
    assert stop(top_k=2) == "dirichlet rule settled at confidence 0.9 (6 vs 2 of 10)"
    assert stop(top_k=5) is None and stop(top_k=2, prior=4.0) is None


def test_a_vote_refuses_the_score_rule_naming_the_vote_rules():
    with pytest.raises(ValueError) as err:
        VoteStop(StopConfig(rule="score", threshold=0.5), 8)
    assert str(err.value).startswith("stop rule 'score' stops on a sample's selection score, which only best_of_n has")
    assert str(err.value).endswith("a vote stops with one of beta, horizon, dirichlet, exact, window")


def test_the_score_stop_reaches_its_threshold_inclusively_and_ignores_missing_scores():
    stop = ScoreStop(StopConfig(rule="score", threshold=0.5), 4)
    assert stop.check([None, float("nan")]) is None  # no answer, or no finite score: never enough
    assert stop.check([0.2, 0.5]) == "a sample scored 0.5 >= threshold 0.5"
    assert stop.check([0.1, 0.2, 0.3]) is None and stop.check([0.1, 0.2, 0.3, 0.4]) == "n reached"
    with pytest.raises(ValueError, match="best_of_n stops on a score"):
        ScoreStop(StopConfig(rule="horizon"), 4)


def test_the_record_names_the_rule_and_the_wave_and_the_last_wave_is_cut_to_n():
    """n = 8 in waves of 3 on a contested vote: 3, 3, then the 2 left (never more than n)."""
    gen = Scripted(ALTERNATING)
    sol = solve(SelfConsistency, SelfConsistencyConfig(n=8, stop=StopConfig(rule="beta", wave=3)), gen)
    assert [r.n for r in gen.requests] == [3, 3, 2]
    assert {k: sol.trace.notes["stop"][k] for k in ("rule", "wave", "waves")} == {"rule": "beta", "wave": 3, "waves": 3}


def test_a_stop_with_n_of_one_draws_its_one_sample():
    sol = solve(SelfConsistency, SelfConsistencyConfig(n=1, stop=StopConfig()), Scripted(UNANIMOUS))
    assert (sol.answer, sol.trace.notes["stop"]["drawn"]) == ("4", 1)


def test_one_settled_request_cancels_only_its_own_samples_in_a_shared_stream():
    """Two problems in one batch, all 8 samples of each streamed at once: p settles after its three
    shortest agree and its other samples are cancelled; q (alternating answers) is read to the end."""
    answers = {"p": UNANIMOUS, "q": ALTERNATING}

    class TwoProblems(Scripted):
        def generate(self, requests):
            out = []
            for req in requests:
                self.answers = answers[req.key]
                self.drawn[req.key] = 0
                out += super().generate([req])
            return out

    gen = TwoProblems(UNANIMOUS, stream=True)
    problems = [Problem("p", "2 + 2?", "4"), Problem("q", "2 + 3?", "5")]
    sols = SelfConsistency(SelfConsistencyConfig(n=8, stop=StopConfig(wave=8)), gen, prompt).solve(problems)
    assert [(s.trace.notes["stop"]["drawn"], s.trace.notes["stop"]["cancelled"], s.trace.notes["stop"]["waves"])
            for s in sols] == [(3, 5, 1), (8, 0, 1)]  # q's samples were all read in the one wave


def test_the_reason_says_which_rule_settled_it():
    """Four 4s and one 5 of 8 under horizon (risk P(X = 0 | 3, 5, 2) = 30/630 = 0.048): the rule
    settled it, not the lead (3, which the 3 samples left could still tie); four of four under beta
    (0.969): the rule again, though the lead equals the samples left."""
    assert VoteStop(StopConfig(), 8).check(["4"] * 4 + ["5"]) == "horizon rule settled at confidence 0.95 (4 vs 1 of 5)"
    assert VoteStop(StopConfig(rule="beta"), 8).check(["4"] * 4) == "beta rule settled at confidence 0.95 (4 vs 0 of 4)"


# --- best_of_n's score stop: what the verifier is asked, what it costs, what went wrong -------------

class _Recording:
    """A verifier scoring each text by a table, recording what it was asked; ``fail_calls``: the
    calls (1-based) that raise; ``invalid``: texts that come back with that many invalid values."""

    name = "recording"

    def __init__(self, table, fail_calls=(), invalid=None) -> None:
        self.table, self.fail_calls, self.invalid = table, set(fail_calls), invalid or {}
        self.calls: list[list] = []

    def score(self, items):
        from tts.types import Usage
        from tts.verifiers.base import VerifierScore

        self.calls.append(list(items))
        if len(self.calls) in self.fail_calls:
            raise RuntimeError("the judge is down")
        return [VerifierScore((), self.table.get(it.steps[0], 0.0), Usage(prompt_tokens=7),
                              self.invalid.get(it.steps[0], 0)) for it in items]


def _text(answer):
    return f"so the answer is \\boxed{{{answer}}}"


def test_best_of_n_refuses_a_vote_rule_naming_the_rule_it_got():
    with pytest.raises(StrategyInputError) as err:
        solve(BestOfN, BestOfNConfig(n=4, stop=StopConfig(rule="window")), Scripted(UNANIMOUS))
    assert str(err.value) == ("best_of_n stops on a score: stop: {rule: score, threshold: ...} (the selection score "
                              "at which to stop), got rule 'window'")


def test_best_of_n_without_a_verifier_or_logprobs_says_which_problem_lacked_them():
    from tts.search.base import MissingLogprobsError

    gen = Scripted(["1", "2", "3", "4"])
    gen.logprobs = [None] * 4
    with pytest.raises(MissingLogprobsError) as err:
        solve(BestOfN, BestOfNConfig(n=4, stop=StopConfig(rule="score", threshold=-0.5, wave=2)), gen)
    assert str(err.value).startswith("best_of_n ranks samples by token log-probabilities, but 2 of 2 samples of "
                                     "problem 'p' came back without them (first: sample 0).")


def test_best_of_n_asks_the_verifier_of_each_new_sample_once_with_its_problem_and_logprobs():
    verifier = _Recording({_text("3"): 0.95})
    gen = Scripted(["1", "2", "3", "4"], logprobs=[-0.5, -0.4, -0.3, -0.2])
    sol = solve(BestOfN, BestOfNConfig(n=4, stop=StopConfig(rule="score", threshold=0.9, wave=2)), gen, verifier=verifier)
    assert (sol.answer, sol.trace.notes["stop"]["drawn"], sol.trace.scores) == ("3", 4, (0.0, 0.0, 0.95, 0.0))
    assert [[it.steps for it in call] for call in verifier.calls] == [[(_text("1"),), (_text("2"),)],
                                                                      [(_text("3"),), (_text("4"),)]]
    items = [it for call in verifier.calls for it in call]
    assert all(it.problem == PROBLEM and it.finished for it in items)
    assert [it.logprobs for it in items] == [(-0.5,), (-0.4,), (-0.3,), (-0.2,)]
    assert sol.usage.prompt_tokens == 20 * 2 + 7 * 4  # two requests' prompts and four scorings, each once
    assert sol.trace.events == {}


def test_best_of_n_counts_each_failed_verifier_call_once_as_without_a_stop(caplog):
    verifier = _Recording({_text("1"): 0.3, _text("2"): 0.4}, fail_calls={2, 3})
    gen = Scripted(["1", "2", "3", "4", "5", "6", "7", "8"])
    config = BestOfNConfig(n=8, stop=StopConfig(rule="score", threshold=0.9, wave=2))
    sol = solve(BestOfN, config, gen, verifier=verifier)
    # Calls 2 and 3 (samples 3-6) failed: their samples score 0, the lowest; two errors, not four.
    assert sol.trace.scores == (0.3, 0.4, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    assert sol.trace.events == {"verifier_error": 2} and sol.answer == "2"
    assert "verifier recording failed on 2 samples (the judge is down); each scores 0" in caplog.text
    # The same draw scored at once without a stop: one failed call, one error.
    unstopped = solve(BestOfN, BestOfNConfig(n=8), Scripted(["1"] * 8), verifier=_Recording({}, fail_calls={1}))
    assert unstopped.trace.events == {"verifier_error": 1}


def test_best_of_n_sums_the_invalid_values_of_the_samples_it_kept():
    verifier = _Recording({_text("1"): float("nan"), _text("2"): 0.95}, invalid={_text("1"): 3})
    sol = solve(BestOfN, BestOfNConfig(n=4, stop=StopConfig(rule="score", threshold=0.9, wave=1)),
                Scripted(["1", "2", "3", "4"]), verifier=verifier)
    assert (sol.answer, sol.trace.scores, sol.trace.events) == ("2", (0.0, 0.95), {"invalid_score": 3})


def test_best_of_n_does_not_stop_on_a_high_score_without_an_answer():
    texts = ["I am sure but give no answer", _text("2"), _text("3")]
    verifier = _Recording({texts[0]: 0.99, texts[2]: 0.95})
    gen = Scripted(["x", "2", "3", "4"], texts=texts + [_text("4")])
    sol = solve(BestOfN, BestOfNConfig(n=4, stop=StopConfig(rule="score", threshold=0.9, wave=1)), gen, verifier=verifier)
    assert (sol.answer, sol.trace.notes["stop"]["drawn"]) == ("3", 3)


def test_best_of_n_stop_judge_without_a_stop_is_refused_saying_it_got_none():
    strategy = BestOfN(BestOfNConfig(n=4), Scripted(UNANIMOUS), prompt, seed=0)
    with pytest.raises(StrategyInputError) as err:
        strategy.stop_judge([PROBLEM], [4])
    assert str(err.value).endswith("got rule None")


class _StepRecording(_Recording):
    """A step verifier (a PRM's kind): it gets each solution cut into steps."""

    step_verifier = True


def test_best_of_n_stop_gives_a_step_verifier_the_steps_and_every_verifier_the_token_top_logprobs():
    import dataclasses

    class WithTopLogprobs(Scripted):
        def generate(self, requests):
            return [GenerationResult(tuple(dataclasses.replace(c, token_top_logprobs=((-0.1, -2.0),) * 2)
                                           for c in r.completions), r.usage) for r in super().generate(requests)]

    texts = [f"First step.\n\nSo \\boxed{{{a}}}" for a in "1234"]
    verifier = _StepRecording({"First step.": 0.95})
    sol = solve(BestOfN, BestOfNConfig(n=4, stop=StopConfig(rule="score", threshold=0.9, wave=2)),
                WithTopLogprobs(["1", "2", "3", "4"], texts=texts), verifier=verifier)
    items = [it for call in verifier.calls for it in call]
    assert [it.steps for it in items] == [("First step.", "So \\boxed{1}"), ("First step.", "So \\boxed{2}")]
    assert all(it.token_top_logprobs == ((-0.1, -2.0),) * 2 for it in items)
    assert (sol.answer, sol.trace.notes["stop"]["drawn"]) == ("1", 2)


# --- the vote a stop counts (SamplingStrategy.stop_judge, sample_keys, solve_until_settled) ---------

_TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def test_a_stop_on_free_text_answers_is_refused_saying_what_to_change():
    from tts.answers.kinds import TEXT

    with pytest.raises(StrategyInputError) as err:
        SelfConsistency(SelfConsistencyConfig(n=8, stop=StopConfig()), Scripted(UNANIMOUS), prompt, seed=0,
                        extract=TEXT).solve([PROBLEM])
    assert str(err.value) == (
        "self_consistency: a stop counts votes, but these answers are free text (the plain prompt), chosen by "
        "similarity rather than counted, so no vote could settle; ask for answers that can be counted (the math "
        'prompt: tts.prompt "math", prompt="math"), or leave the stop out')


def test_free_text_replies_beside_tools_never_settle_a_vote_and_all_n_are_drawn():
    from tts.answers.kinds import TEXT

    problem = Problem("t", "Weather in Paris?", None, metadata={"tools": _TOOLS})
    gen = Scripted(["sunny"] * 8, texts=["It is sunny."])
    sol = SelfConsistency(SelfConsistencyConfig(n=8, stop=StopConfig(wave=2)), gen, prompt, seed=0,
                          extract=TEXT).solve([problem])[0]
    assert sol.trace.notes["stop"]["drawn"] == 8


def test_vote_keys_count_equal_answers_alike_and_free_text_has_none():
    from tts.search.base import vote_keys
    from tts.types import Sample

    assert vote_keys([Sample("so 4", "4"), Sample("so 2+2", "2+2"), Sample("none", None)]) == ["4", "4", None]
    with pytest.raises(StrategyInputError) as err:
        vote_keys([Sample("It is sunny.", "It is sunny.")], free_text=True)
    assert str(err.value) == ("a stop rule counts votes, but these answers are free text, chosen by minimum Bayes "
                              "risk rather than counted; leave the stop out for free-text answers")


class _Spelled:
    """Reads the last word as the answer; its vote keys count "four" as "4"."""

    def __call__(self, text):
        return text.rsplit(" ", 1)[-1]

    @staticmethod
    def answer_keys(answers):
        return [{"four": "4"}.get(a, a) for a in answers]


def test_a_stop_counts_the_keys_of_the_strategys_own_extraction():
    gen = Scripted(["4", "four"] * 4, texts=["it is 4", "it is four"])
    sol = SelfConsistency(SelfConsistencyConfig(n=8, stop=StopConfig(rule="window", window=4, wave=1)), gen, prompt,
                          seed=0, extract=_Spelled()).solve([PROBLEM])[0]
    assert sol.trace.notes["stop"]["drawn"] == 4  # "4", "four", "4", "four": one key, four in a row


def _paris_answered():
    """A question with tools whose conversation already called lookup(Paris) and got its result."""
    answered = [{"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
                    "name": "lookup", "arguments": '{"city": "Paris"}'}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]
    return Problem("t", "Weather in Paris?", None, metadata={"tools": _TOOLS, "messages": answered})


def test_a_stopped_vote_reads_calls_the_backend_left_as_text_and_skips_a_call_already_answered():
    problem = _paris_answered()
    gen = Scripted(["Paris", "Paris", "Paris", "Rome", "Rome", "Paris", "Paris", "Paris"], calls=True)
    sol = SelfConsistency(SelfConsistencyConfig(n=8, stop=StopConfig(wave=8)), gen, prompt, seed=0).solve([problem])[0]
    assert sol.problem_id == "t" and sol.trace.notes["stop"]["drawn"] == 8
    # Paris leads 6 to 2, but that call was answered already: the vote goes to the call not yet made.
    assert json.loads(sol.answer) == [{"name": "lookup", "arguments": {"city": "Rome"}}]


def test_a_scored_vote_also_skips_a_call_already_answered():
    problem = _paris_answered()
    gen = Scripted(["Paris", "Paris", "Paris", "Rome"], calls=True)
    sol = WeightedVote(WeightedVoteConfig(n=4), gen, prompt, seed=0,
                       verifier=FunctionVerifier(lambda problem, text: 0.5)).solve([problem])[0]
    assert json.loads(sol.answer) == [{"name": "lookup", "arguments": {"city": "Rome"}}]


def test_configs_sharing_one_draw_each_skip_a_call_already_answered():
    problem = _paris_answered()
    gen = Scripted(["Paris", "Paris", "Rome", "Paris"], calls=True)
    two, four = SelfConsistency.solve_together([SelfConsistency(SelfConsistencyConfig(n=n), gen, prompt, seed=0)
                                                for n in (2, 4)], [problem])
    assert len(gen.requests) == 1  # one draw of 4, the first 2 for n = 2
    # n = 2: both samples repeat the answered call, and the trace says so; n = 4: the call not yet made.
    assert two[0].trace.events == {"repeated_tool_call": 2, "only_repeated_tool_calls": 1}
    assert json.loads(four[0].answer) == [{"name": "lookup", "arguments": {"city": "Rome"}}]


def test_a_stopped_weighted_vote_weighs_the_kept_samples_by_the_verifiers_scores():
    verifier = FunctionVerifier(lambda problem, text: 0.9 if text == _text("4") else 0.1)
    sol = solve(WeightedVote, WeightedVoteConfig(n=4, stop=StopConfig(wave=4)), Scripted(["5", "5", "4", "4"]),
                verifier=verifier)
    assert (sol.answer, sol.trace.scores, sol.trace.notes["stop"]["drawn"]) == ("4", (0.1, 0.1, 0.9, 0.9), 4)
