"""Unit tests of jobs.analyze.findings.ranking / finding_rules: every rule on a small input built to trigger
it and on one that must not, ranking, stable ids, findings.json against its JSON Schema, and the
8-rank DLRM job of the corpus end to end (parse → rank_tables → job_tables → findings).

Synthetic frames use the declared columns (schemas.tables); numbers are chosen so that the expected
estimates can be computed by hand from the rule definitions.
"""

from __future__ import annotations

import bisect
import json
from pathlib import Path

import corpus_jobs
import jsonschema
import pandas as pd
import pyarrow.compute as pc
import pytest

from jobs.analyze.efficiency import ops as efficiency_ops
from jobs.analyze.findings import rules as fr
from jobs.analyze.findings.ranking import (
    EVENTS_COLUMNS,
    RULE_NAMES,
    SCHEMA_PATH,
    SYNC_NAMES,
    findings_document,
    job_findings,
    validate_document,
)
from schemas.tables import COLLECTIVES, CRITICAL_PATH, FINDINGS, STEPS

MS, US = 1_000_000, 1_000
JOB = "job-a"


# --------------------------------------------------------------------------------------------------
# builders


def healthy_step(rank: int, step: int, **over) -> dict:
    """A 10 ms step, GPU busy 9.5 ms with computation, nothing wrong."""
    row = dict.fromkeys(STEPS.names)
    row.update(
        date="2026-01-02",
        job_id=JOB,
        attempt=0,
        rank=rank,
        capture_id=f"c{rank}",
        step=step,
        step_start_ns=step * 10 * MS,
        step_time_ns=10 * MS,
        kernel_time_ns=9_800 * US,
        idle_time_ns=300 * US,
        compute_time_ns=9_400 * US,
        non_compute_time_ns=100 * US,
        comm_time_ns=0,
        overlap_pct=None,
        n_kernels=120,
        cpu_op_time_ns=4 * MS,
        memory_time_ns=100 * US,
        exposed_comm_ns=0,
        idle_host_wait_ns=50 * US,
        idle_kernel_wait_ns=200 * US,
        idle_other_ns=50 * US,
        n_launches=120,
        launch_runtime_ns=600 * US,
        launch_delay_sum_ns=1 * MS,
        launch_delay_p50_ns=8 * US,
        launch_delay_max_ns=40 * US,
        n_short_kernels=10,
        n_runtime_outliers=0,
        n_launch_delay_outliers=0,
        queue_length_max=30,
        queue_length_mean=12.0,
        blocked_on_full_queue_ns=0,
        memcpy_bytes=1 << 20,
        memcpy_time_ns=100 * US,
        memcpy_bw_gbps=10.5,
        dataloader_time_ns=100 * US,
        cpu_bound_time_ns=100 * US,
    )
    row.update(over)
    return row


def steps_frame(n_ranks=2, n_steps=4, per_rank: dict | None = None, **over) -> pd.DataFrame:
    """Rank-steps of a job; ``over`` applies to every row, ``per_rank[r]`` to rank r only."""
    rows = []
    for r in range(n_ranks):
        for s in range(n_steps):
            rows.append(healthy_step(r, s, **{**over, **((per_rank or {}).get(r, {}))}))
    return pd.DataFrame(rows, columns=STEPS.names)


def run(steps=None, **tables) -> dict[str, dict]:
    """job_findings → {rule/scope: row}; checks the output schema every time."""
    t = job_findings({"steps": steps if steps is not None else steps_frame(), **tables})
    assert t.schema == FINDINGS.arrow_schema() and t.column_names == FINDINGS.names
    rows = t.to_pylist()
    assert [r["rank_order"] for r in rows] == list(range(1, len(rows) + 1))
    return {r["finding_id"]: r for r in rows}


def rules(found: dict) -> set[str]:
    return {r["rule"] for r in found.values()}


def evidence(row: dict) -> dict:
    return json.loads(row["evidence_json"])


