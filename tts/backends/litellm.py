"""Backend for hosted models through LiteLLM: Anthropic, Gemini, Bedrock, Azure, OpenAI, Mistral, ...

``--backend litellm --model anthropic/claude-sonnet-4-5`` (LiteLLM's ``provider/model`` names;
``pip install 'tts-scaling[litellm]'``). LiteLLM turns one OpenAI-shaped chat call into each
provider's API and its reply back into OpenAI's shape, so a reply is read by the OpenAI backend's
parser (:func:`tts.backends.openai.parse_chat_completion`: texts, token logprobs, tool calls,
usage with the prompt tokens a provider's cache served).

Requests go through LiteLLM's ``Router``: it retries a failed request (rate limits, 5xx,
timeouts; ``max_retries``) and then tries the ``fallbacks`` models in order. Requests of one call
run concurrently (``concurrency`` in flight), results in request order.

What is checked before any request, one line each (:class:`~tts.backends.base.BackendError`):

* the model: a provider LiteLLM knows, and a model its table lists (``unlisted_model`` accepts a
  newer one; ``api_base``, a self-hosted server, names its own models), the fallbacks alike;
* the API key: the provider's environment variable (``litellm.validate_environment``) or
  ``api_key``; a self-hosted server on this machine or a private address needs none;
* each request's settings against what the provider takes (``litellm.get_supported_openai_params``,
  over the model and every fallback, since a fallback gets the same request): a request that asks
  for logit bias, penalties, a JSON schema or tools that the provider lacks is refused rather than
  sent without them, and a thinking budget always (no provider takes tts's).

Samples: a provider that takes ``n`` gets one request of ``n``; one that does not (Anthropic) gets
``n`` one-sample requests, sent concurrently with the call's others and merged (each bills the
prompt, as the provider bills it). A reply with fewer choices than ``n`` (a proxy that drops it)
switches the generator to one-sample requests, with one warning. Greedy requests of ``n > 1`` are
sent once and repeated, as every backend does.

Log-probabilities: a provider that returns none (Anthropic, Bedrock's Claude) makes
``returns_logprobs`` False (``logprobs_unavailable`` says why), and strategies whose answers depend
on them (DeepConf, best_of_n and weighted_vote without a verifier, the ``logprob`` and
``self_certainty`` verifiers) are refused when they are built
(:meth:`tts.search.base.Strategy.logprobs_use`), before any request.

Cost: each reply's dollars at LiteLLM's table price of the model that wrote it
(:mod:`tts.cost.token_prices`, cached prompt tokens at the cache-read price) add up in
``spent_usd``; ``token_price`` gives a session's ``cost["dollars"]`` and dollar budgets.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

from tts.backends.base import BackendError, GenerationRequest, GenerationResult, greedy_repeats, split_wall_time
from tts.backends.openai import FewerChoices, optional_chat_fields, parse_chat_completion
from tts.backends.resilience import Stopped, shown_url, wait_for_all
from tts.config import LiteLLMBackendConfig, _is_local_url
from tts.cost.token_prices import TokenPrice, import_litellm, token_price

logger = logging.getLogger(__name__)

INSTALL = "pip install 'tts-scaling[litellm]'"

_OPTIONAL = {  # request field -> the provider parameter that carries it
    "logit_bias": "logit_bias", "presence_penalty": "presence_penalty", "frequency_penalty": "frequency_penalty",
    "json_schema": "response_format", "tools": "tools", "tool_choice": "tool_choice",
}


def _litellm() -> Any:
    try:
        return import_litellm()
    except ImportError:
        raise BackendError(f"the litellm backend needs LiteLLM, which is not installed: {INSTALL}") from None


def deployments(config: LiteLLMBackendConfig) -> list[dict[str, Any]]:
    """LiteLLM's settings of the model and of each fallback, in order (the Router's ``litellm_params``)."""
    main: dict[str, Any] = {**config.litellm_params, "model": config.model}
    if config.api_base is not None:
        main["api_base"] = config.api_base
    if config.api_key is not None:
        main["api_key"] = config.api_key.get_secret_value()
    return [main] + [{"model": f} if isinstance(f, str) else dict(f) for f in config.fallbacks]


def check_model(litellm: Any, params: dict[str, Any], unlisted: bool) -> str:
    """The provider of the deployment ``params``; raises BackendError when LiteLLM knows no such
    provider or model (a model the table lacks passes with an ``api_base`` or ``unlisted``)."""
    model = params["model"]
    try:
        _, provider, _, _ = litellm.get_llm_provider(model, api_base=params.get("api_base"))
    except Exception:  # noqa: BLE001 - LiteLLM raises its BadRequestError with a multi-line text
        raise BackendError(f"LiteLLM knows no provider in model {model!r}: write provider/model with a provider "
                           "LiteLLM reaches (anthropic, gemini, bedrock, azure, openai, mistral, vertex_ai, ...; "
                           "docs.litellm.ai/docs/providers)") from None
    name = model.split("/", 1)[-1]
    # The table itself, not get_model_info: that one guesses entries for unlisted names ("claude-sonet-4-5").
    if params.get("api_base") is None and not unlisted and model not in litellm.model_cost \
            and name not in litellm.model_cost:
        import difflib

        listed = [k.split("/", 1)[-1] for k, v in litellm.model_cost.items()
                  if isinstance(v, dict) and v.get("litellm_provider") == provider]
        close = difflib.get_close_matches(name, listed, n=3, cutoff=0.6)
        hint = f" (close: {', '.join(f'{provider}/{c}' for c in close)})" if close else ""
        raise BackendError(f"LiteLLM's model table lists no {provider} model {name!r}{hint}; fix the name, or set "
                           "unlisted_model: true for a model newer than the installed LiteLLM")
    return str(provider)


def check_key(litellm: Any, params: dict[str, Any]) -> None:
    """Raise BackendError when the deployment ``params`` needs a key that is neither set nor in the
    environment (a server on this machine or a private address, or a canned ``mock_response``, needs none)."""
    api_base = params.get("api_base")
    if params.get("api_key") is not None or "mock_response" in params or (api_base and _is_local_url(api_base)):
        return
    found = litellm.validate_environment(model=params["model"], api_base=api_base,
                                         api_version=params.get("api_version"))
    missing = [k for k in found.get("missing_keys") or () if k.lower() not in params]  # aws_access_key_id given
    if missing:
        raise BackendError(f"{params['model']} needs an API key, and the environment has none of what LiteLLM looks "
                           f"for ({', '.join(missing)}): set it (or api_key in the backend config) and run again")


class LiteLLMGenerator:
    """Generator for any provider LiteLLM reaches (see the module docstring).

    Args:
        config: The model, its fallbacks, key, endpoint, retries, timeout and concurrency.

    Raises:
        BackendError: (at construction, before any request) LiteLLM is not installed, the model or
            a fallback is unknown, or a provider's API key is missing; (on generate) a request asks
            for what the provider lacks, or fails for good after the retries and fallbacks.
    """

    concurrent_calls = True
    """``generate`` may be called from many threads at once, and takes ``cancel=``."""
    supports_confidence_stop = False
    supports_thinking_budget = False

    def __init__(self, config: LiteLLMBackendConfig) -> None:
        litellm = _litellm()
        self.config = config
        self.model_name = config.model
        self.deployments = deployments(config)
        self.providers = {d["model"]: check_model(litellm, d, config.unlisted_model) for d in self.deployments}
        for d in self.deployments:
            check_key(litellm, d)
        shared: set[str] | None = None
        for m, provider in self.providers.items():
            params = set(litellm.get_supported_openai_params(model=m, custom_llm_provider=provider) or ())
            shared = params if shared is None else shared & params
        self.params: frozenset[str] = frozenset(shared or ())
        """The OpenAI request parameters that the model and every fallback take."""
        for d in self.deployments:  # a local server takes any key; LiteLLM's client needs one
            if d.get("api_key") is None and d.get("api_base") and _is_local_url(d["api_base"]):
                d["api_key"] = "EMPTY"
        fallbacks = config.fallback_models
        self.router = litellm.Router(
            model_list=[{"model_name": d["model"], "litellm_params": d} for d in self.deployments],
            fallbacks=[{config.model: fallbacks}] if fallbacks else [],
            num_retries=config.max_retries, timeout=config.timeout)
        self._litellm = litellm
        self._pool = cf.ThreadPoolExecutor(config.concurrency, thread_name_prefix="tts-litellm")
        self._lock = threading.Lock()
        self.prices: dict[str, TokenPrice | None] = {m: token_price(m) for m in self.providers}
        self.spent_usd = 0.0
        """Dollars of every answered request so far, at LiteLLM's table prices (0 for unpriced models)."""
        self.single_choice = False
        """Set once a reply held fewer choices than the ``n`` asked (a proxy that drops ``n``)."""
        self.fallback_replies = 0
        """Replies that a fallback model wrote (the model failed for good on their requests)."""

    @classmethod
    def from_config(cls, config: LiteLLMBackendConfig, problems: Sequence[Any] = ()) -> LiteLLMGenerator:
        """Build from a backend config (problems are not needed)."""
        return cls(config)

    @property
    def returns_logprobs(self) -> bool:
        """Whether the provider (and every fallback) returns token log-probabilities."""
        return "logprobs" in self.params

    @property
    def token_price(self) -> TokenPrice | None:
        """The model's price per token (LiteLLM's table), for a session's ``cost["dollars"]`` and
        dollar budgets; None when the table lists none (a self-hosted model)."""
        return self.prices[self.config.model]

    @property
    def logprobs_unavailable(self) -> str | None:
        """Why no token log-probabilities come back (strategies that read them are refused when
        built, :meth:`tts.search.base.Strategy.logprobs_use`), or None when they do."""
        if self.returns_logprobs:
            return None
        lacking = [m for m, p in self.providers.items()
                   if "logprobs" not in (self._litellm.get_supported_openai_params(model=m, custom_llm_provider=p) or ())]
        return f"{' and '.join(lacking)} through LiteLLM return{'s' if len(lacking) == 1 else ''} none"

    @property
    def honours_seeds(self) -> bool:
        """Whether request seeds are sent (``request_seeds`` and a provider that takes them)."""
        return self.config.request_seeds and "seed" in self.params

    def _check(self, requests: Sequence[GenerationRequest]) -> None:
        """Refuse, before any request, what the provider cannot do (see the module docstring)."""
        where = self.config.model + (f" (or its fallbacks {', '.join(self.config.fallback_models)})"
                                     if self.config.fallbacks else "")
        for req in requests:
            if req.thinking_budget is not None:
                raise BackendError(f"a request asks for a thinking budget, which {where} is not asked for through "
                                   "LiteLLM; leave the budget out (budget forcing then cuts and re-prompts)")
            for field, param in _OPTIONAL.items():
                value = getattr(req, field)
                if value not in (None, 0.0, ()) and param not in self.params:
                    raise BackendError(f"a request asks for {field}, which {where} does not take (LiteLLM sends no "
                                       f"{param!r} there); leave it out or use a model that takes it")

    def _kwargs(self, req: GenerationRequest, n: int) -> dict[str, Any]:
        """The Router's completion arguments for ``req`` drawn ``n`` times in one request."""
        messages: list[dict[str, Any]] = [m.to_openai() for m in req.messages]
        kw: dict[str, Any] = {"model": self.config.model, "temperature": req.temperature, "max_tokens": req.max_tokens}
        if req.continuation:  # the provider continues a final assistant message (Anthropic's prefill)
            messages.append({"role": "assistant", "content": req.continuation})
            if self.config.api_base is not None:  # a vLLM server continues it with its chat extension
                kw["extra_body"] = {"continue_final_message": True, "add_generation_prompt": False}
        kw["messages"] = messages
        if req.top_p != 1.0:  # some providers refuse temperature and top_p together
            kw["top_p"] = req.top_p
        if n > 1:
            kw["n"] = n
        if req.stop:
            kw["stop"] = list(req.stop)
        if req.seed is not None and self.honours_seeds:
            kw["seed"] = req.seed
        if self.returns_logprobs and (req.logprobs or req.top_logprobs):
            kw["logprobs"] = True
            if req.top_logprobs and "top_logprobs" in self.params:
                kw["top_logprobs"] = req.top_logprobs
        kw.update(optional_chat_fields(req))
        return kw

    def _split(self, req: GenerationRequest) -> list[GenerationRequest]:
        """The requests that draw ``req``'s samples: itself where the provider takes ``n`` (or the
        samples are greedy, drawn once and repeated), else ``n`` one-sample requests (seeds ``seed + i``)."""
        if req.n == 1 or greedy_repeats(req) or ("n" in self.params and not self.single_choice):
            return [req]
        return [dataclasses.replace(req, n=1, seed=None if req.seed is None else req.seed + i) for i in range(req.n)]

    def _send(self, req: GenerationRequest, stop: threading.Event) -> GenerationResult:
        """One request of :meth:`_split`; a reply with fewer choices than ``n`` (a proxy that
        drops ``n``) makes it ``n`` one-sample requests, one after the other."""
        if stop.is_set():
            raise Stopped()
        try:
            return self._call(req, 1 if greedy_repeats(req) else req.n)
        except FewerChoices:
            with self._lock:
                first, self.single_choice = not self.single_choice, True
            if first:
                logger.warning("%s returned fewer choices than n = %d: it does not sample n > 1 per request, so tts "
                               "now sends n one-sample requests instead (each bills the prompt)", self.config.model, req.n)
            return _merged([self._send(one, stop) for one in self._split(req)])

    def _call(self, req: GenerationRequest, n: int) -> GenerationResult:
        start = time.perf_counter()
        try:
            response = self.router.completion(**self._kwargs(req, n))
        except Exception as exc:  # noqa: BLE001 - LiteLLM's exceptions, worded once in _translate
            raise self._translate(exc) from exc
        wall = time.perf_counter() - start
        try:
            result = parse_chat_completion(req, response, wall)
        except FewerChoices:
            raise
        except (AttributeError, TypeError, ValueError, IndexError) as exc:
            raise BackendError(f"{self.config.model} sent a reply tts cannot read ({type(exc).__name__}: {exc})") from exc
        self._account(response, result)
        return result

    def _account(self, response: Any, result: GenerationResult) -> None:
        """Add the reply's dollars (at the price of the model that wrote it) and count fallbacks."""
        hidden = getattr(response, "_hidden_params", None) or {}
        served = hidden.get("litellm_model_name") or hidden.get("model_group") or self.config.model
        price = self.prices.get(served, self.prices[self.config.model])
        usage = result.usage
        with self._lock:
            if served != self.config.model and served in self.prices:
                self.fallback_replies += 1
            if price is not None:
                self.spent_usd += price.usd(usage.prompt_tokens, usage.cached_prompt_tokens, usage.completion_tokens)

    def _translate(self, exc: BaseException) -> BackendError:
        """A LiteLLM error as one line that says what failed and what to change."""
        e = self._litellm.exceptions
        what = self.config.model + (f" at {shown_url(self.config.api_base)}" if self.config.api_base else "")
        tried = f" (after {self.config.max_retries} retries" + (
            f" and fallbacks {', '.join(self.config.fallback_models)})" if self.config.fallbacks else ")")
        message = _short(str(getattr(exc, "message", None) or exc))
        if isinstance(exc, e.AuthenticationError):
            return BackendError(f"{what} refused the API key: {message}. Check the provider's key variable or api_key")
        if isinstance(exc, e.NotFoundError):
            return BackendError(f"{what}: no such model at the provider ({message}); check the model name")
        if isinstance(exc, (e.BadRequestError, e.UnprocessableEntityError)):
            return BackendError(f"{what} refused the request: {message}")
        if isinstance(exc, e.RateLimitError):
            return BackendError(f"{what} kept refusing for its rate limit{tried}; lower concurrency or add fallbacks")
        if isinstance(exc, e.Timeout):
            return BackendError(f"{what} did not answer within {self.config.timeout:g} s{tried}; raise the timeout")
        if isinstance(exc, e.APIConnectionError):
            return BackendError(f"cannot reach {what}{tried}: {message}")
        status = getattr(exc, "status_code", None)
        return BackendError(f"{what} failed{tried}: {type(exc).__name__}" + (f" (HTTP {status})" if status else "")
                            + f": {message}")

    def generate(self, requests: Sequence[GenerationRequest],
                 cancel: threading.Event | None = None) -> list[GenerationResult]:
        """Send the requests concurrently; results in request order.

        Args:
            requests: The prompts.
            cancel: Once set, the requests not yet sent are dropped and the call raises
                BackendError (a request already sent runs to its end: LiteLLM cannot abort it).

        Raises:
            BackendError: A request asks for what the provider lacks (before any is sent), or one
                failed for good (the others not yet sent are dropped), or ``cancel`` was set.
        """
        if not requests:
            return []
        self._check(requests)
        stop = threading.Event()
        start = time.perf_counter()
        parts = [(i, one) for i, r in enumerate(requests) for one in self._split(r)]
        futures = [self._pool.submit(self._send, one, stop) for _, one in parts]
        try:
            wait_for_all(futures, cancel, lambda exc: exc, f"the call to {self.config.model} was cancelled")
            drawn: list[list[GenerationResult]] = [[] for _ in requests]
            for (i, _), f in zip(parts, futures, strict=True):
                drawn[i].append(f.result())
            results = [_merged(d) for d in drawn]
        finally:
            stop.set()
            for f in futures:
                f.cancel()
        shares = split_wall_time(time.perf_counter() - start, [r.usage.completion_tokens for r in results])
        return [dataclasses.replace(r, usage=dataclasses.replace(r.usage, wall_seconds=w))
                for r, w in zip(results, shares, strict=True)]

    def close(self) -> None:
        """Stop the request threads (once idle) and log what the run cost."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self.spent_usd:
            logger.info("%s: $%.4f at LiteLLM's table prices", self.config.model, self.spent_usd)


def _merged(parts: Sequence[GenerationResult]) -> GenerationResult:
    """The results of one request's parts as one: their samples in order, their usage added."""
    if len(parts) == 1:
        return parts[0]
    usage = parts[0].usage
    for part in parts[1:]:
        usage = usage + part.usage
    return GenerationResult(tuple(c for p in parts for c in p.completions), usage)


def _short(message: str) -> str:
    """A LiteLLM error message on one line, without its repeated class-name prefixes
    ("litellm.ServiceUnavailableError: ServiceUnavailableError: OpenAIException - ...") and the
    Router's trailer."""
    import re

    text = " ".join(message.split()).split(" LiteLLM: model group ")[0]
    text = re.sub(r"^(?:litellm\.)?(?:\w+(?:Error|Exception)(?::| -) ?)+", "", text)
    return text[:300]
