"""The accuracy interval every report prints: the Wilson score interval, checked against values
published for it and against scipy's implementation, and its properties for any count."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tts.eval.report import wilson_interval

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
