"""``tts mcp``: test-time strategies as one Model Context Protocol tool, ``solve``.

Agents built on MCP clients call tools, not chat endpoints. :func:`create_mcp_server` wraps a warm
:class:`~tts.session.Session` in an MCP server (the official ``mcp`` SDK's ``MCPServer``) whose
one tool, ``solve``, takes a question, a strategy, ``n`` and/or a budget, and returns the answer,
its confidence and what it cost. Every call shares the session's engine, and concurrent calls
share its batched engine calls.

The security rule is ``tts serve``'s, enforced by the same :class:`~tts.serve.policy.ServePolicy`
over the same :class:`~tts.serve.config.ServeConfig`: a client picks a strategy among those the
operator allowed, tunes only numbers, booleans and choices within the server's caps (samples,
tokens per sample, tokens per call), and names verifiers and calibrations the operator set up; it
never names a file, path, model or backend. Anything else is refused with a tool error that says
what to send instead.

It lives in ``tts.serve`` beside the OpenAI-compatible app because it is the same layer: a
transport over the session that reuses the server's policy, config and guards.

This module does not use ``from __future__ import annotations``: the tool's parameter
descriptions name this server's own strategies and caps, so its annotations are built per server
inside :func:`create_mcp_server`, and the SDK reads them as live objects.
"""

import contextlib
import inspect
import logging
import os
import sys
from collections.abc import Iterator, Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from tts.serve.config import ServeConfig
from tts.serve.guard import ConcurrencyGate, key_matches
from tts.serve.policy import PolicyError, ServePolicy, setting_error
from tts.serve.routing import RoutingError, strategy_spec

logger = logging.getLogger(__name__)

__all__ = ["SolveCost", "SolveResult", "create_mcp_server", "http_app", "stdout_to_stderr"]

TOOL_NAME = "solve"


class SolveCost(BaseModel):
    """What one ``solve`` call cost: tokens always; eFLOPs, GPU-seconds and dollars when the
    server prices its model (``--price-as``, ``--gpu``)."""

    tokens: int
    """Prompt plus generated tokens of every engine call, verifier calls included."""
    prompt_tokens: int
    completion_tokens: int
    calls: int
    """Engine requests the strategy made."""
    wall_seconds: float
    eflops: float | None = None
    """Compute plus memory traffic in FLOP-equivalents (Kinetics cost model)."""
    gpu_seconds: float | None = None
    """Roofline seconds on the pricing GPU."""
    dollars: float | None = None
    """``gpu_seconds`` at the GPU's hourly price; None without a price for that GPU."""
    gpu: str | None = None
    priced_as: str | None = None
    """The model architecture that priced the usage."""


class SolveResult(BaseModel):
    """The ``solve`` tool's structured result."""

    answer: str | None
    """The strategy's chosen answer; null when no sample produced one."""
    confidence: float
    """Share of the vote (or normalised verifier score) behind the answer, in [0, 1]."""
    cost: SolveCost
    strategy: str
    """The strategy config that ran, e.g. ``self_consistency@8``."""
    samples: int
    """Samples (or search candidates) drawn."""
    votes: dict[str, float] = Field(default_factory=dict)
    """Answer -> (weighted) votes, for voting strategies; empty otherwise."""
    text: str | None = None
    """The chosen reply as the model wrote it (its reasoning section left out): the answer to show a
    user, or the free-text answer itself; null when no reply was chosen."""
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)
    """When the chosen reply calls tools: its calls (``{"id", "type": "function", "function": {"name",
    "arguments"}}``), for the client to run and send back as a ``tool`` message."""


Messages = Annotated[list[dict[str, Any]] | None, Field(
    description="Optional OpenAI chat messages (system, user, assistant with tool_calls, tool with "
                "tool_call_id), the conversation so far; the last user message is the question. Text "
                "content only.")]
Tools = Annotated[list[dict[str, Any]] | None, Field(
    description="Optional OpenAI tool definitions ({\"type\": \"function\", \"function\": {\"name\", "
                "\"parameters\"}}): the model may answer by calling them (tool_calls in the result); "
                "tool_vote and the sampling strategies take tools.")]


