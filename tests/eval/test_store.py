import json

import pytest

from tts.eval.store import ResultsStore, RunMismatchError


def _row(pid, cfg="self_consistency@4"):
    return {"problem_id": pid, "config": cfg, "correct": True}


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
