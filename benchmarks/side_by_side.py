"""tts beside reference implementations, each run by its own code: self-consistency (its_hub, optillm),
beam search (search-and-learn) and particle filtering (its_hub).

``--search self_consistency`` (the default) is described first; ``--search beam`` and ``--search
particle_filtering`` after it.

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

The searches (``--search beam``, ``--search particle_filtering``) run on the ``chains`` benchmark,
where tts's ``chain`` checker is an exact process verifier, so accuracy differences mean something.
Every side scores steps with that checker: tts as its ``chain`` verifier, each reference through
its own reward interface (``benchmarks/peers/chain_prm.py``, wrapped by the drivers). Every side
gets tts's chains prompt (the four few-shot turns as chat messages), the blank-line step separator,
the same per-step token cap (``--step-tokens``), depth cap (``--depth``), temperature, width and
aggregation (``--aggregation``, default ``min``), and the same problems; rounds alternate the sides
(the first side rotates), round k runs with seed k on both sides.

* ``--search beam``: search-and-learn's ``beam_search`` (``benchmarks/peers/sal_beam_search.py``,
  its code from ``--sal-src``, one problem per call as its script, its own ``vllm.LLM``) vs ``tts
  eval -s beam`` with the in-process engine (``fill=every_step``: search-and-learn's rule of N steps
  at every depth; ``select=verifier``: its ``pred``, the best-scored completion). Each side is a
  process of its own that starts its own engine with tts's engine settings (one at a time);
  ``benchmarks/peers/engine_calls.py`` wraps ``vllm.LLM.generate`` in both, and wall time is the
  span from the first generate call's start to the last one's end (engine start-up, loading and
  grading left out on both sides). Engine calls are ``generate`` calls; tokens are the tokens the
  engine returned.
* ``--search particle_filtering``: its_hub's ``ParticleFiltering`` (``benchmarks/peers/
  its_hub_particle_filtering.py``, in its own environment, every problem at once) vs ``tts eval -s
  particle_filtering --backend openai`` (``--tts-concurrency``, default 64 requests in flight: its_hub
  sends all of its requests at once; request timeout 300 s, as its_hub's HTTP client's default) on
  ONE vLLM server started as above. Wall time: its_hub's
  around its gather, tts's the span of its backend's generate calls
  (``benchmarks/peers/tts_counted_eval.py``); engine calls are the server's finished requests and
  tokens its generation counter, both read before and after each side's run.

Settings that could not be made equal (each side as its code does it):

- Where a solution ends: tts ends a path at a step that states an answer ("The answer is N.", or
  a ``\\boxed{}``, "final answer: ..."), and at the depth cap or an end of sequence. No side
  forces an answer: tts runs with ``force_answer=false`` (its default would continue such a path
  with "Therefore, the final answer is $\\boxed{", one more request each), so a stopped path's
  answer is what its text says on every side. What still differs: search-and-learn also ends a
  beam at a step cut by its token cap or an empty step (tts continues both), and generates its
  last iteration to the end of sequence without the separator stop (tts's last step stops at the
  separator like the others); its_hub ends a particle whose step contains ``stop_token`` ("The
  answer is") or after ``max_steps + 1`` steps (``--depth`` - 1 is passed), and continues one
  that ended its message (tts stops it).
- The partial solution a step continues: tts strips each step and joins them with the separator;
  the references keep the model's text as it came. All three end it with the whole separator
  (tts: ``heal_separator=false``; tts's default holds back its last character, which changes what
  SmolLM2 writes next: see tts.search.tree.stepwise).
- its_hub flattens the chat into one user message (``ChatMessages.to_prompt()``); the driver puts
  the original conversation back before each request (``--flattened`` there sends its_hub's own).
- Batching: tts sends one engine call per search step for all problems; search-and-learn one problem
  at a time (its config refuses more for beam search); its_hub one request per particle and step.
  That is what each implementation does, and the reason for most of the time difference.
- Random draws: engine seeds are the round number on both sides; the samples still differ (vLLM on
  CPU takes no per-request seeds with chunked prefill), so accuracies are compared by interval.

Set-up of the peers, once (its_hub's and optillm's venvs, search-and-learn at its pinned commit):

    benchmarks/peers/setup_peers.sh /tmp/tts_peers
    python benchmarks/side_by_side.py --search beam --model-path ~/.cache/tts/models/smollm2-135m \\
        --sal-src /tmp/tts_peers/search-and-learn/src --problems 8 --n 4 --beam-width 2
    python benchmarks/side_by_side.py --search particle_filtering --model-path ~/.cache/tts/models/smollm2-135m \\
        --its-hub-python /tmp/tts_peers/its_hub/bin/python --problems 8 --n 4
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from serve_vs_engine import _free_port, _has_cuda, cpu_vllm_args, cpu_vllm_env  # noqa: E402

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
    names = {"vllm:generation_tokens_total": "completion", "vllm:prompt_tokens_total": "prompt",
             "vllm:request_success_total": "requests"}
    out = dict.fromkeys(names.values(), 0.0)
    for line in _get(metrics_url)[1].splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in names:
            out[names[name]] += float(line.rsplit(" ", 1)[1])
    return out


def _run(cmd: list[str], what: str, env: dict[str, str] | None = None) -> float:
    """Run a tool to completion; its process wall time. A failure shows the tool's own error.

    The tool's CPU seconds (user + system, start-up included) are added to ``_CLIENT_CPU[-1]``."""
    t0 = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    _CLIENT_CPU.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed (exit {done.returncode}):\n{(done.stderr or done.stdout)[-3000:]}")
    return time.perf_counter() - t0


