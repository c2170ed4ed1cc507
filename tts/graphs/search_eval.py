"""Evaluating collaboration graphs on one split of problems, for graph search.

Each graph runs as the ``graph`` strategy (:class:`~tts.graphs.strategy.GraphStrategy`) on the
split's problems with the run's generator; its answers are graded against the gold answers. The
grade is the evaluation's only use of the gold answers: the strategy never sees them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tts.backends.base import Generator
from tts.benchmarks.grading import Outcome
from tts.config import SamplingConfig
from tts.graphs.graph import GraphError, GraphSpec
from tts.graphs.search import Evaluation, canonical_key
from tts.graphs.strategy import GraphModels, GraphStrategy, GraphStrategyConfig
from tts.search.base import PromptFn
from tts.types import Problem

GradeFn = Callable[[Sequence[tuple[str | None, str]]], Sequence[Outcome]]
"""``(answer, gold)`` pairs -> outcomes, e.g. :meth:`tts.benchmarks.grading.Grader.grade_many`."""


class SplitEvaluator:
    """An :data:`~tts.graphs.search.Evaluator` over one split: runs each graph, grades its answers.

    Args:
        problems: The split (every problem needs a gold answer).
        generator: The run's generator (the graphs' ``policy``; their other models open beside it).
        prompt: Problem -> chat messages (the benchmark's template).
        grade: Grades ``(answer, gold)`` pairs; an ungraded answer counts as not correct.
        sampling: The run's sampling settings.
        seed: The run seed (every graph is run with it, so a graph's evaluation is reproducible).
        models: Generators of the graphs' other models, shared by every evaluation (and with other
            evaluators: give the dev and test evaluators the same one) so that each model's engine
            starts once; its owner closes it. None: each evaluation opens and closes its own.

    Example:
        >>> with Grader() as grader:  # doctest: +SKIP
        ...     dev = SplitEvaluator(problems[:20], generator, DEMO_PROMPT.render, grader.grade_many)
        ...     result = search_graphs(space, GraphSearchConfig(max_evaluations=20), dev)
    """

    def __init__(self, problems: Sequence[Problem], generator: Generator, prompt: PromptFn, grade: GradeFn,
                 sampling: SamplingConfig | None = None, seed: int = 0, models: GraphModels | None = None) -> None:
        if not problems:
            raise GraphError("a graph evaluation split is empty; give it at least one problem")
        missing = [p.id for p in problems if p.answer is None]
        if missing:
            raise GraphError(f"problems {', '.join(missing[:3])} have no gold answer; a search split needs them")
        self.problems = list(problems)
        self.generator = generator
        self.prompt = prompt
        self.grade = grade
        self.sampling = sampling
        self.seed = seed
        self.models = models

    def __call__(self, specs: Sequence[GraphSpec]) -> list[Evaluation]:
        out = []
        for spec in specs:
            strategy = GraphStrategy(GraphStrategyConfig(graph=spec), self.generator, self.prompt, self.sampling,
                                     seed=self.seed, models=self.models)
            try:
                solutions = strategy.solve(self.problems)
            finally:
                strategy.close()
            outcomes = self.grade([(s.answer, str(p.answer)) for s, p in zip(solutions, self.problems, strict=True)])
            n = len(self.problems)
            out.append(Evaluation(
                accuracy=sum(o == Outcome.CORRECT for o in outcomes) / n,
                tokens_per_problem=sum(s.usage.total_tokens for s in solutions) / n,
                requests_per_problem=sum(s.usage.calls for s in solutions) / n,
                problems=n))
        return out


class MemoEvaluator:
    """Evaluates each distinct graph once per split; later searches reuse the evaluation (each search
    still counts it against its own budget)."""

    def __init__(self, evaluate: Callable[[list[GraphSpec]], list[Evaluation]]) -> None:
        self.evaluate = evaluate
        self.cache: dict[str, Evaluation] = {}

    def __call__(self, specs: Sequence[GraphSpec]) -> list[Evaluation]:
        todo = {canonical_key(s): s for s in specs if canonical_key(s) not in self.cache}
        if todo:
            self.cache.update(zip(todo, self.evaluate(list(todo.values())), strict=True))
        return [self.cache[canonical_key(s)] for s in specs]
