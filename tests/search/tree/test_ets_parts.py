"""ETS's parts on hand-made trees: which nodes the clusterer sees, what its labels change, the
ancestor paths of the KV term, the refusals, and the strategy's own arguments.

Every expected value is worked out in the test's comments (T_b = 0.2, lambda_b = 1, lambda_s = 1.5
unless a test says otherwise)."""

from __future__ import annotations

import logging
import math
import sys
from types import SimpleNamespace

import pytest

from tts.backends.scripted import ScriptedGenerator
from tts.config import SamplingConfig
from tts.prompts import MATH_PROMPT
from tts.search.tree.ets import ETS, ETSConfig, _path, ets_search, rebase_shares, sentence_embedder
from tts.search.tree.tree_search import SearchTree
from tts.verifiers.base import VerifierScore


class Table:
    """A space whose states are (root, digits): child j of a state appends the digit j, a state is
    finished at ``depth`` digits or when listed in ``finish`` (as a state). Records every expand call."""

    def __init__(self, depth: int, roots: int = 1, finish: tuple[tuple[int, str], ...] = ()) -> None:
        self.depth, self.roots, self.finish = depth, roots, set(finish)
        self.asked: list[list[tuple[tuple[int, str], int]]] = []

    def initial_states(self):
        return [(root, "") for root in range(self.roots)]

    def expand(self, states, counts):
        self.asked.append(list(zip(states, counts, strict=True)))
        return [[(s[0], s[1] + str(j)) for j in range(k)] for s, k in zip(states, counts, strict=True)]

    def is_terminal(self, state):
        return len(state[1]) >= self.depth or state in self.finish


class Scores:
    """Scores by digits (``table``; 0.5 for the rest); a NaN is an invalid score."""

    def __init__(self, table: dict[str, float]) -> None:
        self.table = table

    def score(self, states):
        return [VerifierScore((), self.table.get(s[1], 0.5)) for s in states]


def _recording(labels):
    """A clusterer that gives ``labels(states)`` and records the states of every call."""
    calls = []

    def cluster(states):
        calls.append([s[1] for s in states])
        return labels(states)

    return cluster, calls


def test_the_labels_decide_which_node_is_kept_for_coverage():
    # Depth 1 of one root: scores 0.9, 0.7, 0.7, 0.5 -> shares softmax(s / 0.2) = 1, e^-1, e^-1, e^-2
    # over 1.8711: 0.534, 0.197, 0.197, 0.072. No ancestors: each retained node costs 1 / (4 + 1) = 0.2
    # of cache, so without coverage only node 0 is worth it (0.197 - 0.2 < 0) and takes all 4.
    # With clusters A A B B, covering B is worth 1.5 / 2 = 0.75: node 2 (B's best, 0.197) joins.
    # The width 4 then splits over scores 0.9 and 0.7: quotas 4 x (0.731, 0.269) -> 3 and 1.
    scores = Scores({"0": 0.9, "1": 0.7, "2": 0.7, "3": 0.5})
    space = Table(depth=2)
    cluster, calls = _recording(lambda states: ["A", "A", "B", "B"])
    [r] = ets_search(space, scores, n=4, cluster=cluster)
    assert space.asked[1] == [((0, "0"), 3), ((0, "2"), 1)]
    assert calls == [["0", "1", "2", "3"]] and r.events == {}
    # At lambda_s = 1 covering B is still worth 1 / 2 = 0.5 > 0.2 - 0.197: the same choice.
    space = Table(depth=2)
    cluster, calls = _recording(lambda states: ["A", "A", "B", "B"])
    ets_search(space, scores, n=4, cluster=cluster, coverage_weight=1.0)
    assert space.asked[1] == [((0, "0"), 3), ((0, "2"), 1)] and len(calls) == 1
    # lambda_s = 0 drops the coverage term: the clusterer (an embedding model, maybe) is never called.
    space = Table(depth=2)
    cluster, calls = _recording(lambda states: ["A", "A", "B", "B"])
    ets_search(space, scores, n=4, cluster=cluster, coverage_weight=0.0)
    assert space.asked[1] == [((0, "0"), 4)] and calls == []
    # Without clusters (or one cluster for all) node 0 alone is retained.
    for labels in (None, lambda states: ["A"] * len(states)):
        space = Table(depth=2)
        [r] = ets_search(space, scores, n=4, cluster=labels)
        assert space.asked[1] == [((0, "0"), 4)] and r.events == {}


