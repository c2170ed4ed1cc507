"""A warm engine for an agent's many questions: :class:`Session`, its ``solve`` and ``asolve``.

:func:`tts.solve` answers one question and is simple to call; a Session is what an agent (or the
server) keeps open: one engine started once, every registered strategy on top of it, budgets in
tokens, eFLOPs, GPU-seconds or dollars, and concurrent calls coalesced into batched engine calls
(:mod:`tts.session.batching`). ``await session.asolve(...)`` from many coroutines at once costs
about one engine call per search step for all of them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import contextlib
import dataclasses
import hashlib
import itertools
import json
import logging
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Self

from tts.backends.base import GenerationRequest, Generator, Message, count_prompt_tokens
from tts.backends.thinking import split_reasoning
from tts.session.batching import BatchingGenerator, CallContext, SolveCancelled, set_context
from tts.prompts import chat_prompt, extract_options, named_prompt
from tts.budgets.pricing import ComputeBudget, Pricer
from tts import tracing
from tts.session import inputs
from tts.config import SettingsError, settings_line
from tts.types import Budget, Problem, Sample, Solution

logger = logging.getLogger(__name__)

__all__ = ["Session", "SessionSolution", "SampleOptions", "SolveCancelled", "CallContext", "chat_prompt",
           "scripted_distribution"]


def json_answer(text: str) -> str | None:
    """The answer of a structured-output sample: its JSON value in canonical form (keys sorted,
    no spaces, integral floats as integers), so that samples that agree in value vote together;
    None when the text is not JSON."""
    _, rest = split_reasoning(text)
    try:
        value = json.loads(rest.strip())
    except (json.JSONDecodeError, RecursionError):
        return None

    def canon(v: Any) -> Any:
        if isinstance(v, float) and v.is_integer():
            return int(v)
        if isinstance(v, dict):
            return {k: canon(x) for k, x in v.items()}
        if isinstance(v, list):
            return [canon(x) for x in v]
        return v

    return json.dumps(canon(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def scripted_distribution(problem: Problem, accuracy: float = 0.4) -> dict[str, float]:
    """The answers a scripted backend opened by a session (``Session("scripted")``,
    ``tts.solve(..., backend="scripted")``) draws for ``problem``: as ``tts eval --backend
    scripted`` does (:meth:`~tts.backends.scripted.ScriptedGenerator.for_problems`), the gold
    answer with probability ``accuracy``, two near misses and no answer for the rest.

    It is a fake model for tests and docs, not a solver: a question without a gold answer gets a
    stand-in "gold", an integer from 0 to 99 derived from the question's text (the same on every
    run and machine), which is generally NOT the question's right answer. Give a
    :class:`~tts.types.Problem` with ``answer`` to script the right one.

    Example:
        >>> scripted_distribution(Problem("p", "What is 2 + 2?", "4"), 0.6)
        {'4': 0.6, '5': 0.18, '3': 0.12}
    """
    from tts.backends.scripted import ScriptedGenerator

    gold = problem.answer
    if gold is None:
        gold = str(int(hashlib.sha256(problem.question.encode()).hexdigest()[:8], 16) % 100)
    stand_in = Problem(problem.id, problem.question, gold)
    return ScriptedGenerator.for_problems([stand_in], accuracy=accuracy).distributions[problem.id]


@dataclass(frozen=True, slots=True)
class SampleOptions:
    """OpenAI sampling settings a solve applies to every sample its strategy draws.

    Args:
        stop: Strings that end a sample, added to the strategy's own (step-wise searches treat
            them as a step end).
        presence_penalty, frequency_penalty: Penalties on tokens already generated (-2..2).
        logit_bias: ``(token id, bias)`` pairs added to those tokens' logits.
        json_schema: A JSON schema (JSON text) every sample must match (structured output); the
            answers are then the samples' JSON values in canonical form (:func:`json_answer`) and
            the vote is over those.
        logprobs: None: not asked; k >= 0: return the chosen sample's token log-probabilities
            with the k most likely alternatives at each position.
    """

    stop: tuple[str, ...] = ()
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: tuple[tuple[int, float], ...] = ()
    json_schema: str | None = None
    logprobs: int | None = None


class _OptionsGenerator:
    """The session's batcher as one solve sees it: each request carries the solve's
    :class:`SampleOptions`, and the completions that came with token texts are kept so that the
    chosen sample's log-probabilities can be returned. They are kept by what a :class:`Sample`
    carries of its completion (text, token count, mean logprob): equal texts from different prompts
    (a revision's drafts, a tool loop's turns) have different logprobs and must not overwrite each
    other. Everything else is the batcher's."""

    def __init__(self, inner: Any, options: SampleOptions) -> None:
        self.inner = inner
        self.options = options
        self.completions: dict[tuple[str, int, float | None], Any] = {}

    def _request(self, r: GenerationRequest) -> GenerationRequest:
        o = self.options
        update: dict[str, Any] = {}
        if o.stop:
            update["stop"] = tuple(dict.fromkeys(r.stop + o.stop))
        if o.presence_penalty:
            update["presence_penalty"] = o.presence_penalty
        if o.frequency_penalty:
            update["frequency_penalty"] = o.frequency_penalty
        if o.logit_bias:
            update["logit_bias"] = o.logit_bias
        if o.json_schema is not None:
            update["json_schema"] = o.json_schema
        if o.logprobs is not None:
            update["logprobs"] = True
            # The strategy's own top_logprobs (a judge's, DeepConf's k) are never changed: they feed its decisions.
            if o.logprobs and not r.top_logprobs and r.confidence_stop is None:
                update["top_logprobs"] = o.logprobs
        return dataclasses.replace(r, **update) if update else r

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Any]:
        results = self.inner.generate([self._request(r) for r in requests])
        if self.options.logprobs is not None:
            for result in results:
                for c in result.completions:
                    if c.tokens is not None:
                        self.completions[(c.text, c.completion_tokens, c.mean_logprob)] = c
        return results

    def token_logprobs(self, sample: Sample, k: int) -> tuple[tuple[str, float, tuple[tuple[str, float], ...]], ...] | None:
        """(token, logprob, top k alternatives) of the engine completion ``sample`` came from; None
        when no single engine sample wrote it (a step-wise path) or the backend returned no token
        texts."""
        text = sample.text
        c = self.completions.get((text, sample.completion_tokens, sample.mean_logprob))
        if c is None or c.token_logprobs is None or c.tokens is None:
            return None
        alternatives = c.token_alternatives or ((),) * len(c.tokens)
        out = [(tok, float(lp), tuple(alt[:k]))
               for tok, lp, alt in zip(c.tokens, c.token_logprobs, alternatives, strict=False)]
        # Tokens past the returned text (the end-of-sequence token, a stop string) were generated
        # but are not in the reply: leave them out, so the tokens spell the reply.
        joined = "".join(t for t, _, _ in out)
        if joined.startswith(text):
            while out and len(joined) - len(out[-1][0]) >= len(text) and len(joined) > len(text):
                joined = joined[: len(joined) - len(out[-1][0])]
                out.pop()
        return tuple(out)

    def stream_samples(self, requests: Sequence[GenerationRequest]) -> Any:
        """The batcher's stream of the requests, each carrying the solve's options (a per-request
        stop draws through it)."""
        return self.inner.stream_samples([self._request(r) for r in requests])

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@dataclass(frozen=True, slots=True)
class SessionSolution(Solution):
    """A :class:`~tts.types.Solution` with what it cost in every unit the session can price.

    Args:
        cost: ``tokens`` (all prompt + generated tokens, verifier calls included),
            ``prompt_tokens``, ``completion_tokens``, ``calls``, ``wall_seconds``, and when the
            model is priced: ``eflops``, ``gpu_seconds``, ``dollars`` (None without a price for
            the GPU), ``gpu``, ``priced_as``.
        strategy: The label of the strategy config that ran (``self_consistency@16``); when the
            budget cut n, the n drawn and the n asked (``self_consistency@1 of 16: budget``).
        budget: What the budget did, as ``trace.notes["budget"]``: ``amount`` and ``unit``, the
            generated-token allowance it became (``as_tokens``), ``n_asked`` and ``n_drawn``
            (None where the strategy plans its own spending); None without a budget.
        logprobs: See the field. Reasoning tokens are ``usage.reasoning_tokens`` (every thought
            generated inside, as the backend counted it).
    """

    cost: dict[str, Any] = field(default_factory=dict)
    strategy: str = ""
    budget: dict[str, Any] | None = None
    logprobs: tuple[tuple[str, float, tuple[tuple[str, float], ...]], ...] | None = None
    """When :class:`SampleOptions` asked for them: (token, logprob, top alternatives) of each
    token of the chosen sample; None otherwise or when no single engine sample wrote it."""


