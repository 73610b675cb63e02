"""Unit tests of jobs.analyze (intervals, kernel types, HTA loading rules, analyze_rank).

Hand-made events with hand-computed expectations (HTA 0.5.0 definitions; see
jobs/analyze/hta/breakdown.py). Real-trace parity with HTA is in tests/golden/test_hta_parity.py.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pyarrow as pa
import pytest

from jobs.analyze.hta.breakdown import analyze_rank, temporal_breakdown
from jobs.analyze.trace import hta_filter
from jobs.analyze.trace.kernel_types import (
    COMMUNICATION,
    COMPUTATION,
    KERNEL_TYPES,
    MEMORY,
    OTHER,
    hta_kernel_type,
    hta_kernel_types,
    kernel_type,
    kernel_types,
)
from jobs.common.intervals import clip_intervals, intersection_length, merge_intervals, total_length
from schemas.tables import EVENTS, RANKS, STEPS

US = 1000  # ns per µs
BASE = 1_700_000_000_000_000_000  # an absolute capture clock, ns


# ---------------------------------------------------------------------------------------------
# Event builders: every row gets all EVENTS columns; times are given in µs from BASE.


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
    raw_cat=None,
    tid=1,
    depth=None,
    collective=None,
):
    a = dict(args or {})
    if stream is not None and "stream" not in a:
        a["stream"] = stream
    if correlation is not None and "correlation" not in a:
        a["correlation"] = correlation
    r = {c: None for c in EVENTS.names}
    r.update(
        date="2024-01-01",
        job_id="job",
        attempt=0,
        rank=3,
        capture_id="cap",
        event_id=event_id,
        source="kineto",
        ph=ph,
        category=cat,
        raw_category=raw_cat if raw_cat is not None else cat,
        name=name,
        ts_ns=BASE + round(ts_us * US),
        dur_ns=None if dur_us is None else round(dur_us * US),
        pid=1 if not is_gpu else 0,
        tid=tid if not is_gpu else (stream if isinstance(stream, int) else 7),
        stream=stream if isinstance(stream, int) else None,
        is_gpu=is_gpu,
        correlation=correlation,
        step=step,
        depth=depth,
        collective=collective,
        args_json=json.dumps(a),
    )
    return r


class Trace:
    """Tiny builder for one rank's events."""

    def __init__(self):
        self.rows = []

    def add(self, **kw):
        self.rows.append(_row(len(self.rows), **kw))
        return self

    def step(self, n, ts_us, dur_us):
        return self.add(name=f"ProfilerStep#{n}", cat="user_annotation", ts_us=ts_us, dur_us=dur_us)

    def cpu_op(self, name, ts_us, dur_us, step=None, **kw):
        return self.add(name=name, cat="cpu_op", ts_us=ts_us, dur_us=dur_us, step=step, **kw)

    def launch(self, corr, ts_us, step=None):
        return self.add(name="cudaLaunchKernel", cat="cuda_runtime", ts_us=ts_us, dur_us=1, correlation=corr, step=step)

    def kernel(self, name, ts_us, dur_us, corr, step=None, stream=7, cat="kernel"):
        return self.add(
            name=name, cat=cat, ts_us=ts_us, dur_us=dur_us, stream=stream, is_gpu=True, correlation=corr, step=step
        )

    def table(self, shuffle_seed=None) -> pa.Table:
        rows = list(self.rows)
        if shuffle_seed is not None:
            random.Random(shuffle_seed).shuffle(rows)
        return pa.Table.from_pylist(rows, schema=EVENTS.arrow_schema())


def _rank(tbl, **kw) -> dict:
    steps, ranks = analyze_rank(tbl, **kw)
    assert ranks.num_rows == 1
    return ranks.to_pylist()[0]


def _steps(tbl, **kw) -> dict[int, dict]:
    steps, _ = analyze_rank(tbl, **kw)
    return {r["step"]: r for r in steps.to_pylist()}


# ---------------------------------------------------------------------------------------------
# intervals


def test_merge_overlapping_nested_and_unsorted():
    s, e = merge_intervals([10, 0, 2, 30], [20, 5, 3, 31])
    assert s.tolist() == [0, 10, 30] and e.tolist() == [5, 20, 31]


