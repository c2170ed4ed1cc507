"""The parts of an allocated run (tts/eval/allocated.py) called directly on a few problems: the
samples log, the per-sample usage split, the sampler's replay-then-draw, the worst-case bound,
the refusals with their exact numbers, and small whole runs."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from tts.backends.base import request_usage
from tts.backends.chat import Message
from tts.backends.function import RecordingGenerator
from tts.backends.scripted import ScriptedGenerator
from tts.budgets.pricing import make_pricer
from tts.benchmarks.demo import generate_problems
from tts.benchmarks.results_pool import write_pool
from tts.config import AllocationConfig, EvalConfig, SamplingConfig
from tts.eval.allocated import (
    ROUNDS_FILE,
    AllocationError,
    BudgetTooSmallError,
    CalibrationError,
    SamplesLog,
    _pricer,
    _Sampler,
    _split_usage,
    _WorstCase,
    online_policy,
    run_allocated_eval,
)
from tts.search.base import to_sample
from tts.search.sampling.self_consistency import SelfConsistency, SelfConsistencyConfig
from tts.types import Problem, Sample, Usage


def _read(log: SamplesLog) -> dict:
    """The log's samples with tool_calls as a tuple (JSON reads them back as a list)."""
    return {pid: [(dataclasses.replace(s, tool_calls=tuple(s.tool_calls)), u) for s, u in got]
            for pid, got in log.samples.items()}


def test_the_samples_log_reads_back_each_problems_samples_in_order_and_whether_it_finished(tmp_path):
    path = tmp_path / "samples.jsonl"
    log = SamplesLog(path, ["a", "b"])
    assert log.samples == {"a": [], "b": []} and not log.finished
    s1, s2, s3 = Sample("x", "1", 3), Sample("y", "2", 4), Sample("z", None, 5)
    u1, u2, u3 = Usage(10, 2, 3, 0.5, 1), Usage(0, 0, 4, 0.5, 1), Usage(7, 0, 5, 1.0, 1)
    log.add("a", s1, u1)
    log.add("b", s2, u2)
    log.add("a", s3, u3)
    log.flush()
    first = json.loads(path.read_text().splitlines()[0])
    assert first["problem_id"] == "a" and first["sample"]["text"] == "x" and first["usage"]["prompt_tokens"] == 10
    log.close()
    again = SamplesLog(path, ["a", "b"])
    assert _read(again) == {"a": [(s1, u1), (s3, u3)], "b": [(s2, u2)]} and not again.finished
    assert again.path == path
    again.finish()
    assert again.finished
    again.close()
    assert path.read_text().splitlines()[-1] == '{"event": "finished"}'
    only_b = SamplesLog(path, ["b"])  # a smaller run ignores other problems' samples
    assert _read(only_b) == {"b": [(s2, u2)]} and only_b.finished
    only_b.close()


def test_a_samples_log_cut_mid_line_by_a_kill_is_repaired_and_appended_to(tmp_path):
    path = tmp_path / "samples.jsonl"
    log = SamplesLog(path, ["a"])
    s1, u1 = Sample("x", "1", 3), Usage(10, 2, 3, 0.5, 1)
    log.add("a", s1, u1)
    log.flush()
    log.close()
    path.write_text(path.read_text() + '{"problem_id": "a", "sam')  # killed while writing the next one
    again = SamplesLog(path, ["a"])
    assert _read(again) == {"a": [(s1, u1)]}
    s2 = Sample("y", "2", 4)
    again.add("a", s2, u1)
    again.flush()
    again.close()
    assert _read(SamplesLog(path, ["a"])) == {"a": [(s1, u1), (s2, u1)]}


def test_an_n_sample_usage_is_split_per_sample_with_the_prompt_on_the_first():
    usage = request_usage(100, 20, [5, 7, 9], 3.0, batch_sequences=12)
    assert _split_usage(usage, 3) == [request_usage(100, 20, [5], 1.0, 12), request_usage(0, 0, [7], 1.0, 12),
                                      request_usage(0, 0, [9], 1.0, 12)]
    assert _split_usage(request_usage(8, 0, [4], 2.0), 1) == [request_usage(8, 0, [4], 2.0)]
    assert _split_usage(request_usage(8, 0, [], 2.0), 0) == []


