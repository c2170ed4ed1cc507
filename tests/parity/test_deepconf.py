"""DeepConf pinned to its reference: the paper and the authors' code, online and offline.

References:

* Paper: Fu, Wang, Tian & Zhao 2025, "Deep Think with Confidence" (arXiv 2508.15260): token
  confidence C_i, group confidence over a sliding window, lowest group / bottom-10% / tail trace
  confidences (Sec. 3); confidence-weighted voting V(a) = sum of C_t over the traces that answer a,
  and top-eta% filtering, eta in {10, 90} (Sec. 3.2); online: N_init = 16 warm-up traces, the
  stop threshold s = Percentile_{100-eta} of their lowest group confidences, the early stop, and
  adaptive sampling until the consensus share beta = V(a_hat) / sum_a V(a) reaches tau (Sec. 4,
  and the online algorithm in its appendix).
* Code: facebookresearch/deepconf at commit 675529d172ef6d240aa1f21cb60940d427cc1ea6;
  ``deepconf/utils.py`` (confidences, sliding-window groups, the bottom-window and tail
  measures, the top-percent filter, the weighted vote, the table of offline voting variants),
  ``deepconf/wrapper.py`` (``deepthink``'s defaults, ``_deepthink_online`` and
  ``_perform_basic_voting``: which warm-up and final traces vote), ``deepconf/processors.py``
  (the in-engine stop) and ``examples/example_online.py`` (the online script's defaults).

Each rule is transcribed below as a small function in our own words and code, and tts must make
the same decisions on the same inputs: hand-made confidences, or the scripted backend's traces
recorded as they were generated.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from tts.backends.base import Completion
from tts.backends.confidence import CONFIDENCE_STOPPED
from tts.backends.function import FunctionGenerator, RecordingGenerator
from tts.backends.scripted import ScriptedGenerator
from tts.benchmarks.demo import DEMO_PROMPT, generate_problems
from tts.config import SamplingConfig
from tts.search.sampling.deepconf import DeepConf, DeepConfConfig, quantile, trace_confidence
from tts.types import Sample

PINNED = {"strategy:deepconf"}

REF = "facebookresearch/deepconf@675529d172ef6d240aa1f21cb60940d427cc1ea6"
PROBLEMS = generate_problems(40)
SAMPLING = SamplingConfig(max_tokens=256)


# ---------------------------------------------------------------------------------------------
# The reference's rules, transcribed.
# ---------------------------------------------------------------------------------------------

def ref_token_confidence(top: Sequence[float]) -> float:
    """utils.py compute_confidence: minus the mean of the log-probabilities returned at a position."""
    return -sum(top) / len(top)


def ref_groups(conf: Sequence[float], window: int) -> list[float]:
    """utils.py compute_least_grouped: the mean of every ``window`` consecutive confidences; a
    trace shorter than the window is one group, its mean."""
    if len(conf) < window:
        return [sum(conf) / len(conf)] if conf else [0.0]
    return [sum(conf[i:i + window]) / window for i in range(len(conf) - window + 1)]


def ref_bottom_window(conf: Sequence[float], window: int, bottom: float = 0.1) -> float:
    """utils.py calculate_bottom_window_confidence: mean of the lowest floor(bottom * groups)
    group means (at least one); ``bottom == -1`` is the lowest group (``min_window``)."""
    if not conf:
        return 0.0
    if len(conf) < window:
        return sum(conf) / len(conf)
    groups = ref_groups(conf, window)
    if bottom == -1:
        return min(groups)
    count = max(1, int(len(groups) * bottom))
    return sum(sorted(groups)[:count]) / count


def ref_tail(conf: Sequence[float], tail: int) -> float:
    """utils.py calculate_tail_confidence: the mean of the last ``tail`` confidences."""
    if not conf:
        return 0.0
    last = conf[-tail:]
    return sum(last) / len(last)


def ref_percentile(values: Sequence[float], percent: float) -> float:
    """np.percentile's default (linear interpolation between the closest ranks)."""
    ordered = sorted(values)
    pos = percent / 100.0 * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def ref_weighted_vote(answers: Sequence[str | None], weights: Sequence[float]) -> tuple[str | None, dict[str, float]]:
    """utils.py weighted_majority_vote: the answer with the largest summed weight (the first seen on a tie)."""
    totals: dict[str, float] = {}
    for a, w in zip(answers, weights, strict=True):
        if a is not None:
            totals[a] = totals.get(a, 0.0) + w
    if not totals:
        return None, totals
    return max(totals, key=lambda a: totals[a]), totals


