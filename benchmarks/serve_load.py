"""Load test of ``tts serve`` on loopback: many concurrent chat requests at once.

Starts ``tts serve`` in its own process on 127.0.0.1 (so the client does not share its GIL), fires
``--requests`` chat completions at the same moment, and reports throughput, p50/p99 latency,
whether every request was answered exactly once with a well-formed body, and the batching ratio
(engine calls per request, from the server's /metrics). Bounded in count and time.

    python benchmarks/serve_load.py --backend scripted --requests 256
    flock /tmp/tts-heavy.lock python benchmarks/serve_load.py --backend vllm --requests 16 --strategy sc-4 --max-tokens 64
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _counter(metrics: str, name: str) -> float:
    m = re.search(rf"^{name} (\S+)$", metrics, re.MULTILINE)
    return float(m.group(1)) if m else 0.0


def _well_formed(body: dict, n: int) -> str | None:
    """None when the body is a complete chat completion with ``n`` sample answers; else what is wrong."""
    try:
        choice = body["choices"][0]
        if body["object"] != "chat.completion" or len(body["choices"]) != 1:
            return "not one chat.completion choice"
        if not isinstance(choice["message"]["content"], str) or choice["finish_reason"] != "stop":
            return "no content or finish_reason"
        u = body["usage"]
        if u["total_tokens"] != u["prompt_tokens"] + u["completion_tokens"] or u["completion_tokens"] <= 0:
            return "usage does not add up"
        if len(body["tts"]["answers"]) != n:
            return f"{len(body['tts']['answers'])} sample answers, expected {n}"
    except (KeyError, TypeError, IndexError) as exc:
        return f"missing field {exc}"
    return None


async def _fire(url: str, count: int, model: str, n: int, max_tokens: int, timeout: float) -> list[dict]:
    limits = httpx.Limits(max_connections=count + 8, max_keepalive_connections=count + 8)
    async with httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits) as client:
        async def one(i: int) -> dict:
            body = {"model": model, "max_tokens": max_tokens, "user": f"load-{i}",
                    "messages": [{"role": "user", "content": f"Request {i}: what is {i} + 1?"}]}
            start = time.perf_counter()
            try:
                r = await client.post("/chat/completions", json=body)
                return {"i": i, "status": r.status_code, "seconds": time.perf_counter() - start,
                        "body": r.json() if r.headers.get("content-type", "").startswith("application/json") else None}
            except httpx.HTTPError as exc:
                return {"i": i, "status": None, "seconds": time.perf_counter() - start, "error": repr(exc)}

        return await asyncio.gather(*[one(i) for i in range(count)])


def _percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def run(args: argparse.Namespace) -> dict:
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    name = "scripted" if args.backend == "scripted" else "smollm2-135m"
    cmd = [sys.executable, "-m", "tts.cli", "serve", "--backend", args.backend, "--port", str(port),
           "--max-concurrent", str(max(args.requests, 1)), "--batch-window", str(args.batch_window),
           "--default-max-tokens", str(args.max_tokens)]
    if args.backend == "vllm":
        cmd += ["--max-model-len", "1024", "--kv-cache-gib", "1"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("TTS_API_KEY", None)
    log = Path(args.log)
    with log.open("w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env)
    try:
        start = time.monotonic()
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"tts serve exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() - start > args.startup_timeout:
                raise SystemExit(f"tts serve not ready after {args.startup_timeout} s:\n{log.read_text()[-3000:]}")
            time.sleep(0.25)
        startup = time.monotonic() - start
        model = f"{args.strategy}/{name}"
        n = int(args.strategy.rsplit("-", 1)[-1].split("x")[-1])
        # one warm-up request (first engine call, prefix cache), then the measured burst
        asyncio.run(_fire(f"{url}/v1", 1, model, n, args.max_tokens, args.timeout))
        before = httpx.get(f"{url}/metrics").text
        t0 = time.perf_counter()
        results = asyncio.run(_fire(f"{url}/v1", args.requests, model, n, args.max_tokens, args.timeout))
        wall = time.perf_counter() - t0
        after = httpx.get(f"{url}/metrics").text
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
    ok = [r for r in results if r["status"] == 200 and r["body"] is not None]
    problems = {r["i"]: _well_formed(r["body"], n) for r in ok}
    bad = {i: p for i, p in problems.items() if p}
    ids = [r["body"]["id"] for r in ok]
    latencies = [r["seconds"] for r in ok]
    engine_calls = _counter(after, "tts_engine_calls_total") - _counter(before, "tts_engine_calls_total")
    generate_calls = _counter(after, "tts_generate_calls_total") - _counter(before, "tts_generate_calls_total")
    tokens = sum(r["body"]["usage"]["total_tokens"] for r in ok)
    return {
        "backend": args.backend, "model": model, "requests": args.requests, "max_tokens": args.max_tokens,
        "batch_window_s": args.batch_window, "server_startup_s": round(startup, 1),
        "answered_200": len(ok), "other_status": sorted({str(r["status"]) for r in results if r["status"] != 200}),
        "answered_exactly_once": len(results) == args.requests and sorted(r["i"] for r in results) == list(range(args.requests))
        and len(set(ids)) == len(ids),
        "well_formed": len(ok) - len(bad), "malformed_examples": dict(list(bad.items())[:3]),
        "wall_s": round(wall, 3), "throughput_rps": round(len(ok) / wall, 2),
        "tokens_per_s": round(tokens / wall, 1),
        "p50_s": round(_percentile(latencies, 0.50), 3) if latencies else None,
        "p99_s": round(_percentile(latencies, 0.99), 3) if latencies else None,
        "max_s": round(max(latencies), 3) if latencies else None,
        "engine_calls": engine_calls, "generate_calls": generate_calls,
        "engine_calls_per_request": round(engine_calls / max(len(ok), 1), 4),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", choices=["scripted", "vllm"], default="scripted")
    p.add_argument("--requests", type=int, default=256)
    p.add_argument("--strategy", default="sc-8", help="Model-name strategy prefix, e.g. sc-8, bon-4 (n is read from it).")
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--batch-window", type=float, default=0.01)
    p.add_argument("--timeout", type=float, default=300.0, help="Per-request client timeout (s).")
    p.add_argument("--startup-timeout", type=float, default=300.0)
    p.add_argument("--log", default="/tmp/tts_serve_load.log", help="Where the server's output goes.")
    p.add_argument("--out", help="Also write the JSON report here.")
    args = p.parse_args()
    report = run(args)
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
