"""The compute-optimal frontier: per-bin choices that pay, gains that are honest, and cross-fitting that holds out."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tts.cli.app import app
from tts.eval.frontier import (
    bin_edges,
    compute_optimal,
    compute_optimal_for_run,
    difficulty_for_run,
    difficulty_from_pool,
    fold_assignment,
)
from tts.eval.sweep import Cell, SweepSpec, read_cells, run_sweep

runner = CliRunner(env={"COLUMNS": "120"})


def _cell(strategy: str, n: int, per_problem: dict[str, float], model: str = "m", tokens: float | None = None,
          seed: int = 0) -> Cell:
    acc = float(np.mean(list(per_problem.values())))
    return Cell(model=model, strategy=strategy, config=f"{strategy}@{n}", n=n, seed=seed, source="test",
                method="exact", problems=len(per_problem), accuracy=acc, accuracy_low=acc, accuracy_high=acc,
                pass_at_n=None, tokens=tokens, prompt_tokens=0.0, flops=None, eflops=None, gpu_seconds=None,
                dollars=None, wall_seconds=0.0, gpu="h100", events={}, per_problem=per_problem)


def _easy_a_hard_b(problems: int = 300, seed: int = 0) -> tuple[list[Cell], dict[str, dict[str, float]]]:
    """Strategy A (self_consistency) wins on easy problems, B (best_of_n) on hard ones; agreement tracks ease."""
    rng = np.random.default_rng(seed)
    ease = rng.random(problems)
    ids = [f"p{i:03d}" for i in range(problems)]
    a = np.clip(np.where(ease > 0.5, 0.95, 0.15) + rng.normal(0, 0.05, problems), 0, 1)
    b = np.clip(np.where(ease > 0.5, 0.75, 0.45) + rng.normal(0, 0.05, problems), 0, 1)
    cells = [_cell("self_consistency", 4, dict(zip(ids, a.tolist()))),
             _cell("best_of_n", 4, dict(zip(ids, b.tolist())))]
    return cells, {"m": dict(zip(ids, ease.tolist()))}


def test_per_bin_choice_beats_the_best_single_strategy_and_picks_a_easy_b_hard():
    cells, difficulty = _easy_a_hard_b()
    (row,) = compute_optimal(cells, difficulty).rows
    assert row.budget == 4 and set(row.candidates) == {"self_consistency@4", "best_of_n@4"}
    assert row.compute_optimal > row.single + 0.05 and row.gain_low > 0.05
    assert len(row.bins) == 5 and sum(b.problems for b in row.bins) == 300
    assert [b.choice for b in row.bins[:2]] == ["self_consistency@4"] * 2  # easiest bins
    assert [b.choice for b in row.bins[-2:]] == ["best_of_n@4"] * 2  # hardest bins
    assert all(b.given == b.problems for b in (row.bins[0], row.bins[-1]))  # every fold agrees there
    assert row.oracle_per_bin >= row.compute_optimal - 0.01  # hindsight is the (unachievable) reference


def test_identical_strategies_gain_nothing_and_the_interval_covers_zero():
    cells, difficulty = _easy_a_hard_b()
    twin = _cell("best_of_n", 4, dict(cells[0].per_problem))
    (row,) = compute_optimal([cells[0], twin], difficulty).rows
    assert row.gain == 0 and row.gain_low == 0 == row.gain_high
    # Two strategies equal in distribution (independent noise per problem): no gain beyond noise.
    rng = np.random.default_rng(1)
    ids = list(difficulty["m"])
    base = rng.random(len(ids))
    noisy = [_cell(s, 4, dict(zip(ids, np.clip(base + rng.normal(0, 0.1, len(ids)), 0, 1).tolist())))
             for s in ("self_consistency", "best_of_n")]
    (row,) = compute_optimal(noisy, difficulty).rows
    assert abs(row.gain) < 0.02 and row.gain_low <= 0 <= row.gain_high


def test_a_problem_never_influences_the_choices_of_its_own_fold():
    cells, difficulty = _easy_a_hard_b()
    (before,) = compute_optimal(cells, difficulty).rows
    ids = sorted(difficulty["m"])
    folds = fold_assignment(ids, 5)
    target = ids[7]
    mine = int(folds[7])
    # Move the problem to the other end of the difficulty scale and flip which strategy solves it.
    hard = {"m": {**difficulty["m"], target: 1.0 - difficulty["m"][target]}}
    flipped = [_cell(c.strategy, c.n, {**c.per_problem, target: float(c.strategy == "best_of_n")}) for c in cells]
    (after,) = compute_optimal(flipped, hard).rows
    assert after.fold_edges[mine] == before.fold_edges[mine]
    assert after.fold_choices[mine] == before.fold_choices[mine]
    assert after.fold_single[mine] == before.fold_single[mine]
    others = [f for f in range(5) if f != mine]
    assert any(after.fold_edges[f] != before.fold_edges[f] for f in others)  # the test can see a change


def test_a_folds_own_problems_never_decide_its_choice():
    """One fold (10 of 50 problems) is solved only by B; the other 40 favour A (0.6 vs 0.45 each).
    Fitted on the other folds, that fold gets A and scores 0 on its own problems; a fit that also saw
    them would choose B there (A 24 vs B 28 over all 50) and score 1."""
    ids = [f"p{i:02d}" for i in range(50)]
    folds = fold_assignment(ids, 5)
    target = 2
    mine = folds == target
    a = {p: 0.0 if m else 0.6 for p, m in zip(ids, mine, strict=True)}
    b = {p: 1.0 if m else 0.45 for p, m in zip(ids, mine, strict=True)}
    difficulty = {"m": {p: (i % 7) / 7 for i, p in enumerate(ids)}}
    cells = [_cell("self_consistency", 4, a), _cell("best_of_n", 4, b)]
    (row,) = compute_optimal(cells, difficulty, bins=1, boot=10).rows
    assert row.fold_single[target] == "self_consistency@4" and row.fold_choices[target] == {0: "self_consistency@4"}
    # every other fold trains on 30 problems of its peers and the 10 of the target fold: B (13.5 + 10 > 18)
    assert [row.fold_single[f] for f in range(5) if f != target] == ["best_of_n@4"] * 4
    assert row.compute_optimal == pytest.approx((40 * 0.45 + 10 * 0.0) / 50)
    assert row.single == pytest.approx(row.compute_optimal) and row.gain == 0


def test_cost_axis_levels_let_every_config_within_the_budget_compete():
    cells, difficulty = _easy_a_hard_b(problems=100)
    ids = list(difficulty["m"])
    cheap = _cell("self_consistency", 1, {p: 0.1 for p in ids}, tokens=100.0)
    priced = [_cell(c.strategy, c.n, c.per_problem, tokens=400.0 if c.strategy == "self_consistency" else 420.0)
              for c in cells]
    rows = compute_optimal([cheap, *priced], difficulty, axis="tokens").rows
    assert [r.budget for r in rows] == [100.0, 400.0, 420.0]
    assert rows[0].candidates == ("self_consistency@1",) and rows[0].gain == 0
    assert rows[1].candidates == ("self_consistency@1", "self_consistency@4")
    assert set(rows[2].candidates) == {"self_consistency@1", "self_consistency@4", "best_of_n@4"}
    assert rows[2].gain > 0.05 and 400 <= rows[2].cost <= 420


def test_bin_edges_give_the_bins_of_a_tie_to_the_other_problems():
    unanimous = np.array([1.0] * 80 + [0.875] * 5 + [0.75] * 5 + [0.5] * 5 + [0.25] * 5)
    from tts.budgets.difficulty import assign_bins

    counts = np.bincount(assign_bins(unanimous, bin_edges(unanimous, 5)))
    assert counts.tolist() == [80, 5, 5, 5, 5]
    spread = np.random.default_rng(0).random(100)
    assert np.bincount(assign_bins(spread, bin_edges(spread, 5))).tolist() == [20] * 5


def _write_pool(path: Path, flip: bool = False) -> Path:
    """Two strategies' worth of scored samples; problems differ in how often the model agrees with itself."""
    rng = np.random.default_rng(3)
    with path.open("w") as fh:
        for p in range(60):
            skill = 0.2 + 0.75 * p / 59
            for s in range(8):
                right = bool(rng.random() < skill)
                answer = "42" if right else str(rng.integers(1, 4))
                fh.write(json.dumps({"problem_id": f"q{p}", "model": "Qwen3-8B", "sample_idx": s, "answer": answer,
                                     "correct": right != flip, "num_tokens": int(rng.integers(100, 300)),
                                     "score": float(np.clip(0.3 + 0.4 * right + rng.normal(0, 0.2), 0, 1))}) + "\n")
    return path


