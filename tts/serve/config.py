"""What a ``tts serve`` instance allows: API key, size and compute limits, concurrency."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ServeConfig(BaseModel):
    """Limits and settings of one server; every limit refuses with a 4xx that names it.

    Defaults suit one small engine; raise them for a big GPU.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str = Field("smollm2-135m", min_length=1)
    """The model name clients write after the strategy (``sc-16/<model>``)."""
    default_strategy: str = "sc-8"
    """Strategy of a request whose model name has none (``<model>`` alone), in model-name form."""
    api_key: str | None = None
    """When set, every /v1 request must send ``Authorization: Bearer <key>`` (compared in
    constant time); /health and /metrics stay open."""
    max_body_bytes: int = Field(1 << 20, ge=1024)
    """Largest request body; larger ones get 413."""
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
