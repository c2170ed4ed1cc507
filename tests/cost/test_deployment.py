"""The cost model's deployment settings (issue 51), each pinned against a hand computation:
tensor parallelism, quantized weights, speculative decoding, and ``tts cost`` taking them.

Every case decodes ONE token after a prompt already in the prefix cache, so the whole cost is one
decode step: FLOPs ``2 P_c + A (P + 1)``, weight bytes ``W``, KV bytes read ``K (P + 1)`` plus the
new token's ``K`` written (the cost model's docstring), on Llama-3.1-70B and an H100 SXM.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tts.cli.app import app
from tts.cost.architecture import load_architecture
from tts.cost.cost_model import CostModel
from tts.cost.deployment import Speculation
from tts.cost.hardware import get_hardware

P = 1000
ARCH = load_architecture("meta-llama/Llama-3.1-70B-Instruct")
H100 = get_hardware("h100")
FLOPS = 2.0 * ARCH.flop_params + 4.0 * ARCH.layers * ARCH.heads * ARCH.head_dim * (P + 1)
W = 2.0 * ARCH.flop_params  # bf16
KV = ARCH.kv_bytes_per_token * (P + 1) + ARCH.kv_bytes_per_token


def _one_token(**deployment):
    return CostModel(ARCH, H100, **deployment).cost_request(P, [1], cached_prompt_tokens=P)


def test_one_gpu_is_the_plain_roofline():
    c = _one_token()
    assert c.seconds == pytest.approx(max(FLOPS / 989.4e12, (W + KV) / 3.35e12), rel=1e-12)
    assert c.gpu_seconds == c.seconds


def test_tensor_parallel_divides_the_work_per_gpu_adds_the_all_reduces_and_rents_every_gpu():
    c = _one_token(tensor_parallel=2)
    # Per GPU: half the FLOPs, weights and KV (8 KV heads split over 2); two ring all-reduces per
    # layer of one token's activations (8192 bf16), each 2 (p - 1) / p of it over NVLink's 450 GB/s.
    allreduce = 2 * 80 * (2 * 1 / 2) * 8192 * 2 / 450e9
    assert (ARCH.layers, ARCH.hidden_size, ARCH.kv_heads) == (80, 8192, 8)
    by_hand = max(FLOPS / 2 / 989.4e12, (W / 2 + KV / 2) / 3.35e12) + allreduce
    assert c.seconds == pytest.approx(by_hand, rel=1e-12)
    assert c.gpu_seconds == pytest.approx(2 * by_hand, rel=1e-12)
    assert (c.flops, c.weight_bytes) == pytest.approx((FLOPS, W))  # the work itself is the same
    assert _one_token().seconds / c.seconds == pytest.approx(1.9994, abs=1e-4)


@pytest.mark.parametrize(("prompt", "lengths", "cached"), [(1000, [10], 0), (1000, [10, 10], 0), (1000, [10], 1000),
                                                     (500, [3, 7], 200)])
def test_the_all_reduces_cost_one_activation_per_position_computed(prompt, lengths, cached):
    """On a GPU whose compute and memory are free, only the all-reduces take time: one token's two
    per layer for every position a forward computes, the uncached prompt's and each generated
    token's; under speculation (k = 4 drafts, acceptance 0.8) every target forward verifies k + 1
    positions and yields E = (1 - 0.8^5) / 0.2 tokens."""
    import dataclasses

    free = dataclasses.replace(H100, peak_flops=1e40, bandwidth=1e40)
    per_position = 2 * 80 * (2 * 1 / 2) * 8192 * 2 / 450e9
    computed = prompt - cached + sum(lengths)
    c = CostModel(ARCH, free, tensor_parallel=2).cost_request(prompt, lengths, cached_prompt_tokens=cached)
    assert c.seconds == pytest.approx(per_position * computed, rel=1e-9)
    e = (1 - 0.8 ** 5) / 0.2
    s = CostModel(ARCH, free, tensor_parallel=2, speculation=Speculation(0.8, 4)).cost_request(
        prompt, lengths, cached_prompt_tokens=cached)
    assert s.seconds == pytest.approx(per_position * (prompt - cached + sum(lengths) * 5 / e), rel=1e-9)


def test_tensor_parallelism_and_quantization_are_kept_and_refused_in_one_line():
    assert (CostModel(ARCH, H100, tensor_parallel=2, quantization="fp8").tensor_parallel,
            CostModel(ARCH, H100, tensor_parallel=2, quantization="fp8").quantization) == (2, "fp8")
    with pytest.raises(ValueError) as err:
        CostModel(ARCH, H100, tensor_parallel=0)
    assert str(err.value) == "tensor_parallel is a number of GPUs >= 1, got 0"
    import dataclasses

    with pytest.raises(ValueError) as err:
        CostModel(ARCH, dataclasses.replace(H100, interconnect=None), tensor_parallel=2)
    assert str(err.value) == (f"{H100.name} has no interconnect bandwidth in the hardware table, so tensor "
                              "parallelism over it cannot be priced; use --tp 1 or a GPU of the table")


def test_kv_heads_fewer_than_the_gpus_are_repeated_not_split():
    c = _one_token(tensor_parallel=16)
    allreduce = 2 * 80 * (2 * 15 / 16) * 8192 * 2 / 450e9
    by_hand = max(FLOPS / 16 / 989.4e12, (W / 16 + KV / 8) / 3.35e12) + allreduce
    assert c.seconds == pytest.approx(by_hand, rel=1e-12)


@pytest.mark.parametrize(("method", "per_weight"), [("fp8", 1.0), ("int8", 1.0), ("awq", 0.5 + 2.5 / 128),
                                                    ("gptq", 0.5 + 2.5 / 128)])
def test_quantized_weights_are_read_at_their_width(method, per_weight):
    c = _one_token(quantization=method)
    assert c.weight_bytes == pytest.approx(ARCH.flop_params * per_weight, rel=1e-12)
    assert c.kv_bytes == pytest.approx(KV, rel=1e-12)  # the KV cache keeps bf16
    assert c.seconds == pytest.approx(max(FLOPS / 989.4e12, (ARCH.flop_params * per_weight + KV) / 3.35e12))


def test_an_unpriced_quantization_is_refused_naming_the_priced_ones():
    with pytest.raises(ValueError, match="quantization 'nf4' is not priced; use one of fp8"):
        CostModel(ARCH, H100, quantization="nf4")


def test_expected_tokens_per_target_forward_are_leviathans():
    assert Speculation(0.8, 4).tokens_per_forward == pytest.approx((1 - 0.8 ** 5) / 0.2)
    assert Speculation(0.0, 4).tokens_per_forward == 1.0
    with pytest.raises(ValueError, match="below 1"):
        Speculation(1.0, 4)


def test_speculation_divides_the_weight_reads_and_multiplies_the_positions_computed():
    e = (1 - 0.8 ** 5) / 0.2  # 3.3616 tokens per target forward
    c = _one_token(speculation=Speculation(0.8, 4))
    assert c.param_flops == pytest.approx(2.0 * ARCH.flop_params * 5 / e, rel=1e-12)
    assert c.weight_bytes == pytest.approx(W / e, rel=1e-12)
    reads, writes = ARCH.kv_bytes_per_token * (P + 1), ARCH.kv_bytes_per_token
    assert c.kv_bytes == pytest.approx(reads / e + writes * 5 / e, rel=1e-12)
    attention = 4.0 * ARCH.layers * ARCH.heads * ARCH.head_dim * (P + 1)
    step = max((2.0 * ARCH.flop_params + attention) * 5 / 989.4e12, (W + reads + 5 * writes) / 3.35e12)
    assert c.seconds == pytest.approx(step / e, rel=1e-12)
    assert c.generated_tokens == 1


def test_a_draft_model_adds_k_of_its_own_forwards_per_target_forward():
    draft = load_architecture("meta-llama/Llama-3.2-1B-Instruct")
    e = (1 - 0.8 ** 5) / 0.2
    alone = _one_token(speculation=Speculation(0.8, 4))
    with_draft = _one_token(speculation=Speculation(0.8, 4, draft))
    draft_step = CostModel(draft, H100).cost_request(P, [1], cached_prompt_tokens=P)
    assert with_draft.weight_bytes == pytest.approx(alone.weight_bytes + draft_step.weight_bytes * 4 / e, rel=1e-12)
    assert with_draft.seconds == pytest.approx(alone.seconds + draft_step.seconds * 4 / e, rel=1e-12)
    assert with_draft.generated_tokens == 1


# --- tts cost ----------------------------------------------------------------------------------------------

_RUN = ["cost", "-m", "meta-llama/Llama-3.1-70B-Instruct", "--gpu", "h100", "-n", "1", "--prompt", "200",
        "--gen", "1000", "--json"]


def _cost(*flags):
    result = CliRunner().invoke(app, [*_RUN, *flags])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_tts_cost_takes_tensor_parallel_quantization_and_speculation():
    one, two = _cost(), _cost("--tp", "2")
    assert two["gpu_seconds"] == pytest.approx(2 * two["seconds"])
    assert two["dollars"] == pytest.approx(two["gpu_seconds"] / 3600 * 3.49)
    assert one["seconds"] / two["seconds"] == pytest.approx(2.0, rel=2e-3)
    awq = _cost("--quantization", "awq")
    assert awq["weight_bytes"] / one["weight_bytes"] == pytest.approx((0.5 + 2.5 / 128) / 2, rel=1e-12)
    cached = _cost("--cached", "200")  # no prefill: every weight read is a decode step's
    spec = _cost("--cached", "200", "--spec-acceptance", "0.8", "--spec-tokens", "4")
    assert cached["weight_bytes"] / spec["weight_bytes"] == pytest.approx((1 - 0.8 ** 5) / 0.2, rel=1e-9)


def test_tts_cost_ranks_gpus_paying_for_every_gpu_of_a_tensor_parallel_replica():
    result = CliRunner().invoke(app, [*_RUN[:3], "--gpu", "all", *_RUN[5:], "--tp", "2"])
    assert result.exit_code == 0, result.output
    rows = {r["gpu"]: r for r in json.loads(result.output)["ranking"]}
    h100 = rows["H100-SXM"]
    assert h100["dollars"] == pytest.approx(h100["seconds"] * 2 / 3600 * 3.49)
    assert h100["fits"] and h100["memory_usable_bytes"] == pytest.approx(0.9 * 80e9 * 2)


@pytest.mark.parametrize(("flags", "message"), [
    (["--quantization", "nf4"], "quantization 'nf4' is not priced"),
    (["--tp", "2", "--gpu", "cpu"], "no interconnect bandwidth"),
    (["--spec-draft", "qwen3-0.6b"], "--spec-draft needs --spec-acceptance"),
])
def test_tts_cost_refuses_bad_deployment_flags_in_one_line(flags, message):
    result = CliRunner().invoke(app, [*_RUN, *flags])
    assert result.exit_code == 2 and message in result.output


# --- the engine's deployment reaches what prices a run and a budget -----------------------------

def test_deployment_of_reads_a_vllm_engines_parallelism_and_weights_and_nothing_of_other_backends():
    from tts.config import OpenAIBackendConfig, VLLMBackendConfig
    from tts.cost.deployment import deployment_of

    assert deployment_of(VLLMBackendConfig(tensor_parallel_size=2, quantization="awq")) == {
        "tensor_parallel": 2, "quantization": "awq"}
    assert deployment_of(VLLMBackendConfig()) == {}  # one GPU, the checkpoint's dtype: the defaults
    assert deployment_of(OpenAIBackendConfig(base_url="http://x/v1", model="m")) == {}
    assert deployment_of(None) == {}


def _priced(usage, **deployment):
    from tts.cost.ledger import cost_model_for, price_usages

    return price_usages([("x", usage)], cost_model_for("smollm2-135m", "h100", **deployment))["x"].cost


def test_a_session_on_a_tensor_parallel_quantized_engine_prices_solves_and_budgets_as_deployed():
    from tts.backends.scripted import ScriptedGenerator
    from tts.config import VLLMBackendConfig
    from tts.session import Session

    gen = ScriptedGenerator(default={"5": 0.9}, seed=0, model_name="smollm2-135m")
    gen.config = VLLMBackendConfig(model="smollm2-135m", tensor_parallel_size=2, quantization="fp8")
    with Session(generator=gen) as s:
        sol = s.solve("What is 2+3?", n=4)
    deployed, single = _priced(sol.usage, tensor_parallel=2, quantization="fp8"), _priced(sol.usage)
    assert sol.cost["gpu_seconds"] == pytest.approx(deployed.gpu_seconds, rel=1e-9)
    assert deployed.gpu_seconds != pytest.approx(single.gpu_seconds, rel=1e-3)  # the deployment matters
    assert sol.cost["eflops"] == pytest.approx(deployed.eflops, rel=1e-9)


def test_the_eval_table_prices_gpu_seconds_as_the_engine_is_deployed(tmp_path):
    from tts.cli.eval import _ledger
    from tts.config import EvalConfig
    from tts.eval.runner import run_eval

    cfg = EvalConfig.model_validate({
        "data": {"benchmark": "demo", "limit": 3}, "backend": {"kind": "scripted", "model": "smollm2-135m"},
        "sampling": {"max_tokens": 64}, "strategies": [{"kind": "self_consistency", "n": 4}]})
    result = run_eval(cfg, tmp_path / "run")
    (label,) = {r.config for r in result.rows}
    plain, _ = _ledger(result, "smollm2-135m", "h100")
    awq, why = _ledger(result, "smollm2-135m", "h100", {"tensor_parallel": 2, "quantization": "awq"})
    from tts.cost.ledger import cost_model_for, price_usages

    want = price_usages(((r.config, r.usage) for r in result.rows),
                        cost_model_for("smollm2-135m", "h100", tensor_parallel=2, quantization="awq"))
    assert why is None and awq[label].cost.gpu_seconds == pytest.approx(want[label].cost.gpu_seconds, rel=1e-12)
    assert awq[label].cost.weight_bytes < plain[label].cost.weight_bytes


def test_an_allocators_pricer_prices_the_deployment_it_is_given():
    from tts.budgets.pricing import make_pricer
    from tts.config import AllocationConfig
    from tts.eval.allocated import _pricer
    from tts.types import RequestShape, Usage

    usage = Usage(prompt_tokens=50, completion_tokens=400, calls=1, shapes=(RequestShape(50, 0, (100,) * 4, 4, None),))
    want = _priced(usage, tensor_parallel=2, quantization="fp8").gpu_seconds
    assert make_pricer("gpu_seconds", "smollm2-135m", deployment={"tensor_parallel": 2, "quantization": "fp8"}
                       ).usage(usage) == pytest.approx(want, rel=1e-12)
    alloc = AllocationConfig(budget=1.0, unit="gpu_seconds")
    assert _pricer(alloc, "smollm2-135m", {"tensor_parallel": 2, "quantization": "fp8"})(usage) == pytest.approx(
        want, rel=1e-12)
    assert _pricer(alloc, "smollm2-135m")(usage) == pytest.approx(_priced(usage).gpu_seconds, rel=1e-12)


def test_a_cost_scaled_is_every_quantity_times_the_factor_its_tokens_rounded():
    c = CostModel(ARCH, H100).cost_request(P, [10, 7])
    s = c.scaled(2.5)
    assert s.generated_tokens == 42 and (s.flops, s.seconds, s.weight_bytes) == pytest.approx(
        (2.5 * c.flops, 2.5 * c.seconds, 2.5 * c.weight_bytes), rel=1e-12)


@pytest.mark.parametrize("tp", [1, 2])
@pytest.mark.parametrize("concurrency", [None, 8])
def test_a_draft_prefills_the_prompt_once_and_decodes_k_per_target_forward_on_the_same_gpus(tp, concurrency):
    """Fifty tokens after an uncached prompt: the draft adds its own prefill once and its decode
    (the whole request less that prefill) k / E times, split over the target's GPUs and at the
    request's concurrency."""
    draft = load_architecture("meta-llama/Llama-3.2-1B-Instruct")
    e = (1 - 0.8 ** 5) / 0.2

    def cost(arch, **kw):
        return CostModel(arch, H100, tensor_parallel=tp, **kw).cost_request(P, [50], concurrency=concurrency)

    alone, with_draft = cost(ARCH, speculation=Speculation(0.8, 4)), cost(ARCH, speculation=Speculation(0.8, 4, draft))
    draft_prefill = CostModel(draft, H100, tensor_parallel=tp).cost_request(P, [0], concurrency=concurrency)
    draft_decode = cost(draft).seconds - draft_prefill.seconds
    assert with_draft.seconds - alone.seconds == pytest.approx(draft_prefill.seconds + draft_decode * 4 / e, rel=1e-9)
    assert with_draft.generated_tokens == 50


