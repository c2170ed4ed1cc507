"""The eval runner's parts called directly (tts/eval/runner.py): grading a batch into rows, the
metadata a row keeps, draw-sharing groups, the sandbox check, loading, and runs of a few problems
(progress, resume, a smaller --limit, the refusals)."""

from __future__ import annotations

import json
from typing import Literal

import pytest

from tts.backends.function import RecordingGenerator
from tts.backends.scripted import ScriptedGenerator
from tts.benchmarks.datasets import DatasetError
from tts.benchmarks.grading import GradeNote, Outcome
from tts.config import EvalConfig, SamplingStrategyConfig, parse_strategy_config
from tts.eval.runner import (
    check_sandbox,
    grade_batch,
    grade_rows,
    load_problems,
    run_eval,
    share_groups,
    short_metadata,
    solve_all,
)
from tts.search.base import Strategy
from tts.search.sampling.self_consistency import SelfConsistencyConfig
from tts.types import Problem, Sample, Solution, Trace, Usage


class _Grader:
    """Correct when the answer equals the gold, no_answer for None; one call per batch recorded."""

    def __init__(self, notes: bool = True) -> None:
        self.calls: list[list[tuple[str, list]]] = []
        if notes:
            self.note = lambda p, a: None if a == p.answer else GradeNote(f"not {p.answer}: {a}", 0.25)

    def grade_problems(self, items):
        self.calls.append([(p.id, list(answers)) for p, answers in items])
        return [[Outcome.NO_ANSWER if a is None else Outcome.CORRECT if a == p.answer else Outcome.WRONG
                 for a in answers] for p, answers in items]


def _solution(pid: str, answer, confidence: float, *answers) -> Solution:
    samples = tuple(Sample(f"text {a}", a, 3) for a in answers)
    return Solution(pid, answer, confidence, Usage(prompt_tokens=5, completion_tokens=3 * len(answers)),
                    Trace("self_consistency", samples))


P1 = Problem("p1", "q1", "7", {"k": 3, "x": 0.5, "flag": True, "short": "s" * 40, "long": "l" * 41, "ops": [1]})
P2 = Problem("p2", "q2", "9")
SC2, SC1 = SelfConsistencyConfig(n=2), SelfConsistencyConfig(n=1)


def test_a_batch_is_graded_in_one_call_answers_first_then_each_solutions_samples():
    grader = _Grader()
    sols = [[(SC2, _solution("p1", "7", 1.5, "7", "3")), (SC1, _solution("p1", None, -0.2, None))],
            [(SC2, _solution("p2", "4", 0.5, "4", "9")), (SC1, _solution("p2", "9", 1.0, "9"))]]
    rows = grade_batch([P1, P2], sols, grader, "m", "scripted")
    assert grader.calls == [[("p1", ["7", None, "7", "3", None]), ("p2", ["4", "9", "4", "9", "9"])]]
    got = [(r.problem_id, r.config, r.answer, r.gold, r.outcome, r.correct, r.coverage, r.confidence, r.grade_reason,
            r.grading_seconds) for r in rows]
    assert got == [("p1", "self_consistency@2", "7", "7", "correct", True, True, 1.0, None, None),
                   ("p1", "self_consistency@1", None, "7", "no_answer", False, False, 0.0, "not 7: None", 0.25),
                   ("p2", "self_consistency@2", "4", "9", "wrong", False, True, 0.5, "not 9: 4", 0.25),
                   ("p2", "self_consistency@1", "9", "9", "correct", True, True, 1.0, None, None)]
    samples = [[(s["answer"], s["outcome"], s["grade_reason"], s["grading_seconds"]) for s in r.trace["samples"]]
               for r in rows]
    assert samples == [[("7", "correct", None, None), ("3", "wrong", "not 7: 3", 0.25)],
                       [(None, "no_answer", "not 7: None", 0.25)],
                       [("4", "wrong", "not 9: 4", 0.25), ("9", "correct", None, None)],
                       [("9", "correct", None, None)]]
    first = rows[0]
    assert (first.model, first.backend, first.strategy) == ("m", "scripted", SC2.model_dump(mode="json"))
    assert first.usage == Usage(prompt_tokens=5, completion_tokens=6)
    assert first.metadata == {"k": 3, "x": 0.5, "flag": True, "short": "s" * 40}
    assert rows[2].metadata == {}


