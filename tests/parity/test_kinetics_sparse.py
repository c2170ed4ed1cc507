"""Parity: tts's sparse-attention pricing against the Kinetics cost model's sparse formulas.

Reference: Sadhukhan et al. 2025, "Kinetics: Rethinking Test-Time Scaling Laws" (arXiv:2506.05333).
Its dense cost (Eq. 4, Sec. 3) charges N samples of L_out tokens after an L_in-token prompt

    2 N P L_out  +  2 r N L_in D L_out + r N D L_out^2  +  2 I L_in D L_out + I N D L_out^2
    (linear layers)  (attention compute)                 (KV reads, the prompt's shared)

(r the GQA ratio, D the KV size per token, I the device's FLOPs per byte); tests/parity/
test_estimators_and_cost.py pins tts to that. Sparse attention (Sec. 5) replaces the attended
context by a KV budget B per token, read by every sample on its own. The paper's code prices the
two sparse forms it evaluates in ``cost_model/utils.py`` of github.com/Infini-AI-Lab/Kinetics at
commit af7fa5752c3fe998f03536be272b2fbb3e4e552d:

* ``zero_overhead_sparse_cost`` (oracle top-k, B = top-k + local window, as
  ``cost_model/long_CoT/cost_model_genlen.py`` builds it), and
* ``block_sparse_cost`` (block top-k, B = local + block_size * top-k blocks), which adds the
  block-selection overhead: each step a sample's query is dotted with one summary key per block of
  its whole context, ``(2 L_in + L_out) / block_size * L_out * H * d`` FLOPs per sample, and those
  keys are read, ``(2 L_in + N L_out) / block_size * L_out * H_kv * d`` bytes (the prompt's blocks
  once for all samples).

Both use the attended positions summed over the generation, ``S = B L_out - (B - L_in)^2 / 2`` when
the budget exceeds the prompt (the first B - L_in tokens see fewer than B positions). The formulas
are restated below from the paper and that file (not imported: the reference needs its datasets).
Like the dense test, the reference prices decode only and no weight reads, so the request here has
a cached prompt and weight bytes are left out; H * d and H_kv * d carry the layer count (how the
reference's callers pass ``head_dim``), and KV is bfloat16 (2 bytes), K and V.

Not a strategy or verifier: nothing in the registry is pinned here, so ``PINNED`` is empty.
"""

from __future__ import annotations

import pytest

from tts.cost.architecture import load_architecture
from tts.cost.cost_model import CostModel, SparseAttention
from tts.cost.hardware import Hardware

PINNED: set[str] = set()

KINETICS_I = 562.5  # Kinetics' E_flops: B200's fp8 peak over its 8 TB/s (cost_model_genlen.py)


def _attended(budget: int, context: int, gen: int) -> float:
    """Kinetics' S: KV positions one sample attends to over its generation (continuous sum)."""
    return budget * gen - 0.5 * max(0, budget - context) ** 2


def _kinetics_topk(nparams: float, hd: int, kv_hd: int, budget: int, context: int, gen: int,
                   trials: int) -> tuple[float, float]:
    """Oracle top-k (no selection cost): compute FLOPs and memory BYTES (times I gives eFLOPs).

    compute = N (2 P L_out + 4 H d S);  memory = N * 2 (K, V) * 2 bytes * H_kv d * S
    """
    s = _attended(budget, context, gen)
    compute = trials * (2 * nparams * gen + 2 * 2 * s * hd)
    memory = trials * 2 * 2 * s * kv_hd
    return compute, memory


def _kinetics_block(nparams: float, hd: int, kv_hd: int, local: int, block: int, topk: int,
                    context: int, gen: int, trials: int) -> tuple[float, float]:
    """Block top-k with its selection overhead: compute FLOPs and memory BYTES."""
    budget = local + block * topk
    s = _attended(budget, context, gen)
    search_compute = (2 * context + gen) / block * gen * hd
    compute = trials * (2 * nparams * gen + 2 * 2 * s * hd + search_compute)
    search_memory = (2 * context + gen * trials) / block * gen * kv_hd
    memory = trials * 2 * 2 * s * kv_hd + search_memory
    return compute, memory


def _price(model: str, sparse: SparseAttention, context: int, gen: int, trials: int):
    arch = load_architecture(model)
    cm = CostModel(arch, Hardware.with_ridge(KINETICS_I), sparse=sparse)
    cost = cm.cost_request(context, [gen] * trials, cached_prompt_tokens=context)
    kv_writes = arch.kv_bytes_per_token * gen * trials  # tts counts writes; Kinetics does not
    return arch, cost, kv_writes


def _shape(arch) -> tuple[float, int, int]:
    return (float(arch.flop_params), arch.heads * arch.head_dim * arch.layers,
            arch.kv_heads * arch.head_dim * arch.layers)


