#!/usr/bin/env python3
"""Parse+normalize throughput and memory: ours (``jobs.normalize.kineto.parse.parse_kineto``) vs HTA 0.5.0 load.

For each trace (default: the two largest torch corpus files) and each implementation, every measurement
runs in a fresh subprocess (one core, single process):

* **ours**: ``parse_kineto(raw_bytes, uri)`` where ``raw_bytes`` is the file as stored (gzip), read
  before the clock starts. Run with the project venv (``sys.executable`` of this script).
* **HTA**: ``TraceAnalysis(trace_dir=<temp dir with one symlink to the file>)`` in the HTA venv
  (``--hta-python``, made by ``benchmarks/hta_venv.sh``). HTA reads and gunzips the file itself, so its
  time includes the read; HTA's rank discovery scan is part of its load too.

Metrics (per trace, per implementation):

* throughput = uncompressed JSON bytes / wall seconds of the call (MB = 10^6 bytes), best of ``--repeat``;
* RSS growth = peak RSS of the process - RSS just before the call (after imports and, for ours, after
  reading the raw file). Peak RSS is the process high-water mark (``VmHWM`` in /proc/self/status, the
  same quantity as ``ru_maxrss`` for a fresh process: Linux carries the *parent's* ``ru_maxrss`` across
  fork+exec, ``VmHWM`` starts fresh). The largest growth over the repeats is reported (conservative);
* RSS/raw = RSS growth / uncompressed JSON bytes.

Targets (ours): throughput >= 20x HTA, RSS growth <= 2x the uncompressed size.

Usage (from the repo root)::

    .venv/bin/python benchmarks/normalize_bench.py [--repeat 3] [--hta-python .hta-venv/bin/python]
        [--corpus-root ../shared/corpus] [--trace KEY ...] [--json OUT.json]

Exit status 0 even when a target is missed (this is a measurement, not a test); 2 on usage errors.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_TRACES = (
    "torch/HolisticTraceAnalysis/df_index_resolver/df_index_resolver.json.gz",
    "torch/TraceLens/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz",
)
TARGET_SPEEDUP = 20.0
TARGET_RSS_RATIO = 2.0
MB = 1e6


# --------------------------------------------------------------------------------------------------
# child side: one measurement, JSON on stdout
# --------------------------------------------------------------------------------------------------


def _status_kb(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _rss_now_kb() -> int:
    kb = _status_kb("VmRSS")
    if kb is None:  # not Linux: best effort
        import resource

        kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kb


def _cpu_s() -> float:
    """User + system CPU seconds of this process, all threads (more than wall = more than one core)."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _peak_kb() -> int:
    import resource

    hwm = _status_kb("VmHWM")
    return hwm if hwm is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def child_ours(path: str, uri: str) -> dict[str, Any]:
    """Time ``parse_kineto(raw_bytes, uri)`` once in this (fresh) process."""
    sys.path.insert(0, REPO_ROOT)
    from jobs.normalize.kineto.parse import parse_kineto

    with open(path, "rb") as f:
        raw = f.read()
    base = _rss_now_kb()
    c0, t0 = _cpu_s(), time.perf_counter()
    parsed = parse_kineto(raw, uri)
    wall, cpu = time.perf_counter() - t0, _cpu_s() - c0
    peak = _peak_kb()
    events = getattr(parsed, "events", None)
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "base_kb": base,
        "peak_kb": peak,
        "rows": getattr(events, "num_rows", None),
        "result_bytes": getattr(events, "nbytes", None),
    }


