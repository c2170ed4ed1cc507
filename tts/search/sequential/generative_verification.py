"""Generative verification (GenRM): S solutions, V sampled verifications of each, pick by verdicts.

Zhang et al. (2024), "Generative Verifiers: Reward Modeling as Next-Token Prediction": a model
verifies a solution by writing a check that ends in a verdict; sampling V such checks and
averaging their verdicts ("majority voting" over verification rationales) gives the solution's
verification score, and the best-scored of S solutions is the answer.

Faithful to Singhi et al.'s code (github.com/nishadsinghi/sc-genrm-scaling, ``eval_utils.py``;
pinned in tests/parity/test_judge_and_genrm.py): only a trailing verdict counts; a solution's score
is the mean of its valid verdicts (replies cut off at ``max_tokens`` or without a verdict are left
out, and counted in the trace's ``invalid_verdict`` event), 0 when none is valid
(``no_verdict_score``); ``select=score`` is their best-of-N and ``select=weighted_vote`` their
weighted self-consistency, solutions without an answer never chosen. Departures: a verdict is the
sampled Yes/No (their text mode), not P(Yes) at the verdict token (their logprob mode); tied scores
go to the earliest solution, where the reference averages accuracy over random tie orders (the
same in expectation: solutions are i.i.d.). The verifier is the LLM
judge in its votes mode (:class:`~tts.verifiers.judge.LLMJudge` with ``votes = V``), judging with
the policy model, or with a model of its own (``verifier: {kind: judge, backend: ...}``).

Batching: all S solutions of all problems in ONE generate call, then all S x V verifications of
all problems in ONE judge call (the judge sends them to its generator in one generate call).

Cost, following Singhi et al. (2025), "When To Solve, When To Verify: Compute-Optimal Problem
Solving and Generative Verification for LLM Reasoning": in units of one solution's generated
tokens, S solutions with V verifications each cost

    C(S, V) = S * (1 + lambda * V),    lambda = (tokens of one verification) / (tokens of one solution),

so self-consistency at matched compute draws ``S (1 + lambda V)`` solutions
(:func:`matched_self_consistency_n`). Here lambda is never assumed: every solution records the
generated tokens of its solutions and of its verifications (the root node of its trace's
``tree``, which ``tts show`` prints), and :func:`measured_lambda` takes the ratio of the mean
verification length to the mean solution length over a run.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from tts.backends.base import GenerationRequest, derive_seed
from tts.config import SamplingStrategyConfig, changed_settings, setting_text
from tts.search.base import BudgetUse, Strategy, StrategyInputError, solution_item, to_sample
from tts.types import Budget, RequestShape, Sample, Solution, Trace, Usage
from tts.verifiers.base import Verifier, VerifierScore, build_verifier, score_or_fallback
from tts.verifiers.judge import JudgeConfig

logger = logging.getLogger(__name__)


class GenerativeVerificationConfig(SamplingStrategyConfig):
    """Sample n (S) solutions, verify each V times with the LLM judge, select by the verdicts."""

    kind: Literal["generative_verification"] = "generative_verification"
    verifications: int = Field(4, ge=1, le=64)
    """V, sampled verifications of each solution; a solution's verification score is the share
    of Yes among its valid verdicts (a verification cut off at the judge's ``max_tokens``, or
    without a trailing Yes/No, has none), ``no_verdict_score`` when none is valid."""
    no_verdict_score: float = Field(0.0, ge=0.0, le=1.0)
    """Verification score of a solution none of whose V verifications ends in a verdict (each cut
    off at the judge's ``max_tokens``, or without a trailing Yes/No): 0.0 as Singhi et al.'s
    ``get_solution_score``; 0.5 (no evidence either way) was tts's rule before."""
    select: Literal["score", "weighted_vote"] = "score"
    """``score``: the answered solution with the highest verification score (ties: the earliest);
    ``weighted_vote``: a vote over answers, each solution weighted by its verification score."""
    verifier: JudgeConfig = Field("judge", validate_default=True)
    """The LLM judge that writes the verifications: its prompt, temperature, ``max_tokens`` per
    verification and model (``backend``; default: the policy model verifies itself). Its
    ``votes`` is ``verifications``: leave it unset."""

    @field_validator("verifier", mode="before")
    @classmethod
    def _judge_only(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = {"kind": value}
        kind = value.get("kind", "judge") if isinstance(value, Mapping) else getattr(value, "kind", "judge")
        if kind != "judge":
            raise ValueError(f"generative_verification verifies with the LLM judge (verifier: judge), not {kind!r}; "
                             f"to select by a {kind} verifier use best_of_n or weighted_vote with verifier {kind}")
        return value

    @model_validator(mode="after")
    def _votes_are_verifications(self) -> GenerativeVerificationConfig:
        if self.verifier.votes not in (0, self.verifications):
            raise ValueError(f"verifier.votes ({self.verifier.votes}) differs from verifications "
                             f"({self.verifications}); set V with verifications and leave verifier.votes unset")
        return self

    @property
    def label(self) -> str:
        """``generative_verification@S,verifications=V`` (V always shown: it sets the cost), then the
        settings that differ from their defaults, as every strategy's label shows them."""
        parts = [f"{self.kind}@{self.n}", f"verifications={self.verifications}"]
        for key, value in changed_settings(self, skip=("kind", "n", "verifications")).items():
            shown = setting_text(value)
            if key != "verifier" or shown != "judge":  # the default judge goes unsaid
                parts.append(f"{key}={shown}")
        return ",".join(parts)


# --- cost: C(S, V) = S (1 + lambda V) --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class VerificationCost:
    """Generated tokens of one run (or problem) split into solving and verifying.

    Args:
        solutions: Solutions drawn.
        solve_tokens: Their generated tokens.
        verifications: Verifications generated (V per verified solution).
        verify_tokens: Their generated tokens.
        verify_prompt_tokens: Prompt tokens of the verification requests (each shows the problem
            and one solution); outside lambda, which counts generated tokens as Singhi et al. do.
    """

    solutions: int = 0
    solve_tokens: int = 0
    verifications: int = 0
    verify_tokens: int = 0
    verify_prompt_tokens: int = 0

    def __add__(self, other: VerificationCost) -> VerificationCost:
        return VerificationCost(*(a + b for a, b in zip(dataclasses.astuple(self), dataclasses.astuple(other),
                                                        strict=True)))

    @property
    def lam(self) -> float | None:
        """lambda = mean generated tokens of one verification / of one solution (None: nothing to divide)."""
        if not self.solutions or not self.verifications or not self.solve_tokens:
            return None
        return (self.verify_tokens / self.verifications) / (self.solve_tokens / self.solutions)

    @classmethod
    def from_trace(cls, trace: Trace | Mapping[str, Any]) -> VerificationCost | None:
        """The cost a generative_verification trace recorded (a Trace or its JSON); None for other traces."""
        tree = trace.tree if isinstance(trace, Trace) else trace.get("tree") or ()
        root = next((node for node in tree if node.get("id") == "cost"), None)
        if root is None:
            return None
        return cls(**{f.name: int(root[f.name]) for f in dataclasses.fields(cls)})


def measured_lambda(traces: Iterable[Trace | Mapping[str, Any]]) -> float | None:
    """lambda over many problems: the ratio of the mean verification length to the mean solution length.

    Args:
        traces: Solutions' traces (``Trace`` objects, or the ``trace`` of results.jsonl rows);
            traces of other strategies are skipped.

    Example:
        >>> rows = [json.loads(line) for line in open("RUN/results.jsonl")]  # doctest: +SKIP
        >>> gv = [r["trace"] for r in rows if r["strategy"]["kind"] == "generative_verification"]  # doctest: +SKIP
        >>> measured_lambda(gv)  # doctest: +SKIP
        0.87
    """
    total = VerificationCost()
    for trace in traces:
        cost = VerificationCost.from_trace(trace)
        if cost is not None:
            total = total + cost
    return total.lam


def matched_self_consistency_n(solutions: int, verifications: int, lam: float) -> int:
    """Self-consistency's n at the compute of S solutions with V verifications each.

    Singhi et al. (2025): C(S, V) = S (1 + lambda V) solution-equivalents of generated tokens, so
    self-consistency matches it with n = round(S (1 + lambda V)) samples (at least 1).

    Example:
        >>> matched_self_consistency_n(4, 2, 0.5)
        8
    """
    if solutions < 1 or verifications < 0 or lam < 0:
        raise ValueError(f"need S >= 1, V >= 0 and lambda >= 0; got S={solutions}, V={verifications}, lambda={lam}")
    return max(1, round(solutions * (1 + lam * verifications)))


# --- the strategy --------------------------------------------------------------------------------


class GenerativeVerification(Strategy):
    """S solutions, V judge verdicts each; the answer by verification score (or a score-weighted vote)."""

    name = "generative_verification"
    config_class: ClassVar[type] = GenerativeVerificationConfig
    budget_use = BudgetUse.SPENDS_ITSELF  # solutions and their verifications (solutions_within)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._verifier: Verifier | None = None

    @property
    def verifier(self) -> Verifier:
        """The judge with ``votes = verifications`` (built on first use, through the verifier registry)."""
        if self._verifier is None:
            judge = self.config.verifier.model_copy(update={"votes": self.config.verifications})
            self._verifier = build_verifier(judge, self.generator)
        return self._verifier

    @classmethod
    def planned_requests(cls, n: int, prompt_tokens: int, gen_tokens: int,
                         cached_tokens: int = 0) -> list[RequestShape]:
        """Cost hook (``tts cost``): one problem's requests with the default V, before running.

        S = n solutions from one prompt, then V verifications of each: a verification request reads
        the question and the solution plus about 30 tokens of judge instructions (not assumed to be
        in the prefix cache), and writes as many tokens as a solution (lambda = 1 before any run has
        measured it; the demo measured 0.75-0.86).
        """
        v = cls.config_class.model_fields["verifications"].default
        shapes = [RequestShape(prompt_tokens, cached_tokens, (gen_tokens,) * n)]
        shapes += [RequestShape(prompt_tokens + gen_tokens + 30, 0, (gen_tokens,) * v) for _ in range(n)]
        return shapes

    def close(self) -> None:
        """Close the judge (it owns an engine when it has a backend of its own)."""
        if self._verifier is not None:
            self._verifier.close()
            self._verifier = None

    def solutions_within(self, budget: Budget | None) -> int:
        """S under ``budget``: ``samples`` caps S; ``tokens`` caps it at the solutions whose worst
        case (``max_tokens`` plus V verifications of the judge's ``max_tokens``) fits."""
        s = self.config.n
        if budget is None:
            return s
        if budget.samples is not None:
            s = min(s, budget.samples)
        worst = self.sampling.max_tokens + self.config.verifications * self.config.verifier.max_tokens
        if budget.tokens is not None:
            s = min(s, budget.tokens // worst)
        if s < 1:
            raise StrategyInputError(
                f"{self.name}: a budget of {budget} does not cover one solution with {self.config.verifications} "
                f"verifications (up to {worst} tokens); raise the budget, or lower max_tokens, verifications "
                "or verifier.max_tokens.")
        return s

    def solve(self, problems: Sequence[Any], budgets: Sequence[Budget | None] | None = None) -> list[Solution]:
        if budgets is not None and len(budgets) != len(problems):
            raise StrategyInputError(f"got {len(budgets)} budgets for {len(problems)} problems; give one per problem")
        sizes = [self.solutions_within(b) for b in (budgets or [None] * len(problems))]
        # 1. Solve: S solutions of every problem in one generate call.
        results = self.generator.generate([self._request(p, s) for p, s in zip(problems, sizes, strict=True)])
        samples = [[to_sample(c, self.extract) for c in r.completions] for r in results]
        # 2. Verify: V verifications of every solution of every problem in one judge call.
        scored, events = self._verify(problems, samples)
        # 3. Select, and account solve and verify tokens separately.
        out, at = [], 0
        for p, r, mine in zip(problems, results, samples, strict=True):
            verdicts = scored[at: at + len(mine)]
            at += len(mine)
            out.append(self._select(p.id, mine, r.usage, verdicts, dict(events)))
        return out

    def _request(self, problem: Any, s: int) -> GenerationRequest:
        return GenerationRequest(
            messages=self.prompt(problem), n=s, temperature=self.sampling.temperature, top_p=self.sampling.top_p,
            max_tokens=self.sampling.max_tokens, seed=derive_seed(self.seed, problem.id, 0), key=problem.id)

    def _verify(self, problems: Sequence[Any],
                samples: Sequence[Sequence[Sample]]) -> tuple[list[VerifierScore], dict[str, int]]:
        """One verifier call for every solution; a verifier that raises scores all 0.5 (no evidence), counted."""
        items = [solution_item(p, s.text, self.verifier) for p, mine in zip(problems, samples, strict=True)
                 for s in mine]
        # A broken verifier gives no verdicts: every solution scores 0.5 (no evidence either way).
        scored, failed = score_or_fallback(self.verifier, items, VerifierScore((), 0.5, invalid=1), "solutions")
        return scored, {"verifier_error": 1} if failed else {}

    def _select(self, problem_id: str, samples: Sequence[Sample], solve_usage: Usage,
                verdicts: Sequence[VerifierScore], events: dict[str, int]) -> Solution:
        if "verifier_error" in events:  # the judge never ran: every solution keeps the fallback's 0.5
            scores = tuple(v.score for v in verdicts)
        else:
            # The judge scores a solution by the mean of its valid verdicts and counts each reply
            # without one in ``invalid``; a solution with no valid verdict scores no_verdict_score.
            none = [v.invalid >= self.config.verifications for v in verdicts]
            scores = tuple(self.config.no_verdict_score if n else v.score for v, n in zip(verdicts, none, strict=True))
            events["invalid_verdict"] = sum(v.invalid for v in verdicts)  # replies cut off or without a verdict
            events["no_verdict"] = sum(none)  # solutions none of whose verifications gave a verdict
        verify_usage = Usage.total([v.usage for v in verdicts])
        cost = VerificationCost(
            solutions=len(samples), solve_tokens=sum(s.completion_tokens for s in samples),
            verifications=sum(len(shape.completion_tokens) for shape in verify_usage.shapes),
            verify_tokens=verify_usage.completion_tokens, verify_prompt_tokens=verify_usage.prompt_tokens)
        answered = [i for i, s in enumerate(samples) if s.answer is not None]
        votes: dict[str, float] = {}
        if not answered:
            answer, confidence, selected = None, 0.0, None
        elif self.config.select == "score":
            selected = max(answered, key=lambda i: (scores[i], -i))
            answer, confidence = samples[selected].answer, scores[selected]
        else:
            weights = list(scores)
            if not any(weights[i] > 0 for i in answered):
                weights = [1.0] * len(samples)  # the judge rejects every answer: count them plainly
                events["unweighted_vote"] = 1
            answer, confidence, votes, selected = self.vote(samples, weights)
        tree = self._tree(samples, scores, verdicts, selected, cost)
        trace = Trace(self.name, tuple(samples), scores=scores, votes=votes, selected=selected, tree=tree,
                      events={k: v for k, v in events.items() if v})
        return Solution(problem_id, answer, confidence, solve_usage + verify_usage, trace)

    def _tree(self, samples: Sequence[Sample], scores: Sequence[float], verdicts: Sequence[VerifierScore],
              selected: int | None, cost: VerificationCost) -> tuple[dict[str, Any], ...]:
        """The trace's tree, as ``tts show`` prints it: a cost node (the solve/verify split and
        lambda), and under it each solution with its verification score."""
        lam = cost.lam
        s, v = cost.solutions, self.config.verifications
        # Lambda and the matched n first: ``tts show`` cuts a node's text at 70 characters.
        split = (f"verify {cost.verify_tokens} tok / {cost.verifications}, "
                 f"solve {cost.solve_tokens} tok / {s}")
        if lam is None:
            text = f"lambda unknown (nothing verified): {split}"
        else:
            text = (f"lambda {lam:.2f}, matched SC n={matched_self_consistency_n(s, v, lam)}: {split}; "
                    f"cost S(1+lambda V) = {s * (1 + lam * v):.1f} solutions at S={s}, V={v}")
        root = {"id": "cost", "parent": None, "depth": 0, "text": text, "score": None, "kept": True,
                **dataclasses.asdict(cost), "lambda": lam}
        nodes = [root]
        for i, (sample, score, verdict) in enumerate(zip(samples, scores, verdicts, strict=True)):
            nodes.append({"id": i, "parent": "cost", "depth": 1, "score": score, "kept": i == selected,
                          "answer": sample.answer, "text": f"answer {sample.answer!r}: {sample.text}",
                          "solve_tokens": sample.completion_tokens,
                          "verify_tokens": verdict.usage.completion_tokens})
        return tuple(nodes)
