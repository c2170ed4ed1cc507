"""Vectorised pool estimators: published figures, direct counts from the file, the loop reference,
the combinatorial formulas, intervals and error messages."""

from __future__ import annotations

import gzip
import itertools
import json
import math
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest

from tts.benchmarks.pool import load_pool
from tts.eval import estimators as est
from tts.benchmarks import pool_draws

QWEN_MODEL = "qwen2.5-math-instruct"


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _row(pid, idx, answer, correct, score=None, model="m", tokens=10):
    return {"problem_id": pid, "model": model, "sample_idx": idx, "answer": answer, "correct": correct,
            "num_tokens": tokens, "score": score}


def _random_pool(tmp_path: Path, seed: int, problems: int = 30, grade=lambda a, s: a == 0):
    """Abstentions (without scores), answers seen once, repeated answers, tied scores and uneven
    sample counts; ``grade(answer, sample)`` says which answered samples are correct (default x0)."""
    rng = np.random.default_rng(seed)
    rows = []
    for p in range(problems):
        n = 10 if p % 5 else 7
        k = int(rng.integers(1, 6))
        for s in range(n):
            a = int(rng.integers(-1, k))
            ok = None if a < 0 else bool(grade(a, s))
            score = None if a < 0 else float(rng.integers(1, 5)) / 4  # abstentions carry no score
            rows.append(_row(f"p{p}", s, None if a < 0 else f"x{a}", ok, score))
    return load_pool(_write(tmp_path / f"pool{seed}-{len(list(tmp_path.iterdir()))}.jsonl", rows))["m"]


@pytest.fixture(scope="module")
def qwen(shared_data):
    return load_pool(shared_data / "pools" / "math_qwen25_rm8.jsonl.gz")[QWEN_MODEL]


@pytest.fixture(scope="module")
def math500(shared_data):
    path = shared_data / "pools" / "math500_reasoning_models.jsonl.gz"
    return path, load_pool(path)


# --- published and directly counted figures -------------------------------------------------------


def test_qwen_rm_example_gives_the_published_figures(qwen):
    # Qwen2.5-Math's own example: mean 0.91, maj@8 0.93, RM@8 0.94, pass@8 0.96.
    curves = est.pool_curves(qwen, ("pass", "vote", "best_of_n"))
    assert curves["pass"].at(1)[0] == pytest.approx(0.91, abs=1e-12)
    assert curves["pass"].at(8)[0] == pytest.approx(0.96, abs=1e-12)
    assert curves["best_of_n"].at(8)[0] == pytest.approx(0.94, abs=1e-12)
    maj8 = curves["vote"].at(8)[0]
    # Three problems split 4-4 (or 2-2) between a right and a wrong answer: ties share here
    # (0.925), Qwen's Counter.most_common takes the first sample's answer (0.93). Within rounding.
    assert abs(maj8 - 0.93) <= 0.005 + 1e-12
    assert maj8 == pytest.approx(0.925, abs=1e-12)
    for c in curves.values():
        assert np.all(c.lo <= c.mean) and np.all(c.mean <= c.hi)


def _direct_maj_at_all(path: Path) -> dict[str, float]:
    """maj@N straight from the file: per (model, problem), count each answer string; the answers
    with the most votes share the credit; an answer's grade is the mean `correct` of its rows."""
    samples: dict[tuple[str, str], list[tuple[str | None, bool]]] = defaultdict(list)
    with gzip.open(path, "rt") as fh:
        for line in fh:
            r = json.loads(line)
            samples[r["model"], r["problem_id"]].append((r["answer"], bool(r["correct"])))
    per_model: dict[str, list[float]] = defaultdict(list)
    for (model, _), rows in samples.items():
        votes = Counter(a for a, _ in rows if a is not None)
        if not votes:
            per_model[model].append(0.0)
            continue
        top = max(votes.values())
        tied = [a for a, v in votes.items() if v == top]
        grade = {a: sum(ok for b, ok in rows if b == a) / votes[a] for a in tied}
        per_model[model].append(sum(grade.values()) / len(tied))
    return {m: sum(v) / len(v) for m, v in per_model.items()}


