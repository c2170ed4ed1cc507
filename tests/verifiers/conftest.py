"""Tiny random-weight reward models, built once per session from the small model's tokenizer.

Nothing is downloaded: the tokenizer is the embedded small model's (``tts.models.prepare_model``)
with one added step-tag token; the weights are random. head_dim is 64 because the CPU attention
kernels refuse 16 ("Unsupported CPU attention configuration").
"""

from __future__ import annotations

from pathlib import Path

import pytest

TINY = {"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "max_position_embeddings": 2048}


def _small_tokenizer(extra_token: str, special: bool):
    from transformers import AutoTokenizer

    from tts.models import prepare_model

    tokenizer = AutoTokenizer.from_pretrained(prepare_model("smollm2-135m").path)
    if special:
        tokenizer.add_special_tokens({"additional_special_tokens": [extra_token]})
    else:
        tokenizer.add_tokens([extra_token])
    return tokenizer


@pytest.fixture(scope="session")
def small_tokenizer_dir() -> Path:
    """The embedded small model's directory (its tokenizer loads in about a second)."""
    from tts.models import prepare_model

    return Path(prepare_model("smollm2-135m").path)


@pytest.fixture(scope="session")
def tiny_prm(tmp_path_factory) -> Path:
    """A 2-layer ``Qwen2ForProcessRewardModel`` with random weights, laid out like the
    Qwen2.5-Math-PRM checkpoints (``model.*`` plus the head ``score.0.*`` and ``score.2.*``), with
    ``<extra_0>`` added to the small model's tokenizer as the step tag."""
    import torch
    from safetensors.torch import save_file
    from transformers import Qwen2Config, Qwen2Model

    tokenizer = _small_tokenizer("<extra_0>", special=True)
    config = Qwen2Config(vocab_size=len(tokenizer), architectures=["Qwen2ForProcessRewardModel"], num_labels=2,
                         torch_dtype="float32", bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, **TINY)
    torch.manual_seed(0)
    body = Qwen2Model(config).to(torch.float32)
    hidden = config.hidden_size
    weights = {f"model.{k}": v.contiguous() for k, v in body.state_dict().items()}
    # A head scaled so that step scores spread over (0, 1) instead of saturating at 0 or 1.
    weights["score.0.weight"] = torch.randn(hidden, hidden) / hidden**0.5
    weights["score.0.bias"] = torch.zeros(hidden)
    weights["score.2.weight"] = torch.randn(2, hidden) * 0.2
    weights["score.2.bias"] = torch.zeros(2)
    out = tmp_path_factory.mktemp("tiny-prm")
    save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    config.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def tiny_label_lm(tmp_path_factory) -> Path:
    """A 2-layer Llama causal LM with random weights for the ``lm_labels`` head: the small model's
    tokenizer plus ``ки`` (Math-Shepherd's step tag) as one token; "+" and "-" are already one each."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = _small_tokenizer("ки", special=False)
    config = LlamaConfig(vocab_size=len(tokenizer), tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, torch_dtype="float32", **TINY)
    torch.manual_seed(1)
    out = tmp_path_factory.mktemp("tiny-label-lm")
    LlamaForCausalLM(config).to(torch.float32).save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out