def test_a_grader_without_notes_leaves_every_reason_and_time_empty():
    rows = grade_rows(P2, [(SC2, _solution("p2", "4", 0.5, "4", None))], _Grader(notes=False), "m", "vllm")
    (row,) = rows
    assert (row.outcome, row.grade_reason, row.grading_seconds, row.backend) == ("wrong", None, None, "vllm")
    assert [(s["outcome"], s["grade_reason"], s["grading_seconds"]) for s in row.trace["samples"]] == [
        ("wrong", None, None), ("no_answer", None, None)]


def test_a_row_keeps_numbers_flags_and_strings_of_at_most_40_characters():
    assert short_metadata(P1) == {"k": 3, "x": 0.5, "flag": True, "short": "s" * 40}
    assert short_metadata(P2) == {}


class _Fake(Strategy):
    """A strategy that shares a draw with those of the same ``group`` and answers its own name."""

    name = "fake"
    solved: list[tuple[str, ...]] = []

    def __init__(self, tag: str, group: str, count: int | None = None) -> None:
        self.tag, self.group, self.count = tag, group, count
        self.config = SC1

    def shares_draw_with(self, other) -> bool:
        return other.group == self.group

    def solve(self, problems, budgets=None):
        raise AssertionError("the runner solves through solve_together")

    @classmethod
    def solve_together(cls, strategies, problems):
        cls.solved.append(tuple(s.tag for s in strategies))
        return [[Solution(p.id, s.tag, 1.0, Usage(), Trace("fake")) for p in problems][: s.count] for s in strategies]


def test_strategies_that_share_a_draw_are_grouped_in_order_and_each_gets_its_own_solutions():
    fakes = [_Fake("a1", "a"), _Fake("b1", "b"), _Fake("a2", "a"), _Fake("c1", "c"), _Fake("b2", "b")]
    assert share_groups(fakes) == [[0, 2], [1, 4], [3]]
    assert share_groups([]) == []
    _Fake.solved = []
    out = solve_all(fakes, [P1, P2])
    assert _Fake.solved == [("a1", "a2"), ("b1", "b2"), ("c1",)]
    assert [[s.answer for s in sols] for sols in out] == [[t, t] for t in ("a1", "b1", "a2", "c1", "b2")]
    with pytest.raises(RuntimeError, match=r"^strategy fake returned 1 solutions for 2 problems; Strategy.solve "
                                           "must return one per problem$"):
        solve_all([_Fake("a", "a"), _Fake("short", "s", count=1)], [P1, P2])


def _program_vote(**kw):
    return parse_strategy_config({"kind": "program_vote", "n": 2, **kw})


def test_without_bubblewrap_a_run_that_executes_code_is_refused_before_it_starts(monkeypatch):
    from tts.benchmarks.demo import DemoBenchmark
    from tts.benchmarks.humaneval import HumanEvalBenchmark
    from tts.execution import sandbox

    monkeypatch.setattr(sandbox, "bwrap_path", lambda: None)
    demo, humaneval = DemoBenchmark(), HumanEvalBenchmark()
    check_sandbox([SC2], demo)  # nothing runs code
    check_sandbox([_program_vote(unsafe_no_sandbox=True)], demo)  # opted out by name
    with pytest.raises(sandbox.SandboxUnavailableError) as err:
        check_sandbox([SC2, _program_vote(), _program_vote(workers=2)], demo)
    assert str(err.value) == (
        "program_vote runs model-written code in the bubblewrap sandbox, which is not installed: `apt-get install "
        "bubblewrap` (Debian/Ubuntu; `make install` does it as root), or run without isolation at your own risk "
        "with --set unsafe_no_sandbox=true (the strategies' programs).")
    with pytest.raises(sandbox.SandboxUnavailableError) as err:
        check_sandbox([_program_vote(), parse_strategy_config({"kind": "revision", "n": 2, "feedback": "execution"})],
                      humaneval)
    assert str(err.value) == (
        "program_vote, revision, humaneval's grading run model-written code in the bubblewrap sandbox, which is not "
        "installed: `apt-get install bubblewrap` (Debian/Ubuntu; `make install` does it as root), or run without "
        "isolation at your own risk with --set unsafe_no_sandbox=true (the strategies' programs) and --set "
        "data.unsafe_no_sandbox=true (grading).")
    with pytest.raises(sandbox.SandboxUnavailableError) as err:
        check_sandbox([parse_strategy_config({"kind": "revision", "n": 2, "feedback": "execution"})], demo)
    assert str(err.value).endswith("`make install` does it as root).")  # revision has no opt-out
    humaneval.configure({"unsafe_no_sandbox": True})
    check_sandbox([], humaneval)
    monkeypatch.setattr(sandbox, "bwrap_path", lambda: "/usr/bin/bwrap")
    check_sandbox([_program_vote()], HumanEvalBenchmark())


