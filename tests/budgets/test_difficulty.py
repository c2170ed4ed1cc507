"""Difficulty estimators: pilot agreement, the learned logistic model, binning."""

from __future__ import annotations

import numpy as np
import pytest

from tts.budgets.difficulty import (
    LearnedDifficulty,
    assign_bins,
    majority_share,
    pilot_features,
    quantile_edges,
)


def test_no_answer_counts_as_disagreement():
    answers = np.array([[0, 0, 0, 0], [0, 0, -1, -1], [0, 1, 2, 3], [-1, -1, -1, -1]])
    np.testing.assert_allclose(majority_share(answers), [1.0, 0.5, 0.25, 0.0])
    mask = np.array([[True, True, False, False]] * 4)
    np.testing.assert_allclose(majority_share(answers, mask), [1.0, 1.0, 0.5, 0.0])


def test_quantile_bins_are_balanced_and_fit_edges_transfer():
    rng = np.random.default_rng(0)
    s = rng.random(1000)
    bins = assign_bins(s, quantile_edges(s, 5))
    assert set(bins.tolist()) == {0, 1, 2, 3, 4}
    assert np.all(np.bincount(bins) == 200)
    assert s[bins == 0].min() > s[bins == 4].max()  # bin 0 = highest pass rate = easiest
    edges = quantile_edges(s, 5)
    np.testing.assert_array_equal(assign_bins([1.0, 0.0], edges), [0, 4])


def test_learned_difficulty_recovers_a_logistic_relation():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(4000, 2))
    p = 1 / (1 + np.exp(-(1.5 * x[:, 0] - 0.5 * x[:, 1] + 0.3)))
    y = (rng.random(4000) < p).astype(float)
    est = LearnedDifficulty(l2=1e-3).fit(x, y)
    assert np.abs(est.predict(x) - p).mean() < 0.03
    bins = assign_bins(est.predict(x), quantile_edges(est.predict(x), 5))
    assert np.corrcoef(bins, p)[0, 1] < -0.8  # harder bins have lower pass rates


def test_learned_difficulty_on_pilot_features_prefers_agreement():
    rng = np.random.default_rng(2)
    n = 600
    agree = rng.random(n) < 0.5
    answers = np.where(agree[:, None], 0, rng.integers(0, 4, size=(n, 4)))
    tokens = rng.integers(100, 1000, size=(n, 4))
    pass_rate = np.where(agree, 0.9, 0.3)
    x = pilot_features(answers, tokens)
    assert x.shape == (n, 3)
    est = LearnedDifficulty().fit(x, pass_rate)
    pred = est.predict(x)
    assert pred[agree].mean() > 0.8 and pred[~agree].mean() < 0.45


def test_learned_difficulty_input_errors():
    with pytest.raises(ValueError, match="l2"):
        LearnedDifficulty(l2=-1)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        LearnedDifficulty().fit(np.zeros((3, 1)), np.array([0, 2, 1]))
    with pytest.raises(RuntimeError, match="fit"):
        LearnedDifficulty().predict(np.zeros((1, 1)))


def test_a_column_constant_in_calibration_does_not_swamp_the_prediction() -> None:
    """A feature equal on every calibration problem (rounding leaves its sd at ~1e-14, not 0) says
    nothing; a run-time value off that constant must not decide the prediction."""
    rng = np.random.default_rng(0)
    agreement = rng.random(3000)
    x = np.column_stack([agreement, np.full(3000, np.log1p(50.0))])  # its sd comes out 4e-16
    assert 0 < x[:, 1].std() < 1e-12
    y = (rng.random(3000) < agreement).astype(float)
    est = LearnedDifficulty().fit(x, y)
    at_constant = est.predict(np.array([[0.9, np.log1p(50.0)], [0.2, np.log1p(50.0)]]))
    off_constant = est.predict(np.array([[0.9, np.log1p(60.0)], [0.2, np.log1p(60.0)]]))
    assert np.allclose(at_constant, off_constant, atol=1e-6)
    assert at_constant[0] > at_constant[1]
