"""Unit tests of the critical path (jobs.analyze.critical_path.trace / cp_graph / cp_longest / critical_path /
cp_cross_rank).

Synthetic Kineto traces are written as Chrome-trace JSON and read with our parser
(``parse_kineto``), so the whole chain is exercised; expected numbers are computed by hand in each
test. The call-stack walk and the longest path are also checked against direct (slow, obviously
correct) reimplementations of HTA's algorithms on real corpus traces and random inputs. Parity with
HTA's own numbers is in ``tests/golden/test_critical_path_parity.py``.
"""

from __future__ import annotations

import functools
import glob
import json
import random
from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from jobs.analyze.collectives.calls import comm_calls, match_collectives
from jobs.analyze.critical_path.cross_rank import job_critical_path
from jobs.analyze.critical_path.graph import DEPENDENCY, OPERATOR, build_graph
from jobs.analyze.critical_path.longest import longest_path
from jobs.analyze.critical_path.rank import BOUNDARIES_SCHEMA, critical_path, hta_critical_path, rank_critical_path
from jobs.analyze.critical_path.trace import path_trace
from jobs.normalize.kineto.parse import parse_kineto
from schemas.tables import CRITICAL_PATH

US = 1000
CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus"
DLRM = sorted(glob.glob(str(CORPUS / "torch/param/dlrm_kineto/*.json")))
CPU, GPU = (100, 100), (0, 7)


# --------------------------------------------------------------------------------------------------
# synthetic traces


def X(name, cat, ts, dur, where=CPU, **args):
    pid, tid = where
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def kernel(name, ts, dur, corr, stream=7):
    return X(name, "kernel", ts, dur, (0, stream), stream=stream, correlation=corr, device=0)


def launch(ts, dur, corr, name="cudaLaunchKernel"):
    return X(name, "cuda_runtime", ts, dur, correlation=corr)


def events_of(trace_events, rank=0, job="job"):
    """Parse a synthetic trace with our parser and add the identity columns."""
    doc = {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2},
        "traceEvents": trace_events,
    }
    t = parse_kineto(json.dumps(doc).encode(), f"mem://{job}/rank{rank}.json").events
    n = t.num_rows
    for c, v, typ in (
        ("date", "2024-01-01", pa.string()),
        ("job_id", job, pa.string()),
        ("attempt", 0, pa.int32()),
        ("rank", rank, pa.int32()),
        ("capture_id", f"cap{rank}", pa.string()),
    ):
        t = t.append_column(c, pa.array([v] * n, typ))
    return t


def cuda_graph_trace():
    """One cudaGraphLaunch (correlation 50) replaying 4 kernels, then a stream synchronize."""
    return [
        X("ProfilerStep#1", "user_annotation", 0, 1000),
        X("graph_replay", "cpu_op", 10, 90),
        launch(20, 10, 50, name="cudaGraphLaunch"),
        kernel("k1", 40, 100, 50),
        kernel("k2", 145, 100, 50),
        kernel("k3", 250, 100, 50),
        kernel("k4", 352, 100, 50),
        X("cudaStreamSynchronize", "cuda_runtime", 110, 350, correlation=51),
        X("Stream Sync", "cuda_sync", 115, 340, GPU, stream=7, correlation=51, device=0, cuda_sync_kind="Stream Sync"),
        X("post", "cpu_op", 470, 30),
    ]