def test_maj_at_80_equals_the_count_from_the_file(math500):
    path, pool = math500
    direct = _direct_maj_at_all(path)
    assert set(direct) == set(pool.models) and len(direct) == 7
    for model, mp in pool.by_model.items():
        assert mp.answers.shape == (500, 80)
        curve = est.majority_vote(mp, [80], draws=3)  # every draw of 80 is the whole pool
        assert curve.at(80)[0] == pytest.approx(direct[model], abs=1e-12), model
        lo, hi = curve.lo[0], curve.hi[0]
        assert lo <= curve.mean[0] <= hi and hi - lo < 0.1


# --- vectorised == the plain loop --------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1])
def test_vectorised_outcomes_equal_the_loop_for_the_same_draws(tmp_path, seed):
    mp = _random_pool(tmp_path, seed)
    order = pool_draws.draw_orders(mp.counts, 7, 60, seed)
    w = est.vote_weights(mp, "sigmoid")  # non-dyadic floats: ties only where sums really tie
    cases = [("vote", None, pool_draws.vote_outcomes(mp, order)),
             ("weighted_vote", w, pool_draws.vote_outcomes(mp, order, w)),
             ("best_of_n", None, pool_draws.best_score_outcomes(mp, order))]
    for rule, extra, vec in cases:
        ref = pool_draws.loop_outcomes(mp, order, rule, extra)
        assert np.array_equal(ref, vec), rule
    # Selected prefixes and the summed form agree with the full per-draw table.
    full = pool_draws.vote_outcomes(mp, order)
    picked = pool_draws.vote_outcomes(mp, order, ns=[2, 5], per_draw=False)
    np.testing.assert_allclose(picked, full[[1, 4]].sum(axis=1).T, atol=1e-12)
    # A pool that grades one answer string both ways: grades are shares (float sums, same values).
    mixed = _random_pool(tmp_path, seed, grade=lambda a, s: a == 0 or (a == 1 and s % 2 == 0))
    assert not np.all(np.isin(pool_draws._slot_tables(mixed)[1], (0.0, 1.0)))  # some share is 1/2, 1/3, ...
    for rule, extra in (("vote", None), ("weighted_vote", est.vote_weights(mixed, "sigmoid"))):
        np.testing.assert_allclose(pool_draws.vote_outcomes(mixed, order, extra),
                                   pool_draws.loop_outcomes(mixed, order, rule, extra), atol=1e-12)
    # The curve is the mean over the same draws.
    curve = est.majority_vote(mp, range(1, 8), order=order)
    np.testing.assert_allclose(curve.per_problem, full.mean(axis=1).T, atol=1e-12)


def test_votes_never_read_correct(tmp_path):
    # Flipping every answered sample's grade flips the tie-shared outcome, draw by draw: the
    # choice itself did not move.
    mp = _random_pool(tmp_path, 3)
    flipped = _random_pool(tmp_path, 3, grade=lambda a, s: a != 0)
    answered = mp.mask & (mp.answers >= 0)
    np.testing.assert_array_equal(flipped.correct, answered & ~mp.correct)
    order = pool_draws.draw_orders(mp.counts, 7, 40, 3)
    # 1 where some answered sample is among the first t+1 drawn.
    some = np.logical_or.accumulate(answered[np.arange(mp.n_problems), order], axis=0)
    for fn in (pool_draws.vote_outcomes, pool_draws.best_score_outcomes):
        np.testing.assert_allclose(fn(mp, order) + fn(flipped, order), some, atol=1e-12)


# --- exact estimators ---------------------------------------------------------------------------


def test_pass_at_k_is_the_combinatorial_formula(tmp_path):
    mp = _random_pool(tmp_path, 4)
    curve = est.pass_at_k(mp, range(1, 8))
    for p in range(mp.n_problems):
        n_all, c = int(mp.counts[p]), int(mp.correct[p].sum())
        for j, k in enumerate(range(1, 8)):
            expected = 1 - math.comb(n_all - c, k) / math.comb(n_all, k)
            assert curve.per_problem[p, j] == pytest.approx(expected, abs=1e-12)
    assert curve.mean[-1] == pytest.approx(np.mean(curve.per_problem[:, -1]))