def _cfg(limit: int = 3, **kw) -> EvalConfig:
    base = {"data": {"benchmark": "demo", "limit": limit}, "backend": {"kind": "scripted"},
            "strategies": [{"kind": "self_consistency", "n": 1}, {"kind": "self_consistency", "n": 2}],
            "sampling": {"max_tokens": 32}, "batch_size": 2}
    return EvalConfig.model_validate({**base, **kw})


def test_problems_load_as_the_data_settings_say_or_as_given():
    bench, problems = load_problems(_cfg(limit=2))
    assert bench.name == "demo" and [p.id for p in problems] == ["demo-000", "demo-001"]
    given = (P1,)
    assert load_problems(_cfg(), given)[1] == [P1]
    with pytest.raises(DatasetError, match="the demo benchmark has no option steps"):
        load_problems(_cfg(data={"benchmark": "demo", "limit": 2, "options": {"steps": 3}}))
    with pytest.raises(DatasetError, match="the demo benchmark has no option steps"):
        load_problems(_cfg(data={"benchmark": "demo", "options": {"steps": 3}}), given)
    he = EvalConfig.model_validate({"data": {"benchmark": "humaneval", "options": {"unsafe_no_sandbox": True}}})
    bench, _ = load_problems(he, [P1])
    assert bench.unsafe_no_sandbox and not bench.needs_sandbox  # the option reaches the grading object


def test_a_run_reports_progress_per_batch_and_resumes_without_generating(tmp_path):
    seen = []
    gen = RecordingGenerator(ScriptedGenerator(seed=0, mean_tokens=10))
    result = run_eval(_cfg(), tmp_path, generator=gen, progress=lambda done, total: seen.append((done, total)))
    assert seen == [(0, 3), (2, 3), (3, 3)]
    assert [[r.n for r in call] for call in gen.calls] == [[2, 2], [2]]  # one shared draw per batch
    assert (result.problems, result.skipped) == (3, 0)
    assert sorted((r.problem_id, r.config) for r in result.rows) == sorted(
        (f"demo-{i:03d}", f"self_consistency@{n}") for i in range(3) for n in (1, 2))
    assert [s.config for s in result.summaries] == ["self_consistency@1", "self_consistency@2"]
    seen.clear()
    gen = RecordingGenerator(ScriptedGenerator())
    again = run_eval(_cfg(), tmp_path, generator=gen, progress=lambda done, total: seen.append((done, total)))
    assert gen.calls == [] and seen == [(3, 3)] and (again.problems, again.skipped) == (3, 3)
    assert sorted((r.problem_id, r.config, r.answer) for r in again.rows) == sorted(
        (r.problem_id, r.config, r.answer) for r in result.rows)
    more = run_eval(_cfg(limit=4), tmp_path, generator=RecordingGenerator(ScriptedGenerator()),
                    progress=lambda done, total: seen.append((done, total)))
    assert seen[1:] == [(3, 4), (4, 4)] and (more.problems, more.skipped) == (4, 3) and len(more.rows) == 8
    assert len((tmp_path / "results.jsonl").read_text().splitlines()) == 8


