import json

import pytest

from tts.benchmarks.append_log import CorruptLogError
from tts.eval.rows import SCHEMA_VERSION, ResultRow
from tts.eval.store import ResultsStore, RunMismatchError
from tts.types import Usage


def _row(pid, cfg="self_consistency@4", **kw):
    fields = dict(problem_id=pid, config=cfg, strategy={"kind": "self_consistency", "n": 4}, model="m",
                  backend="scripted", answer="4", gold="4", outcome="correct", correct=True, coverage=True,
                  confidence=1.0, usage=Usage(completion_tokens=10), trace={"strategy": "self_consistency", "samples": []})
    fields.update(kw)
    return ResultRow(**fields)


def test_resume_keeps_written_rows_and_drops_a_half_written_line(tmp_path):
    s = ResultsStore(tmp_path, {"seed": 0}, "m")
    s.write([_row("a"), _row("b")])
    s.close()
    with (tmp_path / "results.jsonl").open("a") as fh:
        fh.write('{"problem_id": "c", "con')  # SIGKILL mid-write
    s2 = ResultsStore(tmp_path, {"seed": 0}, "m")
    assert s2.is_done("a", "self_consistency@4") and not s2.is_done("c", "self_consistency@4")
    s2.write([_row("c"), _row("a")])  # "a" again is ignored
    s2.close()
    lines = [json.loads(x) for x in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert [r["problem_id"] for r in lines] == ["a", "b", "c"]


def test_manifest_records_config_and_refuses_a_different_one(tmp_path):
    ResultsStore(tmp_path, {"seed": 0, "batch_size": 4}, "m").close()
    manifest = json.loads((tmp_path / "run.json").read_text())
    assert manifest["config"]["seed"] == 0 and manifest["model"] == "m" and "python" in manifest["versions"]
    ResultsStore(tmp_path, {"seed": 0, "batch_size": 8}, "m").close()  # batch size may change
    with_server = tmp_path / "server"
    ResultsStore(with_server, {"seed": 0, "backend": {"kind": "openai", "concurrency": 8}}, "m").close()
    # requests in flight may change (the default for a local server rose from 8 to 64) ...
    ResultsStore(with_server, {"seed": 0, "backend": {"kind": "openai", "concurrency": 64}}, "m").close()
    with pytest.raises(RunMismatchError, match="backend.kind: 'openai' -> 'vllm'"):  # ... the backend may not
        ResultsStore(with_server, {"seed": 0, "backend": {"kind": "vllm", "concurrency": 64}}, "m")
    with pytest.raises(RunMismatchError, match="seed: 0 -> 1"):
        ResultsStore(tmp_path, {"seed": 1, "batch_size": 4}, "m")


def test_a_damaged_line_before_the_end_is_refused_not_silently_truncated(tmp_path):
    s = ResultsStore(tmp_path, {"seed": 0}, "m")
    s.write([_row("a"), _row("b")])
    s.close()
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    (tmp_path / "results.jsonl").write_text(lines[0][:10] + "\n" + lines[1] + "\n")
    with pytest.raises(ValueError, match="line 1: not a JSON object"):
        ResultsStore(tmp_path, {"seed": 0}, "m")
    assert (tmp_path / "results.jsonl").read_text().count("\n") == 2  # nothing was cut away


def test_rows_read_back_typed_and_the_manifest_carries_the_schema_version(tmp_path):
    s = ResultsStore(tmp_path, {"seed": 0}, "m")
    s.write([_row("a")])
    s.close()
    assert json.loads((tmp_path / "run.json").read_text())["schema_version"] == SCHEMA_VERSION
    back = ResultsStore(tmp_path, {"seed": 0}, "m").rows
    assert back == [_row("a")] and back[0].usage.completion_tokens == 10


def test_a_row_that_is_not_a_valid_result_row_is_refused_with_its_line(tmp_path):
    s = ResultsStore(tmp_path, {"seed": 0}, "m")
    s.write([_row("a")])
    s.close()
    with (tmp_path / "results.jsonl").open("a") as fh:
        fh.write(json.dumps({"problem_id": "b", "config": "x"}) + "\n")
    with pytest.raises(CorruptLogError, match="row 2 is not a valid result row"):
        ResultsStore(tmp_path, {"seed": 0}, "m")


def test_a_run_of_an_older_row_format_is_refused_with_what_to_do(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps({"config": {"seed": 0}, "model": "m"}))
    with pytest.raises(RunMismatchError, match="format version 1.*new --out"):
        ResultsStore(tmp_path, {"seed": 0}, "m")


def test_a_row_whose_strategy_is_not_a_valid_strategy_config_is_rejected():
    # Allocated runs used to write {"kind": ..., "allocator": ..., "budget": ...} as the strategy.
    with pytest.raises(ValueError, match="allocator"):
        _row("a", strategy={"kind": "self_consistency", "n": 3, "allocator": "online"})
    with pytest.raises(ValueError, match="Unknown strategy"):
        _row("a", strategy={"kind": "no_such_strategy"})
