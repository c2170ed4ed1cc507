"""DeepConf's rules one by one on hand-made traces (tts/search/sampling/deepconf.py): who votes
online and offline, when sampling stops, the consensus share, the solution's events and threshold,
and the cost hook. Milliseconds each; the scripted end-to-end runs are in test_deepconf.py."""

from __future__ import annotations

import math

import pytest

from tts.backends.confidence import CONFIDENCE_STOPPED, ConfidenceStop
from tts.search.base import StrategyInputError
from tts.search.sampling.deepconf import DeepConf, DeepConfConfig, _Problem, consensus_share
from tts.types import Problem, RequestShape, Sample, Usage


def _strategy(**cfg) -> DeepConf:
    return DeepConf(DeepConfConfig(**cfg), generator=None, prompt=lambda p: [])


def _state(answers, lowest, confidence=None, stopped=None, n=None) -> _Problem:
    s = _Problem(n if n is not None else len(answers))
    s.samples = [Sample(f"t{i}", a, 5, None, CONFIDENCE_STOPPED if stopped and stopped[i] else "stop")
                 for i, a in enumerate(answers)]
    s.lowest = list(lowest)
    s.confidence = list(confidence if confidence is not None else lowest)
    s.stopped = list(stopped or [False] * len(answers))
    return s


def test_the_cost_hook_plans_n_traces_from_one_prompt():
    assert DeepConf.planned_requests(3, 100, 50, 20) == [RequestShape(100, 20, (50, 50, 50))]
    assert DeepConf.planned_requests(2, 7, 9) == [RequestShape(7, 0, (9, 9))]


def test_the_consensus_share_over_answered_traces_or_all_of_them():
    samples = [Sample("", a) for a in ("1", "1", None, "2")]
    assert consensus_share(samples, [1.0, 1.0, 2.0, 1.0]) == pytest.approx(2 / 3)
    assert consensus_share(samples, [1.0, 1.0, 2.0, 1.0], "all") == pytest.approx(2 / 5)
    assert consensus_share([Sample("", None)], [1.0]) == 0.0  # nobody answered
    assert consensus_share([Sample("", "1"), Sample("", "2")], [0.0, 0.0]) == 0.0  # no weight behind any answer
    assert consensus_share([], []) == 0.0


def test_online_a_trace_votes_at_or_above_the_bar_unless_stopped_and_warm_up_traces_all_vote_when_asked():
    s = _state(["1", "1", "2", "2", None], lowest=[3.0, 2.0, 1.0, 2.0, 5.0], stopped=[False, False, False, True, False])
    s.threshold, s.warm = 2.0, 2
    _strategy(n=5, warmup=2)._online_votes(s)
    assert s.votes == [True, True, False, False, True]  # 2.0 is at the bar; the stopped trace never votes
    every = _strategy(n=5, warmup=2, warmup_votes="all")
    s.threshold = 4.0
    every._online_votes(s)
    assert s.votes == [True, True, False, False, True]  # the first 2 are warm-up traces: they vote below the bar
    _strategy(n=5, warmup=2)._online_votes(s)
    assert s.votes == [False, False, False, False, True]
    s.threshold = None  # no bar yet: every trace that was not stopped votes
    _strategy(n=5, warmup=2)._online_votes(s)
    assert s.votes == [True, True, True, False, True]


def test_sampling_stops_at_n_traces_or_once_the_share_reaches_the_consensus():
    s = _state(["1", "1", "2"], lowest=[1.0, 1.0, 1.0], n=4)
    s.votes = [True, True, True]
    assert not _strategy(n=4, consensus=0.7)._enough(s)  # 2 of 3
    assert _strategy(n=4, consensus=2 / 3)._enough(s)  # reached exactly
    assert not _strategy(n=4, consensus=None)._enough(s)
    s.n = 3
    assert _strategy(n=4, consensus=None)._enough(s)  # n traces drawn
    t = _state(["1", None, None], lowest=[1.0, 1.0, 1.0], n=5)
    t.votes = [True, True, True]
    assert _strategy(n=5, consensus=0.9)._enough(t)  # answered: 1 of 1
    assert not _strategy(n=5, consensus=0.9, consensus_over="all")._enough(t)  # all: 1 of 3
    t.votes = [False, False, False]
    assert not _strategy(n=5, consensus=0.01)._enough(t)  # no voter, no consensus


