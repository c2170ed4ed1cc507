"""The library entry points an agent calls: :func:`solve` (and :func:`asolve`) one question,
:func:`evaluate` a benchmark.

One path: :func:`solve` runs its question through a :class:`~tts.session.Session`, the same
machinery as ``Session.solve`` and the server, so a budget means the same everywhere. A budget
(tokens, or ``{"eflops"|"gpu_seconds"|"dollars"|"tokens": ...}``) caps any strategy: strategies
that draw ``n`` samples draw fewer to fit it, searches run as configured or refuse a budget below
their worst case, ``auto`` spends it itself, and fixed graphs refuse any budget, naming the
strategies that take one. The solution's ``strategy`` label and ``trace.notes["budget"]`` say
what ran (``self_consistency@1 of 16: budget``).

Engines: :func:`solve` keeps the engine of its last vLLM backend config warm in a module-level
:class:`~tts.backends.engine_pool.EnginePool` of size one, because an agent calls it many times and
each engine start costs tens of seconds; one module-level Session sits on it, so concurrent
:func:`asolve` calls share batched engine calls. Asking for another vLLM config closes that engine
(and its session) before the new one starts (memory stays bounded); :func:`close_engines` frees it.
Backends that are cheap to open (OpenAI-compatible servers, scripted) are opened and closed within
the call. To manage engines yourself (two models at once, a server), pass ``generator=``, e.g. from
your own pool, or keep a :class:`~tts.session.Session`.

Output: a vLLM engine's start-up noise (the checkpoint-loading bar, Triton and NUMA notices,
warnings of its processes) goes to the ``tts.engine`` logger at INFO, not to the terminal;
``logging.basicConfig(level=logging.INFO)`` shows it. Engines nobody closed are stopped at exit
with enough grace to release their shared memory (see :mod:`tts.backends.engine_log`).
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from tts.types import Problem

if TYPE_CHECKING:  # the result types, for readers and type checkers; importing tts stays light
    from tts.config import EvalConfig
    from tts.eval.runner import EvalResult
    from tts.session.session import SessionSolution

_POOL: Any = None  # the EnginePool of solve(), created on first use
_SESSION: Any = None  # the Session on the pool's engine, replaced when the engine is
_POOL_LOCK = threading.Lock()


def _solve_pool() -> Any:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            from tts.backends.engine_pool import EnginePool

            _POOL = EnginePool(max_size=1)
        return _POOL


def close_engines() -> None:
    """Shut down the engine that :func:`solve` keeps warm between calls, freeing its memory.

    Harmless when none is open; the next :func:`solve` with a vLLM backend starts a fresh engine.
    """
    global _SESSION
    with _POOL_LOCK:
        session, _SESSION = _SESSION, None
    if session is not None:
        session.close()
    if _POOL is not None:
        _POOL.close_all()


def _warm_session(generator: Any) -> Any:
    """The module's Session on the pool's ``generator``: kept while the pool keeps that engine."""
    global _SESSION
    from tts.session import Session

    with _POOL_LOCK:
        if _SESSION is not None and _SESSION.generator is generator and not _SESSION.closed:
            return _SESSION
        old, _SESSION = _SESSION, Session(generator=generator)
        if old is not None:
            old.close()  # the pool closed its engine (another config was asked for)
        return _SESSION


def _session(backend: str | Mapping[str, Any], generator: Any) -> tuple[Any, bool]:
    """(the Session to solve on, whether this call owns it and must close it)."""
    from pydantic import BaseModel, TypeAdapter, ValidationError

    from tts.config import BackendConfig
    from tts.registry import BACKENDS
    from tts.session import Session
    from tts.config import SettingsError, settings_line

    if generator is not None:
        return Session(generator=generator), True
    spec = backend if isinstance(backend, BaseModel) else ({"kind": backend} if isinstance(backend, str)
                                                           else dict(backend))
    try:
        config = TypeAdapter(BackendConfig).validate_python(spec)
    except ValidationError as exc:
        raise SettingsError(settings_line(exc, "backend")) from None
    if getattr(BACKENDS.load(config.kind), "keep_warm", False):
        return _warm_session(_solve_pool().get(config, [])), False
    return Session(config), True  # opened, and closed with the session


@dataclass(frozen=True, slots=True)
class _SolveCall:
    """One :func:`solve` or :func:`asolve` call, read and checked before any backend opens (a vLLM
    engine takes tens of seconds to start): the problem, the backend to open, and the keyword
    arguments of :meth:`Session.solve <tts.session.Session.solve>`, its budget read once, here."""

    problem: Problem
    backend: str | Mapping[str, Any]
    generator: Any
    solve_kwargs: dict[str, Any]

    @classmethod
    def of(cls, args: Mapping[str, Any]) -> _SolveCall:
        """The call of :func:`solve`'s arguments by name (all of them, defaults applied).

        Raises:
            UnknownNameError, BudgetError, SettingsError, StrategyInputError, ChatInputError,
            ValueError: An argument to change (one line says which).
        """
        from tts.budgets.pricing import ComputeBudget
        from tts.config import SamplingConfig, strategy_kind
        from tts.prompts import named_prompt
        from tts.search.base import StrategyInputError, tools_refusal
        from tts.session import inputs

        question, strategy, n, tools = args["question"], args["strategy"], args["n"], args["tools"]
        problem = question if isinstance(question, Problem) else Problem("q0", question)
        budget = ComputeBudget.parse(args["budget"], args["budget_unit"])
        kind = strategy_kind(strategy)
        refusal = tools_refusal(kind) if tools or problem.metadata.get("tools") else None
        if refusal is not None:
            raise StrategyInputError(refusal)
        if args["stop"] is not None:  # checked before a backend opens, as the session checks it again
            inputs.stop(kind, args["stop"])
        spec: Any = strategy
        if kind == "auto":  # what auto needs of this function's arguments (a Session takes it from its settings)
            if budget is None or args["calibration"] is None:
                raise ValueError('strategy="auto" needs budget= (in budget_unit) and calibration= (a sample pool, a '
                                 "past tts eval run or a tts sweep directory of this model on other problems)")
            spec = {**({"kind": "auto"} if isinstance(strategy, str) else dict(strategy)),
                    "calibration": str(args["calibration"])}
            n = None  # auto chooses n
        # the session checks these again, as it does for every caller
        inputs.sampling(SamplingConfig(), args["temperature"], None, args["max_tokens"])
        inputs.chat(problem.question, args["messages"], tools)
        prompt = None if args["prompt"] is None else named_prompt(args["prompt"])
        return cls(problem, args["backend"], args["generator"],
                   {"strategy": spec, "n": n, "budget": budget, "temperature": args["temperature"],
                    "max_tokens": args["max_tokens"], "prompt": prompt, "messages": args["messages"], "tools": tools,
                    "stop": args["stop"]})


P = ParamSpec("P")
R = TypeVar("R")


def _async_twin(sync: Callable[P, R]) -> Callable[[Callable[..., Awaitable[R]]], Callable[P, Awaitable[R]]]:
    """Give an ``async def f(*args, **kwargs)`` the signature of ``sync``: type checkers and IDEs
    (through the ParamSpec) and ``help()``/``inspect`` (through ``__signature__``) show ``sync``'s
    parameters, which are written once."""
    signature = inspect.signature(sync)

    def wrap(impl: Callable[..., Awaitable[R]]) -> Callable[P, Awaitable[R]]:
        impl.__signature__ = signature.replace(  # type: ignore[attr-defined]
            return_annotation=f"Awaitable[{signature.return_annotation}]")
        return impl

    return wrap


def solve(
    question: str | Problem,
    *,
    strategy: str | Mapping[str, Any] = "self_consistency",
    n: int | None = 8,
    backend: str | dict[str, Any] = "vllm",
    generator: Any = None,
    temperature: float = 0.7,
    max_tokens: int = 512,
    prompt: Any = None,
    budget: Any = None,
    budget_unit: str = "tokens",
    calibration: str | Path | None = None,
    messages: Sequence[Mapping[str, Any]] | None = None,
    tools: Sequence[Mapping[str, Any]] | None = None,
    stop: str | Mapping[str, Any] | None = None,
) -> SessionSolution:
    """Answer one question with a test-time strategy.

    Args:
        question: The question text, or a Problem (its ``answer``, when given, is what a scripted
            backend scripts as right).
        strategy: A registered strategy name (self_consistency, best_of_n, weighted_vote, beam,
            auto, ...) or a config dict with ``kind`` and settings.
        n: Samples / candidates: the strategy config's ``n`` (it overrides an ``n`` in a config
            dict); None keeps the config's.
        backend: "vllm", "openai", "scripted", or a backend config dict such as
            ``{"kind": "openai", "base_url": "http://127.0.0.1:8000/v1", "model": "..."}``. The
            scripted backend is a fake model (:func:`tts.session.session.scripted_distribution`).
        generator: A ready Generator (overrides ``backend``); the caller keeps it and closes it.
        temperature, max_tokens: Sampling settings.
        prompt: A PromptTemplate, or a name as the command line takes one: "plain" (the question
            or conversation as written; free-text answers) or "math" (step by step, answer in
            \\boxed{}). Default: "math" for a question, "plain" for ``messages`` or ``tools``, as
            ``tts serve`` answers a chat.
        budget: Compute the solve may spend, for any strategy: a number (in ``budget_unit``), or
            ``{"tokens": ...}``, ``{"eflops": ...}``, ``{"gpu_seconds": ...}``, ``{"dollars": ...}``.
            A token budget counts generated tokens at their worst case (``max_tokens`` a sample).
            A strategy draws fewer samples to fit it or refuses it (``StrategyInputError``, the
            message says what to change); never silently ignored.
        budget_unit: The unit of a numeric ``budget``: tokens, eflops, gpu_seconds or dollars.
        calibration: ``strategy="auto"``: a sample pool, past ``tts eval`` run or ``tts sweep``
            directory of the same model; auto picks the strategy and n within ``budget``, and
            ``trace.notes`` says which and why.
        messages, tools: An OpenAI-style chat whose last user message is the question (``question``
            may then be ``""``), and tool definitions, checked as :meth:`tts.Session.solve` checks them.
            Tools need a strategy that shows them to the model (``tool_vote`` and the sampling
            strategies); any other is refused.
        stop: Stop drawing samples once the vote is settled, per request: a rule name
            (``"horizon"``, ``"beta"``, ``"dirichlet"``, ``"exact"``, ``"window"``) or a dict such as
            ``{"rule": "horizon", "confidence": 0.95, "wave": 8}`` (:class:`tts.config.StopConfig`;
            ``best_of_n`` takes ``{"rule": "score", "threshold": ...}``). Samples are drawn ``wave``
            at a time and, on a backend that streams, judged as each finishes, the rest cancelled.
            ``trace.notes["stop"]`` says what was drawn, cancelled and why it stopped. Strategies
            that cannot stop early are refused.

    Returns:
        A :class:`~tts.session.SessionSolution`: answer, confidence (vote share), usage, trace,
        ``cost`` in every unit the model can be priced in, the ``strategy`` label that ran and
        the ``budget`` record (also ``trace.notes["budget"]``: amount, unit, ``as_tokens``,
        ``n_asked``, ``n_drawn``).

    Raises:
        SettingsError, BudgetError, StrategyInputError: A setting to change (one-line message).
        ChatInputError: A malformed tool or message, a tool result that answers no earlier call, or a
            question that is not the last user message of ``messages`` (one line naming the field;
            with ``messages``, ``question`` may be ``""``).

    A vLLM backend's engine stays warm for the next call with the same config (see the module
    docstring); :func:`close_engines` shuts it down.

    Example:
        >>> sol = tts.solve("What is 7 + 7?", n=16, budget=2048)   # doctest: +SKIP
        >>> sol.answer, sol.strategy, sol.trace.notes["budget"]     # doctest: +SKIP
        ('14', 'self_consistency@4 of 16: budget', {..., 'n_asked': 16, 'n_drawn': 4})
    """
    call = _SolveCall.of(locals())  # every argument, by name: the one signature above
    session, owned = _session(call.backend, call.generator)
    try:
        return session.solve(call.problem, **call.solve_kwargs)
    finally:
        if owned:
            session.close()


@_async_twin(solve)
async def asolve(*args: Any, **kwargs: Any) -> SessionSolution:
    """:func:`solve` for asyncio, with the same arguments and result.

    On a vLLM backend it runs on :func:`solve`'s warm engine and session, so concurrent
    ``asolve`` calls (``asyncio.gather``) share batched engine calls; the engine starts in a
    worker thread, not on the event loop. Cancelling the awaiting task cancels the solve at its
    next step. With ``generator=`` or a cheap backend, each call has its own session.
    """
    bound = inspect.signature(solve).bind(*args, **kwargs)
    bound.apply_defaults()
    call = _SolveCall.of(bound.arguments)
    session, owned = await asyncio.to_thread(_session, call.backend, call.generator)
    try:
        return await session.asolve(call.problem, **call.solve_kwargs)
    finally:
        if owned:
            session.close()


def evaluate(config: EvalConfig | Mapping[str, Any], out: str | Path, **kwargs: Any) -> EvalResult:
    """Run ``tts eval`` from Python: ``config`` is an EvalConfig or a dict of its fields.

    A config with an ``allocation`` section runs budget-allocated self-consistency, as
    ``tts eval --allocate`` does; otherwise every configured strategy runs at its fixed settings.
    """
    from tts.config import EvalConfig

    cfg = config if isinstance(config, EvalConfig) else EvalConfig.model_validate(config)
    if cfg.allocation is not None:
        from tts.eval.allocated import run_allocated_eval

        return run_allocated_eval(cfg, Path(out), **kwargs)
    from tts.eval.runner import run_eval

    return run_eval(cfg, Path(out), **kwargs)
