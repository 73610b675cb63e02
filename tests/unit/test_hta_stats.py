"""Unit tests of the HTA-parity statistics (idle time breakdown, launch statistics, queue length,
memcpy bandwidth, host time, kernels table, kernel types of collectives).

Every trace here is hand-made and every expected value is computed by hand from the definitions in
the module docstrings (HTA 0.5.0 where HTA defines the metric). Real-trace parity with HTA is in
tests/golden/test_hta_stats_parity.py.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pyarrow as pa
import pytest

from jobs.analyze.hta.breakdown import analyze_rank
from jobs.analyze.hta.host_time import dataloader_mask
from jobs.analyze.hta.idle_time import HOST_WAIT, KERNEL_WAIT, OTHER, idle_gaps
from jobs.analyze.hta.kernel_stats import kernel_table
from jobs.analyze.hta.launch_stats import launches
from jobs.analyze.hta.queue_length import queue_points
from jobs.analyze.trace import hta_filter
from jobs.analyze.trace.launches import HTA_LAUNCH_STATS_NAMES, is_launch_name, launch_name_mask, pairs_on_key
from jobs.analyze.trace.model import build_rank_trace
from jobs.common.interval_sets import covered_not_excluded, length_in_windows
from schemas.tables import EVENTS, KERNELS, RANKS, STEPS

US = 1000
BASE = 1_700_000_000_000_000_000


def _row(
    event_id,
    *,
    name,
    cat,
    ts_us,
    dur_us=None,
    ph="X",
    stream=None,
    is_gpu=False,
    correlation=None,
    step=None,
    args=None,
    tid=1,
    collective=None,
    external_id=None,
    pid=None,
    keep_corr_arg=True,
):
    a = dict(args or {})
    if stream is not None:
        a.setdefault("stream", stream)
    if correlation is not None and keep_corr_arg:
        a.setdefault("correlation", correlation)
    if external_id is not None:
        a.setdefault("External id", external_id)
    r = {c: None for c in EVENTS.names}
    r.update(
        date="2024-01-01",
        job_id="job",
        attempt=0,
        rank=0,
        capture_id="cap",
        event_id=event_id,
        source="kineto",
        ph=ph,
        category=cat,
        raw_category=cat,
        name=name,
        ts_ns=BASE + round(ts_us * US),
        dur_ns=None if dur_us is None else round(dur_us * US),
        pid=pid if pid is not None else (0 if is_gpu else 100),
        tid=stream if is_gpu else tid,
        stream=stream,
        is_gpu=is_gpu,
        correlation=correlation,
        external_id=external_id,
        step=step,
        collective=collective,
        args_json=json.dumps(a),
    )
    return r


class Trace:
    """Builder of one rank's events (times in µs from BASE)."""

    def __init__(self):
        self.rows = []

    def add(self, **kw):
        self.rows.append(_row(len(self.rows), **kw))
        return self

    def step(self, n, ts_us, dur_us):
        return self.add(name=f"ProfilerStep#{n}", cat="user_annotation", ts_us=ts_us, dur_us=dur_us)

    def cpu(self, name, ts_us, dur_us, cat="cpu_op", step=None, **kw):
        return self.add(name=name, cat=cat, ts_us=ts_us, dur_us=dur_us, step=step, **kw)

    def launch(self, corr, ts_us, dur_us=1, name="cudaLaunchKernel", step=None, **kw):
        return self.add(name=name, cat="cuda_runtime", ts_us=ts_us, dur_us=dur_us, correlation=corr, step=step, **kw)

    def kernel(self, name, ts_us, dur_us, corr, stream=7, step=None, cat="kernel", **kw):
        return self.add(
            name=name,
            cat=cat,
            ts_us=ts_us,
            dur_us=dur_us,
            stream=stream,
            is_gpu=True,
            correlation=corr,
            step=step,
            **kw,
        )

    def table(self, shuffle_seed=None) -> pa.Table:
        rows = list(self.rows)
        if shuffle_seed is not None:
            random.Random(shuffle_seed).shuffle(rows)
        return pa.Table.from_pylist(rows, schema=EVENTS.arrow_schema())


