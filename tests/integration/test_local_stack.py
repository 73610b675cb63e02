"""``infra/local/stack.sh``: the whole local stack (S3, MLflow, Spark cluster, Airflow) starts with one
command, is wired together, and stops with one command, leaving no process behind; and, on the stack's Airflow,
what ``infra/local/airflow.sh`` must do on a port other than 8080: a task runs (its process reaches the
api-server's execution API on that port), ``status`` says what runs, and ``stop`` leaves no process of the home.

One stack for the module (started by its fixture, stopped by the last test). The DAGs folder holds the shipped
DAG files (symlinked) and a one-task DAG: what :func:`test_airflow_sh_runs_a_task_on_a_non_default_port` tests
is the script, not the pipeline (that is ``test_scheduler.py``, the same scripts part by part). "No process
behind" is checked three ways: every pid file's process (group) is gone, every process group ``airflow.sh``
started is empty, and no process on the machine has this ``AIRFLOW_HOME`` in its environment (a LocalExecutor
worker or task supervisor that left its group would still carry it). Every part's state goes to the module's
temp folder, on free ports. About 2.5 minutes on 2 cores.
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
STACK = REPO / "infra" / "local" / "stack.sh"
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


def _pids(env: dict) -> list[int]:
    """Every pid file of the four state folders: S3 (state.json), MLflow, Spark master and workers, Airflow."""
    pids = [
        int(p.read_text())
        for key in ("TRACELAKE_MLFLOW_DIR", "TRACELAKE_SPARK_DIR", "TRACELAKE_AIRFLOW_HOME")
        for p in Path(env[key]).glob("*.pid")
    ]
    state = Path(env["TRACELAKE_S3_DIR"]) / "state.json"
    if state.exists() and json.loads(state.read_text()).get("pid"):
        pids.append(int(json.loads(state.read_text())["pid"]))
    return pids


def _running(pid: int) -> bool:
    """The process runs (not a zombie), or its process group still has a member."""
    try:
        if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            return True
    except (FileNotFoundError, IndexError):
        pass
    return group_alive(pid)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """``stack.sh start`` on a free port (not 8080, nor its log-server ports); ``stack.sh stop`` at the end
    unless :func:`test_one_command_stops_the_stack_and_leaves_nothing` stopped it."""
    tmp = tmp_path_factory.mktemp("stack")
    dags = tmp / "dags"
    dags.mkdir()
    for shipped in sorted((REPO / "dags").glob("tracelake_*.py")):
        (dags / shipped.name).symlink_to(shipped)
    (dags / "one_task.py").write_text(DAG)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PYSPARK", "SPARK_", "AWS_"))}
    env.update(
        PYTHON=sys.executable,
        TRACELAKE_S3_DIR=str(tmp / "s3"),
        TRACELAKE_MLFLOW_DIR=str(tmp / "mlflow"),
        TRACELAKE_MLFLOW_PORT=str(free_port()),
        TRACELAKE_SPARK_DIR=str(tmp / "spark"),
        TRACELAKE_SPARK_MASTER_PORT="0",  # a free port: other test modules run clusters beside this one
        TRACELAKE_SPARK_CONNECT_PORT="0",
        TRACELAKE_AIRFLOW_HOME=str(tmp / "airflow"),
        VENV_BIN=str(Path(sys.executable).parent),
        TRACELAKE_DAGS_FOLDER=str(dags),
        GX_ANALYTICS_ENABLED="false",
        AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL="5",
    )
    port = free_port()
    while port == 8080 or _listening(port + 1) or _listening(port + 2):
        port = free_port()
    state = {"env": env, "port": port, "home": tmp / "airflow", "stopped": None}
    try:
        state["started"] = subprocess.run(
            [str(STACK), "start", "--port", str(port)], env=env, capture_output=True, text=True, timeout=600
        )
        state["pids"] = _pids(env)
        state["groups"] = [int(g) for f in state["home"].glob("*.groups") for g in f.read_text().split()]
        yield state
    finally:
        if state["stopped"] is None:
            subprocess.run([str(STACK), "stop"], env=env, capture_output=True, text=True, timeout=300)


def test_one_command_starts_the_wired_stack(stack):
    env, port, started, pids = stack["env"], stack["port"], stack["started"], stack["pids"]
    assert started.returncode == 0, started.stderr[-4000:]
    assert started.stdout.strip().splitlines()[-1] == f"http://127.0.0.1:{port}"
    assert len(pids) == 1 + 1 + 4 + 4, pids  # S3, MLflow, master + 2 workers + Connect server, four Airflow processes
    status = subprocess.run([str(STACK), "status"], env=env, capture_output=True, text=True, timeout=120)
    assert status.returncode == 0, status.stdout + status.stderr
    # wired: the Airflow CLI of the stack's shell sees the S3 landing zone, the cluster, the MLflow server
    script = f'eval "$({STACK} env)" && env && airflow dags list -o json'
    res = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    seen = dict(line.split("=", 1) for line in res.stdout.splitlines() if "=" in line and not line.startswith("["))
    master = seen["TRACELAKE_SPARK_MASTER"]
    assert master.startswith("sc://127.0.0.1:")  # the Spark stages are clients of the cluster's Connect server
    assert json.loads(seen["AIRFLOW_CONN_SPARK_TRACELAKE"])["host"] == master
    assert seen["AIRFLOW_VAR_TRACELAKE_RAW"] == "s3://tracelake/raw"
    options = json.loads(seen["AIRFLOW_VAR_TRACELAKE_STORAGE_OPTIONS"])
    assert options["endpoint_url"] == seen["AWS_ENDPOINT_URL"] and options["key"] == seen["AWS_ACCESS_KEY_ID"]
    assert seen["AIRFLOW_VAR_TRACELAKE_TRACKING_URI"] == seen["MLFLOW_TRACKING_URI"]
    dags = {d["dag_id"] for d in json.loads(res.stdout[res.stdout.index("[{") :])}
    assert {"tracelake_ingest", "tracelake_fleet_report"} <= dags, dags


def test_airflow_sh_runs_a_task_on_a_non_default_port(stack):
    env, port, home = stack["env"], stack["port"], stack["home"]
    assert stack["started"].returncode == 0, stack["started"].stderr[-4000:]
    assert len(stack["groups"]) == 4 and _listening(port), stack["groups"]
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
    # the run turns success before the LocalExecutor worker's supervisor has finished the workload: stopping the
    # stack then would catch the worker in mid-task (a SIGTERM it forwards, then the scheduler waits on it)
    _wait(lambda: "Workload finished" in (home / "scheduler.log").read_text(errors="replace"), "the workload's end", 60)
    logs = "\n".join(p.read_text(errors="replace") for p in (home / "logs").rglob("*") if p.is_file())
    assert runs[0]["state"] == "success", logs[-4000:]
    assert "answer: 42" in logs and "Connection refused" not in logs


def test_one_command_stops_the_stack_and_leaves_nothing(stack):
    env, port, home, pids, groups = stack["env"], stack["port"], stack["home"], stack["pids"], stack["groups"]
    stopped = stack["stopped"] = subprocess.run(
        [str(STACK), "stop"], env=env, capture_output=True, text=True, timeout=300
    )
    assert stopped.returncode == 0, stopped.stderr[-3000:]
    assert "SIGKILL" not in stopped.stderr, stopped.stderr  # every Airflow process ended on SIGTERM
    assert pids and not [p for p in pids if _running(p)]
    assert groups and not [g for g in groups if group_alive(g)]
    assert not _with_home(home), [Path(f"/proc/{p}/cmdline").read_bytes() for p in _with_home(home)]
    assert not _listening(port)
    assert subprocess.run([str(STACK), "status"], env=env, capture_output=True, timeout=120).returncode == 3
    status = subprocess.run([str(AIRFLOW_SH), "status"], env=env, capture_output=True, text=True, timeout=120)
    assert status.returncode == 3 and "api-server: stopped" in status.stdout