def two_rank_job(late_rank_work=3000, skew_us=0):
    """Two ranks; rank 1's CPU work before the all-reduce takes ``late_rank_work`` µs (rank 0: 100).

    Per rank (µs): aten::mm [10, 10+W] launches gemm at W; nccl:all_reduce launches the NCCL kernel
    at W+62; aten::add_ launches optimizer at W+95 (queued behind the all-reduce). The all-reduce
    completes on both ranks 100 µs after the last arrival; rank 1's clock is shifted by ``skew_us``.
    """
    works = {0: 100, 1: late_rank_work}
    arrive = {r: w + 75 for r, w in works.items()}
    done = max(arrive.values()) + 100
    out = {}
    for r, w in works.items():
        sh = skew_us if r == 1 else 0
        ev = [
            X("ProfilerStep#1", "user_annotation", 0, 5000),
            X("aten::mm", "cpu_op", 10, w),
            launch(w, 5, 1),
            kernel("gemm_kernel", w + 10, 40, 1),
            X("nccl:all_reduce", "user_annotation", w + 60, 20, **{"Input Dims": [[262144]], "Input type": ["float"]}),
            X("record_param_comms", "cpu_op", w + 61, 18),
            launch(w + 62, 8, 2),
            kernel(
                "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
                arrive[r],
                done - arrive[r],
                2,
            ),
            X("aten::add_", "cpu_op", w + 90, 20),
            launch(w + 95, 5, 3),
            kernel("optimizer_kernel", done + 2, 50, 3),
        ]
        for e in ev:
            e["ts"] += sh
        out[r] = events_of(ev, rank=r)
    return out


# --------------------------------------------------------------------------------------------------
# CUDA graphs


def test_cuda_graph_launch_keeps_every_kernel_on_the_path():
    ev = events_of(cuda_graph_trace())
    rt = path_trace(ev)
    cp = critical_path(rt, 0, 1000 * US)
    # by hand: graph_replay start -> cudaGraphLaunch start (10) -> launch delay to k1 (20)
    # -> k1..k4 (4 x 100) with gaps 5, 5, 2 -> sync edge (0) -> dependency -> post (30) = 472 µs
    assert cp.length_ns == 472 * US
    bd = cp.breakdown_ns()
    assert bd["compute"] == 400 * US
    assert bd["kernel_kernel_gap"] == 12 * US
    assert bd["launch_overhead"] == 20 * US
    assert bd["cpu_bound"] == 40 * US
    names = {rt.names[rt.name_code[a]] for a, t in zip(cp.edges.attr, cp.edges.type) if a >= 0 and t == OPERATOR}
    assert {"k1", "k2", "k3", "k4"} <= names
    # HTA 0.5.0 links a launch to one GPU row only: the graph keeps k4 alone, with no edge into it
    hta = hta_critical_path(ev, "ProfilerStep", 0)
    hta_kernels = {hta.rt.names[hta.rt.name_code[r]] for r in hta.graph.ev_row if hta.rt.stream[r] == 7}
    assert hta_kernels == {"k4", "Stream Sync"}
    assert hta.length_ns == (100 + 30) * US


def test_rank_critical_path_tables():
    ev = events_of(cuda_graph_trace())
    segs, legs = rank_critical_path(ev)
    assert segs.schema.equals(CRITICAL_PATH.arrow_schema(), check_metadata=False)
    assert legs.schema.equals(BOUNDARIES_SCHEMA)
    assert set(segs.column("scope").to_pylist()) == {"rank"}
    assert sum(segs.column("dur_ns").to_pylist()) == 472 * US
    assert set(segs.column("path_length_ns").to_pylist()) == {472 * US}
    assert segs.column("segment").to_pylist() == list(range(segs.num_rows))
    # path order: starts never go backwards along the path
    starts = segs.column("start_ns").to_pylist()
    assert starts == sorted(starts)
    # no communication kernel: one leg, to the end of the rank's path, from its origin
    assert legs.num_rows == 1 and legs.column("to_kind")[0].as_py() == "step_end"
    assert legs.column("length_ns")[0].as_py() == 472 * US


# --------------------------------------------------------------------------------------------------
# HTA algorithms, reimplemented directly (slow) for comparison


