"""The graph search's parts on a two-graph space whose evaluations are fixed by hand: one REINFORCE
update worked out on paper, the ledger's cache, budgets and token prediction, and the result."""

from __future__ import annotations

import math

import pytest

from tts.graphs import search as search_module
from tts.graphs.graph import GraphError
from tts.graphs.search import Evaluation, GraphSearchConfig, GraphSearchSpace, _Ledger, _softmax, search_graphs

# One decision with a choice: samples 1 or 2 (one generator into a voter; one request either way).
SPACE = GraphSearchSpace(depths=(1,), widths=(1,), samples=(1, 2), outputs=("voter",))
BASE = {"depth": 1, "width": 1, "output": "voter", "model_0_0": "policy", "model_out": "policy"}
ONE, TWO, FOUR, EIGHT = ({**BASE, "samples": n} for n in (1, 2, 4, 8))
SPACE4 = GraphSearchSpace(depths=(1,), widths=(1,), samples=(1, 2, 4, 8), outputs=("voter",))


class Fixed:
    """Graph with n samples -> accuracy 0.5 (n = 1) or 0.7 (n = 2), 100 n tokens and 1 request per problem
    on 4 problems; records what it evaluated."""

    def __init__(self):
        self.calls = []

    def __call__(self, specs):
        self.calls.append([s.nodes["l0_0"].n for s in specs])
        return [Evaluation({1: 0.5, 2: 0.7, 4: 0.8, 8: 0.85}[s.nodes["l0_0"].n], 100.0 * s.nodes["l0_0"].n, 1.0, 4)
                for s in specs]


def _scripted(monkeypatch, script):
    """Replace the search's draws by ``script`` (in order; running past its end fails); returns the draws made."""
    drawn = []

    def draw(rng, decisions, logits):
        drawn.append(dict(script[len(drawn)]))
        return drawn[-1]

    monkeypatch.setattr(search_module, "_draw", draw)
    return drawn


def test_an_evaluations_tokens_are_its_mean_times_its_problems_rounded():
    assert Evaluation(0.5, 10.4, 1.0, 3).tokens == 31  # 31.2
    assert Evaluation(0.5, 10.6, 1.0, 3).tokens == 32  # 31.8


def test_softmax_is_exp_over_the_sum_and_shifts_safely():
    assert _softmax([0.0, math.log(3.0)]) == pytest.approx([0.25, 0.75])
    assert _softmax([1000.0, 1000.0 + math.log(3.0)]) == pytest.approx([0.25, 0.75])


def test_one_reinforce_round_moves_the_logits_by_the_leave_one_out_advantage(monkeypatch):
    seen, script = [], [ONE, TWO, ONE, TWO]

    def draw(rng, decisions, logits):
        seen.append({d: list(v) for d, v in logits.items()})
        return dict(script[len(seen) - 1])

    monkeypatch.setattr(search_module, "_draw", draw)
    result = search_graphs(SPACE, GraphSearchConfig(samples_per_round=2, patience=1), Fixed())
    assert len(seen) == 4  # round 1 evaluates both graphs; round 2 proposes nothing new and stops
    assert seen[0]["samples"] == seen[1]["samples"] == [0.0, 0.0]
    # rewards 0.5 and 0.7: spread 0.1, advantages (0.5 - 0.7) / 0.1 = -2 and +2, steps 2.0 x adv / 2 = -/+2.
    # n = 1 first: [0, 0] + (-2) x ([1, 0] - [1/2, 1/2]) = [-1, 1]; then n = 2 at p = softmax([-1, 1]) =
    # [1, e^2] / (1 + e^2): + 2 x ([0, 1] - p) = [-1 - 2 / (1 + e^2), 1 + 2 / (1 + e^2)]
    moved = 2 / (1 + math.e ** 2)
    assert seen[2]["samples"] == pytest.approx([-1 - moved, 1 + moved])
    # decisions with one value never move; the output model (inactive: the voter has none) is never touched
    assert all(seen[2][d] == [0.0] for d in ("depth", "width", "output", "model_0_0", "model_out"))
    assert (result.best.nodes["l0_0"].n, result.reward, result.evaluations, result.found_at) == (2, 0.7, 2, 2)
    assert result.curve == (0.5, 0.7) and result.tokens == 400 + 800 and result.method == "reinforce"
    assert result.dev == Evaluation(0.7, 200.0, 1.0, 4)
    assert result.stopped == "no new graphs proposed (converged)"


def test_the_learning_rate_scales_the_step(monkeypatch):
    seen, script = [], [ONE, TWO, ONE, TWO]

    def draw(rng, decisions, logits):
        seen.append(list(logits["samples"]))
        return dict(script[len(seen) - 1])

    monkeypatch.setattr(search_module, "_draw", draw)
    search_graphs(SPACE, GraphSearchConfig(samples_per_round=2, patience=1, learning_rate=1.0), Fixed())
    # step -/+1: [-0.5, 0.5]; then p = [1, e] / (1 + e), + 1 x ([0, 1] - p) = [-0.5 - 1 / (1 + e), 0.5 + 1 / (1 + e)]
    moved = 1 / (1 + math.e)
    assert seen[2] == pytest.approx([-0.5 - moved, 0.5 + moved])


