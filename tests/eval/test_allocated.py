"""Budgeted eval (--allocate) on the scripted backend."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from pydantic import ValidationError

from tts.answers import normalize_answer
from tts.backends.function import RecordingGenerator
from tts.backends.scripted import ScriptedGenerator
from tts.benchmarks.demo import generate_problems
from tts.benchmarks.pool import load_pool
from tts.benchmarks.results_pool import write_pool
from tts.config import AllocationConfig, EvalConfig
from tts.eval.allocated import ROUNDS_FILE, BudgetTooSmallError, run_allocated_eval
from tts.search.sampling.self_consistency import SelfConsistencyConfig

PROBLEMS = generate_problems(20)
CFG = EvalConfig.model_validate({"data": {"benchmark": "demo", "limit": 20}, "backend": {"kind": "scripted"},
                                 "sampling": {"max_tokens": 64}})


def _cfg(base: EvalConfig = CFG, **allocation) -> EvalConfig:
    return base.model_copy(update={"allocation": AllocationConfig(**allocation)})


def _dists(problems=PROBLEMS):
    # Half the problems are unanimous, half are contested between the gold and two wrong answers.
    return {p.id: ({p.answer: 1.0} if i % 2 == 0 else {p.answer: 0.4, "0": 0.3, "1": 0.25})
            for i, p in enumerate(problems)}


def _generator(**kwargs):
    return ScriptedGenerator(_dists(), seed=0, mean_tokens=40, **kwargs)


def _rounds(run_dir):
    return json.loads((run_dir / ROUNDS_FILE).read_text())["rounds"]


def _log(run_dir):
    return [json.loads(x) for x in (run_dir / "samples.jsonl").read_text().splitlines() if "problem_id" in x]


@pytest.mark.parametrize("chunk", [1, 4])
def test_budget_is_never_exceeded_and_goes_to_contested_problems(tmp_path, chunk):
    budget = 20 * 60 * 8
    res = run_allocated_eval(_cfg(budget=budget, n_max=32, chunk=chunk), tmp_path, generator=_generator(),
                             problems=PROBLEMS)
    rows = {r.problem_id: r for r in res.rows}
    assert len(rows) == 20
    assert sum(r.budget_spent for r in rows.values()) <= budget
    easy = [rows[p.id].strategy["n"] for i, p in enumerate(PROBLEMS) if i % 2 == 0]
    hard = [rows[p.id].strategy["n"] for i, p in enumerate(PROBLEMS) if i % 2 == 1]
    # Unanimous votes stop early; the saved budget buys samples for contested ones.
    assert sum(hard) > 1.5 * sum(easy)
    assert all(r.correct for i, r in enumerate(rows[p.id] for p in PROBLEMS) if i % 2 == 0)


def test_rows_hold_a_valid_strategy_and_the_allocation_settings(tmp_path):
    res = run_allocated_eval(_cfg(budget=20 * 60 * 6, n_max=16, chunk=2), tmp_path, generator=_generator(),
                             problems=PROBLEMS)
    row = res.rows[0]
    assert row.config == "allocated-online@7200tokens"
    # The strategy is a plain self-consistency config with the samples the problem got.
    assert row.strategy == SelfConsistencyConfig(n=len(row.trace["samples"])).model_dump(mode="json")
    assert row.allocation == {**AllocationConfig(budget=7200, n_max=16, chunk=2).model_dump(mode="json")}
    assert json.loads((tmp_path / "run.json").read_text())["config"]["allocation"]["chunk"] == 2


def test_resume_replays_paid_samples(tmp_path):
    cfg = _cfg(budget=20 * 60 * 6, n_max=16)
    first = run_allocated_eval(cfg, tmp_path, generator=_generator(), problems=PROBLEMS)
    log_lines = (tmp_path / "samples.jsonl").read_text().splitlines()
    # Simulate a kill before results were written: drop results, keep the samples log.
    (tmp_path / "results.jsonl").unlink()

    gen = RecordingGenerator(ScriptedGenerator())
    again = run_allocated_eval(cfg, tmp_path, generator=gen, problems=PROBLEMS)
    assert gen.calls == []  # a resumed run must not pay again for samples it already has
    assert [r.answer for r in again.rows] == [r.answer for r in first.rows]
    assert (tmp_path / "samples.jsonl").read_text().splitlines() == log_lines
    assert log_lines[-1] == '{"event": "finished"}'


def test_a_resumed_run_with_a_smaller_limit_summarises_only_its_problems(tmp_path):
    """A finished run of 20 problems opened again with --limit 8: the rows and the summary are those
    of the 8 problems, not of every row the directory holds."""
    cfg = _cfg(budget=20 * 60 * 6, n_max=16)
    full = run_allocated_eval(cfg, tmp_path, generator=_generator(), problems=PROBLEMS)
    first8 = [r for r in full.rows if r.problem_id in {p.id for p in PROBLEMS[:8]}]
    smaller = cfg.model_copy(update={"data": cfg.data.model_copy(update={"limit": 8})})
    part = run_allocated_eval(smaller, tmp_path, generator=RecordingGenerator(ScriptedGenerator()),
                              problems=PROBLEMS[:8])
    assert sorted(r.problem_id for r in part.rows) == sorted(p.id for p in PROBLEMS[:8])
    (summary,) = part.summaries
    assert summary.problems == 8
    assert summary.accuracy == pytest.approx(np.mean([r.correct for r in first8]))


def test_killed_run_continues_with_the_same_decisions(tmp_path):
    cfg = _cfg(budget=20 * 60 * 6, n_max=16)
    whole = tmp_path / "whole"
    run_allocated_eval(cfg, whole, generator=_generator(), problems=PROBLEMS)
    killed = tmp_path / "killed"
    killed.mkdir()
    lines = (whole / "samples.jsonl").read_text().splitlines()
    # Kill after the first round (20 problems x 4 samples) plus half a line, before any results.
    (killed / "samples.jsonl").write_text("\n".join(lines[:80]) + "\n" + lines[80][:20])
    again = run_allocated_eval(cfg, killed, generator=_generator(), problems=PROBLEMS)
    assert sum(r.budget_spent for r in again.rows) <= cfg.allocation.budget
    assert sorted(r.problem_id for r in again.rows) == sorted(p.id for p in PROBLEMS)
    # The paid-for samples are replayed through the same rule: the same first round, and the
    # second round serves the same problems in the same order (how far it gets differs: the
    # restarted engine has no prompt cache, so the rest costs more).
    first, second = _rounds(killed), _rounds(whole)
    assert first[0] == second[0]
    order, ref = list(first[1]), list(second[1])
    assert order == ref[: len(order)] or ref == order[: len(ref)]
    assert (killed / "samples.jsonl").read_text().splitlines()[:80] == lines[:80]


def test_bad_budgets_are_refused(tmp_path):
    for budget in (0, -5, float("nan"), float("inf")):
        with pytest.raises(ValidationError, match="budget"):
            AllocationConfig(budget=budget)
    gen = _generator()
    with pytest.raises(BudgetTooSmallError, match="smaller than one sample per problem") as err:
        run_allocated_eval(_cfg(budget=100), tmp_path, generator=gen, problems=PROBLEMS)
    # The minimum is one worst-case sample (64 tokens plus the uncached prompt) for each problem.
    assert err.value.minimum == sum(gen.prompt_tokens(_request(gen, p)) + 64 for p in PROBLEMS)


def _request(gen, problem):
    from tts.eval.runner import load_problems
    from tts.search.sampling.self_consistency import SelfConsistency

    bench, _ = load_problems(CFG, PROBLEMS)
    return SelfConsistency(SelfConsistencyConfig(n=1), gen, bench.prompt.render, CFG.sampling).request(problem)


def test_eflops_budget_is_priced_by_the_cost_model(tmp_path):
    cfg = _cfg(CFG.model_copy(update={"backend": CFG.backend.model_copy(update={"model": "smollm2-135m"})}),
               budget=5e14, unit="eflops", gpu="h100", n_max=8)
    res = run_allocated_eval(cfg, tmp_path, generator=_generator(), problems=PROBLEMS)
    spent = sum(r.budget_spent for r in res.rows)
    assert 0 < spent <= 5e14
    assert json.loads((tmp_path / "run.json").read_text())["config"]["allocation"]["unit"] == "eflops"


@pytest.fixture(scope="module")
def past_run(tmp_path_factory):
    """A past run of the "same model" on other problems: the calibration pool (16 samples each)."""
    from tts.eval.runner import run_eval

    past = tmp_path_factory.mktemp("past")
    others = generate_problems(60)[20:]
    past_cfg = CFG.model_copy(update={"strategies": [SelfConsistencyConfig(n=16)]})
    run_eval(past_cfg, past, generator=ScriptedGenerator(_dists(others), seed=9, mean_tokens=40), problems=others)
    return past


def test_offline_mode_plans_from_pilot_and_a_past_run(tmp_path, past_run):
    budget = 20 * 40 * 8
    res = run_allocated_eval(_cfg(budget=budget, mode="offline", calibration=past_run, pilot=4), tmp_path / "run",
                             generator=_generator(), problems=PROBLEMS)
    rows = {r.problem_id: r for r in res.rows}
    assert all(r.strategy["n"] >= 4 for r in rows.values())
    easy = [rows[p.id].strategy["n"] for i, p in enumerate(PROBLEMS) if i % 2 == 0]
    hard = [rows[p.id].strategy["n"] for i, p in enumerate(PROBLEMS) if i % 2 == 1]
    assert sum(hard) > sum(easy)
    plan = json.loads((tmp_path / "run" / "plan.json").read_text())
    assert plan["pilot"] == 4


def test_offline_mode_keeps_n_max(tmp_path, past_run):
    # A large budget would buy 16 samples (the calibration's most) for contested problems;
    # n_max 8 must cap the plan instead of being ignored.
    res = run_allocated_eval(_cfg(budget=1e6, mode="offline", calibration=past_run, n_max=8), tmp_path,
                             generator=_generator(), problems=PROBLEMS)
    ns = [r.strategy["n"] for r in res.rows]
    assert max(ns) == 8


def test_allocation_settings_are_checked_where_they_are_given():
    with pytest.raises(ValidationError, match="mode offline needs calibration"):
        AllocationConfig(budget=1e5, mode="offline")
    with pytest.raises(ValidationError, match="set unit tokens"):
        AllocationConfig(budget=1e5, mode="offline", calibration="past", unit="eflops")
    with pytest.raises(ValidationError, match="chunk only applies to mode online"):
        AllocationConfig(budget=1e5, mode="offline", calibration="past", chunk=8)
    with pytest.raises(ValidationError, match="pilot only applies to mode offline"):
        AllocationConfig(budget=1e5, pilot=8)
    with pytest.raises(ValidationError, match="allocation runs self_consistency only"):
        EvalConfig.model_validate({"allocation": {"budget": 1e5}, "strategies": [{"kind": "best_of_n"}]})
    # A dumped config (every field given, at its default) loads back.
    cfg = EvalConfig.model_validate({"allocation": {"budget": 1e5}})
    assert EvalConfig.model_validate(cfg.model_dump(mode="json")) == cfg
    with pytest.raises(ValueError, match="config.allocation is not set"):
        run_allocated_eval(CFG, "unused")


def test_a_pessimistic_prior_does_not_starve_later_problems(tmp_path):
    # max_tokens 256 makes a sample's worst case ~12x its real length, so the first round cannot be
    # sent at once; the problems left out of the first call must still get whole chunks, not single
    # samples that each pay the prompt again.
    cfg = _cfg(CFG.model_copy(update={"sampling": CFG.sampling.model_copy(update={"max_tokens": 256})}),
               budget=20 * 8 * 60, n_max=8, chunk=4)
    gen = RecordingGenerator(ScriptedGenerator({p.id: {p.answer: 1.0} for p in PROBLEMS}, seed=0, mean_tokens=20))
    res = run_allocated_eval(cfg, tmp_path, generator=gen, problems=PROBLEMS)
    assert min(r.strategy["n"] for r in res.rows) >= 4
    assert [r.n for r in gen.requests].count(4) >= len(PROBLEMS)  # every problem's first chunk came as one request


def test_no_round_repeats_an_earlier_rounds_samples(tmp_path):
    """The scripted backend returns the same samples for the same request seed (as vLLM does),
    so a round that re-sent the first round's seed would draw its samples again and fake
    unanimity. Every request must derive its seed from the samples already drawn."""
    run_allocated_eval(_cfg(budget=20 * 60 * 10, n_max=32, chunk=4), tmp_path, generator=_generator(),
                       problems=PROBLEMS)
    texts: dict[str, list[str]] = {}
    for rec in _log(tmp_path):
        texts.setdefault(rec["problem_id"], []).append(rec["sample"]["text"])
    rounds = _rounds(tmp_path)
    assert max(len(t) for t in texts.values()) > 8  # several rounds for the contested problems
    for pid, got in texts.items():
        chunks, pos = [], 0
        for given in rounds:
            if pid in given:
                chunks.append(tuple(got[pos: pos + given[pid]]))
                pos += given[pid]
        assert pos == len(got)
        for i, later in enumerate(chunks):
            for earlier in chunks[:i]:
                assert not set(later) & set(earlier), f"{pid}: a later chunk repeats an earlier one's samples"


def test_replay_of_the_runs_samples_makes_the_runs_decisions(tmp_path):
    """The replay that `tts budget simulate` runs (:class:`OnlineSequence`) and a real run make
    the same decisions on the same samples: which problem gets how many samples in which round,
    and the final n per problem.

    The real run's samples log becomes a pool in generation order; its token counts are what the
    run charged each sample (prompt included), and the replay bounds a request's worst case as
    the run does (the scripted backend's exact prompt length plus max_tokens per sample). Each
    problem is padded to n_max samples, so that the replay may go as far as the run could have.
    """
    from tts.budgets.online import OnlinePolicy
    from tts.budgets.replay.online import OnlineSequence
    from tts.budgets.replay.prefix import replay_prefixes

    budget, n_max, chunk, max_tokens = 20 * 60 * 12, 24, 3, 64
    gen = _generator()
    res = run_allocated_eval(_cfg(budget=budget, n_max=n_max, chunk=chunk), tmp_path, generator=gen,
                             problems=PROBLEMS)
    # 1. The run's samples as a pool, one problem per row in the run's order.
    rows = []
    by_pid: dict[str, list[dict]] = {p.id: [] for p in PROBLEMS}
    for rec in _log(tmp_path):
        by_pid[rec["problem_id"]].append(rec)
    for p in PROBLEMS:
        got = by_pid[p.id]
        for i in range(n_max):
            if i < len(got):
                s, u = got[i]["sample"], got[i]["usage"]
                answer = s["answer"] and normalize_answer(s["answer"])
                cost = u["completion_tokens"] + u["prompt_tokens"] - u["cached_prompt_tokens"]
            else:
                answer, cost = None, 1  # never drawn by the run
            rows.append({"problem_id": p.id, "model": "m", "sample_idx": i, "answer": answer,
                         "correct": answer == p.answer, "num_tokens": cost, "score": None})
    pool = load_pool(write_pool(rows, tmp_path / "pool.jsonl"))["m"]
    assert pool.problem_ids == tuple(p.id for p in PROBLEMS)
    # 2. Replay with the same settings and the run's worst-case bound.
    prompt = np.array([gen.prompt_tokens(_request(gen, p)) for p in PROBLEMS], dtype=float)
    rep = replay_prefixes(pool, np.tile(np.arange(n_max), (len(PROBLEMS), 1)))
    seq = OnlineSequence.build(rep.top1, rep.top2, rep.sample_tokens, np.full(len(PROBLEMS), n_max),
                               OnlinePolicy(n_max=n_max, chunk=chunk))
    (drawn,) = seq.within(np.array([budget]), lambda p, k: prompt[p] + np.asarray(k) * max_tokens)
    # 3. The same rounds, and the same final n.
    ids = [p.id for p in PROBLEMS]
    replayed = [{ids[i]: k for i, k in r.items()} for r in seq.rounds_at(int(drawn))]
    real = [r for r in _rounds(tmp_path) if r]
    assert len(real) > 3 and sum(map(sum, map(dict.values, real))) < n_max * len(PROBLEMS)  # cut by budget
    assert replayed == real
    n_real = {r.problem_id: r.strategy["n"] for r in res.rows}
    assert dict(zip(ids, seq.n_at(int(drawn)).tolist())) == n_real


def test_decisions_never_read_the_grades(tmp_path, past_run):
    """Online rounds and offline plans depend on answers and costs, never on the gold answers:
    re-running with the golds shuffled across problems changes only the grading."""
    rng = np.random.default_rng(0)
    golds = [p.answer for p in PROBLEMS]
    shuffled = [dataclasses.replace(p, answer=str(g)) for p, g in zip(PROBLEMS, rng.permutation(golds))]
    for mode, extra, record in (("online", {}, ROUNDS_FILE), ("offline", {"calibration": past_run}, "plan.json")):
        cfg = _cfg(budget=20 * 60 * 6, n_max=16, mode=mode, **extra)
        a = run_allocated_eval(cfg, tmp_path / f"{mode}-a", generator=_generator(), problems=PROBLEMS)
        b = run_allocated_eval(cfg, tmp_path / f"{mode}-b", generator=_generator(), problems=shuffled)
        assert (tmp_path / f"{mode}-a" / record).read_text() == (tmp_path / f"{mode}-b" / record).read_text()
        assert [r.strategy["n"] for r in a.rows] == [r.strategy["n"] for r in b.rows]
        assert [r.correct for r in a.rows] != [r.correct for r in b.rows]


def test_a_backend_that_cannot_count_prompts_is_bounded_by_characters(tmp_path, monkeypatch):
    """Like an OpenAI-compatible server: no local tokenizer. The first worst case assumes one token
    per prompt character; once prompts are observed, their tokens bound them. The budget holds."""
    monkeypatch.setattr("tts.eval.allocated.count_prompt_tokens", lambda generator, request: None)
    gen = RecordingGenerator(ScriptedGenerator(_dists(), seed=0, mean_tokens=40))
    budget = 20 * 60 * 8
    res = run_allocated_eval(_cfg(budget=budget, n_max=16), tmp_path, generator=gen, problems=PROBLEMS)
    sizes = [len(call) for call in gen.calls]
    assert sum(r.budget_spent for r in res.rows) <= budget
    assert len(res.rows) == 20 and min(r.strategy["n"] for r in res.rows) >= 4
    # A prompt is ~500 characters but ~120 tokens: the first call is cut by the character bound,
    # the next ones use the observed tokens per character.
    assert sizes[0] < 20 and sum(sizes[:3]) >= 20
