"""The tree machinery every search shares (tts/search/tree/tree_search.py), called directly: how a
scorer's results become node scores and events, whatever the scorer returns, and the messages of a
space or a search that breaks its contract."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from tts.search.tree.beam import beam_search
from tts.search.tree.toy import DigitSpace, RandomScorer
from tts.search.tree.tree_search import PENALTY, Expansion, SearchTree, grow, never_ends, score_nodes
from tts.verifiers.base import VerifierScore


class Fixed:
    """A scorer that returns ``results`` as they are, whatever the states."""

    def __init__(self, results):
        self.results = results

    def score(self, states):
        return list(self.results)


def _scored(results):
    """Score one node per result with :class:`Fixed`; (the node scores, the tree's events)."""
    tree = SearchTree("root")
    nodes = [tree.add(None, f"s{i}", False) for i in range(len(results))]
    score_nodes(Fixed(results), [(tree, node) for node in nodes])
    return [node.score for node in nodes], dict(tree.events)


def test_valid_verifier_scores_are_kept_as_they_are_edges_included():
    assert _scored([VerifierScore((), 0.0), VerifierScore((), 0.5), VerifierScore((), 1.0)]) == ([0.0, 0.5, 1.0], {})


def test_scores_outside_zero_to_one_rank_last_and_are_counted_once_each():
    assert _scored([VerifierScore((), 1.5), VerifierScore((), -0.25), VerifierScore((), 2.0)]) == (
        [PENALTY] * 3, {"invalid_score": 3})


def test_step_scores_the_verifier_replaced_are_counted_even_when_the_score_is_valid():
    assert _scored([VerifierScore((), 0.5, invalid=2), VerifierScore((), 0.25)]) == ([0.5, 0.25], {"invalid_score": 2})


def test_a_score_that_is_not_a_float_is_read_as_a_number_where_it_is_one():
    # An int 0 or 1, or a numeric string, is the number it spells; text that is no number ranks last.
    scores, events = _scored([VerifierScore((), 0), VerifierScore((), 1), VerifierScore((), "0.5"),
                              VerifierScore((), 3), VerifierScore((), "high")])
    assert scores == [0.0, 1.0, 0.5, PENALTY, PENALTY] and events == {"invalid_score": 2}


def test_any_object_with_a_score_and_invalid_count_is_read_like_a_verifier_score():
    results = [SimpleNamespace(score=0.25, invalid=3), SimpleNamespace(score=0.0), SimpleNamespace(score=1.0),
               SimpleNamespace(score=1.5), SimpleNamespace(invalid=1), SimpleNamespace()]
    scores, events = _scored(results)
    assert scores == [0.25, 0.0, 1.0, PENALTY, PENALTY, PENALTY]
    # 3 replaced step scores, then one invalid score each for 1.5 and the two without a score (plus
    # the 1 replaced score the fifth declares).
    assert events == {"invalid_score": 3 + 1 + 1 + 1 + 1}


def test_an_invalid_count_that_is_not_a_positive_int_is_ignored():
    results = [SimpleNamespace(score=0.5, invalid="yes"), SimpleNamespace(score=0.5, invalid=-1),
               SimpleNamespace(score=0.5, invalid=2.0)]
    assert _scored(results) == ([0.5, 0.5, 0.5], {})


def test_none_ranks_last_without_an_event():
    assert _scored([None, VerifierScore((), 0.75)]) == ([PENALTY, 0.75], {})


def test_a_scorer_that_returns_too_few_scores_fails_the_call_with_a_warning_that_says_so(caplog):
    with caplog.at_level(logging.WARNING, logger="tts.search.tree.tree_search"):
        scores, events = _scored([VerifierScore((), 0.5)] * 2 + [None])  # 3 results for 3 nodes: fine
        assert scores == [0.5, 0.5, PENALTY] and not caplog.records
        tree = SearchTree("root")
        nodes = [tree.add(None, f"s{i}", False) for i in range(3)]
        score_nodes(Fixed([VerifierScore((), 0.5)] * 2), [(tree, node) for node in nodes])
    assert [node.score for node in nodes] == [PENALTY] * 3 and tree.events == {"verifier_error": 1}
    assert [r.getMessage() for r in caplog.records] == [
        "verifier failed on 3 candidates (ValueError: returned 2 scores for 3 states); they rank last"]


def test_a_space_that_returns_the_wrong_number_of_child_lists_is_refused_by_name():
    class Short(DigitSpace):
        def expand(self, states, counts):
            return super().expand(states, counts)[:1]

    space = Short(["01", "10"], base=4)
    trees = [SearchTree(root) for root in space.initial_states()]
    with pytest.raises(RuntimeError) as info:
        grow(space, RandomScorer(), [Expansion(t, None, 2) for t in trees])
    assert str(info.value) == "Short.expand returned 1 child lists for 2 states; a space must return one list per state"


def test_a_search_that_never_ends_says_after_how_many_steps_and_what_the_space_must_do(endless):
    assert str(never_ends(7)) == (
        "the search still had live states after 7 steps; the space must make every path terminal within a "
        "finite depth (the step-wise space forces an answer at max_depth)")
    with pytest.raises(RuntimeError, match=r"after 20 steps"):
        beam_search(endless(["0"]), RandomScorer(), n=2, beam_width=1, max_steps=20)


def test_each_failed_call_counts_once_per_tree_it_touched():
    class Raises:
        def score(self, states):
            raise TimeoutError("verifier timed out")

    first, second = SearchTree("a"), SearchTree("b")
    nodes = [first.add(None, "a1", False), first.add(None, "a2", False), second.add(None, "b1", False)]
    score_nodes(Raises(), [(first, nodes[0]), (first, nodes[1]), (second, nodes[2])])
    score_nodes(Raises(), [(first, nodes[0])])
    assert first.events == {"verifier_error": 2} and second.events == {"verifier_error": 1}
    assert [node.score for node in nodes] == [PENALTY] * 3


def test_a_finished_trees_result_carries_its_nodes_leaves_events_and_notes():
    tree = SearchTree("root")
    leaf = tree.add(None, "s0", True)
    tree.take(leaf)
    tree.events["invalid_score"] = 1
    tree.notes["particles"] = [{"step": 1}]
    result = tree.result()
    assert (result.nodes, result.leaves, result.events, result.notes) == (
        (leaf,), (leaf.id,), {"invalid_score": 1}, {"particles": [{"step": 1}]})
