"""The Ray sweep's dispatcher on a fake Ray (no processes): a unit whose worker dies runs again on another
worker, a replacement that never finds room does not hold the sweep up, and limits give one-line errors.
The real cluster (a node lost mid-sweep) is tests/eval/test_ray_cluster.py (heavy)."""

from __future__ import annotations

import pytest

pytest.importorskip("ray")
from ray.exceptions import ActorDiedError  # noqa: E402

import tts.eval.distributed as distributed  # noqa: E402
from tts.eval.sweep import SweepError, Unit  # noqa: E402


class _Ref:
    def __init__(self, value=None, error=None, done=True):
        self.value, self.error, self.done = value, error, done


class _Method:
    def __init__(self, fn):
        self.remote = fn


class _Actor:
    """Dies on the compute calls ``fates`` marks "die"; ``placed=False``: the cluster never has room for it."""

    def __init__(self, name: str, fates: list[str], placed: bool = True):
        self.name, self.fates, self.computed = name, fates, []
        self.ready = _Method(lambda: _Ref(True, done=placed))
        self.compute = _Method(self._compute)

    def _compute(self, unit: Unit) -> _Ref:
        if self.fates and self.fates.pop(0) == "die":
            return _Ref(error=ActorDiedError())
        self.computed.append(unit.seed)
        return _Ref([(self.name, unit.seed)])


class _FakeRay:
    def __init__(self):
        self.killed, self.waits = [], []

    def wait(self, refs, num_returns, timeout):
        self.waits.append(timeout)
        return [r for r in refs if r.done][:1], []

    def get(self, ref):
        if ref.error:
            raise ref.error
        return ref.value

    def kill(self, actor, no_restart):
        self.killed.append(actor.name)

    def available_resources(self):
        return {"CPU": 0.0}

    def nodes(self):
        return [{"Alive": True}]


def _dispatch(actors: list[_Actor], seeds: int, retries: int = 3):
    made = iter(actors)
    ray = _FakeRay()
    d = distributed._Dispatcher(ray, lambda: next(made), [Unit("m", s, ("sc@1",)) for s in range(seeds)], retries)
    return d, ray


def test_a_dead_workers_unit_runs_on_a_live_worker_while_its_replacement_waits_for_room():
    # a dies on its first unit (its node lost); its replacement c is never placed; b does the rest.
    a, b, c = _Actor("a", ["die"]), _Actor("b", []), _Actor("c", [], placed=False)
    d, ray = _dispatch([a, b, c], seeds=4)
    d.start(2)
    results = [cells for cells in d.results()]
    assert sorted(seed for cells in results for _, seed in cells) == [0, 1, 2, 3]  # every unit once
    assert a.computed == [] and c.computed == [] and sorted(b.computed) == [0, 1, 2, 3]
    assert ray.killed == ["a"] and d.waiting() == [c] and d.placed() == [b]
    assert d.losses == {("m", 0): 1}


def test_the_lost_unit_is_the_next_one_handed_out():
    # a is placed first and dies on unit 0; b, placed next, gets unit 0 before units 1 and 2.
    a, b = _Actor("a", ["die"]), _Actor("b", [])
    d, _ = _dispatch([a, b, _Actor("c", [], placed=False)], seeds=3)
    d.start(2)
    assert [seed for cells in d.results() for _, seed in cells] == [0, 1, 2]
    assert b.computed == [0, 1, 2]


def test_a_unit_that_loses_its_worker_more_often_than_retries_allow_stops_the_sweep():
    actors = [_Actor(f"w{i}", ["die"]) for i in range(5)]
    d, _ = _dispatch(actors, seeds=1, retries=2)
    d.start(1)
    with pytest.raises(SweepError, match=r"m seed 0 died 3 times \(retries: 2\).*run the same command again"):
        list(d.results())


def test_with_no_worker_placed_the_sweep_gives_up_after_the_placement_timeout(monkeypatch):
    monkeypatch.setattr(distributed, "PLACEMENT_TIMEOUT_S", 7.0)
    d, ray = _dispatch([_Actor("a", [], placed=False)], seeds=2)
    d.start(1)
    with pytest.raises(SweepError, match=r"no Ray worker could run for 7 s .*0 CPUs and 0 GPUs free on 1 live nodes"):
        list(d.results())
    assert ray.waits == [7.0]  # waits with the limit only while nothing runs
