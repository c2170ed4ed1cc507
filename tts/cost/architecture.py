"""Model architecture from a Hugging Face ``config.json``: the numbers the cost model needs.

A :class:`ModelArchitecture` holds the shape of a decoder-only transformer (layers, heads, KV heads,
head size, vocabulary, dtype) and its parameter counts, computed from the config rather than taken
on trust: embeddings, attention q/k/v/o with grouped-query attention, gated MLPs, norms, tied
embeddings and mixture-of-experts layers (total versus active parameters). Two layer kinds change
what attention costs and are read from the config too: sliding-window attention layers (gpt-oss's
``layer_types``), which attend to at most ``sliding_window`` positions, and the Mamba-2 layers of a
hybrid Nemotron-H (``hybrid_override_pattern``), which hold no KV cache but a fixed-size recurrent
state per sequence that every decode step reads and writes.

:func:`load_architecture` accepts a config.json path, a directory holding one, a shipped model name
(``tts/cost/data/*.json``, e.g. ``"Qwen/Qwen3-8B"`` or ``"qwen3-8b"``), or a Hugging Face id it
fetches with ``huggingface_hub`` when that is installed and ``HF_HUB_OFFLINE`` is not set.
"""

from __future__ import annotations

import json
import logging
import os
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

logger = logging.getLogger(__name__)

DATA_DIR = Path(__file__).with_name("data")

_DTYPE_BYTES = {
    "float32": 4, "fp32": 4, "float": 4,
    "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2,
    "float8": 1, "fp8": 1, "float8_e4m3fn": 1, "float8_e5m2": 1, "int8": 1,
}


