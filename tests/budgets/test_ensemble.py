"""Multi-model vote ensembles: MILP weights, cross-fitting that never reads a held-out grade, the
replayed weighted vote, and `tts budget ensemble`."""

from __future__ import annotations

import gzip
import itertools
import json
import logging
import warnings

import numpy as np
import pytest
from typer.testing import CliRunner

from tts.benchmarks.pool import ModelPool, load_pool
from tts.budgets.ensemble import EnsembleData, EnsembleError, _boot_iv, align, cross_fit, evaluate, fit_weights
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
    np.testing.assert_allclose(data.shares(np.array([1])), [[[1 / 2, 0]], [[1 / 2, 1 / 2]]])
    # A third model without p2 leaves p1 alone; an answer is right when any model's sample of it was
    # graded right (C's grader says "7" is wrong, A's that it is right).
    c = _model_pool("C", ["p3", "p1"], [("1",), ("7",)], [[0], [0]], [[1], [0]], [[1], [1]], [[1], [1]])
    three = align([a, b, c])
    assert three.problem_ids == ("p1",) and three.answer_ok.tolist() == [[True, False]]
    np.testing.assert_allclose(three.shares()[2], [[1.0, 0.0]])  # C's one sample
    with pytest.raises(EnsembleError, match="^the models share no problem id; an ensemble votes on the same problems$"):
        align([a, _model_pool("C", ["q"], [("1",)], [[0]], [[1]], [[1]], [[1]])])


def test_fit_weights_counts_free_hopeless_and_contested_problems():
    # Two models, two answers (the first correct unless said): (shares of A, shares of B).
    shares = np.array([
        [[0.6, 0.4], [0.3, 0.7], [1.0, 0.0], [0.5, 0.5], [0.2, 0.8], [1.0, 0.0], [0.0, 0.0]],   # A
        [[0.2, 0.8], [0.9, 0.1], [0.8, 0.2], [0.5, 0.5], [0.4, 0.6], [0.0, 0.0], [0.0, 0.0]],   # B
    ])
    ok = np.array([[True, False]] * 3 + [[False, False]] + [[True, False]] * 2 + [[False, False]])
    fit = fit_weights(shares, ok)
    # p2 is won by every weighting, and so is p5, where no model names a wrong answer (free); p3 and
    # p6 (no answer at all) have no correct answer and p4 loses under every weighting; p0 needs
    # w_A > 3/4 and p1 w_A < 2/3, so one of the two contested problems is solved.
    assert (fit.solved, fit.free, fit.contested) == (3, 2, 2)
    assert _solved(shares[:, :5], ok[:5], fit.weights) == 2 and fit.weights.sum() == pytest.approx(1.0)
    as_ints = fit_weights(shares, ok.astype(int))  # grades given as 0/1
    assert (as_ints.solved, as_ints.free, as_ints.contested) == (3, 2, 2)
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


def test_a_model_with_fewer_samples_on_a_problem_draws_only_its_real_ones():
    # A has one real sample on p0 (slot 1 is padding); B has two. n = 1 never draws A's padding.
    answers = np.array([[[0, -1], [0, 0]], [[1, 1], [0, 0]]])
    data = EnsembleData(("A", "B"), ("p0", "p1"), answers, np.array([[[5, np.nan], [5, 5]], [[7, 7], [7, 7]]]),
                        np.array([[1, 2], [2, 2]]), np.array([[True, False], [True, False]]))
    res = evaluate(data, np.tile([0.5, 0.5], (2, 1)), [1], orderings=8, bootstrap=20)
    assert res.acc[1]["A"][0] == 1.0 and res.acc[1]["B"][0] == 0.5
    assert res.tokens[1] == pytest.approx({"ensemble": 12.0, "A": 5.0, "B": 7.0})


def test_bootstrap_intervals_are_the_2_5_and_97_5_percentiles_of_the_resampled_means():
    per_problem = np.random.default_rng(1).random(30)
    boot = np.random.default_rng(0).integers(0, 30, size=(400, 30))
    means = per_problem[boot].mean(axis=1)
    assert _boot_iv(per_problem, boot) == (per_problem.mean(), float(np.percentile(means, 2.5)),
                                           float(np.percentile(means, 97.5)))
    # evaluate resamples every problem, the first one too: one right problem of five can show up.
    answers = np.zeros((2, 5, 1), dtype=int)
    data = EnsembleData(("A", "B"), tuple("abcde"), answers, np.ones((2, 5, 1)), np.ones((2, 5), int),
                        np.array([[True]] + [[False]] * 4))
    mean, lo, hi = evaluate(data, np.tile([0.5, 0.5], (5, 1)), [1], orderings=1).acc[1]["A"]
    assert (mean, lo) == (0.2, 0.0) and hi >= 0.4


