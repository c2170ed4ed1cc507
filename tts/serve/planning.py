"""From a validated request body to the solves that answer it, every choice checked first.

:func:`plan_request` reads the strategy from the model name (or ``tts.strategy``), lets the policy
resolve it (only what the operator allowed), checks ``n``, ``max_tokens``, the compute budget and
the strategy's sample count against the server's caps, and builds one :class:`ChoiceJob` per choice (and
prompt). Anything refused raises :class:`~tts.serve.errors.APIError` with the field to change,
before any compute is spent. A request without a budget runs under a share of the server's cap
(``reasoning_effort``), so no request can spend more than the operator allows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tts.serve import protocol
from tts.serve.errors import APIError
from tts.serve.policy import PolicyError
from tts.serve.protocol import ChatRequest, CompletionRequest
from tts.serve.routing import RoutingError, route, strategy_spec
from tts.serve.state import ServerState


@dataclass
class ChoiceJob:
    """One choice to solve: the question and the solve's keyword arguments."""

    question: str
    kwargs: dict[str, Any]
    index: int


@dataclass
class RequestPlan:
    """What a request will run: its jobs, and what its answer must say and return."""

    kind: str  # "chat" or "completions"
    body: ChatRequest | CompletionRequest
    jobs: list[ChoiceJob]
    tool_calls: bool
    """Whether the reply is a tool call (tools offered to a strategy that answers with one)."""
    reserve_tokens: int
    """The request's worst case in generated tokens (what the rate limit reserves)."""
    notes: list[str] = field(default_factory=list)
    """What the tts extension must say about how the request was served."""
    rate_key: str | None = None
    """Whose token bucket holds the reservation (set once reserved)."""
    plain: bool = False
    """Whether the prompt is the conversation as sent (free-text replies), not the math prompt."""

    @property
    def model(self) -> str:
        return self.body.model

    @property
    def answer_only(self) -> bool:
        return self.body.tts.answer_only


def plan_request(state: ServerState, kind: str, body: ChatRequest | CompletionRequest) -> RequestPlan:
    """The plan of a request, every setting checked against the server's policy and caps.

    Raises:
        APIError: What to change (``param`` names the field).
    """
    config, session = state.config, state.session
    spec = _resolve_strategy(state, body)
    if not 1 <= body.n <= config.max_choices:
        raise APIError(f"n={body.n}: n (choices, each an independent solve) must be between 1 and "
                       f"{config.max_choices} on this server; for more samples per answer raise the strategy's n "
                       "(sc-16/<model> or tts.n)", param="n")
    max_tokens = getattr(body, "max_completion_tokens", None) or body.max_tokens
    prompts = getattr(body, "prompt", "")
    solves = body.n * (1 if isinstance(prompts, str) else min(max(len(prompts), 1), config.max_prompts))
    try:
        state.policy.check_max_tokens(max_tokens)
        asked = _asked_budget(body)  # without one, reasoning_effort's share of the server's cap
        share = 1.0 if asked is not None else protocol.REASONING_EFFORT_SHARE[body.reasoning_effort or "high"]
        budget, tokens = state.policy.solve_budget(session.pricer, asked,
                                                   max_tokens or session.sampling.max_tokens, solves=solves,
                                                   share=share, split_param="n" if body.n > 1 else "max_tokens")
        strategy_config = state.policy.strategy_config(session, spec, body.tts.n, budget,
                                                       n_hint=" (in the model name or tts.n)")
    except PolicyError as exc:
        raise APIError(str(exc), param=exc.param, code=exc.code if exc.code != "invalid_budget" else None) from None
    notes: list[str] = []
    common = _solve_kwargs(state, body, strategy_config, budget, max_tokens, notes)
    plan = RequestPlan(kind, body, [], False, tokens * solves, notes, plain=common["prompt"] is state.plain)
    if isinstance(body, ChatRequest):
        _chat_jobs(state, plan, body, common)
    else:
        plan.jobs = _completion_jobs(state, body, common)
    return plan


