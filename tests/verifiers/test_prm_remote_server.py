"""The PRM on a real vLLM server gives the in-process engine's scores (heavy: each test starts two
vLLM-CPU engines of its own, six in all, several minutes on a 2-core CPU, so ``make test`` leaves
them out; run them with ``pytest -m heavy``).

The tiny random ``Qwen2ForProcessRewardModel`` of conftest is scored first by the in-process
engine (then closed), then by vLLM's own OpenAI server (``python -m vllm.entrypoints.openai.api_server``,
one at a time on this small machine) started with the pooler flags derived from the same adapter
(``pooler_server_args``); the two must agree per step.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tts.types import Problem
from tts.verifiers.base import VerifyItem
from tts.verifiers.prm import PRMVerifier, PRMVerifierConfig
from tts.verifiers.prm_adapters import pooler_server_args, pooler_settings

logger = logging.getLogger(__name__)

pytestmark = pytest.mark.heavy

QUESTION = "Tom has 3 apples and buys 4 more. How many apples does he have?"
STEPS = ("Tom starts with 3 apples.", "He buys 4 more apples.", "3 + 4 = 7.", "So he has 7 apples.",
         "The answer is \\boxed{7}.")
ITEMS = [VerifyItem(Problem("one", QUESTION), STEPS[:1]), VerifyItem(Problem("five", QUESTION), STEPS),
         VerifyItem(Problem("two", QUESTION), STEPS[:2]), VerifyItem(Problem("none", QUESTION), ()),
         VerifyItem(Problem("wrong", QUESTION), ("Tom has 3 + 4 = 8 apples.", "So \\boxed{8}."))]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_pooling_server(model_dir: Path, served_name: str, flags: list[str], log: Path,
                         timeout: float = 600.0) -> tuple[subprocess.Popen, str]:
    """Start vLLM's OpenAI server on CPU with ``flags``; wait until /health answers.

    Returns the process and its base URL (…/v1). Raises RuntimeError (with the log's tail) when it
    exits or does not come up within ``timeout`` seconds.
    """
    import httpx

    port = _free_port()
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
           "--served-model-name", served_name, "--host", "127.0.0.1", "--port", str(port),
           "--dtype", "float32", "--enforce-eager", "--max-model-len", "1024", *flags]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
           "HF_HUB_OFFLINE": "1"}
    out = log.open("w")
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the vLLM server exited ({proc.returncode}): {log.read_text()[-3000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc, f"http://127.0.0.1:{port}/v1"
        except httpx.HTTPError:
            pass
        time.sleep(2)
    stop_server(proc)
    raise RuntimeError(f"the vLLM server did not come up in {timeout:.0f} s: {log.read_text()[-3000:]}")


def stop_server(proc: subprocess.Popen) -> None:
    """Stop the server started here (SIGTERM, then SIGKILL after 30 s)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@pytest.mark.slow
@pytest.mark.parametrize(("model", "adapter"), [("tiny_prm", "qwen2.5-math-prm"),
                                               ("tiny_label_lm", "math-shepherd-card")])
def test_remote_prm_scores_equal_the_in_process_engines(model, adapter, request, tmp_path):
    """A token-classification head (Qwen2.5-Math-PRM layout) and an LM-label head (Math-Shepherd
    layout, which the server converts with --convert classify and --hf-overrides)."""
    pytest.importorskip("vllm")
    model_dir = request.getfixturevalue(model)
    # 1. In process (its own engine, closed before the server starts: one engine at a time here).
    start = time.perf_counter()
    with PRMVerifier(PRMVerifierConfig(model=str(model_dir), adapter=adapter, max_model_len=1024,
                                       kv_cache_gib=1, dtype="float32")) as local:
        expected = local.score(ITEMS)
        flags = pooler_server_args(pooler_settings(local.resolved, local.tokenizer))
    logger.warning("in-process PRM: %.1f s (start, score, close)", time.perf_counter() - start)
    # 2. The same model on vLLM's OpenAI server, started with the same adapter's pooler flags.
    start = time.perf_counter()
    proc, url = start_pooling_server(model_dir, "tiny-prm", flags, tmp_path / "server.log")
    logger.warning("vLLM pooling server up in %.1f s with %s", time.perf_counter() - start, flags)
    try:
        config = PRMVerifierConfig(model="tiny-prm", adapter=adapter,
                                   backend={"kind": "openai", "base_url": url, "tokenizer": str(model_dir),
                                            "max_batch_items": 3})
        with PRMVerifier(config) as remote:
            got = remote.score(ITEMS)
            assert remote._client.requests == 2  # 4 items with steps, at most 3 per request
    finally:
        stop_server(proc)
    # 3. Per step, the same scores; the same prefill counted.
    diffs = [abs(a - b) for e, g in zip(expected, got, strict=True)
             for a, b in zip(e.step_scores, g.step_scores, strict=True)]
    logger.warning("remote vs in-process: %d step scores, max |difference| %.2e", len(diffs), max(diffs))
    for e, g in zip(expected, got, strict=True):
        assert len(e.step_scores) == len(g.step_scores)
        assert g.step_scores == pytest.approx(e.step_scores, abs=1e-5)
        assert g.usage.prompt_tokens == e.usage.prompt_tokens
    assert [len(s.step_scores) for s in got] == [1, 5, 2, 0, 2]
    assert max(diffs) < 1e-5 and len({round(x, 6) for s in got for x in s.step_scores}) > 3  # not constant


@pytest.fixture(scope="module")
def tiny_seq_rm(tmp_path_factory) -> Path:
    """A 2-layer ``Qwen2ForSequenceClassification`` reward model with one output and random weights
    (the layout of sequence-classification RMs), on the small model's tokenizer."""
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForSequenceClassification

    from tts.models import prepare_model

    tokenizer = AutoTokenizer.from_pretrained(prepare_model("smollm2-135m").path)
    config = Qwen2Config(vocab_size=len(tokenizer), architectures=["Qwen2ForSequenceClassification"], num_labels=1,
                         torch_dtype="float32", bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.eos_token_id,
                         hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, max_position_embeddings=2048)  # conftest's TINY (head_dim 64)
    torch.manual_seed(2)
    model = Qwen2ForSequenceClassification(config).to(torch.float32)
    with torch.no_grad():  # a head small enough that the sigmoid of the reward does not saturate at 1
        model.score.weight.normal_(0.0, 0.05)
    out = tmp_path_factory.mktemp("tiny-seq-rm")
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out


@pytest.mark.slow
def test_remote_outcome_rm_scores_equal_the_in_process_engines(tiny_seq_rm, tmp_path):
    from tts.verifiers.rm import RMVerifier, RMVerifierConfig

    pytest.importorskip("vllm")
    with RMVerifier(RMVerifierConfig(model=str(tiny_seq_rm), adapter="chat", max_model_len=1024, kv_cache_gib=1,
                                     dtype="float32")) as local:
        expected = local.score(ITEMS)
        flags = local.config.adapter.pooler_settings()
    proc, url = start_pooling_server(tiny_seq_rm, "tiny-rm", pooler_server_args(flags), tmp_path / "server.log")
    try:
        config = RMVerifierConfig(model="tiny-rm", adapter="chat",
                                  backend={"kind": "openai", "base_url": url, "tokenizer": str(tiny_seq_rm)})
        with RMVerifier(config) as remote:
            got = remote.score(ITEMS)
    finally:
        stop_server(proc)
    diffs = [abs(e.score - g.score) for e, g in zip(expected, got, strict=True)]
    logger.warning("outcome RM remote vs in-process: scores %s, max |difference| %.2e",
                   [round(s.score, 4) for s in got], max(diffs))
    assert [s.score for s in got] == pytest.approx([s.score for s in expected], abs=1e-5)
    assert all(s.step_scores == () for s in got) and got[3].score == 0.5
    assert len({round(s.score, 6) for s in got[:3] + got[4:]}) == 4  # each solution gets its own reward
    assert all(0.01 < s.score < 0.99 for s in got)
    assert [s.usage.prompt_tokens for s in got] == [s.usage.prompt_tokens for s in expected]
