"""MCTS's parts on hand-made trees and spaces: values backed up every ancestor, the node budget's
last node, expansions that return nothing, the refusals' exact words, and the settings the
strategy hands to its search."""

from __future__ import annotations

import pytest

from tts.config import SamplingConfig
from tts.prompts import MATH_PROMPT
from tts.search.base import StrategyInputError
from tts.search.tree import mcts as mcts_module
from tts.search.tree.mcts import MCTS, MCTSConfig, _Tree, mcts_search
from tts.search.tree.toy import DigitSpace, PerfectScorer, RandomScorer
from tts.types import Budget


def _add(tree: _Tree, parent, scored: dict[str, float], terminal: bool = False):
    """Children of ``parent`` (None: the root) with the given scores, recorded as one expansion."""
    made = []
    for name, score in scored.items():
        node = tree.tree.add(parent, name, terminal)
        node.score = score
        made.append(node)
    tree.record(parent, made)
    return made


def test_a_value_is_backed_up_through_every_ancestor():
    # root -> A (0.8), B (0.2); A -> A1 (0.6), A2 (0.4); A1 -> A11 (1.0). N counts the scored nodes
    # of a subtree, W sums their values: A1 = {A1, A11}: 2, 1.6; A = {A, A1, A2, A11}: 4, 2.8;
    # the root = all five: 5, 3.0.
    t = _Tree("q")
    a, b = _add(t, None, {"A": 0.8, "B": 0.2})
    a1, a2 = _add(t, a, {"A1": 0.6, "A2": 0.4})
    [a11] = _add(t, a1, {"A11": 1.0})
    stats = {key: (s.visits, round(s.total, 9)) for key, s in t.stats.items()}
    assert stats == {-1: (5, 3.0), a.id: (4, 2.8), b.id: (1, 0.2), a1.id: (2, 1.6), a2.id: (1, 0.4),
                     a11.id: (1, 1.0)}
    assert [t.parent(k) for k in (a.id, a1.id, a11.id)] == [-1, a.id, a1.id] and t.parent(-1) is None
    # UCT at exploration 0 descends by mean value: A (0.7) over B (0.2), then A1 (0.8) over A2 (0.4).
    assert [node.state for node in t.select(1, 0.0, dive=False)] == ["A11"]


def test_a_node_whose_children_all_finished_closes_and_so_do_its_ancestors():
    # root -> A, B; A -> A1; A1 -> two finished children. A1 closes, then A (its only child is
    # closed); B is still open, so the root is not.
    t = _Tree("q")
    a, b = _add(t, None, {"A": 0.5, "B": 0.5})
    [a1] = _add(t, a, {"A1": 0.5})
    _add(t, a1, {"x": 0.9, "y": 0.1}, terminal=True)
    assert [t.stats[k].closed for k in (a1.id, a.id, b.id, -1)] == [True, True, False, False]
    assert [node.state for node in t.select(2, 0.05, dive=False)] == ["B"]


def test_the_last_node_of_the_budget_is_generated():
    # n = 4, M = 2, a budget of 5 nodes: round 0 makes the root's 4 children; one node of room is
    # left, so one leaf is expanded one way. The fifth node spends the budget before a candidate.
    space = DigitSpace(["0123"], base=4)
    [r] = mcts_search(space, PerfectScorer(space), n=4, beam_width=2, max_nodes=5)
    assert len(r.nodes) == 5 and [n.depth for n in r.nodes] == [1, 1, 1, 1, 2]
    assert r.events == {"node_budget_spent": 1} and not r.leaves


def test_n_candidates_found_with_the_last_node_of_the_budget_spend_nothing_more():
    # A one-digit target: the root's 4 children are the 4 candidates and the 4 nodes of the budget.
    space = DigitSpace(["2"], base=4)
    [r] = mcts_search(space, PerfectScorer(space), n=4, beam_width=2, max_nodes=4)
    assert len(r.leaves) == 4 and r.events == {}


def test_each_expansion_that_returns_no_children_is_counted_and_closes_its_node():
    class Barren(DigitSpace):
        """Nodes ending in 1 or 3 have no children."""

        def expand(self, states, counts):
            kids = super().expand(states, counts)
            return [[] if s.digits[-1:] in ("1", "3") else k for s, k in zip(states, kids, strict=True)]

    space = Barren(["00"], base=4)
    [r] = mcts_search(space, PerfectScorer(space), n=4, beam_width=2, exploration=0.0)
    # Round 0: "0", "1", "2", "3". Before its fourth candidate the search expands "1" and "3" once
    # each (nothing comes back: one event each, and the node closes, never retried) and "0" and
    # "2" into finished strings (two each).
    assert sorted(n.state.digits for n in r.nodes if n.depth == 1) == ["0", "1", "2", "3"]
    assert r.events == {"no_children": 2}
    assert len(r.leaves) == 4 and all(n.state.digits[0] in "02" for n in r.leaf_nodes)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"n": 0, "beam_width": 4}, "n (0) must be a positive multiple of beam_width (4)"),
    ({"n": 8, "beam_width": 0}, "n (8) must be a positive multiple of beam_width (0)"),
    ({"n": 8, "beam_width": -1}, "n (8) must be a positive multiple of beam_width (-1)"),
    ({"n": 8, "beam_width": 4, "max_nodes": 5}, "max_nodes (5) must be at least n (8): the root alone is expanded "
                                                "n ways; raise max_nodes or lower n"),
])
def test_bad_arguments_are_refused_in_these_words(kwargs, message):
    with pytest.raises(ValueError) as info:
        mcts_search(DigitSpace(["0"]), RandomScorer(), **kwargs)
    assert str(info.value) == message


def test_a_space_that_never_ends_is_refused_naming_the_step_cap(endless):
    with pytest.raises(RuntimeError) as info:
        mcts_search(endless(["0"]), RandomScorer(), n=2, beam_width=1, max_steps=20)
    assert str(info.value).startswith("the search still had live states after 20 steps;")


def test_the_strategy_hands_every_setting_to_its_search(monkeypatch, step_model, addition_problems):
    seen = []

    def spy(space, scorer, n, beam_width, **kwargs):
        seen.append((n, beam_width, kwargs))
        return [mcts_module.SearchTree(root).result() for root in space.initial_states()]

    monkeypatch.setattr(mcts_module, "mcts_search", spy)
    config = MCTSConfig(n=8, beam_width=2, exploration=0.7, max_nodes=60, greedy_dive=False, verifier="arithmetic")
    MCTS(config, step_model(), MATH_PROMPT.render, SamplingConfig(max_tokens=256)).solve(addition_problems(1))
    assert seen == [(8, 2, {"max_nodes": 60, "exploration": 0.7, "greedy_dive": False})]


def test_a_budget_below_the_worst_case_is_refused_in_these_words(step_model, addition_problems):
    strategy = MCTS(MCTSConfig(n=8, max_nodes=200, verifier="arithmetic"), step_model(), MATH_PROMPT.render,
                    SamplingConfig(max_tokens=256))
    with pytest.raises(StrategyInputError) as info:
        strategy.solve(addition_problems(1), [Budget(tokens=100)])
    worst = 200 * 128 + 8 * 32
    assert str(info.value) == (f"mcts: a budget of 100 tokens is below the search's worst case of {worst} (200 nodes "
                               "of up to 128 tokens, plus 8 forced answers); lower max_nodes, n or step_tokens, or "
                               "raise the budget.")
