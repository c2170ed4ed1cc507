"""The answer of POST /v1/responses: a Response object, whole or as its stream of events.

A Responses request runs on the chat path (:mod:`tts.serve.responses_request`); its chosen reply
(:func:`tts.serve.replies.choice`, the same finish rule, tool calls and reasoning split) is written
here as Response output items: a ``reasoning`` item for a reasoning model's thinking, then either
``function_call`` items (one per call, each with the ``call_id`` its ``function_call_output``
answers) or a ``message`` with one ``output_text`` part. A reply that ``max_output_tokens`` cut
(chat's ``finish_reason: "length"``) is a Response with ``status: "incomplete"`` and
``incomplete_details.reason: "max_output_tokens"``. Usage counts every token spent inside, as the
chat reply's does, under the Responses' names (``input_tokens``, ``output_tokens``); the ``tts``
extension is the choice's (answer, confidence, cost, votes, notes).

Streamed (:class:`ResponseEvents`), the events are OpenAI's: ``response.created``,
``response.in_progress`` (again for each progress event of the strategy, its ``tts`` field saying
what was drawn), then per item ``response.output_item.added``, the text as
``response.content_part.added`` / ``response.output_text.delta`` / ``.done`` /
``response.content_part.done`` or the arguments as ``response.function_call_arguments.delta`` /
``.done``, ``response.output_item.done``, and last ``response.completed`` (or
``response.incomplete``; a failure is an ``error`` event and ``response.failed``). Each event
carries its ``sequence_number``; there is no ``[DONE]``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from tts.serve import replies
from tts.serve import responses as r
from tts.serve.protocol import WireModel
from tts.serve.responses import _omitted, json_bytes

if TYPE_CHECKING:
    from tts.serve.planning import RequestPlan
    from tts.serve.responses_request import ResponsesRequest


class OutputText(WireModel):
    """The text of a message item."""

    type: Literal["output_text"] = "output_text"
    """Always ``output_text``."""
    text: str
    """The chosen sample's text (its reasoning section apart), or the answer alone with ``tts.answer_only``."""
    annotations: list[dict[str, Any]] = Field(default_factory=list)
    """Always empty (no citations here)."""
    logprobs: list[dict[str, Any]] = Field(default_factory=list)
    """Always empty (log-probabilities are on the chat endpoint)."""


class OutputMessage(WireModel):
    """The reply as an assistant message."""

    type: Literal["message"] = "message"
    """Always ``message``."""
    id: str
    """The item's id (``msg_...``)."""
    role: Literal["assistant"] = "assistant"
    """Always ``assistant``."""
    status: Literal["in_progress", "completed", "incomplete"]
    """``incomplete`` when ``max_output_tokens`` cut the text (``in_progress`` in a stream's added event)."""
    content: list[OutputText]
    """One ``output_text`` part."""


class FunctionToolCall(WireModel):
    """One call of a function the reply makes; the client runs it and sends the result back in a
    ``function_call_output`` item with this ``call_id``."""

    type: Literal["function_call"] = "function_call"
    """Always ``function_call``."""
    id: str
    """The item's id (``fc_...``)."""
    call_id: str
    """The call's id (``call_...``), for the ``function_call_output`` item that answers it."""
    name: str
    """The function's name, one of the request's ``tools``."""
    arguments: str
    """The arguments as JSON text."""
    status: Literal["in_progress", "completed"] = "completed"
    """``completed`` (``in_progress`` in a stream's added event; a call cut by
    ``max_output_tokens`` is never returned as a call)."""


class ReasoningText(WireModel):
    """A reasoning model's thinking."""

    type: Literal["reasoning_text"] = "reasoning_text"
    """Always ``reasoning_text``."""
    text: str
    """The chosen sample's reasoning section (``<think>...</think>``), whole."""


class ReasoningOutput(WireModel):
    """The chosen sample's reasoning, before the message or calls."""

    type: Literal["reasoning"] = "reasoning"
    """Always ``reasoning``."""
    id: str
    """The item's id (``rs_...``)."""
    summary: list[dict[str, Any]] = Field(default_factory=list)
    """Always empty: no summary is written (``content`` has the reasoning whole)."""
    content: list[ReasoningText]
    """The reasoning text."""
    status: Literal["completed", "incomplete"] = "completed"
    """``incomplete`` when ``max_output_tokens`` cut the reply."""