def test_merge_touching_intervals_merge_like_hta():
    # HTA: a new group starts only when ts > running max end, so [0,5) and [5,9) merge.
    s, e = merge_intervals([0, 5, 9], [5, 9, 12])
    assert s.tolist() == [0] and e.tolist() == [12]
    assert total_length(s, e) == 12


def test_merge_keeps_zero_length_and_handles_empty():
    s, e = merge_intervals([0, 10], [4, 10])
    assert s.tolist() == [0, 10] and e.tolist() == [4, 10]
    s, e = merge_intervals([], [])
    assert s.size == 0 and total_length(s, e) == 0
    with pytest.raises(ValueError):
        merge_intervals([0, 1], [2])


def test_intersection_length_sweep():
    a = merge_intervals([0, 20], [10, 30])
    b = merge_intervals([5, 25], [22, 40])
    # [5,10) + [20,22) + [25,30) = 5 + 2 + 5
    assert intersection_length(*a, *b) == 12
    # touching only: no overlap
    assert intersection_length(*merge_intervals([0], [10]), *merge_intervals([10], [20])) == 0
    assert intersection_length(*merge_intervals([], []), *b) == 0


def test_intersection_matches_brute_force():
    rng = np.random.default_rng(0)
    for _ in range(50):
        sa = rng.integers(0, 200, 15)
        sb = rng.integers(0, 200, 15)
        a = merge_intervals(sa, sa + rng.integers(0, 30, 15))
        b = merge_intervals(sb, sb + rng.integers(0, 30, 15))
        grid = np.zeros((2, 260), bool)
        for k, (ss, ee) in enumerate((a, b)):
            for x, y in zip(ss, ee):
                grid[k, x:y] = True
        assert intersection_length(*a, *b) == int((grid[0] & grid[1]).sum())


def test_clip_intervals():
    s, e = clip_intervals([0, 5, 50], [10, 8, 60], 4, 9)
    assert s.tolist() == [4, 5] and e.tolist() == [9, 8]


# ---------------------------------------------------------------------------------------------
# kernel types


@pytest.mark.parametrize(
    "name,hta,ours",
    [
        (
            "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
            COMMUNICATION,
            COMMUNICATION,
        ),
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", COMMUNICATION, COMMUNICATION),
        ("nccldevkernel_allreduce_sum_f32", COMPUTATION, COMMUNICATION),  # HTA issue #247 (lower case)
        ("rccl_AllReduce_kernel", COMPUTATION, COMMUNICATION),
        ("hcclAllReduce", COMPUTATION, COMMUNICATION),
        ("Memcpy HtoD (Pageable -> Device)", MEMORY, MEMORY),
        ("Memset (Device)", MEMORY, MEMORY),
        ("dma_transfer", MEMORY, MEMORY),
        ("hipMemcpyWithStream", OTHER, MEMORY),  # HTA: contains Memcpy -> OTHER
        ("Stream Wait Event", COMPUTATION, OTHER),  # HTA README quirk
        ("Stream Sync", OTHER, OTHER),
        ("Event Sync", OTHER, OTHER),
        ("Context Sync", OTHER, OTHER),
        ("cudaMemcpyAsync", OTHER, MEMORY),  # HTA: .*Memcpy -> OTHER
        ("Memset_async_helper", MEMORY, MEMORY),
        ("void at::native::vectorized_elementwise_kernel<4>", COMPUTATION, COMPUTATION),
        ("triton_poi_fused_add_cos_sin_0", COMPUTATION, COMPUTATION),
        ("aten::add", COMPUTATION, COMPUTATION),
    ],
)
def test_kernel_types(name, hta, ours):
    assert hta_kernel_type(name) == hta
    assert kernel_type(name) == ours


def test_kernel_type_uses_collective_and_extra_patterns():
    assert kernel_type("my_custom_allreduce", collective="allreduce") == COMMUNICATION
    assert kernel_type("my_custom_allreduce") == COMPUTATION
    assert kernel_type("my_custom_allreduce", extra_comm_patterns=[r"custom_allreduce"]) == COMMUNICATION


def test_vectorized_kernel_types_match_scalar():
    names = ["ncclKernel_x", None, "Memcpy DtoD", "gemm", "Event Sync", "gemm", "rccl_x"]
    codes = hta_kernel_types(pa.array(names))
    assert [KERNEL_TYPES[c] for c in codes] == [hta_kernel_type(n) for n in names]
    codes = kernel_types(pa.array(names), pa.array([None, None, None, "all_reduce", None, "", None]))
    assert [KERNEL_TYPES[c] for c in codes] == [
        COMMUNICATION,
        COMPUTATION,
        MEMORY,
        COMMUNICATION,
        OTHER,
        COMPUTATION,
        COMMUNICATION,
    ]