def child_hta(path: str) -> dict[str, Any]:
    """Time HTA 0.5.0 ``TraceAnalysis(trace_dir=...)`` once in this (fresh) process."""
    from hta.trace_analysis import TraceAnalysis

    with tempfile.TemporaryDirectory(prefix="hta_bench_") as d:
        os.symlink(os.path.abspath(path), os.path.join(d, os.path.basename(path)))
        base = _rss_now_kb()
        c0, t0 = _cpu_s(), time.perf_counter()
        ta = TraceAnalysis(trace_dir=d)
        wall, cpu = time.perf_counter() - t0, _cpu_s() - c0
        peak = _peak_kb()
        rows = sum(len(df) for df in ta.t.get_all_traces().values())
    return {"wall_s": wall, "cpu_s": cpu, "base_kb": base, "peak_kb": peak, "rows": rows, "result_bytes": None}


# --------------------------------------------------------------------------------------------------
# parent side (kept small: its own RSS high-water mark must stay low)
# --------------------------------------------------------------------------------------------------


def uncompressed_size(path: str) -> int:
    """Bytes of JSON after gunzip (streamed, so this process stays small); file size if not gzip."""
    with open(path, "rb") as f:
        magic = f.read(2)
    if magic != b"\x1f\x8b":
        return os.path.getsize(path)
    n = 0
    with gzip.open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            n += len(chunk)
    return n


def measure(impl: str, python: str, path: str, key: str, timeout: float) -> dict[str, Any]:
    """Run one measurement in a fresh subprocess; ``{"error": ...}`` when it fails."""
    cmd = [python, os.path.abspath(__file__), "--_child", impl, path, key]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if impl == "ours":
        env["PYTHONPATH"] = REPO_ROOT
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO_ROOT, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:g} s"}
    if p.returncode != 0:
        tail = " | ".join(p.stderr.strip().splitlines()[-3:])
        return {"error": f"exit {p.returncode}: {tail}"}
    return json.loads(p.stdout.strip().splitlines()[-1])