def _price(usage: Usage) -> float:
    """The tokens unit: generated plus uncached prompt tokens."""
    return float(usage.completion_tokens + usage.prompt_tokens - usage.cached_prompt_tokens)


A, B = Problem("a", "x" * 40, "1"), Problem("b", "y" * 80, "2")
"""Prompts of 40 and 80 characters: 11 and 21 scripted tokens ("user: " and the question, 4 chars a token)."""


def _sampler(tmp_path, gen=None, max_tokens: int = 64):
    gen = gen or RecordingGenerator(ScriptedGenerator({"a": {"1": 0.5, "3": 0.5}, "b": {"2": 1.0}}, seed=0,
                                                      mean_tokens=10))
    sc = SelfConsistency(SelfConsistencyConfig(n=1), gen, lambda p: [Message("user", p.question)],
                         SamplingConfig(max_tokens=max_tokens), seed=5)
    log = SamplesLog(tmp_path / "samples.jsonl", ["a", "b"])
    return _Sampler(gen, sc, log, [A, B], _price), gen, sc, log


def test_the_sampler_hands_out_logged_samples_first_then_draws_the_rest_in_one_call(tmp_path):
    sampler, gen, sc, log = _sampler(tmp_path)
    paid = [(Sample("old1", "1", 4), request_usage(11, 0, [4], 0.1)), (Sample("old2", "3", 6), request_usage(0, 0, [6], 0.1))]
    for s, u in paid:
        log.add("a", s, u)
    assert sampler.consumed("a") == []  # in the log, not handed out yet
    got = sampler.draw([("a", 3), ("b", 2)])
    assert got[:2] == [("a", paid[0][0], 15.0), ("a", paid[1][0], 6.0)]
    (call,) = gen.calls  # the one missing sample of a and both of b, together
    assert call == [sc.request(A, n=1, drawn=2), sc.request(B, n=2, drawn=0)]
    assert call[0].seed != sc.request(A, n=1, drawn=0).seed
    (res_a, res_b) = gen.results[0]
    fresh = [("a", c, u) for c, u in zip(res_a.completions, _split_usage(res_a.usage, 1), strict=True)]
    fresh += [("b", c, u) for c, u in zip(res_b.completions, _split_usage(res_b.usage, 2), strict=True)]
    assert got[2:] == [(pid, to_sample(c, sc.extract), _price(u)) for pid, c, u in fresh]
    assert [s for s, _ in log.samples["a"]] == [paid[0][0], paid[1][0], got[2][1]]
    assert sampler.consumed("a") == log.samples["a"] and sampler.consumed("b") == log.samples["b"]
    assert len((tmp_path / "samples.jsonl").read_text().splitlines()) == 5  # flushed at once
    assert sampler.draw([("a", 0)]) == [] and len(gen.calls) == 1  # nothing wanted, nothing sent
    more = sampler.draw([("b", 1)])
    assert gen.calls[1] == [sc.request(B, n=1, drawn=2)] and [pid for pid, _, _ in more] == ["b"]
    assert sampler.used == {"a": 3, "b": 3}


def test_the_worst_case_is_max_tokens_per_sample_plus_the_exact_prompt(tmp_path):
    sampler, gen, sc, _ = _sampler(tmp_path)
    worst = _WorstCase(["a", "b"], sampler, _price, 64)
    assert worst.prompts(np.array([0, 1])) == {0: 11, 1: 21}
    assert worst(np.array([0, 1, 1]), np.array([1, 1, 3])).tolist() == [75.0, 85.0, 213.0]
    assert worst(1, np.array([2, 4])).tolist() == [149.0, 277.0]  # one problem against several k
    assert worst(np.array([[0], [1]]), np.array([[1, 2]])).tolist() == [[75.0, 139.0], [85.0, 149.0]]  # broadcast


