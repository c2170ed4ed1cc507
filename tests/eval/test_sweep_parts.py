"""`tts sweep`'s parts on hand-made pools and specs (tts/eval/sweep.py): a pool cell field by field
against the estimators called directly, the refusals word for word, the sweep directory's manifest
checks, a widened live sweep's run directory, points over seeds, and the progress it reports."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from tts.eval.sweep import (
    Cell,
    CellStore,
    SweepError,
    SweepSpec,
    Unit,
    check_spec,
    curve_points,
    live_eval_config,
    live_run_dir,
    pool_rule_of,
    read_cells,
    run_sweep,
)


def _write_pool(path: Path, tokens: bool = True, scores: bool = True) -> Path:
    """Two models, three problems; problem p2 of model "a" has two samples, the others four.
    Answer "1" is right; scores in [0, 1]."""
    rows = []
    answers = {"p0": ["1", "1", "2", "1"], "p1": ["2", "1", "2", "3"], "p2": ["1", "2"]}
    lengths = {"p0": [10, 20, 30, 40], "p1": [100, 200, 300, 400], "p2": [1000, 3000]}
    for model in ("a", "b"):
        for pid, ans in answers.items():
            ans = ans if model == "a" or pid != "p2" else ans + ["1", "1"]
            for s, a in enumerate(ans):
                row = {"problem_id": pid, "model": model, "sample_idx": s, "answer": a, "correct": a == "1"}
                row["num_tokens"] = (lengths[pid] + [500, 500])[s] if tokens else None
                row["score"] = (0.9 if a == "1" else 0.2 + 0.1 * s) if scores else None
                rows.append(row)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _pool_spec(path: Path, **kw) -> SweepSpec:
    return SweepSpec(**{"pool": str(path), "models": ["a"], "strategies": ["self_consistency", "weighted_vote"],
                        "n": [1, 2], **kw})


# --- pool cells ------------------------------------------------------------------------------------


def test_a_pool_cell_is_the_estimators_value_priced_on_n_samples_of_each_problems_mean_length(tmp_path):
    from tts.benchmarks.pool import load_pool
    from tts.cost.ledger import cost_model_for
    from tts.eval import estimators as est

    path = _write_pool(tmp_path / "pool.jsonl")
    spec = _pool_spec(path, models=["a"], seeds=2, draws=30, prompt_tokens=100, concurrency=8,
                      prices={"h100": 5.0}, arch={"a": "qwen3-0.6b"})
    result = run_sweep(spec, tmp_path / "out")
    mp = load_pool(path)["a"]
    cost_model = cost_model_for("qwen3-0.6b", "h100")
    # Per-problem mean lengths 25, 250 and 2000 (p2 has two samples): not the mean over all ten samples.
    per_problem_mean = (25 + 250 + 2000) / 3
    cells = {(c.config, c.seed): c for c in result.cells}
    assert sorted(cells) == [(label, seed) for label in ("self_consistency@1", "self_consistency@2",
                                                         "weighted_vote@1", "weighted_vote@2") for seed in (0, 1)]
    for (label, seed), c in cells.items():
        kind, n = label.split("@")[0], int(label.split("@")[1])
        rule = "vote" if kind == "self_consistency" else "weighted_vote"
        curves = est.pool_curves(mp, rules=(rule, "pass"), ns=[1, 2], draws=30, seed=seed, weighting="score")
        acc, lo, hi = curves[rule].at(n)
        assert (c.model, c.strategy, c.config, c.n, c.seed) == ("a", kind, label, n, seed)
        assert (c.source, c.method, c.problems, c.gpu, c.max_tokens, c.events) == (
            f"pool:{path}", curves[rule].method, 3, "h100", None, {})
        assert (c.accuracy, c.accuracy_low, c.accuracy_high) == (acc, lo, hi)
        assert c.pass_at_n == curves["pass"].at(n)[0]
        column = list(curves[rule].ns).index(n)
        assert c.per_problem == {pid: round(float(v), 6) for pid, v in
                                 zip(mp.problem_ids, curves[rule].per_problem[:, column], strict=True)}
        if n == 2 and rule == "vote":  # thirds of 30 draws: rounded to 6 places, not more
            assert any(len(repr(v)) == 8 and repr(v).endswith("3") for v in c.per_problem.values()), c.per_problem
        assert c.tokens == pytest.approx(n * per_problem_mean)
        assert c.prompt_tokens == 100.0
        costs = [cost_model.cost_request(100, [m] * n, concurrency=8) for m in (25, 250, 2000)]
        assert c.flops == pytest.approx(np.mean([x.flops for x in costs]))
        assert c.eflops == pytest.approx(np.mean([x.eflops for x in costs]))
        assert c.gpu_seconds == pytest.approx(np.mean([x.gpu_seconds for x in costs]))
        assert c.dollars == pytest.approx(c.gpu_seconds / 3600 * 5.0)
        assert 0 < c.wall_seconds < 5
    # The concurrency setting reaches the price: alone, each request pays its own weight reads.
    alone = run_sweep(_pool_spec(path, prompt_tokens=100, arch={"a": "qwen3-0.6b"}, n=[2]), tmp_path / "alone")
    assert alone.cells[0].gpu_seconds > cells[("self_consistency@2", 0)].gpu_seconds
    # The seed reaches the bootstrap draws (both votes are bootstrapped here): the seeds differ.
    assert cells[("self_consistency@2", 0)].method == "bootstrap"
    assert cells[("self_consistency@2", 0)].accuracy != cells[("self_consistency@2", 1)].accuracy


def test_the_weighting_setting_reaches_the_weighted_vote(tmp_path):
    from tts.benchmarks.pool import load_pool
    from tts.eval import estimators as est

    path = _write_pool(tmp_path / "pool.jsonl")
    mp = load_pool(path)["a"]
    for weighting in ("exp", "sigmoid"):
        result = run_sweep(_pool_spec(path, strategies=["weighted_vote"], n=[2], draws=50, weighting=weighting),
                           tmp_path / weighting)
        want = est.pool_curves(mp, rules=("weighted_vote",), ns=[2], draws=50, seed=0, weighting=weighting)
        assert result.cells[0].per_problem == {
            pid: round(float(v), 6) for pid, v in zip(mp.problem_ids, want["weighted_vote"].per_problem[:, 0])}


def test_auto_weighting_reads_scores_in_0_to_1_as_they_are_and_the_setting_overrides_it(tmp_path):
    """One right sample scored 0.95 against two alike wrong ones scored 0.45: by the scores
    themselves the right one wins (0.95 > 0.9); by exp(score) or sigmoid(score) the pair does."""
    rows = [{"problem_id": "w", "model": "a", "sample_idx": i, "answer": a, "correct": a == "1", "num_tokens": 10,
             "score": sc} for i, (a, sc) in enumerate((("1", 0.95), ("2", 0.45), ("2", 0.45)))]
    path = tmp_path / "pool.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = {}
    for weighting in ("auto", "score", "exp", "sigmoid"):
        result = run_sweep(_pool_spec(path, strategies=["weighted_vote"], n=[3], weighting=weighting),
                           tmp_path / weighting)
        got[weighting] = result.cells[0].accuracy
    assert got == {"auto": 1.0, "score": 1.0, "exp": 0.0, "sigmoid": 0.0}


def test_a_pool_without_token_counts_gives_cells_without_tokens_or_prices(tmp_path):
    path = _write_pool(tmp_path / "pool.jsonl", tokens=False)
    result = run_sweep(_pool_spec(path, strategies=["self_consistency"], arch={"a": "qwen3-0.6b"}), tmp_path / "o")
    assert [c.config for c in result.cells] == ["self_consistency@1", "self_consistency@2"]
    assert all(c.tokens is c.flops is c.eflops is c.gpu_seconds is c.dollars is None for c in result.cells)
    assert result.unpriced == ["a"]


def test_length_budgets_are_computed_shortest_first(tmp_path, monkeypatch):
    import tts.eval.sweep as sweep

    seen = []
    real = sweep._pool_cells_at
    monkeypatch.setattr(sweep, "_pool_cells_at", lambda spec, unit, configs, mp, length, events:
                        seen.append(length) or real(spec, unit, configs, mp, length, events))
    path = _write_pool(tmp_path / "pool.jsonl")
    run_sweep(_pool_spec(path, strategies=["self_consistency"], n=[1], lengths=[300, 50]), tmp_path / "o")
    assert seen == [50, 300]


# --- refusals ---------------------------------------------------------------------------------------


def test_refusals_of_a_pool_sweep_say_what_to_change(tmp_path):
    path = _write_pool(tmp_path / "pool.jsonl")
    with pytest.raises(SweepError) as err:
        check_spec(_pool_spec(path, models=["c"]))
    assert str(err.value) == f"model 'c' is not in pool {path}; choose from: a, b"
    bare = _write_pool(tmp_path / "bare.jsonl", scores=False)
    with pytest.raises(SweepError) as err:
        check_spec(_pool_spec(bare, strategies=["self_consistency", "weighted_vote", "best_of_n"]))
    assert str(err.value) == (f"a in {bare} has samples without a score, which best_of_n, weighted_vote needs; "
                              "sweep self_consistency, or a pool with scores")
    assert check_spec(_pool_spec(bare, strategies=["self_consistency"])) == ["a"]  # votes need no score
    untimed = _write_pool(tmp_path / "untimed.jsonl", tokens=False)
    with pytest.raises(SweepError) as err:
        check_spec(_pool_spec(untimed, lengths=[100]))
    assert str(err.value) == (f"a in {untimed} has samples without num_tokens, which length budgets need; "
                              "drop --lengths or use a pool that records generated tokens")
    with pytest.raises(SweepError) as err:
        check_spec(_pool_spec(tmp_path / "nowhere.jsonl"))
    assert str(err.value) == f"--pool {tmp_path / 'nowhere.jsonl'}: no such file or run directory"
    with pytest.raises(SweepError) as err:
        check_spec(_pool_spec(path, prices={"h100": -1.0}))
    assert str(err.value).startswith("prices: h100: -1.0 is not a price")
    with pytest.raises(SweepError) as err:
        run_sweep(_pool_spec(path, arch={"a": "no-such-arch"}), tmp_path / "o")
    assert str(err.value) == ("arch a=no-such-arch: no such architecture; give a shipped name "
                              "(`tts cost --help` lists them) or a config.json path")


def test_a_strategy_a_pool_cannot_replay_is_refused_naming_those_it_can():
    from tts.config import parse_strategy_config
    from tts.registry import STRATEGIES

    able = "best_of_n, program_vote, self_consistency, tir, weighted_vote"  # the registry's, by their pool_rule
    assert all(_replayable(n) for n in able.split(", "))
    assert not any(_replayable(n) for n in STRATEGIES.names() if n not in able.split(", "))
    with pytest.raises(SweepError) as err:
        pool_rule_of(parse_strategy_config({"kind": "beam"}))
    assert str(err.value) == ("beam cannot be replayed from a sample pool (it does more than aggregate independent "
                              f"samples); sweep it live (drop --pool), or choose from: {able}")
    # A scored rule would need the verifier's scores, which a pool does not hold.
    with pytest.raises(SweepError) as err:
        pool_rule_of(parse_strategy_config({"kind": "best_of_n", "verifier": {"kind": "self_certainty"}}))
    assert str(err.value).endswith(": a pool replay scores samples with the pool's own score field, not a "
                                   "verifier; drop the verifier setting or sweep live")


def _replayable(name: str) -> bool:
    from tts.config import parse_strategy_config

    try:
        pool_rule_of(parse_strategy_config({"kind": name}))
    except (SweepError, ValueError, TypeError):
        return False
    return True


def test_a_live_sweep_runs_the_model_its_backend_names_else_the_default():
    from tts.models import DEFAULT_MODEL

    assert check_spec(SweepSpec(eval={"backend": {"kind": "scripted", "model": "m1"}})) == ["m1"]
    assert check_spec(SweepSpec(eval={"backend": {"kind": "scripted"}})) == [DEFAULT_MODEL]
    assert check_spec(SweepSpec()) == [DEFAULT_MODEL]
    assert check_spec(SweepSpec(models=["x", "y"], eval={"backend": {"model": "m1"}})) == ["x", "y"]


# --- the sweep directory ---------------------------------------------------------------------------


@pytest.mark.parametrize(("key", "value"), [("gpu", "a100"), ("prompt_tokens", 7), ("weighting", "exp"),
                                            ("concurrency", 4), ("sparse", "topk:64")])
def test_a_sweep_directory_refuses_a_spec_that_prices_or_weighs_otherwise(tmp_path, key, value):
    path = _write_pool(tmp_path / "pool.jsonl")
    CellStore(tmp_path / "out", _pool_spec(path)).close()
    before = getattr(_pool_spec(path), key)
    with pytest.raises(SweepError) as err:
        CellStore(tmp_path / "out", _pool_spec(path, **{key: value}))
    assert str(err.value) == (f"{tmp_path / 'out'} holds a sweep with {key} {before!r}, not {value!r}; pass a new "
                              "--out directory (cells of the same source and GPU are resumed and extended)")


def test_a_sweep_directory_refuses_another_source_and_a_live_one_other_eval_settings(tmp_path):
    path = _write_pool(tmp_path / "pool.jsonl")
    CellStore(tmp_path / "out", _pool_spec(path)).close()
    with pytest.raises(SweepError, match=f"holds a sweep with source 'pool:{path}', not 'live'"):
        CellStore(tmp_path / "out", SweepSpec())
    CellStore(tmp_path / "live", SweepSpec(eval={"data": {"limit": 2}})).close()
    with pytest.raises(SweepError, match="holds a sweep with eval"):
        CellStore(tmp_path / "live", SweepSpec(eval={"data": {"limit": 3}}))
    # A pool sweep's eval settings are not its cells' business.
    CellStore(tmp_path / "out", _pool_spec(path, eval={"data": {"limit": 3}})).close()


def test_an_older_manifest_with_its_settings_at_the_top_is_still_checked(tmp_path):
    path = _write_pool(tmp_path / "pool.jsonl")
    out = tmp_path / "out"
    out.mkdir()
    (out / "sweep.json").write_text(json.dumps({"source": f"pool:{path}", "gpu": "a100", "prompt_tokens": 0,
                                                "weighting": "auto", "sparse": None, "concurrency": None}))
    with pytest.raises(SweepError, match="holds a sweep with gpu 'a100', not 'h100'"):
        CellStore(out, _pool_spec(path))


def test_a_reopened_store_holds_its_cells_and_the_manifest_says_the_spec(tmp_path):
    path = _write_pool(tmp_path / "pool.jsonl")
    spec = _pool_spec(path, strategies=["self_consistency"], n=[1])
    run_sweep(spec, tmp_path / "out")
    manifest = json.loads((tmp_path / "out" / "sweep.json").read_text())
    assert manifest["source"] == f"pool:{path}" and manifest["spec"] == spec.model_dump(mode="json")
    assert "schema_version" in manifest
    store = CellStore(tmp_path / "out", spec)
    assert store.has("a", "self_consistency@1", 0) and not store.has("a", "self_consistency@1", 1)
    assert not store.has("b", "self_consistency@1", 0)
    first = read_cells(tmp_path / "out")[0]
    other = Cell(**{**first.__dict__, "seed": 1})
    store.write([first, other])  # a cell already held is not written twice; the next one is written
    store.close()
    assert [c.seed for c in read_cells(tmp_path / "out")] == [0, 1]


def test_a_sweep_directory_is_made_with_its_parents_and_a_torn_last_cell_is_dropped_on_reading(tmp_path):
    path = _write_pool(tmp_path / "pool.jsonl")
    out = tmp_path / "deep" / "er" / "out"
    run_sweep(_pool_spec(path, strategies=["self_consistency"], n=[1, 2]), out)
    with (out / "cells.jsonl").open("a") as fh:
        fh.write('{"model": "a", "strategy": "self_co')  # a write cut off by a crash
    assert [c.config for c in read_cells(out)] == ["self_consistency@1", "self_consistency@2"]
    # Resumed and extended after the crash: the torn line is cut away, and the new cell is kept.
    run_sweep(_pool_spec(path, strategies=["self_consistency", "weighted_vote"], n=[1, 2]), out)
    assert [c.config for c in read_cells(out)] == ["self_consistency@1", "self_consistency@2", "weighted_vote@1",
                                                   "weighted_vote@2"]
    with pytest.raises(SweepError) as err:
        read_cells(tmp_path)
    assert str(err.value) == (f"{tmp_path} holds no sweep (cells.jsonl is missing); "
                              f"run `tts sweep --out {tmp_path}` first")


# --- live run directories ---------------------------------------------------------------------------


def _live_spec(**kw) -> SweepSpec:
    return SweepSpec(**{"strategies": ["self_consistency"], "n": [1, 2],
                        "eval": {"backend": {"kind": "scripted"}, "data": {"benchmark": "demo", "limit": 2}}, **kw})


def test_a_live_run_directory_is_reused_for_its_own_configs_and_named_by_a_digest_for_others(tmp_path):
    spec = _live_spec()
    unit = Unit("Org/Model 1", 3, tuple(c.label for c in spec.configs()))
    cfg = live_eval_config(spec, unit)
    base = tmp_path / "live" / "Org_Model_1-seed3"
    assert live_run_dir(tmp_path, unit, cfg) == base  # nothing there yet
    base.mkdir(parents=True)
    strategies = cfg.model_dump(mode="json")["strategies"]
    (base / "run.json").write_text(json.dumps({"config": {"strategies": strategies}}))
    assert live_run_dir(tmp_path, unit, cfg) == base  # its own configs: resumed there
    wider = live_eval_config(_live_spec(n=[1, 2, 4]), Unit(unit.model, 3, ("self_consistency@4",)))
    wide_strategies = wider.model_dump(mode="json")["strategies"]
    digest = hashlib.sha256(json.dumps(wide_strategies, sort_keys=True).encode()).hexdigest()[:8]
    assert live_run_dir(tmp_path, unit, wider) == tmp_path / "live" / f"Org_Model_1-seed3-{digest}"
    assert len(digest) == 8
    # A manifest without configs holds other configs; an unreadable one is left to the run's own check.
    (base / "run.json").write_text(json.dumps({"schema_version": 1}))
    assert live_run_dir(tmp_path, unit, cfg).name.startswith("Org_Model_1-seed3-")
    (base / "run.json").write_text("{not json")
    assert live_run_dir(tmp_path, unit, wider) == base


def test_the_digest_does_not_depend_on_the_order_of_a_configs_keys(tmp_path):
    spec = _live_spec(strategies=["beam"], n=[2])  # its settings do not come in alphabetical order
    unit = Unit("m", 0, tuple(c.label for c in spec.configs()))
    cfg = live_eval_config(spec, unit)
    base = tmp_path / "live" / "m-seed0"
    base.mkdir(parents=True)
    (base / "run.json").write_text(json.dumps({"config": {"strategies": []}}))
    strategies = cfg.model_dump(mode="json")["strategies"]
    assert list(strategies[0]) != sorted(strategies[0])
    reordered = [dict(reversed(list(s.items()))) for s in strategies]
    digest = hashlib.sha256(json.dumps(reordered, sort_keys=True).encode()).hexdigest()[:8]
    assert live_run_dir(tmp_path, unit, cfg).name == f"m-seed0-{digest}"


# --- points over seeds, progress ----------------------------------------------------------------------


def _cell(config: str, seed: int, acc: float, n: int = 4, max_tokens: int | None = None, strategy: str = "s") -> Cell:
    return Cell(model="m", strategy=strategy, config=config, n=n, seed=seed, source="live", method="run", problems=10,
                accuracy=acc, accuracy_low=acc - 0.1, accuracy_high=acc + 0.1, pass_at_n=None, tokens=100.0 * n,
                prompt_tokens=0.0, flops=None, eflops=None, gpu_seconds=None, dollars=None, wall_seconds=1.0,
                gpu="h100", events={}, max_tokens=max_tokens)


def test_a_point_is_its_cells_mean_over_seeds_with_their_sample_sd():
    (one,) = curve_points([_cell("vote@4", 0, 0.5, strategy="vote")])
    assert (one.strategy, one.n, one.accuracy, one.seed_sd) == ("vote", 4, 0.5, None)
    (three,) = curve_points([_cell("vote@4", s, a, strategy="vote") for s, a in enumerate((0.4, 0.5, 0.9))])
    assert three.accuracy == pytest.approx(0.6)
    assert three.seed_sd == pytest.approx(np.sqrt(((0.2 ** 2) + (0.1 ** 2) + (0.3 ** 2)) / 2))  # ddof = 1
    (two,) = curve_points([_cell("vote@4", s, a) for s, a in enumerate((0.4, 0.6))])
    assert two.seed_sd == pytest.approx(np.sqrt(0.02))


def test_points_run_along_each_line_by_n_and_length_budget():
    cells = [_cell("b@8", 0, 0.5, n=8), _cell("b@2,max_tokens=100", 0, 0.5, n=2, max_tokens=100),
             _cell("b@2", 0, 0.5, n=2), _cell("a@4", 0, 0.5, n=4),
             _cell("b@2,max_tokens=50", 0, 0.5, n=2, max_tokens=50)]
    assert [p.config for p in curve_points(cells)] == ["a@4", "b@2", "b@8", "b@2,max_tokens=50", "b@2,max_tokens=100"]


def test_progress_counts_resumed_cells_as_done_then_each_computed_unit(tmp_path):
    path = _write_pool(tmp_path / "pool.jsonl")
    calls = []
    run_sweep(_pool_spec(path, models=["a", "b"], strategies=["self_consistency"], n=[1]), tmp_path / "o",
              progress=lambda done, total: calls.append((done, total)))
    assert calls == [(0, 2), (1, 2), (2, 2)]
    calls.clear()
    result = run_sweep(_pool_spec(path, models=["a", "b"], strategies=["self_consistency"], n=[1, 2], seeds=2),
                       tmp_path / "o", progress=lambda done, total: calls.append((done, total)))
    # Units by model, then seed: (a, 0) lacks @2, (a, 1) both, (b, 0) @2, (b, 1) both.
    assert calls == [(2, 8), (3, 8), (5, 8), (6, 8), (8, 8)]
    assert (result.computed, result.resumed, result.out) == (6, 2, tmp_path / "o")


def test_a_sparse_what_if_prices_every_cell_with_that_attention(tmp_path):
    from tts.cost.cost_model import CostModel, SparseAttention
    from tts.cost.ledger import cost_model_for

    path = _write_pool(tmp_path / "pool.jsonl")
    dense = cost_model_for("qwen3-0.6b", "a100")
    sparse = CostModel(dense.arch, dense.hardware, sparse=SparseAttention.parse("topk:64"))
    result = run_sweep(_pool_spec(path, strategies=["self_consistency"], n=[2], gpu="a100", sparse="topk:64",
                                  prompt_tokens=4000, arch={"a": "qwen3-0.6b"}), tmp_path / "o")
    want = np.mean([sparse.cost_request(4000, [m, m]).gpu_seconds for m in (25, 250, 2000)])
    plain = np.mean([dense.cost_request(4000, [m, m]).gpu_seconds for m in (25, 250, 2000)])
    assert result.cells[0].gpu_seconds == pytest.approx(want) and want != pytest.approx(plain)


def test_a_pool_cells_wall_time_is_its_share_of_the_estimate(tmp_path, monkeypatch):
    """The estimators run once for all configs of a model and seed; each cell records its share."""
    import types

    import tts.eval.sweep as sweep

    clock = iter([10.0, 16.0, 20.0, 23.0])
    monkeypatch.setattr(sweep, "time", types.SimpleNamespace(perf_counter=lambda: next(clock)))
    path = _write_pool(tmp_path / "pool.jsonl")
    result = run_sweep(_pool_spec(path, n=[1, 2], seeds=2), tmp_path / "o")  # four configs per seed
    assert sorted((c.seed, c.wall_seconds) for c in result.cells) == [(0, 1.5)] * 4 + [(1, 0.75)] * 4


def test_a_past_eval_run_directory_is_a_pool_and_a_rewritten_pool_file_is_read_again(tmp_path):
    import os

    from tts.backends.scripted import ScriptedGenerator
    from tts.benchmarks.demo import generate_problems
    from tts.config import EvalConfig
    from tts.eval.runner import run_eval

    problems = generate_problems(3)
    cfg = EvalConfig.model_validate({"data": {"benchmark": "demo", "limit": 3}, "backend": {"kind": "scripted"},
                                     "strategies": [{"kind": "self_consistency", "n": 4}],
                                     "sampling": {"max_tokens": 32}})
    run_eval(cfg, tmp_path / "run", generator=ScriptedGenerator(seed=0, mean_tokens=10), problems=problems)
    result = run_sweep(SweepSpec(pool=str(tmp_path / "run"), strategies=["self_consistency"], n=[1, 4]),
                       tmp_path / "from-run")
    assert sorted(c.config for c in result.cells) == ["self_consistency@1", "self_consistency@4"]
    assert all(c.problems == 3 and c.source == f"pool:{tmp_path / 'run'}" for c in result.cells)
    # A pool file rewritten in place (same path, newer time) is read again, not served from memory.
    path = _write_pool(tmp_path / "pool.jsonl")
    first = run_sweep(_pool_spec(path, strategies=["self_consistency"], n=[1]), tmp_path / "one")
    path.write_text(path.read_text().replace('"answer": "2"', '"answer": "1"').replace('"correct": false',
                                                                                      '"correct": true'))
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    second = run_sweep(_pool_spec(path, strategies=["self_consistency"], n=[1]), tmp_path / "two")
    assert first.cells[0].accuracy < second.cells[0].accuracy


def test_a_run_of_the_same_configs_is_found_again_when_their_settings_hold_tuples(tmp_path):
    """certainty_probe's settings hold tuples, which run.json stores as lists: the comparison is of
    the JSON forms, so the same configs resume in their directory."""
    spec = _live_spec(strategies=["certainty_probe"], n=[4])
    unit = Unit("m", 0, tuple(c.label for c in spec.configs()))
    cfg = live_eval_config(spec, unit)
    assert cfg.model_dump(mode="json")["strategies"] != cfg.model_dump()["strategies"]
    base = tmp_path / "live" / "m-seed0"
    base.mkdir(parents=True)
    (base / "run.json").write_text(json.dumps({"config": cfg.model_dump(mode="json")}))
    assert live_run_dir(tmp_path, unit, cfg) == base
