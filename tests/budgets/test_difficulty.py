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


# --- edges of the inputs (mutation testing, issue 48) ---------------------------------------------


def test_quantile_edges_input_errors_and_one_bin() -> None:
    with pytest.raises(ValueError, match="n_bins must be >= 1, got 0"):
        quantile_edges([0.1, 0.2], 0)
    with pytest.raises(ValueError, match="^cannot fit quantile bins on zero problems; pass at least one score$"):
        quantile_edges([], 5)
    assert quantile_edges([0.3, 0.7], 1).size == 0  # one bin: no cut points, every score in bin 0
    np.testing.assert_array_equal(assign_bins([0.0, 0.5, 1.0], quantile_edges([0.3, 0.7], 1)), [0, 0, 0])
    np.testing.assert_allclose(quantile_edges([0.0, 1.0], 2), [0.5])
    np.testing.assert_allclose(quantile_edges([0, 1, 2, 3, 4], 4), [1.0, 2.0, 3.0])  # integers become floats
    np.testing.assert_allclose(quantile_edges([3], 5), [3.0])  # ties collapse to one edge


def test_assign_bins_puts_a_score_on_an_edge_on_the_easier_side_and_sorts_the_edges() -> None:
    np.testing.assert_array_equal(assign_bins([0.5, 0.49, 0.8, 0.2], [0.5]), [0, 1, 0, 1])
    np.testing.assert_array_equal(assign_bins([0.1, 0.3, 0.6, 0.9], [0.7, 0.2, 0.5]), [3, 2, 1, 0])
    assert assign_bins([0.1], [0.5]).dtype == np.int64


def test_majority_share_counts_the_real_samples_only() -> None:
    # One answer id (1) only and no -1: the width comes from the largest id.
    np.testing.assert_allclose(majority_share(np.array([[1, 1, 0]])), [2 / 3])
    np.testing.assert_allclose(majority_share(np.array([[2, 2, 2, 2]])), [1.0])
    # The mask drops slots from the denominator and their answers from the count.
    answers = np.array([[3, 3, 1, 1, 1], [0, 0, 0, 0, 0]])
    mask = np.array([[True, True, True, False, False], [True, True, False, False, False]])
    np.testing.assert_allclose(majority_share(answers, mask), [2 / 3, 1.0])
    # A row without real samples scores 0, not nan.
    np.testing.assert_allclose(majority_share(np.array([[1, 1], [0, 1]]), np.array([[False, False], [True, True]])),
                               [0.0, 0.5])
    assert majority_share(np.full((3, 2), -1)).shape == (3,)


def test_pilot_features_columns_in_order() -> None:
    answers = np.array([[0, 0, -1, 1], [-1, -1, -1, -1]])
    tokens = np.array([[10.0, np.nan, 30.0, 20.0], [5.0, 5.0, 5.0, 5.0]])
    scores = np.array([[0.5, np.nan, 1.0, 0.0], [-1.0, -1.0, -1.0, -1.0]])
    x = pilot_features(answers, tokens, scores, prompt_lengths=[99, 0], levels=[3, 5])
    np.testing.assert_allclose(x, [[0.5, 0.25, np.log1p(20.0), 0.5, np.log(100.0), 3.0],
                                   [0.0, 1.0, np.log1p(5.0), -1.0, 0.0, 5.0]])
    np.testing.assert_allclose(pilot_features(answers, scores=scores), x[:, [0, 1, 3]])
    np.testing.assert_allclose(pilot_features(answers, levels=[3, 5]), x[:, [0, 1, 5]])
    np.testing.assert_allclose(pilot_features(answers, prompt_lengths=[99, 0]), x[:, [0, 1, 4]])


class _Pool:
    def __init__(self, metadata=None, answers=None, tokens=None):
        if metadata is not None:
            self.metadata = metadata
        self.answers, self.tokens = answers, tokens


