"""The deployed shape (issue 12): a real Airflow 3 scheduler drives the declared pipeline on a Spark
standalone cluster, with the landing zone and the warehouse (Delta tables, issue 28) on S3 and an MLflow server,
through three faults.

Processes, every one on loopback and stopped by pid at the end: ``infra/local/airflow.sh`` (scheduler,
dag-processor, triggerer, api-server; LocalExecutor), ``infra/local/spark.sh`` (a master, two workers and a Spark
Connect server on them; the ``spark_tracelake`` connection points at the server, so a Spark stage runs in its task
as a client of that one long-running application, whose executors are other JVMs and Python workers), SeaweedFS (S3
with real credentials, which the stages take from the Variable ``tracelake_storage_options`` and the Spark workers
from their own environment) and ``infra/local/mlflow.sh``. The DAG files are ``dags/`` as shipped; the environment
gives the ingest DAG intervals of a few seconds (``$TRACELAKE_INGEST_SCHEDULE`` as an ISO 8601 duration, ``_START``,
``_END``: :func:`jobs.pipeline.settings.ingest_schedule`), 3 task retries and 5 s between them, and the Variable
``tracelake_local_max_bytes`` :data:`LOCAL_MAX_BYTES`: interval 2 (3.7 MB) runs on the cluster, intervals 1 and 3
(0.1 and 2.8 MB) on the local executor in each task, as a deployment sends small intervals (both engines write the
same warehouse).

Captures land in three consecutive intervals: a real 2-rank gloo DDP job through ``capture_hooks`` (S3
sink), corpus DLRM ranks uploaded with schema-valid manifests, and one capture created (trace and
``created_at``) in the first interval whose manifest lands in the second: the first interval's run must not
take it (its commit time is the second interval's), the second must, the third must not again. A backfill
of the three intervals (``airflow backfill create``, one run at a time) runs them through the scheduler;
each ``publish`` emits the warehouse Asset, which triggers the fleet report.

Faults, injected while the backfill runs:
1. interval 2, as soon as ``normalize`` runs on the cluster: the S3 server is stopped for 15 s. The task must fail
   (the landing zone cannot be read: :mod:`jobs.landing.store`; nothing may be quarantined) and its retry succeed.
2. interval 2, while ``analyze``'s tasks run: ``kill -9`` of one Spark worker with its executor of the Connect
   server's application and its Python workers (a lost node); Spark reruns the lost tasks, or the Airflow task
   retries; the server lives on. The worker is then started again (``spark.sh start`` restarts dead workers), as a
   supervisor would.
3. interval 3, while ``normalize`` runs: ``kill -9`` of the scheduler, then ``airflow.sh start`` starts it
   again (only it); the run must finish.

Then the warehouse and the MLflow runs must equal those of ONE ``tracelake run`` over the same landing
zone (per-partition digests, fleet tables, MLflow params/metrics/tags/artifacts), and the late capture must
be in ``captures`` exactly once. Every job's partitions are written by the run of the interval that last
touched it (ddp by interval 1, late by 2, dlrm by 3), so this one comparison checks what each fault left.

*Why the intervals are seconds long.* A capture's commit time is its manifest's ``LastModified`` on the
store (``jobs/landing/interval.py``), the S3 server's own clock: a test cannot commit into a past hour,
and three real hourly intervals would take three hours. Each interval is 30 s, on the epoch grid (Airflow
aligns a fixed-delta timetable's scheduled runs to it, a backfill to the start date: on that grid they agree);
Airflow starts while the captures land.

Timings (wall time per interval, queued→running, gaps between tasks, from
the metadata DB) and what each fault did go to ``timings.json`` in the test's temp folder and to stdout.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import s3fs
from pipeline_compare import FLEET_TABLES, free_port, mlflow_content, rows_digest
from s3_server import s3, s3_env  # noqa: F401 - fixture
from spark_cluster import get_json, group_alive, running_cluster
from warehouse_digest import WAREHOUSE_TABLES, warehouse_digests

from jobs.pipeline.stages import INGEST

# the module's fixture (Airflow, the landing, the backfill through its faults) runs in its first test's time
pytestmark = [pytest.mark.integration, pytest.mark.timeout(3000)]

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
BIN = Path(PYTHON).parent
AIRFLOW_SH = REPO / "infra" / "local" / "airflow.sh"
MLFLOW_SH = REPO / "infra" / "local" / "mlflow.sh"
DLRM = "param/dlrm_kineto/worker{r}_step_12.*.pt.trace.json"
RAW = "s3://tracelake/raw"
#: The warehouse: Delta tables on the same S3 server (issue 28), written by the stages and the Spark executors.
WAREHOUSE = "s3://tracelake/warehouse"
INGEST_DAG = "tracelake_ingest"
#: Longest wait for the backfill and the fleet report, faults included (2 cores shared).
RUNS_TIMEOUT_S = 1800
#: How long the S3 server stays down, and the DAGs' delay between task retries.
S3_DOWN_S = 15
RETRY_DELAY_S = 5
#: The intervals' length: interval 1 holds a 2-rank DDP training (3-13 s measured on 2 loaded cores).
INTERVAL_S = 30
#: The DAGs' S3 client: few retries and short timeouts, so that a request to a stopped server fails in
#: seconds (the default retries for about 10 s, and a read in flight waits 60 s).
S3_CLIENT = {
    "config_kwargs": {"retries": {"max_attempts": 2, "mode": "standard"}, "connect_timeout": 3, "read_timeout": 10}
}
#: The Variable ``tracelake_local_max_bytes``: between interval 3's 2.8 MB (the three DLRM ranks, 2,772,270 bytes) and
#: interval 2's 3.7 MB, so that interval 2 (faults 1 and 2) runs on the cluster and the others on the local executor.
LOCAL_MAX_BYTES = 3_200_000
#: How long the Connect server keeps an idle executor (``spark.sh``'s ``$TRACELAKE_SPARK_IDLE_TIMEOUT_S``): through
#: interval 2, whose validating tasks keep the executors idle for minutes on a loaded machine; a new executor is a JVM
#: and Python workers to start on 2 shared cores.
SPARK_IDLE_TIMEOUT_S = 900
#: The application name of ``infra/local/spark.sh connect``'s server: the one application the Spark stages run in.
CONNECT_APP = "tracelake-connect"


def _next_multiple(t: datetime, seconds: int) -> datetime:
    """The first time after ``t`` that is a whole multiple of ``seconds`` since the epoch."""
    return datetime.fromtimestamp((int(t.timestamp()) // seconds + 1) * seconds, UTC)


def _sleep_until(t: datetime) -> None:
    while (left := (t - datetime.now(UTC)).total_seconds()) > 0:
        time.sleep(min(left, 1.0))


def _upload_capture(
    fs, job: str, rank: int, world_size: int, src: Path, created: datetime, manifest: bool = True
) -> str:
    """Upload one corpus trace as a capture of ``job``/``rank`` (trace first, ``manifest.json`` last, as
    capture_hooks does); ``manifest=False`` uploads the trace only. Returns the capture folder (no scheme)."""
    from capture_hooks.identity import Identity
    from capture_hooks.manifest import build_manifest, encode_manifest, file_entry
    from schemas.manifest import validate_manifest

    cap = f"cap-{job}-{rank}"
    folder = f"tracelake/raw/date={created:%Y-%m-%d}/job={job}/attempt=0/rank={rank:05d}/{cap}"
    if not fs.exists(f"{folder}/trace.json"):
        fs.put_file(str(src), f"{folder}/trace.json")
    if not manifest:
        return folder
    ident = Identity(
        rank=rank,
        local_rank=rank,
        world_size=world_size,
        node=0,
        attempt=0,
        launcher="torchrun",
        host="node-0",
        pid=1000 + rank,
        accelerator="cuda",
        device_name=None,
        torch_version="2.1.0",
        cuda_version="12.1",
        driver_version=None,
    )
    doc = build_manifest(
        identity=ident,
        job_id=job,
        attempt=0,
        capture_id=cap,
        created_at_ns=int(created.timestamp() * 1e9),
        step_first=None,
        step_last=None,
        profiler={"name": "torch.profiler"},
        tags={"team": "ranking"},
        files=[file_entry(str(src), "trace.json", "kineto_trace")],
    )
    validate_manifest(doc)
    fs.pipe_file(f"{folder}/manifest.json", encode_manifest(doc))
    return folder


def _airflow(env: dict, port: int, *args: str, timeout: int = 120, retry_if=None) -> subprocess.CompletedProcess:
    """``airflow ARGS`` in the environment ``infra/local/airflow.sh env`` prints for the running home.

    A command that fails on SQLite's "database is locked" is run again (3 tries, 5 s apart) when ``retry_if()`` is
    true: in WAL mode a write transaction whose snapshot another writer (the scheduler, the dag-processor) made
    stale fails at once, whatever the busy timeout; ``retry_if`` says the failed try left nothing behind."""
    script = f'eval "$({AIRFLOW_SH} env --port {port})" && exec airflow "$@"'
    for attempt in range(3):
        res = subprocess.run(
            ["bash", "-c", script, "airflow", *args],
            env=env,
            cwd=str(REPO),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        locked = "database is locked" in res.stdout + res.stderr
        if res.returncode == 0 or not locked or retry_if is None or attempt == 2 or not retry_if():
            break
        time.sleep(5)
    assert res.returncode == 0, f"airflow {' '.join(args)}:\n{res.stdout[-2000:]}\n{res.stderr[-3000:]}"
    return res


def _runs(db: Path, dag_id: str) -> list[dict]:
    """Dag runs of ``dag_id`` from the metadata DB (read-only)."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30) as con:
        con.row_factory = sqlite3.Row
        return [
            dict(r)
            for r in con.execute(
                "SELECT run_id, run_type, state, logical_date, data_interval_start, data_interval_end, queued_at, "
                "start_date, end_date FROM dag_run WHERE dag_id = ? ORDER BY data_interval_start, queued_at",
                (dag_id,),
            )
        ]


