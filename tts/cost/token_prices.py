"""Per-token prices of hosted models (Anthropic, Gemini, OpenAI, Bedrock, ...), from LiteLLM's table.

tts prices the models it runs itself by GPU time (:mod:`tts.cost.prices`, the cost model): that
needs the model's architecture, which a hosted model does not publish, and its provider bills
tokens anyway. For those, the price is LiteLLM's model table (``litellm.model_cost``, shipped with
the installed LiteLLM and read offline: tts sets ``LITELLM_LOCAL_MODEL_COST_MAP`` so that importing
LiteLLM does not fetch the newest table from GitHub). A prompt's cached tokens (a provider's prompt
cache, OpenAI's and Anthropic's alike) are billed at the table's ``cache_read_input_token_cost``
where it has one, else at the full input price.

Example:
    >>> price = TokenPrice(3e-6, 3e-7, 1.5e-5, "example")
    >>> round(price.usd(prompt_tokens=1000, cached_prompt_tokens=800, completion_tokens=100), 6)
    0.00234
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import Any

LOCAL_TABLE_ENV = "LITELLM_LOCAL_MODEL_COST_MAP"
"""LiteLLM reads its bundled price table, not GitHub's, when this is set before it is imported."""


@dataclass(frozen=True, slots=True)
class TokenPrice:
    """US dollars per token of one hosted model.

    Args:
        input_usd: Per prompt token not read from the provider's cache.
        cached_input_usd: Per prompt token read from the cache.
        output_usd: Per generated token (reasoning tokens included: providers bill them as output).
        source: Where the numbers come from.
    """

    input_usd: float
    cached_input_usd: float
    output_usd: float
    source: str

    def usd(self, prompt_tokens: int, cached_prompt_tokens: int, completion_tokens: int) -> float:
        """Dollars for one request's (or a run's) tokens; ``cached_prompt_tokens`` are part of ``prompt_tokens``."""
        cached = min(max(cached_prompt_tokens, 0), prompt_tokens)
        return ((prompt_tokens - cached) * self.input_usd + cached * self.cached_input_usd
                + completion_tokens * self.output_usd)


def import_litellm() -> Any:
    """LiteLLM, imported to read its bundled tables only (no network at import), without its
    telemetry and its banner lines; ImportError when it is not installed."""
    os.environ.setdefault(LOCAL_TABLE_ENV, "True")
    # pydantic says, once per LiteLLM payload type it builds, that `ReadOnly` items are not protected:
    # LiteLLM's concern, and noise on a tts user's terminal.
    warnings.filterwarnings("ignore", message=r"Items? .* on TypedDict class .* using the `ReadOnly` qualifier",
                            category=UserWarning)
    import litellm

    litellm.telemetry = False
    litellm.suppress_debug_info = True
    return litellm


def litellm_entry(model: str) -> dict[str, Any] | None:
    """LiteLLM's table entry of ``model`` (``provider/model``, or the bare name the table uses for
    the big providers' models), or None when LiteLLM is not installed or does not list it."""
    try:
        litellm = import_litellm()
    except ImportError:
        return None
    table = litellm.model_cost
    for key in (model, model.split("/", 1)[-1]):
        entry = table.get(key)
        if isinstance(entry, dict) and entry.get("input_cost_per_token") is not None:
            return entry
    return None


def token_price(model: str) -> TokenPrice | None:
    """The per-token price of hosted ``model`` from LiteLLM's table; None where it lists none.

    Example:
        >>> price = token_price("anthropic/claude-sonnet-4-5")  # doctest: +SKIP
        >>> price.input_usd, price.cached_input_usd, price.output_usd  # doctest: +SKIP
        (3e-06, 3e-07, 1.5e-05)
    """
    entry = litellm_entry(model)
    if entry is None:
        return None
    full = float(entry["input_cost_per_token"])
    cached = entry.get("cache_read_input_token_cost")
    return TokenPrice(full, full if cached is None else float(cached), float(entry.get("output_cost_per_token") or 0.0),
                      f"LiteLLM's model table ({entry.get('source') or 'litellm.model_cost'})")
