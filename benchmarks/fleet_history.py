#!/usr/bin/env python3
"""The daily fleet stage as the history grows (issue 29): a simulated fleet written straight into the warehouse.

``--jobs-per-day`` recurring jobs a day (job name ``recurring-NNN``: one run of each name a day, so every run has a
baseline), each ``--ranks`` ranks × ``--steps`` ProfilerSteps × ``--kernels`` kernel names, with one finding: rows
of ``captures``, ``steps``, ``ranks``, ``kernels`` and ``findings`` built with numpy (log-normal step times, σ 0.05)
and committed one table per day through the storage seam (:func:`jobs.warehouse.write_table`); no trace is parsed.

Measured: the fleet stage (:func:`jobs.fleet.job.run_fleet`, local executor, in a fresh process) in a warehouse of
``--short`` and one of ``--long`` days of history — its wall (the median of ``--repeat`` daily runs, each after one
more day is written; the two warehouses' runs alternate, since a 2-vCPU machine's walls drift by ±15 % over
minutes) and the process's peak RSS (the local executor runs the fleet stage's reads and transforms in the
driver). An unmeasured run first brings each warehouse's stored reductions up to date, so each measured run has one
new day to reduce, as a daily run does. Targets (the issue's):
long / short wall ≤ 1.2×, driver peak ≤ 2 GB. Usage (from the repo root)::

    .venv/bin/python benchmarks/fleet_history.py [--jobs-per-day 10] [--short 30] [--long 365] \\
        [--repeat 3] [--warehouse DIR]

``--warehouse DIR`` keeps the two warehouses (``DIR/30-days``, ``DIR/365-days``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from jobs.warehouse import write_table  # noqa: E402
from schemas import declared  # noqa: E402

FIRST_DAY = date(2025, 1, 1)
MS = 1_000_000

#: One fleet stage in a fresh process: ``{"wall_s", "peak_rss_bytes", "reduced_jobs"}`` on stdout.
_MEASURE = """
import json, resource, sys, time
from jobs.executor import LocalExecutor
from jobs.fleet.job import run_fleet
start = time.perf_counter()
with LocalExecutor() as ex:
    res = run_fleet(ex, sys.argv[1])
wall = time.perf_counter() - start
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"wall_s": wall, "peak_rss_bytes": rss, "reduced_jobs": len(res.reduced_jobs)}))
"""


def _table(name: str, cols: dict, n: int) -> pa.Table:
    """``cols`` as a table of ``name``'s declared schema; the other columns null."""
    schema = declared(name).arrow_schema()
    return pa.Table.from_arrays(
        [pa.array(cols[f.name], type=f.type) if f.name in cols else pa.nulls(n, f.type) for f in schema],
        schema=schema,
    )


