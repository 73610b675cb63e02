"""Low-utilization windows (jobs.analyze.efficiency.utilization): idle windows per step with their host cause, on a
hand-made Kineto trace through the real parser, and on corpus traces (H100, B200, MI300X, A100 DLRM) checked against
the steps' idle time and the raw JSON."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pandas as pd
import pytest

from jobs.analyze.efficiency.utilization import CAUSES, utilization_windows
from jobs.analyze.hta.breakdown import analyze_rank
from jobs.analyze.trace.model import build_rank_trace
from jobs.common.intervals import merge_intervals
from jobs.normalize.identity import with_identity
from jobs.normalize.kineto.parse import parse_kineto
from schemas import UTILIZATION_WINDOWS

OWLV2 = "torch/TraceLens/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz"
CORPUS_RANKS = (
    OWLV2,
    "torch/TraceLens/b200/eager_trace.json.gz",
    "torch/TraceLens/mi300/resnet_act_checkpoint.json.gz",
    "torch/param/dlrm_kineto/worker0_step_12.1694128201545.pt.trace.json",
    "torch/param/dlrm_kineto/worker5_step_12.1694128201549.pt.trace.json",
    "torch/HolisticTraceAnalysis/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
)


def _x(name, cat, ts, dur, tid=1, pid=100, **args):
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": pid, "tid": tid, "args": args}


def _kernel(ts, dur, corr):
    return [
        _x("cudaLaunchKernel", "cuda_runtime", ts - 20, 5, correlation=corr),
        _x("gemm", "kernel", ts, dur, tid=7, pid=0, correlation=corr, stream=7, device=0),
    ]


def _step(n, t0):
    """One 2 ms step (µs): kernel, a 1.1 ms sync wait under aten::item, kernel, a 0.55 ms data-loader wait, kernel."""
    return [
        _x(f"ProfilerStep#{n}", "user_annotation", t0, 2000),
        *_kernel(t0 + 30, 70, 10 * n + 1),
        _x("aten::item", "cpu_op", t0 + 100, 1110),
        _x("aten::_local_scalar_dense", "cpu_op", t0 + 105, 1100),
        _x("cudaStreamSynchronize", "cuda_runtime", t0 + 110, 1090),
        *_kernel(t0 + 1200, 100, 10 * n + 2),
        _x("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "user_annotation", t0 + 1310, 600),
        *_kernel(t0 + 1950, 40, 10 * n + 3),
    ]


def _events(trace_events):
    doc = {"traceEvents": trace_events, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}]}
    p = parse_kineto(json.dumps(doc).encode(), "mem.json")
    return with_identity(p.events, dict(date="2026-01-01", job_id="j", attempt=0, rank=0, capture_id="c"))


def test_windows_their_causes_stacks_and_recurrence():
    w = utilization_windows(_events(_step(1, 0) + _step(2, 3000)))
    assert list(w.columns) == list(UTILIZATION_WINDOWS.names)
    assert list(w["step"]) == [1, 1, 2, 2] and list(w["window_id"]) == [0, 1, 0, 1]
    first = w.iloc[0]
    # idle from the first kernel's end (100 µs) to the second's start (1200 µs)
    assert (first["offset_ns"], first["dur_ns"]) == (100_000, 1_100_000)
    assert first["cause"] == "sync" and first["cause_op"] == "cudaStreamSynchronize"
    assert first["cause_stack"] == "aten::item → aten::_local_scalar_dense → cudaStreamSynchronize"
    assert first["step_pct"] == pytest.approx(55.0) and first["cause_pct"] == 100.0  # aten::item blocks too
    second = w.iloc[1]
    assert (second["offset_ns"], second["dur_ns"], second["cause"]) == (1_300_000, 650_000, "dataloader")
    assert second["cause_pct"] == pytest.approx(100 * 600 / 650)
    assert (w["recurring_steps"] == 2).all() and (w["recurs_pct"] == 100.0).all()
    assert (w["engine"] == "device").all() and w["cause_event_id"].notna().all()


def test_short_gaps_are_not_windows_and_a_longer_minimum_drops_more():
    ev = _events(_step(1, 0))
    # 0.5 ms or 5 % of the 2 ms step (0.1 ms), whichever is shorter: the 30 µs gaps before the kernels are no window
    assert list(utilization_windows(ev)["dur_ns"]) == [1_100_000, 650_000]
    assert list(utilization_windows(ev, min_window_ns=700_000, min_window_step_pct=50)["dur_ns"]) == [1_100_000]


def test_a_trace_without_profiler_step_gets_whole_trace_windows():
    events = [e for e in _step(1, 0) if not e["name"].startswith("ProfilerStep")]
    w = utilization_windows(_events(events))
    assert list(w["step"]) == [-1, -1] and list(w["cause"]) == ["sync", "dataloader"]


def test_no_device_activity_no_windows():
    assert utilization_windows(_events([_x("aten::add", "cpu_op", 0, 5000)])).empty


def _step_kernel_spans(trace):
    """step → (first start, last end) of the step's GPU events: HTA's kernel span of the step."""
    gpu = trace.loaded & (trace.hta_stream != -1)
    out = {}
    for n in np.unique(trace.step[gpu]):
        rows = np.flatnonzero(gpu & (trace.step == n))
        out[int(n)] = (int(trace.ts[rows].min()), int(trace.end[rows].max()))
    return out


@pytest.mark.parametrize("rel", CORPUS_RANKS)
def test_corpus_windows_stay_within_the_idle_time(CORPUS, rel):
    """On each corpus rank: windows are idle (no device activity of the parsed trace overlaps one), disjoint, at
    least the minimum long, inside their step; per step Σ ≤ step time − busy time, and their part inside the step's
    kernel span ≤ HTA's ``idle_time_ns`` of the step."""
    path = CORPUS / rel
    p = parse_kineto(path.read_bytes(), str(path))
    ev = with_identity(p.events, dict(date="2026-01-01", job_id="j", attempt=0, rank=0, capture_id="c"))
    trace = build_rank_trace(ev)
    w = utilization_windows(trace)
    assert len(w), rel
    assert set(w["cause"]) <= set(CAUSES) and w["cause_pct"].between(0, 100).all()
    dev = np.flatnonzero(trace.device_activity & trace.has_dur)
    bs, be = merge_intervals(trace.ts[dev], trace.end[dev])
    steps = analyze_rank(trace)[0].to_pandas().set_index("step")
    spans = _step_kernel_spans(trace)
    for step, g in w.groupby("step"):
        g = g.sort_values("start_ns")
        s0, t = int(g["step_start_ns"].iloc[0]), int(g["step_time_ns"].iloc[0])
        assert (g["start_ns"] >= s0).all() and (g["end_ns"] <= s0 + t).all()
        assert (g["start_ns"].to_numpy()[1:] >= g["end_ns"].to_numpy()[:-1]).all()
        assert (g["dur_ns"] >= min(500_000, 0.05 * t)).all()
        for a, b in zip(g["start_ns"], g["end_ns"]):
            assert not ((bs < b) & (be > a)).any(), (step, a, b)  # the device runs nothing in a window
        busy = sum(max(0, min(e, s0 + t) - max(s, s0)) for s, e in zip(bs, be))
        assert g["dur_ns"].sum() <= t - busy
        if step in steps.index and step in spans:
            k0, k1 = spans[step]
            inside = sum(max(0, min(b, k1) - max(a, k0)) for a, b in zip(g["start_ns"], g["end_ns"]))
            assert inside <= steps.loc[step, "idle_time_ns"], (step, inside, steps.loc[step, "idle_time_ns"])


