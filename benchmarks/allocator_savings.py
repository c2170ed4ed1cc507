"""Online allocator savings on every pool: tokens to match uniform self-consistency@64, worst first.

Replays `tts eval --allocate`'s online rule (``tts budget simulate --mode online``) on MATH-500
(7 models), GPQA-Diamond (6) and AIME 2024 (11), over random orderings of each problem's samples
(uniform SC@64 uses the first 64 of an ordering). Per pool and model: uniform SC@64's accuracy;
the token ratio uniform / allocator at which the allocator's mean accuracy first reaches uniform's
(strict); the accuracy change at uniform's tokens (allocator - uniform, paired per ordering); and
the consistency oracle's ratio (stops where the running majority never changes again: a bound
that reads the future, at any n and at whole chunks). Intervals: 95% bootstrap over orderings.
Per pool: the median and the worst model ("never matched" counts as worst), against the goal of
issue 36 (median >= 6x, worst >= 3x, no accuracy change below -0.005).

Tokens are generated tokens per sample, as the pools count them. Every setting is the same for
every pool and model; ``--rules horizon,beta,dirichlet`` compares rules side by side (a rule may carry
settings: ``window:window=4``, ``horizon:length_weight=1``), ``--chunk`` the request granularity,
``--n-max`` the cap (default: 64, the live default).

Usage (from the repository root):
    python benchmarks/allocator_savings.py [--pools aime,gpqa,math] [--rules horizon,beta] [--chunk 4]
        [--orderings 20] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from tts.benchmarks.pool import load_pool
from tts.budgets.replay.simulate import SimulateConfig, simulate

POOLS = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "pools"
POOL_FILES = {"aime": ("AIME 2024", "aime2024_reasoning_models.jsonl.gz"),
              "gpqa": ("GPQA-Diamond", "gpqa_diamond_reasoning_models.jsonl.gz"),
              "math": ("MATH-500", "math500_reasoning_models.jsonl.gz")}


def _iv(iv, fmt: str) -> str:
    return "never matched" if iv is None else f"{format(iv.mean, fmt)} [{format(iv.lo, fmt)}, {format(iv.hi, fmt)}]"


def rule_settings(spec: str) -> dict:
    """``"window:window=4"`` -> ``{"rule": "window", "window": 4}``: a rule and its settings."""
    name, _, rest = spec.partition(":")
    out: dict = {"rule": name}
    for item in filter(None, rest.split(";")):
        key, eq, value = item.partition("=")
        if not eq or key not in SimulateConfig.model_fields:
            raise SystemExit(f"bad rule setting {item!r} in {spec!r}: write key=value with a SimulateConfig field "
                             "(e.g. window=4, length_weight=1, confidence=0.9)")
        if "/" in value:  # a tuple, e.g. ladder=0.97/0.98/0.99/0.999
            out[key] = tuple(float(v) for v in value.split("/"))
        else:
            out[key] = float(value) if "." in value else int(value)
    return out


def replay_pool(path: Path, rule: str, args: argparse.Namespace) -> list[dict]:
    """One row per model of the pool, worst token ratio first."""
    pool = load_pool(path)
    rows = []
    for model in pool.models:
        cfg = SimulateConfig(modes=("online",), orderings=args.orderings, seed=args.seed,
                             chunk=args.chunk, max_n=args.n_max, **rule_settings(rule))
        r = simulate(pool[model], cfg)
        m = r.modes["online"]
        rows.append({"model": model, "n_problems": r.n_problems, "uniform_acc": r.uniform_acc.mean,
                     "ratio": m.token_ratio, "acc_change": m.acc_change, "oracle": r.oracle_ratio,
                     "oracle_chunk": r.oracle_ratio_chunk, "json": r.to_json()})
    rows.sort(key=lambda x: 0.0 if x["ratio"] is None else x["ratio"].mean)
    return rows


def summarise(rows: list[dict]) -> dict:
    """Median and worst ratio, worst accuracy change, and the oracle's median and worst."""
    ratios = np.array([0.0 if x["ratio"] is None else x["ratio"].mean for x in rows])
    oracle = np.array([x["oracle"].mean for x in rows])
    return {"median_ratio": float(np.median(ratios)), "worst_ratio": float(ratios.min()),
            "worst_model": rows[0]["model"], "worst_acc_change": float(min(x["acc_change"].mean for x in rows)),
            "oracle_median": float(np.median(oracle)), "oracle_worst": float(oracle.min()),
            "oracle_chunk_median": float(np.median([x["oracle_chunk"].mean for x in rows]))}


def print_pool(name: str, rule: str, rows: list[dict], s: dict, secs: float) -> None:
    print(f"\n== {name} ({rows[0]['n_problems']} problems), rule {rule} [{secs:.1f} s]")
    print(f"{'model':<28} {'SC@64 acc':>9} | {'ratio to match':>21} | {'acc change @ SC@64 tokens':>26} | "
          f"{'oracle':>20} {'oracle@chunk':>12}")
    for x in rows:
        print(f"{x['model']:<28} {x['uniform_acc']:9.4f} | {_iv(x['ratio'], '.2f'):>21} | "
              f"{_iv(x['acc_change'], '+.4f'):>26} | {_iv(x['oracle'], '.2f'):>20} {x['oracle_chunk'].mean:12.2f}")
    goal = s["median_ratio"] >= 6 and s["worst_ratio"] >= 3 and s["worst_acc_change"] >= -0.005
    print(f"median / worst ratio {s['median_ratio']:.2f} / {s['worst_ratio']:.2f} ({s['worst_model']}); "
          f"worst accuracy change {s['worst_acc_change']:+.4f}; oracle median / worst {s['oracle_median']:.2f} / "
          f"{s['oracle_worst']:.2f} (whole chunks: median {s['oracle_chunk_median']:.2f}); "
          f"goal (>= 6 / >= 3 / >= -0.005) {'met' if goal else 'NOT met'}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", default="aime,gpqa,math", help="Comma list of aime, gpqa, math.")
    parser.add_argument("--rules", default="horizon", help="Comma list of online rules (horizon, beta, dirichlet, exact, window), each with optional settings "
                        "after a colon, separated by ';' (window:window=4, horizon:length_weight=1, "
                        "horizon:ladder=0.97/0.98/0.99/0.999).")
    parser.add_argument("--chunk", type=int, default=4)
    parser.add_argument("--n-max", type=int, default=None, help="Cap per problem (default: 64, the live default).")
    parser.add_argument("--orderings", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="Also write all results to this file.")
    args = parser.parse_args()
    print(f"online allocator vs uniform self_consistency@64; chunk {args.chunk}; {args.orderings} orderings; "
          f"95% bootstrap intervals; tokens = generated tokens per sample; worst model first")
    out: dict = {}
    for key in args.pools.split(","):
        name, file = POOL_FILES[key]
        for rule in args.rules.split(","):
            t0 = time.perf_counter()
            rows = replay_pool(POOLS / file, rule, args)
            s = summarise(rows)
            print_pool(name, rule, rows, s, time.perf_counter() - t0)
            out.setdefault(name, {})[rule] = {"summary": s, "models": [x["json"] for x in rows]}
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
