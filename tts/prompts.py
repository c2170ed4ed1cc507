"""Prompt templates: how a Problem becomes chat messages.

A benchmark supplies its default template (the demo benchmark's few-shot prompt, a "put the final
answer in \\boxed{}" instruction for competition math); users override it in the run config.
Strategies receive the rendered messages and never set chat templates themselves.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from tts.answers.code import CODE
from tts.answers.kinds import TEXT
from tts.backends.base import Message
from tts.backends.chat import messages_from_openai
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


PROGRAM_PROMPT = PromptTemplate(
    user="{question}\n\nWrite a Python program that computes the answer to this problem and prints only the "
         "final answer. Put the whole program in one ```python code block."
)
"""Program-aided answers (``program_vote``): the program's printed output is the answer."""


TIR_PROMPT = PromptTemplate(
    user="{question}\n\nSolve the problem by reasoning step by step and running Python code where it helps: put "
         "code in ```python blocks; after each block you will be shown its printed output in an ```output block. "
         "Put your final answer within \\boxed{{}}."
)
"""Tool-integrated reasoning (``tir``): prose and programs interleaved, outputs shown back."""


class CodePromptTemplate(PromptTemplate):
    """A template whose replies answer with a program: strategies extract and compare programs
    (:data:`tts.answers.code.CODE`), never numbers."""

    answer_extract: ClassVar[Any] = CODE


CODE_PROMPT = CodePromptTemplate(
    user="Please provide a self-contained Python script that solves the following problem in a markdown "
         "code block:\n```python\n{question}\n```"
)
"""Default for code problems (HumanEval): the function's signature and docstring, answered with the
whole function in a fenced block (EvalPlus's instruction for chat models)."""


PLAIN_PROMPT = PromptTemplate()
"""The question as written: no instruction added (a conversation as an agent sent it)."""


PROMPT_NAMES = {"plain": PLAIN_PROMPT, "math": MATH_PROMPT}
"""The prompts a name picks, as ``tts serve --prompt`` and ``tts mcp --prompt`` name them: "plain"
sends the question or conversation as written (answers in free text, tool calls or JSON), "math"
asks it step by step with the answer in \\boxed{}."""


def named_prompt(prompt: str | PromptTemplate) -> PromptTemplate:
    """A prompt template given as itself or by name (:data:`PROMPT_NAMES`), as the command line
    names them.

    Raises:
        ValueError: An unknown name, or something that is neither a name nor a template (one line).
    """
    if isinstance(prompt, PromptTemplate):
        return prompt
    if isinstance(prompt, str) and prompt in PROMPT_NAMES:
        return PROMPT_NAMES[prompt]
    names = ", ".join(repr(k) for k in PROMPT_NAMES)
    shown = repr(prompt) if isinstance(prompt, str) else f"a {type(prompt).__name__}"
    raise ValueError(f"prompt {shown} is not a prompt name ({names}) or a PromptTemplate; give one of them")


def answers_in_text(template: object) -> bool:
    """Whether a template adds nothing to the question (no system message, examples or instruction):
    the conversation goes as sent, and its answers are free text rather than a boxed value."""
    return (isinstance(template, PromptTemplate) and template.system is None and not template.few_shot
            and template.user == "{question}")


def extract_options(template: object) -> dict[str, Any]:
    """A strategy's ``extract`` for a template: free text (:data:`tts.answers.kinds.TEXT`) when the
    template adds nothing (the conversation as sent: never a number read out of prose), else the
    strategy's default (math); a template that names its answers' extraction (``answer_extract``:
    the code prompt's programs) gets that. Returned as keyword arguments for the strategy's constructor."""
    own = getattr(template, "answer_extract", None)
    if own is not None:
        return {"extract": own}
    return {"extract": TEXT} if answers_in_text(template) else {}


def chat_prompt(template: PromptTemplate) -> Callable[[Problem], tuple[Message, ...]]:
    """A prompt function that renders a problem's conversation when it carries one.

    A problem whose ``metadata["messages"]`` holds OpenAI chat messages is rendered with their
    structure kept (:func:`tts.backends.chat.messages_from_openai`: tool calls, tool results with
    their ids, names): every turn before the last as sent, the last one as sent too when
    ``template`` adds nothing (:data:`PLAIN_PROMPT`), else re-rendered by ``template`` (the math
    prompt's instruction appended to a last user turn). Problems without a conversation are rendered
    by ``template`` alone.

    Raises:
        ChatInputError: A message the model cannot take (an image part, an unknown role).
    """
    render = template.render
    plain = answers_in_text(template)

    def prompt(problem: Problem) -> tuple[Message, ...]:
        raw = problem.metadata.get("messages") if isinstance(problem.metadata, dict) else None
        if not raw:
            return render(problem)
        messages = messages_from_openai(raw)
        if plain or messages[-1].role != "user":
            return messages
        history = messages[:-1]
        rendered = render(problem)
        # The template's own system message goes first unless the chat has one.
        if rendered and rendered[0].role == "system" and history and history[0].role == "system":
            rendered = rendered[1:]
        return history + tuple(rendered)

    prompt.template = template  # type: ignore[attr-defined]
    return prompt
