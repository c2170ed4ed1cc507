"""docs/architecture.md's "Where to add things" says all that a new strategy or verifier owes
(issue 49): the parity coverage entry, and every class attribute tts reads off a strategy or a
verifier, several of them through ``getattr`` with a default, so that one left out is no error but
a quietly different behaviour."""

from __future__ import annotations

from pathlib import Path

from tts.search.base import SamplingStrategy, Strategy

ROOT = Path(__file__).resolve().parents[1]


def _where_to_add() -> str:
    page = (ROOT / "docs" / "architecture.md").read_text()
    return page.split("## Where to add things", 1)[1].split("\n## ", 1)[0]


def _class_attributes(cls: type) -> set[str]:
    """The ``ClassVar`` declarations of ``cls`` itself: what a subclass declares to tts."""
    return {name for name, hint in vars(cls).get("__annotations__", {}).items() if "ClassVar" in str(hint)}


def test_every_class_attribute_a_strategy_declares_is_named_where_strategies_are_added() -> None:
    declared = _class_attributes(Strategy) | _class_attributes(SamplingStrategy)
    assert {"name", "config_class", "pool_rule", "takes_tools"} <= declared  # the check reads the real class
    section = _where_to_add()
    assert sorted(a for a in declared if f"`{a}`" not in section) == []


def test_the_section_names_what_else_a_strategy_or_verifier_needs() -> None:
    section = _where_to_add()
    assert (ROOT / "tests" / "parity" / "test_registry_coverage.py").is_file()
    for needed in ("tests/parity/test_registry_coverage.py", "`PINNED`", "`EXEMPT`", "`budget_use`",
                   "`step_verifier`", "`request_top_logprobs`", "`planned_requests", "`runs_code`"):
        assert needed in section, needed
