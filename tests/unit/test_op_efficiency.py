"""Op efficiency per rank (jobs.analyze.efficiency.ops): kernels charged to the innermost modelled op, on a small
Kineto trace through the real parser, and on the H100 OWLv2 corpus trace checked against the raw JSON."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict

import pandas as pd
import pytest

from jobs.analyze.efficiency.ops import op_efficiency
from jobs.normalize.identity import with_identity
from jobs.normalize.kineto.parse import parse_kineto
from schemas import OP_EFFICIENCY

BF16 = "c10::BFloat16"
H100 = "NVIDIA H100 80GB HBM3"
OWLV2 = "torch/TraceLens/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz"


def _x(name, cat, ts, dur, tid=1, pid=100, **args):
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": pid, "tid": tid, "args": args}


def _events(trace_events, device=H100):
    doc = {"traceEvents": trace_events, "deviceProperties": [{"id": 0, "name": device}]}
    p = parse_kineto(json.dumps(doc).encode(), "mem.json")
    ident = dict(date="2026-01-01", job_id="j", attempt=0, rank=0, capture_id="c")
    return with_identity(p.events, ident), p.meta["device_name"]


def _small_trace():
    """linear → addmm → launch → GEMM kernel (10 µs); relu → launch → kernel (2 µs); copy_ (not modelled) → kernel."""
    launch = {"grid": [4, 2, 1], "block": [128, 1, 1], "registers per thread": 96, "shared memory": 49152}
    return [
        _x(
            "aten::linear", "cpu_op", 0, 100, **{"Input Dims": [[64, 128], [256, 128], [256]], "Input type": [BF16] * 3}
        ),
        _x(
            "aten::addmm",
            "cpu_op",
            10,
            80,
            **{"Input Dims": [[256], [64, 128], [128, 256], [], []], "Input type": [BF16] * 3 + ["Scalar"] * 2},
        ),  # fmt: skip
        _x("cudaLaunchKernel", "cuda_runtime", 20, 5, correlation=1),
        _x("sm90_gemm_bf16", "kernel", 50, 10, tid=7, pid=0, correlation=1, stream=7, device=0, **launch),
        _x("aten::relu", "cpu_op", 200, 50, **{"Input Dims": [[64, 256]], "Input type": [BF16]}),
        _x("cudaLaunchKernel", "cuda_runtime", 210, 5, correlation=2),
        _x("relu_kernel", "kernel", 260, 2, tid=7, pid=0, correlation=2, stream=7, device=0),
        _x(
            "aten::copy_",
            "cpu_op",
            300,
            50,
            **{"Input Dims": [[64, 256], [64, 256], []], "Input type": [BF16] * 2 + [""]},
        ),
        _x("cudaLaunchKernel", "cuda_runtime", 310, 5, correlation=3),
        _x("copy_kernel", "kernel", 360, 3, tid=7, pid=0, correlation=3, stream=7, device=0),
    ]


def test_kernels_go_to_the_innermost_modelled_op():
    ev, device = _events(_small_trace())
    df = op_efficiency(ev, device)
    assert list(df.columns) == list(OP_EFFICIENCY.names)
    assert list(df["op_name"]) == ["aten::addmm", "aten::relu"]  # not linear (outer), not copy_ (not modelled)
    gemm = df.iloc[0]
    flops = 2 * 64 * 128 * 256 + 64 * 256
    assert (gemm["n_calls"], gemm["n_kernels"], gemm["kernel_time_ns"]) == (1, 1, 10_000)
    assert gemm["flops_per_call"] == flops and gemm["shape_sig"] == "[256]x[64,128]x[128,256]"
    assert gemm["achieved_tflops"] == pytest.approx(flops / 10e-6 / 1e12)
    assert gemm["peak_flops_pct"] == pytest.approx(100 * flops / 10e-6 / 989.4e12)
    assert gemm["peak_tflops"] == pytest.approx(989.4) and gemm["peak_gbps"] == pytest.approx(3350)
    assert gemm["top_kernel"] == "sm90_gemm_bf16"
    assert json.loads(gemm["top_kernel_launch"]) == {
        "grid": [4, 2, 1],
        "block": [128, 1, 1],
        "registers per thread": 96,
        "shared memory": 49152,
    }
    relu = df.iloc[1]
    assert relu["kind"] == "elementwise" and relu["kernel_time_ns"] == 2_000 and relu["bound"] == "memory"
    assert relu["achieved_gbps"] == pytest.approx(2 * 64 * 256 * 2 / 2_000)  # bytes/ns = GB/s


def test_an_unknown_device_gets_no_peak_and_says_why():
    ev, device = _events(_small_trace(), device="AMD Radeon Graphics")
    df = op_efficiency(ev, device)
    assert len(df) == 2 and df["achieved_tflops"].notna().all()
    assert df["peak_flops_pct"].isna().all() and df["bound"].isna().all()
    assert df["peak_source"].str.startswith("unknown device 'AMD Radeon Graphics'").all()


def test_no_modelled_op_gives_an_empty_frame():
    ev, device = _events(_small_trace()[-3:])
    assert op_efficiency(ev, device).empty


def test_owlv2_on_h100_against_the_raw_trace(CORPUS):
    """Every group's kernel count and time equal an independent pass over the raw JSON (kernels whose launch falls
    inside the innermost modelled op with those shapes), and no group runs above the H100's peak FLOP/s."""
    path = CORPUS / OWLV2
    raw = path.read_bytes()
    p = parse_kineto(raw, str(path))
    ev = with_identity(p.events, dict(date="2026-01-01", job_id="owl", attempt=0, rank=0, capture_id="c"))
    df = op_efficiency(ev, p.meta["device_name"])
    assert len(df) > 10 and (df["peak_flops_pct"] <= 100).all(), df.sort_values("peak_flops_pct").tail(3)
    assert (df["roofline_pct"] > 0).all() and df["peak_source"].str.contains("H100").all()

    doc = json.loads(gzip.decompress(raw))
    evs = doc["traceEvents"]
    kernels = {e["args"]["correlation"]: e["dur"] for e in evs if e.get("cat") == "kernel" and e.get("ph") == "X"}
    launches = defaultdict(list)
    for e in evs:
        if e.get("cat") == "cuda_runtime" and e.get("args", {}).get("correlation") in kernels:
            launches[e["tid"]].append(e)
    expect: dict[tuple, list] = defaultdict(lambda: [0, 0.0])
    for name, sig in (("aten::addmm", "[1024]x[5185,1024]x[1024,1024]"), ("aten::_softmax", "[16,5185,5185]")):
        for op in evs:
            a = op.get("args") or {}
            if op.get("name") != name or "Input Dims" not in a:
                continue
            if "x".join("[" + ",".join(map(str, d)) + "]" for d in a["Input Dims"] if d) != sig:
                continue
            for la in launches[op["tid"]]:
                if op["ts"] <= la["ts"] <= op["ts"] + op["dur"]:
                    expect[(name, sig)][0] += 1
                    expect[(name, sig)][1] += kernels[la["args"]["correlation"]]
        row = df[(df["op_name"] == name) & (df["shape_sig"] == sig)].iloc[0]
        n, us = expect[(name, sig)]
        assert row["n_kernels"] == n and row["kernel_time_ns"] == pytest.approx(us * 1000, rel=1e-6), (row, n, us)


