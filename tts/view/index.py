"""A run's pages: an index of its problems that filters (wrong, contested) and sorts (by cost), and a page per problem.

First on the index: the run's name, its configs with accuracy and tokens, then one table row per
problem with each config's outcome, and the filters above it. A problem counts as wrong when any
config answered it wrong, as contested when its configs disagree or a config's confidence is under
:data:`CONTESTED_BELOW`. Files: ``index.html`` and ``problems/<id>.html``.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from tts.eval.rows import ResultRow
from tts.view.html import badge, esc, page
from tts.view.problem import problem_page

CONTESTED_BELOW = 0.6
"""A config whose answer won less than this share of the vote makes its problem contested."""


def page_name(problem_id: str) -> str:
    """A file name for a problem's page: its id made safe, with a short hash so two ids never share one."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", problem_id)[:60].strip("._") or "problem"
    return f"{safe}-{hashlib.sha1(problem_id.encode()).hexdigest()[:6]}.html"


def _index(rows: list[ResultRow], run: str) -> str:
    by_problem: dict[str, list[ResultRow]] = {}
    for r in rows:
        by_problem.setdefault(r.problem_id, []).append(r)
    configs = list(dict.fromkeys(r.config for r in rows))
    summary = []
    for c in configs:
        mine = [r for r in rows if r.config == c]
        acc = sum(r.correct for r in mine) / len(mine)
        summary.append(f'<tr><td>{esc(c)}</td><td class="num">{len(mine)}</td><td class="num">{acc:.3f}</td>'
                       f'<td class="num">{sum(r.usage.total_tokens for r in mine) / len(mine):,.0f}</td></tr>')
    lines = []
    for order, (pid, mine) in enumerate(by_problem.items()):
        by_config = {r.config: r for r in mine}
        wrong = any(r.outcome == "wrong" for r in mine)
        answers = {r.answer for r in mine}
        contested = len(answers) > 1 or any(r.confidence < CONTESTED_BELOW for r in mine)
        tokens = sum(r.usage.total_tokens for r in mine)
        cells = "".join(f"<td>{badge(by_config[c].outcome) if c in by_config else ''}</td>" for c in configs)
        lines.append(f'<tr data-order="{order}" data-wrong="{int(wrong)}" data-contested="{int(contested)}" '
                     f'data-tokens="{tokens}" data-confidence="{min(r.confidence for r in mine):.4f}">'
                     f'<td><a href="problems/{esc(page_name(pid))}">{esc(pid)}</a></td>{cells}'
                     f'<td class="num">{tokens:,}</td><td class="num">{min(r.confidence for r in mine):.2f}</td></tr>')
    head = "".join(f"<th>{esc(c)}</th>" for c in configs)
    controls = ('<p><label><input type="checkbox" data-filter="wrong"> only wrong</label> &nbsp; '
                f'<label><input type="checkbox" data-filter="contested"> only contested (configs disagree or confidence '
                f'&lt; {CONTESTED_BELOW})</label> &nbsp; sort <select id="sort"><option value="id">as run</option>'
                '<option value="tokens">by cost (tokens)</option></select></p>')
    body = (f'<h1>run <span class="mono">{esc(run)}</span></h1><div class="sub">{len(by_problem)} problems, '
            f"{len(configs)} configs</div><table><tr><th>config</th><th class=num>problems</th><th class=num>accuracy</th>"
            f"<th class=num>tokens / problem</th></tr>{''.join(summary)}</table>{controls}"
            f'<table id="problems"><thead><tr><th>problem</th>{head}<th class="num">tokens</th>'
            f'<th class="num">min confidence</th></tr></thead><tbody>{"".join(lines)}</tbody></table>')
    return page(f"run {run}", body)


def write_run_pages(rows: list[ResultRow], run: str, out: Path) -> Path:
    """Write ``out/index.html`` and a page per problem under ``out/problems/``; returns the index's path."""
    (out / "problems").mkdir(parents=True, exist_ok=True)
    by_problem: dict[str, list[ResultRow]] = {}
    for r in rows:
        by_problem.setdefault(r.problem_id, []).append(r)
    for pid, mine in by_problem.items():
        (out / "problems" / page_name(pid)).write_text(problem_page(mine, run, index_href="../index.html"), encoding="utf-8")
    index = out / "index.html"
    index.write_text(_index(rows, run), encoding="utf-8")
    return index