def test_offline_filters_keep_the_confident_answered_traces_or_the_top_share_of_all():
    s = _state(["1", None, "2", "1", "2"], lowest=[0] * 5, confidence=[1.0, 9.0, 3.0, 2.0, 3.0])
    _strategy(n=5, mode="offline", keep=0.5)._filter(s)
    # answered confidences 1, 3, 2, 3: the 0.5 quantile is 2.5, so the two at 3 vote
    assert s.votes == [False, False, True, False, True]
    _strategy(n=5, mode="offline", keep=1.0)._filter(s)
    assert s.votes == [True, False, True, True, True]  # the 0 quantile, 1.0, is kept: at the bar
    _strategy(n=5, mode="offline", keep=0.5, offline_filter="top_share")._filter(s)
    assert s.votes == [False, True, True, False, True]  # ceil(2.5) = 3 of all five; ties to the earlier
    _strategy(n=5, mode="offline", keep=0.2, offline_filter="top_share")._filter(s)
    assert s.votes == [False, True, False, False, False]
    _strategy(n=5, mode="offline", keep=0.01, offline_filter="top_share")._filter(s)
    assert s.votes == [False, True, False, False, False]  # at least one
    none = _state([None, None], lowest=[0, 0], confidence=[1.0, 2.0])
    _strategy(n=2, mode="offline")._filter(none)
    assert none.votes == [False, False]


def test_the_solution_is_the_weighted_vote_of_the_voters_with_its_events_and_threshold():
    s = _state(["1", "2", "2", None, "1"], lowest=[5.0, 1.0, 2.0, 0.5, 4.0], confidence=[5.0, 1.0, 2.0, 0.5, 4.0],
               stopped=[False, False, False, True, False])
    s.samples[3] = Sample("t3", None, 5, None, CONFIDENCE_STOPPED)
    s.votes, s.threshold, s.stopped_after, s.usage = [False, True, True, False, True], 1.23456, 2, Usage(completion_tokens=9)
    sol = _strategy(n=5, warmup=2)._solution(Problem("p", "q", "2"), s, True)
    # voters 1, 2 and 4: "2" has 1 + 2, "1" has 4 (trace 0's 5 does not vote)
    assert (sol.problem_id, sol.answer) == ("p", "1") and sol.confidence == pytest.approx(4 / 7)
    assert sol.trace.votes == {"2": 3.0, "1": 4.0}
    assert sol.trace.selected == 4 and sol.trace.scores == (5.0, 1.0, 2.0, 0.5, 4.0)
    assert sol.trace.events == {"stopped_low_confidence": 1, "stop_after_generation": 2, "below_threshold": 1}
    assert sol.trace.tree == ({"id": "threshold", "parent": None, "depth": 0, "text": "threshold 1.235",
                               "score": 1.23456, "kept": True},)
    assert sol.usage == Usage(completion_tokens=9) and sol.trace.strategy == "deepconf"
    s.votes, s.threshold, s.stopped_after = [True, False, False, False, True], None, 0
    off = _strategy(n=5, mode="offline")._solution(Problem("p", "q", "2"), s, False)
    assert off.answer == "1" and off.trace.selected == 0 and off.trace.tree == ()
    assert off.trace.events == {"stopped_low_confidence": 1, "filtered_out": 3}
    s.votes = [False] * 5
    empty = _strategy(n=5, mode="offline")._solution(Problem("p", "q", "2"), s, False)
    assert (empty.answer, empty.confidence, empty.trace.selected) == (None, 0.0, None)
    assert empty.trace.events == {"stopped_low_confidence": 1, "filtered_out": 5}


