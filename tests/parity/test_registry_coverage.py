"""Every registered strategy and verifier is pinned to its reference, or exempted in writing.

Convention: each parity module ``tests/parity/test_*.py`` declares, at module level,

    PINNED = {"strategy:particle_filtering", "verifier:prm", ...}

naming the registry entries whose reference rule it checks. This test reads those sets (with
``ast``, so a broken parity module still shows up as its own failure, not as a coverage gap) and
fails when a registry entry has neither a pin nor an exemption below. A new strategy or verifier
therefore cannot land unpinned: its author adds a parity test, or a reason here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tts.registry import STRATEGIES, VERIFIERS

pytestmark = pytest.mark.reads_source

PARITY_DIR = Path(__file__).resolve().parent

# Entries that have no paper or reference implementation to be faithful to, with the reason.
EXEMPT: dict[str, str] = {
    "strategy:auto": (
        "tts's own cross-strategy allocator, not a paper's algorithm; its honesty rules "
        "(cross-fitting, noise guard) are pinned in tests/budgets/test_auto_strategy.py and "
        "tests/budgets/test_cross_strategy.py"
    ),
    "strategy:graph": (
        "runs a user-written collaboration graph; the graph, not tts, defines the algorithm "
        "(roles are tested in tests/graphs/)"
    ),
    "verifier:chain": (
        "tts's own tool verifier for its chains benchmark (checks each step against the question's "
        "operations); no paper defines it; its rules are tested in tests/verifiers/test_chain_check.py"
    ),
    "verifier:rm": (
        "outcome reward models are scored as their model reads them (an adapter's data); no "
        "reference implementation's scoring is reproduced, and the shipped qwen2.5-math-rm layout "
        "is not yet checked against its model card (no weights or tokenizer here). The server path "
        "is pinned equal to the in-process one in tests/verifiers/test_prm_remote_server.py"
    ),
}


def _pins_of(path: Path) -> set[str]:
    """The ``PINNED`` set literal of one parity module (empty when it declares none)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "PINNED" for t in node.targets
        ):
            return set(ast.literal_eval(node.value))
    return set()


def _all_pins() -> dict[str, list[str]]:
    pins: dict[str, list[str]] = {}
    for path in sorted(PARITY_DIR.glob("test_*.py")):
        if path.name == Path(__file__).name:
            continue
        for pin in _pins_of(path):
            pins.setdefault(pin, []).append(path.name)
    return pins


def _registered() -> set[str]:
    return {f"strategy:{n}" for n in STRATEGIES.names()} | {f"verifier:{n}" for n in VERIFIERS.names()}


def test_every_strategy_and_verifier_is_pinned_or_exempted() -> None:
    pins = _all_pins()
    missing = sorted(_registered() - set(pins) - set(EXEMPT))
    assert not missing, (
        "These registry entries have no parity test in tests/parity/ (a module-level PINNED set "
        f"naming them) and no written exemption in {Path(__file__).name}: {missing}"
    )


def test_pins_and_exemptions_name_registered_entries() -> None:
    """A pin or exemption for a name that no longer exists is a stale promise."""
    known = _registered()
    stale = sorted((set(_all_pins()) | set(EXEMPT)) - known)
    assert not stale, f"Parity pins or exemptions for unregistered names: {stale}"


def test_nothing_is_both_pinned_and_exempted() -> None:
    both = sorted(set(_all_pins()) & set(EXEMPT))
    assert not both, f"Pinned and exempted at once (drop the exemption): {both}"
