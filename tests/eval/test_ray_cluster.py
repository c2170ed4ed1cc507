"""``tts sweep`` on a Ray cluster of several nodes (Ray's own multi-node test cluster on this machine) that
loses a node mid-sweep: the sweep finishes, with every cell exactly once and equal to one process's.

Heavy (a head and two worker nodes start: 40-60 s on 2 cores): ``pytest -m heavy tests/eval/test_ray_cluster.py``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from pathlib import Path

import pytest

from tts.eval.distributed import run_sweep_ray
from tts.eval.sweep import CELLS, Cell, SweepSpec, read_cells, run_sweep

pytestmark = pytest.mark.heavy

SPEC = SweepSpec(strategies=["self_consistency", "best_of_n"], n=[1, 4], seeds=4,
                 eval={"backend": {"kind": "scripted"}, "data": {"limit": 3}, "sampling": {"max_tokens": 64}})
"""Four units (one model x seeds 0-3) of four cells each."""


def _comparable(cells: list[Cell]) -> dict[tuple, dict]:
    return {c.key: {k: v for k, v in asdict(c).items() if k != "wall_seconds"} for c in cells}


@pytest.fixture
def cluster():
    """A head node with no CPUs (it schedules nothing) and two worker nodes of one CPU each."""
    pytest.importorskip("ray")
    import ray
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    workers = [c.add_node(num_cpus=1) for _ in range(2)]
    c.wait_for_nodes()
    try:
        yield c, workers
    finally:
        ray.shutdown()
        c.shutdown()


def test_a_sweep_on_a_cluster_that_loses_a_node_finishes_with_every_cell_once(cluster, tmp_path, caplog):
    c, workers = cluster
    reference = run_sweep(SPEC, tmp_path / "one-process")
    lost: list[int] = []

    def progress(done: int, total: int) -> None:
        if done and not lost:  # the first unit is back: the other node is busy with (or about to get) another
            c.remove_node(workers[1])  # its raylet and every worker process on it are killed
            lost.append(done)

    with caplog.at_level(logging.WARNING, logger="tts.eval.distributed"):
        result = run_sweep_ray(SPEC, tmp_path / "ray", address=c.address, num_workers=2, progress=progress)
    assert lost == [4]
    rows = [json.loads(x) for x in (tmp_path / "ray" / CELLS).read_text().splitlines() if x.strip()]
    keys = [(r["model"], r["config"], r["seed"]) for r in rows]
    assert len(keys) == len(set(keys)) == 16  # every cell once: none lost with the node, none doubled by the retry
    assert _comparable(result.cells) == _comparable(reference.cells) == _comparable(read_cells(tmp_path / "ray"))
    assert "lost" in caplog.text and "again" in caplog.text  # the dead node's unit was run again elsewhere
