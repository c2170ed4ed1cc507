"""`--strategy auto` against the best single strategy at the same total tokens, on the demo, vLLM-CPU.

Steps (each a `tts` command; run them under `flock /tmp/tts-heavy.lock` on shared machines):

1. ``cal``: a live `tts sweep` of self_consistency, best_of_n and weighted_vote at n = 16 (one shared
   draw, logprobs on) on demo problems 40-99 (the calibration problems).
2. ``test``: `tts eval` of the same three strategies at n = 2, 4, 8, 16 (one shared draw of 16) on
   demo problems 0-39 (the test problems, disjoint from calibration).
3. ``search``: `tts eval -s rebase -n 4 -n 8 --set step_separator=', '` (steps of one equality each,
   so the search branches) on the calibration problems and on the test problems.
4. ``auto``: `tts eval --strategy auto --budget B --calibration SWEEP` on the test problems, with B =
   the total tokens the config ``--budget-from`` (default self_consistency@8) spent in step 2 or 3
   (generated + uncached prompt tokens); with ``--escalate``, the calibration run of step 3 is
   passed as `--escalate`, so auto may send contested problems to REBASE after their pilot.
5. ``report``: accuracy of each auto run and of each single strategy interpolated (linearly in log
   tokens) to that run's realised tokens, with 95% paired-bootstrap intervals over problems.

Usage (from the repository root):
    python benchmarks/auto_vs_single_demo.py --step cal|test|search|auto|report [--out /tmp/auto_demo]
        [--budget-from rebase@4,step_separator=', '] [--escalate]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

STRATEGIES = ("self_consistency", "best_of_n", "weighted_vote")
COMMON = ["--max-tokens", "48"]
SEARCH = ["-s", "rebase", "-n", "4", "-n", "8", "--set", "step_separator=, "]


def _split(out: Path) -> tuple[Path, Path]:
    from tts.benchmarks.demo import generate_problems

    out.mkdir(parents=True, exist_ok=True)
    ps = generate_problems(100)
    files = []
    for name, part in (("cal", ps[40:]), ("test", ps[:40])):
        path = out / f"demo_{name}.jsonl"
        path.write_text("".join(json.dumps({"id": p.id, "problem": p.question, "answer": p.answer}) + "\n" for p in part))
        files.append(path)
    return files[0], files[1]


def _tts(*args: str) -> None:
    cmd = [str(Path(sys.executable).with_name("tts")), *args]
    print("$ tts " + " ".join(args), flush=True)
    subprocess.run(cmd, check=True)


def _rows(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "results.jsonl").read_text().splitlines() if x.strip()]


def _tokens(row: dict) -> float:
    u = row["usage"]
    return float(u["completion_tokens"] + u["prompt_tokens"] - u["cached_prompt_tokens"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--step", choices=("cal", "test", "search", "auto", "report"), required=True)
    parser.add_argument("--budget-from", default="self_consistency@8",
                        help="--step auto: the test config whose total tokens are auto's budget")
    parser.add_argument("--escalate", action="store_true", help="--step auto: offer REBASE after the pilot")
    parser.add_argument("--switch-z", type=float, default=None,
                        help="--step auto: noise guard in standard errors (default: auto's, 3)")
    parser.add_argument("--out", type=Path, default=Path("/tmp/auto_demo"))
    parser.add_argument("--limit-cal", type=int, default=40, help="calibration problems (of demo 40-99)")
    parser.add_argument("--limit-test", type=int, default=30, help="test problems (of demo 0-39)")
    args = parser.parse_args()
    cal_data, test_data = _split(args.out)
    sweep, test = args.out / "sweep", args.out / "test"
    search_cal, search_test = args.out / "rebase_cal", args.out / "rebase_test"
    if args.step == "cal":
        cfg = args.out / "sweep.yaml"
        cfg.write_text(json.dumps({"strategies": list(STRATEGIES), "n": [16], "eval": {
            "data": {"benchmark": "demo", "path": str(cal_data), "limit": args.limit_cal},
            "sampling": {"max_tokens": 48}}}))
        _tts("sweep", "--config", str(cfg), "--out", str(sweep))
    elif args.step == "test":
        _tts("eval", "--benchmark", "demo", "--data", str(test_data), "--limit", str(args.limit_test), *COMMON,
             *[a for s in STRATEGIES for a in ("-s", s)], "-n", "2", "-n", "4", "-n", "8", "-n", "16",
             "--out", str(test))
    elif args.step == "search":
        for data, run, limit in ((cal_data, search_cal, args.limit_cal), (test_data, search_test, args.limit_test)):
            _tts("eval", "--benchmark", "demo", "--data", str(data), "--limit", str(limit), *COMMON, *SEARCH,
                 "--out", str(run))
    elif args.step == "auto":
        rows = [r for run in (test, search_test) if (run / "results.jsonl").is_file() for r in _rows(run)
                if r["config"] == args.budget_from]
        if not rows:
            sys.exit(f"no test rows of config {args.budget_from!r}; run --step test / search first")
        budget = sum(_tokens(r) for r in rows)
        print(f"budget = tokens of uniform {args.budget_from} on the {len(rows)} test problems: {budget:.0f}")
        name = "auto" + ("_esc" if args.escalate else "") + "_" + args.budget_from.split(",")[0].replace("@", "")
        guard = [] if args.switch_z is None else ["--set", f"switch_z={args.switch_z:g}"]
        name += "" if args.switch_z is None else f"_z{args.switch_z:g}"
        _tts("eval", "--benchmark", "demo", "--data", str(test_data), "--limit", str(args.limit_test), *COMMON,
             "-s", "auto", "--budget", f"{budget:.0f}", "--calibration", str(sweep),
             *(["--escalate", str(search_cal)] if args.escalate else []), *guard, "--out", str(args.out / name))
    else:
        runs = sorted(p for p in args.out.glob("auto*") if (p / "results.jsonl").is_file())
        for run in runs:
            print(f"\n== {run.name}")
            _report([test, search_test], run)


def _report(tests: list[Path], auto: Path) -> None:
    rows = [r for t in tests if (t / "results.jsonl").is_file() for r in _rows(t)]
    a_rows = {r["problem_id"]: r for r in _rows(auto)}
    ids = sorted(a_rows)
    a_ok = np.array([float(a_rows[i]["correct"]) for i in ids])
    a_tok = sum(_tokens(a_rows[i]) for i in ids)
    chosen: dict[str, int] = {}
    for r in a_rows.values():
        s = r["trace"]["notes"]["rule"]
        chosen[s] = chosen.get(s, 0) + 1
    print(f"auto: {len(ids)} problems, {a_tok:.0f} tokens, accuracy {a_ok.mean():.3f}; chosen {chosen}; "
          f"mean n {np.mean([a_rows[i]['trace']['notes']['n'] for i in ids]):.1f}")
    rng = np.random.default_rng(0)
    boot = rng.integers(0, len(ids), size=(2000, len(ids)))
    best = None
    kinds = sorted({r["strategy"]["kind"] for r in rows})
    for s in kinds:
        ns = sorted({r["strategy"]["n"] for r in rows if r["strategy"]["kind"] == s})
        label = {r["strategy"]["n"]: r["config"] for r in rows if r["strategy"]["kind"] == s}
        ok = np.array([[float(next(r["correct"] for r in rows if r["problem_id"] == i and r["config"] == label[n]))
                        for n in ns] for i in ids])  # (P, N)
        tok = np.array([sum(_tokens(r) for r in rows if r["config"] == label[n] and r["problem_id"] in a_rows)
                        for n in ns])
        # Linear in log tokens between the ladder's points: per problem, then averaged.
        w = np.interp(np.log(a_tok), np.log(tok), np.arange(len(ns)))
        lo = int(np.floor(w))
        hi = min(lo + 1, len(ns) - 1)
        frac = w - lo
        at = (1 - frac) * ok[:, lo] + frac * ok[:, hi]
        diff = a_ok[boot].mean(axis=1) - at[boot].mean(axis=1)
        line = ", ".join(f"n={n}: {ok[:, j].mean():.3f} @ {tok[j]:.0f} tok" for j, n in enumerate(ns))
        print(f"{s:<17} at auto's tokens: {at.mean():.3f}; auto - it = {a_ok.mean() - at.mean():+.3f} "
              f"[{np.percentile(diff, 2.5):+.3f}, {np.percentile(diff, 97.5):+.3f}]   ({line})")
        if best is None or at.mean() > best[1]:
            best = (s, at.mean())
    print(f"best single strategy at auto's tokens: {best[0]} ({best[1]:.3f}); auto {a_ok.mean():.3f}")


if __name__ == "__main__":
    main()
