"""The roles a collaboration-graph node can play (registry ``tts.registry.ROLES``).

A role turns (problem, its inputs' outputs) into generation requests (:meth:`Role.plan`) and the
completions into outputs (:meth:`Role.read`). Outputs are :class:`Candidate` values: solutions
with their extracted answers, critiques (about a solution), or solutions carrying a score
(verifier, ranker) or a vote share (voter). Roles never call a generator: the executor batches
the requests of every node of a level, across problems, into one call per model.

Prompts: roles that write solutions (generator, critic, reviser, fuser) keep the benchmark's
prompt (system message and few-shot turns, which teach a small model the answer format) and
replace its last user message with the role's text; judges (verifier, ranker) see only their own
question. ``{question}`` is the benchmark's rendered question.

Sources of the role designs: mixture-of-agents aggregation (Wang et al. 2024, "Mixture-of-Agents
Enhances Large Language Model Capabilities"), multi-agent debate (Du et al. 2023, "Improving
Factuality and Reasoning in Language Models through Multiagent Debate"), critique-then-revise
(Madaan et al. 2023, "Self-Refine"), LLM judges reading P(Yes) (Zheng et al. 2023) or sampled
verdicts (Zhang et al. 2024, "Generative Verifiers").
"""

from __future__ import annotations

import math
import random
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from tts.backends.base import GenerationRequest, GenerationResult, Message, derive_seed
from tts.search.base import vote
from tts.types import Problem, Sample
from tts.verifiers.judge import final_verdict, p_yes

if TYPE_CHECKING:
    from tts.graphs.graph import NodeSpec

MODEL_SETTINGS = frozenset({"model", "n", "temperature", "max_tokens", "prompt"})
"""The node settings every role that calls a model takes; a role adds its own to these."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """One output of a node. ``id``, ``node`` and ``text`` may be given by position, the rest
    only by name.

    Args:
        id: ``node:index``, unique within a problem's run of the graph.
        node: The node that made it.
        text: The text (a solution, a critique).
        answer: The answer extracted from a solution (None for critiques, or when none was found).
        kind: "solution" or "critique".
        score: Verifier P(correct), ranker preference or voter share; None when not scored.
        about: The candidate a critique, score or vote is about.
        completion_tokens: Tokens generated for it (0 for scores and votes).
        finish_reason: The backend's finish reason, when it was generated.
        written: False for a candidate that passes another on with a score or a vote.
    """

    id: str
    node: str
    text: str
    _: KW_ONLY
    answer: str | None = None
    kind: str = "solution"
    score: float | None = None
    about: Candidate | None = field(default=None, repr=False)
    completion_tokens: int = 0
    finish_reason: str | None = None
    written: bool = True

    def origin(self) -> Candidate:
        """The written solution behind a score or vote (itself when it was written here)."""
        c = self
        while not c.written and c.about is not None:
            c = c.about
        return c


@dataclass(frozen=True, slots=True)
class RoleOutput:
    """What a node made for one problem: candidates, counted events, and a voter's votes."""

    candidates: tuple[Candidate, ...]
    events: dict[str, int] = field(default_factory=dict)
    votes: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class NodeContext:
    """What a role needs to know about its node and the run."""

    name: str
    spec: NodeSpec
    prompt: Callable[[Problem], tuple[Message, ...]]
    extract: Callable[[str], str | None]
    temperature: float
    top_p: float
    max_tokens: int
    seed: int

    def request(self, problem: Problem, messages: tuple[Message, ...], index: int, **kw: Any) -> GenerationRequest:
        """A request of this node; its seed is distinct per (run, problem, node, request). ``key``
        (default: the problem id) labels it for backends (the scripted one draws answers by key)."""
        args = {"n": self.spec.n, "temperature": self.temperature, "top_p": self.top_p, "max_tokens": self.max_tokens}
        return GenerationRequest(messages=messages, seed=derive_seed(self.seed, f"{problem.id}|{self.name}", index),
                                 **{"key": problem.id, **args, **kw})

    def solution(self, index: int, text: str, completion: Any, about: Candidate | None = None,
                 kind: str = "solution") -> Candidate:
        """A generated candidate (answers are extracted from solutions only)."""
        return Candidate(f"{self.name}:{index}", self.name, text,
                         answer=self.extract(text) if kind == "solution" else None, kind=kind, about=about,
                         completion_tokens=completion.completion_tokens, finish_reason=completion.finish_reason)



