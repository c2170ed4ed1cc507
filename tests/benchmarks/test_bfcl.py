"""The BFCL benchmark: problems as bfcl-eval's FC handlers ask them, graded by BFCL's own checker.

The fixture ``data/bfcl`` holds a few BFCL v4 records copied from bfcl-eval 2026.3.23's data (in its
folder layout) and ``expected_tools.json``, the tools bfcl-eval's own conversion made of them, so the
conversion is checked without bfcl-eval. Tests marked ``needs_bfcl`` run BFCL's code itself (the
environment ``make bfcl-env`` builds) and skip, saying so, where it is absent.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tts.backends.tool_calls import answer_calls
from tts.benchmarks.bfcl import (
    CATEGORIES,
    NO_CALL_ANSWER,
    BFCLSetupError,
    bfcl_python,
    category_benchmark,
    data_dir,
    load_category,
    openai_tools,
)
from tts.benchmarks.datasets import DatasetError
from tts.benchmarks.grading import Outcome
from tts.registry import BENCHMARKS

FIXTURE = Path(__file__).parent / "data" / "bfcl"


def _bfcl_env() -> Path | None:
    try:
        python = bfcl_python()
        data_dir(python)
        return python
    except BFCLSetupError:
        return None


BFCL_PYTHON = _bfcl_env()
needs_bfcl = pytest.mark.skipif(BFCL_PYTHON is None, reason="bfcl-eval's environment is absent: run `make bfcl-env` "
                                                            "(or set TTS_BFCL_PYTHON) to run BFCL's own code")


# 1. Problems and tools, from the checked-in records.

def test_tools_match_bfcl_evals_own_conversion_on_the_fixture():
    expected = json.loads((FIXTURE / "expected_tools.json").read_text())["tools"]
    seen = set()
    for category in ("simple_python", "parallel", "irrelevance", "simple_java"):
        for p in load_category(category, FIXTURE):
            assert p.metadata["tools"] == expected[p.id], p.id
            seen.add(p.id)
    assert seen == set(expected)
    # What the rules did on these records, visibly: dots -> underscores, dict -> object,
    # float -> number with a format and a note, Python / Java hints, Java types as strings.
    fact = expected["simple_python_1"][0]["function"]
    assert fact["name"] == "math_factorial" and fact["parameters"]["type"] == "object"
    assert fact["description"].endswith(" Note that the provided function is in Python 3 syntax.")
    ttest = expected["simple_python_123"][0]["function"]["parameters"]["properties"]
    floats = [v for v in ttest.values() if v.get("format") == "float"]
    assert floats and all(v["type"] == "number" and v["description"].endswith(" This is a float type value.")
                          for v in floats)
    java = expected["simple_java_1"][0]["function"]
    assert {v["type"] for v in java["parameters"]["properties"].values()} == {"string"}


def test_problems_carry_the_conversation_tools_and_one_correct_call_set():
    simple = load_category("simple_python", FIXTURE)
    p = simple[1]
    assert p.id == "simple_python_1"
    assert p.metadata["messages"] == [{"role": "user", "content": p.question}]  # no system prompt added
    assert p.metadata["category"] == "simple_python" and p.metadata["language"] == "python"
    assert p.metadata["bfcl_functions"][0]["name"] == "math.factorial"  # the checker's copy keeps the dots
    assert answer_calls(p.answer) == [{"name": "math_factorial", "arguments": {"number": 5}}]
    # simple_python_0: "unit" may be left out ("" among its possibilities) but "units" comes first.
    assert answer_calls(simple[0].answer)[0]["arguments"] == {"base": 10, "height": 5, "unit": "units"}
    parallel = load_category("parallel", FIXTURE)[0]
    assert [c["name"] for c in answer_calls(parallel.answer)] == ["spotify_play", "spotify_play"]
    for q in load_category("irrelevance", FIXTURE):
        assert q.answer == NO_CALL_ANSWER and answer_calls(q.answer) is None
        assert "bfcl_ground_truth" not in q.metadata


def test_categories_resolve_by_name_and_alias_and_bad_ones_are_refused():
    assert BENCHMARKS.load("bfcl:simple")().category == "simple_python"
    assert BENCHMARKS.load("bfcl:live_irrelevance")().category == "live_irrelevance"
    assert all(f"bfcl:{c}" in BENCHMARKS.names() for c in CATEGORIES)
    with pytest.raises(DatasetError, match="bfcl has no category 'simpel'.*simple_python"):
        category_benchmark("simpel")
    problems = BENCHMARKS.load("bfcl:simple")().load(FIXTURE, limit=2)
    assert [p.id for p in problems] == ["simple_python_0", "simple_python_1"]


def test_a_missing_environment_says_how_to_make_it(monkeypatch, tmp_path):
    monkeypatch.setenv("TTS_BFCL_PYTHON", str(tmp_path / "nope" / "python"))
    with pytest.raises(BFCLSetupError, match="make bfcl-env"):
        BENCHMARKS.load("bfcl:simple")().load()


# 2. BFCL's own code: the conversion on every entry, and the checker's verdicts.

_BFCL_TOOLS = """
import json, sys
from bfcl_eval.utils import load_dataset_entry
from bfcl_eval.model_handler.utils import convert_to_tool
from bfcl_eval.constants.type_mappings import GORILLA_TO_OPENAPI
from bfcl_eval.constants.enums import ModelStyle
out = {}
for category in sys.argv[1:]:
    for e in load_dataset_entry(category, include_prereq=False, include_language_specific_hint=True):
        out[e["id"]] = {"tools": convert_to_tool(e["function"], GORILLA_TO_OPENAPI, ModelStyle.OPENAI_COMPLETIONS),
                        "messages": e["question"][0]}