def _enumerate(mp, n: int, rule: str) -> np.ndarray:
    """Expected outcome over every n-subset, by brute force (the tie-sharing rules)."""
    out = []
    for p in range(mp.n_problems):
        vals = []
        for sub in itertools.combinations(range(int(mp.counts[p])), n):
            order = np.array(sub, dtype=np.uint8)[:, None, None]
            vals.append(pool_draws.loop_outcomes(mp.subset([p]), order, rule)[-1, 0, 0])
        out.append(np.mean(vals))
    return np.array(out)


def test_exact_best_of_n_equals_enumeration_and_bootstrap_converges(tmp_path):
    mp = _random_pool(tmp_path, 5, problems=8)
    ns = [1, 3, 6]
    exact = est.best_of_n(mp, ns)
    for j, n in enumerate(ns):
        np.testing.assert_allclose(exact.per_problem[:, j], _enumerate(mp, n, "best_of_n"), atol=1e-12)
    boot = est.best_of_n(mp, ns, method="bootstrap", draws=4000, seed=1)
    np.testing.assert_allclose(boot.mean, exact.mean, atol=0.02)
    maj = est.majority_vote(mp, [3], draws=4000, seed=2)
    assert maj.mean[0] == pytest.approx(_enumerate(mp, 3, "vote").mean(), abs=0.02)


# --- intervals ---------------------------------------------------------------------------------------


def test_intervals_contain_the_mean_and_shrink_with_more_problems(qwen):
    small, full = qwen.subset(range(25)), qwen
    for fn in (est.pass_at_k, est.majority_vote, lambda mp: est.best_of_n(mp)):
        a, b = fn(small), fn(full)
        for c in (a, b):
            assert np.all(c.lo <= c.mean) and np.all(c.mean <= c.hi)
            assert np.all((c.lo >= 0) & (c.hi <= 1))
        assert np.mean(b.hi - b.lo) < np.mean(a.hi - a.lo)


# --- errors ------------------------------------------------------------------------------------------


def _one_line(exc: pytest.ExceptionInfo) -> str:
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


def test_missing_field_and_duplicate_sample_are_clear_errors(tmp_path):
    bad = _row("p", 0, "1", True)
    del bad["score"]
    with pytest.raises(ValueError, match="missing field") as exc:
        load_pool(_write(tmp_path / "missing.jsonl", [bad]))
    assert "score" in _one_line(exc) and "null" in _one_line(exc)
    dup = [_row("p", 0, "1", True), _row("p", 0, "2", False)]
    with pytest.raises(ValueError, match="duplicate sample") as exc:
        load_pool(_write(tmp_path / "dup.jsonl", dup))
    assert "sample_idx" in _one_line(exc)


def test_estimator_inputs_are_checked(tmp_path):
    rows = [_row("p", i, "1", True, score=None) for i in range(4)] + [_row("q", i, "2", False) for i in range(3)]
    mp = load_pool(_write(tmp_path / "pool.jsonl", rows))["m"]
    with pytest.raises(ValueError, match="no finite score") as exc:
        est.best_of_n(mp)
    assert "scores=" in _one_line(exc)
    with pytest.raises(ValueError, match="exceeds the 3 samples") as exc:
        est.majority_vote(mp, [4])
    assert "ns up to 3" in _one_line(exc)
    with pytest.raises(ValueError, match="weights >= 0, but .* negative") as exc:
        est.weighted_vote(mp, scores=np.full(mp.answers.shape, -1.0))
    assert "weighting='exp'" in _one_line(exc)
    # A verifier that rejects every sample (scores 0): a plain vote, as the live weighted_vote falls back to.
    zero = est.weighted_vote(mp, [1, 3], scores=np.zeros(mp.answers.shape), draws=50)
    assert zero.at(3)[0] == pytest.approx(est.majority_vote(mp, [3], draws=50).at(3)[0])
    with pytest.raises(ValueError, match="order has shape"):
        est.majority_vote(mp, [2], order=pool_draws.draw_orders(np.array([3]), 2, 5))
    assert est.majority_vote(mp, [3], draws=5).at(3)[0] == pytest.approx(0.5)