_CLIENT_CPU: list[float] = []
"""CPU seconds of each tool process ``_run`` ran, in order (read by the round loop)."""


class _Occupancy:
    """How busy the vLLM server was while one side ran: ``/metrics`` polled every ``period`` seconds.

    A client can only be faster than another sending the same requests to the same server by
    keeping the server busier: with nothing running or waiting on the server, time passes on the
    client alone. ``summary()`` gives, over the span from the first poll that saw a request on the
    server to the last, the share of polls that saw none (``idle_share``: the time the client, not
    the server, held up the run; a client that never let the server idle could be at most
    1 / (1 - idle_share) times faster at the same requests) and the mean requests running.
    vLLM updates these gauges when an engine step ends, so the first step of a burst of requests
    (a lockstep search's step: all its prefills at once) reads as idle until it ends; for such a
    client ``idle_share`` is an upper bound.
    """

    def __init__(self, metrics_url: str, period: float = 0.1) -> None:
        self.url, self.period = metrics_url, period
        self.samples: list[tuple[float, float]] = []  # (running, waiting)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> _Occupancy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _poll(self) -> None:
        while not self._stop.wait(self.period):
            with contextlib.suppress(OSError, ValueError):
                gauges = {"vllm:num_requests_running": 0.0, "vllm:num_requests_waiting": 0.0}
                for line in _get(self.url, timeout=2)[1].splitlines():
                    name = line.split("{", 1)[0].split(" ", 1)[0]
                    if name in gauges:
                        gauges[name] += float(line.rsplit(" ", 1)[1])
                self.samples.append((gauges["vllm:num_requests_running"], gauges["vllm:num_requests_waiting"]))

    def summary(self) -> dict:
        busy = [i for i, (run, wait) in enumerate(self.samples) if run or wait]
        if not busy:
            return {"idle_share": None, "mean_running": None, "polls": len(self.samples)}
        span = self.samples[busy[0]:busy[-1] + 1]
        idle = sum(1 for run, wait in span if not run and not wait)
        return {"idle_share": round(idle / len(span), 4),
                "mean_running": round(statistics.fmean(run for run, _ in span), 2), "polls": len(span)}


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

# --- The searches: tts beside search-and-learn's beam search and its_hub's particle filtering --------


def _search_problems(args: argparse.Namespace) -> tuple[list, list[dict]]:
    """The chains problems, and for the peers each question, gold answer and tts's rendered chat."""
    from tts.config import EvalConfig
    from tts.eval.runner import load_problems

    bench, problems = load_problems(EvalConfig.model_validate({"data": {
        "benchmark": "chains", "limit": args.problems, "options": _chain_options(args)}}))
    rows = [{"question": q.question, "answer": q.answer,
             "messages": [{"role": m.role, "content": m.content} for m in bench.prompt.render(q)]} for q in problems]
    return problems, rows


