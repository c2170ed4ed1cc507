"""``tts show RUN PROBLEM_ID``: one problem's results in a run, as a reader wants to see them.

For every strategy config of the run: the answer, the gold and the outcome, and where the grader
says so why the answer is not correct and how long its check ran (code answers: the sandbox's
verdict, ``timeout: ran past 5 s``); a voting trace as its votes (answer, weight, share) and its
samples (each with its outcome and, where given, why); a search trace as its tree (each node's
step, score and whether the search kept it). Rows written before the grader's reasons were
recorded show without them. ``--html`` writes the same as one page for a browser (:mod:`tts.view`);
``tts view RUN`` writes every problem's page and an index.
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


def _write_html(run: Path, problem_id: str, config: str | None, out: Path | None) -> None:
    """``tts show --html``: the problem's page, written where asked; its path printed."""
    from tts.view import ViewError, load_rows, problem_page, rows_for
    from tts.view.index import page_name

    with user_errors():
        try:
            rows = rows_for(load_rows(run), problem_id, config, where=str(run))
        except ViewError as exc:
            raise fail(str(exc)) from None
        base = run if run.is_dir() else run.parent
        target = out or base / "view" / "problems" / page_name(problem_id)
        if target.is_dir():
            target = target / page_name(problem_id)
        target.parent.mkdir(parents=True, exist_ok=True)
        index = base / "view" / "index.html"
        link = "../index.html" if out is None and index.is_file() else None
        target.write_text(problem_page(rows, base.name or str(base), index_href=link), encoding="utf-8")
    typer.echo(f"wrote {target}")


def show_command(
    run: Path = typer.Argument(..., help="Run directory (holding results.jsonl)."),
    problem_id: str = typer.Argument(..., help="Problem id, as in the run's results."),
    config: str | None = typer.Option(None, "--config", "-c", help="Only this strategy config label (e.g. self_consistency@16)."),
    samples: int = typer.Option(8, "--samples", help="Samples to list per config (0: none)."),
    html: bool = typer.Option(False, "--html", help="Write the problem's page as one self-contained HTML file "
                              "(the tree as SVG, the votes, the calls; opens offline) instead of printing."),
    out: Path | None = typer.Option(None, "--out", "-o", help="With --html: the file to write "
                                    "(default RUN/view/problems/<id>.html, where `tts view RUN` links it)."),
) -> None:
    """Show one problem of a run: answers, votes, samples and search trees (--html: as a page for a browser)."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from tts.benchmarks.append_log import read_append_log
    from tts.eval.rows import ResultRow

    if html:
        _write_html(run, problem_id, config, out)
        return
    if out is not None:
        raise fail("--out writes the page of --html; add --html, or leave --out out to print.")
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


def view_command(
    run: Path = typer.Argument(..., help="Run directory (holding results.jsonl)."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Folder to write index.html and problems/ into "
                                    "(default RUN/view)."),
) -> None:
    """Write a run's pages for a browser: an index of its problems (filters: wrong, contested; sort by cost)
    and one self-contained page per problem."""
    from tts.view import ViewError, load_rows, write_run_pages

    with user_errors():
        try:
            rows = load_rows(run)
        except ViewError as exc:
            raise fail(str(exc)) from None
        if not rows:
            raise fail(f"{run} holds no results yet; run tts eval into it first.")
        base = run if run.is_dir() else run.parent
        index = write_run_pages(rows, base.name or str(base), out or base / "view")
    typer.echo(f"wrote {index} ({len({r.problem_id for r in rows})} problem pages beside it); open it in a browser")
