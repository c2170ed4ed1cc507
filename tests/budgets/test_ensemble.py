"""Multi-model vote ensembles: MILP weights, cross-fitting that never reads a held-out grade, the
replayed weighted vote, and `tts budget ensemble`."""

from __future__ import annotations

import gzip
import itertools
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from tts.benchmarks.pool import ModelPool, load_pool
from tts.budgets.ensemble import EnsembleData, EnsembleError, align, cross_fit, evaluate, fit_weights
from tts.cli.app import app


def _write_pool(path, rng, n_problems=30, n_samples=8):
    """Three models: A right on the first third, B on the second, C weakly right everywhere."""
    rows = []
    for q in range(n_problems):
        for m, model in enumerate(["A", "B", "C"]):
            good = {"A": 0.9 if q % 3 == 0 else 0.2, "B": 0.9 if q % 3 == 1 else 0.2, "C": 0.45}[model]
            for s in range(n_samples):
                r = rng.random()
                ans = "42" if r < good else ("7" if r < good + (1 - good) * 0.6 else "8")
                rows.append({"problem_id": f"p{q}", "model": model, "sample_idx": s, "answer": ans,
                             "correct": ans == "42", "num_tokens": 100 + m, "score": None})
    with gzip.open(path, "wt") as fh:
        fh.write("\n".join(json.dumps(r) for r in rows))
    return path


def _solved(shares, ok, w):
    score = np.einsum("mpa,m->pa", shares, w)
    best = score.argmax(axis=1)
    top = np.sort(score, axis=1)
    return int((ok[np.arange(len(ok)), best] & (top[:, -1] - top[:, -2] > 1e-9)).sum())


def test_milp_weights_solve_as_many_problems_as_the_best_weighting_on_a_grid():
    rng = np.random.default_rng(0)
    shares = rng.dirichlet(np.ones(4), size=(3, 40))  # 3 models, 40 problems, 4 answers
    ok = np.zeros((40, 4), dtype=bool)
    ok[:, 0] = True
    fit = fit_weights(shares, ok, margin=1e-6)
    grid = [np.array(w) / 20 for w in itertools.product(range(21), repeat=3) if sum(w) == 20]
    best = max(_solved(shares, ok, w) for w in grid)
    assert fit.solved >= best
    assert _solved(shares, ok, fit.weights) == fit.solved
    assert fit.weights.sum() == pytest.approx(1.0) and np.all(fit.weights >= 0)


def test_cross_fit_weights_of_a_fold_ignore_that_folds_grades(tmp_path):
    data = align([mp for mp in load_pool(_write_pool(tmp_path / "p.jsonl.gz", np.random.default_rng(1))).by_model.values()])
    w, fold = cross_fit(data, folds=3, seed=0)
    flipped = EnsembleData(data.models, data.problem_ids, data.answers, data.tokens, data.counts,
                           np.where((fold == 0)[:, None], ~data.answer_ok, data.answer_ok))
    w2, _ = cross_fit(flipped, folds=3, seed=0)
    np.testing.assert_allclose(w2[fold == 0], w[fold == 0])  # fold 0's weights: other folds only
    assert not np.allclose(w2[fold != 0], w[fold != 0])  # the others did learn from fold 0


def test_ensemble_of_complementary_models_beats_each_and_one_hot_weights_replay_a_model(tmp_path):
    pool = load_pool(_write_pool(tmp_path / "p.jsonl.gz", np.random.default_rng(2), n_problems=60))
    data = align([pool[m] for m in pool.models])
    one_hot = np.tile([1.0, 0.0, 0.0], (60, 1))
    res = evaluate(data, one_hot, [8], orderings=3)
    assert res.acc[8]["ensemble"][0] == pytest.approx(res.acc[8]["A"][0])
    w, _ = cross_fit(data, folds=3)
    res = evaluate(data, w, [1, 8], orderings=5)
    assert all(res.acc[8]["ensemble"][0] > res.acc[8][m][0] for m in "ABC")
    assert res.tokens[8]["A"] == pytest.approx(800)
    with pytest.raises(EnsembleError, match="exceeds"):
        evaluate(data, w, [9])


