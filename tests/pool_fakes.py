"""A synthetic sample pool for the allocator's tests: most problems easy, the rest contested.

One writer for the tests of the online rules, `tts budget simulate` and the hard-end benchmark
(each used to write its own copy of this loop with different numbers)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np


def write_contested_pool(path: Path, *, samples: int, easy: int, seed: int, contested: tuple[float, float],
                         length: Callable[[int, bool], float], spread: tuple[float, float],
                         problems: int = 30) -> Path:
    """Write ``problems`` x ``samples`` pool rows of model "m" to ``path`` (JSONL) and return it.

    The first ``easy`` problems are right with probability 0.95, the others with a rate drawn
    from ``contested``; the right answer is "42", a wrong one "0", "1" or "2". A sample's
    ``num_tokens`` is ``length(problem, correct)`` times a factor drawn from ``spread``.
    """
    rng = np.random.default_rng(seed)
    lines = []
    for p in range(problems):
        pass_rate = 0.95 if p < easy else rng.uniform(*contested)
        for s in range(samples):
            ok = bool(rng.random() < pass_rate)
            answer = "42" if ok else str(rng.integers(0, 3))
            lines.append(json.dumps({"problem_id": f"q{p}", "model": "m", "sample_idx": s, "answer": answer,
                                     "correct": ok, "num_tokens": int(length(p, ok) * rng.uniform(*spread)),
                                     "score": None}))
    path.write_text("\n".join(lines) + "\n")
    return path
