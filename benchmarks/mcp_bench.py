#!/usr/bin/env python3
"""Latency of every ``tracelake mcp`` tool, as an MCP client sees it (round trip over stdio).

Starts ``python -m jobs.cli mcp --warehouse W`` as a subprocess and talks to it with the MCP SDK's
client, as an agent would. After the server's Spark session (started in the background for ``sql``)
is ready, each tool is called ``--repeat`` times (after one warm-up call; its time is the ``first``
column) on the 8-rank DLRM job and the fleet, and the p50 / p95 of the round trips are printed per
tool, with the targets of issue 14:

* every tool but ``sql``: p50 < 300 ms on a warehouse of the whole torch corpus;
* ``sql`` (warm session): p50 < 2 s.

The warehouse is ``--warehouse W``, or the torch corpus (``../shared/corpus/torch``) run through
``tracelake run --no-mlflow`` into a temp folder first. Usage (from the repo root)::

    .venv/bin/python benchmarks/mcp_bench.py [--warehouse W] [--repeat 20] [--json OUT]

Exit status 0 (a measurement, not a test), 1 when a call failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(os.path.dirname(REPO_ROOT), "shared", "corpus", "torch")
TARGET_P50_MS, TARGET_SQL_P50_MS = 300.0, 2000.0


def calls(dlrm: str, other: str) -> list[tuple[str, dict]]:
    """The (tool, arguments) measured: one question per tool, on the DLRM job where it takes one."""
    return [
        ("list_jobs", {}),
        ("job_summary", {"job_id": dlrm}),
        ("findings", {"job_id": dlrm}),
        ("findings", {}),
        ("critical_path", {"job_id": dlrm}),
        ("collectives", {"job_id": dlrm}),
        ("kernels", {"job_id": dlrm, "top": 20}),
        ("compare", {"a": dlrm, "b": other}),
        ("regressions", {}),
        ("fleet_stats", {"dimension": "hardware"}),
        (
            "sql",
            {
                "query": "SELECT job_id, count(*) AS n_steps, percentile(step_time_ns, 0.5) AS p50_ns "
                "FROM steps GROUP BY job_id ORDER BY n_steps DESC"
            },
        ),
    ]


async def measure(warehouse: str, repeat: int) -> dict:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "jobs.cli", "mcp", "--warehouse", warehouse], env=env, cwd=REPO_ROOT
    )
    t0 = time.perf_counter()
    async with Client(params, read_timeout_seconds=300) as client:
        connect_s = time.perf_counter() - t0
        jobs = (await client.call_tool("list_jobs", {"limit": 500})).structured_content["jobs"]
        dlrm = next(j["job_id"] for j in jobs if j["n_ranks"] == 8)
        other = next(j["job_id"] for j in jobs if j["job_id"] != dlrm)
        t = time.perf_counter()
        await client.call_tool("sql", {"query": "SELECT 1 AS one"})  # waits for the server's Spark session
        spark_s = time.perf_counter() - t
        out = {}
        for name, args in calls(dlrm, other):
            label = name + ("(fleet)" if name == "findings" and not args else "")
            first = time.perf_counter()
            r = await client.call_tool(name, args)
            warm_ms = (time.perf_counter() - first) * 1e3
            if r.is_error:
                return {"error": f"{label}: {r.content[0].text}"}
            times = []
            for _ in range(repeat):
                t = time.perf_counter()
                r = await client.call_tool(name, args)
                times.append((time.perf_counter() - t) * 1e3)
                assert not r.is_error, r.content[0].text
            q = statistics.quantiles(times, n=20, method="inclusive") if len(times) > 1 else times * 19
            out[label] = {
                "p50_ms": statistics.median(times),
                "p95_ms": q[18],
                "first_ms": warm_ms,
                "chars": len(r.content[0].text),
            }
    return {"connect_s": connect_s, "spark_wait_s": spark_s, "tools": out, "dlrm": dlrm}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--warehouse", help="existing warehouse (default: build one from the torch corpus)")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--json", help="write the figures here")
    a = ap.parse_args(argv)
    tmp = None
    wh = a.warehouse
    if wh is None:
        tmp = tempfile.mkdtemp(prefix="mcp-bench-")
        wh = os.path.join(tmp, "wh")
        t = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "jobs.cli", "run", "--raw", CORPUS, "--warehouse", wh, "--no-mlflow"],
            cwd=REPO_ROOT,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        print(f"corpus warehouse built in {time.perf_counter() - t:.1f} s: {wh}")
    try:
        res = asyncio.run(measure(wh, a.repeat))
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    if "error" in res:
        print("FAILED:", res["error"])
        return 1
    print(
        f"server started and initialized in {res['connect_s']:.2f} s; its Spark session (sql) ready "
        f"{res['spark_wait_s']:.1f} s later; then {a.repeat} calls per tool after one warm-up call each"
    )
    print(f"{'tool':<16} {'p50 ms':>8} {'p95 ms':>8} {'first ms':>9} {'chars':>7}  target")
    for name, r in res["tools"].items():
        limit = TARGET_SQL_P50_MS if name == "sql" else TARGET_P50_MS
        verdict = "ok" if r["p50_ms"] < limit else "MISSED"
        print(
            f"{name:<16} {r['p50_ms']:8.1f} {r['p95_ms']:8.1f} {r['first_ms']:9.1f} {r['chars']:7d}  "
            f"p50 < {limit:g} ms: {verdict}"
        )
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