def _chain_options(args: argparse.Namespace) -> dict:
    if not args.chain_steps:
        return {}
    try:
        steps = [int(k) for k in str(args.chain_steps).split(",")]
    except ValueError:
        raise SystemExit(f"--chain-steps {args.chain_steps!r}: give chain lengths as comma-separated whole numbers, "
                         "e.g. 1,2,3") from None
    return {"steps": steps}


def _tts_search_config(args: argparse.Namespace, ctx: dict, seed: int, heal: bool = False) -> dict:
    """The ``tts eval`` config (JSON is YAML) of the tts side: the same settings the peers get
    (``heal``: tts's own default boundary instead, for the ``tts-default`` side)."""
    strategy = {"kind": args.search, "n": args.n, "max_depth": args.depth, "step_tokens": args.step_tokens,
                # The peers continue a partial solution that ends with the whole separator, and stop a
                # path that must end without an answer as it is (no forced answer, no extra request).
                "heal_separator": heal, "force_answer": False, "select": "verifier",
                "verifier": {"kind": "chain", "aggregation": args.aggregation}}
    if args.search == "beam":
        # search-and-learn's rule: n steps at every depth, the first n to finish returned.
        strategy |= {"beam_width": args.beam_width, "fill": "every_step"}
        backend = {"kind": "vllm", "model": args.model_path, "max_model_len": 2048, "seed": seed}
    else:
        # its_hub's HTTP client waits aiohttp's default 300 s for an answer; tts's default of 120 s
        # made tts give up (and retry) on a loaded CPU server where its_hub waited.
        backend = {"kind": "openai", "base_url": ctx["url"], "model": ctx["model"],
                   "concurrency": args.tts_concurrency, "timeout": 300.0}
    return {"backend": backend, "data": {"benchmark": "chains", "limit": args.problems,
                                         "options": _chain_options(args)},
            "batch_size": args.problems, "seed": seed,
            # The token cap of a whole solution never binds: every step has its own cap on all sides.
            "sampling": {"max_tokens": args.step_tokens * args.depth, "temperature": args.temperature},
            "strategies": [strategy]}


def _tts_search_round(ctx: dict, out: Path, seed: int, heal: bool = False) -> dict:
    args = ctx["args"]
    config = out.with_suffix(".yaml")
    config.write_text(json.dumps(_tts_search_config(args, ctx, seed, heal)))
    calls = out.with_suffix(".calls.json")
    wall = _run([sys.executable, str(PEERS / "tts_counted_eval.py"), "--calls-out", str(calls), "--",
                 "eval", "--config", str(config), "--gpu", "", "--out", str(out)],
                "tts eval", env={**os.environ, "HF_HUB_OFFLINE": "1"})
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    log = json.loads(calls.read_text())["vllm" if args.search == "beam" else "openai"]
    result = {"elapsed": log["span_seconds"], "process_wall": wall, "correct": sum(r["correct"] for r in rows),
              "engine_calls": log["calls"], "engine_seconds": log["engine_seconds"],
              "own_completion_tokens": sum(r["usage"]["completion_tokens"] for r in rows)}
    if args.search == "beam":
        result["completion_tokens"] = log["completion_tokens"]
    return result


def _sal_round(ctx: dict, out: Path, seed: int) -> dict:
    args = ctx["args"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([args.sal_src, str(PEERS / "sal_stubs"), str(ROOT)])}
    wall = _run([sys.executable, str(PEERS / "sal_beam_search.py"), "--problems", str(ctx["problems_json"]),
                 "--model-path", args.model_path, "--n", str(args.n), "--beam-width", str(args.beam_width),
                 "--num-iterations", str(args.depth), "--max-tokens", str(args.step_tokens),
                 "--temperature", str(args.temperature), "--agg-strategy", args.aggregation, "--seed", str(seed),
                 "--out", str(out)], "search-and-learn", env=env)
    result = json.loads(out.read_text())
    log = result["engine"]
    return {"elapsed": log["span_seconds"], "process_wall": wall, "loop_seconds": result["elapsed"],
            "correct": _count_correct(result["preds"], ctx["problems"]), "engine_calls": log["calls"],
            "engine_seconds": log["engine_seconds"], "completion_tokens": log["completion_tokens"],
            "own_completion_tokens": result["sal_reported_completion_tokens"]}


