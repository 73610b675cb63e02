#!/usr/bin/env python3
"""Critical-path and statistics time on a 1M-event step: ours next to HTA 0.5.0, in one run.

The input is built from a real trace, repeated: every complete event and launch flow of the base trace
(default: the DLRM rank-0 trace of the corpus, one training step on a V100 with NCCL all-to-all and
all-reduce) is copied ``k`` times back to back, with times shifted and correlation / ``External id``
/ flow ids made unique per copy, until the step holds ``--events`` complete events. One
``ProfilerStep#1`` annotation spans all copies; a tiny ``ProfilerStep#2`` follows it (so HTA's
last-step filter keeps all of step 1). The trace is written once as Kineto JSON and both tools read
that same file.

Each measurement runs in a fresh subprocess pinned to one core (``sched_setaffinity``; Arrow and BLAS
thread pools set to 1):

* **ours** (project venv): ``parse_kineto`` (reported as *load*, not part of the analysis), then
  - *critical path (HTA graph)*: :func:`jobs.analyze.critical_path.rank.hta_critical_path` — the same graph,
    weights and path as HTA's ``critical_path_analysis(rank, "ProfilerStep", 0)``, path and breakdown;
  - *critical path (product)*: :func:`jobs.analyze.critical_path.rank.rank_critical_path` — path, the
    ``critical_path`` rows and the legs between collectives, as the analyze job runs it;
  - *statistics*: :func:`jobs.analyze.hta.breakdown.analyze_rank` (HTA temporal breakdown and comm/comp
    overlap per step and for the trace) + :func:`jobs.analyze.collectives.calls.comm_calls`.
* **HTA** (``--hta-python``, made by ``benchmarks/hta_venv.sh``): ``TraceAnalysis(trace_dir)`` (*load*),
  then *critical path*: ``critical_path_analysis(rank=0, annotation="ProfilerStep", instance_id=0)`` +
  ``get_critical_path_breakdown()``; *statistics*: ``get_temporal_breakdown()`` +
  ``get_comm_comp_overlap()``.

Targets: our critical path of the step under 10 s on one core and at least 10x faster than HTA's.
Both path lengths are printed (they must agree).

Usage (from the repo root)::

    .venv/bin/python benchmarks/analyze_bench.py [--events 1000000] [--base CORPUS_KEY]
        [--hta-python .hta-venv/bin/python] [--skip-hta] [--timeout 3600] [--workdir DIR] [--json OUT]

Exit status 0 even when a target is missed (a measurement, not a test); 2 on usage errors.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_BASE = "torch/param/dlrm_kineto/worker0_step_12.1694128201545.pt.trace.json"
TARGET_CP_S = 10.0
TARGET_SPEEDUP = 10.0


# --------------------------------------------------------------------------------------------------
# input


def _dumps():
    try:
        import orjson

        return orjson.dumps
    except ImportError:  # pragma: no cover
        return lambda o: json.dumps(o, separators=(",", ":")).encode()


def build_trace(base_path: str, n_events: int, out_path: str) -> dict[str, Any]:
    """Write the repeated-step trace to ``out_path``; returns its size and event counts."""
    opener = gzip.open if base_path.endswith(".gz") else open
    with opener(base_path, "rb") as f:
        base = json.loads(f.read())
    evs = base["traceEvents"]
    body = [e for e in evs if e.get("ph") in ("X", "s", "f") and not str(e.get("name", "")).startswith("ProfilerStep")]
    meta = [e for e in evs if e.get("ph") == "M"]
    xs = [e for e in body if e.get("ph") == "X"]
    t0 = min(e["ts"] for e in xs)
    t1 = max(e["ts"] + e.get("dur", 0) for e in xs)
    span = t1 - t0 + 100
    copies = max(1, -(-n_events // len(xs)))
    ids = [e["args"].get(k) for e in body if isinstance(e.get("args"), dict) for k in ("correlation", "External id")]
    ids += [e.get("id") for e in body]
    stride = max([i for i in ids if isinstance(i, int)] + [0]) + 1
    step = next(
        e for e in evs if str(e.get("name", "")).startswith("ProfilerStep") and e.get("cat") != "gpu_user_annotation"
    )
    dumps = _dumps()
    n_x = 0
    with open(out_path, "wb") as f:
        head = {k: v for k, v in base.items() if k != "traceEvents"}
        f.write(dumps(head)[:-1] + b',"traceEvents":[')
        first = True
        for e in meta + [
            {**step, "name": "ProfilerStep#1", "ts": t0 - 5, "dur": copies * span + 10},
            {**step, "name": "ProfilerStep#2", "ts": t0 + copies * span + 20, "dur": 5},
        ]:
            f.write((b"" if first else b",") + dumps(e))
            first = False
        for k in range(copies):
            shift, off = k * span, k * stride
            chunk = []
            for e in body:
                g = dict(e)
                g["ts"] = e["ts"] + shift
                a = e.get("args")
                if isinstance(a, dict) and ("correlation" in a or "External id" in a):
                    a = dict(a)
                    for key in ("correlation", "External id"):
                        if isinstance(a.get(key), int) and a[key] > 0:
                            a[key] += off
                    g["args"] = a
                if isinstance(e.get("id"), int):
                    g["id"] = e["id"] + off
                chunk.append(dumps(g))
            f.write(b"," + b",".join(chunk))
            n_x += len(xs)
        f.write(b"]}")
    return {"copies": copies, "x_events": n_x + 2, "json_bytes": os.path.getsize(out_path), "base_x_events": len(xs)}


# --------------------------------------------------------------------------------------------------
# children


def _one_core() -> None:
    try:
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    except (AttributeError, OSError):
        pass


def _timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def _timed_cpu(fn):
    """(result, wall s, CPU s of this process): CPU time is what one core spent, whatever else runs."""
    c, t = time.process_time(), time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t, time.process_time() - c


def child_ours(path: str) -> dict[str, Any]:
    """Load with our parser, then time the critical path (HTA graph, product) and the statistics."""
    _one_core()
    sys.path.insert(0, REPO_ROOT)
    import pyarrow as pa

    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)
    from jobs.analyze.collectives.calls import comm_calls
    from jobs.analyze.critical_path.rank import hta_critical_path, rank_critical_path
    from jobs.analyze.hta.breakdown import analyze_rank
    from jobs.normalize.kineto.parse import parse_kineto

    with open(path, "rb") as f:
        raw = f.read()
    parsed, t_load, c_load = _timed_cpu(lambda: parse_kineto(raw, path))
    ev = parsed.events
    n = ev.num_rows
    for c, v, typ in (
        ("date", "bench", pa.string()),
        ("job_id", "bench", pa.string()),
        ("attempt", 0, pa.int32()),
        ("rank", 0, pa.int32()),
        ("capture_id", "bench", pa.string()),
    ):
        ev = ev.append_column(c, pa.array([v] * n, typ))
    raw = b""  # the bytes are freed before the analyses are timed
    cp, t_cp, c_cp = _timed_cpu(lambda: hta_critical_path(ev, "ProfilerStep", 0))
    breakdown = {k: v / 1000 for k, v in cp.breakdown_ns(hta_names=True).items()}
    res = {
        "rows": n,
        "load_s": t_load,
        "load_cpu_s": c_load,
        "cp_s": t_cp,
        "cp_cpu_s": c_cp,
        "path_us": cp.length_ns / 1000,
        "breakdown_us": breakdown,
        "graph_nodes": cp.graph.n_nodes,
        "graph_edges": cp.graph.n_edges,
    }
    del cp
    (segs, legs), t_rank, c_rank = _timed_cpu(lambda: rank_critical_path(ev))
    res.update({"cp_product_s": t_rank, "cp_product_cpu_s": c_rank, "segments": segs.num_rows, "legs": legs.num_rows})
    _, t_stats, c_stats = _timed_cpu(lambda: (analyze_rank(ev), comm_calls(ev)))
    res.update({"stats_s": t_stats, "stats_cpu_s": c_stats})
    return res


def child_hta(path: str) -> dict[str, Any]:
    """HTA 0.5.0: load, critical path + breakdown, temporal breakdown + comm/comp overlap."""
    _one_core()
    import logging

    logging.disable(logging.WARNING)
    from hta.trace_analysis import TraceAnalysis

    with tempfile.TemporaryDirectory(prefix="hta_bench_") as d:
        os.symlink(os.path.abspath(path), os.path.join(d, os.path.basename(path)))
        ta, t_load, c_load = _timed_cpu(lambda: TraceAnalysis(trace_dir=d))
        rank = ta.t.get_ranks()[0]

        def cp():
            g, ok = ta.critical_path_analysis(rank=rank, annotation="ProfilerStep", instance_id=0)
            return g, ok, g.get_critical_path_breakdown()

        (g, ok, df), t_cp, c_cp = _timed_cpu(cp)
        _, t_stats, c_stats = _timed_cpu(
            lambda: (ta.get_temporal_breakdown(visualize=False), ta.get_comm_comp_overlap(visualize=False))
        )
        return {
            "rows": int(sum(len(x) for x in ta.t.get_all_traces().values())),
            "load_s": t_load,
            "load_cpu_s": c_load,
            "cp_s": t_cp,
            "cp_cpu_s": c_cp,
            "stats_cpu_s": c_stats,
            "ok": bool(ok),
            "path_us": float(df.duration.sum()),
            "breakdown_us": {str(k): float(v) for k, v in df.groupby("bound_by").duration.sum().items()},
            "graph_nodes": g.number_of_nodes(),
            "graph_edges": g.number_of_edges(),
            "stats_s": t_stats,
        }


def run_child(impl: str, python: str, path: str, timeout: float) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    if impl == "ours":
        env["PYTHONPATH"] = REPO_ROOT
    cmd = [python, os.path.abspath(__file__), "--_child", impl, path]
    t = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO_ROOT, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:g} s"}
    if p.returncode != 0:
        tail = " | ".join(p.stderr.strip().splitlines()[-3:])
        return {"error": f"exit {p.returncode}: {tail}"}
    out = json.loads(p.stdout.strip().splitlines()[-1])
    out["process_s"] = time.perf_counter() - t
    return out


# --------------------------------------------------------------------------------------------------


def _f(x, spec=".2f") -> str:
    return "-" if x is None else format(x, spec)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000, help="complete events in the step (default 1e6)")
    ap.add_argument("--base", default=DEFAULT_BASE, help="corpus key of the trace to repeat")
    ap.add_argument("--corpus-root", default=os.path.join(REPO_ROOT, "..", "shared", "corpus"))
    ap.add_argument("--hta-python", default=os.path.join(REPO_ROOT, ".hta-venv", "bin", "python"))
    ap.add_argument("--skip-hta", action="store_true")
    ap.add_argument("--timeout", type=float, default=3600.0, help="per child process, seconds")
    ap.add_argument("--workdir", help="where the trace is written (default: a temp dir, removed)")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--_child", nargs=2, metavar=("IMPL", "PATH"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a._child:
        impl, path = a._child
        print(json.dumps(child_ours(path) if impl == "ours" else child_hta(path)))
        return 0
    base = os.path.join(a.corpus_root, a.base)
    if not os.path.exists(base):
        print(f"{base}: no such trace file", file=sys.stderr)
        return 2
    if a.events < 1:
        ap.error("--events must be >= 1")
    work = a.workdir or tempfile.mkdtemp(prefix="analyze_bench_")
    os.makedirs(work, exist_ok=True)
    path = os.path.join(work, "rank-0.pt.trace.json")
    try:
        info, t_build = _timed(lambda: build_trace(base, a.events, path))
        print(
            f"input: {info['x_events']:,} complete events = {a.base} ({info['base_x_events']:,} events) "
            f"x {info['copies']}, {info['json_bytes'] / 1e6:.0f} MB JSON (built in {t_build:.0f} s)",
            flush=True,
        )
        results: dict[str, Any] = {"input": {**info, "base": a.base}, "cpu_count": os.cpu_count()}
        results["ours"] = run_child("ours", sys.executable, path, a.timeout)
        print(f"  ours: {results['ours'].get('error') or 'done'}", flush=True)
        if not a.skip_hta:
            if os.path.exists(a.hta_python):
                results["hta"] = run_child("hta", a.hta_python, path, a.timeout)
                print(f"  HTA:  {results['hta'].get('error') or 'done'}", flush=True)
            else:
                print(f"HTA: skipped ({a.hta_python} missing; create it with benchmarks/hta_venv.sh)")
    finally:
        if not a.workdir:
            shutil.rmtree(work, ignore_errors=True)

    o, h = results.get("ours", {}), results.get("hta") or {}
    print()
    print(
        "one core per process; wall s (CPU s of the process); load = parse/normalize (not part of the "
        "analysis); HTA/ours on CPU s"
    )
    hdr = f"{'':36s} {'ours s':>16s} {'HTA s':>18s} {'HTA/ours':>9s}"
    print(hdr)
    print("-" * len(hdr))

    def line(label, ok_key, hk):
        ov, hv = o.get(ok_key), h.get(hk) if hk else None
        oc, hc = o.get(ok_key.replace("_s", "_cpu_s")), h.get(hk.replace("_s", "_cpu_s")) if hk else None
        ratio = f"{hc / oc:8.1f}x" if (oc and hc) else "-"
        print(f"{label:36s} {_f(ov):>7s} ({_f(oc):>6s}) {_f(hv):>8s} ({_f(hc):>7s}) {ratio:>9s}")

    line("load (parse the JSON)", "load_s", "load_s")
    line("critical path (HTA's graph)", "cp_s", "cp_s")
    line("critical path (product: rows + legs)", "cp_product_s", None)
    line("statistics (breakdown, overlap, ...)", "stats_s", "stats_s")
    print()
    if "error" in o:
        print(f"ours failed: {o['error']}")
    else:
        print(
            f"graph: {o['graph_nodes']:,} nodes, {o['graph_edges']:,} edges (HTA: "
            f"{_f(h.get('graph_nodes'), ',')} nodes with edges, {_f(h.get('graph_edges'), ',')} edges)"
        )
        print(f"path length: ours {o['path_us']:,.0f} us, HTA {_f(h.get('path_us'), ',.0f')} us")
        worst = max(o["cp_s"], o["cp_product_s"])
        print(
            f"target critical path < {TARGET_CP_S:g} s on one core: {'ok' if worst < TARGET_CP_S else 'MISSED'} "
            f"(wall {o['cp_s']:.2f} s HTA graph, {o['cp_product_s']:.2f} s product; CPU {o['cp_cpu_s']:.2f} s, "
            f"{o['cp_product_cpu_s']:.2f} s)"
        )
        if h and "error" not in h:
            sp, sp_wall = h["cp_cpu_s"] / o["cp_cpu_s"], h["cp_s"] / o["cp_s"]
            results["speedup_cp"] = {"cpu": sp, "wall": sp_wall}
            print(
                f"target >= {TARGET_SPEEDUP:g}x HTA: {'ok' if min(sp, sp_wall) >= TARGET_SPEEDUP else 'MISSED'} "
                f"({sp:.1f}x CPU time, {sp_wall:.1f}x wall)"
            )
        elif h:
            print(f"HTA failed: {h['error']}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