def _fleet_settled(db: Path, fleet: list[dict]) -> bool:
    """The fleet report ran on the Asset and nothing of it is pending: no queued Asset event, no run active."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30) as con:
        pending = con.execute("SELECT count(*) FROM asset_dag_run_queue").fetchone()[0]
    return (
        not pending
        and any(r["run_type"] == "asset_triggered" for r in fleet)
        and all(r["state"] in ("success", "failed") for r in fleet)
    )


def _task_instances(db: Path, dag_id: str, run_id: str) -> list[dict]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30) as con:
        con.row_factory = sqlite3.Row
        return [
            dict(r)
            for r in con.execute(
                "SELECT task_id, state, try_number, queued_dttm, start_date, end_date FROM task_instance "
                "WHERE dag_id = ? AND run_id = ? ORDER BY start_date",
                (dag_id, run_id),
            )
        ]


def _t(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text).replace(tzinfo=UTC) if text else None


def _timings(db: Path, dag_id: str, run: dict) -> dict:
    """Wall time of a run, queued→running, and the gaps between one task's end and the next one's start."""
    tis = [ti for ti in _task_instances(db, dag_id, run["run_id"]) if ti["start_date"]]
    gaps = [(_t(b["start_date"]) - _t(a["end_date"])).total_seconds() for a, b in zip(tis, tis[1:]) if a["end_date"]]
    return {
        "run_id": run["run_id"],
        "run_type": run["run_type"],
        "state": run["state"],
        "interval": [run["data_interval_start"], run["data_interval_end"]],
        "wall_s": (_t(run["end_date"]) - _t(run["start_date"])).total_seconds() if run["end_date"] else None,
        "queued_to_running_s": (_t(run["start_date"]) - _t(run["queued_at"])).total_seconds()
        if run["queued_at"] and run["start_date"]
        else None,
        "task_gaps_s": gaps,
        "task_s": {
            ti["task_id"]: (_t(ti["end_date"]) - _t(ti["start_date"])).total_seconds() for ti in tis if ti["end_date"]
        },
    }


def _wait(cond, what: str, timeout: float, step: float = 0.5):
    """Poll ``cond()`` until it returns something truthy (returned); fail naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not (got := cond()):
        assert time.monotonic() < deadline, f"not seen within {timeout:.0f} s: {what}"
        time.sleep(step)
    return got


