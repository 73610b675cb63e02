#!/usr/bin/env python3
"""Produce ``tests/golden/hta_0_5_0.json``: HTA 0.5.0's own outputs on the torch corpus.

Holistic Trace Analysis (HTA, ``holistictraceanalysis==0.5.0`` on PyPI) is the peer tool we check our
analyses against. This script runs HTA itself, with the options below, on every Kineto trace in
``<corpus-root>/torch`` and writes what HTA reports, quirks included. The numbers are HTA's, not ground
truth; see ``tests/golden/README.md`` for the known HTA behaviours.

Run it with the HTA venv's python (``benchmarks/hta_venv.sh`` creates it), from the repo root::

    .hta-venv/bin/python tests/golden/make_hta_golden.py \\
        --corpus-root ../shared/corpus --out tests/golden/hta_0_5_0.json
    # --only SUBSTR   rerun the jobs whose id contains SUBSTR and merge them into an existing --out
    # --timeout S     per-job wall-clock limit in seconds (default 1800)
    # --compare REF   (any python, no HTA needed) compare --out with a reference file, e.g.
    #                 ../shared/reference/hta_golden/hta_corpus.json, and exit 1 on a difference

Jobs. One job = one ``TraceAnalysis(trace_dir=<temp dir>)`` where the temp dir holds symlinks to the
job's files (HTA finds each file's rank by the regex ``"rank":\\s+(\\d+)``, 0 when absent). Every
corpus file is its own job except the multi-rank groups in ``MULTI_RANK_GROUPS``. Each job runs in a
fresh worker process with a timeout, so one HTA failure or hang cannot stop the run; every analysis is
wrapped in try/except and a failure is recorded as ``"<Type>: <message> [in hta/<file>:<line> <func>]"``.

Output (JSON, keys sorted, deterministic apart from ``meta.generated_utc`` and the ``load`` section):

* ``meta``: versions, options, command.
* ``jobs[<job id>]``: ``files``, ``ranks``, ``rank_to_file``, ``hta_profiler_steps``,
  ``kernel_type_breakdown_all_ranks`` (HTA's first ``get_gpu_kernel_breakdown`` DataFrame), ``errors``,
  ``status`` (``done`` | ``timeout`` | ``crashed``).
* ``traces[<corpus key>]`` (one per file = per rank; key = path relative to the corpus root): see
  ``_rank_record``, ``_idle_record``, ``_launch_record``, ``_queue_record``. All times are µs as HTA reports them (trace ts rounded inward to integer µs).
* ``load[<job id>]``: wall time and RSS of the HTA load (not deterministic, kept apart).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Any

# Multi-rank groups: all files under these directories (relative to the corpus root) form one job.
MULTI_RANK_GROUPS = ("torch/param/dlrm_kineto", "torch/HolisticTraceAnalysis/trace_filter")

# HTA options (defaults of 0.5.0 except visualize=False and ranks=all ranks of the job).
IDLE_CONSECUTIVE_KERNEL_DELAY = 30
KERNEL_BREAKDOWN = dict(duration_ratio=0.8, num_kernels=10, include_memory_kernels=True)
LAUNCH_STATS = dict(runtime_cutoff=50, launch_delay_cutoff=100, include_memory_events=True)
MAX_QUEUE_LENGTH = 1024  # hta.common.constants.CUDA_MAX_LAUNCH_QUEUE_PER_STREAM

ANALYSES = (
    "temporal_breakdown",
    "comm_comp_overlap",
    "idle_time_breakdown",
    "gpu_kernel_breakdown",
    "kernel_type_time_us",
    "cuda_kernel_launch_stats",
)


# --------------------------------------------------------------------------------------------------
# job discovery and driver (no HTA import here: the driver stays small)
# --------------------------------------------------------------------------------------------------


def discover_jobs(corpus_root: str) -> dict[str, list[str]]:
    """Map job id -> sorted corpus keys (``torch/...``) of the job's files.

    Files are ``*.json`` / ``*.json.gz`` under ``<corpus_root>/torch``. A file under a
    ``MULTI_RANK_GROUPS`` directory belongs to that group's job (job id = the directory key);
    any other file is its own job (job id = its key).

    Raises FileNotFoundError when ``<corpus_root>/torch`` does not exist.
    """
    torch_dir = os.path.join(corpus_root, "torch")
    if not os.path.isdir(torch_dir):
        raise FileNotFoundError(f"{torch_dir}: no torch corpus directory (check --corpus-root)")
    jobs: dict[str, list[str]] = {}
    for dirpath, _dirs, files in os.walk(torch_dir):
        for fn in files:
            if not (fn.endswith(".json") or fn.endswith(".json.gz")):
                continue
            key = os.path.relpath(os.path.join(dirpath, fn), corpus_root).replace(os.sep, "/")
            job = next((g for g in MULTI_RANK_GROUPS if key.startswith(g + "/")), key)
            jobs.setdefault(job, []).append(key)
    return {j: sorted(keys) for j, keys in sorted(jobs.items())}


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _versions() -> dict[str, Any]:
    from importlib import metadata

    out: dict[str, Any] = {"python": platform.python_version()}
    for name in ("HolisticTraceAnalysis", "pandas", "numpy", "networkx", "plotly", "psutil", "ijson"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def _failed_job(job_id: str, keys: list[str], status: str, message: str) -> dict[str, Any]:
    """A worker result for a job whose worker timed out or crashed: the error on every rank."""
    errors = {"job": message}
    return {
        "job": {
            "files": keys,
            "errors": errors,
            "status": status,
            "ranks": [],
            "rank_to_file": {},
            "hta_profiler_steps": None,
            "kernel_type_breakdown_all_ranks": None,
        },
        "traces": {k: {"job": job_id, "errors": dict(errors)} for k in keys},
        "load": {},
    }


def run_driver(args: argparse.Namespace) -> int:
    """Run every job in its own worker process and write the merged golden file."""
    corpus_root = os.path.abspath(args.corpus_root)
    jobs = discover_jobs(corpus_root)
    selected = {j: k for j, k in jobs.items() if not args.only or args.only in j}
    if not selected:
        print(f"no job matches --only {args.only!r}", file=sys.stderr)
        return 2

    out: dict[str, Any] = {"meta": {}, "jobs": {}, "traces": {}, "load": {}}
    if args.only and os.path.exists(args.out):
        with open(args.out) as f:
            out = json.load(f)

    workdir = args.workdir or tempfile.mkdtemp(prefix="hta_golden_")
    os.makedirs(workdir, exist_ok=True)
    for n, (job_id, keys) in enumerate(selected.items(), 1):
        spec_path = os.path.join(workdir, f"job{n}.spec.json")
        res_path = os.path.join(workdir, f"job{n}.result.json")
        with open(spec_path, "w") as f:
            json.dump(
                {
                    "job_id": job_id,
                    "keys": keys,
                    "corpus_root": corpus_root,
                    "link_dir": os.path.join(workdir, f"job{n}.links"),
                },
                f,
            )
        if os.path.exists(res_path):
            os.remove(res_path)
        t0 = time.perf_counter()
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", spec_path, res_path]
        # own session, so a timeout also ends HTA's fork-pool children (same process group)
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            _stdout, stderr = proc.communicate(timeout=args.timeout)
            if proc.returncode == 0 and os.path.exists(res_path):
                with open(res_path) as f:
                    res = json.load(f)
            else:
                tail = (stderr or "").strip().splitlines()[-3:]
                res = _failed_job(
                    job_id, keys, "crashed", f"worker exited with status {proc.returncode}: {' | '.join(tail)}"
                )
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.communicate()
            res = _failed_job(job_id, keys, "timeout", f"worker timed out after {args.timeout:g} s")
        wall = time.perf_counter() - t0
        res["load"]["worker_wall_s"] = round(wall, 3)
        out["jobs"][job_id] = res["job"]
        out["traces"].update(res["traces"])
        out["load"][job_id] = res["load"]
        errs = sorted(res["job"].get("errors", {}))
        print(
            f"[{n}/{len(selected)}] {job_id}: {res['job'].get('status')} in {wall:.1f}s"
            + (f" errors={errs}" if errs else ""),
            flush=True,
        )

    out["meta"] = {
        "tool": "Holistic Trace Analysis (holistictraceanalysis on PyPI), run by tests/golden/make_hta_golden.py",
        "command": ".hta-venv/bin/python tests/golden/make_hta_golden.py --corpus-root ../shared/corpus "
        "--out tests/golden/hta_0_5_0.json",
        "generated_utc": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "versions": _versions(),
        "platform": {"system": platform.system(), "machine": platform.machine(), "cpu_count": os.cpu_count()},
        "units": "microseconds, as HTA reports them (ts rounded inward to integer us; "
        "HTA-aligned: relative to the earliest ts over all ranks of the job)",
        "keys": "traces/* keys are paths relative to the corpus root (../shared/corpus)",
        "multi_rank_groups": list(MULTI_RANK_GROUPS),
        "hta_options": {
            "TraceAnalysis": {"trace_dir": "<one temp dir of symlinks per job>", "include_last_profiler_step": False},
            "parser": "ParserConfig.get_default_cfg() (JSON backend, default args, ns rounding on)",
            "env": "no HTA_* / CRITICAL_PATH_* environment variables set",
            "get_temporal_breakdown": {"visualize": False},
            "get_comm_comp_overlap": {"visualize": False},
            "get_idle_time_breakdown": {
                "ranks": "all ranks of the job (HTA default is [0])",
                "streams": None,
                "visualize": False,
                "show_idle_interval_stats": False,
                "consecutive_kernel_delay": IDLE_CONSECUTIVE_KERNEL_DELAY,
            },
            "get_gpu_kernel_breakdown": {"visualize": False, **KERNEL_BREAKDOWN},
            "get_cuda_kernel_launch_stats": {
                "ranks": "all ranks of the job (HTA default is [0])",
                "visualize": False,
                **LAUNCH_STATS,
            },
            "get_queue_length_summary": {"ranks": "all ranks of the job (HTA default is [0])"},
            "get_queue_length_time_series": {
                "ranks": "all ranks of the job (HTA default is [0])",
                "blocked": f"time at queue_length >= {MAX_QUEUE_LENGTH}, per stream, HTA's rule",
            },
        },
        "load_section": "load/* holds timings and RSS; everything else is deterministic",
    }
    out["jobs"] = dict(sorted(out["jobs"].items()))
    out["traces"] = dict(sorted(out["traces"].items()))
    out["load"] = dict(sorted(out["load"].items()))
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1, sort_keys=True, allow_nan=False)
        f.write("\n")
    if not args.workdir:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"wrote {args.out}: {len(out['jobs'])} jobs, {len(out['traces'])} traces")
    return 0


# --------------------------------------------------------------------------------------------------
# worker (imports HTA)
# --------------------------------------------------------------------------------------------------


def _py(v: Any) -> Any:
    """numpy/pandas scalars -> plain JSON values; NaN/inf -> None."""
    if v is None:
        return None
    if hasattr(v, "item") and not isinstance(v, (list, dict, str)):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def _err(exc: BaseException) -> str:
    """``"<Type>: <message> [in hta/<file>:<line> <func>]"`` for the innermost HTA frame."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = ""
    hta_frames = [fr for fr in frames if f"{os.sep}hta{os.sep}" in fr.filename]
    if hta_frames or frames:
        fr = (hta_frames or frames)[-1]
        fname = fr.filename
        i = fname.rfind(f"{os.sep}hta{os.sep}")
        fname = fname[i + 1 :] if i >= 0 else os.path.basename(fname)
        where = f" [in {fname}:{fr.lineno} {fr.name}]"
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {msg}{where}"


