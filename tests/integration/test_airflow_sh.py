"""``infra/local/airflow.sh`` on a port other than 8080: a task runs (its process reaches the api-server's
execution API on that port), ``status`` says what runs, and ``stop`` leaves no process of the home behind.

A one-task DAG in the test's own DAGs folder (what is tested is the script, not the pipeline: that is
``test_scheduler.py``). "No process behind" is checked two ways: every process group the script started is
empty, and no process on the machine has this ``AIRFLOW_HOME`` in its environment (a LocalExecutor worker or
task supervisor that left its group would still carry it). About 1.5 minutes on 2 cores.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pipeline_compare import free_port
from spark_cluster import group_alive

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
AIRFLOW_SH = REPO / "infra" / "local" / "airflow.sh"
DAG = '''
import pendulum
from airflow.sdk import dag, task


@dag(schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False)
def one_task():
    @task
    def answer():
        print("answer: 42")
        return 42

    answer()


one_task()
'''


def _airflow(env: dict, *args: str, check: bool = True, timeout: int = 120) -> subprocess.CompletedProcess:
    """``airflow ARGS`` in the environment ``airflow.sh env`` prints for the running home."""
    script = f'eval "$({AIRFLOW_SH} env)" && exec airflow "$@"'
    res = subprocess.run(
        ["bash", "-c", script, "airflow", *args], env=env, capture_output=True, text=True, timeout=timeout
    )
    assert not check or res.returncode == 0, f"airflow {' '.join(args)}:\n{res.stdout[-2000:]}\n{res.stderr[-3000:]}"
    return res


def _with_home(home: Path) -> list[int]:
    """Pids of the processes whose environment has ``AIRFLOW_HOME=<home>``."""
    needle = f"AIRFLOW_HOME={home}".encode()
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if needle in (d / "environ").read_bytes().split(b"\0"):
                    found.append(int(d.name))
            except OSError:  # gone meanwhile, or not ours
                pass
    return found


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _wait(cond, what: str, timeout: float):
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(2)


def test_a_task_runs_on_a_non_default_port_and_stop_leaves_nothing(tmp_path):
    home, dags = tmp_path / "airflow", tmp_path / "dags"
    dags.mkdir()
    (dags / "one_task.py").write_text(DAG)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "TRACELAKE_"))}
    env.update(
        TRACELAKE_AIRFLOW_HOME=str(home),
        TRACELAKE_DAGS_FOLDER=str(dags),
        VENV_BIN=str(Path(sys.executable).parent),
        TRACELAKE_TRACKING_URI=f"sqlite:///{tmp_path / 'mlflow.db'}",
        AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL="5",
    )
    port = free_port()
    while port == 8080 or _listening(port + 1) or _listening(port + 2):
        port = free_port()
    groups: list[int] = []
    try:
        started = subprocess.run(
            [str(AIRFLOW_SH), "start", "--port", str(port)], env=env, capture_output=True, text=True, timeout=400
        )
        groups = [int(g) for f in home.glob("*.groups") for g in f.read_text().split()]
        assert started.returncode == 0, started.stderr[-4000:]
        assert started.stdout.strip().splitlines()[-1] == f"http://127.0.0.1:{port}"
        assert len(groups) == 4 and _listening(port), groups
        status = subprocess.run([str(AIRFLOW_SH), "status"], env=env, capture_output=True, text=True, timeout=120)
        assert status.returncode == 0, status.stdout + status.stderr
        assert f"api-server: answers on http://127.0.0.1:{port}" in status.stdout
        assert "scheduler: heartbeats" in status.stdout and "dag-processor: running" in status.stdout
        # the metadata DB: WAL, and writers (the CLI in the user's shell too) wait 60 s for its lock
        with sqlite3.connect(f"file:{home / 'airflow.db'}?mode=ro", uri=True) as con:
            assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        conn = _airflow(env, "config", "get-value", "database", "sql_alchemy_conn").stdout.strip()
        assert conn == f"sqlite:///{home / 'airflow.db'}?timeout=60", conn

        _wait(lambda: "one_task" in _airflow(env, "dags", "list", "-o", "json").stdout, "the DAG parsed", 180)
        _airflow(env, "dags", "unpause", "one_task")
        _airflow(env, "dags", "trigger", "one_task")

        def finished():
            out = _airflow(env, "dags", "list-runs", "one_task", "-o", "json").stdout.strip()
            runs = json.loads(out.splitlines()[-1]) if out.endswith("]") else []  # after Airflow's warning lines
            return runs if runs and runs[0]["state"] in ("success", "failed") else None

        runs = _wait(finished, "the dag run", 240)
        logs = "\n".join(p.read_text(errors="replace") for p in (home / "logs").rglob("*") if p.is_file())
        assert runs[0]["state"] == "success", logs[-4000:]
        assert "answer: 42" in logs and "Connection refused" not in logs
    finally:
        stopped = subprocess.run([str(AIRFLOW_SH), "stop"], env=env, capture_output=True, text=True, timeout=300)
    assert stopped.returncode == 0, stopped.stderr[-3000:]
    assert "SIGKILL" not in stopped.stderr, stopped.stderr  # every process ended on SIGTERM
    assert groups and not [g for g in groups if group_alive(g)]
    assert not _with_home(home), [Path(f"/proc/{p}/cmdline").read_bytes() for p in _with_home(home)]
    assert not _listening(port)
    status = subprocess.run([str(AIRFLOW_SH), "status"], env=env, capture_output=True, text=True, timeout=120)
    assert status.returncode == 3 and "api-server: stopped" in status.stdout