def _tool_description(model: str | None, offered: list[str]) -> str:
    """What the ``solve`` tool does, as its clients read it."""
    return (f"Answer a question or continue a conversation (with tools the model may call) by spending extra "
            f"inference compute on {model or 'the served model'}: the strategy draws several samples or searches "
            f"over steps and picks the answer most samples agree on. Returns the chosen text or tool calls, the "
            f"answer, confidence (0-1) and cost (tokens, eFLOPs, GPU-seconds, dollars). "
            f"Strategies here: {', '.join(offered)}.")


def _tool_words(exc: PolicyError) -> str:
    """A policy refusal in this tool's words: its inputs (``settings``, ``budget``) and command."""
    message = str(exc).replace("tts serve", "tts mcp")
    if exc.code == "invalid_budget":
        return f"budget: {message}"
    if exc.param.startswith("tts.strategy."):
        message = message.replace(exc.param, exc.param.replace("tts.strategy", "settings", 1))
    return message


def _one_line(exc: BaseException) -> str:
    return setting_error(exc) if isinstance(exc, ValueError) else (str(exc).splitlines() or [type(exc).__name__])[0]


class _Solver:
    """Checks one tool call against the policy and caps, then runs it on the session."""

    def __init__(self, session: Any, config: ServeConfig, policy: ServePolicy) -> None:
        self.session = session
        self.config = config
        self.policy = policy
        self.gate = ConcurrencyGate(config.max_concurrent)

    def offered(self) -> list[str]:
        return self.policy.offered()

    def plan(self, strategy: str | None, n: int | None, budget: float | None, budget_unit: str,
             max_tokens: int | None, settings: Mapping[str, Any] | None, messages: list[dict[str, Any]] | None = None,
             tools: list[dict[str, Any]] | None = None, prompt: str | None = None) -> dict[str, Any]:
        """The keyword arguments of the session's ``solve`` for one call, every input checked.

        Raises:
            ToolError: An input this server refuses; the message says what to send instead.
        """
        from mcp.server.mcpserver.exceptions import ToolError

        from tts.prompts import PLAIN_PROMPT
        from tts.search.base import tools_refusal
        from tts.budgets.pricing import BudgetError, ComputeBudget

        config = self.config
        offered = ", ".join(self.offered())
        name = config.default_strategy if strategy is None or not strategy.strip() else strategy
        try:
            spec = strategy_spec(name)
        except RoutingError:
            raise ToolError(f"unknown strategy {name!r}; this server offers {offered} (a name, or <name>-<n> "
                            "such as self_consistency-8)") from None
        if settings:
            if "kind" in settings:
                raise ToolError("settings.kind: name the strategy in 'strategy', not in settings")
            spec = {**spec, **settings}
        policy = self.policy
        try:  # only what the operator allowed: strategies, verifiers and calibrations by name, knobs in range
            spec = policy.resolve(spec)
            policy.check_max_tokens(max_tokens)  # the caps: tts serve's checks, per call
            asked = ComputeBudget.parse(budget, budget_unit)  # read once, where it enters
            solve_budget, _ = policy.solve_budget(self.session.pricer, asked,
                                                  max_tokens or self.session.sampling.max_tokens, per="call",
                                                  param="budget")
            strategy_config = policy.strategy_config(self.session, spec, n, solve_budget,
                                                     samples_limit=" samples per call", param="n")
        except BudgetError as exc:
            raise ToolError(f"budget: {_one_line(exc)}") from None
        except PolicyError as exc:  # its words are tts serve's: name this tool's inputs and command instead
            raise ToolError(_tool_words(exc)) from None
        refusal = tools_refusal(strategy_config.kind, policy.allows) if tools else None
        if refusal is not None:  # the rule of tts.solve and tts serve
            raise ToolError(refusal)
        plain = (prompt or config.prompt) == "plain"
        return {"strategy": strategy_config, "budget": solve_budget, "max_tokens": max_tokens,
                "messages": messages or None, "tools": tools or None, "prompt": PLAIN_PROMPT if plain else self.session.template}

    async def solve(self, question: str, **inputs: Any) -> SolveResult:
        """Run one checked call; a refused or failed call raises ``ToolError`` with one line."""
        from mcp.server.mcpserver.exceptions import ToolError

        from tts.backends.base import BackendError
        from tts.backends.chat import ChatInputError
        from tts.session.inputs import chat

        try:  # the tools, the conversation, and the question that goes with them (tts.session.inputs)
            question = chat(question, inputs.get("messages"), inputs.get("tools"))
        except ChatInputError as exc:
            raise ToolError(str(exc)) from None
        kwargs = self.plan(**inputs)
        if not question.strip():
            raise ToolError("question is empty and messages hold no user text; put the question in one of them")
        if not self.gate.try_enter():
            raise ToolError(f"this server is solving {self.config.max_concurrent} calls already, its limit; "
                            "retry in a moment")
        try:
            sol = await self.session.asolve(question, **kwargs)
        except BackendError as exc:
            raise ToolError(f"the generation backend failed: {_one_line(exc)}") from None
        except ValueError as exc:  # StrategyInputError, BudgetError: inputs the strategy refused
            raise ToolError(_one_line(exc)) from None
        except RuntimeError as exc:
            if "closed" in str(exc):
                raise ToolError("the server is shutting down; retry later") from None
            raise
        finally:
            self.gate.leave()
        from tts.serve.replies import message_text, tool_calls

        cost = {k: v for k, v in sol.cost.items() if k in SolveCost.model_fields}
        calls = tool_calls(sol) if kwargs["tools"] else None
        chosen = sol.trace.selected is not None
        return SolveResult(answer=sol.answer, confidence=float(sol.confidence), cost=SolveCost(**cost),
                           strategy=sol.strategy, samples=len(sol.trace.samples),
                           votes={str(k): float(v) for k, v in sol.trace.votes.items()},
                           text=None if calls or not chosen else message_text(sol, False, without_reasoning=True),
                           tool_calls=calls or [])


