"""Engine start-up time and generation throughput of the vLLM backend on this machine.

Prints (1) engine start-up seconds, (2) generated tokens/s when all requests of a step go in ONE
engine call (what the VLLMGenerator does), and (3) the same requests sent one problem at a time
(the naive loop research repos often write), as a ratio.

    python benchmarks/engine_throughput.py [--problems 32] [--n 8]
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=32)
    parser.add_argument("-n", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--dtype", default="auto", help="auto, float32 or bfloat16")
    args = parser.parse_args()

    from tts.backends.vllm import VLLMGenerator
    from tts.benchmarks.demo import DemoBenchmark
    from tts.config import SamplingConfig, VLLMBackendConfig
    from tts.search.sampling.self_consistency import SelfConsistencyConfig
    from tts.search.sampling.self_consistency import SelfConsistency

    start = time.perf_counter()
    gen = VLLMGenerator(VLLMBackendConfig(max_model_len=1024, dtype=args.dtype))
    startup = time.perf_counter() - start
    bench = DemoBenchmark()
    problems = bench.load(limit=args.problems)
    sc = SelfConsistency(SelfConsistencyConfig(n=args.n), gen, bench.prompt.render,
                         SamplingConfig(max_tokens=args.max_tokens))
    gen.generate([sc.request(problems[0])])  # warm-up

    t = time.perf_counter()
    batched = gen.generate([sc.request(p) for p in problems])
    t_batched = time.perf_counter() - t
    tok_batched = sum(r.usage.completion_tokens for r in batched)

    t = time.perf_counter()
    looped = [gen.generate([sc.request(p)])[0] for p in problems]
    t_looped = time.perf_counter() - t
    tok_looped = sum(r.usage.completion_tokens for r in looped)

    from tts.backends.vllm import choose_dtype

    print(f"dtype: {choose_dtype(args.dtype, on_gpu=gen.on_gpu)}")
    print(f"engine start-up: {startup:.1f} s")
    print(f"batched: {tok_batched} tokens in {t_batched:.1f} s = {tok_batched / t_batched:.1f} tok/s "
          f"({args.problems} problems x n={args.n} in one engine call)")
    print(f"looped:  {tok_looped} tokens in {t_looped:.1f} s = {tok_looped / t_looped:.1f} tok/s (one call per problem)")
    print(f"throughput ratio batched/looped: {(tok_batched / t_batched) / (tok_looped / t_looped):.2f}x")


if __name__ == "__main__":
    main()
