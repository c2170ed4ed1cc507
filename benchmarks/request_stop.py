"""Per-request stops on reasoning models' samples: tokens and latency of adaptive vs fixed self-consistency.

Each request (one problem, alone on the server) runs tts's own ``self_consistency`` strategy with
``stop: {rule, wave}`` against a backend that serves that problem's stored samples of a sample pool
(``shared/data/pools``) in a seeded order, streamed the way a server decoding them together streams
them: every sample of a wave starts at once and generates at the same pace, so they finish in order
of length, and a sample cancelled when the rule settles has generated as many tokens as the sample
that settled it (:class:`tts.backends.streaming.SimulatedStream`). The same orderings serve fixed
self-consistency@n (no stop): the baseline is the first n samples of each ordering.

Latency is virtual time under processor sharing: a server whose total decode rate is ``--rate``
tokens per second, shared by the samples in flight, each at most ``--stream-rate`` (one sequence
cannot decode faster than the model's per-step latency allows). Both are assumptions, printed with
the results: 2500 and 80 tokens per second are a 14B-32B model on one H100-class GPU.

Answers vote as the pool wrote them (equal strings are one answer, as the allocator's replays vote);
``correct`` only grades the chosen answer, never decides. Prints, per pool and model (worst fixed
accuracy first), the accuracy of fixed@n and of each wave size with its paired difference (95%
bootstrap interval over problems), the tokens ratio fixed/adaptive (mean tokens per request), and
p50 latencies; writes a JSON of every row and a tokens-vs-latency plot per pool.

    python benchmarks/request_stop.py --pool ../shared/data/pools/aime2024_reasoning_models.jsonl.gz \\
        --orders 16 --out /tmp/request_stop
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from tts.backends.base import Completion, GenerationRequest, GenerationResult, Message, request_usage
from tts.backends.streaming import FinishedSample, SimulatedStream
from tts.benchmarks.pool import ModelPool, load_pool
from tts.config import StopConfig
from tts.search.sampling.self_consistency import SelfConsistency, SelfConsistencyConfig
from tts.types import Problem


def as_written(text: str) -> str | None:
    """The pool's answer as written (an empty reply: no answer)."""
    return text or None


as_written.answer_keys = lambda answers: list(answers)  # type: ignore[attr-defined]  # equal strings vote together


def shared_times(lengths: Sequence[float], rate: float, stream_rate: float) -> list[float]:
    """When each of k samples started together finishes, shortest first, under processor sharing:
    the samples in flight split ``rate`` tokens per second, each at most ``stream_rate``."""
    order = sorted(lengths)
    out, t, done = [], 0.0, 0.0
    for i, length in enumerate(order):
        active = len(order) - i
        t += (length - done) / min(stream_rate, rate / active)
        done = length
        out.append(t)
    return out


class PoolBackend:
    """One problem's stored samples, in one ordering, served as a streaming backend; it keeps the
    virtual time its waves took (:func:`shared_times`)."""

    model_name = "pool"

    def __init__(self, answers: Sequence[str | None], tokens: Sequence[int], rate: float, stream_rate: float) -> None:
        self.answers, self.tokens = list(answers), [max(int(t), 1) for t in tokens]
        self.rate, self.stream_rate = rate, stream_rate
        self.drawn = 0
        self.seconds = 0.0

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        out = []
        for req in requests:
            k = range(self.drawn, self.drawn + req.n)
            self.drawn += req.n
            comps = tuple(Completion(self.answers[i] or "", self.tokens[i], None, "stop") for i in k)
            out.append(GenerationResult(comps, request_usage(100, 0, [c.completion_tokens for c in comps], 0.0)))
        return out

    def stream_samples(self, requests: Sequence[GenerationRequest]) -> SimulatedStream:
        return _TimedStream(self, requests)

    def close(self) -> None:
        pass


class _TimedStream(SimulatedStream):
    """A simulated stream that adds the time to its last finished (or cancelling) sample to the backend's clock."""

    def __iter__(self) -> Iterator[FinishedSample]:
        backend: PoolBackend = self._generator  # type: ignore[assignment]
        lengths = [c.completion_tokens for r in self._draw() for c in r.completions]
        times = shared_times(lengths, backend.rate, backend.stream_rate)
        seen = 0
        try:
            for item in super().__iter__():
                seen += 1
                yield item
        finally:
            backend.seconds += times[max(seen, 1) - 1] if lengths else 0.0


def orderings(pool: ModelPool, orders: int, seed: int) -> np.ndarray:
    """``(orders, problems, samples)`` seeded permutations of each problem's real samples (padding last)."""
    rng = np.random.default_rng(seed)
    out = np.zeros((orders, pool.n_problems, pool.n_samples), dtype=np.int64)
    for o in range(orders):
        for p in range(pool.n_problems):
            real = np.nonzero(pool.mask[p])[0]
            out[o, p] = np.concatenate([rng.permutation(real), np.nonzero(~pool.mask[p])[0]])
    return out


