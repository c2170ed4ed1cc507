"""DVTS on the toy digit space (known optimum, no LLM) and the DVTS strategy's config."""

from __future__ import annotations

import pytest

from tts.registry import STRATEGIES
from tts.search.tree.dvts import DVTS, DVTSConfig, dvts_search
from tts.search.tree.toy import DigitSpace, PerfectScorer, RandomScorer
from tts.search.tree.tree_search import PENALTY
from tts.verifiers.function import FunctionVerifier

LENGTH, BASE = 5, 4  # the toy space of the `targets` fixture (tests/search/conftest.py)


def _subtree_of(result, node) -> int:
    """Id of the depth-1 ancestor of ``node`` (which first-step node its subtree grew from)."""
    while node.parent is not None:
        node = result.nodes[node.parent]
    return node.id


def test_dvts_with_a_perfect_verifier_finds_the_optimum_in_every_subtree(targets, chosen):
    space = DigitSpace(targets(50), base=BASE, seed=1)
    results = dvts_search(space, PerfectScorer(space), n=16, beam_width=4)
    for r, target in zip(results, space.targets, strict=True):
        assert chosen(r).state.digits == target
        # each of the n/M greedy subtrees reaches the optimum on its own
        best_per_subtree = {}
        for leaf in r.leaf_nodes:
            s = _subtree_of(r, leaf)
            best_per_subtree[s] = max(best_per_subtree.get(s, 0), space.value(leaf.state))
        assert len(best_per_subtree) == 4 and set(best_per_subtree.values()) == {LENGTH}


def test_dvts_with_a_random_verifier_does_no_better_than_chance(targets, chosen):
    # As for beam search: the target is never seen, so E[matches] = LENGTH / BASE (sd of the mean 0.05).
    space = DigitSpace(targets(400, seed=2), base=BASE, seed=3)
    results = dvts_search(space, RandomScorer(seed=4), n=16, beam_width=4)
    mean = sum(space.value(chosen(r).state) for r in results) / len(results)
    assert abs(mean - LENGTH / BASE) < 0.25


def test_n_over_m_subtrees_each_keep_one_node_per_step_and_expand_it_m_ways():
    space = DigitSpace(["01230"], base=BASE)
    [r] = dvts_search(space, RandomScorer(seed=5), n=12, beam_width=3)
    first = [n for n in r.nodes if n.depth == 1]
    assert len(first) == 12
    for depth in range(1, LENGTH):
        level = [n for n in r.nodes if n.depth == depth]
        kept = [n for n in level if n.kept]
        assert len(kept) == 4  # one per subtree, n/M = 4 subtrees
        for k in kept:  # the kept one is its group's best (siblings in a subtree share a parent, or the deal)
            group = [n for n in level if _same_group(r, n, k)]
            assert len(group) == 3 and k.score == max(n.score for n in group)
            assert sum(n.parent == k.id for n in r.nodes) == 3
    # leaves: the M children of each subtree's last expansion
    assert len(r.leaves) == 12 and {_subtree_of(r, leaf) for leaf in r.leaf_nodes} == {k.id for k in first if k.kept}


def _same_group(r, a, b) -> bool:
    if a.depth == 1:
        return a.id // 3 == b.id // 3  # the first step's children are dealt in order, M per subtree
    return a.parent == b.parent


def test_one_expand_and_one_score_call_per_step_for_all_roots_and_subtrees(targets):
    space = DigitSpace(targets(64, seed=7), base=BASE)
    scorer = PerfectScorer(space)
    dvts_search(space, scorer, n=16, beam_width=4)
    assert space.expand_calls == LENGTH and scorer.calls == LENGTH


def test_a_subtree_ends_when_its_best_child_is_finished():
    class Early(DigitSpace):
        def is_terminal(self, state):  # strings ending in 3 are finished answers
            return state.digits.endswith("3") or super().is_terminal(state)

    likes_three = FunctionVerifier.of_items(lambda s: 1.0 if s.digits.endswith("3") else 0.5)

    space = Early(["000000"], base=BASE)
    [r] = dvts_search(space, likes_three, n=8, beam_width=4)  # M = base: every expansion holds a 3
    assert all(n.depth == 1 for n in r.nodes) and [n.state.digits for n in r.leaf_nodes] == ["3", "3"]


def test_a_verifier_that_raises_does_not_end_the_search_and_is_counted(flaky):
    [r] = dvts_search(DigitSpace(["0123"], base=BASE), flaky(), n=8, beam_width=4)
    assert r.events == {"verifier_error": 1} and len(r.leaves) == 8
    assert all(n.score == PENALTY for n in r.nodes if n.depth == 1)


def test_config_and_registry():
    assert STRATEGIES.load("dvts") is DVTS and DVTS.pool_rule is None
    cfg = DVTSConfig(n=16, verifier={"kind": "toy_dvts"})
    assert cfg.beam_width == 4 and cfg.label == "dvts@16,verifier=toy_dvts"
    with pytest.raises(ValueError, match="multiple of beam_width"):
        DVTSConfig(n=8, beam_width=3, verifier={"kind": "toy_dvts"})


@pytest.fixture(autouse=True)
def _toy_verifier(toy_verifier):
    toy_verifier("toy_dvts")
