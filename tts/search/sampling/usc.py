"""Universal self-consistency (USC): the model itself picks the most consistent of its n replies.

Chen, Aksitov, Alon, Ren, Xiao, Yin, Prakash, Sutton, Wang & Zhou 2023, "Universal
Self-Consistency for Large Language Model Generation" (arXiv:2311.17311). Self-consistency needs
an answer it can extract and count; USC works on any output (summaries, open questions, code,
"write one sentence about rain") by asking the model which reply agrees most with the others:

1. Sample n replies to the problem's prompt: ONE request with n samples, for all problems in one
   generator call.
2. For each problem, ONE more request to the same generator: the paper's selection prompt
   (Figure 2; :data:`USC_TEMPLATE`, quoted from the paper), i.e. the question, then the replies as
   "Response 0: ...", "Response 1: ..." in sampling order, then the instruction to evaluate them and
   select the most consistent one by majority consensus, starting with "The most consistent
   response is Response X". All problems' selection requests go in one generator call.
3. Read X from the reply; the answer is that reply's final text (:func:`tts.answers.free_text.text_answer`).

What tts decides where the paper is silent or departs, and the setting that gives the paper's:

* The selection request is greedy (temperature 0), its length capped by ``selection_max_tokens``
  (default 64: the answer sentence, not a written evaluation). The paper does not state the
  selection's decoding settings here; a larger cap lets a model explain before it names X.
* Replies are shown without a thinking section (their :func:`text_answer`): a reasoning model's
  thought would fill the context, and the selection is about the answers. The paper's models do
  not think apart, so this changes nothing for them.
* X is read from "most consistent response is Response X" when the reply says it, else from the
  first "Response N" it writes (a small model often reorders the sentence). A reply that names
  no response, or one out of range, falls back to Response 0, the first sample, and is counted
  as ``usc_unparsed`` in ``trace.events``; the paper says nothing about unreadable selections,
  and the first sample is what a single draw would have given.
* The confidence is the chosen reply's MBR utility (:func:`tts.answers.free_text.mbr_select`: its
  mean chrF against the other replies, in [0, 1]): USC itself gives no number, and a reply
  far from all the others is a weak choice whoever made it.
* With one reply (n = 1, or a budget that allows one) there is nothing to select: no selection
  request is sent.

The selection prompt holds every reply, so n * max_tokens plus the question must fit the model's
context (the paper notes the same limit). ``trace.notes["usc"]`` keeps the raw selection reply,
``trace.selected`` the chosen index. The strategy is a :class:`~tts.search.base.Strategy`, not a
``SamplingStrategy``: it cannot share another sampling strategy's draw, because its aggregation
makes a model call of its own (and it is not replayable from a pool: ``pool_rule`` None).

Budgets: ``Budget.samples`` caps n (the selection request is not a sample, as a verifier's call
is not); ``Budget.tokens`` caps n at the replies whose worst case (``max_tokens`` each) fits
after the selection's worst case (``selection_max_tokens``) is set aside.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from pydantic import Field

from tts.answers.free_text import mbr_select, text_answer
from tts.backends.base import GenerationRequest, GenerationResult, Message, derive_seed
from tts.config import SamplingStrategyConfig, StrategyConfigBase
from tts.search.base import BudgetUse, Strategy, StrategyInputError, to_sample
from tts.types import Budget, RequestShape, Solution, Trace, Usage

USC_TEMPLATE = (
    "I have generated the following responses to the question: {question}\n\n"
    "{responses}\n\n"
    "Evaluate these responses.\n"
    "Select the most consistent response based on majority consensus.\n"
    'Start your answer with "The most consistent response is Response X" (without quotes).')
"""The selection prompt of Chen et al. 2023 (arXiv:2311.17311, Figure 2), quoted:
``{question}`` is the problem's question, ``{responses}`` the numbered replies
(:func:`numbered_responses`)."""

_CHOICE = re.compile(r"most\s+consistent\s+response\s+is\s*:?\s*\**\s*(?:response\s*)?#?\s*(\d+)", re.IGNORECASE)
_ANY_RESPONSE = re.compile(r"\bresponse\s*#?\s*(\d+)", re.IGNORECASE)


class UscConfig(SamplingStrategyConfig):
    """Sample n replies, then ask the model which is the most consistent (Chen et al. 2023)."""

    kind: Literal["usc"] = "usc"
    selection_max_tokens: int = Field(64, ge=1, le=32768)
    """Most tokens of the selection reply (greedy). 64 holds the answer sentence "The most
    consistent response is Response X"; raise it to let the model reason before it names X."""
    selection_template: str = Field(USC_TEMPLATE, min_length=1)
    """The selection prompt, with ``{question}`` and ``{responses}``; the default is the paper's."""


def numbered_responses(texts: Sequence[str]) -> str:
    """The replies as the paper shows them: "Response 0: ...", "Response 1: ...", blank lines between."""
    return "\n\n".join(f"Response {i}: {t}" for i, t in enumerate(texts))


