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
