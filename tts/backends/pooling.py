"""A client for vLLM's pooling endpoint: reward models (PRMs, outcome RMs) served over HTTP.

A user with a GPU box runs the reward model as a vLLM pooling server (``--runner pooling``) next
to the policy's server; tts then scores through ``POST /pooling`` (the route sits at the server's
root, beside ``/v1``). One request carries many prompts as token ids, so tts renders and tokenises
items itself, exactly as its in-process engine does, and the server reads them verbatim (no
template, no special tokens added). The answer holds, per prompt, the pooled output of the task
asked: for ``token_classify`` with step pooling one row of class probabilities per step tag, for
``classify`` one vector of class probabilities.

Like the generation backend (:mod:`tts.backends.openai`), every attempt is bounded by
``timeout`` (and the request by ``deadline``), 408/409/425/429/5xx, timeouts, dropped connections
and malformed answers are retried with jittered exponential back-off, and a circuit breaker shared
by every request to the server turns a server that keeps failing into one fast error; all of it is
:mod:`tts.backends.resilience`. Refusals a retry cannot fix (400, 401, 404) fail at once with the
server's own message.

One ``pool`` call is one HTTP request, unless it holds more than ``max_batch_items`` prompts or
``max_batch_tokens`` tokens: then it is cut into chunks that are sent one after the other.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tts.backends.base import BackendError, split_wall_time
from tts.backends.resilience import (
    Attempt,
    CircuitBreaker,
    CircuitOpenError,
    abortable_http_client,
    attempt_scope,
    backoff_delay,
    shown_url,
)

logger = logging.getLogger(__name__)


class InProcessPoolingConfig(BaseModel):
    """The verifier's own vLLM pooling engine, in this process (the default); its engine settings
    are the verifier config's own fields (``max_model_len``, ``kv_cache_gib``, ``dtype``, ...)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["vllm"] = "vllm"


class PoolingServerConfig(BaseModel):
    """A vLLM OpenAI-compatible server running the reward model as a pooling model.

    The fields it shares with the generation backend's ``OpenAIBackendConfig`` mean the same and
    have the same defaults. The server is started with the pooling flags of the model's adapter
    (``tts.verifiers.prm_adapters.pooler_server_args``, shown in docs/strategies.md).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["openai"] = "openai"
    base_url: str = "http://127.0.0.1:8000/v1"
    """Server URL, as for the generation backend (up to and including /v1); the pooling route
    ``/pooling`` is at the server's root, so a trailing /v1 is dropped for it."""
    api_key: str = "EMPTY"
    """API key; local vLLM servers accept anything (a server started with --api-key checks it). A
    run saves its config, key included: prefer ``api_key_env``."""
    api_key_env: str | None = None
    """Name of an environment variable holding the API key (keeps the key out of config files);
    takes precedence over ``api_key``."""
    tokenizer: str | None = None
    """Where tts finds the reward model's tokenizer and config.json (a hub id or a local
    directory): items are tokenised here, and the prefill is priced on that architecture. None:
    the verifier's ``model`` (then also the name the server serves)."""
    timeout: float = Field(120.0, gt=0)
    """Seconds to wait for one HTTP response."""
    max_retries: int = Field(3, ge=0, le=20)
    """Retries with exponential back-off and jitter on 429, 5xx, timeouts, dropped connections and
    malformed answers."""
    deadline: float | None = Field(None, gt=0)
    """Seconds one request may take in all, its retries and back-off included (None: up to
    ``(max_retries + 1) * timeout`` plus back-off)."""
    backoff: float = Field(0.5, ge=0, le=60)
    """First retry waits up to this many seconds (full jitter), doubling per retry up to 30 s."""
    breaker_failures: int = Field(5, ge=1)
    """Different requests that failed in a row (each counts once, however often retried) that open the
    circuit breaker: later requests fail at once."""
    breaker_cooldown: float = Field(30.0, gt=0)
    """Seconds the open breaker waits before letting one probe request through."""
    max_batch_items: int = Field(256, ge=1)
    """Most prompts in one HTTP request; a larger batch is sent as several requests in a row."""
    max_batch_tokens: int = Field(131072, ge=1)
    """Most prompt tokens in one HTTP request (a prompt longer than this goes alone)."""

    @property
    def pooling_url(self) -> str:
        """The URL of vLLM's pooling route on this server."""
        base = self.base_url.rstrip("/")
        return (base[: -len("/v1")] if base.endswith("/v1") else base) + "/pooling"


