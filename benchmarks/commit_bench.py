#!/usr/bin/env python3
"""Commit time of one table write (:func:`jobs.warehouse.write_table`: data files staged, one Delta commit) on local
disk and on a real S3 server (SeaweedFS on loopback, ``infra/local/seaweed.py``), next to the peer measured in the
same run: writing the same rows as plain Parquet files with pyarrow (what the write costs without a transaction).

Each table gets ``--jobs`` jobs first (``--files`` live data files in all), then ``--writes`` rebuilds of one job
(a few hundred rows: replace its partition), timed one by one; prints the median and p90 per store, and the
ratio to the peer. Usage (from the repo root)::

    .venv/bin/python benchmarks/commit_bench.py [--writes 30] [--jobs 200]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jobs.warehouse import write_table  # noqa: E402
from schemas import STEPS  # noqa: E402


def _rows(job: str, n: int, v: int) -> pa.Table:
    schema = pa.schema([f.with_nullable(True) for f in STEPS.arrow_schema()])
    return pa.Table.from_pylist(
        [
            {"date": "2026-12-01", "job_id": job, "attempt": 0, "rank": r, "step": v, "step_time_ns": v}
            for r in range(n)
        ],
        schema=schema,
    )


def _pct(xs: list[float], q: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))]


def measure(warehouse: str, writes: int, jobs: int) -> tuple[list[float], list[float]]:
    """(commit times, plain-Parquet times) in ms for ``writes`` rebuilds of one job of a table of ``jobs`` jobs."""
    write_table(pa.concat_tables([_rows(f"j{i}", 4, 0) for i in range(jobs)]), warehouse, "steps")
    delta, plain = [], []
    peer = warehouse.rstrip("/") + "/plain_steps"
    fs_peer, base = pa.fs.FileSystem.from_uri(peer) if "://" in peer else (pa.fs.LocalFileSystem(), peer)
    part = ds.partitioning(pa.schema([("date", pa.string()), ("job_id", pa.string())]), flavor="hive")
    for v in range(1, writes + 1):
        rows = _rows("j0", 300, v)
        t = time.perf_counter()
        write_table(rows, warehouse, "steps", ["j0"])
        delta.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        ds.write_dataset(
            rows, base, filesystem=fs_peer, format="parquet", partitioning=part,
            basename_template=f"w{v}-{{i}}.parquet", existing_data_behavior="delete_matching",
        )  # fmt: skip
        plain.append((time.perf_counter() - t) * 1000)
    return delta, plain


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--writes", type=int, default=30)
    ap.add_argument("--jobs", type=int, default=200)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        results = {"local disk": measure(os.path.join(tmp, "wh"), a.writes, a.jobs)}
        spec = importlib.util.spec_from_file_location(
            "tracelake_local_seaweed", ROOT / "infra" / "local" / "seaweed.py"
        )
        sw = importlib.util.module_from_spec(spec)
        sys.modules["tracelake_local_seaweed"] = sw
        spec.loader.exec_module(sw)
        try:
            sw.find_weed()
        except FileNotFoundError as exc:
            print(f"SeaweedFS not installed ({exc}): S3 skipped")
        else:
            server = sw.SeaweedS3(dir=os.path.join(tmp, "sw"), bucket="tracelake").start()
            try:
                os.environ.update(server.env)
                results["S3 (SeaweedFS)"] = measure("s3://tracelake/wh", a.writes, a.jobs)
            finally:
                server.stop()
    print(f"one job rebuilt {a.writes} times in a table of {a.jobs} jobs (300 rows per write)")
    for store, (delta, plain) in results.items():
        m, p = statistics.median(delta), statistics.median(plain)
        print(
            f"{store:15s} Delta write: median {m:6.1f} ms, p90 {_pct(delta, 0.9):6.1f} ms; plain Parquet overwrite "
            f"(no transaction) median {p:6.1f} ms; ratio {m / p:.2f}x"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
