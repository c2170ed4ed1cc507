import json

import pytest

from tts.benchmarks.datasets import GSM8K, MATH500, DatasetError, FileBenchmark
from tts.registry import BENCHMARKS, UnknownNameError


def test_loads_shared_math500_copy(shared_data):
    problems = MATH500().load(shared_data / "benchmarks" / "math500.jsonl", limit=5)
    assert len(problems) == 5
    assert problems[0].id == "test/precalculus/807.json"
    assert problems[0].answer == "\\left( 3, \\frac{\\pi}{2} \\right)"
    assert problems[0].metadata["level"] == 2


def test_all_shared_benchmarks_load(shared_data):
    for name, rows in (("aime2024", 30), ("aime2025", 30), ("amc2023", 40), ("gsm8k", 1319), ("math500", 500)):
        problems = BENCHMARKS.load(name)().load(shared_data / "benchmarks" / f"{name}.jsonl")
        assert len(problems) == rows and all(p.question and p.answer for p in problems)


def test_gsm8k_gold_is_the_number_after_hashes():
    assert GSM8K().clean_answer("She pays 3*2=6\n#### 1,200") == "1200"


def test_malformed_row_names_file_and_line(tmp_path):
    f = tmp_path / "d.jsonl"
    f.write_text('{"problem": "1+1", "answer": "2"}\n\n{"problem": "2+2", "answer": 4\n')
    with pytest.raises(DatasetError, match=r"d.jsonl, line 3: not valid JSON"):
        FileBenchmark().load(f)


def test_missing_field_says_which_flag_maps_it(tmp_path):
    f = tmp_path / "d.jsonl"
    f.write_text(json.dumps({"q": "1+1", "answer": "2"}) + "\n")
    with pytest.raises(DatasetError, match="line 1: no question field.*--question-field"):
        FileBenchmark().load(f)
    assert FileBenchmark().load(f, question_field="q")[0].question == "1+1"


def test_missing_file_and_duplicate_ids(tmp_path):
    with pytest.raises(DatasetError, match="does not exist"):
        FileBenchmark().load(tmp_path / "nope.jsonl")
    f = tmp_path / "d.jsonl"
    f.write_text('{"id": "a", "problem": "x", "answer": "1"}\n{"id": "a", "problem": "y", "answer": "2"}\n')
    with pytest.raises(DatasetError, match="line 2: duplicate problem id 'a'"):
        FileBenchmark().load(f)


def test_unknown_benchmark_lists_the_known_ones():
    with pytest.raises(UnknownNameError, match="Unknown benchmark 'math5000'. Did you mean 'math500'"):
        BENCHMARKS.check("math5000")