def test_without_a_tokenizer_the_prompt_is_bounded_by_characters_then_by_what_was_seen(tmp_path, monkeypatch):
    monkeypatch.setattr("tts.eval.allocated.count_prompt_tokens", lambda generator, request: None)
    sampler, gen, sc, log = _sampler(tmp_path)
    worst = _WorstCase(["a", "b"], sampler, _price, 64)
    assert worst.prompts(np.array([0, 1])) == {0: 40, 1: 80}  # a token per character
    log.add("a", Sample("s", "1", 4), request_usage(16, 0, [4], 0.1))
    log.add("a", Sample("t", "1", 4), request_usage(0, 0, [4], 0.1))  # a later sample of the request
    assert worst.prompts(np.array([0, 1])) == {0: 40, 1: 80}  # not handed out yet: not seen
    sampler.used["a"] = 2
    # a: the tokens seen; b: its characters at 1.25 x the most tokens per character seen (16/40) + 1
    assert worst.prompts(np.array([0, 1])) == {0: 16, 1: 41}
    assert worst(np.array([1]), np.array([2])).tolist() == [41.0 + 128]
    log.add("a", Sample("u", "1", 4), request_usage(39, 0, [4], 0.1))
    sampler.used["a"] = 3
    assert worst.prompts(np.array([0, 1])) == {0: 39, 1: 81}  # 1.25 x 39/40 is capped at one per character


def test_a_gpu_unit_for_an_unknown_model_says_what_it_needs():
    with pytest.raises(AllocationError, match=r"^--budget-unit eflops needs the model's architecture and a known GPU: "):
        _pricer(AllocationConfig(budget=1e15, unit="eflops", gpu="h100"), "no-such-model")
    usage = request_usage(10, 4, [3, 5], 1.0)
    assert _pricer(AllocationConfig(budget=100), "m")(usage) == 14.0
    # GPU-seconds on the run's model and GPU: an A100 takes longer than an H100.
    a100 = _pricer(AllocationConfig(budget=1, unit="gpu_seconds", gpu="a100"), "smollm2-135m")(usage)
    h100 = _pricer(AllocationConfig(budget=1, unit="gpu_seconds", gpu="h100"), "smollm2-135m")(usage)
    assert a100 == make_pricer("gpu_seconds", "smollm2-135m", "a100").usage(usage) and a100 > h100 > 0
    # Deployed over two GPUs, as the vLLM engine's tensor_parallel_size says: priced so.
    split = _pricer(AllocationConfig(budget=1, unit="gpu_seconds", gpu="h100"), "smollm2-135m",
                    {"tensor_parallel": 2})(usage)
    assert split == make_pricer("gpu_seconds", "smollm2-135m", "h100", deployment={"tensor_parallel": 2}).usage(usage)
    assert split != h100


def test_the_online_policy_takes_every_rule_setting():
    from tts.config import ONLINE_RULE_SETTINGS

    cfg = AllocationConfig(budget=100, n_max=12, chunk=3, rule="window")
    policy = online_policy(cfg)
    assert (policy.n_max, policy.chunk) == (12, 3)
    for key in ONLINE_RULE_SETTINGS:
        assert getattr(policy, key) == getattr(cfg, key)


FOUR = generate_problems(4)
CFG4 = EvalConfig.model_validate({"data": {"benchmark": "demo", "limit": 4}, "backend": {"kind": "scripted"},
                                  "sampling": {"max_tokens": 32}})


def _run_cfg(**allocation) -> EvalConfig:
    return CFG4.model_copy(update={"allocation": AllocationConfig(**allocation)})


def _gen():
    # Two unanimous problems, two split between the gold and "0".
    dists = {p.id: ({p.answer: 1.0} if i % 2 == 0 else {p.answer: 0.5, "0": 0.5}) for i, p in enumerate(FOUR)}
    return RecordingGenerator(ScriptedGenerator(dists, seed=0, mean_tokens=12))


def _worst_prompts(gen) -> list[int]:
    from tts.eval.runner import load_problems
    from tts.prompts import chat_prompt

    bench, _ = load_problems(CFG4, FOUR)
    sc = SelfConsistency(SelfConsistencyConfig(n=1), gen, chat_prompt(bench.prompt), CFG4.sampling)
    return [gen.prompt_tokens(sc.request(p)) for p in FOUR]