def test_pool_prompt_lengths_reads_each_problems_prompt_tokens() -> None:
    from tts.budgets.difficulty import pool_prompt_lengths

    pool = _Pool([{"prompt_tokens": 100}, {"prompt_tokens": 250.5}, {"prompt_tokens": 7}])
    out = pool_prompt_lengths(pool)
    np.testing.assert_array_equal(out, [100.0, 250.5, 7.0])
    assert out.dtype == float
    np.testing.assert_array_equal(pool_prompt_lengths(pool, [2, 0]), [7.0, 100.0])
    np.testing.assert_array_equal(pool_prompt_lengths(pool, np.array([1])), [250.5])
    ints = pool_prompt_lengths(_Pool([{"prompt_tokens": 1}, {"prompt_tokens": 40}]))  # one token is a length
    np.testing.assert_array_equal(ints, [1.0, 40.0])
    assert ints.dtype == np.float64


@pytest.mark.parametrize("bad", [None, 0, -3, True, "100"])
def test_pool_prompt_lengths_refuses_a_problem_without_one(bad) -> None:
    from tts.budgets.difficulty import pool_prompt_lengths

    pool = _Pool([{"prompt_tokens": 100}, {"prompt_tokens": bad} if bad is not None else {}, {"prompt_tokens": 5}])
    with pytest.raises(ValueError, match=r"^1 calibration problems have no prompt length \(a pool row's prompt_tokens\); "
                                         r"calibrate on a tts eval run, which records it, or leave the prompt length "
                                         r"out of the difficulty features$"):
        pool_prompt_lengths(pool)
    np.testing.assert_array_equal(pool_prompt_lengths(pool, [0, 2]), [100.0, 5.0])  # the others are fine


def test_pool_prompt_lengths_without_metadata_or_out_of_range() -> None:
    from tts.budgets.difficulty import pool_prompt_lengths

    with pytest.raises(ValueError, match="^all calibration problems"):
        pool_prompt_lengths(_Pool())  # no metadata attribute: no problems
    with pytest.raises(ValueError, match="^all calibration problems"):
        pool_prompt_lengths(_Pool(None))
    with pytest.raises(ValueError, match="^all calibration problems"):
        pool_prompt_lengths(_Pool([]))
    pool = _Pool([{"prompt_tokens": 10}, {"prompt_tokens": 20}])
    with pytest.raises(ValueError, match="^2 calibration problems"):
        pool_prompt_lengths(pool, [2, 5])  # beyond the recorded metadata: missing, not an IndexError
    with pytest.raises(ValueError, match="^1 calibration problems"):
        pool_prompt_lengths(pool, [1, 2])


def test_pool_pilot_features_take_the_first_k_of_each_problems_order() -> None:
    from tts.budgets.difficulty import pool_pilot_features

    answers = np.array([[0, 1, 1, -1], [2, 2, 0, 0], [5, 5, 5, 5]])
    tokens = np.array([[10.0, 20.0, 40.0, np.nan], [1.0, 3.0, 100.0, 100.0], [7.0, 7.0, 7.0, 7.0]])
    order = np.array([[3, 1, 0, 2], [0, 1, 2, 3], [0, 1, 2, 3]])
    pool = _Pool(answers=answers, tokens=tokens)
    x = pool_pilot_features(pool, np.array([0, 1]), order, 2)
    # problem 0, slots 3 and 1: answers (-1, 1), tokens (nan -> 0, 20); problem 1, slots 0 and 1.
    np.testing.assert_allclose(x, [[0.5, 0.5, np.log1p(10.0)], [1.0, 0.0, np.log1p(2.0)]])
    x = pool_pilot_features(pool, np.array([1]), order, 3, prompt_lengths=np.array([9.0]))
    np.testing.assert_allclose(x, [[2 / 3, 0.0, np.log1p(104 / 3), np.log(10.0)]])