def test_the_budget_replays_first_seen_tie_rule_has_the_estimators_expectation(tmp_path):
    # `tts budget simulate` replays one ordering at a time and breaks a tied vote by the answer seen
    # first, as a live run does; the sweep's estimators count the share of correct answers among
    # the tied ones. Over random orderings the first-seen answer among equally voted ones is
    # uniform, so the two rules agree in expectation: the replay needs no rule of its own.
    from tts.budgets.replay.prefix import random_orders, replay_prefixes

    pool = _random_pool(tmp_path, seed=3, problems=40)
    full = pool.subset([p for p in range(pool.n_problems) if pool.counts[p] == 10])
    ns = np.arange(1, 11)
    curve = est.majority_vote(full, ns, draws=4000, seed=1)
    orders = random_orders(full.mask, 4000, np.random.default_rng(2))
    replayed = np.mean([replay_prefixes(full, o).vote_correct for o in orders], axis=0)  # (problems, 10)
    assert replayed.mean(axis=0) == pytest.approx(curve.mean, abs=0.01)
    assert replayed[:, -1] == pytest.approx(curve.per_problem[:, -1], abs=0.04)  # each problem's full-pool vote
    tied = np.flatnonzero((curve.per_problem[:, -1] > 0.01) & (curve.per_problem[:, -1] < 0.99))
    assert len(tied) >= 2  # the pool has problems whose full vote is a tie between a right and a wrong answer


def _scored_pool(tmp_path: Path, seed: int = 6):
    """12 problems of 6 samples, every sample answered and scored (so the score rules run)."""
    rng = np.random.default_rng(seed)
    rows = [_row(f"p{p}", s, f"x{a}", bool(a == 0), float(rng.integers(1, 5)) / 4)
            for p in range(12) for s, a in enumerate(rng.integers(0, 3, size=6))]
    mp = load_pool(_write(tmp_path / f"scored{seed}.jsonl", rows))["m"]
    assert mp.has_scores
    return mp


def test_pool_curves_are_each_rules_own_estimator_on_shared_draws(tmp_path):
    """What a sweep draws: every rule's curve as its own estimator gives it (the votes on one set of
    draws: the same ``seed`` gives the same draws), labelled with its rule and method."""
    mp = _scored_pool(tmp_path)
    ns = [1, 2, 5]
    curves = est.pool_curves(mp, ns=ns, draws=300, seed=3)
    assert list(curves) == list(est.RULES)
    expected = {"pass": est.pass_at_k(mp, ns, seed=3), "vote": est.majority_vote(mp, ns, draws=300, seed=3),
                "best_of_n": est.best_of_n(mp, ns, seed=3),
                "weighted_vote": est.weighted_vote(mp, ns, draws=300, seed=3)}
    for rule, curve in curves.items():
        want = expected[rule]
        assert (curve.rule, curve.method, curve.draws) == (want.rule, want.method, want.draws)
        assert curve.ns.tolist() == ns
        np.testing.assert_array_equal(curve.per_problem, want.per_problem)
        np.testing.assert_array_equal(curve.lo, want.lo)
        np.testing.assert_array_equal(curve.hi, want.hi)
    assert [(c.rule, c.method, c.draws) for c in curves.values()] == [
        ("pass", "exact", 0), ("vote", "bootstrap", 300), ("best_of_n", "exact", 0),
        ("weighted_vote", "bootstrap", 300)]
    votes_only = est.pool_curves(mp, rules=("vote",), ns=ns, draws=300, seed=3)
    np.testing.assert_array_equal(votes_only["vote"].per_problem, curves["vote"].per_problem)
    rank = est.pool_curves(mp, rules=("weighted_vote",), ns=ns, draws=300, seed=3, weighting="exp")
    np.testing.assert_array_equal(rank["weighted_vote"].per_problem,
                                  est.weighted_vote(mp, ns, weighting="exp", draws=300, seed=3).per_problem)
    with pytest.raises(ValueError, match=r"^unknown rule 'best'; use one of pass, vote, best_of_n, weighted_vote$"):
        est.pool_curves(mp, rules=("best",), ns=ns)


