"""Datasheet peaks by profiler device name, and the roofline (jobs.analyze.efficiency.devices)."""

from __future__ import annotations

import gzip
import json

import pytest

from jobs.analyze.efficiency.devices import DEVICES, device_peaks, roofline

PRECISIONS = {"fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8"}


@pytest.mark.parametrize(
    ("device_name", "part", "bf16_tflops", "tbps"),
    [
        ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM5", 989.4, 3.35),
        ("NVIDIA H100 PCIe", "NVIDIA H100 PCIe", 756, 2.0),
        ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 SXM4 80GB", 312, 2.039),
        ("NVIDIA A100-PG509-200", "NVIDIA A100 40GB", 312, 1.555),
        ("NVIDIA B200", "NVIDIA B200", 2250, 8.0),
        ("AMD Instinct MI300X", "AMD Instinct MI300X", 1307.4, 5.3),
        ("AMD Instinct MI250X / MI250", "AMD Instinct MI250X (one GCD)", 383 / 2, 3.2768 / 2),
        ("Tesla V100-SXM2-32GB", "NVIDIA Tesla V100 SXM2", None, 0.9),
    ],
)
def test_device_names_as_profilers_write_them(device_name, part, bf16_tflops, tbps):
    d = device_peaks(device_name)
    assert d.name == part
    assert d.bandwidth == pytest.approx(tbps * 1e12)
    assert d.peak_flops("bf16") == (pytest.approx(bf16_tflops * 1e12) if bf16_tflops else None)


def test_unknown_devices_have_no_peak():
    for name in ("AMD Radeon Graphics", "ARTEMIS", "NVIDIA GeForce RTX 4090", "", None):
        assert device_peaks(name) is None


def test_fp32_matrix_work_is_bounded_by_the_tf32_peak():
    a100 = device_peaks("NVIDIA A100-SXM4-40GB")
    assert a100.peak_flops("fp32", "conv") == a100.peak_flops("fp32", "gemm") == pytest.approx(156e12)
    assert a100.peak_flops("fp32", "elementwise") == pytest.approx(19.5e12)
    v100 = device_peaks("Tesla V100-SXM2-16GB")  # no TF32: the fp32 peak
    assert v100.peak_flops("fp32", "gemm") == pytest.approx(15.7e12)


def test_every_entry_is_consistent():
    for d in DEVICES:
        assert d.flops and set(d.flops) <= PRECISIONS, d.name
        assert all(v > 0 for v in d.flops.values()) and d.bandwidth > 0, d.name
        assert d.source, d.name
        if "bf16" in d.flops and "fp32" in d.flops:
            assert d.flops["bf16"] >= d.flops["fp32"], d.name  # tensor/matrix units beat fp32 everywhere


def test_every_gpu_of_the_corpus_is_known_or_said_unknown(CORPUS):
    """The corpus' NVIDIA and AMD Instinct devices all have datasheet figures; the others (a generic Radeon name,
    MTIA) none."""
    names = set()
    for f in (CORPUS / "torch").rglob("*.json*"):
        opener = gzip.open if f.read_bytes()[:2] == b"\x1f\x8b" else open
        with opener(f, "rt") as fh:
            doc = json.load(fh)
        if isinstance(doc, dict):  # a bare event list has no device properties
            names |= {p.get("name") for p in (doc.get("deviceProperties") or []) if p.get("name")}
    known = {n for n in names if device_peaks(n)}
    assert {"NVIDIA H100 80GB HBM3", "NVIDIA B200", "AMD Instinct MI300X", "Tesla V100-SXM2-32GB"} <= known
    assert {n for n in names - known} <= {"AMD Radeon Graphics", "ARTEMIS"}, names - known


def test_roofline_of_a_gemm_and_of_a_copy():
    h100 = device_peaks("NVIDIA H100 80GB HBM3")
    peak, bw = h100.peak_flops("bf16"), h100.bandwidth
    # 2·4096·1024·1024 FLOPs over 18.9 MB in 10 µs: intensity 455 FLOP/B > ridge 295: compute-bound, 86.8 % of peak
    r = roofline(8_589_934_592, 18_874_368, 10_000, peak, bw)
    assert r.bound == "compute" and r.ridge == pytest.approx(989.4 / 3.35)
    assert r.achieved_flops == pytest.approx(858.99e12, rel=1e-4)
    assert r.pct_of_peak_flops == pytest.approx(100 * 858.9934592e12 / 989.4e12)
    assert r.pct_of_roofline == r.pct_of_peak_flops
    # an elementwise op: 1 FLOP per 6 bytes, 1 GB moved in 500 µs: memory-bound at 2 TB/s = 59.7 % of 3.35 TB/s
    e = roofline(1e9 / 6, 1e9, 500_000, peak, bw)
    assert e.bound == "memory" and e.pct_of_peak_bandwidth == pytest.approx(100 * 2e12 / 3.35e12)
    assert e.pct_of_roofline == e.pct_of_peak_bandwidth
    # 32 MB in 9.46 µs (an elementwise add of the H100 OWLv2 trace): 3.37 TB/s, above HBM3's 3.35: from L2
    c = roofline(5185 * 1024, 3 * 5185 * 1024 * 2, 9_460, peak, bw)
    assert c.bound == "cache" and c.pct_of_peak_bandwidth > 100 and c.pct_of_peak_flops < 1
    with pytest.raises(ValueError):
        roofline(1, 1, 0, peak, bw)