def test_the_clusterer_sees_only_nodes_with_a_valid_score_and_zero_is_valid(caplog):
    # Depth 1: "0" scores 0.0 (valid, the lowest), "2" NaN (invalid: PENALTY). A node without a valid
    # score is never a candidate while a sibling has one, so the clusterer gets "0", "1" and "3".
    space = Table(depth=2)
    cluster, calls = _recording(lambda states: [s[1] for s in states])
    [r] = ets_search(space, Scores({"0": 0.0, "1": 0.8, "2": math.nan, "3": 0.6}), n=4, cluster=cluster)
    assert calls == [["0", "1", "3"]]
    assert r.events == {"invalid_score": 1}


def test_a_root_with_nothing_left_to_choose_leaves_the_others_clustered():
    # Root 0's four first steps all finish ("0" .. "3" listed as finished); root 1 goes on. The
    # depth's one clusterer call holds root 1's candidates only, and no root counts an error.
    space = Table(depth=2, roots=2, finish=tuple((0, d) for d in "0123"))

    class ByRoot(Scores):
        def score(self, states):
            return [VerifierScore((), 0.9 if s[0] == 0 else 0.5) for s in states]

    seen = []

    def cluster(states):
        seen.append(list(states))
        return [s[1] for s in states]

    results = ets_search(space, ByRoot({}), n=4, cluster=cluster)
    assert seen == [[(1, "0"), (1, "1"), (1, "2"), (1, "3")]]
    assert [r.events for r in results] == [{}, {}]
    assert [len(r.leaves) for r in results] == [4, 4]


def test_a_failed_clusterer_is_logged_with_what_it_returned(caplog):
    space = Table(depth=2)
    with caplog.at_level(logging.WARNING, logger="tts.search.tree.ets"):
        [r] = ets_search(space, Scores({"0": 0.9}), n=4, cluster=lambda states: ["A"] * (len(states) - 1))
    assert r.events == {"cluster_error": 1}
    assert [rec.getMessage() for rec in caplog.records] == [
        "clusterer failed on 4 states (ValueError: returned 3 labels for 4 states); this depth runs without coverage"]


def test_paths_run_from_the_roots_child_down_to_the_parent():
    tree = SearchTree("root")
    a = tree.add(None, "a", False)      # id 0, depth 1
    b = tree.add(None, "b", False)      # id 1
    a1 = tree.add(a, "a1", False)       # id 2
    b1 = tree.add(b, "b1", False)       # id 3
    b11 = tree.add(b1, "b11", False)    # id 4
    assert _path(tree, a) == () and _path(tree, a1) == (0,)
    assert _path(tree, b1) == (1,) and _path(tree, b11) == (1, 3)


def test_the_kv_term_counts_the_ancestors_a_retained_node_pins():
    # n = 4, kv_weight = 1.5. Depth 1: "0" and "1" score 0.9, "2" and "3" 0.1: shares 0.491, 0.491,
    # 0.009, 0.009 against a cache cost of 1.5 / (4 + 1) = 0.3 a node: "0" and "1" are retained and
    # take 2 children each. Depth 2: "00", "01" (under "0") and "10" score 0.9, "11" 0.5: shares
    # 1, 1, 1, e^-2 over 3.1353 -> 0.319, 0.319, 0.319, 0.043. The tree: 4 candidates, 2 ancestors
    # and the root, 1.5 / 7 = 0.214 a cached node. The siblings "00" and "01" pin one ancestor:
    # 0.638 - 3 x 0.214 = -0.005; "00" alone 0.319 - 2 x 0.214 = -0.110; "00", "01" and "10" pin
    # both: 0.957 - 5 x 0.214 = -0.115; "00" and "10": 0.638 - 4 x 0.214 = -0.219. So the two
    # siblings are retained (2 children each). Without the shared ancestor in the count (every
    # node costing 0.3 alone) the best would be "00", "01" and "10" (0.957 - 0.9).
    space = Table(depth=3)
    scores = Scores({"0": 0.9, "1": 0.9, "2": 0.1, "3": 0.1, "00": 0.9, "01": 0.9, "10": 0.9, "11": 0.5})
    [r] = ets_search(space, scores, n=4, kv_weight=1.5)
    assert space.asked[1] == [((0, "0"), 2), ((0, "1"), 2)]
    assert space.asked[2] == [((0, "00"), 2), ((0, "01"), 2)]
    assert r.events == {}