def _resolve_strategy(state: ServerState, body: ChatRequest | CompletionRequest) -> dict[str, Any]:
    """The strategy spec to run: the model name's (or ``tts.strategy``), resolved by the policy."""
    config, chosen = state.config, body.tts.strategy
    try:
        spec = route(body.model, config.model, config.default_strategy)  # the model must be ours
        if isinstance(chosen, str):
            spec = strategy_spec(chosen)
        elif chosen is not None:
            spec = dict(chosen)
    except RoutingError as exc:
        param = "tts.strategy" if chosen is not None and exc.status == 404 and "strategy" in str(exc) else exc.param
        raise APIError(str(exc), exc.status if param == "model" else 400, param,
                       "model_not_found" if exc.status == 404 and param == "model" else None) from None
    stop = body.tts.stop
    if stop is None and config.stop is not None and "stop" not in spec:  # the operator's default, where it applies
        from tts.config import stopping_strategies

        if spec.get("kind") in stopping_strategies():
            spec = {**spec, "stop": dict(config.stop)}
    if stop is not None and stop is not True:
        from tts.config import stop_refusal, stopping_strategies

        takes_stop = spec.get("kind") in stopping_strategies()
        if stop is not False and not takes_stop:
            raise APIError(stop_refusal(str(spec.get("kind"))), param="tts.stop")
        if takes_stop:  # false on a strategy that never stops early asks for what it does anyway
            spec = {**spec, "stop": None if stop is False else {"rule": stop} if isinstance(stop, str) else stop}
    elif stop is True:
        raise APIError("tts.stop: give a rule (\"horizon\") or its settings, or false to turn the server's default "
                       "stop off", param="tts.stop")
    try:  # only what the operator allowed: strategies, verifiers and calibrations by name, knobs in range
        return state.policy.resolve(spec)
    except PolicyError as exc:
        from_model = chosen is None and exc.param == "tts.strategy"
        raise APIError(str(exc), 404 if from_model else 400, "model" if from_model else exc.param,
                       "model_not_found" if from_model else "setting_not_allowed") from None


def _asked_budget(body: ChatRequest | CompletionRequest) -> Any:
    """``tts.budget`` as a ComputeBudget (None when not given)."""
    from tts.budgets.pricing import BudgetError, ComputeBudget
    from tts.serve.failures import one_line

    try:
        return ComputeBudget.parse(body.tts.budget)
    except BudgetError as exc:
        raise APIError(one_line(exc), param="tts.budget") from None


def _solve_kwargs(state: ServerState, body: ChatRequest | CompletionRequest, strategy_config: Any, budget: Any,
                  max_tokens: int | None, notes: list[str]) -> dict[str, Any]:
    """The keyword arguments every solve of the request shares; ``notes`` gets what the reply must say."""
    from tts.session.session import SampleOptions

    session = state.session
    schema = body.response_format.schema_text() if body.response_format is not None else None
    options = SampleOptions(stop=body.stops(), presence_penalty=body.presence_penalty or 0.0,
                            frequency_penalty=body.frequency_penalty or 0.0, logit_bias=body.bias(),
                            json_schema=schema, logprobs=body.logprobs_asked())
    try:
        vocab = getattr(session.generator, "vocab_size", None)
    except Exception:  # a closed engine: the solve says so
        vocab = None
    outside = [t for t, _ in options.logit_bias if isinstance(vocab, int) and t >= vocab]
    if outside:  # refused here, not by the engine, where it would fail a batch shared with other requests
        raise APIError(f"logit_bias token id {outside[0]} is outside this model's vocabulary of {vocab} tokens; "
                       f"give ids 0..{vocab - 1}", param="logit_bias")
    samples = getattr(strategy_config, "n", None)
    if body.temperature == 0 and (samples or 1) > 1:
        notes.append(f"temperature 0 is greedy: the strategy's {samples} samples are one greedy sample repeated "
                     "(drawn once), so they all agree; raise the temperature for a vote that means something")
    if body.seed is not None and getattr(session.generator, "honours_seeds", True) is False:
        notes.append(f"seed {body.seed} was not honoured: this engine ignores request seeds (vLLM on CPU does "
                     "unless started in deterministic mode); only the server's run seed applies")
    return {"strategy": strategy_config, "budget": budget, "temperature": body.temperature, "top_p": body.top_p,
            "max_tokens": max_tokens, "seed": body.seed,
            # JSON output is asked for by the schema, not by the math prompt's \boxed{}
            "prompt": state.plain if (body.tts.prompt or state.config.prompt) == "plain" or schema is not None
            else session.template,
            "options": options}


