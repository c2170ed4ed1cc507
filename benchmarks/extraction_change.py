"""How the math-verify answer extraction and equivalence vote keys change the numbers.

Compares the previous extractor (last box, then "the answer is X", then the last number of the
text; copied below as ``_old_extract``) with :func:`tts.answers.extract_answer`, and plain
normalised vote keys with :class:`tts.answers.AnswerKeys`:

(a) MATH-500 reference solutions (``solution`` field, human-written, answer in ``\\boxed{}``), as
    written and with every ``\\boxed{X}`` replaced by ``X`` (an output that states its answer
    without a box), and GSM8K reference solutions without their final "#### N" line (plain-text
    arithmetic like the demo's outputs; a held-out check): share of problems whose extracted
    answer is graded correct against the gold answer by the project's grader (normalised string
    match OR math-verify).
(b) The demo benchmark: if a run is stored in ``runs/demo/results.jsonl``, per-sample correctness
    and self-consistency vote accuracy of its stored sample texts under both extractors (and both
    vote keys); skipped with a note otherwise.
(c) Sample pools of real reasoning-model answers (``../shared/data/pools``, already extracted):
    self-consistency vote accuracy over all samples of each (model, problem) with normalised keys
    vs AnswerKeys, the winning answer graded by the project's grader (the pools' own labels come
    from another grader and disagree between equal forms, e.g. "357" and "x=357").

Usage (from the repository root):
    python benchmarks/extraction_change.py [--run runs/demo/results.jsonl] [--no-pools]
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

from tts.answers import AnswerKeys, extract_answer, normalize_answer
from tts.answers.extraction import _last_boxed, _strip_wrapping
from tts.benchmarks.grading import Grader, Outcome

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT / ".." / "shared" / "data"

# --- the previous extractor (tts/answers.py before math-verify extraction), kept for comparison ---

_OLD_ANSWER_IS = re.compile(
    r"(?:final answer|the answer)\s*(?:is|:)\s*[:\s]*(?P<ans>\$[^$]+\$|\\\(.+?\\\)|[^\n]+?)\s*(?:\.\s|\.?$|\n)",
    re.IGNORECASE,
)
_OLD_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?")


# The box and phrase-unwrapping helpers are unchanged; the old reading rules follow.
_old_last_boxed, _old_strip_wrapping = _last_boxed, _strip_wrapping


def _old_extract(text: str) -> str | None:
    boxed = _old_last_boxed(text)
    if boxed:
        return boxed
    matches = list(_OLD_ANSWER_IS.finditer(text))
    if matches:
        ans = _old_strip_wrapping(matches[-1].group("ans"))
        inner = _old_last_boxed(ans)
        if inner:
            return inner
        nums = _OLD_NUMBER.findall(ans)
        if len(nums) == 1 and re.fullmatch(r"[\w\s$\-.,/]*", ans):
            return nums[0].replace(",", "")
        if ans:
            return ans
    nums = _OLD_NUMBER.findall(text)
    if nums:
        return nums[-1].replace(",", "").rstrip(".")
    return None


# --- helpers --------------------------------------------------------------------------------------

Extract = Callable[[str], "str | None"]
EXTRACTORS: dict[str, Extract] = {"old": _old_extract, "new": extract_answer}


def unbox(text: str) -> str:
    """Replace every ``\\boxed{X}`` / ``\\fbox{X}`` (balanced braces) by ``X``."""
    out, i = [], 0
    for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text):
        if m.start() < i:
            continue  # nested inside a box already copied
        depth, j = 0, m.end() - 1
        while j < len(text):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            if depth == 0:
                break
            j += 1
        out.append(text[i : m.start()])
        out.append(text[m.end() : j])
        i = j + 1
    out.append(text[i:])
    return "".join(out)


def plain_keys(answers: Sequence[str | None]) -> list[str | None]:
    """The vote keys before AnswerKeys: normalised strings."""
    return [None if a is None else normalize_answer(a) for a in answers]


def vote_winner(keys: Sequence[str | None]) -> int | None:
    """Index of the first sample of the plurality key (ties: earliest first sample), as in vote()."""
    count: dict[str, int] = defaultdict(int)
    first: dict[str, int] = {}
    for i, k in enumerate(keys):
        if k is not None:
            count[k] += 1
            first.setdefault(k, i)
    if not count:
        return None
    best = max(count, key=lambda k: (count[k], -first[k]))
    return first[best]


def timed(fn: Extract, texts: Sequence[str]) -> tuple[list[str | None], float]:
    t0 = time.perf_counter()
    out = [fn(t) for t in texts]
    return out, time.perf_counter() - t0


# --- (a) MATH-500 ---------------------------------------------------------------------------------


def _rows(name: str) -> list[dict]:
    path = SHARED / "benchmarks" / name
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def math500(grader: Grader, n_examples: int) -> None:
    rows = _rows("math500.jsonl")
    gsm = _rows("gsm8k.jsonl")
    # GSM8K as model-style plain text: calculator annotations and the final "#### N" line removed.
    gsm_texts = [re.sub(r"<<[^>]*>>", "", r["solution"]).split("####")[0].strip() for r in gsm]
    variants = {"boxed (as written)": ([r["solution"] for r in rows], [r["answer"] for r in rows]),
                "box removed": ([unbox(r["solution"]) for r in rows], [r["answer"] for r in rows]),
                "GSM8K, no '####'": (gsm_texts, [r["answer"] for r in gsm])}
    extract_answer("warm-up: imports and regex compilation $\\frac{1}{2}$")
    print(f"\n(a) reference solutions ({len(rows)} MATH-500 problems; {len(gsm)} GSM8K problems as a held-out "
          "check, never looked at while writing the rules): extracted answer graded correct")
    print(f"{'variant':<20} {'old':>7} {'new':>7} {'old->new: fixed':>16} {'broken':>7} {'no answer old/new':>18} "
          f"{'s old':>6} {'s new':>6}")
    for name, (texts, golds) in variants.items():
        got, secs, right = {}, {}, {}
        for label, fn in EXTRACTORS.items():
            got[label], secs[label] = timed(fn, texts)
            outcomes = grader.grade_many(zip(got[label], golds, strict=True))
            right[label] = [o is Outcome.CORRECT for o in outcomes]
        n = len(texts)
        fixed = sum(n and not o for o, n in zip(right["old"], right["new"], strict=True))
        broken = sum(o and not n for o, n in zip(right["old"], right["new"], strict=True))
        none = "/".join(str(sum(a is None for a in got[k])) for k in EXTRACTORS)
        print(f"{name:<20} {sum(right['old']) / n:>7.1%} {sum(right['new']) / n:>7.1%} "
              f"{fixed:>16} {broken:>7} {none:>18} {secs['old']:>6.2f} {secs['new']:>6.2f}")
        for verdict, want in (("fixed", True), ("broken", False)):
            examples = [(o, n, g) for o, n, g, ro, rn in zip(got["old"], got["new"], golds, right["old"],
                                                              right["new"], strict=True) if rn == want and ro != want]
            for o, n, g in examples[:n_examples]:
                print(f"    {verdict:<6} gold {g!r:<26} old {o!r:<26} new {n!r}")


# --- (b) the demo benchmark -----------------------------------------------------------------------


def demo(run: Path, grader: Grader) -> None:
    print(f"\n(b) demo benchmark, stored run {run}")
    if run.is_dir():
        run = run / "results.jsonl"
    if not run.exists():
        print("    no stored run: skipped (run `make demo` to create one)")
        return
    from tts.benchmarks.demo import DemoBenchmark

    gold = {p.id: p.answer for p in DemoBenchmark().load()}
    # One row per (problem, config); self-consistency configs of one problem share their draw,
    # so the largest-n row of each problem holds every sample text.
    texts: dict[str, list[str]] = {}
    for line in run.read_text().splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        samples = [s["text"] for s in row.get("trace", {}).get("samples", [])]
        if row["problem_id"] in gold and len(samples) > len(texts.get(row["problem_id"], [])):
            texts[row["problem_id"]] = samples
    if not texts:
        print("    the run holds no sample texts: skipped")
        return
    pids = sorted(texts)
    ns = sorted({1, 4, 16, max(len(v) for v in texts.values())})
    print(f"    {len(pids)} problems, {sum(len(v) for v in texts.values())} samples")
    print(f"    {'extractor / keys':<22} {'per-sample':>10} " + " ".join(f"{'SC@' + str(n):>7}" for n in ns))
    for label, fn in EXTRACTORS.items():
        answers = {p: [fn(t) for t in texts[p]] for p in pids}
        flat = [(a, gold[p]) for p in pids for a in answers[p]]
        ok = [o is Outcome.CORRECT for o in grader.grade_many(flat)]
        per_sample = sum(ok) / len(ok)
        for key_name, keyer in (("normalised", plain_keys), ("AnswerKeys", AnswerKeys().keys)):
            accs = []
            for n in ns:
                winners = []
                for p in pids:
                    idx = vote_winner(keyer(answers[p][:n]))
                    winners.append((None if idx is None else answers[p][idx], gold[p]))
                accs.append(sum(o is Outcome.CORRECT for o in grader.grade_many(winners)) / len(pids))
            print(f"    {label + ' / ' + key_name:<22} {per_sample:>10.1%} " + " ".join(f"{a:>7.1%}" for a in accs))


# --- (c) sample pools ------------------------------------------------------------------------------


def pools(grader: Grader) -> None:
    math_gold = {json.loads(line)["id"]: json.loads(line)["answer"]
                 for line in (SHARED / "benchmarks" / "math500.jsonl").read_text().splitlines() if line.strip()}
    for name in ("math500_reasoning_models.jsonl.gz", "gpqa_diamond_reasoning_models.jsonl.gz"):
        path = SHARED / "pools" / name
        if not path.exists():
            print(f"\n(c) {path} not found: skipped")
            continue
        groups: dict[tuple[str, str], list[tuple[int, str | None]]] = defaultdict(list)
        gold: dict[str, str] = {}
        with gzip.open(path, "rt") as fh:
            for line in fh:
                r = json.loads(line)
                groups[(r["model"], r["problem_id"])].append((r["sample_idx"], r["answer"]))
                gold[r["problem_id"]] = r.get("gold_answer") or math_gold[r["problem_id"]]
        print(f"\n(c) {name}: self-consistency over all samples of each (model, problem), winner graded "
              "by the project's grader")
        print(f"    {'model':<34} {'problems':>8} {'normalised':>10} {'AnswerKeys':>10} {'grade changed':>14} "
              f"{'keys merged':>11}")
        keys = AnswerKeys()
        winners: dict[str, list[tuple[str, str | None, str | None, int]]] = defaultdict(list)
        t0 = time.perf_counter()
        for (model, pid), samples in sorted(groups.items()):
            answers = [a for _, a in sorted(samples)]
            plain, merged = plain_keys(answers), keys.keys(answers)
            wp, wm = vote_winner(plain), vote_winner(merged)
            n_merged = len({k for k in plain if k is not None}) - len({k for k in merged if k is not None})
            winners[model].append((pid, None if wp is None else answers[wp], None if wm is None else answers[wm],
                                   n_merged))
        secs = time.perf_counter() - t0
        for model, rows in sorted(winners.items()):
            n = len(rows)
            ok_p = grader.grade_many((a, gold[pid]) for pid, a, _, _ in rows)
            ok_m = grader.grade_many((a, gold[pid]) for pid, _, a, _ in rows)
            acc_p = sum(o is Outcome.CORRECT for o in ok_p) / n
            acc_m = sum(o is Outcome.CORRECT for o in ok_m) / n
            changed = sum(op != om for op, om in zip(ok_p, ok_m, strict=True))
            print(f"    {model:<34} {n:>8} {acc_p:>10.1%} {acc_m:>10.1%} {changed:>14} {sum(r[3] for r in rows):>11}")
        print(f"    AnswerKeys over {sum(len(v) for v in groups.values()):,} answers in {len(groups):,} groups: "
              f"{secs:.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=ROOT / "runs" / "demo" / "results.jsonl")
    parser.add_argument("--no-pools", action="store_true", help="Skip (c).")
    parser.add_argument("--examples", type=int, default=5, help="Changed answers to print per variant.")
    args = parser.parse_args()
    with Grader(timeout=5, workers=2) as grader:
        math500(grader, args.examples)
        demo(args.run, grader)
        if not args.no_pools:
            pools(grader)


if __name__ == "__main__":
    main()
