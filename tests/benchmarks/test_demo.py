import re

from tts.benchmarks.demo import DemoBenchmark, generate_problems


def test_demo_set_is_deterministic_and_its_gold_answers_are_right():
    a, b = DemoBenchmark().load(), DemoBenchmark().load()
    assert a == b and len(a) == 100 and len({p.id for p in a}) == 100
    for p in a:
        numbers = [int(x) for x in re.findall(r"\d+", p.question)]
        assert int(p.answer) == sum(numbers)
    kinds = [p.metadata["kind"] for p in a]
    assert kinds.count("word") == kinds.count("sum3") == 50


def test_limit_takes_a_prefix():
    assert DemoBenchmark().load(limit=7) == generate_problems(100)[:7]


def test_prompt_examples_end_in_the_answer_format():
    prompt = DemoBenchmark.prompt
    assert all(a.endswith(f"The answer is {a.split()[-1].rstrip('.')}.") for _, a in prompt.few_shot)
    msgs = prompt.render(generate_problems(1)[0])
    assert msgs[-1].role == "user" and len(msgs) == 2 * len(prompt.few_shot) + 1


def test_the_generated_benchmarks_take_a_limit_refuse_one_below_1_and_read_a_file_instead(tmp_path):
    import json

    import pytest

    from tts.benchmarks.datasets import DatasetError
    from tts.benchmarks.stories import StoriesBenchmark
    from tts.benchmarks.stories import generate_problems as stories

    assert len(DemoBenchmark().load()) == 100 and StoriesBenchmark().load() == stories(100)
    assert StoriesBenchmark().load(limit=6) == stories(6)
    for bench in (DemoBenchmark(), StoriesBenchmark()):
        with pytest.raises(DatasetError, match="--limit must be at least 1, got 0"):
            bench.load(limit=0)
    data = tmp_path / "own.jsonl"
    data.write_text(json.dumps({"id": "x", "question": "What is 1 + 1?", "answer": "2"}) + "\n")
    assert [(p.id, p.answer) for p in StoriesBenchmark().load(data)] == [("x", "2")]