# ---------------------------------------------------------------------------------------------
# temporal breakdown of a bare set of GPU events


def test_temporal_breakdown_hand_example():
    comp, comm, mem = (KERNEL_TYPES.index(t) for t in (COMPUTATION, COMMUNICATION, MEMORY))
    # comp [0,10) [10,20) (touching -> one interval), comm [15,40), mem [50,55); span 0..55
    bd = temporal_breakdown([0, 10, 15, 50], [10, 10, 25, 5], [comp, comp, comm, mem])
    assert bd.kernel_time_ns == 55
    assert bd.idle_time_ns == 55 - (40 + 5)  # merged busy = [0,40) + [50,55)
    assert bd.compute_time_ns == 20
    assert bd.comm_time_ns == 25
    assert bd.non_compute_time_ns == 55 - 20 - 10
    assert bd.overlap_pct == pytest.approx(100 * 5 / 25)  # comm ∩ comp = [15,20)
    assert bd.idle_pct + bd.compute_pct + bd.non_compute_pct == pytest.approx(100)
    assert bd.n_kernels == 4


def test_temporal_breakdown_empty_and_zero_span():
    bd = temporal_breakdown([], [], [])
    assert bd.kernel_time_ns is None and bd.idle_pct is None and bd.n_kernels == 0
    bd = temporal_breakdown([5], [0], [KERNEL_TYPES.index(COMPUTATION)])
    assert bd.kernel_time_ns == 0 and bd.idle_pct is None and bd.overlap_pct is None


# ---------------------------------------------------------------------------------------------
# analyze_rank on hand-made ranks


def _three_step_rank() -> Trace:
    """3 CPU steps; step N launches one compute kernel and one NCCL kernel."""
    t = Trace()
    for k, n in enumerate((1, 2, 3)):
        t0 = 1000 * k
        t.step(n, t0, 900)
        t.cpu_op("aten::mm", t0 + 10, 100, step=n)
        t.cpu_op("aten::relu", t0 + 50, 200, step=n, tid=2)  # other thread, overlaps mm
        t.launch(10 * n, t0 + 20, step=n)
        t.launch(10 * n + 1, t0 + 30, step=n)
        t.kernel("gemm_kernel", t0 + 100, 100, 10 * n, step=n)  # [100,200)
        t.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", t0 + 150, 100, 10 * n + 1, step=n, stream=9)
    return t


def test_rank_last_step_filter_and_overlap():
    r = _rank(_three_step_rank().table())
    # Filter: >1 ProfilerStep names -> keep rows before the start of ProfilerStep#3 (2000 µs)
    # and the kernels correlated with them: steps 1 and 2 only.
    assert r["n_kernels"] == 4
    assert r["kernel_time_ns"] == (1250 - 100) * US
    assert r["compute_time_ns"] == 200 * US
    assert r["comm_time_ns"] == 200 * US
    assert r["idle_time_ns"] == (1150 - 300) * US
    assert r["overlap_pct"] == pytest.approx(50.0)  # 50 of each 100 µs NCCL kernel
    assert r["idle_pct"] == pytest.approx(100 * 850 / 1150)
    assert r["non_compute_pct"] == pytest.approx(100 * 100 / 1150)
    assert r["n_steps"] == 3 and r["step_time_p50_ns"] == 900 * US and r["step_time_max_ns"] == 900 * US
    assert (r["job_id"], r["attempt"], r["rank"], r["capture_id"]) == ("job", 0, 3, "cap")
    assert r["world_size"] is None and r["device_name"] is None


def test_steps_rows_have_no_last_step_filter():
    steps = _steps(_three_step_rank().table())
    assert sorted(steps) == [1, 2, 3]
    s3 = steps[3]
    assert s3["step_start_ns"] == BASE + 2000 * US and s3["step_time_ns"] == 900 * US
    assert s3["n_kernels"] == 2
    assert s3["kernel_time_ns"] == 150 * US and s3["idle_time_ns"] == 0
    assert s3["compute_time_ns"] == 100 * US and s3["comm_time_ns"] == 100 * US
    assert s3["overlap_pct"] == pytest.approx(50.0)
    # cpu_op union over threads: [10,110) ∪ [50,250) = 240 µs
    assert s3["cpu_op_time_ns"] == 240 * US