def _ti(db: Path, run_id: str, task_id: str) -> dict | None:
    """The task instance ``task_id`` of ingest run ``run_id`` (its latest try)."""
    return next((ti for ti in _task_instances(db, INGEST_DAG, run_id) if ti["task_id"] == task_id), None)


def _running(db: Path, run_id: str, task_id: str) -> dict | None:
    ti = _ti(db, run_id, task_id)
    return ti if ti and ti["state"] == "running" else None


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _log_path(home: Path, run_id: str, task_id: str, attempt: int) -> Path:
    return home / "logs" / f"dag_id={INGEST_DAG}" / f"run_id={run_id}" / f"task_id={task_id}" / f"attempt={attempt}.log"


def _stop_s3_during_normalize(db: Path, home: Path, run: dict, s3) -> dict:  # noqa: F811
    """Fault 1: the S3 server stopped for :data:`S3_DOWN_S` s from the moment the ``normalize`` stage starts
    (its task log says ``tracelake normalize: starting``, once its Spark session is up)."""
    ti = _wait(lambda: _running(db, run["run_id"], "normalize"), "interval 2: normalize running", 900)
    log = _log_path(home, run["run_id"], "normalize", ti["try_number"])
    _wait(
        lambda: log.exists() and "tracelake normalize: starting" in log.read_text(errors="replace"),
        f"the normalize stage starting ({log})",
        300,
        step=0.2,
    )
    down = time.monotonic()
    fault = {"run_id": run["run_id"], "task": "normalize", "try_number": ti["try_number"], "down_at": _now()}
    s3.stop()
    time.sleep(max(0.0, S3_DOWN_S - (time.monotonic() - down)))
    s3.start()
    fault.update(up_at=_now(), down_s=round(time.monotonic() - down, 1))
    return fault


