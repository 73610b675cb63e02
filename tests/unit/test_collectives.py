"""Unit tests of jobs.analyze.collectives.calls: calls, cross-rank matching, waits, skew, bandwidth.

Real data: the 8-rank DLRM job of the corpus (``torch/param/dlrm_kineto``), whose NCCL kernels carry
no collective metadata; the expected stragglers come from the raw JSON read with the standard
library (an oracle independent of our parser). Synthetic: a 2-rank all-reduce with hand-computed
waits and bandwidth, and the same job with a clock offset injected on one rank.
"""

from __future__ import annotations

import collections
import glob
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from jobs.analyze.collectives.calls import (
    CALLS_SCHEMA,
    bus_bandwidth_factor,
    collective_summary,
    comm_calls,
    estimate_clock_offsets,
    match_collectives,
    normalize_collective,
)
from jobs.normalize.kineto.parse import parse_kineto
from schemas.tables import COLLECTIVES

US = 1000
CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus"
DLRM = sorted(glob.glob(str(CORPUS / "torch/param/dlrm_kineto/*.json")))
needs_dlrm = pytest.mark.skipif(len(DLRM) != 8, reason="needs the 8 DLRM ranks in ../shared/corpus")


def _with_identity(t: pa.Table, rank: int, job: str = "dlrm") -> pa.Table:
    n = t.num_rows
    for c, v, typ in (
        ("date", "2023-09-08", pa.string()),
        ("job_id", job, pa.string()),
        ("attempt", 0, pa.int32()),
        ("rank", rank, pa.int32()),
        ("capture_id", f"cap{rank}", pa.string()),
    ):
        t = t.append_column(c, pa.array([v] * n, typ))
    return t


@pytest.fixture(scope="module")
def dlrm():
    """(per-rank events, calls, collectives) of the DLRM job, rank from distributedInfo."""
    events = {}
    for f in DLRM:
        p = parse_kineto(Path(f).read_bytes(), f)
        events[p.meta["rank"]] = _with_identity(p.events, p.meta["rank"])
    calls = pa.concat_tables([comm_calls(ev) for ev in events.values()])
    return events, calls, match_collectives(calls)


# --------------------------------------------------------------------------------------------------
# bus bandwidth (NCCL-tests doc/PERFORMANCE.md)


@pytest.mark.parametrize(
    "coll,n,factor",
    [
        ("allreduce", 8, 2 * 7 / 8),
        ("all_reduce", 2, 1.0),
        ("allgather", 8, 7 / 8),
        ("_allgather_base", 4, 3 / 4),
        ("reduce_scatter", 8, 7 / 8),
        ("reduce_scatter_tensor", 16, 15 / 16),
        ("all_to_all", 8, 7 / 8),
        ("alltoall_base", 2, 1 / 2),
        ("broadcast", 8, 1.0),
        ("reduce", 8, 1.0),
        ("sendrecv", 8, 1.0),
        ("send", 2, 1.0),
        ("recv", 2, 1.0),
        ("allreduce", 1, 0.0),
    ],
)
def test_bus_bandwidth_factor(coll, n, factor):
    assert bus_bandwidth_factor(coll, n) == pytest.approx(factor)


def test_bus_bandwidth_factor_unknown():
    assert bus_bandwidth_factor("barrier", 8) is None
    assert bus_bandwidth_factor("allreduce", None) is None
    assert normalize_collective("ncclKernel_AllReduce") == "allreduce"
    assert normalize_collective("nccl:all_to_all") == "all_to_all"


# --------------------------------------------------------------------------------------------------
# synthetic 2-rank all-reduce


