"""Multi-stage tasks (AgentTTS): split a total budget over a graph's stages from per-stage curves.

Source: Wang et al. 2025, "AgentTTS: Large Language Model Agent for Test-time Compute-optimal
Scaling Strategy in Complex Tasks" (cited from memory): a task made of sub-tasks (stages), each
with its own model and budget; the split of the total budget is chosen to maximise end-to-end
success. AgentTTS has an LLM agent propose splits; here the split comes from measured curves:

1. Reference: every stage at the smallest budget of its grid; the graph runs on the dev split,
   giving the end-to-end accuracy ``a0``.
2. Per-stage curves: for each stage ``s`` and each larger budget ``b`` of its grid, the graph
   with ``s`` at ``b`` and every other stage at the reference gives ``g_s(b)`` (end-to-end dev
   accuracy) and the stage's own tokens per problem ``c_s(b)`` (summed from the trace's per-node
   usage). ``1 + sum_s (|grid_s| - 1)`` evaluations in all.
3. Prediction: the stages' effects multiply (a pipeline that succeeds when every stage does):
   ``acc(b) = a0 * prod_s g_s(b_s) / a0``. Accuracies are smoothed as ``(k + 1) / (n + 2)`` so
   that one zero does not erase a stage's curve.
4. Plan: every combination of grid budgets whose cost fits the total (``samples``: the sum of
   ``n`` over staged nodes; ``tokens``: the sum of the stages' measured ``c_s(b_s)`` plus the
   unstaged nodes' tokens at the reference) is scored; the highest predicted accuracy wins, the
   cheaper on ties.

The product model is an assumption (stages interact: a later stage may repair an earlier one's
mistake); ``tts stage-plan`` therefore also measures the chosen split and an even split on the
held-out split, so the claim is checked rather than assumed.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from tts.graphs.graph import GraphError, GraphSpec, StageSpec
from tts.types import Problem, Solution

logger = logging.getLogger(__name__)

Unit = Literal["samples", "tokens"]


@dataclass(frozen=True)
class StageEvaluation:
    """A graph's result on one split, with the tokens each node spent.

    Args:
        correct: Problems answered correctly.
        problems: Problems in the split.
        node_tokens: Node -> mean prompt + completion tokens per problem.
    """

    correct: int
    problems: int
    node_tokens: Mapping[str, float]

    @property
    def accuracy(self) -> float:
        return self.correct / self.problems

    @property
    def smoothed(self) -> float:
        """``(correct + 1) / (problems + 2)``: never 0 or 1, so products of ratios stay defined."""
        return (self.correct + 1) / (self.problems + 2)

    @property
    def tokens_per_problem(self) -> float:
        return sum(self.node_tokens.values())


StageEvaluator = Callable[[GraphSpec], StageEvaluation]
"""A graph -> its evaluation on the dev split."""


@dataclass(frozen=True)
class StageCurve:
    """One stage's measured curve: at each budget, end-to-end accuracy and the stage's tokens."""

    stage: str
    budgets: tuple[int, ...]
    evaluations: tuple[StageEvaluation, ...]
    nodes: tuple[str, ...]

    def tokens(self, budget: int) -> float:
        ev = self.evaluations[self.budgets.index(budget)]
        return sum(ev.node_tokens.get(n, 0.0) for n in self.nodes)


@dataclass(frozen=True)
class StagePlan:
    """The chosen split.

    Args:
        budgets: Stage -> ``n`` of each of its nodes.
        predicted: Predicted end-to-end dev accuracy (smoothed, product model).
        cost: Its cost in ``unit``.
        unit: ``samples`` or ``tokens``.
        spec: The graph with the split written as ``budget`` and ``shares``.
        reference: The evaluation with every stage at its smallest budget.
        curves: The per-stage curves the plan was made from.
        options: Every affordable combination, with its prediction and cost (best first).
    """

    budgets: Mapping[str, int]
    predicted: float
    cost: float
    unit: Unit
    spec: GraphSpec
    reference: StageEvaluation
    curves: tuple[StageCurve, ...]
    options: tuple[tuple[Mapping[str, int], float, float], ...]


def with_budgets(spec: GraphSpec, budgets: Mapping[str, int]) -> GraphSpec:
    """``spec`` with each stage's nodes drawing ``budgets[stage]`` samples, written as the graph's
    ``budget`` (the sum of n over staged nodes) and each stage's ``share`` of it.

    Raises:
        GraphError: The graph has no stages, or ``budgets`` misses or adds a stage.
    """
    if not spec.stages:
        raise GraphError(f"graph {spec.name!r} has no stages: section; name its stages to split a budget over them")
    if set(budgets) != set(spec.stages):
        raise GraphError(f"budgets name stages {sorted(budgets)}, the graph has {sorted(spec.stages)}")
    total = sum(budgets[s] * len(st.nodes) for s, st in spec.stages.items())
    stages = {s: StageSpec(nodes=st.nodes, share=budgets[s] * len(st.nodes) / total) for s, st in spec.stages.items()}
    staged = {n for st in spec.stages.values() for n in st.nodes}
    nodes = {name: node.model_copy(update={"n": 1}) if name in staged else node for name, node in spec.nodes.items()}
    data = spec.model_dump(mode="json", exclude={"nodes", "stages", "budget"})
    data.update(nodes={k: v.model_dump(mode="json", exclude_defaults=True) for k, v in nodes.items()},
                stages={k: v.model_dump(mode="json") for k, v in stages.items()}, budget=total)
    planned = GraphSpec.model_validate(data)
    samples = planned.stage_samples()
    wrong = {n: samples[n] for s, st in spec.stages.items() for n in st.nodes if samples[n] != budgets[s]}
    if wrong:  # rounding of shares; cannot happen with integer budgets, checked because it would be silent
        raise GraphError(f"the shares of budget {total} give n {wrong}, not {dict(budgets)}")
    return planned


def measure_curves(spec: GraphSpec, grid: Mapping[str, Sequence[int]], evaluate: StageEvaluator
                   ) -> tuple[StageEvaluation, tuple[StageCurve, ...]]:
    """Steps 1-2: the reference evaluation and every stage's curve on the dev split."""
    grids = {s: tuple(sorted(set(grid[s]))) for s in spec.stages}
    if any(not g or g[0] < 1 for g in grids.values()):
        raise GraphError(f"every stage needs a grid of budgets >= 1, got {grids}")
    low = {s: g[0] for s, g in grids.items()}
    reference = evaluate(with_budgets(spec, low))
    logger.info("stages: reference %s -> accuracy %.3f", low, reference.accuracy)
    curves = []
    for stage, budgets in grids.items():
        evals = [reference]
        for b in budgets[1:]:
            ev = evaluate(with_budgets(spec, {**low, stage: b}))
            logger.info("stages: %s at %d -> accuracy %.3f, %.0f stage tokens/problem", stage, b, ev.accuracy,
                        sum(ev.node_tokens.get(n, 0.0) for n in spec.stages[stage].nodes))
            evals.append(ev)
        curves.append(StageCurve(stage, budgets, tuple(evals), spec.stages[stage].nodes))
    return reference, tuple(curves)