def test_a_budget_below_one_worst_case_sample_each_is_refused_with_the_minimum(tmp_path):
    gen = _gen()
    need = sum(_worst_prompts(gen)) + 4 * 32
    with pytest.raises(BudgetTooSmallError) as err:
        run_allocated_eval(_run_cfg(budget=need - 1), tmp_path, generator=gen, problems=FOUR)
    assert str(err.value) == (
        f"--budget {need - 1:g} tokens is smaller than one sample per problem at its worst case ({need:.4g} tokens "
        "for 4 problems: up to --max-tokens 32 generated tokens plus the prompt each); raise --budget to at least "
        f"{need:.4g}, or lower --max-tokens or --limit.")
    assert err.value.minimum == need and gen.calls == []


def test_an_online_run_records_its_rounds_and_reports_its_spend(tmp_path):
    gen, seen = _gen(), []
    budget = 4 * 400
    res = run_allocated_eval(_run_cfg(budget=budget, n_max=6, chunk=2), tmp_path, generator=gen, problems=FOUR,
                             progress=lambda spent, total: seen.append((spent, total)))
    rounds = json.loads((tmp_path / ROUNDS_FILE).read_text())
    spent = sum(r.budget_spent for r in res.rows)
    assert set(rounds) == {"budget", "unit", "spent", "rounds"}
    assert (rounds["budget"], rounds["unit"]) == (budget, "tokens") and rounds["spent"] == pytest.approx(spent)
    assert rounds["rounds"][0] == {p.id: 2 for p in FOUR}  # one chunk each first
    assert len(seen) == len(gen.calls) and seen[-1] == (pytest.approx(spent), budget)
    assert all(total == budget and 0 < s <= budget for s, total in seen)
    by_id = {r.problem_id: r for r in res.rows}
    for pid, n in ((p.id, sum(r.get(p.id, 0) for r in rounds["rounds"])) for p in FOUR):
        assert by_id[pid].strategy["n"] == n == len(by_id[pid].trace["samples"])
    assert [r.config for r in res.rows] == ["allocated-online@1600tokens"] * 4
    # The horizon rule: four votes alike settle a problem; a split one is drawn on to n_max.
    for r in res.rows:
        first4 = {s["answer"] for s in r.trace["samples"][:4]}
        assert r.strategy["n"] == (4 if len(first4) == 1 else 6), r.problem_id
    assert sorted(r.strategy["n"] for r in res.rows) == [4, 4, 4, 6]
    (summary,) = res.summaries
    assert summary.problems == 4 and res.rows == sorted(res.rows, key=lambda r: [p.id for p in FOUR].index(r.problem_id))


def test_a_budget_of_exactly_one_worst_case_sample_each_runs_and_a_first_round_that_starves_a_problem_is_refused(
        tmp_path):
    need = sum(_worst_prompts(_gen())) + 4 * 32
    res = run_allocated_eval(_run_cfg(budget=need, n_max=8, chunk=1), tmp_path / "one", generator=_gen(), problems=FOUR)
    assert [r.strategy["n"] for r in res.rows] == [1, 1, 1, 1]
    # Chunks of 2 at the same budget: the last problem's request only fits with one sample; it runs.
    res = run_allocated_eval(_run_cfg(budget=need, n_max=8, chunk=2), tmp_path / "two", generator=_gen(), problems=FOUR)
    assert [r.strategy["n"] for r in res.rows] == [2, 2, 2, 1]
    # Chunks of 4: three problems' first chunks leave too little for any sample of the fourth.
    with pytest.raises(BudgetTooSmallError) as err:
        run_allocated_eval(_run_cfg(budget=need, n_max=8, chunk=4), tmp_path / "four", generator=_gen(), problems=FOUR)
    log = SamplesLog(tmp_path / "four" / "samples.jsonl", [p.id for p in FOUR])
    spent = sum(_price(u) for got in log.samples.values() for _, u in got)
    log.close()
    assert [len(log.samples[p.id]) for p in FOUR] == [4, 4, 4, 0]
    assert str(err.value) == (f"the budget ran out in the first round: 1 of 4 problems got no sample ({spent:.4g} of "
                              f"{need:g} tokens spent); raise --budget, or lower --chunk so that the first round "
                              "costs less.")
    assert err.value.minimum == pytest.approx(spent * 4 / 3)  # what the first round cost per fed problem, for all
    # Two problems, chunks of 4: one fed, one starved; the minimum is twice what the fed one cost.
    need2 = sum(_worst_prompts(_gen())[:2]) + 2 * 32
    with pytest.raises(BudgetTooSmallError, match="1 of 2 problems got no sample") as err:
        run_allocated_eval(_run_cfg(budget=need2, n_max=8, chunk=4), tmp_path / "pair", generator=_gen(),
                           problems=FOUR[:2])
    log = SamplesLog(tmp_path / "pair" / "samples.jsonl", [p.id for p in FOUR[:2]])
    log.close()
    assert [len(got) for got in log.samples.values()] == [4, 0]
    assert err.value.minimum == pytest.approx(2 * sum(_price(u) for _, u in log.samples[FOUR[0].id]))