def collectives_frame(arrivals: list[list[int]], *, dur_ns=400 * US, exposed_ns=None, steps=None) -> pd.DataFrame:
    """COLLECTIVES rows for calls whose aligned start on rank r is ``arrivals[call][r]`` (ns);
    wait/skew/last arrival computed as collectives.match_collectives defines them."""
    rows = []
    for c, starts in enumerate(arrivals):
        last = max(starts)
        last_rank = min(r for r, s in enumerate(starts) if s == last)
        for r, s in enumerate(starts):
            row = dict.fromkeys(COLLECTIVES.names)
            wait = last - s
            row.update(
                date="2026-01-02",
                job_id=JOB,
                attempt=0,
                rank=r,
                capture_id=f"c{r}",
                step=(steps[c] if steps else c // 2),
                event_id=1000 + c,
                pg_name="0",
                collective="allreduce",
                call_index=c,
                match_key=f"pg=0|seq={c}",
                seq=c,
                stream=20,
                start_ns=s,
                end_ns=last + dur_ns,
                dur_ns=last + dur_ns - s,
                aligned_start_ns=s,
                aligned_end_ns=last + dur_ns,
                clock_offset_ns=0,
                wait_ns=wait,
                skew_ns=last - min(starts),
                net_dur_ns=dur_ns,
                is_last_arrival=r == last_rank,
                n_ranks_matched=len(starts),
                name="ncclDevKernel_AllReduce_Sum_f32_RING_LL",
                pg_inferred=False,
                exposed_ns=exposed_ns if exposed_ns is not None else last + dur_ns - s,
                msg_bytes=64 << 20,
                group_size=len(starts),
                algbw_gbps=160.0,
                busbw_gbps=280.0,
            )
            rows.append(row)
    return pd.DataFrame(rows, columns=COLLECTIVES.names)


# --------------------------------------------------------------------------------------------------
# no false alarms


def test_healthy_job_has_no_findings():
    coll = collectives_frame([[0, 10 * US, 20 * US, 5 * US]] * 8)  # arrivals within 20 µs: no straggler
    assert run(steps_frame(n_ranks=4), collectives=coll) == {}


def test_empty_inputs():
    t = job_findings({})
    assert t.num_rows == 0 and t.schema == FINDINGS.arrow_schema()
    assert job_findings({"steps": pd.DataFrame(columns=STEPS.names)}).num_rows == 0


def test_missing_column_is_named():
    with pytest.raises(ValueError, match=r"'steps'.*step_time_ns"):
        job_findings({"steps": steps_frame().drop(columns=["step_time_ns"])})


# --------------------------------------------------------------------------------------------------
# host_bound_launch


def test_host_bound_launch_triggers():
    # GPU busy 6 ms of 10 ms; 3 ms of the idle time the host is inside ops/launches
    s = steps_frame(
        kernel_time_ns=9 * MS,
        idle_time_ns=3 * MS,
        cpu_bound_time_ns=3 * MS,
        idle_host_wait_ns=2 * MS,
        idle_other_ns=100 * US,
    )
    f = run(s)["host_bound_launch/job"]
    assert f["metric"] == "cpu_bound_pct_of_step" and f["value"] == pytest.approx(30.0)
    assert f["est_time_lost_per_step_ns"] == 3 * MS
    assert f["ranks"] == [0, 1] and f["steps"] == [0, 1, 2, 3]
    assert "CUDA graph" in f["recommendation"]
    ev = evidence(f)
    assert ev["scope"] == "job" and ev["threshold"] == fr.HOST_BOUND_PCT
    assert ev["details"]["idle_host_wait_ns"] == 16 * MS


def test_host_bound_launch_does_not_trigger():
    found = run(steps_frame(cpu_bound_time_ns=900 * US))  # 9 % < 10 %
    assert "host_bound_launch" not in rules(found)


def test_outlier_rank_gets_a_rank_scoped_finding():
    # 8 ranks, only rank 5 is host-bound (40 %): the job average (5 %) stays below the threshold
    s = steps_frame(n_ranks=8, per_rank={5: dict(cpu_bound_time_ns=4 * MS, kernel_time_ns=9 * MS, idle_time_ns=4 * MS)})
    found = run(s)
    assert "host_bound_launch/job" not in found
    f = found["host_bound_launch/rank=5"]
    assert f["ranks"] == [5] and f["est_time_lost_per_step_ns"] == 4 * MS and evidence(f)["rank"] == 5


# --------------------------------------------------------------------------------------------------
# many_tiny_kernels


def test_many_tiny_kernels_triggers():
    # 400 launches, 300 short; 4 ms of launch calls → 3 ms on short kernels; GPU idle 10 − (9.8 − 5) = 5.2 ms
    s = steps_frame(n_launches=400, n_short_kernels=300, launch_runtime_ns=4 * MS, idle_time_ns=5 * MS)
    f = run(s)["many_tiny_kernels/job"]
    assert f["value"] == pytest.approx(75.0) and f["est_time_lost_per_step_ns"] == 3 * MS
    assert "torch.compile" in f["recommendation"]


def test_many_tiny_kernels_capped_by_gpu_idle():
    s = steps_frame(n_launches=400, n_short_kernels=300, launch_runtime_ns=4 * MS)  # GPU idle 0.5 ms
    assert run(s)["many_tiny_kernels/job"]["est_time_lost_per_step_ns"] == 500 * US


@pytest.mark.parametrize("n_launches,n_short", [(1000, 300), (60, 40)])  # 30 % short; 67 % but only 40 per step
def test_many_tiny_kernels_does_not_trigger(n_launches, n_short):
    assert "many_tiny_kernels" not in rules(
        run(steps_frame(n_launches=n_launches, n_short_kernels=n_short, launch_runtime_ns=4 * MS))
    )


def test_short_kernel_names_from_kernels_table():
    s = steps_frame(n_launches=400, n_short_kernels=300, launch_runtime_ns=4 * MS, idle_time_ns=5 * MS)
    k = pd.DataFrame(
        [
            dict(
                date="2026-01-02",
                job_id=JOB,
                attempt=0,
                rank=0,
                capture_id="c0",
                step=0,
                name="vectorized_elementwise_kernel",
                kernel_type="COMPUTATION",
                hta_kernel_type="COMPUTATION",
                n=250,
                total_ns=250 * 3 * US,
                min_ns=2 * US,
                max_ns=4 * US,
                mean_ns=3 * US,
                std_ns=0.5,
            )
        ]
    )
    det = evidence(run(s, kernels=k)["many_tiny_kernels/job"])["details"]
    assert det["top_short_kernels"][0] == {"name": "vectorized_elementwise_kernel", "n": 250, "mean_ns": 3000.0}


# --------------------------------------------------------------------------------------------------
# exposed_communication


def _comm_steps(exposed_ns):
    return steps_frame(comm_time_ns=2500 * US, exposed_comm_ns=exposed_ns, overlap_pct=20.0)


def test_exposed_communication_triggers():
    # two calls per step per rank, each 1 ms exposed, nobody waits → transfers exposed 2 ms per step
    coll = collectives_frame([[0, 0]] * 8, dur_ns=1 * MS, exposed_ns=1 * MS)
    f = run(_comm_steps(2 * MS), collectives=coll)["exposed_communication/job"]
    assert f["metric"] == "exposed_comm_pct_of_step" and f["value"] == pytest.approx(20.0)
    assert f["est_time_lost_per_step_ns"] == 2 * MS
    ev = evidence(f)
    assert ev["details"]["wait_share_of_exposed"] == 0 and ev["details"]["n_small_calls"] == 0
    assert {e["event_id"] for e in ev["events"]} <= set(range(1000, 1008)) and ev["events"]
    assert "bucket_cap_mb" in f["recommendation"]


def test_exposed_communication_separates_waiting():
    # rank 1 arrives 1 ms late at every call: rank 0's exposed time is all waiting
    coll = collectives_frame([[0, 1 * MS]] * 8, dur_ns=0, exposed_ns=1 * MS)
    f = run(_comm_steps(2 * MS), collectives=coll)["exposed_communication/job"]
    assert f["est_time_lost_per_step_ns"] == 1 * MS  # rank 1's 2 ms of transfers / 2 rank-steps per step
    assert evidence(f)["details"]["wait_share_of_exposed"] == pytest.approx(0.5)


def test_exposed_communication_without_collectives_uses_steps():
    f = run(_comm_steps(3 * MS))["exposed_communication/job"]
    assert f["est_time_lost_per_step_ns"] == 3 * MS


def test_exposed_communication_does_not_trigger():
    coll = collectives_frame([[0, 0]] * 8, dur_ns=1 * MS, exposed_ns=400 * US)
    assert "exposed_communication" not in rules(run(_comm_steps(800 * US), collectives=coll))  # 8 %


# --------------------------------------------------------------------------------------------------
# straggler_rank


def test_straggler_rank_triggers():
    # 4 ranks, 8 calls over 4 steps; rank 3 arrives last at 7 calls, 2 ms after the others
    arrivals = [[0, 0, 0, 2 * MS]] * 7 + [[1 * MS, 0, 0, 0]]
    found = run(steps_frame(n_ranks=4), collectives=collectives_frame(arrivals))
    assert [k for k in found if k.startswith("straggler_rank")] == ["straggler_rank/rank=3"]
    f = found["straggler_rank/rank=3"]
    assert f["value"] == pytest.approx(87.5) and f["ranks"] == [3]
    assert f["est_time_lost_per_step_ns"] == 7 * 2 * MS // 4  # median wait of the others 2 ms, 7 calls, 4 steps
    ev = evidence(f)
    assert ev["details"]["n_last_arrivals"] == 7 and ev["details"]["binomial_p_value"] < 1e-3
    assert all(e["rank"] == 3 for e in ev["events"]) and {e["event_id"] for e in ev["events"]} == set(range(1000, 1007))
    assert f["confidence"] >= 0.85  # p < 1e-3 over 4 steps, 1.75× the required share


def test_straggler_rank_does_not_trigger_when_last_arrival_rotates():
    arrivals = [[2 * MS if r == c % 4 else 0 for r in range(4)] for c in range(8)]  # each rank last twice
    assert "straggler_rank" not in rules(run(steps_frame(n_ranks=4), collectives=collectives_frame(arrivals)))


def test_straggler_rank_does_not_trigger_for_tiny_skew():
    arrivals = [[0, 0, 0, 20 * US]] * 8  # always last, by 20 µs = 0.2 % of the step
    assert "straggler_rank" not in rules(run(steps_frame(n_ranks=4), collectives=collectives_frame(arrivals)))


@pytest.mark.parametrize("k,n,p", [(7, 8, 0.25), (2, 8, 0.125), (5, 8, 0.125), (0, 5, 0.3), (9, 10, 0.5), (3, 40, 0.4)])
def test_binomial_tail_is_the_sum_of_the_binomial_terms(k, n, p):
    import math

    from scipy.stats import binomtest

    from jobs.common.binomial import binomial_tail

    by_hand = sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k, n + 1))  # the former rules.py formula
    assert binomial_tail(k, n, p) == pytest.approx(by_hand, rel=1e-12)
    assert binomial_tail(k, n, p) == binomtest(k, n, p, alternative="greater").pvalue  # the former hosts.py test


