"""Backend for any OpenAI-compatible server (``vllm serve``, SGLang, hosted APIs).

Uses the official ``openai`` client, which retries 429 / 5xx / connection errors with exponential
back-off (``max_retries``) and enforces a per-request ``timeout``. Requests of one batch run
concurrently in a thread pool; results come back in request order. A partial assistant message is
continued with vLLM's ``continue_final_message`` chat extension. Logprobs are always requested
(top 0 unless a request asks for ``top_logprobs``): they give each choice's token count and mean
logprob, which the usage ledger needs.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import time
from collections.abc import Sequence
from typing import Any

from tts.backends.base import (
    BackendError,
    Completion,
    GenerationRequest,
    GenerationResult,
    merge_top_logprobs,
    request_usage,
)
from tts.config import OpenAIBackendConfig

logger = logging.getLogger(__name__)


class OpenAIGenerator:
    """Generator talking to an OpenAI-compatible chat-completions endpoint.

    Args:
        config: Server URL, model name, timeout, retries and concurrency.

    Raises:
        BackendError: (on generate) the server is unreachable, timed out, or does not serve the
            model; the message says what to change.
    """

    def __init__(self, config: OpenAIBackendConfig | None = None) -> None:
        import openai

        self.config = config or OpenAIBackendConfig()
        self.model_name = self.config.model
        self._openai = openai
        self.client = openai.OpenAI(
            base_url=self.config.base_url,
            api_key=self.config.api_key,
            timeout=self.config.timeout,
            max_retries=self.config.max_retries,
        )

    @classmethod
    def from_config(cls, config: OpenAIBackendConfig, problems: Sequence[Any] = ()) -> OpenAIGenerator:
        """Build from a backend config (problems are not needed)."""
        return cls(config)

    def _one(self, req: GenerationRequest) -> GenerationResult:
        messages: list[dict[str, str]] = [{"role": m.role, "content": m.content} for m in req.messages]
        extra: dict[str, Any] = {}
        if req.continuation:
            messages.append({"role": "assistant", "content": req.continuation})
            extra = {"continue_final_message": True, "add_generation_prompt": False}
        start = time.perf_counter()
        response = self.client.chat.completions.create(
            model=self.config.model,
            messages=messages,  # type: ignore[arg-type]
            n=req.n,
            temperature=req.temperature,
            top_p=req.top_p,
            max_tokens=req.max_tokens,
            stop=list(req.stop) or None,
            seed=req.seed,
            logprobs=True,
            top_logprobs=req.top_logprobs,
            extra_body=extra or None,
        )
        wall = time.perf_counter() - start
        completions = []
        for choice in sorted(response.choices, key=lambda c: c.index):
            content = choice.logprobs.content if choice.logprobs and choice.logprobs.content else []
            n_tok = len(content)
            mean_lp = sum(t.logprob for t in content) / n_tok if n_tok else None
            token_lps = tuple(float(t.logprob) for t in content) if n_tok else None
            first_top = None
            if req.top_logprobs and content:
                first_top = merge_top_logprobs((t.token, t.logprob) for t in (content[0].top_logprobs or ()))
            completions.append(Completion(choice.message.content or "", n_tok, mean_lp, choice.finish_reason,
                                          token_lps, first_top))
        usage = response.usage
        prompt_tokens = usage.prompt_tokens if usage else 0
        details = getattr(usage, "prompt_tokens_details", None) if usage else None
        cached = (getattr(details, "cached_tokens", None) or 0) if details else 0
        if usage and not any(c.completion_tokens for c in completions) and completions:
            # Server returned no logprobs: share its completion count evenly.
            share = usage.completion_tokens // len(completions)
            completions = [Completion(c.text, share, None, c.finish_reason) for c in completions]
        return GenerationResult(
            tuple(completions),
            request_usage(prompt_tokens, cached, [c.completion_tokens for c in completions], wall),
        )

    def _translate(self, exc: Exception) -> BackendError:
        o = self._openai
        url = self.config.base_url
        if isinstance(exc, o.APITimeoutError):
            return BackendError(
                f"The server at {url} did not answer within {self.config.timeout:g} s "
                f"(after {self.config.max_retries} retries). Raise the timeout or lower the concurrency."
            )
        if isinstance(exc, o.APIConnectionError):
            return BackendError(
                f"Cannot reach an OpenAI-compatible server at {url} (after {self.config.max_retries} "
                "retries). Start one (e.g. `python -m vllm.entrypoints.openai.api_server --model ... "
                "--port 8000`) or pass the right --base-url."
            )
        if isinstance(exc, o.NotFoundError):
            return BackendError(
                f"The server at {url} does not serve model {self.config.model!r} ({exc}). Pass the "
                "name listed by GET /v1/models with --model."
            )
        if isinstance(exc, o.APIStatusError):
            return BackendError(f"The server at {url} refused the request: HTTP {exc.status_code}: {exc.message}")
        return BackendError(f"Request to {url} failed: {exc}")

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """Send the requests concurrently; results in request order."""
        if not requests:
            return []
        with cf.ThreadPoolExecutor(self.config.concurrency) as pool:
            futures = [pool.submit(self._one, r) for r in requests]
            try:
                return [f.result() for f in futures]
            except self._openai.OpenAIError as exc:
                for f in futures:
                    f.cancel()
                raise self._translate(exc) from exc

    def close(self) -> None:
        """Close the HTTP client."""
        self.client.close()