def test_a_finished_run_opened_again_draws_nothing_and_returns_the_same_rows(tmp_path):
    cfg = _run_cfg(budget=4 * 200, n_max=6, chunk=2)
    first = run_allocated_eval(cfg, tmp_path, generator=_gen(), problems=FOUR)
    gen = _gen()
    again = run_allocated_eval(cfg, tmp_path, generator=gen, problems=FOUR)
    assert gen.calls == []
    assert [(r.problem_id, r.answer, r.budget_spent) for r in again.rows] == \
        [(r.problem_id, r.answer, r.budget_spent) for r in first.rows]
    assert len((tmp_path / "results.jsonl").read_text().splitlines()) == 4  # no row written twice


def _pool(path, model: str = "scripted", problems: int = 20, samples: int = 8):
    rows = []
    for i in range(problems):
        for s in range(samples):
            right = i % 2 == 0 or s % 2 == 0
            rows.append({"problem_id": f"c{i}", "model": model, "sample_idx": s, "answer": "7" if right else "0",
                         "correct": right, "num_tokens": 12, "score": None})
    return write_pool(rows, path)


def test_offline_mode_refuses_a_calibration_it_cannot_read_or_use(tmp_path):
    missing = tmp_path / "missing.jsonl"
    with pytest.raises(CalibrationError, match=rf"^--calibration {missing}: "):
        run_allocated_eval(_run_cfg(budget=1e4, mode="offline", calibration=missing), tmp_path / "r1",
                           generator=_gen(), problems=FOUR)
    two = tmp_path / "two.jsonl"
    write_pool([json.loads(line) for line in _pool(tmp_path / "x.jsonl", "x").read_text().splitlines()]
               + [json.loads(line) for line in _pool(tmp_path / "y.jsonl", "y").read_text().splitlines()], two)
    with pytest.raises(CalibrationError) as err:
        run_allocated_eval(_run_cfg(budget=1e4, mode="offline", calibration=two), tmp_path / "r2",
                           generator=_gen(), problems=FOUR)
    assert str(err.value) == f"--calibration {two} has models ('x', 'y'), none of them 'scripted'."


def test_offline_mode_uses_a_pool_of_another_model_with_a_warning(tmp_path, caplog):
    pool = _pool(tmp_path / "pool.jsonl", "other")
    with caplog.at_level("WARNING", logger="tts.eval.allocated"):
        res = run_allocated_eval(_run_cfg(budget=4 * 400, mode="offline", calibration=pool, pilot=2, n_max=6),
                                 tmp_path / "run", generator=_gen(), problems=FOUR)
    assert [r.getMessage() for r in caplog.records if r.name == "tts.eval.allocated"] == [
        "calibration pool holds model 'other', not 'scripted'; using it anyway"]
    assert [r.config for r in res.rows] == ["allocated-offline@1600tokens"] * 4


