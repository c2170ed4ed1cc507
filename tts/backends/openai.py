"""Backend for any OpenAI-compatible server (``vllm serve``, SGLang, hosted APIs, ``tts serve``).

Uses the official ``openai`` client with its own retries off: tts retries 429, 5xx, timeouts,
dropped connections and malformed answers itself, with exponential back-off and full jitter, and
a circuit breaker shared by every request to the server (:mod:`tts.backends.resilience`), which
counts failed calls, not attempts: one call whose request the server drops or fails on every retry
counts once, so it cannot open the breaker for everyone else alone. Each HTTP attempt is bounded by
``timeout``, so a call ends within about ``(max_retries + 1) * timeout`` plus back-off, with results
or a :class:`BackendError` that says what failed and what to change (naming the server's URL,
without credentials); never a hang. Refusals that a retry cannot fix (400, 401, 404, 413, 422)
fail at once and do not count against the breaker.

Requests run concurrently in a thread pool shared by every call (``concurrency`` requests in
flight at once, across calls); results come back in request order; the first request that fails
for good stops the others. The generator takes concurrent calls (``concurrent_calls``): a
:class:`~tts.session.Session` calls it from each solve's thread rather than batching solves into
one call, so a slow or hanging request never holds up another solve's. A call given ``cancel``
(an Event) aborts its requests in flight once it is set: their connections are shut down, which
makes vLLM abort them and free their KV cache; ``aborted_requests`` and ``aborted_max_tokens``
(the most tokens they could still have generated) count what that saved. ``deadline`` bounds a
request's attempts, back-off included: every read waits at most until it. A partial assistant message is continued
with vLLM's ``continue_final_message`` chat extension. Logprobs are always requested (top 0 unless
a request asks for ``top_logprobs``): they give each choice's token count and mean logprob, which
the usage ledger needs.

Thinking models: a reasoning section that the server returns apart (``reasoning_content`` /
``reasoning``, from vLLM's ``--reasoning-parser``) is put back in front of the text as
``<think>...</think>``; each choice's reasoning tokens are counted from its logprob tokens up to the
end delimiter, and the request's from the server's ``usage.completion_tokens_details`` where it
sends them. A request's ``thinking_budget`` is sent only when the config says how the server takes
one (``thinking_budget``: vLLM's ``thinking_token_budget`` or SGLang's
``custom_params.thinking_budget``); whether a remote server enforces it cannot be probed reliably,
so ``supports_thinking_budget`` is that setting, not a measurement. Whether the budget ended a
thought is judged from the choice's reasoning tokens plus the open thought of the prompt, counted
in words (the server's tokenizer is not at hand): exact for the usual ``<think>\n`` opening,
approximate after a long re-sent thought.

Streaming (:mod:`tts.backends.openai_stream`): :meth:`OpenAIGenerator.stream_samples` yields each
sample as its choice finishes and cancels the rest by closing their streams; ``generate`` streams
requests with a ``confidence_stop`` (DeepConf online), closing a sample's stream once its group
confidence falls below the threshold, so ``supports_confidence_stop`` holds.

A server that returns fewer choices than the ``n`` asked for (many hosted APIs and some proxies
allow only one) is not an error: the backend warns once, then sends such requests as ``n``
one-sample requests (seeds ``seed + i`` where a seed is given) and merges them, so every strategy
still gets its ``n`` samples; the prompt is then billed ``n`` times, as the server bills it.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import json
import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from tts.answers.reasoning import THINK_CLOSE, THINK_OPEN, thought_left_open
from tts.backends.base import (
    BackendError,
    Completion,
    GenerationRequest,
    GenerationResult,
    greedy_repeats,
    merge_top_logprobs,
    request_usage,
    split_wall_time,
)
from tts.backends.chat import ToolCall
from tts.backends.openai_stream import OpenAISampleStream, generate_streamed
from tts.backends.tool_calls import reply_tool_calls
from tts.backends.thinking import ThoughtSplit, count_reasoning_tokens, split_token_texts, text_tokens
from tts.backends.resilience import (
    Attempt,
    AttemptGroup as _Call,
    Malformed as _Malformed,
    Stopped as _Stopped,
    CircuitBreaker,
    CircuitOpenError,
    abortable_http_client,
    attempt_scope,
    backoff_delay,
    shown_url,
    wait_for_all,
)
from tts.config import OpenAIBackendConfig

logger = logging.getLogger(__name__)




def _reply_calls(req: GenerationRequest, message: Any, text: str,
                 finish_reason: str | None = None) -> tuple[tuple[ToolCall, ...] | None, str | None]:
    """The checked calls of one upstream choice to a request with tools: the server's parsed
    ``message.tool_calls`` (vLLM with ``--enable-auto-tool-choice``), else tts's lenient reader on the
    content (a server started without a tool parser returns the call as text); (None, None) without
    tools. A choice that ``max_tokens`` cut (``finish_reason`` "length") holds no call, whatever the
    server parsed from it (OpenAI's API returns the cut arguments as they are)."""
    if req.tools is None:
        return None, None
    parsed = []
    for call in getattr(message, "tool_calls", None) or ():
        fn = getattr(call, "function", None)
        if fn is not None and isinstance(getattr(fn, "name", None), str):
            parsed.append(ToolCall(fn.name, getattr(fn, "arguments", None) or "{}", getattr(call, "id", None) or ""))
    return reply_tool_calls(text, req.tools, parsed, finish_reason)


def _thought(req: GenerationRequest, tokens: Sequence[str]) -> ThoughtSplit:
    """A choice's thinking section from its logprob tokens (see the module docstring)."""
    reply = req.continuation
    left_open = thought_left_open(reply)
    prompt_open = left_open is not None
    split = split_token_texts(tokens, prompt_open, THINK_OPEN, THINK_CLOSE)
    if req.thinking_budget is None or not split.closed:
        return split
    in_prompt = text_tokens(left_open) if left_open is not None else 0
    return ThoughtSplit(split.reasoning_tokens, True, in_prompt + split.reasoning_tokens >= req.thinking_budget)



def optional_chat_fields(req: GenerationRequest) -> dict[str, Any]:
    """The Chat Completions fields of ``req`` sent only when set (penalties, logit bias, a JSON
    schema as ``response_format``, tools and ``tool_choice``), so that a server or provider that
    lacks them is not asked; the OpenAI and LiteLLM backends send the same."""
    fields: dict[str, Any] = {}
    if req.presence_penalty:
        fields["presence_penalty"] = req.presence_penalty
    if req.frequency_penalty:
        fields["frequency_penalty"] = req.frequency_penalty
    if req.logit_bias:
        fields["logit_bias"] = {str(t): b for t, b in req.logit_bias}
    if req.json_schema is not None:
        fields["response_format"] = {"type": "json_schema",
                                     "json_schema": {"name": "response", "schema": json.loads(req.json_schema)}}
    if req.tools is not None:  # the upstream renders them with the model's template and parses the calls
        fields["tools"] = json.loads(req.tools)
        if req.tool_choice is not None:
            fields["tool_choice"] = json.loads(req.tool_choice)
    return fields


class OpenAIGenerator:
    """Generator talking to an OpenAI-compatible chat-completions endpoint.

    Args:
        config: Server URL, model name, timeout, retries, back-off, breaker and concurrency.

    Raises:
        BackendError: (on generate) the server is unreachable, timed out, keeps failing, or does
            not serve the model; the message says what to change.
    """

    concurrent_calls = True
    """``generate`` may be called from many threads at once, and takes ``cancel=``."""

    def __init__(self, config: OpenAIBackendConfig | None = None) -> None:
        import openai

        self.config = config or OpenAIBackendConfig()
        self.model_name = self.config.model
        self._openai = openai
        self.client = openai.OpenAI(
            base_url=self.config.base_url,
            api_key=self.config.api_key,
            timeout=self.config.timeout,
            max_retries=0,  # retried here, with jitter and the breaker
            http_client=abortable_http_client(self.config.timeout),
        )
        self._pool = cf.ThreadPoolExecutor(self.config.concurrency, thread_name_prefix="tts-openai")
        self.aborted_requests = 0
        self.aborted_max_tokens = 0
        self.breaker = CircuitBreaker(self.config.breaker_failures, self.config.breaker_cooldown)
        self._rng = random.Random()
        self.attempts = 0
        self.retries = 0
        self._count_lock = threading.Lock()
        self.single_choice = False
        """Set once the server has answered a request of n > 1 with fewer choices."""

    supports_confidence_stop = True
    """Requests with ``confidence_stop`` are streamed and each sample's stream is closed once its
    group confidence falls below the threshold (:mod:`tts.backends.openai_stream`), so DeepConf
    online stops traces while the server generates them."""

    @classmethod
    def from_config(cls, config: OpenAIBackendConfig, problems: Sequence[Any] = ()) -> OpenAIGenerator:
        """Build from a backend config (problems are not needed)."""
        return cls(config)

    @property
    def supports_thinking_budget(self) -> bool:
        """Whether requests' thinking budgets are sent (the config's ``thinking_budget``; see the
        module docstring: the operator's statement about the server, not a probe)."""
        return self.config.thinking_budget != "none"

    @staticmethod
    def _messages(req: GenerationRequest) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The chat messages of ``req`` and the extra body a continued assistant message needs."""
        messages: list[dict[str, Any]] = [m.to_openai() for m in req.messages]  # tool calls and ids kept
        extra: dict[str, Any] = {}
        if req.continuation:
            messages.append({"role": "assistant", "content": req.continuation})
            extra = {"continue_final_message": True, "add_generation_prompt": False}
        return messages, extra

    def _call(self, req: GenerationRequest) -> GenerationResult:
        """One HTTP attempt, parsed; a malformed answer raises ``_Malformed``."""
        messages, extra = self._messages(req)
        start = time.perf_counter()
        try:
            response = self._create(req, messages, extra)
        except json.JSONDecodeError as exc:  # a 200 whose body is not JSON (a proxy's error page)
            raise _Malformed(f"malformed response (not JSON: {exc})") from exc
        wall = time.perf_counter() - start
        try:
            return self._parse(req, response, wall)
        except (AttributeError, TypeError, ValueError, IndexError) as exc:
            raise _Malformed(f"malformed response ({type(exc).__name__}: {exc})") from exc

    def _create(self, req: GenerationRequest, messages: list[dict[str, Any]], extra: dict[str, Any],
                stream: bool = False) -> Any:
        """The chat-completions call of ``req``; ``stream``: a context manager over the raw SSE
        response, whose chunks end with the usage (:mod:`tts.backends.openai_stream`)."""
        optional: dict[str, Any] = {}  # sent only when set, so servers that lack them are not asked
        if stream:
            optional["stream"] = True
            optional["stream_options"] = {"include_usage": True}
        optional.update(optional_chat_fields(req))
        extra = dict(extra)
        if req.thinking_budget is not None:
            if self.config.thinking_budget == "vllm":
                extra["thinking_token_budget"] = req.thinking_budget
            else:  # "sglang" (a request with a budget to a server of "none" is refused in generate)
                extra["custom_params"] = {"thinking_budget": req.thinking_budget}
        if self.config.reasoning_effort is not None:
            extra["reasoning_effort"] = self.config.reasoning_effort
        # A stream is read raw (tts.backends.openai_stream): the SDK's model per chunk costs several times the JSON.
        create = (self.client.chat.completions.with_streaming_response.create if stream
                  else self.client.chat.completions.create)
        return create(
            model=self.config.role_models.get(req.role, self.config.model),
            messages=messages,  # type: ignore[arg-type]
            n=1 if greedy_repeats(req) else req.n,  # vLLM refuses greedy with n > 1: one sample, repeated
            temperature=req.temperature,
            top_p=req.top_p,
            max_tokens=req.max_tokens,
            stop=list(req.stop) or None,
            seed=req.seed if self.config.sends_seeds else None,
            logprobs=True,
            # a confidence stop reads the top k of every position as it arrives
            top_logprobs=max(req.top_logprobs, req.confidence_stop.top_k if req.confidence_stop else 0),
            extra_body=extra or None,
            **optional,
        )

    @property
    def honours_seeds(self) -> bool:
        """Whether request seeds are sent upstream (``request_seeds``); the server may still ignore them."""
        return self.config.sends_seeds

    @staticmethod
    def _parse(req: GenerationRequest, response: Any, wall: float) -> GenerationResult:
        choices = response.choices
        greedy_n = req.n
        repeat = greedy_repeats(req) and isinstance(choices, list) and len(choices) == 1
        if repeat:
            req = dataclasses.replace(req, n=1)
        if isinstance(choices, list) and 1 <= len(choices) < req.n:
            raise FewerChoices(len(choices))
        if not isinstance(choices, list) or len(choices) != req.n:
            raise ValueError(f"asked for {req.n} choices, got {len(choices) if isinstance(choices, list) else choices!r}")
        completions = []
        for choice in sorted(choices, key=lambda c: c.index):
            logprobs = getattr(choice, "logprobs", None)  # LiteLLM's choices lack the field without logprobs
            content = logprobs.content if logprobs and logprobs.content else []
            n_tok = len(content)
            mean_lp = sum(t.logprob for t in content) / n_tok if n_tok else None
            token_lps = tuple(float(t.logprob) for t in content) if n_tok else None
            first_top = None
            top_per_token = None
            if req.top_logprobs and content:
                first_top = merge_top_logprobs((t.token, t.logprob) for t in (content[0].top_logprobs or ()))
                # every position's top alternatives, largest first (DeepConf confidences, self-certainty)
                top_per_token = tuple(tuple(sorted((float(a.logprob) for a in (t.top_logprobs or ())), reverse=True))
                                      for t in content)
                if not any(top_per_token):
                    top_per_token = None  # the server ignored top_logprobs: say "unavailable", not "flat"
            # A reasoning parser upstream (vLLM's --reasoning-parser) returns the reasoning section
            # apart; it is put back in front of the text, where an engine without a parser leaves it.
            reasoning = getattr(choice.message, "reasoning_content", None) or getattr(choice.message, "reasoning", None)
            text = choice.message.content or ""
            if isinstance(reasoning, str) and reasoning:
                text = f"{THINK_OPEN}{reasoning}{THINK_CLOSE}{text}"
            tokens = tuple(str(t.token) for t in content) if n_tok else None
            thought = _thought(req, tokens) if tokens else None
            alternatives = (tuple(tuple((str(a.token), float(a.logprob)) for a in (t.top_logprobs or ()))
                                  for t in content) if req.top_logprobs and n_tok else None)
            calls, call_error = _reply_calls(req, choice.message, text, choice.finish_reason)
            completions.append(Completion(text, n_tok, mean_lp, choice.finish_reason, token_logprobs=token_lps,
                                          first_token_top_logprobs=first_top,
                                          token_top_logprobs=top_per_token, tokens=tokens,
                                          token_alternatives=alternatives,
                                          reasoning_tokens=thought.reasoning_tokens if thought else None,
                                          thinking_capped=thought.capped if thought else None,
                                          tool_calls=calls, tool_call_error=call_error))
        usage = response.usage
        prompt_tokens = usage.prompt_tokens if usage else 0
        details = getattr(usage, "prompt_tokens_details", None) if usage else None
        cached = (getattr(details, "cached_tokens", None) or 0) if details else 0
        if usage and not any(c.completion_tokens for c in completions) and completions:
            # Server returned no logprobs: share its completion count evenly.
            share = usage.completion_tokens // len(completions)
            completions = [dataclasses.replace(c, completion_tokens=share, mean_logprob=None, token_logprobs=None)
                           for c in completions]
        drawn = [c.completion_tokens for c in completions]
        # The server's own count (its reasoning parser) where it sends one, else the choices' counts.
        served = getattr(getattr(usage, "completion_tokens_details", None), "reasoning_tokens", None) if usage else None
        reasoning = int(served) if served else count_reasoning_tokens(completions)
        if repeat:
            completions = completions * greedy_n
        return GenerationResult(tuple(completions),
                                request_usage(prompt_tokens, cached, drawn, wall, reasoning_tokens=reasoning))

    def _retryable(self, exc: BaseException) -> bool:
        """Whether another attempt may succeed: timeouts, dropped connections, 408/409/429/5xx, malformed answers."""
        o = self._openai
        if isinstance(exc, (o.APITimeoutError, o.APIConnectionError, o.APIResponseValidationError, _Malformed)):
            return True
        if isinstance(exc, o.APIStatusError):
            return exc.status_code in (408, 409, 425, 429) or exc.status_code >= 500
        return False

    def _retry_after(self, exc: BaseException) -> float | None:
        """The server's Retry-After (seconds), when it sent one with a 429 or 503."""
        response = getattr(exc, "response", None)
        value = response.headers.get("retry-after") if response is not None else None
        try:
            return min(float(value), 30.0) if value is not None else None
        except ValueError:
            return None

    def _one(self, req: GenerationRequest, call: _Call | None = None,
             deadline: float | None = None, send: Callable[[GenerationRequest], Any] | None = None,
             source: object = None) -> Any:
        """One request with retries, back-off and the breaker, within its deadline; raises the last
        error when they run out (``_Stopped`` once ``call`` is stopped). ``send`` replaces the
        attempt (:meth:`_call`): a streamed request's reader, which splits requests itself.
        ``source``: who the breaker counts a failure against (default: ``call``, else the request);
        the streams of one ``stream_samples`` call count once, as the requests of one generate call do."""
        if deadline is None and self.config.deadline is not None:
            deadline = time.monotonic() + self.config.deadline
        stop = call.stop if call is not None else None
        if send is None and req.n > 1 and self.single_choice:
            return self._one_sample_at_a_time(req, call, deadline)
        attempt = 0
        while True:
            if stop is not None and stop.is_set():
                raise _Stopped()
            wait = self.config.timeout if deadline is None else max(0.0, min(self.config.timeout,
                                                                             deadline - time.monotonic()))
            self.breaker.before(wait)  # CircuitOpenError when the server keeps failing
            with self._count_lock:
                self.attempts += 1
            handle = Attempt(deadline)
            if call is not None:
                call.add(handle)
            try:
                with attempt_scope(handle):
                    result = (send or self._call)(req)
            except FewerChoices as exc:
                self.breaker.success()
                with self._count_lock:
                    first = not self.single_choice
                    self.single_choice = True
                if first:
                    logger.warning("%s returned %d choice(s) for a request of n = %d: it does not sample n > 1 per "
                                   "request, so tts now sends n one-sample requests instead (each bills the prompt)",
                                   self.config.base_url, exc.got, req.n)
                return self._one_sample_at_a_time(req, call, deadline)
            except Exception as exc:
                if handle.aborted:  # the call was stopped: not the server's fault
                    raise _Stopped() from exc
                if not self._retryable(exc):
                    self.breaker.success()  # the server answered: it is up, the request is wrong
                    raise
                # One call's failures count once (its retries, its other requests): a request that
                # makes the server fail every time it is sent cannot open the breaker alone.
                self.breaker.failure(self._describe(exc), source=source if source is not None
                                     else call if call is not None else req)
                attempt += 1
                late = deadline is not None and time.monotonic() >= deadline
                if attempt > self.config.max_retries or late:
                    raise _GaveUp(attempt, exc, deadline=late) from exc
                delay = self._retry_after(exc) or backoff_delay(attempt, self.config.backoff, rng=self._rng)
                if deadline is not None and time.monotonic() + delay >= deadline:
                    raise _GaveUp(attempt, exc, deadline=True) from exc
                logger.info("%s: attempt %d failed (%s); retrying in %.2f s", self.config.base_url, attempt,
                            self._describe(exc), delay)
                with self._count_lock:
                    self.retries += 1
                if stop is not None and stop.wait(delay):
                    raise _Stopped() from exc
                if stop is None:
                    time.sleep(delay)
                continue
            finally:
                if call is not None:
                    call.discard(handle)
            self.breaker.success()
            return result

    def _one_sample_at_a_time(self, req: GenerationRequest, call: _Call | None,
                              deadline: float | None) -> GenerationResult:
        """``req`` as ``n`` one-sample requests (for servers that return one choice), merged in order."""
        parts = [self._one(dataclasses.replace(req, n=1, seed=None if req.seed is None else req.seed + i), call,
                           deadline)
                 for i in range(req.n)]
        usage = parts[0].usage
        for part in parts[1:]:
            usage = usage + part.usage
        return GenerationResult(tuple(c for part in parts for c in part.completions), usage)

    def _describe(self, exc: BaseException) -> str:
        o = self._openai
        if isinstance(exc, o.APITimeoutError):
            return f"no answer within {self.config.timeout:g} s"
        if isinstance(exc, o.APIConnectionError):
            return "connection failed or dropped"
        if isinstance(exc, o.APIStatusError):
            return f"HTTP {exc.status_code}"
        if isinstance(exc, _Malformed):
            return str(exc)
        return f"{type(exc).__name__}: {exc}"

    def _translate(self, exc: BaseException) -> BackendError:
        o = self._openai
        url = shown_url(self.config.base_url)
        if isinstance(exc, CircuitOpenError):
            return BackendError(f"The server at {url} is failing, so tts stopped calling it for now: {exc}. Check "
                                "that it is up and not overloaded (raise breaker_failures to tolerate more failures).")
        tries = ""
        if isinstance(exc, _GaveUp):
            if exc.deadline:
                return BackendError(
                    f"The server at {url} did not answer within the request deadline of {self.config.deadline:g} s "
                    f"({exc.attempts} attempt(s), last: {self._describe(exc.last)}). Check the server, or raise the "
                    "deadline (tts serve --upstream-deadline).")
            tries = f" after {exc.attempts} attempts"
            exc = exc.last
        if isinstance(exc, o.APITimeoutError):
            return BackendError(
                f"The server at {url} did not answer within {self.config.timeout:g} s{tries}. "
                "Raise the timeout or lower the concurrency."
            )
        if isinstance(exc, o.APIConnectionError):
            return BackendError(
                f"Cannot reach an OpenAI-compatible server at {url}{tries} (connection refused or dropped). "
                "Start one (e.g. `python -m vllm.entrypoints.openai.api_server --model ... "
                "--port 8000`) or pass the right --base-url."
            )
        if isinstance(exc, o.NotFoundError):
            return BackendError(
                f"The server at {url} does not serve model {self.config.model!r}"
                + (f" or one of role_models {sorted(set(self.config.role_models.values()))}"
                   if self.config.role_models else "")
                + f" ({exc}). Pass the name listed by GET /v1/models with --model."
            )
        if isinstance(exc, o.APIStatusError):
            return BackendError(f"The server at {url} refused the request{tries}: HTTP {exc.status_code}: {exc.message}")
        if isinstance(exc, _Malformed):
            return BackendError(f"The server at {url} sent answers tts cannot read{tries}: {exc}. Is it an "
                                "OpenAI-compatible chat-completions server?")
        return BackendError(f"Request to {url} failed{tries}: {exc}")

    def _check_thinking(self, requests: Sequence[GenerationRequest]) -> None:
        if not self.supports_thinking_budget and any(r.thinking_budget is not None for r in requests):
            raise BackendError(f"a request asks for a thinking budget, but this backend's thinking_budget is 'none' (the "
                               f"server at {self.config.base_url} is not asked for one); set thinking_budget to 'vllm' "
                               "or 'sglang' if the server enforces one, or leave the budget out")

    def generate(self, requests: Sequence[GenerationRequest],
                 cancel: threading.Event | None = None) -> list[GenerationResult]:
        """Send the requests concurrently; results in request order.

        Requests with a ``confidence_stop`` make the call go through streams (each sample's stream
        closed at the stop; :mod:`tts.backends.openai_stream`).

        Args:
            requests: The prompts.
            cancel: Once set, the requests still in flight are aborted (their connections shut
                down) and the call raises BackendError.

        Raises:
            BackendError: A request failed for good (the others are stopped), or ``cancel`` was set.
        """
        if not requests:
            return []
        self._check_thinking(requests)
        if any(r.confidence_stop is not None for r in requests):  # stopped while they stream
            return generate_streamed(self, requests, cancel)
        call = _Call()
        start = time.perf_counter()
        futures = [self._pool.submit(self._one, r, call) for r in requests]
        finished = False
        try:
            wait_for_all(futures, cancel, self._translate, f"the call to {self.config.base_url} was cancelled")
            results = [f.result() for f in futures]
            finished = True
        finally:
            if not finished:  # stop retries, abort what is in flight, drop what has not started
                left = [(f, r) for f, r in zip(futures, requests, strict=True) if not f.done()]
                with self._count_lock:
                    self.aborted_requests += len(left)
                    self.aborted_max_tokens += sum(r.n * r.max_tokens for _, r in left)
                call.abort()
                for f, _ in left:
                    f.cancel()
        # Concurrent requests overlap in time: their own durations sum to more than the call took.
        # Share the call's elapsed time by generated tokens, as the in-process engine does, so that
        # a run's wall seconds add up to the time it really took.
        shares = split_wall_time(time.perf_counter() - start, [r.usage.completion_tokens for r in results])
        return [dataclasses.replace(r, usage=dataclasses.replace(r.usage, wall_seconds=w))
                for r, w in zip(results, shares, strict=True)]

    def stream_samples(self, requests: Sequence[GenerationRequest]) -> OpenAISampleStream:
        """The requests sent as streams: each sample yielded as it finishes, :meth:`~OpenAISampleStream.cancel`
        closes a request's stream (the server aborts it). Retries as ``generate`` before a stream's
        first chunk; a stream that breaks after output started raises BackendError. Cancelling is
        per request (the n choices of one request share one stream). See :mod:`tts.backends.openai_stream`.

        Raises:
            BackendError: (while iterating) a request failed for good; the other streams are closed.
        """
        self._check_thinking(requests)
        return OpenAISampleStream(self, requests)

    def close(self) -> None:
        """Stop the request threads (once idle) and close the HTTP client."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.client.close()


class FewerChoices(Exception):
    """The server answered with fewer choices than asked: it does not sample n > 1 per request."""

    def __init__(self, got: int) -> None:
        super().__init__(f"{got} choice(s)")
        self.got = got


class _GaveUp(Exception):
    """Retries ran out; carries the attempts made and the last error."""

    def __init__(self, attempts: int, last: BaseException, deadline: bool = False) -> None:
        super().__init__(f"gave up after {attempts} attempts: {last}")
        self.attempts = attempts
        self.last = last
        self.deadline = deadline


def parse_chat_completion(req: GenerationRequest, response: Any, wall: float) -> GenerationResult:
    """A chat-completions reply to ``req`` as a result: texts, token logprobs, thoughts, tool calls
    and usage (the OpenAI SDK's objects, or LiteLLM's, which take the same shape).

    Raises:
        FewerChoices: The reply holds fewer choices than ``req.n`` (a server without n > 1).
        AttributeError, TypeError, ValueError, IndexError: The reply is malformed.
    """
    return OpenAIGenerator._parse(req, response, wall)