OutputItem = ReasoningOutput | FunctionToolCall | OutputMessage


class InputTokensDetails(WireModel):
    """What the input tokens were."""

    cached_tokens: int
    """Input tokens the engine read from its prefix cache instead of computing them."""
    cache_write_tokens: int = 0
    """Always 0: no prompt cache is written or billed apart here (the engine's prefix cache is automatic)."""


class OutputTokensDetails(WireModel):
    """What the output tokens were."""

    reasoning_tokens: int
    """Output tokens spent in reasoning sections (``<think>...</think>``)."""


class ResponseUsage(WireModel):
    """Every token spent inside the request: all samples, steps and verifier calls."""

    input_tokens: int
    """Prompt tokens of every engine call (a prompt sent k times counts k times)."""
    input_tokens_details: InputTokensDetails
    """How many input tokens came from the engine's prefix cache."""
    output_tokens: int
    """Tokens generated by every engine call, the samples not chosen included."""
    output_tokens_details: OutputTokensDetails
    """How many output tokens were reasoning."""
    total_tokens: int
    """``input_tokens`` plus ``output_tokens``."""


class IncompleteDetails(WireModel):
    """Why a Response is incomplete."""

    reason: Literal["max_output_tokens"]
    """``max_output_tokens`` cut the reply; raise it for a whole one."""


class ResponseError(WireModel):
    """Why a streamed Response failed."""

    code: Literal["server_error", "rate_limit_exceeded"]
    """One of the Response's codes: ``rate_limit_exceeded`` for a 429, else ``server_error`` (the
    ``error`` event before ``response.failed`` has tts's own code, ``no_tool_call``, ...)."""
    message: str
    """What went wrong and what to change."""


class ResponseObject(WireModel):
    """The answer of POST /v1/responses (OpenAI's Response object, with the ``tts`` extension)."""

    id: str
    """The Response's id (``resp_...``); nothing is stored under it."""
    object: Literal["response"] = "response"
    """Always ``response``."""
    created_at: int
    """When the Response was started, in Unix seconds."""
    status: Literal["in_progress", "completed", "incomplete", "failed"]
    """``completed``; ``incomplete`` when ``max_output_tokens`` cut the reply; ``in_progress`` and
    ``failed`` only in a stream."""
    error: ResponseError | None = None
    """Why a streamed Response failed; else null."""
    incomplete_details: IncompleteDetails | None = None
    """Why the Response is incomplete; else null."""
    model: str
    """The model id the request named."""
    output: list[OutputItem]
    """The reply: a reasoning item (a reasoning model), then function calls or one message."""
    instructions: str | None = None
    """The request's instructions."""
    max_output_tokens: int | None = None
    """The request's ``max_output_tokens``."""
    temperature: float | None = None
    """The request's temperature."""
    top_p: float | None = None
    """The request's ``top_p``."""
    parallel_tool_calls: bool = True
    """The request's ``parallel_tool_calls`` (true when not given)."""
    tool_choice: Any = "auto"
    """The request's ``tool_choice`` (``auto`` when not given)."""
    tools: list[dict[str, Any]] = Field(default_factory=list)
    """The request's tools, as sent."""
    text: dict[str, Any] = Field(default_factory=lambda: {"format": {"type": "text"}})
    """The request's output format."""
    reasoning: dict[str, Any] | None = None
    """The request's ``reasoning`` settings."""
    truncation: Literal["disabled"] = "disabled"
    """Always ``disabled``: the conversation is never cut to fit."""
    store: bool = False
    """Always false: this server stores no responses."""
    previous_response_id: None = None
    """Always null: this server stores no responses."""
    metadata: dict[str, str] = Field(default_factory=dict)
    """The request's metadata, echoed."""
    user: str | None = _omitted("The request's user id, echoed.")
    usage: ResponseUsage | None = None
    """Every token spent inside the request, not only the chosen reply's; null until it is done."""
    tts: r.ChoiceExtension | None = _omitted("How the answer was reached and what it cost (once done).")