def ref_filter_top(confidences: Sequence[float], top: float) -> list[bool]:
    """utils.py filter_top_confidence: keep the traces at or above the (1 - top) percentile."""
    bar = ref_percentile(confidences, (1 - top) * 100)
    return [c >= bar for c in confidences]


def ref_online_voters(warm_min: Sequence[float], warm_answers: Sequence[str | None], final_min: Sequence[float],
                      final_answers: Sequence[str | None], keep: float) -> tuple[float, list[bool], list[bool]]:
    """wrapper.py _deepthink_online + _perform_basic_voting: the bar is the (100 - 100 * keep)
    percentile of the warm-up traces' lowest group confidences; a warm-up trace votes only when its
    lowest group confidence is at or above the bar, a final trace only when it is not below it
    (stopped in the engine, or finished below the bar without ever being checked); either needs an answer."""
    bar = ref_percentile(warm_min, 100 - 100 * keep)
    warm = [m >= bar and a is not None for m, a in zip(warm_min, warm_answers, strict=True)]
    final = [not m < bar and a is not None for m, a in zip(final_min, final_answers, strict=True)]
    return bar, warm, final


def ref_consensus(answers: Sequence[str | None], weights: Sequence[float]) -> float:
    """Paper Sec. 4 (adaptive sampling): beta = V(a_hat) / sum_a V(a), the sums over answers, so
    over the voting traces that have an answer."""
    best, totals = ref_weighted_vote(answers, weights)
    return totals[best] / sum(totals.values()) if best is not None else 0.0


# ---------------------------------------------------------------------------------------------
# The scripted backend, recorded (RecordingGenerator keeps what it returned), so the reference
# rule can be run on the very traces tts saw.
# ---------------------------------------------------------------------------------------------


def _rounds_by_problem(gen: RecordingGenerator) -> dict[str, list[list]]:
    """problem id -> the completions of each call that drew traces for it, in order."""
    out: dict[str, list[list]] = {}
    for requests, results in zip(gen.calls, gen.results, strict=True):
        for req, res in zip(requests, results, strict=True):
            out.setdefault(req.key, []).append(list(res.completions))
    return out


def _lowest(comp, window: int) -> float:
    return min(ref_groups([ref_token_confidence(p) for p in comp.token_top_logprobs], window))


# ---------------------------------------------------------------------------------------------
# Online
# ---------------------------------------------------------------------------------------------

def test_online_votes_only_traces_at_or_above_the_warm_up_bar_as_the_reference_does():
    """Findings 2: the reference (wrapper.py ``_perform_basic_voting``, REF) lets a warm-up trace
    vote only when its lowest group confidence is >= the bar, and drops a final trace whose
    lowest group confidence is below the bar even when the engine did not stop it (one shorter
    than the window is never checked). The issue's scripted reproduction: 40 problems, n = 16,
    warm-up 8, keep = 0.1 (DeepConf-low), vote weight the lowest group confidence. Failed before
    the fix: every warm-up trace voted (248 of 320) and 6 of 40 answers differed."""
    window, keep, warm_n = 16, 0.1, 8
    gen = RecordingGenerator(ScriptedGenerator.for_problems(PROBLEMS, accuracy=0.35, seed=1))
    cfg = DeepConfConfig(n=16, warmup=warm_n, keep=keep, window=window, consensus=None)
    strategy = DeepConf(cfg, gen, DEMO_PROMPT.render, SAMPLING)
    sols = strategy.solve(PROBLEMS)
    rounds = _rounds_by_problem(gen)
    warm_voters = 0
    for problem, sol in zip(PROBLEMS, sols, strict=True):
        warm, final = rounds[problem.id][0], [c for r in rounds[problem.id][1:] for c in r]
        assert len(warm) == warm_n and len(warm) + len(final) == 16
        answers = [strategy.extract(c.text) if c.finish_reason != CONFIDENCE_STOPPED else None for c in warm + final]
        lows = [_lowest(c, window) for c in warm + final]
        bar, warm_votes, final_votes = ref_online_voters(lows[:warm_n], answers[:warm_n], lows[warm_n:],
                                                         answers[warm_n:], keep)
        voters = warm_votes + final_votes
        warm_voters += sum(warm_votes)
        expected, totals = ref_weighted_vote([a if v else None for a, v in zip(answers, voters, strict=True)], lows)
        assert sol.trace.tree[0]["score"] == pytest.approx(bar)
        assert sol.answer == expected, problem.id
        assert sum(sol.trace.votes.values()) == pytest.approx(sum(totals.values())), problem.id
    assert warm_voters < 0.2 * 320  # keep = 0.1: about one warm-up trace in ten is at or above the bar


