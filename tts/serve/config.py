"""What a ``tts serve`` instance allows: API key, size and compute limits, concurrency, and the
strategies, verifiers and calibrations requests may name (:mod:`tts.serve.policy`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class ServeConfig(BaseModel):
    """Limits and settings of one server; every limit refuses with a 4xx that names it.

    Defaults suit one small engine; raise them for a big GPU.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    model: str = Field("smollm2-135m", min_length=1)
    """The model name clients write after the strategy (``sc-16/<model>``)."""
    default_strategy: str = "sc-8"
    """Strategy of a request whose model name has none (``<model>`` alone), in model-name form."""
    stop: dict[str, Any] | None = None
    """The per-request stop of requests that name none, for the strategies that take one
    (:class:`tts.config.StopConfig` settings, e.g. ``{"rule": "horizon", "wave": 8}``): a request
    sends ``tts.stop: false`` to draw all n. None: every sample is drawn."""
    prompt: Literal["plain", "math"] = "plain"
    """The prompt of a request that sets no ``tts.prompt``: "plain" sends the conversation as the
    client sent it (an agent's chat, its tools and tool results; answers in free text, tool calls or
    JSON); "math" asks the last question step by step with the answer in \\boxed{} (a math solver)."""
    api_key: str | None = None
    """When set, every /v1 request must send ``Authorization: Bearer <key>`` (compared in
    constant time); /health and /metrics stay open."""
    docs: bool = True
    """Serve the OpenAPI schema at /openapi.json (behind ``api_key`` when one is set) and, on a server
    without a key, its browsable page at /docs (a browser cannot send the key)."""
    max_body_bytes: int = Field(1 << 20, ge=1024)
    """Largest request body; larger ones get 413."""
    body_timeout: float = Field(30.0, gt=0)
    """Seconds a client has to send its whole request body; a slower (or stalled) upload gets 408
    and its connection is closed, so stalled uploads cannot hold connections open."""
    max_json_depth: int = Field(64, ge=2, le=512)
    """Deepest nesting of arrays and objects in a request body; deeper bodies get 400 before they are
    parsed (Python's JSON parser would overflow its recursion limit near 1,000)."""
    strategies: tuple[str, ...] | None = None
    """Strategies requests may run (registered names). None: every registered strategy whose config
    is complete with the operator's settings (``auto`` only with a calibration, ``graph`` only with
    a graph)."""
    allow_code_execution: bool = False
    """Whether requests may run strategies that execute model-written programs (``program_vote``,
    ``tir``, ``exec_vote``, ``public_tests``, ``codet``, ``revision`` with execution feedback). They
    run in the bubblewrap sandbox, never unsandboxed for a request; off by default, since a client
    then chooses what code the model writes and this host runs (``tts serve --allow-code-execution``)."""
    verifiers: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Verifiers requests may name, besides those that need no model of their own (arithmetic, judge,
    logprob, self_certainty): name -> verifier config (``{"kind": "prm", "model": "/models/prm"}``).
    A request names one (``"verifier": "prm7b"``) and may change only its numbers and choices."""
    calibrations: dict[str, str] = Field(default_factory=dict)
    """Calibrations requests may name for ``auto``: name -> calibration source (a sample pool, past
    ``tts eval`` run or ``tts sweep`` directory). A request sends the name, never a path."""
    max_choices: int = Field(8, ge=1)
    """Largest ``n`` (choices per request, each an independent solve)."""
    max_samples: int = Field(64, ge=1)
    """Largest strategy ``n`` (samples or search candidates per solve)."""
    max_tokens: int = Field(4096, ge=1)
    """Largest ``max_tokens`` per sample."""
    max_budget_tokens: int = Field(1_000_000, ge=1)
    """Largest compute one request may spend, in generated tokens at their worst case: a budget
    above it (after conversion from eFLOPs, seconds or dollars) and a request whose strategy could
    spend more without a budget are both refused."""
    max_concurrent: int = Field(256, ge=1)
    """Requests solved at once; more get 429 with Retry-After."""
    retry_after: int = Field(1, ge=0)
    """Seconds a 429 tells the client to wait."""
    max_prompts: int = Field(16, ge=1)
    """Most prompts in one /v1/completions request (a list of prompts)."""
    rate_limit_tokens: int | None = Field(None, ge=1)
    """Most generated tokens per minute for each API key (for the whole server without a key): a
    token bucket of this size refilled at this rate per minute. A request reserves its worst case
    (its budget, or this server's per-request cap) and gets back what it did not spend; past the
    bucket it gets 429 with the seconds until the bucket holds its reservation. None: no limit."""