class ResponseStreamEvent(WireModel):
    """One server-sent event of a streamed Response (its ``type`` says which fields it has)."""

    type: str
    """``response.created``, ``response.in_progress``, ``response.output_item.added``,
    ``response.content_part.added``, ``response.output_text.delta``, ``response.output_text.done``,
    ``response.content_part.done``, ``response.function_call_arguments.delta``,
    ``response.function_call_arguments.done``, ``response.output_item.done``, ``response.completed``,
    ``response.incomplete``, ``error`` or ``response.failed``."""
    sequence_number: int
    """The event's place in the stream, from 0."""
    response: ResponseObject | None = _omitted("The Response so far (lifecycle events).")
    output_index: int | None = _omitted("The output item's place in ``output``.")
    item: OutputItem | None = _omitted("The output item (added: as it starts; done: whole).")
    item_id: str | None = _omitted("The output item's id.")
    content_index: int | None = _omitted("The content part's place in the message.")
    part: OutputText | None = _omitted("The content part.")
    delta: str | None = _omitted("Text or arguments this event adds.")
    text: str | None = _omitted("The whole text (output_text.done).")
    arguments: str | None = _omitted("The whole arguments (function_call_arguments.done).")
    name: str | None = _omitted("The function's name (function_call_arguments.done).")
    logprobs: list[dict[str, Any]] | None = _omitted("Always empty, on text events.")
    code: str | None = _omitted("The error's code (error).")
    message: str | None = _omitted("What went wrong and what to change (error).")
    tts: dict[str, Any] | None = _omitted("A progress event of the strategy (step, samples, tokens), on "
                                          "response.in_progress.")


def _id(prefix: str) -> str:
    return replies.new_id(prefix).replace("-", "_", 1)


def output_items(choice: r.ChatChoice) -> list[OutputItem]:
    """The output items of a chat choice: its reasoning, then its calls or its text."""
    msg, status = choice.message, "incomplete" if choice.finish_reason == "length" else "completed"
    items: list[OutputItem] = []
    if msg.reasoning_content:
        items.append(ReasoningOutput(id=_id("rs"), content=[ReasoningText(text=msg.reasoning_content)], status=status))
    if msg.tool_calls:
        items += [FunctionToolCall(id=_id("fc"), call_id=c.id, name=c.function.name, arguments=c.function.arguments)
                  for c in msg.tool_calls]
    else:
        items.append(OutputMessage(id=_id("msg"), status=status, content=[OutputText(text=msg.content or "")]))
    return items


def usage(sols: list[Any]) -> ResponseUsage:
    """The chat usage (:func:`tts.serve.replies.usage_block`) under the Responses' names."""
    block = replies.usage_block(sols)
    return ResponseUsage(
        input_tokens=block["prompt_tokens"], output_tokens=block["completion_tokens"],
        total_tokens=block["total_tokens"],
        input_tokens_details=InputTokensDetails(cached_tokens=block["prompt_tokens_details"]["cached_tokens"]),
        output_tokens_details=OutputTokensDetails(
            reasoning_tokens=block.get("completion_tokens_details", {}).get("reasoning_tokens", 0)))


def skeleton(body: ResponsesRequest, rid: str, created: int) -> ResponseObject:
    """A Response in progress: the request's settings echoed, no output yet."""
    return ResponseObject(
        id=rid, created_at=created, status="in_progress", model=body.model, output=[], instructions=body.instructions,
        max_output_tokens=body.max_output_tokens, temperature=body.temperature, top_p=body.top_p,
        parallel_tool_calls=True if body.parallel_tool_calls is None else body.parallel_tool_calls,
        tool_choice=body.tool_choice or "auto", tools=list(body.tools or []),
        text=body.text.model_dump(exclude_none=True, by_alias=True) if body.text and body.text.format
        else {"format": {"type": "text"}},
        reasoning=body.reasoning.model_dump(exclude_none=True) if body.reasoning else None,
        metadata=dict(body.metadata or {}), user=body.user)