def _proc_status_kb(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _mb(kb: int | None) -> float | None:
    return None if kb is None else round(kb / 1024, 1)


def _rank_record(ta: Any, rank: int, sym: list[str]) -> dict[str, Any]:
    """Rows HTA kept for one rank after load (``hta_df_rows*``) and HTA's iteration list."""
    df = ta.t.get_trace(rank)
    cats = df["cat"].map(lambda i: sym[i] if 0 <= i < len(sym) else f"<sym {i}>")
    gpu = df["stream"].ne(-1)
    return {
        "hta_rank": int(rank),
        "hta_df_rows": int(len(df)),
        "hta_df_rows_by_cat": {str(k): int(v) for k, v in sorted(cats.value_counts().items())},
        "hta_gpu_rows": int(gpu.sum()),
        "hta_gpu_rows_by_cat": {str(k): int(v) for k, v in sorted(cats[gpu].value_counts().items())},
        "hta_iterations": [int(i) for i in ta.t.get_iterations(rank)],
    }


def _idle_record(idle_df: Any) -> dict[str, Any]:
    rows = sorted(
        (
            {
                "stream": int(r.stream),
                "idle_category": str(r.idle_category),
                "idle_time": _py(r.idle_time),
                "idle_time_ratio": _py(r.idle_time_ratio),
            }
            for r in idle_df.itertuples()
        ),
        key=lambda d: (d["stream"], d["idle_category"]),
    )
    by_cat: dict[str, float] = {}
    for r in rows:
        by_cat[r["idle_category"]] = by_cat.get(r["idle_category"], 0.0) + (r["idle_time"] or 0.0)
    return {"by_stream": rows, "sum_by_category": dict(sorted(by_cat.items())), "total": float(sum(by_cat.values()))}


def _launch_record(df: Any) -> dict[str, Any]:
    cpu, gpu, delay = df["cpu_duration"], df["gpu_duration"], df["launch_delay"]
    cut_rt, cut_ld = LAUNCH_STATS["runtime_cutoff"], LAUNCH_STATS["launch_delay_cutoff"]
    return {
        "rows": int(len(df)),
        "sum_cpu_duration": float(cpu.sum()),
        "sum_gpu_duration": float(gpu.sum()),
        "sum_launch_delay": float(delay.sum()),
        # flags as in HTA's own plots (cuda_kernel_analysis.visualize_cuda_launch_kernel_info)
        "short_gpu_kernels": int(((cpu <= cut_rt) & (gpu < cpu)).sum()),
        "runtime_outliers": int((cpu > cut_rt).sum()),
        "launch_delay_outliers": int((delay > cut_ld).sum()),
    }


def _queue_record(summary: Any, series: Any) -> dict[str, Any]:
    """HTA's queue-length summary rows of one rank, and time blocked on a full queue per stream.

    ``summary`` is this rank's part of ``get_queue_length_summary`` (``describe()`` of the
    queue-length time series per stream); ``series`` is ``get_queue_length_time_series()[rank]``.
    ``blocked_us`` applies HTA's ``get_time_spent_blocked_on_full_queue`` rule (duration of each
    time-series point = next ``ts`` on the stream − ``ts``, summed where ``queue_length >=
    MAX_QUEUE_LENGTH``) to every stream: HTA's own function keeps one stream per rank.
    """
    rows = []
    if summary is not None:
        for (_rank, stream), r in summary.iterrows():
            q = r["queue_length"]
            rows.append(
                {
                    "stream": int(stream),
                    "count": int(q["count"]),
                    "mean": _py(q["mean"]),
                    "min": _py(q["min"]),
                    "max": _py(q["max"]),
                }
            )
    blocked = {}
    if series is not None:
        for stream, df in series.groupby("stream"):
            dur = df["ts"].shift(-1) - df["ts"]
            blocked[str(int(stream))] = _py(dur[df["queue_length"] >= MAX_QUEUE_LENGTH].sum())
    return {"by_stream": sorted(rows, key=lambda d: d["stream"]), "blocked_us_by_stream": blocked}


def _kernel_type_time(ta: Any, rank: int, sym: list[str]) -> dict[str, float]:
    """HTA's merged-interval kernel-type table (``_get_gpu_kernel_type_time``) for one rank."""
    from hta.analyzers.breakdown_analysis import BreakdownAnalysis
    from hta.utils.utils import get_kernel_type

    df = ta.t.get_trace(rank)
    gpu_kernels = df[df["stream"].ne(-1)].copy()
    gpu_kernels["kernel_type"] = gpu_kernels[["name"]].apply(lambda x: get_kernel_type(sym[x["name"]]), axis=1)
    types = ["COMPUTATION", "COMMUNICATION"] + (["MEMORY"] if KERNEL_BREAKDOWN["include_memory_kernels"] else [])
    kt = BreakdownAnalysis._get_gpu_kernel_type_time(gpu_kernels, types)
    return {str(r.kernel_type): float(r.sum) for r in kt.itertuples()}


def link_trace_dir(link_dir: str, files: dict[str, str]) -> None:
    """Make ``link_dir`` a fresh HTA ``trace_dir``: one symlink ``name -> path`` per rank file.

    HTA loads every ``*.json`` / ``*.gz`` file of the folder and finds each file's rank in its content,
    so the names only have to be distinct and keep the suffix.
    """
    shutil.rmtree(link_dir, ignore_errors=True)
    os.makedirs(link_dir)
    for name, path in files.items():
        os.symlink(os.path.abspath(path), os.path.join(link_dir, name))


def run_worker(spec_path: str, res_path: str) -> None:
    """Run one HTA job (spec: job_id, keys, corpus_root, link_dir) and write its result JSON."""
    import logging
    import resource

    with open(spec_path) as f:
        spec = json.load(f)
    job_id, keys, root = spec["job_id"], spec["keys"], spec["corpus_root"]

    t_imp = time.perf_counter()
    from hta.trace_analysis import TraceAnalysis

    logging.getLogger("hta").setLevel(logging.ERROR)
    import_s = time.perf_counter() - t_imp

    tmp = spec["link_dir"]  # the job's trace_dir: one symlink per rank file, inside the driver's workdir
    base_to_key = {}
    for key in keys:
        base = os.path.basename(key)
        if base in base_to_key:
            raise SystemExit(f"{job_id}: two files named {base} in one job")
        base_to_key[base] = key
    link_trace_dir(tmp, {base: os.path.join(root, key) for base, key in base_to_key.items()})

    traces: dict[str, dict[str, Any]] = {}
    for key in keys:
        path = os.path.join(root, key)
        traces[key] = {
            "job": job_id,
            "file_bytes": os.path.getsize(path),
            "sha256": _sha256(path),
            "n_ranks_in_job": len(keys),
            "errors": {},
        }
    job: dict[str, Any] = {
        "files": keys,
        "errors": {},
        "status": "done",
        "ranks": [],
        "rank_to_file": {},
        "hta_profiler_steps": None,
        "kernel_type_breakdown_all_ranks": None,
    }
    load: dict[str, Any] = {"import_s": round(import_s, 3), "rss_before_load_mb": _mb(_proc_status_kb("VmRSS"))}

    t0 = time.perf_counter()
    try:
        ta = TraceAnalysis(trace_dir=tmp)
    except Exception as exc:  # HTA fails on some traces: record and stop this job
        load["wall_s"] = round(time.perf_counter() - t0, 3)
        msg = _err(exc)
        job["errors"]["load"] = msg
        for rec in traces.values():
            rec["errors"]["load"] = msg
            for a in ANALYSES:
                rec["errors"][a] = "not run: TraceAnalysis construction failed"
        shutil.rmtree(tmp, ignore_errors=True)
        _write(res_path, job, traces, load)
        return
    load["wall_s"] = round(time.perf_counter() - t0, 3)
    load["peak_rss_self_mb"] = _mb(_proc_status_kb("VmHWM"))
    load["peak_rss_children_mb"] = round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1)

    sym = ta.t.symbol_table.get_sym_table()
    rank_to_key = {int(r): base_to_key[os.path.basename(p)] for r, p in ta.t.trace_files.items()}
    ranks = sorted(rank_to_key)
    job["ranks"] = ranks
    job["rank_to_file"] = {str(r): rank_to_key[r] for r in ranks}
    unloaded = sorted(set(keys) - set(rank_to_key.values()))
    for key in unloaded:  # e.g. two files with the same rank: HTA keeps only one
        traces[key]["errors"]["load"] = "not loaded by HTA (rank collision or unreadable)"
    recs = {r: traces[rank_to_key[r]] for r in ranks}

    def per_rank(name: str, fn) -> None:
        for r in ranks:
            try:
                recs[r][name] = fn(r)
            except Exception as exc:
                recs[r]["errors"][name] = _err(exc)

    def job_level(name: str, fn) -> Any:
        try:
            return fn()
        except Exception as exc:
            msg = _err(exc)
            job["errors"][name] = msg
            for r in ranks:
                recs[r]["errors"][name] = msg
            return None

    per_rank("_rows", lambda r: _rank_record(ta, r, sym))
    for r in ranks:
        recs[r].update(recs[r].pop("_rows", {}))
    steps = job_level("profiler_steps", ta.get_profiler_steps)
    job["hta_profiler_steps"] = [int(s) for s in steps] if steps is not None else None

    tb = job_level("temporal_breakdown", lambda: ta.get_temporal_breakdown(visualize=False))
    if tb is not None:
        for row in tb.to_dict("records"):
            r = int(row.pop("rank"))
            recs[r]["temporal_breakdown"] = {k: _py(v) for k, v in row.items()}

    ov = job_level("comm_comp_overlap", lambda: ta.get_comm_comp_overlap(visualize=False))
    if ov is not None:
        for row in ov.to_dict("records"):
            recs[int(row["rank"])]["comm_comp_overlap"] = {"comp_comm_overlap_pctg": _py(row["comp_comm_overlap_pctg"])}

    # ranks = all ranks; when that raises, retry rank by rank so one bad rank keeps the others
    try:
        idle, _ = ta.get_idle_time_breakdown(
            ranks=ranks, visualize=False, consecutive_kernel_delay=IDLE_CONSECUTIVE_KERNEL_DELAY
        )
        for r in ranks:
            recs[r]["idle_time_breakdown"] = _idle_record(idle[idle["rank"].eq(r)])
    except Exception:
        per_rank(
            "idle_time_breakdown",
            lambda r: _idle_record(
                ta.get_idle_time_breakdown(
                    ranks=[r], visualize=False, consecutive_kernel_delay=IDLE_CONSECUTIVE_KERNEL_DELAY
                )[0]
            ),
        )

    kb = job_level("gpu_kernel_breakdown", lambda: ta.get_gpu_kernel_breakdown(visualize=False, **KERNEL_BREAKDOWN))
    if kb is not None:
        type_df, all_df = kb
        job["kernel_type_breakdown_all_ranks"] = [
            {"kernel_type": str(r["kernel_type"]), "sum_us": _py(r["sum"]), "percentage": _py(r["percentage"])}
            for r in type_df.to_dict("records")
        ]
        for r in ranks:
            sub = all_df[all_df["rank"].eq(r)]
            types = ["COMPUTATION", "COMMUNICATION"] + (
                ["MEMORY"] if KERNEL_BREAKDOWN["include_memory_kernels"] else []
            )
            recs[r]["gpu_kernel_breakdown"] = {
                "sum_us_by_kernel_type": {  # plain sum of dur, no merging
                    t: _py(sub.loc[sub["kernel_type"].eq(t), "sum (us)"].sum()) for t in sorted(types)
                }
            }

    per_rank("kernel_type_time_us", lambda r: _kernel_type_time(ta, r, sym))

    ls = job_level(
        "cuda_kernel_launch_stats",
        lambda: ta.get_cuda_kernel_launch_stats(ranks=ranks, visualize=False, **LAUNCH_STATS),
    )
    if ls is not None:
        for r, df in ls.items():
            recs[int(r)]["cuda_kernel_launch_stats"] = _launch_record(df)

    # queue length: errors stay inside the record (not in `errors`, which mirrors the reference file)
    for r in ranks:
        try:
            summary = ta.get_queue_length_summary(ranks=[r])
            series = ta.get_queue_length_time_series(ranks=[r]).get(r)
            recs[r]["queue_length_summary"] = _queue_record(summary, series)
        except Exception as exc:
            recs[r]["queue_length_summary"] = {"error": _err(exc)}

    load["worker_peak_rss_mb"] = _mb(_proc_status_kb("VmHWM"))
    shutil.rmtree(tmp, ignore_errors=True)
    _write(res_path, job, traces, load)