def test_the_ledger_caches_graphs_and_counts_only_new_ones():
    fake = Fixed()
    ledger = _Ledger(SPACE, GraphSearchConfig(max_evaluations=5), fake)
    assert ledger.rewards([ONE, ONE, TWO]) == [0.5, 0.5, 0.7]
    assert ledger.rewards([TWO, ONE]) == [0.7, 0.5]
    assert fake.calls == [[1, 2]] and ledger.tokens == 1200 and ledger.curve == [0.5, 0.7]
    assert not ledger.spent


def test_the_evaluation_budget_stops_at_its_count_with_its_message():
    fake = Fixed()
    ledger = _Ledger(SPACE, GraphSearchConfig(max_evaluations=1), fake)
    assert ledger.rewards([ONE, TWO]) == [0.5, None]
    assert ledger.stopped == "evaluation budget (1) spent" and ledger.spent and fake.calls == [[1]]


def test_a_reward_pays_the_cost_penalty_per_token():
    ledger = _Ledger(SPACE, GraphSearchConfig(cost_penalty=1e-3), Fixed())
    # 0.5 - 0.1 = 0.4 and 0.7 - 0.2 = 0.5
    assert ledger.rewards([ONE, TWO]) == pytest.approx([0.4, 0.5])
    assert ledger.found_at == 2 and ledger.cache[ledger.best_key][0].nodes["l0_0"].n == 2


def test_the_token_budget_admits_a_graph_whose_predicted_tokens_just_fit():
    # after n = 1 (400 tokens, 100 per request), n = 2 is predicted at 1 request x 4 problems x 100 = 400
    fits = _Ledger(SPACE, GraphSearchConfig(max_tokens=800), Fixed())
    fits.rewards([ONE])
    assert fits._predicted_tokens(fits.space.build(TWO)) == 400
    assert fits.rewards([TWO]) == [0.7] and fits.tokens == 1200 and not fits.spent
    short = _Ledger(SPACE, GraphSearchConfig(max_tokens=799), Fixed())
    short.rewards([ONE])
    assert short.rewards([TWO]) == [None] and short.stopped == "token budget (799) spent"
    # nothing measured yet: only the first graph of a batch may run
    first = _Ledger(SPACE, GraphSearchConfig(max_tokens=10**6), Fixed())
    assert first._predicted_tokens(first.space.build(ONE)) is None
    assert first.rewards([ONE, TWO]) == [0.5, None] and first.stopped == "token budget (1000000) spent"


def test_predicted_tokens_use_the_dearest_request_seen():
    class Uneven(Fixed):
        def __call__(self, specs):
            # n = 1: 300 tokens over 2 requests (150 each); n = 2: 100 tokens over 1 request
            return [Evaluation(0.5, 300.0, 2.0, 4) if s.nodes["l0_0"].n == 1 else Evaluation(0.6, 100.0, 1.0, 4)
                    for s in specs]

    ledger = _Ledger(SPACE, GraphSearchConfig(), Uneven())
    ledger.rewards([TWO])
    assert ledger._predicted_tokens(ledger.space.build(ONE)) == 1 * 4 * 100
    ledger.rewards([ONE])
    assert ledger._predicted_tokens(ledger.space.build(ONE)) == 1 * 4 * 150


def test_a_search_that_evaluates_nothing_is_refused_naming_why(monkeypatch):
    monkeypatch.setattr(search_module, "SEARCH_METHODS", type(search_module.SEARCH_METHODS)(
        "graph search method", {"reinforce": lambda ledger, rng: None}))
    with pytest.raises(GraphError) as err:
        search_graphs(SPACE, GraphSearchConfig(), Fixed())
    assert str(err.value) == ("graph search evaluated no graph (no graph proposed); raise --budget or the token "
                              "budget")


def test_reinforce_stops_after_patience_rounds_without_a_new_graph(monkeypatch):
    drawn = _scripted(monkeypatch, [ONE, TWO] * 3)  # new, then two stale rounds
    search_graphs(SPACE, GraphSearchConfig(samples_per_round=2, patience=2), Fixed())
    assert len(drawn) == 6


def test_random_search_counts_only_rounds_without_a_new_graph_against_its_patience(monkeypatch):
    # rounds: new, stale, new, stale, stale (patience 2 ends it)
    drawn = _scripted(monkeypatch, [ONE, ONE, ONE, ONE, TWO, TWO, TWO, ONE, ONE, TWO])
    fake = Fixed()
    result = search_graphs(SPACE4, GraphSearchConfig(method="random", samples_per_round=2, patience=2), fake)
    assert len(drawn) == 10 and fake.calls == [[1], [2]] and result.evaluations == 2


@pytest.mark.parametrize("method", ["random", "greedy"])
def test_a_patience_of_one_still_searches(method):
    result = search_graphs(SPACE4, GraphSearchConfig(method=method, patience=1), Fixed())
    assert result.evaluations >= 1


