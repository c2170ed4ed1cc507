"""``tts show RUN PROBLEM --html`` for every registered strategy on the scripted backend: each page
shows what its family did (a tree with its chosen path, the votes with every sample, the chain of
calls, the programs, the tool calls) and the row's chosen answer."""

from __future__ import annotations

import html
import re

import pytest

from tests.view.scripted_runs import CODE, DEMO, rows, show_html
from tts.registry import STRATEGIES

TREES = {"ab_mcts", "beam", "dvts", "ets", "lookahead", "mcts", "particle_filtering", "particle_gibbs", "rebase"}
CALLS = {"budget_forcing", "certainty_probe", "deepconf", "aggregate", "genselect", "generative_verification",
         "revision", "graph"}


def test_every_registered_strategy_has_a_page_test():
    assert set(STRATEGIES.names()) == set(DEMO) | set(CODE) | {"graph", "auto"}


def _page(run, kind, tmp_path):
    [row] = [r for r in rows(run) if r["strategy"]["kind"] == kind][:1]
    page = show_html(run, row["problem_id"], tmp_path / f"{kind}.html", "--config", row["config"])
    return row, page


def _nodes(page):
    return re.findall(r'<g class="(n [^"]*)" data-id="([^"]*)"', page)


def _answer_shown(row, page):
    answer = row["answer"]
    if answer is None:
        return True
    first = next(line.strip() for line in answer.splitlines() if line.strip())
    return html.escape(first, quote=True)[:40] in page


@pytest.mark.parametrize("kind", sorted(TREES))
def test_a_tree_search_page_draws_every_node_and_marks_the_chosen_path(kind, demo_run, tmp_path):
    row, page = _page(demo_run, kind, tmp_path)
    tree, notes = row["trace"]["tree"], row["trace"]["notes"]
    assert 'data-family="tree"' in page and _answer_shown(row, page)
    nodes = _nodes(page)
    assert len(nodes) == len(tree)  # small trees are drawn whole
    assert f"nodes <b>{len(tree)}</b>" in page
    by_id = {str(n["id"]): n for n in tree}
    path = []
    at = by_id[str(notes["chosen_node"])]
    while at is not None:
        path.append(str(at["id"]))
        at = by_id.get(str(at["parent"])) if at["parent"] is not None else None
    marked = [i for cls, i in nodes if "path" in cls.split()]
    assert sorted(marked) == sorted(path) and [i for cls, i in nodes if "chosen" in cls.split()] == [path[0]]
    assert all(f"{n['tokens']} tokens" in html.unescape(page) for n in tree)  # each node's tokens in its title
    if kind in ("particle_filtering", "particle_gibbs"):
        assert "particle weights per resampling" in page
        assert page.count('<td class="num" title="node') == sum(len(s["weights"]) for s in notes["particles"])


@pytest.mark.parametrize("kind", ["best_of_n", "self_consistency", "usc", "weighted_vote", "auto"])
def test_a_vote_page_shows_each_answer_with_its_samples(kind, request, tmp_path):
    row, page = _page(request.getfixturevalue("auto_run" if kind == "auto" else "demo_run"), kind, tmp_path)
    samples = row["trace"]["samples"]
    assert 'data-family="votes"' in page and _answer_shown(row, page)
    assert page.count('<details class="sample"') == len(samples)
    assert page.count('<details class="answer"') == len({s["answer"] for s in samples})
    if row["trace"].get("selected") is not None:
        assert '<details class="sample" open><summary><span class="mono">#%d</span>' % row["trace"]["selected"] in page


@pytest.mark.parametrize("kind", sorted(CALLS))
def test_a_chain_of_calls_page_shows_every_call_with_its_text(kind, request, tmp_path):
    row, page = _page(request.getfixturevalue("graph_run" if kind == "graph" else "demo_run"), kind, tmp_path)
    calls = row["trace"]["tree"]
    assert 'data-family="calls"' in page and _answer_shown(row, page)
    assert page.count('<div class="call') == len(calls) > 0
    assert all(html.escape(str(c["text"]).split("\n")[0][:30], quote=True) in page for c in calls)


@pytest.mark.parametrize("kind", ["program_vote", "tir"])
def test_a_program_page_shows_each_program_and_its_run(kind, demo_run, tmp_path):
    row, page = _page(demo_run, kind, tmp_path)
    assert 'data-family="code"' in page and _answer_shown(row, page)
    assert f"executions <b>{row['trace']['notes']['executions']}</b>" in page


@pytest.mark.parametrize("kind", [*CODE, "self_consistency"])
def test_a_humaneval_page_shows_each_program_with_the_sandbox_verdict(kind, humaneval_run, tmp_path):
    found = [r for r in rows(humaneval_run) if r["strategy"]["kind"] == kind]
    row = next((r for r in found if r["outcome"] == "wrong"), found[0])
    page = show_html(humaneval_run, row["problem_id"], tmp_path / "he.html", "--config", row["config"])
    samples = row["trace"]["samples"]
    assert 'data-family="code"' in page
    assert f"programs ({len({s['answer'] for s in samples})} distinct of {len(samples)} samples)" in page
    for s in samples:
        if s.get("grade_reason"):
            assert f"sandbox <b>{html.escape(s['grade_reason'])}</b>" in page
    if row["outcome"] == "wrong":
        assert f"why <b>{html.escape(row['grade_reason'])}</b>" in page


def test_a_tool_call_page_shows_each_samples_calls_and_the_voted_call(tmp_path):
    import tts
    from tts.eval.rows import ResultRow
    from tts.types import to_jsonable

    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    sol = tts.solve("What is the weather in 'Paris'?", strategy="tool_vote", n=6, backend="scripted", tools=tools)
    row = ResultRow(problem_id="weather", config="tool_vote@6", strategy={"kind": "tool_vote", "n": 6}, model="m",
                    backend="scripted", answer=sol.answer, gold=None, outcome="ungraded", correct=False,
                    coverage=False, confidence=sol.confidence, usage=sol.usage, trace=to_jsonable(sol.trace))
    (tmp_path / "results.jsonl").write_text(__import__("json").dumps(row.to_json()) + "\n")
    page = show_html(tmp_path, "weather", tmp_path / "p.html")
    calls = [s for s in row.trace["samples"] if s["tool_calls"]]
    assert 'data-family="tools"' in page and calls and "older tts" not in page  # ungraded: no outcomes to lack
    assert "voted call <b>get_weather({&quot;city&quot;: &quot;Paris&quot;})</b>" in page
    assert page.count("get_weather({&quot;city&quot;: &quot;Paris&quot;})</td>") == len(calls)
