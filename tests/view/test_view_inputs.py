"""Bad and hostile input to ``tts show --html`` and ``tts view``: a run that is not there, a problem
id that is not in it, a trace from an older tts, a 2,000-node tree, and model output that holds
markup."""

from __future__ import annotations

import json
import re
import time

from tests.view.scripted_runs import runner, show_html
from tts.cli.app import app
from tts.eval.rows import ResultRow
from tts.types import Usage
from tts.view import problem_page
from tts.view.index import page_name

HOSTILE = '</script><script>alert(1)</script><img src=x onerror=alert(2)> "quoted" & done'


def _row(problem_id="p1", config="beam@4", answer="7", outcome="correct", confidence=0.75, **trace):
    trace.setdefault("strategy", "beam")
    trace.setdefault("samples", [{"text": "3 + 4 = 7", "answer": "7", "outcome": "correct", "completion_tokens": 5}])
    return ResultRow(problem_id=problem_id, config=config, strategy={"kind": "self_consistency", "n": 4}, model="m",
                     backend="scripted", answer=answer, gold="7", outcome=outcome, correct=outcome == "correct",
                     coverage=True, confidence=confidence, usage=Usage(completion_tokens=40, calls=2), trace=trace)


def _write(run, *rows):
    run.mkdir(parents=True, exist_ok=True)
    (run / "results.jsonl").write_text("".join(json.dumps(r.to_json()) + "\n" for r in rows))
    return run


def test_a_run_that_does_not_exist_is_one_line(tmp_path):
    for args in (["show", str(tmp_path / "nope"), "p1", "--html"], ["view", str(tmp_path / "nope")]):
        r = runner.invoke(app, args)
        assert r.exit_code == 2
        assert r.output.strip().splitlines() == [f"error: {tmp_path / 'nope'} does not exist; pass a tts eval run "
                                                 "directory (the one holding results.jsonl)."]


def test_a_problem_not_in_the_run_names_the_close_ones(tmp_path):
    run = _write(tmp_path / "run", _row("demo-003"), _row("demo-013"), _row("chains-1"))
    r = runner.invoke(app, ["show", str(run), "demo-03", "--html"])
    assert r.exit_code == 2 and "no problem 'demo-03'" in r.output
    assert set(r.output.split("did you mean ")[1].rstrip("?\n").split(", ")) == {"demo-003", "demo-013"}
    r = runner.invoke(app, ["show", str(run), "demo-003", "--html", "--config", "rebase@4"])
    assert r.exit_code == 2 and "has no config 'rebase@4'" in r.output and "its configs: beam@4" in r.output


def test_out_without_html_is_refused(tmp_path):
    run = _write(tmp_path / "run", _row())
    r = runner.invoke(app, ["show", str(run), "p1", "--out", str(tmp_path / "x.html")])
    assert r.exit_code == 2 and "--out writes the page of --html" in r.output


def test_model_output_with_markup_renders_as_text(tmp_path):
    tree = [{"id": 0, "parent": None, "depth": 1, "text": HOSTILE, "score": 0.9, "kept": True, "finished": True,
             "answer": HOSTILE, "tokens": 3}]
    run = _write(tmp_path / "run", _row("<b>p1</b>", config="beam@4<i>", answer=HOSTILE, tree=tree,
                                        votes={HOSTILE: 1.0}, notes={"chosen_node": 0, HOSTILE: HOSTILE},
                                        samples=[{"text": HOSTILE, "answer": HOSTILE, "outcome": "wrong",
                                                  "grade_reason": HOSTILE}]))
    page = show_html(run, "<b>p1</b>", tmp_path / "p.html")
    assert page.count("<script>") == 1 and page.count("</script>") == 1  # the page's own script, nothing else
    assert "<img" not in page and "<b>p1</b>" not in page and "<i>" not in page
    assert "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;" in page
    assert "&quot;quoted&quot; &amp; done" in page


def test_a_trace_from_an_older_tts_renders_and_says_what_it_lacks(tmp_path):
    tree = [{"id": 0, "parent": None, "depth": 1, "text": "Start", "score": 0.9, "kept": True},
            {"id": 1, "parent": 0, "depth": 2, "text": "3 + 4 = 7", "score": 1.0, "kept": True, "finished": True,
             "answer": "7"},
            {"id": 2, "parent": 0, "depth": 2, "text": "3 + 4 = 8", "score": 0.0, "kept": False, "finished": True,
             "answer": "8"}]
    old = _row(tree=tree, samples=[{"text": "3 + 4 = 7", "answer": "7"}], selected=0).to_json()
    old.pop("grade_reason"), old.pop("grading_seconds")
    (tmp_path / "results.jsonl").write_text(json.dumps(old) + "\n")
    page = show_html(tmp_path, "p1", tmp_path / "p.html")
    lacks = re.search(r"written by an older tts: it lacks ([^.]*)\.", page).group(1)
    assert lacks == ("each sample&#x27;s graded outcome; tokens per node; the chosen node (its path is inferred "
                     "from the answer)")
    assert "the path marked is the best-scored finished node holding the answer" in page
    marked = re.findall(r'<g class="n [^"]*\bpath\b[^"]*" data-id="(\d+)"', page)
    assert sorted(marked) == ["0", "1"]  # inferred: the answer 7's node and its parent


