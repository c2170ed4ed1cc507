"""A live sweep's cells field by field against its run's own rows (tts/eval/sweep.py ``_live_cells``),
the run directory's name, and what a resume counts as saved. The scripted backend, two problems."""

from __future__ import annotations

import pytest

from tts.backends.function import RecordingGenerator
from tts.backends.scripted import ScriptedGenerator
from tts.eval.sweep import SweepSpec, _slug, cells_saved, run_sweep


def _spec(**kw) -> SweepSpec:
    return SweepSpec(**{"strategies": ["self_consistency"], "n": [1, 2], "gpu": "h100", "prices": {"h100": 3.0},
                        "eval": {"backend": {"kind": "scripted"}, "data": {"benchmark": "demo", "limit": 2},
                                 "sampling": {"max_tokens": 32}}, **kw})


def test_a_live_cell_is_its_runs_summary_priced_on_the_models_architecture(tmp_path):
    from tts.cost.ledger import cost_model_for, price_usages
    from tts.cost.prices import dollars
    from tts.eval.report import summarize
    from tts.benchmarks.results_pool import read_results
    from tts.eval.rows import ResultRow

    gen = RecordingGenerator(ScriptedGenerator(seed=0, mean_tokens=10))
    result = run_sweep(_spec(), tmp_path, generator=gen)
    assert gen.calls  # the sweep ran on the generator it was given
    (run_dir,) = (tmp_path / "live").iterdir()
    assert run_dir.name == "smollm2-135m-seed0"
    rows = [ResultRow.model_validate(r) for r in read_results(run_dir)]
    summaries = {s.config: s for s in summarize(rows)}
    ledger = price_usages(((r.config, r.usage) for r in rows), cost_model_for("smollm2-135m", "h100"))
    cells = {c.config: c for c in result.cells}
    assert set(cells) == {"self_consistency@1", "self_consistency@2"}
    for label, c in cells.items():
        s, per = summaries[label], ledger[label].per_problem
        assert (c.model, c.strategy, c.n, c.seed, c.source, c.method, c.gpu) == (
            "smollm2-135m", "self_consistency", int(label[-1]), 0, "live", "run", "h100")
        assert (c.problems, c.accuracy, c.accuracy_low, c.accuracy_high, c.pass_at_n) == (
            2, s.accuracy, s.accuracy_low, s.accuracy_high, s.coverage)
        assert c.tokens == s.completion_tokens_per_problem > 0
        assert c.prompt_tokens == s.tokens_per_problem - s.completion_tokens_per_problem > 0
        assert (c.flops, c.eflops, c.gpu_seconds) == (per.flops, per.eflops, per.seconds) and c.flops > 0
        assert c.dollars == pytest.approx(dollars(per.seconds, "h100", {"h100": 3.0}))
        assert c.dollars == pytest.approx(per.seconds / 3600 * 3.0)
        assert c.wall_seconds == s.wall_seconds and c.events == dict(s.events)
        assert c.per_problem == {r.problem_id: float(r.correct) for r in rows if r.config == label}
        assert set(c.per_problem) == {"demo-000", "demo-001"}


def test_a_model_of_unknown_architecture_gets_cells_without_prices(tmp_path):
    spec = _spec(models=["my-own-model"])
    result = run_sweep(spec, tmp_path, generator=ScriptedGenerator(seed=0, mean_tokens=10))
    assert all(c.flops is c.eflops is c.gpu_seconds is c.dollars is None for c in result.cells)
    assert all(c.tokens > 0 and c.model == "my-own-model" for c in result.cells)
    assert result.unpriced == ["my-own-model"]


def test_a_run_directory_is_named_by_the_model_made_safe_for_a_path():
    assert _slug("Qwen/Qwen2.5-7B Instruct") == "Qwen_Qwen2.5-7B_Instruct"
    assert _slug("__a b__") == "a_b" and _slug("X_y") == "X_y"
    assert _slug("  /// ") == "model" and _slug("") == "model"


def test_cells_saved_counts_the_grids_cells_a_resume_skips(tmp_path):
    run_sweep(_spec(), tmp_path, generator=ScriptedGenerator(seed=0, mean_tokens=10))
    assert cells_saved(_spec(), tmp_path) == 2
    assert cells_saved(_spec(n=[2, 4]), tmp_path) == 1
    assert cells_saved(_spec(strategies=["best_of_n"]), tmp_path) == 0


def _point(cost: float, acc: float, name: str = "a") -> "CurvePoint":
    from tts.eval.sweep import CurvePoint

    return CurvePoint("m", name, f"{name}@{cost:g}", int(cost), acc, acc - 0.01, acc + 0.01, None, {"tokens": cost})


def test_of_two_points_at_one_cost_only_the_more_accurate_is_on_the_front():
    from tts.eval.sweep import pareto_front

    points = [_point(1, 0.5), _point(2, 0.6, "b"), _point(2, 0.8, "c"), _point(4, 0.7)]
    assert [(p.strategy, p.accuracy) for p in pareto_front(points, "tokens")] == [("a", 0.5), ("c", 0.8)]


def test_saturation_by_default_is_where_a_doubling_gains_under_one_point():
    from tts.eval.sweep import saturation

    curve = [_point(1, 0.50), _point(2, 0.60), _point(4, 0.65), _point(8, 0.655), _point(16, 0.66)]
    assert saturation(curve, "tokens").costs["tokens"] == 4  # 4 -> 8 gains 0.005, 8 -> 16 0.005
    steep = [_point(1, 0.2), _point(2, 0.4), _point(4, 0.6), _point(8, 0.8)]
    assert saturation(steep, "tokens") is None


