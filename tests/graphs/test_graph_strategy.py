"""The graph strategy's models: a ``models:`` entry becomes a backend config on top of the run's (its
kind, server and seed carried over), an entry equal to the run's backend is served by the run's
generator, every other model opens once per problem set in a pool the strategy closes when it
owns it; a per-problem budget is refused in one line, and requests carry the run seed."""

from __future__ import annotations

import logging

import pytest

from tts.backends.base import derive_seed
from tts.backends.engine_pool import EnginePool
from tts.backends.scripted import ScriptedGenerator
from tts.benchmarks.demo import DEMO_PROMPT
from tts.config import OpenAIBackendConfig, ScriptedBackendConfig
from tts.graphs import strategy as strategy_module
from tts.graphs.graph import GraphError, parse_graph
from tts.graphs.strategy import GraphModels, GraphStrategy, GraphStrategyConfig, backend_for
from tts.search.base import StrategyInputError
from tts.types import Budget, Problem

P1, P2 = Problem("p1", "What is 1 + 1?", "2"), Problem("p2", "What is 2 + 2?", "4")
UPSTREAM = OpenAIBackendConfig(model="m", base_url="http://upstream.test/v1")


class Served(ScriptedGenerator):
    """A scripted generator that records its requests and whether it was closed."""

    def __init__(self, model_name: str = "scripted", seed: int = 0, log: list | None = None) -> None:
        super().__init__({P1.id: {"2": 1.0}, P2.id: {"4": 1.0}}, seed=seed, model_name=model_name)
        self.requests, self.log = [], log if log is not None else []

    def generate(self, requests):
        self.requests += requests
        return super().generate(requests)

    def close(self) -> None:
        self.log.append(f"closed {self.model_name}")
        super().close()


class Upstream(Served):
    """The run's generator on an OpenAI-compatible server: it keeps its backend config."""

    config = UPSTREAM


def _starts(log):
    def factory(config, problems):
        log.append(f"{config.model} for {','.join(p.id for p in problems)}")
        return Served(config.model, log=log)
    return factory


def _graph(models, a="policy", b="policy", name="two"):
    return parse_graph({"name": name, "models": models,
                        "nodes": {"a": {"role": "generator", "model": a},
                                  "b": {"role": "fuser", "inputs": ["a"], "model": b}}})


def test_a_models_entry_is_the_runs_backend_with_the_entrys_settings():
    upstream = Upstream("m")
    assert backend_for({"max_retries": 5}, "other", upstream) == OpenAIBackendConfig(
        model="other", base_url="http://upstream.test/v1", max_retries=5)  # same server, other model
    # another kind: the entry alone
    assert backend_for({"kind": "scripted", "accuracy": 0.9}, "x", upstream) == ScriptedBackendConfig(
        model="x", accuracy=0.9)
    # the scripted backend keeps no config: its kind and seed carry over
    assert backend_for({"accuracy": 0.9}, "strong", Served("mine", seed=5)) == ScriptedBackendConfig(
        model="strong", accuracy=0.9, seed=5)


def test_a_models_entry_that_cannot_be_a_backend_is_refused_in_one_line():
    with pytest.raises(GraphError) as bad:
        backend_for({"accuracy": "lots"}, "strong", Served())
    message = str(bad.value)
    assert message.startswith("model 'strong': 1 validation error for ") and "\n" not in message
    assert "accuracy Input should be a valid number, unable to parse string as a number" in message

    class Plain:  # a generator with no backend config, not the scripted one
        model_name = "plain"

    with pytest.raises(GraphError) as none:
        backend_for({}, "strong", Plain())
    assert str(none.value) == ("the run's generator (Plain) has no backend config to derive the graph's models "
                               "from; give each models: entry its own kind (and settings)")


def test_an_entry_equal_to_the_runs_backend_is_served_by_the_runs_generator(caplog):
    for policy, same, other in ((Upstream("m"), "m", "other"), (Served("mine"), "mine", "other")):
        log = []
        spec = _graph({"a_same": {"model": same}, "b_other": {"model": other}}, a="a_same", b="b_other")
        with GraphModels(EnginePool(factory=_starts(log))) as models:
            strategy = GraphStrategy(GraphStrategyConfig(graph=spec), policy, DEMO_PROMPT.render, models=models)
            with caplog.at_level(logging.INFO, logger="tts.graphs.strategy"):
                [sol] = strategy.solve([P1])
        assert log == ["other for p1", "closed other"]  # one engine: the other model's
        assert [s.model for s in sol.usage.shapes] == ["", "other"] and len(policy.requests) == 1
        assert "graph two: opening model 'b_other' (other)" in caplog.messages
        caplog.clear()


def test_each_model_opens_once_per_problem_set_and_a_scripted_one_reopens_for_new_problems():
    log = []
    a, b = ScriptedBackendConfig(model="a"), ScriptedBackendConfig(model="b")
    models = GraphModels(EnginePool(factory=_starts(log)))
    first = models.get(a, "a", "g", [P1])
    assert models.get(a, "a", "g", [P1]) is first  # the same problems: the same generator
    models.get(b, "b", "g", [P2])
    models.get(a, "a", "g", [P2])  # a scripted generator answers only the problems it was opened with
    assert log == ["a for p1", "b for p2", "closed a", "a for p2"]
    log.clear()
    up = models.get(UPSTREAM, "m", "g", [P1])
    assert models.get(UPSTREAM, "m", "g", [P2]) is up and log == ["m for p1"]  # a server answers any problem
    models.close()
    assert sorted(log) == ["closed a", "closed b", "closed m", "m for p1"]


def test_the_strategy_closes_the_models_it_opened_and_never_shared_ones(monkeypatch):
    log = []
    monkeypatch.setattr(strategy_module, "EnginePool", lambda: EnginePool(factory=_starts(log)))
    spec = _graph({"other": {"model": "other"}}, b="other")
    own = GraphStrategy(GraphStrategyConfig(graph=spec), Served(), DEMO_PROMPT.render)
    own.solve([P1])
    own.close()
    assert log == ["other for p1", "closed other"]
    log.clear()
    with GraphModels(EnginePool(factory=_starts(log))) as shared:
        borrowed = GraphStrategy(GraphStrategyConfig(graph=spec), Served(), DEMO_PROMPT.render, models=shared)
        borrowed.solve([P1])
        borrowed.close()
        assert log == ["other for p1"]  # still open: its owner closes it
    assert log == ["other for p1", "closed other"]


def test_requests_carry_the_run_seed_and_a_per_problem_budget_is_refused():
    spec = parse_graph({"name": "one", "nodes": {"a": {"role": "generator", "n": 2}}})
    policy = Served()
    strategy = GraphStrategy(GraphStrategyConfig(graph=spec), policy, DEMO_PROMPT.render)
    assert strategy.solve([]) == [] and policy.requests == []
    sols = strategy.solve([P1, P2], [None, None])  # no budget at all is fine
    assert [s.answer for s in sols] == ["2", "4"]
    assert [r.seed for r in policy.requests] == [derive_seed(0, "p1|a", 0), derive_seed(0, "p2|a", 0)]
    with pytest.raises(StrategyInputError) as refused:
        strategy.solve([P1, P2], [None, Budget(samples=4)])
    assert str(refused.value) == ("graph 'one' runs a fixed graph and cannot honour a per-problem budget; lower its "
                                  "nodes' n instead, or use self_consistency for budgeted runs")
    assert len(policy.requests) == 2  # refused before any request
