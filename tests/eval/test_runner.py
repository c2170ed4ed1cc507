"""The eval runner on the scripted backend: ladders share samples, results resume, schema is stable."""

from __future__ import annotations

import json
from typing import Literal

from tts.backends.base import GenerationRequest, Message
from tts.backends.function import RecordingGenerator
from tts.backends.scripted import ScriptedGenerator
from tts.config import EvalConfig, SamplingStrategyConfig
from tts.eval.runner import run_eval
from tts.search.base import Strategy, to_sample
from tts.types import Solution, Trace

ROW_KEYS = {"problem_id", "config", "strategy", "model", "backend", "answer", "gold", "outcome", "correct",
            "coverage", "confidence", "usage", "trace", "allocation", "budget_spent", "metadata", "grade_reason",
            "grading_seconds"}


def _config(**kw):
    base = {
        "data": {"benchmark": "demo", "limit": 12},
        "strategies": [{"kind": "self_consistency", "n": n} for n in (1, 4, 16)]
        + [{"kind": "best_of_n", "n": n} for n in (1, 4, 16)],
        "backend": {"kind": "scripted", "accuracy": 0.45},
        "batch_size": 5,
    }
    base.update(kw)
    return EvalConfig.model_validate(base)


def test_ladder_draws_max_n_once_per_problem_and_writes_one_row_per_config(tmp_path):
    from tts.eval.runner import load_problems

    cfg = _config()
    _, problems = load_problems(cfg)
    gen = RecordingGenerator(ScriptedGenerator.for_problems(problems, accuracy=0.45, seed=0))
    result = run_eval(cfg, tmp_path, generator=gen)
    assert [r.n for r in gen.requests] == [16] * 12 and all(r.logprobs for r in gen.requests)
    rows = [json.loads(x) for x in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 12 * 6 and all(set(r) == ROW_KEYS for r in rows)
    by = {s.config: s for s in result.summaries}
    # Coverage can only grow with n; n = 1 coverage equals n = 1 accuracy for voting.
    assert by["self_consistency@1"].coverage <= by["self_consistency@4"].coverage <= by["self_consistency@16"].coverage
    assert by["self_consistency@1"].accuracy == by["self_consistency@1"].coverage
    # The n = 4 row used exactly the first 4 of the 16 samples.
    sc4 = next(r for r in rows if r["config"] == "self_consistency@4")
    sc16 = next(r for r in rows if r["config"] == "self_consistency@16" and r["problem_id"] == sc4["problem_id"])
    assert [s["text"] for s in sc4["trace"]["samples"]] == [s["text"] for s in sc16["trace"]["samples"][:4]]
    assert sc4["usage"]["completion_tokens"] < sc16["usage"]["completion_tokens"]
    manifest = json.loads((tmp_path / "run.json").read_text())
    assert manifest["config"]["backend"]["kind"] == "scripted"


def test_rerun_resumes_and_each_problem_appears_once(tmp_path):
    from tts.eval.runner import load_problems

    cfg = _config()
    _, problems = load_problems(cfg)
    # First run "dies" after 5 problems: emulate with a smaller limit sharing the directory.
    run_eval(_config(data={"benchmark": "demo", "limit": 5}), tmp_path)
    gen = RecordingGenerator(ScriptedGenerator.for_problems(problems, accuracy=0.45, seed=0))
    result = run_eval(cfg, tmp_path, generator=gen)
    assert result.skipped == 5 and len(gen.requests) == 7
    rows = [json.loads(x) for x in (tmp_path / "results.jsonl").read_text().splitlines()]
    keys = [(r["problem_id"], r["config"]) for r in rows]
    assert len(keys) == len(set(keys)) == 12 * 6


def test_a_resumed_run_with_a_smaller_limit_summarises_only_its_problems(tmp_path):
    """Rows of 12 problems stored, the run opened again with --limit 5: nothing is generated, and the
    rows and summaries are those of the first 5 problems alone."""
    full = run_eval(_config(), tmp_path)
    first5 = {f"demo-{i:03d}" for i in range(5)}
    gen = RecordingGenerator(ScriptedGenerator())
    part = run_eval(_config(data={"benchmark": "demo", "limit": 5}), tmp_path, generator=gen)
    assert gen.requests == [] and part.skipped == 5 == part.problems
    assert {r.problem_id for r in part.rows} == first5 and len(part.rows) == 5 * 6
    for summary in part.summaries:
        mine = [r for r in full.rows if r.config == summary.config and r.problem_id in first5]
        assert summary.problems == 5
        assert summary.accuracy == sum(r.correct for r in mine) / 5
        assert summary.coverage == sum(r.coverage for r in mine) / 5


class TwoStepConfig(SamplingStrategyConfig):
    kind: Literal["two_step"] = "two_step"


class TwoStep(Strategy):
    """A toy strategy with two DEPENDENT engine calls per problem: draft, then revise the draft."""

    name = "two_step"
    config_class = TwoStepConfig

    def solve(self, problems, budgets=None):
        drafts = self.generator.generate([GenerationRequest(self.prompt(p), n=1, seed=1, key=p.id) for p in problems])
        revisions = self.generator.generate([
            GenerationRequest(self.prompt(p) + (Message("assistant", d.completions[0].text),
                                                Message("user", "Check and answer again.")), n=1, seed=2, key=p.id)
            for p, d in zip(problems, drafts)])
        out = []
        for p, d, r in zip(problems, drafts, revisions):
            samples = tuple(to_sample(c, self.extract) for c in (d.completions[0], r.completions[0]))
            out.append(Solution(p.id, samples[-1].answer, 1.0, d.usage + r.usage, Trace(self.name, samples)))
        return out


def test_a_new_strategy_with_dependent_calls_runs_through_eval_and_resumes_without_runner_changes(tmp_path):
    from tts.registry import STRATEGIES

    STRATEGIES.register("two_step", TwoStep)
    try:
        cfg = _config(strategies=[{"kind": "two_step", "n": 1}, {"kind": "self_consistency", "n": 4}],
                      data={"benchmark": "demo", "limit": 3})
        from tts.eval.runner import load_problems

        _, problems = load_problems(cfg)
        gen = RecordingGenerator(ScriptedGenerator.for_problems(problems, accuracy=0.45, seed=0))
        result = run_eval(cfg, tmp_path, generator=gen)
        # Two dependent calls of the toy plus one shared draw of self-consistency per batch.
        assert len(gen.requests) == 3 * 2 + 3
        two = [r for r in result.rows if r.config == "two_step@1"]
        assert len(two) == 3 and all(r.usage.calls == 2 and len(r.trace["samples"]) == 2 for r in two)
        assert all(r.coverage == any(s["outcome"] == "correct" for s in r.trace["samples"]) for r in two)
        gen2 = RecordingGenerator(ScriptedGenerator.for_problems(problems, accuracy=0.45, seed=0))
        again = run_eval(cfg, tmp_path, generator=gen2)
        assert again.skipped == 3 and gen2.requests == [] and len(again.rows) == 6
    finally:
        STRATEGIES.unregister("two_step")


def test_the_run_seed_changes_the_samples_and_the_same_seed_repeats_them(tmp_path):
    def texts(seed, out):
        result = run_eval(_config(seed=seed, data={"benchmark": "demo", "limit": 4},
                                  strategies=[{"kind": "self_consistency", "n": 4}]), out)
        return [s["text"] for r in result.rows for s in r.trace["samples"]]

    a, b, c = texts(0, tmp_path / "a"), texts(0, tmp_path / "b"), texts(1, tmp_path / "c")
    assert a == b and a != c


def test_n1_evaluated_from_a_shared_draw_costs_what_n1_drawn_alone_costs(tmp_path):
    from tts.cost.ledger import cost_model_for

    cm = cost_model_for("smollm2-135m", "h100")
    ladder = run_eval(_config(strategies=[{"kind": "self_consistency", "n": n} for n in (1, 16)]), tmp_path / "l")
    alone = run_eval(_config(strategies=[{"kind": "self_consistency", "n": 1}]), tmp_path / "a")
    shared = {r.problem_id: r for r in ladder.rows if r.config == "self_consistency@1"}
    for r in alone.rows:
        s = shared[r.problem_id]
        assert s.trace["samples"][0]["text"] == r.trace["samples"][0]["text"]  # same first sample
        assert s.usage.shapes[0].batch_sequences == r.usage.shapes[0].batch_sequences
        assert abs(cm.cost_usage(s.usage).eflops - cm.cost_usage(r.usage).eflops) < 1e-9 * cm.cost_usage(r.usage).eflops


def test_events_inside_a_strategy_are_summed_per_config_in_the_summary():
    from tts.eval.report import summarize
    from tts.eval.rows import ResultRow
    from tts.types import Usage

    def row(pid, events):
        return ResultRow(problem_id=pid, config="beam@4", strategy={"kind": "self_consistency", "n": 4}, model="m",
                         backend="scripted", answer=None, gold="1", outcome="no_answer", correct=False,
                         coverage=False, confidence=0.0, usage=Usage(),
                         trace={"strategy": "beam", "samples": [], "events": events})

    (summary,) = summarize([row("a", {"verifier_error": 2, "forced_answer": 1}), row("b", {"forced_answer": 3}),
                            row("c", {})])
    assert summary.events == {"forced_answer": 4, "verifier_error": 2}


def test_configs_that_differ_in_any_setting_get_distinct_labels_and_equal_ones_the_same():
    from tts.config import parse_strategy_config

    configs = [{"kind": "best_of_n", "n": 8}, {"kind": "best_of_n", "n": 8, "verifier": "arithmetic"},
               {"kind": "best_of_n", "n": 8, "verifier": {"kind": "judge", "votes": 2}},
               {"kind": "best_of_n", "n": 8, "verifier": {"kind": "judge", "votes": 4}},
               {"kind": "beam", "n": 8, "verifier": {"kind": "judge", "solution_question": "Is the long solution above right?"}},
               {"kind": "beam", "n": 8, "verifier": {"kind": "judge", "solution_question": "Is the long solution above wrong?"}},
               {"kind": "revision", "n": 4, "verifier": {"kind": "judge", "votes": 2}, "select": "verifier"},
               {"kind": "revision", "n": 4, "verifier": {"kind": "judge", "votes": 4}, "select": "verifier"},
               {"kind": "generative_verification", "n": 4, "verifier": {"kind": "judge", "max_tokens": 32}},
               {"kind": "generative_verification", "n": 4, "verifier": {"kind": "judge", "max_tokens": 64}}]
    labels = [parse_strategy_config(c).label for c in configs]
    assert len(set(labels)) == len(labels), labels
    assert labels[0] == "best_of_n@8" and labels[2] == "best_of_n@8,verifier=judge(votes=2)"
    assert all(len(label) < 60 for label in labels[4:6])  # long prompt texts show as a digest
    assert parse_strategy_config(configs[3]).label == labels[3]  # stable: a resumed run finds its rows
