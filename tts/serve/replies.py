"""The OpenAI-shaped answers of a solved plan: choices, the whole response, and stream chunks.

Each choice carries the ``tts`` extension (answer, confidence, cost, every sample's answer, notes);
a chat choice whose chosen reply calls tools is a tool call (``finish_reason: "tool_calls"``), and a reasoning model's thinking goes
to ``reasoning_content`` as vLLM's server returns it.
"""

from __future__ import annotations

import json
from typing import Any

from tts.serve import protocol
from tts.serve.planning import Job, Plan


def choice(p: Plan, job: Job, sol: Any) -> dict[str, Any]:
    """One choice of the response: the text (or tool call), finish reason, logprobs and ``tts``."""
    ext = protocol.tts_block(sol)
    if p.notes:
        ext["notes"] = list(p.notes)
    logprobs = protocol.logprobs_block(sol, p.kind, p.answer_only)
    if p.kind == "completions":
        return {"index": job.index, "text": protocol.message_text(sol, p.answer_only, plain=p.plain),
                "finish_reason": "stop",
                "logprobs": logprobs, "tts": ext}
    calls = protocol.tool_calls(sol) if p.tool_calls else None
    message: dict[str, Any] = ({"role": "assistant", "content": None, "tool_calls": calls} if calls else
                               {"role": "assistant",
                                "content": protocol.message_text(sol, p.answer_only, without_reasoning=True,
                                                                 plain=p.plain)})
    if sol.answer is None and p.plain:
        why = ", ".join(f"{k}: {v}" for k, v in sorted(sol.trace.events.items())) or "none answered"
        ext["notes"] = [*ext.get("notes", []), f"no sample gave an answer ({why}); the reply is empty"]
    reasoning = None if calls else protocol.reasoning_text(sol, p.answer_only)
    if reasoning is not None:  # vLLM's field for a reasoning model's <think> section
        message["reasoning_content"] = reasoning
    return {"index": job.index, "message": message, "finish_reason": "tool_calls" if calls else "stop",
            "logprobs": None if calls else logprobs, "tts": ext}


def unmet_tool_choice(p: Plan, sols: list[Any]) -> str | None:
    """Why the reply cannot be sent when ``tool_choice`` demands a call (``required`` or a named
    function) and a choice holds none; None when every choice holds one or none was demanded."""
    from tts.serve.planning import must_call

    if p.kind != "chat" or not p.tool_calls or not must_call(p.body):
        return None
    for sol in sols:
        if protocol.tool_calls(sol) is None:
            samples = len(sol.trace.samples)
            return (f"tool_choice demands a tool call, but none of the {samples} samples held a valid call to an "
                    "offered tool; raise the strategy's n, check the tools' descriptions, or use tool_choice auto")
    return None


def summary(sols: list[Any]) -> dict[str, Any]:
    """The response's ``tts`` extension: the first choice's answer, all choices' cost."""
    first = sols[0]
    return {"strategy": first.strategy, "answer": first.answer, "confidence": first.confidence,
            "cost": sum_costs([s.cost for s in sols]), "answers": [s.answer for s in first.trace.samples],
            "budget": first.budget}


def response_body(p: Plan, sols: list[Any]) -> dict[str, Any]:
    """The whole (not streamed) response."""
    return {"id": response_id(p), "object": "chat.completion" if p.kind == "chat" else "text_completion",
            "created": protocol.now(), "model": p.model,
            "choices": [choice(p, j, s) for j, s in zip(p.jobs, sols, strict=True)],
            "usage": protocol.usage_block(sols),
            "tts": {**summary(sols), **({"notes": p.notes} if p.notes else {})}}


def response_id(p: Plan) -> str:
    return protocol.new_id("chatcmpl" if p.kind == "chat" else "cmpl")


def sum_costs(costs: list[dict[str, Any]]) -> dict[str, Any]:
    """Costs of several choices added up (numbers summed, labels kept)."""
    out: dict[str, Any] = {}
    for c in costs:
        for k, v in c.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k in out and out[k] is not None:
                out[k] += v
            elif k not in out:
                out[k] = v
    return out


class Chunks:
    """The server-sent events of one streamed response (all share its id and creation time)."""

    def __init__(self, p: Plan) -> None:
        self.plan = p
        self.id = response_id(p)
        self.created = protocol.now()
        self.object = "chat.completion.chunk" if p.kind == "chat" else "text_completion"

    def event(self, index: int, delta: dict[str, Any] | None, finish_reason: str | None = None,
              **extra: Any) -> str:
        """One ``data:`` event: a choice's delta (none: a chunk with no choices, e.g. the usage)."""
        if delta is None:
            choices: list[dict[str, Any]] = []
        elif self.plan.kind == "chat":
            choices = [{"index": index, "delta": delta, "finish_reason": finish_reason, "logprobs": None}]
        else:
            choices = [{"index": index, "text": delta.get("content", ""), "finish_reason": finish_reason,
                        "logprobs": None}]
        body = {"id": self.id, "object": self.object, "created": self.created, "model": self.plan.model,
                "choices": choices, **extra}
        return f"data: {json.dumps(body)}\n\n"

    def answers(self, sols: list[Any], include_usage: bool) -> list[str]:
        """The events after the solves: each choice's answer and finish, then the usage."""
        out = []
        for job, sol in zip(self.plan.jobs, sols, strict=True):
            full = choice(self.plan, job, sol)
            if self.plan.kind == "chat":
                msg = full["message"]
                delta = ({"tool_calls": [{**c, "index": k} for k, c in enumerate(msg["tool_calls"])]}
                         if msg.get("tool_calls") else {"content": msg["content"]})
            else:
                delta = {"content": full["text"]}
            out.append(self.event(job.index, delta))
            out.append(self.event(job.index, {}, full["finish_reason"], tts={"event": "answer", **full["tts"]}))
        if include_usage:
            out.append(self.event(0, None, usage=protocol.usage_block(sols), tts=summary(sols)))
        return out