def create_mcp_server(session: Any, config: ServeConfig | None = None, name: str = "tts") -> Any:
    """An MCP server with one tool, ``solve``, over ``session`` (which the caller opens and closes).

    Args:
        session: A :class:`tts.session.Session`, kept warm across calls.
        config: What clients may choose: ``strategies`` (None: every registered one that works with
            the session's settings), ``verifiers``, ``calibrations``, ``default_strategy`` and the
            caps ``max_samples``, ``max_tokens``, ``max_budget_tokens``, ``max_concurrent``. The
            fields about HTTP bodies and choices belong to ``tts serve`` and are not used here.
        name: The server name clients see.

    Returns:
        An ``mcp.server.mcpserver.MCPServer``; run it with ``.run("stdio")`` or serve
        :func:`http_app` of it.

    Raises:
        ValueError: An allowed strategy or verifier that cannot run with these settings, or a
            default strategy the server does not offer.
    """
    from mcp.types import ToolAnnotations

    config = config or ServeConfig(model=session.model_name or "tts")
    policy = ServePolicy.build(config, session)
    solver = _Solver(session, config, policy)
    try:
        policy.resolve(strategy_spec(config.default_strategy))
    except (RoutingError, PolicyError) as exc:
        raise ValueError(f"default strategy {config.default_strategy!r}: {exc}") from None
    offered = solver.offered()
    verifiers = ", ".join(sorted(policy.verifiers))
    calibrations = ", ".join(sorted(config.calibrations))

    # Per-server descriptions: the client sees this server's own strategies and caps in the schema.
    Strategy = Annotated[str | None, Field(  # noqa: N806 - a type alias built per server
        description=f"The test-time strategy: one of {', '.join(offered)}; or <name>-<n> "
                    f"(self_consistency-16), or a short name (sc, bon, wv). Default: {config.default_strategy}.")]
    Samples = Annotated[int | None, Field(  # noqa: N806
        ge=1, json_schema_extra={"maximum": config.max_samples},
        description=f"Samples or search candidates (more: more compute, usually more accuracy); at most "
                    f"{config.max_samples}. Default: the strategy's.")]
    Budget = Annotated[float | None, Field(  # noqa: N806
        gt=0, description=f"Compute this call may spend, in budget_unit; the strategy draws fewer samples to fit. "
                          f"Default and cap: {config.max_budget_tokens} generated tokens.")]
    Unit = Annotated[Literal["tokens", "eflops", "gpu_seconds", "dollars"], Field(  # noqa: N806
        description="Unit of budget (eflops, gpu_seconds and dollars are priced with the cost model).")]
    MaxTokens = Annotated[int | None, Field(  # noqa: N806
        ge=1, json_schema_extra={"maximum": config.max_tokens},
        description=f"Longest sample in tokens; at most {config.max_tokens}. Default: "
                    f"{session.sampling.max_tokens}.")]
    Settings = Annotated[dict[str, Any] | None, Field(  # noqa: N806
        description="Optional strategy settings: numbers, true/false and choices of the strategy's config "
                    "(e.g. {\"beam_width\": 2}); a verifier by name (" + verifiers + ")"
                    + (f"; auto's calibration by name ({calibrations})" if calibrations else "")
                    + ". Text, paths and models are the server's.")]
    Question = Annotated[str, Field(description="The question, with any context it needs. With messages, leave it "
                                                "empty (the last user message is the question) or send that same "
                                                "text.")]
    Prompt = Annotated[Literal["plain", "math"] | None, Field(  # noqa: N806
        description=f"plain: the conversation as sent, free-text answers; math: step by step with the answer "
                    f"in \\boxed{{}}. Default: {config.prompt}.")]

    async def solve(question: Question = "", strategy: Strategy = None, n: Samples = None, budget: Budget = None,
                    budget_unit: Unit = "tokens", max_tokens: MaxTokens = None,
                    settings: Settings = None, messages: Messages = None, tools: Tools = None,
                    prompt: Prompt = None) -> SolveResult:
        return await solver.solve(question, strategy=strategy, n=n, budget=budget, budget_unit=budget_unit,
                                  max_tokens=max_tokens, settings=settings, messages=messages, tools=tools,
                                  prompt=prompt)

    server_class = _server_class(tuple(inspect.signature(solve).parameters))
    server = server_class(name, instructions="Call solve to answer a question with a test-time compute strategy "
                                             "(sampling and voting, verifier-guided search) and get its confidence "
                                             "and cost.", log_level="WARNING")
    server.add_tool(solve, name=TOOL_NAME, title="Solve with test-time compute",
                    description=_tool_description(session.model_name, offered),
                    annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
                    structured_output=True)
    return server


