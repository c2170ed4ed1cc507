"""The compute-optimal frontier: per-bin choices that pay, gains that are honest, and cross-fitting that holds out."""

from __future__ import annotations

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