class Session:
    """One warm generator, every strategy, budgets in any unit, and batched concurrent solves.

    Args:
        backend: "vllm" (default: the embedded small model), "openai", or a backend config
            (dict or config object), opened once and kept until :meth:`close`.
        generator: A ready Generator instead (the session does not close it).
        strategy: The default strategy: a registered name, or a config dict with ``kind``.
        n: The default samples/candidates (the strategy config's ``n``); None keeps the config's.
        budget: The default budget (see :meth:`solve`).
        temperature, top_p, max_tokens: Default sampling settings.
        prompt: A PromptTemplate, or a name as ``tts serve --prompt`` takes one ("plain", "math";
            :func:`tts.prompts.named_prompt`). Default: step by step, answer in \\boxed{}, except
            for conversations and tools (see :meth:`solve`).
        seed: The run seed that request seeds derive from.
        batch_window: Seconds a batch waits for concurrent calls to join (0: no waiting).
        max_batch_requests: Most requests in one engine call.
        max_workers: Most solves running at once (others wait for a worker).
        gpu: The GPU that prices eFLOPs, seconds and dollars.
        price_as: The model whose architecture prices usage; default the backend's model. None:
            count tokens only.
        prices: Overrides of the default dollars per GPU-hour (``{"h100": 2.5}``).
        strategy_settings: Default settings per strategy kind, used where a solve leaves them out,
            e.g. ``{"auto": {"calibration": "runs/smollm2-demo"}}``.

    Example:
        >>> with tts.Session() as s:                                        # doctest: +SKIP
        ...     sol = s.solve("What is 2+3?", strategy="self_consistency", n=8, budget={"dollars": 0.001})
        ...     sol.answer, sol.confidence, sol.cost["dollars"]
    """

    def __init__(self, backend: str | Mapping[str, Any] | Any = "vllm", *, generator: Generator | None = None,
                 strategy: str | Mapping[str, Any] | Any = "self_consistency", n: int | None = None,
                 budget: Any = None, temperature: float = 0.7, top_p: float = 1.0, max_tokens: int = 512,
                 prompt: Any = None, seed: int = 0, batch_window: float = 0.01, max_batch_requests: int = 4096,
                 max_workers: int = 256, gpu: str = "h100", price_as: str | None | bool = True,
                 prices: Mapping[str, float] | None = None,
                 strategy_settings: Mapping[str, Mapping[str, Any]] | None = None, stop: Any = None) -> None:
        from tts.config import SamplingConfig
        from tts.prompts import MATH_PROMPT

        sampling = inputs.sampling(SamplingConfig(), temperature, top_p, max_tokens)  # refused before a backend opens
        self._owned: Generator | None = None
        self._fake: tuple[Any, float] | None = None  # (scripted generator, accuracy): see scripted_distribution
        self._fake_users: dict[str, int] = {}
        if generator is None:
            generator, opened = self._open(backend)
            self._owned = generator
            if opened.kind == "scripted":
                self._fake = (generator, float(opened.accuracy))
        self.generator = generator
        self.model_name = getattr(generator, "model_name", "")
        self.default_strategy = strategy
        self.default_n = n
        self.default_stop = stop
        """The per-request stop of solves that name none, for strategies that take one (others
        run without it): a :class:`~tts.config.StopConfig`, its dict or a rule name; None: none."""
        self.default_budget = ComputeBudget.parse(budget)
        self.strategy_settings = {k: dict(v) for k, v in (strategy_settings or {}).items()}
        self.sampling = sampling
        self.template = named_prompt(prompt) if prompt is not None else MATH_PROMPT
        self._template_given = prompt is not None
        self.seed = seed
        per_token = getattr(generator, "token_price", None)
        if price_as is True and per_token is not None:  # a hosted model (the LiteLLM backend): billed per token
            self.pricer = Pricer(model=self.model_name, gpu=gpu, prices=dict(prices or {}), token_price=per_token,
                                 why_unpriced=f"{self.model_name} is a hosted model, billed per token")
        else:
            # The engine's own model is priced as it is deployed (tensor parallelism, quantized
            # weights); a model named by ``price_as`` as the cost model's defaults give it.
            from tts.cost.deployment import deployment_of

            deployment = deployment_of(getattr(generator, "config", None)) if price_as is True else None
            self.pricer = Pricer.for_model(self.model_name if price_as is True else (price_as or None), gpu, prices,
                                           deployment=deployment)
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self.batcher = BatchingGenerator(generator, window=batch_window, max_requests=max_batch_requests)
        self._executor = cf.ThreadPoolExecutor(max_workers, thread_name_prefix="tts-solve")
        self.solves = 0
        self.cancelled = 0
        self.closed = False
        if isinstance(strategy, str):  # refuse an unknown default now, not at the first solve
            from tts.config import strategy_kind

            strategy_kind(strategy)

    @staticmethod
    def _open(backend: str | Mapping[str, Any] | Any) -> tuple[Generator, Any]:
        """The generator of a backend config (name, dict or config object), and the config.

        Raises:
            SettingsError: A backend config that does not validate (one line naming the setting).
        """
        from pydantic import BaseModel, TypeAdapter, ValidationError

        from tts.backends.factory import create_generator
        from tts.config import BackendConfig

        spec = backend if isinstance(backend, BaseModel) else (
            {"kind": backend} if isinstance(backend, str) else dict(backend))
        try:
            config = TypeAdapter(BackendConfig).validate_python(spec)
        except ValidationError as exc:
            raise SettingsError(settings_line(exc, "backend")) from None
        return create_generator(config, []), config

    @contextlib.contextmanager
    def _scripted_answers(self, problem: Problem) -> Iterator[None]:
        """While ``problem`` is solved on a scripted backend this session opened, the backend
        answers it from :func:`scripted_distribution` (it has no distribution for a question it
        was not built with, and would answer None to everything)."""
        if self._fake is None:
            yield
            return
        generator, accuracy = self._fake
        with self._lock:
            if problem.id not in generator.distributions:
                generator.distributions[problem.id] = scripted_distribution(problem, accuracy)
                self._fake_users[problem.id] = 0
            if problem.id in self._fake_users:
                self._fake_users[problem.id] += 1
        try:
            yield
        finally:
            with self._lock:
                if problem.id in self._fake_users:
                    self._fake_users[problem.id] -= 1
                    if self._fake_users[problem.id] == 0:  # forgotten with its last solve: ids are per call
                        del self._fake_users[problem.id]
                        generator.distributions.pop(problem.id, None)

    # --- configuration ---------------------------------------------------------------------------

    def strategy_config(self, strategy: str | Mapping[str, Any] | Any = None, n: int | None = None,
                        budget: Any = None) -> Any:
        """The strategy config a solve would run: ``strategy`` (default: the session's) with ``n``.

        The session's ``strategy_settings`` for that kind fill settings the caller left out. A
        strategy that prices its own plan (``budget_use`` :attr:`~tts.search.base.BudgetUse.PRICES_ITSELF`,
        as ``auto`` does) gets the budget in its config's ``budget`` and ``budget_unit`` unless the
        caller set one.

        Raises:
            UnknownNameError: No such strategy (the message lists them).
            SettingsError: Settings the strategy refuses, or ``n`` for a strategy without one (a
                ValueError whose one-line message names the setting and what to change).
        """
        return self._config(strategy, n, ComputeBudget.parse(budget))

    def _config(self, strategy: Any, n: int | None, budget: ComputeBudget | None, stop: Any = None) -> Any:
        """:meth:`strategy_config` for a budget already read (where it entered: :meth:`solve`), with
        the solve's ``stop`` (else the session's default, where the strategy takes one)."""
        from pydantic import BaseModel, ValidationError

        from tts.config import parse_strategy_config, strategy_kind
        from tts.registry import STRATEGIES
        from tts.search.base import BudgetUse, budget_use

        if strategy is None:
            strategy, n = self.default_strategy, self.default_n if n is None else n
        if isinstance(strategy, str):
            spec: dict[str, Any] = {"kind": strategy}
        elif isinstance(strategy, Mapping):
            spec = dict(strategy)
        elif isinstance(strategy, BaseModel):
            spec = strategy.model_dump(exclude_unset=True) | {"kind": strategy.kind}  # type: ignore[attr-defined]
        else:
            return parse_strategy_config(strategy)  # refused with the accepted forms
        kind = strategy_kind(spec)
        fields = STRATEGIES.load(kind).config_class.model_fields
        spec = {**self.strategy_settings.get(kind, {}), **spec}
        if n is not None:
            if "n" not in fields:
                raise SettingsError(f"strategy {kind!r} has no n setting; leave n out")
            spec["n"] = n  # rebuilt from the caller's settings, so that what derives from n follows it
        if budget is not None and budget_use(kind) is BudgetUse.PRICES_ITSELF and "budget" not in spec:
            spec.update(budget=budget.amount, budget_unit=budget.unit)
        if stop is not None:
            spec["stop"] = inputs.stop(kind, stop)
        elif self.default_stop is not None and "stop" in fields and "stop" not in spec:
            spec["stop"] = inputs.stop(kind, self.default_stop)
        try:
            return parse_strategy_config(spec)
        except ValidationError as exc:  # a pydantic dump with a URL: one line that names the setting
            raise SettingsError(settings_line(exc, f"strategy {kind!r}")) from None

    # --- solving ---------------------------------------------------------------------------------

    def solve(self, question: str | Problem, *, strategy: Any = None, n: int | None = None, budget: Any = None,
              temperature: float | None = None, top_p: float | None = None, max_tokens: int | None = None,
              messages: Sequence[Mapping[str, Any]] | None = None, tools: Sequence[Mapping[str, Any]] | None = None,
              tool_choice: Any = None, prompt: Any = None, seed: int | None = None, context: CallContext | None = None,
              options: SampleOptions | None = None, stop: Any = None, _expected: bool = False) -> SessionSolution:
        """Answer one question with a test-time strategy on the session's warm engine.

        Args:
            question: The question, or a Problem.
            strategy: A registered strategy name (``self_consistency``, ``beam``, ``auto``, ...)
                or a config dict with ``kind`` and settings; default the session's.
            n: Samples / candidates (the config's ``n``).
            budget: Compute the solve may spend: a number of tokens, or ``{"tokens": ...}``,
                ``{"eflops": ...}``, ``{"gpu_seconds": ...}``, ``{"dollars": ...}``; a strategy
                draws fewer samples to fit it, or refuses (``StrategyInputError``); the fixed
                graphs refuse any budget. ``trace.notes["budget"]`` and the label say what ran.
            temperature, top_p, max_tokens: Sampling settings for this solve.
            messages: An OpenAI-style chat whose last user message is the question (kept in
                ``Problem.metadata["messages"]``; the conversation before it is in the prompt).
                ``question`` may then be ``""``; a question that is not that message is refused.
                Every ``tool`` message must answer a call of an earlier assistant message.
            tools: OpenAI-style tool definitions (``Problem.metadata["tools"]``), checked against
                OpenAI's tool schema: the model sees them in its chat template, and a reply that
                calls tools answers with its calls (voted by every sampling strategy and ``tool_vote``;
                a reply that only repeats a call the conversation already answered is set aside,
                :mod:`tts.search.repeats`). A strategy that cannot show the model tools (a step-wise
                search, revision, ``usc``, a graph) is refused with ``StrategyInputError``, never
                run without them.
            tool_choice: OpenAI's ``tool_choice`` (forwarded to upstreams that take it); it needs
                ``tools``, and a named function must be one of them.
            prompt: A PromptTemplate for this solve, or its name ("plain", "math"); one that adds
                nothing to the question ("plain", :data:`tts.prompts.PLAIN_PROMPT`) sends the
                conversation as it is, and its answers are free text (chosen by similarity,
                :mod:`tts.answers.kinds`) unless they are tool calls. Default: the session's prompt,
                except that a solve with ``messages`` or ``tools`` on a session built without a
                prompt sends the conversation as it is (as ``tts serve`` does by default).
            seed: The seed request seeds derive from (default: the session's).
            context: A CallContext to cancel the solve or follow its progress.
            options: Sampling settings for every sample the strategy draws (stop strings,
                penalties, logit bias, a JSON schema, the chosen sample's logprobs).
            stop: Stop drawing samples once the vote is settled: a rule name (``"horizon"``), a
                dict or a :class:`~tts.config.StopConfig` (``{"rule": "horizon", "wave": 8}``);
                default the session's. Only the voting strategies take one (``self_consistency``,
                ``weighted_vote``, ``best_of_n`` with ``rule: score``, ``tool_vote``); any other is
                refused. ``trace.notes["stop"]`` says what was drawn, cancelled and why it stopped.

        Returns:
            A :class:`SessionSolution`: answer, confidence, usage, trace and cost.

        Raises:
            SolveCancelled: ``context`` was cancelled.
            StrategyInputError, BudgetError, SettingsError: Settings to change (one line says which).
            ChatInputError: Messages, tools or ``tool_choice`` to change (one line; ``param`` names
                the field, :mod:`tts.session.inputs`).
            BackendError: The engine or server failed.
        """
        if _expected:  # submitted by asolve: it is running now, no longer about to start
            self.batcher.expect(-1)
        if self.closed:
            raise RuntimeError("this session is closed; open a new one")
        asked = inputs.chat(question.question if isinstance(question, Problem) else str(question), messages, tools,
                            tool_choice)  # an empty question is the conversation's
        question = dataclasses.replace(question, question=asked) if isinstance(question, Problem) else asked
        solve_budget = ComputeBudget.parse(budget) if budget is not None else self.default_budget  # read once, here
        config = self._config(strategy, n, solve_budget, stop)
        sampling = self._solve_sampling(temperature, top_p, max_tokens)
        problem = self._problem(question, messages, tools, seeded=seed is not None, tool_choice=tool_choice)
        if problem.metadata.get("tools"):
            from tts.search.base import StrategyInputError, tools_refusal

            refusal = tools_refusal(config.kind)
            if refusal is not None:
                raise StrategyInputError(refusal)
        render = chat_prompt(named_prompt(prompt) if prompt is not None else self._default_template(messages, tools))
        limit, allowance = self._token_allowance(config, solve_budget, render, problem, sampling)
        with tracing.span("tts.solve", {"tts.strategy": config.kind, "tts.config": config.label,
                                          "tts.n": getattr(config, "n", None), "tts.problems": 1}) as span:
            runner, generator = self._runner(config, options, render, sampling, self.seed if seed is None else seed)
            try:
                record = self._budget_record(runner, config, solve_budget, limit, allowance)
            except BaseException:
                runner.close()
                raise
            with self._scripted_answers(problem):
                solution = self._run_solve(runner, problem, limit, context)
            fields = {f.name: getattr(solution, f.name) for f in dataclasses.fields(Solution)}
            logprobs = None
            trace = solution.trace
            label = config.label
            if record is not None:
                fields["trace"] = trace = dataclasses.replace(trace, notes={**trace.notes, "budget": record})
                if record["n_drawn"] is not None and record["n_drawn"] < record["n_asked"]:
                    label = f"{config.model_copy(update={'n': record['n_drawn']}).label} of {record['n_asked']}: budget"
            if (isinstance(generator, _OptionsGenerator) and options is not None and options.logprobs is not None
                    and trace.selected is not None and 0 <= trace.selected < len(trace.samples)):
                logprobs = generator.token_logprobs(trace.samples[trace.selected], options.logprobs)
            result = SessionSolution(**fields, cost=self.pricer.cost(solution.usage), strategy=label, budget=record,
                                     logprobs=logprobs)
            tracing.record_solutions(span, [result])
        return result

    def _budget_record(self, runner: Any, config: Any, solve_budget: ComputeBudget | None, limit: Budget | None,
                       allowance: int | None) -> dict[str, Any] | None:
        """What the budget did to this solve, for ``trace.notes["budget"]``, the solution's
        ``budget`` and the server's ``tts`` extension: the budget (``amount``, ``unit``), its
        generated-token allowance (``as_tokens``), the n asked for and the n the strategy runs
        within it (:meth:`~tts.search.base.Strategy.n_within`: strategies that draw whole samples
        lower n to fit; a search runs n as configured or refuses a budget below its worst case when
        it starts; None where the strategy plans its spending as it goes: ``auto``, revision,
        generative verification). None without a budget.

        Raises:
            StrategyInputError: The budget does not cover one sample.
        """
        if solve_budget is None:
            return None
        asked = getattr(config, "n", None)
        drawn = runner.n_within(limit) if limit is not None and asked is not None else None
        return {**solve_budget.as_dict(), "as_tokens": allowance, "n_asked": asked, "n_drawn": drawn}

    def _default_template(self, messages: Any, tools: Any) -> Any:
        """The template of a solve that names none: the session's; but a conversation (``messages``)
        or a solve that offers tools, on a session left at the math default, goes as sent, as
        ``tts serve`` sends a chat by default: an agent's turn is not a math problem, and its answer
        is free text chosen by similarity (or tool calls), not a number read out of prose."""
        from tts.prompts import PLAIN_PROMPT

        return self.template if self._template_given or not (tools or messages) else PLAIN_PROMPT

    def _solve_sampling(self, temperature: float | None, top_p: float | None,
                        max_tokens: int | None) -> Any:
        """The session's sampling settings with this solve's overrides (those given) applied.

        Raises:
            SettingsError: An override out of range (one line naming it).
        """
        return inputs.sampling(self.sampling, temperature, top_p, max_tokens)

    def _token_allowance(self, config: Any, solve_budget: ComputeBudget | None, render: Any, problem: Problem,
                         sampling: Any) -> tuple[Budget | None, int | None]:
        """The solve's budget as a token limit for the strategy, and that allowance in tokens
        (None, None without a budget, or for a strategy that prices its own plan: auto spends it
        itself). The allowance is priced from the prompt's tokens and ``max_tokens``.

        Raises:
            StrategyInputError: The strategy refuses a budget, or declares no ``budget_use``
                (:func:`~tts.search.base.budget_refusal`).
        """
        if solve_budget is None:
            return None, None
        from tts.search.base import BudgetUse, StrategyInputError, budget_refusal, budget_use

        refusal = budget_refusal(config.kind, solve_budget)
        if refusal is not None:
            raise StrategyInputError(refusal)
        if budget_use(config.kind) is BudgetUse.PRICES_ITSELF:
            return None, None
        prompt_tokens = self._prompt_tokens(render(problem), problem.question)
        allowance = self.pricer.allowance(solve_budget, prompt_tokens, sampling.max_tokens)
        return Budget(tokens=allowance), allowance

    def _runner(self, config: Any, options: SampleOptions | None, render: Any, sampling: Any,
                seed: int) -> tuple[Any, Any]:
        """The strategy to run and the generator it draws from: the session's batcher, wrapped to
        apply per-sample ``options`` when some are set (a JSON schema also makes answers JSON)."""
        from tts.registry import STRATEGIES

        cls = STRATEGIES.load(config.kind)
        generator: Any = self.batcher
        extra: dict[str, Any] = extract_options(getattr(render, "template", None))  # free text when sent as is
        if options is not None and options != SampleOptions():
            generator = _OptionsGenerator(self.batcher, options)
            if options.json_schema is not None:
                extra["extract"] = json_answer
        return cls(config, tracing.traced_generator(generator), render, sampling, seed=seed, **extra), generator

    def _run_solve(self, runner: Any, problem: Problem, limit: Budget | None,
                   context: CallContext | None) -> Solution:
        """Run the strategy on ``problem`` under ``context`` (cancellable; a cancelled solve is
        counted), inside the batcher's begin/end, and close the runner; count the solve."""
        ctx = context or CallContext()
        self.batcher.begin()
        set_context(ctx)
        try:
            solution = runner.solve([problem], [limit] if limit is not None else None)[0]
        except SolveCancelled:
            with self._lock:
                self.cancelled += 1
            raise
        finally:
            set_context(None)
            self.batcher.end()
            runner.close()
        with self._lock:
            self.solves += 1
        return solution

    async def asolve(self, question: str | Problem, **kwargs: Any) -> SessionSolution:
        """:meth:`solve` for asyncio: runs in the session's worker pool; concurrent calls share
        engine calls. Cancelling the awaiting task cancels the solve (see :class:`CallContext`)."""
        ctx = kwargs.pop("context", None) or CallContext()
        loop = asyncio.get_running_loop()
        state = {"started": False, "abandoned": False}
        lock = threading.Lock()

        def run() -> SessionSolution:
            with lock:
                if state["abandoned"]:
                    raise SolveCancelled()
                state["started"] = True
            return self.solve(question, context=ctx, _expected=True, **kwargs)

        self.batcher.expect()
        future = loop.run_in_executor(self._executor, tracing.carry(run))  # the caller's span goes along
        try:
            return await future
        except asyncio.CancelledError:
            ctx.cancel()
            with lock:
                if not state["started"]:  # it never ran: it will never begin
                    state["abandoned"] = True
                    self.batcher.expect(-1)
            raise

    def _problem(self, question: str | Problem, messages: Any, tools: Any, seeded: bool,
                 tool_choice: Any = None) -> Problem:
        if isinstance(question, Problem):
            problem = question
        elif seeded:  # the same question with the same seed draws the same samples (engines that honour seeds)
            problem = Problem("q" + hashlib.sha256(str(question).encode()).hexdigest()[:16], str(question))
        else:  # a fresh id per call: asking again draws fresh samples
            problem = Problem(f"s{next(self._ids)}", str(question))
        extra = {}
        if messages:
            extra["messages"] = [dict(m) for m in messages]
        if tools:
            extra["tools"] = [dict(t) for t in tools]
            if tool_choice is not None:
                extra["tool_choice"] = tool_choice
        if extra:
            problem = dataclasses.replace(problem, metadata={**problem.metadata, **extra})
        return problem

    def _prompt_tokens(self, messages: tuple[Message, ...], question: str) -> int:
        counted = count_prompt_tokens(self.batcher, GenerationRequest(messages))
        if counted is not None:
            return int(counted)
        return max(1, sum(len(m.content) for m in messages) // 4)  # ~4 characters per token

    # --- lifetime --------------------------------------------------------------------------------

    @property
    def stats(self) -> dict[str, int]:
        """Solves finished and cancelled, engine calls, and what they carried."""
        s = self.batcher.stats
        return {"solves": self.solves, "cancelled": self.cancelled, "active": self.batcher.active,
                "engine_calls": s.engine_calls, "generate_calls": s.generate_calls, "requests": s.requests,
                "sequences": s.sequences, "dropped_requests": s.dropped_requests, "largest_batch": s.largest_batch}

    def close(self) -> None:
        """Stop the batcher and the workers, and close the generator the session opened."""
        if self.closed:
            return
        self.closed = True
        self.batcher.stop()
        self._executor.shutdown(wait=False, cancel_futures=True)
        if self._owned is not None:
            self._owned.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Session({self.model_name!r}, {self.default_strategy!r}, {self.stats})"