def _server_class(accepted: tuple[str, ...]) -> type:
    """``MCPServer`` whose ``solve`` refuses arguments other than ``accepted`` (the SDK drops them
    without a word) and reports arguments that fail the SDK's check against the tool's signature in
    one line that names them (the SDK's own message is pydantic's multi-line dump with a link)."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
    from pydantic import ValidationError

    from tts.session.errors import settings_line

    class SolveServer(MCPServer):
        async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
            unknown = [k for k in arguments if k not in accepted] if name == TOOL_NAME else []
            if unknown:
                raise ToolError(f"Error executing tool {name}: unknown argument(s) {', '.join(map(repr, unknown))}; "
                                f"remove them ({name} takes {', '.join(accepted)})")
            try:
                return await super().call_tool(name, arguments, context)
            except ToolError as exc:
                cause = exc.__cause__
                if isinstance(exc, UnexpectedToolError) or not isinstance(cause, ValidationError):
                    raise
                raise ToolError(f"Error executing tool {name}: {settings_line(cause)}") from cause

    return SolveServer


def http_app(server: Any, *, host: str = "127.0.0.1", path: str = "/mcp", api_key: str | None = None,
             max_body_bytes: int = 1 << 20) -> Any:
    """The streamable-HTTP ASGI app of ``server``; with ``api_key``, every request must send
    ``Authorization: Bearer <key>`` (as ``tts serve``), else it gets 401."""
    app = server.streamable_http_app(streamable_http_path=path, host=host, max_request_body_size=max_body_bytes)
    if api_key is None:
        return app

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            header = next((v.decode("latin-1") for k, v in scope.get("headers", ()) if k == b"authorization"), None)
            if not key_matches(header, api_key):
                body = (b'{"error": "missing or wrong API key; send the server\'s key as '
                        b'\'Authorization: Bearer <key>\'"}')
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return guarded


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Point file descriptor 1 at stderr while the body runs, then back.

    Over stdio, stdout is the protocol channel: one stray line breaks the client. An engine started
    inside this block (vLLM logs to stdout, and its worker processes inherit the descriptor) writes
    to stderr for good; the SDK's stdio transport diverts descriptor 1 again while it serves.
    """
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