def run_request(pool: ModelPool, p: int, order: np.ndarray, n: int, stop: StopConfig | None,
                rate: float, stream_rate: float) -> dict:
    """One request: self-consistency@n (with ``stop`` or without) on problem ``p`` in ``order``."""
    idx = [i for i in order if pool.mask[p, i]][:n]
    answers = [pool.answer_text(p, int(pool.answers[p, i])) if pool.answers[p, i] >= 0 else None for i in idx]
    tokens = [0 if np.isnan(pool.tokens[p, i]) else int(pool.tokens[p, i]) for i in idx]
    backend = PoolBackend(answers, tokens, rate, stream_rate)
    config = SelfConsistencyConfig(n=len(idx), stop=stop)
    strategy = SelfConsistency(config, backend, lambda q: (Message("user", q.question),), extract=as_written)
    sol = strategy.solve([Problem(pool.problem_ids[p], pool.problem_ids[p])])[0]
    if stop is None:
        backend.seconds = shared_times(tokens, rate, stream_rate)[-1]
    right = {pool.answer_text(p, int(pool.answers[p, i])) for i in idx if pool.correct[p, i] and pool.answers[p, i] >= 0}
    record = sol.trace.notes.get("stop", {})
    return {"correct": sol.answer is not None and sol.answer in right, "tokens": sol.usage.completion_tokens,
            "seconds": backend.seconds, "drawn": record.get("drawn", len(idx)), "cancelled": record.get("cancelled", 0)}