def day_tables(day: int, jobs: int, ranks: int, steps: int, kernels: int, rng) -> dict[str, pa.Table]:
    """The rows of one simulated day, per table."""
    d = (FIRST_DAY + timedelta(days=day)).isoformat()
    job = np.array([f"sim-{day:04d}-{j:03d}" for j in range(jobs)])
    name = np.array([f"recurring-{j:03d}" for j in range(jobs)])
    # captures and ranks: one row per (job, rank)
    jr, rr = np.repeat(np.arange(jobs), ranks), np.tile(np.arange(ranks), jobs)
    cap_id = np.char.add(np.char.add(job[jr], "-r"), rr.astype(str))
    n = len(jr)
    span = steps * 100 * MS
    key = {  # one row per rank capture: the key columns of captures and ranks
        "date": [d] * n,
        "job_id": job[jr],
        "attempt": np.zeros(n, "int32"),
        "rank": rr.astype("int32"),
        "capture_id": cap_id,
    }
    caps = {
        **key,
        "uri": np.char.add(f"s3://sim/raw/date={d}/", cap_id),
        "source": ["kineto"] * n,
        "status": ["ingested"] * n,
        "job_name": name[jr],
        "model": ["sim-model"] * n,
        "device_name": ["NVIDIA H100 80GB HBM3"] * n,
        "torch_version": ["2.13.0"] * n,
        "world_size": np.full(n, ranks, "int32"),
        "host_name": np.char.add(np.char.add(np.char.add("node-", job[jr]), "-"), (rr // 8).astype(str)),
        "created_at": [f"{d}T{(j % 24):02d}:00:00Z" for j in jr],
        "trace_start_ns": np.zeros(n, "int64"),
        "trace_end_ns": np.full(n, span, "int64"),
    }
    step_p50 = (100 * MS * rng.lognormal(0.0, 0.05, n)).astype("int64")
    rank_rows = {
        **key,
        "world_size": np.full(n, ranks, "int32"),
        "device_index": (rr % 8).astype("int32"),
        "n_steps": np.full(n, steps, "int64"),
        "step_time_p50_ns": step_p50,
    }
    # steps: one row per (job, rank, step)
    si = np.repeat(np.arange(n), steps)
    m = len(si)
    st = (100 * MS * rng.lognormal(0.0, 0.05, m)).astype("int64")
    step_rows = {
        "date": [d] * m,
        "job_id": job[jr][si],
        "attempt": np.zeros(m, "int32"),
        "rank": rr[si].astype("int32"),
        "capture_id": cap_id[si],
        "step": np.tile(np.arange(steps), n).astype("int64"),
        "step_time_ns": st,
        "kernel_time_ns": (st * 0.9).astype("int64"),
        "idle_time_ns": (st * 0.1).astype("int64"),
        "compute_time_ns": (st * 0.8).astype("int64"),
        "exposed_comm_ns": (st * 0.05).astype("int64"),
        "cpu_bound_time_ns": (st * 0.02).astype("int64"),
        "dataloader_time_ns": (st * 0.01).astype("int64"),
    }
    # kernels: one row per (job, rank, step, kernel name)
    ki = np.repeat(np.arange(m), kernels)
    k = len(ki)
    kern_rows = {
        "date": [d] * k,
        "job_id": step_rows["job_id"][ki],
        "attempt": np.zeros(k, "int32"),
        "rank": step_rows["rank"][ki],
        "capture_id": step_rows["capture_id"][ki],
        "step": step_rows["step"][ki],
        "name": np.tile(np.array([f"sim_kernel_{i:03d}" for i in range(kernels)]), m),
        "kernel_type": ["COMPUTATION"] * k,
        "n": np.full(k, 10, "int64"),
        "total_ns": (rng.lognormal(0.0, 1.0, k) * MS).astype("int64"),
    }
    finding_rows = {
        "date": [d] * jobs,
        "job_id": job,
        "attempt": np.zeros(jobs, "int32"),
        "finding_id": np.char.add(job, "-f0"),
        "rule": ["straggler_rank"] * jobs,
        "rank_order": np.ones(jobs, "int32"),
        "title": ["simulated straggler"] * jobs,
        "est_time_lost_per_step_ns": np.full(jobs, 2.0 * MS),
    }
    return {
        "captures": _table("captures", caps, n),
        "ranks": _table("ranks", rank_rows, n),
        "steps": _table("steps", step_rows, m),
        "kernels": _table("kernels", kern_rows, k),
        "findings": _table("findings", finding_rows, jobs),
    }


def add_days(wh: str, first: int, last: int, args, rng) -> None:
    """Write days ``first`` … ``last - 1`` into ``wh`` (one commit per table per day)."""
    for day in range(first, last):
        for table, rows in day_tables(day, args.jobs_per_day, args.ranks, args.steps, args.kernels, rng).items():
            write_table(rows, wh, table)


def fleet_stage(wh: str) -> dict:
    """One fleet stage in a fresh process (:data:`_MEASURE`)."""
    out = subprocess.run([sys.executable, "-c", _MEASURE, wh], cwd=ROOT, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"the fleet stage failed (exit {out.returncode}): {out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(root: str, args, log=print) -> dict[int, dict]:
    """``{days of history: fleet stage figures}`` for ``--short`` and ``--long``, in two warehouses under ``root``
    (the same simulated days up to ``--short``): the median wall (and the largest peak) of ``--repeat`` daily runs
    each, each after one more day is written — the two ages alternate, so a machine that slows down for a while
    slows both alike."""
    ages = {days: str(Path(root) / f"{days}-days") for days in (args.short, args.long)}
    rngs = {days: np.random.default_rng(29) for days in ages}
    for days, wh in ages.items():
        start = time.perf_counter()
        add_days(wh, 0, days, args, rngs[days])
        fleet_stage(wh)  # catch up: the history's reductions stored, as the daily runs before would have
        log(f"  {days} days written and reduced in {time.perf_counter() - start:.0f} s")
    runs: dict[int, list[dict]] = {days: [] for days in ages}
    for k in range(args.repeat):
        for days, wh in ages.items():
            add_days(wh, days + k, days + k + 1, args, rngs[days])
            runs[days].append(fleet_stage(wh))
    out = {}
    for days, rs in runs.items():
        walls = [r["wall_s"] for r in rs]
        log(f"  {days} days: walls {', '.join(f'{w:.2f}' for w in walls)} s")
        out[days] = {
            "wall_s": statistics.median(walls),
            "peak_rss_bytes": max(r["peak_rss_bytes"] for r in rs),
            "reduced_jobs": rs[-1]["reduced_jobs"],
        }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs-per-day", type=int, default=10)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--kernels", type=int, default=20)
    ap.add_argument("--short", type=int, default=30)
    ap.add_argument("--long", type=int, default=365)
    ap.add_argument("--repeat", type=int, default=3, help="daily runs measured per age (one new day each; median)")
    ap.add_argument("--warehouse", help="write the two simulated warehouses under this folder and keep them")
    args = ap.parse_args(argv)
    print(
        f"simulated fleet: {args.jobs_per_day} jobs/day x {args.ranks} ranks x {args.steps} steps x {args.kernels} "
        "kernels; the fleet stage on the local executor, one new day"
    )
    if args.warehouse:
        res = measure(args.warehouse, args)
    else:
        with tempfile.TemporaryDirectory(prefix="fleet_history-") as tmp:
            res = measure(tmp, args)
    print(f"{'history days':>13} {'wall s':>7} {'peak RSS MB':>12} {'jobs reduced':>13}")
    for days, r in res.items():
        print(f"{days:>13} {r['wall_s']:>7.1f} {r['peak_rss_bytes'] / 1e6:>12,.0f} {r['reduced_jobs']:>13}")
    short, long = res[args.short], res[args.long]
    ratio = long["wall_s"] / short["wall_s"]
    peak = long["peak_rss_bytes"] / 1e9
    print(
        f"target: daily fleet stage {args.long} vs {args.short} days <= 1.2x: {ratio:.2f}x "
        f"({'ok' if ratio <= 1.2 else 'MISSED'}); driver peak <= 2 GB: {peak:.2f} GB ({'ok' if peak <= 2 else 'MISSED'})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