def _executor_logs(cluster, app_id: str) -> dict[Path, int]:  # noqa: F811
    """Every executor log of application ``app_id`` on the cluster, with its size now."""
    return {p: p.stat().st_size for p in (cluster.dir / "work" / app_id).glob("*/stderr")}


def _running_tasks(cluster, worker: str, app_id: str, before: dict[Path, int]) -> str | None:  # noqa: F811
    """The log of ``worker``'s executor of application ``app_id`` once a task runs there (``Running task``) that its
    log did not show at ``before`` (:func:`_executor_logs`): the Connect server's application is older than the stage."""
    port = cluster.ports()[f"{worker}-webui"]
    for e in get_json(f"http://127.0.0.1:{port}/json/")["executors"]:
        log = cluster.dir / "work" / app_id / str(e["id"]) / "stderr"
        if e["appid"] != app_id or not log.exists():
            continue
        with log.open("rb") as f:
            f.seek(before.get(log, 0))
            if b"Running task" in f.read():
                return str(log)
    return None


def _kill_worker_during_analyze(db: Path, run: dict, cluster) -> dict:  # noqa: F811
    """Fault 2: ``kill -9`` of worker 1's process group (worker, executor, Python workers) as soon as a task of
    analyze runs on it (an executor log of the Spark Connect server's application says ``Running task`` after
    analyze started); then ``spark.sh start`` starts the worker again."""
    _wait(lambda: _running(db, run["run_id"], "analyze"), "interval 2: analyze running", 900)

    def app():
        return next((a for a in cluster.master_state()["activeapps"] if a["name"] == CONNECT_APP), None)

    app_id = _wait(app, "the Spark Connect server's application on the master", 120)["id"]
    before = _executor_logs(cluster, app_id)
    log = _wait(
        lambda: _running_tasks(cluster, "worker-1", app_id, before),
        "an analyze task on worker-1's executor",
        180,
        step=0.2,
    )
    pid = cluster.pid_of("worker-1")
    fault = {
        "run_id": run["run_id"],
        "task": "analyze",
        "app_id": app_id,
        "worker_pid": pid,
        "killed_at": _now(),
        "app_active_when_killed": app() is not None,
        "executor_log": log,
    }
    os.killpg(pid, signal.SIGKILL)
    _wait(lambda: not group_alive(pid), "worker-1 dead", 30)
    restarted = cluster.script("start", timeout=180)
    assert restarted.returncode == 0, restarted.stderr[-2000:]
    fault.update(restarted_pid=cluster.pid_of("worker-1"), restarted_at=_now())
    return fault


def _kill_scheduler_during_normalize(db: Path, run: dict, home: Path, restart) -> dict:
    """Fault 3: ``kill -9`` of the scheduler (its pid only: the task processes it forked go on) while
    interval 3's ``normalize`` runs, then ``restart()`` (``airflow.sh start``, which starts only it)."""
    _wait(lambda: _running(db, run["run_id"], "normalize"), "interval 3: normalize running", 900)
    time.sleep(1)  # the task has started (its local-executor stage takes seconds)
    pid = int((home / "scheduler.pid").read_text())
    fault = {"run_id": run["run_id"], "task": "normalize", "scheduler_pid": pid, "killed_at": _now()}
    os.kill(pid, signal.SIGKILL)
    _wait(lambda: not _alive(pid), "the scheduler dead", 30)
    time.sleep(5)
    restart()
    fault.update(restarted_pid=int((home / "scheduler.pid").read_text()), restarted_at=_now())
    return fault


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


@pytest.fixture(scope="module")
def cluster(s3, tmp_path_factory):  # noqa: F811
    """The Spark cluster and its Spark Connect server (``spark.sh connect``: ``cluster.connect_url``); its workers hold
    the S3 server's credentials, as a worker machine's own would be (an instance role): the executors write the
    warehouse's data files."""
    with running_cluster(
        tmp_path_factory.mktemp("spark-cluster"),
        extra_env={**s3.env, "TRACELAKE_SPARK_IDLE_TIMEOUT_S": str(SPARK_IDLE_TIMEOUT_S)},
    ) as c:
        started = c.script("connect", timeout=200)
        assert started.returncode == 0, started.stderr[-3000:]
        c.connect_url = started.stdout.strip().splitlines()[-1]
        yield c


