"""The scheduled path against the CLI (issue 30): one ingest DAG run under a real Airflow scheduler against one
``tracelake run``, on the same captures, measured in the same run.

Procedure (every part on loopback, in a temp folder, stopped at the end):

1. A landing zone of ``--files`` real corpus traces (the smallest of at least :data:`MIN_BYTES` of
   ``../shared/corpus/torch``), each copied into a
   job folder of its own: bare captures, committed at their copy time (the file's mtime).
2. ``tracelake run`` on it (local executor; MLflow in the warehouse's SQLite), wall time.
3. For each path of the DAG's engine stages — ``local``: the default for an interval below
   ``tracelake_local_max_bytes`` (64 MB), the local executor inside each task; ``connect``: the threshold 0 and the
   connection ``spark_tracelake`` on a Spark Connect server (``infra/local/spark.sh connect``, local[*], started
   before and not counted: a long-running service); ``submit``: the threshold 0 and no connection, a spark-submit in
   local mode per Spark task — an Airflow home (``infra/local/airflow.sh``:
   scheduler, dag-processor, triggerer, api-server; LocalExecutor) whose ingest DAG has 60 s intervals on the epoch
   grid; once the interval holding the captures has ended, ``airflow backfill create`` runs the interval before it
   (no captures: its run is skipped after ``discover``; it warms what a long-running Airflow has warm, such as the
   api-server's first execution-API call, ~2.5 s) and then that interval through the scheduler. Wall time: the DAG run's start to its end, from the metadata DB (its queued→start, which for a
   backfill includes the ``dags unpause`` call, is printed apart); per task: queued→start (the scheduler's and the
   executor's latency), run time, and the gap since the task before it ended.

Prints the wall times, the per-task table, and the ratio DAG run / ``tracelake run`` of each path with ``ok`` or
``MISSED`` against :data:`TARGET` (issue 30: ≤ 2×). ``--paths local`` measures one path only.

Usage: ``.venv/bin/python benchmarks/scheduled_path.py [--files 10] [--paths local,connect,submit]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "corpus" / "torch"
BIN = Path(sys.executable).parent
AIRFLOW_SH, SPARK_SH = REPO / "infra/local/airflow.sh", REPO / "infra/local/spark.sh"
DAG = "tracelake_ingest"
INTERVAL_S = 60
#: The landing zone's traces: the smallest of at least this size (issue 30 measured 10 files, 7.3 MB).
MIN_BYTES = 300_000
#: Issue 30: one ingest DAG run at most this many times ``tracelake run``'s wall on the same captures.
TARGET = 2.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def landing_zone(root: Path, n: int) -> list[Path]:
    """The ``n`` smallest corpus traces, each copied into ``root/job-<i>/``."""
    traces = sorted(
        (p for p in CORPUS.rglob("*") if p.is_file() and p.name.endswith((".json", ".json.gz"))),
        key=lambda p: p.stat().st_size,
    )
    traces = [p for p in traces if p.stat().st_size >= MIN_BYTES][:n] or traces[:n]
    out = []
    for i, src in enumerate(traces):
        job = root / f"job-{i:02d}"
        job.mkdir(parents=True)
        out.append(Path(shutil.copy(src, job / src.name)))
    return out


def _airflow(env: dict, port: int, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """``airflow ARGS`` on the running home (``airflow.sh env``); 3 tries on SQLite's "database is locked"."""
    script = f'eval "$({AIRFLOW_SH} env --port {port})" && exec airflow "$@"'
    for _ in range(3):
        res = subprocess.run(["bash", "-c", script, "airflow", *args], env=env, capture_output=True, text=True,
                             timeout=timeout)  # fmt: skip
        if res.returncode == 0 or "database is locked" not in res.stderr:
            return res
        time.sleep(5)
    return res


def _rows(db: Path, sql: str, *params) -> list[dict]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30) as con:
        con.row_factory = sqlite3.Row
        return [dict(r) for r in con.execute(sql, params)]


