"""A past eval run as a sample pool: each drawn sample once, graded and counted like the run did."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from tts.benchmarks.pool import PoolError, load_pool
from tts.benchmarks.results_pool import (
    load_results_as_pool,
    pool_rows_from_results,
    read_results,
    write_pool,
)
from tts.config import EvalConfig
from tts.eval.runner import run_eval

N_PROBLEMS = 8


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A scripted-backend eval: self-consistency n = 1, 4, 16 and best-of-4 share 16 samples."""
    out = tmp_path_factory.mktemp("run")
    cfg = EvalConfig.model_validate({
        "data": {"benchmark": "demo", "limit": N_PROBLEMS},
        "strategies": [{"kind": "self_consistency", "n": n} for n in (1, 4, 16)]
        + [{"kind": "best_of_n", "n": 4}],
        "backend": {"kind": "scripted", "accuracy": 0.45},
        "batch_size": 3,
    })
    run_eval(cfg, out)
    return out


def test_each_sample_appears_once_with_its_grade_and_length(run_dir):
    results = read_results(run_dir)
    assert len(results) == N_PROBLEMS * 4
    rows = pool_rows_from_results(results)
    # 16 samples per problem, not 1 + 4 + 16 + 4: shorter configs hold prefixes of the longest.
    assert len(rows) == N_PROBLEMS * 16
    keys = [(r["model"], r["problem_id"], r["sample_idx"]) for r in rows]
    assert len(set(keys)) == len(keys)
    for res in (r for r in results if r["config"] == "self_consistency@16"):
        mine = [r for r in rows if r["problem_id"] == res["problem_id"]]
        samples = res["trace"]["samples"]
        assert [r["sample_idx"] for r in mine] == list(range(16))
        assert [r["answer"] for r in mine] == [s["answer"] for s in samples]
        assert [r["correct"] for r in mine] == [s["outcome"] == "correct" for s in samples]
        assert [r["num_tokens"] for r in mine] == [s["completion_tokens"] for s in samples]
        assert [r["score"] for r in mine] == [s["mean_logprob"] for s in samples]
        assert any(r["correct"] for r in mine) == res["coverage"]
        assert {r["gold_answer"] for r in mine} == {res["gold"]}
        assert {r["prompt_tokens"] for r in mine} == {res["usage"]["shapes"][0]["prompt_tokens"]}  # one prompt
        assert mine[0]["prompt_tokens"] > 0
    assert all(r["score"] is None for r in pool_rows_from_results(results, score="none"))


def test_loaded_pool_matches_the_run_and_replays(run_dir):
    from tts.budgets.replay.simulate import SimulateConfig, simulate

    pool = load_results_as_pool(run_dir)
    assert pool.path.endswith("results.jsonl") and len(pool) == N_PROBLEMS * 16
    mp = pool[pool.models[0]]
    assert mp.answers.shape == (N_PROBLEMS, 16) and mp.mask.all() and mp.has_tokens and mp.has_scores
    assert all(m["prompt_tokens"] > 0 for m in mp.metadata)  # auto's prompt_length feature reads it
    sc1 = {r["problem_id"]: r["correct"] for r in read_results(run_dir) if r["config"] == "self_consistency@1"}
    # Sample 0 alone is the n = 1 vote: the pool's grade of it is the run's grade of sc@1.
    assert [bool(mp.correct[i, 0]) for i in range(N_PROBLEMS)] == [sc1[p] for p in mp.problem_ids]
    # The pool serves `tts budget simulate` as any pool file does.
    res = simulate(mp, SimulateConfig(target_n=16, orderings=2, folds=2, bootstrap=10, pilot=2,
                                      difficulty="pilot", modes=("offline",)))
    assert res.n_problems == N_PROBLEMS and 0.0 <= res.uniform_acc.mean <= 1.0


def test_gzip_and_plain_files_round_trip(run_dir, tmp_path):
    rows = pool_rows_from_results(read_results(run_dir / "results.jsonl"))
    gz = write_pool(rows, tmp_path / "sub" / "pool.jsonl.gz")
    plain = write_pool(rows, tmp_path / "pool.jsonl")
    assert gz.read_bytes()[:2] == b"\x1f\x8b" and plain.read_bytes()[:1] == b"{"
    with gzip.open(gz, "rt") as fh:
        assert [json.loads(line) for line in fh] == rows
    a, b = load_pool(gz), load_pool(plain)
    (ma,), (mb,) = a.by_model.values(), b.by_model.values()
    assert np.array_equal(ma.correct, mb.correct) and np.array_equal(ma.tokens, mb.tokens)