def test_live_settings_that_make_no_eval_config_are_refused_with_the_reason():
    from tts.eval.sweep import SweepError, Unit, live_eval_config

    spec = _spec(eval={"backend": {"kind": "scripted"}, "sampling": {"max_tokens": 0}})
    with pytest.raises(SweepError) as refused:
        live_eval_config(spec, Unit("m", 0, ("self_consistency@1",)))
    assert str(refused.value) == ("the live settings do not make a valid tts eval config: sampling.max_tokens=0 is refused "
                                  "(input should be greater than or equal to 1); change sampling.max_tokens")


def test_each_cells_per_problem_accuracy_is_its_own_configs(tmp_path):
    from tts.benchmarks.demo import generate_problems

    spec = _spec(n=[1, 4], eval={"backend": {"kind": "scripted"}, "data": {"benchmark": "demo", "limit": 2},
                                 "sampling": {"max_tokens": 256}})
    gen = ScriptedGenerator.for_problems(generate_problems(2), accuracy=0.5, seed=1)
    cells = {c.config: c for c in run_sweep(spec, tmp_path, generator=gen).cells}
    # This draw: the first sample of each problem is wrong, the vote of four right.
    assert cells["self_consistency@1"].per_problem == {"demo-000": 0.0, "demo-001": 0.0}
    assert cells["self_consistency@4"].per_problem == {"demo-000": 1.0, "demo-001": 1.0}
    assert (cells["self_consistency@1"].accuracy, cells["self_consistency@4"].accuracy) == (0.0, 1.0)


def _sd(acc: float, sd: float | None, lo: float | None = None, hi: float | None = None) -> "CurvePoint":
    from tts.eval.sweep import CurvePoint

    return CurvePoint("m", "a", "a@1", 1, acc, acc if lo is None else lo, acc if hi is None else hi, sd, {})


def test_saturation_edges_two_points_an_exact_gain_and_a_flat_start():
    from tts.eval.sweep import saturation

    assert saturation([_point(1, 0.5), _point(2, 0.505)], "tokens").costs["tokens"] == 1  # one doubling, flat
    assert saturation([_point(1, 0.5), _point(2, 0.75)], "tokens", gain=0.25) is None  # gains exactly the bar
    assert saturation([_point(1, 0.5), _point(2, 0.75), _point(4, 0.76)], "tokens", gain=0.25).costs["tokens"] == 2
    assert saturation([_point(1, 0.5), _point(2, 0.6), _point(4, 0.605)], "tokens").costs["tokens"] == 2
    assert saturation([_point(1, 0.5), _point(2, 0.501), _point(4, 0.502)], "tokens").costs["tokens"] == 1
    assert saturation([_point(1, 0.5)], "tokens") is None


def test_two_points_are_within_noise_when_their_intervals_touch_or_two_seed_sds_cover_the_gap():
    from tts.eval.sweep import within_noise

    assert within_noise(_sd(0.4, None, 0.3, 0.5), _sd(0.6, None, 0.5, 0.7))  # touching intervals
    assert within_noise(_sd(0.6, None, 0.5, 0.7), _sd(0.4, None, 0.3, 0.5))
    assert not within_noise(_sd(0.4, None), _sd(0.6, None))  # no seeds, no overlap
    assert within_noise(_sd(0.5, 0.1), _sd(0.65, None))  # 0.15 < 2 x 0.1
    assert not within_noise(_sd(0.5, 0.125), _sd(0.75, 0.0))  # 0.25 is not below 2 x 0.125
    assert not within_noise(_sd(0.5, 0.1), _sd(0.75, 0.1))  # 0.25 > 0.2
    assert not within_noise(_sd(0.0, 0.1), _sd(0.5, 0.1))


def test_auto_weighting_uses_scores_in_0_to_1_as_they_are_and_exp_otherwise():
    import numpy as np

    from tts.eval.sweep import _weighting

    auto = _spec()
    assert _weighting(auto, np.array([0.0, 0.5, 1.0, np.nan])) == "score"
    assert _weighting(auto, np.array([-0.1, 0.5])) == "exp" and _weighting(auto, np.array([0.5, 1.1])) == "exp"
    assert _weighting(auto, np.array([np.nan])) == "exp" and _weighting(auto, np.array([])) == "exp"
    assert _weighting(_spec(weighting="sigmoid"), np.array([0.5])) == "sigmoid"


def test_pool_costs_price_n_samples_of_each_problems_mean_length_then_average():
    import numpy as np

    from tts.cost.ledger import cost_model_for
    from tts.eval.sweep import _pool_costs

    cm = cost_model_for("smollm2-135m", "h100")
    tokens = np.array([[10.0, 30.0, 99.0], [40.0, 0.0, 0.0], [5.0, 5.0, 5.0]])
    mask = np.array([[True, True, False], [True, False, False], [False, False, False]])
    # means: 20 (the third sample is not in the pool), 40, and no sample: 0 tokens, priced as 1
    expected = [cm.cost_request(7, [m] * 2, concurrency=8) for m in (20, 40, 1)]
    got = _pool_costs(cm, tokens, mask, 2, 7, concurrency=8)
    assert got == pytest.approx((np.mean([c.flops for c in expected]), np.mean([c.eflops for c in expected]),
                                 np.mean([c.seconds for c in expected])))
    alone = [cm.cost_request(7, [m] * 2) for m in (20, 40, 1)]
    assert _pool_costs(cm, tokens, mask, 2, 7)[2] == pytest.approx(np.mean([c.seconds for c in alone]))
    assert _pool_costs(cm, tokens, mask, 2, 7, concurrency=8)[2] != pytest.approx(_pool_costs(cm, tokens, mask, 2, 7)[2])
