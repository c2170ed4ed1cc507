"""Parity: beam search, DVTS, lookahead and MCTS against their references.

References:

- Beam search, DVTS and lookahead: Snell et al. 2024 (arXiv:2408.03314, §5) as implemented in
  huggingface/search-and-learn at commit 6f81cac8b1ca4c4be9fabefc27a856c928f3ae7f:
  ``src/sal/search/beam_search.py`` (``_beam_search``), ``src/sal/search/diverse_verifier_tree_search.py``
  (``_dvts``) and ``src/sal/search/utils.py`` (``generate_k_steps``: the lookahead rollout).
- MCTS: UCT (Kocsis and Szepesvari 2006, the UCB1 rule Q + c sqrt(ln N(parent) / N(child)) at
  every level of the descent), with the virtual loss of parallel MCTS (Chaslot et al. 2008), the
  papers ``tts/search/tree/mcts.py`` cites.

Each test transcribes the reference's rule in our own words and runs it and tts on the same
hand-made inputs: the toy digit space of ``tts.search.tree.toy`` with a fixed score table, or a
hand-built tree. Sampled steps are i.i.d. given their parent, so the reference's M separate
samples of a node and tts's one request for M samples are modelled as one expansion of M
children; the rules compared are which nodes are kept, how many children each gets, which
candidates are returned and with what score.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
from collections import Counter

import pytest

from tts.search.tree import mcts as mcts_module
from tts.search.tree.beam import BeamConfig, BeamSearch, beam_search
from tts.search.tree.dvts import DVTS, DVTSConfig, dvts_search
from tts.search.tree.lookahead import Lookahead, LookaheadConfig, lookahead_search
from tts.search.tree.mcts import MCTS, MCTSConfig, mcts_search
from tts.search.tree.rebase import Rebase, RebaseConfig
from tts.search.tree.toy import Digits, DigitSpace
from tts.types import Sample
from tts.verifiers.function import FunctionVerifier

PINNED = {"strategy:beam", "strategy:dvts", "strategy:lookahead", "strategy:mcts"}

# --- hand-made toy inputs -------------------------------------------------------------------------


def table_score(digits: str) -> float:
    """A fixed score per digit string (distinct values, so no rule ever breaks a tie)."""
    return int(hashlib.sha256(f"parity|{digits}".encode()).hexdigest()[:8], 16) / 2**32


def table_scorer() -> FunctionVerifier:
    """A verifier of toy states that scores each its :func:`table_score`."""
    return FunctionVerifier.of_items(lambda state: table_score(state.digits))


class EarlyEnd(DigitSpace):
    """The toy space, where a string whose last digit is 0 also finishes (some paths end early).

    The tests use base 10 and at most 10 children per expansion, so that no two nodes of a tree
    spell the same digits."""

    def is_terminal(self, state):
        return super().is_terminal(state) or state.digits.endswith("0")


class Greedy(DigitSpace):
    """The toy space with a greedy next step (the model's most likely digit: the last one plus 1)."""

    def rollout_step(self, states):
        return [Digits(s.root, s.digits + str((int(s.digits[-1]) + 1) % self.base)) for s in states]


TARGETS = ("31092", "22130", "80312", "13203", "57748", "61905")


def kept_and_children(result):
    """({digits: children} of every expanded node, [digits of every candidate, in order])."""
    children: dict[str, int] = {}
    for node in result.nodes:
        if node.parent is not None:
            key = result.nodes[node.parent].state.digits
            children[key] = children.get(key, 0) + 1
    return children, [n.state.digits for n in result.leaf_nodes]


# --- beam search ----------------------------------------------------------------------------------------


def ref_beam(space, n, m, score=table_score):
    """search-and-learn ``_beam_search`` (agg "last", ``filter_duplicates`` and ``sort_completed``
    off, its defaults), on one root. Step 0: N beams sampled from the prompt. Every step: score
    every beam; a finished beam joins the completed list (in beam order) and leaves; of the rest,
    the N/M best (``np.argsort`` ascending, the last N/M: of equal scores the later) survive, in
    their order; the survivors are repeated in turn until there are N beams, each sampling one
    step. At the end the first N completed are returned.

    Returns ({digits: children} of every expanded node, [completed digits, in order])."""
    root = space.initial_states()[0]
    beams = space.expand([root], [n])[0]
    completed, children = [], {}
    while True:
        completed += [b for b in beams if space.is_terminal(b)]
        active = [b for b in beams if not space.is_terminal(b)]
        if not active:
            return children, [b.digits for b in completed[:n]]
        ranks = sorted(range(len(active)), key=lambda i: (score(active[i].digits), i))
        top = set(ranks[-(n // m):])
        survivors = [b for i, b in enumerate(active) if i in top]
        copies = [survivors[i % len(survivors)] for i in range(n)]  # (active * repeats)[:n]
        counts = {b.digits: copies.count(b) for b in survivors}
        drawn = {b.digits: iter(space.expand([b], [counts[b.digits]])[0]) for b in survivors}
        children.update(counts)
        beams = [next(drawn[b.digits]) for b in copies]  # one sample per copy, in copy order


@pytest.mark.parametrize(("n", "m"), [(8, 2), (6, 3), (10, 5), (10, 2)])
def test_beam_search_keeps_the_reference_beams_on_the_toy_space(n, m):
    """huggingface/search-and-learn @ 6f81cac8b1ca4c4be9fabefc27a856c928f3ae7f,
    ``src/sal/search/beam_search.py`` ``_beam_search`` (see ``ref_beam``): without early finishes, tts's default
    keeps the same N/M beams at every step, expands each M ways, and returns the same N candidates."""
    for target in TARGETS:
        mine = beam_search(DigitSpace([target], base=10, seed=2), table_scorer(), n, m)[0]
        ref = ref_beam(DigitSpace([target], base=10, seed=2), n, m)
        assert kept_and_children(mine)[0] == ref[0]
        assert sorted(kept_and_children(mine)[1]) == sorted(ref[1])


@pytest.mark.parametrize(("n", "m"), [(8, 2), (6, 3), (10, 5), (10, 2), (4, 1), (8, 1)])
def test_beam_search_fill_every_step_is_the_reference_when_beams_finish_early(n, m):
    """huggingface/search-and-learn @ 6f81cac8b1ca4c4be9fabefc27a856c928f3ae7f,
    ``src/sal/search/beam_search.py`` ``_beam_search`` (see ``ref_beam``) where beams finish early: with
    ``fill="every_step"`` tts samples N steps at every step, deals them over the survivors in
    turn, and returns the first N to finish, in the reference's order."""
    differs = 0
    for target in TARGETS:
        mine = beam_search(EarlyEnd([target], base=10, seed=2), table_scorer(), n, m, fill="every_step")[0]
        ref = ref_beam(EarlyEnd([target], base=10, seed=2), n, m)
        assert kept_and_children(mine) == ref
        default = beam_search(EarlyEnd([target], base=10, seed=2), table_scorer(), n, m)[0]
        differs += kept_and_children(default) != ref
    assert differs  # the documented departure shows on these inputs


def test_beam_search_default_fill_is_the_documented_within_n_departure():
    """Against huggingface/search-and-learn @ 6f81cac8b1ca4c4be9fabefc27a856c928f3ae7f,
    ``src/sal/search/beam_search.py``.
    The departure (``beam.py`` docstring): once k candidates have finished, a step expands at most
    N - k children, so no problem gets more than N candidates or N steps per depth. The reference
    samples N every step: here more than N beams finish and it keeps the first N."""
    n, m = 8, 2
    for target in TARGETS:
        space = EarlyEnd([target], base=10, seed=2)
        result = beam_search(space, table_scorer(), n, m)[0]
        assert len(result.leaves) <= n
        for depth in range(1, 6):
            finished_before = sum(1 for node in result.nodes if node.terminal and node.depth < depth)
            assert sum(1 for node in result.nodes if node.depth == depth) <= n - finished_before
    space = EarlyEnd(["22130"], base=10, seed=2)
    finished = sum(1 for _ in _all_finished(space, n, m))
    assert finished > n  # the reference finishes more than N and truncates
    assert BeamConfig().fill == "within_n"


def _all_finished(space, n, m):
    """Every beam the reference finishes (before its first-N cut)."""
    root = space.initial_states()[0]
    beams = space.expand([root], [n])[0]
    while beams:
        yield from (b for b in beams if space.is_terminal(b))
        active = [b for b in beams if not space.is_terminal(b)]
        if not active:
            return
        ranks = sorted(range(len(active)), key=lambda i: (table_score(active[i].digits), i))
        top = set(ranks[-(n // m):])
        survivors = [b for i, b in enumerate(active) if i in top]
        copies = [survivors[i % len(survivors)] for i in range(n)]
        drawn = {b.digits: iter(space.expand([b], [copies.count(b)])[0]) for b in survivors}
        beams = [next(drawn[b.digits]) for b in copies]


# --- DVTS ---------------------------------------------------------------------------------------------------


def ref_dvts(space, n, m, score=table_score):
    """search-and-learn ``_dvts`` on one root: N/M independent beams, each sampling M steps from
    its current text every iteration; a beam moves to its best-scored step (``np.argmax``: the
    first of equal scores) and stops when that step finishes; its outputs are the M steps of its
    last expansion, each with its own score (pred: ``np.argmax`` over all N outputs).

    The first iteration's N samples from the prompt (M per beam) are one draw of N dealt in
    groups of M (i.i.d. samples). Returns (chosen digits per beam per step, outputs in order)."""
    root = space.initial_states()[0]
    first = space.expand([root], [n])[0]
    groups = [first[s:s + m] for s in range(0, n, m)]
    path, outputs = [], []
    for kids in groups:
        chosen = []
        while True:
            best = max(kids, key=lambda k: score(k.digits))  # first of equal: max keeps the first
            chosen.append(best.digits)
            if space.is_terminal(best):
                outputs += kids
                break
            kids = space.expand([best], [m])[0]
        path.append(chosen)
    return path, [k.digits for k in outputs]


@pytest.mark.parametrize(("n", "m"), [(8, 2), (8, 4), (6, 3)])
def test_dvts_takes_the_reference_steps_and_returns_its_candidates(n, m):
    """huggingface/search-and-learn @ 6f81cac8b1ca4c4be9fabefc27a856c928f3ae7f,
    ``src/sal/search/diverse_verifier_tree_search.py`` ``_dvts`` (see ``ref_dvts``): the same
    greedy step in every subtree and,
    where every path has the same length, the same N candidates (the M children of each
    subtree's last expansion) with the same scores, so the same verifier pick."""
    for target in TARGETS:
        mine = dvts_search(DigitSpace([target], base=10, seed=4), table_scorer(), n, m)[0]
        path, outputs = ref_dvts(DigitSpace([target], base=10, seed=4), n, m)
        kept = sorted(node.state.digits for node in mine.nodes if node.kept and not node.terminal)
        assert kept == sorted(d for chosen in path for d in chosen[:-1])
        assert sorted(node.state.digits for node in mine.leaf_nodes) == sorted(outputs)
        assert max(mine.leaf_nodes, key=lambda k: k.score).state.digits == max(outputs, key=table_score)


def test_dvts_drops_unfinished_siblings_the_documented_departure_and_siblings_all_keeps_them():
    """Against huggingface/search-and-learn @ 6f81cac8b1ca4c4be9fabefc27a856c928f3ae7f,
    ``src/sal/search/diverse_verifier_tree_search.py`` ``_dvts``.
    The departure (``dvts.py`` docstring): a subtree whose best child finishes returns only its
    finished children; the reference returns all M children of that last expansion, unfinished
    ones (partial solutions without an answer) included. The greedy steps are the same, and
    ``siblings="all"`` returns the reference's outputs with their scores."""
    n, m, dropped = 8, 4, 0
    for target in TARGETS:
        mine = dvts_search(EarlyEnd([target], base=10, seed=4), table_scorer(), n, m)[0]
        path, outputs = ref_dvts(EarlyEnd([target], base=10, seed=4), n, m)
        space = EarlyEnd([target], base=10)
        kept = sorted(node.state.digits for node in mine.nodes if node.kept and not node.terminal)
        assert kept == sorted(d for chosen in path for d in chosen[:-1])
        assert sorted(node.state.digits for node in mine.leaf_nodes) == sorted(
            d for d in outputs if space.is_terminal(Digits(0, d)))
        dropped += len(outputs) - len(mine.leaves)
        every = dvts_search(EarlyEnd([target], base=10, seed=4), table_scorer(), n, m, siblings="all")[0]
        assert sorted(node.state.digits for node in every.leaf_nodes) == sorted(outputs)
        assert all(node.score == table_score(node.state.digits) for node in every.leaf_nodes)
    assert dropped > 0
    assert DVTSConfig().siblings == "finished"


# --- the final pick (beam search and DVTS share it) ------------------------------------------------


def _sample(answer):
    return Sample(text=f"... \\boxed{{{answer}}}", answer=answer)


def test_the_final_pick_is_the_references_weighted_vote_or_best_score():
    """huggingface/search-and-learn @ 6f81cac8b1ca4c4be9fabefc27a856c928f3ae7f, ``src/sal/utils/math.py``
    ``find_answer_with_largest_sum`` (its
    ``pred_weighted``: the answer whose candidates' aggregated scores sum highest) and the
    ``pred`` of ``beam_search`` / ``dvts`` (``np.argmax`` of the scores: the first best
    candidate). tts's ``select="weighted_vote"`` and ``select="verifier"`` pick the same."""
    answers = ["4", "5", "4", "6", "5"]
    scores = [0.2, 0.7, 0.3, 0.6, 0.05]

    def ref_weighted(answers, scores):
        sums = {}
        for a, s in zip(answers, scores, strict=True):
            sums[a] = sums.get(a, 0.0) + s
        return max(sums, key=sums.get)

    def ref_argmax(answers, scores):
        return answers[max(range(len(scores)), key=lambda j: (scores[j], -j))]

    samples = [_sample(a) for a in answers]
    for select, ref in (("weighted_vote", ref_weighted), ("verifier", ref_argmax)):
        for strategy_class, config_class in ((BeamSearch, BeamConfig), (DVTS, DVTSConfig)):
            strategy = object.__new__(strategy_class)
            strategy.config = config_class(n=5, beam_width=1, select=select)
            for order in (scores, scores[::-1], [0.5, 0.5, 0.1, 0.9, 0.2]):
                picked = strategy._select(samples, order, Counter())[0]
                assert picked == ref(answers, order), (select, order)


# --- lookahead ------------------------------------------------------------------------------------------


def ref_lookahead(space, n, m, k, score=table_score):
    """search-and-learn ``_beam_search`` with ``lookahead=k`` (``generate_k_steps``): every beam's
    sampled step is followed by up to k greedy (temperature 0) steps, stopping when a step
    finishes; the PRM scores the beam's text plus that rollout, and the beam keeps only its
    sampled step. Otherwise as ``ref_beam`` (survivors repeated in turn to N beams, the first N
    completed returned).

    Returns ({digits: children} of every expanded node, [(candidate digits, score), in order])."""

    def rollout_score(state):
        end = state
        for _ in range(k):
            if space.is_terminal(end):
                break
            end = space.rollout_step([end])[0]
        return score(end.digits)

    root = space.initial_states()[0]
    beams = space.expand([root], [n])[0]
    children, completed = {}, []
    while True:
        scores = {b.digits: rollout_score(b) for b in beams}
        completed += [(b.digits, scores[b.digits]) for b in beams if space.is_terminal(b)]
        active = [b for b in beams if not space.is_terminal(b)]
        if not active:
            return children, completed[:n]
        ranks = sorted(range(len(active)), key=lambda i: (scores[active[i].digits], i))
        top = set(ranks[-(n // m):])
        survivors = [b for i, b in enumerate(active) if i in top]
        copies = [survivors[i % len(survivors)] for i in range(n)]
        counts = {b.digits: copies.count(b) for b in survivors}
        drawn = {b.digits: iter(space.expand([b], [counts[b.digits]])[0]) for b in survivors}
        children.update(counts)
        beams = [next(drawn[b.digits]) for b in copies]


class GreedyEarly(Greedy, EarlyEnd):
    pass


@pytest.mark.parametrize("k", [0, 1, 2])
def test_lookahead_scores_each_step_by_its_greedy_rollout_as_the_reference(k):
    """huggingface/search-and-learn @ 6f81cac8b1ca4c4be9fabefc27a856c928f3ae7f, ``src/sal/search/beam_search.py``
    ``_beam_search`` and ``src/sal/search/utils.py`` ``generate_k_steps`` with lookahead (see
    ``ref_lookahead``): the same beams
    kept and expanded, and every candidate scored by the end of its k-step greedy rollout (a
    rollout that finishes stops), on the toy space with a greedy next digit: by default where no
    path ends early, and with ``fill="every_step"`` where paths do."""
    n, m = 8, 2
    for target in TARGETS:
        mine = lookahead_search(Greedy([target], base=10, seed=6), table_scorer(), n, m, k)[0]
        children, completed = ref_lookahead(Greedy([target], base=10, seed=6), n, m, k)
        assert kept_and_children(mine)[0] == children
        assert sorted((node.state.digits, node.score) for node in mine.leaf_nodes) == sorted(completed)
        mine = lookahead_search(GreedyEarly([target], base=10, seed=6), table_scorer(), n, m, k, fill="every_step")[0]
        children, completed = ref_lookahead(GreedyEarly([target], base=10, seed=6), n, m, k)
        assert kept_and_children(mine)[0] == children
        assert [(node.state.digits, node.score) for node in mine.leaf_nodes] == completed


# --- MCTS -------------------------------------------------------------------------------------------------


def ref_uct_descents(tree, scores, count, c):
    """UCT (Kocsis and Szepesvari 2006) with virtual loss (Chaslot et al. 2008), on a tree given as
    {node: children} with a verifier score per node: from the root, repeatedly take the child with
    the largest Q + c * sqrt(ln N(parent) / N(child)) (the first of equal values) until a node
    without children; N counts the scored nodes of a subtree (itself included), Q their mean
    score; after each descent every node on its path gets one more visit worth 0, and the leaf
    it reached is not chosen again.

    Returns the chosen leaves, in order."""
    import math

    def below(node):
        out = [node]
        for child in tree.get(node, []):
            out += below(child)
        return out

    visits = {v: len(below(v)) for v in scores}
    total = {v: sum(scores[u] for u in below(v)) for v in scores}
    visits["root"] = sum(visits[v] for v in tree["root"])
    virtual: dict[str, int] = {}
    taken: list[str] = []
    for _ in range(count):
        node, path = "root", ["root"]
        while tree.get(node):
            options = [ch for ch in tree[node] if ch not in taken]
            parent = visits[node] + virtual.get(node, 0)

            def uct(ch, parent=parent):
                n_ch = visits[ch] + virtual.get(ch, 0)
                return total[ch] / n_ch + c * math.sqrt(math.log(parent) / n_ch)

            node = max(options, key=uct)
            path.append(node)
        taken.append(node)
        for v in path:
            virtual[v] = virtual.get(v, 0) + 1
    return taken


def _hand_tree():
    """Root children A (0.9), B (0.6), C (0.3); A expanded into A1 (0.1), A2 (0.2): A's mean falls to
    0.4, below B's 0.6, while its own score is still the best."""
    structure = {"root": ["A", "B", "C"], "A": ["A1", "A2"]}
    scores = {"A": 0.9, "B": 0.6, "C": 0.3, "A1": 0.1, "A2": 0.2}
    return structure, scores, _built(structure, scores)


@pytest.mark.parametrize("c", [0.05, 0.5, 1.4])
def test_mcts_without_the_dive_selects_leaves_by_uct_with_virtual_loss(c):
    """UCT: Kocsis and Szepesvari 2006 (ECML), the UCB1 rule at every node of the descent; virtual
    loss: Chaslot, Winands and van den Herik 2008 (see ``ref_uct_descents``): with
    ``greedy_dive`` off, tts's descents of a
    round choose the same leaves in the same order, on a hand-built tree."""
    structure, scores, mine = _hand_tree()
    for count in (1, 2, 3):
        chosen = [node.state for node in mine.select(count, c, dive=False)]
        assert chosen == ref_uct_descents(structure, scores, count, c)


def _built(structure, scores):
    """A ``_Tree`` grown as ``structure`` says ({node: children}), each child with its score."""
    mine = mcts_module._Tree(root="q")
    nodes = {}
    for parent, kids in structure.items():
        made = []
        for name in kids:
            node = mine.tree.add(nodes.get(parent), name, False)
            node.score = scores[name]
            nodes[name] = node
            made.append(node)
        mine.record(nodes.get(parent), made)
    return mine


DEEPER = {"root": ["A", "B", "C"], "A": ["A1", "A2", "A3"], "B": ["B1", "B2"], "A1": ["A11", "A12"]}


@pytest.mark.parametrize(("scores", "most"), [
    ({"A": 0.91, "B": 0.5, "C": 0.28, "A1": 0.76, "A2": 0.62, "A3": 0.25, "B1": 0.91, "B2": 0.98, "A11": 0.81,
      "A12": 0.9}, 5),
    ({"A": 0.84, "B": 0.76, "C": 0.42, "A1": 0.26, "A2": 0.51, "A3": 0.4, "B1": 0.78, "B2": 0.3, "A11": 0.48,
      "A12": 0.58}, 4),
])
@pytest.mark.parametrize("c", [0.3, 1.0])
def test_mcts_descents_of_a_round_on_a_deeper_tree_are_ucts_with_one_virtual_loss_each(scores, most, c):
    """As above (Kocsis and Szepesvari 2006; Chaslot et al. 2008), three levels deep and up to five
    descents a round: the parent's visits in ln N include its virtual losses, and every descent adds
    exactly one visit worth 0 to each node of its path. (``most``: the reference has no rule for a
    descent into a subtree whose leaves were all taken; tts blocks those, so the counts stop
    before the reference would need one.)"""
    for count in range(1, most + 1):
        chosen = [node.state for node in _built(DEEPER, scores).select(count, c, dive=False)]
        assert chosen == ref_uct_descents(DEEPER, scores, count, c)


def test_mcts_first_finish_dive_is_the_documented_departure():
    """Against UCT (Kocsis and Szepesvari 2006). The departure (``mcts.py`` docstring): until a
    root has a finished candidate, its first
    descent of a round follows the best verifier score. On the hand-built tree UCT goes to B
    (mean 0.6 beats A's 0.4); the dive goes A (0.9) then A2 (0.2)."""
    structure, scores, mine = _hand_tree()
    assert ref_uct_descents(structure, scores, 1, 0.05) == ["B"]
    assert [node.state for node in mine.select(1, 0.05, dive=True)] == ["A2"]
    assert [node.state for node in mine.select(1, 0.05, dive=False)] == ["B"]
    assert MCTSConfig().greedy_dive is True


def test_mcts_search_dives_only_until_the_first_finish_and_never_with_greedy_dive_off(monkeypatch):
    """The search passes the rule on: the dive is asked for while a root has no candidate, and
    never with ``greedy_dive=False``."""
    calls = []
    select = mcts_module._Tree.select

    def spy(self, count, exploration, dive=False):
        calls.append((bool(self.tree.leaves), dive))
        return select(self, count, exploration, dive)

    monkeypatch.setattr(mcts_module._Tree, "select", spy)
    mcts_search(EarlyEnd(["31022"], base=10, seed=1), table_scorer(), n=8, beam_width=2, max_nodes=40)
    assert calls and all(dive == (not finished) for finished, dive in calls)
    calls.clear()
    mcts_search(EarlyEnd(["31022"], base=10, seed=1), table_scorer(), n=8, beam_width=2, max_nodes=40, greedy_dive=False)
    assert calls and not any(dive for _, dive in calls)


# --- every strategy hands its settings to its search function -------------------------------------

SETTINGS = [
    ("tts.search.tree.beam.beam_search", BeamSearch, BeamConfig(n=8, beam_width=2, fill="every_step"),
     {"n": 8, "beam_width": 2, "fill": "every_step"}, "fill=every_step"),
    ("tts.search.tree.dvts.dvts_search", DVTS, DVTSConfig(n=8, siblings="all"), {"siblings": "all"}, "siblings=all"),
    ("tts.search.tree.lookahead.lookahead_search", Lookahead, LookaheadConfig(n=8, lookahead=2, fill="every_step"),
     {"lookahead": 2, "fill": "every_step"}, None),
    ("tts.search.tree.mcts.mcts_search", MCTS, MCTSConfig(n=8, greedy_dive=False), {"greedy_dive": False},
     "greedy_dive=False"),
    ("tts.search.tree.rebase.rebase_search", Rebase, RebaseConfig(n=4, balance_temperature=0.3, rounding="ceil"),
     {"n": 4, "temperature": 0.3, "rounding": "ceil"}, "rounding=ceil"),
]


@pytest.mark.parametrize(("target", "cls", "config", "expected", "label"), SETTINGS,
                         ids=[row[1].__name__ for row in SETTINGS])
def test_each_strategy_passes_its_settings_to_its_search_function(monkeypatch, target, cls, config, expected, label):
    module, name = target.rsplit(".", 1)
    real = getattr(importlib.import_module(module), name)
    seen = {}

    def spy(*args, **kwargs):
        seen.update(inspect.signature(real).bind(*args, **kwargs).arguments)  # named as the real one takes them
        return []

    monkeypatch.setattr(target, spy)
    strategy = object.__new__(cls)
    strategy.config = config
    strategy.search(None, None)
    assert {key: seen.get(key) for key in expected} == expected
    assert label is None or label in config.label
    assert LookaheadConfig().fill == "within_n"
