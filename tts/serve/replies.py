"""The answers of a solved plan, as :mod:`tts.serve.responses` models: choices, the whole reply and
stream chunks, and the parts read off a solution (its text, reasoning, tool calls, logprobs, usage).

Each choice carries the ``tts`` extension (answer, confidence, cost, every sample's answer, notes);
a chat choice whose chosen reply calls tools is a tool call (``finish_reason: "tool_calls"``), and a
reasoning model's thinking goes to ``reasoning_content`` as vLLM's server returns it. A choice whose
text ``max_tokens`` cut says ``finish_reason: "length"``, as OpenAI's API does (:func:`finish_reason`);
a cut reply is never a tool call. The MCP tool reads a solution's text and calls with the same
functions.
"""

from __future__ import annotations

import json
import math
import random
import time
from typing import TYPE_CHECKING, Any

from tts.serve import responses as r

if TYPE_CHECKING:
    from tts.serve.planning import ChoiceJob, RequestPlan


_ids = random.Random()  # seeded from the OS once; ids need to be unique, not secret


def new_id(prefix: str) -> str:
    """A reply id: 24 random hex digits. Not ``uuid4``: its ``os.urandom`` is a system call that
    lets go of the GIL, and the event loop then waits its turn behind the solve threads."""
    return f"{prefix}-{_ids.getrandbits(96):024x}"


def now() -> int:
    return int(time.time())


# --- what a solution says ------------------------------------------------------------------------

