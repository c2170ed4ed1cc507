"""A strategy declares how it takes a budget (``budget_use``), and the session reads that, never names.

A plugin strategy registered at run time joins the budget pipeline by its declaration alone: one that
draws whole samples gets n fitted to the budget through ``tts.solve``; one that declares nothing is
refused with one line naming the declaration to add.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar, Literal

import pytest

import tts
from tts.backends.base import GenerationRequest
from tts.config import SamplingStrategyConfig
from tts.registry import STRATEGIES
from tts.search.base import BudgetUse, Strategy, StrategyInputError, budget_use, to_sample
from tts.types import Budget, Solution, Trace


class PluginVoteConfig(SamplingStrategyConfig):
    kind: Literal["plugin_vote"] = "plugin_vote"


class PluginVote(Strategy):
    """A third-party majority vote: a plain Strategy that draws ``samples_for`` whole samples."""

    name = "plugin_vote"
    config_class: ClassVar[type] = PluginVoteConfig
    budget_use = BudgetUse.WHOLE_SAMPLES

    def solve(self, problems: Sequence[Any], budgets: Sequence[Budget | None] | None = None) -> list[Solution]:
        ns = self.samples_for(problems, budgets)
        requests = [GenerationRequest(self.prompt(p), n=n, max_tokens=self.sampling.max_tokens, key=p.id)
                    for p, n in zip(problems, ns, strict=True)]
        out = []
        for p, result in zip(problems, self.generator.generate(requests), strict=True):
            samples = tuple(to_sample(c, self.extract) for c in result.completions)
            answer, confidence, _, selected = self.vote(samples)
            out.append(Solution(p.id, answer, confidence, result.usage,
                                Trace(self.name, samples, selected=selected)))
        return out


class UndeclaredVoteConfig(SamplingStrategyConfig):
    kind: Literal["undeclared_vote"] = "undeclared_vote"


class UndeclaredVote(PluginVote):
    """The same strategy from a plugin that says nothing about budgets."""

    name = "undeclared_vote"
    config_class: ClassVar[type] = UndeclaredVoteConfig
    budget_use = None


class TextDeclaredConfig(SamplingStrategyConfig):
    kind: Literal["text_declared"] = "text_declared"


class TextDeclared(PluginVote):
    name = "text_declared"
    config_class: ClassVar[type] = TextDeclaredConfig
    budget_use = "whole_samples"  # type: ignore[assignment]  # a plugin may declare the value as text


@pytest.fixture
def plugins() -> Iterator[None]:
    for cls in (PluginVote, UndeclaredVote, TextDeclared):
        STRATEGIES.register(cls.name, cls)
    try:
        yield
    finally:
        for cls in (PluginVote, UndeclaredVote, TextDeclared):
            STRATEGIES.unregister(cls.name)


def test_a_plugin_that_draws_whole_samples_gets_n_fitted_to_the_budget(plugins):
    sol = tts.solve("What is 2 + 3?", strategy="plugin_vote", n=16, backend="scripted", budget=300, max_tokens=100)
    assert len(sol.trace.samples) == 3  # 300 tokens hold 3 samples of up to 100
    assert sol.strategy == "plugin_vote@3 of 16: budget"
    assert sol.budget == {"amount": 300, "unit": "tokens", "as_tokens": 300, "n_asked": 16, "n_drawn": 3}
    text = tts.solve("What is 2 + 3?", strategy="text_declared", n=16, backend="scripted", budget=200, max_tokens=100)
    assert len(text.trace.samples) == 2 and text.budget["n_drawn"] == 2


def test_a_plugin_that_declares_nothing_is_refused_a_budget_in_one_line_and_runs_without_one(plugins):
    with pytest.raises(StrategyInputError) as err:
        tts.solve("What is 2 + 3?", strategy="undeclared_vote", n=16, backend="scripted", budget=300, max_tokens=100)
    message = str(err.value)
    assert "\n" not in message and "declares no budget_use" in message and "BudgetUse.WHOLE_SAMPLES" in message
    sol = tts.solve("What is 2 + 3?", strategy="undeclared_vote", n=4, backend="scripted", max_tokens=100)
    assert len(sol.trace.samples) == 4 and sol.budget is None


def test_a_declaration_that_is_not_a_budget_use_is_refused(plugins, monkeypatch):
    monkeypatch.setattr(TextDeclared, "budget_use", "some_samples")
    with pytest.raises(StrategyInputError, match="budget_use='some_samples'; declare one of whole_samples, "):
        tts.solve("What is 2 + 3?", strategy="text_declared", backend="scripted", budget=300, max_tokens=100)


def test_every_built_in_strategy_declares_how_it_takes_a_budget():
    assert {kind: budget_use(kind) for kind in STRATEGIES.names()} == {
        **{k: BudgetUse.WHOLE_SAMPLES for k in (
            "best_of_n", "budget_forcing", "certainty_probe", "codet", "deepconf", "exec_vote", "program_vote",
            "public_tests", "self_consistency", "tir", "tool_vote", "usc", "weighted_vote")},
        **{k: BudgetUse.SPENDS_ITSELF for k in (
            "ab_mcts", "beam", "dvts", "ets", "generative_verification", "lookahead", "mcts", "particle_filtering",
            "particle_gibbs", "rebase", "revision")},
        "auto": BudgetUse.PRICES_ITSELF,
        **{k: BudgetUse.REFUSES for k in ("aggregate", "genselect", "graph")},
    }


def test_a_strategy_that_refuses_a_budget_names_every_strategy_that_takes_one(plugins):
    """The list skips strategies that refuse a budget or declare nothing, and a plugin whose class
    cannot be imported here (it takes nothing), and goes on past it."""
    from tts.search.base import budget_refusal, budgeted_strategies

    STRATEGIES.register("a_broken_plugin", "no_such_module_for_tts_tests:Strategy")
    try:
        takes = budgeted_strategies()
    finally:
        STRATEGIES.unregister("a_broken_plugin")
    assert takes == sorted({"ab_mcts", "auto", "beam", "best_of_n", "budget_forcing", "certainty_probe", "codet",
                            "deepconf", "dvts", "ets", "exec_vote", "generative_verification", "lookahead", "mcts",
                            "particle_filtering", "particle_gibbs", "plugin_vote", "program_vote", "public_tests",
                            "rebase", "revision", "self_consistency", "text_declared", "tir", "tool_vote", "usc",
                            "weighted_vote"})
    assert budget_refusal("genselect", "300 tokens") == (
        "genselect runs a fixed amount of work and cannot be capped by a budget of 300 tokens; leave the budget out "
        f"(lower n instead), or use a strategy that takes one: {', '.join(takes)}")
    assert budget_refusal("undeclared_vote", "300 tokens") == (
        "strategy undeclared_vote declares no budget_use, so a budget of 300 tokens cannot hold it; declare how it "
        "takes one on its class (budget_use = BudgetUse.WHOLE_SAMPLES, SPENDS_ITSELF or REFUSES, tts.search.base) "
        "or leave the budget out")
    assert budget_refusal("self_consistency", "300 tokens") is None


def test_n_under_a_budget_is_reported_only_by_a_strategy_that_draws_whole_samples():
    from tts.backends.scripted import ScriptedGenerator
    from tts.config import SamplingConfig

    class Spender(PluginVote):
        budget_use = BudgetUse.SPENDS_ITSELF

    gen, sampling = ScriptedGenerator(default={"5": 1.0}), SamplingConfig(max_tokens=100)
    assert PluginVote(PluginVoteConfig(n=16), gen, lambda p: (), sampling).n_within(Budget(tokens=300)) == 3
    assert Spender(PluginVoteConfig(n=16), gen, lambda p: (), sampling).n_within(Budget(tokens=300)) is None


@pytest.mark.reads_source
def test_the_session_names_no_strategy():
    """session.py reads ``budget_use``: no strategy name in its code (its default strategy aside), no
    strategy class imported, no isinstance check on one."""
    from tts.session import session

    tree = ast.parse(inspect.getsource(session))
    names = set(STRATEGIES.names())
    init = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "__init__"
                and "strategy" in [a.arg for a in n.args.kwonlyargs])
    default = {id(d) for d in init.args.kw_defaults if d is not None}
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef)) and n.body
                  and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    named = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value in names
             and id(n) not in default | docstrings]
    assert named == []
    imported = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module
                and n.module.startswith(("tts.search.sampling", "tts.search.tree", "tts.search.sequential",
                                         "tts.graphs", "tts.budgets.auto"))]
    assert imported == []