def test_single_step_name_means_no_filter():
    t = Trace().step(7, 0, 500)
    t.launch(1, 10, step=7).kernel("gemm", 20, 10, 1, step=7)
    t.kernel("gemm", 600, 10, 99, step=None)  # launched outside any step: still counted
    r = _rank(t.table())
    assert r["n_kernels"] == 2 and r["kernel_time_ns"] == 590 * US


def test_output_schemas_are_exact_and_row_order_does_not_matter():
    tbl = _three_step_rank().table()
    steps, ranks = analyze_rank(tbl)
    assert steps.schema.equals(STEPS.arrow_schema(), check_metadata=False)
    assert ranks.schema.equals(RANKS.arrow_schema(), check_metadata=False)
    steps2, ranks2 = analyze_rank(_three_step_rank().table(shuffle_seed=1))
    assert ranks2.to_pylist() == ranks.to_pylist()
    assert steps2.sort_by("step").to_pylist() == steps.sort_by("step").to_pylist()


def test_step_without_gpu_events_has_null_breakdown():
    t = _three_step_rank()
    t.step(4, 3000, 400).cpu_op("aten::empty", 3010, 5, step=4)
    s4 = _steps(t.table())[4]
    assert s4["n_kernels"] == 0
    for c in ("kernel_time_ns", "idle_time_ns", "compute_time_ns", "idle_pct", "overlap_pct", "comm_time_ns"):
        assert s4[c] is None
    assert s4["cpu_op_time_ns"] == 5 * US and s4["step_time_ns"] == 400 * US


def test_rank_without_gpu_events_gives_null_breakdown_not_a_crash():
    t = Trace().step(551, 0, 100).cpu_op("aten::add", 10, 20, step=551)
    t.add(name="i-event", cat="cpu_instant_event", ts_us=5, ph="i")
    steps, ranks = analyze_rank(t.table())
    r = ranks.to_pylist()[0]
    assert r["n_kernels"] == 0 and r["n_steps"] == 1
    assert all(r[c] is None for c in ("kernel_time_ns", "idle_pct", "compute_pct", "non_compute_pct", "overlap_pct"))
    assert steps.num_rows == 1 and steps.to_pylist()[0]["cpu_op_time_ns"] == 20 * US


def test_no_profiler_step_gives_no_steps_rows():
    t = Trace().launch(1, 0).kernel("gemm", 5, 10, 1)
    steps, ranks = analyze_rank(t.table())
    r = ranks.to_pylist()[0]
    assert steps.num_rows == 0 and r["n_steps"] == 0 and r["step_time_p50_ns"] is None
    assert r["compute_pct"] == pytest.approx(100.0)


def test_a_cpu_op_with_args_stream_is_host_work_and_only_hta_mode_counts_it():
    # triton_example, TraceLens/b200: the Triton launcher cpu_op carries args.stream. HTA counts any row with an
    # integer args.stream as a GPU event; the category decides here (issue 33), HTA's rule only in HTA mode.
    t = Trace().step(1, 0, 1000)
    t.cpu_op("triton_launcher", 100, 50, step=1, args={"stream": 0})
    t.launch(1, 110, step=1).kernel("triton_poi_fused", 160, 40, 1, step=1)
    r = _rank(t.table())
    assert r["n_kernels"] == 1
    assert r["kernel_time_ns"] == 40 * US and r["idle_time_ns"] == 0
    hta = _rank(t.table(), hta_us_rounding=True)
    assert hta["n_kernels"] == 2
    assert hta["kernel_time_ns"] == 100 * US and hta["idle_time_ns"] == 10 * US


def test_non_integer_stream_is_not_a_gpu_event():
    # ROCm writes "stream": "0x0" on hipMemcpyWithStream; HTA's int() fails -> stream -1.
    t = Trace().launch(1, 0).kernel("gemm", 5, 10, 1)
    t.add(name="hipMemcpyWithStream", cat="cuda_runtime", ts_us=100, dur_us=50, args={"stream": "0x0"})
    t.rows[-1]["stream"] = 0  # even if a parser read the hex string as 0
    assert _rank(t.table())["n_kernels"] == 1