def test_the_job_report_shows_the_op_groups_against_the_peak():
    from jobs.publish.report.html import render_job_report
    from jobs.publish.report.sections import op_efficiency_section

    ev, device = _events(_small_trace())
    one = op_efficiency(ev, device)
    two = pd.concat([one, one.assign(rank=1)], ignore_index=True)  # two ranks: the report sums them
    sec = op_efficiency_section({"op_efficiency": two})
    (view,) = sec.tables
    assert view.columns[:5] == ["op", "shapes", "dtype", "calls", "kernel ms"]
    gemm = dict(zip(view.columns, view.rows[0], strict=True))
    assert gemm["op"] == "aten::addmm" and gemm["calls"] == "2" and gemm["kernel ms"] == "0.02"
    # 4.2 MFLOP over 115 kB: 36.6 FLOP/byte, below the H100's ridge (295): memory-bound
    bw_pct = 100 * (256 + 64 * 128 + 128 * 256 + 64 * 256) * 2 / 10e-6 / 3.35e12
    assert gemm["% peak bandwidth"] == f"{bw_pct:.1f}" and gemm["bound"] == "memory"
    assert "NVIDIA H100 80GB HBM3" in sec.intro and "NVIDIA H100 datasheet" in sec.intro
    assert op_efficiency_section({}).status == "unavailable"
    html = render_job_report({"op_efficiency": two})
    assert 'id="op-efficiency"' in html and "aten::addmm" in html
