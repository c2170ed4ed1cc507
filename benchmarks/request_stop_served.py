"""Per-request stops measured over HTTP: ``tts serve --backend openai`` (or ``tts.asolve``) in front of
``benchmarks/pool_upstream.py`` replaying a reasoning model's stored samples.

For each problem and configuration (fixed self-consistency@n, then a stop with each wave size) the
upstream's sample order is reset first, so every configuration draws from the same sequence of
that problem's samples; the request then goes through tts's real path (the server's planning,
session, strategy, OpenAI backend and its streams, the upstream's HTTP streams and their closing).
Per configuration it prints accuracy (graded with the pool's ``correct``, never used to decide),
generated tokens per request as tts counted them (usage) and as the upstream sent them, the tokens
the upstream never sent because tts closed the stream, and the stop's record.

    python benchmarks/request_stop_served.py --pool ../shared/data/pools/math500_reasoning_models.jsonl.gz \\
        --model gpt-oss-20b --problems 30 --waves 4,8,64

The upstream's virtual clock runs ``--time-scale`` real seconds per virtual second (default 0: no
delays), so wall times here measure tts and the client's parsing, not a model; the latency model is
``benchmarks/request_stop.py``'s.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pool_upstream import pool_upstream  # noqa: E402
from pool_upstream_replay import PoolReplay  # noqa: E402

from tts.answers import answer_keys  # noqa: E402
from tts.benchmarks.pool import load_pool  # noqa: E402


def right_answers(pool, p: int) -> list[str]:
    """The answers the pool grades right for problem ``p`` (for grading only)."""
    ids = {int(pool.answers[p, i]) for i in range(pool.n_samples) if pool.mask[p, i] and pool.correct[p, i]
           and pool.answers[p, i] >= 0}
    return [pool.answer_text(p, i) for i in ids]


def graded(answer: str | None, right: Sequence[str]) -> bool:
    if answer is None or not right:
        return False
    keys = answer_keys([answer, *right])
    return keys[0] is not None and keys[0] in keys[1:]


def serve_client(url: str, model: str, n: int, max_tokens: int):
    """A ``tts serve`` thread over an OpenAI backend of ``url`` and an openai client of it."""
    import openai

    from tts.backends.openai import OpenAIGenerator
    from tts.config import OpenAIBackendConfig
    from tts.serve import ServeConfig, create_app
    from tts.serve.server import ServerThread
    from tts.session import Session

    gen = OpenAIGenerator(OpenAIBackendConfig(base_url=url, model=model, timeout=600, concurrency=128))
    session = Session(generator=gen, price_as=None, max_tokens=max_tokens, batch_window=0.0)
    config = ServeConfig(model=model, prompt="math", max_tokens=max_tokens, max_samples=n,
                         max_budget_tokens=max_tokens * n * 2)
    server = ServerThread(create_app(session, config)).start()
    client = openai.OpenAI(base_url=server.url, api_key="x", timeout=3600, max_retries=0)
    return client, (server, session, gen)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pool", required=True, type=Path)
    ap.add_argument("--model", required=True)
    ap.add_argument("--problems", type=int, default=20)
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--rule", default="horizon")
    ap.add_argument("--waves", default="4,8,64")
    ap.add_argument("--rate", type=float, default=2500.0)
    ap.add_argument("--stream-rate", type=float, default=80.0)
    ap.add_argument("--time-scale", type=float, default=0.0)
    ap.add_argument("--max-tokens", type=int, default=131072)
    ap.add_argument("--via", choices=("serve", "asolve"), default="serve")
    args = ap.parse_args(argv)
    pool = load_pool(args.pool)[args.model]
    replay = PoolReplay(args.pool)
    configs = [("fixed", None)] + [(f"wave {w}", {"rule": args.rule, "wave": min(int(w), args.n)})
                                   for w in args.waves.split(",")]
    rows: dict[str, list[dict]] = {name: [] for name, _ in configs}
    with pool_upstream(replay, tokens_per_second=args.rate, time_scale=args.time_scale,
                       stream_tokens_per_second=args.stream_rate) as url:
        base = url.removesuffix("/v1")
        client, parts = serve_client(url, args.model, args.n, args.max_tokens) if args.via == "serve" else (None, None)
        try:
            for p in range(min(args.problems, pool.n_problems)):
                pid = pool.problem_ids[p]
                right = right_answers(pool, p)
                for name, stop in configs:
                    httpx.post(f"{base}/orders/reset", json={"seed": 0})
                    httpx.post(f"{base}/stats/reset")
                    start = time.perf_counter()
                    if client is not None:
                        reply = client.chat.completions.create(
                            model=f"sc-{args.n}/{args.model}", messages=[{"role": "user", "content": pid}],
                            max_tokens=args.max_tokens, extra_body={"tts": {"stop": stop if stop else False}})
                        ext = reply.model_dump()["choices"][0]["tts"]
                        answer, tokens, record = ext["answer"], reply.usage.completion_tokens, ext.get("stop")
                    else:
                        import tts

                        sol = asyncio.run(tts.asolve(pid, backend={"kind": "openai", "base_url": url,
                                                                   "model": args.model, "timeout": 600},
                                                     n=args.n, max_tokens=args.max_tokens, prompt="math", stop=stop))
                        answer, tokens, record = sol.answer, sol.usage.completion_tokens, sol.trace.notes.get("stop")
                    wall = time.perf_counter() - start
                    stats = httpx.get(f"{base}/stats").json()["total"]
                    rows[name].append({"correct": graded(answer, right), "tokens": tokens, "wall": wall,
                                       "sent": stats["tokens_sent"], "unsent": stats["tokens_unsent"],
                                       "drawn": (record or {}).get("drawn", args.n),
                                       "cancelled": (record or {}).get("cancelled", 0)})
                print(f"  problem {p + 1}: " + ", ".join(f"{k} {v[-1]['tokens']}" for k, v in rows.items()),
                      file=sys.stderr, flush=True)
        finally:
            if parts is not None:
                server, session, gen = parts
                server.stop()
                session.close()
                gen.close()
    fixed = rows["fixed"]
    print(f"{args.pool.name} {args.model}, {len(fixed)} problems, via {args.via}, n={args.n}, rule {args.rule}")
    print("config | accuracy | paired diff | tokens/request (tts usage) | sent by upstream | never sent | "
          "fixed/adaptive | drawn | cancelled | wall s")
    ft = np.mean([r["tokens"] for r in fixed])
    for name, got in rows.items():
        diff = np.mean([g["correct"] - f["correct"] for g, f in zip(got, fixed, strict=True)])
        t = np.mean([r["tokens"] for r in got])
        print(f"{name} | {np.mean([r['correct'] for r in got]):.3f} | {diff:+.3f} | {t:.0f} | "
              f"{np.mean([r['sent'] for r in got]):.0f} | {np.mean([r['unsent'] for r in got]):.0f} | {ft / t:.2f} | "
              f"{np.mean([r['drawn'] for r in got]):.1f} | {np.mean([r['cancelled'] for r in got]):.1f} | "
              f"{np.mean([r['wall'] for r in got]):.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