print(json.dumps(out))
"""


@needs_bfcl
def test_tools_and_messages_match_bfcl_eval_on_every_entry():
    done = subprocess.run([str(BFCL_PYTHON), "-I", "-c", _BFCL_TOOLS, *CATEGORIES], capture_output=True, text=True,
                          timeout=300, check=True)
    theirs = json.loads(done.stdout.splitlines()[-1])
    root = data_dir(BFCL_PYTHON)
    count = 0
    for category in CATEGORIES:
        for p in load_category(category, root):
            assert p.metadata["tools"] == theirs[p.id]["tools"], p.id
            assert p.metadata["messages"] == theirs[p.id]["messages"], p.id
            assert openai_tools(p.metadata["bfcl_functions"], category) == theirs[p.id]["tools"]
            count += 1
    assert count == len(theirs) > 3000


@pytest.fixture(scope="module")
def grader():
    from tts.benchmarks.bfcl_grading import BFCLGrader

    with BFCLGrader() as g:
        yield g


def _calls(*calls):
    return json.dumps([{"name": n, "arguments": a} for n, a in calls])


@needs_bfcl
def test_the_checker_grades_right_wrong_and_missing_calls(grader):
    simple = load_category("simple_python", FIXTURE)
    fact, triangle = simple[1], simple[0]
    parallel = load_category("parallel", FIXTURE)[0]
    two = answer_calls(parallel.answer)
    graded = grader.grade_problems([
        (fact, [fact.answer,
                _calls(("math_factorial", {"number": 6})),       # a wrong argument value
                _calls(("math.factorial", {"number": 5})),       # the dotted name, which was not offered
                _calls(("math_factorial", {"number": "5"})),     # a string where BFCL wants an integer
                "The factorial of 5 is 120.",                    # no call at all
                None]),
        (triangle, [_calls(("calculate_triangle_area", {"base": 10, "height": 5})),  # optional unit left out
                    _calls(("calculate_triangle_area", {"base": 10}))]),           # a required one missing
        (parallel, [parallel.answer, _calls((two[1]["name"], two[1]["arguments"]), (two[0]["name"], two[0]["arguments"])),
                    _calls((two[0]["name"], two[0]["arguments"]))]),               # order free; one call missing
    ])
    C, W, N = Outcome.CORRECT, Outcome.WRONG, Outcome.NO_ANSWER
    assert graded == [[C, W, W, W, N, N], [C, W], [C, C, W]]
    assert any("number" in str(e) for e in grader.last_errors[(fact.id, _calls(("math_factorial", {"number": 6})))])


@needs_bfcl
def test_irrelevance_is_right_only_without_a_call(grader):
    q = load_category("irrelevance", FIXTURE)[0]
    name = q.metadata["tools"][0]["function"]["name"]
    graded = grader.grade_problem(q, [NO_CALL_ANSWER, "I cannot help with that using these tools.", None, "[]",
                                      _calls((name, {}))])
    assert graded == [Outcome.CORRECT] * 4 + [Outcome.WRONG]


@needs_bfcl
def test_every_reference_answer_of_the_python_categories_passes_the_checker(grader):
    """The scripted backend's reference answers are right by BFCL's checker, except for records
    whose possible answers BFCL's own checker rejects (a required argument missing from them)."""
    root = data_dir(BFCL_PYTHON)
    for category in ("simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance", "live_parallel"):
        problems = load_category(category, root)
        graded = grader.grade_problems([(p, [p.answer]) for p in problems])
        assert [p.id for p, g in zip(problems, graded, strict=True) if g != [Outcome.CORRECT]] == [], category


@needs_bfcl
def test_a_broken_checker_environment_is_named(tmp_path):
    from tts.benchmarks.bfcl_grading import BFCLGrader

    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'no bfcl here' >&2\nexit 3\n")
    fake.chmod(0o755)
    problem = load_category("simple_python", FIXTURE)[1]
    with BFCLGrader(python=fake) as g, pytest.raises(BFCLSetupError, match="no bfcl here.*make bfcl-env"):
        g.grade_problem(problem, [problem.answer])
