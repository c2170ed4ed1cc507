"""DeepConf's rules one by one on hand-made traces (tts/search/sampling/deepconf.py): who votes
online and offline, when sampling stops, the consensus share, the solution's events and threshold,
and the cost hook. Milliseconds each; the scripted end-to-end runs are in test_deepconf.py."""

from __future__ import annotations

import math

import pytest

from tts.backends.confidence import CONFIDENCE_STOPPED
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