def yes_score(result: GenerationResult, sampled: bool) -> float | None:
    """A Yes/No judgement read from one request: P(Yes) of the first token (one greedy token with its
    top logprobs), or the share of Yes verdicts among sampled replies; None when unreadable."""
    if not sampled:
        score = p_yes(result.completions[0].first_token_top_logprobs) if result.completions else None
    else:
        verdicts = [v for v in (final_verdict(c.text, c.finish_reason) for c in result.completions) if v is not None]
        score = sum(verdicts) / len(verdicts) if verdicts else None
    return score if score is not None and math.isfinite(score) else None


def solutions(inputs: Sequence[Sequence[Candidate]]) -> list[Candidate]:
    """The solution candidates of all inputs, in input order."""
    return [c for group in inputs for c in group if c.kind == "solution"]


def pick(inputs: Sequence[Sequence[Candidate]], k: int) -> list[Candidate]:
    """At most ``k`` solutions, taken round-robin over the inputs (best-scored first within one),
    so that every input node is heard."""
    queues = [sorted((c for c in g if c.kind == "solution"), key=lambda c: -(c.score or 0.0)) for g in inputs]
    out: list[Candidate] = []
    while len(out) < k and any(queues):
        for q in queues:
            if q and len(out) < k:
                out.append(q.pop(0))
    return out


def numbered(candidates: Sequence[Candidate]) -> str:
    """``Solution 1:`` ... blocks, as fusers and rankers show their candidates."""
    return "\n\n".join(f"Solution {i}:\n{c.text.strip()}" for i, c in enumerate(candidates, start=1))


class Role(ABC):
    """A node's job. Subclasses declare what they take and make; see the module docstring."""

    name: ClassVar[str]
    produces: ClassVar[str] = "solution"
    """What its candidates are: "solution" or "critique"."""
    uses_model: ClassVar[bool] = True
    """False for roles that only aggregate (voter): they make no requests."""
    writes: ClassVar[bool] = True
    """Whether its candidates are new solutions (they count as the trace's samples)."""
    keeps_prompt: ClassVar[bool] = True
    """Whether its prompt keeps the benchmark's system message and few-shot turns."""
    settings: ClassVar[frozenset[str]] = MODEL_SETTINGS
    """Node settings it uses (any other that the file sets is refused)."""
    prompt_fields: ClassVar[tuple[str, ...]] = ("question",)
    """Fields its prompt template may use."""
    template: ClassVar[str] = "{question}"
    """Its default prompt template."""
    default_temperature: ClassVar[float | None] = None
    """Temperature when the node sets none (None: the run's)."""
    default_max_tokens: ClassVar[int | None] = None
    """Most tokens per sample when the node sets none (None: the run's)."""

    @classmethod
    def check_inputs(cls, produced: Sequence[str]) -> str | None:
        """None when the role can take inputs that produce ``produced``, else what to change.
        Default: at least one input, all writing solutions."""
        if not produced:
            return f"a {cls.name} needs inputs (inputs: [NODE, ...]): it works on other nodes' solutions"
        if any(p != "solution" for p in produced):
            other = next(p for p in produced if p != "solution")
            reader = {"critique": "a reviser", "subproblem": "a subsolver or assessor", "assessment": "a subsolver",
                      "note": "a note_reader"}.get(other, "a role that reads them")
            return f"a {cls.name} reads solutions, but an input writes {other}s; feed {other}s to {reader}"
        return None

    @classmethod
    def check_settings(cls, spec: NodeSpec) -> str | None:
        """None when the node's settings make sense together for this role, else what to change."""
        return None

    def messages(self, ctx: NodeContext, problem: Problem, **fields: str) -> tuple[Message, ...]:
        """The role's prompt for one problem (see the module docstring)."""
        base = ctx.prompt(problem)
        text = (ctx.spec.prompt or self.template).format(question=base[-1].content, **fields)
        return (base[:-1] if self.keeps_prompt else ()) + (Message("user", text),)

    def abandon(self) -> None:
        """Forget what :meth:`plan` set aside for a :meth:`read` that will not come (the level's
        generation failed). Default: nothing is set aside."""

    @abstractmethod
    def plan(self, ctx: NodeContext, problem: Problem, inputs: Sequence[Sequence[Candidate]]) -> list[GenerationRequest]:
        """The requests for one problem, given each input node's candidates (in input order)."""

    @abstractmethod
    def read(self, ctx: NodeContext, problem: Problem, inputs: Sequence[Sequence[Candidate]],
             results: Sequence[GenerationResult]) -> RoleOutput:
        """The node's outputs from the results of :meth:`plan`'s requests (same order)."""


