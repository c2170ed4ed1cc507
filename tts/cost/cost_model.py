"""The Kinetics-style cost model: FLOPs, bytes moved, eFLOPs and roofline seconds of generation.

Kinetics (Sadhukhan et al., 2025, "Kinetics: Rethinking Test-Time Scaling Laws") prices a request
as equivalent FLOPs, ``eFLOPs = C_comp + I * C_mem``, where ``I`` is the device's ridge (peak
FLOP/s over memory bytes/s). Units here: ``C_comp`` in FLOPs, ``C_mem`` in **bytes** at the model's
dtype (2 per bf16 element), ``I`` in FLOPs per byte (``Hardware.ridge``). That is the convention of
the Kinetics code (KV bytes at bf16 times I = 562.5, B200's fp8 peak over its 8 TB/s), so the same
``I`` gives the same numbers; with the bf16 ridge of a real device, eFLOPs are FLOP-equivalents of
its roofline time.

What is counted (``P_c`` = :attr:`ModelArchitecture.flop_params`, ``A`` = 4 * attention layers *
heads * head_dim, ``K`` = KV bytes per token = 2 * attention layers * kv_heads * head_dim *
dtype_bytes; a hybrid model's Mamba layers are not attention layers):

1. Prefill of the ``P - c`` uncached prompt tokens: ``2 P_c`` FLOPs each plus attention ``A * j``
   for the token at position j; weights read once, the cached prefix's KV read once, KV written.
2. Decode: generated token t of a sample costs ``2 P_c + A * ctx`` FLOPs, ctx = P + t (the prompt,
   earlier tokens and itself), or ``min(B, ctx)`` with a sparse KV budget B. It writes ``K`` bytes.
3. KV reads: the N samples of a request decode in lockstep; each step reads the shared prompt KV
   ONCE for all samples (``K * P``) plus each active sample's own generated KV (``K * t``).
   With sparse attention each sample reads only its ``min(B, ctx)`` selected positions (no sharing,
   as in Kinetics). Tree search (:meth:`CostModel.cost_tree`) reads a shared branch once per step.
   Sliding-window layers (gpt-oss) attend to, and read, ``min(W, ctx)`` positions per sample; a
   hybrid Mamba model's attention layers alone hold KV, and each of its sequences reads and writes
   its recurrent state once per step (counted in ``kv_bytes``).
4. Weights: one read per decode step, shared by the sequences in that step. ``concurrency=None``:
   the request runs alone (weights read once per step while any of its samples is active);
   ``concurrency=C``: an engine keeping C sequences in flight, each token charged 1/C of a read.
   A mixture-of-experts step reads only the experts its batch was routed to.
5. Seconds: roofline per step, ``max(flops / peak, bytes / bandwidth)``, summed over the steps.

Sparse attention (:class:`SparseAttention`, Kinetics Sec. 5): top-k keeps ``B = k + local`` KV
positions per token at no selection cost (the paper's oracle top-k); block top-k keeps
``B = local + block_size * k`` and pays for choosing the blocks: every step each sample dots its
query with one summary key per block of its dense context (``2 * H * d`` FLOPs per block and
attention layer) and reads those keys (half a token's KV per block, the prompt's shared). Sparse
attention selects among the full-attention layers' positions; sliding-window layers keep their
window (or the budget, if smaller).

Totals use closed-form arithmetic series vectorised over the samples; per-step arrays (numpy, no
Python loop per token) are used only for the roofline seconds and for MoE weight reads.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Literal

import numpy as np

from tts.cost.architecture import ModelArchitecture
from tts.cost.deployment import Speculation, allreduce_bytes_per_gpu, weight_bytes_per_param
from tts.cost.hardware import Hardware
from tts.types import Usage

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Cost:
    """The price of some generation work. Costs add up with ``+``.

    Args:
        flops: Compute, FLOPs (``param_flops + attention_flops``).
        bytes: Memory traffic, bytes (``weight_bytes + kv_bytes``).
        eflops: Kinetics eFLOPs, ``flops + I * bytes`` (``param_eflops + attention_eflops``).
        seconds: Roofline time on the hardware (the request's share when concurrency is given).
        gpu_seconds: ``seconds`` times the GPUs that run the model (tensor parallelism rents them
            all); what GPU-hour prices multiply. Left out: ``seconds`` (one GPU).
        param_flops: Linear-layer FLOPs, 2 per flop-parameter per token.
        attention_flops: q.k and attention-weighted-value FLOPs (plus sparse block scoring).
        weight_bytes: Weight reads.
        kv_bytes: KV-cache reads and writes (plus a hybrid model's recurrent-state traffic).
        param_eflops: ``param_flops + I * weight_bytes``.
        attention_eflops: ``attention_flops + I * kv_bytes``.
        generated_tokens: Tokens generated (all samples).
    """

    flops: float = 0.0
    bytes: float = 0.0
    eflops: float = 0.0
    seconds: float = 0.0
    param_flops: float = 0.0
    attention_flops: float = 0.0
    weight_bytes: float = 0.0
    kv_bytes: float = 0.0
    param_eflops: float = 0.0
    attention_eflops: float = 0.0
    generated_tokens: int = 0
    gpu_seconds: float | None = None

    def __post_init__(self) -> None:
        if self.gpu_seconds is None:  # priced on one GPU
            object.__setattr__(self, "gpu_seconds", self.seconds)

    def scaled(self, factor: float) -> Cost:
        """Every quantity times ``factor`` (the generated tokens too, rounded)."""
        return Cost(**{f.name: getattr(self, f.name) * factor for f in fields(Cost) if f.name != "generated_tokens"},
                    generated_tokens=round(self.generated_tokens * factor))

    @property
    def dominant(self) -> Literal["compute", "memory"]:
        """Which eFLOPs term is larger: ``compute`` (FLOPs) or ``memory`` (I * bytes)."""
        return "compute" if self.flops >= self.eflops - self.flops else "memory"

    @property
    def attention_share(self) -> float:
        """Share of eFLOPs spent on attention and the KV cache (0 when nothing was spent)."""
        return self.attention_eflops / self.eflops if self.eflops else 0.0

    @property
    def eflops_per_token(self) -> float:
        """eFLOPs per generated token (0 when nothing was generated)."""
        return self.eflops / self.generated_tokens if self.generated_tokens else 0.0

    def __add__(self, other: Cost) -> Cost:
        if not isinstance(other, Cost):
            return NotImplemented
        return Cost(**{f.name: getattr(self, f.name) + getattr(other, f.name)
                       for f in fields(Cost)})

    @staticmethod
    def total(costs: Sequence[Cost]) -> Cost:
        """Sum of many costs (the empty sum is zero)."""
        out = Cost()
        for c in costs:
            out = out + c
        return out

SPARSE_FORMS = ("topk:K[,local=W]", "block:K,size=S[,local=W]")
"""How a sparse-attention setting is written (``tts cost --sparse``, ``tts sweep --sparse``)."""


@dataclass(frozen=True, slots=True)
class SparseAttention:
    """A sparse-attention engine's KV budget, in the two forms Kinetics prices (its Sec. 5).

    Args:
        kind: ``"topk"``: each query attends to its ``topk`` highest-scoring KV positions plus a
            local window, found at no cost (Kinetics' "oracle"/zero-overhead top-k). ``"block"``:
            block top-k (Quest-style): the KV cache is cut into blocks of ``block_size``; each step
            scores every block by one summary key and keeps the ``topk`` best blocks plus the local
            window. That scoring is the block-selection overhead.
        topk: KV positions kept (``topk``) or blocks kept (``block``).
        local: The most recent positions always kept (the local window).
        block_size: Positions per block (``block`` only).

    Example:
        >>> SparseAttention.parse("block:64,size=16,local=128").budget
        1152
    """

    kind: Literal["topk", "block"]
    topk: int
    local: int = 0
    block_size: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("topk", "block"):
            raise ValueError(f"sparse attention kind {self.kind!r}: write one of {', '.join(SPARSE_FORMS)}")
        if self.topk < 1:
            what = "KV positions" if self.kind == "topk" else "blocks"
            raise ValueError(f"sparse attention keeps at least 1 of its {what}; got {self.kind}:{self.topk}")
        if self.local < 0:
            raise ValueError(f"the local window is a number of positions >= 0, got local={self.local}")
        if self.kind == "block" and (self.block_size is None or self.block_size < 1):
            raise ValueError("block top-k needs size=S, the positions per block (>= 1), e.g. "
                             f"block:{self.topk},size=16")
        if self.kind == "topk" and self.block_size is not None:
            raise ValueError(f"size={self.block_size} is a block size; top-k keeps positions, not "
                             f"blocks: write block:K,size={self.block_size} for block top-k")

    @property
    def budget(self) -> int:
        """KV positions each query attends to: local + k (top-k) or local + size * k (block)."""
        if self.kind == "topk":
            return self.local + self.topk
        return self.local + int(self.block_size or 0) * self.topk

    @property
    def selection_block(self) -> int | None:
        """Block size whose summary keys are scored every step (None: selection is free)."""
        return self.block_size if self.kind == "block" else None

    @property
    def label(self) -> str:
        """The setting as it is written on the command line (``parse`` reads it back)."""
        size = f",size={self.block_size}" if self.kind == "block" else ""
        local = f",local={self.local}" if self.local else ""
        return f"{self.kind}:{self.topk}{size}{local}"

    @classmethod
    def parse(cls, spec: str) -> SparseAttention:
        """Read ``topk:K[,local=W]`` or ``block:K,size=S[,local=W]``.

        Raises:
            ValueError: a malformed setting; the message shows the two forms.
        """
        forms = " or ".join(SPARSE_FORMS)
        kind, sep, rest = spec.strip().partition(":")
        kind = kind.strip().lower()
        if kind in ("block_topk", "blocktopk"):
            kind = "block"
        if not sep or kind not in ("topk", "block") or not rest.strip():
            raise ValueError(f"sparse attention {spec!r}: write {forms} (e.g. topk:2048 or "
                             "block:64,size=16,local=128)")
        first, *pairs = [part.strip() for part in rest.split(",")]
        values: dict[str, int] = {}
        for name, text in [("k", first), *(p.partition("=")[::2] for p in pairs)]:
            name = name.strip()
            if name not in ("k", "size", "local") or name in values:
                raise ValueError(f"sparse attention {spec!r}: unknown or repeated setting "
                                 f"{name!r}; write {forms}")
            try:
                values[name] = int(text)
            except ValueError:
                raise ValueError(f"sparse attention {spec!r}: {name} must be a whole number, got "
                                 f"{text!r}") from None
        return cls(kind, values["k"], values.get("local", 0), values.get("size"))  # type: ignore[arg-type]


def _series(lo: np.ndarray, hi: np.ndarray, cap: int | None) -> np.ndarray:
    """Sum of ``min(cap, x)`` for integer x from lo+1 to hi (elementwise; no cap: sum of x)."""
    lo, hi = lo.astype(np.float64), hi.astype(np.float64)
    if cap is None:
        return (hi * (hi + 1) - lo * (lo + 1)) / 2
    k = np.clip(float(cap), lo, hi)
    return (k * (k + 1) - lo * (lo + 1)) / 2 + (hi - k) * cap


class CostModel:
    """Prices generation for one model on one device (see the module docstring for the formulas).

    Args:
        arch: The model's architecture.
        hardware: The device; its ``ridge`` is Kinetics' I.
        sparse_kv_budget: Attend to at most this many KV positions per token (top-k / block top-k).
        sparse_block: Block size of block top-k attention; adds the block-scoring cost (one summary
            key per block read and dotted with the query each step, as in Kinetics).
        sparse: The same in Kinetics' terms (:class:`SparseAttention`: top-k or block top-k with a
            local window); sets the two above, so it cannot be combined with them.
        tensor_parallel: GPUs the model is split over (:mod:`tts.cost.deployment`): per-GPU FLOPs
            and weight reads are the total over it, plus two all-reduces per layer over the
            device's interconnect; ``gpu_seconds`` is the wall time times it.
        quantization: vLLM's quantization method of the weights (``fp8``, ``awq``, ``gptq``, ...):
            their bytes per weight in the weight reads (:data:`tts.cost.deployment.WEIGHT_BYTES`).
        speculation: Speculative decoding (:class:`tts.cost.deployment.Speculation`): target
            forwards per token, positions per forward and the draft's cost.

    Example:
        >>> from tts.cost import architecture, hardware
        >>> arch = architecture.load_architecture("qwen3-8b")
        >>> cm = CostModel(arch, hardware.get_hardware("h100"))
        >>> cm.cost_request(200, [8000] * 32).dominant
        'memory'
    """

    def __init__(self, arch: ModelArchitecture, hardware: Hardware,
                 sparse_kv_budget: int | None = None, sparse_block: int | None = None,
                 sparse: SparseAttention | None = None, tensor_parallel: int = 1,
                 quantization: str | None = None, speculation: Speculation | None = None) -> None:
        if tensor_parallel < 1:
            raise ValueError(f"tensor_parallel is a number of GPUs >= 1, got {tensor_parallel}")
        if tensor_parallel > 1 and hardware.interconnect is None:
            raise ValueError(f"{hardware.name} has no interconnect bandwidth in the hardware table, so tensor "
                             "parallelism over it cannot be priced; use --tp 1 or a GPU of the table")
        self.tensor_parallel = tensor_parallel
        self.quantization = quantization
        # Weight reads scale by the quantized width over the dtype's (checked here: an unknown method).
        self._weight_scale = weight_bytes_per_param(quantization, arch.dtype_bytes) / arch.dtype_bytes
        self.speculation = speculation
        if sparse is not None:
            if sparse_kv_budget is not None or sparse_block is not None:
                raise ValueError("give sparse attention once: either sparse= or "
                                 "sparse_kv_budget/sparse_block")
            sparse_kv_budget, sparse_block = sparse.budget, sparse.selection_block
        if sparse_kv_budget is not None and sparse_kv_budget < 1:
            raise ValueError(f"sparse_kv_budget must be >= 1 KV positions, got {sparse_kv_budget}")
        if sparse_block is not None and sparse_block < 1:
            raise ValueError(f"sparse_block must be >= 1 tokens, got {sparse_block}")
        if sparse_block is not None and sparse_kv_budget is None:
            raise ValueError("sparse_block needs sparse_kv_budget (KV positions kept per token)")
        self.arch = arch
        self.hardware = hardware
        self.sparse_kv_budget = sparse_kv_budget
        self.sparse_block = sparse_block
        self.sparse = sparse

    @property
    def ridge(self) -> float:
        """Kinetics' I: FLOPs per byte at the device's roofline ridge."""
        return self.hardware.ridge

    # ----------------------------------------------------------------------------------------
    def cost_request(self, prompt_tokens: int, completion_lengths: Sequence[int],
                     cached_prompt_tokens: int = 0, concurrency: int | None = None) -> Cost:
        """Cost of N samples drawn for one prompt (self-consistency, best-of-N).

        Args:
            prompt_tokens: Prompt length P.
            completion_lengths: Generated length of each sample (N = its length).
            cached_prompt_tokens: Prompt tokens served from the prefix cache (no prefill).
            concurrency: Sequences in flight per decode step sharing one weight read; None means
                this request's samples alone.

        Returns:
            The request's :class:`Cost`.
        """
        lengths = self._lengths(completion_lengths)
        zeros = np.zeros_like(lengths)
        return self._cost(prompt_tokens, cached_prompt_tokens, zeros, lengths, zeros, concurrency)

    def cost_usage(self, usage: Usage, concurrency: int | None = None) -> Cost:
        """Cost of everything recorded in ``usage.shapes`` (one request per shape).

        Without an explicit ``concurrency``, each shape's recorded ``batch_sequences`` (the
        sequences of its engine call) shares the weight reads; shapes that did not record it
        are priced as running alone.
        """
        return Cost.total([
            self.cost_request(s.prompt_tokens, s.completion_tokens, s.cached_prompt_tokens,
                              concurrency if concurrency is not None else (s.batch_sequences or None))
            for s in usage.shapes
        ])

    def cost_tree(self, prompt_tokens: int, segments: Sequence[tuple[int | None, int]],
                  cached_prompt_tokens: int = 0, concurrency: int | None = None) -> Cost:
        """Cost of tree-shaped generation (beam search, DVTS, MCTS rollouts) sharing prefix KV.

        Each segment ``(parent, tokens)`` is generated by one sequence continuing its parent
        segment (``None``: continuing the prompt); parents come before children. All children of a
        segment start together when it ends and run in lockstep, so a segment's KV (like the
        prompt's) is read once per step while any descendant is generating, not once per branch.
        N independent samples are N root segments.

        Example:
            Two beams of 100 tokens, each expanded into 3 continuations of 50:
            ``cost_tree(200, [(None, 100), (None, 100), (0, 50), (0, 50), (0, 50),
            (1, 50), (1, 50), (1, 50)])``.
        """
        n = len(segments)
        parents = [p for p, _ in segments]
        lengths = self._lengths([t for _, t in segments])
        offset = np.zeros(n, dtype=np.int64)
        for i, p in enumerate(parents):
            if p is None:
                continue
            if not 0 <= p < i:
                raise ValueError(f"segment {i}: parent {p} must be the index of an earlier segment")
            offset[i] = offset[p] + lengths[p]
        hold = np.zeros(n, dtype=np.int64)  # steps after a segment ends that its KV is still read
        for i in range(n - 1, -1, -1):
            p = parents[i]
            if p is not None:
                hold[p] = max(hold[p], lengths[i] + hold[i])
        return self._cost(prompt_tokens, cached_prompt_tokens, offset, lengths, hold, concurrency)

    def attention_to_parameter_ratio(self, prompt_tokens: int, gen_len: int, n: int = 1,
                                     amortise_weights: bool = True) -> float:
        """Kinetics' headline ratio: attention + KV eFLOPs over parameter eFLOPs.

        Args:
            prompt_tokens: Prompt length.
            gen_len: Generated tokens per sample.
            n: Samples sharing the prompt.
            amortise_weights: Count weight reads as free (Kinetics' assumption: at large batch
                the linear layers are compute-bound); False charges this request's own reads.
        """
        c = self.cost_request(prompt_tokens, [gen_len] * n)
        param = c.param_flops if amortise_weights else c.param_eflops
        return c.attention_eflops / param

    # ----------------------------------------------------------------------------------------
    @staticmethod
    def _lengths(values: Sequence[int]) -> np.ndarray:
        arr = np.asarray(list(values), dtype=np.int64).reshape(-1)
        if arr.size and arr.min() < 0:
            raise ValueError(f"completion lengths must be >= 0, got {int(arr.min())}")
        return arr

    def _cost(self, prompt: int, cached: int, offset: np.ndarray, length: np.ndarray,
              hold: np.ndarray, concurrency: int | None) -> Cost:
        """Price a prefill plus segments (offset, length, hold) decoded in lockstep."""
        if prompt < 0 or not 0 <= cached <= prompt:
            raise ValueError(f"need prompt_tokens >= 0 and 0 <= cached_prompt_tokens <= "
                             f"prompt_tokens, got {prompt} and {cached}")
        if concurrency is not None and concurrency < 1:
            raise ValueError(f"concurrency must be >= 1 sequences, got {concurrency}")
        a, hw, block = self.arch, self.hardware, self.sparse_block
        pc, kvb = float(a.flop_params), float(a.kv_bytes_per_token)
        state = float(a.state_bytes_per_sequence)
        keep = length > 0
        offset, length, hold = offset[keep], length[keep], hold[keep]
        start = prompt + offset
        tokens = int(length.sum())
        steps = int((offset + length).max()) if tokens else 0

        # 1. Prefill of the uncached prompt tokens (one compute-bound pass; dense, windows apply).
        new = prompt - cached
        pre_param = 2.0 * pc * new
        pre_attn = sum(flops * float(_series(np.array([cached]), np.array([prompt]), window)[0])
                       for flops, _, window, _ in self._groups(prefill=True))
        pre_weight = float(a.weight_bytes_per_step(new)) * self._weight_scale if new else 0.0
        # Read the cached prefix, write the rest (and a hybrid's recurrent state once).
        pre_kv = kvb * (cached + new) + state if new else 0.0
        tp, kv_shards = self.tensor_parallel, min(self.tensor_parallel, a.kv_heads)
        pre_seconds = (max((pre_param + pre_attn) / tp / hw.peak_flops,
                           (pre_weight / tp + pre_kv / kv_shards) / hw.bandwidth)
                       + self._allreduce_seconds(new)) if new else 0.0

        # 2. Decode totals in closed form (arithmetic series over each segment's contexts).
        dense_ctx = _series(start, start + length, None)  # per-sequence sum of ctx
        # KV positions read: prompt once per step, own tokens while generating, held tokens after.
        shared_read = prompt * steps + float(np.sum(length * (length + 1) / 2 + length * hold))
        dec_param = 2.0 * pc * tokens
        dec_attn, dec_kv = 0.0, 0.0
        writes = kvb * tokens + 2.0 * state * tokens  # KV writes, state read+write: per position
        for flops, group_kvb, cap, _ in self._groups():
            if cap is None:  # dense: the shared prefix is read once per step
                dec_attn += flops * float(dense_ctx.sum())
                dec_kv += group_kvb * shared_read
            else:  # sparse or sliding window: each sequence reads its own min(cap, ctx)
                capped = float(_series(start, start + length, cap).sum())
                dec_attn += flops * capped
                dec_kv += group_kvb * capped
        if block is not None:  # block top-k: score one summary key per block, every step
            dec_attn += 2.0 * a.full_layers * a.heads * a.head_dim * float(dense_ctx.sum()) / block
            dec_kv += self._full_kvb() / 2 * shared_read / block

        # 3. Per-step profile for weights (MoE) and roofline seconds, via difference arrays.
        dec_weight, dec_seconds = self._decode_steps(prompt, offset, length, hold, steps,
                                                     concurrency)
        spec = self.speculation
        if spec is not None:
            # Per generated token: 1/E target forwards, each computing and writing k + 1 positions
            # and reading weights and KV once (Leviathan et al. 2023; tts.cost.deployment).
            per_position = spec.positions_per_forward * spec.forwards_per_token
            dec_param, dec_attn, writes = dec_param * per_position, dec_attn * per_position, writes * per_position
            dec_kv *= spec.forwards_per_token
        dec_kv += writes

        pre = self._priced(pre_param, pre_attn, pre_weight, pre_kv, pre_seconds, 0)
        dec = self._priced(dec_param, dec_attn, dec_weight, dec_kv, dec_seconds, tokens)
        out = pre + dec
        if spec is not None and spec.draft is not None:
            # The draft prefills the prompt and runs k one-token forwards per target forward.
            draft = CostModel(spec.draft, hw, tensor_parallel=self.tensor_parallel)
            draft_pre, draft_dec = draft._parts(prompt, cached, offset, length, hold, concurrency)
            out = out + draft_pre + draft_dec.scaled(spec.tokens * spec.forwards_per_token)
            out = Cost(**{**{f.name: getattr(out, f.name) for f in fields(Cost)}, "generated_tokens": tokens})
        return out

    def _priced(self, param_flops: float, attn_flops: float, weight_bytes: float, kv_bytes: float,
                seconds: float, tokens: int) -> Cost:
        """One phase's Cost from its FLOPs, bytes and wall seconds (GPU-seconds: times the GPUs)."""
        i = self.ridge
        return Cost(
            flops=param_flops + attn_flops, bytes=weight_bytes + kv_bytes,
            eflops=param_flops + attn_flops + i * (weight_bytes + kv_bytes),
            seconds=seconds, gpu_seconds=seconds * self.tensor_parallel, param_flops=param_flops,
            attention_flops=attn_flops, weight_bytes=weight_bytes, kv_bytes=kv_bytes,
            param_eflops=param_flops + i * weight_bytes, attention_eflops=attn_flops + i * kv_bytes,
            generated_tokens=tokens,
        )

    def _parts(self, prompt: int, cached: int, offset: np.ndarray, length: np.ndarray,
               hold: np.ndarray, concurrency: int | None) -> tuple[Cost, Cost]:
        """(prefill, decode) of :meth:`_cost` for a model without speculation (a draft)."""
        whole = self._cost(prompt, cached, offset, length, hold, concurrency)
        prefill = self._cost(prompt, cached, offset, np.zeros_like(length), hold, concurrency)
        return prefill, Cost(**{f.name: getattr(whole, f.name) - getattr(prefill, f.name) for f in fields(Cost)})

    def _allreduce_seconds(self, positions: float | np.ndarray) -> float | np.ndarray:
        """Seconds of one forward pass's all-reduces over ``positions`` positions (0 on one GPU)."""
        if self.tensor_parallel <= 1:
            return 0.0 * positions
        a = self.arch
        sent = allreduce_bytes_per_gpu(self.tensor_parallel, 1.0, a.hidden_size, a.dtype_bytes, a.layers)
        return sent * positions / float(self.hardware.interconnect or 1.0)

    def _groups(self, prefill: bool = False) -> list[tuple[float, float, int | None, int]]:
        """``(attention FLOPs per position, KV bytes per position, cap, layers)`` per layer group.

        The cap is how many positions a query of that group reads: None for dense full attention,
        the sparse budget for full-attention layers under sparse attention, the window (or the
        budget, if smaller) for sliding-window layers. Prefill is dense: only windows cap it.
        """
        a, budget = self.arch, None if prefill else self.sparse_kv_budget
        out = []
        for layers, group_kvb, window in a.attention_groups():
            cap = window if budget is None else budget if window is None else min(window, budget)
            out.append((4.0 * layers * a.heads * a.head_dim, float(group_kvb), cap, layers))
        return out

    def _full_kvb(self) -> float:
        """KV bytes per position of the full-attention layers (the ones sparse attention selects in)."""
        return float(sum(kvb for _, kvb, window in self.arch.attention_groups() if window is None))

    def _decode_steps(self, prompt: int, offset: np.ndarray, length: np.ndarray,
                      hold: np.ndarray, steps: int, concurrency: int | None,
                      ) -> tuple[float, float]:
        """Weight bytes and roofline seconds of the decode steps 1..steps (numpy over steps)."""
        if steps == 0:
            return 0.0, 0.0
        a, hw, block = self.arch, self.hardware, self.sparse_block
        size = steps + 2
        active = np.zeros(size)
        np.add.at(active, offset + 1, 1.0)
        np.add.at(active, offset + length + 1, -1.0)
        # Dense KV positions read at step s: prompt + sum over segments of (s - offset) while
        # generating, + length while held for descendants: a piecewise-linear A(s) * s + B(s).
        slope, const = np.zeros(size), np.zeros(size)
        np.add.at(slope, offset + 1, 1.0)
        np.add.at(slope, offset + length + 1, -1.0)
        np.add.at(const, offset + 1, -offset.astype(np.float64))
        np.add.at(const, offset + length + 1, offset + length.astype(np.float64))
        np.add.at(const, offset + length + hold + 1, -length.astype(np.float64))
        s = np.arange(size, dtype=np.float64)
        active, slope, const = (np.cumsum(x)[1:steps + 1] for x in (active, slope, const))
        s = s[1:steps + 1]
        dense_read = prompt + slope * s + const
        ctx = prompt + s

        spec = self.speculation
        per_forward = 1 if spec is None else spec.positions_per_forward  # positions computed per step
        flops = active * 2.0 * float(a.flop_params) * per_forward
        kv_bytes = active * (float(a.kv_bytes_per_token) + 2.0 * a.state_bytes_per_sequence) * per_forward
        # Each of a step's positions attends to the context (a verification forward's k + 1 too);
        # the KV is read once per step however many positions read it.
        for per_pos, group_kvb, cap, _ in self._groups():
            if cap is None:
                flops += active * per_pos * ctx * per_forward
                kv_bytes += group_kvb * dense_read
            else:
                flops += active * per_pos * np.minimum(cap, ctx) * per_forward
                kv_bytes += group_kvb * active * np.minimum(cap, ctx)
        if block is not None:
            flops += active * 2.0 * a.full_layers * a.heads * a.head_dim * ctx / block * per_forward
            kv_bytes += self._full_kvb() / 2 * dense_read / block
        if concurrency is None:
            weight = a.weight_bytes_per_step(active) * self._weight_scale
        else:
            weight = a.weight_bytes_per_step(float(concurrency)) * active / concurrency * self._weight_scale
        tp, kv_shards = self.tensor_parallel, min(self.tensor_parallel, a.kv_heads)
        seconds = (np.maximum(flops / tp / hw.peak_flops, (weight / tp + kv_bytes / kv_shards) / hw.bandwidth)
                   + self._allreduce_seconds(active * per_forward))
        # With speculation each step stands for 1/E target forwards (Leviathan et al. 2023).
        forwards = 1.0 if spec is None else spec.forwards_per_token
        return float(np.sum(weight)) * forwards, float(np.sum(seconds)) * forwards