def test_offline_mode_pilots_then_draws_the_planned_rest_in_one_call(tmp_path):
    gen, seen = _gen(), []
    pool = _pool(tmp_path / "pool.jsonl")
    budget = 4 * 400
    res = run_allocated_eval(_run_cfg(budget=budget, mode="offline", calibration=pool, pilot=2, n_max=6),
                             tmp_path / "run", generator=gen, problems=FOUR,
                             progress=lambda spent, total: seen.append((spent, total)))
    assert [[r.n for r in call] for call in gen.calls][0] == [2, 2, 2, 2]  # the pilot, in one call
    plan = json.loads((tmp_path / "run" / "plan.json").read_text())
    planned = {p["problem_id"]: p["n"] for p in plan["problems"]}
    extra = {pid: n - 2 for pid, n in planned.items() if n > 2}
    assert plan["pilot"] == 2 and max(planned.values()) <= 6
    if extra:
        assert len(gen.calls) == 2 and {r.key: r.n for r in gen.calls[1]} == extra
    assert {r.problem_id: r.strategy["n"] for r in res.rows} == planned
    spent = sum(r.budget_spent for r in res.rows)
    assert seen == [(pytest.approx(spent), budget)]
    log = SamplesLog(tmp_path / "run" / "samples.jsonl", [p.id for p in FOUR])
    pilots = {pid: got[:2] for pid, got in log.samples.items()}
    log.close()
    pilot_spent = sum(_price(u) for got in pilots.values() for _, u in got)
    assert plan["budget"] == pytest.approx(budget - pilot_spent)  # the plan spends what the pilot left
    assert {p["problem_id"]: p["sample_tokens"] for p in plan["problems"]} == {
        pid: pytest.approx(sum(s.completion_tokens for s, _ in got) / 2) for pid, got in pilots.items()}
    assert (tmp_path / "run" / "samples.jsonl").read_text().splitlines()[-1] == '{"event": "finished"}'


def test_offline_mode_plans_up_to_n_max_from_a_past_run_directory_or_its_results_file(tmp_path, past_run):
    for calibration in (past_run, past_run / "results.jsonl"):
        gen = _gen()
        out = tmp_path / calibration.name
        res = run_allocated_eval(_run_cfg(budget=1e6, mode="offline", calibration=calibration, pilot=2, n_max=6), out,
                                 generator=gen, problems=FOUR)
        plan = json.loads((out / "plan.json").read_text())
        assert plan["calibration"] == {"model": "scripted", "problems": 10} and plan["ns"] == [2, 4, 6]
        # A budget this large buys every problem n_max (the 8 samples of the calibration are not offered).
        assert [r.strategy["n"] for r in res.rows] == [6, 6, 6, 6]


@pytest.fixture(scope="module")
def past_run(tmp_path_factory):
    """A past run of the same (scripted) model on 10 other problems, 8 samples each: a calibration."""
    from tts.eval.runner import run_eval

    past = tmp_path_factory.mktemp("past")
    others = generate_problems(14)[4:]
    dists = {p.id: ({p.answer: 1.0} if i % 2 == 0 else {p.answer: 0.5, "0": 0.5}) for i, p in enumerate(others)}
    cfg = CFG4.model_copy(update={"strategies": [SelfConsistencyConfig(n=8)]})
    run_eval(cfg, past, generator=ScriptedGenerator(dists, seed=3, mean_tokens=12), problems=others)
    return past


def test_offline_mode_refuses_a_budget_the_pilot_uses_up(tmp_path):
    pool = _pool(tmp_path / "pool.jsonl")
    gen = _gen()
    with pytest.raises(BudgetTooSmallError) as err:
        run_allocated_eval(_run_cfg(budget=50, mode="offline", calibration=pool, pilot=2), tmp_path / "run",
                           generator=gen, problems=FOUR)
    spent = sum(_price(u) for res in gen.results[0] for u in _split_usage(res.usage, 2))
    assert str(err.value) == (f"--budget 50 tokens is used up by the 2-sample pilot ({spent:.4g} tokens); "
                              "raise it or lower --pilot / --limit.")
    assert err.value.minimum == spent
    with pytest.raises(BudgetTooSmallError, match="is used up by the 2-sample pilot"):  # exactly used up
        run_allocated_eval(_run_cfg(budget=spent, mode="offline", calibration=pool, pilot=2), tmp_path / "run2",
                           generator=_gen(), problems=FOUR)


