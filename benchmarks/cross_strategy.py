"""Cross-strategy allocation on the reasoning-model pools: the frontier against the best single strategy.

For every model of a pool, replays (tts.budgets.replay.cross_strategy, cross-fitted, 10 random orderings):
uniform single rules at n = 4..80, each rule alone under the allocator (n per problem), and the
cross-strategy allocator (rule and n per problem). The MATH-500 and GPQA pools carry no verifier
scores, so the rules there are `vote` (self-consistency) and `shortest` (the shortest answered
sample; Hassid et al. 2025); pools with scores add best_of_n and weighted_vote (--rules).

Printed per model: the best single rule at n=64 (chosen in hindsight), the cost at which the cross
allocator first matches its accuracy as a ratio (uniform cost / allocator cost), the same ratio for
the best single-rule allocator, and the accuracy of each at the best single rule's cost; then the
frontier gap: cross minus the best single-rule allocator, at the costs of uniform n = 8, 16, 32.

Usage (from the repository root):
    python benchmarks/cross_strategy.py [--pool PATH] [--rules vote,shortest] [--unit tokens] [--orderings 10]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from tts.benchmarks.pool import load_pool
from tts.budgets.cross_allocator import make_pricer
from tts.budgets.replay.cross_strategy import CrossConfig, cross_replay
from tts.budgets.strategy_curves import SWITCH_Z, parse_rules

DEFAULT_POOL = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "pools" / \
    "math500_reasoning_models.jsonl.gz"


def _iv(iv, fmt: str = ".2f", suffix: str = "") -> str:
    return "not reached" if iv is None else f"{iv.mean:{fmt}}{suffix} [{iv.lo:{fmt}}, {iv.hi:{fmt}}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pool", type=Path, default=DEFAULT_POOL)
    parser.add_argument("--rules", default="vote,shortest")
    parser.add_argument("--unit", default="tokens", help="tokens, eflops, gpu_seconds, dollars or samples")
    parser.add_argument("--gpu", default="h100")
    parser.add_argument("--arch", default="Qwen/Qwen3-14B",
                        help="architecture that prices a pool model whose own is not shipped (eflops and up)")
    parser.add_argument("--orderings", type=int, default=10)
    parser.add_argument("--target", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--switch-z", type=float, default=SWITCH_Z,
                        help="Noise guard: switch rule in a bin only where its gain exceeds this many standard "
                             "errors (0: trust every fitted curve, the behaviour before the guard).")
    parser.add_argument("--json", type=Path, default=None, help="Also write all results to this file.")
    args = parser.parse_args()

    rules = parse_rules(args.rules)
    pool = load_pool(args.pool)
    print(f"pool: {args.pool.resolve().name}; rules {', '.join(rules)}; cost in {args.unit}; target n={args.target}; "
          f"{args.orderings} orderings, 95% bootstrap intervals over orderings; noise guard z={args.switch_z}\n")
    head = (f"{'model':<28} {'best@n':>14} {'acc':>6} | {'cross: saved x':>22} {'acc@same cost':>22} | "
            f"{'best 1-rule alloc: x':>22} {'acc@same cost':>22} | {'cross - 1-rule @n=8/16/32':>26} | chosen")
    print(head)
    print("-" * len(head))
    out = {}
    t0 = time.perf_counter()
    for model in pool.models:
        mp = pool[model]
        try:
            pricer = make_pricer(args.unit, model, args.gpu)
        except ValueError:
            pricer = make_pricer(args.unit, args.arch, args.gpu)
        res = cross_replay(mp, CrossConfig(rules=rules, target_n=args.target, orderings=args.orderings,
                                           seed=args.seed, switch_z=args.switch_z), pricer)
        singles = {r: res.allocators[r] for r in rules}
        best1 = max(singles, key=lambda r: singles[r].acc_at_uniform_tokens.mean)
        cross = res.allocators["cross"]
        gaps = []
        for row in res.frontier:
            if row["n"] in (8, 16, 32):
                c, s = row["cross"], row["single_allocator_best"]
                gaps.append("  n/a" if c is None or s is None else f"{100 * (c - s):+.2f}")
        chosen = ", ".join(f"{r} {v:.0%}" for r, v in res.chosen.items())
        print(f"{model:<28} {res.best_single + '@' + str(args.target):>14} {res.uniform[res.best_single]['acc'].mean:6.3f} | "
              f"{_iv(cross.token_ratio, '.2f', 'x'):>22} {_iv(cross.acc_at_uniform_tokens, '.3f'):>22} | "
              f"{_iv(singles[best1].token_ratio, '.2f', 'x'):>22} {_iv(singles[best1].acc_at_uniform_tokens, '.3f'):>22} | "
              f"{' '.join(gaps):>26} | {chosen}", flush=True)
        out[model] = res.to_json()
    print(f"\n(cross - 1-rule: accuracy points of the cross allocator minus the best single-rule allocator at the "
          f"cost of uniform n; replay time {time.perf_counter() - t0:.1f} s)")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
