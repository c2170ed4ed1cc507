"""Lookahead search: rollout scoring on the toy digit space (a greedy model and an outcome-only
verifier), rollout depth and batching counted, and the strategy end to end (step model, CLI)."""

from __future__ import annotations

from typing import NamedTuple

import pytest
from typer.testing import CliRunner

from tts.cli.app import app
from tts.config import SamplingConfig
from tts.prompts import MATH_PROMPT
from tts.registry import STRATEGIES
from tts.search.tree.lookahead import Lookahead, LookaheadConfig, lookahead_search, rollout
from tts.search.tree.toy import Digits, DigitSpace, RandomScorer
from tts.search.tree.tree_search import SearchTree
from tts.types import RequestShape
from tts.verifiers.function import FunctionVerifier

LENGTH, BASE = 5, 4  # the toy space of the `targets` fixture (tests/search/conftest.py)


class GreedyDigits(DigitSpace):
    """A toy space whose greedy continuation is right (the model's most likely digit is the
    target's); it records every rollout call."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.rollout_calls: list[int] = []

    def rollout_step(self, states):
        self.rollout_calls.append(len(states))
        return [Digits(s.root, s.digits + self.targets[s.root][len(s.digits)]) for s in states]


def Outcome(space: DigitSpace) -> FunctionVerifier:  # noqa: N802 -- reads as the verifier it builds
    """An outcome verifier: a finished string's share of matching digits; 0.5 (no idea) before."""
    return FunctionVerifier.of_items(lambda s: space.value(s) / LENGTH if space.is_terminal(s) else 0.5)


def test_rollouts_give_an_outcome_verifier_a_signal_that_plain_beam_search_lacks(targets, chosen):
    space = GreedyDigits(targets(100, seed=1), base=BASE, seed=2)
    deep = lookahead_search(space, Outcome(space), n=8, beam_width=4, lookahead=LENGTH)
    plain_space = GreedyDigits(targets(100, seed=1), base=BASE, seed=2)
    plain = lookahead_search(plain_space, Outcome(plain_space), n=8, beam_width=4, lookahead=0)
    assert all(chosen(r).state.digits == t for r, t in zip(deep, space.targets, strict=True))
    hits = sum(chosen(r).state.digits == t for r, t in zip(plain, plain_space.targets, strict=True))
    assert hits < 20 and plain_space.rollout_calls == []  # k = 0 is beam search: no rollouts


@pytest.mark.parametrize("k", [1, 2, 3])
def test_rollout_depth_is_counted_and_each_level_is_one_call_for_all_candidates_and_roots(targets, k):
    roots = 16
    space = GreedyDigits(targets(roots, seed=3), base=BASE, seed=4)
    scorer = Outcome(space)
    results = lookahead_search(space, scorer, n=8, beam_width=4, lookahead=k)
    # A candidate at depth d (unfinished below LENGTH) rolls min(k, LENGTH - d) steps.
    for r in results:
        expected = sum(min(k, LENGTH - node.depth) for node in r.nodes if not node.terminal)
        assert r.events["lookahead_steps"] == expected
    # One rollout call per level of every search step, for all roots at once: not per root or candidate.
    levels = sum(min(k, LENGTH - d) for d in range(1, LENGTH))
    assert len(space.rollout_calls) == levels and results[0].events["lookahead_calls"] == levels
    assert space.rollout_calls[0] == roots * 8  # the first level: every candidate of every root
    assert space.expand_calls == len(scorer.calls) == LENGTH  # one expand and one score call per step


def test_bad_arguments_are_refused(targets):
    space = GreedyDigits(targets(1), base=BASE)
    with pytest.raises(ValueError, match="lookahead must be >= 0"):
        lookahead_search(space, Outcome(space), n=4, beam_width=2, lookahead=-1)
    with pytest.raises(ValueError, match="multiple of beam_width"):
        lookahead_search(space, Outcome(space), n=6, beam_width=4, lookahead=1)


def test_bad_arguments_are_refused_with_what_to_change(targets):
    space = GreedyDigits(targets(1), base=BASE)
    for n, width in ((6, 4), (4, 0), (2, 4)):
        with pytest.raises(ValueError, match=rf"^n \({n}\) must be a positive multiple of beam_width \({width}\)$"):
            lookahead_search(space, Outcome(space), n=n, beam_width=width, lookahead=1)
    with pytest.raises(ValueError, match=r"^fill must be 'within_n' or 'every_step', got 'sometimes'$"):
        lookahead_search(space, Outcome(space), n=4, beam_width=2, lookahead=1, fill="sometimes")
    with pytest.raises(ValueError, match=r"^lookahead must be >= 0, got -1$"):
        lookahead_search(space, Outcome(space), n=4, beam_width=2, lookahead=-1)
    assert space.expand_calls == 0
    [r] = lookahead_search(space, Outcome(space), n=2, beam_width=2, lookahead=0)  # n = M, k = 0: allowed
    assert len(r.leaves) == 2


