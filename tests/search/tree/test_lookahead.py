"""Lookahead search: rollout scoring on the toy digit space (a greedy model and an outcome-only
verifier), rollout depth and batching counted, and the strategy end to end (step model, CLI)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from tts.cli.app import app
from tts.config import SamplingConfig
from tts.prompts import MATH_PROMPT
from tts.registry import STRATEGIES
from tts.search.tree.lookahead import Lookahead, LookaheadConfig, lookahead_search
from tts.search.tree.toy import Digits, DigitSpace
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
