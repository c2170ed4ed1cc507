"""``tts stage-plan``: split a total budget over a multi-stage graph's stages from per-stage curves (AgentTTS).

Example:
    tts stage-plan --graph examples/graphs/multi_stage.yaml --total 8 --grid 1,2,4 --dev 20 --test 20
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from tts.cli.errors import fail, user_errors


def stage_plan_command(
    graph: Path = typer.Option(..., "--graph", help="A multi-stage graph YAML (with a stages: section)."),
    total: float = typer.Option(..., "--total", min=1, help="The total budget per problem, in --unit."),
    grid: str = typer.Option("1,2,4", "--grid", help="Budgets (n per staged node) to measure each stage at."),
    unit: str = typer.Option("samples", "--unit", help="samples (sum of n over staged nodes) or tokens (measured)."),
    benchmark: str = typer.Option("demo", "--benchmark", "-b", help="Registered benchmark."),
    data: Path | None = typer.Option(None, "--data", help="Local JSONL/Parquet file instead of the benchmark's."),
    dev: int = typer.Option(20, "--dev", min=1, help="Dev problems (the first N): the curves are measured here."),
    test: int = typer.Option(20, "--test", min=1, help="Held-out problems (the next M): the planned and even splits."),
    backend: str = typer.Option("vllm", "--backend", help="vllm, openai or scripted."),
    model: str | None = typer.Option(None, "--model", "-m", help="The policy model (the graph's `policy`)."),
    max_tokens: int = typer.Option(256, "--max-tokens", min=1, help="Most generated tokens per sample."),
    seed: int = typer.Option(0, "--seed", help="Run seed."),
    out: Path = typer.Option(Path("runs/stage-plan"), "--out", help="Directory for planned.yaml and summary.json."),
) -> None:
    """Split a total budget over a multi-stage graph's stages from per-stage curves (AgentTTS)."""
    with user_errors():
        from pydantic import TypeAdapter

        from tts.backends.factory import create_generator
        from tts.config import BackendConfig
        from tts.graphs.graph import load_graph_file
        from tts.graphs.search import graph_yaml
        from tts.registry import BENCHMARKS

        if unit not in ("samples", "tokens"):
            raise fail(f"--unit {unit!r}: use samples or tokens")
        try:
            values = sorted({int(v) for v in grid.split(",") if v.strip()})
        except ValueError:
            raise fail(f"--grid {grid!r}: give budgets as a comma list of integers, e.g. 1,2,4") from None
        spec = load_graph_file(graph)
        if not spec.stages:
            raise fail(f"{graph} has no stages: section; name the stages whose budgets should be split")
        grids = {s: values for s in spec.stages}
        bench = BENCHMARKS.load(benchmark)()
        problems = bench.load(data, dev + test)
        if len(problems) < dev + test:
            raise fail(f"{benchmark} has {len(problems)} problems, fewer than --dev {dev} + --test {test}; lower them")
        backend_cfg = TypeAdapter(BackendConfig).validate_python({"kind": backend, **({"model": model} if model else {})})
        generator = create_generator(backend_cfg, problems)
        try:
            reference, curves, plan, planned, even, even_eval = _plan_and_test(
                spec, grids, problems, dev, test, generator, bench, max_tokens, seed, total, unit)
        finally:
            generator.close()
        out.mkdir(parents=True, exist_ok=True)
        (out / "planned.yaml").write_text(graph_yaml(plan.spec))
        summary = {
            "total": total, "unit": unit, "grid": values, "budgets": dict(plan.budgets), "cost": plan.cost,
            "predicted_dev_accuracy": plan.predicted, "reference_dev": _evaluation_row(reference),
            "curves": {c.stage: [{"budget": b, **_evaluation_row(ev), "stage_tokens": c.tokens(b)}
                                 for b, ev in zip(c.budgets, c.evaluations, strict=True)] for c in curves},
            "test_planned": _evaluation_row(planned), "even_budgets": even,
            "test_even": _evaluation_row(even_eval) if even_eval is not None else None,
        }
        (out / "summary.json").write_text(json.dumps(summary, indent=2))
        _print_stage_plan(curves, plan, planned, even, even_eval, unit, out)


def _plan_and_test(spec, grids, problems, dev, test, generator, bench, max_tokens, seed, total, unit) -> tuple:
    """Measure each stage's curve on the dev problems, plan the split of ``total``, and run the
    planned split (and the even split, when it differs) on the held-out problems.

    Returns (reference dev evaluation, curves, plan, planned test evaluation, even budgets or None,
    even test evaluation or None).
    """
    from tts.benchmarks.grading import Grader, Outcome
    from tts.config import SamplingConfig
    from tts.graphs.stages import SplitStageEvaluator, even_split, measure_curves, plan_split, with_budgets
    from tts.graphs.strategy import GraphModels, GraphStrategy, GraphStrategyConfig

    sampling = SamplingConfig(max_tokens=max_tokens)
    with Grader() as grader, GraphModels() as models:
        def solve(graph_spec, items):
            strategy = GraphStrategy(GraphStrategyConfig(graph=graph_spec), generator, bench.prompt.render,
                                     sampling, seed=seed, models=models)
            return strategy.solve(items)

        def grade(pairs):
            return [o == Outcome.CORRECT for o in grader.grade_many(pairs)]

        reference, curves = measure_curves(spec, grids, SplitStageEvaluator(problems[:dev], solve, grade))
        plan = plan_split(spec, reference, curves, total, unit)  # type: ignore[arg-type]
        held_out = SplitStageEvaluator(problems[dev:dev + test], solve, grade)
        planned = held_out(plan.spec)
        even = even_split(spec, grids, plan)
        even_eval = held_out(with_budgets(spec, even)) if even is not None and even != dict(plan.budgets) else None
    return reference, curves, plan, planned, even, even_eval


def _evaluation_row(ev) -> dict:
    """One evaluation's numbers as summary.json records them."""
    return {"accuracy": ev.accuracy, "correct": ev.correct, "problems": ev.problems,
            "tokens_per_problem": ev.tokens_per_problem}


def _print_stage_plan(curves, plan, planned, even, even_eval, unit: str, out: Path) -> None:
    """Each stage's dev curve, the planned split with its held-out accuracy, the even split's (if run)
    and where the files went."""
    from rich.console import Console

    console = Console()
    for c in curves:
        points = ", ".join(f"{b}: {ev.accuracy:.2f} ({c.tokens(b):.0f} tok)"
                           for b, ev in zip(c.budgets, c.evaluations, strict=True))
        console.print(f"stage {c.stage}: dev accuracy by budget {points}")
    console.print(f"planned split {dict(plan.budgets)} (cost {plan.cost:g} {unit}, predicted dev accuracy "
                  f"{plan.predicted:.3f})\n  test accuracy {planned.accuracy:.3f} ({planned.correct}/{planned.problems}), "
                  f"{planned.tokens_per_problem:.0f} tokens/problem")
    if even_eval is not None:
        console.print(f"even split {even}: test accuracy {even_eval.accuracy:.3f} ({even_eval.correct}/"
                      f"{even_eval.problems}), {even_eval.tokens_per_problem:.0f} tokens/problem")
    console.print(f"wrote {out / 'planned.yaml'} and {out / 'summary.json'}")