def test_pool_curves_skip_score_rules_without_scores_unless_given(tmp_path):
    rows = [_row(f"p{p}", s, f"x{s % 2}", s % 2 == 0) for p in range(4) for s in range(4)]
    mp = load_pool(_write(tmp_path / "unscored.jsonl", rows))["m"]
    assert list(est.pool_curves(mp, ns=[1, 3], draws=50)) == ["pass", "vote"]
    scores = np.tile(np.array([0.9, 0.1, 0.8, 0.2]), (4, 1))
    given = est.pool_curves(mp, ns=[1, 3], draws=50, scores=scores)
    assert list(given) == list(est.RULES)
    assert given["best_of_n"].mean[-1] == 1.0  # the top score, 0.9, is on a correct sample


def test_the_interval_is_the_95_percent_percentile_bootstrap_over_problems_per_column():
    rng = np.random.default_rng(0)
    per_problem = rng.random((40, 3))
    lo, hi = est.problem_interval(per_problem)
    boot = est._resample_counts(40, 1000, 0) @ per_problem / 40  # the resamples: problems drawn with replacement
    want_lo, want_hi = np.percentile(boot, [2.5, 97.5], axis=0)
    np.testing.assert_allclose(lo, want_lo, rtol=1e-12)
    np.testing.assert_allclose(hi, want_hi, rtol=1e-12)
    for j in range(3):  # each column on its own
        assert est.problem_interval(per_problem[:, j]) == (pytest.approx(lo[j]), pytest.approx(hi[j]))
    fewer = est.problem_interval(per_problem, n_boot=20, seed=0)
    assert not np.array_equal(fewer[0], lo)
    other = est.problem_interval(per_problem, seed=1)
    assert not np.array_equal(other[0], lo)


def test_curves_are_reproducible_labelled_and_use_the_default_draws(tmp_path):
    """Every estimator's defaults: seed 0 (the same curve, interval included, run after run) and
    1000 draws for the bootstrapped ones; a given ``order`` or ``scores`` is the one used."""
    mp = _scored_pool(tmp_path, seed=7)
    ns = [1, 3]
    for make in (lambda **kw: est.pass_at_k(mp, ns, **kw), lambda **kw: est.majority_vote(mp, ns, **kw),
                 lambda **kw: est.weighted_vote(mp, ns, **kw), lambda **kw: est.best_of_n(mp, ns, **kw),
                 lambda **kw: est.best_of_n(mp, ns, method="bootstrap", **kw)):
        a, b = make(), make(seed=0)
        np.testing.assert_array_equal(a.per_problem, b.per_problem)
        np.testing.assert_array_equal(a.lo, b.lo)
        np.testing.assert_array_equal(a.hi, b.hi)
        assert a.draws in (0, 1000)
    boot = est.best_of_n(mp, ns, method="bootstrap", draws=200)
    assert (boot.rule, boot.method, boot.draws, boot.ns.tolist()) == ("best_of_n", "bootstrap", 200, ns)
    assert est.pool_curves(mp, rules=("vote",), ns=ns)["vote"].draws == 1000
    for rule, curve in est.pool_curves(mp, ns=ns, draws=50).items():  # seed 0 there too
        np.testing.assert_array_equal(curve.lo, est.pool_curves(mp, ns=ns, draws=50, seed=0)[rule].lo)
    order = pool_draws.draw_orders(mp.counts, 3, 200, 5)
    np.testing.assert_array_equal(est.best_of_n(mp, ns, method="bootstrap", order=order).per_problem,
                                  est.best_of_n(mp, ns, method="bootstrap", draws=200, seed=5).per_problem)
    reversed_scores = 1.0 - pool_draws.sample_scores(mp, None)
    assert not np.array_equal(est.best_of_n(mp, ns, method="bootstrap", draws=200, scores=reversed_scores).per_problem,
                              boot.per_problem)
    with pytest.raises(ValueError, match=r"^unknown method 'sampled'; use 'exact' or 'bootstrap'$"):
        est.best_of_n(mp, ns, method="sampled")