def test_one_candidate_per_root_is_a_search_with_nothing_to_cluster():
    space = Table(depth=3)
    cluster, calls = _recording(lambda states: [s[1] for s in states])
    [r] = ets_search(space, Scores({"0": 0.9}), n=1, cluster=cluster)
    assert space.asked == [[((0, ""), 1)], [((0, "0"), 1)], [((0, "00"), 1)]]
    assert [r.nodes[i].state for i in r.leaves] == [(0, "000")] and r.events == {}
    assert calls == []  # one candidate a depth: no choice for coverage to change


def test_two_candidates_are_a_choice_the_clusterer_is_asked_about():
    space = Table(depth=2)
    cluster, calls = _recording(lambda states: [s[1] for s in states])
    ets_search(space, Scores({}), n=2, cluster=cluster)
    assert calls == [["0", "1"]]


def test_without_sentence_transformers_the_embedding_model_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # the import fails
    with pytest.raises(ImportError) as info:
        sentence_embedder("some/model")
    assert str(info.value) == ("ETS's embedding_model='some/model' needs the sentence-transformers package: pip "
                               "install sentence-transformers, or leave embedding_model unset for the lexical clusters")


def test_the_embedding_model_is_loaded_by_its_name(monkeypatch):
    loaded = []

    class FakeModel:
        def __init__(self, name):
            loaded.append(name)

        def encode(self, texts):
            return [[1.0, 0.0] for _ in texts]

    monkeypatch.setitem(sys.modules, "sentence_transformers", SimpleNamespace(SentenceTransformer=FakeModel))
    encode = sentence_embedder("math-similarity/Bert-MLM_arXiv-MP-class_zbMath")
    assert loaded == ["math-similarity/Bert-MLM_arXiv-MP-class_zbMath"] and encode(["a", "b"]) == [[1.0, 0.0]] * 2


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"n": 0}, "n must be >= 1, got 0"),
    ({"n": 4, "temperature": 0.0}, "temperature must be > 0, got 0.0"),
    ({"n": 4, "rounding": "floor"}, "rounding must be 'largest_remainder' or 'ceil', got 'floor'"),
    ({"n": 4, "kv_weight": -1.0}, "kv_weight and coverage_weight must be >= 0, got -1.0 and 1.5"),
    ({"n": 4, "coverage_weight": -2.0}, "kv_weight and coverage_weight must be >= 0, got 1.0 and -2.0"),
])
def test_bad_arguments_are_refused_before_anything_is_generated(kwargs, message):
    space = Table(depth=2)
    with pytest.raises(ValueError) as info:
        ets_search(space, Scores({}), **kwargs)
    assert str(info.value) == message and space.asked == []


def test_the_strategy_keeps_its_seed_and_sampling():
    problems = []
    gen = ScriptedGenerator.for_problems(problems, accuracy=1.0)
    sampling = SamplingConfig(max_tokens=64, temperature=0.3)
    default = ETS(ETSConfig(n=4), gen, MATH_PROMPT.render)
    assert default.seed == 0 and default.sampling == SamplingConfig()
    given = ETS(ETSConfig(n=4), gen, MATH_PROMPT.render, sampling, seed=7)
    assert given.seed == 7 and given.sampling is sampling


