"""``infra/local/stack.sh``: the whole local stack (S3, MLflow, Spark cluster, Airflow) starts with one
command, is wired together, and stops with one command, leaving no process behind.

Every part's state goes to the test's temp folder, on free ports. About 1.5 minutes on 2 cores (start
~60 s, stop ~20 s); what the stack runs is tested by ``test_scheduler.py`` (the same scripts, part by part).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pipeline_compare import free_port
from spark_cluster import group_alive

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
STACK = REPO / "infra" / "local" / "stack.sh"


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


def test_one_command_starts_the_wired_stack_and_one_stops_it(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PYSPARK", "SPARK_", "AWS_"))}
    env.update(
        PYTHON=sys.executable,
        TRACELAKE_S3_DIR=str(tmp_path / "s3"),
        TRACELAKE_MLFLOW_DIR=str(tmp_path / "mlflow"),
        TRACELAKE_MLFLOW_PORT=str(free_port()),
        TRACELAKE_SPARK_DIR=str(tmp_path / "spark"),
        TRACELAKE_AIRFLOW_HOME=str(tmp_path / "airflow"),
        VENV_BIN=str(Path(sys.executable).parent),
        TRACELAKE_DAGS_FOLDER=str(REPO / "dags"),
        GX_ANALYTICS_ENABLED="false",
    )
    port = free_port()
    pids: list[int] = []
    try:
        started = subprocess.run(
            [str(STACK), "start", "--port", str(port)], env=env, capture_output=True, text=True, timeout=600
        )
        pids = _pids(env)
        assert started.returncode == 0, started.stderr[-4000:]
        assert started.stdout.strip().splitlines()[-1] == f"http://127.0.0.1:{port}"
        assert len(pids) == 1 + 1 + 3 + 4, pids  # S3, MLflow, master + 2 workers, four Airflow processes
        status = subprocess.run([str(STACK), "status"], env=env, capture_output=True, text=True, timeout=120)
        assert status.returncode == 0, status.stdout + status.stderr
        # wired: the Airflow CLI of the stack's shell sees the S3 landing zone, the cluster, the MLflow server
        script = f'eval "$({STACK} env)" && env && airflow dags list -o json'
        res = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr[-3000:]
        seen = dict(line.split("=", 1) for line in res.stdout.splitlines() if "=" in line and not line.startswith("["))
        master = seen["TRACELAKE_SPARK_MASTER"]
        assert master.startswith("spark://127.0.0.1:")
        assert json.loads(seen["AIRFLOW_CONN_SPARK_TRACELAKE"])["host"] == master
        assert seen["AIRFLOW_VAR_TRACELAKE_RAW"] == "s3://tracelake/raw"
        options = json.loads(seen["AIRFLOW_VAR_TRACELAKE_STORAGE_OPTIONS"])
        assert options["endpoint_url"] == seen["AWS_ENDPOINT_URL"] and options["key"] == seen["AWS_ACCESS_KEY_ID"]
        assert seen["AIRFLOW_VAR_TRACELAKE_TRACKING_URI"] == seen["MLFLOW_TRACKING_URI"]
        dags = {d["dag_id"] for d in json.loads(res.stdout[res.stdout.index("[{") :])}
        assert {"tracelake_ingest", "tracelake_fleet_report"} <= dags, dags
    finally:
        stopped = subprocess.run([str(STACK), "stop"], env=env, capture_output=True, text=True, timeout=300)
    assert stopped.returncode == 0, stopped.stderr[-3000:]
    assert pids and not [p for p in pids if _running(p)]
    assert subprocess.run([str(STACK), "status"], env=env, capture_output=True, timeout=120).returncode == 3