def test_longest_trace_wins_whatever_the_row_order():
    def row(config, answers, pid="p", model="m"):
        samples = [{"text": f"t{i}", "answer": a, "completion_tokens": 10 + i, "mean_logprob": None,
                    "outcome": "no_answer" if a is None else ("correct" if a == "4" else "wrong")}
                   for i, a in enumerate(answers)]
        return {"problem_id": pid, "model": model, "config": config, "gold": "4", "trace": {"samples": samples},
                "strategy": {"kind": "self_consistency", "n": len(answers)}}

    rows = pool_rows_from_results([row("sc@1", ["4"]), row("sc@3", ["4", None, "5"]), row("sc@2", ["4", None]),
                                   row("sc@1", ["3"], pid="q"), row("sc@1", ["4"], model="other")])
    assert [(r["problem_id"], r["model"], r["answer"], r["correct"]) for r in rows] == [
        ("p", "m", "4", True), ("p", "m", None, False), ("p", "m", "5", False),
        ("q", "m", "3", False), ("p", "other", "4", True)]
    assert [r["num_tokens"] for r in rows[:3]] == [10, 11, 12] and all(r["score"] is None for r in rows)


def test_a_searchs_leaves_are_not_taken_as_independent_samples():
    search = {"problem_id": "p", "model": "m", "config": "beam@4", "gold": "4", "strategy": {"kind": "beam", "n": 4},
              "trace": {"samples": [{"text": f"t{i}", "answer": "4", "completion_tokens": 5, "outcome": "correct"}
                                    for i in range(4)]}}
    vote = {**search, "config": "self_consistency@2", "strategy": {"kind": "self_consistency", "n": 2},
            "trace": {"samples": search["trace"]["samples"][:2]}}
    rows = pool_rows_from_results([search, vote])
    assert len(rows) == 2  # the longer beam trace is not the pool: its leaves share prefixes


def test_errors_say_what_to_pass(tmp_path):
    with pytest.raises(PoolError, match="no such results file"):
        load_results_as_pool(tmp_path)
    with pytest.raises(PoolError, match="no trace samples|sampling strategy"):
        pool_rows_from_results([{"problem_id": "p", "config": "x", "trace": {}}])
    with pytest.raises(PoolError, match="problem_id"):
        pool_rows_from_results([{"config": "x"}])
    bad = tmp_path / "results.jsonl"
    bad.write_text('{"problem_id": "p"}\nnot json\n{"problem_id": "q"}\n')
    with pytest.raises(PoolError, match="line 2: not a JSON object"):
        read_results(bad)
    # A run killed mid-write leaves a half line at the end: dropped, as on resume.
    bad.write_text('{"problem_id": "p"}\n{"problem_id": "q", "tra')
    assert read_results(tmp_path) == [{"problem_id": "p"}]


def _scored_row(pid: str, kind: str, answers: list, scores: list | None, verifier) -> dict:
    samples = [{"text": f"t{i}", "answer": a, "outcome": "correct" if a == "1" else "wrong", "completion_tokens": 9,
                "mean_logprob": -0.5} for i, a in enumerate(answers)]
    strategy = {"kind": kind, "n": len(answers), **({"verifier": verifier} if kind != "self_consistency" else {})}
    return {"problem_id": pid, "model": "m", "config": kind, "strategy": strategy, "gold": "1",
            "trace": {"samples": samples, **({"scores": scores} if scores is not None else {})}}


def test_a_verifier_gives_the_pool_its_scores_from_the_rows_it_scored_and_only_those():
    rows = [
        _scored_row("p0", "self_consistency", ["1", "2", "1", "1", "3", "1"], None, None),  # more samples, no verifier
        _scored_row("p0", "best_of_n", ["1", "2", "1", "1"], [1.0, 0.0, 0.5, 1.0], {"kind": "chain"}),
        _scored_row("p1", "weighted_vote", ["2", "1"], [0.0, 1.0], "chain"),  # the same verifier, spelled as a name
        _scored_row("p1", "best_of_n", ["2", "2", "2"], [0.9, 0.9, 0.9], {"kind": "chain", "noise": 0.3}),  # another
    ]
    got = pool_rows_from_results(rows, verifier={"kind": "chain"})
    assert [(r["problem_id"], r["answer"], r["score"]) for r in got] == [
        ("p0", "1", 1.0), ("p0", "2", 0.0), ("p0", "1", 0.5), ("p0", "1", 1.0), ("p1", "2", 0.0), ("p1", "1", 1.0)]
    # Without a verifier the longest row of each problem is read, scores are mean logprobs.
    plain = pool_rows_from_results(rows)
    assert len([r for r in plain if r["problem_id"] == "p0"]) == 6 and {r["score"] for r in plain} == {-0.5}
    with pytest.raises(PoolError, match="scored its samples with the verifier") as err:
        pool_rows_from_results(rows, verifier={"kind": "chain", "noise": 0.1})
    # Says what the run has (kind and which settings differ, not their values) and what to run.
    assert "'chain' with another noise" in str(err.value) and "--verifier" in str(err.value)
    assert "0.3" not in str(err.value)
