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

        from tts.backends.factory import create_generator
        from tts.config import BackendConfig
        from tts.graphs.search import GraphSearchConfig, load_search_space
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
        try:
            runs = _search_and_test(search_space, configs, problems, dev, test, generator, bench, max_tokens, seed)
        finally:
            generator.close()
        _write_and_report(runs, out, dev, test)


def _search_and_test(search_space, configs, problems, dev, test, generator, bench, max_tokens, seed) -> list:
    """Run each search config on the dev split, then its best graph once on the held-out split.

    One pool of the graphs' other models serves every search and the held-out runs, so each model's
    engine starts once (the policy's is ``generator``); dev and test evaluations are memoised, so a
    graph one method evaluated is reused by the next. Returns (config, result, held-out evaluation)
    per config.
    """
    from tts.benchmarks.grading import Grader
    from tts.config import SamplingConfig
    from tts.graphs.search import search_graphs
    from tts.graphs.search_eval import MemoEvaluator, SplitEvaluator
    from tts.graphs.strategy import GraphModels

    sampling = SamplingConfig(max_tokens=max_tokens)
    runs = []
    with Grader() as grader, GraphModels() as models:
        def split(items):
            return SplitEvaluator(items, generator, bench.prompt.render, grader.grade_many, sampling, seed,
                                  models)

        dev_eval, test_eval = MemoEvaluator(split(problems[:dev])), MemoEvaluator(split(problems[dev:dev + test]))
        for config in configs:
            result = search_graphs(search_space, config, dev_eval)
            # The held-out split sees only the chosen graph, once.
            runs.append((config, result, test_eval([result.best])[0]))
    return runs


def _write_and_report(runs: list, out: Path, dev: int, test: int) -> None:
    """Write each search's best graph (best.yaml, or best-METHOD.yaml for several) and summary.json,
    and print each search's best graph with its dev and held-out accuracy."""
    from rich.console import Console

    from tts.graphs.search import graph_yaml

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