def test_cli_ensemble_prints_json_and_names_a_missing_model(tmp_path):
    path = _write_pool(tmp_path / "p.jsonl.gz", np.random.default_rng(3))
    runner = CliRunner()
    res = runner.invoke(app, ["budget", "ensemble", "--pool", str(path), "--n", "1,4", "--folds", "3",
                              "--orderings", "2", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["models"] == ["A", "B", "C"] and set(out["acc"]) == {"1", "4"}
    assert set(out["gap"]["4"]) == {"A", "B", "C"}
    res = runner.invoke(app, ["budget", "ensemble", "--pool", str(path), "--models", "A,Z"])
    assert res.exit_code == 2 and "Z" in res.output
    with pytest.raises(EnsembleError, match="at least two"):
        align([load_pool(path)["A"]])


def _model_pool(model, ids, texts, answers, correct, tokens, mask):
    answers = np.array(answers, dtype=np.int32)
    return ModelPool(model=model, problem_ids=tuple(ids), answers=answers, answer_texts=tuple(texts),
                     correct=np.array(correct, bool), tokens=np.array(tokens, float),
                     scores=np.full(answers.shape, np.nan), sample_idx=np.where(mask, np.arange(answers.shape[1]), -1),
                     mask=np.array(mask, bool))


def test_align_shares_answer_ids_through_normalised_text_on_the_common_problems():
    a = _model_pool("A", ["p1", "p2", "p3"], [("7.0", "3"), ("5",), ("1",)],
                    [[0, 1, 0], [0, -1, -1], [0, 0, 0]], [[1, 0, 1], [0, 0, 0], [1, 1, 1]],
                    [[10, 11, 12], [20, 21, np.nan], [1, 1, 1]], [[1, 1, 1], [1, 1, 0], [1, 1, 1]])
    b = _model_pool("B", ["p2", "p1"], [("6", "$5$"), ("3", "7")], [[1, 0], [1, 0]], [[0, 1], [1, 0]],
                    [[30, 31], [40, 41]], [[1, 1], [1, 1]])
    data = align([a, b])
    assert data.models == ("A", "B") and data.problem_ids == ("p1", "p2")  # p3: A's alone; A's order
    # p1: "7" (from "7.0") is id 0, "3" id 1; p2: "5" (B's "$5$" too) is id 0, B's "6" id 1.
    assert data.answers.tolist() == [[[0, 1, 0], [0, -1, -1]], [[0, 1, -1], [0, 1, -1]]]
    assert data.counts.tolist() == [[3, 2], [2, 2]]
    assert data.answer_ok.tolist() == [[True, False], [False, True]]
    np.testing.assert_array_equal(data.tokens, [[[10, 11, 12], [20, 21, np.nan]], [[40, 41, np.nan], [30, 31, np.nan]]])
    np.testing.assert_allclose(data.shares(), [[[2 / 3, 1 / 3], [1 / 2, 0]], [[1 / 2, 1 / 2], [1 / 2, 1 / 2]]])
    with pytest.raises(EnsembleError, match="^the models share no problem id; an ensemble votes on the same problems$"):
        align([a, _model_pool("C", ["q"], [("1",)], [[0]], [[1]], [[1]], [[1]])])


def test_fit_weights_counts_free_hopeless_and_contested_problems():
    # Two models, two answers (the first correct unless said): (shares of A, shares of B).
    shares = np.array([
        [[0.6, 0.4], [0.3, 0.7], [1.0, 0.0], [0.5, 0.5], [0.2, 0.8]],   # A
        [[0.2, 0.8], [0.9, 0.1], [0.8, 0.2], [0.5, 0.5], [0.4, 0.6]],   # B
    ])
    ok = np.array([[True, False]] * 3 + [[False, False]] + [[True, False]])
    fit = fit_weights(shares, ok)
    # p2 is won by every weighting (free); p3 has no correct answer and p4 loses under every one;
    # p0 needs w_A > 3/4 and p1 w_A < 2/3, so one of the two contested problems is solved.
    assert (fit.solved, fit.free, fit.contested) == (2, 1, 2)
    assert _solved(shares, ok, fit.weights) == 2 and fit.weights.sum() == pytest.approx(1.0)
    easy = fit_weights(shares[:, 2:4], ok[2:4])
    assert easy.weights.tolist() == [0.5, 0.5] and (easy.solved, easy.free, easy.contested) == (1, 1, 0)


def _fixed_votes():
    """Every model names one answer per problem: A is right on p0 and p2, B on p1 and silent on p2."""
    answers = np.array([[[0, 0], [1, 1], [0, 0]], [[1, 1], [0, 0], [-1, -1]]])
    tokens = np.where(np.arange(2)[:, None, None] == 0, 10.0, 20.0) * np.ones((2, 3, 2))
    return EnsembleData(("A", "B"), ("p0", "p1", "p2"), answers, tokens, np.full((2, 3), 2),
                        np.array([[True, False]] * 3))


def test_evaluate_replays_the_weighted_vote_and_each_model_with_their_tokens():
    data = _fixed_votes()
    res = evaluate(data, np.tile([0.7, 0.3], (3, 1)), [1, 2], orderings=3, bootstrap=200)
    for n in (1, 2):
        assert {s: v[0] for s, v in res.acc[n].items()} == pytest.approx({"ensemble": 2 / 3, "A": 2 / 3, "B": 1 / 3})
        assert {s: v[0] for s, v in res.gap[n].items()} == pytest.approx({"A": 0.0, "B": 1 / 3})
        assert res.tokens[n] == pytest.approx({"ensemble": 30.0 * n, "A": 10.0 * n, "B": 20.0 * n})
        assert all(lo <= mean <= hi for mean, lo, hi in res.acc[n].values())
    # A model with weight 0 is never sampled, so its tokens do not count.
    alone = evaluate(data, np.tile([1.0, 0.0], (3, 1)), [2], orderings=2, bootstrap=50)
    assert alone.tokens[2]["ensemble"] == 20.0 and alone.acc[2]["ensemble"][0] == pytest.approx(2 / 3)
    out = res.to_json()
    assert out["weights_mean"] == pytest.approx([0.7, 0.3]) and out["ns"] == [1, 2] and set(out["acc"]) == {"1", "2"}
    with pytest.raises(EnsembleError, match=r"^n=3 samples per model exceeds the fewest a model has on a problem \(2\)$"):
        evaluate(data, np.tile([0.7, 0.3], (3, 1)), [3])
    with pytest.raises(EnsembleError, match="^need at least 2 folds and as many problems; got 4 folds, 3 problems$"):
        cross_fit(data, folds=4)
