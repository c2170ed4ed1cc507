"""Sweeps on a Ray cluster: the units of a sweep run on Ray actors, their cells stream back to one store.

A sweep is a list of units (:class:`tts.eval.sweep.Unit`: the missing cells of one model x seed).
:func:`run_sweep_ray` computes them on Ray actors fed one unit at a time:

- **Actors, one engine each.** A worker actor holds at most one generator at a time (an
  :class:`~tts.backends.engine_pool.EnginePool` of size 1) and keeps it across the units it is given
  while their backend config is the same (model and engine seed; the engine seed follows the run
  seed unless the sweep pins ``eval.backend.seed``); a unit that needs another config closes it and
  starts the next. With the vLLM backend on a cluster with GPUs each actor reserves one GPU
  (``gpus_per_worker``). Pool sweeps run on the same actors, which replay without an engine.
- **Streaming, resumable.** The driver owns the :class:`~tts.eval.sweep.CellStore` and appends a
  unit's cells the moment its actor returns them (``ray.wait`` on every unit in flight), so an
  interrupted driver loses at most the units in flight, and rerunning the same command computes
  only the cells still missing.
- **Fault tolerance.** When a worker dies (its process, or its whole node), the driver gives its
  unit to another worker and asks Ray for a replacement actor, which joins once the cluster has
  room for it. Ray's own actor restart is not used: a restart waits for room, and after a lost node
  the surviving actors hold all of it, so the dead worker's unit would wait forever (seen with
  Ray's multi-node test cluster). A unit is safe to rerun (a live unit is a ``tts eval`` run
  directory under ``OUT/live/`` that resumes problem by problem; a pool unit is a pure replay),
  and the store keeps the first copy of a cell, so no cell is lost or doubled.

The grain of distribution is the unit. Problem shards within one (model, seed) are not split
across workers: one live unit is one engine's run, and a retried unit resumes at the first problem
its run directory does not hold, so a lost worker costs at most the batch it was generating.

On a cluster (``address="auto"`` or ``HOST:PORT``) every node must see the sweep directory, the
pool file or dataset and an installed ``tts`` at the same paths (a shared filesystem); workers
start in the driver's working directory where it exists, so relative paths resolve as they do for
the driver. Workers' own log lines stay in Ray's session logs (``/tmp/ray/session_latest/logs``
on each node); what fails in a unit reaches the driver as its error.
"""

from __future__ import annotations

import logging
import os
import re
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tts.eval.sweep import (
    Cell,
    CellStore,
    ProgressFn,
    SweepError,
    SweepResult,
    SweepSpec,
    Unit,
    check_spec,
    compute_unit,
    finish,
    plan_units,
)

logger = logging.getLogger(__name__)

CRASH_DIR_ENV = "TTS_SWEEP_TEST_CRASH_DIR"
"""Tests only: a folder of flag files named ``<model>-seed<seed>``. A worker that finishes a unit
whose flag is there removes it and kills its own process before returning the cells, as a lost
node would; the flag then holds nothing, so the retry completes."""