# --------------------------------------------------------------------------------------------------
# dataloader_bound


def test_dataloader_bound_triggers():
    s = steps_frame(dataloader_time_ns=2 * MS, idle_time_ns=3 * MS)  # GPU idle 3.5 ms ≥ 2 ms
    cp = pd.DataFrame(
        [
            dict(
                date="2026-01-02",
                job_id=JOB,
                attempt=0,
                step=0,
                scope="rank",
                path_rank=0,
                segment=0,
                rank=0,
                capture_id="c0",
                event_id=42,
                name="enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
                start_ns=0,
                end_ns=2 * MS,
                dur_ns=2 * MS,
                bound_by="data_loading",
                path_length_ns=9 * MS,
            )
        ],
        columns=CRITICAL_PATH.names,
    )
    f = run(s, critical_path=cp)["dataloader_bound/job"]
    assert f["value"] == pytest.approx(20.0) and f["est_time_lost_per_step_ns"] == 2 * MS
    assert evidence(f)["events"][0]["event_id"] == 42 and "num_workers" in f["recommendation"]


def test_dataloader_bound_capped_by_gpu_idle():
    s = steps_frame(dataloader_time_ns=2 * MS)  # the GPU computes meanwhile: idle only 0.5 ms
    assert run(s)["dataloader_bound/job"]["est_time_lost_per_step_ns"] == 500 * US