def test_online_final_traces_shorter_than_the_window_are_dropped_below_the_bar():
    """REF wrapper.py ``_deepthink_online``: after generation every final trace whose lowest group
    confidence is below the bar is marked stopped and does not vote; a trace shorter than the
    window (processors.py checks a group only once the window is full) is one group, its mean.
    With a window of 300 > max_tokens = 256 the engine stops nothing, and the rule alone
    decides. Failed before the fix: every such trace voted."""
    window, keep = 300, 0.5
    gen = RecordingGenerator(ScriptedGenerator.for_problems(PROBLEMS[:20], accuracy=0.35, seed=2))
    cfg = DeepConfConfig(n=12, warmup=4, keep=keep, window=window, consensus=None)
    strategy = DeepConf(cfg, gen, DEMO_PROMPT.render, SAMPLING)
    sols = strategy.solve(PROBLEMS[:20])
    rounds = _rounds_by_problem(gen)
    dropped = 0
    for problem, sol in zip(PROBLEMS[:20], sols, strict=True):
        comps = [c for r in rounds[problem.id] for c in r]
        assert all(c.finish_reason != CONFIDENCE_STOPPED and c.completion_tokens < window for c in comps)
        answers = [strategy.extract(c.text) for c in comps]
        lows = [_lowest(c, window) for c in comps]
        bar, w, f = ref_online_voters(lows[:4], answers[:4], lows[4:], answers[4:], keep)
        dropped += sum(1 for lo, a in zip(lows[4:], answers[4:], strict=True) if a is not None and lo < bar)
        expected, totals = ref_weighted_vote([a if v else None for a, v in zip(answers, w + f, strict=True)], lows)
        assert sol.answer == expected and sum(sol.trace.votes.values()) == pytest.approx(sum(totals.values()))
    assert dropped > 20


def test_the_warm_up_bar_is_the_reference_percentile():
    """REF wrapper.py: conf_bar = np.percentile(warm-up lowest group confidences, 100 - p) with
    the online script's p = 10 (keep the top 10%: DeepConf-low) or the wrapper's default p = 90
    (DeepConf-high); tts's keep is p / 100 and its threshold the (1 - keep) quantile."""
    lows = [17.2, 15.1, 16.4, 18.9, 14.0, 16.0, 15.5, 19.3]
    for keep in (0.1, 0.9, 0.5, 0.25):
        assert quantile(lows, 1 - keep) == pytest.approx(ref_percentile(lows, 100 - 100 * keep))


def test_consensus_share_counts_answered_traces_only():
    """Finding 3: the paper's beta = V(a_hat) / sum_a V(a) sums over answers, so a voting trace
    without an answer is in neither sum. tts's consensus share with ``consensus_over="answered"``
    (the default) equals it; ``"all"`` keeps the old share of all voting weight (documented).
    Failed before the fix: there was no such setting and the share counted unanswered traces."""
    from tts.search.sampling.deepconf import consensus_share  # added with the fix

    samples = [Sample("", a, 10, None, "stop") for a in ("12", "12", None, "13", None)]
    weights = [1.0, 2.0, 4.0, 1.0, 2.0]
    assert consensus_share(samples, weights, "answered") == pytest.approx(
        ref_consensus([s.answer for s in samples], weights)) == pytest.approx(0.75)
    assert consensus_share(samples, weights, "all") == pytest.approx(3.0 / 10.0)