def _its_hub_pf_round(ctx: dict, out: Path, seed: int) -> dict:
    args = ctx["args"]
    wall = _run([args.its_hub_python, str(PEERS / "its_hub_particle_filtering.py"), "--problems",
                 str(ctx["problems_json"]), "--base-url", ctx["url"], "--model", ctx["model"], "--n", str(args.n),
                 "--max-steps", str(args.depth - 1), "--max-tokens", str(args.step_tokens), "--temperature",
                 str(args.temperature), "--aggregation", args.aggregation, "--seed", str(seed), "--out", str(out)],
                "its_hub")
    result = json.loads(out.read_text())
    return {"elapsed": result["elapsed"], "process_wall": wall,
            "correct": _count_correct(result["responses"], ctx["problems"]), "lm_requests": result["lm_requests"]}


def _count_correct(texts: list[str], problems: list) -> int:
    """Correct answers among the texts under tts's answer extractor and grader."""
    return round(_grade(texts, problems) * len(problems))


SEARCH_ROUNDS = {"beam": {"tts": _tts_search_round, "search-and-learn": _sal_round},
                 "particle_filtering": {"tts": _tts_search_round, "its_hub": _its_hub_pf_round}}


def _search_summary(runs: list[dict], problems: int, tts_elapsed: float) -> dict:
    """One side's medians over its rounds, its accuracy with a 95% interval, its time as a multiple of tts's."""
    from tts.eval.report import wilson_interval

    elapsed = statistics.median(r["elapsed"] for r in runs)
    correct = sum(r["correct"] for r in runs)
    low, high = wilson_interval(correct, problems * len(runs))
    return {"elapsed_median": round(elapsed, 2), "ratio_to_tts": round(elapsed / tts_elapsed, 3),
            "accuracy": round(correct / (problems * len(runs)), 3), "accuracy_interval": [round(low, 3), round(high, 3)],
            "accuracy_per_round": [r["correct"] / problems for r in runs],
            "completion_tokens_median": statistics.median(r["completion_tokens"] for r in runs),
            "engine_calls_median": statistics.median(r["engine_calls"] for r in runs),
            "client_cpu_seconds_median": statistics.median(r["client_cpu_seconds"] for r in runs),
            "server_idle_share_median": _median_or_none(r.get("server", {}).get("idle_share") for r in runs),
            "runs": runs}