def test_dataloader_bound_does_not_trigger():
    assert "dataloader_bound" not in rules(run(steps_frame(dataloader_time_ns=400 * US)))  # 4 %


# --------------------------------------------------------------------------------------------------
# blocking_sync


def sync_events(steps=(0, 1, 2, 3), ranks=(0, 1), item_ns=300 * US, step_of=None) -> pd.DataFrame:
    """Per rank and step: aten::item ⊃ aten::_local_scalar_dense ⊃ cudaStreamSynchronize (nested)."""
    rows = []
    eid = 0
    for r in ranks:
        for s in steps:
            t0 = s * 10 * MS + 5 * MS
            for name, cat, ts, dur in (
                ("aten::item", "cpu_op", t0, item_ns),
                ("aten::_local_scalar_dense", "cpu_op", t0 + 1 * US, item_ns - 2 * US),
                ("cudaStreamSynchronize", "cuda_runtime", t0 + 2 * US, item_ns - 4 * US),
            ):
                rows.append(
                    dict(
                        job_id=JOB,
                        attempt=0,
                        rank=r,
                        capture_id=f"c{r}",
                        step=s if step_of is None else step_of,
                        event_id=eid,
                        category=cat,
                        name=name,
                        ts_ns=ts,
                        dur_ns=dur,
                        tid=7,
                    )
                )
                eid += 1
    return pd.DataFrame(rows, columns=list(EVENTS_COLUMNS))


def test_blocking_sync_triggers():
    s = steps_frame(idle_time_ns=1 * MS)  # GPU idle 1.2 ms per step ≥ 300 µs blocked
    f = run(s, events=sync_events())["blocking_sync/job"]
    assert f["metric"] == "sync_blocked_pct_of_step" and f["value"] == pytest.approx(3.0)
    assert f["est_time_lost_per_step_ns"] == 300 * US
    det = evidence(f)["details"]
    assert det["n_calls"] == 8 and det["by_name"] == {"aten::item": 8}  # nested calls count once
    assert evidence(f)["events"][0]["name"] == "aten::item"
    assert "set_sync_debug_mode" in f["recommendation"]


def test_blocking_sync_many_short_calls_trigger():
    ev = pd.concat(
        [
            sync_events(item_ns=6 * US).assign(
                ts_ns=lambda d, k=k: d["ts_ns"] + k * 100 * US, event_id=lambda d, k=k: d["event_id"] + 1000 * k
            )
            for k in range(12)
        ]
    )
    f = run(events=ev)["blocking_sync/job"]  # 12 calls per step, only 0.72 % of the step blocked
    assert f["value"] == pytest.approx(0.72) and f["value"] < fr.SYNC_PCT
    assert evidence(f)["details"]["calls_per_step"] == 12


@pytest.mark.parametrize("kw", [dict(item_ns=30 * US), dict(step_of=None, steps=())])
def test_blocking_sync_does_not_trigger(kw):
    assert "blocking_sync" not in rules(run(events=sync_events(**kw)))  # 0.3 % blocked, 1 call / no sync


def _harness_syncs(name="cudaDeviceSynchronize", dur=300 * US) -> pd.DataFrame:
    """Per rank and step one top-level device-wide synchronization (``torch.cuda.synchronize()``)."""
    ev = sync_events()
    ev = ev[ev["name"] == "cudaStreamSynchronize"].assign(name=name, dur_ns=dur)
    return ev.reset_index(drop=True)


def test_an_item_that_reaches_no_device_is_no_sync():
    """``.item()`` of a CPU tensor: aten::item ⊃ aten::_local_scalar_dense with no runtime call inside."""
    ev = sync_events()
    cpu_items = ev[ev["name"] != "cudaStreamSynchronize"]
    assert "blocking_sync" not in rules(run(steps_frame(idle_time_ns=1 * MS), events=cpu_items))
    # an item whose copy goes through cudaMemcpyAsync (pageable: it blocks) still counts
    copy = ev.assign(name=ev["name"].replace({"cudaStreamSynchronize": "cudaMemcpyAsync"}))
    f = run(steps_frame(idle_time_ns=1 * MS), events=copy)["blocking_sync/job"]
    assert evidence(f)["details"]["by_name"] == {"aten::item": 8}


@pytest.mark.parametrize("how", ["tag", "annotation"])
def test_a_harness_that_synchronizes_by_design(how):
    """A benchmark harness calls torch.cuda.synchronize() every step to time it: declared by a capture tag or a
    user annotation, its device-wide syncs are left out; another sync in the same steps is still judged."""
    s = steps_frame(idle_time_ns=1 * MS)
    assert "blocking_sync/job" in run(s, events=_harness_syncs())  # undeclared: 3 % of the step blocked
    captures = pd.DataFrame({"job_id": JOB, "attempt": 0, "capture_id": ["c0", "c1"], "tags_json": '{"x": "1"}'})
    ev = _harness_syncs()
    if how == "tag":
        captures["tags_json"] = '{"harness": "benchmark"}'
    else:
        note = ev.assign(
            name="benchmark iteration", category="user_annotation", dur_ns=9 * MS, event_id=ev["event_id"] + 10_000
        )
        ev = pd.concat([ev, note], ignore_index=True)
    assert "blocking_sync" not in rules(run(s, events=ev, captures=captures))
    both = pd.concat([ev, sync_events().assign(event_id=lambda d: d["event_id"] + 50_000)], ignore_index=True)
    f = run(s, events=both, captures=captures)["blocking_sync/job"]
    det = evidence(f)["details"]
    assert det["by_name"] == {"aten::item": 8} and det["n_left_out_by_design"] == 8
    assert det["by_design"] == (["tag harness=benchmark"] if how == "tag" else ["annotation 'benchmark iteration'"])