def test_adaptive_sampling_stops_where_the_papers_beta_reaches_tau():
    """Paper Sec. 4 (adaptive sampling) and its online algorithm: after the warm-up, keep drawing
    while beta < tau; with ``chunk=1`` tts checks after every trace as the algorithm does. The scripted backend answers
    10% of traces with nothing, so the denominator matters. Failed before the fix: the share
    counted unanswered voting traces (and every warm-up trace voted), so tts drew more traces."""
    problems = PROBLEMS[:20]
    window, keep, tau, warm_n = 16, 0.9, 0.8, 4
    gen = RecordingGenerator(ScriptedGenerator.for_problems(problems, accuracy=0.6, seed=4))
    cfg = DeepConfConfig(n=16, warmup=warm_n, keep=keep, window=window, consensus=tau, chunk=1)
    strategy = DeepConf(cfg, gen, DEMO_PROMPT.render, SAMPLING)
    sols = strategy.solve(problems)
    rounds = _rounds_by_problem(gen)
    early = 0
    for problem, sol in zip(problems, sols, strict=True):
        comps = [c for r in rounds[problem.id] for c in r]
        answers = [strategy.extract(c.text) if c.finish_reason != CONFIDENCE_STOPPED else None for c in comps]
        lows = [_lowest(c, window) for c in comps]
        bar, w, _ = ref_online_voters(lows[:warm_n], answers[:warm_n], [], [], keep)
        voted = [a if v else None for a, v in zip(answers[:warm_n], w, strict=True)]
        weights = lows[:warm_n]
        # the reference decision after the warm-up and after every later trace
        drawn = warm_n
        while drawn < 16 and ref_consensus(voted, weights) < tau:
            assert drawn < len(comps), f"{problem.id}: tts stopped at {len(comps)} but beta < tau"
            lo, a = lows[drawn], answers[drawn]
            voted.append(a if lo >= bar else None)
            weights.append(lo)
            drawn += 1
        assert len(sol.trace.samples) == drawn, problem.id
        early += drawn < 16
    assert early >= 5


def test_online_settings_follow_the_reference_defaults_and_keep_the_old_rule_reachable():
    """REF wrapper.py / example_online.py: warmup_traces = 16 (N_init), window_size = 2048.
    tts: warmup defaults to 16 (capped at n when left unset); the window defaults to 64
    (documented departure: short traces) and 2048 is accepted. ``warmup_votes="all"`` gives the
    old, departing rule (every answered warm-up trace votes)."""
    cfg = DeepConfConfig()
    assert cfg.warmup_traces == 16 and cfg.window == 64 and cfg.warmup_votes == "above_threshold"
    assert cfg.consensus_over == "answered" and cfg.offline_filter == "percentile"
    assert DeepConfConfig(window=2048, n=512).window == 2048
    assert DeepConfConfig(n=4).warmup_traces == 4  # the default is capped at n
    assert DeepConfConfig(n=64).warmup_traces == 16
    with pytest.raises(ValueError, match="warmup"):
        DeepConfConfig(n=4, warmup=8)
    # the old rule: every warm-up trace with an answer votes
    gen = RecordingGenerator(ScriptedGenerator.for_problems(PROBLEMS[:10], accuracy=0.35, seed=1))
    old = DeepConfConfig(n=8, warmup=8, keep=0.1, window=16, consensus=None, warmup_votes="all")
    strategy = DeepConf(old, gen, DEMO_PROMPT.render, SAMPLING)
    sols = strategy.solve(PROBLEMS[:10])
    rounds = _rounds_by_problem(gen)
    for problem, sol in zip(PROBLEMS[:10], sols, strict=True):
        comps = rounds[problem.id][0]
        answers = [strategy.extract(c.text) for c in comps]
        lows = [_lowest(c, 16) for c in comps]
        expected, totals = ref_weighted_vote(answers, lows)
        assert sol.answer == expected and sum(sol.trace.votes.values()) == pytest.approx(sum(totals.values()))


# ---------------------------------------------------------------------------------------------
# Offline
# ---------------------------------------------------------------------------------------------

def _hand_traces() -> list[list[list[float]]]:
    """Six hand-made traces: per position, the top-4 log-probabilities (numbers with few digits,
    so the reference's rounding to 3 decimals changes nothing)."""
    shapes = [
        [-0.5] * 12,
        [-0.5] * 6 + [-2.0] * 6,
        [-1.0] * 4 + [-3.0] * 2 + [-1.0] * 6,
        [-2.0] * 12,
        [-0.25] * 3,  # shorter than the window
        [-1.5] * 8 + [-0.5] * 4,
    ]
    return [[[v, v - 1.0, v - 2.0, v - 3.0] for v in s] for s in shapes]


@pytest.mark.parametrize("measure,ref", [
    ("lowest_group", lambda c, w: ref_bottom_window(c, w, -1)),
    ("bottom_window", lambda c, w: ref_bottom_window(c, w, 0.1)),
    ("tail", ref_tail),
    ("mean", lambda c, w: sum(c) / len(c)),
])
def test_trace_confidence_measures_equal_the_reference(measure, ref):
    """REF utils.py: mean (calculate_mean_confidence), tail (calculate_tail_confidence, last
    ``tail_tokens``), bottom_window (calculate_bottom_window_confidence: the mean of the lowest
    max(1, floor(10% of groups)) groups) and min_window (the same with bottom_percent = -1, the
    lowest group). tts's ``window`` plays both window_size and tail_tokens."""
    for window in (2, 4, 5):
        for top in _hand_traces():
            conf = [ref_token_confidence(p) for p in top]
            assert trace_confidence(top, measure, window, 4) == pytest.approx(ref(conf, window)), (measure, window)