def test_a_problem_state_shares_only_among_its_voters():
    s = _state(["1", "2", "2"], lowest=[1.0, 1.0, 1.0], confidence=[4.0, 1.0, 1.0])
    s.votes = [True, True, True]
    assert s.share("answered") == pytest.approx(4 / 6)
    s.votes = [False, True, True]
    assert s.share("answered") == 1.0
    s.votes = [False, False, False]
    assert s.share("all") == 0.0
    assert math.isclose(_state([], [], n=1).share("answered"), 0.0)


def test_each_request_carries_the_runs_sampling_top_k_logprobs_and_a_seed_of_its_problem_and_round():
    from tts.backends.base import derive_seed
    from tts.backends.confidence import ConfidenceStop
    from tts.config import SamplingConfig

    strategy = DeepConf(DeepConfConfig(n=8, top_k=5), generator=None, prompt=lambda p: [{"role": "user", "content": p.question}],
                        sampling=SamplingConfig(temperature=0.6, top_p=0.8, max_tokens=99), seed=3)
    stop = ConfidenceStop(1.5, 64, 5)
    req = strategy._request(Problem("p1", "what?", "2"), 3, 5, stop)
    assert (req.messages, req.n, req.temperature, req.top_p, req.max_tokens) == (
        [{"role": "user", "content": "what?"}], 3, 0.6, 0.8, 99)
    assert (req.logprobs, req.top_logprobs, req.key, req.confidence_stop) == (True, 5, "p1", stop)
    # the seed of this problem after 5 traces: not the warm-up's (0 drawn), not another run seed's
    assert req.seed == derive_seed(3, "p1", 5)
    assert len({req.seed, strategy._request(Problem("p1", "what?", "2"), 3, 0, None).seed, derive_seed(4, "p1", 5)}) == 3


class _Recorder:
    """A generator that records its requests and answers each with ``n`` traces of the given answers
    (cycled) whose every position has top log-probabilities ``top`` (so a known token confidence)."""

    def __init__(self, answers=("7",), top=(-1.0, -3.0), length=4) -> None:
        self.answers, self.top, self.length, self.requests = answers, top, length, []

    def generate(self, requests):
        from tts.backends.base import Completion, GenerationResult

        self.requests.append(list(requests))
        return [GenerationResult(tuple(Completion(f"\\boxed{{{self.answers[i % len(self.answers)]}}}", self.length,
                                                  finish_reason="stop", token_top_logprobs=(self.top,) * self.length)
                                       for i in range(r.n)), Usage(completion_tokens=self.length * r.n))
                for r in requests]


def test_a_missing_top_logprob_is_refused_with_the_whole_message_and_the_top_values_are_read_as_given():
    from tts.backends.base import Completion
    from tts.search.base import MissingLogprobsError

    strategy = _strategy(top_k=5)
    with pytest.raises(MissingLogprobsError) as e:
        strategy._top(Problem("p7", "q", "1"), Completion("x", 1))
    assert str(e.value) == (
        "deepconf weighs traces by token confidence from the top-5 log-probabilities of every position, but a "
        "trace of problem 'p7' came back without them. Unavailable on this backend: deepconf and the "
        "self_certainty scorer (top logprobs per token); best_of_n, weighted_vote and the logprob scorer need at "
        "least the sampled tokens' logprobs. Use a backend that returns top_logprobs (vLLM does; an "
        "OpenAI-compatible server must support `top_logprobs`), or use self_consistency.")
    top = ((-0.5, -1.0),)
    assert strategy._top(Problem("p7", "q", "1"), Completion("x", 1, token_top_logprobs=top)) is top


def test_a_budget_per_problem_caps_its_traces_and_a_wrong_count_of_budgets_is_refused():
    from tts.types import Budget

    gen = _Recorder()
    strategy = DeepConf(DeepConfConfig(n=4, mode="offline"), generator=gen, prompt=lambda p: [])
    problems = [Problem("a", "q", "7"), Problem("b", "q", "7")]
    sols = strategy.solve(problems, [Budget(samples=2), None])
    assert [r.n for r in gen.requests[0]] == [2, 4] and [s.answer for s in sols] == ["7", "7"]
    assert [len(s.trace.samples) for s in sols] == [2, 4]
    with pytest.raises(StrategyInputError) as e:
        strategy.solve(problems, [Budget(samples=2)])
    assert str(e.value) == "got 1 budgets for 2 problems; give one per problem"