@pytest.mark.parametrize(
    ("names", "says"),
    [
        ((), "Capture the step (or its static part) in a CUDA graph"),
        (("cudaGraphLaunch",), "outside the CUDA graph the step already replays (1 graph launches per step)"),
        (("cudaStreamBeginCapture", "cudaStreamEndCapture", "cudaGraphInstantiate"), "Capture once at warm-up"),
    ],
)
def test_host_bound_advice_follows_the_graph_calls(names, says):
    s = steps_frame(kernel_time_ns=9 * MS, idle_time_ns=3 * MS, cpu_bound_time_ns=3 * MS)
    ev = sync_events(item_ns=2 * US).iloc[0:0]
    rows = [
        dict(job_id=JOB, attempt=0, rank=r, capture_id=f"c{r}", step=k, event_id=100 * r + 10 * k + i,
             category="cuda_runtime", name=n, ts_ns=k * 10 * MS + i * US, dur_ns=50 * US, tid=7)
        for r in (0, 1) for k in range(4) for i, n in enumerate(names)
    ]  # fmt: skip
    f = run(s, events=pd.concat([ev, pd.DataFrame(rows, columns=ev.columns)], ignore_index=True))
    rec = f["host_bound_launch/job"]["recommendation"]
    assert says in rec, rec
    det = evidence(f["host_bound_launch/job"])["details"]
    assert det["graph_captures_per_step"] == (3 if len(names) == 3 else 0)


def test_blocking_sync_outside_steps_is_ignored():
    ev = sync_events().assign(step=None)
    assert "blocking_sync" not in rules(run(events=ev))


# --------------------------------------------------------------------------------------------------
# memcpy_bound


def test_memcpy_bound_triggers():
    # busy 9.5 ms = 7.5 ms compute + 2 ms copies that nothing overlaps
    s = steps_frame(compute_time_ns=7_500 * US, memory_time_ns=2 * MS, memcpy_bw_gbps=3.0)
    k = pd.DataFrame(
        [
            dict(
                date="2026-01-02",
                job_id=JOB,
                attempt=0,
                rank=0,
                capture_id="c0",
                step=0,
                name="Memcpy HtoD (Pageable -> Device)",
                kernel_type="MEMORY",
                hta_kernel_type="MEMORY",
                n=4,
                total_ns=2 * MS,
                min_ns=0,
                max_ns=MS,
                mean_ns=MS / 2,
                std_ns=0.0,
            )
        ]
    )
    f = run(s, kernels=k)["memcpy_bound/job"]
    assert f["value"] == pytest.approx(20.0) and f["est_time_lost_per_step_ns"] == 2 * MS
    assert evidence(f)["details"]["pageable_copies"] is True and "pin" in f["recommendation"]


def test_memcpy_bound_does_not_trigger_when_overlapped():
    s = steps_frame(compute_time_ns=9_500 * US, memory_time_ns=2 * MS)  # copies run under compute
    assert "memcpy_bound" not in rules(run(s))


# --------------------------------------------------------------------------------------------------
# low_gpu_utilization


def _op_groups(**over) -> pd.DataFrame:
    """op_efficiency rows of ranks 0 and 1: a softmax at 10 % of its roofline for 4 ms, a GEMM at 60 % for 2 ms."""
    base = dict(job_id=JOB, attempt=0, dtype="c10::BFloat16", precision="bf16", bound="memory", top_kernel="k")
    rows = [
        {**base, "rank": r, "op_name": op, "shape_sig": sig, "kind": kind, "kernel_time_ns": ns, "roofline_pct": pct}
        for r in (0, 1)
        for op, sig, kind, ns, pct in (
            ("aten::_softmax", "[16,512,512]", "normalization", 4 * MS, 10.0),
            ("aten::mm", "[512,512]x[512,512]", "gemm", 2 * MS, 60.0),
        )
    ]
    return pd.DataFrame(rows).assign(**over)


def test_kernels_below_peak_ranks_the_op_groups_by_recoverable_time():
    f = run(op_efficiency=_op_groups())["kernels_below_peak/job"]
    # per rank over its 4 steps: softmax 4 ms × (1 − 10/70) + GEMM 2 ms × (1 − 60/70), spread over the 4 steps
    per_step = (4 * MS * (1 - 10 / 70) + 2 * MS * (1 - 60 / 70)) / 4
    assert f["est_time_lost_per_step_ns"] == round(per_step)
    assert f["value"] == pytest.approx(100 * per_step / (10 * MS)) and f["metric"] == "recoverable_pct_of_step"
    det = evidence(f)["details"]
    assert [g["op_name"] for g in det["op_groups"]] == ["aten::_softmax", "aten::mm"]
    assert det["op_groups"][0]["recoverable_ns"] == round(2 * 4 * MS * (1 - 10 / 70))  # both ranks
    assert "scaled_dot_product_attention" in f["recommendation"] and "aten::_softmax" in f["title"]


