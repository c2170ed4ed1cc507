"""``tts graph-search``: search a space of collaboration graphs on a dev split, report the best on a test split.

Example:
    tts graph-search --space examples/graphs/search/space.yaml --benchmark demo --dev 20 --test 20 \\
        --budget 30 --backend scripted --out runs/graph-search
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from tts.cli.errors import fail, user_errors


def graph_search_command(
    space: Path = typer.Option(..., "--space", help="Search space YAML (see examples/graphs/search/space.yaml)."),
    benchmark: str = typer.Option("demo", "--benchmark", "-b", help="Registered benchmark."),
    data: Path | None = typer.Option(None, "--data", help="Local JSONL/Parquet file instead of the benchmark's."),
    dev: int = typer.Option(20, "--dev", min=1, help="Dev problems (the first N): the search's only feedback."),
    test: int = typer.Option(20, "--test", min=1, help="Held-out problems (the next M): reported, never searched on."),
    budget: int = typer.Option(30, "--budget", min=1, help="Distinct graphs evaluated on the dev split at most."),
    token_budget: int | None = typer.Option(None, "--token-budget", min=1, help="Dev tokens all evaluations may spend."),
    method: str = typer.Option("reinforce", "--method",
                               help="reinforce, random or greedy; a comma list runs each under the same budget "
                                    "(a graph evaluated by one is reused by the next, not run again)."),
    cost_penalty: float = typer.Option(0.0, "--cost-penalty", min=0.0,
                                       help="Reward = accuracy - this x tokens per problem."),
    samples_per_round: int = typer.Option(4, "--samples-per-round", min=2, help="Graphs per REINFORCE round (K)."),
    backend: str = typer.Option("vllm", "--backend", help="vllm, openai or scripted."),
    model: str | None = typer.Option(None, "--model", "-m", help="The policy model (the graphs' `policy`)."),
    max_tokens: int = typer.Option(256, "--max-tokens", min=1, help="Most generated tokens per sample."),
    seed: int = typer.Option(0, "--seed", help="Seed of the runs and of the search's draws."),
    out: Path = typer.Option(Path("runs/graph-search"), "--out", help="Directory for best.yaml and summary.json."),
) -> None:
    """Search collaboration graphs (Agent-REINFORCE, random or greedy) under an evaluation budget."""
    with user_errors():
        from pydantic import TypeAdapter
        from rich.console import Console

        from tts.backends.factory import create_generator
        from tts.benchmarks.grading import Grader
        from tts.config import BackendConfig, SamplingConfig
        from tts.graphs.search import (
            GraphSearchConfig,
            graph_yaml,
            load_search_space,
            search_graphs,
        )
        from tts.graphs.search_eval import SplitEvaluator
        from tts.graphs.strategy import GraphModels
        from tts.registry import BENCHMARKS

        search_space = load_search_space(space)
        methods = [m.strip() for m in method.split(",") if m.strip()]
        configs = [GraphSearchConfig(method=m, max_evaluations=budget, max_tokens=token_budget,
                                     cost_penalty=cost_penalty, samples_per_round=samples_per_round, seed=seed)
                   for m in methods]
        bench = BENCHMARKS.load(benchmark)()
        problems = bench.load(data, dev + test)
        if len(problems) < dev + test:
            raise fail(f"{benchmark} has {len(problems)} problems, fewer than --dev {dev} + --test {test}; lower them")
        backend_cfg = TypeAdapter(BackendConfig).validate_python({"kind": backend, **({"model": model} if model else {})})
        generator = create_generator(backend_cfg, problems)
        sampling = SamplingConfig(max_tokens=max_tokens)
        runs = []
        # One pool of the graphs' other models for every search and the held-out runs: each
        # model's engine starts once (the policy's is `generator`, opened once above).
        try:
            with Grader() as grader, GraphModels() as models:
                def split(items):
                    return SplitEvaluator(items, generator, bench.prompt.render, grader.grade_many, sampling, seed,
                                          models)

                dev_eval, test_eval = MemoEvaluator(split(problems[:dev])), MemoEvaluator(split(problems[dev:dev + test]))
                for config in configs:
                    result = search_graphs(search_space, config, dev_eval)
                    # The held-out split sees only the chosen graph, once.
                    runs.append((config, result, test_eval([result.best])[0]))
        finally:
            generator.close()
        out.mkdir(parents=True, exist_ok=True)
        console = Console()
        summaries = []
        for config, result, held_out in runs:
            stem = "best" if len(runs) == 1 else f"best-{config.method}"
            (out / f"{stem}.yaml").write_text(graph_yaml(result.best))
            summaries.append({
                "method": result.method, "best": result.best.name, "reward": result.reward,
                "dev": {"problems": dev, "accuracy": result.dev.accuracy,
                        "tokens_per_problem": result.dev.tokens_per_problem},
                "test": {"problems": test, "accuracy": held_out.accuracy,
                         "tokens_per_problem": held_out.tokens_per_problem},
                "evaluations": result.evaluations, "found_at": result.found_at, "dev_tokens": result.tokens,
                "stopped": result.stopped, "curve": list(result.curve), "config": config.model_dump(mode="json"),
            })
            console.print(
                f"{result.method}: best graph {result.best.name} after {result.evaluations} evaluations "
                f"(found at {result.found_at}; {result.stopped})\n"
                f"  dev  accuracy {result.dev.accuracy:.3f}, {result.dev.tokens_per_problem:.0f} tokens/problem\n"
                f"  test accuracy {held_out.accuracy:.3f}, {held_out.tokens_per_problem:.0f} tokens/problem")
        body = summaries[0] if len(summaries) == 1 else {"methods": summaries}
        (out / "summary.json").write_text(json.dumps(body, indent=2))
        console.print(f"wrote {out}/best*.yaml and {out / 'summary.json'}")


class MemoEvaluator:
    """Evaluates each distinct graph once per split; later searches reuse the evaluation (each search
    still counts it against its own budget)."""

    def __init__(self, evaluate):
        self.evaluate, self.cache = evaluate, {}

    def __call__(self, specs):
        from tts.graphs.search import canonical_key

        todo = {canonical_key(s): s for s in specs if canonical_key(s) not in self.cache}
        if todo:
            self.cache.update(zip(todo, self.evaluate(list(todo.values())), strict=True))
        return [self.cache[canonical_key(s)] for s in specs]


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
        from rich.console import Console

        from tts.backends.factory import create_generator
        from tts.benchmarks.grading import Grader, Outcome
        from tts.config import BackendConfig, SamplingConfig
        from tts.graphs.graph import load_graph_file
        from tts.graphs.search import graph_yaml
        from tts.graphs.stages import SplitStageEvaluator, even_split, measure_curves, plan_split, with_budgets
        from tts.graphs.strategy import GraphModels, GraphStrategy, GraphStrategyConfig
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
        sampling = SamplingConfig(max_tokens=max_tokens)
        try:
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
                even = even_split(spec, grids, total, unit, plan)  # type: ignore[arg-type]
                even_eval = held_out(with_budgets(spec, even)) if even is not None and even != dict(plan.budgets) else None
        finally:
            generator.close()
        out.mkdir(parents=True, exist_ok=True)
        (out / "planned.yaml").write_text(graph_yaml(plan.spec))

        def row(ev):
            return {"accuracy": ev.accuracy, "correct": ev.correct, "problems": ev.problems,
                    "tokens_per_problem": ev.tokens_per_problem}

        summary = {
            "total": total, "unit": unit, "grid": values, "budgets": dict(plan.budgets), "cost": plan.cost,
            "predicted_dev_accuracy": plan.predicted, "reference_dev": row(reference),
            "curves": {c.stage: [{"budget": b, **row(ev), "stage_tokens": c.tokens(b)}
                                 for b, ev in zip(c.budgets, c.evaluations, strict=True)] for c in curves},
            "test_planned": row(planned), "even_budgets": even,
            "test_even": row(even_eval) if even_eval is not None else None,
        }
        (out / "summary.json").write_text(json.dumps(summary, indent=2))
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
