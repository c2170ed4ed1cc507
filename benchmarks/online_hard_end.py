"""The online allocator at the hard end: token ratio and accuracy change, worst model first.

Replays the online allocator (``tts budget simulate --mode online``) against uniform
self-consistency@64 on every model of three sets, the hard ones first:

* GPQA-Diamond x 6 reasoning models (per-sample accuracy 0.58-0.72, many contested votes),
* MATH-500's level-5 problems (134) x 7 models,
* MATH-500 (all 500) x 7 models.

For each model: uniform SC@64 accuracy, the token ratio uniform / allocator at matched accuracy
(strict: the allocator's mean accuracy reaches uniform's), and the accuracy change at uniform's
tokens (allocator - uniform), with 95% bootstrap intervals over orderings. Because uniform SC@64
sits on a flat accuracy plateau, the strict crossing is decided by fractions of one problem; so
three secondary columns read the mean accuracy-vs-tokens curve: the ratio at which the allocator
comes within ONE problem of uniform's accuracy ("ratio 1pb"), and its accuracy change at 10% and
25% of uniform's tokens. Per set: the median and the WORST across models ("not reached" counts as
worst).

Settings of the online rule are passed as ``--set key=value`` (any field of
:class:`tts.budgets.replay.simulate.SimulateConfig`), e.g. ``--set rule=beta`` for the Beta criterion
of Aggarwal et al. Several ``--policy NAME:key=value,key=value`` compare rules side by side. Two
rules that lost, kept as rate models in ``tts.budgets.rate_models``, are named here too: ``rule=gain``
(with ``kappa=``, the value of more samples) and ``rule=contested`` (the cross-fitted predictor),
both with ``min_gain=``.

Usage (from the repository root):
    python benchmarks/online_hard_end.py [--orderings 20] [--policy old:rule=beta] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from tts.benchmarks.pool import load_pool
from tts.budgets.online import RateModel
from tts.budgets.rate_models.contested import ContestedRule
from tts.budgets.rate_models.vote_value import VoteValue
from tts.budgets.replay.simulate import SimulateConfig, simulate

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
MATH_POOL = DATA / "pools" / "math500_reasoning_models.jsonl.gz"
GPQA_POOL = DATA / "pools" / "gpqa_diamond_reasoning_models.jsonl.gz"
MATH_BENCH = DATA / "benchmarks" / "math500.jsonl"


def _value(text: str):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def parse_policy(spec: str) -> tuple[str, dict]:
    """``name:key=value,key=value`` -> (name, SimulateConfig overrides)."""
    name, _, rest = spec.partition(":")
    kv = {}
    for item in filter(None, rest.split(",")):
        k, _, v = item.partition("=")
        kv[k.strip()] = _value(v.strip())
    return name, kv


def load_sets(which: list[str]) -> dict[str, dict]:
    """Set name -> {model: ModelPool}."""
    sets: dict[str, dict] = {}
    if "gpqa" in which:
        g = load_pool(GPQA_POOL)
        sets["GPQA-Diamond"] = {m: g[m] for m in g.models}
    if "math5" in which or "math" in which:
        p = load_pool(MATH_POOL)
        if "math5" in which:
            level = {}
            with open(MATH_BENCH, encoding="utf-8") as fh:
                for line in fh:
                    row = json.loads(line)
                    level[row["id"]] = row["level"]
            sets["MATH-500 level 5"] = {
                m: p[m].subset([i for i, pid in enumerate(p[m].problem_ids) if level.get(pid) == 5])
                for m in p.models}
        if "math" in which:
            sets["MATH-500"] = {m: p[m] for m in p.models}
    return sets


def _iv(iv, fmt: str) -> str:
    return "not reached" if iv is None else f"{format(iv.mean, fmt)} [{format(iv.lo, fmt)}, {format(iv.hi, fmt)}]"


def _num(v, fmt: str) -> str:
    width = int(fmt.lstrip("+").split(".")[0])
    return f"{'-':>{width}}" if v is None else format(v, fmt)


def rate_rule(over: dict) -> tuple[dict, RateModel | None]:
    """Policy overrides with ``rule=gain`` / ``rule=contested`` turned into rule "rate" and its model."""
    over = dict(over)
    if over.get("rule") == "gain":
        over["rule"] = "rate"
        return over, VoteValue(float(over.pop("kappa", 1.0)))
    if over.get("rule") == "contested":
        over["rule"] = "rate"
        return over, ContestedRule(l2=float(over.pop("l2", 0.05)))
    return over, None


def run(sets: dict[str, dict], policies: list[tuple[str, dict]], orderings: int, seed: int) -> dict:
    out: dict = {}
    for set_name, pools in sets.items():
        out[set_name] = {}
        for pname, over in policies:
            rows = []
            t0 = time.perf_counter()
            for model, mp in pools.items():
                settings, model_ = rate_rule(over)
                cfg = SimulateConfig(modes=("online",), orderings=orderings, seed=seed, **settings)
                r = simulate(mp, cfg, rate_model=model_)
                m = r.modes["online"]
                delta = m.acc_at_uniform_tokens.mean - r.uniform_acc.mean
                # Secondary, from the mean curve (observed orderings): within one problem of
                # uniform's accuracy, and the accuracy change at 10% / 25% of uniform's tokens.
                ct, ca = np.array(m.curve_tokens), np.array(m.curve_acc)
                near = np.nonzero(ca >= r.uniform_acc.mean - 1.0 / r.n_problems - 1e-12)[0]
                ratio1 = float(r.uniform_tokens.mean / ct[near[0]]) if len(near) else None
                at = {f: float(ca[min(np.searchsorted(ct, f * r.uniform_tokens.mean, side="right") - 1, len(ca) - 1)]
                               - r.uniform_acc.mean) if ct[0] <= f * r.uniform_tokens.mean else None
                      for f in (0.1, 0.25)}
                rows.append({"model": model, "n_problems": r.n_problems, "uniform_acc": r.uniform_acc.mean,
                             "token_ratio": None if m.token_ratio is None else m.token_ratio.mean,
                             "token_ratio_ci": None if m.token_ratio is None else [m.token_ratio.lo, m.token_ratio.hi],
                             "reached": m.reached, "allocator_acc": m.acc_at_uniform_tokens.mean,
                             "acc_delta": delta, "ratio_1problem": ratio1, "delta_at_10pct": at[0.1],
                             "delta_at_25pct": at[0.25], "_r": r})
            secs = time.perf_counter() - t0
            rows.sort(key=lambda x: (x["token_ratio"] or 0.0))
            ratios = np.array([x["token_ratio"] or 0.0 for x in rows])
            deltas = np.array([x["acc_delta"] for x in rows])
            print(f"\n== {set_name}  ({rows[0]['n_problems']} problems)  policy {pname}: {over or 'default'} "
                  f"[{secs:.1f} s]")
            print(f"{'model':<28} {'SC@64 acc':>9} | {'ratio (to match)':>22} {'reached':>7} | "
                  f"{'acc @ SC@64 tokens':>24} {'delta':>7} | {'ratio 1pb':>9} {'d@10%':>7} {'d@25%':>7}")
            for x in rows:
                r = x.pop("_r")
                m = r.modes["online"]
                print(f"{x['model']:<28} {x['uniform_acc']:9.4f} | {_iv(m.token_ratio, '.2f'):>22} "
                      f"{x['reached']:7.2f} | {_iv(m.acc_at_uniform_tokens, '.4f'):>24} {x['acc_delta']:+7.4f} | "
                      f"{_num(x['ratio_1problem'], '9.2f')} {_num(x['delta_at_10pct'], '+7.4f')} "
                      f"{_num(x['delta_at_25pct'], '+7.4f')}")
            r1 = np.array([x["ratio_1problem"] or 0.0 for x in rows])
            d10 = np.array([-1.0 if x["delta_at_10pct"] is None else x["delta_at_10pct"] for x in rows])
            d25 = np.array([-1.0 if x["delta_at_25pct"] is None else x["delta_at_25pct"] for x in rows])
            summary = {"median_ratio": float(np.median(ratios)), "worst_ratio": float(ratios.min()),
                       "median_acc_delta": float(np.median(deltas)), "worst_acc_delta": float(deltas.min()),
                       "median_ratio_1problem": float(np.median(r1)), "worst_ratio_1problem": float(r1.min()),
                       "worst_delta_at_10pct": float(d10.min()), "worst_delta_at_25pct": float(d25.min())}
            print(f"{'median / worst':<28} {'':>9} | {summary['median_ratio']:10.2f} / {summary['worst_ratio']:<9.2f}"
                  f"{'':>9} | {'':>24} {summary['median_acc_delta']:+.4f} / {summary['worst_acc_delta']:+.4f}"
                  f" | {summary['median_ratio_1problem']:.2f} / {summary['worst_ratio_1problem']:.2f} "
                  f"worst {summary['worst_delta_at_10pct']:+.4f} {summary['worst_delta_at_25pct']:+.4f}")
            out[set_name][pname] = {"settings": over, "summary": summary, "models": rows}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orderings", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sets", default="gpqa,math5,math", help="Comma list of gpqa, math5, math.")
    parser.add_argument("--policy", action="append", default=None,
                        help="NAME:key=value,... (SimulateConfig fields); repeat to compare. "
                             "Default: the default online rule.")
    parser.add_argument("--json", type=Path, default=None, help="Also write all results to this file.")
    args = parser.parse_args()
    policies = [parse_policy(p) for p in (args.policy or ["default:"])]
    sets = load_sets(args.sets.split(","))
    print(f"online allocator vs uniform self_consistency@64; {args.orderings} orderings; 95% bootstrap "
          f"intervals; ratio = uniform tokens / allocator tokens at matched accuracy (strict); "
          f"delta = allocator accuracy - uniform accuracy at uniform's tokens")
    out = run(sets, policies, args.orderings, args.seed)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