@pytest.mark.parametrize(
    ("over", "fires"),
    [
        (dict(roofline_pct=65.0), False),  # close to the attainable 70 %: ≤ 0.14 ms of 10 ms per step
        (dict(roofline_pct=None), False),  # no peak for the device
        (dict(kind="gemm", precision="fp32", op_name="aten::addmm"), True),
    ],
)
def test_kernels_below_peak_thresholds_and_advice(over, fires):
    found = run(op_efficiency=_op_groups(**over))
    assert ("kernels_below_peak/job" in found) == fires
    if fires:
        assert "TF32" in found["kernels_below_peak/job"]["recommendation"]


def test_low_gpu_utilization_triggers():
    # busy 3 ms; idle 7 ms of which the host explains 0.5 ms
    s = steps_frame(
        kernel_time_ns=4 * MS,
        idle_time_ns=1 * MS,
        compute_time_ns=3 * MS,
        cpu_bound_time_ns=500 * US,
        dataloader_time_ns=0,
    )
    f = run(s)["low_gpu_utilization/job"]
    assert evidence(f)["comparison"] == "<" and evidence(f)["threshold"] == fr.LOW_UTIL_PCT
    assert f["value"] == pytest.approx(30.0) and f["est_time_lost_per_step_ns"] == 6_500 * US


def test_low_gpu_utilization_explained_by_host_says_so():
    """An idle GPU is always a finding (TB plugin: < 50 % busy); when the host explains the idle time, the title
    says so and the estimate is only the unexplained rest, so the host-bound finding ranks first."""
    s = steps_frame(kernel_time_ns=4 * MS, idle_time_ns=1 * MS, compute_time_ns=3 * MS, cpu_bound_time_ns=6_800 * US)
    found = run(s)
    low, host = found["low_gpu_utilization/job"], found["host_bound_launch/job"]
    assert "host work (68% CPU-bound)" in low["title"] and "no traced host work" not in low["title"]
    assert low["est_time_lost_per_step_ns"] == 7 * MS - 6_800 * US - 100 * US  # idle − CPU-bound − data loader
    assert host["rank_order"] < low["rank_order"]
    assert low["confidence"] < host["confidence"]


def test_cpu_only_job_has_no_gpu_findings():
    s = steps_frame(n_kernels=0, kernel_time_ns=None, idle_time_ns=None, compute_time_ns=None)
    assert not rules(run(s)) & {"low_gpu_utilization", "host_bound_launch", "memcpy_bound", "many_tiny_kernels"}


# --------------------------------------------------------------------------------------------------
# ranking, ids, several jobs, Neuron merge


def _busy_job(job=JOB, attempt=0):
    s = steps_frame(
        kernel_time_ns=9 * MS,
        idle_time_ns=3 * MS,
        cpu_bound_time_ns=3 * MS,
        dataloader_time_ns=1 * MS,
        n_launches=400,
        n_short_kernels=300,
        launch_runtime_ns=2 * MS,
    )
    return s.assign(job_id=job, attempt=attempt)


def test_ranked_by_time_lost_and_ids_stable():
    a = job_findings({"steps": _busy_job()}).to_pylist()
    assert [r["rule"] for r in a] == ["host_bound_launch", "many_tiny_kernels", "dataloader_bound"]
    ests = [r["est_time_lost_per_step_ns"] for r in a]
    assert ests == sorted(ests, reverse=True) == [3 * MS, 1_500 * US, 1 * MS]
    b = job_findings({"steps": _busy_job().sample(frac=1.0, random_state=3)}).to_pylist()  # row order irrelevant
    assert [(r["finding_id"], r["rank_order"], r["evidence_json"]) for r in a] == [
        (r["finding_id"], r["rank_order"], r["evidence_json"]) for r in b
    ]
    assert all(0.05 <= r["confidence"] <= 0.95 for r in a)


def test_several_jobs_ranked_separately():
    t = job_findings({"steps": pd.concat([_busy_job("x"), _busy_job("y", 1)])}).to_pylist()
    for key in (("x", 0), ("y", 1)):
        assert [r["rank_order"] for r in t if (r["job_id"], r["attempt"]) == key] == [1, 2, 3]


def test_neuron_findings_are_merged_and_ranked():
    ns = pd.DataFrame(
        [
            dict(
                date="2026-01-02",
                job_id=JOB,
                attempt=0,
                rank=0,
                capture_id="n0",
                profile_id="p0",
                total_time_ns=20 * MS,
                total_active_time_ns=18 * MS,
                nth_exec=2,
                tensor_active_ns=15 * MS,
                cc_trigger_delay_ns=5 * MS,
                cc_op_time_ns=10 * MS,
                cc_op_count=4,
            )
        ]
    )
    rows = job_findings({"steps": _busy_job(), "neuron_summary": ns}).to_pylist()
    assert rows[0]["rule"] == "neuron_collective_stall" and rows[0]["est_time_lost_per_step_ns"] == 5 * MS
    assert [r["rank_order"] for r in rows] == [1, 2, 3, 4]


# --------------------------------------------------------------------------------------------------
# findings.json