def test_grades_never_reach_the_difficulty_bins_or_choices(tmp_path):
    pool = _write_pool(tmp_path / "pool.jsonl")
    flipped = _write_pool(tmp_path / "flipped.jsonl", flip=True)
    out = tmp_path / "sw"
    run_sweep(SweepSpec(pool=str(pool), strategies=["self_consistency", "best_of_n"], n=[1, 4], draws=50), out)
    cells = read_cells(out)
    assert difficulty_from_pool(pool) == difficulty_from_pool(flipped)
    before = compute_optimal_for_run(out, cells)
    manifest = out / "sweep.json"
    manifest.write_text(manifest.read_text().replace(str(pool), str(flipped)))  # same answers, every grade flipped
    after = compute_optimal_for_run(out, cells)
    assert "flipped.jsonl" in after.difficulty_source and "pool.jsonl" in before.difficulty_source
    assert len(set(difficulty_from_pool(pool)["Qwen3-8B"].values())) > 3  # agreement really varies
    assert len(before.rows) == 2 and all(len(edges) >= 3 for r in before.rows for edges in r.fold_edges)
    for b, a in zip(before.rows, after.rows, strict=True):
        assert (a.fold_edges, a.fold_choices, a.fold_single) == (b.fold_edges, b.fold_choices, b.fold_single)
        assert a.compute_optimal == b.compute_optimal


