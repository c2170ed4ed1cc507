"""Prompt templates: how a Problem becomes chat messages.

A benchmark supplies its default template (the demo benchmark's few-shot prompt, a "put the final
answer in \\boxed{}" instruction for competition math); users override it in the run config.
Strategies receive the rendered messages and never set chat templates themselves.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from tts.backends.base import Message
from tts.types import Problem


class PromptTemplate(BaseModel):
    """System message, few-shot turns and a user template with a ``{question}`` slot."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    system: str | None = None
    """Optional system message."""
    few_shot: tuple[tuple[str, str], ...] = ()
    """(user, assistant) example turns placed before the question."""
    user: str = Field("{question}", pattern=r"\{question\}")
    """User message; must contain ``{question}``."""

    def render(self, problem: Problem) -> tuple[Message, ...]:
        """The chat messages for one problem."""
        msgs: list[Message] = []
        if self.system:
            msgs.append(Message("system", self.system))
        for user, assistant in self.few_shot:
            msgs += [Message("user", user), Message("assistant", assistant)]
        msgs.append(Message("user", self.user.format(question=problem.question)))
        return tuple(msgs)


MATH_PROMPT = PromptTemplate(
    user="{question}\n\nSolve the problem step by step. Put your final answer within \\boxed{{}}."
)
"""Default for competition math and word problems."""