def test_a_run_builds_its_generator_from_the_config_closes_it_and_reports_its_rows(tmp_path, monkeypatch):
    """Without a generator, the config's backend is built for the run's problems, sampled with the
    config's sampling and seed, and closed afterwards; every row records the allocation settings."""
    import tts.backends.factory as factory

    built = []

    class _Closing(RecordingGenerator):
        closed = False

        def close(self):
            self.closed = True

    def create(backend, problems):
        built.append((backend, [p.id for p in problems]))
        gen = _Closing(_gen().inner)
        built.append(gen)
        return gen

    monkeypatch.setattr(factory, "create_generator", create)
    cfg = _run_cfg(budget=4 * 200, n_max=4, chunk=2).model_copy(update={"seed": 5})
    res = run_allocated_eval(cfg, tmp_path, problems=FOUR)
    (backend, ids), gen = built
    assert backend == cfg.backend and ids == [p.id for p in FOUR]
    assert gen.closed and gen.calls
    assert all(r.max_tokens == 32 for call in gen.calls for r in call)
    assert {r.seed for call in gen.calls for r in call} != {None}
    settings = cfg.allocation.model_dump(mode="json")
    assert all(r.allocation == settings for r in res.rows) and len(res.rows) == 4
    assert (res.out, res.problems, res.skipped) == (tmp_path, 4, 0) and res.wall_seconds > 0
    manifest = json.loads((tmp_path / "run.json").read_text())
    assert manifest["model"] == cfg.backend.model and manifest["config"] == cfg.model_dump(mode="json")
    # A generator the caller gave is the caller's to close.
    given = _Closing(_gen().inner)
    run_allocated_eval(cfg, tmp_path / "given", generator=given, problems=FOUR)
    assert not given.closed
    # The run seed reaches the requests: another seed draws with other request seeds.
    other = _Closing(_gen().inner)
    run_allocated_eval(cfg.model_copy(update={"seed": 6}), tmp_path / "seed6", generator=other, problems=FOUR)
    seeds = [[r.seed for r in call] for call in given.calls]
    assert seeds != [[r.seed for r in call] for call in other.calls][:len(seeds)]


def test_a_run_without_an_allocation_says_what_to_give_or_run_instead(tmp_path):
    from tests.eval.test_allocated import CFG

    with pytest.raises(ValueError) as info:
        run_allocated_eval(CFG, tmp_path, generator=ScriptedGenerator(), problems=generate_problems(2))
    assert str(info.value) == ("config.allocation is not set; give an allocation section (or --allocate --budget) "
                               "or run tts.eval.runner.run_eval for fixed-n strategies")


def test_a_run_killed_while_writing_its_rows_writes_each_missing_row_once_on_resume(tmp_path):
    from tests.eval.test_allocated import PROBLEMS, _cfg, _generator

    cfg = _cfg(budget=20 * 60 * 6, n_max=16)
    first = run_allocated_eval(cfg, tmp_path, generator=_generator(), problems=PROBLEMS)
    results = tmp_path / "results.jsonl"
    lines = results.read_text().splitlines()
    kept = [line for line in lines if json.loads(line)["problem_id"] in {PROBLEMS[1].id, PROBLEMS[3].id}]
    results.write_text("".join(line + "\n" for line in kept))  # two rows, not the first two, survived the kill
    again = run_allocated_eval(cfg, tmp_path, generator=RecordingGenerator(ScriptedGenerator()), problems=PROBLEMS)
    ids = [json.loads(line)["problem_id"] for line in results.read_text().splitlines()]
    assert sorted(ids) == sorted(p.id for p in PROBLEMS)  # every problem once: the kept rows not written again
    assert ids[:2] == [PROBLEMS[1].id, PROBLEMS[3].id]
    assert sorted((r.problem_id, r.answer) for r in again.rows) == sorted((r.problem_id, r.answer) for r in first.rows)