def test_a_space_that_breaks_its_contract_is_refused_by_name(targets):
    class ShortExpand(GreedyDigits):
        def expand(self, states, counts):
            return super().expand(states, counts)[:1]

    class ShortRollout(GreedyDigits):
        def rollout_step(self, states):
            return super().rollout_step(states)[:-1]

    space = ShortExpand(targets(2), base=BASE)
    with pytest.raises(RuntimeError) as info:
        lookahead_search(space, Outcome(space), n=2, beam_width=1, lookahead=1)
    assert str(info.value) == ("ShortExpand.expand returned 1 child lists for 2 states; a space must return one "
                               "list per state")
    space = ShortRollout(targets(1), base=BASE)
    with pytest.raises(RuntimeError) as info:
        lookahead_search(space, Outcome(space), n=2, beam_width=1, lookahead=1)
    assert str(info.value) == "ShortRollout.rollout_step returned 1 states for 2"


def test_a_node_without_children_is_counted_and_a_rollout_that_stops_keeps_its_last_state(targets):
    class Barren(GreedyDigits):
        """Strings ending in 0 get no children; rollouts give nothing (None) after 2 digits."""

        def expand(self, states, counts):
            out = super().expand(states, counts)
            return [[] if s.digits.endswith("0") else kids for s, kids in zip(states, out, strict=True)]

        def rollout_step(self, states):
            return [None if len(s.digits) >= 2 else nxt for s, nxt in zip(states, super().rollout_step(states),
                                                                            strict=True)]

    seen = []
    space = Barren(["0000"], base=BASE, seed=1)
    scorer = FunctionVerifier.of_items(lambda s: seen.append(s.digits) or (0.9 if s.digits.endswith("0") else 0.1))
    [r] = lookahead_search(space, scorer, n=4, beam_width=1, lookahead=3)
    # Depth 1: the root's children 0..3 each roll out one digit (the target's 0) and then get None:
    # each is scored at "x0" (0.9), 4 steps in 2 rollout calls. "0" gets no children; 1, 2 and 3 one
    # each (M = 1): "11", "20", "32", which roll out nothing (one more call) and are scored as they are;
    # "20" gets no children; "112" and "322" do not roll out (a fourth call) and finish at depth 4.
    assert sorted(seen[:4]) == ["00", "10", "20", "30"] and sorted(seen[4:7]) == ["11", "20", "32"]
    assert r.events == {"lookahead_calls": 4, "lookahead_steps": 4, "no_children": 2}
    assert sorted(n.state.digits for n in r.leaf_nodes) == ["1121", "3220"]
    assert {n.state.digits: n.score for n in r.nodes if n.depth == 2} == {"11": 0.1, "20": 0.9, "32": 0.1}


def test_a_rollout_that_stops_for_one_candidate_goes_on_for_the_others():
    class Stalls(GreedyDigits):
        def rollout_step(self, states):
            return [None if s.digits == "3" else nxt for s, nxt in zip(states, super().rollout_step(states),
                                                                         strict=True)]

    seen = []
    space = Stalls(["0000"], base=BASE, seed=1)  # the root's children come as 3, 0, 1, 2
    lookahead_search(space, FunctionVerifier.of_items(lambda s: seen.append(s.digits) or 0.5), n=4, beam_width=4,
                     lookahead=1)
    assert seen[:4] == ["3", "00", "10", "20"]


class Step(NamedTuple):
    text: str
    step: str


class EmptySteps:
    """Root "" with children "a" (an empty step) and "b"; greedy rollouts add an empty step "z";
    strings of 3 letters are finished."""

    def initial_states(self):
        return [Step("", "")]

    def expand(self, states, counts):
        return [[Step(s.text + c, "" if c == "a" else c) for c in "abcd"[:k]] for s, k in zip(states, counts,
                                                                                             strict=True)]

    def rollout_step(self, states):
        return [Step(s.text + "z", "") for s in states]

    def is_terminal(self, state):
        return len(state.text) >= 3


def test_empty_steps_are_neither_rolled_out_nor_scored_and_a_rollout_ends_on_its_last_real_step():
    # "a" is an empty step: not rolled out, not scored (it keeps PENALTY). "b" rolls out to "bz",
    # an empty step, so its rollout's end (what is scored) stays "b"; one rollout step is counted.
    # The search (stopped after its first step) scores "b" alone.
    seen = []
    space = EmptySteps()
    tree = SearchTree(space.initial_states()[0])
    a, b = (tree.add(None, state, False) for state in space.expand(space.initial_states(), [2])[0])
    assert rollout(space, [(tree, a), (tree, b)], 1) == [(a.state, 0), (b.state, 1)]
    assert tree.events == {"lookahead_calls": 1, "lookahead_steps": 1}
    with pytest.raises(RuntimeError, match="after 1 steps"):
        lookahead_search(space, FunctionVerifier.of_items(lambda s: seen.append(s.text) or 0.5), n=2, beam_width=2,
                         lookahead=1, max_steps=1)
    assert seen == ["b"]