def run_sweep_ray(
    spec: SweepSpec,
    out: str | Path,
    address: str = "local",
    num_workers: int | None = None,
    progress: ProgressFn | None = None,
    retries: int = 3,
    gpus_per_worker: float | None = None,
) -> SweepResult:
    """Run (or resume) a sweep on Ray; returns every cell of the grid, as :func:`~tts.eval.sweep.run_sweep` does.

    Args:
        spec: The grid and its source.
        out: Sweep directory (on a cluster: on a filesystem every node sees at the same path).
        address: ``"local"`` starts a Ray instance on this machine and stops it at the end;
            ``"auto"`` joins the cluster ``ray start`` runs here, ``HOST:PORT`` (or ``ray://...``)
            a remote one. A process already connected to Ray (its own ``ray.init``) uses that
            connection whatever ``address`` says, and it stays open.
        num_workers: Actors to start; default: one per GPU for vLLM on a cluster with GPUs, one per
            node for vLLM without GPUs (a CPU engine uses its node's cores), one per CPU otherwise;
            never more than the units to compute.
        progress: Called with (cells done, cells total).
        retries: Times a unit may lose its worker (a dead process or a lost node) and run again on
            another before the sweep gives up.
        gpus_per_worker: GPUs each actor reserves; default 1 for the vLLM backend when the cluster
            has GPUs, else 0.

    Raises:
        SweepError: Ray is not installed, the cluster cannot be reached, the spec cannot run, a
            worker died more often than ``retries`` restarts allow, or a unit failed (the cells of
            finished units are kept; the units in flight resume on the next run).

    Example:
        >>> spec = SweepSpec(strategies=["self_consistency"], n=[1, 4], seeds=4,
        ...                  eval={"backend": {"kind": "scripted"}, "data": {"limit": 5}})
        >>> result = run_sweep_ray(spec, "runs/sw", num_workers=2)  # doctest: +SKIP
    """
    if num_workers is not None and num_workers < 1:
        raise SweepError(f"num_workers must be at least 1, got {num_workers}")
    if retries < 0:
        raise SweepError(f"retries must be 0 or more, got {retries}")
    ray = _import_ray()
    # 1. What to compute: refuse a bad spec before any Ray process starts.
    out = Path(out)
    models = check_spec(spec)
    store = CellStore(out, spec)
    started = False
    try:
        units = plan_units(spec, models, store)
        total = len(models) * len(spec.grid()) * spec.seeds
        done = total - sum(len(u.configs) for u in units)
        if progress:
            progress(done, total)
        if units:
            # 2. Ray: join (or start) the cluster, one actor per worker.
            started = _connect(ray, address, num_workers)
            done = _run_units(ray, spec, out, units, store, num_workers, retries, gpus_per_worker, done, total,
                              progress)
    finally:
        store.close()
        if started:
            ray.shutdown()
    return finish(spec, out, models, store, sum(len(u.configs) for u in units))


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise SweepError("running a sweep on Ray needs the ray package: pip install 'tts[ray]' "
                         "(or drop --ray to run the sweep in this process)") from None
    return ray


def _connect(ray: Any, address: str, num_workers: int | None) -> bool:
    """Connect to Ray as ``address`` says; returns whether this call started the connection."""
    if ray.is_initialized():
        logger.info("using this process's Ray connection; address %r is not used", address)
        return False
    quiet = {"include_dashboard": False, "logging_level": logging.WARNING, "log_to_driver": False}
    if address == "local":
        cpus = max(os.cpu_count() or 1, num_workers or 1)  # room for every worker asked for
        ray.init(address="local", num_cpus=cpus, **quiet)
    else:
        _probe(address)
        try:
            ray.init(address=address, **quiet)
        except (ConnectionError, ValueError, RuntimeError) as exc:
            raise SweepError(f"cannot join the Ray cluster at {address!r} ({str(exc).splitlines()[0]}); start one "
                             "with `ray start --head`, give its HOST:PORT, or use --ray local") from None
    return True