def test_findings_document_validates():
    t = job_findings({"steps": _busy_job(), "events": sync_events()})
    doc = findings_document(JOB, 0, t, generated_from={"warehouse": "s3://wh"})
    validate_document(doc)
    json.dumps(doc, allow_nan=False)
    assert doc["schema_version"] == "1" and doc["job_id"] == JOB and doc["attempt"] == 0
    assert doc["generated_from"]["tables"]["steps"] == 8 and doc["generated_from"]["warehouse"] == "s3://wh"
    assert set(doc["generated_from"]["rules"]) == set(RULE_NAMES)
    assert [f["rank_order"] for f in doc["findings"]] == list(range(1, len(doc["findings"]) + 1))
    assert all(isinstance(f["evidence"], dict) and f["evidence"]["job_id"] == JOB for f in doc["findings"])
    assert findings_document("other", 0, t)["findings"] == []
    # the same from a pandas frame (e.g. read back from the warehouse)
    assert findings_document(JOB, 0, t.to_pandas())["findings"] == doc["findings"]


def test_schema_rejects_bad_documents():
    doc = findings_document(JOB, 0, job_findings({"steps": _busy_job()}))
    schema = json.loads(SCHEMA_PATH.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    for bad in (
        {**doc, "schema_version": "2"},
        {**doc, "findings": [{**doc["findings"][0], "confidence": 1.5}]},
        {**doc, "findings": [{k: v for k, v in doc["findings"][0].items() if k != "evidence"}]},
    ):
        with pytest.raises(jsonschema.ValidationError):
            validate_document(bad)


def test_thresholds_documented():
    assert {
        "HOST_BOUND_PCT",
        "SHORT_KERNEL_PCT",
        "EXPOSED_COMM_PCT",
        "STRAGGLER_MIN_SHARE",
        "DATALOADER_PCT",
        "SYNC_PCT",
        "MEMORY_PCT",
        "LOW_UTIL_PCT",
        "ATTAINABLE_ROOFLINE_PCT",
    } <= set(fr.THRESHOLDS)
    src = Path(fr.__file__).read_text() + Path(efficiency_ops.__file__).read_text()  # the roofline share is shared
    for name in fr.THRESHOLDS:  # every threshold is followed by its rationale docstring
        assert f'{name} = ' in src and '"""' in src.split(f"{name} = ", 1)[1].split("\n", 2)[1]
    for _name, fn in fr.RULES:
        assert all(k in fn.__doc__ for k in ("Definition", "Source", "Time lost per step"))


# --------------------------------------------------------------------------------------------------
# real data: the 8-rank DLRM job


@pytest.fixture(scope="module")
def dlrm():
    """(findings table, findings rows by id, per-rank events) of the DLRM job through the analyze stages."""
    if not corpus_jobs.available("dlrm"):
        pytest.skip("needs the 8 DLRM ranks in ../shared/corpus")
    tables, events = corpus_jobs.corpus_job("dlrm")
    t = job_findings(tables)
    return t, {r["finding_id"]: r for r in t.to_pylist()}, events


def names_of(events, ref):
    ev = events[ref["rank"]]
    i = pc.index(ev["event_id"], ref["event_id"]).as_py()
    return ev["name"][i].as_py()


def test_dlrm_findings(dlrm):
    t, found, events = dlrm
    doc = findings_document("dlrm", 0, t)
    validate_document(doc)
    # rank 7 is last to arrive at most collectives (test_collectives checks it against the raw JSON)
    stragglers = [k for k in found if k.startswith("straggler_rank/")]
    assert stragglers == ["straggler_rank/rank=7"]
    st = found["straggler_rank/rank=7"]
    assert st["rank_order"] == 1 and st["est_time_lost_per_step_ns"] > 1 * MS
    # its evidence events are rank 7's NCCL kernels, looked up in the parsed trace
    names = dict(zip(events[7]["event_id"].to_pylist(), events[7]["name"].to_pylist()))
    ids = [e["event_id"] for e in evidence(st)["events"]]
    assert ids and all(names[i].startswith("ncclKernel") for i in ids)
    # findings link to the drill-down rows: the call sites the straggler delays, the data-loader windows
    tables, _ = corpus_jobs.corpus_job("dlrm")
    sites = evidence(st)["links"]["comm_sites"]
    cs = tables["comm_sites"]
    assert sites and sites[0]["exposed_max_ns"] == cs[cs["step"].isin(st["steps"])]["exposed_max_ns"].max()
    dl = evidence(found["dataloader_bound/job"])["links"]["utilization_windows"]
    uw = tables["utilization_windows"].set_index(["rank", "step", "window_id"])
    assert dl and all(uw.loc[(w["rank"], w["step"], w["window_id"]), "cause"] == "dataloader" for w in dl)
    # communication is exposed on every rank, but it is mostly waiting for the straggler
    ex = found["exposed_communication/job"]
    assert ex["value"] > fr.EXPOSED_COMM_PCT and evidence(ex)["details"]["wait_share_of_exposed"] > 0.9
    assert ex["est_time_lost_per_step_ns"] < st["est_time_lost_per_step_ns"]
    assert "straggler" in ex["recommendation"]
    # DLRM steps synchronize with cudaStreamSynchronize; its .item() calls read CPU tensors (no runtime call inside
    # them in the raw JSON): they wait for no device and are not counted. The copies are tiny (~20 µs per step): no
    # memcpy finding
    sync = found["blocking_sync/job"]
    details = evidence(sync)["details"]
    assert set(details["by_name"]) == {"cudaStreamSynchronize"}
    assert details["n_runtime_sync_calls"] == details["by_name"]["cudaStreamSynchronize"] > 0
    raw = json.loads(Path(corpus_jobs.files_of("dlrm")[0]).read_text())["traceEvents"]
    runtime = sorted((e["tid"], e["ts"]) for e in raw if e.get("cat") == "cuda_runtime")
    items = [e for e in raw if e.get("name") == "aten::item"]
    inside = [
        bisect.bisect_right(runtime, (i["tid"], i["ts"] + i["dur"])) - bisect.bisect_left(runtime, (i["tid"], i["ts"]))
        for i in items
    ]
    assert items and not any(inside)
    assert all(names_of(events, e) in SYNC_NAMES for e in evidence(sync)["events"])
    assert "memcpy_bound" not in rules(found) and "pageable_memcpy" not in rules(found)
    assert {"host_bound_launch", "many_tiny_kernels"} <= rules(found)
    # the late rank's advice names what it does more of in words, not a column name
    assert "CPU-bound time (host busy while the GPU idles)" in st["recommendation"]
    assert "cpu_bound_time_ns" not in st["recommendation"]


def test_dlrm_confidence_follows_the_evidence(dlrm):
    """One captured step lowers every confidence, but the findings are not all alike: a straggler proven by a
    binomial test and a host-bound step on 8 of 8 ranks at 3× the threshold beat a marginal data-loader share."""
    _t, found, _events = dlrm
    conf = {f["rule"]: f["confidence"] for f in found.values()}
    assert len(conf) == 7 and len(set(conf.values())) >= 4
    assert all(0.05 <= c <= 0.95 and round(c, 2) == c for c in conf.values())
    host = found["host_bound_launch/job"]
    assert evidence(host)["details"]["cpu_bound_time_ns"] and host["value"] > 3 * fr.HOST_BOUND_PCT
    assert conf["host_bound_launch"] > conf["dataloader_bound"] > conf["low_gpu_utilization"]
    assert conf["straggler_rank"] > conf["many_tiny_kernels"]
    assert max(conf.values()) < 0.95 - fr.few_steps_penalty(1) + 0.05  # the single step still costs


def test_one_profiled_step_lowers_confidence():
    many = {r["rule"]: r["confidence"] for r in job_findings({"steps": _busy_job()}).to_pylist()}
    one_step = _busy_job()
    one_step = one_step[one_step["step"] == one_step["step"].min()]
    one = {r["rule"]: r["confidence"] for r in job_findings({"steps": one_step}).to_pylist()}
    assert set(one) == set(many)
    for rule, c in one.items():
        assert c == pytest.approx(many[rule] - fr.few_steps_penalty(1), abs=0.011) and c < many[rule]
    assert fr.few_steps_penalty(fr.MIN_STEPS) == 0 and fr.few_steps_penalty(2) < fr.few_steps_penalty(1)


def test_confidence_from_effect_agreement_corroboration_and_samples():
    """One function (rules.confidence): each input moves it the documented way; always in [0.05, 0.95], 2 decimals."""
    at = dict(effect=1.0, agreement=0.0, n_windows=fr.MIN_STEPS)
    assert fr.confidence(0.5, **at) == 0.5
    assert fr.confidence(0.5, **{**at, "effect": 2.0}) == 0.5 + fr.EFFECT_WEIGHT / 2  # log scale, saturates at 4×
    assert fr.confidence(0.5, **{**at, "effect": 4.0}) == fr.confidence(0.5, **{**at, "effect": 400.0}) == 0.7
    assert fr.confidence(0.5, **{**at, "agreement": 1.0}) == 0.5 + fr.AGREEMENT_WEIGHT
    assert fr.confidence(0.5, **at, corroborated=True) == 0.6 and fr.confidence(0.5, **at, corroborated=False) == 0.4
    assert fr.confidence(0.5, **{**at, "n_windows": 1}) == 0.25
    assert fr.confidence(0.5, **at, n_calls=fr.MIN_CALLS - 1) == 0.4 and fr.confidence(0.5, **at, n_calls=50) == 0.5
    assert fr.confidence(0.9, effect=9, agreement=1, n_windows=9, corroborated=True) == 0.95
    assert fr.confidence(0.1, effect=1, agreement=0, n_windows=1, n_calls=1) == 0.05
    assert fr.effect_size(30.0, 10.0) == 3.0 and fr.effect_size(10.0, 50.0, "<") == 5.0
    # the per-rule table documents every GPU rule's inputs
    doc = fr.__doc__.split("Confidence", 1)[1]
    assert all(f"``{name}``" in doc for name, _ in fr.RULES)


def test_truncated_trace_steps_are_left_out():
    """B22: a partial trace's last step has no events for its tail; it must not read as idle GPU."""
    from jobs.analyze.findings.ranking import drop_truncated_steps

    s = steps_frame(n_ranks=2, n_steps=3)
    s = s.assign(capture_id=s["rank"].map(lambda r: f"cap{r}"), step_start_ns=s["step"] * 10 * MS, step_time_ns=10 * MS)
    last_end = int((s["step_start_ns"] + s["step_time_ns"]).max())
    caps = pd.DataFrame(
        {
            "capture_id": ["cap0", "cap1"],
            "flags": [["partial_trace"], []],
            "trace_end_ns": [last_end - 5 * MS, last_end - 5 * MS],
        }
    )
    kept = drop_truncated_steps(s, caps)
    assert len(kept) == len(s) - 1  # only rank 0's (partial) last step goes
    dropped = s.loc[~s.index.isin(kept.index)].iloc[0]
    assert dropped["rank"] == 0 and dropped["step"] == s["step"].max()
    assert drop_truncated_steps(s, None) is s
