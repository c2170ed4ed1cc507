"""Diverse Verifier Tree Search (DVTS; Beeching, Tunstall and Rush 2024).

Beeching, Tunstall and Rush, "Scaling test-time compute with open models" (Hugging Face blog,
December 2024; code in huggingface/search-and-learn, ``sal/search/diverse_verifier_tree_search.py``):
an extension of beam search that splits the N beams into N/M independent subtrees, each
expanded greedily with the verifier, so that one high-scoring prefix cannot take over the whole
beam (beam search's lack of diversity at large N). With budget N and width M:

1. sample N first steps and deal them into N/M subtrees of M;
2. each subtree scores its M children and keeps only the best one (greedy);
3. if that best child is finished, the subtree is done: its finished children of this last
   expansion are its candidates (at most M); otherwise sample M next steps from it and repeat
   from 2.

One departure from search-and-learn, on purpose: it returns all M children of each subtree's
last expansion, unfinished siblings of the finished best child included. Those are partial
solutions without an answer: they cannot win a vote, only dilute coverage and, under its
``np.argmax`` pick, win with a high score and give no answer. tts returns the finished ones;
``siblings="all"`` returns all M, as the reference (pinned both ways in
``tests/parity/test_tree_searches.py``).

At most N candidates per problem (N/M subtrees x M), and every step of every subtree of every
problem is one generator call and one verifier call.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from tts.config import StrategyConfigBase
from tts.search.tree.stepwise import StepScorer, StepState, StepwiseSpace
from tts.search.tree.tree_search import (MAX_STEPS, Expansion, SearchResult, SearchSpace, SearchTree, StateScorer,
                                         TreeNode, best, grow, never_ends)
from tts.search.tree.tree_strategy import TreeSearchStrategy, WidthSearchConfig


def dvts_search(space: SearchSpace, scorer: StateScorer, n: int, beam_width: int,
                max_steps: int = MAX_STEPS, siblings: Literal["finished", "all"] = "finished") -> list[SearchResult]:
    """DVTS from every root of ``space`` in lockstep.

    Args:
        space: The search space (one root per problem).
        scorer: Scores states (higher is better).
        n: Candidates per root (N); the root is expanded n ways into n/beam_width subtrees.
        beam_width: M: children of each subtree's node per step.
        max_steps: Safety cap on steps.
        siblings: Candidates of a finished subtree: the ``finished`` children of its last
            expansion, or ``all`` of them (search-and-learn's outputs).

    Returns:
        One :class:`SearchResult` per root; its leaves are the finished (or all) children of each
        subtree's last expansion.
    """
    if beam_width < 1 or n < beam_width or n % beam_width:
        raise ValueError(f"n ({n}) must be a positive multiple of beam_width ({beam_width})")
    if siblings not in ("finished", "all"):
        raise ValueError(f"siblings must be 'finished' or 'all', got {siblings!r}")
    trees = [SearchTree(root) for root in space.initial_states()]
    # 1. The first step: each root expanded n ways, its children dealt into n/M subtrees of M.
    groups: list[tuple[SearchTree, list[TreeNode]]] = []
    for tree, kids in zip(trees, grow(space, scorer, [Expansion(t, None, n) for t in trees]), strict=True):
        groups += [(tree, kids[s:s + beam_width]) for s in range(0, len(kids), beam_width)]
    for _ in range(max_steps):
        # 2. Each subtree keeps its best child; a finished best child ends the subtree.
        frontier: list[Expansion] = []
        for tree, kids in groups:
            if not kids:
                tree.events["no_children"] += 1
                continue
            top = best(kids)
            if top.terminal:
                for node in kids:
                    if node.terminal or siblings == "all":
                        tree.take(node)
                continue
            top.kept = True
            frontier.append(Expansion(tree, top, beam_width))
        if not frontier:
            return [t.result() for t in trees]
        # 3. Every live subtree of every root expands its node M ways (one call each to expand and score).
        groups = [(e.tree, kids) for e, kids in zip(frontier, grow(space, scorer, frontier), strict=True)]
    raise never_ends(max_steps)


class DVTSConfig(WidthSearchConfig):
    """Diverse verifier tree search: n/M independent subtrees, each greedily expanding its best step M ways."""

    kind: Literal["dvts"] = "dvts"
    siblings: Literal["finished", "all"] = "finished"
    """Candidates of a subtree whose best step finished: the ``finished`` steps of its last
    expansion, or ``all`` M of them, unfinished ones (no answer) included, as search-and-learn
    returns them."""


class DVTS(TreeSearchStrategy):
    """Diverse verifier tree search (Beeching et al. 2024); see :func:`dvts_search`."""

    name = "dvts"
    config_class: ClassVar[type[StrategyConfigBase]] = DVTSConfig

    def search(self, space: StepwiseSpace, scorer: StepScorer) -> list[SearchResult[StepState]]:
        return dvts_search(space, scorer, self.config.n, self.config.width, siblings=self.config.siblings)
