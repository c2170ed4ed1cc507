"""Accelerator specs for the roofline cost model, and a calibration of the CPU this runs on.

Each :class:`Hardware` carries peak dense matmul throughput, memory bandwidth and capacity, and the
source of those numbers. Peaks are *dense* (no 2:4 sparsity), as in the vendors' datasheets;
bytes are decimal (1 GB = 1e9 bytes) as the datasheets print them. The ``cpu`` entry is measured on
the spot by :func:`calibrate_cpu` and cached as JSON under :func:`tts.paths.cache_dir`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from tts.paths import cache_dir

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Hardware:
    """One device's roofline numbers.

    Args:
        name: Display name.
        peak_flops: Peak dense bf16 matmul FLOP/s (for a calibrated CPU: achieved float32 FLOP/s).
        bandwidth: Main-memory (HBM) bandwidth in bytes/s.
        memory_bytes: Device memory in bytes.
        peak_flops_fp8: Peak dense fp8 FLOP/s, None where the device has no fp8 tensor cores.
        source: Where the numbers come from.
        interconnect: GPU-to-GPU bandwidth each way, bytes/s (NVLink, else PCIe): half the
            datasheet's bidirectional total. Prices tensor parallelism's all-reduces; None: unknown
            (a CPU), and tensor parallelism is not priced.
    """

    name: str
    peak_flops: float
    bandwidth: float
    memory_bytes: float
    peak_flops_fp8: float | None = None
    source: str = ""
    interconnect: float | None = None

    def __post_init__(self) -> None:
        if self.peak_flops <= 0 or self.bandwidth <= 0:
            raise ValueError(f"hardware {self.name!r}: peak_flops and bandwidth must be positive")

    @property
    def ridge(self) -> float:
        """Arithmetic intensity I at the roofline ridge, FLOPs per byte: peak FLOP/s / bandwidth."""
        return self.peak_flops / self.bandwidth

    @property
    def ridge_fp8(self) -> float | None:
        """Ridge with the fp8 peak (Kinetics' I = 562.5 is B200's fp8 ridge: 4.5e15 / 8e12)."""
        return None if self.peak_flops_fp8 is None else self.peak_flops_fp8 / self.bandwidth

    @classmethod
    def with_ridge(cls, ridge: float, *, bandwidth: float = 1e12, name: str | None = None,
                   ) -> Hardware:
        """A synthetic device with the given ridge (FLOPs per byte), e.g. to reproduce a paper."""
        return cls(name=name or f"ridge-{ridge:g}", peak_flops=ridge * bandwidth,
                   bandwidth=bandwidth, memory_bytes=0.0, source="synthetic")


_T, _G = 1e12, 1e9
_HOPPER = "NVIDIA H100 Tensor Core GPU datasheet"
# Interconnect each way = the datasheet's bidirectional figure / 2: NVLink 900 GB/s (H100 SXM, H200),
# 1.8 TB/s (B200), 600 GB/s (A100 SXM; H100 PCIe's NVLink bridge); PCIe Gen4 x16 64 GB/s (L40S, RTX 4090).
HARDWARE: dict[str, Hardware] = {
    h.name.lower(): h
    for h in (
        Hardware("H100-SXM", 989.4 * _T, 3.35e12, 80 * _G, 1978.9 * _T, f"{_HOPPER} (SXM5)", 450 * _G),
        Hardware("H100-PCIe", 756 * _T, 2.0e12, 80 * _G, 1513 * _T, f"{_HOPPER} (PCIe)", 300 * _G),
        Hardware("H200", 989.4 * _T, 4.8e12, 141 * _G, 1978.9 * _T,
                 "NVIDIA H200 Tensor Core GPU datasheet (SXM)", 450 * _G),
        Hardware("B200", 2250 * _T, 8.0e12, 180 * _G, 4500 * _T,
                 "NVIDIA DGX B200 / HGX B200 datasheet, per GPU (dense = half the sparse figure)", 900 * _G),
        Hardware("A100-40GB", 312 * _T, 1.555e12, 40 * _G, None,
                 "NVIDIA A100 Tensor Core GPU datasheet (SXM 40GB)", 300 * _G),
        Hardware("A100-80GB", 312 * _T, 2.039e12, 80 * _G, None,
                 "NVIDIA A100 Tensor Core GPU datasheet (SXM 80GB)", 300 * _G),
        Hardware("L40S", 362.05 * _T, 864 * _G, 48 * _G, 733 * _T, "NVIDIA L40S GPU datasheet", 32 * _G),
        Hardware("RTX-4090", 165.2 * _T, 1008 * _G, 24 * _G, 330.3 * _T,
                 "NVIDIA Ada Lovelace GPU architecture whitepaper (GeForce RTX 4090, "
                 "FP32 accumulate)", 32 * _G),
    )
}

ALIASES = {
    "h100": "h100-sxm", "h100sxm": "h100-sxm", "h100_sxm": "h100-sxm",
    "h100pcie": "h100-pcie", "h100_pcie": "h100-pcie",
    "a100": "a100-80gb", "a100-80": "a100-80gb", "a100_80gb": "a100-80gb",
    "a100-40": "a100-40gb", "a100_40gb": "a100-40gb",
    "4090": "rtx-4090", "rtx4090": "rtx-4090", "rtx_4090": "rtx-4090",
    "h200-sxm": "h200", "b200-sxm": "b200",
}


def _cpu_cache_file() -> Path:
    return cache_dir() / "hardware_cpu.json"


def _measure_matmul_flops(sizes: tuple[int, ...], repeats: int) -> float:
    """Best achieved float32 matmul FLOP/s over a few square sizes (2 n^3 FLOPs per product)."""
    import numpy as np

    rng = np.random.default_rng(0)
    best = 0.0
    for n in sizes:
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
        a @ b  # warm-up: thread pool start, page faults
        for _ in range(repeats):
            t0 = time.perf_counter()
            a @ b
            dt = time.perf_counter() - t0
            best = max(best, 2.0 * n**3 / max(dt, 1e-9))
    return best


def _measure_bandwidth(nbytes: int, repeats: int) -> float:
    """Best copy bandwidth: bytes read plus bytes written per second."""
    import numpy as np

    src = np.ones(nbytes // 8, dtype=np.float64)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # warm-up: touch every page
    best = 0.0
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        dt = time.perf_counter() - t0
        best = max(best, 2.0 * src.nbytes / max(dt, 1e-9))
    return best


def _total_memory_bytes() -> float:
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 0.0


def calibrate_cpu(*, refresh: bool = False, quick: bool = False) -> Hardware:
    """Measure this machine's CPU: achieved matmul FLOP/s and memory copy bandwidth.

    The result is cached as JSON under :func:`tts.paths.cache_dir`; later calls reuse it unless
    ``refresh``.

    Args:
        refresh: Measure again even when a cached calibration exists.
        quick: Smaller problems and fewer repeats (about 0.1 s; for tests).

    Returns:
        A ``Hardware`` named ``cpu`` whose peak is the best float32 matmul rate measured.
    """
    path = _cpu_cache_file()
    if not refresh and not quick and path.is_file():
        try:
            return Hardware(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError) as exc:
            logger.warning("ignoring unreadable CPU calibration %s: %s", path, exc)
    if quick:
        sizes, repeats, nbytes = (256, 512), 3, 64 << 20
    else:
        sizes, repeats, nbytes = (512, 1024, 2048), 5, 256 << 20
    flops = _measure_matmul_flops(sizes, repeats)
    bandwidth = _measure_bandwidth(nbytes, repeats)
    hw = Hardware(
        name="cpu", peak_flops=flops, bandwidth=bandwidth, memory_bytes=_total_memory_bytes(),
        source=f"measured by tts.cost.hardware.calibrate_cpu on {time.strftime('%Y-%m-%d')}:"
               f" numpy float32 matmul n={list(sizes)}, copy of {nbytes >> 20} MiB, best of "
               f"{repeats}",
    )
    logger.info("CPU calibration: %.3g FLOP/s, %.3g B/s", flops, bandwidth)
    if not quick:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(dataclasses.asdict(hw), indent=2))
        except OSError as exc:
            logger.warning("could not cache the CPU calibration at %s: %s", path, exc)
    return hw


def known_hardware() -> list[str]:
    """Names ``get_hardware`` accepts (aliases aside), ``cpu`` included."""
    return [h.name for h in HARDWARE.values()] + ["cpu"]


def get_hardware(name: str) -> Hardware:
    """Look up a device by name or alias (case-insensitive); ``"cpu"`` calibrates this machine.

    Raises:
        ValueError: for an unknown name; the message lists the known ones.
    """
    key = name.strip().lower().replace(" ", "-")
    if key == "cpu":
        return calibrate_cpu()
    key = ALIASES.get(key, key)
    if key not in HARDWARE:
        raise ValueError(f"unknown GPU {name!r}; known: {', '.join(known_hardware())} "
                         f"(aliases: {', '.join(sorted(ALIASES))})")
    return HARDWARE[key]