def test_owlv2_windows_against_the_raw_json(CORPUS):
    """The H100 OWLv2 rank's longest windows are data-loader waits: checked on the raw JSON, no device event runs in
    them, each edge is a device event's end or start (or the step's edge), and a ``dataloader.py`` frame covers most of each."""
    path = CORPUS / OWLV2
    raw = path.read_bytes()
    p = parse_kineto(raw, str(path))
    w = utilization_windows(with_identity(p.events, dict(date="d", job_id="j", attempt=0, rank=0, capture_id="c")))
    top = w.sort_values("dur_ns", ascending=False).head(5)
    assert (top["cause"] == "dataloader").all() and (top["dur_ns"] > 100e6).all()
    doc = json.loads(gzip.decompress(raw))
    base = doc.get("baseTimeNanoseconds", 0)
    dev = [
        (base + round(e["ts"] * 1000), base + round((e["ts"] + e["dur"]) * 1000))
        for e in doc["traceEvents"]
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
    ]
    loader = [
        (base + round(e["ts"] * 1000), base + round((e["ts"] + e["dur"]) * 1000))
        for e in doc["traceEvents"]
        if e.get("ph") == "X" and "dataloader.py" in e.get("name", "")
    ]
    for a, b, s0, t in zip(top["start_ns"], top["end_ns"], top["step_start_ns"], top["step_time_ns"]):
        assert not any(s < b and e > a for s, e in dev)
        # each edge is a device event's end / start, or the step's edge
        assert a == s0 or min(abs(e - a) for _, e in dev) <= 1
        assert b == s0 + t or min(abs(s - b) for s, _ in dev) <= 1
        covered = max(min(e, b) - max(s, a) for s, e in loader)
        assert covered >= 0.9 * (b - a)