class GeneratorRole(Role):
    """Solve the problem from the benchmark's prompt: ``n`` independent solutions."""

    name = "generator"

    @classmethod
    def check_inputs(cls, produced: Sequence[str]) -> str | None:
        if produced:
            return "a generator takes no inputs (it solves from the problem alone); make it a reviser or fuser"
        return None

    def plan(self, ctx: NodeContext, problem: Problem, inputs: Sequence[Sequence[Candidate]]) -> list[GenerationRequest]:
        messages = self.messages(ctx, problem) if ctx.spec.prompt else ctx.prompt(problem)
        return [ctx.request(problem, messages, 0)]

    def read(self, ctx, problem, inputs, results) -> RoleOutput:
        return RoleOutput(tuple(ctx.solution(i, c.text, c) for i, c in enumerate(results[0].completions)))


class Critic(Role):
    """Point out the mistakes of each input solution (``n`` critiques each); writes no solutions."""

    name = "critic"
    produces = "critique"
    writes = False
    prompt_fields = ("question", "solution")
    template = ("{question}\n\nA proposed solution:\n{solution}\n\nCheck this solution step by step. Say which step "
                "is wrong, if any, and why. Do not write a new solution.")

    def plan(self, ctx, problem, inputs) -> list[GenerationRequest]:
        return [ctx.request(problem, self.messages(ctx, problem, solution=s.text.strip()), i)
                for i, s in enumerate(solutions(inputs))]

    def read(self, ctx, problem, inputs, results) -> RoleOutput:
        pairs = [(s, c) for s, r in zip(solutions(inputs), results, strict=True) for c in r.completions]
        return RoleOutput(tuple(ctx.solution(i, c.text, c, about=s, kind="critique") for i, (s, c) in enumerate(pairs)))


class Reviser(Role):
    """Revise each solution of the first input, reading the other inputs: critiques of that
    solution (generate-critique-revise) and other nodes' solutions (a debate's rebuttal round)."""

    name = "reviser"
    settings = MODEL_SETTINGS | {"max_candidates"}
    prompt_fields = ("question", "solution", "context")
    template = "{question}\n\nA previous solution:\n{solution}\n\n{context}\n\nWrite a corrected, complete solution."

    @classmethod
    def check_inputs(cls, produced: Sequence[str]) -> str | None:
        if not produced:
            return "a reviser needs inputs: first the node whose solutions it revises, then critics or peers"
        if produced[0] != "solution":
            return "a reviser revises its first input's solutions, but its first input writes critiques; list the solutions' node first"
        return None

    def _context(self, ctx: NodeContext, target: Candidate, inputs: Sequence[Sequence[Candidate]]) -> str:
        feedback = [c for g in inputs[1:] for c in g if c.kind == "critique" and c.about is not None
                    and c.about.origin().id == target.origin().id]
        peers = pick([[c for c in g if c.kind == "solution"] for g in inputs[1:]], ctx.spec.max_candidates)
        parts = [f"Feedback on it:\n{c.text.strip()}" for c in feedback[: ctx.spec.max_candidates]]
        parts += [f"Another solver's solution:\n{c.text.strip()}" for c in peers]
        return "\n\n".join(parts) if parts else "Check it for mistakes."

    def plan(self, ctx, problem, inputs) -> list[GenerationRequest]:
        return [ctx.request(problem, self.messages(ctx, problem, solution=s.text.strip(),
                                                   context=self._context(ctx, s, inputs)), i)
                for i, s in enumerate(solutions(inputs[:1]))]

    def read(self, ctx, problem, inputs, results) -> RoleOutput:
        pairs = [(s, c) for s, r in zip(solutions(inputs[:1]), results, strict=True) for c in r.completions]
        return RoleOutput(tuple(ctx.solution(i, c.text, c, about=s) for i, (s, c) in enumerate(pairs)))


