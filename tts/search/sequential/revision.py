"""Sequential revision: self-refine chains, S parallel chains x R rounds (Snell et al. 2024).

Each chain starts from an ordinary attempt at the problem; every round then shows the model the
problem, its previous attempt (as its own earlier reply) and, optionally, a critique, and asks for
a corrected solution (Self-Refine, Madaan et al. 2023). ``n`` keeps its meaning of attempts per
problem: ``n = S * (R + 1)`` with ``R = rounds``, so ``revision@8,rounds=3`` is Snell et al.'s
sequential:parallel ratio of 2 chains x 4 attempts at the cost of self-consistency@8.

1. Round 0 samples the S first attempts of every problem (one request of n = S per problem).
2. Each later round sends one revision request per live chain. Every round of all chains of all
   problems is ONE generate call; with a verifier, the round's attempts are scored in ONE verifier
   call before the next round.
3. The critique (``critique``) is the verifier's score of the previous attempt, written out
   (``critique_template``); ``accept_score`` stops a chain whose attempt already scores that high.
4. The answer is chosen across ALL attempts of all chains: a plain vote, a vote weighted by
   verifier score, or the best-scored attempt (``select``).

A per-problem :class:`~tts.types.Budget` (``samples`` = attempts, ``tokens`` = generated tokens at
``max_tokens`` per attempt) keeps the rounds and runs fewer chains; below R + 1 attempts it runs
one shorter chain. Verifier usage is added to each problem's usage.

What it follows (pinned in ``tests/parity/test_sequential.py``): Snell et al.'s split of a budget
of N attempts into S parallel chains of R + 1 sequential attempts, with the answer selected over
all attempts; and Self-Refine's prompt-only revision (no fine-tuning). Departure: Snell et al.
fine-tune a revision model that reads several earlier attempts of its chain; an ordinary model
here reads the previous attempt only (and, with ``critique``, a verifier score instead of
Self-Refine's written feedback). There is no setting for a longer history.

``feedback="execution"`` makes it Self-Debugging (Chen et al., 2023) for coding problems: each
attempt's program runs on the docstring's examples in the sandbox (one batch per round), its
score is the share it passes, and the next round is shown the failing examples with what the
program really returned (:mod:`tts.search.sequential.execution_feedback`; pinned in
``tests/parity/test_self_debugging.py``). With ``accept_score=1`` a chain stops once its program
passes, as Self-Debugging's does.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from tts.answers import answer_keys
from tts.backends.base import Completion, GenerationRequest, Message, derive_seed
from tts.config import StrategyConfigBase, VerifierConfig
from tts.search.base import BudgetUse, StrategyInputError, VerifierStrategy, solution_item, to_sample
from tts.types import Budget, RequestShape, Sample, Solution, Trace, Usage
from tts.verifiers.base import (
    VerifierScore,
    clean_score,
    score_or_fallback,
)

logger = logging.getLogger(__name__)


class RevisionConfig(StrategyConfigBase):
    """Self-refine chains: S parallel chains of R revisions each; answer by vote or verifier over all attempts."""

    kind: Literal["revision"] = "revision"
    n: int = Field(8, ge=1, le=4096)
    """Attempts per problem, S chains x (R + 1) attempts each; must be a multiple of rounds + 1."""
    rounds: int = Field(1, ge=0, le=64)
    """R, revisions of each chain after its first attempt (0: n independent attempts)."""
    verifier: VerifierConfig | None = None
    """Scores every attempt (a registered name or its config): for the critique, ``accept_score``
    and ``select``. None: no scoring."""
    critique: bool = False
    """Show the verifier's score of the previous attempt in the revision prompt (needs a verifier)."""
    critique_template: str = Field(
        "A checker gave your solution a score of {score:.2f} on a scale from 0 (wrong) to 1 (right).", min_length=1)
    """The critique, with ``{score}`` (the verifier's score in [0, 1]) filled in."""
    instruction: str = Field(
        "Check your solution above for mistakes, then write a corrected solution that ends with the final answer.",
        min_length=1)
    """The user turn that asks for a revision (after the critique, when there is one)."""
    select: Literal["vote", "weighted_vote", "verifier"] = "vote"
    """How the answer is chosen across all attempts: ``vote`` (majority), ``weighted_vote``
    (votes weighted by verifier score) or ``verifier`` (the best-scored attempt)."""
    accept_score: float | None = Field(None, ge=0.0, le=1.0)
    """Stop revising a chain once the verifier scores its latest attempt at least this (Self-Refine's
    stopping rule; needs a verifier). None: every chain runs all rounds."""
    feedback: Literal["verifier", "execution"] = "verifier"
    """Where critiques and scores come from: ``verifier`` (the verifier, if any) or ``execution``
    (coding problems: the program run on the docstring's examples, the failing ones shown to the
    model; Self-Debugging). ``execution`` takes no verifier and always shows its feedback."""

    @property
    def runs_code(self) -> bool:
        """With execution feedback, each attempt runs (Self-Debugging)."""
        return self.feedback == "execution"

    @model_validator(mode="after")
    def _consistent(self) -> RevisionConfig:
        if self.n % (self.rounds + 1):
            raise ValueError(f"n ({self.n}) must be a multiple of rounds + 1 ({self.rounds + 1}): n counts the "
                             f"attempts of S chains of rounds + 1 attempts each. Set n to a multiple of {self.rounds + 1} or "
                             "rounds to a divisor of n minus one.")
        needs = [name for name, used in (("critique", self.critique), ("accept_score", self.accept_score is not None),
                                         (f"select={self.select}", self.select != "vote")) if used]
        if self.feedback == "execution" and self.verifier is not None:
            raise ValueError("feedback=execution scores attempts by running them; drop the verifier "
                             "(or use feedback=verifier).")
        if needs and self.verifier is None and self.feedback != "execution":
            verb = "needs" if len(needs) == 1 else "need"
            raise ValueError(f"{', '.join(needs)} {verb} a verifier to score the attempts; "
                             "set verifier (e.g. verifier: judge, or --verifier arithmetic) or drop them.")
        try:
            self.critique_template.format(score=0.5)
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"critique_template must format with only {{score}} (e.g. 'Score: {{score:.2f}}'); "
                             f"it failed with {exc!r}. Double any literal braces.") from None
        return self

    @property
    def chains(self) -> int:
        """S, the parallel chains."""
        return self.n // (self.rounds + 1)


