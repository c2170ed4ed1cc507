"""Architecture loading and parameter counting from config.json."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from tts.cost.architecture import ModelArchitecture, load_architecture, shipped_model_ids

TINY = {
    "model_type": "llama", "hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2,
    "num_key_value_heads": 1, "intermediate_size": 16, "vocab_size": 32,
    "tie_word_embeddings": False, "torch_dtype": "float32",
}


def test_tiny_config_parameter_count_by_hand(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY))
    arch = load_architecture(path)
    # head_dim is absent: hidden / heads = 4. Per layer: q 8*8 + k 8*4 + v 8*4 + o 8*8 = 192,
    # MLP 3*8*16 = 384, two norms 16 -> 592; two layers 1184; embedding 256 + LM head 256 + final
    # norm 8.
    assert arch.head_dim == 4
    assert arch.params == 1184 + 256 + 256 + 8 == 1704
    assert arch.active_params == arch.params
    assert arch.flop_params == 1704 - 256  # the input embedding is a lookup, not a matmul
    assert arch.dtype_bytes == 4
    assert arch.kv_bytes_per_token == 2 * 2 * 1 * 4 * 4


def test_tied_embeddings_counted_once():
    tied = ModelArchitecture.from_config({**TINY, "tie_word_embeddings": True})
    assert tied.params == 1704 - 256
    assert tied.flop_params == tied.params  # the shared table still does the LM-head matmul


@pytest.mark.parametrize("name, published, tol", [
    ("Qwen/Qwen3-8B", 8.19e9, 0.03),
    ("meta-llama/Llama-3.1-8B-Instruct", 8.03e9, 0.03),
    ("HuggingFaceTB/SmolLM2-135M-Instruct", 135e6, 0.03),
    ("Qwen/Qwen3-30B-A3B", 30.5e9, 0.03),
    ("Qwen/Qwen2.5-7B-Instruct", 7.61e9, 0.03),
    ("meta-llama/Llama-3.1-70B-Instruct", 70.6e9, 0.03),
    # The models of the shipped MATH-500 / GPQA-Diamond pools, against their model cards:
    ("LGAI-EXAONE/EXAONE-Deep-32B", 30.95e9 + 2 * 102400 * 5120, 0.002),  # 30.95B + embeddings
    ("microsoft/Phi-4-reasoning", 14.7e9, 0.01),
    ("nvidia/NVIDIA-Nemotron-Nano-9B-v2", 8.89e9, 0.01),
    ("openai/gpt-oss-20b", 20.9e9, 0.01),
    ("Qwen/Qwen3-30B-A3B-Thinking-2507", 30.5e9, 0.01),
    ("MetaStoneTec/MetaStone-S1-32B", 32.5e9, 0.02),  # its base QwQ-32B's card says 32.5B
])
def test_parameter_counts_match_published_sizes(name, published, tol):
    assert load_architecture(name).params == pytest.approx(published, rel=tol)


def test_moe_active_parameters():
    arch = load_architecture("Qwen/Qwen3-30B-A3B")
    assert arch.is_moe and arch.num_experts == 128 and arch.experts_per_token == 8
    assert arch.active_params == pytest.approx(3.3e9, rel=0.03)
    # Reading weights for one token touches 8 of 128 experts; a big batch touches nearly all.
    one = arch.weight_bytes_per_step(1)
    many = arch.weight_bytes_per_step(4096)
    assert one == pytest.approx(arch.flop_params * arch.dtype_bytes)
    assert many == pytest.approx((arch.params - arch.embedding_params) * arch.dtype_bytes, rel=1e-6)


@pytest.mark.parametrize("alias", ["Qwen/Qwen3-8B", "qwen3-8b", "QWEN/QWEN3-8B", "Qwen3-8B"])
def test_aliases_resolve_case_insensitively(alias):
    assert load_architecture(alias).name == "Qwen/Qwen3-8B"


def test_instruct_suffix_optional():
    assert load_architecture("smollm2-135m").name == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert load_architecture("HuggingFaceTB/SmolLM2-135M-Instruct").layers == 30
    assert load_architecture("llama-3.1-8b").name == "meta-llama/Llama-3.1-8B-Instruct"


def test_every_shipped_config_loads():
    ids = shipped_model_ids()
    assert len(ids) == 28
    for hf_id in ids:
        arch = load_architecture(hf_id)
        assert arch.params >= arch.active_params > 0
        assert arch.heads % arch.kv_heads == 0


def test_directory_with_config(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    assert load_architecture(tmp_path).params == 1704


def test_directory_without_config_names_config_json(tmp_path):
    with pytest.raises(ValueError, match="config.json"):
        load_architecture(tmp_path)


def test_unknown_model_offline_names_config_json(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError, match=r"--model path/to/config.json"):
        load_architecture("someone/not-a-real-model-xyz")


def test_config_missing_keys_is_a_clear_error(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(ValueError, match="hidden_size"):
        load_architecture(path)


def test_dtype_override():
    assert load_architecture("qwen3-8b").dtype_bytes == 2
    assert load_architecture("qwen3-8b", dtype_bytes=4).dtype_bytes == 4


def test_the_second_embedded_model_is_priced_on_the_shape_it_runs_with():
    # The alias of `tts models prepare qwen2.5-coder-1.5b`; its GGUF keeps the output projection
    # apart from the embedding, so decode steps read both (1.78G weights, not 1.54G).
    arch = load_architecture("qwen2.5-coder-1.5b")
    assert arch.name == "Qwen/Qwen2.5-Coder-1.5B-Instruct" and not arch.tie_word_embeddings
    assert (arch.layers, arch.kv_heads, arch.head_dim) == (28, 2, 128)
    assert arch.params > load_architecture("qwen2.5-1.5b").params


POOLS = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "pools"


@pytest.mark.parametrize("pool", ["math500_reasoning_models.jsonl.gz",
                                  "gpqa_diamond_reasoning_models.jsonl.gz"])
def test_every_model_of_the_shipped_pools_has_an_architecture(pool):
    # `tts sweep`/`tts plot` price a pool model by its name; none may be left "unknown".
    path = POOLS / pool
    if not path.is_file():
        pytest.skip(f"{path} is not on this machine")
    models = {json.loads(line)["model"] for line in gzip.open(path, "rt")}
    assert len(models) >= 6
    for model in sorted(models):
        arch = load_architecture(model)
        assert arch.name.rpartition("/")[2].lower() == model.lower()


def test_gpt_oss_active_parameters_and_sliding_window_layers():
    arch = load_architecture("gpt-oss-20b")
    assert arch.is_moe and (arch.num_experts, arch.experts_per_token) == (32, 4)
    assert arch.flop_params == pytest.approx(3.6e9, rel=0.01)  # OpenAI: 3.6B active per token
    assert (arch.kv_layers, arch.window_layers, arch.sliding_window) == (24, 12, 128)
    # The two attention groups split the KV bytes of a token between them.
    groups = arch.attention_groups()
    assert [(n, w) for n, _, w in groups] == [(12, None), (12, 128)]
    assert sum(kvb for _, kvb, _ in groups) == arch.kv_bytes_per_token == 2 * 24 * 8 * 64 * 2


def test_nemotron_h_counts_attention_layers_only_and_keeps_a_mamba_state():
    arch = load_architecture("NVIDIA-Nemotron-Nano-9B-v2")
    assert arch.layers == 56 and arch.kv_layers == 4
    assert arch.kv_bytes_per_token == 2 * 4 * 8 * 128 * 2
    assert arch.attention_flops_per_context_token == 4 * 4 * 40 * 128
    # 27 Mamba-2 layers, each: SSM state 128 heads x 80 x 128 plus the convolution's last 3
    # inputs of x, B and C (10240 + 2 * 8 * 128), at 2 bytes.
    assert arch.state_bytes_per_sequence == 27 * (128 * 80 * 128 + 3 * (10240 + 2048)) * 2


HYBRID = {"model_type": "nemotron_h", "hidden_size": 8, "num_hidden_layers": 3,
          "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4,
          "intermediate_size": 16, "vocab_size": 32, "torch_dtype": "float32",
          "hybrid_override_pattern": "M-*", "mamba_num_heads": 2, "mamba_head_dim": 4,
          "n_groups": 1, "ssm_state_size": 2, "conv_kernel": 2}


def test_tiny_hybrid_parameter_count_by_hand():
    arch = ModelArchitecture.from_config(HYBRID)
    # d_inner 8, conv over x, B, C: 8 + 2 * 2 = 12. Mamba: in_proj 8 * (16 + 4 + 2) = 176, conv
    # 12 * 2 + bias 12 = 36, dt bias / A / D 6, gated norm 8, out_proj 64 -> 290. MLP: 2 * 8 * 16
    # = 256. Attention: q 8*8 + k 8*4 + v 8*4 + o 8*8 = 192. One norm per layer: 3 * 8.
    # Embedding + LM head 2 * 256, final norm 8.
    assert arch.params == 290 + 256 + 192 + 24 + 512 + 8
    assert arch.kv_layers == 1
    assert arch.state_bytes_per_sequence == (2 * 4 * 2 + 12 * 1) * 4


@pytest.mark.parametrize(("change", "message"), [
    ({"hybrid_override_pattern": "M-"}, "has 2 layers"),
    ({"hybrid_override_pattern": "ME*"}, "not priced"),
    ({"hybrid_override_pattern": "M-M"}, "no attention layer"),
])
def test_bad_hybrid_patterns_are_clear_errors(change, message):
    with pytest.raises(ValueError, match=message):
        ModelArchitecture.from_config({**HYBRID, **change})


def test_exaone_layer_key():
    arch = load_architecture("exaone-deep-32b")
    assert (arch.layers, arch.heads, arch.kv_heads, arch.head_dim) == (64, 40, 8, 128)


def test_dtype_override_scales_the_mamba_state_too():
    # --dtype-bytes applies to the Mamba state as it does to weights and KV.
    bf16 = load_architecture("NVIDIA-Nemotron-Nano-9B-v2")
    fp32 = load_architecture("NVIDIA-Nemotron-Nano-9B-v2", dtype_bytes=4)
    assert fp32.state_bytes_per_sequence == 2 * bf16.state_bytes_per_sequence > 0