def test_bottom_ten_percent_takes_the_floor_of_the_group_count():
    """REF utils.py calculate_bottom_window_confidence: max(1, int(groups * 0.1)) groups, rounded
    down. With 15 groups that is the lowest one, not two. Failed before the fix: tts rounded up."""
    top = [[-float(v)] * 4 for v in (9, 4, 12, 1, 7, 15, 3, 10, 2, 14, 6, 11, 5, 13, 8)]
    conf = [ref_token_confidence(p) for p in top]
    assert trace_confidence(top, "bottom_window", 1, 4) == pytest.approx(ref_bottom_window(conf, 1, 0.1)) == 1.0


def _Fixed(answers: Sequence[str | None], tops: Sequence[Sequence[Sequence[float]]]) -> FunctionGenerator:  # noqa: N802
    """Returns hand-made completions (answers and top logprobs) for the one problem asked."""
    tops = [tuple(tuple(p) for p in t) for t in tops]
    return FunctionGenerator(lambda r: [Completion(f"so \\boxed{{{a}}}" if a is not None else "no idea", len(t), -0.5,
                                                   "stop", token_top_logprobs=t)
                                        for a, t in zip(answers, tops, strict=True)])


@pytest.mark.parametrize("measure,keep", [("tail", 0.1), ("bottom_window", 0.1), ("lowest_group", 0.9),
                                          ("mean", 0.5), ("tail", 0.9)])
def test_offline_filter_and_weighted_vote_equal_the_reference(measure, keep):
    """REF utils.py compute_all_voting_results: only traces with an extracted answer take part;
    filter_top_confidence keeps those at or above the (1 - top) percentile of their confidences
    (the script's variants: top 10% by tail and by bottom-window confidence; the paper also uses
    eta = 90%); the kept traces vote weighted by the same confidence. tts's offline mode with
    ``offline_filter="percentile"`` (the default) keeps the same traces and gets the same vote.
    Failed before the fix: tts kept ceil(keep * n) of all traces, unanswered ones included."""
    problem = PROBLEMS[0]
    answers = ["7", "9", None, "9", "7", "7"]
    tops = _hand_traces()
    window = 4
    gen = _Fixed(answers, tops)
    cfg = DeepConfConfig(n=6, mode="offline", measure=measure, keep=keep, window=window)
    sol = DeepConf(cfg, gen, DEMO_PROMPT.render, SAMPLING).solve([problem])[0]
    ref_measure = {"lowest_group": lambda c: ref_bottom_window(c, window, -1),
                   "bottom_window": lambda c: ref_bottom_window(c, window, 0.1),
                   "tail": lambda c: ref_tail(c, window), "mean": lambda c: sum(c) / len(c)}[measure]
    valid = [i for i, a in enumerate(answers) if a is not None]
    confs = [ref_measure([ref_token_confidence(p) for p in tops[i]]) for i in valid]
    kept = [i for i, k in zip(valid, ref_filter_top(confs, keep), strict=True) if k]
    expected, totals = ref_weighted_vote([answers[i] for i in kept], [confs[valid.index(i)] for i in kept])
    assert sol.answer == expected
    assert sol.trace.votes == pytest.approx(totals)
    assert sol.trace.events.get("filtered_out", 0) == len(answers) - len(kept)


def test_offline_top_share_keeps_the_old_count_rule():
    """The old offline filter, kept as ``offline_filter="top_share"`` (documented): the
    ceil(keep * n) most confident traces of all n, unanswered ones included, ties by order."""
    answers = ["7", "9", None, "9", "7", "7"]
    tops = _hand_traces()
    cfg = DeepConfConfig(n=6, mode="offline", measure="mean", keep=0.5, window=4, offline_filter="top_share")
    sol = DeepConf(cfg, _Fixed(answers, tops), DEMO_PROMPT.render, SAMPLING).solve([PROBLEMS[0]])[0]
    confs = [trace_confidence(t, "mean", 4, 4) for t in tops]
    chosen = sorted(range(6), key=lambda i: (-confs[i], i))[:3]
    totals: dict[str, float] = {}
    for i in chosen:
        if answers[i] is not None:
            totals[answers[i]] = totals.get(answers[i], 0.0) + confs[i]
    assert sol.trace.votes == pytest.approx(totals)
    assert sol.trace.events["filtered_out"] == 3
