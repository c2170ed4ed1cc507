"""AB-MCTS against TreeQuest's ABMCTS-A with Beta posteriors (Inoue et al. 2025, arXiv:2503.04412).

Reference: github.com/SakanaAI/treequest at commit e6865b728d0f19eb185736cab9fe4de8ef0d0e62,
``src/treequest/algos/ab_mcts_a/algo.py`` (``_select_child``, ``_backpropagate``, ``tell``) and
``src/treequest/algos/ab_mcts_a/prob_state.py`` (``BetaPrior``, ``ProbabilisticDist``,
``NodeProbState`` with its default ``multiarm_bandit_thompson`` model selection). Its rule,
transcribed below in our own code:

* Prior: Beta(0.5, 0.5) (``BetaPrior``, "Jeffrey's prior"); an observed score s in [0, 1] adds s to
  alpha and 1 - s to beta.
* At a node X, three kinds of posterior: GEN(X) from the scores of X's children (``tell`` ->
  ``update_action_reward`` on the parent's state); CONT(X) from the scores of X's grandchildren and
  every deeper descendant, NOT its children (``_backpropagate`` starts at the new node's parent and
  reports to *its* parent); and one per child c of X, from c's own score (``register_new_child_node``)
  and the scores of all of c's descendants.
* A descent from the root: at X, draw GEN then CONT; GEN unless CONT's draw is strictly larger
  (``thompson_sampling`` keeps the first maximum), and always GEN at a node without children. On
  CONT, move to the child with the largest draw (children in creation order, the first maximum).
* Models (``_select_best_action``, multi-armed-bandit Thompson sampling): on GEN with more than one
  model, each model draws from the prior updated with the scores of every answer that model wrote
  in the whole tree; the largest draw generates. One model: no draw.

TreeQuest draws GEN and CONT at a childless node too, although the outcome is fixed there; tts does
not draw, so the transcription below skips those draws to share one random stream with tts (the
decisions have the same distribution).
"""

from __future__ import annotations

import random

import pytest
from pydantic import ValidationError

from tts.search.tree.ab_mcts import ROOT, ABMCTSConfig, ABTree, ab_mcts_search

PINNED = {"strategy:ab_mcts"}

JEFFREYS = (0.5, 0.5)


# --- TreeQuest's rule, transcribed --------------------------------------------------------------


class RefTree:
    """A tree as TreeQuest sees it: parents, scores and models of the answers, in creation order."""

    def __init__(self) -> None:
        self.parent: list[int] = []  # ROOT for a child of the root
        self.score: list[float] = []
        self.model: list[str] = []

    def add(self, parent: int, score: float, model: str = "policy") -> int:
        self.parent.append(parent)
        self.score.append(score)
        self.model.append(model)
        return len(self.score) - 1

    def children(self, x: int) -> list[int]:
        return [i for i, p in enumerate(self.parent) if p == x]

    def depth_below(self, i: int, x: int) -> int | None:
        """How many edges node i is below x (None: not below it)."""
        d, at = 0, i
        while at != ROOT:
            at, d = self.parent[at], d + 1
            if at == x:
                return d
        return None

    @staticmethod
    def beta(scores, prior) -> tuple[float, float]:
        return prior[0] + sum(scores), prior[1] + sum(1 - s for s in scores)

    def gen(self, x, prior=JEFFREYS):
        return self.beta([self.score[i] for i in range(len(self.score)) if self.depth_below(i, x) == 1], prior)

    def cont(self, x, prior=JEFFREYS):
        return self.beta([self.score[i] for i in range(len(self.score)) if (self.depth_below(i, x) or 0) >= 2], prior)

    def child(self, c, prior=JEFFREYS):
        return self.beta([self.score[c]] + [self.score[i] for i in range(len(self.score))
                                            if self.depth_below(i, c) is not None], prior)

    def by_model(self, m, prior=JEFFREYS):
        return self.beta([s for s, mm in zip(self.score, self.model, strict=True) if mm == m], prior)

    def select(self, rng, models=("policy",), prior=JEFFREYS) -> tuple[int, str]:
        x = ROOT
        while True:
            kids = self.children(x)
            if not kids:
                break
            g, c = rng.betavariate(*self.gen(x, prior)), rng.betavariate(*self.cont(x, prior))
            if not c > g:
                break
            draws = [(rng.betavariate(*self.child(k, prior)), k) for k in kids]
            x = next(k for d, k in draws if d == max(d for d, _ in draws))
        if len(models) == 1:
            return x, models[0]
        draws = [rng.betavariate(*self.by_model(m, prior)) for m in models]
        return x, models[draws.index(max(draws))]


class Recording:
    """An rng whose Beta draw is the posterior mean, recording the (alpha, beta) of every draw."""

    def __init__(self) -> None:
        self.drawn: list[tuple[float, float]] = []

    def betavariate(self, a: float, b: float) -> float:
        self.drawn.append((round(a, 9), round(b, 9)))
        return a / (a + b)


# Hand-made tree: (parent, score) in creation order.
#   root -> 0 (0.2) -> 2 (0.9) -> 4 (0.8)
#                   -> 3 (0.7)
#        -> 1 (0.6) -> 5 (0.1)
EDGES = [(ROOT, 0.2), (ROOT, 0.6), (0, 0.9), (0, 0.7), (2, 0.8), (1, 0.1)]