def _chat_jobs(state: ServerState, plan: RequestPlan, body: ChatRequest, common: dict[str, Any]) -> None:
    """A chat request's jobs (one per choice; the conversation kept whole, its last user message the
    question) and the tools the model is shown. The messages and the tools are checked first
    (:mod:`tts.backends.chat`: OpenAI's tool schema, every tool result answering an earlier call)."""
    from tts.backends.chat import ChatInputError, check_tools, messages_from_openai

    messages = [m.model_dump(exclude_none=True) for m in body.messages]
    try:  # refused here, naming the field, not met by a strategy or an upstream halfway through
        parsed = messages_from_openai(messages)
        if body.tools is not None:
            check_tools(body.tools)
    except ChatInputError as exc:
        raise APIError(str(exc), param=exc.param or "messages") from None
    question = next((m.content for m in reversed(parsed) if m.role == "user" and m.content.strip()), "")
    if not question.strip() and parsed[-1].role not in ("tool", "assistant"):
        raise APIError("the conversation has no user message with text; put the question in one", param="messages")
    strategy_config = common["strategy"]
    offered = tool_plan(state, body, strategy_config)
    extra = {"messages": messages, "tools": offered, "tool_choice": _choice_json(body.tool_choice) if offered else None,
             "strategy": strategy_config}  # tool_choice none: no tools are shown, so no choice among them
    plan.jobs = [ChoiceJob(question or parsed[-1].content, {**common, **extra}, i) for i in range(body.n)]
    plan.tool_calls = bool(offered)


def _choice_json(choice: Any) -> Any:
    """``tool_choice`` as OpenAI's JSON value (None: not given)."""
    return choice.model_dump() if hasattr(choice, "model_dump") else choice


def _completion_jobs(state: ServerState, body: CompletionRequest, common: dict[str, Any]) -> list[ChoiceJob]:
    """A completions request's jobs: one per prompt and choice."""
    limit = state.config.max_prompts
    prompts = [body.prompt] if isinstance(body.prompt, str) else list(body.prompt)
    if not prompts or len(prompts) > limit:
        raise APIError(f"give 1 to {limit} prompts, got {len(prompts)}", param="prompt")
    if any(not p.strip() for p in prompts):
        raise APIError("a prompt is empty; put the question in it", param="prompt")
    return [ChoiceJob(p, dict(common), i * body.n + j) for i, p in enumerate(prompts) for j in range(body.n)]


def returns_tool_calls(strategy_config: Any) -> bool:
    """Whether a strategy answers with a tool call when the samples make one (it shows the model the
    tools: :func:`tts.search.base.takes_tools`, the rule every entry point shares)."""
    from tts.search.base import takes_tools

    return takes_tools(strategy_config.kind)


def tool_plan(state: ServerState, body: ChatRequest, strategy_config: Any) -> list[dict[str, Any]] | None:
    """The tools the model is shown, for ``tool_choice``: ``none`` shows none (the reply is text),
    ``auto`` (or none given) shows them all, ``required`` shows them all and the reply must call one,
    a named function shows only that tool. A strategy that cannot show the model tools (a step-wise
    search, a graph) is refused when tools are sent, rather than dropping them."""
    wanted, offered = body.tool_choice, body.tools
    if wanted is not None and not offered:
        raise APIError("tool_choice needs tools; send the tools or leave tool_choice out", param="tool_choice")
    if not offered or wanted == "none":
        return None
    from tts.search.base import tools_refusal

    refusal = tools_refusal(strategy_config.kind, state.policy.allows)  # tts.solve's and tts mcp's rule too
    if refusal is not None:
        raise APIError(f"{refusal} (e.g. model tool_vote-8/{state.config.model})", param="tools")
    if isinstance(wanted, protocol.NamedToolChoice):
        name = wanted.function.name
        offered = [t for t in offered if (t.get("function") or {}).get("name") == name]
        if not offered:
            have = ", ".join(repr((t.get("function") or {}).get("name")) for t in body.tools or [])
            raise APIError(f"tool_choice names {name!r}, which is not one of the tools ({have}); name one "
                           "of them", param="tool_choice")
    return offered


def must_call(body: Any) -> bool:
    """Whether the request's ``tool_choice`` demands a tool call (``required`` or a named function)."""
    wanted = getattr(body, "tool_choice", None)
    return wanted == "required" or isinstance(wanted, protocol.NamedToolChoice)
