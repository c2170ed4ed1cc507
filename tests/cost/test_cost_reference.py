"""Every field of a Cost against a step-by-step reference, on random trees of segments.

The reference walks each decode step and each layer in plain Python, straight from the rules in
tts/cost/cost_model.py's docstring, with none of its closed forms (no arithmetic series, no
difference arrays, no hold times): a step's KV reads are the set of positions its active sequences
attend to (the prompt, their ancestors' tokens, their own) for a full-attention layer, ``min(cap,
ctx)`` per sequence for a capped one. It prices the prefill of the uncached prompt, a cached
prefix, sliding-window and hybrid (Mamba) layers, top-k and block top-k sparse attention, a
mixture-of-experts model's weight reads and a shared engine's concurrency; and it checks the split
fields (parameter vs attention FLOPs and eFLOPs, weight vs KV bytes) and the roofline seconds on
devices where decode is compute-bound as well as memory-bound.
"""

from __future__ import annotations

from dataclasses import fields

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tts.cost.architecture import ModelArchitecture, load_architecture
from tts.cost.cost_model import Cost, CostModel, SparseAttention
from tts.cost.hardware import Hardware

TINY = ModelArchitecture.from_config({
    "model_type": "llama", "hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2,
    "num_key_value_heads": 1, "intermediate_size": 16, "vocab_size": 32,
    "tie_word_embeddings": False, "torch_dtype": "float32",
})
# One sliding-window layer (3 positions) and one full layer.
WINDOW = ModelArchitecture.from_config({
    "model_type": "gpt_oss", "hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2,
    "num_key_value_heads": 1, "head_dim": 4, "intermediate_size": 16, "vocab_size": 32,
    "torch_dtype": "float32", "sliding_window": 3, "layer_types": ["sliding_attention", "full_attention"],
})
# Mamba, MLP and attention layers: a recurrent state per sequence beside the attention KV.
HYBRID = ModelArchitecture.from_config({
    "model_type": "nemotron_h", "hidden_size": 8, "num_hidden_layers": 3, "num_attention_heads": 2,
    "num_key_value_heads": 1, "head_dim": 4, "intermediate_size": 16, "vocab_size": 32,
    "torch_dtype": "float32", "hybrid_override_pattern": "M-*", "mamba_num_heads": 2, "mamba_head_dim": 4,
    "n_groups": 1, "ssm_state_size": 2, "conv_kernel": 2,
})
MOE = load_architecture("Qwen/Qwen3-30B-A3B")
ARCHS = {"dense": TINY, "window": WINDOW, "hybrid": HYBRID, "moe": MOE}


def _reference(arch, hw, prompt, cached, segments, budget, block, concurrency) -> dict[str, float]:
    h, d = arch.heads, arch.head_dim
    per_layer = 2 * arch.kv_heads * d * arch.dtype_bytes
    windows = [None] * arch.full_layers + [arch.sliding_window] * arch.window_layers
    assert per_layer * len(windows) == arch.kv_bytes_per_token
    pc, state = arch.flop_params, arch.state_bytes_per_sequence
    out = {"param_flops": 0.0, "attention_flops": 0.0, "weight_bytes": 0.0, "kv_bytes": 0.0, "seconds": 0.0}

    # Prefill of positions cached+1 .. prompt: dense, only windows cap what a position attends to.
    new = prompt - cached
    if new:
        p_flops = 2 * pc * new
        a_flops = sum(4 * h * d * (j if w is None else min(w, j)) for w in windows for j in range(cached + 1, prompt + 1))
        w_bytes = arch.weight_bytes_per_step(new)
        kv = arch.kv_bytes_per_token * prompt + state  # read the cached prefix, write the rest
        out["param_flops"] += p_flops
        out["attention_flops"] += a_flops
        out["weight_bytes"] += w_bytes
        out["kv_bytes"] += kv
        out["seconds"] += max((p_flops + a_flops) / hw.peak_flops, (w_bytes + kv) / hw.bandwidth)

    offsets: list[int] = []
    for parent, _ in segments:
        offsets.append(0 if parent is None else offsets[parent] + segments[parent][1])
    steps = max([o + n for o, (_, n) in zip(offsets, segments)], default=0)
    for s in range(1, steps + 1):
        active = [i for i, (o, (_, n)) in enumerate(zip(offsets, segments)) if o < s <= o + n]
        assert active, "segments of a tree leave no idle step"
        ctx = prompt + s
        positions: set[tuple[object, int]] = {("prompt", k) for k in range(prompt)}
        for i in active:  # what a full-attention layer reads this step: the union of the chains
            j = i
            while j is not None:
                upto = s - offsets[j] if j == i else segments[j][1]
                positions |= {(j, k) for k in range(upto)}
                j = segments[j][0]
        p_flops = 2 * pc * len(active)
        a_flops = 0.0
        kv = len(active) * (arch.kv_bytes_per_token + 2 * state)  # KV written, state read and written
        for w in windows:
            cap = w if budget is None else budget if w is None else min(w, budget)
            if cap is None:
                a_flops += 4 * h * d * ctx * len(active)
                kv += per_layer * len(positions)
            else:
                a_flops += 4 * h * d * min(cap, ctx) * len(active)
                kv += per_layer * min(cap, ctx) * len(active)
            if block is not None and w is None:  # one summary key (K only) per block of the dense context
                a_flops += 2 * h * d * ctx / block * len(active)
                kv += per_layer / 2 * len(positions) / block
        if concurrency is None:
            w_bytes = arch.weight_bytes_per_step(len(active))
        else:
            w_bytes = arch.weight_bytes_per_step(concurrency) * len(active) / concurrency
        out["param_flops"] += p_flops
        out["attention_flops"] += a_flops
        out["weight_bytes"] += w_bytes
        out["kv_bytes"] += kv
        out["seconds"] += max((p_flops + a_flops) / hw.peak_flops, (w_bytes + kv) / hw.bandwidth)

    i = hw.ridge
    out["flops"] = out["param_flops"] + out["attention_flops"]
    out["bytes"] = out["weight_bytes"] + out["kv_bytes"]
    out["eflops"] = out["flops"] + i * out["bytes"]
    out["param_eflops"] = out["param_flops"] + i * out["weight_bytes"]
    out["attention_eflops"] = out["attention_flops"] + i * out["kv_bytes"]
    out["generated_tokens"] = sum(n for _, n in segments)
    out["gpu_seconds"] = out["seconds"]  # one GPU
    return out


