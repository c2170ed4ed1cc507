"""Parity: the pool estimators (pass@k and friends) and the Kinetics cost model against their references.

* pass@k: Chen et al. 2021, "Evaluating Large Language Models Trained on Code", eq. 1, the unbiased
  estimator ``1 - C(n-c, k) / C(n, k)`` and its numerically stable product form
  ``1 - prod_{i=n-c+1}^{n} (1 - k / i)`` (the paper's Figure 3 code listing).
* best-of-n (exact), majority and weighted vote: tts's own estimators of "what would this rule
  score with k of the N samples"; their reference is the definition itself, the mean over every
  k-subset of the pool (enumerated here by brute force), ties shared.
* Kinetics (Sadhukhan et al. 2025): ``dense_cost`` of github.com/Infini-AI-Lab/Kinetics,
  ``cost_model/utils.py`` at commit af7fa5752c3fe998f03536be272b2fbb3e4e552d.

No strategy or verifier is registered for these, so the set below is empty; the module is in the
parity suite because issue 19 asks that the estimators and the cost model be pinned too.
"""

from __future__ import annotations

import itertools
import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from tts.benchmarks.pool import load_pool
from tts.cost.architecture import load_architecture
from tts.cost.cost_model import CostModel
from tts.cost.hardware import Hardware
from tts.eval import estimators as est

PINNED: set[str] = set()


# --- pass@k (Chen et al. 2021) --------------------------------------------------------------------


def _chen_pass_at_k(n: int, c: int, k: int) -> float:
    """Chen et al. 2021 eq. 1 in the stable product form of their Figure 3: when fewer than k
    samples are wrong, every k-subset holds a correct one (1.0); otherwise 1 minus the running
    product of (1 - k/i) for i from n - c + 1 to n."""
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def _pool(tmp_path: Path, problems: list[list[tuple[str | None, bool, float | None]]]):
    """A one-model pool from hand-made (answer, correct, score) samples per problem."""
    rows = []
    for p, samples in enumerate(problems):
        for s, (answer, ok, score) in enumerate(samples):
            rows.append({"problem_id": f"p{p}", "model": "m", "sample_idx": s, "answer": answer,
                         "correct": ok if answer is not None else None, "num_tokens": 10, "score": score})
    path = tmp_path / "pool.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return load_pool(path)["m"]


def test_pass_at_k_is_chen_eq1_product_form(tmp_path):
    """Chen et al. 2021 eq. 1 (stable product, Figure 3): tts's exact pass@k equals it for every
    (n, c, k) of a hand-made pool, including c = 0, c = n and n - c < k."""
    # (N samples, c correct) per problem: 10/0, 10/1, 10/3, 10/10, 7/2, 7/6 (uneven counts).
    shapes = [(10, 0), (10, 1), (10, 3), (10, 10), (7, 2), (7, 6)]
    pool = _pool(tmp_path, [[(f"a{s}", s < c, None) for s in range(n)] for n, c in shapes])
    ks = list(range(1, 8))
    per = est.pass_per_problem(pool, np.array(ks))
    for p, (n, c) in enumerate(shapes):
        for j, k in enumerate(ks):
            assert per[p, j] == pytest.approx(_chen_pass_at_k(n, c, k), abs=1e-12), (n, c, k)
            # ...which is the binomial form of eq. 1 itself.
            assert per[p, j] == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k), abs=1e-12)
    curve = est.pass_at_k(pool, ks)
    assert curve.at(3)[0] == pytest.approx(np.mean([_chen_pass_at_k(n, c, 3) for n, c in shapes]), abs=1e-12)


def test_pass_at_k_is_stable_where_binomials_overflow_floats(tmp_path):
    """The product form keeps pass@k finite where C(n, k) is beyond a float (n = 1200, k = 600)."""
    n, c, k = 1200, 3, 600
    pool = _pool(tmp_path, [[(f"a{s}", s < c, None) for s in range(n)]])
    got = est.pass_per_problem(pool, np.array([k]))[0, 0]
    assert math.isfinite(got)
    assert got == pytest.approx(_chen_pass_at_k(n, c, k), rel=1e-12)


def _subset_mean(samples, k, rule) -> float:
    """The definition: the mean over every k-subset of the rule's (tie-shared) correctness."""
    outcomes = [rule(sub) for sub in itertools.combinations(samples, k)]
    return sum(outcomes) / len(outcomes)


def _best(sub) -> float:
    """Best-of-k: the highest-scored answered sample; ties share; no answer at all is wrong."""
    answered = [s for s in sub if s[0] is not None]
    if not answered:
        return 0.0
    top = max(s[2] for s in answered)
    tied = [s for s in answered if s[2] == top]
    return sum(s[1] for s in tied) / len(tied)


def _vote(sub, weight=lambda s: 1.0) -> float:
    """Plurality (or weighted) vote over the answered samples; tied answers share."""
    tally: Counter[str] = Counter()
    grade: dict[str, bool] = {}
    for a, ok, score in sub:
        if a is not None:
            tally[a] += weight((a, ok, score))
            grade[a] = ok
    if not tally:
        return 0.0
    top = max(tally.values())
    tied = [a for a, v in tally.items() if math.isclose(v, top)]
    return sum(grade[a] for a in tied) / len(tied)


