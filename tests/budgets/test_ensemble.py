"""Multi-model vote ensembles: MILP weights, cross-fitting that never reads a held-out grade, the
replayed weighted vote, and `tts budget ensemble`."""

from __future__ import annotations

import gzip
import itertools
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from tts.benchmarks.pool import load_pool
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