def test_online_draws_the_warm_up_then_the_rest_in_rounds_of_chunk_and_offline_draws_all_n_at_once():
    problem = [Problem("a", "q", "7")]
    for cfg, sizes in (({"n": 6, "warmup": 2}, [2, 4]), ({"n": 6, "warmup": 2, "chunk": 3}, [2, 3, 1]),
                       ({"n": 20, "mode": "offline"}, [20]), ({"n": 4, "warmup": 2, "mode": "offline"}, [4])):
        gen = _Recorder(answers=("7", "8"))
        sols = DeepConf(DeepConfConfig(consensus=None, **cfg), generator=gen, prompt=lambda p: []).solve(problem)
        assert [[r.n for r in call] for call in gen.requests] == [[n] for n in sizes], cfg
        assert len(sols[0].trace.samples) == sum(sizes)


def test_online_on_a_backend_that_cannot_stop_traces_warns_once_naming_it(caplog):
    problem = [Problem("a", "q", "7")]
    with caplog.at_level("WARNING", logger="tts.search.sampling.deepconf"):
        DeepConf(DeepConfConfig(n=4, warmup=2), generator=_Recorder(), prompt=lambda p: []).solve(problem)
    assert [r.getMessage() for r in caplog.records] == [
        "deepconf online: backend _Recorder cannot stop traces inside the engine; the stop is applied after "
        "generation and saves no tokens"]
    caplog.clear()

    class Stopping(_Recorder):
        supports_confidence_stop = True

    with caplog.at_level("WARNING", logger="tts.search.sampling.deepconf"):
        DeepConf(DeepConfConfig(n=4, warmup=2), generator=Stopping(), prompt=lambda p: []).solve(problem)
        DeepConf(DeepConfConfig(n=4, mode="offline"), generator=_Recorder(), prompt=lambda p: []).solve(problem)
    assert caplog.records == []  # it stops them, or offline stops none


def _scripted_rounds(rounds, stopping=False):
    """A generator whose i-th call returns ``rounds[i]``: per request, traces as (text, finish_reason,
    tops per position); records its requests; ``stopping``: it says it can stop traces in the engine."""
    from tts.backends.base import Completion, GenerationResult

    class Gen:
        supports_confidence_stop = True

        def __init__(self):
            self.requests = []

        def generate(self, requests):
            self.requests.append(list(requests))
            traces = rounds[len(self.requests) - 1]
            return [GenerationResult(tuple(Completion(text, len(tops), -0.25, why, token_top_logprobs=tuple(tops))
                                           for text, why, tops in traces[: r.n]), Usage()) for r in requests]

    if not stopping:
        del Gen.supports_confidence_stop
    return Gen()


# top log-probabilities of one position: token confidence over the top 2 is 2.0 (N) or 1.0 (L); over
# all three, 4.0 and 3.33 (so a k other than the config's 2 would stop nothing below a bar of 2.0)
N, L = (-1.0, -3.0, -8.0), (-0.5, -1.5, -8.0)
WARM = [("\\boxed{7}", "stop", [N] * 4), ("\\boxed{8}", "stop", [N] * 4)]  # bar: 2.0


def test_a_backend_without_the_stop_gets_none_in_its_requests_and_it_is_applied_to_the_finished_traces():
    # window 2: A's groups 2, 1.5, 1 fall below the bar at its third token of four: stopped, its answer
    # dropped; B's only at its last token: it finished, it does not vote (lowest 1.5), but it was not stopped
    gen = _scripted_rounds([WARM, [("\\boxed{7}", "stop", [N, N, L, L]), ("\\boxed{8}", "stop", [N, N, N, L])]])
    cfg = DeepConfConfig(n=4, warmup=2, window=2, top_k=2, keep=0.5, consensus=None)
    [sol] = DeepConf(cfg, generator=gen, prompt=lambda p: []).solve([Problem("a", "q", "7")])
    assert [r.confidence_stop for r in gen.requests[1]] == [None]
    assert [x.answer for x in sol.trace.samples] == ["7", "8", None, "8"]
    assert sol.trace.samples[2] == Sample("\\boxed{7}", None, 4, -0.25, CONFIDENCE_STOPPED)  # all but its answer kept
    assert sol.trace.events == {"stopped_low_confidence": 1, "stop_after_generation": 1, "below_threshold": 1}
    assert sol.trace.scores == (2.0, 2.0, 1.0, 1.5)  # lowest groups over the top 2


