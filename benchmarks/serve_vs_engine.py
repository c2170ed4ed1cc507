"""How much `tts serve` costs over what it stands in front of: two ratios, with p50/p99 latency.

1. ``--half scripted`` (no engine; runs anywhere): the same solves through HTTP (``tts serve
   --backend scripted`` in its own process, so the client does not share its GIL) and in-process
   (``Session.asolve`` on the same scripted generator, same strategy, same concurrency).
   Prints HTTP throughput / in-process throughput. Goal: >= 0.8. Both sides run the same prompt
   (``--prompt``): math by default (answers voted as values, so the server's own work shows), or
   plain (free text chosen by minimum Bayes risk, the server's default, several times the solve work).
2. ``--half vllm`` (needs a vLLM OpenAI-compatible server: ``--vllm-url``, or ``--start-vllm
   MODEL`` to start one here): the same samples sent straight to vLLM (``--requests`` chat
   completions of ``n = --n`` each, all at once) and through ``tts serve --backend openai`` in
   front of it (``sc-N/<model>``: one upstream request of ``n = N`` per request). Prints tts time /
   direct time. Goal: <= 1.1. With ``--tools builtin`` (two tools, questions about cities) or
   ``--tools FILE`` (JSON lines of ``{"messages": [...], "tools": [...]}``, e.g. BFCL requests) every
   request offers tools: start vLLM with its tool parser (``--vllm-arg=--enable-auto-tool-choice
   --vllm-arg=--tool-call-parser --vllm-arg=hermes``) so that both sides get parsed ``tool_calls``.

Both halves repeat ``--rounds`` times, alternating sides, and report the median of the rounds
(these machines are noisy: compare ratios measured in one run).

    python benchmarks/serve_vs_engine.py --half scripted
    python benchmarks/serve_vs_engine.py --half vllm --vllm-url http://127.0.0.1:8001/v1 --model smollm2
    python benchmarks/serve_vs_engine.py --half vllm --start-vllm ~/.cache/tts/models/smollm2-135m
    python benchmarks/serve_vs_engine.py --half vllm --start-vllm ~/.cache/tts/models/qwen2.5-coder-1.5b \
        --tools builtin --vllm-arg=--enable-auto-tool-choice --vllm-arg=--tool-call-parser --vllm-arg=hermes
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
QUESTION = "What is 6 * 7? Answer with just the number."
CITIES = ("Paris", "Lima", "Oslo", "Tokyo", "Cairo", "Quito", "Rome", "Seoul")
BUILTIN_TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city now",
                                      "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                     "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time", "description": "The local time in a city",
                                      "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                     "required": ["city"]}}},
]


def tool_requests(source: str, count: int) -> list[dict]:
    """``count`` chat requests that offer tools: the built-in pair of tools with questions about
    cities, or the ``{"messages", "tools"}`` lines of a JSON-lines file (repeated to ``count``)."""
    if source == "builtin":
        return [{"messages": [{"role": "user", "content": f"What is the {'weather' if i % 2 else 'time'} in "
                                                          f"{CITIES[i % len(CITIES)]} now?"}],
                 "tools": BUILTIN_TOOLS} for i in range(count)]
    lines = [json.loads(line) for line in Path(source).read_text().splitlines() if line.strip()]
    if not lines:
        raise SystemExit(f"{source} holds no requests")
    return [{"messages": lines[i % len(lines)]["messages"], "tools": lines[i % len(lines)]["tools"]}
            for i in range(count)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def _stats(latencies: list[float], elapsed: float) -> dict[str, float]:
    return {"seconds": round(elapsed, 3), "per_second": round(len(latencies) / elapsed, 1),
            "p50": round(_percentile(latencies, 0.5), 4), "p99": round(_percentile(latencies, 0.99), 4)}


@contextlib.contextmanager
def _process(argv: list[str], health: str, log: Path, timeout: float,
             env: dict[str, str] | None = None) -> Iterator[subprocess.Popen]:
    """A server process, ready once ``health`` answers 200; stopped with SIGTERM afterwards."""
    with log.open("w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
                                env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})})
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if httpx.get(health, timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{argv[:4]} did not start; see {log}:\n{log.read_text()[-2000:]}")
            time.sleep(0.2)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()


async def _fire(url: str, bodies: list[dict], concurrency: int, timeout: float) -> tuple[list[float], float]:
    """POST every body to ``url`` (``concurrency`` at a time); latencies and the elapsed time.

    The load comes from aiohttp where it is installed: httpx's AsyncClient tops out near 80 req/s
    with 64 connections on these machines (even against an endpoint that does nothing, where
    aiohttp does ~1,500), so an httpx load generator measures itself, not the server.
    """
    try:
        import aiohttp
    except ImportError:
        aiohttp = None
    gate = asyncio.Semaphore(concurrency)
    if aiohttp is None:
        print("aiohttp is not installed: httpx's client limits the HTTP numbers (pip install aiohttp)",
              file=sys.stderr)
        limits = httpx.Limits(max_connections=concurrency + 8, max_keepalive_connections=concurrency + 8)
        async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:
            async def one(body: dict) -> float:
                async with gate:
                    t = time.perf_counter()
                    (await client.post(url, json=body)).raise_for_status()
                    return time.perf_counter() - t

            t0 = time.perf_counter()
            latencies = await asyncio.gather(*(one(b) for b in bodies))
            return list(latencies), time.perf_counter() - t0
    connector = aiohttp.TCPConnector(limit=concurrency + 8)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=timeout)) as session:
        async def one_aio(body: dict) -> float:
            async with gate:
                t = time.perf_counter()
                async with session.post(url, json=body) as r:
                    await r.read()
                    r.raise_for_status()
                return time.perf_counter() - t

        t0 = time.perf_counter()
        latencies = await asyncio.gather(*(one_aio(b) for b in bodies))
        return list(latencies), time.perf_counter() - t0


# --- 1. scripted: HTTP vs in-process -------------------------------------------------------------

async def _in_process(session, count: int, concurrency: int, strategy: str, n: int,
                      prompt: str = "math") -> tuple[list[float], float]:
    from tts.prompts import PromptTemplate

    gate = asyncio.Semaphore(concurrency)
    template = PromptTemplate() if prompt == "plain" else None  # the server's plain prompt; None: the math one

    async def one(i: int) -> float:
        async with gate:
            t = time.perf_counter()
            await session.asolve(f"{QUESTION} ({i})", strategy=strategy, n=n, prompt=template)
            return time.perf_counter() - t

    t0 = time.perf_counter()
    latencies = await asyncio.gather(*(one(i) for i in range(count)))
    return list(latencies), time.perf_counter() - t0


def scripted(args: argparse.Namespace) -> dict:
    from tts.cli.serve import build_generator
    from tts.serve.routing import strategy_spec
    from tts.session import Session

    spec = strategy_spec(args.strategy)
    kind, n = spec["kind"], spec.get("n", 1)
    port = _free_port()
    argv = [sys.executable, "-m", "tts.cli", "serve", "--backend", "scripted", "--port", str(port),
            "--strategy", args.strategy, "--max-concurrent", str(max(256, args.concurrency)),
            "--batch-window", str(args.batch_window), "--default-max-tokens", str(args.max_tokens),
            "--prompt", args.prompt]
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    bodies = [{"model": f"{args.strategy}/scripted", "messages": [{"role": "user", "content": f"{QUESTION} ({i})"}]}
              for i in range(args.requests)]
    generator = build_generator("scripted", None, None, 0.6, 0, 2048, None)
    session = Session(generator=generator, max_tokens=args.max_tokens, batch_window=args.batch_window,
                      price_as="smollm2-135m", max_workers=max(256, args.concurrency) * 8)
    http, local = [], []
    try:
        with _process(argv, f"http://127.0.0.1:{port}/health", Path(args.log), 120):
            asyncio.run(_fire(url, bodies, args.concurrency, 120))  # warm both (threads, caches)
            asyncio.run(_in_process(session, args.requests, args.concurrency, kind, n, args.prompt))
            for _ in range(args.rounds):
                http.append(_stats(*asyncio.run(_fire(url, bodies, args.concurrency, 120))))
                local.append(_stats(*asyncio.run(_in_process(session, args.requests, args.concurrency, kind, n,
                                                             args.prompt))))
    finally:
        session.close()
        generator.close()
    h = statistics.median(r["per_second"] for r in http)
    e = statistics.median(r["per_second"] for r in local)
    return {"half": "scripted", "requests": args.requests, "concurrency": args.concurrency, "strategy": args.strategy,
            "prompt": args.prompt,
            "http": http, "in_process": local, "http_per_second": h, "in_process_per_second": e,
            "ratio_http_over_in_process_throughput": round(h / e, 3),
            "round_ratios": [round(a["per_second"] / b["per_second"], 3) for a, b in zip(http, local, strict=True)],
            "goal": ">= 0.8"}


# --- 2. vLLM: through tts vs direct --------------------------------------------------------------

def cpu_vllm_args() -> tuple[str, ...]:
    """vLLM server arguments on a CPU, as tts's in-process engine starts.

    vLLM's defaults reserve 92% of memory and compile for minutes, keep the model's dtype (the
    SmolLM2 checkpoint's bfloat16, 3.2x slower than float32 on a CPU without bf16 instructions, as
    this machine's) and cache prefixes in 128-token blocks. The dtype is
    :func:`tts.backends.vllm.choose_dtype`'s and the block size
    :data:`tts.backends.vllm.CPU_BLOCK_SIZE`, as the in-process engine's.
    """
    from tts.backends.vllm import CPU_BLOCK_SIZE, choose_dtype

    return ("--gpu-memory-utilization", "0.3", "--enforce-eager", "--dtype", choose_dtype("auto", on_gpu=False),
            "--block-size", str(CPU_BLOCK_SIZE))


def cpu_vllm_env() -> dict[str, str]:
    """The vLLM server's environment on a CPU: every core for the engine on a small machine (vLLM-CPU
    keeps one for its front end, halving the compute of 2 cores), as tts's in-process engine does."""
    return {"VLLM_CPU_NUM_OF_RESERVED_CPU": "0"} if (os.cpu_count() or 1) <= 4 else {}