class Fuser(Role):
    """Read up to ``max_candidates`` input solutions and write ``n`` solutions that combine them
    (mixture-of-agents aggregation; "sample N then fuse")."""

    name = "fuser"
    settings = MODEL_SETTINGS | {"max_candidates"}
    prompt_fields = ("question", "candidates")
    # Asking for the solution itself (not a verdict) matters: asked only to "compare", a model
    # replies "Solution 1 is correct.", and the 1 reads as its answer.
    template = ("{question}\n\nSolutions from several solvers:\n\n{candidates}\n\nSome of them may be wrong. "
                "Write the correct solution in full, ending with its final answer.")

    def plan(self, ctx, problem, inputs) -> list[GenerationRequest]:
        shown = pick(inputs, ctx.spec.max_candidates)
        return [ctx.request(problem, self.messages(ctx, problem, candidates=numbered(shown)), 0)]

    def read(self, ctx, problem, inputs, results) -> RoleOutput:
        return RoleOutput(tuple(ctx.solution(i, c.text, c) for i, c in enumerate(results[0].completions)))


class VerifierRole(Role):
    """Score every input solution by an LLM's verdict: P(Yes) from the first token (n = 1), or
    the share of n sampled verdicts that end in Yes; passes the solutions on with their scores."""

    name = "verifier"
    writes = False
    keeps_prompt = False
    prompt_fields = ("question", "solution")
    template = "Problem:\n{question}\n\nSolution:\n{solution}\n\nIs this solution correct? Answer Yes or No."
    sampled_template = ("Problem:\n{question}\n\nSolution:\n{solution}\n\nIs this solution correct? Check it briefly, "
                        "then end your reply with Yes or No.")

    @classmethod
    def check_settings(cls, spec: NodeSpec) -> str | None:
        if spec.n == 1 and (spec.temperature is not None or spec.max_tokens is not None):
            return ("with n = 1 a verifier reads P(Yes) from one greedy token, so temperature and max_tokens "
                    "do not apply; remove them, or set n > 1 to sample reasoned verdicts")
        return None

    def plan(self, ctx, problem, inputs) -> list[GenerationRequest]:
        if ctx.spec.n == 1:
            return [ctx.request(problem, self.messages(ctx, problem, solution=s.text.strip()), i, temperature=0.0,
                                max_tokens=1, top_logprobs=10, role="verifier") for i, s in enumerate(solutions(inputs))]
        template = ctx.spec.prompt or self.sampled_template
        return [ctx.request(problem, (Message("user", template.format(question=ctx.prompt(problem)[-1].content,
                                                                       solution=s.text.strip())),), i, role="verifier")
                for i, s in enumerate(solutions(inputs))]

    def read(self, ctx, problem, inputs, results) -> RoleOutput:
        out, invalid = [], 0
        for i, (s, r) in enumerate(zip(solutions(inputs), results, strict=True)):
            score = yes_score(r, sampled=ctx.spec.n > 1)
            if score is None:
                score, invalid = 0.5, invalid + 1
            out.append(Candidate(f"{ctx.name}:{i}", ctx.name, s.text, answer=s.answer, score=score, about=s,
                                 written=False))
        return RoleOutput(tuple(out), {"invalid_verdict": invalid} if invalid else {})


_NUMBER = re.compile(r"\d+")