def _assert_matches(cost: Cost, ref: dict[str, float]) -> None:
    for f in fields(Cost):
        assert getattr(cost, f.name) == pytest.approx(ref[f.name], rel=1e-9, abs=1e-9), f.name
    assert type(cost.generated_tokens) is int


@st.composite
def _trees(draw):
    count = draw(st.integers(1, 6))
    segments: list[tuple[int | None, int]] = []
    for i in range(count):
        parent = draw(st.none() | st.integers(0, i - 1)) if i else None
        segments.append((parent, draw(st.integers(0, 6))))
    if all(n == 0 for _, n in segments):
        segments[0] = (segments[0][0], 1)
    return segments


# Devices whose ridge puts decode of these tiny models on either side of the roofline.
DEVICES = [Hardware("compute-bound", peak_flops=50.0, bandwidth=1e3, memory_bytes=0.0),
           Hardware("balanced", peak_flops=1e4, bandwidth=1e3, memory_bytes=0.0),
           Hardware("memory-bound", peak_flops=1e9, bandwidth=1e3, memory_bytes=0.0)]


@settings(max_examples=60, deadline=None)
@given(arch=st.sampled_from(["dense", "window", "hybrid"]), tree=_trees(), prompt=st.integers(0, 7),
       cached_share=st.floats(0, 1), sparse=st.sampled_from([None, (1, None), (4, None), (6, 2), (5, 3)]),
       concurrency=st.none() | st.integers(1, 5), device=st.sampled_from(DEVICES))
def test_trees_match_the_step_by_step_reference(arch, tree, prompt, cached_share, sparse, concurrency, device):
    cached = int(prompt * cached_share)
    budget, block = sparse or (None, None)
    model = CostModel(ARCHS[arch], device, sparse_kv_budget=budget, sparse_block=block)
    cost = model.cost_tree(prompt, tree, cached_prompt_tokens=cached, concurrency=concurrency)
    _assert_matches(cost, _reference(ARCHS[arch], device, prompt, cached, tree, budget, block, concurrency))


@pytest.mark.parametrize("concurrency", [None, 1, 64])
@pytest.mark.parametrize("tree", [[(None, 3), (None, 5)], [(None, 2), (0, 3), (0, 1), (1, 2)]])
def test_a_mixture_of_experts_reads_the_experts_its_batch_touches(tree, concurrency):
    hw = Hardware("x", peak_flops=1e15, bandwidth=1e12, memory_bytes=0.0)
    cost = CostModel(MOE, hw).cost_tree(4, tree, cached_prompt_tokens=1, concurrency=concurrency)
    _assert_matches(cost, _reference(MOE, hw, 4, 1, tree, None, None, concurrency))


def test_requests_are_trees_of_roots_and_usage_adds_requests():
    hw = DEVICES[1]
    model = CostModel(WINDOW, hw, sparse=SparseAttention.parse("block:2,size=2,local=1"))
    cost = model.cost_request(5, [3, 0, 4], cached_prompt_tokens=2, concurrency=3)
    _assert_matches(cost, _reference(WINDOW, hw, 5, 2, [(None, 3), (None, 0), (None, 4)], 5, 2, 3))