def test_a_smaller_limit_reports_only_its_own_problems(tmp_path):
    """Issue 48's planted bug: rows of 3 problems stored, the run opened again with --limit 2."""
    full = run_eval(_cfg(), tmp_path, generator=ScriptedGenerator(seed=0, mean_tokens=10))
    gen = RecordingGenerator(ScriptedGenerator())
    part = run_eval(_cfg(limit=2), tmp_path, generator=gen)
    assert gen.calls == [] and (part.problems, part.skipped) == (2, 2)
    first2 = {"demo-000", "demo-001"}
    assert sorted((r.problem_id, r.config) for r in part.rows) == sorted(
        (pid, f"self_consistency@{n}") for pid in first2 for n in (1, 2))
    for summary in part.summaries:
        mine = [r for r in full.rows if r.config == summary.config and r.problem_id in first2]
        assert summary.problems == 2 and summary.accuracy == sum(r.correct for r in mine) / 2
        assert summary.completion_tokens_per_problem == sum(r.usage.completion_tokens for r in mine) / 2


def test_a_config_with_an_allocation_is_sent_to_the_allocated_runner(tmp_path):
    cfg = _cfg().model_copy(update={"allocation": __import__("tts.config").config.AllocationConfig(budget=100)})
    with pytest.raises(ValueError, match=r"^this config has an allocation section, which run_eval would ignore; "
                                         r"run it with tts.eval.allocated.run_allocated_eval"):
        run_eval(cfg, tmp_path)
    assert not (tmp_path / "results.jsonl").exists()


class _ClosingConfig(SamplingStrategyConfig):
    kind: Literal["closing"] = "closing"


class _Closing(Strategy):
    """Answers the gold; records that the runner closed it, and what it was built with."""

    name = "closing"
    config_class = _ClosingConfig
    closed: list[str] = []
    built: list[tuple] = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        type(self).built.append((self.seed, self.sampling.max_tokens, kwargs.get("extract") is not None))

    def solve(self, problems, budgets=None):
        return [Solution(p.id, p.answer, 1.0, Usage(), Trace(self.name, (Sample("t", p.answer, 1),))) for p in problems]

    def close(self):
        type(self).closed.append(self.config.label)


def test_the_runner_builds_each_strategy_with_the_runs_settings_and_closes_it(tmp_path):
    from tts.registry import STRATEGIES

    STRATEGIES.register("closing", _Closing)
    _Closing.closed, _Closing.built = [], []
    try:
        cfg = _cfg(limit=2, strategies=[{"kind": "closing", "n": 1}, {"kind": "closing", "n": 3}], seed=11)
        result = run_eval(cfg, tmp_path, generator=ScriptedGenerator())
        assert _Closing.closed == ["closing@1", "closing@3"]
        assert [b[:2] for b in _Closing.built] == [(11, 32), (11, 32)]
        assert all(r.correct and r.coverage for r in result.rows) and len(result.rows) == 4
        rows = [json.loads(x) for x in (tmp_path / "results.jsonl").read_text().splitlines()]
        assert {r["model"] for r in rows} == {"scripted"} and {r["backend"] for r in rows} == {"scripted"}
    finally:
        STRATEGIES.unregister("closing")


def test_problems_load_from_a_file_with_its_field_names_and_a_benchmarks_options(tmp_path):
    path = tmp_path / "qs.jsonl"
    path.write_text("".join(json.dumps({"qid": f"x{i}", "q": f"What is {i} + 1?", "a": str(i + 1)}) + "\n"
                            for i in range(3)))
    cfg = _cfg(data={"benchmark": "jsonl", "path": str(path), "limit": 2, "id_field": "qid", "question_field": "q",
                     "answer_field": "a"})
    _, problems = load_problems(cfg)
    assert [(p.id, p.question, p.answer) for p in problems] == [("x0", "What is 0 + 1?", "1"), ("x1", "What is 1 + 1?", "2")]
    _, chains = load_problems(_cfg(data={"benchmark": "chains", "limit": 3, "options": {"steps": [2]}}))
    assert [p.metadata["k"] for p in chains] == [2, 2, 2]


