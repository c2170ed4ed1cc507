"""GenSelect and recursive self-aggregation as strategies, built on the collaboration-graph executor.

Both are fixed graphs of the roles in :mod:`tts.graphs.roles`, built from a config and run by
:class:`~tts.graphs.executor.GraphExecutor` (one generate call per level for all problems), so
they need no executor of their own and their traces show every node in ``tts show``:

* ``genselect`` (GenSelect; optillm, Toshniwal et al. 2025): a generator of n candidates, then a
  tournament of ``selector`` nodes that read ``group`` candidates at a time and pick one; one
  selector when n <= group (GenSelect in one call), ceil(log_group(n)) levels otherwise.
* ``aggregate`` (recursive self-aggregation, Venkatraman et al. 2025; a mixture-of-agents layer
  with one model, Wang et al. 2024): a population of n candidates, then ``rounds`` layers of
  ``aggregator`` nodes, each writing n new solutions from random subsets of ``subset`` of the
  previous population; the answer is the majority vote of the last population.

They live with the graphs (not in ``tts.search``) because they run the graph executor: the layers
import downward only.

Against the references (pinned in ``tests/parity/test_selection.py``): GenSelect follows optillm's
plugin (``genselect_plugin.py``: n candidates, one numbered comparison prompt, the first candidate
when the reply names none) except that the selector answers with the number only, read from the
first token's probabilities (one cheap greedy call instead of a reasoned comparison at temperature
0.3 ending in "BEST CANDIDATE: N"), and that more than ``group`` candidates (a one-digit choice
reads at most 9) run as a tournament; ``group >= n`` is optillm's single prompt. ``aggregate``
follows RSA's Algorithm 1 (N new solutions per step, each from K distinct members of the previous
population drawn without replacement, T steps); the answer is the last population's majority vote.
Its defaults (N = 4, K = 3, T = 1) are a cheap start, not the paper's larger settings.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from pydantic import Field

from tts.answers import extract_answer
from tts.backends.base import Generator
from tts.config import SamplingConfig, StrategyConfigBase
from tts.graphs.executor import GraphExecutor
from tts.graphs.graph import POLICY, GraphSpec
from tts.search.base import BudgetUse, ExtractFn, PromptFn, Strategy, StrategyInputError
from tts.types import Budget, RequestShape, Solution


class GenSelectConfig(StrategyConfigBase):
    """Sample n candidates; the model reads them and picks one (a tournament when n > group)."""

    kind: Literal["genselect"] = "genselect"
    n: int = Field(8, ge=1, le=64)
    """Candidates per problem."""
    group: int = Field(4, ge=2, le=9)
    """Candidates one selection prompt shows (the model answers with a one-digit number)."""
    votes: int = Field(1, ge=1, le=64)
    """Selections per group: 1 reads the choice from the first token's probabilities (greedy);
    more sample that many choices (``select_temperature``) and add them up."""
    select_temperature: float = Field(0.7, ge=0.0, le=5.0)
    """Temperature of sampled selections (``votes`` > 1)."""


class AggregateConfig(StrategyConfigBase):
    """A population of n solutions, re-written `rounds` times from random subsets of it (RSA)."""

    kind: Literal["aggregate"] = "aggregate"
    n: int = Field(4, ge=1, le=64)
    """Population size: candidates per round."""
    rounds: int = Field(1, ge=1, le=16)
    """Aggregation rounds after the first population (n * (rounds + 1) generations in all)."""
    subset: int = Field(3, ge=1, le=32)
    """Candidates each aggregation prompt shows (RSA's K)."""
    aggregate_temperature: float | None = Field(None, ge=0.0, le=5.0)
    """Temperature of the aggregation calls; None: the run's."""


def genselect_graph(c: GenSelectConfig) -> GraphSpec:
    """The graph of a GenSelect config: generator, then selector levels down to one winner."""
    levels = max(1, math.ceil(math.log(c.n) / math.log(c.group) - 1e-9)) if c.n > 1 else 1
    nodes: dict[str, dict[str, Any]] = {"candidates": {"role": "generator", "n": c.n}}
    prev = "candidates"
    for level in range(1, levels + 1):
        node: dict[str, Any] = {"role": "selector", "inputs": [prev], "max_candidates": c.group}
        if c.votes > 1:
            node.update(n=c.votes, temperature=c.select_temperature)
        nodes[f"select{level}"] = node
        prev = f"select{level}"
    return GraphSpec.model_validate({"name": "genselect", "nodes": nodes, "output": prev})


def aggregate_graph(c: AggregateConfig) -> GraphSpec:
    """The graph of an aggregate config: a generator, then ``rounds`` aggregator layers."""
    nodes: dict[str, dict[str, Any]] = {"population0": {"role": "generator", "n": c.n}}
    for r in range(1, c.rounds + 1):
        node: dict[str, Any] = {"role": "aggregator", "inputs": [f"population{r - 1}"], "n": c.n,
                                "max_candidates": c.subset}
        if c.aggregate_temperature is not None:
            node["temperature"] = c.aggregate_temperature
        nodes[f"population{r}"] = node
    return GraphSpec.model_validate({"name": "aggregate", "nodes": nodes, "output": f"population{c.rounds}"})


class _FixedGraph(Strategy):
    """A strategy that runs one graph built from its config on the run's generator."""

    build: ClassVar[Any]
    budget_use = BudgetUse.REFUSES

    def __init__(self, config: Any, generator: Generator, prompt: PromptFn, sampling: SamplingConfig | None = None,
                 extract: ExtractFn = extract_answer, seed: int = 0) -> None:
        super().__init__(config, generator, prompt, sampling, extract, seed)
        self.graph = type(self).build(config)
        self.executor = GraphExecutor(self.graph, prompt, self.sampling, self.extract, seed)

    def solve(self, problems: Sequence[Any], budgets: Sequence[Budget | None] | None = None) -> list[Solution]:
        if budgets is not None and any(b is not None for b in budgets):
            raise StrategyInputError(f"{self.name} runs a fixed graph and cannot honour a per-problem budget; "
                                     "lower n instead, or use self_consistency for budgeted runs")
        if not problems:
            return []
        import dataclasses

        sols = self.executor.run(problems, {POLICY: self.generator})
        # The executor names its traces "graph"; say which strategy ran.
        return [dataclasses.replace(s, trace=dataclasses.replace(s.trace, strategy=self.name)) for s in sols]


class GenSelect(_FixedGraph):
    """GenSelect; see the module docstring."""

    name = "genselect"
    config_class: ClassVar[type[StrategyConfigBase]] = GenSelectConfig
    build = staticmethod(genselect_graph)

    @classmethod
    def planned_requests(cls, n: int, prompt_tokens: int, gen_tokens: int, cached_tokens: int = 0) -> list[RequestShape]:
        """Cost hook (``tts cost``): n candidates, then one selection prompt per group per level
        (shown candidates in the prompt, a few tokens out); a group of one candidate goes on
        without a request, as the selector runs it."""
        group = cls.config_class.model_fields["group"].default
        shapes, field = [RequestShape(prompt_tokens, cached_tokens, (gen_tokens,) * n)], n
        while field > 1:
            groups = math.ceil(field / group)
            asked = groups - (field % group == 1)
            shapes += [RequestShape(prompt_tokens + group * gen_tokens, 0, (4,)) for _ in range(asked)]
            field = groups
        return shapes


class Aggregate(_FixedGraph):
    """Recursive self-aggregation; see the module docstring."""

    name = "aggregate"
    config_class: ClassVar[type[StrategyConfigBase]] = AggregateConfig
    build = staticmethod(aggregate_graph)

    @classmethod
    def planned_requests(cls, n: int, prompt_tokens: int, gen_tokens: int, cached_tokens: int = 0) -> list[RequestShape]:
        """Cost hook (``tts cost``): the population, then per round n aggregation prompts showing
        ``subset`` candidates each."""
        d = cls.config_class.model_fields
        rounds, subset = d["rounds"].default, d["subset"].default
        shapes = [RequestShape(prompt_tokens, cached_tokens, (gen_tokens,) * n)]
        for _ in range(rounds):
            shapes += [RequestShape(prompt_tokens + subset * gen_tokens, 0, (gen_tokens,)) for _ in range(n)]
        return shapes