def X(name, cat, ts, dur, pid=100, tid=100, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _allreduce_job(skew_us=0):
    """Rank 0 arrives at 200 µs, rank 1 at 3000 µs; both finish at 3100 µs (rank 1 clock + skew_us).

    1 MiB all-reduce (262144 floats) announced by the CPU-side ``nccl:all_reduce`` annotation; a
    compute kernel [150, 1150] on rank 0 overlaps its all-reduce.
    """
    out = {}
    for r, arrive in ((0, 200), (1, 3000)):
        sh = skew_us if r == 1 else 0
        ev = [
            X("ProfilerStep#1", "user_annotation", 0, 5000),
            X(
                "nccl:all_reduce",
                "user_annotation",
                arrive - 50,
                30,
                **{"Input Dims": [[262144]], "Input type": ["float"]},
            ),
            X("cudaLaunchKernel", "cuda_runtime", arrive - 45, 10, correlation=7),
            X(
                "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
                "kernel",
                arrive,
                3100 - arrive,
                0,
                20,
                stream=20,
                correlation=7,
                device=0,
            ),
        ]
        if r == 0:
            ev += [
                X("cudaLaunchKernel", "cuda_runtime", 100, 10, correlation=8),
                X("gemm", "kernel", 150, 1000, 0, 7, stream=7, correlation=8, device=0),
            ]
        for e in ev:
            e["ts"] += sh
        doc = {"distributedInfo": {"rank": r, "world_size": 2}, "traceEvents": ev}
        out[r] = _with_identity(parse_kineto(json.dumps(doc).encode(), f"mem://r{r}").events, r, "synthetic")
    return out


def test_synthetic_allreduce_waits_and_bandwidth():
    job = _allreduce_job()
    calls = pa.concat_tables([comm_calls(ev) for ev in job.values()])
    assert calls.schema.equals(CALLS_SCHEMA)
    col = match_collectives(calls)
    assert col.schema.equals(COLLECTIVES.arrow_schema(), check_metadata=False)
    rows = {r["rank"]: r for r in col.to_pylist()}
    assert rows[0]["match_key"] == rows[1]["match_key"]
    assert rows[0]["wait_ns"] == 2800 * US and rows[1]["wait_ns"] == 0
    assert rows[0]["skew_ns"] == rows[1]["skew_ns"] == 2800 * US
    assert rows[0]["net_dur_ns"] == rows[1]["net_dur_ns"] == 100 * US
    assert rows[1]["is_last_arrival"] and not rows[0]["is_last_arrival"]
    assert rows[0]["msg_bytes"] == 262144 * 4 and rows[0]["collective"] == "allreduce"
    algbw = 262144 * 4 / (100 * US)  # bytes per ns = GB/s
    assert rows[0]["algbw_gbps"] == pytest.approx(algbw)
    assert rows[0]["busbw_gbps"] == pytest.approx(algbw * 2 * (2 - 1) / 2)
    # exposed: rank 0's kernel [200, 3100] minus the gemm [150, 1150] = 1950 µs; rank 1: all 100 µs
    exposed = {r["rank"]: r["exposed_ns"] for r in calls.to_pylist()}
    assert exposed == {0: 1950 * US, 1: 100 * US}
    summ = {r["rank"]: r for r in collective_summary(col, calls).to_pylist()}
    assert summ[1]["is_straggler"] and not summ[0]["is_straggler"]
    assert summ[0]["exposed_comm_ns"] == 1950 * US and summ[0]["wait_ns"] == 2800 * US


def test_gloo_host_collectives_are_matched():
    """CPU DDP (Gloo): no kernels; each all-reduce is a ``gloo:all_reduce`` annotation on one of the
    backend's worker threads (alternating). Rank 1 arrives 700 µs late at the second call."""
    job = {}
    for r in (0, 1):
        ev = [X("ProfilerStep#2", "user_annotation", 0, 10_000, tid=1), X("c10d::allreduce_", "cpu_op", 900, 50, tid=1)]
        for i, (arrive, thread) in enumerate(((1000, 11), (5000 + (700 if r == 1 else 0), 12))):
            ev.append(
                X(
                    "gloo:all_reduce",
                    "user_annotation",
                    arrive,
                    6000 - arrive if i else 2000 - arrive,
                    tid=thread,
                    **{"Input Dims": [[1000]], "Input type": ["float"]},
                )
            )
        doc = {"distributedInfo": {"rank": r, "world_size": 2, "backend": "gloo"}, "traceEvents": ev}
        job[r] = _with_identity(parse_kineto(json.dumps(doc).encode(), f"mem://g{r}").events, r, "gloo")
    calls = pa.concat_tables([comm_calls(ev) for ev in job.values()])
    assert calls.num_rows == 4 and set(calls.column("pg_name").to_pylist()) == {"host:gloo"}
    assert set(calls.column("collective").to_pylist()) == {"allreduce"}
    assert calls.column("msg_bytes").to_pylist() == [4000] * 4
    assert calls.column("exposed_ns").null_count == 4 and calls.column("stream").null_count == 4
    col = match_collectives(calls).to_pylist()
    assert {r["n_ranks_matched"] for r in col} == {2}
    second = {r["rank"]: r for r in col if r["call_index"] == 1}
    assert second[1]["is_last_arrival"] and second[0]["wait_ns"] == 700 * US and second[1]["wait_ns"] == 0


def test_injected_clock_skew_is_recovered():
    base = _allreduce_job()
    skewed = _allreduce_job(skew_us=-123_456)
    calls = pa.concat_tables([comm_calls(ev) for ev in skewed.values()])
    off = {r["rank"]: r for r in estimate_clock_offsets(calls).to_pylist()}
    assert off[0]["clock_offset_ns"] == 0 and off[1]["clock_offset_ns"] == 123_456 * US
    assert off[1]["residual_p50_ns"] == 0
    col = {r["rank"]: r for r in match_collectives(calls).to_pylist()}
    ref = {
        r["rank"]: r for r in match_collectives(pa.concat_tables([comm_calls(e) for e in base.values()])).to_pylist()
    }
    for r in (0, 1):
        for k in ("wait_ns", "skew_ns", "net_dur_ns", "is_last_arrival", "aligned_start_ns", "aligned_end_ns"):
            assert col[r][k] == ref[r][k], k
    # without alignment the raw starts would make rank 1 arrive first, by 123 ms
    assert col[1]["start_ns"] < col[0]["start_ns"]


# --------------------------------------------------------------------------------------------------
# DLRM, 8 ranks, no collective metadata on the kernels


def _raw_nccl_starts():
    """Per rank (distributedInfo), NCCL kernel starts in µs in time order, read with json only."""
    out = {}
    for f in DLRM:
        d = json.loads(Path(f).read_text())
        ks = sorted(e["ts"] for e in d["traceEvents"] if e.get("cat") == "kernel" and e["name"].startswith("nccl"))
        out[d["distributedInfo"]["rank"]] = ks
    return out


@needs_dlrm
def test_dlrm_calls_match_on_every_rank(dlrm):
    events, calls, col = dlrm
    assert sorted(events) == list(range(8))
    c = calls.to_pandas()
    per = c.groupby(["rank", "pg_name"]).size().unstack()
    assert (per.nunique() == 1).all()  # same call count on every rank, per group
    assert c.groupby("rank").size().tolist() == [8] * 8
    assert c["pg_inferred"].all()  # the trace names no process group: groups inferred from streams
    assert set(c["collective"]) == {"all_to_all", "allreduce"}  # nccl:* annotations, not kernel names
    assert (c["msg_bytes"] > 0).all()
    d = col.to_pandas()
    assert len(d) == 64 and (d["n_ranks_matched"] == 8).all()
    assert (d["wait_ns"] >= 0).all() and (d["skew_ns"] >= 0).all() and (d["net_dur_ns"] >= 0).all()
    assert (d.groupby("match_key")["is_last_arrival"].sum() == 1).all()
    assert (d.groupby("match_key")["collective"].nunique() == 1).all()
    # definitions, checked on the output itself
    last = d.groupby("match_key")["aligned_start_ns"].transform("max")
    assert (d["wait_ns"] == last - d["aligned_start_ns"]).all()
    assert (d.loc[d["is_last_arrival"], "wait_ns"] == 0).all()
    ok = d["algbw_gbps"].notna()
    assert ok.all()
    fac = [bus_bandwidth_factor(a, 8) for a in d["collective"]]
    assert np.allclose(d["busbw_gbps"], d["algbw_gbps"] * np.array(fac))


@needs_dlrm
def test_dlrm_straggler_and_skew(dlrm):
    _, calls, col = dlrm
    raw = _raw_nccl_starts()
    n = len(raw[0])
    oracle = collections.Counter(max(range(8), key=lambda r: (raw[r][i], -r)) for i in range(n))
    summ = collective_summary(col, calls).to_pandas().set_index("rank")
    assert summ["n_last_arrivals"].to_dict() == {r: oracle.get(r, 0) for r in range(8)}
    assert summ.index[summ["is_straggler"]].tolist() == [oracle.most_common(1)[0][0]] == [7]
    # one host, one clock: the offsets found are within the traces' 1 µs resolution (+ noise)
    off = estimate_clock_offsets(calls).to_pandas()
    assert off["clock_offset_ns"].abs().max() <= 3 * US
    # the first all-to-all: rank 7 arrived 7.6 ms after rank 1 (raw µs starts)
    first = col.to_pandas().query("match_key == 'step=10|group=stream#0|all_to_all#0'").set_index("rank")
    assert first["skew_ns"].iloc[0] == pytest.approx((raw[7][0] - raw[1][0]) * US, abs=3 * US)
    assert (summ["exposed_comm_ns"] <= summ["comm_ns"]).all() and (summ["exposed_comm_ns"] > 0).all()