def _coin_flips(problems=10):
    """A names a right (0) and a wrong (1) answer on every problem; B names only 1 on even problems
    and only 0 on odd ones, so the ensemble at weights 1/2 ties where B disagrees with A's draw."""
    answers = np.zeros((2, problems, 2), dtype=int)
    answers[0] = [0, 1]
    answers[1] = (np.arange(problems) % 2 == 0)[:, None].astype(int)
    return EnsembleData(("A", "B"), tuple(f"p{i}" for i in range(problems)), answers, np.ones((2, problems, 2)),
                        np.full((2, problems), 2), np.tile([True, False], (problems, 1)))


def test_orderings_are_seeded_random_draws_and_ties_break_at_random():
    data = _coin_flips(40)
    w = np.tile([0.5, 0.5], (40, 1))
    res = evaluate(data, w, [1])
    # n = 1: A is right when its draw is the right answer, half the time over 20 seeded orderings.
    assert 0.3 < res.acc[1]["A"][0] < 0.7
    # Where B and A's draw disagree the weighted vote ties, and a tie is won by either answer.
    assert 0.3 < res.acc[1]["ensemble"][0] < 0.7 and res.acc[1]["ensemble"][0] != res.acc[1]["A"][0]
    assert res.to_json() == evaluate(data, w, [1], orderings=20, seed=0, bootstrap=2000).to_json()
    for other in (dict(orderings=21), dict(seed=1), dict(bootstrap=2001)):
        assert res.to_json() != evaluate(data, w, [1], **other).to_json(), other
    assert res.to_json()["tokens"] == {"1": {"ensemble": 2.0, "A": 1.0, "B": 1.0}}
    assert res.gap[1]["A"][0] == pytest.approx(res.acc[1]["ensemble"][0] - res.acc[1]["A"][0])
    assert res.gap[1]["B"][0] == pytest.approx(res.acc[1]["ensemble"][0] - res.acc[1]["B"][0])
    for s, (mean, lo, hi) in [*res.acc[1].items(), *res.gap[1].items()]:
        assert lo < mean < hi, s  # every system is right on some problems and wrong on others


def test_a_problem_no_model_answers_is_wrong_whatever_answer_id_is_right():
    answers = np.full((2, 1, 2), -1)
    data = EnsembleData(("A", "B"), ("p0",), answers, np.ones((2, 1, 2)), np.full((2, 1), 2),
                        np.array([[False, True]]))
    res = evaluate(data, np.array([[0.5, 0.5]]), [2], orderings=2, bootstrap=10)
    assert {s: v[0] for s, v in res.acc[2].items()} == {"ensemble": 0.0, "A": 0.0, "B": 0.0}


def test_cross_fit_logs_each_folds_weights_and_passes_the_margin_on(caplog):
    data = _coin_flips(12)
    with caplog.at_level(logging.INFO, logger="tts.budgets.ensemble"):
        weights, fold = cross_fit(data, folds=3)
    shares = data.shares()
    want = []
    for f in range(3):
        fit = fit_weights(shares[:, fold != f], data.answer_ok[fold != f])
        np.testing.assert_allclose(weights[fold == f], np.tile(fit.weights, ((fold == f).sum(), 1)))
        want.append(f"fold {f}: weights {np.round(fit.weights, 3)} (dev solved {fit.solved} of 8)")
    assert [r.getMessage() for r in caplog.records] == want
    # Defaults: 5 folds from seed 0; 2 folds and as many folds as problems are allowed.
    assert np.array_equal(cross_fit(data)[1], cross_fit(data, folds=5, seed=0)[1])
    assert sorted(set(cross_fit(data)[1].tolist())) == [0, 1, 2, 3, 4]
    assert not np.array_equal(cross_fit(data)[1], cross_fit(data, seed=1)[1])
    assert sorted(set(cross_fit(data, folds=2)[1].tolist())) == [0, 1]
    assert sorted(cross_fit(data, folds=12)[1].tolist()) == list(range(12))
    # A margin no weighting can reach leaves every problem hopeless: uniform weights.
    assert np.all(cross_fit(data, folds=3, margin=1.5)[0] == 0.5) and not np.all(weights == 0.5)