def _reference_fit(x, y, w, l2):
    """The documented objective, minimised without the analytic gradient: the weighted mean log loss
    plus l2 / (2 n) times the squared weights of the standardised features (intercept free)."""
    from scipy.optimize import minimize

    mu, sd = x.mean(axis=0), x.std(axis=0)
    z = (x - mu) / sd
    w = w / w.sum()

    def loss(theta):
        t = z @ theta[:-1] + theta[-1]
        return np.sum(w * (np.logaddexp(0.0, t) - y * t)) + 0.5 * l2 * theta[:-1] @ theta[:-1] / len(y)

    theta = minimize(loss, np.zeros(x.shape[1] + 1), method="Nelder-Mead",
                     options={"xatol": 1e-10, "fatol": 1e-14, "maxiter": 20000}).x
    return lambda q: 1 / (1 + np.exp(-(((q - mu) / sd) @ theta[:-1] + theta[-1])))


@pytest.mark.parametrize("l2", [0.0, 1.0, 40.0])
def test_learned_difficulty_minimises_the_documented_objective(l2) -> None:
    rng = np.random.default_rng(3)
    x = np.column_stack([rng.normal(2.0, 3.0, 60), rng.random(60)])
    y = rng.random(60)  # pass rates
    w = rng.integers(1, 9, 60).astype(float)
    est = LearnedDifficulty(l2=l2).fit(x, y, w)
    ref = _reference_fit(x, y, w, l2)
    q = np.array([[0.0, 0.5], [5.0, 0.1], [-4.0, 0.9]])
    np.testing.assert_allclose(est.predict(q), ref(q), atol=2e-4)
    unweighted = LearnedDifficulty(l2=l2).fit(x, y)
    np.testing.assert_allclose(unweighted.predict(q), _reference_fit(x, y, np.ones(60), l2)(q), atol=2e-4)


def test_sample_counts_as_weights_equal_repeated_problems() -> None:
    rng = np.random.default_rng(4)
    x = rng.normal(size=(30, 2))
    y = (rng.random(30) < 0.5).astype(float)
    counts = rng.integers(1, 4, 30)
    weighted = LearnedDifficulty(l2=0.5).fit(x, y, counts)
    repeated = LearnedDifficulty(l2=0.5)
    xr, yr = np.repeat(x, counts, axis=0), np.repeat(y, counts)
    # The penalty is divided by n, so repeating rows changes it; with l2 = 0 the two fits agree.
    w0 = LearnedDifficulty(l2=0.0).fit(x, y, counts).predict(x)
    r0 = LearnedDifficulty(l2=0.0).fit(xr, yr).predict(x)
    np.testing.assert_allclose(w0, r0, atol=1e-4)
    assert weighted.l2 == repeated.l2 == 0.5 and isinstance(LearnedDifficulty(l2=1).l2, float)


def test_a_strong_penalty_leaves_the_intercept_at_the_mean_pass_rate() -> None:
    rng = np.random.default_rng(5)
    x = rng.normal(size=(200, 2))
    y = (rng.random(200) < 1 / (1 + np.exp(-2 * x[:, 0]))).astype(float)
    est = LearnedDifficulty(l2=1e5).fit(x, y)
    assert np.abs(est.coef_).max() < 1e-3  # the coefficients shrink to 0, the intercept is free
    assert est.intercept_ == pytest.approx(np.log(y.mean() / (1 - y.mean())), abs=1e-5)
    np.testing.assert_allclose(est.predict(x), y.mean(), atol=1e-3)


def test_learned_difficulty_shape_errors() -> None:
    for x, y in [(np.zeros(3), np.zeros(3)), (np.zeros((3, 1)), np.zeros(2)), (np.zeros((0, 1)), np.zeros(0))]:
        with pytest.raises(ValueError, match="need \\(n, d\\) features and n targets"):
            LearnedDifficulty().fit(x, y)
    with pytest.raises(ValueError, match=r"^targets must lie in \[0, 1\] \(outcomes or pass rates\)$"):
        LearnedDifficulty().fit(np.zeros((3, 1)), np.array([0, -0.5, 1]))
    with pytest.raises(RuntimeError, match=r"^call fit\(\) before predict\(\)$"):
        LearnedDifficulty().predict(np.zeros((1, 1)))
    assert LearnedDifficulty().l2 == 1.0
    with pytest.raises(ValueError, match="l2 must be >= 0, got nan"):
        LearnedDifficulty(l2=float("nan"))
    assert LearnedDifficulty(l2=0).l2 == 0.0
    est = LearnedDifficulty().fit(np.array([[0.0], [1.0], [0.0], [1.0]]), np.array([0.0, 1.0, 1.0, 1.0]))
    assert est.predict(np.array([[1.0]]))[0] > est.predict(np.array([[0.0]]))[0]