def _has_cuda() -> bool:
    try:
        return subprocess.run(["nvidia-smi", "-L"], check=False, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def vllm(args: argparse.Namespace) -> dict:
    with contextlib.ExitStack() as stack:
        upstream = args.vllm_url
        model = args.model
        if args.start_vllm:
            port, cuda = _free_port(), _has_cuda()
            model = model or Path(args.start_vllm).name  # a served name without slashes (sc-4/<name>)
            stack.enter_context(_process(
                [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", args.start_vllm,
                 "--served-model-name", model, "--port", str(port), "--max-model-len", "2048",
                 *(cpu_vllm_args() if not cuda else ()), *args.vllm_arg],
                f"http://127.0.0.1:{port}/health", Path(args.log + ".vllm"), 900,
                env=cpu_vllm_env() if not cuda else None))
            upstream = f"http://127.0.0.1:{port}/v1"
        if not upstream or not model:
            raise SystemExit("--half vllm needs --vllm-url and --model, or --start-vllm MODEL")
        tts_port = _free_port()
        stack.enter_context(_process(
            [sys.executable, "-m", "tts.cli", "serve", "--backend", "openai", "--base-url", upstream, "--model", model,
             "--price-as", "smollm2-135m", "--port", str(tts_port), "--default-max-tokens", str(args.max_tokens),
             "--strategy", f"sc-{args.n}", "--upstream-timeout", "600", "--upstream-deadline", "900"],
            f"http://127.0.0.1:{tts_port}/health", Path(args.log), 120))
        chats = (tool_requests(args.tools, args.requests) if args.tools else
                 [{"messages": [{"role": "user", "content": f"{QUESTION} ({i})"}]} for i in range(args.requests)])
        direct_bodies = [{"model": model, "n": args.n, "max_tokens": args.max_tokens, "temperature": 0.7, **chat}
                         for chat in chats]
        # "plain": the upstream gets the client's messages as they are (not tts's math prompt), so both
        # sides ask the engine for the same samples (and, with tools, the same tools).
        tts_bodies = [{"model": f"sc-{args.n}/{model}", "max_tokens": args.max_tokens, "temperature": 0.7,
                       "tts": {"prompt": "plain"}, **chat} for chat in chats]
        # tts always asks the upstream for logprobs (they give each choice's token count): a third
        # side sends the direct requests with logprobs too, which tells the engine's share of the
        # difference (computing logprobs) from tts's own.
        logprob_bodies = [{**body, "logprobs": True, "top_logprobs": 0} for body in direct_bodies]
        direct_url, tts_url = f"{upstream}/chat/completions", f"http://127.0.0.1:{tts_port}/v1/chat/completions"
        asyncio.run(_fire(direct_url, direct_bodies[:4], args.requests, 600))  # warm both
        asyncio.run(_fire(tts_url, tts_bodies[:4], args.requests, 600))
        direct, with_logprobs, through = [], [], []
        for _ in range(args.rounds):
            direct.append(_stats(*asyncio.run(_fire(direct_url, direct_bodies, args.requests, 600))))
            with_logprobs.append(_stats(*asyncio.run(_fire(direct_url, logprob_bodies, args.requests, 600))))
            through.append(_stats(*asyncio.run(_fire(tts_url, tts_bodies, args.requests, 600))))
    d = statistics.median(r["seconds"] for r in direct)
    dl = statistics.median(r["seconds"] for r in with_logprobs)
    t = statistics.median(r["seconds"] for r in through)
    return {"half": "vllm", "requests": args.requests, "n": args.n, "max_tokens": args.max_tokens, "model": model,
            "tools": args.tools, "direct": direct, "direct_with_logprobs": with_logprobs, "through_tts": through,
            "direct_seconds": d, "direct_with_logprobs_seconds": dl, "through_tts_seconds": t,
            "ratio_tts_over_direct_time": round(t / d, 3),
            "ratio_tts_over_direct_with_logprobs_time": round(t / dl, 3), "goal": "<= 1.1"}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--half", choices=["scripted", "vllm", "both"], default="scripted")
    p.add_argument("--requests", type=int, default=None,
                   help="Requests per round (default: 400 scripted, 16 vllm).")
    p.add_argument("--concurrency", type=int, default=64, help="scripted: requests in flight at once.")
    p.add_argument("--strategy", default="sc-4", help="scripted: the strategy of every request.")
    p.add_argument("--n", type=int, default=4, help="vllm: samples per request.")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--prompt", choices=["math", "plain"], default="math",
                   help="scripted: the prompt of both sides (math: answers voted as values; plain: free text chosen "
                        "by minimum Bayes risk, much more work per solve). Both sides always run the same one.")
    p.add_argument("--batch-window", type=float, default=0.01)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--vllm-url", help="vllm: a running vLLM server, up to /v1.")
    p.add_argument("--model", help="vllm: the model name that server serves.")
    p.add_argument("--start-vllm", help="vllm: start a vLLM server on this model path here.")
    p.add_argument("--tools", help="vllm: offer tools with every request: 'builtin' or a JSON-lines file of "
                                   "{messages, tools} requests.")
    p.add_argument("--vllm-arg", action="append", default=[], help="Extra argument of the started vLLM server.")
    p.add_argument("--log", default="/tmp/tts_serve_vs_engine.log", help="Where the servers' output goes.")
    p.add_argument("--out", help="Also write the JSON report here.")
    args = p.parse_args()
    reports = []
    for half in (["scripted", "vllm"] if args.half == "both" else [args.half]):
        half_args = argparse.Namespace(**{**vars(args), "requests": args.requests or (400 if half == "scripted" else 16)})
        reports.append(scripted(half_args) if half == "scripted" else vllm(half_args))
    for r in reports:
        if r["half"] == "scripted":
            print(f"scripted: HTTP {r['http_per_second']} req/s vs in-process {r['in_process_per_second']} req/s "
                  f"-> ratio {r['ratio_http_over_in_process_throughput']} (goal >= 0.8; rounds {r['round_ratios']}); "
                  f"p50/p99 HTTP {r['http'][0]['p50']}/{r['http'][0]['p99']} s, "
                  f"in-process {r['in_process'][0]['p50']}/{r['in_process'][0]['p99']} s")
        else:
            print(f"vllm: through tts {r['through_tts_seconds']} s vs direct {r['direct_seconds']} s "
                  f"-> ratio {r['ratio_tts_over_direct_time']} (goal <= 1.1); direct with logprobs (as tts asks) "
                  f"{r['direct_with_logprobs_seconds']} s -> ratio {r['ratio_tts_over_direct_with_logprobs_time']}; "
                  f"p50/p99 tts {r['through_tts'][0]['p50']}/{r['through_tts'][0]['p99']} s, "
                  f"direct {r['direct'][0]['p50']}/{r['direct'][0]['p99']} s")
    print(json.dumps(reports, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(reports, indent=1))


if __name__ == "__main__":
    main()
