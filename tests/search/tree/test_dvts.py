"""DVTS on the toy digit space (known optimum, no LLM) and the DVTS strategy's config."""

from __future__ import annotations

import pytest

from tts.config import SamplingConfig
from tts.prompts import MATH_PROMPT
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


def test_bad_n_width_or_siblings_are_refused_with_what_to_change():
    space = DigitSpace(["01"], base=BASE)
    with pytest.raises(ValueError, match=r"^n \(6\) must be a positive multiple of beam_width \(4\)$"):
        dvts_search(space, RandomScorer(), n=6, beam_width=4)
    with pytest.raises(ValueError, match=r"^n \(4\) must be a positive multiple of beam_width \(0\)$"):
        dvts_search(space, RandomScorer(), n=4, beam_width=0)
    with pytest.raises(ValueError, match=r"^n \(2\) must be a positive multiple of beam_width \(4\)$"):
        dvts_search(space, RandomScorer(), n=2, beam_width=4)
    with pytest.raises(ValueError, match=r"^siblings must be 'finished' or 'all', got 'some'$"):
        dvts_search(space, RandomScorer(), n=4, beam_width=2, siblings="some")
    [r] = dvts_search(space, RandomScorer(), n=2, beam_width=2)  # n = M: one subtree, a greedy search
    assert len(r.leaves) == 2 and sum(n.depth == 1 and n.kept for n in r.nodes) == 1


def test_a_space_that_never_ends_is_refused_after_max_steps(endless):
    with pytest.raises(RuntimeError, match="after 20 steps"):
        dvts_search(endless(["0"]), RandomScorer(), n=2, beam_width=1, max_steps=20)


class Letters:
    """One root of depth ``depth``; a state's k children add "a", "b", ... in order, except that
    the states in ``barren`` get none."""

    def __init__(self, depth, barren=()):
        self.depth, self.barren = depth, set(barren)

    def initial_states(self):
        return [""]

    def expand(self, states, counts):
        return [[] if s in self.barren else [s + c for c in "abcdefgh"[:k]]
                for s, k in zip(states, counts, strict=True)]

    def is_terminal(self, state):
        return len(state) >= self.depth


SCORES = {"a": 0.9, "b": 0.1, "c": 0.8, "d": 0.2, "ca": 0.3, "cb": 0.6}


def test_a_subtree_whose_node_gets_no_children_ends_without_candidates_and_is_counted():
    # Subtrees [a, b] and [c, d] keep a and c; a gets no children (counted), c's two finish.
    [r] = dvts_search(Letters(2, barren={"a"}), FunctionVerifier.of_items(lambda s: SCORES[s]), n=4, beam_width=2)
    assert [n.state for n in r.leaf_nodes] == ["ca", "cb"] and r.events == {"no_children": 1}
    assert {n.state: n.kept for n in r.nodes} == {"a": True, "b": False, "c": True, "d": False, "ca": True, "cb": True}
    [r] = dvts_search(Letters(2, barren={"a", "c"}), FunctionVerifier.of_items(lambda s: SCORES[s]), n=4,
                      beam_width=2)
    assert r.leaves == () and r.events == {"no_children": 2}  # once per subtree


def test_the_strategy_searches_the_step_space_with_its_verifier(step_model, addition_problems, addition_checker):
    problems = addition_problems(3, seed=1)
    strategy = DVTS(DVTSConfig(n=4, beam_width=2, verifier={"kind": "toy_dvts"}, select="verifier"),
                    step_model(slip=0.5, seed=2), MATH_PROMPT.render, SamplingConfig(max_tokens=200), seed=0,
                    verifier=addition_checker())
    solutions = strategy.solve(problems)
    # Steps slip half the time; the checker scores 1 only where every stated sum holds. Each of the
    # 2 subtrees keeps one node per step (4 first steps, then 2 x 2 at each of 3 depths: 16 nodes)
    # and returns its 2 finished children; the answer is the best-scored one's: the sum wherever a
    # subtree stayed right, a wrong sum where both slipped (the second problem).
    assert [s.answer for s in solutions] == ["12", "30", "15"] and [p.answer for p in problems] == ["12", "31", "15"]
    for problem, solution in zip(problems, solutions, strict=True):
        assert len(solution.trace.samples) == 4 and len(solution.trace.tree) == 16
        assert solution.trace.scores == tuple(float(x.answer == problem.answer) for x in solution.trace.samples)


def test_config_and_registry():
    assert STRATEGIES.load("dvts") is DVTS and DVTS.pool_rule is None
    cfg = DVTSConfig(n=16, verifier={"kind": "toy_dvts"})
    assert cfg.beam_width == 4 and cfg.label == "dvts@16,verifier=toy_dvts"
    with pytest.raises(ValueError, match="multiple of beam_width"):
        DVTSConfig(n=8, beam_width=3, verifier={"kind": "toy_dvts"})


@pytest.fixture(autouse=True)
def _toy_verifier(toy_verifier):
    toy_verifier("toy_dvts")