def finished(body: ResponsesRequest, p: RequestPlan, sols: list[Any], rid: str, created: int) -> ResponseObject:
    """The whole Response of a solved plan (one job: a Responses request has one output)."""
    choice = replies.choice(p, p.jobs[0], sols[0])
    assert isinstance(choice, r.ChatChoice)
    cut = choice.finish_reason == "length"
    return skeleton(body, rid, created).model_copy(update={
        "status": "incomplete" if cut else "completed", "output": output_items(choice), "usage": usage(sols),
        "incomplete_details": IncompleteDetails(reason="max_output_tokens") if cut else None, "tts": choice.tts})


def whole(body: ResponsesRequest) -> Callable[[RequestPlan, list[Any]], ResponseObject]:
    """The builder of a whole (not streamed) Response, for :func:`tts.serve.solving.answer`."""
    def build(p: RequestPlan, sols: list[Any]) -> ResponseObject:
        return finished(body, p, sols, _id("resp"), replies.now())

    return build


class ResponseEvents:
    """The server-sent events of one streamed Response (the writer :mod:`tts.serve.solving`'s
    stream takes; the chat one is :class:`tts.serve.replies.Chunks`)."""

    def __init__(self, body: ResponsesRequest, p: RequestPlan) -> None:
        self.body, self.plan = body, p
        self.id, self.created = _id("resp"), replies.now()
        self.sequence = 0

    def _event(self, kind: str, **fields: Any) -> bytes:
        event = ResponseStreamEvent(type=kind, sequence_number=self.sequence, **fields)
        self.sequence += 1
        return b"event: " + kind.encode() + b"\ndata: " + json_bytes(event) + b"\n\n"

    def opening(self) -> list[bytes]:
        start = skeleton(self.body, self.id, self.created)
        return [self._event("response.created", response=start), self._event("response.in_progress", response=start)]

    def progress(self, index: int, ev: dict[str, Any]) -> bytes:
        return self._event("response.in_progress", response=skeleton(self.body, self.id, self.created),
                           tts={"event": "progress", **ev})

    def answers(self, sols: list[Any]) -> list[bytes]:
        done = finished(self.body, self.plan, sols, self.id, self.created)
        out = []
        for k, item in enumerate(done.output):
            out += self._item(k, item)
        return [*out, self._event("response.completed" if done.status == "completed" else "response.incomplete",
                                  response=done)]

    def _item(self, k: int, item: OutputItem) -> list[bytes]:
        """The events of one output item, in order: added, its text or arguments, done."""
        ids = {"item_id": item.id, "output_index": k}
        if isinstance(item, OutputMessage):
            text = item.content[0].text
            out = [self._event("response.output_item.added", output_index=k,
                               item=item.model_copy(update={"content": [], "status": "in_progress"})),
                   self._event("response.content_part.added", **ids, content_index=0, part=OutputText(text="")),
                   self._event("response.output_text.delta", **ids, content_index=0, delta=text, logprobs=[]),
                   self._event("response.output_text.done", **ids, content_index=0, text=text, logprobs=[]),
                   self._event("response.content_part.done", **ids, content_index=0, part=item.content[0])]
        elif isinstance(item, FunctionToolCall):
            out = [self._event("response.output_item.added", output_index=k,
                               item=item.model_copy(update={"arguments": "", "status": "in_progress"})),
                   self._event("response.function_call_arguments.delta", **ids, delta=item.arguments),
                   self._event("response.function_call_arguments.done", **ids, arguments=item.arguments,
                               name=item.name)]
        else:
            out = [self._event("response.output_item.added", output_index=k, item=item)]
        return [*out, self._event("response.output_item.done", output_index=k, item=item)]

    def failed(self, message: str, status: int, code: str | None) -> list[bytes]:
        """An ``error`` event with tts's code (``no_tool_call``, ``upstream_overloaded``, ...), then
        ``response.failed`` whose ``error.code`` is one of the Response's own codes."""
        own = "rate_limit_exceeded" if status == 429 else "server_error"
        end = skeleton(self.body, self.id, self.created).model_copy(
            update={"status": "failed", "error": ResponseError(code=own, message=message)})
        return [self._event("error", code=code or own, message=message), self._event("response.failed", response=end)]

    def closing(self) -> list[bytes]:
        return []
