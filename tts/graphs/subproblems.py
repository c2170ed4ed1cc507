"""Roles for selective sub-problem allocation (SCALE): decompose, assess, solve step by step.

Source: Xiao et al. 2025, "SCALE: Selective Resource Allocation for Overcoming Performance
Bottlenecks in Mathematical Test-time Scaling" (its four stages, cited from memory): decompose the
problem into sub-problems; assess each one's difficulty; give easy ones a fast single answer
(System 1) and hard ones a scaled strategy (System 2); solve them in order, each seeing the
earlier answers. Here each stage is a graph node, so the method is a graph file
(``examples/graphs/scale.yaml``), not a special case:

1. ``decomposer``: one request asks the model to split the problem into at most ``max_parts``
   numbered questions; its outputs are the sub-problems (index 1..k) plus the original problem
   (index 0). A reply with no numbered line leaves only the original problem (counted as
   ``decomposition_fallback``).
2. ``assessor``: for every sub-problem, P(Yes) to "is this step easy?" read from the first
   token (or the share of ``n`` sampled verdicts ending in Yes).
3. ``subsolver`` (``part: i``): answers sub-problem ``i`` (0: the original problem), its prompt
   carrying every earlier step's question and voted answer. Behind an assessor, an easy part
   (P(easy) >= ``easy_threshold``) gets one greedy sample and a hard one ``n`` samples and a
   vote; without one every part gets ``n``. A part the decomposition did not produce makes no
   request and passes nothing on.

A sub-problem's requests carry the key ``<problem id>#<part>`` (part 0: the problem id), so that
the scripted backend can be given a distribution per sub-problem.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from tts.backends.base import GenerationRequest, Message
from tts.graphs.roles import (
    MODEL_SETTINGS,
    Candidate,
    NodeContext,
    Role,
    RoleOutput,
    yes_score,
)
from tts.search.base import vote
from tts.types import Problem, Sample

SUBPROBLEM = "subproblem"
ASSESSMENT = "assessment"

_NUMBERED = re.compile(r"^\s*(?:step\s*)?\d{1,2}\s*[.):]\s*(\S.*?)\s*$", re.IGNORECASE)


def parse_parts(text: str, max_parts: int) -> list[str]:
    """The numbered questions of a decomposer's reply (``1. ...``, ``2) ...``, ``Step 3: ...``).

    More than ``max_parts`` lines keep the first ``max_parts - 1`` and the last (the last usually
    asks for the final answer). Repeated lines count once.
    """
    parts: list[str] = []
    for line in text.splitlines():
        m = _NUMBERED.match(line)
        if m and m.group(1) not in parts:
            parts.append(m.group(1))
    if len(parts) > max_parts:
        parts = parts[: max_parts - 1] + parts[-1:]
    return parts


def part_key(problem: Problem, part: int) -> str:
    """The request key of one sub-problem (the problem id for part 0, the original problem)."""
    return problem.id if part == 0 else f"{problem.id}#{part}"


class Decomposer(Role):
    """Split the problem into at most ``max_parts`` simpler questions (SCALE stage 1)."""

    name = "decomposer"
    produces = SUBPROBLEM
    writes = False
    keeps_prompt = False
    settings = frozenset({"model", "temperature", "max_tokens", "prompt", "max_parts"})
    prompt_fields = ("question", "max_parts")
    template = ("Problem: {question}\n\nDo not solve the problem. Break it into at most {max_parts} simpler questions "
                "that, answered in order, lead to its answer. Write one question per line, numbered 1., 2., ...")
    default_temperature = 0.0

    @classmethod
    def check_inputs(cls, produced: Sequence[str]) -> str | None:
        if produced:
            return "a decomposer takes no inputs (it splits the problem itself)"
        return None

    def plan(self, ctx: NodeContext, problem: Problem, inputs) -> list[GenerationRequest]:
        messages = self.messages(ctx, problem, max_parts=str(ctx.spec.max_parts))
        return [ctx.request(problem, messages, 0, n=1)]

    def read(self, ctx, problem, inputs, results) -> RoleOutput:
        text = results[0].completions[0].text if results and results[0].completions else ""
        parts = parse_parts(text, ctx.spec.max_parts)
        whole = Candidate(f"{ctx.name}:0", ctx.name, problem.question, kind=SUBPROBLEM, written=False)
        subs = tuple(Candidate(f"{ctx.name}:{i}", ctx.name, q, kind=SUBPROBLEM, written=False)
                     for i, q in enumerate(parts, start=1))
        return RoleOutput((whole, *subs), {} if parts else {"decomposition_fallback": 1})


def _subproblems(inputs: Sequence[Sequence[Candidate]]) -> list[Candidate]:
    return [c for group in inputs for c in group if c.kind == SUBPROBLEM]


class Assessor(Role):
    """Rate each sub-problem's difficulty: P(Yes) to "is this step easy?" (SCALE stage 2)."""

    name = "assessor"
    produces = ASSESSMENT
    writes = False
    keeps_prompt = False
    prompt_fields = ("question", "step")
    template = ("Problem: {question}\n\nOne step of solving it: {step}\n\nIs this step easy enough to answer correctly "
                "at once, without working? Answer Yes or No.")
    sampled_template = ("Problem: {question}\n\nOne step of solving it: {step}\n\nIs this step easy enough to answer "
                        "correctly at once? Think briefly, then end your reply with Yes or No.")

    @classmethod
    def check_inputs(cls, produced: Sequence[str]) -> str | None:
        if list(produced) != [SUBPROBLEM]:
            return "an assessor reads one input: the decomposer whose sub-problems it rates"
        return None

    @classmethod
    def check_settings(cls, spec) -> str | None:
        if spec.n == 1 and (spec.temperature is not None or spec.max_tokens is not None):
            return ("with n = 1 an assessor reads P(Yes) from one greedy token, so temperature and max_tokens "
                    "do not apply; remove them, or set n > 1 to sample reasoned verdicts")
        return None

    def plan(self, ctx, problem, inputs) -> list[GenerationRequest]:
        template = ctx.spec.prompt or (self.template if ctx.spec.n == 1 else self.sampled_template)
        out = []
        for i, sub in enumerate(_subproblems(inputs)):
            text = template.format(question=problem.question, step=sub.text)
            extra = {"temperature": 0.0, "max_tokens": 1, "top_logprobs": 10} if ctx.spec.n == 1 else {}
            out.append(ctx.request(problem, (Message("user", text),), i, key=part_key(problem, i), **extra))
        return out

    def read(self, ctx, problem, inputs, results) -> RoleOutput:
        out, invalid = [], 0
        for i, (sub, r) in enumerate(zip(_subproblems(inputs), results, strict=True)):
            score = yes_score(r, sampled=ctx.spec.n > 1)
            if score is None:
                score, invalid = 0.0, invalid + 1  # unreadable: treated as hard (the safe side)
            out.append(Candidate(f"{ctx.name}:{i}", ctx.name, sub.text, kind=ASSESSMENT, score=score, about=sub,
                                 written=False))
        return RoleOutput(tuple(out), {"invalid_assessment": invalid} if invalid else {})