def test_nothing_generated_costs_the_prefill_alone():
    hw = DEVICES[0]
    cost = CostModel(HYBRID, hw).cost_request(6, [0, 0], cached_prompt_tokens=2)
    _assert_matches(cost, _reference(HYBRID, hw, 6, 2, [(None, 0)], None, None, None))
    assert cost.generated_tokens == 0 and cost.eflops_per_token == 0.0
    # All of the prompt cached and nothing generated: nothing at all.
    assert CostModel(HYBRID, hw).cost_request(6, [], cached_prompt_tokens=6) == Cost()


def test_invalid_inputs_say_what_is_wrong():
    model = CostModel(TINY, DEVICES[1])
    with pytest.raises(ValueError, match=r"^need prompt_tokens >= 0 and 0 <= cached_prompt_tokens <= prompt_tokens, "
                                         r"got 5 and 6$"):
        model.cost_request(5, [1], cached_prompt_tokens=6)
    with pytest.raises(ValueError, match=r"got -1 and 0$"):
        model.cost_request(-1, [1])
    with pytest.raises(ValueError, match=r"got 5 and -1$"):
        model.cost_request(5, [1], cached_prompt_tokens=-1)
    model.cost_request(0, [1])  # an empty prompt is fine
    with pytest.raises(ValueError, match=r"^concurrency must be >= 1 sequences, got 0$"):
        model.cost_request(5, [1], concurrency=0)
    with pytest.raises(ValueError, match=r"^completion lengths must be >= 0, got -2$"):
        model.cost_request(5, [1, -2, -1])
    with pytest.raises(ValueError, match=r"^segment 1: parent 1 must be the index of an earlier segment$"):
        model.cost_tree(5, [(None, 1), (1, 2)])
    with pytest.raises(ValueError, match=r"^segment 0: parent -1 must be the index"):
        model.cost_tree(5, [(-1, 1)])
    assert model.cost_tree(5, [(None, 1), (0, 2)]).generated_tokens == 3


def test_sparse_settings_are_checked_with_messages_that_say_what_to_write():
    cases = [
        (lambda: SparseAttention("dense", 4), ("sparse attention kind 'dense': write one of topk:K[,local=W], "
                                               "block:K,size=S[,local=W]")),
        (lambda: SparseAttention("topk", 0), "sparse attention keeps at least 1 of its KV positions; got topk:0"),
        (lambda: SparseAttention("block", 0, block_size=4), "sparse attention keeps at least 1 of its blocks; got block:0"),
        (lambda: SparseAttention("topk", 4, local=-1), "the local window is a number of positions >= 0, got local=-1"),
        (lambda: SparseAttention("block", 4), ("block top-k needs size=S, the positions per block (>= 1), e.g. "
                                               "block:4,size=16")),
        (lambda: SparseAttention("block", 4, block_size=0), "block top-k needs size=S"),
        (lambda: SparseAttention("topk", 4, block_size=8), ("size=8 is a block size; top-k keeps positions, not "
                                                            "blocks: write block:K,size=8 for block top-k")),
        (lambda: SparseAttention.parse("dense:4"), ("sparse attention 'dense:4': write topk:K[,local=W] or "
                                                    "block:K,size=S[,local=W] (e.g. topk:2048 or block:64,size=16,local=128)")),
        (lambda: SparseAttention.parse("topk: "), "sparse attention 'topk: ': write topk:K"),
        (lambda: SparseAttention.parse("topk:4,local=1,local=2"), ("sparse attention 'topk:4,local=1,local=2': unknown "
                                                                   "or repeated setting 'local'; write topk:K")),
        (lambda: SparseAttention.parse("topk:4,k=2"), ("sparse attention 'topk:4,k=2': unknown or repeated setting "
                                                       "'k'; write topk:K[,local=W] or block:K,size=S[,local=W]")),
        (lambda: SparseAttention.parse("topk:4:5"), "sparse attention 'topk:4:5': k must be a whole number, got '4:5'"),
        (lambda: SparseAttention.parse("topk:4,local=1=2"), ("sparse attention 'topk:4,local=1=2': local must be a "
                                                             "whole number, got '1=2'")),
        (lambda: SparseAttention.parse("topk:4,local=x"), ("sparse attention 'topk:4,local=x': local must be a whole "
                                                           "number, got 'x'")),
    ]
    for make, message in cases:
        with pytest.raises(ValueError) as err:
            make()
        assert str(err.value).startswith(message), (str(err.value), message)
    for ok in (SparseAttention("topk", 1), SparseAttention("topk", 4, local=0), SparseAttention("block", 1, block_size=1)):
        assert ok.budget >= 1
    assert SparseAttention.parse("blocktopk:3,size=2").label == "block:3,size=2"
    assert SparseAttention.parse("TopK:7 , local = 2").label == "topk:7,local=2"
    assert SparseAttention.parse("topk:5").budget == 5 and SparseAttention.parse("topk:5").selection_block is None


