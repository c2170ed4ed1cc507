"""Step-wise search batching: engine calls and orchestration overhead of beam search and DVTS.

Beam search (or DVTS, ``--strategy dvts``) over 64 problems (n = 16, beam width 4, 8 steps each)
on a fake engine that sleeps a fixed latency per ``generate`` call (default 50 ms), as a batched
engine would take about as long for one request as for a step of all problems. It prints, for the
batched strategy and for a naive loop that solves one problem at a time:

- engine calls (batched: one per step, plus one per forcing round; naive: that times the problems),
- wall time, time inside the engine and the verifier, and the orchestration overhead as a share of
  wall time (target < 5% at 50 ms per call, < 10% at 20 ms).

What counts as what:

- engine s: all time inside the fake engine's ``generate``: the simulated latency (the sleep) and
  the fake engine's own work of writing its outputs (reading the prompt, hashing seeds, building
  the completions). That work stands in for the engine's, so it is not counted as ours; the
  ``sleep s`` and ``fake s`` columns split it.
- verifier s: all time inside the (fake) verifier's ``score``.
- overhead s, the orchestration: everything else in ``Strategy.solve``, which is our code: search
  bookkeeping, building the requests, the children and the verifier items, answer extraction on
  every finished candidate, score bookkeeping, building the solutions and their traces, and the
  garbage collector's pauses while it runs.
- gc s: of the overhead, the garbage collector's pauses (collections that start inside the fake
  engine or verifier count as theirs); ``full`` counts the full (generation 2) collections.
- cpu s: the overhead as CPU time of this thread (thread CPU time minus the engine's and the
  verifier's); unlike wall time it does not grow when other processes take the CPU, so on a shared
  machine it is the steadier number (on a quiet one the two agree). ``cpu %`` is the share it
  would have on a quiet machine: cpu s over the simulated latency plus the CPU times of the fake
  engine, the verifier and the orchestration.

Two batched rows, because the garbage collector's settings are the process's, not the library's:

- ``batched``: the library alone, under Python's default collector. This is what tts does by
  itself, in any host process (a notebook, an agent that imports it).
- ``batched+cli``: the same after ``tts.tune_gc()``, which the ``tts`` command runs at
  start-up and ``tts.serve.server.ServerThread`` when it starts: ``gc.collect()``, ``gc.freeze()``
  (objects alive by then are never walked by a full collection again, so the full collections a
  search triggers walk only its own nodes) and a young-generation threshold of 10,000 objects
  instead of 700 (a step's thousands of surviving nodes are walked less often). Here it runs
  after this script's imports and warm-up (math-verify and sympy loaded), as ServerThread's does
  with its engine loaded. The ``tts`` command runs it earlier, before a command imports the engine
  and the grader, so for ``tts eval`` the truth lies between the two rows (nearer this one: the
  threshold applies all the same).

On a GPU host's CPU (a lent H200 machine: 16-core Intel Xeon with AMX, Python 3.12.3, quiet;
2026-11-27, two rounds of ``--skip-naive --repeats 9``): ``batched+cli`` at 50 ms per call 4.95 and
4.57% (beam), 5.15 and 4.44% (DVTS), 26-31 ms of CPU per search; at 20 ms 7.54 and 7.29% (beam),
8.20 and 7.11% (DVTS). The library alone (``batched``): 5.58/5.41% and 4.88/5.11% at 50 ms,
7.5-8.2% at 20 ms. So where search runs against a GPU, the 20 ms target (< 10%) is met and the
50 ms one (< 5%) is met in three of four medians with ``tune_gc``, at the edge without it; this
2-core machine (Python 3.11) takes about 40% more CPU for the same search (40 ms, 6.7% at 50 ms).
The engine there is still this fake one: vLLM does not fit in what a lent machine can be sent.

Where the overhead goes (beam, 64 problems, Python 3.11, thread CPU per search; this 2-core
machine is shared, so compare rows of one run). About 31-35 ms of CPU per search is our
bookkeeping (4 us per node), in this order: the children of each step (state, steps and logprob
tuples: about 10 ms, 1.2 us a child, half of it building the state tuple), the requests (about
6 ms, 3 us each: the 17-slot request about 1.5 us, the seed's SHA-256 with its key string about
1 us, kept so that every seed stays the same), the solutions (samples, vote and usage totals:
about 5 ms), tree nodes (about 3 ms) and the search's own ranking and bookkeeping. ``Trace.tree``
(one dict per node, about 5 ms) is no longer built here: it is built when first read
(``tts.types.LazyRecords``), which ``tts eval`` does when it writes the row and a server reply
never does. Earlier versions took 40-56 ms in the same runs: the verifier was handed a
``VerifyItem`` built per child (the scorer's share fell from 6.3 to 1.4 ms once the states
themselves became the items, see ``tts.verifiers.base.ItemView``), each request cost 5.8 us (built by
its frozen constructor; now by a loop over its slot setters), and the trace tree was built in
every search. What is left is a few Python operations per child; halving it would take fewer
objects per child (no tree node apart from the state) or a compiled core.

The ``batched`` row adds the collector. A search allocates about 6 tracked (container) objects
per generated child: the engine's completion, the verifier's score, and ours (the child's state,
its steps and logprob tuples, its tree node). Those alive at a middle collection are promoted,
and once more than a quarter of the old generation (about 16,000 objects in this 65,000-object
process) was promoted since the last full collection, the next middle one is full: 20-40 ms.
That happened 7 times in 12 searches (beam and DVTS alike; 8 while the trace tree was built in
the search, 9-10 before the ``VerifyItem`` went), so
the median run may or may not show one. The 16,000 objects a search keeps (a ``TreeNode`` and a
``StepState`` per node) reach that bar on their own, and storing the tree as columns did not
remove the collection (tried and reverted; ``tests/search/tree/test_tree_storage.py`` pins the
outputs such a change must keep). ``tune_gc`` (``tts.tune_gc()``) removes it: the
``batched+cli`` row.

``--profile`` prints a cProfile of the orchestration alone: the fake engine and verifier replay
the outputs they recorded on a first search, so no fake work shows. The same replay under
``valgrind --tool=cachegrind`` gives an instruction count that does not move with the machine's
load, unlike every time above (on this machine wall shares of the same code ranged from 8 to 14%
at a load average of 5-8). tts's own cost per search (instructions with the collector off, the
difference of runs of 4 and 1 searches over 3): 247M beam and 244M DVTS before issue 37's round,
240M and 238M after it (a problem's seed text joined once per step, candidates' Samples set by the
slot builder): -2.6%. 256M and 253M at the start of the next stop (the ``force_answer`` stop rule
and its events since), 242M and 238M after it (-5.5%, -6%): the slot builders became straight-line
code (a request 21k instructions -> 15k: each slot's setter is a method-wrapper call of ~850
instructions, where a plain attribute store costs ~40, so a frozen request stays costly to build).
That code was generated (``exec``) and is gone again (issue 49): a loop over the setters, 254M beam
(+5% on 242M; the frozen constructors instead would take 281M, +16%), measured with
``valgrind --tool=cachegrind`` on searches replayed as ``--profile`` replays them.
On this 2-core machine, quiet, three interleaved
runs of old and new each: 5.9-6.7% (``batched+cli``) and 6.0-6.3% (``batched``) for both, the
difference lost in the noise; the 5% goal is not met here. A tree node costs 2.2k instructions
(18M a search, 7.5%): storing nodes as columns could save at most that. Where they go (beam, counted the same way on the inputs of one search): the
children 68M (the StepState tuple 26M, its steps and logprobs tuples 12M, the answer-marker test
7M), the requests 56M (the seeds 20M, most of it SHA-256 itself: CPython's own _sha256 would save
a sixth; the slot builder 27M), the tree nodes about 20M (2,000 instructions a TreeNode, 400 its
is_terminal), the rest the scoring, ranking and solutions. Each is a few Python operations per
child or request; none is repeated work (no re-tokenisation, deep copy or quadratic prompt
building: a continuation is one join of the steps). The collector's full collections are bounded
by how many middle collections a search makes (a full one waits for 10 of them, about 7 a search
here), so they fall only with fewer tracked objects allocated per child, not with fewer kept.

The fake engine's own work also makes each engine call longer than the simulated latency, which
flatters the share of wall time; the last lines show the stricter share, with each engine call
taking exactly the simulated latency (the fake engine's own work taken out of the wall time).

The fake model adds a problem's eight numbers one step at a time, slipping 20% of the time, and
states its answer at the eighth step; the verifier checks the additions (no latency by default).

Usage (from the repository root):
    python benchmarks/search_batching.py [--problems 64] [--latency 0.05] [--strategy beam|dvts] [--profile]
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import random
import re
import time
from collections.abc import Callable, Sequence
from typing import Literal

from tts.backends.base import Completion, GenerationRequest, GenerationResult, request_usage
from tts.serve.gc_tuning import tune_gc
from tts.config import SamplingConfig, VerifierConfigBase
from tts.prompts import MATH_PROMPT
from tts.registry import VERIFIERS
from tts.search.tree.beam import BeamConfig, BeamSearch
from tts.search.tree.dvts import DVTS, DVTSConfig
from tts.search.tree.stepwise import ANSWER_NUDGE
from tts.types import Problem
from tts.verifiers.base import VerifierScore, VerifyItem

_SUM = re.compile(r"= (-?\d+)")
_ADDITION = re.compile(r"(\d+) \+ (\d+) = (-?\d+)")


class _Clock:
    """Where the time goes: CPU seconds inside the fake engine and verifier, and the collector's
    pauses outside them (the orchestration's)."""

    def __init__(self) -> None:
        self.inside = 0  # > 0 while the fake engine or verifier runs
        self.gc = 0.0
        self.full = 0
        self._start = 0.0
        gc.callbacks.append(self._collection)

    def _collection(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        elif not self.inside:
            self.gc += time.perf_counter() - self._start
            self.full += info["generation"] == 2

    def reset(self) -> None:
        self.gc, self.full = 0.0, 0


CLOCK = _Clock()


class SleepyModel:
    """Fake engine: one step of running sums per request sample, ``latency`` seconds per call."""

    model_name = "sleepy"

    def __init__(self, latency: float, slip: float = 0.2) -> None:
        self.latency, self.slip = latency, slip
        self.calls = 0
        self.requests = 0
        self.seconds = 0.0
        self.slept = 0.0
        self.cpu = 0.0

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        CLOCK.inside += 1
        start, cpu = time.perf_counter(), time.thread_time()
        self.calls += 1
        self.requests += len(requests)
        time.sleep(self.latency)
        self.slept += time.perf_counter() - start
        out = []
        for req in requests:
            comps = tuple(self._one(req, i) for i in range(req.n))
            out.append(GenerationResult(comps, request_usage(50, 0, [c.completion_tokens for c in comps], 0.0)))
        self.seconds += time.perf_counter() - start
        self.cpu += time.thread_time() - cpu
        CLOCK.inside -= 1
        return out

    def _one(self, req: GenerationRequest, i: int) -> Completion:
        digest = hashlib.blake2b(f"{req.seed}|{i}".encode(), digest_size=8).digest()
        rng = random.Random(int.from_bytes(digest, "little"))
        numbers = [int(x) for x in re.findall(r"\d+", req.messages[-1].content.split("?")[0])]
        sums = _SUM.findall(req.continuation)
        total = int(sums[-1]) if sums else numbers[0]
        if req.continuation.endswith(ANSWER_NUDGE):
            return Completion(f"{total}}}$.", 4, -0.1, "stop")
        if len(sums) >= len(numbers) - 1:
            return Completion(f"The answer is \\boxed{{{total}}}.", 8, -0.2, "stop")
        nxt = numbers[len(sums) + 1]
        wrote = total + nxt + (rng.choice((-1, 1)) if rng.random() < self.slip else 0)
        return Completion(f"{total} + {nxt} = {wrote}", 10, -0.3, "stop")

    def close(self) -> None:
        pass


class AdditionCheckConfig(VerifierConfigBase):
    kind: Literal["addition_check"] = "addition_check"


class AdditionCheck:
    """1.0 when every addition a solution states holds, else 0.0 (a cheap tool verifier)."""

    name = "addition_check"
    config_class = AdditionCheckConfig

    def __init__(self) -> None:
        self.calls = 0
        self.seconds = 0.0
        self.cpu = 0.0

    @classmethod
    def from_config(cls, config: AdditionCheckConfig, generator: object = None) -> AdditionCheck:
        return cls()

    def score(self, items: Sequence[VerifyItem]) -> list[VerifierScore]:
        CLOCK.inside += 1
        start, cpu = time.perf_counter(), time.thread_time()
        self.calls += 1
        out = []
        for item in items:
            ok = all(int(a) + int(b) == int(c) for step in item.steps for a, b, c in _ADDITION.findall(step))
            out.append(VerifierScore((), 1.0 if ok else 0.0))  # no usage, as the tool verifiers
        self.seconds += time.perf_counter() - start
        self.cpu += time.thread_time() - cpu
        CLOCK.inside -= 1
        return out

    def close(self) -> None:
        pass


def _problems(count: int, addends: int) -> list[Problem]:
    rng = random.Random(0)
    out = []
    for i in range(count):
        numbers = [rng.randrange(1, 10) for _ in range(addends)]
        out.append(Problem(f"p{i}", f"What is {' + '.join(map(str, numbers))}?", str(sum(numbers))))
    return out


def _median_run(repeats: int, *args: object) -> dict:
    """The run with the median orchestration overhead of ``repeats`` runs (this machine is noisy)."""
    runs = sorted((_run(*args) for _ in range(repeats)), key=lambda r: r["overhead"])  # type: ignore[arg-type]
    return runs[len(runs) // 2]


def _run(kind: str, problems: list[Problem], latency: float, n: int, width: int, depth: int, naive: bool) -> dict:
    cls, config_cls = {"beam": (BeamSearch, BeamConfig), "dvts": (DVTS, DVTSConfig)}[kind]
    config = config_cls(n=n, beam_width=width, max_depth=depth, verifier="addition_check")
    model, verifier = SleepyModel(latency), AdditionCheck()
    strategy = cls(config, model, MATH_PROMPT.render, SamplingConfig(max_tokens=1024), seed=0, verifier=verifier)
    CLOCK.reset()
    start, cpu = time.perf_counter(), time.thread_time()
    sols = [s for p in problems for s in strategy.solve([p])] if naive else strategy.solve(problems)
    wall, cpu = time.perf_counter() - start, time.thread_time() - cpu
    collector, full = CLOCK.gc, CLOCK.full
    accuracy = sum(s.answer == p.answer for s, p in zip(sols, problems, strict=True)) / len(problems)
    other = wall - model.seconds - verifier.seconds
    nodes = sum(len(s.trace.tree) for s in sols)
    fake = model.seconds - model.slept  # the fake engine's own work: engine time, not ours
    return {"calls": model.calls, "requests": model.requests, "score_calls": verifier.calls, "wall": wall,
            "engine": model.seconds, "slept": model.slept, "fake": fake, "verifier": verifier.seconds,
            "overhead": other, "share": other / wall, "strict": other / (wall - fake),
            "gc": collector, "full": full, "cpu": cpu - model.cpu - verifier.cpu,
            "cpu_share": (cpu - model.cpu - verifier.cpu) / (model.latency * model.calls + cpu),
            "nodes": nodes, "per_node_us": other / nodes * 1e6, "accuracy": accuracy}


class _Replay:
    """The fake engine and verifier answered from a recording: the first search records what every
    call returned, later ones get the same outputs back by call index, with no fake work done (a
    search is deterministic, so its i-th call is the same each time). What such a search costs is
    tts's own, apart from the engine's and verifier's objects, which it no longer frees."""

    def __init__(self) -> None:
        self.calls: dict[str, list] = {"generate": [], "score": []}
        self.at = {"generate": 0, "score": 0}

    def patch(self, name: str, method: Callable[..., list]) -> Callable[..., list]:
        def replayed(fake: object, inputs: Sequence) -> list:
            recorded, i = self.calls[name], self.at[name]
            self.at[name] += 1
            if i == len(recorded):
                recorded.append(method(fake, inputs))
            return list(recorded[i])
        return replayed


def _profile(kind: str, problems: list[Problem], n: int, width: int, depth: int, searches: int = 5) -> None:
    """cProfile of ``searches`` searches with the engine and verifier replayed and no latency:
    the functions of tts (and Python's) that the orchestration spends its time in, by own time."""
    import cProfile
    import pstats

    replay = _Replay()
    SleepyModel.generate = replay.patch("generate", SleepyModel.generate)  # type: ignore[method-assign]
    AdditionCheck.score = replay.patch("score", AdditionCheck.score)  # type: ignore[method-assign]
    _run(kind, problems, 0.0, n, width, depth, False)  # records
    profiler = cProfile.Profile()
    for _ in range(searches):
        replay.at = {"generate": 0, "score": 0}
        profiler.enable()
        _run(kind, problems, 0.0, n, width, depth, False)
        profiler.disable()
    print(f"{kind}: {searches} searches of {len(problems)} problems, engine and verifier replayed (no fake work)")
    pstats.Stats(profiler).sort_stats("tottime").print_stats(25)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategy", choices=("beam", "dvts"), default="beam")
    parser.add_argument("--problems", type=int, default=64)
    parser.add_argument("--latency", type=float, default=0.05, help="Seconds per engine call.")
    parser.add_argument("-n", type=int, default=16, help="Candidates per problem.")
    parser.add_argument("--width", type=int, default=4, help="Beam width M.")
    parser.add_argument("--steps", type=int, default=8, help="Steps per solution (the fake model answers at the last).")
    parser.add_argument("--repeats", type=int, default=5, help="Batched runs of each mode; the median is shown.")
    parser.add_argument("--skip-naive", action="store_true",
                        help="Skip the per-problem loop (it takes steps x problems x latency).")
    parser.add_argument("--profile", action="store_true",
                        help="Print a cProfile of the orchestration alone (engine and verifier replayed) and stop.")
    args = parser.parse_args()

    VERIFIERS.register("addition_check", AdditionCheck)
    problems = _problems(args.problems, addends=args.steps)
    print(f"{args.strategy}: {args.problems} problems, n={args.n}, beam width {args.width}, {args.steps} steps, "
          f"{args.latency * 1e3:.0f} ms per engine call\n")
    # Warm-up: first-use costs (math-verify's parser, regex compilation) are paid once per process.
    _run(args.strategy, problems[:2], 0.0, args.n, args.width, args.steps, False)
    if args.profile:
        _profile(args.strategy, problems, args.n, args.width, args.steps)
        return
    head = (f"{'mode':<12} {'engine calls':>12} {'requests':>9} {'score calls':>11} {'nodes':>6} {'wall s':>7} "
            f"{'engine s':>8} {'(sleep s':>9} {'fake s)':>8} {'verifier s':>10} {'overhead s':>10} {'overhead %':>10} "
            f"{'(gc s':>6} {'full':>4} {'cpu s':>6} {'cpu %)':>7} {'us/node':>7} {'accuracy':>8}")
    print(head)
    print("-" * len(head))
    rows = {}
    for mode in ("batched", "batched+cli", "naive"):
        if mode == "naive" and args.skip_naive:
            continue
        if mode == "batched+cli":
            threshold = gc.get_threshold()
            tune_gc()  # what `tts` runs at start-up (see the module docstring)
        repeats = args.repeats if mode != "naive" else 1
        r = rows[mode] = _median_run(repeats, args.strategy, problems, args.latency, args.n, args.width, args.steps,
                                     mode == "naive")
        if mode == "batched+cli":
            gc.unfreeze()
            gc.set_threshold(*threshold)
        print(f"{mode:<12} {r['calls']:>12} {r['requests']:>9} {r['score_calls']:>11} {r['nodes']:>6} "
              f"{r['wall']:>7.2f} "
              f"{r['engine']:>8.2f} {r['slept']:>9.2f} {r['fake']:>8.2f} {r['verifier']:>10.3f} {r['overhead']:>10.3f} "
              f"{100 * r['share']:>9.2f}% "
              f"{r['gc']:>6.3f} {r['full']:>4} {r['cpu']:>6.3f} {100 * r['cpu_share']:>6.2f}% "
              f"{r['per_node_us']:>7.1f} {r['accuracy']:>8.3f}")
    if "naive" in rows:
        b, nv = rows["batched"], rows["naive"]
        print(f"\nnaive / batched: {nv['calls'] / b['calls']:.0f}x engine calls, "
              f"{nv['wall'] / b['wall']:.1f}x wall time")
    for mode in ("batched", "batched+cli"):
        b = rows[mode]
        print(f"{mode} orchestration overhead: {100 * b['share']:.2f}% of wall time ({100 * b['cpu_share']:.2f}% "
              f"from CPU times); {100 * b['strict']:.2f}% if each engine call took only its simulated latency "
              f"(the fake engine's own {b['fake']:.2f} s taken out of the wall time)")
        step_overhead = b["overhead"] / b["calls"]
        print(f"{mode} orchestration: {step_overhead * 1e3:.1f} ms per step; its share if a step's engine call "
              "took (in all) " + ", ".join(f"{lat * 1e3:.0f} ms: {100 * step_overhead / (lat + step_overhead):.1f}%"
                                           for lat in (0.05, 0.2, 0.5, 1.0)))

if __name__ == "__main__":
    main()