def _t(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def dag_run(path: str, landing: Path, tmp: Path, connect_url: str | None, first: datetime) -> dict:
    """The backfill run of the interval ``[first, first + INTERVAL_S)`` under a real scheduler, after the run of the
    empty interval before it; its timings."""
    home, port = tmp / f"airflow-{path}", _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PYSPARK", "SPARK_", "TRACELAKE_"))}
    env.update(
        TRACELAKE_AIRFLOW_HOME=str(home),
        VENV_BIN=str(BIN),
        TRACELAKE_RAW=str(landing),
        TRACELAKE_WAREHOUSE=str(tmp / f"wh-{path}"),
        TRACELAKE_INGEST_SCHEDULE=f"PT{INTERVAL_S}S",
        TRACELAKE_INGEST_START=(first - timedelta(seconds=2 * INTERVAL_S)).isoformat(),
        TRACELAKE_INGEST_END=first.isoformat(),  # the unpaused DAG schedules nothing beyond the backfill
        TRACELAKE_TASK_RETRIES="0",
        GX_ANALYTICS_ENABLED="false",
        AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="True",
        AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL="5",
    )
    if connect_url:
        env["TRACELAKE_SPARK_MASTER"] = connect_url
    if path != "local":
        env["TRACELAKE_LOCAL_MAX_BYTES"] = "0"  # always Spark
    started = subprocess.run([str(AIRFLOW_SH), "start", "--port", str(port)], env=env, capture_output=True,
                             text=True, timeout=600)  # fmt: skip
    if started.returncode != 0:
        raise RuntimeError(f"airflow.sh start failed: {started.stderr[-2000:]}")
    db = home / "airflow.db"
    try:
        deadline = time.monotonic() + 300
        while not _rows(db, "SELECT dag_id FROM dag WHERE dag_id = ?", DAG):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{DAG} not parsed after 300 s (see {home}/dag-processor.log)")
            time.sleep(2)
        until = first + timedelta(seconds=INTERVAL_S)
        warm = first - timedelta(seconds=INTERVAL_S)
        created = _airflow(env, port, "backfill", "create", "--dag-id", DAG, "--from-date", warm.isoformat(),
                           "--to-date", first.isoformat(), "--max-active-runs", "1")  # fmt: skip
        if created.returncode != 0:
            raise RuntimeError(f"backfill create failed: {created.stderr[-2000:]}")
        _airflow(env, port, "dags", "unpause", DAG)
        deadline = time.monotonic() + 1800
        while True:
            runs = _rows(db, "SELECT * FROM dag_run WHERE dag_id = ? AND run_type = 'backfill'", DAG)
            if len(runs) == 2 and all(r["state"] in ("success", "failed") for r in runs):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the DAG run did not end in 1800 s: {runs}")
            time.sleep(2)
        (run,) = [r for r in runs if _t(r["data_interval_start"]) == first]
        tis = [t for t in _rows(db, "SELECT task_id, state, queued_dttm, start_date, end_date FROM task_instance "
                          "WHERE dag_id = ? AND run_id = ? ORDER BY start_date", DAG, run["run_id"])
                   if t["start_date"] and t["end_date"]]  # fmt: skip
        return {
            "state": run["state"],
            "interval": f"{first:%H:%M:%S}–{until:%H:%M:%S}",
            "wall_s": (_t(run["end_date"]) - _t(run["start_date"])).total_seconds(),
            "queued_to_start_s": (_t(run["start_date"]) - _t(run["queued_at"])).total_seconds(),
            "tasks": [
                {
                    "task": t["task_id"],
                    "state": t["state"],
                    "wait_s": (_t(t["start_date"]) - _t(t["queued_dttm"])).total_seconds()
                    if t["queued_dttm"]
                    else None,
                    "run_s": (_t(t["end_date"]) - _t(t["start_date"])).total_seconds() if t["end_date"] else None,
                    "gap_s": (
                        _t(t["start_date"]) - _t(prev["end_date"] if prev else run["start_date"])
                    ).total_seconds(),
                }
                for prev, t in zip([None, *tis], tis)
            ],
            "home": str(home),
        }
    finally:
        subprocess.run([str(AIRFLOW_SH), "stop"], env=env, capture_output=True, timeout=300)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=10, help="corpus traces in the landing zone (the smallest)")
    ap.add_argument("--paths", default="local,connect,submit", help="the DAG's engine paths: local, connect, submit")
    a = ap.parse_args(argv)
    paths = [p for p in a.paths.split(",") if p]
    tmp = Path(tempfile.mkdtemp(prefix="tracelake-sched-"))
    spark_env = {**os.environ, "TRACELAKE_SPARK_DIR": str(tmp / "spark"), "TRACELAKE_SPARK_CONNECT_PORT": "0",
                 "PYTHON": sys.executable}  # fmt: skip
    try:
        # the captures land; the interval holding them is the next one to end on the 60 s grid
        now = datetime.now(UTC)
        first = datetime.fromtimestamp(int(now.timestamp()) // INTERVAL_S * INTERVAL_S, UTC)
        if (first + timedelta(seconds=INTERVAL_S) - now).total_seconds() < 5:  # too close to its end: the next one
            time.sleep(6)
            first += timedelta(seconds=INTERVAL_S)
        files = landing_zone(tmp / "landing", a.files)
        mb = sum(f.stat().st_size for f in files) / 1e6
        print(f"landing zone: {len(files)} traces, {mb:.1f} MB, committed in [{first:%H:%M:%S}, +{INTERVAL_S} s)")

        t0 = time.monotonic()
        cli = subprocess.run([str(BIN / "tracelake"), "run", "--raw", str(tmp / "landing"), "--warehouse",
                              str(tmp / "wh-cli")], capture_output=True, text=True, timeout=1800)  # fmt: skip
        t_cli = time.monotonic() - t0
        if cli.returncode != 0:
            raise RuntimeError(f"tracelake run failed: {cli.stderr[-2000:]}")
        print(f"tracelake run (local executor, MLflow): {t_cli:.1f} s")

        connect_url = None
        if "connect" in paths:
            t0 = time.monotonic()
            res = subprocess.run([str(SPARK_SH), "connect", "--master", "local[*]"], env=spark_env,
                                 capture_output=True, text=True, timeout=300)  # fmt: skip
            if res.returncode != 0:
                raise RuntimeError(f"spark.sh connect failed: {res.stderr[-2000:]}")
            connect_url = res.stdout.strip().splitlines()[-1]
            print(f"Spark Connect server {connect_url}: started in {time.monotonic() - t0:.1f} s (not counted)")
        wait = (first + timedelta(seconds=INTERVAL_S + 1) - datetime.now(UTC)).total_seconds()
        time.sleep(max(0.0, wait))  # the interval has ended: a backfill may run it
        results = {}
        for path in paths:
            r = results[path] = dag_run(path, tmp / "landing", tmp, connect_url if path == "connect" else None, first)
            print(f"\ningest DAG run, {path}: {r['state']}, {r['wall_s']:.1f} s start→end (interval {r['interval']}; "
                  f"queued→start {r['queued_to_start_s']:.1f} s)")  # fmt: skip
            print(f"  {'task':<20} {'gap s':>6} {'queued→start s':>15} {'run s':>8}")
            for t in r["tasks"]:
                print(
                    f"  {t['task']:<20} {t['gap_s']:>6.1f} {t['wait_s'] or 0:>15.1f} {t['run_s'] or 0:>8.1f}  {t['state']}"
                )
            n = len(r["tasks"])
            gaps = sum(t["gap_s"] for t in r["tasks"])
            print(f"  per task: {r['wall_s'] / max(n, 1):.1f} s wall, {gaps / max(n, 1):.1f} s gap before it")
        print()
        for path, r in results.items():
            ratio = r["wall_s"] / t_cli
            ok = r["state"] == "success" and ratio <= TARGET
            print(f"DAG run ({path}) / tracelake run: {ratio:.2f}x (target <= {TARGET:g}x) {'ok' if ok else 'MISSED'}")
        (tmp / "result.json").write_text(json.dumps({"tracelake_run_s": t_cli, **results}, indent=1))
        print(f"details: {tmp / 'result.json'}")
        return 0
    finally:
        subprocess.run([str(SPARK_SH), "stop"], env=spark_env, capture_output=True, timeout=120)


if __name__ == "__main__":
    sys.exit(main())
