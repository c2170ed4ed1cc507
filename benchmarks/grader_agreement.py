"""How often tts's grader agrees with a sample pool's own ``correct`` labels, and where it does not.

Grades every ``(answer, gold)`` pair of a pool (default: MATH-500 x 7 reasoning models, 280,000
samples) with :class:`tts.benchmarks.grading.Grader` (normalised string match OR math-verify, in
worker processes), compares each verdict with the pool's label (a sample without an answer counts
as wrong on both sides), and prints the agreement, the grading speed and the remaining
disagreements grouped into classes, with counts and examples.

The pool's labels are a reference here, not the truth: on MATH-500 they are BoInf's string match
OR math-verify, and the string match is lenient in places (it drops the commas of ``-2,1``) and
strict in others (it accepts the tuple ``(1/5,-18/5)`` for a column vector but not
``(\\frac{1}{5},-\\frac{18}{5})``). The classes below say which side each kind of disagreement
comes from; the grader never sees the labels.

Usage (from the repository root):
    python benchmarks/grader_agreement.py [--pool PATH] [--gold PATH] [--workers 2] [--examples 3]
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

from tts.answers import normalize_answer
from tts.benchmarks.grading import Grader, Outcome

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
DEFAULT_POOL = SHARED / "pools" / "math500_reasoning_models.jsonl.gz"
DEFAULT_GOLD = SHARED / "benchmarks" / "math500.jsonl"


def _squash(answer: str) -> str:
    """An answer with its set-membership prefix ("x \\in") and every comma and space removed."""
    return re.sub(r"^[A-Za-z]\\in", "", normalize_answer(answer)).replace(",", "")


# (class, grader's verdict it explains, test on (answer, gold), the side it shows to be wrong).
# A class explains disagreements in one direction only; first match wins.
Rule = tuple[str, bool, Callable[[str, str], bool], str]
CLASSES: list[Rule] = [
    ("answer lost its commas (-2,1 stored as -21)", False,
     lambda a, g: "," in g and "," not in a and _squash(a) == _squash(g),
     "pool: its lenient string match equates -21 and -2,1"),
    ("tuple vs column vector", True,
     lambda a, g: "pmatrix" in g and "pmatrix" not in a and "&" not in a,
     "pool: it accepts (1/5,-18/5) but not (\\frac{1}{5},-\\frac{18}{5})"),
    ("matrix written row by row (a&b,c&d)", True, lambda a, g: "&" in a and "pmatrix" not in a,
     "pool: same matrix as the gold"),
    ("thin space \\, in the answer (32\\,348, 274\\,i)", True, lambda a, g: "\\," in a and "\\," not in g,
     "pool: \\, is typography (32\\,348 is 32348)"),
]
OTHER = ("other", "check by hand (grader: a math-verify time limit hit on a busy machine?)")


def classify(answer: str, gold: str, graded_correct: bool) -> tuple[str, str]:
    """The disagreement class of one pair, and the side the class shows to be wrong."""
    for name, verdict, test, wrong in CLASSES:
        if verdict == graded_correct and test(answer, gold):
            return name, wrong
    return OTHER


def load(pool: Path, gold_file: Path) -> tuple[list[dict], dict[str, str]]:
    opener = gzip.open if pool.read_bytes()[:2] == b"\x1f\x8b" else open
    with opener(pool, "rt") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    gold = {}
    for line in gold_file.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            gold[row["id"]] = row["answer"]
    return rows, gold


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pool", type=Path, default=DEFAULT_POOL)
    parser.add_argument("--gold", type=Path, default=DEFAULT_GOLD, help="JSONL with id and answer per problem.")
    parser.add_argument("--workers", type=int, default=2, help="Grader worker processes.")
    parser.add_argument("--timeout", type=int, default=5, help="math-verify's time limit per check, seconds.")
    parser.add_argument("--examples", type=int, default=3, help="Examples shown per class.")
    args = parser.parse_args()

    rows, gold = load(args.pool, args.gold)
    pairs = [(r["answer"], gold[r["problem_id"]]) for r in rows]
    print(f"pool: {args.pool.resolve()}")
    print(f"rows: {len(rows):,}   distinct (answer, gold) pairs: {len(set(pairs)):,}")

    # 1. Grade every row (the grader caches verdicts per distinct pair, as in a real run).
    start = time.perf_counter()
    with Grader(timeout=args.timeout, workers=args.workers) as grader:
        outcomes = grader.grade_many(pairs)
    seconds = time.perf_counter() - start
    counts = Counter(o.value for o in outcomes)
    print(f"graded in {seconds:.1f} s ({len(rows) / seconds:,.0f} rows/s, {len(set(pairs)) / seconds:,.0f} distinct "
          f"pairs/s, {args.workers} workers, start-up included): " + ", ".join(f"{k} {v:,}" for k, v in counts.items()))

    # 2. Agreement with the pool's labels, overall and per model.
    agree = [(o is Outcome.CORRECT) == bool(r["correct"]) for o, r in zip(outcomes, rows, strict=True)]
    n_agree = sum(agree)
    print(f"agreement: {n_agree:,} / {len(rows):,} = {n_agree / len(rows):.3%}   "
          f"(disagreements: {len(rows) - n_agree:,})")
    by_model: dict[str, list[bool]] = defaultdict(list)
    for r, ok in zip(rows, agree, strict=True):
        by_model[r["model"]].append(ok)
    for model, oks in sorted(by_model.items(), key=lambda kv: sum(kv[1]) / len(kv[1])):
        print(f"    {model:<34} {sum(oks) / len(oks):.3%}  ({len(oks) - sum(oks):,} disagreements)")

    # 3. Disagreement classes: rows, distinct pairs and examples, largest first.
    groups: dict[tuple[str, str, str, str], Counter] = defaultdict(Counter)
    for (answer, g), o, r, ok in zip(pairs, outcomes, rows, agree, strict=True):
        if not ok:
            name, wrong = classify(answer or "", g, o is Outcome.CORRECT)
            groups[(name, o.value, "correct" if r["correct"] else "wrong", wrong)][(answer, g)] += 1
    print("\nremaining disagreements by class")
    print(f"{'class':<44} {'grader':<9} {'pool':<8} {'rows':>6} {'pairs':>6}  wrong side")
    for (name, graded, label, wrong), pair_counts in sorted(groups.items(), key=lambda kv: -sum(kv[1].values())):
        print(f"{name:<44} {graded:<9} {label:<8} {sum(pair_counts.values()):>6,} {len(pair_counts):>6}  {wrong}")
        for (answer, g), n in pair_counts.most_common(args.examples):
            print(f"        {n:>5} x  answer {answer!r:<40} gold {g!r}")


if __name__ == "__main__":
    main()
