"""``tts show RUN PROBLEM_ID``: one problem's results in a run, as a reader wants to see them.

For every strategy config of the run: the answer, the gold and the outcome, and where the grader
says so why the answer is not correct and how long its check ran (code answers: the sandbox's
verdict, ``timeout: ran past 5 s``); a voting trace as its votes (answer, weight, share) and its
samples (each with its outcome and, where given, why); a search trace as its tree (each node's
step, score and whether the search kept it). Rows written before the grader's reasons were
recorded show without them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from tts.cli.errors import fail, user_errors


def _short(text: str, width: int = 90) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _tree(nodes: list[dict[str, Any]]) -> Any:
    from rich.tree import Tree

    root = Tree("[bold]search tree[/] (score; [green]kept[/] / [dim]pruned[/])")
    by_id: dict[Any, Any] = {}
    for node in sorted(nodes, key=lambda n: (n.get("depth", 0), str(n.get("id")))):
        score = node.get("score")
        label = f"{'-' if score is None else f'{score:.2f}'}  {_short(node.get('text', ''), 70)}"
        label = f"[green]{label}[/]" if node.get("kept") else f"[dim]{label}[/]"
        parent = by_id.get(node.get("parent"), root)
        by_id[node.get("id")] = parent.add(label)
    return root


def _graded_line(outcome: str, reason: str | None, seconds: float | None) -> str:
    """The grader's word on a row's answer: why it is not correct and how long its check ran
    ("" where the grader said nothing, as in rows written before these were recorded)."""
    parts = []
    if reason:
        parts.append(f"why: {reason}")
    if seconds is not None:
        parts.append(f"check ran {seconds:.2f} s")
    if not parts:
        return ""
    infra = " (the sandbox could not run it: no verdict, not a wrong answer)" if outcome == "ungraded" and (
        reason or "").startswith("sandbox_failed") else ""
    return f"graded {outcome}: " + "; ".join(parts) + infra


def show_command(
    run: Path = typer.Argument(..., help="Run directory (holding results.jsonl)."),
    problem_id: str = typer.Argument(..., help="Problem id, as in the run's results."),
    config: str | None = typer.Option(None, "--config", "-c", help="Only this strategy config label (e.g. self_consistency@16)."),
    samples: int = typer.Option(8, "--samples", help="Samples to list per config (0: none)."),
) -> None:
    """Show one problem of a run: answers, votes, samples and search trees."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from tts.benchmarks.append_log import read_append_log
    from tts.eval.rows import ResultRow

    with user_errors():
        path = run / "results.jsonl" if run.is_dir() else run
        if not path.is_file():
            raise fail(f"{path} does not exist; pass a tts eval run directory.")
        rows = [ResultRow.model_validate(r) for r in read_append_log(path) if r.get("problem_id") == problem_id]
    if config:
        rows = [r for r in rows if r.config == config]
    if not rows:
        raise fail(f"no results for problem {problem_id!r}{f' and config {config!r}' if config else ''} in {path}.")
    console = Console()
    for row in rows:
        colour = {"correct": "green", "wrong": "red"}.get(row.outcome, "yellow")
        console.rule(f"[bold]{row.config}[/]  answer {row.answer!r}  gold {row.gold!r}  [{colour}]{row.outcome}[/]")
        console.print(f"confidence {row.confidence:.2f}, pass@n {row.coverage}, {row.usage.total_tokens:,} tokens, "
                      f"{row.usage.calls} engine call(s)")
        graded = _graded_line(row.outcome, row.grade_reason, row.grading_seconds)
        if graded:
            console.print(graded, markup=False, highlight=False)
        trace = row.trace
        if trace.get("votes"):
            total = sum(trace["votes"].values()) or 1.0
            table = Table("answer", "votes", "share", title="votes")
            for answer, weight in sorted(trace["votes"].items(), key=lambda kv: -kv[1]):
                table.add_row(answer, f"{weight:.3g}", f"{weight / total:.2f}")
            console.print(table)
        if trace.get("tree"):
            console.print(_tree(list(trace["tree"])))
        listed = trace.get("samples", [])[:samples]
        if listed:
            why = any(s.get("grade_reason") for s in listed)  # a column only where the grader said why
            table = Table("#", "answer", "outcome", *(["why (grader)"] if why else []), "tokens", "text",
                          title=f"samples (first {len(listed)})")
            for i, s in enumerate(listed):
                reason = [escape(_short(s.get("grade_reason") or "", 50))] if why else []
                table.add_row(str(i), escape(str(s.get("answer"))), str(s.get("outcome", "")), *reason,
                              str(s.get("completion_tokens")), escape(_short(s.get("text", ""))))
            console.print(table)