def _view(tr: Trace, **kw):
    return build_rank_trace(tr.table(), **kw)


def _steps(tbl) -> dict[int, dict]:
    steps, _ = analyze_rank(tbl)
    return {r["step"]: r for r in steps.to_pylist()}


def _rank(tbl) -> dict:
    _, ranks = analyze_rank(tbl)
    return ranks.to_pylist()[0]


# ---------------------------------------------------------------------------------------------
# launch names and joins


def test_launch_names_vendor_neutral_and_cupti_suffixes():
    for n in (
        "cudaLaunchKernel",
        "cudaLaunchKernel_ptsz",
        "cudaMemcpyAsync_v3020",
        "hipLaunchKernel",
        "hipExtModuleLaunchKernel",
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "cudaGraphLaunch",
        "hipGraphLaunch",
        "cudaLaunchKernelExC",
    ):
        assert is_launch_name(n), n
    for n in ("cudaMemcpy", "cudaDeviceSynchronize", "cudaEventRecord", "aten::mm", "", None, "cudaLaunchKernelFoo"):
        assert not is_launch_name(n), n
    assert not is_launch_name("hipLaunchKernel", HTA_LAUNCH_STATS_NAMES)  # HTA 0.5.0 launch stats lack HIP
    mask = launch_name_mask(pa.array(["cudaLaunchKernel", None, "aten::add", "cuLaunchKernel"]))
    assert mask.tolist() == [True, False, False, True]


def test_pairs_on_key_is_a_many_to_many_inner_join():
    key = np.array([5, 5, 7, 5, 7, 9])
    left, right = pairs_on_key(np.array([0, 2]), np.array([1, 3, 4, 5]), key)
    assert list(zip(left.tolist(), right.tolist())) == [(0, 1), (0, 3), (2, 4)]
    left, right = pairs_on_key(np.array([], np.int64), np.array([1]), key)
    assert left.size == right.size == 0


# ---------------------------------------------------------------------------------------------
# idle time breakdown


def _idle_trace() -> Trace:
    """Stream 7: K1 [0,10); K2 launched at 5 (before K1 ends), runs [15,20): gap 5 → kernel_wait;
    K3 launched at 100 (after K2 ended at 20), runs [110,120): gap 90 → host_wait;
    K4 launched at 30 (before K3 ends), runs [200,210): gap 80 ≥ 30 → other.
    Stream 9: K5 [50,60) launched at 40, K6 launched at 45 runs [60,70): gap 0 → kernel_wait."""
    t = Trace().step(1, 0, 100).step(2, 100, 150)
    t.launch(1, 0, step=1).kernel("k1", 0, 10, 1, step=1)
    t.launch(2, 5, step=1).kernel("k2", 15, 5, 2, step=1)
    t.launch(3, 100, step=2).kernel("k3", 110, 10, 3, step=2)
    t.launch(4, 30, step=1).kernel("k4", 200, 10, 4, step=1)
    t.launch(5, 40, step=1).kernel("k5", 50, 10, 5, stream=9, step=1)
    t.launch(6, 45, step=1).kernel("k6", 60, 10, 6, stream=9, step=1)
    return t