def _probe(address: str) -> None:
    """Refuse a HOST:PORT nothing listens on (``ray.init`` would wait for it for minutes)."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return  # "auto", or a form Ray parses itself
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=10).close()
    except OSError as exc:
        raise SweepError(f"cannot reach a Ray cluster at {address} ({exc.strerror or exc}); check the head node's "
                         "address (`ray status` on it prints it), or use --ray local") from None


def _run_units(ray: Any, spec: SweepSpec, out: Path, units: Sequence[Unit], store: CellStore,
               num_workers: int | None, retries: int, gpus_per_worker: float | None, done: int, total: int,
               progress: ProgressFn | None) -> int:
    """Compute ``units`` on a pool of actors, writing each unit's cells as it returns; returns cells done."""
    # 1. Size and place the actors.
    vllm = not spec.pool and (spec.eval.get("backend") or {}).get("kind", "vllm") == "vllm"
    resources = ray.cluster_resources()
    gpus = gpus_per_worker if gpus_per_worker is not None else (1.0 if vllm and resources.get("GPU", 0) else 0.0)
    if num_workers is None:
        if gpus:
            num_workers = int(resources.get("GPU", 0) // gpus)
        elif vllm:
            num_workers = sum(1 for node in ray.nodes() if node.get("Alive"))
        else:
            num_workers = int(resources.get("CPU", 1))
    num_workers = max(1, min(num_workers, len(units)))
    fits = int(resources.get("GPU", 0) // gpus) if gpus else int(resources.get("CPU", 0))
    if num_workers > fits:
        logger.warning("%d workers asked for, but the cluster now has room for %d (%s); the others wait for "
                       "resources (an autoscaler may add them)", num_workers, fits,
                       f"{resources.get('GPU', 0):g} GPUs" if gpus else f"{resources.get('CPU', 0):g} CPUs")
    # Ray does not restart these actors itself: a restart waits for room on the cluster, and after a lost
    # node there may be none while the surviving actors hold theirs, so the unit would wait forever.
    # The dispatcher gives a dead worker's unit to a live one and asks for a replacement instead.
    worker = ray.remote(_SweepWorker).options(
        num_cpus=1, num_gpus=gpus, max_restarts=0, max_task_retries=0, scheduling_strategy="SPREAD")
    logger.info("sweep on Ray: %d units on %d workers (%g GPUs each)", len(units), num_workers, gpus)
    dispatch = _Dispatcher(ray, lambda: worker.remote(spec, str(out.resolve()), os.getcwd()), units, retries)
    # 2. Feed them; each unit's cells go to the store the moment they arrive.
    finished = False
    try:
        dispatch.start(num_workers)
        for cells in dispatch.results():
            store.write(cells)
            done += len(cells)
            if progress:
                progress(done, total)
        finished = True
    finally:
        for actor in dispatch.waiting():
            ray.kill(actor, no_restart=True)
        _stop(ray, dispatch.placed(), graceful=finished)
    return done


PLACEMENT_TIMEOUT_S = 600.0
"""How long units may wait with no worker running (none placed yet, or all lost) before the sweep gives up."""


class _Dispatcher:
    """Units to actors, one at a time each; a unit whose actor died goes to another actor.

    An actor is given work once it is placed and answers (``ready``); a dead actor is dropped and a
    replacement asked for, which joins when the cluster has room for it (maybe never: the survivors
    then do the rest). A unit may lose its worker ``retries`` times; a unit is safe to run again (a
    live unit resumes its run directory, a pool unit is a replay) and the store keeps a cell's first
    copy, so a retry neither loses nor doubles a cell.
    """

    def __init__(self, ray: Any, new_actor: Any, units: Sequence[Unit], retries: int) -> None:
        self.ray, self.new_actor, self.retries = ray, new_actor, retries
        self.queue = list(reversed(units))  # popped from the end: the planned order
        self.idle: list[Any] = []
        self.starting: dict[Any, Any] = {}  # ready() ref -> actor not yet placed
        self.running: dict[Any, tuple[Any, Unit]] = {}  # compute() ref -> (actor, unit)
        self.losses: dict[tuple[str, int], int] = {}

    def start(self, count: int) -> None:
        for _ in range(count):
            self._add_actor()

    def placed(self) -> list[Any]:
        """The actors that started (idle or running)."""
        return [*self.idle, *(a for a, _ in self.running.values())]

    def waiting(self) -> list[Any]:
        """The actors asked for and not placed yet (the cluster may never have room for them)."""
        return list(self.starting.values())

    def _add_actor(self) -> None:
        actor = self.new_actor()
        self.starting[actor.ready.remote()] = actor

    def results(self) -> Any:
        """Yield each unit's cells as it finishes; raises SweepError when a unit cannot finish."""
        from ray.exceptions import RayActorError, RayTaskError

        while self.queue or self.running:
            while self.idle and self.queue:
                actor, unit = self.idle.pop(), self.queue.pop()
                self.running[actor.compute.remote(unit)] = (actor, unit)
            timeout = None if self.running else PLACEMENT_TIMEOUT_S
            ready, _ = self.ray.wait([*self.running, *self.starting], num_returns=1, timeout=timeout)
            if not ready:
                raise SweepError(f"no Ray worker could run for {PLACEMENT_TIMEOUT_S:.0f} s (the cluster has no room "
                                 f"for one: {_room(self.ray)}); the finished cells are kept: run the same command "
                                 "again to resume")
            ref = ready[0]
            if ref in self.starting:
                actor = self.starting.pop(ref)
                try:
                    self.ray.get(ref)
                except RayActorError:
                    logger.warning("a Ray worker died before it could start; another is asked for")
                    self._replace(actor)
                else:
                    self.idle.append(actor)
                continue
            actor, unit = self.running.pop(ref)
            try:
                cells = self.ray.get(ref)
            except RayTaskError as exc:
                if isinstance(exc.cause, SweepError):
                    raise SweepError(str(exc.cause)) from None
                raise
            except RayActorError as exc:
                self._lost(actor, unit, exc)
                continue
            self.idle.append(actor)
            yield cells

    def _lost(self, actor: Any, unit: Unit, exc: Exception) -> None:
        """The worker running ``unit`` died (its process, or its node): run the unit again on another."""
        key = (unit.model, unit.seed)
        self.losses[key] = self.losses.get(key, 0) + 1
        if self.losses[key] > self.retries:
            raise SweepError(f"a Ray worker running {unit.model} seed {unit.seed} died {self.losses[key]} times "
                             f"(retries: {self.retries}): {str(exc).splitlines()[0]}; the finished cells are kept: "
                             "run the same command again to resume") from None
        logger.warning("the Ray worker running %s seed %d was lost (%s); the unit runs again on another worker",
                       unit.model, unit.seed, str(exc).splitlines()[0])
        self.queue.append(unit)  # next in line
        self._replace(actor)

    def _replace(self, actor: Any) -> None:
        self.ray.kill(actor, no_restart=True)
        self._add_actor()


def _room(ray: Any) -> str:
    """The cluster's free CPUs and GPUs, for a message."""
    free = ray.available_resources()
    return f"{free.get('CPU', 0):g} CPUs and {free.get('GPU', 0):g} GPUs free on {sum(1 for n in ray.nodes() if n.get('Alive'))} live nodes"


def _stop(ray: Any, actors: Sequence[Any], graceful: bool) -> None:
    """Close the actors' engines (after a clean finish), then end the actors."""
    from ray.exceptions import RayError

    if graceful:
        try:
            ray.get([a.close.remote() for a in actors], timeout=120)
        except (RayError, TimeoutError) as exc:  # an engine that will not close still goes with its process
            logger.warning("a Ray worker did not close its engine cleanly: %s", exc)
    for a in actors:
        ray.kill(a, no_restart=True)


class _SweepWorker:
    """A Ray actor (wrapped with ``ray.remote`` by :func:`run_sweep_ray`): computes units with its one engine."""

    def __init__(self, spec: SweepSpec, out: str, cwd: str) -> None:
        from tts.backends.engine_pool import EnginePool

        if os.path.isdir(cwd):
            os.chdir(cwd)  # relative paths in the spec mean what they mean to the driver
        self.spec = spec
        self.out = out
        self.engines = EnginePool(max_size=1)

    def ready(self) -> bool:
        """Answers once the actor is placed and constructed: the dispatcher gives it work from then on."""
        return True

    def compute(self, unit: Unit) -> list[Cell]:
        """The unit's cells, computed on this worker's engine (started or swapped as needed)."""
        cells = compute_unit(self.spec, unit, self.out, self._generator(unit))
        _crash_for_tests(unit)
        return cells

    def _generator(self, unit: Unit) -> Any:
        """This worker's engine for the unit's backend config; None for pool units (or a config that
        does not validate: compute_unit then reports what is wrong with it)."""
        if self.spec.pool:
            return None
        from tts.eval.runner import load_problems
        from tts.eval.sweep import live_eval_config

        # The config compute_unit's live run builds, so the engine is the one a single process would start.
        try:
            cfg = live_eval_config(self.spec, unit)
        except SweepError:
            return None
        _, problems = load_problems(cfg)
        return self.engines.get(cfg.backend, problems)

    def close(self) -> None:
        """Close the engine."""
        self.engines.close_all()


def _crash_for_tests(unit: Unit) -> None:
    """Die here, once, for a unit flagged in ``$TTS_SWEEP_TEST_CRASH_DIR`` (see :data:`CRASH_DIR_ENV`)."""
    folder = os.environ.get(CRASH_DIR_ENV)
    if not folder:
        return
    flag = Path(folder) / crash_flag_name(unit.model, unit.seed)
    try:
        flag.unlink()  # atomic: exactly one attempt at this unit finds the flag
    except FileNotFoundError:
        return
    (flag.parent / f"{flag.name}.died").write_text(str(os.getpid()))
    os._exit(70)


def crash_flag_name(model: str, seed: int) -> str:
    """The flag file that makes a worker die after computing (model, seed) (tests only)."""
    return f"{re.sub(r'[^A-Za-z0-9._-]+', '_', model)}-seed{seed}"
