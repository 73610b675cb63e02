"""``tracelake run --master spark://…`` on a real Spark standalone cluster (``infra/local/spark.sh``) on loopback.

One master and two workers (1 core, 2 GiB each) from the pyspark package's jars; the main job runs as a
subprocess (its own driver, not this session's SparkSession) on 2 DLRM ranks and a broken file; its warehouse must
hold the rows the same command leaves on the local executor (run once for the module), and the master must have
given the application an executor on each worker that ran tasks. Then a Spark Connect server on the cluster
(``spark.sh connect``) runs the same job as ``tracelake run --master local-connect``'s server side. Every subprocess
is bounded by a timeout (a run on the cluster took 65-195 s on a shared 2-core machine).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from spark_cluster import Cluster, cluster, get_json, group_alive  # noqa: F401 - fixture
from warehouse_digest import WAREHOUSE_TABLES, read_arrow, warehouse_digests

pytestmark = pytest.mark.integration

DLRM = "param/dlrm_kineto/worker{r}_step_12.*.pt.trace.json"


@pytest.fixture(scope="module")
def landing(tmp_path_factory, torch_corpus):
    """Two real DLRM ranks (symlinked) and one file that is not JSON (quarantined)."""
    root = tmp_path_factory.mktemp("landing")
    job = root / "dlrm"
    job.mkdir()
    for r in (0, 1):
        src = next(torch_corpus.glob(DLRM.format(r=r)))
        shutil.copyfile(src, job / src.name)
    (job / "notjson.json").write_bytes(b"this is not json at all")
    return root


@pytest.fixture(scope="module")
def local_warehouse(cluster, landing, tmp_path_factory):  # noqa: F811
    """The warehouse ``tracelake run`` leaves on its default local executor (no Spark): what every run must equal."""
    wh = tmp_path_factory.mktemp("wh-local") / "warehouse"
    t_local = _tracelake_run(None, landing, wh, cluster.env, timeout=300)
    print(f"\ntracelake run wall time: local executor {t_local:.1f} s")
    return wh


def _tracelake_run(master: str | None, raw: Path, warehouse: Path, env: dict, timeout: float) -> float:
    """``tracelake run [--master M] --raw R --warehouse W --no-mlflow`` in its own process group; wall seconds
    (no master: the local executor).

    Killed with its group (the driver JVM with it) when it runs past ``timeout``."""
    exe = Path(sys.executable).with_name("tracelake")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "jobs.cli"]
    cmd += ["run", *(["--master", master] if master else []), "--raw", str(raw), "--warehouse", str(warehouse)]
    cmd += ["--no-mlflow"]
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        env={**env, "COLUMNS": "200"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"tracelake run --master {master} ran past {timeout} s:\n{out[-3000:]}")
    assert proc.returncode == 0, f"tracelake run --master {master} failed:\n{out[-3000:]}"
    return time.monotonic() - t0


def _finished_app(cluster: Cluster, timeout: float = 30) -> dict:  # noqa: F811
    """The one application the master has seen (before the Connect server's), once it has finished."""
    deadline = time.monotonic() + timeout
    while True:
        state = cluster.master_state()
        apps = state["activeapps"] + state["completedapps"]
        assert len(apps) == 1, apps
        if apps[0]["state"] == "FINISHED" or time.monotonic() > deadline:
            return apps[0]
        time.sleep(0.5)


def test_run_on_the_cluster_equals_local(cluster, landing, local_warehouse, tmp_path):  # noqa: F811
    assert cluster.script("status").returncode == 0
    state = cluster.master_state()
    assert state["aliveworkers"] == 2 and state["cores"] == 2

    wh_cluster = tmp_path / "wh-cluster"
    # --master local-cluster: the cluster spark.sh runs, found from its state folder
    t_cluster = _tracelake_run(
        "local-cluster", landing, wh_cluster, {**cluster.env, "TRACELAKE_SPARK_DIR": str(cluster.dir)}, timeout=600
    )
    print(f"\ntracelake run wall time: --master local-cluster {t_cluster:.1f} s")

    caps = read_arrow(wh_cluster, "captures").to_pydict()
    assert sorted(caps["status"]) == ["ingested", "ingested", "quarantined"]
    got, want = warehouse_digests(wh_cluster), warehouse_digests(local_warehouse)
    assert set(got) == set(WAREHOUSE_TABLES)
    for table in WAREHOUSE_TABLES:
        assert got[table] == want[table], table
    assert all(got[t] for t in ("events", "steps", "kernels", "collectives", "critical_path", "findings"))

    # the work ran in the workers' executors (one per worker), not in the driver
    app = _finished_app(cluster)
    assert app["name"] == "tracelake" and app["state"] == "FINISHED", app
    assert app["memoryperexecutor"] == 1024  # get_spark's spark.executor.memory (1g) fits a 2g worker
    on_worker = {}
    for w in cluster.master_state()["workers"]:
        ws = get_json(w["webuiaddress"] + "/json/")
        on_worker[w["id"]] = [e["id"] for e in ws["executors"] + ws["finishedexecutors"] if e["appid"] == app["id"]]
    assert len(on_worker) == 2 and all(len(ex) == 1 for ex in on_worker.values()), on_worker
    logs = sorted((cluster.dir / "work" / app["id"]).glob("*/stderr"))
    assert len(logs) == 2
    for log in logs:
        text = log.read_text(errors="replace")
        assert "Running task" in text and "Starting Python task execution" in text, log


def test_run_through_the_spark_connect_server_equals_local(cluster, landing, local_warehouse, tmp_path):  # noqa: F811
    """``spark.sh connect``: a Spark Connect server on the cluster, one long-running application; ``tracelake run
    --master local-connect`` runs every stage as its client (no driver JVM of its own) and leaves the tables the
    local executor leaves; idle, the server gives the workers' cores back for other applications."""
    started = cluster.script("connect", timeout=200)
    assert started.returncode == 0, started.stderr
    url = started.stdout.strip().splitlines()[-1]
    assert url.startswith("sc://127.0.0.1:"), started.stdout
    env = {**cluster.env, "TRACELAKE_SPARK_DIR": str(cluster.dir)}
    wh_connect = tmp_path / "wh-connect"
    t_connect = _tracelake_run("local-connect", landing, wh_connect, env, timeout=600)
    print(f"\ntracelake run wall time: --master {url} {t_connect:.1f} s")
    got, want = warehouse_digests(wh_connect), warehouse_digests(local_warehouse)
    for table in WAREHOUSE_TABLES:
        assert got[table] == want[table], table

    (server,) = [a for a in cluster.master_state()["activeapps"] if a["name"] == "tracelake-connect"]
    assert not [a for a in cluster.master_state()["activeapps"] if a["name"] == "tracelake"]  # no app of the run's own
    deadline = time.monotonic() + 90  # executors idle 30 s are given back (spark.sh: dynamic allocation)
    while time.monotonic() < deadline and cluster.master_state()["coresused"]:
        time.sleep(1)
    assert cluster.master_state()["coresused"] == 0, cluster.master_state()["activeapps"]
    assert server["id"] in {a["id"] for a in cluster.master_state()["activeapps"]}  # the server itself stays


def test_stop_leaves_no_process(cluster):  # noqa: F811
    pids = cluster.pids()
    assert len(pids) == 4  # master + 2 workers + the Connect server
    stopped = cluster.script("stop")
    assert stopped.returncode == 0, stopped.stderr
    assert not [pid for pid in pids if group_alive(pid)]  # master, workers, executors, their Python workers
    assert not list(cluster.dir.glob("*.pid"))
    assert cluster.script("status").returncode == 3
