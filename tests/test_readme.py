"""The README's first Python examples run, and print what the README says they print.

The fast tests run them on the scripted backend (its numbers are made up, so only the shape of each
printed line is compared); the heavy test runs the evaluation on the real engine and checks each
accuracy against the interval the README prints.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import tts

README = Path(__file__).resolve().parents[1] / "README.md"
NUMBER = r"-?\d+(?:\.\d+)?"


def _quickstart_blocks() -> list[tuple[str, str]]:
    """(language, text) of each fenced block of the README's Quickstart section, in order."""
    text = README.read_text()
    section = text[text.index("## Quickstart"):text.index("\n## ", text.index("## Quickstart") + 1)]
    return re.findall(r"```(\w*)\n(.*?)```", section, re.S)


def _example_and_output() -> tuple[str, list[str]]:
    """The evaluation example and the lines the README says it prints (the block after it)."""
    blocks = _quickstart_blocks()
    at = next(i for i, (lang, code) in enumerate(blocks) if lang == "python" and "tts.evaluate" in code)
    lang, printed = blocks[at + 1]
    assert lang == "", "the block after the example is what it prints"
    return blocks[at][1], printed.strip().splitlines()


def _shape(line: str) -> re.Pattern[str]:
    """A printed line with its numbers left free."""
    return re.compile("".join(NUMBER if re.fullmatch(NUMBER, part) else re.escape(part)
                              for part in re.split(f"({NUMBER})", line)) + "$")


def _run(code: str, monkeypatch, tmp_path, backend: dict | None) -> list[str]:
    """Run a README example in ``tmp_path`` (its run folder lands there), on ``backend`` when given."""
    if backend is not None:
        evaluate, solve = tts.evaluate, tts.solve
        monkeypatch.setattr(tts, "evaluate", lambda config, out, **kw: evaluate({**config, "backend": backend}, out, **kw))
        monkeypatch.setattr(tts, "solve", lambda *a, **kw: solve(*a, **{"backend": backend["kind"], **kw}))
    monkeypatch.chdir(tmp_path)
    printed: list[str] = []
    # The later examples go on from the first one's `import tts`.
    exec(compile(code, str(README), "exec"), {"tts": tts, "print": lambda *a: printed.append(" ".join(map(str, a)))})  # noqa: S102
    return printed


def test_the_first_example_prints_lines_of_the_readmes_shape(monkeypatch, tmp_path):
    code, expected = _example_and_output()
    printed = _run(code, monkeypatch, tmp_path, {"kind": "scripted"})
    assert len(printed) == len(expected) == 2
    for line, readme in zip(printed, expected, strict=True):
        assert _shape(readme).match(line), (line, readme)
    assert (tmp_path / "runs" / "first" / "results.jsonl").exists()


def test_the_one_question_example_prints_an_answer_its_share_and_readable_votes(monkeypatch, tmp_path):
    blocks = [code for lang, code in _quickstart_blocks() if lang == "python" and "tts.solve(" in code]
    assert blocks, "the Quickstart has a tts.solve example"
    printed = _run(blocks[0], monkeypatch, tmp_path, {"kind": "scripted"})
    answer, share, votes = printed[0].split(" ", 2)
    assert 0 < float(share) <= 1 and answer in votes
    # The votes are a dict of the answers as written, never an equivalence key without its spaces.
    assert votes.startswith("{") and "\\boxed{}" not in votes


@pytest.mark.heavy
def test_the_first_example_on_the_engine_is_within_the_readmes_intervals(monkeypatch, tmp_path):
    """Minutes on a 2-core CPU (40 problems x 16 samples). The README's numbers are one run on a
    float32 CPU; another dtype or CPU draws other samples, so each accuracy is checked against
    the README's interval, and the token counts against a factor of two."""
    pytest.importorskip("vllm")
    code, expected = _example_and_output()
    printed = _run(code, monkeypatch, tmp_path, None)
    for line, readme in zip(printed, expected, strict=True):
        assert _shape(readme).match(line), (line, readme)
        acc, low, high, tokens = map(float, re.findall(NUMBER, readme.split(":", 1)[1]))
        got_acc, _, _, got_tokens = map(float, re.findall(NUMBER, line.split(":", 1)[1]))
        assert low <= got_acc <= high and tokens / 2 <= got_tokens <= tokens * 2, (line, readme)