def test_plot_adds_the_compute_optimal_table_and_json(tmp_path):
    pool = _write_pool(tmp_path / "pool.jsonl")
    out = tmp_path / "sw"
    r = runner.invoke(app, ["sweep", "--pool", str(pool), "-s", "self_consistency", "-s", "best_of_n",
                            "--n", "1,4", "--draws", "50", "--out", str(out)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["plot", str(out)])
    assert r.exit_code == 0, r.output
    assert "compute-optimal Qwen3-8B" in r.output and "n=4" in r.output
    data = json.loads((out / "plots" / "compute_optimal.json").read_text())
    assert [row["budget"] for row in data["rows"]] == [1.0, 4.0] and data["settings"]["folds"] == 5
    page = (out / "plots" / "report.html").read_text()
    assert "Compute-optimal (per difficulty bin)" in page and "best single in hindsight (oracle)" in page
    assert page.index("Compute-optimal") < page.index("All cells")


def test_a_sweep_of_one_strategy_says_there_is_nothing_to_choose(tmp_path):
    pool = _write_pool(tmp_path / "pool.jsonl")
    out = tmp_path / "sw"
    runner.invoke(app, ["sweep", "--pool", str(pool), "-s", "self_consistency", "--n", "1,4", "--draws", "50",
                        "--out", str(out)])
    r = runner.invoke(app, ["plot", str(out)])
    assert r.exit_code == 0, r.output
    assert "nothing to choose between" in r.output
    assert "nothing to choose" in (out / "plots" / "report.html").read_text()
    assert json.loads((out / "plots" / "compute_optimal.json").read_text())["single_strategy"] == {
        "Qwen3-8B": "self_consistency"}


def test_a_live_sweep_takes_difficulty_from_its_own_samples(tmp_path):
    r = runner.invoke(app, ["sweep", "-s", "self_consistency", "-s", "best_of_n", "--n", "1,4", "--backend",
                            "scripted", "--limit", "4", "--max-tokens", "64", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    report = compute_optimal_for_run(tmp_path, read_cells(tmp_path))
    assert "live runs" in report.difficulty_source
    assert [row.problems for row in report.rows] == [4, 4]


@pytest.mark.parametrize("settings", [{"folds": 1}, {"bins": 0}])
def test_bad_settings_say_what_to_change(settings):
    cells, difficulty = _easy_a_hard_b(problems=20)
    with pytest.raises(ValueError, match="folds >= 2"):
        compute_optimal(cells, difficulty, **settings)


def _small_pool(path: Path) -> Path:
    """Two models; per problem the answers (None = no answer): agreement is the modal answer's share."""
    samples = {("m", "a"): ["1", "1", "2", None], ("m", "b"): ["3", "3", "3", "3"], ("m", "c"): ["7"],
               ("n", "a"): ["5", "6"]}
    with path.open("w") as fh:
        for (model, pid), answers in samples.items():
            for s, answer in enumerate(answers):
                fh.write(json.dumps({"problem_id": pid, "model": model, "sample_idx": s, "answer": answer,
                                     "correct": answer == "1", "num_tokens": 10, "score": 0.5}) + "\n")
    return path


def test_difficulty_is_the_share_of_the_modal_answer_per_model(tmp_path):
    # a: "1" twice of 4 (no answer counts against); c: its one sample (the pool's padding slots are no samples).
    expected = {"m": {"a": 0.5, "b": 1.0, "c": 1.0}, "n": {"a": 0.5}}
    assert difficulty_from_pool(_small_pool(tmp_path / "pool.jsonl")) == expected
    run = tmp_path / "sw"
    run.mkdir()
    (run / "sweep.json").write_text(json.dumps({"source": "pool:pool.jsonl"}))
    (tmp_path / "sw" / "pool.jsonl").write_text((tmp_path / "pool.jsonl").read_text())  # found beside the run
    difficulty, source = difficulty_for_run(run)
    assert difficulty == expected
    assert source == "agreement of each problem's pool samples (pool.jsonl: share of the modal answer; grades never read)"


def test_a_sweeps_missing_or_broken_pool_says_why(tmp_path):
    run = tmp_path / "sw"
    run.mkdir()
    (run / "sweep.json").write_text(json.dumps({"source": "pool:gone.jsonl"}))
    with pytest.raises(ValueError) as err:
        difficulty_for_run(run)
    assert str(err.value) == (f"the sweep's pool gone.jsonl is not found (from here or {run}); run `tts plot` from "
                              "the directory the sweep ran in")
    (run / "gone.jsonl").write_text("not json\n")
    with pytest.raises(ValueError, match=r"gone.jsonl:1: not valid JSON"):
        difficulty_for_run(run)
    (run / "sweep.json").write_text(json.dumps({"source": "live"}))
    with pytest.raises(ValueError) as err:
        difficulty_for_run(run)
    assert str(err.value) == (f"{run} has no pool in sweep.json and no live run with sampled answers "
                              "(self_consistency, best_of_n or weighted_vote) to estimate difficulty from")


def test_a_live_sweeps_difficulty_averages_its_runs_and_skips_those_without_samples(tmp_path, monkeypatch):
    from tts.benchmarks.pool import PoolError

    found = {"s0": {"m": {"a": 0.5, "b": 1.0}}, "s1": {"m": {"a": 1.0}, "n": {"a": 0.25}}}

    def fake(run_dir):
        if run_dir.name not in found:
            raise PoolError("no sampling config")
        return found[run_dir.name]

    monkeypatch.setattr("tts.eval.frontier.difficulty_from_pool", fake)
    (tmp_path / "sweep.json").write_text(json.dumps({"strategies": ["self_consistency"]}))  # a live sweep names no source
    for name in ("s0", "s1", "beam"):
        (tmp_path / "live" / name).mkdir(parents=True)
        (tmp_path / "live" / name / "results.jsonl").write_text("")
    difficulty, source = difficulty_for_run(tmp_path)
    assert difficulty == {"m": {"a": 0.75, "b": 1.0}, "n": {"a": 0.25}}
    assert source == ("agreement of each problem's samples in the live runs (the largest sampling config's answers, "
                      "averaged over seeds; grades never read)")


def test_a_runs_report_says_where_difficulty_came_from_and_how_it_was_fitted(tmp_path):
    ids = ["a", "b", "c", "d"]
    cells = [_cell("self_consistency", 4, dict(zip(ids, [1.0, 0.0, 1.0, 0.0])), tokens=100.0),
             _cell("best_of_n", 4, dict(zip(ids, [0.0, 1.0, 0.0, 1.0])), tokens=120.0)]
    # One strategy: nothing to choose, so no difficulty is looked for (this run directory does not exist).
    alone = compute_optimal_for_run(tmp_path / "none", cells[:1])
    assert alone.difficulty_source == "not needed (one strategy per model)" and alone.single_strategy == {
        "m": "self_consistency"} and alone.rows == []
    assert compute_optimal_for_run(tmp_path / "none", cells[:1], bins=3, boot=10).settings["bins"] == 3
    assert compute_optimal_for_run(tmp_path / "none", []).difficulty_source == "not needed (one strategy per model)"
    assert compute_optimal_for_run(tmp_path / "none", [dataclasses.replace(cells[0], per_problem=None)]).notes == [
        "m: cells without per-problem accuracies are left out (re-run the sweep)",
        "m: no difficulty estimate (no samples of it), so no compute-optimal rows"]
    # Two models of one strategy each (different ones): still nothing to choose for either.
    other = dataclasses.replace(cells[1], model="m2")
    assert compute_optimal_for_run(tmp_path / "none", [cells[0], other]).single_strategy == {
        "m": "self_consistency", "m2": "best_of_n"}
    # Two strategies, no samples to estimate difficulty from: said, and no rows.
    report = compute_optimal_for_run(tmp_path / "none", cells, axis="tokens", bins=2, folds=4, boot=10)
    assert report.difficulty_source.startswith(f"unavailable: {tmp_path / 'none'} has no pool in sweep.json")
    assert report.rows == []
    assert report.notes[0] == (
        "Per model and budget (at most that tokens), problems are binned into 2 difficulty quantiles and each bin "
        "runs the config best there; bins and choices are fitted on 3 of 4 folds and scored on the held-out one "
        "(Snell et al. 2024, cross-fitted). The best single config is chosen the same way. Gain: 95% paired "
        "bootstrap over problems, refitting bins and choices on each resample. 'In hindsight' columns fit on all "
        "problems: references, not achievable.")
    assert report.notes[1] == (f"Difficulty: {report.difficulty_source}. The same samples feed the accuracy "
                               "estimates, which can flatter the per-bin choice (measured under 0.001 on the "
                               "Qwen2.5-Math RM pool; see tts.eval.frontier).")
    assert report.notes[2] == "m: no difficulty estimate (no samples of it), so no compute-optimal rows"
    assert compute_optimal_for_run(tmp_path / "none", cells, boot=10).notes[0].startswith(
        "Per model and budget (same n), problems are binned into 5 difficulty quantiles")


def _two_kinds(seed: int = 0) -> tuple[list[Cell], dict[str, dict[str, float]]]:
    """Eight problems, four per fold of 2: in each fold two easy ones (agreement 0.9) only A solves and two
    hard ones (0.2) only B solves. A costs 100 tokens, B 120."""
    ids = [f"p{i}" for i in range(8)]
    folds = fold_assignment(ids, 2, seed)
    easy = {p for f in (0, 1) for p in [q for q, g in zip(ids, folds) if g == f][:2]}
    a = {p: float(p in easy) for p in ids}
    b = {p: float(p not in easy) for p in ids}
    return ([_cell("self_consistency", 4, a, tokens=100.0), _cell("best_of_n", 4, b, tokens=120.0)],
            {"m": {p: 0.9 if p in easy else 0.2 for p in ids}})


def test_each_bin_gets_its_strategy_and_the_row_says_so_exactly():
    # Trained on the other fold: two scores, so one bin each (edge 0.9). Bin 0 (easy): A 1 vs B 0 -> A. Bin 1:
    # B 1 = the single choice (A and B tie overall, 2 of 4 each; the first label, best_of_n@4, wins the tie).
    cells, difficulty = _two_kinds()
    report = compute_optimal(cells, difficulty, bins=2, folds=2, boot=10, seed=0)
    assert report.settings == {"axis": "n", "bins": 2, "folds": 2, "seed": 0, "bootstrap": 10}
    assert report.difficulty_source == "" and report.notes == [] and report.single_strategy == {}
    assert compute_optimal(cells, difficulty, boot=10).settings == {"axis": "n", "bins": 5, "folds": 5, "seed": 0,
                                                                    "bootstrap": 10}
    assert compute_optimal(cells, difficulty).settings["bootstrap"] == 1000  # the default
    (row,) = report.rows
    a, b = "self_consistency@4", "best_of_n@4"
    assert (row.model, row.axis, row.budget, row.candidates, row.problems) == ("m", "n", 4.0, (b, a), 8)
    assert (row.compute_optimal, row.single, row.single_choice, row.gain) == (1.0, 0.5, b, 0.5)
    assert (row.oracle_single, row.oracle_single_choice, row.oracle_per_bin, row.cost) == (0.5, b, 1.0, None)
    assert row.fold_edges == ((0.9,), (0.9,)) and row.fold_choices == ({0: a, 1: b}, {0: a, 1: b})
    assert row.fold_single == (b, b)
    assert [dataclasses.astuple(x) for x in row.bins] == [(0, 4, 0.9, 0.9, a, 4, 1.0, 0.0, a),
                                                          (1, 4, 0.2, 0.2, b, 4, 1.0, 1.0, b)]


def test_a_cost_axis_row_costs_the_mean_of_its_problems_choices():
    cells, difficulty = _two_kinds()
    rows = compute_optimal(cells, difficulty, axis="tokens", bins=2, folds=2, boot=10).rows
    assert [(r.axis, r.budget, r.candidates) for r in rows] == [
        ("tokens", 100.0, ("self_consistency@4",)), ("tokens", 120.0, ("self_consistency@4", "best_of_n@4"))]
    assert rows[0].cost == 100.0 and rows[1].cost == pytest.approx((4 * 100 + 4 * 120) / 8)
    # Costs within a relative 1e-6 are one level; the configs of a level are listed cheapest first.
    close = [dataclasses.replace(cells[1], tokens=100.00001)] + cells[:1]
    (row,) = compute_optimal(close, difficulty, axis="tokens", bins=2, folds=2, boot=10).rows
    assert row.budget == 100.0 and row.candidates == ("self_consistency@4", "best_of_n@4")


def test_what_a_sweep_lacks_is_noted_per_model():
    cells, difficulty = _two_kinds()
    no_detail = dataclasses.replace(cells[0], model="x", per_problem=None)
    lone = dataclasses.replace(cells[0], model="y")
    unseen = [dataclasses.replace(c, model="z") for c in cells]
    few = [dataclasses.replace(c, model="w", per_problem={"p0": 1.0}) for c in cells]
    unpriced = [dataclasses.replace(cells[1], model="v", tokens=None), dataclasses.replace(cells[0], model="v")]
    extra = [dataclasses.replace(c, model="x") for c in cells]
    # zz: best_of_n has only 6 of the 8 problems: the row is over the 6 both have (listed first so that the
    # intersection, not the last config's problems, decides).
    six = {p: v for p, v in list(cells[1].per_problem.items())[:6]}
    partial = [dataclasses.replace(cells[1], model="zz", per_problem=six), dataclasses.replace(cells[0], model="zz")]
    difficulty = {**difficulty, "x": difficulty["m"], "w": difficulty["m"], "v": difficulty["m"], "zz": difficulty["m"]}
    report = compute_optimal([no_detail, *extra, lone, *unseen, *few, *unpriced, *partial], difficulty, axis="tokens",
                             bins=2, folds=2, boot=10)
    assert report.notes == [
        "v: configs without a tokens cost are left out of the tokens levels",
        "w: fewer than 2 problems have both a difficulty and every config's accuracy",
        "x: cells without per-problem accuracies are left out (re-run the sweep)",
        "z: no difficulty estimate (no samples of it), so no compute-optimal rows"]
    # x: its self_consistency config has a cell without per-problem accuracies, so only best_of_n is left.
    assert report.single_strategy == {"x": "best_of_n", "y": "self_consistency"}
    # v: only the priced config makes a level (with nothing else to choose, its row gains nothing).
    assert [(r.model, r.candidates, r.gain) for r in report.rows][:1] == [("v", ("self_consistency@4",), 0.0)]
    assert [(r.model, r.problems) for r in report.rows[1:]] == [("zz", 6), ("zz", 6)]  # its two token levels


def test_bin_edges_of_distinct_and_tied_scores():
    # Six distinct scores in 3 bins: two each, easiest first; the edges are each easier bin's lowest score.
    assert bin_edges(np.array([0.4, 0.1, 0.6, 0.3, 0.5, 0.2]), 3).tolist() == [0.3, 0.5]
    # A tie of four at the top fills the first of 2 bins (it reaches 3 of 6); the rest is the second.
    assert bin_edges(np.array([1, 1, 0.5, 1, 0.25, 1]), 2).tolist() == [1.0]
    # No more distinct scores than bins: each score its own bin.
    assert bin_edges(np.array([0.2, 0.9, 0.2]), 5).tolist() == [0.9]
    assert bin_edges(np.array([0.1, 0.5, 0.9, 0.5]), 3).tolist() == [0.5, 0.9]


def test_scores_no_training_problem_has_fall_where_assign_bins_puts_them():
    """Held-out problems weigh 0 in their fold's training counts (and so do problems a bootstrap
    resample leaves out), yet they get a bin: that of the next easier present score."""
    from tts.eval.frontier import _value_bins

    # Ascending scores s0..s3 with training counts 2, 0, 1, 3 in 2 bins: s3 (3 of 6) closes bin 0.
    assert _value_bins(np.array([[2.0, 0.0, 1.0, 3.0]]), 2).tolist() == [[1, 1, 1, 0]]
    # Two present scores in 3 bins: one bin each; the absent score between them joins the harder one's.
    assert _value_bins(np.array([[2.0, 0.0, 1.0]]), 3).tolist() == [[1, 1, 0]]
    # A tie of 10 at the hardest present score swallows every bin (the hardest stays in the last bin);
    # the absent, still harder s0 shares it.
    assert _value_bins(np.array([[0.0, 10.0, 1.0, 1.0, 1.0]]), 3).tolist() == [[0, 0, 0, 0, 0]]
    # Rows are weightings of their own: the second row (all of one weight) splits 2 and 2.
    assert _value_bins(np.array([[0.0, 10.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0, 0.0]]), 2).tolist() == [
        [0, 0, 0, 0, 0], [1, 1, 0, 0, 0]]


def test_few_present_scores_get_a_bin_each_in_every_row_alone():
    from tts.eval.frontier import _value_bins

    # As many present scores as bins: one bin each (pooling them would put the big tie's bin over both).
    assert _value_bins(np.array([[5.0, 1.0]]), 2).tolist() == [[1, 0]]
    # Each row counts its own present scores: 2 and 2 (4 together would exceed 3 bins).
    assert _value_bins(np.array([[5.0, 1.0], [1.0, 1.0]]), 3).tolist() == [[1, 0], [1, 0]]
    # An absent score harder than every present one shares the hardest bin, never a bin of its own.
    assert _value_bins(np.array([[0.0, 5.0, 1.0], [1.0, 1.0, 1.0]]), 2).tolist() == [[1, 1, 0], [1, 0, 0]]


def test_folds_are_balanced_integers_whatever_the_order_of_the_ids():
    ids = [f"q{i}" for i in range(7)]
    folds = fold_assignment(ids, 3, seed=4)
    assert folds.dtype.kind == "i" and sorted(np.bincount(folds).tolist()) == [2, 2, 3]
    back = fold_assignment(ids[::-1], 3, seed=4)
    assert back.tolist() == folds[::-1].tolist()
    assert fold_assignment(ids[:2], 5).tolist() in ([0, 1], [1, 0])  # at most one fold per problem


def test_two_problems_are_each_scored_by_a_fit_on_the_other_alone():
    # p0 (easy) only A solves, p1 (hard) only B: each fold learns the other problem's strategy and misses.
    cells = [_cell("self_consistency", 4, {"p0": 1.0, "p1": 0.0}), _cell("best_of_n", 4, {"p0": 0.0, "p1": 1.0})]
    (row,) = compute_optimal(cells, {"m": {"p0": 0.9, "p1": 0.2}}, folds=2, boot=10).rows
    assert row.problems == 2 and row.compute_optimal == 0.0 and row.single == 0.0 and row.gain == 0.0
    assert sorted(row.fold_single) == ["best_of_n@4", "self_consistency@4"]
    assert row.oracle_per_bin == 1.0  # in hindsight each bin gets its own problem's strategy


def test_more_bins_than_scores_and_the_gains_interval():
    cells, difficulty = _two_kinds()
    (two,) = compute_optimal(cells, difficulty, bins=2, folds=2, boot=200).rows
    (five,) = compute_optimal(cells, difficulty, bins=5, folds=2, boot=200).rows
    assert five.bins == two.bins and five.compute_optimal == 1.0  # two scores: two bins however many are asked for
    # Every resample's gain is a mean of per-problem differences in [0, 1]: the interval lies inside, around 0.5.
    assert 0.0 <= two.gain_low < 0.5 < two.gain_high <= 1.0
    (again,) = compute_optimal(cells, difficulty, bins=2, folds=2, boot=200).rows
    assert (again.gain_low, again.gain_high) == (two.gain_low, two.gain_high)  # the bootstrap is seeded


def test_costs_within_a_millionth_are_one_level():
    cells, difficulty = _two_kinds()
    priced = [dataclasses.replace(cells[0], tokens=1.0), dataclasses.replace(cells[1], tokens=1.000001)]
    (row,) = compute_optimal(priced, difficulty, axis="tokens", bins=2, folds=2, boot=10).rows
    assert row.budget == 1.0 and row.candidates == ("self_consistency@4", "best_of_n@4")


def test_a_bin_where_the_single_choice_ties_the_best_keeps_the_single_choice():
    # Easy problems (0.9): only A (self_consistency@4) solves them; hard ones (0.2): A and B each solve half.
    # A is the best single config; in the hard bin B ties it and comes first, yet A is kept (no switch on a tie).
    cells, difficulty = _two_kinds()
    easy = {p for p, d in difficulty["m"].items() if d == 0.9}
    a = _cell("self_consistency", 4, {p: 1.0 if p in easy else 0.5 for p in difficulty["m"]})
    b = _cell("best_of_n", 4, {p: 0.0 if p in easy else 0.5 for p in difficulty["m"]})
    (row,) = compute_optimal([a, b], difficulty, bins=2, folds=2, boot=10).rows
    assert row.fold_choices == ({0: "self_consistency@4", 1: "self_consistency@4"},) * 2
    assert [x.choice for x in row.bins] == ["self_consistency@4"] * 2 and row.gain == 0.0


def test_held_out_scores_never_shape_the_training_bins():
    """Fold 0: four problems of agreement 0.5 only B solves. Fold 1: two at 0.9 only A solves, two at 0.1 only
    B solves. Fitted on fold 1 alone, 0.9 and 0.1 are a bin each and 0.5 falls in the harder one (B): all four
    right. Counting fold 0's own scores would make {0.9, 0.5} a bin (choice A) and miss all four."""
    ids = [f"p{i}" for i in range(8)]
    folds = fold_assignment(ids, 2)
    zero, one = [p for p, f in zip(ids, folds) if f == 0], [p for p, f in zip(ids, folds) if f == 1]
    score = {**{p: 0.5 for p in zero}, one[0]: 0.9, one[1]: 0.9, one[2]: 0.1, one[3]: 0.1}
    a = _cell("self_consistency", 4, {p: float(score[p] == 0.9) for p in ids})
    b = _cell("best_of_n", 4, {p: float(score[p] != 0.9) for p in ids})
    (row,) = compute_optimal([a, b], {"m": score}, bins=2, folds=2, boot=10).rows
    # Fold 1 is fitted on fold 0 (one score, one bin, B best): its 0.1 problems right, its 0.9 ones wrong.
    assert row.compute_optimal == (4 + 2) / 8