def test_traces_the_engine_stopped_lose_their_answer_and_do_not_count_as_below_the_threshold():
    gen = _scripted_rounds([WARM, [("\\boxed{9}", CONFIDENCE_STOPPED, [N, L, L])] * 2], stopping=True)
    cfg = DeepConfConfig(n=4, warmup=2, window=2, top_k=2, keep=0.5, consensus=None)
    [sol] = DeepConf(cfg, generator=gen, prompt=lambda p: []).solve([Problem("a", "q", "7")])
    assert gen.requests[1][0].confidence_stop == ConfidenceStop(2.0, 2, 2)
    assert [x.answer for x in sol.trace.samples] == ["7", "8", None, None]
    assert sol.trace.events == {"stopped_low_confidence": 2}


def test_a_backend_that_stops_traces_gets_the_warm_up_bar_with_the_configs_window_and_top_k():
    class Stopping(_Recorder):
        supports_confidence_stop = True

    gen = Stopping(answers=("7", "8"), top=(-1.0, -3.0, -8.0))
    cfg = DeepConfConfig(n=4, warmup=2, window=3, top_k=2, consensus=None)
    DeepConf(cfg, generator=gen, prompt=lambda p: []).solve([Problem("a", "q", "7")])
    # warm-up: no stop; then the bar = the warm-up's token confidence, (1 + 3) / 2 over the top 2
    assert [r.confidence_stop for r in gen.requests[0]] == [None]
    assert [r.confidence_stop for r in gen.requests[1]] == [ConfidenceStop(2.0, 3, 2)]


def test_a_trace_without_tokens_has_confidence_zero():
    # offline its score is 0.0; online its lowest group is 0.0 too, so the warm-up bar (the median of
    # 0.0 and 2.0) is 1.0
    empty_and_one = [("", "length", []), ("\\boxed{7}", "stop", [N])]
    [off] = DeepConf(DeepConfConfig(n=2, mode="offline", top_k=2), generator=_scripted_rounds([empty_and_one]),
                     prompt=lambda p: []).solve([Problem("a", "q", "7")])
    assert off.trace.scores == (0.0, 2.0)
    [on] = DeepConf(DeepConfConfig(n=2, warmup=2, keep=0.5, top_k=2), generator=_scripted_rounds([empty_and_one]),
                    prompt=lambda p: []).solve([Problem("a", "q", "7")])
    assert on.trace.tree[0]["score"] == 1.0 and on.answer == "7"


def test_trace_confidence_uses_the_top_k_given_and_bottom_window_averages_its_lowest_groups():
    from tts.search.sampling.deepconf import trace_confidence

    assert trace_confidence(((-1.0, -3.0, -8.0),) * 3, "mean", 64, 2) == 2.0  # the top 2 only: (1 + 3) / 2
    assert trace_confidence((), "mean", 4, 2) == 0.0  # no tokens
    # 21 groups of one token: the floor of 10% is 2 groups, the lowest, 1.0 and 2.0
    top = [(-5.0,)] * 19 + [(-1.0,), (-2.0,)]
    assert trace_confidence(top, "bottom_window", 1, 1) == 1.5


def test_the_quantile_of_one_value_is_that_value():
    from tts.search.sampling.deepconf import quantile

    assert quantile([5.0], 0.3) == 5.0  # one warm-up trace: its confidence is the bar
    assert quantile([3.0, 1.0, 2.0], 0.75) == 2.5


def test_what_deepconf_says_it_needs_logprobs_for():
    assert _strategy().logprobs_use() == "weighs traces by token confidence (the top log-probabilities of every position)"