class ModelArchitecture(BaseModel):
    """Shape and parameter counts of a decoder-only transformer.

    Parameter counts include every weight in the checkpoint (a tied embedding is counted once).
    For a mixture-of-experts model ``active_params`` counts the weights one token passes through:
    everything outside the experts plus ``experts_per_token`` experts (and any shared expert).

    Example:
        >>> arch = load_architecture("Qwen/Qwen3-8B")
        >>> round(arch.params / 1e9, 2)
        8.19
    """

    model_config = ConfigDict(frozen=True)

    name: str
    """Display name (the HF id for shipped models, else the config path)."""
    params: int = Field(ge=1)
    """Total parameters."""
    active_params: int = Field(ge=1)
    """Parameters used per token (equals ``params`` for dense models)."""
    embedding_params: int = Field(ge=0)
    """vocab_size * hidden_size: one embedding table."""
    layers: int = Field(ge=1)
    hidden_size: int = Field(ge=1)
    heads: int = Field(ge=1)
    """Query heads per layer."""
    kv_heads: int = Field(ge=1)
    """Key/value heads per layer (grouped-query attention when fewer than ``heads``)."""
    head_dim: int = Field(ge=1)
    vocab_size: int = Field(ge=1)
    intermediate_size: int = Field(ge=0)
    """Dense MLP width (0 when every layer is a mixture of experts)."""
    dtype_bytes: int = Field(default=2, ge=1)
    """Bytes per weight and per KV-cache element (2 for bfloat16)."""
    tie_word_embeddings: bool = False
    num_experts: int = Field(default=0, ge=0)
    experts_per_token: int = Field(default=0, ge=0)
    moe_intermediate_size: int = Field(default=0, ge=0)
    expert_params: int = Field(default=0, ge=0)
    """Routed-expert weights over all layers (0 for dense models)."""
    attention_layers: int | None = Field(default=None, ge=1)
    """Layers that attend and hold a KV cache; None: every layer (a hybrid Mamba model has fewer)."""
    window_layers: int = Field(default=0, ge=0)
    """Attention layers with a sliding window (they attend to at most ``sliding_window`` positions)."""
    sliding_window: int | None = Field(default=None, ge=1)
    """Window of the sliding-window layers, in positions."""
    state_elements_per_sequence: int = Field(default=0, ge=0)
    """Recurrent state (Mamba-2 SSM and convolution states) one sequence keeps, in elements; read
    and written once per decode step."""

    @model_validator(mode="after")
    def _windows_fit(self) -> ModelArchitecture:
        if self.window_layers > self.kv_layers:
            raise ValueError(f"{self.window_layers} sliding-window layers exceed the {self.kv_layers} "
                             "attention layers")
        if self.window_layers and self.sliding_window is None:
            raise ValueError("sliding-window layers need sliding_window (positions)")
        return self

    @property
    def state_bytes_per_sequence(self) -> int:
        """Recurrent-state bytes per sequence (elements times ``dtype_bytes``; 0 without Mamba)."""
        return self.state_elements_per_sequence * self.dtype_bytes

    @property
    def kv_layers(self) -> int:
        """Layers that attend and hold a KV cache (all layers unless the model is a hybrid)."""
        return self.layers if self.attention_layers is None else self.attention_layers

    @property
    def full_layers(self) -> int:
        """Attention layers that attend to the whole context (no sliding window)."""
        return self.kv_layers - self.window_layers

    @property
    def is_moe(self) -> bool:
        """Whether some layers route tokens to experts."""
        return self.num_experts > 0

    @property
    def flop_params(self) -> int:
        """Active parameters that take part in a matmul per token (2 FLOPs each).

        The input embedding is a table lookup, not a matmul, so an untied input table is left
        out; the LM head always counts (for tied models it is the shared table).
        """
        return self.active_params - (0 if self.tie_word_embeddings else self.embedding_params)

    @property
    def kv_elements_per_token(self) -> int:
        """K and V elements cached per token: 2 * attention layers * kv_heads * head_dim."""
        return 2 * self.kv_layers * self.kv_heads * self.head_dim

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes per token (elements times ``dtype_bytes``), every attention layer."""
        return self.kv_elements_per_token * self.dtype_bytes

    @property
    def attention_flops_per_context_token(self) -> int:
        """Attention FLOPs one query token spends per context token, every attention layer:
        4 * attention layers * heads * head_dim.

        2 FLOPs per multiply-add for q.k and again for the weighted sum of values.
        """
        return 4 * self.kv_layers * self.heads * self.head_dim

    def attention_groups(self) -> list[tuple[int, int, int | None]]:
        """The attention layers split by how far they look back.

        Returns:
            ``(layers, kv_bytes_per_token, window)`` per group: the full-attention layers
            (``window`` None) and, when there are any, the sliding-window layers. The KV bytes are
            those of the group's layers only, so the groups' bytes add up to
            :attr:`kv_bytes_per_token`.
        """
        per_layer = 2 * self.kv_heads * self.head_dim * self.dtype_bytes
        groups: list[tuple[int, int, int | None]] = []
        if self.full_layers:
            groups.append((self.full_layers, self.full_layers * per_layer, None))
        if self.window_layers:
            groups.append((self.window_layers, self.window_layers * per_layer, self.sliding_window))
        return groups

    def weight_bytes_per_step(self, batch: Any = 1) -> Any:
        """Bytes of weights read by one forward pass over ``batch`` sequences.

        Dense models read ``flop_params`` weights whatever the batch. A mixture-of-experts layer
        reads only the experts some token in the batch was routed to; with uniform routing the
        expected share of experts touched is ``1 - (1 - k/E) ** batch``. ``batch`` may be a
        number or a numpy array.
        """
        if not self.is_moe:
            return self.flop_params * self.dtype_bytes + 0 * batch
        active_experts = self.expert_params * self.experts_per_token / self.num_experts
        touched = 1.0 - (1.0 - self.experts_per_token / self.num_experts) ** batch
        return (self.flop_params - active_experts + self.expert_params * touched) * self.dtype_bytes

    @classmethod
    def from_config(cls, config: dict[str, Any], name: str | None = None) -> ModelArchitecture:
        """Build from a parsed Hugging Face config.json.

        Reads the keys of Llama, Qwen2/3, Qwen3-MoE, Phi-3/4, EXAONE (``num_layers``), gpt-oss
        (biased experts and attention sinks; ``layer_types`` with sliding-window layers) and the
        hybrid Nemotron-H (``hybrid_override_pattern``: Mamba-2, MLP and attention layers).

        Raises:
            ValueError: when a required key is missing.
        """
        cfg = dict(config.get("text_config") or config)
        try:
            hidden = int(cfg["hidden_size"])
            layers = int(cfg.get("num_hidden_layers") or cfg["num_layers"])  # EXAONE: num_layers
            heads = int(cfg["num_attention_heads"])
            vocab = int(cfg["vocab_size"])
        except KeyError as exc:
            missing = "'num_hidden_layers'" if str(exc) == "'num_layers'" else str(exc)
            raise ValueError(f"config.json of {name or 'the model'} lacks the key {missing}; "
                             "pass a decoder-only transformer's config.json") from None
        kv_heads = int(cfg.get("num_key_value_heads") or heads)
        head_dim = int(cfg.get("head_dim") or hidden // heads)
        inter = int(cfg.get("intermediate_size") or 0)
        tied = bool(cfg.get("tie_word_embeddings", False))
        model_type = str(cfg.get("model_type", ""))
        dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16").replace("torch.", "")
        dtype_bytes = _DTYPE_BYTES.get(dtype.lower(), 2)

        # 1. Attention: q/o use all heads, k/v the (fewer) KV heads.
        attn = _attention_params(cfg, model_type, hidden, heads, kv_heads, head_dim)
        norms = 2 * hidden  # input and post-attention RMSNorm

        # 2. MLP: gated (gate, up, down). MoE layers: router + experts (+ optional shared expert).
        mlp_bias = 2 * inter + hidden if cfg.get("mlp_bias") else 0
        dense_mlp = 3 * hidden * inter + mlp_bias
        n_exp, top_k, moe_inter, moe_layers, one_expert, shared, router = _moe_shape(cfg, model_type, layers,
                                                                                    hidden, inter)
        dense_layers = layers - moe_layers

        # 3. Sliding-window attention layers (gpt-oss alternates them with full attention).
        window = cfg.get("sliding_window")
        layer_types = list(cfg.get("layer_types") or [])
        window_layers = sum(t == "sliding_attention" for t in layer_types) if window else 0

        # 4. Totals. A tied LM head shares the embedding table.
        embed = vocab * hidden
        head = 0 if tied else embed
        pattern = cfg.get("hybrid_override_pattern")
        if pattern:
            body, attention_layers, state = _hybrid_layers(cfg, str(pattern), layers, hidden,
                                                           attn, inter, name)
            dense_layers = 0
        else:
            body, attention_layers, state = layers * (attn + norms) + dense_layers * dense_mlp, None, 0
        base = embed + head + hidden + body
        expert_total = moe_layers * n_exp * one_expert
        params = base + moe_layers * (router + shared) + expert_total
        active = base + moe_layers * (router + shared + top_k * one_expert)
        return cls(
            name=name or str(cfg.get("_name_or_path") or model_type or "model"),
            params=params, active_params=active, embedding_params=embed, layers=layers,
            hidden_size=hidden, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
            vocab_size=vocab, intermediate_size=inter if (dense_layers or pattern) else 0,
            dtype_bytes=dtype_bytes, tie_word_embeddings=tied,
            num_experts=n_exp if moe_layers else 0, experts_per_token=top_k if moe_layers else 0,
            moe_intermediate_size=moe_inter if moe_layers else 0, expert_params=expert_total,
            attention_layers=attention_layers, window_layers=window_layers,
            sliding_window=int(window) if window_layers else None,
            state_elements_per_sequence=state,
        )



def _attention_params(cfg: dict[str, Any], model_type: str, hidden: int, heads: int, kv_heads: int,
                      head_dim: int) -> int:
    """Parameters of one attention block: q/o over all heads, k/v over the (fewer) KV heads.

    Qwen2 always has q/k/v biases; Llama/Qwen3/gpt-oss have biases on all four only when
    ``attention_bias`` is set. Qwen3 adds a per-head RMSNorm on q and k, gpt-oss one learned
    attention sink per head.
    """
    q_out, kv_out = heads * head_dim, kv_heads * head_dim
    attn = hidden * q_out + 2 * hidden * kv_out + q_out * hidden
    if model_type in ("qwen2", "qwen2_moe"):
        attn += q_out + 2 * kv_out
    elif cfg.get("attention_bias"):
        attn += q_out + 2 * kv_out + hidden
    if model_type.startswith("qwen3"):
        attn += 2 * head_dim  # per-head RMSNorm on q and k
    if model_type == "gpt_oss":
        attn += heads  # one learned attention sink per head
    return attn


def _moe_shape(cfg: dict[str, Any], model_type: str, layers: int, hidden: int,
               inter: int) -> tuple[int, int, int, int, int, int, int]:
    """A config's mixture-of-experts layers (Qwen-MoE and gpt-oss keys): experts per layer,
    experts per token, an expert's intermediate size, how many layers are MoE, and the parameters
    of one expert, of the shared expert (0 if none) and of the router of one MoE layer.

    Every ``decoder_sparse_step``-th layer not in ``mlp_only_layers`` is MoE when the config has
    experts; gpt-oss biases its experts (gate-up and down) and its router.
    """
    n_exp = int(cfg.get("num_experts") or cfg.get("num_local_experts") or 0)
    top_k = int(cfg.get("num_experts_per_tok") or cfg.get("experts_per_token") or 0)
    moe_inter = int(cfg.get("moe_intermediate_size") or inter)
    shared_inter = int(cfg.get("shared_expert_intermediate_size") or 0)
    step = int(cfg.get("decoder_sparse_step") or 1)
    mlp_only = set(cfg.get("mlp_only_layers") or [])
    moe_layers = 0
    if n_exp > 0:
        moe_layers = sum(1 for i in range(layers) if i not in mlp_only and (i + 1) % step == 0)
    one_expert = 3 * hidden * moe_inter
    shared = (3 * hidden * shared_inter + hidden) if shared_inter else 0
    router = hidden * n_exp
    if model_type == "gpt_oss":  # biased experts (gate-up and down) and router
        one_expert += 2 * moe_inter + hidden
        router += n_exp
    return n_exp, top_k, moe_inter, moe_layers, one_expert, shared, router


def _hybrid_layers(cfg: dict[str, Any], pattern: str, layers: int, hidden: int, attn: int,
                   inter: int, name: str | None) -> tuple[int, int, int]:
    """Parameters, attention layers and per-sequence state elements of a Nemotron-H layer pattern.

    One character per layer (``hybrid_override_pattern``): ``M`` a Mamba-2 mixer, ``-`` an MLP
    (up and down projections with squared ReLU, not gated), ``*`` an attention mixer; each layer
    also has one RMSNorm. Parameters follow the Mamba-2 layer of Nemotron-H: the input projection
    to x, z, B, C and dt (``2 d_inner + 2 groups state + heads``), a depthwise causal convolution
    over x, B and C, per-head dt bias, A and D, a gated RMSNorm over d_inner and the output
    projection. The recurrent state a sequence keeps per Mamba layer is the SSM state
    (heads x head_dim x state) plus the convolution's last ``conv_kernel - 1`` inputs.
    """
    if len(pattern) != layers:
        raise ValueError(f"config.json of {name or 'the model'}: hybrid_override_pattern has "
                         f"{len(pattern)} layers, num_hidden_layers says {layers}")
    unknown = set(pattern) - set("M-*")
    if unknown:
        raise ValueError(f"config.json of {name or 'the model'}: hybrid_override_pattern layer "
                         f"kinds {''.join(sorted(unknown))!r} are not priced (only M, - and *)")
    try:
        m_heads, m_head_dim = int(cfg["mamba_num_heads"]), int(cfg["mamba_head_dim"])
        groups, state = int(cfg.get("n_groups") or 1), int(cfg["ssm_state_size"])
    except KeyError as exc:
        raise ValueError(f"config.json of {name or 'the model'} has Mamba layers but lacks the key "
                         f"{exc}") from None
    kernel = int(cfg.get("conv_kernel") or 4)
    d_inner = m_heads * m_head_dim
    conv_dim = d_inner + 2 * groups * state
    in_proj = hidden * (2 * d_inner + 2 * groups * state + m_heads)
    if cfg.get("use_bias"):
        in_proj += 2 * d_inner + 2 * groups * state + m_heads
    conv = conv_dim * kernel + (conv_dim if cfg.get("use_conv_bias", True) else 0)
    out_proj = d_inner * hidden + (hidden if cfg.get("use_bias") else 0)
    mamba = in_proj + conv + 3 * m_heads + d_inner + out_proj
    mlp = 2 * hidden * inter + ((inter + hidden) if cfg.get("mlp_bias") else 0)
    counts = {kind: pattern.count(kind) for kind in "M-*"}
    body = counts["M"] * mamba + counts["-"] * mlp + counts["*"] * attn + layers * hidden
    state_elements = counts["M"] * (m_heads * m_head_dim * state + conv_dim * (kernel - 1))
    if not counts["*"]:
        raise ValueError(f"config.json of {name or 'the model'}: no attention layer (*) in "
                         "hybrid_override_pattern; a pure state-space model is not priced")
    return body, counts["*"], state_elements


def _aliases(hf_id: str) -> set[str]:
    """Lower-case names a shipped model answers to: with or without org and ``-Instruct``."""
    org, _, bare = hf_id.lower().rpartition("/")
    bares = {bare, bare.removesuffix("-instruct")}
    if bare.startswith("llama-"):
        bares |= {f"meta-{b}" for b in bares}  # the older "Meta-Llama-3.1-8B-Instruct" ids
    return bares | {f"{org}/{b}" for b in bares}


@cache
def known_models() -> dict[str, Path]:
    """Alias (lower case) -> shipped config file; HF id ``org/name`` is stored as ``org__name.json``.
    """
    index: dict[str, Path] = {}
    for path in sorted(DATA_DIR.glob("*.json")):
        hf_id = path.stem.replace("__", "/")
        for alias in _aliases(hf_id):
            index[alias] = path
    return index


def shipped_model_ids() -> list[str]:
    """The Hugging Face ids of the shipped configs."""
    return sorted(p.stem.replace("__", "/") for p in DATA_DIR.glob("*.json"))


def _hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def _from_hub(repo_id: str) -> Path | None:
    """Fetch config.json from the Hugging Face hub, or None when that is impossible."""
    if _hub_offline() or "/" not in repo_id:
        return None
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        return None
    try:
        return Path(hf_hub_download(repo_id=repo_id, filename="config.json"))
    except Exception as exc:  # network errors, gated or missing repos: all mean "not found"
        logger.info("could not fetch config.json for %s from the hub: %s", repo_id, exc)
        return None


def load_architecture(name_or_path: str | os.PathLike[str], *, dtype_bytes: int | None = None,
                      ) -> ModelArchitecture:
    """Load a model's architecture.

    Args:
        name_or_path: A config.json path, a directory containing config.json, a shipped model
            name (case-insensitive HF id or alias such as ``"qwen3-8b"``), or a HF hub id.
        dtype_bytes: Override the bytes per weight/KV element (e.g. 1 for an fp8 deployment).

    Returns:
        The architecture with parameter counts computed from the config.

    Raises:
        ValueError: when nothing matches; the message says how to pass a config.json.
    """
    raw = str(name_or_path)
    path = Path(raw).expanduser()
    name = raw
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ValueError(f"{path} has no config.json; pass --model path/to/config.json")
        path = path / "config.json"
    elif not path.is_file():
        shipped = known_models().get(raw.strip().lower())
        if shipped is not None:
            path, name = shipped, shipped.stem.replace("__", "/")
        else:
            fetched = _from_hub(raw.strip())
            if fetched is None:
                raise ValueError(
                    f"unknown model {raw!r}: not a config.json path, not one of the shipped "
                    f"models ({', '.join(shipped_model_ids())}) and not fetchable from the "
                    "Hugging Face hub (offline or huggingface_hub not installed). Download the "
                    "model's config.json and pass --model path/to/config.json")
            path = fetched
    try:
        config = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read {path} as a config.json: {exc}") from None
    arch = ModelArchitecture.from_config(config, name=name)
    if dtype_bytes is not None:
        arch = arch.model_copy(update={"dtype_bytes": dtype_bytes})
    return arch