def test_rows_without_dur_or_cat_and_trace_spans_are_dropped():
    t = Trace().launch(1, 0).kernel("gemm", 5, 10, 1)
    t.add(name="PyTorch Profiler (0)", cat="Trace", ts_us=0, dur_us=10_000, stream=3, is_gpu=True)
    t.add(name="instant", cat="kernel", ts_us=500, ph="i", stream=7, is_gpu=True)
    r = _rank(t.table())
    assert r["n_kernels"] == 1 and r["kernel_time_ns"] == 10 * US


def test_last_step_filter_keys_on_latest_profiler_step_row_even_gpu_copy():
    # TraceLens/mi300 quirk: the gpu_user_annotation copy of the last step starts after the CPU
    # step, so HTA keeps the CPU step and its kernels.
    t = Trace()
    for n, t0 in ((1, 0), (2, 1000)):
        t.step(n, t0, 900).launch(n, t0 + 10, step=n).kernel("gemm", t0 + 100, 10, n, step=n)
    t.add(
        name="ProfilerStep#2", cat="gpu_user_annotation", ts_us=1050, dur_us=100, is_gpu=True, args={"External id": 5}
    )
    assert _rank(t.table())["n_kernels"] == 2
    t.rows.pop()
    assert _rank(t.table())["n_kernels"] == 1


def test_last_step_filter_matches_gpu_rows_by_args_correlation_only():
    t = Trace()
    for n, t0 in ((1, 0), (2, 1000)):
        t.step(n, t0, 900).launch(n, t0 + 10, step=n).kernel("gemm", t0 + 100, 10, n, step=n)
    # A kernel whose correlation came from a launch flow, not args: HTA sees correlation -1,
    # i.e. a CPU-side row, kept because it starts before the last step.
    t.kernel("flow_only", 500, 10, 2, step=1)
    t.rows[-1]["args_json"] = json.dumps({"stream": 7})
    assert _rank(t.table())["n_kernels"] == 2


def test_hta_round_us_rounds_inward():
    ts = np.array([1_500, 2_000, 3_100], np.int64)
    dur = np.array([1_760, 500, 300], np.int64)
    rts, rdur = hta_filter.hta_round_us(ts, dur)
    assert rts.tolist() == [2_000, 2_000, 4_000]
    assert rdur.tolist() == [1_000, 0, -1_000]  # [3.1, 3.4) -> ceil 4, floor 3, as HTA
    same = hta_filter.hta_round_us(np.array([1000, 2000]), np.array([5, 7]))
    assert same[0].tolist() == [1000, 2000]


def test_hta_us_rounding_option_changes_sub_us_kernels():
    t = Trace().step(1, 0, 100).launch(1, 1).kernel("gemm", 10.5, 1.76, 1, step=1).kernel("gemm", 20, 5, 1, step=1)
    exact = _rank(t.table())
    rounded = _rank(t.table(), hta_us_rounding=True, time_base_ns=BASE)
    assert exact["kernel_time_ns"] == 14_500 and exact["compute_time_ns"] == 6_760
    assert rounded["kernel_time_ns"] == 14_000 and rounded["compute_time_ns"] == 6_000


def test_empty_events_and_bad_input():
    steps, ranks = analyze_rank(EVENTS.empty())
    assert steps.num_rows == 0 and ranks.num_rows == 0
    tbl = _three_step_rank().table()
    with pytest.raises(ValueError, match="stream"):
        analyze_rank(tbl.drop_columns(["stream"]))
    mixed = tbl.set_column(
        tbl.schema.get_field_index("capture_id"), "capture_id", pa.array(["a"] * (tbl.num_rows - 1) + ["b"])
    )
    with pytest.raises(ValueError, match="capture_id"):
        analyze_rank(mixed)


def test_duplicate_profiler_step_number_gives_one_row():
    t = _three_step_rank().step(2, 1005, 10)  # a second ProfilerStep#2 (another thread)
    steps = _steps(t.table())
    assert sorted(steps) == [1, 2, 3] and steps[2]["step_time_ns"] == 900 * US


def test_kernel_type_memory_is_anchored_on_copy_and_set_names():
    from jobs.analyze.trace.kernel_types import kernel_type

    assert kernel_type("Memcpy HtoD (Pinned -> Device)", None) == "MEMORY"
    assert kernel_type("hipMemsetAsync", None) == "MEMORY"
    assert kernel_type("_combined_routing_memset", None) == "COMPUTATION"