def test_groups_the_report_strip_and_section():
    import base64

    from jobs.analyze.efficiency.utilization import job_window_groups
    from jobs.publish.report.html import render_job_report
    from jobs.publish.report.sections import idle_windows_section

    one = utilization_windows(_events(_step(1, 0) + _step(2, 3000)))
    two = pd.concat([one, one.assign(rank=1, cause_op="<script>x</script>")], ignore_index=True)
    g = job_window_groups(two)
    assert list(g["idle_ns"]) == [2_200_000, 2_200_000, 1_300_000, 1_300_000]
    assert list(g["n_windows"]) == [2] * 4 and list(g["n_steps"]) == [2] * 4
    top = g.iloc[0]
    assert (top["rank"], top["cause"], top["cause_op"], top["offset_p50_ns"]) == (
        0,
        "sync",
        "cudaStreamSynchronize",
        100_000,
    )
    assert (top["step"], top["window_id"]) == (1, 0)  # the evidence: its longest window (first on a tie)
    sec = idle_windows_section({"utilization_windows": two})
    (view,) = sec.tables
    row = dict(zip(view.columns, view.rows[0], strict=True))
    assert row["cause"] == "sync" and row["idle ms"] == "2.20" and row["recurs %"] == "100.0"
    (plot,) = sec.plots
    svg = base64.b64decode(plot.data_uri.split(",", 1)[1]).decode()
    # 2 ranks × 2 steps of sync windows, each at 1/2 opacity (the legend swatch is opaque)
    assert svg.count('fill="#D55E00" fill-opacity="0.500"') == 4 and "rank 1" in svg
    assert idle_windows_section({}).status == "unavailable"
    html = render_job_report({"utilization_windows": two})
    assert 'id="idle-windows"' in html and "<script>x</script>" not in html


NEURON = "neuron/AnchovyPark__npu_profiling_code/matmul/neuron_profile_results/profile_128x128x1024.json"


def _neuron_events(rows):
    """EVENTS rows of a Neuron capture from ``(category, track, name, ts_ns, dur_ns)``."""
    import pyarrow as pa

    from schemas import EVENTS

    ident = dict(date="d", job_id="j", attempt=0, rank=0, capture_id="c", source="neuron", ph="X", is_gpu=True)
    recs = [
        {**ident, "event_id": i, "category": c, "thread_name": t, "name": n, "ts_ns": ts, "dur_ns": d}
        for i, (c, t, n, ts, d) in enumerate(rows)
    ]
    schema = EVENTS.arrow_schema()
    return pa.Table.from_pylist(recs, schema=pa.schema([schema.field(k) for k in recs[0]]))


def test_neuron_tensor_engine_below_threshold_while_a_dma_queue_runs():
    from jobs.analyze.efficiency.utilization import neuron_utilization_windows

    ins = "neuron_instruction"
    rows = [("neuron_instruction", "Tensor", "MATMUL", 0, 100_000)]
    # 100 µs → 900 µs: the tensor engine runs 2 µs in every 40 µs (5 %), DMA queue Q3-E0 moves data all along
    rows += [(ins, "Tensor", "MATMUL", t, 2_000) for t in range(100_000, 900_000, 40_000)]
    rows += [("neuron_dma", "Q3-E0", "Q3", t, 39_000) for t in range(100_000, 900_000, 40_000)]
    rows += [("neuron_dma", "Q1-E0", "Q1", 100_000, 1_000), (ins, "Tensor", "MATMUL", 900_000, 100_000)]
    w = neuron_utilization_windows(_neuron_events(rows))
    assert len(w) == 1 and list(w.columns) == list(UTILIZATION_WINDOWS.names)
    win = w.iloc[0]
    assert win["engine"] == "tensor" and win["step"] == -1 and win["cause"] == "dma" and win["cause_op"] == "Q3-E0"
    # the busy share is measured over the minimum length (50 µs) around each 5 µs bin: edges within half of it
    assert abs(win["start_ns"] - 100_000) <= 25_000 and abs(win["end_ns"] - 900_000) <= 25_000
    assert win["engine_util_pct"] == pytest.approx(5.0, abs=1.0) and win["cause_pct"] > 90


def test_neuron_corpus_profile_start_up_is_a_semaphore_wait(CORPUS):
    """The corpus matmul profile: the tensor engine is below 20 % for 99 % of the profile while the Vector engine
    waits on a semaphore (the first execution's start-up); checked against the profile's Instruction rows."""
    from jobs.analyze.efficiency.utilization import neuron_utilization_windows
    from jobs.normalize.neuron.events import profile_events
    from jobs.normalize.neuron.json_view import parse_neuron_json

    p = parse_neuron_json((CORPUS / NEURON).read_bytes(), "x")
    ev = with_identity(profile_events(p), dict(date="d", job_id="j", attempt=0, rank=0, capture_id="c"))
    w = neuron_utilization_windows(ev)
    assert len(w) == 1
    win = w.iloc[0]
    assert win["cause"] == "semaphore" and win["cause_op"] == "EVENT_SEMAPHORE" and win["step_pct"] > 99
    ins = p.table("Instruction").to_pandas()
    tensor = ins[ins["engine"].str.lower().str.startswith("tensor")]
    a, b = win["start_ns"], win["end_ns"]
    ms, me = merge_intervals(tensor["start_ts"].to_numpy(), tensor["end_ts"].to_numpy())  # both tensor tracks, once
    busy = sum(max(0, min(e, b) - max(s, a)) for s, e in zip(ms, me))
    assert win["engine_util_pct"] == pytest.approx(100 * busy / (b - a)) and win["engine_util_pct"] < 20
    sem = ins[(ins["opcode"] == "EVENT_SEMAPHORE") & (ins["engine"].str.lower() == "vector")]
    assert ((sem["start_ts"] <= a + 0.1 * (b - a)) & (sem["end_ts"] >= b - 0.1 * (b - a))).any()