@pytest.mark.parametrize(("model", "context", "gen", "trials", "topk", "local"), [
    ("Qwen/Qwen3-8B", 4096, 8192, 1, 2048, 64),     # budget inside the prompt: no ramp
    ("Qwen/Qwen3-8B", 128, 16384, 8, 1024, 64),     # budget past the prompt: the ramp counts
    ("Qwen/Qwen3-32B", 512, 32768, 4, 4096, 128),
    ("Qwen/Qwen3-0.6B", 256, 8192, 32, 512, 0),
])
def test_topk_matches_kinetics(model, context, gen, trials, topk, local):
    """Top-k with budget B = top-k + local: FLOPs, and KV bytes less tts's writes, equal the
    paper's oracle top-k cost (reference ``zero_overhead_sparse_cost``, with the ramp term's sign
    as in ``block_sparse_cost``; see the next test) to 1e-3; with the budget inside the prompt
    (no ramp) they are equal exactly."""
    sparse = SparseAttention("topk", topk, local)
    assert sparse.budget == topk + local  # cost_model_genlen.py: budget = topk + attn_local
    arch, cost, writes = _price(model, sparse, context, gen, trials)
    compute, memory = _kinetics_topk(*_shape(arch), sparse.budget, context, gen, trials)
    exact = sparse.budget <= context
    tol = 1e-12 if exact else 1e-3
    assert cost.flops == pytest.approx(compute, rel=tol)
    assert cost.kv_bytes - writes == pytest.approx(memory, rel=tol)
    eflops = cost.eflops - KINETICS_I * (cost.weight_bytes + writes)
    assert eflops == pytest.approx(compute + KINETICS_I * memory, rel=tol)


def test_topk_ramp_is_subtracted_as_in_the_exact_sum():
    """Where B > L_in, the first B - L_in tokens attend to fewer than B positions, so the attended
    total is B L_out - (B - L_in)^2 / 2 (block_sparse_cost's sign). The reference's
    ``zero_overhead_sparse_cost`` adds that term instead; tts follows the exact integer sum, which
    lies on the subtracted side. Here the added sign would overstate attention by 61%."""
    budget, context, gen = 4096, 128, 8192
    sparse = SparseAttention("topk", budget)
    arch, cost, _ = _price("Qwen/Qwen3-8B", sparse, context, gen, 1)
    attn_per_pos = 4 * arch.layers * arch.heads * arch.head_dim
    attended = cost.attention_flops / attn_per_pos
    exact = sum(min(budget, context + t) for t in range(1, gen + 1))
    assert attended == pytest.approx(exact, rel=1e-12)
    assert attended == pytest.approx(_attended(budget, context, gen), rel=1e-3)
    plus = budget * gen + 0.5 * (budget - context) ** 2
    assert plus / attended == pytest.approx(1.61, abs=0.01)


@pytest.mark.parametrize(("model", "context", "gen", "trials", "local", "block", "topk"), [
    ("Qwen/Qwen3-8B", 128, 16384, 8, 128, 16, 64),
    ("Qwen/Qwen3-8B", 2048, 8192, 1, 64, 32, 32),
    ("Qwen/Qwen3-14B", 512, 32768, 16, 256, 64, 16),
    ("Qwen/Qwen3-32B", 128, 32768, 4, 128, 16, 128),
])
def test_block_topk_matches_kinetics(model, context, gen, trials, local, block, topk):
    """Block top-k, B = local + block_size * top-k, plus the block-selection overhead: tts's FLOPs
    and KV bytes (less writes) equal the reference ``block_sparse_cost`` to 1e-3, and so do the
    overhead terms alone (block top-k minus oracle top-k at the same budget)."""
    sparse = SparseAttention("block", topk, local, block)
    assert sparse.budget == local + block * topk  # cost_model_genlen.py's budget
    arch, cost, writes = _price(model, sparse, context, gen, trials)
    p, hd, kv_hd = _shape(arch)
    compute, memory = _kinetics_block(p, hd, kv_hd, local, block, topk, context, gen, trials)
    assert cost.flops == pytest.approx(compute, rel=1e-3)
    assert cost.kv_bytes - writes == pytest.approx(memory, rel=1e-3)
    assert cost.eflops - KINETICS_I * (cost.weight_bytes + writes) == pytest.approx(
        compute + KINETICS_I * memory, rel=1e-3)

    # The selection overhead on its own.
    _, oracle, _ = _price(model, SparseAttention("topk", sparse.budget), context, gen, trials)
    search_compute = trials * (2 * context + gen) / block * gen * hd
    search_memory = (2 * context + gen * trials) / block * gen * kv_hd
    assert cost.flops - oracle.flops == pytest.approx(search_compute, rel=1e-3)
    assert cost.kv_bytes - oracle.kv_bytes == pytest.approx(search_memory, rel=1e-3)


def test_sparse_beats_dense_at_long_generations_as_in_kinetics():
    """Kinetics' Sec. 5 claim in the cost model: at long generations a block top-k engine costs a
    fraction of dense attention's eFLOPs for a small model, where attention dominates."""
    arch = load_architecture("Qwen/Qwen3-0.6B")
    hw = Hardware.with_ridge(KINETICS_I)
    dense = CostModel(arch, hw).cost_request(128, [32768] * 8, cached_prompt_tokens=128)
    sparse = CostModel(arch, hw, sparse=SparseAttention("block", 64, 128, 16)).cost_request(
        128, [32768] * 8, cached_prompt_tokens=128)
    assert sparse.eflops < dense.eflops / 5