def test_answers_are_read_as_the_benchmarks_prompt_says(tmp_path):
    # HumanEval's answers are programs: a reply that only boxes a number has none (not "1").
    p = Problem("HumanEval/0", 'def f(x):\n    """Add one."""\n', 'def f(x):\n    return x + 1\n',
                {"entry_point": "f", "prompt": 'def f(x):\n    """Add one."""\n',
                 "test": "def check(c):\n    assert c(1) == 2\n"})
    cfg = EvalConfig.model_validate({"data": {"benchmark": "humaneval", "options": {"unsafe_no_sandbox": True}},
                                     "backend": {"kind": "scripted"}, "sampling": {"max_tokens": 64},
                                     "allocation": {"budget": 2000, "n_max": 4, "chunk": 2}})
    gen = ScriptedGenerator({p.id: {"1": 1.0}}, seed=0, mean_tokens=20)
    [row] = run_allocated_eval(cfg, tmp_path, generator=gen, problems=[p]).rows
    assert "\\boxed{1}" in row.trace["samples"][0]["text"]
    assert (row.answer, row.correct) == (None, False)


def test_a_run_whose_settings_hold_paths_resumes_and_its_rows_read_as_stored(tmp_path):
    from tests.eval.test_allocated import PROBLEMS, _cfg, _generator

    calibration = tmp_path / "pool.jsonl"
    write_pool([{"problem_id": f"c{i}", "model": "scripted", "sample_idx": s, "answer": str(s % (1 + i % 3)),
                 "correct": s % (1 + i % 3) == 0, "num_tokens": 40, "score": None} for i in range(9) for s in range(8)],
               calibration)
    cfg = _cfg(budget=1e6, mode="offline", calibration=calibration, n_max=8)
    first = run_allocated_eval(cfg, tmp_path / "run", generator=_generator(), problems=PROBLEMS[:4])
    assert {r.allocation["calibration"] for r in first.rows} == {str(calibration)}  # JSON values, as stored
    again = run_allocated_eval(cfg, tmp_path / "run", generator=RecordingGenerator(ScriptedGenerator()),
                               problems=PROBLEMS[:4])
    assert [r.allocation for r in again.rows] == [r.allocation for r in first.rows]


def test_a_run_prices_its_samples_for_its_model_as_its_engine_is_deployed(tmp_path):
    from tests.eval.test_allocated import PROBLEMS, _dists

    spent = {}
    for tp in (1, 2):
        cfg = EvalConfig.model_validate({
            "data": {"benchmark": "demo"}, "sampling": {"max_tokens": 64},
            "backend": {"kind": "vllm", "model": "smollm2-135m", "tensor_parallel_size": tp},
            "allocation": {"budget": 1.0, "unit": "gpu_seconds", "gpu": "h100", "n_max": 8, "chunk": 2}})
        gen = ScriptedGenerator(_dists(), seed=0, mean_tokens=40)  # stands in for the engine the config describes
        res = run_allocated_eval(cfg, tmp_path / f"tp{tp}", generator=gen, problems=PROBLEMS[:4])
        price = make_pricer("gpu_seconds", "smollm2-135m", "h100",
                            deployment={"tensor_parallel": tp} if tp > 1 else None).usage
        log = SamplesLog(tmp_path / f"tp{tp}" / "samples.jsonl", [p.id for p in PROBLEMS[:4]])
        try:
            want = {pid: sum(price(u) for _, u in got) for pid, got in log.samples.items()}
        finally:
            log.close()
        spent[tp] = {r.problem_id: r.budget_spent for r in res.rows}
        assert spent[tp] == pytest.approx(want)
        assert 0 < res.wall_seconds < 600  # the run's own duration
    assert spent[1] != spent[2]


def test_a_run_whose_settings_hold_a_tuple_resumes_and_its_rows_read_as_stored(tmp_path):
    from tests.eval.test_allocated import PROBLEMS, _cfg, _generator

    cfg = _cfg(budget=20 * 60 * 4, n_max=16, ladder=(0.9, 0.95))
    first = run_allocated_eval(cfg, tmp_path, generator=_generator(), problems=PROBLEMS[:4])
    assert {tuple(r.allocation["ladder"]) for r in first.rows} == {(0.9, 0.95)}
    assert all(isinstance(r.allocation["ladder"], list) for r in first.rows)  # JSON values, as stored
    again = run_allocated_eval(cfg, tmp_path, generator=RecordingGenerator(ScriptedGenerator()), problems=PROBLEMS[:4])
    assert [r.allocation for r in again.rows] == [r.allocation for r in first.rows]