def best_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return {"error": runs[-1]["error"] if runs else "not run"}
    best = min(ok, key=lambda r: r["wall_s"])
    growth = max((r["peak_kb"] - r["base_kb"]) * 1024 for r in ok)
    return {
        "wall_s": best["wall_s"],
        "cpu_s": best.get("cpu_s"),
        "walls_s": [round(r["wall_s"], 3) for r in ok],
        "base_mb": best["base_kb"] * 1024 / MB,
        "peak_mb": max(r["peak_kb"] for r in ok) * 1024 / MB,
        "growth_bytes": growth,
        "rows": best.get("rows"),
        "n_ok": len(ok),
        "n_runs": len(runs),
    }


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3, help="fresh-process runs per measurement (best of N)")
    ap.add_argument("--hta-python", default=os.path.join(REPO_ROOT, ".hta-venv", "bin", "python"))
    ap.add_argument("--corpus-root", default=os.path.join(REPO_ROOT, "..", "shared", "corpus"))
    ap.add_argument("--trace", action="append", help="corpus key (repeatable); default: the two largest")
    ap.add_argument("--skip-ours", action="store_true")
    ap.add_argument("--skip-hta", action="store_true")
    ap.add_argument("--timeout", type=float, default=900.0, help="per measurement, seconds")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--_child", nargs=3, metavar=("IMPL", "PATH", "KEY"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)

    if a._child:
        impl, path, key = a._child
        res = child_ours(path, key) if impl == "ours" else child_hta(path)
        print(json.dumps(res))
        return 0
    if a.repeat < 1:
        ap.error("--repeat must be >= 1")

    impls: list[tuple[str, str]] = []
    if not a.skip_ours:
        try:
            import importlib.util

            sys.path.insert(0, REPO_ROOT)
            found = importlib.util.find_spec("jobs.normalize.kineto.parse") is not None
        except ImportError:
            found = False
        if found:
            impls.append(("ours", sys.executable))
        else:
            print("ours: skipped (jobs.normalize.kineto.parse not found; run with the project venv from the repo)")
    if not a.skip_hta:
        if os.path.exists(a.hta_python):
            impls.append(("hta", a.hta_python))
        else:
            print(f"HTA: skipped ({a.hta_python} missing; create it with benchmarks/hta_venv.sh)")
    if not impls:
        print("nothing to measure")
        return 2

    results: dict[str, Any] = {
        "machine": {"cpu_count": os.cpu_count(), "python": sys.version.split()[0]},
        "repeat": a.repeat,
        "traces": {},
    }
    for key in a.trace or DEFAULT_TRACES:
        path = os.path.join(a.corpus_root, key)
        if not os.path.exists(path):
            print(f"{path}: no such trace file", file=sys.stderr)
            return 2
        raw_bytes = os.path.getsize(path)
        json_bytes = uncompressed_size(path)
        tr: dict[str, Any] = {"raw_bytes": raw_bytes, "json_bytes": json_bytes}
        for impl, python in impls:
            runs = []
            for i in range(a.repeat):
                r = measure(impl, python, path, key, a.timeout)
                runs.append(r)
                state = r.get("error") or f"{r['wall_s']:.2f} s"
                print(f"  {impl:4s} {i + 1}/{a.repeat} {os.path.basename(key)}: {state}", flush=True)
            b = best_of(runs)
            if "error" not in b:
                b["mb_per_s"] = json_bytes / MB / b["wall_s"]
                b["rss_over_json"] = b["growth_bytes"] / json_bytes
            tr[impl] = b
        results["traces"][key] = tr

    # table
    print()
    print(
        f"best of {a.repeat} fresh processes; MB = 1e6 bytes; MB/s = JSON bytes / wall s; "
        f"cpu s > wall s would mean more than one core; RSS+ = peak - RSS before the call (max over runs)"
    )
    hdr = (
        f"{'trace':34s} {'impl':4s} {'gz MB':>6s} {'JSON MB':>7s} {'wall s':>7s} {'MB/s':>7s} "
        f"{'cpu s':>6s} {'rows':>8s} {'base MB':>7s} {'peak MB':>7s} {'RSS+ MB':>7s} {'RSS/raw':>7s}"
    )
    print(hdr)
    print("-" * len(hdr))
    for key, tr in results["traces"].items():
        name = os.path.basename(key)[:34]
        for impl, _ in impls:
            b = tr[impl]
            if "error" in b:
                print(f"{name:34s} {impl:4s} ERROR {b['error']}")
                continue
            print(
                f"{name:34s} {impl:4s} {tr['raw_bytes'] / MB:6.1f} {tr['json_bytes'] / MB:7.1f} "
                f"{b['wall_s']:7.2f} {b['mb_per_s']:7.1f} {_fmt(b['cpu_s'], '.2f'):>6s} {_fmt(b['rows'], 'd'):>8s} "
                f"{b['base_mb']:7.0f} "
                f"{b['peak_mb']:7.0f} {b['growth_bytes'] / MB:7.0f} {b['rss_over_json']:7.2f}"
            )
    if any(i == "ours" for i, _ in impls):
        print()
        print(
            f"ours vs targets: throughput >= {TARGET_SPEEDUP:g}x HTA, RSS growth <= "
            f"{TARGET_RSS_RATIO:g}x uncompressed JSON"
        )
        for key, tr in results["traces"].items():
            o, h = tr.get("ours", {}), tr.get("hta", {})
            if "error" in o or not o:
                continue
            line = f"  {os.path.basename(key)[:34]:34s} RSS/raw {o['rss_over_json']:.2f} " + (
                "ok" if o["rss_over_json"] <= TARGET_RSS_RATIO else "MISSED"
            )
            if h and "error" not in h:
                speed = o["mb_per_s"] / h["mb_per_s"]
                rss = o["growth_bytes"] / h["growth_bytes"] if h["growth_bytes"] > 0 else float("nan")
                tr["ours_over_hta"] = {"throughput": speed, "rss_growth": rss}
                line += (
                    f"; throughput ours/HTA {speed:.1f}x "
                    + ("ok" if speed >= TARGET_SPEEDUP else "MISSED")
                    + f"; RSS growth ours/HTA {rss:.2f}"
                )
            print(line)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
