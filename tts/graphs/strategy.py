"""A collaboration graph as a Strategy (registry name ``graph``), so the runner runs it unchanged.

The policy generator (the run's) serves every node on ``policy``. A name from the graph file's
``models:`` section becomes a backend config: the entry's settings on top of the run's backend
config (same kind), or the entry alone when it names another ``kind``. A config equal to the
run's is served by the run's generator; any other opens a generator of its own, kept in an
:class:`~tts.backends.engine_pool.EnginePool` and closed by :meth:`GraphStrategy.close`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, TypeAdapter

from tts.answers import extract_answer
from tts.backends.base import Generator
from tts.backends.engine_pool import EnginePool
from tts.config import BackendConfig, SamplingConfig, StrategyConfigBase
from tts.graphs.executor import GraphExecutor
from tts.graphs.graph import POLICY, GraphError, GraphSpec
from tts.search.base import BudgetUse, ExtractFn, PromptFn, Strategy, StrategyInputError
from tts.types import Budget, Problem, Solution

logger = logging.getLogger(__name__)

# Backends whose generator answers only the problems it was opened with (the scripted test
# backend builds per-problem answer distributions): reopened when a batch brings new problems.
_OPENED_FOR_PROBLEMS = frozenset({"scripted"})


class GraphStrategyConfig(StrategyConfigBase):
    """Run a multi-LLM collaboration graph (``tts eval --graph FILE``)."""

    kind: Literal["graph"] = "graph"
    graph: GraphSpec
    """The graph, as its YAML file writes it (validated when the config is built)."""

    @property
    def label(self) -> str:
        return f"graph:{self.graph.name}"


def backend_for(entry: dict[str, Any], name: str, policy: Generator) -> BaseModel:
    """The backend config of a ``models:`` entry, on top of the policy generator's own config.

    Raises:
        GraphError: The entry's settings do not make a valid backend config (names the model).
    """
    entry = {"model": name, **entry}
    base = getattr(policy, "config", None)
    if not isinstance(base, BaseModel):
        # A generator that keeps no config (the scripted backend): its kind and seed carry over.
        base = _scripted_base(policy)
    data = entry if entry.get("kind", base.kind) != base.kind else {**base.model_dump(), **entry}
    try:
        return TypeAdapter(BackendConfig).validate_python(data)
    except ValueError as exc:
        raise GraphError(f"model {name!r}: {' '.join(str(exc).split())}") from None


def _scripted_base(policy: Generator) -> BaseModel:
    from tts.backends.scripted import ScriptedGenerator
    from tts.config import ScriptedBackendConfig

    if isinstance(policy, ScriptedGenerator):
        return ScriptedBackendConfig(model=policy.model_name, seed=policy.seed)
    raise GraphError(f"the run's generator ({type(policy).__name__}) has no backend config to derive the graph's "
                     "models from; give each models: entry its own kind (and settings)")


class GraphModels:
    """The generators of graphs' other models (``models:`` entries), in one :class:`EnginePool`.

    A graph strategy makes its own by default and closes it with itself. Code that runs many
    graphs (graph search, stage planning) makes one, hands it to every strategy and closes it at
    the end, so each model's engine starts once for the whole search, not once per graph.
    """

    def __init__(self, pool: EnginePool | None = None) -> None:
        self.pool = pool if pool is not None else EnginePool()  # an empty pool is falsy (len 0)
        self.opened_for: dict[str, set[str]] = {}
        """Pool key -> the problem ids a per-problem backend (scripted) was opened with."""

    def get(self, cfg: BaseModel, name: str, graph: str, problems: Sequence[Problem]) -> Generator:
        """The open generator of ``cfg``, started (or, for a per-problem backend that has not seen
        these problems, restarted) when needed."""
        key = cfg.model_dump_json()
        ids = {p.id for p in problems}
        if cfg.kind in _OPENED_FOR_PROBLEMS and not ids <= self.opened_for.get(key, ids):
            self.pool.close(cfg)
        if cfg not in self.pool:
            logger.info("graph %s: opening model %r (%s)", graph, name, cfg.model)
            self.opened_for[key] = ids
        return self.pool.get(cfg, problems)

    def close(self) -> None:
        """Close every generator opened (never a run's own)."""
        self.opened_for.clear()
        self.pool.close_all()

    def __enter__(self) -> GraphModels:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class GraphStrategy(Strategy):
    """Runs the graph of ``config.graph`` on each batch; see :mod:`tts.graphs.executor`.

    Args:
        models: Shared generators of the graph's other models (closed by their owner); None:
            the strategy opens its own and :meth:`close` closes them.
    """

    name = "graph"
    config_class: ClassVar[type[StrategyConfigBase]] = GraphStrategyConfig
    budget_use = BudgetUse.REFUSES  # its nodes' n are fixed (a GraphSpec.budget splits over stages, not per solve)

    def __init__(self, config: Any, generator: Generator, prompt: PromptFn, sampling: SamplingConfig | None = None,
                 extract: ExtractFn = extract_answer, seed: int = 0, models: GraphModels | None = None) -> None:
        super().__init__(config, generator, prompt, sampling, extract, seed)
        self.executor = GraphExecutor(config.graph, prompt, self.sampling, self.extract, seed)
        self._owns_models = models is None
        self._models = models or GraphModels()
        self._configs: dict[str, BaseModel] = {}

    def _generators(self, problems: Sequence[Problem]) -> tuple[dict[str, Generator], dict[str, str]]:
        """Model name -> generator, and model name -> the model its requests are priced on."""
        generators: dict[str, Generator] = {POLICY: self.generator}
        labels: dict[str, str] = {}
        base = getattr(self.generator, "config", None)
        if not isinstance(base, BaseModel):
            try:
                base = _scripted_base(self.generator)
            except GraphError:
                base = None
        for name in self.executor.models():
            if name == POLICY:
                continue
            if name not in self._configs:
                self._configs[name] = backend_for(self.config.graph.models[name], name, self.generator)
            cfg = self._configs[name]
            if isinstance(base, BaseModel) and cfg == base:
                generators[name] = self.generator
                continue
            generators[name] = self._models.get(cfg, name, self.config.graph.name, problems)
            labels[name] = generators[name].model_name
        return generators, labels

    def solve(self, problems: Sequence[Any], budgets: Sequence[Budget | None] | None = None) -> list[Solution]:
        if budgets is not None and any(b is not None for b in budgets):
            raise StrategyInputError(f"graph {self.config.graph.name!r} runs a fixed graph and cannot honour a "
                                     "per-problem budget; lower its nodes' n instead, or use self_consistency "
                                     "for budgeted runs")
        if not problems:
            return []
        generators, labels = self._generators(problems)
        return self.executor.run(problems, generators, labels)

    def close(self) -> None:
        """Close the generators the graph opened for its other models (never the run's, nor
        shared ones: their owner closes them)."""
        if self._owns_models:
            self._models.close()
