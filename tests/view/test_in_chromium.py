"""The pages in a real browser (headless Chromium): a beam search's tree, a vote and a HumanEval
problem render, the page's script runs without an error and a click on a node shows its step.
Skipped where Chromium is not installed (``apt-get install chromium``)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.view.scripted_runs import eval_run, rows, show_html

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed (apt-get install chromium)")

CLICK = """<script>
var g = document.querySelector('g.n.chosen');
g.dispatchEvent(new MouseEvent('click', {bubbles: true}));
console.log('PANEL ' + JSON.stringify(document.querySelector('.panel pre').textContent));
</script>"""


def _chromium(page: Path, tmp: Path, *args: str) -> subprocess.CompletedProcess:
    command = [CHROMIUM, "--headless", "--disable-gpu", "--hide-scrollbars", f"--user-data-dir={tmp / 'profile'}",
               "--enable-logging=stderr", "--v=0", *(["--no-sandbox"] if os.geteuid() == 0 else []), *args,
               page.resolve().as_uri()]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert "Uncaught" not in done.stderr, done.stderr  # the page's script ran without an error
    return done


def _colour_pixels(png: Path, rgb: tuple[int, int, int], tolerance: int = 30) -> int:
    import numpy as np

    pixels = np.asarray(pytest.importorskip("PIL.Image").open(png).convert("RGB"), dtype=int)
    return int((np.abs(pixels - np.array(rgb)) <= tolerance).all(axis=-1).sum())


@pytest.fixture(scope="module")
def chains_run(tmp_path_factory) -> Path:
    return eval_run(tmp_path_factory.mktemp("chains") / "run", "--benchmark", "chains", "--limit", "1", "-n", "8",
                    "-s", "beam", "-s", "self_consistency", "--verifier", "chain", "--max-tokens", "160",
                    "--max-depth", "12")


def test_a_beam_search_tree_in_chromium(chains_run, tmp_path):
    row = next(r for r in rows(chains_run) if r["strategy"]["kind"] == "beam")
    page = tmp_path / "beam.html"
    show_html(chains_run, row["problem_id"], page, "--config", row["config"])
    dom = _chromium(page, tmp_path, "--dump-dom").stdout
    assert len(re.findall(r'<g class="n ', dom)) == len(row["trace"]["tree"])
    assert f"answer <b>{row['answer']}</b>" in dom
    shot = tmp_path / "beam.png"
    _chromium(page, tmp_path, "--window-size=1400,900", f"--screenshot={shot}")
    assert _colour_pixels(shot, (0x2f, 0x6f, 0xde)) > 300  # the chosen path, drawn thick and blue
    assert _colour_pixels(shot, (45, 190, 60), 45) > 100  # nodes the verifier scored high, in green
    clicked = tmp_path / "clicked.html"
    clicked.write_text(page.read_text().replace("</body>", CLICK + "</body>"))
    log = _chromium(clicked, tmp_path, "--dump-dom").stderr
    chosen = row["trace"]["tree"][row["trace"]["notes"]["chosen_node"]]
    panel = re.search(r'"PANEL (.*)", source', log).group(1)
    assert f"node {chosen['id']} · depth {chosen['depth']}" in panel and "finished" in panel


def test_a_vote_in_chromium(chains_run, tmp_path):
    row = next(r for r in rows(chains_run) if r["strategy"]["kind"] == "self_consistency")
    page = tmp_path / "vote.html"
    show_html(chains_run, row["problem_id"], page, "--config", row["config"])
    dom = _chromium(page, tmp_path, "--dump-dom").stdout
    assert dom.count('<details class="answer"') == len({s["answer"] for s in row["trace"]["samples"]})
    assert dom.count('<details class="sample"') == len(row["trace"]["samples"])
    shot = tmp_path / "vote.png"
    _chromium(page, tmp_path, "--window-size=1200,700", f"--screenshot={shot}")
    assert _colour_pixels(shot, (0x2f, 0x6f, 0xde)) > 500  # the chosen answer's bar


def test_a_humaneval_problem_in_chromium(humaneval_run, tmp_path):
    row = next(r for r in rows(humaneval_run) if r["outcome"] == "wrong")
    page = tmp_path / "he.html"
    show_html(humaneval_run, row["problem_id"], page, "--config", row["config"])
    dom = _chromium(page, tmp_path, "--dump-dom").stdout
    assert "programs (" in dom and f"sandbox <b>{row['grade_reason']}</b>" in dom
    assert "def " in dom  # the program itself, as text
    shot = tmp_path / "he.png"
    _chromium(page, tmp_path, "--window-size=1200,700", f"--screenshot={shot}")
    assert _colour_pixels(shot, (0xfd, 0xe2, 0xe1), 8) > 100  # the wrong badge
