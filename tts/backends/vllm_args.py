"""The vLLM engine arguments of big models: parallelism, quantization, LoRA, speculative decoding.

:class:`~tts.config.VLLMBackendConfig` names the common ones (``tensor_parallel_size``,
``pipeline_parallel_size``, ``data_parallel_size``, ``quantization``, ``lora``,
``speculative_config``, ``max_num_seqs``) and passes any other ``EngineArgs`` field through
``engine_args`` (checked by name in the config). This module turns them into ``vllm.LLM``
arguments and refuses, in one line and before an engine starts, what this machine or these
weights cannot run: more GPUs than torch sees, a quantization method the checkpoint does not hold,
a LoRA adapter that is not there.

LoRA: each role (``policy``, ``verifier``, ``judge``) may name an adapter; the generator gives each
request the ``LoRARequest`` of its :attr:`~tts.backends.base.GenerationRequest.role`, so one engine
serves the base model and every adapter in one batch (vLLM's multi-LoRA batching).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tts.backends.base import BackendError
from tts.config import VLLMBackendConfig

PREQUANTIZED = {"awq": "awq", "awq_marlin": "awq", "gptq": "gptq", "gptq_marlin": "gptq", "marlin": "gptq",
                "compressed-tensors": "compressed-tensors", "modelopt": "modelopt", "gguf": "gguf"}
"""vLLM quantization methods that read weights quantized beforehand, and the ``quant_method`` a
checkpoint's config.json names for them (``awq_marlin`` is vLLM's faster kernel for AWQ weights)."""

ONLINE = frozenset({"fp8", "bitsandbytes", "experts_int8"})
"""Methods vLLM can apply to full-precision weights as it loads them."""


def visible_gpus() -> int:
    """CUDA GPUs torch sees here (0 without CUDA)."""
    import torch

    return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0


def _settings_given(config: VLLMBackendConfig) -> dict[str, Any]:
    """The first-class big-model settings that differ from their defaults (vLLM's own)."""
    out: dict[str, Any] = {}
    for name in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"):
        if getattr(config, name) != 1:
            out[name] = getattr(config, name)
    for name in ("quantization", "speculative_config", "max_num_seqs"):
        if getattr(config, name) is not None:
            out[name] = getattr(config, name)
    return out


def engine_kwargs(config: VLLMBackendConfig) -> dict[str, Any]:
    """The ``vllm.LLM`` arguments of the big-model settings: those given, the LoRA switch and rank,
    and ``engine_args`` as given (its keys were checked by the config)."""
    out = _settings_given(config)
    if config.lora:
        out["enable_lora"] = True
        out["max_loras"] = len(set(config.lora.values()))
        ranks = [r for r in (_adapter_rank(p) for p in config.lora.values()) if r is not None]
        if ranks:
            out["max_lora_rank"] = max(ranks)
    out.update(config.engine_args)  # a user's max_loras or max_lora_rank wins
    return out


def _adapter_rank(path: str) -> int | None:
    """The rank ``r`` of a PEFT adapter directory (its adapter_config.json); None when unreadable."""
    try:
        return int(json.loads((Path(path) / "adapter_config.json").read_text())["r"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def check_engine_settings(config: VLLMBackendConfig, model_path: str, gpus: int) -> None:
    """Refuse what this machine or these weights cannot run, before the engine starts.

    Args:
        config: The backend config.
        model_path: The prepared model (a local directory, or a hub id whose config is not read).
        gpus: CUDA GPUs visible here (:func:`visible_gpus`).

    Raises:
        BackendError: One line naming the setting to change.
    """
    parallel = config.tensor_parallel_size * config.pipeline_parallel_size * config.data_parallel_size
    if parallel > 1 and gpus == 0:
        raise BackendError(
            f"tensor_parallel_size {config.tensor_parallel_size} x pipeline_parallel_size "
            f"{config.pipeline_parallel_size} x data_parallel_size {config.data_parallel_size} needs {parallel} GPUs, "
            "and torch sees no CUDA GPU here: the CPU engine runs the model in one worker process; set them to 1 or "
            "run on a GPU machine")
    if parallel > gpus > 0:
        raise BackendError(
            f"tensor_parallel_size {config.tensor_parallel_size} x pipeline_parallel_size "
            f"{config.pipeline_parallel_size} x data_parallel_size {config.data_parallel_size} needs {parallel} GPUs, "
            f"but torch sees {gpus} (CUDA_VISIBLE_DEVICES limits them); lower the product to at most {gpus}")
    check_quantization(config.quantization, model_path)
    for role, path in config.lora.items():
        if not (Path(path) / "adapter_config.json").is_file():
            raise BackendError(f"lora.{role}: {path} is not a LoRA adapter directory (no adapter_config.json); give "
                               "the directory PEFT saved the adapter in")


def checkpoint_quantization(model_path: str) -> str | None:
    """The ``quant_method`` a local checkpoint's config.json names (None: full precision, or unreadable)."""
    try:
        cfg = json.loads((Path(model_path) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    quant = cfg.get("quantization_config") if isinstance(cfg, dict) else None
    method = quant.get("quant_method") if isinstance(quant, dict) else None
    return str(method).lower() if method else None


def check_quantization(requested: str | None, model_path: str) -> None:
    """Refuse a quantization method the weights do not hold, where the checkpoint says what it holds.

    A method that reads pre-quantized weights (AWQ, GPTQ, ...) needs a checkpoint of that format;
    a checkpoint already quantized by another method cannot be re-quantized. Hub ids whose
    config.json is not local are not checked (vLLM says so when it loads them).

    Raises:
        BackendError: The mismatch, in one line.
    """
    if requested is None or not Path(model_path).is_dir():
        return
    held = checkpoint_quantization(model_path)
    method = requested.lower()
    needed = PREQUANTIZED.get(method)
    if held is None:
        if needed is not None:
            raise BackendError(f"quantization {requested}: {model_path} holds full-precision weights (its config.json "
                               f"has no quantization_config), and {requested} reads {needed}-quantized ones; use a "
                               f"{needed} checkpoint, or an online method ({', '.join(sorted(ONLINE))}), or drop it")
        return
    if needed != held and method != held:
        raise BackendError(f"quantization {requested}: {model_path} holds {held}-quantized weights; set quantization "
                           f"to {held} (or leave it out: vLLM reads the checkpoint's own)")


def lora_requests(config: VLLMBackendConfig) -> dict[str, Any]:
    """vLLM's ``LoRARequest`` per role of the config (one id per distinct adapter); {} without LoRA."""
    if not config.lora:
        return {}
    from vllm.lora.request import LoRARequest

    ids = {path: i for i, path in enumerate(dict.fromkeys(config.lora.values()), start=1)}
    return {role: LoRARequest(lora_name=f"{role}-{ids[path]}", lora_int_id=ids[path], lora_path=path)
            for role, path in config.lora.items()}


def describe_settings(config: VLLMBackendConfig) -> dict[str, Any]:
    """The big-model settings for the run manifest (those set; {} for a plain engine)."""
    out = _settings_given(config)
    if config.lora:
        out["lora"] = dict(config.lora)
    if config.engine_args:
        out["engine_args"] = dict(config.engine_args)
    return out