def _number_choice(completion: Any, shown: int) -> list[float]:
    """A reply's preference over ``shown`` numbered candidates: the probabilities of the numbers
    as its first token (when top logprobs came back), else 1 on the first number it writes."""
    probs = [0.0] * shown
    for token, logprob in (completion.first_token_top_logprobs or {}).items():
        digit = token.strip(" .:)*#")
        if digit.isdigit() and 1 <= int(digit) <= shown and math.isfinite(logprob):
            probs[int(digit) - 1] += math.exp(logprob)
    if sum(probs) <= 0:
        number = _NUMBER.search(completion.text)
        if number and 1 <= int(number.group()) <= shown:
            probs[int(number.group()) - 1] = 1.0
    return probs


class Ranker(Role):
    """Show up to ``max_candidates`` (at most 9) input solutions, ask which is correct; each
    candidate's score is the probability of its number as the first token (or the share of the
    ``n`` sampled replies that name it)."""

    name = "ranker"
    writes = False
    keeps_prompt = False
    settings = MODEL_SETTINGS | {"max_candidates"}
    prompt_fields = ("question", "candidates")
    template = "Problem:\n{question}\n\n{candidates}\n\nWhich solution is correct? Answer with its number only."
    default_temperature = 0.0
    default_max_tokens = 4

    @classmethod
    def check_settings(cls, spec: NodeSpec) -> str | None:
        if spec.max_candidates > 9:
            return "a ranker reads a one-digit number, so max_candidates must be at most 9"
        return None

    def plan(self, ctx, problem, inputs) -> list[GenerationRequest]:
        shown = pick(inputs, ctx.spec.max_candidates)
        return [ctx.request(problem, self.messages(ctx, problem, candidates=numbered(shown)), 0, top_logprobs=10)]

    def read(self, ctx, problem, inputs, results) -> RoleOutput:
        shown = pick(inputs, ctx.spec.max_candidates)
        totals, read = [0.0] * len(shown), 0
        for c in results[0].completions:
            probs = _number_choice(c, len(shown))
            if sum(probs) > 0:
                read += 1
                totals = [t + p / sum(probs) for t, p in zip(totals, probs, strict=True)]
        events = {}
        if not read:  # no reply named a candidate: no preference, counted
            totals, read = [1.0 / max(len(shown), 1)] * len(shown), 1
            events = {"invalid_rank": 1}
        out = tuple(Candidate(f"{ctx.name}:{i}", ctx.name, s.text, answer=s.answer, score=t / read, about=s,
                              written=False) for i, (s, t) in enumerate(zip(shown, totals, strict=True)))
        return RoleOutput(out, events)


class Voter(Role):
    """Majority vote over the answers of all input solutions (weighted by their scores when every
    one is scored, e.g. behind a verifier); no model call. Its one candidate is the winner, scored
    by its vote share."""

    name = "voter"
    uses_model = False
    writes = False
    settings = frozenset()

    def plan(self, ctx, problem, inputs) -> list[GenerationRequest]:
        return []

    def read(self, ctx, problem, inputs, results) -> RoleOutput:
        cands = solutions(inputs)
        scored = bool(cands) and all(c.score is not None for c in cands)
        samples = [Sample(c.text, c.answer) for c in cands]
        answer, share, votes, idx = vote(samples, [float(c.score) for c in cands] if scored else None)
        if idx is None:
            return RoleOutput((Candidate(f"{ctx.name}:0", ctx.name, "", score=0.0, written=False),),
                              {"no_answer": 1}, votes)
        winner = Candidate(f"{ctx.name}:0", ctx.name, cands[idx].text, answer=answer, score=share, about=cands[idx],
                           written=False)
        return RoleOutput((winner,), {}, votes)