@dataclass(frozen=True, slots=True)
class PooledOutput:
    """What the server pooled for one prompt.

    Args:
        data: The pooled output as sent: a list of rows (token tasks) or one vector (classify).
        prompt_tokens: Tokens of the prompt (what the server prefilled).
        wall_seconds: This prompt's share of its request's wall time (by tokens).
    """

    data: list[Any]
    prompt_tokens: int
    wall_seconds: float


def chunk_prompts(lengths: Sequence[int], max_items: int, max_tokens: int) -> list[range]:
    """Consecutive index ranges, each within ``max_items`` prompts and ``max_tokens`` tokens (a
    prompt longer than ``max_tokens`` alone)."""
    chunks: list[range] = []
    start, tokens = 0, 0
    for i, n in enumerate(lengths):
        if i > start and (i - start >= max_items or tokens + n > max_tokens):
            chunks.append(range(start, i))
            start, tokens = i, 0
        tokens += n
    if start < len(lengths):
        chunks.append(range(start, len(lengths)))
    return chunks


class _Status(Exception):
    """The server answered with an error status."""

    def __init__(self, status: int, message: str, retry_after: float | None) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message
        self.retry_after = retry_after


class _Malformed(Exception):
    """The server answered 200 with a body that is not a pooling response for these prompts."""


class _GaveUp(Exception):
    def __init__(self, attempts: int, last: BaseException, deadline: bool) -> None:
        super().__init__(f"gave up after {attempts} attempts: {last}")
        self.attempts, self.last, self.deadline = attempts, last, deadline