def parse_selection(reply: str, n: int) -> int | None:
    """The response index a selection reply names, or None when it names none in 0..n-1.

    Read from "The most consistent response is Response X" when present, else from the first
    "Response N" (after any thinking section).
    """
    text = text_answer(reply) or ""
    match = _CHOICE.search(text) or _ANY_RESPONSE.search(text)
    if match is None:
        return None
    index = int(match.group(1))
    return index if 0 <= index < n else None


class UniversalSelfConsistency(Strategy):
    """Universal self-consistency; see the module docstring."""

    name = "usc"
    config_class: ClassVar[type[StrategyConfigBase]] = UscConfig
    budget_use = BudgetUse.WHOLE_SAMPLES  # replies; samples_within keeps room for the selection
    pool_rule = None  # the selection is a model call: not replayable from a pool of samples

    def samples_within(self, budget: Budget | None) -> int:
        """n under ``budget``: ``samples`` caps the replies; ``tokens`` must cover the selection
        reply's worst case (``selection_max_tokens``, when more than one reply is drawn) plus
        ``max_tokens`` per reply."""
        n = self.config.n
        if budget is None:
            return n
        if budget.samples is not None:
            n = min(n, budget.samples)
        if budget.tokens is not None:
            per_reply, select = self.sampling.max_tokens, self.config.selection_max_tokens
            n = min(n, (budget.tokens - select) // per_reply)
            if n < 2 and budget.tokens >= per_reply:
                n = 1  # one reply needs no selection
        if n < 1:
            raise StrategyInputError(
                f"{self.name}: a budget of {budget} does not cover one reply of up to {self.sampling.max_tokens} "
                "tokens; raise the budget or lower max_tokens.")
        return n

    def selection_request(self, problem: Any, texts: Sequence[str]) -> GenerationRequest:
        """The greedy selection request that shows ``texts`` (the replies' final texts) to the model."""
        prompt = self.config.selection_template.format(question=problem.question, responses=numbered_responses(texts))
        return GenerationRequest(messages=(Message("user", prompt),), n=1, temperature=0.0, top_p=1.0,
                                 max_tokens=self.config.selection_max_tokens,
                                 seed=derive_seed(self.seed, problem.id, 1), key=problem.id)

    def solve(self, problems: Sequence[Any], budgets: Sequence[Budget | None] | None = None) -> list[Solution]:
        ns = self.samples_for(problems, budgets)
        # 1. n replies per problem: one request each, all problems in one call.
        drawn = self.generator.generate([
            GenerationRequest(messages=self.prompt(p), n=n, temperature=self.sampling.temperature,
                              top_p=self.sampling.top_p, max_tokens=self.sampling.max_tokens,
                              seed=derive_seed(self.seed, p.id, 0), key=p.id)
            for p, n in zip(problems, ns, strict=True)])
        finals = [[text_answer(c.text) for c in r.completions] for r in drawn]
        # 2. One greedy selection request per problem with more than one reply, all in one call.
        asks = [i for i, f in enumerate(finals) if len(f) > 1]
        replies = self.generator.generate(
            [self.selection_request(problems[i], [t or "" for t in finals[i]]) for i in asks]) if asks else []
        selections: dict[int, GenerationResult] = dict(zip(asks, replies, strict=True))
        # 3. Read each choice.
        return [self._choose(p, r, f, selections.get(i)) for i, (p, r, f) in enumerate(zip(problems, drawn, finals,
                                                                                             strict=True))]

    def _choose(self, problem: Any, result: GenerationResult, finals: list[str | None],
                selection: GenerationResult | None) -> Solution:
        samples = tuple(to_sample(c, text_answer) for c in result.completions)
        if not samples:
            return Solution(problem.id, None, 0.0, result.usage, Trace(self.name, samples))
        usage: Usage = result.usage
        events: dict[str, int] = {}
        notes: dict[str, Any] = {}
        chosen = 0
        if selection is not None:
            usage = usage + selection.usage
            raw = selection.completions[0].text if selection.completions else ""
            notes["usc"] = raw
            picked = parse_selection(raw, len(samples))
            if picked is None:
                events["usc_unparsed"] = 1
            else:
                chosen = picked
        utilities = mbr_select([t or "" for t in finals]).utilities
        answer = finals[chosen]
        confidence = utilities[chosen] if answer is not None else 0.0
        trace = Trace(self.name, samples, selected=chosen, events=events, notes=notes)
        return Solution(problem.id, answer, confidence, usage, trace)

    @classmethod
    def planned_requests(cls, n: int, prompt_tokens: int, gen_tokens: int, cached_tokens: int = 0) -> list[RequestShape]:
        """Cost hook (``tts cost``): one request of n replies, then (n > 1) one greedy selection
        request whose prompt holds the n replies (about ``n * gen_tokens`` tokens beyond the
        question) and whose reply is at most the default ``selection_max_tokens``."""
        shapes = [RequestShape(prompt_tokens, cached_tokens, (gen_tokens,) * n)]
        if n > 1:
            select = cls.config_class.model_fields["selection_max_tokens"].default
            shapes.append(RequestShape(prompt_tokens + n * (gen_tokens + 4) + 50, 0, (select,)))
        return shapes
