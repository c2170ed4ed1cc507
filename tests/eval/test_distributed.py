"""``tts sweep --ray``: on a local Ray instance a sweep equals the single-process one, survives a killed
worker with every cell exactly once, and resumes after an interrupted driver."""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tts.cli.app import app
from tts.eval.distributed import CRASH_DIR_ENV, crash_flag_name, run_sweep_ray
from tts.eval.sweep import CELLS, Cell, SweepError, SweepSpec, read_cells, run_sweep
from tts.models import DEFAULT_MODEL

runner = CliRunner(env={"COLUMNS": "120"})
LIVE = SweepSpec(strategies=["self_consistency", "best_of_n"], n=[1, 4], seeds=2,
                 eval={"backend": {"kind": "scripted"}, "data": {"limit": 3}, "sampling": {"max_tokens": 64}})
"""Two units (one model x seeds 0 and 1) of four cells each."""


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    """One local Ray instance (2 CPUs) for the module; yields the folder of crash flags its workers watch."""
    ray = pytest.importorskip("ray")
    crash_dir = tmp_path_factory.mktemp("crash-flags")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(CRASH_DIR_ENV, str(crash_dir))  # the raylet starts now and its workers inherit it
        ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level=logging.WARNING,
                 log_to_driver=False)
    try:
        yield crash_dir
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def live_reference(tmp_path_factory) -> Path:
    """The live grid computed by ``run_sweep`` in this process."""
    out = tmp_path_factory.mktemp("one-process")
    run_sweep(LIVE, out)
    return out


def _comparable(cells: list[Cell]) -> dict[tuple, dict]:
    """Cells by key, without the measured wall time."""
    return {c.key: {k: v for k, v in asdict(c).items() if k != "wall_seconds"} for c in cells}


def _stored_keys(out: Path) -> list[tuple]:
    """Every key as written in the cells file (the reader would hide a duplicate)."""
    rows = [json.loads(line) for line in (out / CELLS).read_text().splitlines() if line.strip()]
    return [(r["model"], r["config"], r["seed"]) for r in rows]


def _alive(pid: int) -> bool:
    """Whether a process runs (a zombie not yet reaped by its parent counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.is_file() and stat.read_text().rsplit(")", 1)[-1].split()[0] == "Z")


def test_a_two_worker_live_sweep_equals_the_single_process_one(ray_cluster, live_reference, tmp_path):
    done = []
    result = run_sweep_ray(LIVE, tmp_path, num_workers=2, progress=lambda d, t: done.append((d, t)))
    assert result.computed == 8 and result.resumed == 0
    assert _comparable(result.cells) == _comparable(read_cells(live_reference))
    assert all(c.tokens > 0 and c.per_problem and c.flops > 0 for c in result.cells)
    assert sorted(_stored_keys(tmp_path)) == sorted(c.key for c in result.cells)  # each once, as they streamed in
    assert done == [(0, 8), (4, 8), (8, 8)]  # one update per finished unit


def test_a_worker_killed_mid_sweep_has_its_unit_retried_and_nothing_is_lost_or_doubled(
        ray_cluster, live_reference, tmp_path):
    flag = ray_cluster / crash_flag_name(DEFAULT_MODEL, 1)
    flag.touch()  # the worker that finishes unit (model, seed 1) kills its own process before returning its cells
    result = run_sweep_ray(LIVE, tmp_path, num_workers=2)
    died = ray_cluster / f"{flag.name}.died"
    assert not flag.exists() and died.is_file()
    assert not _alive(int(died.read_text()))  # that worker process is really gone
    assert _comparable(result.cells) == _comparable(read_cells(live_reference))
    keys = _stored_keys(tmp_path)
    assert len(keys) == len(set(keys)) == 8
    # The retry resumed the dead worker's run directory instead of drawing its problems again.
    rows = (tmp_path / "live" / f"{DEFAULT_MODEL}-seed1" / "results.jsonl").read_text().splitlines()
    assert len(rows) == 3 * 4


def test_an_interrupted_sweep_resumes_on_ray_computing_only_the_missing_cells(ray_cluster, live_reference, tmp_path):
    # What a driver killed mid-way leaves: seed 0 done, seed 1 half done, a half-written last line.
    lines = (live_reference / CELLS).read_text().splitlines()
    kept = [x for x in lines if json.loads(x)["seed"] == 0 or json.loads(x)["config"].endswith("@1")]
    assert len(kept) == 6
    (tmp_path / CELLS).write_text("\n".join(kept) + "\n" + lines[-1][:40])
    result = run_sweep_ray(LIVE, tmp_path, num_workers=2)
    assert (result.computed, result.resumed) == (2, 6)
    assert not (tmp_path / "live" / f"{DEFAULT_MODEL}-seed0").exists()  # a finished unit is not run again
    assert _comparable(result.cells) == _comparable(read_cells(live_reference))
    assert sorted(_stored_keys(tmp_path)) == sorted(c.key for c in result.cells)


@pytest.fixture
def small_pool_shape() -> tuple[int, int]:
    """``small_pool`` (tests/eval/conftest.py) at 30 problems x 8 samples, smaller than the sweep tests' pool."""
    return 30, 8


def test_tts_sweep_ray_replays_a_pool_on_two_workers_as_one_process_does(ray_cluster, small_pool, tmp_path):
    args = ["--pool", str(small_pool), "-s", "self_consistency", "-s", "weighted_vote", "--n", "1,4,8",
            "--seeds", "2", "--draws", "50"]
    r = runner.invoke(app, ["sweep", *args, "--out", str(tmp_path / "one")])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["sweep", *args, "--ray", "local", "--workers", "2", "--out", str(tmp_path / "ray")])
    assert r.exit_code == 0, r.output
    assert "24 cells computed, 0 resumed" in r.output
    assert _comparable(read_cells(tmp_path / "ray")) == _comparable(read_cells(tmp_path / "one"))
    r = runner.invoke(app, ["sweep", *args, "--ray", "local", "--out", str(tmp_path / "ray")])
    assert "0 cells computed, 24 resumed" in r.output


def test_workers_without_ray_is_refused(tmp_path):
    r = runner.invoke(app, ["sweep", "--backend", "scripted", "--workers", "2", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "--ray local" in r.output


def test_without_ray_installed_the_sweep_says_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now fails as if it were not installed
    with pytest.raises(SweepError, match=r"pip install 'tts\[ray\]'"):
        run_sweep_ray(LIVE, tmp_path)
    r = runner.invoke(app, ["sweep", "--backend", "scripted", "--limit", "2", "--ray", "local",
                            "--out", str(tmp_path / "cli")])
    assert r.exit_code == 2 and "pip install 'tts[ray]'" in r.output and "Traceback" not in r.output


def test_an_address_where_no_cluster_listens_is_a_clear_error(monkeypatch, tmp_path):
    ray = pytest.importorskip("ray")
    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # as in a fresh `tts sweep` process
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # free once closed: nothing listens there
    with pytest.raises(SweepError, match=f"cannot reach a Ray cluster at 127.0.0.1:{port}"):
        run_sweep_ray(LIVE, tmp_path, address=f"127.0.0.1:{port}")