@pytest.mark.parametrize("tp", [1, 2])
@pytest.mark.parametrize("spec", [None, Speculation(0.8, 4)])
@pytest.mark.parametrize("sparse", [{}, {"sparse_kv_budget": 256}, {"sparse_kv_budget": 256, "sparse_block": 16}])
def test_on_a_gpu_whose_memory_is_free_the_time_is_the_flops_reported(tp, spec, sparse):
    """Compute-bound, the seconds are the FLOPs over the GPUs' peak, the same FLOPs the cost
    reports: under speculation each of a verification forward's k + 1 positions attends to the
    context (its attention FLOPs were once left out of the time, 1.5% of it here), dense or sparse
    (a KV budget per query, and block top-k's summary scores)."""
    import dataclasses

    compute_only = dataclasses.replace(H100, bandwidth=1e40, interconnect=1e40)
    c = CostModel(ARCH, compute_only, tensor_parallel=tp, speculation=spec, **sparse).cost_request(
        P, [50, 30], cached_prompt_tokens=200)
    assert c.seconds == pytest.approx(c.flops / tp / H100.peak_flops, rel=1e-12)


@pytest.mark.parametrize("tp", [1, 2, 16])
def test_on_a_gpu_whose_compute_is_free_the_time_is_the_bytes_reported_each_split_its_own_way(tp):
    """Memory-bound, the seconds are the weights split over every GPU plus the KV split over the
    GPUs that hold distinct KV heads (at most the model's 8), prompt and decode alike."""
    import dataclasses

    memory_only = dataclasses.replace(H100, peak_flops=1e40, interconnect=1e40)
    c = CostModel(ARCH, memory_only, tensor_parallel=tp).cost_request(P, [50, 30], cached_prompt_tokens=200)
    kv_shards = min(tp, 8)
    assert c.seconds == pytest.approx((c.weight_bytes / tp + c.kv_bytes / kv_shards) / H100.bandwidth, rel=1e-12)


def test_a_model_with_sliding_window_layers_reads_each_groups_kv_in_time_and_bytes_alike():
    """gpt-oss-20b: 12 of its 24 attention layers read at most 128 positions; memory-bound, the
    time is still the bytes reported (both kinds of layer counted, not only the last group's)."""
    import dataclasses

    oss = load_architecture("openai/gpt-oss-20b")
    assert (oss.window_layers, oss.kv_layers, oss.sliding_window) == (12, 24, 128)
    memory_only = dataclasses.replace(H100, peak_flops=1e40, interconnect=1e40)
    c = CostModel(oss, memory_only).cost_request(P, [50, 30], cached_prompt_tokens=200)
    assert c.seconds == pytest.approx((c.weight_bytes + c.kv_bytes) / H100.bandwidth, rel=1e-12)