@pytest.fixture(scope="module")
def s3_reader(s3):  # noqa: F811
    """This process reads the S3 warehouse with the server's ``AWS_*`` variables (restored after the module)."""
    with s3_env(s3):
        yield s3


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """``infra/local/mlflow.sh`` on a free port; stopped (by its pid file) after the module."""
    d = tmp_path_factory.mktemp("sched_mlflow")
    env = {**os.environ, "PYTHON": PYTHON}
    res = subprocess.run(
        [str(MLFLOW_SH), "start", "--port", str(free_port()), "--dir", str(d)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    try:
        assert res.returncode == 0, res.stderr[-3000:]
        yield res.stdout.strip().splitlines()[-1]
    finally:
        subprocess.run([str(MLFLOW_SH), "stop", "--dir", str(d)], env=env, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def scheduled(s3, mlflow_server, cluster, tmp_path_factory, torch_corpus):  # noqa: F811
    """Airflow on the cluster, captures landed in three intervals, the backfill run through the faults."""
    tmp = tmp_path_factory.mktemp("scheduler")
    # the intervals [m0, m1), [m1, m2), [m2, m3), INTERVAL_S long, on the epoch grid Airflow's fixed-delta timetable
    # aligns scheduled runs to (a backfill counts from the start date: on that grid the two agree, and the unpaused
    # DAG schedules no run of its own); m0 at least 20 s away: Airflow starts meanwhile (~25 s)
    first = _next_multiple(datetime.now(UTC) + timedelta(seconds=20), INTERVAL_S)
    marks = [first + timedelta(seconds=k * INTERVAL_S) for k in range(4)]
    wh = WAREHOUSE
    home = tmp / "airflow"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PYSPARK", "SPARK_", "AWS_"))}
    env.update(
        TRACELAKE_AIRFLOW_HOME=str(home),
        TRACELAKE_DAGS_FOLDER=str(REPO / "dags"),
        VENV_BIN=str(BIN),
        PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        TRACELAKE_RAW=RAW,
        TRACELAKE_WAREHOUSE=wh,  # its credentials: the storage options below (no AWS_* in Airflow's env)
        TRACELAKE_TRACKING_URI=mlflow_server,
        TRACELAKE_STORAGE_OPTIONS=json.dumps({**s3.storage_options, **S3_CLIENT}),
        GX_ANALYTICS_ENABLED="false",
        TRACELAKE_SPARK_MASTER=cluster.connect_url,  # the Spark stages are clients of the cluster's Connect server
        TRACELAKE_LOCAL_MAX_BYTES=str(LOCAL_MAX_BYTES),  # interval 2 on the cluster, 1 and 3 in their tasks
        PYSPARK_PYTHON=PYTHON,
        TRACELAKE_INGEST_SCHEDULE=f"PT{INTERVAL_S}S",  # intervals of seconds: a duration, not cron
        TRACELAKE_INGEST_START=marks[0].isoformat(),
        TRACELAKE_INGEST_END=marks[2].isoformat(),  # the unpaused DAG schedules nothing beyond the backfill
        # a Connect client's try fails within seconds: with 5 s between tries the second try of fault 1's task can fall
        # in the S3 outage too (it did, 2026-12-06); a third retry keeps the margin
        TRACELAKE_TASK_RETRIES="3",
        TRACELAKE_TASK_RETRY_DELAY_S=str(RETRY_DELAY_S),
        AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="True",
        AIRFLOW__CORE__UNIT_TEST_MODE="False",
        AIRFLOW__CORE__PARALLELISM="4",
        AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL="5",
    )
    port = free_port()
    sh = [str(AIRFLOW_SH)]

    def start_airflow() -> None:
        res = subprocess.run([*sh, "start", "--port", str(port)], env=env, capture_output=True, text=True, timeout=400)
        assert res.returncode == 0, res.stderr[-4000:]

    schedulers: list[int] = []  # every scheduler pid: the killed one's group (its forked task processes) too
    starting = None
    try:
        starting = ThreadPoolExecutor(1).submit(start_airflow)
        fs = s3fs.S3FileSystem(skip_instance_cache=True, **s3.storage_options)
        dlrm = [next(torch_corpus.glob(DLRM.format(r=r))) for r in range(3)]
        from jobs.demo.train_ddp import run_demo_training

        # interval 1: the late capture's trace (no manifest yet), a real 2-rank gloo DDP job through capture_hooks
        _sleep_until(marks[0])
        late_created = datetime.now(UTC)
        late = _upload_capture(fs, "late", 0, 1, dlrm[2], late_created, manifest=False)
        old = {k: os.environ.get(k) for k in (*s3.env, "TRACELAKE_SPOOL_DIR")}
        os.environ.update(s3.env, TRACELAKE_SPOOL_DIR=str(tmp / "spool"))
        try:
            ddp = run_demo_training(RAW, "ddp", world_size=2, steps=8)
        finally:
            for k, v in old.items():
                os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
        assert datetime.now(UTC) < marks[1] - timedelta(seconds=1), f"the DDP training outlasted interval 1 {marks}"
        # interval 2: DLRM ranks 0 and 1, and the late capture's manifest (created in interval 1)
        _sleep_until(marks[1] + timedelta(seconds=1))
        for r in (0, 1):
            _upload_capture(fs, "dlrm", r, 3, dlrm[r], datetime.now(UTC))
        _upload_capture(fs, "late", 0, 1, dlrm[2], late_created)
        # interval 3: DLRM rank 2 (the job is rebuilt from all three ranks)
        _sleep_until(marks[2] + timedelta(seconds=1))
        _upload_capture(fs, "dlrm", 2, 3, dlrm[2], datetime.now(UTC))
        _sleep_until(marks[3] + timedelta(seconds=1))
        starting.result()
        schedulers.append(int((home / "scheduler.pid").read_text()))

        fs.invalidate_cache()
        committed = {
            p: info["LastModified"]
            for p, info in fs.find("tracelake/raw", detail=True).items()
            if p.endswith("/manifest.json")
        }
        late_commit = committed[f"{late}/manifest.json"]
        assert marks[0] <= late_created < marks[1] <= late_commit < marks[2], (marks, late_created, late_commit)
        assert all(marks[0] <= t < marks[3] for t in committed.values()), committed

        t0 = time.perf_counter()
        db = home / "airflow.db"
        no_runs = lambda: not _runs(db, INGEST_DAG)  # noqa: E731 - the failed try rolled its runs back
        _airflow(
            env,
            port,
            "backfill",
            "create",
            "--dag-id",
            INGEST_DAG,
            "--from-date",
            marks[0].isoformat(),
            "--to-date",
            marks[2].isoformat(),
            "--max-active-runs",
            "1",
            retry_if=no_runs,
        )
        _airflow(env, port, "dags", "unpause", INGEST_DAG, retry_if=lambda: True)  # idempotent
        _airflow(env, port, "dags", "unpause", "tracelake_fleet_report", retry_if=lambda: True)
        backfill = _wait(
            lambda: (b := [r for r in _runs(db, INGEST_DAG) if r["run_type"] == "backfill"]) and len(b) == 3 and b,
            "the three backfill runs",
            120,
        )
        faults = {
            "s3_down": _stop_s3_during_normalize(db, home, backfill[1], s3),
            "worker_killed": _kill_worker_during_analyze(db, backfill[1], cluster),
        }

        def restart_scheduler() -> None:
            start_airflow()
            schedulers.append(int((home / "scheduler.pid").read_text()))

        faults["scheduler_killed"] = _kill_scheduler_during_normalize(db, backfill[2], home, restart_scheduler)
        deadline = time.monotonic() + RUNS_TIMEOUT_S
        while True:
            runs = _runs(db, INGEST_DAG)
            backfill = [r for r in runs if r["run_type"] == "backfill"]
            fleet = _runs(db, "tracelake_fleet_report")
            done = len(backfill) == 3 and all(r["state"] in ("success", "failed") for r in backfill)
            if done and any(r["state"] == "failed" for r in backfill):
                break
            if done and _fleet_settled(db, fleet):
                time.sleep(10)  # settled twice in a row: no Asset event left to turn into a fleet run
                fleet = _runs(db, "tracelake_fleet_report")
                if _fleet_settled(db, fleet):
                    break
            assert time.monotonic() < deadline, f"runs not done after {RUNS_TIMEOUT_S} s: {runs} {fleet}"
            time.sleep(5)
        wall = time.perf_counter() - t0
        timings = {
            "backfill_wall_s": wall,
            "ingest": [_timings(db, INGEST_DAG, r) for r in runs],
            "fleet_report": [_timings(db, "tracelake_fleet_report", r) for r in fleet],
            "faults": faults,
        }
        (tmp / "timings.json").write_text(json.dumps(timings, indent=1, default=str))
        print("\nscheduler timings:", json.dumps(timings, indent=1, default=str))
        yield {
            "runs": runs,
            "fleet": fleet,
            "warehouse": wh,
            "tracking_uri": mlflow_server,
            "timings": timings,
            "tmp": tmp,
            "home": home,
            "db": db,
            "ddp": ddp,
            "late": late,
            "marks": marks,
            "faults": faults,
            "schedulers": schedulers,
            "cluster": cluster,
            "storage_options": s3.storage_options,
        }
    finally:
        if starting is not None:
            starting.exception()  # waits: stop only what has finished starting
        subprocess.run([*sh, "stop", "--port", str(port)], env=env, capture_output=True, timeout=300)
        for pid in schedulers:  # last resort: `stop` signals every group airflow.sh started (<home>/*.groups)
            if group_alive(pid):
                os.killpg(pid, signal.SIGKILL)
        assert subprocess.run([*sh, "status", "--port", str(port)], env=env, capture_output=True).returncode == 3
        _wait(lambda: not [pid for pid in schedulers if group_alive(pid)], f"scheduler groups {schedulers} gone", 30)


def test_backfill_runs_every_interval_and_the_asset_triggers_the_fleet_report(scheduled):
    backfill = [r for r in scheduled["runs"] if r["run_type"] == "backfill"]
    marks = scheduled["marks"]
    assert [(_t(r["data_interval_start"]), _t(r["data_interval_end"])) for r in backfill] == list(
        zip(marks[:3], marks[1:])
    ), backfill
    assert [r["state"] for r in backfill] == ["success"] * 3, f"see the task logs under {scheduled['home']}/logs"
    # the unpaused DAG scheduled nothing beyond the backfill (end_date); nothing ran twice
    assert all(r["run_type"] == "backfill" for r in scheduled["runs"]), scheduled["runs"]
    for r in backfill:
        states = {ti["task_id"]: ti["state"] for ti in _task_instances(scheduled["db"], INGEST_DAG, r["run_id"])}
        assert states == {t: "success" for t in ("settings", "discover", *(st.name for st in INGEST))}, (r, states)
    # discover chose the engine by the interval's bytes: interval 2 on the cluster, 1 and 3 in their tasks
    engines = []
    for r in backfill:
        line = next(x for x in _log(scheduled["home"], r["run_id"], "discover", 1).splitlines() if "engine: " in x)
        engines.append(
            "local" if "the local executor in each task" in line else "spark" if "): Spark" in line else line
        )
    assert engines == ["local", "spark", "local"], engines
    fleet = scheduled["fleet"]
    assert fleet and all(r["state"] == "success" for r in fleet), fleet
    # unpausing runs the latest daily interval (catchup=False), and a UTC midnight the test runs across that day's;
    # every other fleet run came from the Asset
    assert {r["run_type"] for r in fleet} <= {"asset_triggered", "scheduled"}, fleet
    daily = sorted(_t(r["logical_date"]) for r in fleet if r["run_type"] == "scheduled")
    assert len(set(daily)) == len(daily) and all(
        t == t.replace(hour=0, minute=0, second=0, microsecond=0) for t in daily
    ), fleet
    assert all(t >= marks[0] for t in daily[1:]), fleet
    last_ingest = max(_t(r["end_date"]) for r in backfill)
    assert any(r["run_type"] == "asset_triggered" and _t(r["end_date"]) >= last_ingest for r in fleet), fleet


def _captures(wh: str):
    """The ``captures`` table's rows (its latest Delta snapshot) as pandas, read through the storage seam."""
    from jobs.warehouse import read_pandas

    return read_pandas(str(wh), ["captures"])["captures"]


def _log(home: Path, run_id: str, task_id: str, attempt: int) -> str:
    return _log_path(home, run_id, task_id, attempt).read_text(errors="replace")


def test_s3_outage_during_normalize_fails_the_try_and_the_retry_succeeds(scheduled, s3_reader):
    fault = scheduled["faults"]["s3_down"]
    assert fault["down_s"] >= S3_DOWN_S, fault
    ti = _ti(scheduled["db"], fault["run_id"], "normalize")
    assert ti["state"] == "success" and ti["try_number"] > fault["try_number"], (ti, fault)
    first = _log(scheduled["home"], fault["run_id"], "normalize", fault["try_number"])
    # the stage failed on the store, naming the landing zone; it quarantined nothing
    assert "the landing zone cannot be" in first, first[-3000:]
    caps = _captures(scheduled["warehouse"])
    assert set(caps["status"]) == {"ingested"}, caps[caps["status"] != "ingested"][["uri", "reason"]]


def test_a_worker_killed_during_analyze_is_recovered(scheduled):
    fault = scheduled["faults"]["worker_killed"]
    spark_cluster = scheduled["cluster"]
    assert fault["app_active_when_killed"], fault
    ti = _ti(scheduled["db"], fault["run_id"], "analyze")
    assert ti["state"] == "success", ti
    # the driver (the Connect server) lost the executor that was running the task, and the server lives on: the
    # lost tasks ran again elsewhere (or the Airflow task's retry did), the interval after it ran on the same server
    assert "Lost executor" in (spark_cluster.dir / "connect.log").read_text(errors="replace")
    state = spark_cluster.master_state()
    assert fault["app_id"] in {a["id"] for a in state["activeapps"] if a["name"] == CONNECT_APP}, state["activeapps"]
    assert not [a for a in state["activeapps"] + state["completedapps"] if a["name"] != CONNECT_APP], state
    assert "running the stage as a Spark Connect client of sc://" in _log(
        scheduled["home"], fault["run_id"], "analyze", ti["try_number"]
    )
    assert not group_alive(fault["worker_pid"]) and fault["restarted_pid"] != fault["worker_pid"]
    assert state["aliveworkers"] == 2, state["workers"]


def test_a_scheduler_killed_mid_run_is_restarted_and_the_run_finishes(scheduled):
    fault = scheduled["faults"]["scheduler_killed"]
    assert fault["restarted_pid"] != fault["scheduler_pid"] and scheduled["schedulers"][-1] == fault["restarted_pid"]
    assert not _alive(fault["scheduler_pid"])
    run = next(r for r in scheduled["runs"] if r["run_id"] == fault["run_id"])
    assert run["state"] == "success" and _t(run["end_date"]) > datetime.fromisoformat(fault["restarted_at"]), run


def test_the_late_capture_is_ingested_once_by_the_interval_it_landed_in(scheduled, s3_reader):
    caps = _captures(scheduled["warehouse"])
    late = caps[caps["job_id"].astype(str) == "late"]
    assert len(late) == 1 and late["status"].iloc[0] == "ingested", late
    assert caps["capture_id"].is_unique
    records = {}
    fs = s3fs.S3FileSystem(skip_instance_cache=True, **scheduled["storage_options"])
    for p in sorted(fs.glob(f"{scheduled['warehouse'].removeprefix('s3://')}/_runs/ingest/*.json")):
        rec = json.loads(fs.cat_file(p))
        records[rec["since"]] = rec["job_ids"]
    marks = scheduled["marks"]
    # interval 1 never saw the late capture (its manifest landed in interval 2), interval 2 took it, 3 did not
    assert "late" not in records[marks[0].isoformat()] and "late" in records[marks[1].isoformat()], records
    assert "late" not in records[marks[2].isoformat()] and "dlrm" in records[marks[2].isoformat()], records
    assert "ddp" in records[marks[0].isoformat()], records


def test_scheduled_backfill_equals_one_tracelake_run(scheduled, s3_reader, tmp_path):
    """Three scheduled intervals on the Spark cluster into the S3 warehouse and one ``tracelake run`` over the whole
    landing zone on its default local executor into a local one leave equal warehouse tables (per-partition digests), equal fleet tables and equal
    MLflow runs (params, metrics, tags, status, artifact names)."""
    from jobs.pipeline.run import run_pipeline

    wh = tmp_path / "warehouse"
    t0 = time.perf_counter()
    res = run_pipeline(
        RAW,
        str(wh),
        tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}",
        storage_options=scheduled["storage_options"],
        executor="local",
    )
    cli_s = time.perf_counter() - t0
    print(f"\ntracelake run over the same landing zone (in-process, local executor): {cli_s:.1f} s")
    (scheduled["tmp"] / "tracelake_run_s.txt").write_text(f"{cli_s:.1f}\n")
    assert res.job_ids == ["ddp", "dlrm", "late"]
    sched_wh = scheduled["warehouse"]
    cli, dag = warehouse_digests(wh), warehouse_digests(sched_wh)
    for table in WAREHOUSE_TABLES:
        if table == "neuron_summary":  # no Neuron capture in this landing zone
            continue
        assert cli[table], f"{table}: empty, the comparison would prove nothing"
        assert cli[table] == dag[table], table
    for table in FLEET_TABLES:
        assert rows_digest(wh, table) == rows_digest(sched_wh, table), table
    cli_runs, sched_runs = mlflow_content(res.tracking_uri), mlflow_content(scheduled["tracking_uri"])
    assert sorted(cli_runs) == sorted(sched_runs) == [(j, "0") for j in ("ddp", "dlrm", "late")]
    for key, run in cli_runs.items():
        assert run == sched_runs[key], key
