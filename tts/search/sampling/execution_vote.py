"""Votes by execution for coding problems: programs that behave the same are one answer.

``exec_vote`` (execution-based self-consistency): sample n programs, run each on the inputs of
the examples in the problem's docstring (:mod:`tts.execution.behaviour`), group programs whose
outputs are identical, answer with the first program of the largest group. This is AlphaCode's
clustering (Li et al., 2022, Sec. 4.5: "programs that produce the same outputs on the same
inputs are grouped; one is submitted from the largest cluster") and MBR-exec with its 0/1
execution loss (Shi et al., 2022, Eq. 3: the program whose results agree with the most others,
inputs taken from the problem's description). Where this departs (docs/faithfulness.md):
AlphaCode generates its clustering inputs with a separate model; here the inputs are the
docstring's example calls, as in MBR-exec.

``inputs="model"`` clusters on more inputs than the docstring shows: in the same engine call the
model is asked for ``inputs_n`` samples of ``assert`` tests (:data:`TEST_PROMPT`, as CodeT asks),
and the calls in them are run as further inputs; the values the tests claim are not used (they are
the model's guesses). AlphaCode generates clustering inputs with a separately trained model (Sec.
4.5); S* (Li et al., 2025, Sec. 3.2) has the policy model synthesise them, as here, then adds
pairwise LLM judging of clusters, which tts does not do.

``public_tests``: first keep the programs that return every value the docstring states (the
problem's public tests; AlphaCode Sec. 4.4 filters its samples on the example tests), then vote
among them by behaviour as ``exec_vote`` does. When none passes, it votes among all programs
(AlphaCode would submit nothing; a run needs an answer), and the trace notes ``fallback``.

Both fall back to the syntax-tree vote of self-consistency (:func:`tts.answers.code.code_key`)
for a problem whose docstring shows no example call. A program that does not run (syntax error,
crash while defined, time-out) votes for nothing. The trace's notes record the execution seconds
and counts; the execution seconds are not in ``Usage`` (no engine time).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from pydantic import Field

from tts.backends.base import GenerationRequest, GenerationResult, Message, derive_seed
from tts.config import ExecutionStrategyConfig, StopSetting
from tts.execution.behaviour import Behaviour, Probe, probe_many
from tts.execution.programs import Example, assert_tests, doctest_examples, test_inputs
from tts.search.base import (
    SamplingStrategy,
    Strategy,
    StrategyInputError,
    completion_calls,
    prefix_usage,
    stop_of,
    to_sample,
    vote,
    with_stop_record,
    with_tool_calls,
)
from tts.search.stopping import VoteStop, draw_until_settled
from tts.types import Budget, Sample, Solution, Trace, Usage


class ExecutionVoteConfig(ExecutionStrategyConfig):
    """Sample n programs, answer with one from the largest group that behaves the same on the
    docstring's example inputs (AlphaCode's clustering; MBR-exec)."""

    kind: Literal["exec_vote"] = "exec_vote"
    stop: StopSetting = None
    """Stop sampling programs once the vote over their behaviour is settled
    (:class:`tts.config.StopConfig`; with ``inputs: docstring``); None draws all ``n``."""
    inputs: Literal["docstring", "model"] = "docstring"
    """The inputs programs are grouped on: the docstring's example calls, or those and the calls in
    tests the model writes (AlphaCode and S* generate inputs)."""
    inputs_n: int = Field(2, ge=1, le=64)
    """With inputs=model: test samples asked of the model per problem."""
    inputs_per_sample: int = Field(5, ge=1, le=100)
    """With inputs=model: assert statements read from each test sample."""


TEST_PROMPT = ("Write {count} test cases for the following Python function, one per line, each a single `assert` "
               "statement that calls `{entry_point}` with concrete arguments and compares the result with the "
               "expected value. Do not implement the function.\n```python\n{prompt}\n```")
"""What the model is asked for tests (``{count}``, ``{entry_point}``, ``{prompt}``): CodeT's tests,
and exec_vote's extra inputs."""