@pytest.mark.parametrize("hta_compat", [False, True])
def test_idle_categories_by_hand(hta_compat):
    view = _view(_idle_trace())
    g = idle_gaps(view, view.loaded, hta_compat=hta_compat)
    names = view.names.to_pylist()
    got = {names[r]: (int(gap) // US, int(c)) for r, gap, c in zip(g.row, g.gap_ns, g.category)}
    assert got == {"k2": (5, KERNEL_WAIT), "k3": (90, HOST_WAIT), "k4": (80, OTHER), "k6": (0, KERNEL_WAIT)}
    assert g.sum_by_category() == {"host_wait": 90 * US, "kernel_wait": 5 * US, "other": 80 * US}


def test_idle_per_step_goes_with_the_event_after_the_gap():
    steps = _steps(_idle_trace().table(shuffle_seed=3))
    assert (steps[1]["idle_host_wait_ns"], steps[1]["idle_kernel_wait_ns"], steps[1]["idle_other_ns"]) == (
        0,
        5 * US,
        80 * US,
    )
    assert (steps[2]["idle_host_wait_ns"], steps[2]["idle_kernel_wait_ns"], steps[2]["idle_other_ns"]) == (
        90 * US,
        0,
        0,
    )


def test_idle_negative_gap_clipped_by_us_summed_by_hta():
    # Two rows on one stream that overlap by 3 µs (HTA's µs rounding or a shared stream id).
    t = Trace().launch(1, 0).kernel("a", 10, 10, 1).launch(2, 1).kernel("b", 17, 5, 2)
    view = _view(t)
    assert idle_gaps(view, view.loaded, hta_compat=True).sum_by_category()["kernel_wait"] == -3 * US
    assert idle_gaps(view, view.loaded).sum_by_category()["kernel_wait"] == 0


def test_idle_hta_joins_trace_event_0_for_kernels_without_launch():
    """HTA sets index_correlation = 0 for a kernel whose correlation has no host row, then joins
    the row with index 0: trace event 0's start becomes the 'runtime' start. Here event 0 is a
    cpu_op at 500 µs, after the previous kernel's end, so HTA calls the gap host_wait. We do not:
    without a launch call the gap is kernel_wait/other."""
    t = Trace().cpu("late_op", 500, 1)  # event_id 0
    t.launch(1, 0).kernel("a", 10, 10, 1)
    t.kernel("nccl_no_launch", 25, 5, 99)  # correlation 99: no host row
    view = _view(t)
    assert idle_gaps(view, view.loaded, hta_compat=True).sum_by_category() == {
        "host_wait": 5 * US,
        "kernel_wait": 0,
        "other": 0,
    }
    assert idle_gaps(view, view.loaded).sum_by_category() == {"host_wait": 0, "kernel_wait": 5 * US, "other": 0}


def test_idle_two_devices_same_stream_id_are_two_streams_for_us():
    t = Trace().launch(1, 0).kernel("a", 10, 10, 1, pid=0).launch(2, 1).kernel("b", 15, 10, 2, pid=1)
    view = _view(t)
    assert idle_gaps(view, view.loaded).row.size == 0  # one kernel per (device, stream)
    assert idle_gaps(view, view.loaded, hta_compat=True).row.size == 1  # HTA: same stream 7 → a gap of −5


# ---------------------------------------------------------------------------------------------
# launch statistics


def _launch_trace() -> Trace:
    t = Trace().step(1, 0, 1000)
    t.launch(1, 0, dur_us=5, step=1).kernel("short", 6, 2, 1, step=1)  # delay 1, short (2 < 5 ≤ 50)
    t.launch(2, 10, dur_us=60, step=1).kernel("rt_outlier", 75, 100, 2, step=1)  # runtime outlier, delay 5
    t.launch(3, 80, dur_us=4, step=1).kernel("late", 300, 10, 3, step=1)  # delay 216 > 100: outlier
    t.launch(4, 90, dur_us=10, name="cudaMemcpyAsync", step=1).kernel(
        "Memcpy HtoD", 95, 3, 4, step=1, cat="gpu_memcpy"
    )  # kernel starts before the call ends: delay 0
    return t


@pytest.mark.parametrize("hta_compat", [False, True])
def test_launch_stats_by_hand(hta_compat):
    view = _view(_launch_trace())
    la = launches(view, view.loaded, hta_compat=hta_compat)
    assert sorted((la.delay_ns // US).tolist()) == [0, 1, 5, 216]
    assert int(la.cpu_dur_ns.sum()) == 79 * US and int(la.gpu_dur_ns.sum()) == 115 * US
    assert (int(la.short.sum()), int(la.runtime_outlier.sum()), int(la.delay_outlier.sum())) == (2, 1, 1)
    # short: "short" (2 < 5) and the memcpy (3 < 10); the 10 µs memcpy call is not an outlier


def test_launch_stats_step_columns():
    s = _steps(_launch_trace().table(shuffle_seed=1))[1]
    assert s["n_launches"] == 4
    assert s["launch_runtime_ns"] == 79 * US and s["launch_delay_sum_ns"] == 222 * US
    assert s["launch_delay_p50_ns"] == 3 * US  # median of 0, 1, 5, 216
    assert s["launch_delay_max_ns"] == 216 * US
    assert (s["n_short_kernels"], s["n_runtime_outliers"], s["n_launch_delay_outliers"]) == (2, 1, 1)


def test_graph_launch_is_one_launch_with_many_kernels():
    t = Trace().step(1, 0, 100).launch(7, 0, dur_us=4, name="cudaGraphLaunch", step=1)
    for k, start in enumerate((10, 20, 30)):
        t.kernel(f"g{k}", start, 5, 7, step=1)
    view = _view(t)
    la = launches(view, view.loaded)
    assert la.cpu_row.size == 1 and int(la.delay_ns[0]) == 6 * US and int(la.gpu_dur_ns[0]) == 15 * US
    # HTA: not a launch name in 0.5.0 → no rows
    assert launches(view, view.loaded, hta_compat=True).cpu_row.size == 0
    q = queue_points(view, view.loaded)
    assert q.queue_length.tolist() == [1, 2, 3, 2, 1, 0]  # +3 at the call, −1 at each kernel


# ---------------------------------------------------------------------------------------------
# B15: absent runtime calls give zero counts, no crash


def test_b15_no_memcpy_or_memset_calls():
    t = Trace().step(1, 0, 100).launch(1, 0, step=1).kernel("k", 5, 5, 1, step=1)
    s = _steps(t.table())[1]
    assert s["n_launches"] == 1 and s["memcpy_bytes"] == 0 and s["memcpy_time_ns"] == 0
    assert s["memcpy_bw_gbps"] is None
    assert s["queue_length_max"] == 1 and s["queue_length_mean"] == pytest.approx(0.5)


def test_b15_no_runtime_calls_at_all():
    t = Trace().step(1, 0, 100).cpu("aten::add", 1, 2, step=1)
    t.kernel("orphan_a", 10, 5, None, step=1).kernel("orphan_b", 45, 5, None, step=1)
    s = _steps(t.table())[1]
    assert s["n_launches"] == 0 and s["n_short_kernels"] == s["n_runtime_outliers"] == s["n_launch_delay_outliers"] == 0
    assert s["launch_delay_p50_ns"] is None and s["launch_delay_max_ns"] is None and s["launch_runtime_ns"] == 0
    assert s["queue_length_max"] is None and s["queue_length_mean"] is None and s["blocked_on_full_queue_ns"] == 0
    # no launcher: never host_wait; the 30 µs gap is not < 30 µs → other
    assert (s["idle_host_wait_ns"], s["idle_kernel_wait_ns"], s["idle_other_ns"]) == (0, 0, 30 * US)
    r = _rank(t.table())
    assert r["n_launches"] == 0 and r["queue_length_max"] is None


def test_b15_cpu_only_trace():
    t = Trace().step(1, 0, 100).cpu("aten::add", 1, 50, step=1)
    s = _steps(t.table())[1]
    assert s["n_kernels"] == 0 and s["n_launches"] == 0 and s["memory_time_ns"] == 0
    assert s["idle_host_wait_ns"] == s["idle_kernel_wait_ns"] == s["idle_other_ns"] == 0
    assert s["cpu_bound_time_ns"] == 50 * US  # host busy, no GPU activity at all
    assert s["dataloader_time_ns"] == 0
    assert kernel_table(t.table()).num_rows == 0


# ---------------------------------------------------------------------------------------------
# B16 / comm kernels: ncclDevKernel_*, lowercase variants, collective metadata, custom patterns


def _comm_trace(comm_name, collective=None) -> Trace:
    t = Trace().step(1, 0, 100)
    t.launch(1, 0, step=1).kernel("ampere_sgemm_128x64_nn", 10, 40, 1, stream=7, step=1)  # [10, 50)
    t.launch(2, 1, step=1).kernel(comm_name, 30, 40, 2, stream=20, step=1, collective=collective)  # [30, 70)
    return t


def test_b16_nccl_dev_kernel_is_communication():
    name = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
    kt = {r["name"]: r for r in kernel_table(_comm_trace(name).table()).to_pylist()}
    assert kt[name]["kernel_type"] == "COMMUNICATION"
    s = _steps(_comm_trace(name).table())[1]
    assert s["exposed_comm_ns"] == 20 * US  # comm [30,70) minus compute [10,50)
    assert s["overlap_pct"] == pytest.approx(50.0)  # HTA overlap: finite, > 0


def test_b16_lowercase_and_metadata_only_comm_kernels():
    low = "nccldevkernel_allgather_ring_ll"
    kt = {r["name"]: r for r in kernel_table(_comm_trace(low).table()).to_pylist()}
    assert kt[low]["kernel_type"] == "COMMUNICATION" and kt[low]["hta_kernel_type"] == "COMPUTATION"
    # a custom kernel named only by its collective metadata
    kt = {r["name"]: r for r in kernel_table(_comm_trace("my_fused_ar", collective="allreduce").table()).to_pylist()}
    assert kt["my_fused_ar"]["kernel_type"] == "COMMUNICATION"
    # ... or by a configured pattern
    kt = {
        r["name"]: r
        for r in kernel_table(
            _comm_trace("custom_allreduce_kernel").table(), extra_comm_patterns=[r"custom_allreduce"]
        ).to_pylist()
    }
    assert kt["custom_allreduce_kernel"]["kernel_type"] == "COMMUNICATION"
    steps, _ = analyze_rank(_comm_trace("custom_allreduce_kernel").table(), extra_comm_patterns=[r"custom_allreduce"])
    assert steps.to_pylist()[0]["exposed_comm_ns"] == 20 * US
    steps, _ = analyze_rank(_comm_trace("custom_allreduce_kernel").table())
    assert steps.to_pylist()[0]["exposed_comm_ns"] == 0  # not configured: computation


# ---------------------------------------------------------------------------------------------
# B18: hipLaunchKernel and a kernel with only External id


def _b18_trace(ext_kernel=42, ext_launch=42, extra_launch_ext=None) -> Trace:
    t = Trace().step(1, 0, 100)
    t.launch(None, 10, dur_us=5, name="hipLaunchKernel", step=1, external_id=ext_launch)
    if extra_launch_ext is not None:
        t.launch(None, 11, dur_us=5, name="hipLaunchKernel", step=1, external_id=extra_launch_ext)
    t.kernel("Cijk_Alik_Bljk_SB_MT64x64", 25, 3, None, stream=0, step=1, external_id=ext_kernel)
    return t


def test_b18_join_on_unique_external_id():
    view = _view(_b18_trace())
    assert view.launcher[2] == 1  # kernel row → hipLaunchKernel row
    la = launches(view, view.loaded)
    assert la.cpu_row.tolist() == [1] and int(la.delay_ns[0]) == 10 * US and bool(la.short[0])
    q = queue_points(view, view.loaded)
    assert q.queue_length.tolist() == [1, 0]
    assert launches(view, view.loaded, hta_compat=True).cpu_row.size == 0  # HTA: 0 rows


def test_b18_ambiguous_external_id_is_not_joined():
    view = _view(_b18_trace(extra_launch_ext=42))  # two launch calls share External id 42
    assert view.launcher[3] == -1
    assert launches(view, view.loaded).cpu_row.size == 0


# ---------------------------------------------------------------------------------------------
# queue length


def test_queue_length_by_hand():
    # three launches at 0, 1, 2; kernels at 10, 20, 30 (each 5 µs) on one stream
    t = Trace()
    for k in range(3):
        t.launch(k + 1, k, dur_us=0.5)
    for k in range(3):
        t.kernel(f"k{k}", 10 * (k + 1), 5, k + 1)
    view = _view(t)
    q = queue_points(view, view.loaded)
    assert q.queue_length.tolist() == [1, 2, 3, 2, 1, 0]
    assert (q.dur_to_next_ns // US).tolist() == [1, 1, 8, 10, 10, 0]
    assert (q.blocked(max_queue_length=2) // US).tolist() == [0, 1, 8, 10, 0, 0]  # 19 µs at ≥ 2


def test_queue_tie_order():
    # kernel k1 starts at the instant launch 2 is called: +1 first → 1, 2, 1; −1 first → 1, 0, 1
    t = Trace().launch(1, 0, dur_us=0.5).kernel("k1", 5, 1, 1).launch(2, 5, dur_us=0.5).kernel("k2", 9, 1, 2)
    view = _view(t)
    assert queue_points(view, view.loaded).queue_length.tolist() == [1, 2, 1, 0]
    assert queue_points(view, view.loaded, enqueue_first=False).queue_length.tolist() == [1, 0, 1, 0]


def test_blocked_on_full_queue_at_1024():
    """1030 launches 1 µs apart, kernels from 2000 µs on, 1 µs apart: the queue reaches 1024 after
    launch #1023 (t = 1023) and drops below it at kernel #6's start (t = 2006): 983 µs blocked."""
    t = Trace().step(1, 0, 3100)
    for k in range(1030):
        t.launch(k + 1, k, dur_us=0.5, step=1)
    for k in range(1030):
        t.kernel("k", 2000 + k, 0.5, k + 1, step=1)
    s = _steps(t.table())[1]
    assert s["queue_length_max"] == 1030
    assert s["blocked_on_full_queue_ns"] == 983 * US
    assert s["n_launches"] == 1030


# ---------------------------------------------------------------------------------------------
# memcpy bandwidth


def test_memcpy_bytes_time_and_bandwidth():
    t = Trace().step(1, 0, 100)
    # 4000 bytes in a copy written as 1 µs whose Kineto bandwidth says 2.5 GB/s → exact 1.6 µs
    t.launch(1, 0, name="cudaMemcpyAsync", step=1).kernel(
        "Memcpy HtoD (Pageable -> Device)",
        10,
        1,
        1,
        cat="gpu_memcpy",
        step=1,
        args={"bytes": 4000, "memory bandwidth (GB/s)": 2.5},
    )
    # 6000 bytes in 3 µs, no bandwidth arg → dur
    t.launch(2, 1, name="cudaMemcpyAsync", step=1).kernel(
        "Memcpy DtoH (Device -> Pinned)", 20, 3, 2, cat="gpu_memcpy", step=1, args={"bytes": 6000}
    )
    # a copy without size: time counts, bandwidth ignores it
    t.launch(3, 2, name="cudaMemcpyAsync", step=1).kernel("Memcpy DtoD", 30, 4, 3, cat="gpu_memcpy", step=1)
    # a memset is not a copy
    t.launch(4, 3, name="cudaMemsetAsync", step=1).kernel(
        "Memset (Device)", 40, 2, 4, cat="gpu_memset", step=1, args={"bytes": 100}
    )
    s = _steps(t.table())[1]
    assert s["memcpy_bytes"] == 10_000
    assert s["memcpy_time_ns"] == 8 * US
    assert s["memcpy_bw_gbps"] == pytest.approx(10_000 / 4_600)  # bytes / (1.6 µs + 3 µs) in bytes/ns
    assert s["memory_time_ns"] == 10 * US  # merged MEMORY: copies + memset


# ---------------------------------------------------------------------------------------------
# host time: data loader and CPU-bound


def test_host_time_by_hand():
    """Step [0, 100): data loader [0, 20); cpu_op [10, 60) with a launch [50, 55) inside; the kernel
    runs [70, 90). GPU idle = [0, 70) ∪ [90, 100); host busy = [10, 60). CPU-bound = busy ∩ idle
    minus data loading = [20, 60) = 40 µs. A cpu_op [95, 110) is clipped to the step: +5 µs."""
    t = Trace().step(1, 0, 100)
    t.cpu("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", 0, 20, cat="user_annotation", step=1)
    t.cpu("aten::linear", 10, 50, step=1)
    t.launch(1, 50, dur_us=5, step=1).kernel("gemm", 70, 20, 1, step=1)
    t.cpu("aten::zero_", 95, 15, step=1)
    s = _steps(t.table(shuffle_seed=2))[1]
    assert s["dataloader_time_ns"] == 20 * US
    assert s["cpu_bound_time_ns"] == 45 * US


def test_dataloader_names():
    names = pa.array(
        [
            "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
            "torch/utils/data/dataloader.py(628): __next__",
            "_MultiProcessingDataLoaderIter._next_data",
            "aten::mm",
            None,
            "my_loader",
        ]
    )
    assert dataloader_mask(names).tolist() == [True, True, True, False, False, False]
    assert dataloader_mask(names, [r"^my_loader$"]).tolist()[-1]


# ---------------------------------------------------------------------------------------------
# kernels table


def test_kernel_table_stats_and_schema():
    t = Trace().step(1, 0, 100).step(2, 100, 100)
    t.launch(1, 0, step=1).kernel("gemm", 10, 4, 1, step=1)
    t.launch(2, 1, step=1).kernel("gemm", 20, 8, 2, step=1)
    t.launch(3, 2, step=1).kernel("add", 30, 1, 3, step=1)
    t.launch(4, 100, step=2).kernel("gemm", 110, 6, 4, step=2)
    t.kernel("outside", 300, 2, 99)  # launched outside any step
    t.add(name="Stream Wait Event", cat="cuda_sync", ts_us=50, dur_us=0, stream=7, is_gpu=True, correlation=5)
    tbl = kernel_table(t.table(shuffle_seed=5))
    assert tbl.schema == KERNELS.arrow_schema()
    rows = [(r["step"], r["name"], r["n"], r["total_ns"], r["min_ns"], r["max_ns"]) for r in tbl.to_pylist()]
    assert rows == [
        (-1, "outside", 1, 2 * US, 2 * US, 2 * US),
        (1, "add", 1, US, US, US),
        (1, "gemm", 2, 12 * US, 4 * US, 8 * US),
        (2, "gemm", 1, 6 * US, 6 * US, 6 * US),
    ]
    g = [r for r in tbl.to_pylist() if r["step"] == 1 and r["name"] == "gemm"][0]
    assert g["mean_ns"] == 6 * US and g["std_ns"] == pytest.approx(2 * US)  # population std of 4, 8 µs
    assert g["kernel_type"] == g["hta_kernel_type"] == "COMPUTATION"
    assert kernel_table(EVENTS.empty()).schema == KERNELS.arrow_schema()


def test_kernel_table_rejects_mixed_ranks():
    t = _launch_trace().table()
    other = t.set_column(t.column_names.index("rank"), "rank", pa.array([1] * t.num_rows, pa.int32()))
    with pytest.raises(ValueError, match="rank"):
        kernel_table(pa.concat_tables([t, other]))


# ---------------------------------------------------------------------------------------------
# interval sets


def test_covered_not_excluded_and_windows_match_brute_force():
    rng = np.random.default_rng(1)
    for _ in range(40):
        a = rng.integers(0, 200, 12)
        x = rng.integers(0, 200, 8)
        ends_a = a + rng.integers(0, 30, 12)
        ends_x = x + rng.integers(0, 30, 8)
        s, e = covered_not_excluded(a, ends_a, x, ends_x)
        cover, excl, got = np.zeros(260, bool), np.zeros(260, bool), np.zeros(260, bool)
        for p, q in zip(a, ends_a):
            cover[p:q] = True
        for p, q in zip(x, ends_x):
            excl[p:q] = True
        for p, q in zip(s, e):
            got[p:q] = True
        want = cover & ~excl
        assert (got == want).all()
        assert (s[1:] > e[:-1]).all() and (e > s).all()  # disjoint, non-touching, non-empty
        ws = rng.integers(0, 230, 5)
        we = ws + rng.integers(0, 60, 5)
        assert length_in_windows(s, e, ws, we).tolist() == [int(want[p:q].sum()) for p, q in zip(ws, we)]
    s, e = covered_not_excluded([5, 9], [5, 9])  # zero-length intervals cover nothing
    assert s.size == 0


# ---------------------------------------------------------------------------------------------
# wiring: analyze_rank fills every new column in both tables


def test_analyze_rank_fills_stat_columns():
    tbl = _idle_trace().table()
    steps, ranks = analyze_rank(tbl)
    assert steps.schema == STEPS.arrow_schema() and ranks.schema == RANKS.arrow_schema()
    r = ranks.to_pylist()[0]
    # whole trace: HTA's last-step filter drops step 2 (the latest ProfilerStep) and the kernels
    # launched after it started (k3); the idle gaps are those of the kept rows.
    view = build_rank_trace(tbl)
    keep = hta_filter.last_step_keep_mask(view.events, view.loaded, view.hta_stream, view.hta_correlation, view.ts)
    assert r["n_launches"] == launches(view, keep).cpu_row.size == 5
    # kept on stream 7: k1, k2 (gap 5 → kernel_wait), k4 (gap 200 − 20 = 180; its launch at 30
    # is after k2's end at 20 → host_wait); stream 9: k6 (gap 0 → kernel_wait).
    g = idle_gaps(view, keep).sum_by_category()
    assert (
        (r["idle_host_wait_ns"], r["idle_kernel_wait_ns"], r["idle_other_ns"])
        == (g["host_wait"], g["kernel_wait"], g["other"])
        == (180 * US, 5 * US, 0)
    )
    steps_by_n = {s["step"]: s for s in steps.to_pylist()}
    assert sum(s["n_launches"] for s in steps_by_n.values()) == 6


def test_memory_type_by_category_not_by_a_substring():
    """gpu_memcpy/gpu_memset rows are MEMORY whatever their name; a compute kernel whose name
    merely contains 'memset' (vLLM `_combined_routing_memset`) is COMPUTATION, as in HTA."""
    t = Trace().step(1, 0, 100)
    t.launch(1, 0, step=1).kernel("_combined_routing_memset", 10, 2, 1, step=1)
    t.launch(2, 1, name="hipMemcpyAsync", step=1).kernel("CopyDeviceToDevice", 20, 2, 2, cat="gpu_memcpy", step=1)
    t.launch(3, 2, step=1).kernel("hipMemsetD32_kernel", 30, 2, 3, step=1)
    kt = {r["name"]: (r["kernel_type"], r["hta_kernel_type"]) for r in kernel_table(t.table()).to_pylist()}
    assert kt == {
        "_combined_routing_memset": ("COMPUTATION", "COMPUTATION"),
        "CopyDeviceToDevice": ("MEMORY", "COMPUTATION"),
        "hipMemsetD32_kernel": ("MEMORY", "COMPUTATION"),
    }
    assert _steps(t.table())[1]["memory_time_ns"] == 4 * US