def test_the_margin_is_inclusive_and_the_program_is_silent():
    # Margin 0.5: p0's correct answer leads by exactly 0.5 under both models (free); p1 only under A
    # (contested, solved by w_A = 1, where the weighted lead is exactly the margin).
    shares = np.array([[[0.75, 0.25], [0.75, 0.25]], [[0.75, 0.25], [0.5, 0.5]]])
    ok = np.array([[True, False], [True, False]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no unknown option or other warning from the solver call
        fit = fit_weights(shares, ok, margin=0.5)
    assert (fit.solved, fit.free, fit.contested) == (2, 1, 1) and fit.weights.tolist() == [1.0, 0.0]


def test_fit_weights_prints_nothing_and_says_when_the_solver_found_no_solution(capfd):
    shares = np.array([[[0.6, 0.4], [0.3, 0.7]], [[0.2, 0.8], [0.9, 0.1]]])
    ok = np.array([[True, False], [True, False]])
    fit_weights(shares, ok)
    assert capfd.readouterr().out == ""
    with pytest.raises(EnsembleError, match=r"^the weight program found no solution \(.+\); pass more dev problems "
                                            "or a smaller margin$"):
        fit_weights(shares, ok, time_limit=0.0)


def test_what_the_solver_writes_to_stdout_never_reaches_it(capfd, monkeypatch):
    """HiGHS writes some lines from C++ to descriptor 1 whatever ``disp`` says (seen on the GPQA
    pool: they came before `tts budget ensemble --json`'s JSON and broke it). A solver that does so
    here writes into nothing; the fit is unchanged and stdout works after it."""
    import os

    import tts.budgets.ensemble as ensemble

    real = ensemble.milp

    def noisy(*args, **kwargs):
        os.write(1, b"HighsMipSolverData::transformNewIntegerFeasibleSolution tmpSolver.run();\n")
        return real(*args, **kwargs)

    monkeypatch.setattr(ensemble, "milp", noisy)
    shares = np.array([[[0.6, 0.4], [0.3, 0.7]], [[0.2, 0.8], [0.9, 0.1]]])
    ok = np.array([[True, False], [True, False]])
    fit = fit_weights(shares, ok)
    print("after")
    assert capfd.readouterr().out == "after\n"
    assert fit.weights.tolist() == fit_weights(shares, ok).weights.tolist()


def test_a_problem_left_unsolved_never_limits_the_weights_even_at_a_weight_of_one():
    # Margin 0.25. p0: A names only a wrong answer, B only the right one. p1 and p2: A's right
    # answer leads by exactly the margin, B names only a wrong one, so solving them needs w_A = 1.
    # The best weighting gives up p0 (its weighted lead is then -1, the lowest a lead can be): the
    # program's switch for an unsolved problem must relax its row by 1 + margin, enough for that.
    shares = np.array([
        [[0.0, 1.0], [0.625, 0.375], [0.625, 0.375]],  # model A
        [[1.0, 0.0], [0.0, 1.0], [0.0, 1.0]],          # model B
    ])
    ok = np.array([[True, False]] * 3)
    fit = fit_weights(shares, ok, margin=0.25)
    assert (fit.solved, fit.free, fit.contested) == (2, 0, 3)
    assert fit.weights.tolist() == [1.0, 0.0] and _solved(shares, ok, fit.weights) == 2


def test_each_folds_weights_are_logged_to_three_decimals(caplog):
    # Three models that all name only the right answer: nothing is contested, so every fold gets
    # uniform weights, 1/3 each, which the log line shows to three decimals.
    problems = 6
    data = EnsembleData(("A", "B", "C"), tuple(f"p{i}" for i in range(problems)),
                        np.zeros((3, problems, 2), dtype=int), np.ones((3, problems, 2)),
                        np.full((3, problems), 2), np.tile([True, False], (problems, 1)))
    with caplog.at_level(logging.INFO, logger="tts.budgets.ensemble"):
        weights, _ = cross_fit(data, folds=2)
    assert np.allclose(weights, 1 / 3)
    assert [r.getMessage() for r in caplog.records] == [
        f"fold {f}: weights [0.333 0.333 0.333] (dev solved 3 of 3)" for f in range(2)]