def _bootstrap_by_hand(per_problem: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The 95% percentile bootstrap over problems, from a fresh generator of ``seed`` (not the
    estimators' cached resamples), widened to contain the mean."""
    p = len(per_problem)
    counts = np.random.default_rng(seed).multinomial(p, np.full(p, 1.0 / p), size=1000)
    lo, hi = np.percentile(counts @ per_problem / p, [2.5, 97.5], axis=0)
    mean = per_problem.mean(axis=0)
    return np.minimum(lo, mean), np.maximum(hi, mean)


@pytest.mark.parametrize("seed", [0, 5])
def test_every_curves_interval_is_the_bootstrap_of_the_seed_it_was_given(tmp_path, seed):
    mp = _scored_pool(tmp_path)
    ns = [1, 2, 4]
    curves = [est.pass_at_k(mp, ns, seed=seed), est.majority_vote(mp, ns, draws=100, seed=seed),
              est.weighted_vote(mp, ns, draws=100, seed=seed), est.best_of_n(mp, ns, seed=seed),
              est.best_of_n(mp, ns, method="bootstrap", draws=100, seed=seed),
              *est.pool_curves(mp, ns=ns, draws=100, seed=seed).values()]
    for curve in curves:
        lo, hi = _bootstrap_by_hand(curve.per_problem, seed)
        np.testing.assert_allclose(curve.lo, lo, rtol=1e-12, err_msg=curve.rule)
        np.testing.assert_allclose(curve.hi, hi, rtol=1e-12, err_msg=curve.rule)


def test_each_columns_interval_contains_that_columns_mean():
    # A column every problem gets right and one none does: each interval is its own column's point.
    per_problem = np.column_stack([np.ones(20), np.zeros(20)])
    lo, hi = est.problem_interval(per_problem)
    assert lo.tolist() == [1.0, 0.0] and hi.tolist() == [1.0, 0.0]


def test_sample_counts_default_to_every_n_the_shortest_problem_allows_and_bad_ones_say_what_to_pass(tmp_path):
    rows = [_row("long", i, "1", True) for i in range(5)] + [_row("short", i, "2", False) for i in range(3)]
    mp = load_pool(_write(tmp_path / "pool.jsonl", rows))["m"]
    assert est.check_ns(mp, None).tolist() == [1, 2, 3]
    assert est.check_ns(mp, [3, 1, 1]).tolist() == [1, 3]  # sorted, unique
    assert est.check_ns(mp, np.array([1.0, 3.0])).dtype == np.int64  # counts index the draws
    for bad in ([0, 2], []):
        with pytest.raises(ValueError) as exc:
            est.check_ns(mp, bad)
        assert str(exc.value) == f"sample counts must be >= 1, got {sorted(set(bad))}; pass ns such as range(1, 4)"
    with pytest.raises(ValueError) as exc:
        est.check_ns(mp, [4])
    assert str(exc.value) == ("n=4 exceeds the 3 samples of problem 'short' of model m; pass ns up to 3 or drop "
                              "short problems with pool.subset()")
    with pytest.raises(ValueError) as exc:  # a subset that kept no problem
        est.check_ns(mp.subset([]), None)
    assert str(exc.value) == "sample counts must be >= 1, got []; pass ns such as range(1, 1)"
    with pytest.raises(KeyError, match=r"n=2 is not on this curve; it has n in \[1, 3\]"):
        est.pass_at_k(mp, [1, 3]).at(2)