def test_shares_refuse_a_zero_temperature_and_count_a_zero_score_as_valid():
    with pytest.raises(ValueError) as info:
        rebase_shares([0.5], 0.0)
    assert str(info.value) == "temperature must be > 0, got 0.0"
    # Scores 0 and 1 at T = 1: e^-1 and 1 over 1 + e^-1 -> 0.2689 and 0.7311.
    assert rebase_shares([0.0, 1.0], 1.0) == pytest.approx([0.268941, 0.731059], abs=1e-6)


def test_shares_at_a_low_temperature_do_not_overflow():
    # T = 0.002: scores 1.0 and 0.9 are e^0 and e^-50 apart; shifted by the top score, nothing overflows.
    assert rebase_shares([1.0, 0.9], 0.002) == pytest.approx([1.0, math.exp(-50)], rel=1e-9, abs=0)


def test_paths_that_disagree_on_a_parent_are_refused_by_node():
    from tts.search.tree.ets import select_nodes

    with pytest.raises(ValueError) as info:
        select_nodes([0.5, 0.5], [("a", "b"), ("c", "b")])
    assert str(info.value) == ("paths disagree on the parent of node 'b'; each path must run from the root's child "
                               "down to the candidate's parent")


def test_the_program_written_out_for_a_two_level_tree():
    from tts.search.tree.ets import _selection_program

    # Candidates 0 (under c, under a), 1 (under a), 2 (under b); clusters X = {0, 2}, Y = {1}.
    # Variables: x0..x2, then y_a = 3, y_c = 4, y_b = 5 (first seen), then c_X = 6, c_Y = 7.
    # Each retained node costs 1 / (3 + 3 + 1) of the tree's cache; each cluster covered is worth 1.5 / 2.
    cost, rows, lo, hi = _selection_program([0.5, 0.3, 0.2], [("a", "c"), ("a",), ("b",)], ["X", "Y", "X"],
                                            kv_weight=1.0, coverage_weight=1.5)
    assert cost.tolist() == pytest.approx([1 / 7 - 0.5, 1 / 7 - 0.3, 1 / 7 - 0.2, 1 / 7, 1 / 7, 1 / 7, -0.75, -0.75])
    assert rows == [
        {0: 1.0, 4: -1.0}, {1: 1.0, 3: -1.0}, {2: 1.0, 5: -1.0},  # a candidate needs its parent
        {4: 1.0, 3: -1.0},  # c needs a
        {3: 1.0, 1: -1.0, 4: -1.0}, {4: 1.0, 0: -1.0}, {5: 1.0, 2: -1.0},  # a node is kept for a kept child
        {6: 1.0, 0: -1.0, 2: -1.0}, {7: 1.0, 1: -1.0},  # a cluster is covered by a kept member
    ]
    assert lo == [-math.inf] * 9 and hi == [0.0] * 9
    # lambda_s = 0: no cluster variables, whatever the labels.
    cost, rows, _, _ = _selection_program([0.5, 0.3, 0.2], [("a", "c"), ("a",), ("b",)], ["X", "Y", "X"],
                                          kv_weight=1.0, coverage_weight=0.0)
    assert len(cost) == 6 and len(rows) == 7


def test_the_solver_is_asked_for_the_exact_optimum_within_the_time_limit(monkeypatch):
    import numpy as np
    import scipy.optimize

    from tts.search.tree import ets

    seen = []
    real = scipy.optimize.milp

    def recording(cost, **kwargs):
        seen.append((kwargs["integrality"].tolist(), kwargs["options"], kwargs["constraints"].A.toarray().tolist()))
        return real(cost, **kwargs)

    monkeypatch.setattr(scipy.optimize, "milp", recording)
    cost = np.array([-1.0, -1.0])
    rows = [{0: 1.0, 1: 1.0}]
    assert ets._milp(cost, rows, [-math.inf], [1.0], integral=True).tolist() in ([1.0, 0.0], [0.0, 1.0])
    ets._milp(cost, rows, [-math.inf], [1.0], integral=False)
    assert seen == [([1, 1], {"mip_rel_gap": 0.0, "time_limit": ets.ILP_TIME_LIMIT}, [[1.0, 1.0]]),
                    ([0, 0], {"time_limit": ets.ILP_TIME_LIMIT}, [[1.0, 1.0]])]
    assert ets.ILP_TIME_LIMIT == 10.0


