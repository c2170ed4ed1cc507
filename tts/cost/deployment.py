"""How a model is deployed, as the cost model prices it: GPUs per replica, weight format, speculation.

Three settings of a vLLM engine change what a token costs (:class:`~tts.cost.cost_model.CostModel`
takes them; ``tts cost --tp/--quantization/--spec-*``):

* **Tensor parallelism** over ``p`` GPUs (Megatron-LM, Shoeybi et al. 2019): each GPU holds 1/p of
  every weight matrix and of the query heads, so a step's FLOPs and weight reads per GPU are the
  total over p; KV heads are split too, down to one head per GPU (a model with fewer KV heads than
  GPUs repeats them: per-GPU KV traffic is the total over ``min(p, kv_heads)``). Each layer adds two
  all-reduces of the step's activations (after attention and after the MLP, Megatron-LM Sec. 3);
  a ring all-reduce of M bytes sends and receives ``2 (p - 1) / p * M`` bytes per GPU (Patarasuk and
  Yuan 2009, the algorithm NCCL's "bus bandwidth" is defined by), here over the GPU's
  interconnect bandwidth each way (:attr:`~tts.cost.hardware.Hardware.interconnect`), not
  overlapped with compute. The all-reduce's fixed latency (microseconds per call) is not counted,
  so predicted speed-ups are upper bounds. The replica's p GPUs are all rented: GPU-seconds and
  dollars are wall seconds times p.
* **Quantized weights**: bytes per weight in the memory traffic (:data:`WEIGHT_BYTES`): fp8 and
  int8 1, 4-bit AWQ/GPTQ 0.5 plus one fp16 scale and one 4-bit zero point per group of 128 weights
  (the group size of AWQ, Lin et al. 2024, and of GPTQ's common checkpoints, Frantar et al. 2023):
  ``0.5 + 2.5 / 128``. Applied to the linear layers' weights (``flop_params``); the KV cache keeps
  the model's dtype, and FLOPs run at the bf16 peak (decode is memory-bound, so the fp8 peak
  would change little).
* **Speculative decoding** (Leviathan et al. 2023): a draft proposes ``k`` tokens, the target
  checks them in one forward pass of ``k + 1`` positions, and each is accepted with probability
  ``a``; one target forward then yields ``(1 - a^(k+1)) / (1 - a)`` tokens on average (their
  Eq. 1). A target forward reads the weights and the KV cache once and computes ``k + 1``
  positions; the draft model (when there is one: n-gram lookup has none) runs ``k`` one-token
  forwards per target forward.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tts.cost.architecture import ModelArchitecture

AWQ_GROUP = 128
"""Weights per quantization group of 4-bit AWQ and GPTQ checkpoints (one fp16 scale + 4-bit zero each)."""

WEIGHT_BYTES: dict[str, float] = {
    "fp8": 1.0, "int8": 1.0, "w8a8": 1.0, "experts_int8": 1.0,
    "awq": 0.5 + 2.5 / AWQ_GROUP, "awq_marlin": 0.5 + 2.5 / AWQ_GROUP,
    "gptq": 0.5 + 2.5 / AWQ_GROUP, "gptq_marlin": 0.5 + 2.5 / AWQ_GROUP, "int4": 0.5 + 2.5 / AWQ_GROUP,
}
"""Bytes per linear-layer weight read, by vLLM quantization method (module docstring)."""


def deployment_of(backend_config: Any) -> dict[str, Any]:
    """The deployment settings a backend's config fixes, as :func:`~tts.cost.ledger.cost_model_for`
    takes them: a vLLM engine's ``tensor_parallel_size`` and ``quantization``; any other backend
    (an OpenAI-compatible server, a hosted model, the scripted one) says nothing of how it is
    deployed, so none. Pipeline and data parallelism are not priced (the cost model has no stage
    bubbles), nor is speculative decoding (its price needs an acceptance rate the engine config
    does not state: ``tts cost --spec-acceptance`` prices a guess).
    """
    tp = getattr(backend_config, "tensor_parallel_size", None)
    quantization = getattr(backend_config, "quantization", None)
    out: dict[str, Any] = {}
    if isinstance(tp, int) and tp > 1:
        out["tensor_parallel"] = tp
    if isinstance(quantization, str) and quantization:
        out["quantization"] = quantization
    return out


def weight_bytes_per_param(quantization: str | None, dtype_bytes: int) -> float:
    """Bytes one linear-layer weight costs to read: the method's (:data:`WEIGHT_BYTES`), else the dtype's.

    Raises:
        ValueError: A method this table does not price (the message lists those it does).
    """
    if quantization is None:
        return float(dtype_bytes)
    key = quantization.strip().lower()
    if key not in WEIGHT_BYTES:
        raise ValueError(f"quantization {quantization!r} is not priced; use one of {', '.join(WEIGHT_BYTES)} "
                         "(or --dtype-bytes for another weight width)")
    return WEIGHT_BYTES[key]


@dataclass(frozen=True, slots=True)
class Speculation:
    """Speculative decoding as the cost model prices it (module docstring; Leviathan et al. 2023).

    Args:
        acceptance: Probability ``a`` that the target accepts one draft token (0 <= a < 1).
        tokens: Draft tokens ``k`` proposed per target forward (vLLM's ``num_speculative_tokens``).
        draft: The draft model's architecture; None for a draft that costs nothing to run (n-gram
            prompt lookup).
    """

    acceptance: float
    tokens: int
    draft: ModelArchitecture | None = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.acceptance < 1.0:
            raise ValueError(f"the acceptance rate is a probability below 1, got {self.acceptance}")
        if self.tokens < 1:
            raise ValueError(f"speculative decoding proposes at least 1 token per step, got {self.tokens}")

    @property
    def tokens_per_forward(self) -> float:
        """Expected tokens one target forward yields: ``(1 - a^(k+1)) / (1 - a)`` (Leviathan et al., Eq. 1)."""
        a, k = self.acceptance, self.tokens
        return (1.0 - a ** (k + 1)) / (1.0 - a)

    @property
    def forwards_per_token(self) -> float:
        """Target forwards per generated token (the inverse of :attr:`tokens_per_forward`)."""
        return 1.0 / self.tokens_per_forward

    @property
    def positions_per_forward(self) -> int:
        """Positions one target forward computes: the k proposals and one more."""
        return self.tokens + 1


def allreduce_bytes_per_gpu(tensor_parallel: int, tokens: float, hidden: int, dtype_bytes: int,
                            layers: int) -> float:
    """Bytes each GPU sends (and receives) in one forward pass of ``tokens`` positions under tensor
    parallelism: two ring all-reduces of ``tokens * hidden`` activations per layer (module docstring)."""
    if tensor_parallel <= 1:
        return 0.0
    return 2.0 * layers * 2.0 * (tensor_parallel - 1) / tensor_parallel * tokens * hidden * dtype_bytes
