"""The Generator protocol: batched, order-preserving text generation with usage accounting.

Every backend (the offline vLLM engine, an OpenAI-compatible server, the scripted test backend)
takes a list of requests and returns one result per request, in the same order. A strategy sends
all the requests of one search step in a single call so that the engine can batch them and share
prompt prefixes.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Protocol, runtime_checkable

from tts.backends.chat import Message, ToolCall
from tts.backends.confidence import ConfidenceStop
from tts.types import RequestShape, Usage

__all__ = ["Message", "ToolCall", "GenerationRequest", "Completion", "GenerationResult", "Generator"]


LENGTH = "length"
"""``Completion.finish_reason`` of a reply that ``max_tokens`` cut (every backend's word for it, OpenAI's too)."""

MAX_TOP_LOGPROBS = 20
"""Most first-token alternatives a request may ask for (vLLM's default ``max_logprobs`` and the
OpenAI API's ``top_logprobs`` limit)."""


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """One prompt to sample ``n`` completions from.

    Args:
        messages: The chat so far; the backend applies the model's chat template.
        n: Number of samples sharing this prompt.
        temperature: Sampling temperature (0 = greedy).
        top_p: Nucleus sampling mass.
        max_tokens: Cap on generated tokens per sample.
        stop: Strings that end a sample (not included in the text).
        seed: Per-request seed, where the backend supports it (see each backend's notes).
        logprobs: Ask for token log-probabilities (fills ``Completion.mean_logprob`` and
            ``Completion.token_logprobs``).
        top_logprobs: Ask for the ``top_logprobs`` most likely first tokens of each completion
            with their log-probabilities (fills ``Completion.first_token_top_logprobs``; an LLM
            judge reads P("Yes") there; backends that can also fill ``Completion.token_top_logprobs``
            with the top values of every position). 0: none. At most 20 (vLLM's and OpenAI's limit).
        continuation: A partial assistant message to continue rather than start a new one
            (step-wise search continues a partial solution this way).
        key: The caller's label for the request (usually the problem id); backends that need a
            stable identity (the scripted one) use it, others ignore it.
        confidence_stop: End each sample inside the engine once its group confidence falls below
            a threshold (DeepConf online); backends that can do it say so with a
            ``supports_confidence_stop = True`` attribute, and mark such samples with
            ``finish_reason == "confidence"``. None: no stop.
        presence_penalty, frequency_penalty: OpenAI's penalties on tokens already generated
            (-2..2; 0 = none).
        logit_bias: ``(token id, bias)`` pairs added to those tokens' logits (-100..100).
        json_schema: A JSON schema (as JSON text) every sample must match, by the engine's
            structured output (vLLM's ``structured_outputs``, an upstream's ``response_format``);
            None: free text.
        thinking_budget: The most tokens of the sample's thinking section (``<think> ... </think>``),
            enforced inside the engine: once the thought reaches it, the engine writes the
            end-of-thinking delimiter and the model goes on to answer in the same request (vLLM's
            ``thinking_token_budget``). The thought already in the prompt (an open ``<think>`` in
            ``continuation``) counts towards it, as vLLM counts it. Backends that can do it say so
            with a ``supports_thinking_budget`` attribute; others refuse such a request. None: no cap
            but ``max_tokens``.
        tools: The tools offered to the model, as the JSON text of OpenAI's ``tools`` list
            (:func:`tts.backends.chat.tools_json`): the vLLM backend renders them with the model's
            chat template and reads calls back with its tool parser; an upstream receives them as
            ``tools``. None: no tools.
        tool_choice: OpenAI's ``tool_choice`` as JSON text (``"auto"``, ``"required"``, a named
            function), forwarded to upstreams that take it; None: the server's default.
        role: Who asks: ``"policy"`` (a strategy's samples), ``"verifier"`` (generative
            verification) or ``"judge"`` (the LLM judge). The vLLM backend runs each role's
            requests on that role's LoRA adapter (``VLLMBackendConfig.lora``); others ignore it.

    Greedy sampling (``temperature == 0``) with ``n > 1`` asks for n copies of one sample:
    backends whose engine refuses that (vLLM) draw one sample and repeat it, counting the tokens
    of the one they drew.
    """

    messages: tuple[Message, ...]
    n: int = 1
    temperature: float = 0.7
    top_p: float = 1.0
    max_tokens: int = 256
    stop: tuple[str, ...] = ()
    seed: int | None = None
    logprobs: bool = False
    continuation: str = ""
    key: str = ""
    top_logprobs: int = 0
    confidence_stop: ConfidenceStop | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: tuple[tuple[int, float], ...] = ()
    json_schema: str | None = None
    thinking_budget: int | None = None
    tools: str | None = None
    tool_choice: str | None = None
    role: str = "policy"

    def __post_init__(self) -> None:
        if not 0 <= self.top_logprobs <= MAX_TOP_LOGPROBS:
            raise ValueError(
                f"GenerationRequest.top_logprobs must be in 0..{MAX_TOP_LOGPROBS}, got {self.top_logprobs}")
        if self.n < 1:
            raise ValueError(f"GenerationRequest.n must be >= 1, got {self.n}")
        if self.max_tokens < 1:
            raise ValueError(f"GenerationRequest.max_tokens must be >= 1, got {self.max_tokens}")
        if self.thinking_budget is not None and self.thinking_budget < 0:
            raise ValueError(f"GenerationRequest.thinking_budget must be >= 0 (or None), got {self.thinking_budget}")


@dataclass(frozen=True, slots=True)
class Completion:
    """One sampled continuation: text, its token count, mean token logprob, why it stopped.

    The first four fields may be given by position (``Completion("4", 1, -0.2, "stop")``); the
    rest only by name, so that a call site says which of the many optional ones it sets.

    Args:
        text: The generated text.
        completion_tokens: Generated tokens.
        mean_logprob: Mean log-probability of the generated tokens (when logprobs were asked).
        finish_reason: "stop", "length", ...
        token_logprobs: Log-probability of each generated token, in order (when logprobs were
            asked and the backend returns them); DeepConf-style confidences need them.
        first_token_top_logprobs: The most likely first tokens (decoded text -> logprob; tokens
            that decode alike are merged) when ``top_logprobs`` was asked.
    """

    text: str
    completion_tokens: int
    mean_logprob: float | None = None
    finish_reason: str | None = None
    _: KW_ONLY
    token_logprobs: tuple[float, ...] | None = None
    first_token_top_logprobs: dict[str, float] | None = field(default=None, hash=False)
    ended_by_eos: bool | None = None
    """True when the model ended its message (end of sequence), False when a stop string or the
    token limit ended it, None when the backend cannot tell (step-wise search needs this to know
    that a path is finished rather than paused at a step boundary)."""
    token_top_logprobs: tuple[tuple[float, ...], ...] | None = field(default=None, hash=False, compare=False)
    """When ``top_logprobs`` was asked and the backend returns them: the log-probabilities of the
    most likely tokens at every generated position (largest first), for token confidences
    (DeepConf, self-certainty)."""
    tokens: tuple[str, ...] | None = field(default=None, hash=False, compare=False)
    """When logprobs were asked and the backend returns them: the text of each generated token,
    aligned with ``token_logprobs`` (an OpenAI ``logprobs`` answer needs them)."""
    token_alternatives: tuple[tuple[tuple[str, float], ...], ...] | None = field(default=None, hash=False,
                                                                                 compare=False)
    """When ``top_logprobs`` was asked: the most likely tokens at every position as (text, logprob)
    pairs, largest first (OpenAI's ``top_logprobs``)."""
    reasoning_tokens: int | None = field(default=None, compare=False)
    """Of ``completion_tokens``, those inside a thinking section (before the end-of-thinking
    delimiter), when the backend knows the model's delimiters (a reasoning parser or config);
    None when it cannot tell."""
    thinking_capped: bool | None = field(default=None, compare=False)
    """True when the request's ``thinking_budget`` ended the thought (the engine wrote the
    end-of-thinking delimiter for the model), False when the model ended it or there was no budget,
    None when the backend cannot tell."""
    tool_calls: tuple[ToolCall, ...] | None = field(default=None, compare=False)
    """When the request offered tools: the calls the reply makes, read by the backend's tool parser
    (and checked against the offered tools); () when it makes none or a malformed one (see
    ``tool_call_error``); None when no tools were offered."""
    tool_call_error: str | None = field(default=None, compare=False)
    """Why a reply to a request with tools holds no call: ``"no_tool_call"`` or
    ``"malformed_tool_call"`` (a call that does not parse, names a tool not offered or misses a
    required argument); None when it holds calls or no tools were offered."""

    @property
    def truncated(self) -> bool:
        """Whether ``max_tokens`` cut the reply (``finish_reason == "length"``, as vLLM, OpenAI's
        API and the scripted backend all say it): its text stops mid-way, and a call in it is no call."""
        return self.finish_reason == LENGTH


@dataclass(frozen=True, slots=True)
class GenerationResult:
    """The ``n`` completions of one request and the compute they cost."""

    completions: tuple[Completion, ...]
    usage: Usage
    cancelled: tuple[int, ...] = ()
    """The tokens each cancelled sample had generated before it was aborted (a per-request stop,
    :mod:`tts.backends.streaming`); they are counted in ``usage``, and the samples are not among
    ``completions``. () when nothing was cancelled."""


@runtime_checkable
class Generator(Protocol):
    """Anything that turns a batch of requests into results, one per request, in order."""

    model_name: str

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """Generate for all requests at once (one engine call where the backend allows)."""
        ...

    def close(self) -> None:
        """Release the engine, server connection or worker processes."""
        ...


def merge_top_logprobs(pairs: Iterable[tuple[str, float]]) -> dict[str, float]:
    """``{decoded token: logprob}`` from (token, logprob) pairs; tokens that decode to the same
    text (two ids for "Yes") are merged by adding their probabilities."""
    merged: dict[str, float] = {}
    for token, logprob in pairs:
        lp = float(logprob)
        merged[token] = lp if token not in merged else _logaddexp(merged[token], lp)
    return merged


def _logaddexp(a: float, b: float) -> float:
    hi, lo = max(a, b), min(a, b)
    return hi if lo == -math.inf else hi + math.log1p(math.exp(lo - hi))


def greedy_repeats(request: GenerationRequest) -> bool:
    """Whether ``request`` asks for several greedy samples (identical by definition), which a
    backend serves as one sample repeated ``n`` times."""
    return request.temperature == 0 and request.n > 1


def count_prompt_tokens(generator: object, request: GenerationRequest) -> int | None:
    """Exact prompt length when the backend can tokenize locally (vLLM, scripted), else None."""
    counter = getattr(generator, "prompt_tokens", None)
    return counter(request) if callable(counter) else None


def derive_seed(run_seed: int, key: str, drawn: int) -> int:
    """The seed of one request: distinct for every (run seed, problem key, samples already drawn).

    Engines that honour per-request seeds (vLLM on GPU, ``vllm serve``, the scripted backend)
    return the same samples for the same seed, so a later round of the same problem must not
    resend the seed of an earlier one: it would draw the same samples again and fake agreement.
    """
    return seed_of(f"{run_seed}|{key}|{drawn}")


def seed_of(text: str) -> int:
    """The seed of ``text``, the joined ``f"{run_seed}|{key}|{drawn}"`` of :func:`derive_seed`:
    for a caller that derives thousands of seeds from one prefix (a search step), joined once."""
    digest = hashlib.sha256(text.encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


class BackendError(RuntimeError):
    """A backend failed in a way the user can fix (unreachable server, bad model, ...)."""


def request_usage(
    prompt_tokens: int, cached_tokens: int, completion_tokens: Sequence[int], wall_seconds: float,
    batch_sequences: int = 0, model: str = "", reasoning_tokens: int = 0,
) -> Usage:
    """Usage of one request: the prompt is counted once for its ``n`` samples.

    ``batch_sequences`` is the number of sequences of the whole engine call this request was part
    of (0 when unknown), so that the cost model can share each decode step's weight read.
    ``model`` names the model that served it when that is not the run's policy (a PRM, a judge).
    ``reasoning_tokens``: of the completion tokens, those inside thinking sections.
    """
    lengths = tuple(int(t) for t in completion_tokens)
    return Usage(
        prompt_tokens=prompt_tokens,
        cached_prompt_tokens=cached_tokens,
        completion_tokens=sum(lengths),
        wall_seconds=wall_seconds,
        calls=1,
        shapes=(RequestShape(prompt_tokens, cached_tokens, lengths, batch_sequences, model),),
        reasoning_tokens=reasoning_tokens,
    )


def split_wall_time(total_seconds: float, weights: Sequence[int]) -> list[float]:
    """Share the wall time of one batched call among its requests, by generated tokens.

    A batched engine call has no per-request wall time; tokens are the best proxy for who used it.
    """
    total = sum(weights)
    if total <= 0:
        return [total_seconds / max(len(weights), 1)] * len(weights)
    return [total_seconds * w / total for w in weights]
