"""Timed decode runs on the vLLM engine, for checking the cost model against this machine.

``with measure_decode(model) as measure:`` gives ``measure(n, gen_len)``: one request of ``n``
samples that each generate exactly ``gen_len`` tokens (EOS ignored), timed end to end on a warm
engine, with its Usage. The engine is shut down when the block ends. ``tts cost calibrate --engine`` compares these times with the cost model's roofline seconds.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

from tts.backends.base import request_usage
from tts.config import VLLMBackendConfig
from tts.types import Usage

_PROMPT = "Count slowly from one to one thousand, writing every number in words."


@contextlib.contextmanager
def measure_decode(model: str, max_model_len: int = 1024,
                   **settings: Any) -> Iterator[Callable[[int, int], tuple[float, Usage]]]:
    """A timing function on one engine for ``model``, closed when the ``with`` block ends.

    ``settings``: more :class:`~tts.config.VLLMBackendConfig` fields (``tensor_parallel_size=2``).

    Each call uses a prompt with a fresh prefix so that the prefix cache does not hide prefill.
    """
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from tts.backends.vllm import VLLMGenerator

    gen = VLLMGenerator(VLLMBackendConfig(model=model, max_model_len=max_model_len, **settings))
    counter = iter(range(10**9))

    def run(n: int, gen_len: int) -> tuple[float, Usage]:
        messages = [{"role": "user", "content": f"[{next(counter)}] {_PROMPT}"}]
        text = gen.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        ids = gen.tokenizer(text, add_special_tokens=False)["input_ids"]
        params = SamplingParams(n=n, temperature=1.0, max_tokens=gen_len, min_tokens=gen_len, ignore_eos=True)
        start = time.perf_counter()
        out = gen.llm.generate([TokensPrompt(prompt_token_ids=ids)], params, use_tqdm=False)[0]
        wall = time.perf_counter() - start
        lengths = [len(c.token_ids) for c in out.outputs]
        return wall, request_usage(len(ids), out.num_cached_tokens or 0, lengths, wall, batch_sequences=n)

    with gen:
        run(1, 8)  # warm-up: the first call pays one-off allocation
        yield run
