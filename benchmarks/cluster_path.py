#!/usr/bin/env python3
"""``tracelake run`` on a Spark cluster against the local executor on fleet 1 of ``fleet_vs_hta.py`` (issue 30,
target 2: the cluster at most :data:`TARGET` times the local executor's wall), measured in one run.

**Procedure**: fleet 1's landing zone (the 8-rank DLRM job + the 10 largest single-rank corpus traces HTA loads:
:func:`fleet_vs_hta.select_corpus_fleets`, symlinks to the corpus); a local cluster, ``infra/local/spark.sh start``
(a master and two workers on this machine; their cores are the machine's) and its Spark Connect server
``spark.sh connect``, both started before the runs and not counted (long-running services); then ``--repeat``
rounds, interleaved, each run a fresh process (:func:`fleet_vs_hta.tracelake_run`, MLflow on SQLite in the
warehouse, as a user runs it):

* ``local``: ``tracelake run`` (the local executor, one worker per CPU);
* ``cluster``: ``tracelake run --master spark://…`` (a driver JVM of its own, its executors on the workers);
* ``connect``: ``tracelake run --master sc://…`` (a client of the Connect server, no JVM of its own).

**Measured**: the median wall seconds of each (the cluster's JVMs are not descendants of the run, so their CPU is
not counted; wall is the measure); the ratios ``cluster / local`` and ``connect / local`` with ``ok`` / ``MISSED``.

Usage: ``.venv/bin/python benchmarks/cluster_path.py [--repeat 1] [--json OUT]``. Exit 0 even when the target is
missed (a measurement, not a test); 1 when a run failed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from typing import Any

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(BENCH_DIR)
sys.path[:0] = [BENCH_DIR, os.path.join(REPO_ROOT, "tests", "golden"), REPO_ROOT]

import fleet_vs_hta as fvh  # noqa: E402 (after the sys.path line above)
import make_hta_golden as golden  # noqa: E402
from normalize_bench import uncompressed_size  # noqa: E402

SPARK_SH = os.path.join(REPO_ROOT, "infra", "local", "spark.sh")
#: Issue 30: ``tracelake run --master <cluster>`` at most this many times the local executor's wall on fleet 1.
TARGET = 2.0
PATHS = ("local", "cluster", "connect")


def _spark_sh(env: dict, *args: str, timeout: float = 300) -> str:
    """``spark.sh ARGS``; its last output line (the URL it prints). Raises RuntimeError with its stderr on failure."""
    res = subprocess.run([SPARK_SH, *args], env=env, capture_output=True, text=True, timeout=timeout)
    if res.returncode != 0:
        raise RuntimeError(f"spark.sh {' '.join(args)} failed: {res.stderr[-2000:]}")
    return res.stdout.strip().splitlines()[-1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=1, help="interleaved rounds of the three runs (median)")
    ap.add_argument("--corpus-root", default=os.path.join(REPO_ROOT, "..", "shared", "corpus"))
    ap.add_argument("--golden", default=os.path.join(REPO_ROOT, "tests", "golden", "hta_0_5_0.json"))
    ap.add_argument("--timeout", type=float, default=1800.0, help="per run, seconds")
    ap.add_argument("--json", help="also write the results here")
    a = ap.parse_args(argv)
    corpus = os.path.abspath(a.corpus_root)
    jobs = golden.discover_jobs(corpus)
    json_bytes = {k: uncompressed_size(os.path.join(corpus, k)) for keys in jobs.values() for k in keys}
    loadable = fvh.hta_loadable(a.golden) or set(jobs)
    fleet1, _, _ = fvh.select_corpus_fleets(jobs, json_bytes, loadable)
    cores = len(os.sched_getaffinity(0))
    work = tempfile.mkdtemp(prefix="bench-cluster_path-")
    env = {**os.environ, "TRACELAKE_SPARK_DIR": os.path.join(work, "spark"), "PYTHON": sys.executable,
           "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1", "TRACELAKE_SPARK_MASTER_PORT": "0",
           "TRACELAKE_SPARK_CONNECT_PORT": "0"}  # fmt: skip
    runs: dict[str, list[dict[str, Any]]] = {p: [] for p in PATHS}
    try:
        fleet = fvh.corpus_fleet("fleet 1", fleet1, jobs, json_bytes, corpus, work)
        mb = sum(j.json_bytes for j in fleet.jobs) / 1e6
        print(f"fleet 1: {len(fleet.jobs)} jobs, {mb:,.1f} MB of JSON; {cores} CPUs", flush=True)
        master = _spark_sh(env, "start")
        connect = _spark_sh(env, "connect")
        print(f"cluster {master} (2 workers), Connect server {connect}: started, not counted", flush=True)
        urls = {"local": None, "cluster": master, "connect": connect}
        for _ in range(a.repeat):
            for path in PATHS:
                r = fvh.tracelake_run(
                    fleet.landing, work, cores, True, a.timeout, 0.5,
                    executor="local" if path == "local" else "spark", master=urls[path],
                )  # fmt: skip
                runs[path].append(r)
                print(f"  {path:<8} {r.get('wall_s', float('nan')):7.1f} s  {r.get('error', '')}", flush=True)
    finally:
        subprocess.run([SPARK_SH, "stop"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(work, ignore_errors=True)
    failed = any("error" in r for rs in runs.values() for r in rs)
    wall = {p: statistics.median(r["wall_s"] for r in rs) for p, rs in runs.items() if rs and "error" not in rs[0]}
    print()
    for path in PATHS:
        if path in wall:
            print(f"tracelake run, {path:<8}: {wall[path]:.1f} s (median of {len(runs[path])})")
    for path in ("cluster", "connect"):
        if path in wall and "local" in wall:
            ratio = wall[path] / wall["local"]
            print(
                f"{path} / local executor: {ratio:.2f}x (target <= {TARGET:g}x) {'ok' if ratio <= TARGET else 'MISSED'}"
            )
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"wall_s": wall, "runs": runs, "fleet": fleet1}, fh, indent=1, default=str)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