class PublicTestsConfig(ExecutionVoteConfig):
    """Keep the programs that pass the docstring's examples, then vote by behaviour among them."""

    kind: Literal["public_tests"] = "public_tests"  # type: ignore[assignment]


def _coding(problem: Any, strategy: str) -> tuple[str, str]:
    meta = getattr(problem, "metadata", None) or {}
    if "entry_point" not in meta or "prompt" not in meta:
        raise StrategyInputError(f"{strategy} runs programs on a coding problem's examples; problem "
                                 f"{getattr(problem, 'id', problem)!r} has no 'prompt' and 'entry_point' metadata "
                                 "(use --benchmark humaneval, or self_consistency for other problems).")
    return str(meta["prompt"]), str(meta["entry_point"])


class ExecutionVote(SamplingStrategy):
    """Clustering by behaviour (AlphaCode, MBR-exec): programs that return the same values on the same
    inputs are one answer; the first program of the largest group is chosen."""

    name = "exec_vote"
    config_class: ClassVar[type] = ExecutionVoteConfig
    pool_rule = None
    draw_group = "execution"
    filters_public: ClassVar[bool] = False

    def test_request(self, problem: Any, n: int, per_sample: int) -> GenerationRequest:
        """The request for ``n`` samples of assert tests of one problem (key ``<id>#tests``)."""
        prompt, entry = _coding(problem, self.name)
        text = TEST_PROMPT.format(count=per_sample, entry_point=entry, prompt=prompt.rstrip())
        return GenerationRequest(messages=(Message("user", text),), n=n, temperature=self.sampling.temperature,
                                 top_p=self.sampling.top_p, max_tokens=self.sampling.max_tokens,
                                 seed=derive_seed(self.seed, f"{problem.id}#tests", 0), key=f"{problem.id}#tests")

    def _draw(self, problems: Sequence[Any], ns: Sequence[int]) -> tuple[list[GenerationResult], list[GenerationResult | None]]:
        """ONE generate call: the programs, and with inputs=model each problem's input tests."""
        requests = [self.request(p, n=n) for p, n in zip(problems, ns, strict=True)]
        model_inputs = getattr(self.config, "inputs", "docstring") == "model"
        if model_inputs:
            requests += [self.test_request(p, self.config.inputs_n, self.config.inputs_per_sample) for p in problems]
        results = with_tool_calls(requests, self.generator.generate(requests))
        if not model_inputs:
            return results, [None] * len(problems)
        return results[: len(problems)], list(results[len(problems):])

    def solve(self, problems: Sequence[Any], budgets: Sequence[Budget | None] | None = None) -> list[Solution]:
        ns = self.samples_for(problems, budgets)
        if stop_of(self) is not None:
            return self._solve_until_settled(problems, ns)
        results, inputs = self._draw(problems, ns)
        behaviours = self.probe(problems, results, inputs)
        return [self.choose(p, r, b, n, i) for p, r, b, n, i in zip(problems, results, behaviours, ns, inputs, strict=True)]

    @classmethod
    def solve_together(cls, strategies: Sequence[Strategy], problems: Sequence[Any]) -> list[list[Solution]]:
        """ONE generator call with max(n) samples per problem and ONE batch of probes; each config
        chooses among its first n."""
        first = strategies[0]
        if not all(isinstance(s, ExecutionVote) and first.shares_draw_with(s) for s in strategies):
            return super().solve_together(strategies, problems)
        voters: list[ExecutionVote] = list(strategies)  # type: ignore[arg-type]
        n_max = max(s.config.n for s in voters)
        results, inputs = voters[0]._draw(problems, [n_max] * len(problems))
        behaviours = voters[0].probe(problems, results, inputs)
        return [[s.choose(p, r, b, s.config.n, i) for p, r, b, i in zip(problems, results, behaviours, inputs, strict=True)]
                for s in voters]

    def _solve_until_settled(self, problems: Sequence[Any], ns: Sequence[int]) -> list[Solution]:
        """Programs drawn in waves until the vote over their behaviour is settled (``config.stop``):
        each new program is probed on the docstring's examples when the rule judges (one batch per
        judgement; a program repeated within a problem runs once), and the rule counts the keys
        :meth:`choose` counts (behaviours, those that pass the examples for ``public_tests``, or the
        programs' text when there are no examples)."""
        if getattr(self.config, "inputs", "docstring") == "model":
            raise StrategyInputError(f"{self.name} with inputs=model draws the model's tests before voting; a stop "
                                     "judges programs as they come, on the docstring's examples: use "
                                     "inputs=docstring with a stop, or leave the stop out")
        rules = [VoteStop(self.config.stop, n) for n in ns]
        seen: list[dict[str, Behaviour]] = [{} for _ in problems]
        examples = [self.examples(p, None) for p in problems]

        def behaviours_of(i: int, completions: Sequence[Any]) -> list[Behaviour | None]:
            answers = [to_sample(c, self.extract).answer for c in completions]
            new = [a for a in dict.fromkeys(answers) if a is not None and a not in seen[i]] if examples[i] else []
            if new:
                prompt, entry = _coding(problems[i], self.name)
                probes = [Probe(prompt, entry, a, examples[i]) for a in new]
                seen[i].update(zip(new, probe_many(probes, workers=self.config.workers,
                                                   unsafe_no_sandbox=self.config.unsafe_no_sandbox), strict=True))
            return [seen[i].get(a) if a is not None else None for a in answers]

        def judge(i: int, completions: Sequence[Any]) -> str | None:
            behaviours = behaviours_of(i, completions)
            if not any(b is not None for b in behaviours):  # no examples: the syntax vote's keys
                return rules[i].check(self.sample_keys([to_sample(c, self.extract) for c in completions]))
            keys = [b.key if b is not None else None for b in behaviours]
            if self.filters_public:
                kept, passed = self._filter(keys, behaviours)
                keys = kept if passed else keys
            return rules[i].check(keys)

        draws = draw_until_settled(self.generator, ns, self.config.stop,
                                   lambda i, k, drawn: self.request(problems[i], n=k, drawn=drawn), judge,
                                   prepare=completion_calls)
        return [with_stop_record(self.choose(p, d.result, behaviours_of(i, d.result.completions),
                                             len(d.result.completions)), d.record)
                for i, (p, d) in enumerate(zip(problems, draws, strict=True))]

    def shares_draw_with(self, other: Strategy) -> bool:
        """A sampling strategy's rule, and the same inputs setting: with ``inputs=model`` the draw
        also holds the model's tests, so configs that differ there draw apart (grouped together,
        they fell through to the plain sampling path, whose aggregate() an execution vote refuses)."""
        return (super().shares_draw_with(other) and isinstance(other, ExecutionVote)
                and other._inputs_setting() == self._inputs_setting())

    def _inputs_setting(self) -> tuple[Any, ...]:
        return tuple(getattr(self.config, k, None) for k in ("inputs", "inputs_n", "inputs_per_sample"))

    def examples(self, problem: Any, inputs: GenerationResult | None) -> tuple[Example, ...]:
        """The inputs a problem's programs run on: the docstring's examples, then the calls in the
        model's tests that the docstring does not show."""
        prompt, entry = _coding(problem, self.name)
        found = list(doctest_examples(prompt, entry))
        if inputs is not None:
            tests = [t for c in inputs.completions for t in assert_tests(c.text, entry, self.config.inputs_per_sample)]
            seen = {e.call for e in found}
            found += [e for e in test_inputs(tests, entry) if e.call not in seen]
        return tuple(found)

    def probe(self, problems: Sequence[Any], results: Sequence[GenerationResult],
              inputs: Sequence[GenerationResult | None] | None = None) -> list[list[Behaviour | None]]:
        """Every sample's behaviour on its problem's inputs, all in one parallel batch (the same
        program is run once per problem); None for a sample without a program."""
        jobs: dict[tuple[int, str], Probe] = {}
        answers: list[list[str | None]] = []
        for i, (p, r, inp) in enumerate(zip(problems, results, inputs or [None] * len(problems), strict=True)):
            prompt, entry = _coding(p, self.name)
            examples = self.examples(p, inp)
            answers.append([to_sample(c, self.extract).answer for c in r.completions])
            for a in answers[-1]:
                if a is not None and examples:
                    jobs.setdefault((i, a), Probe(prompt, entry, a, examples))
        ran = dict(zip(jobs, probe_many(list(jobs.values()), workers=self.config.workers,
                                        unsafe_no_sandbox=self.config.unsafe_no_sandbox), strict=True))
        return [[ran.get((i, a)) if a is not None else None for a in row] for i, row in enumerate(answers)]

    def choose(self, problem: Any, result: GenerationResult, behaviours: Sequence[Behaviour | None], n: int,
               inputs: GenerationResult | None = None) -> Solution:
        """The answer among the first ``n`` samples (module docstring), with execution notes; the
        input tests' tokens (``inputs``) are added to the usage."""
        samples = [to_sample(c, self.extract) for c in result.completions[:n]]
        usage = prefix_usage(result.usage, samples, len(result.completions))
        if inputs is not None:
            usage = usage + inputs.usage
        mine = list(behaviours[:n])
        # Seconds of the distinct programs among these n (a program run once counts once).
        distinct = {s.answer: b for s, b in zip(samples, mine, strict=True) if b is not None}
        notes: dict[str, Any] = {"executions": len(distinct),
                                 "execution_seconds": round(sum(b.seconds for b in distinct.values()), 3)}
        if not distinct:  # no example inputs (or no programs): the syntax vote
            notes["by"] = "syntax"
            return self._solution(problem.id, samples, usage, self.vote(samples), notes)
        keys = [b.key if b is not None else None for b in mine]
        if self.filters_public:
            keys, notes["passed_public"] = self._filter(keys, mine)
            if notes["passed_public"] == 0:
                keys, notes["fallback"] = [b.key if b is not None else None for b in mine], "none passed"
        notes["by"] = "behaviour"
        return self._solution(problem.id, samples, usage, vote(samples, keys=lambda _: keys), notes)

    @staticmethod
    def _filter(keys: list[str | None], behaviours: Sequence[Behaviour | None]) -> tuple[list[str | None], int]:
        kept = [k if b is not None and b.passes_public else None for k, b in zip(keys, behaviours, strict=True)]
        return kept, sum(k is not None for k in kept)

    def _solution(self, problem_id: str, samples: list[Sample], usage: Usage,
                  voted: tuple[str | None, float, dict[str, float], int | None], notes: dict[str, Any]) -> Solution:
        answer, share, votes, idx = voted
        trace = Trace(self.name, tuple(samples), votes={k[:200]: v for k, v in votes.items()}, selected=idx, notes=notes)
        return Solution(problem_id, answer, share, usage, trace)

    def aggregate(self, problem_id: str, samples: Sequence[Sample], usage: Usage,
                  scores: Sequence[float] | None = None) -> Solution:
        """Refused: an execution vote needs the problem itself (its examples), not only its id."""
        raise StrategyInputError(f"{self.name} chooses with the problem's examples; call solve(), not aggregate()")


class PublicTestsVote(ExecutionVote):
    """Public-test filtering (AlphaCode): keep the programs that return the values the docstring
    states, then group them by behaviour as exec_vote does."""

    name = "public_tests"
    config_class: ClassVar[type] = PublicTestsConfig
    filters_public = True


__all__ = ["TEST_PROMPT", "ExecutionVote", "ExecutionVoteConfig", "PublicTestsConfig", "PublicTestsVote"]
