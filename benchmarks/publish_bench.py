#!/usr/bin/env python3
"""Time of the ``publish`` stage alone (:func:`jobs.publish.job_runs.publish_jobs`) on an existing warehouse.

Runs ``publish_jobs`` once in this (fresh) process against a new, empty sqlite MLflow store in a temp
folder, on the jobs of the warehouse's run record (``<warehouse>/_runs/ingest/open_open.json``, as
``tracelake run`` leaves it; else every job of ``captures``, without validation) and prints:

* *wall* and *CPU* seconds of the call: CPU is this process' user + system time plus that of the child
  processes it waited for (``resource.getrusage``), so report rendering in worker processes is counted;
* *imports*: seconds to import the stage's code, MLflow's client and pygal before the call (paid once
  per process; not part of the call's wall time);
* with ``--profile``, a breakdown of the call from ``cProfile`` (cumulative seconds, profiler overhead
  included, so the parts add up to more than the unprofiled wall): *MLflow client set-up*
  (``MlflowClient.__init__``), *report rendering* (:func:`jobs.publish.report.html.render_job_report`, in
  this process), *plots* (pygal's SVG trees inside it), and the *rest* (reading the warehouse,
  MLflow logging), then the top functions by own time.

The warehouse is built once with the pipeline, e.g. (from the repo root)::

    .venv/bin/python -m jobs.cli run --raw LANDING --warehouse /tmp/pubwh --no-mlflow

where LANDING is a landing zone, e.g. one written by ``benchmarks/fleet_bench.py``'s ``build_fleet``
(2 DLRM jobs of 8 ranks + 6 single-GPU jobs is an 8-job fleet). Then::

    .venv/bin/python benchmarks/publish_bench.py --warehouse /tmp/pubwh [--profile] [--json OUT]

Artifacts are written under ``<warehouse>/mlartifacts`` (the experiment's artifact location for a local
store, as in a real run). Exit status 0 (a measurement, not a test).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import resource
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _cpu_s() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _cum(stats: pstats.Stats, file_part: str, func: str) -> float:
    """Cumulative seconds of the functions named ``func`` in files whose path contains ``file_part``
    (outermost calls only: cProfile's cumulative time already leaves out recursive re-entries)."""
    return sum(v[3] for (f, _, name), v in stats.stats.items() if name == func and file_part in f)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--warehouse", required=True)
    ap.add_argument("--profile", action="store_true", help="cProfile breakdown (adds overhead)")
    ap.add_argument("--top", type=int, default=15, help="functions by own time with --profile")
    ap.add_argument("--json", help="also write the numbers here")
    ap.add_argument(
        "--tracking-uri",
        help="MLflow store to publish to (default: a new sqlite store in a temp "
        "folder, removed after); e.g. to compare what two versions log",
    )
    a = ap.parse_args(argv)
    sys.path.insert(0, REPO_ROOT)

    t0 = time.perf_counter()
    import mlflow.tracking  # noqa: F401
    import pygal  # noqa: F401  (timed here: the cost of a fresh process)

    from jobs.pipeline.record import read_record
    from jobs.pipeline.stages import RunSettings, jobs_record, validation
    from jobs.publish.job_runs import publish_jobs

    imports_s = time.perf_counter() - t0

    try:
        record = read_record(os.path.join(a.warehouse, "_runs", "ingest", "open_open.json"))
    except FileNotFoundError:
        record = jobs_record(RunSettings(warehouse=a.warehouse))
    report = validation(record)
    job_ids = record["job_ids"]

    with tempfile.TemporaryDirectory() as tmp:
        uri = a.tracking_uri or "sqlite:///" + os.path.join(tmp, "mlflow.db")
        prof = cProfile.Profile() if a.profile else None
        c0, w0 = _cpu_s(), time.perf_counter()
        if prof:
            prof.enable()
        runs = publish_jobs(uri, a.warehouse, job_ids, report)
        if prof:
            prof.disable()
        wall, cpu = time.perf_counter() - w0, _cpu_s() - c0

    out = {
        "n_jobs": len(job_ids),
        "n_runs": len(runs),
        "imports_s": round(imports_s, 2),
        "publish_wall_s": round(wall, 2),
        "publish_cpu_s": round(cpu, 2),
        "cores": len(os.sched_getaffinity(0)),
    }
    print(
        f"publish_jobs: {len(job_ids)} jobs, {len(runs)} runs: wall {wall:.2f} s, CPU {cpu:.2f} s "
        f"(this process + children); imports before the call {imports_s:.2f} s; {out['cores']} cores"
    )
    if prof:
        st = pstats.Stats(prof)
        parts = {
            "mlflow_client_setup_s": _cum(st, "mlflow/tracking/client.py", "__init__"),
            "report_render_s": _cum(st, "jobs/publish/report/html.py", "render_job_report"),
            "plots_s": _cum(st, "jobs/publish/report/plots.py", "_tree"),
            "total_profiled_s": st.total_tt,
        }
        parts["rest_s"] = parts["total_profiled_s"] - parts["mlflow_client_setup_s"] - parts["report_render_s"]
        out.update({k: round(v, 2) for k, v in parts.items()})
        print("profiled (cProfile, cumulative s): " + ", ".join(f"{k[:-2]} {v:.2f}" for k, v in parts.items()))
        st.sort_stats("tottime").print_stats(a.top)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