class SubSolver(Role):
    """Answer sub-problem ``part`` with the earlier steps' answers as context (SCALE stages 3-4).

    Inputs: the decomposer first, then optionally an assessor, then the subsolvers of earlier
    parts (their voted answers are the context, in input order).
    """

    name = "subsolver"
    settings = MODEL_SETTINGS | {"part", "easy_threshold"}
    prompt_fields = ("question", "steps", "step")
    template = "{question}\n\n{steps}Now answer this: {step}"

    @classmethod
    def check_inputs(cls, produced: Sequence[str]) -> str | None:
        if not produced or produced[0] != SUBPROBLEM:
            return "a subsolver's first input is the decomposer whose sub-problem it answers"
        rest = list(produced[1:])
        if rest and rest[0] == ASSESSMENT:
            rest = rest[1:]
        if any(p != "solution" for p in rest):
            return ("a subsolver reads the decomposer, then optionally one assessor, then earlier subsolvers; "
                    "list its inputs in that order")
        return None

    @staticmethod
    def steps(inputs: Sequence[Sequence[Candidate]]) -> list[tuple[str, str]]:
        """(question, voted answer) of each earlier step that answered its sub-problem."""
        out = []
        for group in inputs[1:]:
            sols = [c for c in group if c.kind == "solution" and c.about is not None and c.about.kind == SUBPROBLEM]
            if not sols:
                continue
            answer, _, _, _ = vote([Sample(c.text, c.answer) for c in sols])
            if answer is not None:
                out.append((sols[0].about.text, answer))
        return out

    def _target(self, ctx: NodeContext, inputs) -> tuple[Candidate | None, float | None]:
        """The sub-problem this node answers, and its P(easy) when an assessor rated it."""
        subs = {c.id: c for c in inputs[0] if c.kind == SUBPROBLEM}
        target = subs.get(f"{inputs[0][0].node}:{ctx.spec.part}") if inputs[0] else None
        easy = None
        for group in inputs[1:2]:
            for c in group:
                if c.kind == ASSESSMENT and target is not None and c.about is not None and c.about.id == target.id:
                    easy = c.score
        return target, easy

    def plan(self, ctx, problem, inputs) -> list[GenerationRequest]:
        target, easy = self._target(ctx, inputs)
        if target is None:
            return []
        done = self.steps(inputs)
        steps = "".join(f"Step {i}: {q} Answer: {a}.\n" for i, (q, a) in enumerate(done, start=1))
        steps = f"Steps solved so far:\n{steps}\n" if steps else ""
        if ctx.spec.part == 0 and not done and ctx.spec.prompt is None:
            messages = ctx.prompt(problem)  # the original problem with nothing to add: its own prompt
        else:
            step = "the problem above." if ctx.spec.part == 0 else target.text
            messages = self.messages(ctx, problem, steps=steps, step=step)
        key = part_key(problem, ctx.spec.part)
        if easy is not None and easy >= ctx.spec.easy_threshold:
            return [ctx.request(problem, messages, 0, n=1, temperature=0.0, key=key)]
        return [ctx.request(problem, messages, 0, key=key)]

    def read(self, ctx, problem, inputs, results) -> RoleOutput:
        target, easy = self._target(ctx, inputs)
        if target is None or not results:
            return RoleOutput(())
        hard = easy is None or easy < ctx.spec.easy_threshold
        cands = tuple(ctx.solution(i, c.text, c, about=target) for i, c in enumerate(results[0].completions))
        return RoleOutput(cands, {"hard_part" if hard else "easy_part": 1})
