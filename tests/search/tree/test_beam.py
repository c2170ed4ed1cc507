"""Beam search on the toy digit space (known optimum, no LLM) and the beam strategy's config."""

from __future__ import annotations

import json
import math

import pytest
from pydantic import ValidationError

from tts.config import parse_strategy_config
from tts.registry import STRATEGIES
from tts.search.tree.beam import BeamConfig, BeamSearch, beam_search
from tts.search.tree.toy import DigitSpace, PerfectScorer, RandomScorer
from tts.search.tree.tree_search import PENALTY
from tts.verifiers.base import VerifierScore
from tts.verifiers.function import FunctionVerifier

LENGTH, BASE = 5, 4  # the toy space of the `targets` fixture (tests/search/conftest.py)


def test_beam_with_a_perfect_verifier_finds_the_optimum_of_every_root(targets, chosen):
    space = DigitSpace(targets(50), base=BASE, seed=1)
    results = beam_search(space, PerfectScorer(space), n=16, beam_width=4)
    assert all(chosen(r).state.digits == t for r, t in zip(results, space.targets, strict=True))


def test_beam_with_a_random_verifier_does_no_better_than_chance(targets, chosen):
    # The search never sees the target, so with noise for scores the chosen string is independent of
    # it: E[matches] = LENGTH / BASE exactly. 400 roots: the mean's sd is 0.05, the tolerance 5 sd.
    space = DigitSpace(targets(400, seed=2), base=BASE, seed=3)
    results = beam_search(space, RandomScorer(seed=4), n=16, beam_width=4)
    mean = sum(space.value(chosen(r).state) for r in results) / len(results)
    assert abs(mean - LENGTH / BASE) < 0.25
    hits = sum(chosen(r).state.digits == t for r, t in zip(results, space.targets, strict=True))
    assert hits <= 5  # chance: 400 / 4**5 = 0.4 expected


def test_each_step_keeps_n_over_m_nodes_and_expands_each_m_ways():
    space = DigitSpace(["0123012"], base=BASE)
    [result] = beam_search(space, RandomScorer(seed=5), n=16, beam_width=4)
    by_depth: dict[int, list] = {}
    for node in result.nodes:
        by_depth.setdefault(node.depth, []).append(node)
    assert len(by_depth[1]) == 16  # the root is expanded n ways
    for depth in range(1, 7):
        kept = [n for n in by_depth[depth] if n.kept]
        assert len(kept) == 4  # n / M
        children = [n for n in by_depth[depth + 1] if n.parent in {k.id for k in kept}]
        assert len(children) == 16 and all(sum(c.parent == k.id for c in children) == 4 for k in kept)
        # the kept ones are the best-scored
        assert min(k.score for k in kept) >= max(n.score for n in by_depth[depth] if not n.kept)


def test_finished_children_are_candidates_and_never_more_than_n():
    space = DigitSpace(["012", "3"], base=BASE)
    results = beam_search(space, RandomScorer(seed=6), n=8, beam_width=2)
    for r, target in zip(results, space.targets, strict=True):
        assert len(r.leaves) == 8
        assert all(n.terminal and n.kept and len(n.state.digits) == len(target) for n in r.leaf_nodes)
        assert not any(n.terminal for n in r.nodes if n.id not in r.leaves)


def test_one_expand_and_one_score_call_per_step_for_all_roots(targets):
    space = DigitSpace(targets(64, seed=7), base=BASE)
    scorer = PerfectScorer(space)
    beam_search(space, scorer, n=8, beam_width=4)
    assert space.expand_calls == LENGTH and scorer.calls == LENGTH  # steps, not steps x roots


def _garbage(state) -> VerifierScore:
    """NaN for digit 0, inf for 1, out of range for 2, a non-number for 3, None (rank last) nowhere."""
    bad = {"0": math.nan, "1": math.inf, "2": 7.0, "3": "high"}
    return VerifierScore((), bad[state.digits[-1]], invalid=1 if state.digits[-1] == "0" else 0)


def test_a_verifier_that_raises_does_not_end_the_search_and_is_counted(flaky):
    space = DigitSpace(["0123", "3210"], base=BASE)
    results = beam_search(space, flaky(fail_on_call=2), n=8, beam_width=4)
    for r in results:
        assert len(r.leaves) == 8
        assert r.events == {"verifier_error": 1}  # one failed call; its 8 children rank last
        assert sum(n.score == PENALTY for n in r.nodes) == 8


def test_nan_inf_and_out_of_range_scores_rank_last_and_are_counted():
    space = DigitSpace(["01"], base=BASE)
    [r] = beam_search(space, FunctionVerifier.of_items(_garbage), n=4, beam_width=4)
    assert all(n.score == PENALTY for n in r.nodes) and len(r.leaves) == 4
    assert r.events["invalid_score"] == len(r.nodes) + sum(n.state.digits[-1] == "0" for n in r.nodes)


def test_a_space_that_never_ends_is_refused(endless):
    with pytest.raises(RuntimeError, match="terminal"):
        beam_search(endless(["0"]), RandomScorer(), n=2, beam_width=1, max_steps=20)


# --- config -------------------------------------------------------------------------------------


def test_n_must_be_a_multiple_of_the_beam_width_and_the_message_says_what_to_change():
    with pytest.raises(ValidationError, match=r"n \(6\) must be a multiple of beam_width \(4\).*1, 2, 3, 6"):
        BeamConfig(n=6, beam_width=4, verifier={"kind": "toy_perfect"})


def test_default_width_keeps_any_n_ladder_valid():
    widths = {n: BeamConfig(n=n, verifier={"kind": "toy_perfect"}).beam_width for n in (1, 2, 4, 6, 8, 9, 16, 64)}
    assert widths == {1: 1, 2: 2, 4: 4, 6: 3, 8: 4, 9: 3, 16: 4, 64: 4}


def test_labels_name_n_and_every_setting_that_differs_from_its_default():
    assert BeamConfig(n=16, verifier={"kind": "toy_perfect"}).label == "beam@16,verifier=toy_perfect"
    cfg = BeamConfig(n=16, beam_width=2, select="verifier", verifier={"kind": "toy_perfect", "aggregation": "prod"})
    assert cfg.label == "beam@16,beam_width=2,select=verifier,verifier=toy_perfect(aggregation=prod)"
    assert BeamConfig(n=16, fill="every_step").label == "beam@16,fill=every_step"


def test_config_round_trips_through_json_and_the_registry():
    cfg = BeamConfig(n=8, max_depth=5, verifier="toy_perfect")
    again = parse_strategy_config(json.loads(json.dumps(cfg.model_dump(mode="json"))))
    assert again == cfg and type(again) is BeamConfig
    assert STRATEGIES.load("beam") is BeamSearch and BeamSearch.pool_rule is None


def test_cost_hook_prices_n_samples_per_step_with_cached_prefixes():
    shapes = BeamSearch.planned_requests(16, prompt_tokens=100, gen_tokens=800)
    depth = BeamConfig.model_fields["max_depth"].default
    assert sum(len(s.completion_tokens) for s in shapes) == 16 * depth
    assert shapes[0].cached_prompt_tokens == 0 and all(s.cached_prompt_tokens == s.prompt_tokens for s in shapes[1:])
    assert len(shapes) == 1 + (depth - 1) * 4  # n/M requests of M samples after the first step


@pytest.fixture(autouse=True)
def _toy_verifier(toy_verifier):
    """A registered verifier config so that configs validate without the real verifiers."""
    toy_verifier("toy_perfect")
