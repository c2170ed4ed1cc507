"""Tool-call voting: the most consistent next action of an agent, by a vote over sampled tool calls.

When a model answers with tool calls, self-consistency over the *calls* (not over free text) gives
an agent the action most samples agree on. The reference is its_hub's tool voting
(Red-Hat-AI-Innovation-Team/its_hub, ``its_hub/algorithms/self_consistency.py``: ``SelfConsistency``
with ``tool_vote="tool_hierarchical"``, its recommended mode). n replies are sampled in one request;
the first tool call of each reply is its vote, counted by (``match``):

* ``hierarchical`` (default; its_hub's ``tool_hierarchical``): first the tool names are counted and
  only the calls of the most common name (of every name tied for most) stay; then, among those,
  the argument sets are counted and only the calls of the most common set (sets tied for most)
  stay; the call returned is one of those left (see ``ties``). ``name`` is the same vote (its
  earlier name here);
* ``name_and_arguments``: one flat vote over (name, arguments) pairs (tts's default before it
  followed its_hub: a tool called with scattered arguments can lose to a rarer tool whose calls all
  agree).

Departures from its_hub, on purpose (each has the setting that gives its_hub's rule):

* arguments are normalised before they are compared (keys sorted, strings trimmed, whitespace
  collapsed and case-folded, 2.0 == 2), so that ``" paris "`` and ``"Paris"`` are one call;
  its_hub compares them exactly (key order ignored): ``normalize_arguments=False``;
* a tie left after both counts goes to the call seen first (reproducible, like every tts vote);
  its_hub draws one at random: ``ties="random"`` (drawn with the run's seed and the problem id);
* tts reads the calls from the reply text and checks them against the offered tools, so a call
  to a tool that was not offered, a required argument missing or arguments that do not parse vote
  for nothing; its_hub takes the engine's parsed ``tool_calls`` unchecked (unparseable arguments
  count as ``{}``). No setting: the check is what keeps a malformed call from being returned;
* its_hub votes over content instead when fewer than half of the replies hold a call; tts always
  votes over the calls it found (the content vote is the ``self_consistency`` strategy), and
  returns no call only when no reply held a valid one. No setting.

A reply without a parseable call votes for nothing: no ``<tool_call>`` block or JSON object with a
``name``, JSON that does not parse, arguments that are not an object, a tool that is not offered,
or a required argument missing. Such replies are counted (events ``malformed_tool_call`` and
``no_tool_call``), never raised; the confidence is the winner's share of all n replies.

Convention shared with ``tts serve``: the OpenAI-format tools come in ``Problem.metadata["tools"]``
and the chat so far, if any, in ``Problem.metadata["messages"]`` (OpenAI chat messages; without
it, the benchmark prompt of the problem's question is used). The tools are shown to the model in
a system message in the Hermes format (``<tools>`` JSON, calls in ``<tool_call>`` tags), which
chat models trained for tool use (Qwen2.5, Hermes) follow. The chosen call is returned as the
canonical JSON string ``{"name": ..., "arguments": {...}}`` in ``Solution.answer`` (argument keys
sorted); None when no reply held a valid call.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

from pydantic import Field

from tts.backends.base import GenerationRequest, Message, derive_seed
from tts.config import StrategyConfigBase
from tts.search.base import Strategy, StrategyInputError
from tts.types import Budget, RequestShape, Sample, Solution, Trace

_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)

TOOLS_TEMPLATE = (
    "You may call one of the following tools to help with the user's request. The tools are described in JSON "
    "inside <tools></tools>:\n<tools>\n{tools}\n</tools>\n\nTo call a tool, reply with a JSON object with the tool's "
    "name and its arguments inside <tool_call></tool_call> tags:\n<tool_call>\n"
    '{{"name": "<tool name>", "arguments": {{"<argument>": "<value>"}}}}\n</tool_call>')
"""The system text that offers the tools (``{tools}``: one JSON object per line)."""


class ToolVoteConfig(StrategyConfigBase):
    """Sample n replies, vote over their tool calls; returns the most consistent call as canonical JSON."""

    kind: Literal["tool_vote"] = "tool_vote"
    n: int = Field(8, ge=1, le=4096)
    """Replies sampled per request."""
    match: Literal["hierarchical", "name", "name_and_arguments"] = "hierarchical"
    """How calls vote: ``hierarchical`` (its_hub's ``tool_hierarchical``: the tool name first, then
    the arguments among the winning name's calls; ``name`` is the same vote), or
    ``name_and_arguments`` (one flat vote over name and arguments together; the earlier default)."""
    normalize_arguments: bool = True
    """Compare arguments after normalising them (sorted keys, trimmed case-folded strings, 2.0 == 2);
    False compares them exactly, as its_hub does (key order still ignored)."""
    ties: Literal["first", "random"] = "first"
    """Which call wins a tie left after the vote: the first one seen (reproducible), or one drawn at
    random as its_hub does (seeded by the run's seed and the problem id)."""
    tools_template: str = Field(TOOLS_TEMPLATE, min_length=1)
    """System text that offers the tools, with ``{tools}``."""


def _normalise(value: Any) -> Any:
    """Arguments as a vote key: sorted keys, trimmed case-folded strings, integral floats as ints."""
    if isinstance(value, Mapping):
        return {str(k): _normalise(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, list | tuple):
        return [_normalise(v) for v in value]
    if isinstance(value, str):
        return " ".join(value.split()).casefold()
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _exact(value: Any) -> Any:
    """Arguments as its_hub compares them: nested values as they are, dict key order ignored."""
    if isinstance(value, Mapping):
        return {str(k): _exact(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, list | tuple):
        return [_exact(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)  # Python's 2.0 == 2, which its_hub's Counter keys inherit
    return value


def _sorted(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _sorted(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, list):
        return [_sorted(v) for v in value]
    return value


def _most_common(indices: list[int], keys: Sequence[str | None]) -> list[int]:
    """The indices (in order) whose key is among the most common keys of ``indices``."""
    counts: dict[str | None, int] = {}
    for i in indices:
        counts[keys[i]] = counts.get(keys[i], 0) + 1
    top = max(counts.values())
    return [i for i in indices if counts[keys[i]] == top]


def canonical(name: str, arguments: Mapping[str, Any]) -> str:
    """The canonical JSON of one call: ``{"name": ..., "arguments": {...}}``, argument keys sorted."""
    return json.dumps({"name": name, "arguments": _sorted(dict(arguments))}, ensure_ascii=False)


def _json_objects(text: str) -> list[str]:
    """Candidate JSON texts of a reply: ``<tool_call>`` blocks, else fenced blocks, else the first {...}."""
    blocks = _TOOL_CALL.findall(text)
    if blocks:
        return blocks
    fenced = _FENCE.findall(text)
    if fenced:
        return fenced
    start = text.find("{")
    return [text[start: text.rfind("}") + 1]] if start >= 0 and "}" in text[start:] else []


def parse_tool_call(text: str, tools: Sequence[Mapping[str, Any]] | None = None) -> tuple[dict[str, Any] | None, str]:
    """The first tool call of a reply, checked against the offered tools.

    Returns:
        ``({"name": ..., "arguments": {...}}, "ok")``, or ``(None, why)`` with why one of
        ``"no_tool_call"`` (nothing that looks like a call) and ``"malformed_tool_call"``.
    """
    blocks = _json_objects(text)
    if not blocks:
        return None, "no_tool_call"
    try:
        obj = json.loads(blocks[0])
    except (json.JSONDecodeError, ValueError):
        # Broken JSON is a malformed call inside <tool_call> tags or when it names a tool; other
        # braces (a \boxed{4}, a set) are prose, not an attempt at a call.
        tagged = "<tool_call>" in text or '"name"' in blocks[0]
        return None, "malformed_tool_call" if tagged else "no_tool_call"
    if isinstance(obj, list) and obj:
        obj = obj[0]
    if isinstance(obj, Mapping) and isinstance(obj.get("function"), Mapping):
        obj = obj["function"]  # the OpenAI message shape {"type": "function", "function": {...}}
    if not isinstance(obj, Mapping) or not isinstance(obj.get("name"), str):
        return None, "malformed_tool_call" if isinstance(obj, Mapping) and "name" in obj else "no_tool_call"
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except (json.JSONDecodeError, ValueError):
            return None, "malformed_tool_call"
    if not isinstance(args, Mapping):
        return None, "malformed_tool_call"
    if tools:
        spec = next((t for t in (_function(t) for t in tools) if t.get("name") == obj["name"]), None)
        if spec is None:
            return None, "malformed_tool_call"
        required = (spec.get("parameters") or {}).get("required") or ()
        if any(r not in args for r in required):
            return None, "malformed_tool_call"
    return {"name": obj["name"], "arguments": dict(args)}, "ok"


def _function(tool: Mapping[str, Any]) -> Mapping[str, Any]:
    """The function description of an OpenAI tool entry (``{"type": "function", "function": {...}}``)."""
    fn = tool.get("function")
    return fn if isinstance(fn, Mapping) else tool


def render_chat(messages: Sequence[Mapping[str, Any]]) -> list[Message]:
    """OpenAI chat messages as plain (role, content) messages: tool results become user turns in
    ``<tool_response>`` tags, an assistant's earlier tool calls are written in ``<tool_call>`` tags."""
    out = []
    for m in messages:
        role, content = str(m.get("role", "user")), m.get("content") or ""
        if isinstance(content, list):  # content parts: keep the text ones
            content = "".join(p.get("text", "") for p in content if isinstance(p, Mapping))
        if role == "tool":
            out.append(Message("user", f"<tool_response>\n{content}\n</tool_response>"))
            continue
        calls = m.get("tool_calls") or ()
        for call in calls:
            fn = _function(call) if isinstance(call, Mapping) else {}
            args = fn.get("arguments", {})
            args = json.loads(args) if isinstance(args, str) and args.strip() else args
            content += f"\n<tool_call>\n{json.dumps({'name': fn.get('name'), 'arguments': args})}\n</tool_call>"
        out.append(Message(role if role in ("system", "user", "assistant") else "user", content))
    return out


class ToolVote(Strategy):
    """Vote over the first tool call of n sampled replies; see the module docstring."""

    name = "tool_vote"
    config_class: ClassVar[type[StrategyConfigBase]] = ToolVoteConfig
    pool_rule = None

    def messages(self, problem: Any) -> tuple[Message, ...]:
        """The chat to sample from: the problem's messages (or its benchmark prompt) with the tools offered."""
        meta = getattr(problem, "metadata", None) or {}
        chat = render_chat(meta["messages"]) if meta.get("messages") else list(self.prompt(problem))
        tools = meta.get("tools") or ()
        if not tools:
            return tuple(chat)
        offer = self.config.tools_template.format(tools="\n".join(json.dumps(_function(t)) for t in tools))
        if chat and chat[0].role == "system":
            return (Message("system", f"{chat[0].content}\n\n{offer}"), *chat[1:])
        return (Message("system", offer), *chat)

    def solve(self, problems: Sequence[Any], budgets: Sequence[Budget | None] | None = None) -> list[Solution]:
        if budgets is not None and len(budgets) != len(problems):
            raise StrategyInputError(f"got {len(budgets)} budgets for {len(problems)} problems; give one per problem")
        ns = []
        for b in budgets or [None] * len(problems):
            n = self.config.n if b is None or b.samples is None else min(self.config.n, b.samples)
            if b is not None and b.tokens is not None:
                n = min(n, b.tokens // self.sampling.max_tokens)
            if n < 1:
                raise StrategyInputError(f"{self.name}: a budget of {b} does not cover one reply of up to "
                                         f"{self.sampling.max_tokens} tokens; raise the budget or lower max_tokens.")
            ns.append(n)
        requests = [GenerationRequest(messages=self.messages(p), n=n, temperature=self.sampling.temperature,
                                      top_p=self.sampling.top_p, max_tokens=self.sampling.max_tokens,
                                      seed=derive_seed(self.seed, p.id, 0), key=p.id)
                    for p, n in zip(problems, ns, strict=True)]
        results = self.generator.generate(requests)
        return [self._vote(p, r) for p, r in zip(problems, results, strict=True)]

    def _vote(self, problem: Any, result: Any) -> Solution:
        tools = (getattr(problem, "metadata", None) or {}).get("tools") or None
        samples, calls, events = [], [], {}
        for comp in result.completions:
            call, why = parse_tool_call(comp.text, tools)
            if call is None:
                events[why] = events.get(why, 0) + 1
            calls.append(call)
            samples.append(Sample(comp.text, canonical(call["name"], call["arguments"]) if call else None,
                                  comp.completion_tokens, comp.mean_logprob, comp.finish_reason))
        norm = _normalise if self.config.normalize_arguments else _exact
        args = [None if c is None else json.dumps(norm(c["arguments"]), sort_keys=True) for c in calls]
        pairs = [None if c is None else json.dumps({"name": c["name"], "arguments": json.loads(a)}, sort_keys=True)
                 for c, a in zip(calls, args, strict=True)]
        votes: dict[str, float] = {}
        for k in pairs:
            if k is not None:
                votes[k] = votes.get(k, 0.0) + 1.0
        if not votes:
            trace = Trace(self.name, tuple(samples), votes={}, events=events)
            return Solution(problem.id, None, 0.0, result.usage, trace)
        left = [i for i, c in enumerate(calls) if c is not None]
        if self.config.match == "name_and_arguments":
            left = _most_common(left, pairs)
        else:  # hierarchical: the names first, then the arguments among the calls left
            left = _most_common(left, [None if c is None else c["name"] for c in calls])
            if len(left) > 1:
                left = _most_common(left, args)
        if self.config.ties == "random" and len(left) > 1:
            chosen = random.Random(derive_seed(self.seed, problem.id, 1)).choice(left)
        else:
            chosen = left[0]
        support = votes[pairs[chosen]] if self.config.match == "name_and_arguments" else sum(
            1.0 for i in left if calls[i]["name"] == calls[chosen]["name"] and args[i] == args[chosen])
        trace = Trace(self.name, tuple(samples), votes=votes, selected=chosen, events=events)
        return Solution(problem.id, samples[chosen].answer, support / len(samples), result.usage, trace)

    @classmethod
    def planned_requests(cls, n: int, prompt_tokens: int, gen_tokens: int, cached_tokens: int = 0) -> list[RequestShape]:
        """Cost hook (``tts cost``): one request of n replies."""
        return [RequestShape(prompt_tokens, cached_tokens, (gen_tokens,) * n)]