def _big_tree(n=2000, width=8):
    """A beam-like tree of ``n`` nodes: ``width`` children per kept node, one kept per level."""
    nodes, kept_at, depth = [], None, 1
    while len(nodes) < n:
        ids = range(len(nodes), min(n, len(nodes) + width))
        for i in ids:
            nodes.append({"id": i, "parent": kept_at, "depth": depth, "text": f"step {i}", "score": (i % 10) / 10,
                          "kept": i == ids[0], "finished": False, "tokens": 10})
        kept_at, depth = ids[0], depth + 1
    nodes[kept_at]["finished"] = True
    return nodes, kept_at


def test_a_2000_node_tree_is_drawn_collapsed_to_its_kept_path_at_once(tmp_path):
    tree, leaf = _big_tree()
    row = _row(tree=tree, notes={"chosen_node": leaf})
    problem_page([_row()], "run")  # imports what a page needs (answer keys), as a first page does, before timing
    start = time.perf_counter()
    page = problem_page([row], "run")
    seconds = time.perf_counter() - start
    drawn = re.findall(r'<g class="(n [^"]*)"', page)
    assert seconds < 1.0 and len(page) < 400_000
    assert len(drawn) == 250 == sum("path" in c for c in drawn)  # the kept path, every level of it
    assert "2000 nodes: only the kept paths are drawn (250 nodes)" in page
    assert re.search(r">\+7</text><title>7 nodes below this one are not drawn", page)


def test_tts_view_writes_an_index_that_links_every_problem_with_its_filters(tmp_path):
    run = _write(tmp_path / "run", _row("p1"), _row("p2", answer="8", outcome="wrong", confidence=0.4),
                 _row("p2", config="sc@4", answer="9", outcome="wrong"))
    r = runner.invoke(app, ["view", str(run)])
    assert r.exit_code == 0 and "2 problem pages" in r.output
    index = (run / "view" / "index.html").read_text()
    for pid, wrong, contested in (("p1", 0, 0), ("p2", 1, 1)):
        assert re.search(rf'data-wrong="{wrong}" data-contested="{contested}"[^>]*><td><a href="problems/'
                         rf'{re.escape(page_name(pid))}">{pid}</a>', index)
        assert (run / "view" / "problems" / page_name(pid)).is_file()
    assert 'data-filter="wrong"' in index and 'data-filter="contested"' in index and 'value="tokens"' in index
    p2 = (run / "view" / "problems" / page_name("p2")).read_text()
    assert 'href="../index.html"' in p2 and p2.count('<section class="cfg"') == 2


def test_show_html_without_out_writes_the_page_tts_view_links(tmp_path):
    run = _write(tmp_path / "run", _row("HumanEval/3"))
    r = runner.invoke(app, ["view", str(run)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["show", str(run), "HumanEval/3", "--html"])
    target = run / "view" / "problems" / page_name("HumanEval/3")
    assert r.exit_code == 0 and f"wrote {target}" in r.output.replace("\n", "")
    assert 'href="../index.html"' in target.read_text() and f'href="problems/{page_name("HumanEval/3")}"' in (
        run / "view" / "index.html").read_text()


def test_a_per_request_stop_is_shown_above_the_votes(tmp_path):
    stop = {"rule": "beta", "n": 16, "wave": 4, "drawn": 8, "cancelled": 2, "cancelled_tokens": 37, "not_drawn": 6,
            "waves": 2, "reason": "the leader's posterior share passed 0.95", "streamed": True}
    run = _write(tmp_path / "run", _row(strategy="self_consistency", votes={"7": 8.0}, notes={"stop": stop}))
    page = show_html(run, "p1", tmp_path / "p.html")
    assert ("stopped early: the leader&#x27;s posterior share passed 0.95; 8 of n=16 drawn, 2 cancelled (37 tokens), "
            "6 never started, 2 waves of 4, rule beta") in page
    assert page.index("stopped early") < page.index('<details class="answer"')
