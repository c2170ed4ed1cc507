"""The ``chains`` benchmark: a seeded generator with k in the metadata, a prompt of one equation per
step, the arithmetic verifier's view of a chain (and its noise knob), the scripted model that works
chains out step by step, and every registered strategy end to end on it."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tts.answers import extract_answer
from tts.answers.exact import exact_value
from tts.backends.base import GenerationRequest
from tts.backends.scripted import ScriptedGenerator
from tts.benchmarks.chains import CHAINS_PROMPT, MAX_VALUE, STEP_SEPARATOR, ChainsBenchmark, generate_problems
from tts.benchmarks.datasets import DatasetError
from tts.cli.app import app
from tts.config import EvalConfig
from tts.eval.runner import run_eval
from tts.graphs.graph import load_graph_file
from tts.search.base import STEP_SEPARATOR as SEARCH_SEPARATOR
from tts.types import Problem
from tts.verifiers.arithmetic import ArithmeticConfig, ArithmeticVerifier
from tts.verifiers.base import VerifyItem

ROOT = Path(__file__).resolve().parents[2]


def _replay(problem: Problem) -> int:
    value = problem.metadata["start"]
    for op in problem.metadata["ops"].split(";"):
        value = exact_value(f"{value} {op}")
        assert value == int(value) and 0 <= value <= MAX_VALUE
    return int(value)


def test_the_generator_is_seeded_cycles_through_the_lengths_and_its_gold_is_the_chain_value():
    a, b = generate_problems(40), generate_problems(40)
    assert [(p.id, p.question, p.answer) for p in a] == [(p.id, p.question, p.answer) for p in b]
    assert [p.question for p in generate_problems(40, seed=1)] != [p.question for p in a]
    assert [p.metadata["k"] for p in a[:16]] == [*range(1, 9)] * 2
    for p in a:
        assert len(p.metadata["ops"].split(";")) == p.metadata["k"]
        lines = p.question.splitlines()  # "Start with s.", one numbered line per operation, the question
        assert len(lines) == p.metadata["k"] + 2 and lines[-2].startswith(f"{p.metadata['k']}. ")
        assert int(p.answer) == _replay(p)


def test_options_choose_lengths_and_seed_and_bad_ones_say_what_to_write():
    bench = ChainsBenchmark()
    assert {p.metadata["k"] for p in bench.load(limit=12, steps=[2, 7])} == {2, 7}
    assert {p.metadata["k"] for p in bench.load(limit=5, steps=6)} == {6}
    assert bench.load(limit=3, seed=5)[0].id == "chains-5-0000"
    assert len(bench.load()) == ChainsBenchmark.size
    with pytest.raises(DatasetError, match="give chain lengths from 1 to 32"):
        bench.load(limit=3, steps=[0, 3])
    with pytest.raises(DatasetError, match="give chain lengths"):
        bench.load(limit=3, steps="many")
    with pytest.raises(DatasetError, match="no option level; it takes: steps, seed"):
        bench.load(limit=3, level=3)


def test_the_prompt_writes_one_equation_per_step_at_the_search_separator_and_the_tool_checks_every_step():
    assert STEP_SEPARATOR == SEARCH_SEPARATOR
    verifier = ArithmeticVerifier()
    for question, solution in CHAINS_PROMPT.few_shot:
        steps = solution.split(STEP_SEPARATOR)
        assert steps[-1].startswith("The answer is ") and all(s.count("=") == 1 for s in steps[:-1])
        assert [s.split(".")[0] for s in steps[:-1]] == [str(i) for i in range(1, len(steps))]
        assert len(steps) + 1 == len(question.splitlines())
        score = verifier.score([VerifyItem(Problem("x", question), tuple(steps), finished=True)])[0]
        assert score.step_scores[:-1] == (1.0,) * (len(steps) - 1) and score.score == 1.0
        assert score.step_scores[-1] == ArithmeticConfig().neutral  # the answer line states no equality
        assert extract_answer(solution) == steps[-1].removeprefix("The answer is ").rstrip(".")


def test_the_verifier_scores_a_wrong_step_zero_and_the_rest_one():
    steps = ("1. 7 + 5 = 12", "2. 12 * 2 = 25", "3. 25 - 3 = 22", "The answer is 22.")
    score = ArithmeticVerifier().score([VerifyItem(Problem("x", "q"), steps, finished=True)])[0]
    assert score.step_scores == (1.0, 0.0, 1.0, 0.5) and score.score == 0.0


def test_noise_flips_checked_steps_at_its_rate_the_same_way_every_time():
    p, trials = 0.3, 4000
    noisy = ArithmeticVerifier(ArithmeticConfig(noise=p, noise_seed=3))
    items = [VerifyItem(Problem(f"p{i}", "q"), (f"{i} + 1 = {i + 1}", "The answer is 1.")) for i in range(trials)]
    scores = noisy.score(items)
    flipped = sum(s.step_scores[0] == 0.0 for s in scores)
    assert abs(flipped - p * trials) < 4 * math.sqrt(trials * p * (1 - p))  # binomial, 4 sigma
    assert all(s.step_scores[1] == 0.5 for s in scores)  # no equality, nothing to flip
    assert [s.step_scores for s in noisy.score(items[:50])] == [s.step_scores for s in scores[:50]]
    other = ArithmeticVerifier(ArithmeticConfig(noise=p, noise_seed=4)).score(items[:200])
    assert [s.step_scores for s in other] != [s.step_scores for s in scores[:200]]
    clean = ArithmeticVerifier(ArithmeticConfig(noise=0.0)).score(items[:50])
    assert all(s.step_scores[0] == 1.0 for s in clean)


def _chain_request(problem: Problem, n: int, continuation: str = "", stop: tuple[str, ...] = ()) -> GenerationRequest:
    return GenerationRequest(messages=CHAINS_PROMPT.render(problem), n=n, max_tokens=200, temperature=0.7,
                             key=problem.id, continuation=continuation, stop=stop)


def test_the_scripted_model_works_chains_out_with_slips_at_its_step_accuracy():
    problems = generate_problems(64, steps=[5])
    gen = ScriptedGenerator.for_problems(problems, step_accuracy=0.8)
    verifier = ArithmeticVerifier()
    right, steps_total, steps_right, caught = 0, 0, 0, Counter()
    for problem, result in zip(problems, gen.generate([_chain_request(p, 8) for p in problems]), strict=True):
        for c in result.completions:
            steps = c.text.split(STEP_SEPARATOR)
            assert len(steps) == 6 and c.finish_reason == "stop"
            right += extract_answer(c.text) == problem.answer
            value = problem.metadata["start"]
            for i, (op, step) in enumerate(zip(problem.metadata["ops"].split(";"), steps, strict=False), start=1):
                expected = f"{i}. {value} {op} = {format(float(exact_value(f'{value} {op}')), 'g')}"
                steps_total += 1
                steps_right += step == expected
                if step != expected:
                    scored = verifier.score([VerifyItem(problem, (step,))])[0].score
                    caught[scored] += 1
                value = format(float(step.rsplit("=", 1)[1]), "g")  # a slip's value is carried on
    assert abs(steps_right / steps_total - 0.8) < 0.03
    assert abs(right / (64 * 8) - 0.8 ** 5) < 0.08
    assert caught[0.0] > 0 and caught[1.0] > 0  # misstated results are caught, wrong operations are not


def test_the_scripted_model_continues_a_partial_chain_one_step_at_a_time():
    problem = generate_problems(1, steps=[3])[0]
    ops = problem.metadata["ops"].split(";")
    gen = ScriptedGenerator.for_problems([problem], step_accuracy=1.0)
    start = problem.metadata["start"]
    first = f"1. {start} {ops[0]} = 99"  # a slip: the continuation carries 99 on
    result = gen.generate([_chain_request(problem, 2, first + STEP_SEPARATOR, stop=(STEP_SEPARATOR,))])[0]
    for c in result.completions:
        assert c.text == f"2. 99 {ops[1]} = {int(exact_value(f'99 {ops[1]}'))}" and not c.ended_by_eos
    done = first + STEP_SEPARATOR + "2. 1 + 1 = 2" + STEP_SEPARATOR + "3. 2 + 1 = 3" + STEP_SEPARATOR
    last = gen.generate([_chain_request(problem, 1, done, stop=(STEP_SEPARATOR,))])[0].completions[0]
    assert last.text == "The answer is 3." and last.ended_by_eos


CODING_ONLY = {"codet", "exec_vote", "public_tests"}
"""Strategies that run a coding problem's own examples (refused on chains, which has none; their own
tests run them on HumanEval); program_vote and tir do run here."""


def _strategy_configs(tmp_path: Path) -> list[dict]:
    from tests.budgets.test_cross_strategy import _write_pool
    from tts.registry import STRATEGIES

    configs = []
    for name in STRATEGIES.names():
        if name in CODING_ONLY:
            continue
        if name == "graph":
            spec = load_graph_file(ROOT / "examples" / "graphs" / "sample_then_fuse.yaml")
            configs.append({"kind": "graph", "graph": spec.model_dump(mode="json")})
        elif name == "auto":
            configs.append({"kind": "auto", "budget": 2000, "calibration": str(_write_pool(tmp_path / "cal.jsonl"))})
        else:
            configs.append({"kind": name, "n": 4})
    return configs


def test_every_registered_strategy_runs_on_chains_and_searches_branch_at_the_equations(tmp_path):
    configs = _strategy_configs(tmp_path)
    cfg = EvalConfig.model_validate({"data": {"benchmark": "chains", "limit": 8}, "backend": {"kind": "scripted"},
                                     "sampling": {"max_tokens": 160}, "strategies": configs})
    result = run_eval(cfg, tmp_path / "run")
    assert len(result.summaries) == len(configs)
    rows = [json.loads(line) for line in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 8 * len(configs) and all(r["usage"]["completion_tokens"] > 0 for r in rows)
    by_strategy = Counter(r["strategy"]["kind"] for r in rows if r["answer"] is not None)
    # Every strategy answers some chains; tool_vote too: with no tools offered, its replies are
    # answered as the other votes answer them.
    assert set(by_strategy) == {c["kind"] for c in configs}
    beam = [r for r in rows if r["strategy"]["kind"] == "beam" and r["problem_id"].endswith(("5", "6", "7"))]
    for row in beam:  # steps of the tree are single equations: the search branched at the separator
        steps = [n["text"] for n in row["trace"]["tree"] if "=" in n["text"] and not n["forced"]]
        assert steps and all(s.count("=") == 1 and STEP_SEPARATOR not in s.strip() for s in steps)


def test_tts_eval_takes_the_chains_options_from_set(tmp_path):
    r = CliRunner().invoke(app, ["eval", "--benchmark", "chains", "--backend", "scripted", "--limit", "4", "-n", "2",
                                 "--set", "data.steps=[3]", "--out", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output
    manifest = json.loads((tmp_path / "o" / "run.json").read_text())
    assert manifest["config"]["data"]["options"] == {"steps": [3]}
    bad = CliRunner().invoke(app, ["eval", "--benchmark", "demo", "--backend", "scripted", "--limit", "2",
                                   "--set", "data.steps=3", "--out", str(tmp_path / "d")])
    assert bad.exit_code != 0 and "the demo benchmark has no option steps; it takes none" in bad.output


def test_a_worked_solution_numbers_each_equation_and_carries_the_whole_value_on():
    from tts.benchmarks.chains import _solution

    assert _solution(7, ("+ 5", "* 2", "- 3")) == "1. 7 + 5 = 12\n\n2. 12 * 2 = 24\n\n3. 24 - 3 = 21\n\nThe answer is 21."
    assert _solution(6, ("/ 2", "+ 8")) == "1. 6 / 2 = 3\n\n2. 3 + 8 = 11\n\nThe answer is 11."
    assert _solution(4, ()) == "The answer is 4."


class _Recorder:
    """A stand-in for random.Random that records what ``_next_op`` offers and picks the first."""

    def choices(self, population, weights=None):
        self.offered, self.weights = list(population), weights
        return [population[0]]


def _offered(value: int) -> tuple[list[str], list[float] | None]:
    from tts.benchmarks.chains import _next_op

    rng = _Recorder()
    assert _next_op(value, rng) == rng.offered[0]
    return rng.offered, rng.weights


def test_each_step_offers_exactly_the_operations_that_keep_the_value_whole_and_in_0_to_60():
    adds = [f"+ {a}" for a in range(1, 10)]
    takes = [f"- {a}" for a in range(1, 10)]
    assert _offered(0) == (adds, [1.0] * 9)  # nothing to take away, double, triple or halve
    assert _offered(1) == ([*adds, "- 1"], [1.0] * 10)  # 1 - 1 = 0 is allowed; doubling needs 2 or more
    assert _offered(2) == ([*adds, "- 1", "- 2", "* 2", "* 3", "/ 2"], [1.0] * 11 + [3.0] * 3)
    assert _offered(9) == ([*adds, *takes, "* 2", "* 3"], [1.0] * 18 + [3.0] * 2)  # odd: no halving
    assert _offered(20)[0] == [*adds, *takes, "* 2", "* 3", "/ 2"]  # 20 * 3 = 60, the top, is allowed
    assert _offered(21)[0] == [*adds, *takes, "* 2"]
    assert _offered(30)[0] == [*adds, *takes, "* 2", "/ 2"]
    assert _offered(51)[0] == [*adds, *takes]  # 51 + 9 = 60
    assert _offered(52)[0] == [*adds[:8], *takes, "/ 2"]
    assert _offered(60) == ([*takes, "/ 2"], [1.0] * 9 + [3.0])


def test_chains_start_from_2_to_9():
    assert {p.metadata["start"] for p in generate_problems(400)} == set(range(2, 10))


def test_chain_lengths_from_1_to_32_are_taken_and_others_refused_with_the_whole_message():
    bench = ChainsBenchmark()
    assert [p.metadata["k"] for p in bench.load(limit=2, steps=[1, 32])] == [1, 32]
    for bad in (0, 33, 2.5, [4, 33]):
        with pytest.raises(DatasetError) as err:
            bench.load(limit=2, steps=bad)
        assert str(err.value) == (f"chains option steps={bad!r}: give chain lengths from 1 to 32, one number or a "
                                  "list (--set data.steps=6, --set 'data.steps=[1,4,8]').")


def test_limit_and_seed_are_checked_and_the_default_seed_is_0():
    bench = ChainsBenchmark()
    one = bench.load(limit=1)
    assert [p.id for p in one] == ["chains-0-0000"] and one[0].question == generate_problems(1)[0].question
    with pytest.raises(DatasetError, match=r"^--limit must be at least 1, got 0$"):
        bench.load(limit=0)
    for bad in ("1", True, 1.5):
        with pytest.raises(DatasetError) as err:
            bench.load(limit=1, seed=bad)
        assert str(err.value) == f"chains option seed={bad!r}: give a whole number (--set data.seed=1)."


def test_a_chains_file_is_loaded_with_its_limit_and_field_names(tmp_path):
    path = tmp_path / "chains.jsonl"
    path.write_text("".join(json.dumps({"qid": f"c{i}", "q": f"Start with {i}.\n1. Add 1.\nWhat is the result?",
                                        "a": str(i + 1)}) + "\n" for i in range(3)))
    problems = ChainsBenchmark().load(path, 2, "qid", "q", "a")
    assert [(p.id, p.answer) for p in problems] == [("c0", "1"), ("c1", "2")]