class Selector(Role):
    """GenSelect (optillm; "GenSelect: A Generative Approach to Best-of-N", Toshniwal et al. 2025):
    the model reads its input solutions, ``max_candidates`` (at most 9) at a time, and picks the
    correct one of each group; the group winners pass on, scored by the share of the choice. A
    chain of selectors is a tournament (each level divides the field by the group size); one
    group is GenSelect in one call. A group of one passes on without a request."""

    name = "selector"
    writes = False
    keeps_prompt = False
    settings = MODEL_SETTINGS | {"max_candidates"}
    prompt_fields = ("question", "candidates")
    template = ("Problem:\n{question}\n\n{candidates}\n\nCompare the solutions above carefully. Which solution is "
                "correct? Answer with its number only.")
    default_temperature = 0.0
    default_max_tokens = 4

    @classmethod
    def check_settings(cls, spec: NodeSpec) -> str | None:
        if spec.max_candidates > 9:
            return "a selector reads a one-digit number, so max_candidates must be at most 9"
        if spec.max_candidates < 2:
            return "a selector picks one of a group, so max_candidates must be at least 2"
        return None

    @staticmethod
    def groups(ctx: NodeContext, inputs: Sequence[Sequence[Candidate]]) -> list[list[Candidate]]:
        """The input solutions in groups of ``max_candidates``, in input order."""
        sols, k = solutions(inputs), ctx.spec.max_candidates
        return [sols[i:i + k] for i in range(0, len(sols), k)]

    def plan(self, ctx, problem, inputs) -> list[GenerationRequest]:
        return [ctx.request(problem, self.messages(ctx, problem, candidates=numbered(g)), i, top_logprobs=10)
                for i, g in enumerate(self.groups(ctx, inputs)) if len(g) > 1]

    def read(self, ctx, problem, inputs, results) -> RoleOutput:
        out, invalid, it = [], 0, iter(results)
        for i, group in enumerate(self.groups(ctx, inputs)):
            totals = [1.0] + [0.0] * (len(group) - 1)
            if len(group) > 1:
                totals, read = [0.0] * len(group), 0
                for c in next(it).completions:
                    probs = _number_choice(c, len(group))
                    if sum(probs) > 0:
                        read += 1
                        totals = [t + p / sum(probs) for t, p in zip(totals, probs, strict=True)]
                if not read:  # no reply named a candidate: the first one goes on, counted
                    totals, invalid = [1.0] + [0.0] * (len(group) - 1), invalid + 1
                else:
                    totals = [t / read for t in totals]
            best = max(range(len(group)), key=lambda j: (totals[j], -j))
            w = group[best]
            out.append(Candidate(f"{ctx.name}:{i}", ctx.name, w.text, answer=w.answer, score=totals[best], about=w,
                                 written=False))
        return RoleOutput(tuple(out), {"invalid_selection": invalid} if invalid else {})


class Aggregator(Role):
    """Recursive self-aggregation (Venkatraman et al. 2025, "Recursive Self-Aggregation Unlocks Deep
    Thinking in LLMs"): ``n`` new solutions, each written from its own random subset of
    ``max_candidates`` input solutions (seeded per run, problem, node and request), so that the
    population stays diverse; a chain of aggregators is RSA's rounds."""

    name = "aggregator"
    settings = MODEL_SETTINGS | {"max_candidates"}
    prompt_fields = ("question", "candidates")
    template = Fuser.template

    def subsets(self, ctx: NodeContext, problem: Problem, inputs: Sequence[Sequence[Candidate]]) -> list[list[Candidate]]:
        """The candidates each of the ``n`` requests shows."""
        sols = solutions(inputs)
        k = min(ctx.spec.max_candidates, len(sols))
        return [random.Random(derive_seed(ctx.seed, f"{problem.id}|{ctx.name}|subset", i)).sample(sols, k)
                for i in range(ctx.spec.n)]

    def plan(self, ctx, problem, inputs) -> list[GenerationRequest]:
        return [ctx.request(problem, self.messages(ctx, problem, candidates=numbered(shown)), i, n=1)
                for i, shown in enumerate(self.subsets(ctx, problem, inputs))]

    def read(self, ctx, problem, inputs, results) -> RoleOutput:
        return RoleOutput(tuple(ctx.solution(i, r.completions[0].text, r.completions[0])
                                for i, r in enumerate(results)))
