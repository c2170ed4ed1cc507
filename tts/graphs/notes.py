"""Roles for sleep-time compute: notes written once about a shared context, read by every query.

Source: Lin et al. 2025, "Sleep-time Compute: Beyond Inference Scaling at Test-time" (cited from
memory): when many queries share a context, let the model think about the context alone while
no query is waiting ("sleep time"), then answer each query from the context plus those notes with
less test-time compute; the sleep-time cost is amortised over the queries.

The shared context is the part of a question before the last ``query_marker`` (default
``Question:``), e.g. a story followed by ``Question: how many ...?`` (the ``stories`` benchmark).
A question without the marker is its own context (nothing is shared).

1. ``note_taker``: per distinct context, ONE request for notes (the queries are not shown). The
   node remembers the notes of every context it has written for, across the batches of a run:
   the first problem of a context pays for them (its usage holds the notes' tokens), later
   problems reuse them at no cost (counted as ``notes_reused``). So a run's mean tokens per
   problem is the amortised cost per query.
2. ``note_reader``: answers the query given the context and the notes (``n`` samples).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from tts.backends.base import GenerationRequest, Message
from tts.graphs.roles import MODEL_SETTINGS, Candidate, NodeContext, Role, RoleOutput
from tts.types import Problem

NOTE = "note"


def split_context(question: str, marker: str) -> tuple[str, str]:
    """(shared context, query) of a question: split at the last ``marker`` (the query keeps it).
    Without the marker the whole question is both: nothing is shared, and the reader's prompt
    still ends with the question."""
    at = question.rfind(marker)
    if at <= 0:
        return question.strip(), question.strip()
    return question[:at].strip(), question[at:].strip()


class NoteTaker(Role):
    """Write notes about a question's shared context once per context (sleep-time compute)."""

    name = "note_taker"
    produces = NOTE
    writes = False
    keeps_prompt = False
    settings = frozenset({"model", "temperature", "max_tokens", "prompt", "query_marker"})
    prompt_fields = ("context",)
    # A worked line shows a small model the form of a useful note (start, change, end).
    template = ("{context}\n\nQuestions about the text above will follow later. Write notes for them: one line per "
                "person, with what they have at the start and at the end, like this:\n"
                "Lucy: 6 shells at the start, gets 3 more, 6 + 3 = 9 shells at the end.")
    default_temperature = 0.0

    def __init__(self) -> None:
        # context digest -> its notes (candidates), kept for the life of the node: later batches
        # of a run reuse notes written in earlier ones.
        self._notes: dict[str, tuple[Candidate, ...]] = {}
        # context digest -> the problem that pays for its notes in the level being run
        self._owner: dict[str, str] = {}

    def abandon(self) -> None:
        """A level whose generation failed reads nothing: no question pays for notes any more, so the
        next batch's first question of each context asks for them (a long-lived strategy, such as the
        server's, would otherwise leave every other question of the context without notes)."""
        self._owner.clear()

    @classmethod
    def check_inputs(cls, produced: Sequence[str]) -> str | None:
        if produced:
            return "a note_taker takes no inputs (it reads the question's shared context)"
        return None

    @staticmethod
    def _digest(context: str) -> str:
        return hashlib.sha256(context.encode()).hexdigest()[:16]

    def plan(self, ctx: NodeContext, problem: Problem, inputs) -> list[GenerationRequest]:
        context, _ = split_context(problem.question, ctx.spec.query_marker)
        digest = self._digest(context)
        if digest in self._notes or self._owner.get(digest, problem.id) != problem.id:
            return []
        self._owner[digest] = problem.id
        text = (ctx.spec.prompt or self.template).format(context=context)
        # Keyed and seeded by the context, not by the query that happens to pay for the notes.
        return [ctx.request(Problem(f"context:{digest}", context), (Message("user", text),), 0, n=1)]

    def read(self, ctx, problem, inputs, results) -> RoleOutput:
        context, _ = split_context(problem.question, ctx.spec.query_marker)
        digest = self._digest(context)
        if results:
            c = results[0].completions[0]
            note = Candidate(f"{ctx.name}:0", ctx.name, c.text, kind=NOTE, completion_tokens=c.completion_tokens,
                             finish_reason=c.finish_reason, written=False)
            self._notes[digest] = (note,)
            self._owner.pop(digest, None)
            return RoleOutput((note,), {"notes_written": 1})
        if digest in self._notes:
            return RoleOutput(self._notes[digest], {"notes_reused": 1})
        return RoleOutput(())


class NoteReader(Role):
    """Answer the question from its context plus the notes of its input ``note_taker``."""

    name = "note_reader"
    settings = MODEL_SETTINGS | {"query_marker"}
    prompt_fields = ("question", "context", "notes", "query")
    template = "{context}\n\nNotes on the text:\n{notes}\n\n{query}"

    @classmethod
    def check_inputs(cls, produced: Sequence[str]) -> str | None:
        if list(produced) != [NOTE]:
            return "a note_reader reads one input: the note_taker whose notes it uses"
        return None

    def plan(self, ctx, problem, inputs) -> list[GenerationRequest]:
        context, query = split_context(problem.question, ctx.spec.query_marker)
        notes = "\n".join(c.text.strip() for c in inputs[0]) or "(none)"
        return [ctx.request(problem, self.messages(ctx, problem, context=context, notes=notes, query=query), 0)]

    def read(self, ctx, problem, inputs, results) -> RoleOutput:
        return RoleOutput(tuple(ctx.solution(i, c.text, c) for i, c in enumerate(results[0].completions)))