def _median_or_none(values: Iterator[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _search_main(args: argparse.Namespace) -> None:
    """tts beside one reference search (``--search beam`` or ``particle_filtering``); see the module docstring."""
    args.problems = args.problems or 8
    args.n = args.n or 4
    args.tts_concurrency = args.tts_concurrency or 64
    peer = {"beam": ("search-and-learn", args.sal_src, "--sal-src"),
            "particle_filtering": ("its_hub", args.its_hub_python, "--its-hub-python")}[args.search]
    if not peer[1]:
        raise SystemExit(f"--search {args.search} compares tts with {peer[0]}: give {peer[2]} (made by "
                         "benchmarks/peers/setup_peers.sh)")
    if args.search == "beam" and (args.n % args.beam_width or args.beam_width > args.n):
        raise SystemExit(f"--n ({args.n}) must be a multiple of --beam-width ({args.beam_width})")
    if args.depth < 2:
        raise SystemExit("--depth must be at least 2 (its_hub's max_steps is depth - 1)")
    problems, rows = _search_problems(args)
    work = Path(tempfile.mkdtemp(prefix="side_by_side_"))
    problems_json = work / "problems.json"
    problems_json.write_text(json.dumps(rows))
    ctx = {"args": args, "problems": problems, "problems_json": problems_json, "model": Path(args.model_path).name}
    rounds = dict(SEARCH_ROUNDS[args.search])
    if args.tts_default:
        rounds["tts-default"] = functools.partial(_tts_search_round, heal=True)
    sides = list(rounds)
    runs: dict[str, list[dict]] = {t: [] for t in sides}
    alive = None
    with contextlib.ExitStack() as stack:
        port = None
        if args.search == "particle_filtering":
            port, cuda = _free_port(), _has_cuda()
            ctx["url"] = f"http://127.0.0.1:{port}/v1"
            vllm = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", args.model_path,
                    "--served-model-name", ctx["model"], "--port", str(port), "--max-model-len", "2048",
                    *(cpu_vllm_args() if not cuda else ()), *args.vllm_arg]
            stack.enter_context(_server(vllm, f"http://127.0.0.1:{port}/health", Path(args.log), 900, ROOT,
                                        env=cpu_vllm_env() if not cuda else None))
            _warm_up(ctx["url"], ctx["model"], rows[0]["messages"])
        for k in range(args.rounds):
            for side in sides[k % len(sides):] + sides[:k % len(sides)]:
                before = _counters(f"http://127.0.0.1:{port}/metrics") if port else None
                occupancy = _Occupancy(f"http://127.0.0.1:{port}/metrics") if port else contextlib.nullcontext()
                try:
                    with occupancy:
                        result = rounds[side](ctx, work / f"{side}{k}", k)
                except RuntimeError as e:
                    if port and not _alive(f"http://127.0.0.1:{port}/health"):
                        raise RuntimeError(f"{side} failed and the vLLM server no longer answers /health; its log "
                                           f"ends:\n{Path(args.log).read_text()[-3000:]}") from e
                    raise
                if port:
                    after = _counters(f"http://127.0.0.1:{port}/metrics")
                    result["completion_tokens"] = int(after["completion"] - before["completion"])
                    result["prompt_tokens"] = int(after["prompt"] - before["prompt"])
                    result["engine_calls"] = int(after["requests"] - before["requests"])
                    result["server"] = occupancy.summary()
                result["client_cpu_seconds"] = round(_CLIENT_CPU[-1], 2)
                result["round"] = k
                runs[side].append(result)
                print(f"round {k} {side}: {result['elapsed']:.1f} s, {result['correct']}/{args.problems} correct, "
                      f"{result['completion_tokens']} generated tokens, {result['engine_calls']} engine calls",
                      file=sys.stderr, flush=True)
        if port:
            alive = _alive(f"http://127.0.0.1:{port}/health")
    t = statistics.median(r["elapsed"] for r in runs["tts"])
    report = {"search": args.search, "problems": args.problems, "n": args.n, "beam_width": args.beam_width,
              "depth": args.depth, "step_tokens": args.step_tokens, "temperature": args.temperature,
              "aggregation": args.aggregation, "chain_steps": args.chain_steps, "rounds": args.rounds,
              "tts_concurrency": args.tts_concurrency if args.search == "particle_filtering" else None,
              "work": str(work), "server_alive_after": alive,
              "sides": {side: _search_summary(rs, args.problems, t) for side, rs in runs.items()}}
    calls = "requests" if port else "generate calls"
    print(f"{'side':<17} {'wall s':>7} {'x tts':>6} {'accuracy [95% CI]':>20} {'gen tokens':>10} "
          f"{'engine ' + calls:>22} {'client cpu s':>12}" + (f" {'server idle':>11}" if port else ""))
    for side, s in report["sides"].items():
        acc = f"{s['accuracy']:.2f} [{s['accuracy_interval'][0]:.2f}, {s['accuracy_interval'][1]:.2f}]"
        idle = s["server_idle_share_median"]
        print(f"{side:<17} {s['elapsed_median']:>7.1f} {s['ratio_to_tts']:>6.2f} {acc:>20} "
              f"{s['completion_tokens_median']:>10,.0f} {s['engine_calls_median']:>22,.0f} "
              f"{s['client_cpu_seconds_median']:>12.1f}"
              + ((f" {idle:>10.1%}" if idle is not None else f" {'-':>10}") if port else ""))
    print("client cpu s: the side's own process (start-up included; with the in-process engine, the engine's "
          "front end too)" + ("; server idle: share of the run with no request on the server" if port else ""))
    if args.tts_default:
        print("tts-default: tts with heal_separator=true (its default boundary), the other settings as tts's row")
    print(f"({args.search}; medians over {args.rounds} alternating round(s); {args.problems} chains problems, "
          f"n={args.n}" + (f", beam width {args.beam_width}" if args.search == "beam" else "")
          + f", depth {args.depth}, {args.step_tokens} tokens a step, T={args.temperature}, chain checker "
          f"({args.aggregation}); accuracy pooled over rounds with a Wilson interval)"
          + (f" server alive after: {alive}" if port else ""))
    print(json.dumps(report, indent=1))
    if port and not alive:
        raise SystemExit("the vLLM server no longer answers /health")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-path", required=True, help="Model directory the vLLM server loads.")
    p.add_argument("--search", choices=("self_consistency", "beam", "particle_filtering"), default="self_consistency",
                   help="self_consistency (default): tts, its_hub and optillm on the demo; beam: tts vs "
                        "search-and-learn (--sal-src) with the in-process engine; particle_filtering: tts vs "
                        "its_hub (--its-hub-python) on one server. The two searches run on chains with tts's "
                        "chain checker as every side's step scorer.")
    p.add_argument("--sal-src", help="search-and-learn's src folder at the pinned commit (setup_peers.sh); "
                                     "--search beam.")
    p.add_argument("--its-hub-python", help="Python of a virtual environment with its_hub[lm] (its_hub is skipped "
                                            "without it).")
    p.add_argument("--optillm-python", help="Python of a virtual environment with optillm (optillm is skipped "
                                            "without it).")
    p.add_argument("--problems", type=int, default=None, help="Problems (default 32; the searches: 8).")
    p.add_argument("--n", type=int, default=None, help="Samples / candidates / particles (default 8; searches 4).")
    p.add_argument("--max-tokens", type=int, default=64, help="Self-consistency's token cap per sample.")
    p.add_argument("--beam-width", type=int, default=2, help="--search beam: M (n/M beams kept per step).")
    p.add_argument("--depth", type=int, default=10,
                   help="Searches: most steps of a solution (tts max_depth; search-and-learn num_iterations; "
                        "its_hub max_steps = depth - 1, since it stops after max_steps + 1 steps).")
    p.add_argument("--step-tokens", type=int, default=32, help="Searches: most tokens of one step request.")
    p.add_argument("--aggregation", default="min", choices=("min", "last", "prod"),
                   help="Searches: how the chain checker's step scores make a solution's score, on every side.")
    p.add_argument("--tts-default", action="store_true",
                   help="Searches: also run tts with its default step boundary (heal_separator=true: the "
                        "continuation holds back the separator's last newline), everything else equal.")
    p.add_argument("--chain-steps", default=None,
                   help="Searches: chain lengths of the chains problems, e.g. '1,2,3' (default: the benchmark's 1..8).")
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--tts-concurrency", type=int, default=None,
                   help="Requests tts keeps in flight (the OpenAI backend's concurrency; default: its own default, "
                        "64 for this local server; particle filtering: 64, since its_hub sends all its "
                        "requests at once).")
    p.add_argument("--vllm-arg", action="append", default=[],
                   help="One more argument for the vLLM server, e.g. --vllm-arg=--gpu-memory-utilization=0.15 "
                        "(later arguments override the defaults).")
    p.add_argument("--log", default="/tmp/tts_side_by_side.log",
                   help="vLLM's log; optillm's goes beside it with the suffix .optillm.")
    args = p.parse_args()
    _raise_on_sigterm()
    if args.search != "self_consistency":
        _search_main(args)
        return
    args.problems = args.problems or 32
    args.n = args.n or 8
    args.tts_concurrency = args.tts_concurrency or 8

    from tts.config import EvalConfig
    from tts.eval.runner import load_problems

    bench, problems = load_problems(EvalConfig.model_validate({"data": {"benchmark": "demo", "limit": args.problems}}))
    model = Path(args.model_path).name
    work = Path(tempfile.mkdtemp(prefix="side_by_side_"))
    messages = work / "messages.json"
    conversations = [[{"role": m.role, "content": m.content} for m in bench.prompt.render(q)] for q in problems]
    messages.write_text(json.dumps(conversations))
    port, cuda = _free_port(), _has_cuda()
    url = f"http://127.0.0.1:{port}/v1"
    vllm = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", args.model_path,
            "--served-model-name", model, "--port", str(port), "--max-model-len", "2048",
            *(cpu_vllm_args() if not cuda else ()), *args.vllm_arg]
    tools = ["tts"] + [t for t, py in (("its_hub", args.its_hub_python), ("optillm", args.optillm_python)) if py]
    runs: dict[str, list[dict]] = {t: [] for t in tools}
    ctx = {"args": args, "url": url, "model": model, "messages": messages, "problems": problems}
    with contextlib.ExitStack() as stack:
        stack.enter_context(_server(vllm, f"http://127.0.0.1:{port}/health", Path(args.log), 900, ROOT,
                                    env=cpu_vllm_env() if not cuda else None))
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
