"""Hardware table, aliases and the CPU calibration."""

from __future__ import annotations

import json

import pytest

from tts.cost import hardware
from tts.cost.hardware import Hardware, calibrate_cpu, get_hardware


def test_h100_ridge_and_alias():
    h = get_hardware("h100")
    assert h.name == "H100-SXM"
    assert h.ridge == pytest.approx(989.4e12 / 3.35e12)
    assert get_hardware("H100 PCIe").name == "H100-PCIe"


def test_b200_fp8_ridge_is_the_kinetics_intensity():
    assert get_hardware("b200").ridge_fp8 == pytest.approx(562.5)


def test_every_entry_cites_a_source():
    for h in hardware.HARDWARE.values():
        assert h.source and h.peak_flops > 0 and h.bandwidth > 0 and h.memory_bytes > 0


def test_unknown_gpu_lists_known_names():
    with pytest.raises(ValueError, match="unknown GPU 'v100'.*H100-SXM.*RTX-4090"):
        get_hardware("v100")


def test_a_synthetic_ridge_sets_the_memory_price_in_eflops():
    # Kinetics: eFLOPs = FLOPs + I * bytes; a device built for ridge I must price bytes at exactly I.
    from tts.cost.architecture import load_architecture
    from tts.cost.cost_model import CostModel

    arch = load_architecture("qwen3-8b")
    low, high = (CostModel(arch, Hardware.with_ridge(r)).cost_request(200, [1000] * 4) for r in (100.0, 562.5))
    assert low.flops == high.flops and low.bytes == high.bytes
    assert high.eflops == pytest.approx(high.flops + 562.5 * high.bytes)
    assert high.eflops - low.eflops == pytest.approx(462.5 * high.bytes)


def test_rejects_nonpositive_peak():
    with pytest.raises(ValueError, match="positive"):
        Hardware("x", 0.0, 1.0, 1.0)


def test_quick_calibration_measures_something():
    h = calibrate_cpu(quick=True)
    assert h.name == "cpu"
    assert h.peak_flops > 1e8  # any machine that runs numpy does 0.1 GFLOP/s
    assert h.bandwidth > 1e8


def test_calibration_is_cached(monkeypatch, tmp_path):
    monkeypatch.setenv("TTS_CACHE", str(tmp_path))
    monkeypatch.setattr(hardware, "_measure_matmul_flops", lambda sizes, repeats: 2e11)
    monkeypatch.setattr(hardware, "_measure_bandwidth", lambda nbytes, repeats: 2e10)
    first = calibrate_cpu()
    assert (first.peak_flops, first.bandwidth) == (2e11, 2e10)
    assert json.loads((tmp_path / "hardware_cpu.json").read_text())["peak_flops"] == 2e11
    monkeypatch.setattr(hardware, "_measure_matmul_flops", lambda sizes, repeats: 1.0)
    assert get_hardware("cpu").peak_flops == 2e11  # from the cache
    assert calibrate_cpu(refresh=True).peak_flops == 1.0