def test_a_solver_that_stops_without_an_optimum_is_an_error_even_with_a_solution(monkeypatch):
    import numpy as np
    import scipy.optimize

    from tts.search.tree import ets

    monkeypatch.setattr(scipy.optimize, "milp", lambda cost, **kw: SimpleNamespace(
        status=1, x=np.array([1.0]), message="Time limit reached. (HiGHS Status 13)"))
    with pytest.raises(RuntimeError) as info:
        ets._milp(np.array([-1.0]), [{0: 1.0}], [-math.inf], [1.0], integral=True)
    assert str(info.value) == "milp did not solve the ETS program: Time limit reached. (HiGHS Status 13)"


def test_a_solver_keeping_no_node_is_an_error_naming_the_bounds(monkeypatch):
    import numpy as np

    from tts.search.tree import ets

    answers = iter([np.array([0.5, 0.5]), np.array([0.0, 0.0])])  # fractional relaxation, then nothing kept
    monkeypatch.setattr(ets, "_milp", lambda *args, **kwargs: next(answers))
    with pytest.raises(RuntimeError) as info:
        ets._solve_selection(np.array([-1.0, -1.0]), [], [], [], n=2, cap=2.0)
    assert str(info.value) == "milp returned 0 retained nodes, outside 1..2"


def _program_inputs(monkeypatch):
    """Record what ets_search hands the program: (weights, labels, kv, coverage, limit) per call."""
    from tts.search.tree import ets

    calls = []
    real = ets.select_nodes

    def recording(weights, paths, labels=None, kv_weight=ets.KV_WEIGHT, coverage_weight=ets.COVERAGE_WEIGHT,
                  limit=None):
        calls.append((list(weights), labels, kv_weight, coverage_weight, limit))
        return real(weights, paths, labels, kv_weight, coverage_weight, limit)

    monkeypatch.setattr(ets, "select_nodes", recording)
    return calls


def test_the_program_is_capped_at_the_width_left_and_uncapped_in_the_authors_rounding(monkeypatch):
    calls = _program_inputs(monkeypatch)
    # n = 4: the root's four children; "1" finishes at depth 1, so the width left for the other three is 3.
    ets_search(Table(depth=3, finish=((0, "1"),)), Scores({}), n=4, kv_weight=0.5, coverage_weight=3.0,
               cluster=lambda states: ["A", "B"] * (len(states) // 2) + ["A"] * (len(states) % 2))
    assert [(len(c[0]), c[2], c[3], c[4]) for c in calls[:1]] == [(3, 0.5, 3.0, 3)]
    calls.clear()
    ets_search(Table(depth=3, finish=((0, "1"),)), Scores({}), n=4, rounding="ceil")
    assert [(len(c[0]), c[4]) for c in calls[:1]] == [(3, None)]


def test_the_authors_rounding_weighs_each_node_by_its_rounded_width_with_ties_in_order(monkeypatch):
    calls = _program_inputs(monkeypatch)
    # Node "3" has no valid score, so three equal scores share the whole width of 4, served in
    # order: ceil(4 x 1/3) = 2, then ceil(2 x 1/2) = 1, then 1; weights 2/4, 1/4, 1/4.
    ets_search(Table(depth=2), Scores({"3": math.nan}), n=4, rounding="ceil")
    assert calls[0][0] == [0.5, 0.25, 0.25]


def test_a_failed_program_keeps_rebases_choice_and_says_why(monkeypatch, caplog):
    from tts.search.tree import ets

    def failing(*args, **kwargs):
        raise ValueError("boom")

    monkeypatch.setattr(ets, "select_nodes", failing)
    with caplog.at_level(logging.WARNING, logger="tts.search.tree.ets"):
        [r] = ets_search(Table(depth=2), Scores({}), n=4)
    assert caplog.messages == ["ETS program failed on 4 nodes (ValueError: boom); REBASE's choice is kept"]
    assert r.events["ilp_fallback"] == 1
