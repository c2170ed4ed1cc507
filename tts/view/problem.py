"""One problem's page: every strategy config of a run on that problem, each shown as its family shows best.

First on the page: the problem id and, per config, a line with its answer, the gold, the outcome,
confidence, tokens and engine calls (a table of configs when there are several, each linking to its
section). Then each config's section: what an older trace lacks, the family's view
(:mod:`tts.view.sections`: a tree, the votes, the chain of calls, the programs or the tool calls),
and its events and notes as written.
"""

from __future__ import annotations

from tts.eval.rows import ResultRow
from tts.view import sections
from tts.view.html import badge, esc, facts, page, pre, warn


def brief(text: str | None, width: int = 70) -> str | None:
    """An answer on one line: a program by its ``def`` line, any text cut at ``width``."""
    if text is None:
        return None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    line = next((x for x in lines if x.startswith("def ")), lines[0] if lines else "")
    line += " …" if len(lines) > 1 else ""
    return line if len(line) <= width else line[: width - 1] + "…"


def _anchor(i: int) -> str:
    return f"cfg{i}"


def config_section(i: int, row: ResultRow) -> str:
    """One row (a strategy config on the problem) as a section of the page."""
    trace = row.trace
    fam = sections.family(trace, str(row.strategy.get("kind", "")))
    head = (f'<section class="cfg" id="{_anchor(i)}" data-family="{fam}"><h2>{esc(row.config)}{badge(row.outcome)}</h2>'
            + facts([("answer", brief(row.answer)), ("gold", brief(row.gold)),
                     ("confidence", f"{row.confidence:.2f}"), ("pass@n", "yes" if row.coverage else "no"),
                     ("tokens", f"{row.usage.total_tokens:,}"), ("engine calls", row.usage.calls),
                     ("why", row.grade_reason),
                     ("check s", f"{row.grading_seconds:.2f}" if row.grading_seconds is not None else None),
                     ("strategy", trace.get("strategy") or row.strategy.get("kind"))]))
    lacking = sections.missing(trace, fam, graded=row.outcome != "ungraded")
    if lacking:
        head += warn("this trace was written by an older tts: it lacks " + "; ".join(lacking) + ". Shown without.")
    if row.outcome == "ungraded" and (row.grade_reason or "").startswith("sandbox_failed"):
        head += warn("the sandbox could not run the check: no verdict, not a wrong answer")
    if fam == "tree":
        body = sections.tree_section(trace, row.answer) + sections.votes_section(trace, row.answer, row.gold)
    elif fam == "code":
        body = sections.programs_section(trace, row.answer)
    elif fam == "tools":
        body = sections.tool_calls_section(trace, row.answer)
    elif fam == "calls":
        body = sections.votes_section(trace, row.answer, row.gold) + sections.calls_section(trace)
    else:
        body = sections.votes_section(trace, row.answer, row.gold)
    return head + body + sections.events_and_notes(trace) + "</section>"


def problem_page(rows: list[ResultRow], run: str, index_href: str | None = None) -> str:
    """The whole page of one problem (``rows``: its rows, one per strategy config) of run ``run``."""
    problem_id = rows[0].problem_id
    back = f'<a href="{esc(index_href)}">← all problems</a> · ' if index_href else ""
    top = (f'<div class="sub">{back}run <span class="mono">{esc(run)}</span></div>'
           f"<h1>{esc(problem_id)}</h1>")
    if len(rows) > 1:
        lines = "".join(f'<tr><td><a href="#{_anchor(i)}">{esc(r.config)}</a></td><td class="mono">'
                        f"{esc(brief(r.answer, 60) or '-')}</td><td>{badge(r.outcome)}</td>"
                        f'<td class="num">{r.confidence:.2f}</td><td class="num">{r.usage.total_tokens:,}</td></tr>'
                        for i, r in enumerate(rows))
        top += (f'<table><tr><th>config</th><th>answer</th><th>outcome</th><th class="num">confidence</th>'
                f'<th class="num">tokens</th></tr>{lines}</table>')
    gold = rows[0].gold
    if gold is not None and ("\n" in gold or len(gold) > 80):
        top += f"<details><summary>gold: <span class=mono>{esc(brief(gold))}</span></summary>{pre(gold)}</details>"
    elif gold is not None:
        top += f'<div class="sub">gold: <span class="mono">{esc(gold)}</span></div>'
    body = top + "".join(config_section(i, r) for i, r in enumerate(rows))
    return page(f"{problem_id} · {run}", body)