def _hta_cpu_edges(rows):
    """HTA CallStackGraph + _construct_graph_from_call_stack on one thread, verbatim semantics.

    rows: list of (idx, ts, dur, is_node, is_blocking). Returns a set of (src, dst, weight, type)
    with nodes as (idx, is_start).
    """
    START, END = 1, -1

    def cmp(x, y):
        if x[0] == y[0]:
            return -1 if x[3] == START else 1
        r = x[1] - y[1]
        if r == 0:
            if x[3] == y[3]:
                if x[3] == START:
                    r = (-1 if x[0] < y[0] else 1) if x[2] == y[2] else (1 if x[2] < y[2] else -1)
                else:
                    r = (1 if x[0] < y[0] else -1) if x[2] == y[2] else (-1 if x[2] < y[2] else 1)
            else:
                r = 1 if x[3] == START else -1
        return r

    pts = []
    for idx, ts, dur, _, _ in rows:
        pts += [(idx, ts, dur, START), (idx, ts + dur, dur, END)]
    pts.sort(key=functools.cmp_to_key(cmp))
    children, parent, stack = defaultdict(list), {}, []
    for p in pts:
        if p[3] == START:
            par = stack[-1][0] if stack else -1
            children[par].append(p[0])
            parent[p[0]] = par
            stack.append(p)
        else:
            stack.pop()
    info = {r[0]: r for r in rows}
    edges = set()
    st = {"last": None, "high": None, "depth": 0}

    def node(i, start):
        return (i, start, info[i][1] if start else info[i][1] + info[i][2])

    def visit(i):
        is_node = i >= 0 and info[i][3]
        if is_node:
            s = node(i, True)
            if st["depth"] == 0 and st["high"] is not None:
                edges.add((st["high"][:2], s[:2], 0, DEPENDENCY))
            st["depth"] += 1
            if st["last"] is not None:
                edges.add((st["last"][:2], s[:2], s[2] - st["last"][2], OPERATOR))
            st["last"] = s
        for c in children[i]:
            visit(c)
        if is_node:
            e = node(i, False)
            st["depth"] -= 1
            if st["last"] is not None:
                edges.add((st["last"][:2], e[:2], 0 if info[i][4] else e[2] - st["last"][2], OPERATOR))
            if st["depth"] == 0:
                st["last"], st["high"] = None, e
            else:
                st["last"] = e

    visit(-1)
    return edges


