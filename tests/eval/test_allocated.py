"""Budgeted eval (--allocate) on the scripted backend."""

from __future__ import annotations

import json

import pytest

from tts.backends.scripted import ScriptedGenerator
from tts.benchmarks.demo import generate_problems
from tts.config import EvalConfig, SelfConsistencyConfig
from tts.eval.allocated import BudgetError, run_allocated_eval

PROBLEMS = generate_problems(20)
CFG = EvalConfig.model_validate({"data": {"benchmark": "demo", "limit": 20}, "backend": {"kind": "scripted"},
                                 "sampling": {"max_tokens": 64}})


def _generator():
    # Half the problems are unanimous, half are contested between the gold and one wrong answer.
    dists = {}
    for i, p in enumerate(PROBLEMS):
        dists[p.id] = {p.answer: 1.0} if i % 2 == 0 else {p.answer: 0.4, "0": 0.3, "1": 0.25}
    return ScriptedGenerator(dists, seed=0, mean_tokens=40)


@pytest.mark.parametrize("chunk", [1, 4])
def test_budget_is_never_exceeded_and_goes_to_contested_problems(tmp_path, chunk):
    budget = 20 * 60 * 8
    res = run_allocated_eval(CFG, tmp_path, budget, "tokens", n_max=32, generator=_generator(), problems=PROBLEMS,
                             chunk=chunk)
    rows = {r["problem_id"]: r for r in res.rows}
    assert len(rows) == 20
    assert sum(r["budget_spent"] for r in rows.values()) <= budget
    easy = [rows[p.id]["strategy"]["n"] for i, p in enumerate(PROBLEMS) if i % 2 == 0]
    hard = [rows[p.id]["strategy"]["n"] for i, p in enumerate(PROBLEMS) if i % 2 == 1]
    # Unanimous votes stop early; the saved budget buys samples for contested ones.
    assert sum(hard) > 1.5 * sum(easy)
    assert all(r["correct"] for i, r in enumerate(rows[p.id] for p in PROBLEMS) if i % 2 == 0)


def test_resume_replays_paid_samples(tmp_path):
    budget = 20 * 60 * 6
    first = run_allocated_eval(CFG, tmp_path, budget, "tokens", n_max=16, generator=_generator(), problems=PROBLEMS)
    log_lines = (tmp_path / "samples.jsonl").read_text().splitlines()
    # Simulate a kill before results were written: drop results, keep the samples log.
    (tmp_path / "results.jsonl").unlink()

    class NoMoreCalls(ScriptedGenerator):
        def generate(self, requests):
            raise AssertionError("a resumed run must not pay again for samples it already has")

    again = run_allocated_eval(CFG, tmp_path, budget, "tokens", n_max=16, generator=NoMoreCalls(), problems=PROBLEMS)
    assert [r["answer"] for r in again.rows] == [r["answer"] for r in first.rows]
    assert (tmp_path / "samples.jsonl").read_text().splitlines() == log_lines
    assert log_lines[-1] == '{"event": "finished"}'


def test_killed_run_continues_from_its_samples_log(tmp_path):
    budget = 20 * 60 * 6
    run_allocated_eval(CFG, tmp_path, budget, "tokens", n_max=16, generator=_generator(), problems=PROBLEMS)
    lines = (tmp_path / "samples.jsonl").read_text().splitlines()
    # Kill mid-run: keep the first 30 samples and half of the 31st line, no results.
    (tmp_path / "samples.jsonl").write_text("\n".join(lines[:30]) + "\n" + lines[30][:20])
    (tmp_path / "results.jsonl").unlink()
    again = run_allocated_eval(CFG, tmp_path, budget, "tokens", n_max=16, generator=_generator(), problems=PROBLEMS)
    assert sum(r["budget_spent"] for r in again.rows) <= budget
    assert sorted(r["problem_id"] for r in again.rows) == sorted(p.id for p in PROBLEMS)
    assert all(json.loads(x) for x in (tmp_path / "samples.jsonl").read_text().splitlines())


@pytest.mark.parametrize("budget, message", [(0, "positive"), (-5, "positive"), (100, "smaller than one sample per problem")])
def test_bad_budgets_are_refused(tmp_path, budget, message):
    with pytest.raises(BudgetError, match=message):
        run_allocated_eval(CFG, tmp_path, budget, "tokens", generator=_generator(), problems=PROBLEMS)


def test_eflops_budget_is_priced_by_the_cost_model(tmp_path):
    cfg = CFG.model_copy(update={"backend": CFG.backend.model_copy(update={"model": "smollm2-135m"})})
    res = run_allocated_eval(cfg, tmp_path, 5e14, "eflops", gpu="h100", n_max=8, generator=_generator(),
                             problems=PROBLEMS)
    spent = sum(r["budget_spent"] for r in res.rows)
    assert 0 < spent <= 5e14
    assert json.loads((tmp_path / "run.json").read_text())["config"]["allocate"]["unit"] == "eflops"


def test_offline_mode_plans_from_pilot_and_a_past_run(tmp_path):
    from tts.eval.runner import run_eval

    # A past run of the "same model" on other problems is the calibration pool.
    past = tmp_path / "past"
    others = generate_problems(60)[20:]
    dists = {p.id: ({p.answer: 1.0} if i % 2 == 0 else {p.answer: 0.4, "0": 0.3, "1": 0.25})
             for i, p in enumerate(others)}
    past_cfg = CFG.model_copy(update={"strategies": [SelfConsistencyConfig(n=16)]})
    run_eval(past_cfg, past, generator=ScriptedGenerator(dists, seed=9, mean_tokens=40), problems=others)

    budget = 20 * 40 * 8
    res = run_allocated_eval(CFG, tmp_path / "run", budget, "tokens", generator=_generator(), problems=PROBLEMS,
                             mode="offline", calibration=past, pilot=4)
    rows = {r["problem_id"]: r for r in res.rows}
    assert all(r["strategy"]["n"] >= 4 for r in rows.values())
    easy = [rows[p.id]["strategy"]["n"] for i, p in enumerate(PROBLEMS) if i % 2 == 0]
    hard = [rows[p.id]["strategy"]["n"] for i, p in enumerate(PROBLEMS) if i % 2 == 1]
    assert sum(hard) > sum(easy)
    plan = json.loads((tmp_path / "run" / "plan.json").read_text())
    assert plan["pilot"] == 4


def test_offline_mode_needs_a_calibration_source(tmp_path):
    with pytest.raises(BudgetError, match="needs --calibration"):
        run_allocated_eval(CFG, tmp_path, 1e5, "tokens", generator=_generator(), problems=PROBLEMS, mode="offline")


def test_a_pessimistic_prior_does_not_starve_later_problems(tmp_path):
    # max_tokens 256 makes the first cost estimate ~6x the real sample length; once real costs are
    # known, the problems left out of the first round must still get whole chunks, not single
    # samples that each pay the prompt again.
    cfg = CFG.model_copy(update={"sampling": CFG.sampling.model_copy(update={"max_tokens": 256})})
    sizes = []

    class Counting(ScriptedGenerator):
        def generate(self, requests):
            sizes.extend(r.n for r in requests)
            return super().generate(requests)

    gen = Counting({p.id: {p.answer: 1.0} for p in PROBLEMS}, seed=0, mean_tokens=20)
    res = run_allocated_eval(cfg, tmp_path, 20 * 8 * 60, "tokens", n_max=8, generator=gen,
                             problems=PROBLEMS, chunk=4)
    assert min(r["strategy"]["n"] for r in res.rows) >= 4
    assert sizes.count(4) >= len(PROBLEMS)  # every problem's first chunk came as one request
