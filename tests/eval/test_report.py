"""The summary every report prints: per-config accuracy, coverage and cost, and the accuracy's
Wilson score interval, checked against values published for it, against scipy's implementation,
and by its properties for any count."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tts.eval.report import summarize, wilson_interval
from tts.eval.rows import ResultRow
from tts.types import Usage

# Newcombe (1998), "Two-sided confidence intervals for the single proportion", Statistics in
# Medicine 17:857-872, Table I, method 3 (Wilson score, no continuity correction), 4 decimals.
NEWCOMBE = [((81, 263), (0.2553, 0.3662)), ((15, 148), (0.0624, 0.1605)), ((0, 20), (0.0, 0.1611)),
            ((1, 29), (0.0061, 0.1718))]


@pytest.mark.parametrize("counts, published", NEWCOMBE)
def test_matches_published_values(counts, published):
    assert wilson_interval(*counts) == pytest.approx(published, abs=1e-4)


@pytest.mark.parametrize("successes, trials", [(1, 10), (0, 11), (11, 11), (3, 7), (50, 100), (499, 500)])
def test_matches_scipy(successes, trials):
    """scipy's z is the exact normal quantile (1.95996...), ours 1.96: equal to 1e-4."""
    stats = pytest.importorskip("scipy.stats")
    ci = stats.binomtest(successes, trials).proportion_ci(confidence_level=0.95, method="wilson")
    assert wilson_interval(successes, trials) == pytest.approx((ci.low, ci.high), abs=1e-4)


def test_one_in_ten():
    """The value a dropped z^2/(4n^2) term moved to (0.077, 0.345)."""
    assert wilson_interval(1, 10) == pytest.approx((0.0179, 0.4042), abs=1e-4)


def test_no_trials_gives_an_empty_interval():
    assert wilson_interval(0, 0) == (0.0, 0.0)


counts = st.integers(1, 2000).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n)))


@given(counts)
def test_contains_the_estimate_and_stays_in_the_unit_interval(kn):
    k, n = kn
    low, high = wilson_interval(k, n)
    assert 0.0 <= low <= k / n <= high <= 1.0
    assert (low == 0.0) == (k == 0) and (high == 1.0) == (k == n)


@given(counts)
def test_is_symmetric_in_successes_and_failures(kn):
    k, n = kn
    low, high = wilson_interval(k, n)
    mirror_low, mirror_high = wilson_interval(n - k, n)
    assert (low, high) == pytest.approx((1 - mirror_high, 1 - mirror_low), abs=1e-12)


@given(counts, st.integers(2, 50))
def test_narrows_as_the_same_proportion_is_seen_over_more_trials(kn, factor):
    k, n = kn
    low, high = wilson_interval(k, n)
    more_low, more_high = wilson_interval(k * factor, n * factor)
    assert more_high - more_low < high - low


def test_the_ends_are_exact():
    """No successes gives a lower bound of exactly 0, all successes an upper bound of exactly 1
    (rounding once gave 2.8e-17 at 0 of 11, above the accuracy, and a plot refused it)."""
    for n in range(1, 60):
        assert wilson_interval(0, n)[0] == 0.0 and wilson_interval(n, n)[1] == 1.0


def _row(pid: str, config: str, kind: str, outcome: str, *, coverage: bool = False, samples: int = 1,
         tokens: tuple[int, int] = (0, 0), seconds: float = 0.0, events: dict | None = None,
         notes: dict | None = None) -> ResultRow:
    prompt, completion = tokens
    return ResultRow(problem_id=pid, config=config, strategy={"kind": kind, "n": samples}, model="m",
                     backend="scripted", answer=None if outcome == "no_answer" else "1", gold="1",
                     outcome=outcome, correct=outcome == "correct", coverage=coverage, confidence=0.5,
                     usage=Usage(prompt_tokens=prompt, completion_tokens=completion, wall_seconds=seconds),
                     trace={"strategy": kind, "samples": [{}] * samples, "events": events or {},
                            **({"notes": notes} if notes is not None else {})})


def test_summarize_gives_each_config_its_accuracy_interval_coverage_and_cost():
    rows = [
        _row("a", "self_consistency@4", "self_consistency", "correct", coverage=True, samples=4, tokens=(10, 30),
             seconds=1.0, events={"forced_answer": 1}, notes={"execution_seconds": 0.25}),
        _row("b", "self_consistency@4", "self_consistency", "wrong", coverage=True, samples=4, tokens=(10, 50),
             seconds=2.0, events={"forced_answer": 2, "empty_step": 0}, notes={"execution_seconds": 1.5}),
        _row("c", "self_consistency@4", "self_consistency", "no_answer", samples=2, tokens=(20, 10), seconds=0.5),
        _row("d", "self_consistency@4", "self_consistency", "ungraded", samples=2, tokens=(0, 10)),
        _row("a", "best_of_n@2", "best_of_n", "correct", samples=2, tokens=(4, 4)),
        _row("a", "self_consistency@1", "self_consistency", "wrong", samples=1),
    ]
    by_config = {s.config: s for s in summarize(rows)}
    sc = by_config["self_consistency@4"]
    assert (sc.strategy, sc.problems, sc.n) == ("self_consistency", 4, 3.0)
    assert (sc.accuracy, (sc.accuracy_low, sc.accuracy_high)) == (0.25, wilson_interval(1, 4))
    assert (sc.coverage, sc.no_answer_rate, sc.ungraded) == (0.5, 0.25, 1)
    assert sc.events == {"forced_answer": 3}  # summed over problems; kinds that never happened left out
    assert (sc.tokens_per_problem, sc.completion_tokens_per_problem, sc.wall_seconds) == (35.0, 25.0, 3.5)
    # The sandbox's seconds (programs, execution verifiers) are summed apart; rows without them add 0.
    assert sc.execution_seconds == 1.75
    bon = by_config["best_of_n@2"]
    assert (bon.accuracy, bon.n, bon.tokens_per_problem, bon.events, bon.execution_seconds) == (1.0, 2.0, 8.0, {}, 0.0)
    # Ordered by strategy, then by samples per problem.
    assert [s.config for s in summarize(rows)] == ["best_of_n@2", "self_consistency@1", "self_consistency@4"]
