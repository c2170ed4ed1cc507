"""Sample pool reading: formats, validation messages, and the dense per-model arrays."""

from __future__ import annotations

import gzip
import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest

from tts.benchmarks.pool import PoolError, iter_pool_rows, load_pool

REAL_POOL = Path(__file__).resolve().parents[3] / "shared" / "data" / "pools" / "math500_reasoning_models.jsonl.gz"


def _row(pid="p1", model="m", idx=0, answer="4", correct=True, tokens=10, score=None, **extra):
    return {"problem_id": pid, "model": model, "sample_idx": idx, "answer": answer, "correct": correct,
            "num_tokens": tokens, "score": score, **extra}


ROWS = [
    _row("p1", "m", 1, "4", True, 12, 0.9, level=3),
    _row("p1", "m", 0, "5", False, 30, 0.1),
    _row("p1", "m", 2, None, None, None, None),
    _row("p2", "m", 0, "x", True, 7, 0.5),
    _row("p2", "m", 1, "x", True, 9, 0.6),
    _row("p1", "other", 0, "4", True, 100, None),
]


def _write(path: Path, rows, gz: bool = False) -> Path:
    text = "".join(json.dumps(r) + "\n" for r in rows)
    if gz:
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


def test_plain_and_gzip_read_the_same_pool(tmp_path):
    # The gzip file has a misleading name: the format is detected from the magic bytes.
    plain = load_pool(_write(tmp_path / "pool.jsonl", ROWS))
    gz = load_pool(_write(tmp_path / "p.data", ROWS, gz=True))
    assert plain.models == gz.models == ("m", "other")
    for m in plain.models:
        a, b = plain[m], gz[m]
        assert a.problem_ids == b.problem_ids
        np.testing.assert_array_equal(a.answers, b.answers)
        np.testing.assert_array_equal(a.tokens, b.tokens)
        np.testing.assert_array_equal(a.mask, b.mask)
    assert len(plain) == len(ROWS)


def test_arrays_match_the_rows(tmp_path):
    pool = load_pool(_write(tmp_path / "pool.jsonl", ROWS))
    mp = pool["m"]
    assert pool.problems("m") == ("p1", "p2")
    assert mp.answers.shape == (2, 3)
    # Samples are sorted by sample_idx; p2 has only 2 samples, so its third slot is padding.
    np.testing.assert_array_equal(mp.sample_idx, [[0, 1, 2], [0, 1, -1]])
    np.testing.assert_array_equal(mp.mask, [[True, True, True], [True, True, False]])
    assert [mp.answer_text(0, a) for a in mp.answers[0]] == ["5", "4", None]
    assert mp.answers[1, 0] == mp.answers[1, 1] >= 0 and mp.answers[1, 2] == -1
    np.testing.assert_array_equal(mp.correct, [[False, True, False], [True, True, False]])
    assert mp.tokens[0, 0] == 30 and mp.tokens[0, 1] == 12 and math.isnan(mp.tokens[0, 2])
    assert mp.scores[1, 1] == pytest.approx(0.6) and math.isnan(mp.scores[0, 2])
    assert mp.metadata[0] == {"level": 3}
    np.testing.assert_array_equal(mp.counts, [3, 2])
    np.testing.assert_allclose(mp.pass_rate(), [1 / 3, 1.0])
    assert not mp.has_tokens and pool["other"].has_tokens
    sub = mp.subset([1])
    assert sub.problem_ids == ("p2",) and sub.answers.shape == (1, 3)


@pytest.mark.parametrize(
    ("bad_line", "fragment"),
    [
        ({k: v for k, v in _row(idx=5).items() if k != "num_tokens"}, "missing field(s) num_tokens"),
        (_row(idx=1), "duplicate sample"),
        (_row(idx=5, tokens="many"), "num_tokens must be an integer"),
        (_row(idx=5, tokens=True), "num_tokens must be an integer"),
        (_row(idx=5, score="high"), "score must be a number"),
        (_row(idx="7"), "sample_idx must be an integer"),
        (_row(idx=5, correct="yes"), "correct must be true, false or null"),
        ([1, 2], "expected a JSON object"),
    ],
)
def test_validation_errors_name_file_and_line(tmp_path, bad_line, fragment):
    rows = [_row(idx=0), _row(idx=1), bad_line]
    path = _write(tmp_path / "bad.jsonl", rows)
    with pytest.raises(PoolError) as err:
        load_pool(path)
    msg = str(err.value)
    assert f"{path}:3" in msg and fragment in msg
    assert isinstance(err.value, ValueError)


def test_duplicate_names_the_first_line(tmp_path):
    path = _write(tmp_path / "dup.jsonl", [_row(idx=0), _row(idx=1), _row(idx=0)])
    with pytest.raises(PoolError, match=r"dup.jsonl:3: duplicate .*first seen on line 1"):
        load_pool(path)


def test_invalid_json_empty_and_missing_files(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(_row()) + "\n{not json\n")
    with pytest.raises(PoolError, match=r"bad.jsonl:2: not valid JSON"):
        load_pool(bad)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    with pytest.raises(PoolError, match="empty"):
        load_pool(empty)
    with pytest.raises(PoolError, match="no such pool file"):
        load_pool(tmp_path / "nope.jsonl")


def test_unknown_model_lists_the_choices(tmp_path):
    pool = load_pool(_write(tmp_path / "pool.jsonl", ROWS))
    with pytest.raises(KeyError, match="choose one of"):
        pool["gpt-5"]


@pytest.mark.skipif(not REAL_POOL.is_file(), reason="shared data not present")
def test_real_pool_subset_loads(tmp_path):
    rows = [row for _, row in itertools.islice(iter_pool_rows(REAL_POOL), 400)]
    pool = load_pool(_write(tmp_path / "subset.jsonl.gz", rows, gz=True))
    mp = pool[pool.models[0]]
    assert mp.mask.sum() == 400 and mp.has_tokens
    assert 0.5 < mp.correct[mp.mask].mean() <= 1.0