def test_greedy_climbs_one_decision_at_a_time_and_restarts_until_its_patience(monkeypatch):
    drawn = _scripted(monkeypatch, [ONE, TWO, FOUR])
    fake = Fixed()
    result = search_graphs(SPACE4, GraphSearchConfig(method="greedy", patience=2), fake)
    # from n = 1: 2 improves (0.7), then from 2: 1 is no better, 4 improves (0.8), then from 4: 8 (0.85); a
    # local optimum. The restarts from 2 and 4 climb through graphs already seen: two stale rounds.
    assert fake.calls == [[1], [2], [4], [8]] and len(drawn) == 3
    assert (result.best.nodes["l0_0"].n, result.reward, result.evaluations, result.found_at) == (8, 0.85, 4, 4)
    assert result.stopped == "no new graphs proposed (converged)"


def test_the_token_budget_counts_every_graph_already_admitted_in_a_batch():
    # after n = 1 (400 tokens, 100 per request) each of n = 2, 4, 8 is predicted at 400
    fits = _Ledger(SPACE4, GraphSearchConfig(max_tokens=1600), Fixed())
    fits.rewards([ONE])
    assert fits.rewards([TWO, FOUR, EIGHT]) == [0.7, 0.8, 0.85]  # 400 + 400 + 400 + 400 = 1600 fits
    short = _Ledger(SPACE4, GraphSearchConfig(max_tokens=1599), Fixed())
    short.rewards([ONE])
    assert short.rewards([TWO, FOUR, EIGHT]) == [0.7, 0.8, None] and short.stopped == "token budget (1599) spent"


def test_an_exact_tie_keeps_the_graph_found_first():
    class Tied(Fixed):
        def __call__(self, specs):  # rewards 0.5 - 128 / 512 and 0.75 - 256 / 512: both exactly 0.25
            return [Evaluation(0.5, 128.0, 1.0, 4) if s.nodes["l0_0"].n == 1 else Evaluation(0.75, 256.0, 1.0, 4)
                    for s in specs]

    ledger = _Ledger(SPACE, GraphSearchConfig(cost_penalty=2.0 ** -9), Tied())
    assert ledger.rewards([ONE, TWO]) == [0.25, 0.25]
    assert ledger.found_at == 1 and ledger.cache[ledger.best_key][0].nodes["l0_0"].n == 1


def test_each_evaluation_is_logged_with_its_accuracy_tokens_reward_and_count(caplog):
    ledger = _Ledger(SPACE, GraphSearchConfig(max_evaluations=30), Fixed())
    with caplog.at_level("INFO", logger="tts.graphs.search"):
        ledger.rewards([TWO])
    name = SPACE.build(TWO).name
    assert [r.getMessage() for r in caplog.records if r.name == "tts.graphs.search"] == [
        f"graph search: {name} dev accuracy 0.700, 200 tokens/problem, reward 0.7000 (1/30)"]


# Two decisions: samples 1 or 2, and the generator's model (the run's policy or "a").
SPACE_AB = GraphSearchSpace(models={"a": {"model": "a"}}, node_models=("policy", "a"), depths=(1,), widths=(1,),
                            samples=(1, 2), outputs=("voter",))


def _graph(n, model):
    return {**BASE, "samples": n, "model_0_0": model}


class ByModel:
    """Reward by (samples, model); records the graphs evaluated."""

    def __init__(self, rewards):
        self.rewards, self.calls = rewards, []

    def __call__(self, specs):
        keys = [(s.nodes["l0_0"].n, s.nodes["l0_0"].model) for s in specs]
        self.calls += keys
        return [Evaluation(self.rewards[k], 100.0, 1.0, 4) for k in keys]


def test_greedy_moves_to_an_improvement_and_climbs_on_from_there(monkeypatch):
    # from (1, policy) both neighbours improve; whichever is taken first, its own neighbour (2, a) is
    # the best graph, two decisions away from the start: only a search that moves reaches it
    fake = ByModel({(1, "policy"): 0.5, (2, "policy"): 0.6, (1, "a"): 0.55, (2, "a"): 0.9})
    drawn = _scripted(monkeypatch, [_graph(1, "policy")] * 2)
    result = search_graphs(SPACE_AB, GraphSearchConfig(method="greedy", patience=1), fake)
    assert len(drawn) == 2 and sorted(fake.calls) == sorted(fake.rewards)
    assert (result.best.nodes["l0_0"].n, result.best.nodes["l0_0"].model, result.reward) == (2, "a", 0.9)


@pytest.mark.timeout(20)
def test_greedy_stops_on_a_plateau_of_equal_rewards(monkeypatch):
    # every graph scores the same: no neighbour is an improvement, so the climb ends where it starts
    fake = ByModel(dict.fromkeys([(1, "policy"), (2, "policy"), (1, "a"), (2, "a")], 0.5))
    drawn = _scripted(monkeypatch, [_graph(1, "policy")] * 2)
    result = search_graphs(SPACE_AB, GraphSearchConfig(method="greedy", patience=1), fake)
    assert len(drawn) == 2 and fake.calls[0] == (1, "policy") and len(fake.calls) == 3
    assert (result.best.nodes["l0_0"].n, result.best.nodes["l0_0"].model, result.found_at) == (1, "policy", 1)