def test_a_fit_that_does_not_converge_is_logged(caplog, monkeypatch) -> None:
    import tts.budgets.difficulty as difficulty

    real = difficulty.minimize

    def failing(*args, **kwargs):
        res = real(*args, **kwargs)
        res.success, res.message = False, "ABNORMAL"
        return res

    monkeypatch.setattr(difficulty, "minimize", failing)
    with caplog.at_level("WARNING", logger="tts.budgets.difficulty"):
        LearnedDifficulty().fit(np.array([[0.0], [1.0]]), np.array([0.0, 1.0]))
    assert [r.getMessage() for r in caplog.records] == ["logistic difficulty fit did not converge: ABNORMAL"]
    caplog.clear()
    monkeypatch.setattr(difficulty, "minimize", real)
    with caplog.at_level("WARNING", logger="tts.budgets.difficulty"):
        LearnedDifficulty().fit(np.array([[0.0], [1.0]]), np.array([0.0, 1.0]))
    assert caplog.text == ""


def test_majority_share_edge_rows() -> None:
    np.testing.assert_allclose(majority_share(np.array([[0, 0, 0], [0, -1, -1]])), [1.0, 1 / 3])  # only id 0
    assert majority_share(np.zeros((0, 4), dtype=np.int64)).shape == (0,)  # zero problems
    # A 0/1 integer mask means the same as a boolean one.
    answers = np.array([[2, 2, 1, 1, 1]])
    np.testing.assert_allclose(majority_share(answers, [[1, 1, 1, 0, 0]]), [2 / 3])
    np.testing.assert_allclose(majority_share(answers, np.array([[1, 1, 1, 0, 0]])), [2 / 3])


def test_quantile_edges_default_to_five_bins() -> None:
    assert len(quantile_edges(np.arange(100.0))) == 4


def test_majority_share_of_one_sample_is_one() -> None:
    np.testing.assert_allclose(majority_share(np.array([[3], [-1]])), [1.0, 0.0])
    np.testing.assert_allclose(majority_share(np.array([[3, 1]]), np.array([[True, False]])), [1.0])


def test_pilot_features_skip_a_missing_count_given_as_none() -> None:
    """Token counts and scores read from JSON have None (null) where a sample recorded none: skipped
    like nan."""
    x = pilot_features(np.array([[0, 0]]), [[10, None]], [[None, 0.25]])
    np.testing.assert_allclose(x, [[1.0, 0.0, np.log1p(10.0), 0.25]])


@pytest.mark.parametrize(("mean", "spread", "kept"), [(0.0, 1.5e-9, True), (0.0, 0.5e-9, False),
                                                       (1e3, 1e-7, False), (1e3, 3e-6, True)])
def test_a_column_counts_as_constant_below_1e9_of_its_scale(mean, spread, kept) -> None:
    """The cut for "constant on the calibration problems": an sd at most 1e-9 times max(1, |mean|)."""
    rng = np.random.default_rng(6)
    y = (rng.random(400) < 0.5).astype(float)
    x = np.column_stack([rng.random(400), mean + np.where(y == 1, spread, -spread)])  # sd = spread
    est = LearnedDifficulty().fit(x, y)
    low, high = est.predict(np.array([[0.5, mean - spread], [0.5, mean + spread]]))
    assert (high - low > 0.5) if kept else (abs(high - low) < 1e-6)


def test_the_pilot_length_averages_the_known_token_counts_and_is_nan_without_any():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy "Mean of empty slice" for the empty row
        cols = pilot_features(np.array([[1, 1], [1, 2], [-1, -1]]),
                              np.array([[3.0, np.nan], [2.0, 4.0], [np.nan, np.nan]]))
    assert cols[:2, 2].tolist() == [np.log1p(3.0), np.log1p(3.0)]
    assert np.isnan(cols[2, 2])