HAND = [
    # answer, correct, score: a right answer in the minority with the best score, an abstention
    [("7", True, 0.9), ("5", False, 0.4), ("5", False, 0.6), (None, False, None), ("7", True, 0.2), ("5", False, 0.6)],
    # tied scores across a right and a wrong answer; a 2-2 vote split
    [("1", True, 0.5), ("2", False, 0.5), ("1", True, 0.3), ("2", False, 0.7), ("3", False, 0.1), (None, False, None)],
]


def test_best_of_n_exact_is_the_mean_over_every_subset(tmp_path):
    """best_score (exact): equal to enumerating every k-subset and taking its top-scored answered
    sample (ties shared, a subset with no answer counts wrong), for every k."""
    pool = _pool(tmp_path, HAND)
    ks = list(range(1, 7))
    per = est.best_score_per_problem(pool, np.array(ks))
    for p, samples in enumerate(HAND):
        for j, k in enumerate(ks):
            assert per[p, j] == pytest.approx(_subset_mean(samples, k, _best), abs=1e-12), (p, k)


def test_votes_on_the_whole_pool_are_the_plurality_with_ties_shared(tmp_path):
    """majority and weighted_vote at n = N: one subset, so the bootstrap is exact; a 2-2 split
    gives each tied answer its share (the expectation of a random tie-break). At n < N the
    bootstrap estimates the subset mean; it must be within Monte Carlo error of the enumeration."""
    pool = _pool(tmp_path, HAND)
    maj = est.majority_vote(pool, [1, 3, 6], draws=4000, seed=1)
    wv = est.weighted_vote(pool, [1, 3, 6], weighting="score", draws=4000, seed=1)
    for p, samples in enumerate(HAND):
        assert maj.per_problem[p, 2] == pytest.approx(_vote(samples), abs=1e-12)
        assert wv.per_problem[p, 2] == pytest.approx(_vote(samples, lambda s: s[2]), abs=1e-12)
        for j, k in ((0, 1), (1, 3)):
            assert maj.per_problem[p, j] == pytest.approx(_subset_mean(samples, k, _vote), abs=0.03)
            want = _subset_mean(samples, k, lambda sub: _vote(sub, lambda s: s[2]))
            assert wv.per_problem[p, j] == pytest.approx(want, abs=0.03)


# --- Kinetics dense cost --------------------------------------------------------------------------

KINETICS_I = 562.5  # Kinetics' E_flops: B200's fp8 peak over its 8 TB/s (cost_model_genlen.py)


def _kinetics_dense_cost(nparams: float, heads: int, kv_heads: int, head_dim_all_layers: int, e_flops: float,
                         context: int, gen: int, trials: int) -> tuple[float, float]:
    """Kinetics ``cost_model/utils.py::dense_cost`` (commit af7fa57), restated, in TFLOPs:

    compute = trials * (2 P gen + 2 (2 L + gen) gen H D)
    memory  = I * 2 (2 L + trials gen) gen H_kv D

    with D the head dimension times the layer count (how ``cost_model_genlen.py`` calls it), L the
    context. Decode only (no prefill), the prompt's KV read once per step for all trials, and no
    weight reads (commented out in the reference)."""
    compute = (2 * nparams * gen + 2 * (2 * context + gen) * gen * heads * head_dim_all_layers) * trials * 1e-12
    memory = 2 * (2 * context + gen * trials) * gen * kv_heads * head_dim_all_layers * e_flops * 1e-12
    return compute, memory


@pytest.mark.parametrize(("model", "context", "gen", "trials"), [
    ("Qwen/Qwen3-0.6B", 128, 4096, 1),
    ("Qwen/Qwen3-0.6B", 512, 8192, 32),
    ("Qwen/Qwen3-8B", 128, 16384, 8),
    ("Qwen/Qwen3-32B", 2048, 32768, 4),
])
def test_dense_cost_matches_kinetics_within_1e_3(model, context, gen, trials):
    """Kinetics ``dense_cost`` (Infini-AI-Lab/Kinetics, cost_model/utils.py, commit
    af7fa5752c3fe998f03536be272b2fbb3e4e552d): tts's decode FLOPs (parameters + attention) and I
    times its KV bytes equal the reference's compute and memory terms to 1e-3 relative, for a
    request of ``trials`` samples of ``gen`` tokens after a cached ``context``-token prompt
    (cached: the reference prices decode only). tts additionally prices weight reads, which the
    reference leaves out; they are excluded here by comparing ``eflops - I * weight_bytes``.
    The small remaining gap is the reference's continuous sums (gen^2 / 2 where tts sums the
    integer positions, gen (gen + 1) / 2, plus one KV write per token)."""
    arch = load_architecture(model)
    cm = CostModel(arch, Hardware.with_ridge(KINETICS_I))
    cost = cm.cost_request(context, [gen] * trials, cached_prompt_tokens=context)
    compute, memory = _kinetics_dense_cost(arch.flop_params, arch.heads, arch.kv_heads, arch.head_dim * arch.layers,
                                           KINETICS_I, context, gen, trials)
    assert cost.flops * 1e-12 == pytest.approx(compute, rel=1e-3)
    assert KINETICS_I * cost.kv_bytes * 1e-12 == pytest.approx(memory, rel=1e-3)
    assert (cost.eflops - KINETICS_I * cost.weight_bytes) * 1e-12 == pytest.approx(compute + memory, rel=1e-3)