def test_each_strategy_extracts_answers_as_its_benchmarks_prompt_says():
    from tts.benchmarks.humaneval import HumanEvalBenchmark
    from tts.eval.runner import build_strategies
    from tts.prompts import extract_options

    prompt = HumanEvalBenchmark().prompt
    (strategy,) = build_strategies(_cfg(), ScriptedGenerator(), prompt)[:1]
    assert strategy.extract is extract_options(prompt)["extract"]


def test_a_resumed_run_logs_how_many_problems_were_done(tmp_path, caplog):
    run_eval(_cfg(limit=2), tmp_path, generator=ScriptedGenerator(seed=0, mean_tokens=10))
    with caplog.at_level("INFO", logger="tts.eval.runner"):
        run_eval(_cfg(), tmp_path, generator=ScriptedGenerator(seed=0, mean_tokens=10))
    assert [r.getMessage() for r in caplog.records if r.name == "tts.eval.runner"] == [
        f"resuming {tmp_path}: 2 of 3 problems already done"]


class _Closable(ScriptedGenerator):
    closed = 0

    def close(self):
        type(self).closed += 1


def test_the_run_closes_the_generator_it_built_and_never_one_it_was_given(tmp_path, monkeypatch):
    built = []

    def create(backend, problems):
        built.append((backend, [p.id for p in problems]))
        return _Closable(seed=0, mean_tokens=10)

    monkeypatch.setattr("tts.backends.factory.create_generator", create)
    _Closable.closed = 0
    cfg = _cfg(limit=2)
    result = run_eval(cfg, tmp_path / "own")
    assert built == [(cfg.backend, ["demo-000", "demo-001"])] and _Closable.closed == 1
    assert result.out == tmp_path / "own" and 0 <= result.wall_seconds < 120
    manifest = json.loads((tmp_path / "own" / "run.json").read_text())
    assert manifest["model"] == cfg.backend.model
    given = _Closable(seed=0, mean_tokens=10)
    run_eval(cfg, tmp_path / "given", generator=given)
    assert _Closable.closed == 1  # the caller's generator stays open


def test_problems_given_to_the_run_are_the_ones_it_solves(tmp_path):
    gen = RecordingGenerator(ScriptedGenerator(seed=0, mean_tokens=10))
    result = run_eval(_cfg(limit=3), tmp_path, generator=gen, problems=[P1, P2])
    assert sorted({r.problem_id for r in result.rows}) == ["p1", "p2"] and result.problems == 2
    assert [r.key for call in gen.calls for r in call] == ["p1", "p2"]


def test_a_run_over_a_data_file_resumes_from_its_manifest(tmp_path):
    path = tmp_path / "qs.jsonl"
    path.write_text("".join(json.dumps({"id": f"x{i}", "question": f"What is {i} + 1?", "answer": str(i + 1)}) + "\n"
                            for i in range(2)))
    cfg = _cfg(data={"benchmark": "jsonl", "path": str(path)})
    run_eval(cfg, tmp_path / "run", generator=ScriptedGenerator(seed=0, mean_tokens=10))
    assert json.loads((tmp_path / "run" / "run.json").read_text())["config"]["data"]["path"] == str(path)
    again = run_eval(cfg, tmp_path / "run", generator=RecordingGenerator(ScriptedGenerator()))
    assert (again.problems, again.skipped) == (2, 2)  # the manifest read back equals the config: resumed


def test_a_run_of_a_strategy_with_a_list_setting_resumes_from_its_manifest(tmp_path):
    cfg = _cfg(limit=1, strategies=[{"kind": "ab_mcts", "n": 2}])  # models: a tuple in the config, a list in run.json
    first = run_eval(cfg, tmp_path, generator=ScriptedGenerator(seed=0, mean_tokens=10))
    stored = json.loads((tmp_path / "results.jsonl").read_text().splitlines()[0])
    assert first.rows[0].strategy == stored["strategy"]  # the row returned is the row written (lists, not tuples)
    again = run_eval(cfg, tmp_path, generator=RecordingGenerator(ScriptedGenerator()))
    assert (again.problems, again.skipped) == (1, 1)
