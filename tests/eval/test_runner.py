"""The eval runner on the scripted backend: ladders share samples, results resume, schema is stable."""

from __future__ import annotations

import json

from tts.backends.scripted import ScriptedGenerator
from tts.config import EvalConfig
from tts.eval.runner import run_eval

ROW_KEYS = {"problem_id", "config", "strategy", "model", "backend", "answer", "gold", "outcome", "correct",
            "coverage", "confidence", "usage", "trace", "allocation", "budget_spent"}


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


class CountingGenerator(ScriptedGenerator):
    """Scripted generator that records every request it receives."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.requests = []

    def generate(self, requests):
        self.requests.extend(requests)
        return super().generate(requests)


def test_ladder_draws_max_n_once_per_problem_and_writes_one_row_per_config(tmp_path):
    from tts.eval.runner import load_problems

    cfg = _config()
    _, problems = load_problems(cfg)
    gen = CountingGenerator.for_problems(problems, accuracy=0.45, seed=0)
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
    gen = CountingGenerator.for_problems(problems, accuracy=0.45, seed=0)
    result = run_eval(cfg, tmp_path, generator=gen)
    assert result.skipped == 5 and len(gen.requests) == 7
    rows = [json.loads(x) for x in (tmp_path / "results.jsonl").read_text().splitlines()]
    keys = [(r["problem_id"], r["config"]) for r in rows]
    assert len(keys) == len(set(keys)) == 12 * 6
