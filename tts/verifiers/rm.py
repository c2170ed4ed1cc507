"""Outcome reward models (ORMs): one score per whole solution, from a vLLM pooling model.

An ORM reads the question and the whole solution and gives one reward. What differs between
families is data in an :class:`RMAdapter` (how the solution is written into the prompt, which
head and class hold the score), as for PRMs (:mod:`tts.verifiers.prm_adapters`, whose prompt
wrapping it shares). It runs where a PRM runs: an engine of its own in this process
(``backend: {kind: vllm}``, the default) or a vLLM server running it as a pooling model
(``backend: {kind: openai, base_url: ...}``, through :mod:`tts.backends.pooling`); either way the
items are rendered and tokenised here, so both paths score the same token ids.

``score(items)`` sends every item in ONE engine call (one HTTP request, chunked by size, on a
server). Pricing: one prefill of the rendered prompt on the RM's own architecture.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from tts.backends.base import BackendError, request_usage, split_wall_time
from tts.backends.pooling import PoolingClient, PoolingServerConfig
from tts.models import prepare_model
from tts.types import Usage
from tts.verifiers.base import VerifierScore, VerifyItem, clean_score
from tts.verifiers.prm import PoolingVerifierConfig, _load_tokenizer
from tts.verifiers.prm_adapters import check_prompt_template, wrap_prompt

logger = logging.getLogger(__name__)


class RMAdapter(BaseModel):
    """How to talk to one outcome reward model (ORM) family: one score per solution, all data.

    The solution is its steps joined by ``step_separator`` (no tags), placed in ``template`` (or
    the tokenizer's chat template when None) exactly as a PRM adapter places it. The score is
    read from the model's head:

    - ``head="classify"``: a sequence-classification head (``*ForSequenceClassification`` reward
      models), pooled by vLLM at the last token: one vector of class probabilities per solution;
    - ``head="last_token"``: a token-level reward head (``Qwen2ForRewardModel``, the
      Qwen2.5-Math-RM family): one row per token, the solution's reward is the last token's.

    The score is the probability of class ``positive_index``; a head with one output is read as
    that output (vLLM applies a sigmoid to it, the Bradley-Terry probability of a reward).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = "custom"
    """Display name (the key of a shipped adapter)."""
    head: Literal["classify", "last_token"] = "classify"
    """Where the score comes from: a sequence-classification head ("classify") or the last
    token's row of a token-level reward head ("last_token")."""
    step_separator: str = "\n\n"
    """Text between two consecutive steps of the solution."""
    template: str | None = None
    """The whole prompt with ``{question}`` and ``{solution}`` (and optionally ``{system}``); None:
    the tokenizer's chat template (system, user = question, assistant = solution)."""
    system: str = ""
    """System prompt (the ``{system}`` of ``template``, or a system message)."""
    positive_index: int | None = Field(None, ge=0)
    """The class that means "good solution"; None: the only output of a one-output head, else 1."""

    @model_validator(mode="after")
    def _consistent(self) -> RMAdapter:
        check_prompt_template(self.template)
        return self

    @property
    def task(self) -> str:
        """The vLLM pooling task the head answers."""
        return "classify" if self.head == "classify" else "token_classify"

    def column(self, width: int) -> int:
        """The column of a ``width``-output head that holds the score."""
        if self.positive_index is not None:
            return self.positive_index
        return 0 if width == 1 else 1

    def render(self, question: str, steps: Sequence[str], tokenizer: Any) -> tuple[str, bool]:
        """The full prompt text and whether to add the tokenizer's special tokens when tokenising it."""
        text, _, special = wrap_prompt(self.name, self.template, self.system, question,
                                       self.step_separator.join(steps), tokenizer)
        return text, special

    def pooler_settings(self) -> dict[str, Any]:
        """vLLM pooling-model settings for this head (the in-process engine's ``LLM`` arguments;
        a server's flags through :func:`~tts.verifiers.prm_adapters.pooler_server_args`)."""
        return {"runner": "pooling", "pooler_config": {"task": self.task}}


RM_ADAPTERS: dict[str, RMAdapter] = {
    # Sequence-classification reward models (e.g. Skywork-Reward, *ForSequenceClassification):
    # the conversation in the tokenizer's chat format, one reward per conversation.
    "chat": RMAdapter(name="chat", head="classify", template=None),
    # Qwen/Qwen2.5-Math-RM-72B (Qwen2ForRewardModel): its model card scores the chat-formatted
    # (system, user, assistant) conversation with this system prompt; the reward is the last
    # token's. Recheck the system prompt on a machine with the model card and weights.
    "qwen2.5-math-rm": RMAdapter(
        name="qwen2.5-math-rm",
        head="last_token",
        template=None,
        system="Please reason step by step, and put your final answer within \\boxed{}.",
    ),
}


def get_rm_adapter(value: str | RMAdapter | dict[str, Any]) -> RMAdapter:
    """A shipped outcome-RM adapter by name, or an inline one (a mapping of :class:`RMAdapter` fields).

    Raises:
        ValueError: An unknown name (the message lists the shipped ones) or invalid fields.
    """
    if isinstance(value, RMAdapter):
        return value
    if isinstance(value, str):
        if value not in RM_ADAPTERS:
            raise ValueError(f"unknown reward-model adapter {value!r}; choose one of {', '.join(sorted(RM_ADAPTERS))} "
                             "or give one inline (head, template, system, step_separator, positive_index)")
        return RM_ADAPTERS[value]
    return RMAdapter.model_validate(value)


class RMVerifierConfig(PoolingVerifierConfig):
    """An outcome reward model, in its own vLLM pooling engine or on a vLLM server."""

    kind: Literal["rm"] = "rm"
    model: str = Field(min_length=1)
    """The reward model: a hub id or local directory (in process), or the name a server serves."""
    adapter: Annotated[RMAdapter, BeforeValidator(get_rm_adapter)] = Field(
        default_factory=lambda: get_rm_adapter("chat"))
    """How the model reads a solution: a shipped adapter's name ("chat", "qwen2.5-math-rm") or one
    inline (head, template, system, step_separator, positive_index)."""


class RMVerifier:
    """One score in [0, 1] per whole solution from an outcome reward model.

    Args:
        config: The model, its adapter, and where it runs (in process or on a server).

    Use it as a context manager, or call :meth:`close`.

    Example:
        >>> cfg = RMVerifierConfig(model="Skywork/Skywork-Reward-Llama-3.1-8B-v0.2",
        ...                        backend={"kind": "openai", "base_url": "http://gpu-box:8001/v1"})
        >>> with RMVerifier(cfg) as rm:  # doctest: +SKIP
        ...     [s.score for s in rm.score(items)]
    """

    name: ClassVar[str] = "rm"
    config_class: ClassVar[type[RMVerifierConfig]] = RMVerifierConfig
    keep_warm: ClassVar[bool] = True
    """An engine or a server connection: keep the verifier for the whole run."""
    step_verifier: ClassVar[bool] = False
    """It reads the whole solution: strategies give it whole solutions, and it returns no step scores."""

    def __init__(self, config: RMVerifierConfig) -> None:
        self.config = config
        self._llm: Any = None
        self._client: PoolingClient | None = None
        self.on_gpu = False
        backend = config.backend
        # 1. The tokenizer (in process: the model's; on a server: backend.tokenizer or the served name).
        if isinstance(backend, PoolingServerConfig):
            source = backend.tokenizer or config.model
            local = Path(source).expanduser().is_dir()
            self.priced_model = source
        else:
            prepared = prepare_model(config.model)
            source, local = prepared.path, prepared.local
            self.priced_model = config.model
        self._tokenizer = _load_tokenizer(source, local)
        # 2. The server's client, or an engine of its own.
        if isinstance(backend, PoolingServerConfig):
            self._client = PoolingClient(backend, config.model)
            return
        from tts.backends.vllm import choose_dtype, cuda_available, launch_engine
        from vllm.config.pooler import PoolerConfig

        self.on_gpu = cuda_available()
        settings = config.adapter.pooler_settings()
        kwargs: dict[str, Any] = {**settings, "model": source, "dtype": choose_dtype(config.dtype, self.on_gpu),
                                  "max_model_len": config.max_model_len,
                                  "pooler_config": PoolerConfig(**settings["pooler_config"])}
        if self.on_gpu:
            kwargs["gpu_memory_utilization"] = config.gpu_memory_utilization
        self._llm = launch_engine(kwargs, local_model=local, on_gpu=self.on_gpu, kv_cache_gib=config.kv_cache_gib,
                                  what="reward model", hint="Check that the model exists, that it is a reward model "
                                  f"whose head fits the adapter's ({config.adapter.head}), and that it fits in memory.")

    @classmethod
    def from_config(cls, config: RMVerifierConfig, generator: object = None) -> RMVerifier:
        """Build from its config (the policy's generator is not needed)."""
        return cls(config)

    @property
    def remote(self) -> bool:
        """Whether the RM runs on a server (``backend.kind == "openai"``)."""
        return isinstance(self.config.backend, PoolingServerConfig)

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has run."""
        return self._llm is None and self._client is None

    @property
    def tokenizer(self) -> Any:
        """The RM's tokenizer (items are tokenised with it)."""
        return self._tokenizer

    def encode(self, item: VerifyItem) -> list[int]:
        """Prompt token ids of one item (its steps joined as the adapter writes a solution)."""
        text, special = self.config.adapter.render(item.problem.question, item.steps, self._tokenizer)
        return list(self._tokenizer(text, add_special_tokens=special)["input_ids"])

    def score(self, items: Sequence[VerifyItem]) -> list[VerifierScore]:
        """Score every item's whole solution in one engine call (or one chunked server request).

        An item without steps scores 0.5 (no evidence) and costs nothing.
        """
        if self.closed:
            raise BackendError(f"This reward-model verifier ({self.config.model}) was closed. Create a new "
                               "RMVerifier to score again.")
        adapter = self.config.adapter
        # 1. Render and tokenise.
        encoded = [self.encode(item) if item.steps else None for item in items]
        if not self.remote:
            for i, ids in enumerate(encoded):
                if ids is not None and len(ids) > self.config.max_model_len:
                    raise BackendError(f"RM item {i} (problem {items[i].problem.id}) renders to {len(ids)} tokens, "
                                       f"above max_model_len={self.config.max_model_len}. Raise max_model_len.")
        sent = [i for i, ids in enumerate(encoded) if ids is not None]
        results = [VerifierScore((), 0.5, Usage()) for _ in items]
        if not sent:
            return results
        # 2. One call for the batch.
        pooled = self._pool([encoded[i] for i in sent], adapter.task)  # type: ignore[misc]
        # 3. The score: the class of a good solution, from the sequence head or the last token's row.
        for i, (data, wall) in zip(sent, pooled, strict=True):
            vector = data[-1] if adapter.head == "last_token" and data and isinstance(data[-1], list) else data
            if not vector or not all(isinstance(x, (int, float)) for x in vector) or \
                    adapter.column(len(vector)) >= len(vector):
                raise BackendError(
                    f"The reward model returned {str(data)[:80]} for item {i}; expected a vector of class "
                    f"probabilities with column {adapter.column(len(vector) if isinstance(vector, list) else 0)} "
                    f"(adapter {adapter.name!r}, head {adapter.head}). Check the adapter's head and positive_index"
                    + (", and the server's --pooler-config task." if self.remote else "."))
            value, bad = clean_score(vector[adapter.column(len(vector))])
            usage = request_usage(len(encoded[i]), 0, (), wall, batch_sequences=len(sent),  # type: ignore[arg-type]
                                  model=self.priced_model)
            results[i] = VerifierScore((), value, usage, invalid=bad)
        return results

    def _pool(self, prompts: list[list[int]], task: str) -> list[tuple[list[Any], float]]:
        """Per prompt: its pooled output as nested lists, and its share of the wall time."""
        if self._client is not None:
            return [(out.data, out.wall_seconds) for out in self._client.pool(prompts, task)]
        from vllm.inputs import TokensPrompt

        start = time.perf_counter()
        outputs = self._llm.encode([TokensPrompt(prompt_token_ids=p) for p in prompts], pooling_task=task,
                                   use_tqdm=False)
        walls = split_wall_time(time.perf_counter() - start, [len(p) for p in prompts])
        return [(out.outputs.data.float().tolist(), w) for out, w in zip(outputs, walls, strict=True)]

    def close(self) -> None:
        """Close the server connection or shut the engine down; closing twice is harmless."""
        if self._client is not None:
            self._client.close()
            self._client = None
            return
        from tts.backends.vllm import close_engine

        close_engine(self, "_llm", self.on_gpu)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        where = self.config.backend.base_url if self.remote else "in process"  # type: ignore[union-attr]
        return f"RMVerifier({self.config.model!r}, {self.config.adapter.name!r}, {where})"