def bootstrap(diff: np.ndarray, reps: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% interval of the mean of per-problem differences (problems resampled)."""
    rng = np.random.default_rng(seed)
    means = diff[rng.integers(0, len(diff), (reps, len(diff)))].mean(axis=1)
    return float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pool", type=Path, help="a sample pool file (shared/data/pools format)")
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--rule", default="horizon")
    ap.add_argument("--confidence", type=float, default=0.95)
    ap.add_argument("--waves", default="1,4,8,16,64", help="wave sizes; the largest equal to n is 'all at once, cancelled'")
    ap.add_argument("--orders", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rate", type=float, default=2500.0, help="server decode tokens per second, shared")
    ap.add_argument("--stream-rate", type=float, default=80.0, help="one sample's most tokens per second")
    ap.add_argument("--models", default="", help="comma-separated subset (default: all)")
    ap.add_argument("--problems", type=int, default=0, help="first N problems only (0: all)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--replot", type=Path, default=None, help="plot a saved run's JSON (written next to it) and exit")
    args = ap.parse_args(argv)
    if args.replot is not None:
        replot(args.replot, args.replot.with_suffix(".png"))
        return 0
    if args.pool is None:
        ap.error("--pool is required (or --replot FILE.json)")
    pool = load_pool(args.pool)
    waves = [int(w) for w in args.waves.split(",")]
    models = [m for m in pool.models if not args.models or m in args.models.split(",")]
    rows: list[dict] = []
    start = time.perf_counter()
    print(f"{args.pool.name}: n={args.n}, rule={args.rule}@{args.confidence}, {args.orders} orderings, "
          f"rate {args.rate:g} tok/s shared, {args.stream_rate:g} tok/s per sample", flush=True)
    for model in models:
        mp = pool[model]
        count = mp.n_problems if not args.problems else min(args.problems, mp.n_problems)
        orders = orderings(mp, args.orders, args.seed)
        for o in range(args.orders):
            for p in range(count):
                fixed = run_request(mp, p, orders[o, p], args.n, None, args.rate, args.stream_rate)
                rows.append({"model": model, "order": o, "problem": p, "config": "fixed", **fixed})
                for w in waves:
                    stop = StopConfig(rule=args.rule, confidence=args.confidence, wave=min(w, args.n))
                    got = run_request(mp, p, orders[o, p], args.n, stop, args.rate, args.stream_rate)
                    rows.append({"model": model, "order": o, "problem": p, "config": f"wave{w}", **got})
        print(f"  {model}: {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    report(rows, models, waves, args)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        stem = args.pool.name.split(".")[0]
        (args.out / f"{stem}.json").write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                                           "rows": rows}))
        plot(rows, models, waves, args.out / f"{stem}.png", stem, args)
    return 0


def _table(rows: list[dict]) -> dict:
    by = defaultdict(lambda: defaultdict(list))
    for r in rows:
        by[(r["model"], r["config"])][(r["order"], r["problem"])] = r
    return by


def report(rows: list[dict], models: list[str], waves: list[int], args: argparse.Namespace) -> None:
    by = _table(rows)
    acc_fixed = {m: np.mean([r["correct"] for r in by[(m, "fixed")].values()]) for m in models}
    ratios: dict[str, list[float]] = defaultdict(list)
    print("model | config | accuracy | diff vs fixed (95% CI) | tokens/request | fixed/adaptive | p50 s | drawn | cancelled")
    for m in sorted(models, key=lambda m: acc_fixed[m]):
        fixed = by[(m, "fixed")]
        keys = sorted(fixed)
        ft = np.array([fixed[k]["tokens"] for k in keys], dtype=float)
        fs = np.array([fixed[k]["seconds"] for k in keys])
        print(f"{m} | fixed@{args.n} | {acc_fixed[m]:.3f} | | {ft.mean():.0f} | 1.00 | {np.median(fs):.0f} | {args.n} | 0")
        for w in waves:
            got = by[(m, f"wave{w}")]
            c = np.array([got[k]["correct"] for k in keys], dtype=float) - np.array([fixed[k]["correct"] for k in keys])
            # paired difference per problem (averaged over orderings), interval over problems
            per_problem = defaultdict(list)
            for k, d in zip(keys, c, strict=True):
                per_problem[k[1]].append(d)
            diff = np.array([np.mean(v) for v in per_problem.values()])
            lo, hi = bootstrap(diff)
            t = np.array([got[k]["tokens"] for k in keys], dtype=float)
            s = np.array([got[k]["seconds"] for k in keys])
            ratio = ft.mean() / t.mean()
            ratios[f"wave{w}"].append(ratio)
            acc = np.mean([got[k]["correct"] for k in keys])
            print(f"{m} | wave {w} | {acc:.3f} | {diff.mean():+.4f} ({lo:+.3f}, {hi:+.3f}) | {t.mean():.0f} | "
                  f"{ratio:.2f} | {np.median(s):.0f} | {np.mean([got[k]['drawn'] for k in keys]):.1f} | "
                  f"{np.mean([got[k]['cancelled'] for k in keys]):.1f}")
    for w in waves:
        r = ratios[f"wave{w}"]
        print(f"wave {w}: tokens fixed/adaptive median over models {np.median(r):.2f}, worst {min(r):.2f}")


def plot(rows: list[dict], models: list[str], waves: list[int], path: Path, title: str, args: argparse.Namespace) -> None:
    """Tokens and p50 latency of each wave size relative to fixed self-consistency@n (the point
    (1, 1)), one faint point per model and the median over models joined in wave order."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by = _table(rows)
    fig, ax = plt.subplots(figsize=(9, 4.8))
    colors = plt.cm.viridis(np.linspace(0, 0.9, len(waves)))
    medians = []
    for w, color in zip(waves, colors, strict=True):
        xs, ys = [], []
        for m in models:
            fixed, got = list(by[(m, "fixed")].values()), list(by[(m, f"wave{w}")].values())
            xs.append(np.mean([r["tokens"] for r in got]) / np.mean([r["tokens"] for r in fixed]))
            ys.append(np.median([r["seconds"] for r in got]) / np.median([r["seconds"] for r in fixed]))
        ax.scatter(xs, ys, color=color, s=18, alpha=0.45)
        medians.append((float(np.median(xs)), float(np.median(ys))))
        label = f"wave {w}" + (" (all at once, cancelled)" if w >= args.n else "")
        ax.scatter(*medians[-1], color=color, s=110, edgecolor="black", label=label, zorder=3)
    ax.plot(*zip(*medians, strict=True), color="black", lw=0.8, zorder=2)
    ax.scatter([1], [1], marker="*", s=220, color="crimson", edgecolor="black", zorder=3,
               label=f"fixed self-consistency@{args.n}")
    ax.axhline(1, color="crimson", lw=0.6, ls="--")
    ax.axvline(1, color="crimson", lw=0.6, ls="--")
    ax.set_xscale("log")
    ax.set_yscale("log")
    plain = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(plain)
        axis.set_minor_formatter(plain)
    ax.tick_params(which="minor", labelsize=7)
    ax.set_xlabel(f"generated tokens per request / fixed@{args.n}'s (cancelled partial samples included)")
    ax.set_ylabel(f"p50 latency per request / fixed@{args.n}'s")
    ax.set_title(f"{title}: stop '{args.rule}' at {args.confidence:g} by wave size; small points: one model each,\n"
                 f"large: median over {len(models)} models (server {args.rate:g} tok/s shared, "
                 f"{args.stream_rate:g} tok/s per sample)", fontsize=9)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def replot(json_path: Path, out: Path) -> None:
    """The plot of a saved run (``--replot FILE.json``), without running it again."""
    data = json.loads(json_path.read_text())
    a = data["args"]
    args = argparse.Namespace(n=int(a["n"]), rule=a["rule"], confidence=float(a["confidence"]), rate=float(a["rate"]),
                              stream_rate=float(a["stream_rate"]))
    rows = data["rows"]
    models = list(dict.fromkeys(r["model"] for r in rows))
    waves = [int(w) for w in a["waves"].split(",")]
    plot(rows, models, waves, out, json_path.stem, args)


if __name__ == "__main__":
    raise SystemExit(main())