def test_sparse_attention_is_given_once_and_checked():
    hw = DEVICES[1]
    both = [{"sparse_kv_budget": 4}, {"sparse_block": 2}, {"sparse_kv_budget": 4, "sparse_block": 2}]
    for extra in both:
        with pytest.raises(ValueError, match=r"^give sparse attention once: either sparse= or "
                                             r"sparse_kv_budget/sparse_block$"):
            CostModel(TINY, hw, sparse=SparseAttention("topk", 4), **extra)
    with pytest.raises(ValueError, match=r"^sparse_kv_budget must be >= 1 KV positions, got 0$"):
        CostModel(TINY, hw, sparse_kv_budget=0)
    with pytest.raises(ValueError, match=r"^sparse_block must be >= 1 tokens, got 0$"):
        CostModel(TINY, hw, sparse_kv_budget=4, sparse_block=0)
    with pytest.raises(ValueError, match=r"^sparse_block needs sparse_kv_budget \(KV positions kept per token\)$"):
        CostModel(TINY, hw, sparse_block=2)
    model = CostModel(TINY, hw, sparse=SparseAttention("block", 2, local=1, block_size=3))
    assert (model.sparse_kv_budget, model.sparse_block) == (7, 3)
    assert model.sparse == SparseAttention("block", 2, local=1, block_size=3)  # kept for labels and reports
    assert CostModel(TINY, hw, sparse_kv_budget=4, sparse_block=1).sparse_block == 1  # blocks of one position
    assert (CostModel(TINY, hw, sparse_kv_budget=1).sparse_kv_budget, CostModel(TINY, hw).sparse) == (1, None)


def test_costs_add_field_by_field():
    a = Cost(*(float(k) for k in range(1, 11)), generated_tokens=3, gpu_seconds=11.0)
    b = Cost(*(10.0 * k for k in range(1, 11)), generated_tokens=4, gpu_seconds=110.0)
    total = a + b
    assert [getattr(total, f.name) for f in fields(Cost)] == [11.0 * k for k in range(1, 11)] + [7, 121.0]
    assert Cost.total([a, b, a]) == a + b + a and Cost.total([a]) == a
    with pytest.raises(TypeError):
        a + 1
    assert a.__add__(1) is NotImplemented


def test_usage_is_priced_at_each_engine_calls_recorded_concurrency():
    from tts.types import RequestShape, Usage

    model = CostModel(MOE, DEVICES[2])
    usage = Usage(shapes=(RequestShape(6, 2, (3, 5), 16), RequestShape(4, 0, (2,), 0)))
    first = model.cost_request(6, [3, 5], cached_prompt_tokens=2, concurrency=16)
    alone = model.cost_request(4, [2])
    assert model.cost_usage(usage) == first + alone  # 0 recorded: priced as running alone
    assert model.cost_usage(usage, concurrency=2) == (model.cost_request(6, [3, 5], 2, concurrency=2)
                                                      + model.cost_request(4, [2], concurrency=2))
    assert first.weight_bytes < model.cost_request(6, [3, 5], 2).weight_bytes  # 16 sharing each read


def test_an_empty_tree_costs_its_prefill():
    model = CostModel(WINDOW, DEVICES[1])
    assert model.cost_tree(5, [], cached_prompt_tokens=1) == model.cost_request(5, [], cached_prompt_tokens=1)
    _assert_matches(model.cost_tree(5, []), _reference(WINDOW, DEVICES[1], 5, 0, [], None, None, None))


def test_the_kinetics_ratio_of_one_sample_by_default():
    model = CostModel(TINY, Hardware.with_ridge(562.5))
    one = model.cost_request(7, [20])
    # attention + KV eFLOPs over the parameter FLOPs (weights amortised) or eFLOPs (this request's reads)
    assert model.attention_to_parameter_ratio(7, 20) == one.attention_eflops / one.param_flops
    assert model.attention_to_parameter_ratio(7, 20, amortise_weights=False) == one.attention_eflops / one.param_eflops
    four = model.cost_request(7, [20] * 4)
    assert model.attention_to_parameter_ratio(7, 20, n=4) == four.attention_eflops / four.param_flops
    assert model.attention_to_parameter_ratio(7, 20, n=4) != model.attention_to_parameter_ratio(7, 20)