def plan_attempts(chains: int, rounds: int, allowed: int) -> tuple[int, int]:
    """(chains, rounds) within ``allowed`` attempts: fewer chains first, then one shorter chain.

    Example:
        >>> plan_attempts(4, 1, 5), plan_attempts(4, 3, 2)
        ((2, 1), (1, 1))
    """
    if allowed >= chains * (rounds + 1):
        return chains, rounds
    if allowed >= rounds + 1:
        return allowed // (rounds + 1), rounds
    return 1, allowed - 1


@dataclass(frozen=True, slots=True)
class _Attempt:
    """One attempt of one chain: its sample, the round it came from, and its verifier score."""

    chain: int
    round: int
    sample: Sample
    score: float | None = None
    feedback: str = ""
    """Execution feedback on this attempt, shown in the next round (``feedback="execution"``)."""


class Revision(VerifierStrategy):
    """Self-refine chains with optional verifier critique; see the module docstring.

    Args:
        verifier: A ready verifier to use instead of building ``config.verifier`` (tests,
            notebooks); the strategy then does not close it.
        (the rest as :class:`~tts.search.base.Strategy`)
    """

    name = "revision"
    config_class: ClassVar[type[StrategyConfigBase]] = RevisionConfig
    budget_use = BudgetUse.SPENDS_ITSELF  # chains x rounds within the allowance (plan)
    pool_rule = None  # later attempts depend on earlier ones: not replayable from i.i.d. samples

    # --- budgets --------------------------------------------------------------------------------

    def plan(self, budget: Budget | None) -> tuple[int, int]:
        """(chains, rounds) of one problem under ``budget``."""
        c = self.config
        allowed = c.n
        if budget is not None and budget.samples is not None:
            allowed = min(allowed, budget.samples)
        if budget is not None and budget.tokens is not None:
            allowed = min(allowed, budget.tokens // self.sampling.max_tokens)
        if allowed < 1:
            raise StrategyInputError(f"{self.name}: a budget of {budget} does not cover one attempt of up to "
                                     f"{self.sampling.max_tokens} tokens; raise the budget or lower max_tokens.")
        return plan_attempts(c.chains, c.rounds, allowed)

    # --- requests ------------------------------------------------------------------------------

    def _request(self, problem: Any, messages: tuple[Message, ...], n: int, seed_key: str,
                 round_: int) -> GenerationRequest:
        return GenerationRequest(
            messages=messages, n=n, temperature=self.sampling.temperature, top_p=self.sampling.top_p,
            max_tokens=self.sampling.max_tokens, logprobs=self.config.verifier is not None,
            seed=derive_seed(self.seed, f"{problem.id}|{self.config.label}|{seed_key}", round_), key=problem.id)

    def revision_messages(self, problem: Any, previous: _Attempt) -> tuple[Message, ...]:
        """The problem's prompt, the previous attempt as the model's reply, then the critique and instruction."""
        c = self.config
        ask = c.instruction
        if previous.feedback:
            ask = previous.feedback + "\n\n" + ask
        elif c.critique and previous.score is not None:
            ask = c.critique_template.format(score=previous.score) + "\n\n" + ask
        return (*self.prompt(problem), Message("assistant", previous.sample.text), Message("user", ask))

    def _score(self, problems: Sequence[Any], todo: Sequence[tuple[int, Completion]],
               events: list[dict[str, int]]) -> tuple[list[float | None], list[Usage]]:
        """Verifier scores of one round's attempts ((problem index, completion) pairs), in ONE call.

        A verifier that raises does not end the run: the round's attempts score 0 and the event is
        counted on each problem it touched.
        """
        verifier = self.verifier
        if verifier is None or not todo:
            return [None] * len(todo), [Usage()] * len(todo)
        items = [solution_item(problems[i], c.text, verifier, mean_logprob=c.mean_logprob) for i, c in todo]
        scored, failed = score_or_fallback(verifier, items, VerifierScore((), 0.0), "attempts")  # failed: lowest
        if failed:
            for i in {i for i, _ in todo}:
                events[i]["verifier_error"] = events[i].get("verifier_error", 0) + 1
        scores: list[float | None] = []
        for (i, _), v in zip(todo, scored, strict=True):
            value, bad = clean_score(v.score)
            if bad or v.invalid:
                events[i]["invalid_score"] = events[i].get("invalid_score", 0) + bad + v.invalid
            scores.append(value)
        return scores, [v.usage for v in scored]

    # --- solving ---------------------------------------------------------------------------------

    def solve(self, problems: Sequence[Any], budgets: Sequence[Budget | None] | None = None) -> list[Solution]:
        """Run every chain of every problem in lockstep: one generate (and verifier) call per round."""
        if budgets is not None and len(budgets) != len(problems):
            raise StrategyInputError(f"got {len(budgets)} budgets for {len(problems)} problems; give one per problem")
        plans = [self.plan(b) for b in (budgets or [None] * len(problems))]
        attempts: list[list[_Attempt]] = [[] for _ in problems]
        usage = [Usage() for _ in problems]
        events: list[dict[str, int]] = [{} for _ in problems]
        latest: dict[tuple[int, int], _Attempt] = {}  # (problem, chain) -> the chain's latest attempt
        self._execution_seconds = [0.0] * len(problems)
        for round_ in range(max((r for _, r in plans), default=-1) + 1):
            # 1. Who generates this round: all chains at round 0; later, the live chains within their plan.
            if round_ == 0:
                jobs = [(i, None) for i in range(len(problems))]
                requests = [self._request(p, self.prompt(p), plans[i][0], "start", 0) for i, p in enumerate(problems)]
            else:
                jobs = [(i, ch) for (i, ch), a in latest.items() if round_ <= plans[i][1] and not self._accepted(a)]
                requests = [self._request(problems[i], self.revision_messages(problems[i], latest[i, ch]), 1,
                                          f"chain{ch}", round_) for i, ch in jobs]
            if not jobs:
                break
            # 2. One generate call for the round.
            results = self.generator.generate(requests)
            fresh: list[tuple[int, int, Completion]] = []
            for (i, ch), result in zip(jobs, results, strict=True):
                usage[i] = usage[i] + result.usage
                chains = range(len(result.completions)) if ch is None else (ch,)
                fresh += [(i, c, comp) for c, comp in zip(chains, result.completions, strict=True)]
            # 3. One verifier call (or one batch of executions) for the round's attempts; the scores feed the next critique.
            samples = [to_sample(comp, self.extract) for _, _, comp in fresh]
            notes = [""] * len(fresh)
            if self.config.feedback == "execution":
                scores, notes, scoring = self._execute(problems, [(i, s.answer) for (i, _, _), s in zip(fresh, samples, strict=True)],
                                                       events)
            else:
                scores, scoring = self._score(problems, [(i, comp) for i, _, comp in fresh], events)
            for (i, ch, comp), sample, score, note, spent in zip(fresh, samples, scores, notes, scoring, strict=True):
                attempt = _Attempt(ch, round_, sample, score, note)
                attempts[i].append(attempt)
                latest[i, ch] = attempt
                usage[i] = usage[i] + spent
        sols = [self._solution(p, a, u, e) for p, a, u, e in zip(problems, attempts, usage, events, strict=True)]
        if self.config.feedback == "execution":
            sols = [dataclasses.replace(s, trace=dataclasses.replace(s.trace, notes={"execution_seconds": round(sec, 3)}))
                    for s, sec in zip(sols, self._execution_seconds, strict=True)]
        return sols

    def _execute(self, problems: Sequence[Any], programs: list[tuple[int, str | None]], events: list[dict[str, int]],
                 ) -> tuple[list[float | None], list[str], list[Usage]]:
        """Scores and feedback of one round's programs, run in ONE batch of sandboxes; their seconds
        are added per problem to :attr:`_execution_seconds` (the trace's notes)."""
        from tts.search.sequential.execution_feedback import execution_feedback

        try:
            ran = execution_feedback(problems, programs)
        except ValueError as exc:
            raise StrategyInputError(str(exc)) from None
        for (i, _), (_, _, seconds) in zip(programs, ran, strict=True):
            self._execution_seconds[i] += seconds
        return [r[0] for r in ran], [r[1] for r in ran], [Usage()] * len(ran)

    def _accepted(self, attempt: _Attempt) -> bool:
        threshold = self.config.accept_score
        return threshold is not None and attempt.score is not None and attempt.score >= threshold

    # 4. the answer across all attempts
    def _solution(self, problem: Any, attempts: list[_Attempt], usage: Usage, events: dict[str, int]) -> Solution:
        samples = tuple(a.sample for a in attempts)
        scores = [a.score if a.score is not None else 0.0 for a in attempts]
        scored = any(a.score is not None for a in attempts)
        select = self.config.select
        if select == "verifier":
            keys = answer_keys([s.answer for s in samples])
            support = {k: keys.count(k) for k in keys if k is not None}
            answered = [j for j, k in enumerate(keys) if k is not None]
            # Equal scores (a tool check gives 0, 0.5 or 1) go to the answer more attempts reached.
            best = max(answered, key=lambda j: (scores[j], support[keys[j]], -j)) if answered else None
            answer, confidence = (samples[best].answer, scores[best]) if best is not None else (None, 0.0)
            votes: dict[str, float] = {}
        else:
            weights = None
            if select == "weighted_vote":
                weights = [max(s, 0.0) for s in scores]
                if samples and not any(weights):  # no attempt has a valid score: a plain vote
                    events = {**events, "unweighted_vote": 1}
                    weights = None
            answer, confidence, votes, best = self.vote(samples, weights)
        chosen = answer_keys([answer])[0] if answer is not None else None
        keys = answer_keys([s.answer for s in samples])
        tree = tuple({"id": f"{a.chain}.{a.round}", "parent": f"{a.chain}.{a.round - 1}" if a.round else None,
                      "depth": a.round, "chain": a.chain, "round": a.round, "text": a.sample.text, "score": a.score,
                      "answer": a.sample.answer, "kept": chosen is not None and key == chosen, "finished": True}
                     for a, key in zip(attempts, keys, strict=True))
        trace = Trace(self.name, samples, tuple(scores) if scored else (), votes, best, tree=tree,
                      events=dict(sorted(events.items())))
        return Solution(problem.id, answer, confidence, usage, trace)

    # --- cost hook ----------------------------------------------------------------------------------

    @classmethod
    def planned_requests(cls, n: int, prompt_tokens: int, gen_tokens: int,
                         cached_tokens: int = 0) -> list[RequestShape]:
        """Cost hook (``tts cost``): one problem's requests with the default rounds, before running.

        Round 0 draws the S first attempts from one prompt; each revision request's prompt is the
        problem's (in the prefix cache), the previous attempt and an instruction of about 30 tokens.
        Verifier calls are not included.
        """
        rounds = cls.config_class.model_fields["rounds"].default
        chains, rounds = plan_attempts(max(n // (rounds + 1), 1), rounds, n)
        shapes = [RequestShape(prompt_tokens, cached_tokens, (gen_tokens,) * chains)]
        revise = prompt_tokens + gen_tokens + 30
        shapes += [RequestShape(revise, prompt_tokens, (gen_tokens,)) for _ in range(chains * rounds)]
        return shapes