def test_rollouts_count_their_steps_per_candidate(targets):
    space = GreedyDigits(["01230"], base=BASE)
    tree = SearchTree(space.initial_states()[0])
    one = tree.add(None, Digits(0, "0"), False)
    four = tree.add(one, Digits(0, "0123"), False)
    done = tree.add(four, Digits(0, "01230"), True)
    ends = rollout(space, [(tree, one), (tree, four), (tree, done)], 3)
    assert ends == [(Digits(0, "0123"), 3), (Digits(0, "01230"), 1), (Digits(0, "01230"), 0)]


def test_every_step_fill_runs_every_root_and_a_search_that_never_ends_says_when(targets):
    space = GreedyDigits(["012", "3102"], base=BASE)
    results = lookahead_search(space, Outcome(space), n=4, beam_width=2, lookahead=1, fill="every_step")
    assert [len(r.leaves) for r in results] == [4, 4]
    assert [len(r.leaf_nodes[0].state.digits) for r in results] == [3, 4]

    class Endless(GreedyDigits):
        def is_terminal(self, state):
            return False

        def rollout_step(self, states):
            return [None for _ in states]

    with pytest.raises(RuntimeError, match="after 20 steps"):
        lookahead_search(Endless(["0"], base=BASE), RandomScorer(), n=2, beam_width=1, lookahead=1, max_steps=20)


def test_the_cost_hook_adds_k_greedy_requests_per_candidate_behind_each_step():
    # Defaults: max_depth 8, lookahead 1; n = 4 (M = 4), 80 tokens in 8 steps of 10.
    assert Lookahead.planned_requests(4, prompt_tokens=30, gen_tokens=80)[0].cached_prompt_tokens == 0
    shapes = Lookahead.planned_requests(4, prompt_tokens=30, gen_tokens=80, cached_tokens=5)
    beam = [RequestShape(30, 5, (10,) * 4)] + [RequestShape(30 + t * 10, 30 + t * 10, (10,) * 4) for t in range(1, 8)]
    rollouts = [RequestShape(30 + t * 10, 30 + t * 10, (10,)) for t in range(1, 9) for _ in range(4)]
    assert shapes == beam + rollouts


def test_config_label_and_registry():
    assert LookaheadConfig(n=16).label == "lookahead@16"
    assert LookaheadConfig(n=16, lookahead=3).label == "lookahead@16,lookahead=3"
    assert STRATEGIES.load("lookahead") is Lookahead


def _lookahead(model, **cfg) -> Lookahead:
    return Lookahead(LookaheadConfig(verifier="arithmetic", **cfg), model, MATH_PROMPT.render,
                     SamplingConfig(max_tokens=256), seed=1)


def test_rollouts_are_greedy_batched_across_problems_and_billed(step_model, addition_problems):
    problems = addition_problems(12, seed=3)
    model = step_model(slip=0.4, seed=2)
    sols = _lookahead(model, n=8, lookahead=2).solve(problems)
    greedy = [call for call in model.calls if all(r.temperature == 0.0 for r in call)]
    sampled = [call for call in model.calls if all(r.temperature > 0.0 for r in call)]
    assert len(greedy) + len(sampled) == len(model.calls)  # a call is all rollouts or all candidate steps
    assert greedy and all(r.n == 1 for call in greedy for r in call)
    # the first rollout level holds every unfinished candidate of every problem: one call
    assert len({r.key for r in greedy[0]}) == 12 and len(greedy[0]) == 12 * 8
    for sol in sols:
        assert sol.trace.events["lookahead_steps"] > 0 and 1 <= len(sol.trace.samples) <= 8
        assert "verifier_error" not in sol.trace.events  # the strategy's verifier scores the rollouts
    # every rollout token is on a problem's bill, and lookahead costs more than beam search (k = 0)
    assert sum(s.usage.completion_tokens for s in sols) == model.usage.completion_tokens
    beam_model = step_model(slip=0.4, seed=2)
    beam = _lookahead(beam_model, n=8, lookahead=0).solve(problems)
    assert sum(s.usage.completion_tokens for s in beam) < model.usage.completion_tokens
    assert all("lookahead_steps" not in s.trace.events for s in beam)


def test_tts_eval_runs_lookahead_on_the_scripted_backend(tmp_path):
    out = tmp_path / "la"
    r = CliRunner(env={"COLUMNS": "220"}).invoke(app, ["eval", "--backend", "scripted", "--benchmark", "demo",
                                                       "--limit", "4", "-s", "lookahead", "-n", "4", "--set",
                                                       "lookahead=2", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "lookahead@4,lookahead=2" in r.output or "lookahead,lookahead=2" in r.output
    assert "lookahead_steps" in r.output
    assert len((out / "results.jsonl").read_text().splitlines()) == 4