def _our_cpu_edges(g):
    rt = g.rt
    ev = rt.event_id
    out = set()
    for i in range(1, len(g.chain)):
        if g.pred_chain[i] and i < len(g.chain):
            a, b = g.chain[i - 1], g.chain[i]
            if rt.stream[g.ev_row[a // 2]] != -1:
                continue
            out.add(
                (
                    (int(ev[g.ev_row[a // 2]]), a % 2 == 0),
                    (int(ev[g.ev_row[b // 2]]), b % 2 == 0),
                    int(g.cw_raw[i]),
                    int(g.ctype[i]),
                )
            )
    return out


@pytest.mark.parametrize("seed", range(12))
def test_call_stack_walk_matches_hta_on_random_threads(seed):
    """Random events on one thread, nested and partially overlapping, with ties."""
    rnd = random.Random(seed)
    evs, rows = [X("ProfilerStep#1", "user_annotation", 0, 10_000)], []
    for i in range(60):
        ts = rnd.choice([rnd.randrange(0, 9000), rnd.randrange(0, 90) * 100])
        dur = rnd.choice([rnd.randrange(1, 800), 100, 200])
        cat = rnd.choice(["cpu_op", "cpu_op", "cuda_runtime", "python_function", "user_annotation"])
        name = rnd.choice(["cudaStreamSynchronize", "op"]) if cat == "cuda_runtime" else f"op{i}"
        evs.append(X(name, cat, ts, dur))
    ev = events_of(evs)
    rt = path_trace(ev)
    g = build_graph(rt, 0, 10_000 * US)
    for r in range(rt.n):
        if rt.dur[r] > 0 and rt.ts[r] <= 10_000 * US:
            rows.append(
                (int(rt.event_id[r]), int(rt.ts[r]), int(rt.dur[r]), bool(rt.node_cat[r]), bool(rt.is_blocking[r]))
            )
    ref = {(a, b, w, t) for a, b, w, t in _hta_cpu_edges(rows)}
    assert _our_cpu_edges(g) == ref


def _reference_longest(g):
    """networkx ``dag_longest_path`` length semantics with a plain Kahn loop over all edges."""
    succ = defaultdict(list)
    indeg = np.zeros(g.n_nodes, int)
    for i in range(1, len(g.chain)):
        if g.pred_chain[i]:
            succ[int(g.chain[i - 1])].append((int(g.chain[i]), int(g.cw[i])))
            indeg[g.chain[i]] += 1
    for s, d, w in zip(g.x_src.tolist(), g.x_dst.tolist(), g.x_w.tolist()):
        succ[s].append((d, w))
        indeg[d] += 1
    dist = np.zeros(g.n_nodes, np.int64)
    todo = [v for v in range(g.n_nodes) if indeg[v] == 0]
    seen = 0
    while todo:
        u = todo.pop()
        seen += 1
        for v, w in succ[u]:
            dist[v] = max(dist[v], dist[u] + w)
            indeg[v] -= 1
            if indeg[v] == 0:
                todo.append(v)
    assert seen == g.n_nodes, "graph has a cycle"
    return int(dist.max()) if g.n_nodes else 0, dist


@pytest.mark.skipif(not DLRM, reason="needs ../shared/corpus")
@pytest.mark.parametrize(
    "path",
    DLRM[:3]
    + [
        str(
            CORPUS / "torch/HolisticTraceAnalysis/critical_path/alexnet/"
            "benchmark_result_2869224_1695835535_trace.json.gz"
        )
    ],
)
def test_longest_path_matches_plain_dag_dp_on_real_graphs(path):
    ev = events_of_file(path)
    for compat in (False, True):
        rt = path_trace(ev, hta_compat=compat)
        g = build_graph(rt, int(rt.ts.min()), int(rt.end.max()))
        lp = longest_path(g)
        ref_len, ref_dist = _reference_longest(g)
        assert lp.length == ref_len
        assert np.array_equal(lp.dist, ref_dist)
        edges, _ = lp.path_to(lp.end, stop_at_reset=False)
        assert edges.length == ref_len
        # the path is connected
        assert np.array_equal(edges.src[1:], edges.dst[:-1])


def events_of_file(path):
    data = Path(path).read_bytes()
    t = parse_kineto(data, path).events
    n = t.num_rows
    for c, v, typ in (
        ("date", "d", pa.string()),
        ("job_id", "j", pa.string()),
        ("attempt", 0, pa.int32()),
        ("rank", 0, pa.int32()),
        ("capture_id", "c", pa.string()),
    ):
        t = t.append_column(c, pa.array([v] * n, typ))
    return t


def test_resets_make_legs_between_collectives():
    job = two_rank_job()
    ev = job[0]
    rt = path_trace(ev)
    cp = critical_path(rt, 0, 5000 * US)
    _, legs = rank_critical_path(ev)
    d = {r["to_kind"] + ":" + (r["to_name"] or "")[:14]: r for r in legs.to_pylist()}
    coll = d["collective:ncclKernel_All"]
    assert coll["from_kind"] == "origin"
    end = d["step_end:optimizer_kern"]
    # after the all-reduce: kernel-kernel gap 2 µs + optimizer 50 µs
    assert end["from_kind"] == "collective" and end["length_ns"] == 52 * US
    assert end["kernel_kernel_gap_ns"] == 2 * US and end["compute_ns"] == 50 * US
    assert end["rank_path_length_ns"] == cp.length_ns


# --------------------------------------------------------------------------------------------------
# cross-rank


def _job_path(job):
    parts = [rank_critical_path(ev) for ev in job.values()]
    segs = pa.concat_tables([p[0] for p in parts])
    legs = pa.concat_tables([p[1] for p in parts])
    calls = pa.concat_tables([comm_calls(ev) for ev in job.values()])
    coll = match_collectives(calls)
    rows, skew = job_critical_path(legs, coll)
    return segs, rows, skew, coll


def test_cross_rank_path_goes_through_the_late_rank():
    segs, rows, skew, _ = _job_path(two_rank_job())
    assert rows.schema.equals(CRITICAL_PATH.arrow_schema(), check_metadata=False)
    r = rows.to_pylist()
    assert {x["scope"] for x in r} == {"job"} and {x["path_rank"] for x in r} == {-1}
    comm = [x for x in r if x["bound_by"] == "communication"]
    assert len(comm) == 1 and comm[0]["rank"] == 1 and comm[0]["dur_ns"] == 100 * US
    before = r[: r.index(comm[0])]
    assert before and {x["rank"] for x in before} == {1}
    assert sum(x["dur_ns"] for x in before if x["bound_by"] == "cpu_bound") >= 2900 * US
    assert not [x for x in r if x["bound_by"] == "collective_wait"]
    # by hand: late start 10 (path origin aten::mm at 10 µs)
    # + rank 1's leg: mm -> cudaLaunchKernel start 2990, launch call 5, rest of mm 5, dependency edge
    #   to record_param_comms (HTA weight 0), -> its launch call start 1, launch delay 3062 -> 3075 = 13
    # + all-reduce on rank 1: 100 + kernel-kernel gap 2 + optimizer 50
    assert r[0]["bound_by"] == "late_start" and r[0]["dur_ns"] == 10 * US
    leg = [x for x in before if x["bound_by"] != "late_start"]
    assert sum(x["dur_ns"] for x in leg) == (2990 + 5 + 5 + 1 + 13) * US
    assert r[0]["path_length_ns"] == sum(x["dur_ns"] for x in r) == (10 + 3014 + 100 + 2 + 50) * US
    # rank 0's own path is dominated by waiting inside the all-reduce kernel
    s0 = [x for x in segs.to_pylist() if x["path_rank"] == 0]
    comm0 = sum(x["dur_ns"] for x in s0 if x["bound_by"] == "communication")
    assert comm0 == 3000 * US and comm0 > 0.8 * s0[0]["path_length_ns"]


def test_clock_skew_is_recovered_and_does_not_change_the_path():
    _, base_rows, _, base_coll = _job_path(two_rank_job())
    _, rows, skew, coll = _job_path(two_rank_job(skew_us=50_000))
    off = {r["rank"]: r["clock_offset_ns"] for r in skew.to_pylist()}
    assert off == {0: 0, 1: -50_000 * US}
    key = ("rank", "bound_by", "dur_ns", "start_ns", "end_ns")
    assert [tuple(x[k] for k in key) for x in rows.to_pylist()] == [
        tuple(x[k] for k in key) for x in base_rows.to_pylist()
    ]
    w = sorted((x["rank"], x["wait_ns"], x["aligned_start_ns"]) for x in coll.to_pylist())
    w0 = sorted((x["rank"], x["wait_ns"], x["aligned_start_ns"]) for x in base_coll.to_pylist())
    assert w == w0


def test_job_path_without_collectives_is_the_latest_rank_chain():
    ev = events_of(cuda_graph_trace())
    _, legs = rank_critical_path(ev)
    rows, skew = job_critical_path(legs, match_collectives(comm_calls(ev)))
    assert sum(rows.column("dur_ns").to_pylist()) == (10 + 472) * US  # late start (origin at 10 µs) + path
    assert skew.num_rows == 0


def _dlrm_job() -> dict:
    """rank → EVENTS rows (with identity) of the 8 DLRM ranks."""
    job = {}
    for f in DLRM:
        p = parse_kineto(Path(f).read_bytes(), f)
        r = p.meta["rank"]
        t = p.events
        for c, v, typ in (
            ("date", "d", pa.string()),
            ("job_id", "dlrm", pa.string()),
            ("attempt", 0, pa.int32()),
            ("rank", r, pa.int32()),
            ("capture_id", f"c{r}", pa.string()),
        ):
            t = t.append_column(c, pa.array([v] * t.num_rows, typ))
        job[r] = t
    return job


@pytest.mark.skipif(len(DLRM) != 8, reason="needs the 8 DLRM ranks in ../shared/corpus")
def test_dlrm_job_path():
    """8 real ranks: every rank's own path, legs for every NCCL kernel, one job path for step 10."""
    job = _dlrm_job()
    segs, rows, skew, coll = _job_path(job)
    s = segs.to_pandas()
    assert sorted(s["path_rank"].unique()) == list(range(8))
    assert (s.groupby("path_rank")["dur_ns"].sum() == s.groupby("path_rank")["path_length_ns"].first()).all()
    legs = pa.concat_tables([rank_critical_path(ev)[1] for ev in job.values()]).to_pandas()
    n_comm = coll.to_pandas().groupby("rank").size()
    assert (legs[legs.to_kind == "collective"].groupby("rank").size() == n_comm).all()
    assert (legs.length_ns >= 0).all()
    r = rows.to_pandas()
    assert set(r["step"]) == {10} and set(r["scope"]) == {"job"}
    assert r["dur_ns"].sum() == r["path_length_ns"].iloc[0]
    # the path cannot be longer than the job's step on the job clock (HTA weights <= elapsed time)
    off = {x["rank"]: x["clock_offset_ns"] for x in skew.to_pylist()}
    w = {rk: path_trace(ev) for rk, ev in job.items()}
    from jobs.analyze.critical_path.rank import profiler_steps

    spans = [(profiler_steps(w[rk])[0][1] + off[rk], profiler_steps(w[rk])[0][2] + off[rk]) for rk in job]
    assert r["path_length_ns"].iloc[0] <= max(e for _, e in spans) - min(s0 for s0, _ in spans)


# --------------------------------------------------------------------------------------------------
# call sites and the what-if of hiding one


def test_comm_site_what_if_takes_the_exposed_all_reduce_off_the_path():
    """Two ranks, rank 1 late: the all-reduce (100 µs, nothing overlaps it) is on the job's path; hiding it
    shortens the path by exactly its exposed time on the last-arriving rank."""
    from jobs.analyze.critical_path.comm_sites import comm_sites
    from schemas.tables import COMM_SITES

    job = two_rank_job()
    _, rows, _, coll = _job_path(job)
    legs = pa.concat_tables([rank_critical_path(ev)[1] for ev in job.values()])
    sites = comm_sites(legs, coll)
    assert sites.schema.equals(COMM_SITES.arrow_schema(), check_metadata=False)
    (s,) = sites.to_pylist()
    assert s["collective"] == "allreduce" and s["position"] == 0 and s["n_ranks"] == 2 and s["last_arrival_rank"] == 1
    assert s["site"] == f"{s['pg_name']}|allreduce|{s['msg_bytes']}|#0"
    assert s["exposed_cut_ns"] == 100 * US and s["exposed_max_ns"] >= 100 * US
    assert s["path_length_ns"] == rows.column("path_length_ns")[0].as_py()
    assert s["saving_ns"] == 100 * US and s["what_if_path_ns"] == s["path_length_ns"] - 100 * US
    assert s["wait_max_ns"] >= 2900 * US  # rank 0 waits for the late rank inside the kernel
    assert (s["exposed_steps"], s["exposed_steps_pct"], s["is_p2p"]) == (1, 100.0, False)


@pytest.mark.skipif(len(DLRM) != 8, reason="needs the 8 DLRM ranks in ../shared/corpus")
def test_dlrm_comm_sites_saving_never_exceeds_the_exposed_time():
    """The 8 DLRM ranks: one site per matched call of step 10, in order; no what-if saves more than it hides. Step
    10's job path starts late on rank 2 and crosses no collective, so hiding one saves nothing."""
    from jobs.analyze.critical_path.comm_sites import comm_sites

    job = _dlrm_job()
    _, rows, _, coll = _job_path(job)
    legs = pa.concat_tables([rank_critical_path(ev)[1] for ev in job.values()])
    sites = [s for s in comm_sites(legs, coll).to_pylist() if s["step"] == 10]
    assert [s["position"] for s in sites] == list(range(len(sites))) and len(sites) == 8
    assert all(0 <= s["saving_ns"] <= s["exposed_cut_ns"] for s in sites)
    assert all(s["n_ranks"] == 8 for s in sites)
    on_path = {r["bound_by"] for r in rows.to_pylist() if r["step"] == 10}
    assert "communication" not in on_path and all(s["saving_ns"] == 0 for s in sites)