def _write(path: str, job: dict, traces: dict, load: dict) -> None:
    with open(path, "w") as f:
        json.dump({"job": job, "traces": traces, "load": load}, f, allow_nan=False)


# --------------------------------------------------------------------------------------------------
# comparison with a reference file
# --------------------------------------------------------------------------------------------------

COMPARE_FIELDS = (
    "temporal_breakdown",
    "comm_comp_overlap",
    "idle_time_breakdown",
    "gpu_kernel_breakdown.sum_us_by_kernel_type",
    "kernel_type_time_us",
    "cuda_kernel_launch_stats",
    "hta_df_rows_by_cat",
    "hta_gpu_rows_by_cat",
    "hta_iterations",
    "sha256",
)


JOB_COMPARE_FIELDS = ("files", "rank_to_file", "hta_profiler_steps", "kernel_type_breakdown_all_ranks")


def _get(d: dict, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(d, dict) or part not in d:
            return "<absent>"
        d = d[part]
    return d


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return a == b  # exact: both sides come from the same HTA code
    return a == b


def _canon(field: str, v: Any) -> Any:
    """Order-insensitive view of list fields whose order is HTA's stream discovery order."""
    if field == "idle_time_breakdown" and isinstance(v, dict) and isinstance(v.get("by_stream"), list):
        v = dict(v, by_stream=sorted(v["by_stream"], key=lambda d: (d["stream"], d["idle_category"])))
    return v


def run_compare(out_path: str, ref_path: str) -> int:
    """Print per-trace differences between two golden files; 0 when the shared fields are equal."""
    with open(out_path) as f:
        ours = json.load(f)["traces"]
    with open(ref_path) as f:
        ref = json.load(f)["traces"]
    n_diff = 0
    missing = sorted(set(ref) ^ set(ours))
    for k in missing:
        print(f"ONLY IN {'reference' if k in ref else 'ours'}: {k}")
        n_diff += 1
    for key in sorted(set(ref) & set(ours)):
        for field in COMPARE_FIELDS:
            a, b = _canon(field, _get(ours[key], field)), _canon(field, _get(ref[key], field))
            if not _same(a, b):
                n_diff += 1
                print(f"DIFF {key} {field}:\n  ours={json.dumps(a)[:400]}\n  ref ={json.dumps(b)[:400]}")
        err_a = {k: v for k, v in ours[key].get("errors", {}).items() if not k.startswith("critical_path")}
        err_b = {k: v for k, v in ref[key].get("errors", {}).items() if not k.startswith("critical_path")}
        if err_a != err_b:
            n_diff += 1
            print(f"DIFF {key} errors:\n  ours={err_a}\n  ref ={err_b}")
    with open(out_path) as f:
        ours_jobs = json.load(f)["jobs"]
    with open(ref_path) as f:
        ref_jobs = json.load(f)["jobs"]
    for job in sorted(set(ref_jobs) | set(ours_jobs)):
        for field in JOB_COMPARE_FIELDS:
            a, b = _get(ours_jobs.get(job, {}), field), _get(ref_jobs.get(job, {}), field)
            if not _same(a, b):
                n_diff += 1
                print(f"DIFF job {job} {field}:\n  ours={json.dumps(a)[:400]}\n  ref ={json.dumps(b)[:400]}")
    n = len(set(ref) & set(ours))
    print(
        f"compared {n} traces x {len(COMPARE_FIELDS) + 1} fields and {len(ref_jobs)} jobs x "
        f"{len(JOB_COMPARE_FIELDS)} fields: {n_diff} difference(s)"
    )
    return 1 if n_diff else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus-root", default="../shared/corpus")
    p.add_argument("--out", default="tests/golden/hta_0_5_0.json")
    p.add_argument("--only", default=None, help="rerun jobs whose id contains this; merge into --out")
    p.add_argument("--timeout", type=float, default=1800.0, help="per-job limit, seconds")
    p.add_argument("--workdir", default=None, help="scratch dir (kept); default a temp dir (removed)")
    p.add_argument("--compare", metavar="REF", default=None, help="compare --out with REF instead of running HTA")
    p.add_argument("--worker", nargs=2, metavar=("SPEC", "RESULT"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        run_worker(*args.worker)
        return 0
    if args.compare:
        return run_compare(args.out, args.compare)
    return run_driver(args)


if __name__ == "__main__":
    sys.exit(main())