def usage_block(solutions: list[Any]) -> dict[str, Any]:
    """OpenAI ``usage`` over every token spent inside: all samples, steps and verifier calls."""
    prompt = sum(s.usage.prompt_tokens for s in solutions)
    completion = sum(s.usage.completion_tokens for s in solutions)
    cached = sum(s.usage.cached_prompt_tokens for s in solutions)
    block = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
             "prompt_tokens_details": {"cached_tokens": cached}}
    # Usage.reasoning_tokens: every thought generated inside, as the backend counted it
    # (tts.backends.thinking.count_reasoning_tokens).
    reasoning = sum(s.usage.reasoning_tokens for s in solutions)
    if reasoning:  # vLLM's and OpenAI's field: the completion tokens spent in reasoning sections
        block["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return block


def usage(solutions: list[Any]) -> r.CompletionUsage:
    return r.CompletionUsage.model_validate(usage_block(solutions))


def tts_block(solution: Any) -> dict[str, Any]:
    """The ``tts`` extension of one choice: answer, confidence, cost and every sample's answer."""
    trace = solution.trace
    return {
        "strategy": solution.strategy,
        "answer": solution.answer,
        "confidence": solution.confidence,
        "cost": solution.cost,
        "budget": solution.budget,
        "stop": trace.notes.get("stop"),
        "answers": [s.answer for s in trace.samples],
        "votes": dict(trace.votes),
        "events": dict(trace.events),
        "engine_requests": solution.usage.calls,
    }


def _chosen(solution: Any) -> Any:
    """The sample the strategy chose (``trace.selected``), or None."""
    trace = solution.trace
    if trace.selected is not None and 0 <= trace.selected < len(trace.samples):
        return trace.samples[trace.selected]
    return None


def _chosen_text(solution: Any) -> str | None:
    chosen = _chosen(solution)
    return None if chosen is None else chosen.text


def finish_reason(solution: Any, answer_only: bool, calls: bool = False) -> str:
    """Why the choice's reply ended, in OpenAI's words: ``"tool_calls"`` for calls; ``"length"`` when
    ``max_tokens`` cut the text sent (it is the chosen sample's, and that sample is ``truncated``),
    or when no sample was chosen and every one was cut (the empty or "no answer" reply is what the
    limit left: raise ``max_tokens``); ``"stop"`` otherwise (also for an answer sent alone, which is
    whole even when read from a cut sample)."""
    if calls:
        return "tool_calls"
    chosen = _chosen(solution)
    samples = solution.trace.samples
    if chosen is not None:
        cut = not answer_only and chosen.truncated
    else:
        cut = solution.answer is None and bool(samples) and all(s.truncated for s in samples)
    return "length" if cut else "stop"


def message_text(solution: Any, answer_only: bool, without_reasoning: bool = False, plain: bool = False) -> str:
    """The reply text: the chosen sample's text (its reasoning and answer), or the answer alone.

    ``without_reasoning``: leave out a reasoning section (``<think>...</think>``), which chat
    replies return apart as ``reasoning_content`` (:func:`reasoning_text`). ``plain``: the prompt was
    the conversation as sent; no answer is then an empty text (the ``tts`` extension says why), where
    the math prompt's reply says "No answer was found."."""
    from tts.answers.reasoning import split_reasoning

    chosen = _chosen_text(solution)
    if not answer_only and chosen is not None:
        return split_reasoning(chosen)[1] if without_reasoning else chosen
    if solution.answer is None:  # a conversation as sent gets an empty reply, not a made-up sentence
        return "" if answer_only or plain else "No answer was found."
    return solution.answer if answer_only else f"The answer is \\boxed{{{solution.answer}}}."


def reasoning_text(solution: Any, answer_only: bool) -> str | None:
    """The chosen sample's reasoning section (vLLM's ``reasoning_content``); None without one."""
    from tts.answers.reasoning import split_reasoning

    chosen = _chosen_text(solution)
    return None if answer_only or chosen is None else split_reasoning(chosen)[0]


LOGPROB_FLOOR = -9999.0
"""What a log-probability of minus infinity is sent as (JSON has no infinity): the token was
masked, e.g. by structured output. vLLM's own OpenAI server sends the same number."""


def _finite(logprob: float) -> float:
    return logprob if math.isfinite(logprob) else LOGPROB_FLOOR


def logprobs_block(solution: Any, kind: str, answer_only: bool) -> dict[str, Any] | None:
    """The chosen sample's token log-probabilities in OpenAI's shape (chat: ``content`` entries;
    completions: ``tokens``/``token_logprobs``/``top_logprobs``/``text_offset``); None when they
    were not asked, the reply is the answer alone, or no single engine sample wrote the text."""
    tokens = getattr(solution, "logprobs", None)
    if tokens is None or answer_only:
        return None
    if kind == "chat":
        def entry(token: str, logprob: float) -> dict[str, Any]:
            return {"token": token, "logprob": _finite(logprob), "bytes": list(token.encode())}

        return {"content": [{**entry(t, lp), "top_logprobs": [entry(a, alp) for a, alp in alts]}
                            for t, lp, alts in tokens], "refusal": None}
    offsets, at = [], 0
    for t, _, _ in tokens:
        offsets.append(at)
        at += len(t)
    return {"tokens": [t for t, _, _ in tokens], "token_logprobs": [_finite(lp) for _, lp, _ in tokens],
            "top_logprobs": [{a: _finite(alp) for a, alp in alts} for _, _, alts in tokens], "text_offset": offsets}


def tool_calls(solution: Any) -> list[dict[str, Any]] | None:
    """``message.tool_calls`` of a solution whose answer is tool calls: the chosen sample's calls
    with their ids, or calls built from a canonical call answer (fresh ids); None when the answer is
    not tool calls (text) or the chosen sample was cut at ``max_tokens``."""
    from tts.backends.tool_calls import answer_calls, new_call_id

    if solution.answer is None:
        return None
    chosen = _chosen(solution)
    if chosen is not None:
        if chosen.truncated:  # a cut-off call is not a call (the reply says "length")
            return None
        if chosen.tool_calls and chosen.answer == solution.answer:
            return [{**c, "id": c.get("id") or new_call_id()} for c in chosen.tool_calls]
    calls = answer_calls(solution.answer)
    if calls is None:
        return None
    return [{"id": new_call_id(), "type": "function",
             "function": {"name": c["name"], "arguments": json.dumps(c["arguments"], ensure_ascii=False)}}
            for c in calls]


# --- the reply of a plan -------------------------------------------------------------------------

def _extension(p: RequestPlan, sol: Any) -> dict[str, Any]:
    ext = tts_block(sol)
    if p.notes:
        ext["notes"] = list(p.notes)
    return ext


def choice(p: RequestPlan, job: ChoiceJob, sol: Any) -> r.ChatChoice | r.CompletionChoice:
    """One choice of the response: the text (or tool call), finish reason, logprobs and ``tts``."""
    ext = _extension(p, sol)
    logprobs = logprobs_block(sol, p.kind, p.answer_only)
    if p.kind == "completions":
        finish = finish_reason(sol, p.answer_only)
        return r.CompletionChoice(index=job.index, text=message_text(sol, p.answer_only, plain=p.plain),
                                  finish_reason=finish, logprobs=logprobs,
                                  tts=r.ChoiceExtension(**_cut_note(ext, finish)))
    calls = tool_calls(sol) if p.tool_calls else None
    if calls:
        message = r.AssistantMessage(content=None, tool_calls=calls)
    else:
        message = r.AssistantMessage(content=message_text(sol, p.answer_only, without_reasoning=True, plain=p.plain),
                                     reasoning_content=reasoning_text(sol, p.answer_only))
    if sol.answer is None and p.plain:
        why = ", ".join(f"{k}: {v}" for k, v in sorted(sol.trace.events.items())) or "none answered"
        ext["notes"] = [*ext.get("notes", []), f"no sample gave an answer ({why}); the reply is empty"]
    finish = finish_reason(sol, p.answer_only, calls=bool(calls))
    return r.ChatChoice(index=job.index, message=message, finish_reason=finish,
                        logprobs=None if calls else logprobs, tts=r.ChoiceExtension(**_cut_note(ext, finish)))


def _cut_note(ext: dict[str, Any], finish: str) -> dict[str, Any]:
    """``ext`` with a note saying what to change when ``max_tokens`` cut the reply."""
    if finish != "length":
        return ext
    return {**ext, "notes": [*ext.get("notes", []), "max_tokens cut the reply short; raise max_tokens for a whole one"]}


def unmet_tool_choice(p: RequestPlan, sols: list[Any]) -> str | None:
    """Why the reply cannot be sent when ``tool_choice`` demands a call (``required`` or a named
    function) and a choice holds none; None when every choice holds one or none was demanded."""
    from tts.serve.planning import must_call

    if p.kind != "chat" or not p.tool_calls or not must_call(p.body):
        return None
    for sol in sols:
        if tool_calls(sol) is None:
            samples = len(sol.trace.samples)
            return (f"tool_choice demands a tool call, but none of the {samples} samples held a valid call to an "
                    "offered tool; raise the strategy's n, check the tools' descriptions, or use tool_choice auto")
    return None


def summary(sols: list[Any], notes: list[str] | None = None) -> r.ReplyExtension:
    """The response's ``tts`` extension: the first choice's answer, all choices' cost."""
    first = sols[0]
    return r.ReplyExtension(strategy=first.strategy, answer=first.answer, confidence=first.confidence,
                            cost=sum_costs([s.cost for s in sols]), answers=[s.answer for s in first.trace.samples],
                            budget=first.budget, stop=first.trace.notes.get("stop"), notes=notes or None)


def response(p: RequestPlan, sols: list[Any]) -> r.ChatCompletion | r.TextCompletion:
    """The whole (not streamed) response."""
    reply = r.ChatCompletion if p.kind == "chat" else r.TextCompletion
    return reply(id=response_id(p), created=now(), model=p.model,
                 choices=[choice(p, j, s) for j, s in zip(p.jobs, sols, strict=True)],
                 usage=usage(sols), tts=summary(sols, p.notes))


def response_id(p: RequestPlan) -> str:
    return new_id("chatcmpl" if p.kind == "chat" else "cmpl")


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


def sse(reply: r._Reply) -> bytes:
    """One server-sent event carrying ``reply``."""
    return b"data: " + r.json_bytes(reply) + b"\n\n"


class Chunks:
    """The server-sent events of one streamed chat or text completion (all share its id and
    creation time): the writer :mod:`tts.serve.solving`'s stream takes (a Responses stream's is
    :class:`tts.serve.responses_reply.ResponseEvents`)."""

    def __init__(self, p: RequestPlan) -> None:
        self.plan = p
        self.id = response_id(p)
        self.created = now()
        self.object = "chat.completion.chunk" if p.kind == "chat" else "text_completion"

    def event(self, index: int, delta: dict[str, Any] | None, finish_reason: str | None = None,
              usage: r.CompletionUsage | None = None, tts: dict[str, Any] | None = None) -> bytes:
        """One ``data:`` event: a choice's delta (none: a chunk with no choices, e.g. the usage)."""
        choices: list[Any]
        if delta is None:
            choices = []
        elif self.plan.kind == "chat":
            choices = [r.ChatChunkChoice(index=index, delta=r.Delta(**delta), finish_reason=finish_reason)]
        else:
            choices = [r.CompletionChunkChoice(index=index, text=delta.get("content", ""),
                                               finish_reason=finish_reason)]
        return sse(r.StreamChunk(id=self.id, object=self.object, created=self.created, model=self.plan.model,
                                 choices=choices, usage=usage, tts=tts))

    def opening(self) -> list[bytes]:
        """The events before any progress: each chat choice's role."""
        if self.plan.kind != "chat":
            return []
        return [self.event(job.index, {"role": "assistant", "content": ""}) for job in self.plan.jobs]

    def progress(self, index: int, ev: dict[str, Any]) -> bytes:
        """A progress event of choice ``index``'s strategy."""
        return self.event(index, {}, tts={"event": "progress", **ev})

    def failed(self, message: str, status: int, code: str | None) -> list[bytes]:
        """The events of a request that failed after its stream started: the error object."""
        return [sse(r.error_reply(message, status, code=code))]

    def closing(self) -> list[bytes]:
        """The stream's last event."""
        return [b"data: [DONE]\n\n"]

    def answers(self, sols: list[Any]) -> list[bytes]:
        """The events after the solves: each choice's answer and finish, then the usage (with
        ``stream_options.include_usage``)."""
        include_usage = bool((self.plan.body.stream_options or {}).get("include_usage"))
        out = []
        for job, sol in zip(self.plan.jobs, sols, strict=True):
            full = choice(self.plan, job, sol)
            if isinstance(full, r.ChatChoice):
                msg = full.message
                delta = ({"tool_calls": [{**c.model_dump(), "index": k} for k, c in enumerate(msg.tool_calls)]}
                         if msg.tool_calls else {"content": msg.content})
            else:
                delta = {"content": full.text}
            out.append(self.event(job.index, delta))
            out.append(self.event(job.index, {}, full.finish_reason, tts={"event": "answer", **full.tts.model_dump()}))
        if include_usage:  # the reply's extension without notes (each answer event has them)
            out.append(self.event(0, None, usage=usage(sols), tts=summary(sols).model_dump()))
        return out
