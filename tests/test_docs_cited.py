"""What the code cites is in the repository (issue 49): a docstring or comment that sends a reader
to a document names one that ships with tts (docs/, the README), not a file only its authors have,
and a cited section (docs/architecture.md, "Honest simulation") is a heading of that document."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "tts").rglob("*.py"))
DOCUMENT = re.compile(r"[\w./-]+\.md\b")
SECTION = re.compile(r"(docs/[\w.-]+\.md)(?:'s)?,?\s+\"([^\"]+)\"")


def _exists(name: str, beside: Path) -> bool:
    return any((base / name).is_file() for base in (ROOT, beside))


def _has_section(document: Path, section: str) -> bool:
    """Whether a heading of ``document`` is ``section`` or starts with it ("Third pass" for "Third
    pass: Adaptive-Consistency's Dirichlet criterion")."""
    headings = [line.lstrip("#").strip() for line in document.read_text().splitlines() if line.startswith("#")]
    return any(h == section or h.startswith(section + ":") for h in headings)


def test_every_document_the_code_names_is_in_the_repository() -> None:
    missing = [f"{path.relative_to(ROOT)}: {name}" for path in SOURCES
               for name in DOCUMENT.findall(path.read_text()) if not _exists(name, path.parent)]
    assert missing == []


def test_every_section_the_code_cites_is_a_heading_of_its_document() -> None:
    cited = [(path, doc, " ".join(section.split())) for path in SOURCES
             for doc, section in SECTION.findall(path.read_text())]
    assert any(section == "Honest simulation" for _, _, section in cited)  # the replays' rules are cited
    wrong = [f"{path.relative_to(ROOT)}: {doc}, {section!r}" for path, doc, section in cited
             if not (ROOT / doc).is_file() or not _has_section(ROOT / doc, section)]
    assert wrong == []


def test_the_honest_simulation_rules_are_written_down() -> None:
    page = (ROOT / "docs" / "architecture.md").read_text()
    rules = page.split("## Honest simulation", 1)[1].split("\n## ", 1)[0]
    for rule in ("run-time knowledge", "Cross-fit", "`correct` only grades", "oracle"):
        assert rule in rules, rule