def plan_split(spec: GraphSpec, reference: StageEvaluation, curves: Sequence[StageCurve], total: float,
               unit: Unit = "samples") -> StagePlan:
    """Steps 3-4: the affordable combination of budgets with the best predicted accuracy.

    Raises:
        GraphError: No combination fits ``total`` (names the cheapest cost).
    """
    staged = {n for c in curves for n in c.nodes}
    fixed = sum(t for n, t in reference.node_tokens.items() if n not in staged)
    a0 = reference.smoothed
    options = []
    for combo in itertools.product(*(c.budgets for c in curves)):
        budgets = {c.stage: b for c, b in zip(curves, combo, strict=True)}
        predicted = a0
        for c, b in zip(curves, combo, strict=True):
            predicted *= c.evaluations[c.budgets.index(b)].smoothed / a0
        if unit == "samples":
            cost = float(sum(b * len(c.nodes) for c, b in zip(curves, combo, strict=True)))
        else:
            cost = fixed + sum(c.tokens(b) for c, b in zip(curves, combo, strict=True))
        options.append((budgets, min(predicted, 1.0), cost))
    affordable = sorted((o for o in options if o[2] <= total + 1e-9), key=lambda o: (-o[1], o[2]))
    if not affordable:
        cheapest = min(o[2] for o in options)
        raise GraphError(f"no split of the stages fits a total of {total:g} {unit}; the cheapest costs {cheapest:g}")
    budgets, predicted, cost = affordable[0]
    return StagePlan(budgets, predicted, cost, unit, with_budgets(spec, budgets), reference, tuple(curves),
                     tuple(affordable))


def even_split(spec: GraphSpec, grid: Mapping[str, Sequence[int]], plan: StagePlan) -> Mapping[str, int] | None:
    """The baseline split: the same budget for every stage, the largest grid value all stages share
    among ``plan``'s options, which are the splits that fit its total (None when none fits)."""
    common = sorted(set.intersection(*(set(grid[s]) for s in spec.stages)), reverse=True)
    costs = {tuple(sorted(b.items())): cost for b, _, cost in plan.options}
    for b in common:
        budgets = {s: b for s in spec.stages}
        if tuple(sorted(budgets.items())) in costs:
            return budgets
    return None


class SplitStageEvaluator:
    """A :data:`StageEvaluator` over one split: runs the graph, grades answers, sums node tokens.

    Args:
        problems: The split (every problem needs a gold answer).
        solve: ``(graph, problems) -> solutions`` (a graph strategy or executor).
        grade: ``(answer, gold)`` pairs -> whether each is correct.
    """

    def __init__(self, problems: Sequence[Problem], solve: Callable[[GraphSpec, Sequence[Problem]], list[Solution]],
                 grade: Callable[[Sequence[tuple[str | None, str]]], Sequence[bool]]) -> None:
        if not problems or any(p.answer is None for p in problems):
            raise GraphError("a stage-planning split needs at least one problem, each with a gold answer")
        self.problems, self.solve, self.grade = list(problems), solve, grade

    def __call__(self, spec: GraphSpec) -> StageEvaluation:
        solutions = self.solve(spec, self.problems)
        correct = sum(bool(ok) for ok in self.grade([(s.answer, str(p.answer))
                                                      for s, p in zip(solutions, self.problems, strict=True)]))
        tokens: dict[str, float] = {}
        for sol in solutions:
            for entry in sol.trace.tree:
                if entry.get("parent") is None and "node" in entry:
                    tokens[entry["node"]] = tokens.get(entry["node"], 0.0) + entry["prompt_tokens"] + entry[
                        "completion_tokens"]
        n = len(self.problems)
        return StageEvaluation(correct, n, {k: v / n for k, v in tokens.items()})