def _trees(edges=EDGES, models=("policy",), prior=None):
    ours = ABTree(models) if prior is None else ABTree(models, prior=prior)
    ref = RefTree()
    for i, (parent, score) in enumerate(edges):
        model = models[i % len(models)]
        ours.add(parent, f"answer {i}", score, model)
        ref.add(parent, score, model)
    return ours, ref


def _round(pairs):
    return [(round(a, 9), round(b, 9)) for a, b in pairs]


# --- the pins ------------------------------------------------------------------------------------


def test_posteriors_and_the_descent_are_treequests_with_the_jeffreys_prior():
    """Default prior Beta(0.5, 0.5) as TreeQuest's ``BetaPrior``; GEN(root) from the root's children,
    CONT(root) from the four deeper answers only, each child from its own and its subtree's scores
    (SakanaAI/treequest@e6865b7: src/treequest/algos/ab_mcts_a/prob_state.py ``BetaPrior``, ``NodeProbState``;
    algo.py ``tell``, ``_backpropagate``, ``_select_child``)."""
    ours, ref = _trees()
    mine, theirs = Recording(), Recording()
    assert ours.select(mine) == ref.select(theirs)
    assert mine.drawn == theirs.drawn == _round([
        (1.3, 1.7),  # GEN(root): 0.2, 0.6
        (3.0, 2.0),  # CONT(root): 0.9, 0.7, 0.8, 0.1 (not the root's children)
        (3.1, 1.9), (1.2, 1.8),  # child 0: 0.2, 0.9, 0.7, 0.8; child 1: 0.6, 0.1
        (2.1, 0.9),  # GEN(0): 0.9, 0.7
        (1.3, 0.7),  # CONT(0): 0.8 (its grandchild), not 0.9 or 0.7
    ])
    assert ours.select(Recording())[0] == 0  # CONT at the root, into answer 0, GEN there: refine answer 0


def test_a_uniform_prior_is_a_setting():
    """Beta(1, 1), tts's earlier prior, stays reachable (``prior_a=1, prior_b=1``); TreeQuest takes
    any Beta prior the same way (SakanaAI/treequest@e6865b7:
    src/treequest/algos/ab_mcts_a/prob_state.py ``PriorConfig``)."""
    ours, ref = _trees(prior=(1.0, 1.0))
    mine, theirs = Recording(), Recording()
    assert ours.select(mine) == ref.select(theirs, prior=(1.0, 1.0))
    assert mine.drawn == theirs.drawn and mine.drawn[0] == (1.8, 2.2)
    cfg = ABMCTSConfig(prior_a=1.0, prior_b=1.0)
    assert (ABMCTSConfig().prior_a, ABMCTSConfig().prior_b) == JEFFREYS
    assert "prior_a=1.0" in cfg.label and "prior_b=1.0" in cfg.label and ABMCTSConfig().label == "ab_mcts@8"
    with pytest.raises(ValidationError):
        ABMCTSConfig(prior_a=0.0)


@pytest.mark.parametrize("models", [("policy",), ("a", "b", "c")])
def test_gen_vs_cont_and_model_choices_match_on_fixed_seeds(models):
    """Same seeded random stream, same decisions: 300 descents of the hand-made tree, one and three
    models (TreeQuest's multi-armed-bandit Thompson sampling over each model's scores in the tree;
    SakanaAI/treequest@e6865b7: src/treequest/algos/ab_mcts_a/prob_state.py ``_select_next_multiarm_bandit``,
    ``_select_best_action``, ``thompson_sampling``)."""
    ours, ref = _trees(models=models)
    picks = set()
    for seed in range(300):
        got = ours.select(random.Random(seed))
        assert got == ref.select(random.Random(seed), models=models), seed
        picks.add(got)
    assert len(picks) >= 4  # the fixed seeds reach several nodes (and models), not one


def test_whole_searches_grow_the_same_trees_on_fixed_seeds():
    """ab_mcts_search against a search loop built from the transcription (SakanaAI/treequest@e6865b7:
    src/treequest/algos/ab_mcts_a/algo.py ``step`` = ask, generate, tell): same parents, same models."""

    def reward(parent, depth, k):  # deterministic, hand-made: refinements of answer 0's line score high
        return [0.3, 0.8, 0.5, 0.95, 0.1][(parent + 2 * depth + k) % 5]

    for seed in range(20):
        models = ("m1", "m2")

        def expand(jobs):
            return [(None, reward(-1 if j.parent is None else j.parent.id, 0 if j.parent is None else j.parent.depth,
                                 i)) for i, j in enumerate(jobs)]

        (tree,) = ab_mcts_search(1, expand, n=12, models=models, rngs=[random.Random(seed)])
        ref, rng = RefTree(), random.Random(seed)
        depth = {ROOT: 0}
        for _ in range(12):
            x, m = ref.select(rng, models=models)
            new = ref.add(x, reward(x, depth[x], 0), m)
            depth[new] = depth[x] + 1
        assert [ROOT if n.parent is None else n.parent for n in tree.nodes] == ref.parent, seed
        assert [n.model for n in tree.nodes] == ref.model, seed
