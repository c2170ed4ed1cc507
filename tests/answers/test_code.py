"""Code answers: the program a reply writes (fenced or bare), and the syntax-tree vote key."""

from __future__ import annotations

from tts.answers.code import CODE, code_key, extract_code, is_code
from tts.prompts import CODE_PROMPT, extract_options


def test_the_last_fenced_block_that_defines_a_function_is_the_answer():
    reply = ("First a helper:\n```python\ndef f(x):\n    return x + 1\n```\nUsage:\n```python\nprint(f(2))\n```\n"
             "Output:\n```text\n3\n```")
    assert extract_code(reply) == "def f(x):\n    return x + 1"


def test_demo_statements_are_dropped_so_they_never_run_inside_the_tests():
    reply = ("```python\nimport math\n\n@cache\ndef f(x):\n    return math.floor(x)\n\nprint(f(2.5))\n"
             "if __name__ == '__main__':\n    input()\n```")
    assert extract_code(reply) == "import math\n\n@cache\ndef f(x):\n    return math.floor(x)"


def test_bare_code_without_a_fence_stops_before_the_closing_prose():
    reply = "Sure.\ndef g(a):\n    return a * 2\n\nThis doubles its argument."
    assert extract_code(reply) == "def g(a):\n    return a * 2"


def test_a_reply_without_code_is_no_answer_not_an_error():
    assert extract_code("The answer is to loop over the list and compare neighbours.") is None
    assert extract_code("") is None
    assert extract_code("```python\nprint('only a demo')\n```") is None


def test_an_unparseable_block_is_kept_as_written_for_its_tests_to_fail():
    assert extract_code("```python\ndef f(:\n    pass\n```") == "def f(:\n    pass"


def test_programs_vote_together_when_only_comments_docstrings_or_layout_differ():
    a = 'def f(x):\n    """Add one."""\n    return x + 1  # easy'
    b = "def f(x):\n\n    return (x + 1)"
    assert code_key(a) == code_key(b)
    assert code_key(a) != code_key("def f(x):\n    return x - 1")
    assert CODE.answer_keys([a, None]) == [code_key(a), None]


def test_the_code_prompt_makes_strategies_extract_programs():
    assert is_code(extract_options(CODE_PROMPT)["extract"])
