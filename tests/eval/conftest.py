"""Fixtures shared by the eval tests: a small synthetic sample pool."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest


@pytest.fixture
def small_pool_shape() -> tuple[int, int]:
    """(problems, samples per problem) of ``small_pool``; a test module overrides it for another size."""
    return 40, 16


@pytest.fixture
def small_pool(tmp_path, small_pool_shape) -> Path:
    """A pool file of two models, Qwen3-8B (right 60% of the time, priced from its architecture) and
    mystery-model (40%, no known architecture), with answers, token counts and verifier scores."""
    problems, samples = small_pool_shape
    rng = np.random.default_rng(0)
    path = tmp_path / "pool.jsonl"
    with path.open("w") as fh:
        for model, skill in (("Qwen3-8B", 0.6), ("mystery-model", 0.4)):
            for p in range(problems):
                for s in range(samples):
                    right = rng.random() < skill
                    fh.write(json.dumps({"problem_id": f"p{p}", "model": model, "sample_idx": s,
                                         "answer": "1" if right else str(rng.integers(2, 5)), "correct": bool(right),
                                         "num_tokens": int(rng.integers(100, 400)),
                                         "score": float(rng.random() * 0.5 + 0.5 * right)}) + "\n")
    return path