def _error_message(response: Any) -> str:
    """The server's own words from an error body (vLLM: ``{"error": {"message": ...}}``)."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:300] or response.reason_phrase
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            for key in ("message", "detail"):
                if err.get(key):
                    return str(err[key])[:500]
        elif isinstance(err, str):
            return err[:500]
    return str(body)[:300]


def _retry_after(response: Any) -> float | None:
    value = response.headers.get("retry-after")
    try:
        return min(float(value), 30.0) if value is not None else None
    except ValueError:
        return None


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def parse_pooling_response(payload: Any, n: int, task: str) -> list[list[Any]]:
    """Each prompt's pooled output from a ``/pooling`` answer, in prompt order.

    Raises:
        _Malformed: Not a pooling response of ``n`` outputs of the shape ``task`` gives (rows of
            numbers for token tasks, a vector of numbers for ``classify``).
    """
    if not isinstance(payload, dict) or not isinstance(payload.get("data"), list):
        raise _Malformed(f"no 'data' list in the answer (got {str(payload)[:200]!r})")
    entries = payload["data"]
    if len(entries) != n:
        raise _Malformed(f"{len(entries)} outputs for {n} prompts")
    out: list[list[Any] | None] = [None] * n
    for pos, entry in enumerate(entries):
        index = entry.get("index", pos) if isinstance(entry, dict) else None
        data = entry.get("data") if isinstance(entry, dict) else None
        if not isinstance(index, int) or not 0 <= index < n or out[index] is not None:
            raise _Malformed(f"output {pos} has index {index!r} (expected each of 0..{n - 1} once)")
        if isinstance(data, str):
            raise _Malformed("the outputs are encoded (base64); tts asks for encoding_format 'float'")
        token_task = task.startswith("token_")
        ok = isinstance(data, list) and (
            all(isinstance(r, list) and all(_is_number(x) for x in r) for r in data) if token_task
            else all(_is_number(x) for x in data))
        if not ok:
            shape = "a list of rows of numbers" if token_task else "a list of numbers"
            raise _Malformed(f"output {index} is not {shape} (task {task}): {str(data)[:120]}")
        out[index] = data
    return out  # type: ignore[return-value]


class PoolingClient:
    """Sends tokenised prompts to a vLLM server's ``/pooling`` route, with retries and a breaker.

    Args:
        config: The server, its key, and the retry, breaker and chunking settings.
        model: The model name the server serves (its ``--served-model-name`` or ``--model``).

    Raises:
        BackendError: (at construction) ``api_key_env`` names a variable that is not set.
    """

    def __init__(self, config: PoolingServerConfig, model: str) -> None:
        self.config = config
        self.model = model
        key = config.api_key
        if config.api_key_env is not None:
            key = os.environ.get(config.api_key_env, "")
            if not key:
                raise BackendError(f"api_key_env is {config.api_key_env!r}, but that environment variable is not "
                                   "set (or empty). Export it, or give api_key instead.")
        self._headers = {"Authorization": f"Bearer {key}"}
        self._http = abortable_http_client(config.timeout)
        self.breaker = CircuitBreaker(config.breaker_failures, config.breaker_cooldown)
        self._rng = random.Random()
        self._lock = threading.Lock()
        self.attempts = 0
        self.retries = 0
        self.requests = 0

    @property
    def url(self) -> str:
        return self.config.pooling_url

    def pool(self, prompts: Sequence[Sequence[int]], task: str) -> list[PooledOutput]:
        """Pool every prompt (token ids) under ``task``; outputs in prompt order.

        Raises:
            BackendError: A request failed for good; the message says what to change.
        """
        lengths = [len(p) for p in prompts]
        outputs: list[PooledOutput] = []
        for chunk in chunk_prompts(lengths, self.config.max_batch_items, self.config.max_batch_tokens):
            body = {"model": self.model, "input": [list(prompts[i]) for i in chunk], "task": task,
                    "encoding_format": "float"}
            start = time.perf_counter()
            try:
                data = self._request(body, len(chunk), task)
            except Exception as exc:
                raise self._translate(exc, task) from exc
            walls = split_wall_time(time.perf_counter() - start, [lengths[i] for i in chunk])
            outputs += [PooledOutput(d, lengths[i], w) for d, i, w in zip(data, chunk, walls, strict=True)]
        return outputs

    def _attempt(self, body: dict[str, Any], n: int, task: str) -> list[list[Any]]:
        """One HTTP attempt, parsed."""
        response = self._http.post(self.url, json=body, headers=self._headers)
        if response.status_code != 200:
            raise _Status(response.status_code, _error_message(response), _retry_after(response))
        try:
            payload = response.json()
        except ValueError as exc:
            raise _Malformed(f"not JSON ({exc})") from exc
        return parse_pooling_response(payload, n, task)

    @staticmethod
    def _retryable(exc: BaseException) -> bool:
        import httpx

        if isinstance(exc, (httpx.TimeoutException, httpx.TransportError, _Malformed)):
            return True
        return isinstance(exc, _Status) and (exc.status in (408, 409, 425, 429) or exc.status >= 500)

    def _request(self, body: dict[str, Any], n: int, task: str) -> list[list[Any]]:
        """One request with retries, back-off and the breaker, within its deadline."""
        c = self.config
        deadline = None if c.deadline is None else time.monotonic() + c.deadline
        with self._lock:
            self.requests += 1
        attempt = 0
        while True:
            wait = c.timeout if deadline is None else max(0.0, min(c.timeout, deadline - time.monotonic()))
            self.breaker.before(wait)  # CircuitOpenError when the server keeps failing
            with self._lock:
                self.attempts += 1
            try:
                with attempt_scope(Attempt(deadline)):
                    result = self._attempt(body, n, task)
            except Exception as exc:
                if not self._retryable(exc):
                    self.breaker.success()  # the server answered: it is up, the request is wrong
                    raise
                self.breaker.failure(_describe(exc, c.timeout), source=body)  # a request's retries count once
                attempt += 1
                late = deadline is not None and time.monotonic() >= deadline
                if attempt > c.max_retries or late:
                    raise _GaveUp(attempt, exc, late) from exc
                delay = (exc.retry_after if isinstance(exc, _Status) else None) or backoff_delay(
                    attempt, c.backoff, rng=self._rng)
                if deadline is not None and time.monotonic() + delay >= deadline:
                    raise _GaveUp(attempt, exc, True) from exc
                logger.info("%s: attempt %d failed (%s); retrying in %.2f s", self.url, attempt,
                            _describe(exc, c.timeout), delay)
                with self._lock:
                    self.retries += 1
                time.sleep(delay)
                continue
            self.breaker.success()
            return result

    def _translate(self, exc: BaseException, task: str) -> BackendError:
        import httpx

        url = shown_url(self.url)
        if isinstance(exc, CircuitOpenError):
            return BackendError(f"The pooling server at {url} is failing, so tts stopped calling it for now: {exc}. "
                                "Check that it is up and not overloaded (raise breaker_failures to tolerate more).")
        tries = ""
        if isinstance(exc, _GaveUp):
            if exc.deadline:
                return BackendError(f"The pooling server at {url} did not answer within the request deadline of "
                                    f"{self.config.deadline:g} s ({exc.attempts} attempt(s), last: "
                                    f"{_describe(exc.last, self.config.timeout)}). Check the server or raise deadline.")
            tries = f" after {exc.attempts} attempts"
            exc = exc.last
        if isinstance(exc, httpx.TimeoutException):
            return BackendError(f"The pooling server at {url} did not answer within {self.config.timeout:g} s{tries}. "
                                "Raise the timeout, or lower max_batch_items / max_batch_tokens.")
        if isinstance(exc, httpx.TransportError):
            return BackendError(f"Cannot reach a pooling server at {url}{tries} ({type(exc).__name__}: {exc}). Start "
                                "one (`python -m vllm.entrypoints.openai.api_server --model ... --runner pooling "
                                "...`, see docs/strategies.md) or fix base_url.")
        if isinstance(exc, _Status):
            if exc.status == 404:
                return BackendError(f"The server at {url} answered 404 ({exc.message}): it serves no pooling model "
                                    f"named {self.model!r}. Start it with --runner pooling and the model's pooler "
                                    "flags, and give the verifier the name it serves (GET /v1/models).")
            if exc.status in (401, 403):
                return BackendError(f"The pooling server at {url} refused the API key (HTTP {exc.status}: "
                                    f"{exc.message}). Set api_key or api_key_env to the server's --api-key.")
            hint = (f" The server must run the model with --pooler-config task {task} (see the adapter's flags "
                    "in docs/strategies.md)." if exc.status == 400 and "task" in exc.message.lower() else "")
            return BackendError(f"The pooling server at {url} refused the request{tries}: HTTP {exc.status}: "
                                f"{exc.message}.{hint}")
        if isinstance(exc, _Malformed):
            return BackendError(f"The server at {url} sent answers tts cannot read{tries}: {exc}. Is it a vLLM "
                                f"server running a pooling model (task {task})?")
        return BackendError(f"Pooling request to {url} failed{tries}: {type(exc).__name__}: {exc}")

    def close(self) -> None:
        """Close the HTTP client; closing twice is harmless."""
        self._http.close()


def _describe(exc: BaseException, timeout: float) -> str:
    import httpx

    if isinstance(exc, httpx.TimeoutException):
        return f"no answer within {timeout:g} s"
    if isinstance(exc, httpx.TransportError):
        return "connection failed or dropped"
    if isinstance(exc, (_Status, _Malformed)):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"
