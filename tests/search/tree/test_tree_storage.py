"""Pins every step-wise search's output to fingerprints (taken at eef79da, before a trial of
column storage for the trees, which was reverted): the same requests (seeds and continuations)
reach the backend, and the same solutions (answers, samples, scores, ``Trace.tree``, events,
usage) come back, for every tree search over the step-wise space. A change to the trees' storage
or bookkeeping must keep them; a change that means to alter a search's output updates them and
says why.

The model adds numbers step by step and slips, writes empty steps and ends its message at times
(the ``step_model`` fixture, tests/search/conftest.py), so forced answers and unscored empty steps
are in every run; the verifier checks the additions (the ``addition_checker`` fixture), and scores
every 7th item NaN (invalid scores).
"""

from __future__ import annotations

import hashlib
import json

import pytest

from tts.config import SamplingConfig
from tts.prompts import MATH_PROMPT
from tts.registry import STRATEGIES
from tts.types import to_jsonable

EXPECTED = {
    "beam": "bb997a02417d2cee6549c0b39089e48210d64f38fda11204a609d06c39e89be9",
    "beam,fill=every_step": "cc34d12c11f78be04420478cce4733ba0076e463ca1a936ea831a2fc6ffcef02",
    "dvts": "73deb9a74aa95b51bf7c363a3c7e1c1f2ce6d2930628bff181259fa1d64a6dc2",
    "dvts,siblings=all": "ed9a4dd4eebfc6a1a8ac81f872749be752cc01379ed62bfe42fff018af7bde78",
    "ets": "beccf2aece94eb594c55a6d1c9e3ed71afcd8e4d6261aa443f4c7164db82ad85",
    "lookahead": "63cb98ff0897cfdeac84ee7d27f85ba4f2ab4e1fe130963ccf1da92b2a5af6c3",
    "mcts": "e9b199ca2a654fc50506453611ed6bd0a630172869bec2aa57534e2a43df2edb",
    "particle_filtering": "9c91b55322e641a2822fe722ec6db156e83c083b2327c7494f955ba99ca18c77",
    "particle_gibbs": "76f432426762b57cffef364c424670fd2f8b8cc72189fbc4af560dfc25c657c5",
    "rebase": "36c89dd3979b8414e6b21997419746150559167877fa12e2515c2a0259bf2ceb",
}
"""sha256 of (every request, the solutions), per strategy and settings."""

RUNS = {
    "beam": {}, "beam,fill=every_step": {"fill": "every_step"}, "dvts": {}, "dvts,siblings=all": {"siblings": "all"},
    "rebase": {}, "mcts": {}, "lookahead": {"lookahead": 1}, "particle_filtering": {}, "particle_gibbs": {},
    "ets": {},
}


VIEWER_RECORDS = {("tree", "tokens"), ("notes", "chosen_node"), ("notes", "particles")}
"""Records added later for ``tts show --html`` (each node's step tokens, the chosen node, particle
weights per resampling): what the searches did is unchanged, so the fingerprints leave them out."""


def _without_empty_tool_calls(value, within=""):
    """The JSON of solutions as it was before samples could carry tool calls (an empty field
    added later must not change the fingerprint of searches that make none), and before the
    viewer's records (:data:`VIEWER_RECORDS`); an emptied ``notes`` reads as it did."""
    if isinstance(value, dict):
        kept = {k: _without_empty_tool_calls(v, k) for k, v in value.items()
                if not (k == "tool_calls" and v == []) and (within, k) not in VIEWER_RECORDS}
        return kept
    if isinstance(value, list):
        return [_without_empty_tool_calls(v, within) for v in value]
    return value


def _fingerprint(label: str, step_model, addition_problems, addition_checker) -> tuple[str, list]:
    kind = label.split(",")[0]
    cls = STRATEGIES.load(kind)
    settings = {"n": 8, "verifier": "logprob", **RUNS[label]}
    if kind not in ("rebase", "particle_filtering", "particle_gibbs", "ets"):
        settings["beam_width"] = 2
    if kind == "ets":
        settings["cluster_threshold"] = 0.3
    model = step_model(slip=0.3, seed=4, empty=0.1, ends=0.05)
    strategy = cls(cls.config_class(**settings), model, MATH_PROMPT.render, SamplingConfig(max_tokens=60), seed=3,
                   verifier=addition_checker(nan_every=7))
    sols = strategy.solve(addition_problems(3, seed=1))
    requests = [[(r.key, r.n, r.seed, r.temperature, r.max_tokens, r.continuation) for r in call]
                for call in model.calls]
    blob = json.dumps([requests, _without_empty_tool_calls(to_jsonable(sols))], sort_keys=True, default=repr)
    return hashlib.sha256(blob.encode()).hexdigest(), sols


@pytest.mark.parametrize("label", sorted(RUNS))
def test_search_output_is_unchanged_by_how_trees_store_their_nodes(label, step_model, addition_problems,
                                                                   addition_checker):
    digest, sols = _fingerprint(label, step_model, addition_problems, addition_checker)
    assert all(s.trace.tree for s in sols)
    assert digest == EXPECTED[label]
