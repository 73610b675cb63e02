"""A real Airflow 3 scheduler drives the declared pipeline end to end (issue 12, item 2).

``infra/local/airflow.sh start`` runs scheduler, dag-processor, triggerer and api-server as separate
processes on loopback; the landing zone is on the local SeaweedFS S3 server (real credentials, read by
the DAG through the Variable ``tracelake_storage_options``); MLflow is ``infra/local/mlflow.sh``'s server.
Captures land in three consecutive data intervals: a real 2-rank gloo DDP job through ``capture_hooks``
(S3 sink), corpus DLRM ranks uploaded with schema-valid manifests, and one capture created (trace and
``created_at``) in the first interval whose manifest lands in the second: the first interval's run must not
take it (its commit time is the second interval's), the second must, the third must not again. A
backfill of the three intervals (``airflow backfill create``, one run at a time) runs them through the
scheduler; each ``publish`` emits the warehouse Asset, which triggers the fleet report.
The warehouse and the MLflow runs must then equal those of ONE ``tracelake run`` over the same landing
zone, and the late capture must be in ``captures`` exactly once.

*Why the intervals are one minute here.* A capture's commit time is its manifest's ``LastModified`` on
the store (``jobs/landing/interval.py``), the S3 server's own clock: a test cannot commit into a past
hour, and three real hourly intervals would take three hours. The test therefore serves the production
DAG file with only its timetable changed, to one-minute intervals from the test's first minute to its
third (``start_date``/``end_date``, so that the unpaused DAG schedules nothing else); every task, the
settings resolution (``ingest_interval``) and the Asset wiring are the production file's.

Every process it starts (S3 server, MLflow server, the four Airflow processes) is stopped by pid at the
end. About 12 minutes on 2 shared cores (~2 min per interval, 3 min of landing, Airflow start, the
``tracelake run``). Timings (wall time per interval, queued→running, gaps between tasks, from the metadata
DB) go to ``timings.json`` in the test's temp folder and to stdout (``-s``).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import s3fs
from pipeline_compare import FLEET_TABLES, free_port, mlflow_content, rows_digest
from s3_server import s3  # noqa: F401 - fixture
from warehouse_digest import WAREHOUSE_TABLES, warehouse_digests

from jobs.pipeline.stages import INGEST

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
BIN = Path(PYTHON).parent
AIRFLOW_SH = REPO / "infra" / "local" / "airflow.sh"
MLFLOW_SH = REPO / "infra" / "local" / "mlflow.sh"
DLRM = "param/dlrm_kineto/worker{r}_step_12.*.pt.trace.json"
RAW = "s3://tracelake/raw"
#: Longest wait for the backfill and the fleet report (2 cores shared: ~2-3 min per interval).
RUNS_TIMEOUT_S = 1500

#: The production timetable, and what the test serves instead (filled with the test's minutes).
PROD_SCHEDULE = ('schedule=CronDataIntervalTimetable("@hourly", timezone="UTC"),\n'
                 '    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),\n')
TEST_SCHEDULE = ('schedule=CronDataIntervalTimetable("* * * * *", timezone="UTC"),\n'
                 '    start_date=pendulum.parse("{start}"), end_date=pendulum.parse("{end}"),\n')
#: The test's DAG file. It must name "airflow" and "dag": the dag-processor's safe mode skips files without both words.
DAG_WRAPPER = '''"""Airflow DAG tracelake_ingest as in {src}, with one-minute data intervals (written by test_scheduler.py)."""
from pathlib import Path

_src = Path({src!r}).read_text()
assert _src.count({prod!r}) == 1, "the production timetable changed: update test_scheduler.py"
exec(compile(_src.replace({prod!r}, {test!r}), __file__, "exec"))
'''


def _minute(t: datetime) -> datetime:
    return t.replace(second=0, microsecond=0)


def _sleep_until(t: datetime) -> None:
    while (left := (t - datetime.now(timezone.utc)).total_seconds()) > 0:
        time.sleep(min(left, 1.0))


def _upload_capture(fs, job: str, rank: int, world_size: int, src: Path, created: datetime,
                    manifest: bool = True) -> str:
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
    ident = Identity(rank=rank, local_rank=rank, world_size=world_size, node=0, attempt=0, launcher="torchrun",
                     host="node-0", pid=1000 + rank, accelerator="cuda", device_name=None, torch_version="2.1.0",
                     cuda_version="12.1", driver_version=None)
    doc = build_manifest(identity=ident, job_id=job, attempt=0, capture_id=cap,
                         created_at_ns=int(created.timestamp() * 1e9), step_first=None, step_last=None,
                         profiler={"name": "torch.profiler"}, tags={"team": "ranking"},
                         files=[file_entry(str(src), "trace.json", "kineto_trace")])
    validate_manifest(doc)
    fs.pipe_file(f"{folder}/manifest.json", encode_manifest(doc))
    return folder


def _airflow(env: dict, port: int, *args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    """``airflow ARGS`` in the environment ``infra/local/airflow.sh env`` prints for the running home."""
    script = f'eval "$({AIRFLOW_SH} env --port {port})" && exec airflow "$@"'
    res = subprocess.run(["bash", "-c", script, "airflow", *args], env=env, cwd=str(REPO), capture_output=True,
                         text=True, timeout=timeout)
    assert res.returncode == 0, f"airflow {' '.join(args)}:\n{res.stdout[-2000:]}\n{res.stderr[-3000:]}"
    return res


def _runs(db: Path, dag_id: str) -> list[dict]:
    """Dag runs of ``dag_id`` from the metadata DB (read-only)."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30) as con:
        con.row_factory = sqlite3.Row
        return [dict(r) for r in con.execute(
            "SELECT run_id, run_type, state, logical_date, data_interval_start, data_interval_end, queued_at, "
            "start_date, end_date FROM dag_run WHERE dag_id = ? ORDER BY data_interval_start, queued_at", (dag_id,))]


def _fleet_settled(db: Path, fleet: list[dict]) -> bool:
    """The fleet report ran on the Asset and nothing of it is pending: no queued Asset event, no run active."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30) as con:
        pending = con.execute("SELECT count(*) FROM asset_dag_run_queue").fetchone()[0]
    return (not pending and any(r["run_type"] == "asset_triggered" for r in fleet)
            and all(r["state"] in ("success", "failed") for r in fleet))


def _task_instances(db: Path, dag_id: str, run_id: str) -> list[dict]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30) as con:
        con.row_factory = sqlite3.Row
        return [dict(r) for r in con.execute(
            "SELECT task_id, state, try_number, queued_dttm, start_date, end_date FROM task_instance "
            "WHERE dag_id = ? AND run_id = ? ORDER BY start_date", (dag_id, run_id))]


def _t(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc) if text else None


def _timings(db: Path, dag_id: str, run: dict) -> dict:
    """Wall time of a run, queued→running, and the gaps between one task's end and the next one's start."""
    tis = [ti for ti in _task_instances(db, dag_id, run["run_id"]) if ti["start_date"]]
    gaps = [(_t(b["start_date"]) - _t(a["end_date"])).total_seconds() for a, b in zip(tis, tis[1:]) if a["end_date"]]
    return {"run_id": run["run_id"], "run_type": run["run_type"], "state": run["state"],
            "interval": [run["data_interval_start"], run["data_interval_end"]],
            "wall_s": (_t(run["end_date"]) - _t(run["start_date"])).total_seconds() if run["end_date"] else None,
            "queued_to_running_s": (_t(run["start_date"]) - _t(run["queued_at"])).total_seconds()
            if run["queued_at"] and run["start_date"] else None,
            "task_gaps_s": gaps, "task_s": {ti["task_id"]: (_t(ti["end_date"]) - _t(ti["start_date"])).total_seconds()
                                           for ti in tis if ti["end_date"]}}


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """``infra/local/mlflow.sh`` on a free port; stopped (by its pid file) after the module."""
    d = tmp_path_factory.mktemp("sched_mlflow")
    env = {**os.environ, "PYTHON": PYTHON}
    res = subprocess.run([str(MLFLOW_SH), "start", "--port", str(free_port()), "--dir", str(d)], env=env,
                         capture_output=True, text=True, timeout=300)
    try:
        assert res.returncode == 0, res.stderr[-3000:]
        yield res.stdout.strip().splitlines()[-1]
    finally:
        subprocess.run([str(MLFLOW_SH), "stop", "--dir", str(d)], env=env, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def scheduled(s3, mlflow_server, tmp_path_factory, torch_corpus):  # noqa: F811
    """Airflow started with the minute-interval DAG, captures landed in three intervals, the backfill run."""
    tmp = tmp_path_factory.mktemp("scheduler")
    dags = tmp / "dags"
    dags.mkdir()
    (dags / "tracelake_fleet_report.py").symlink_to(REPO / "dags" / "tracelake_fleet_report.py")

    wh = tmp / "warehouse"
    home = tmp / "airflow"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PYSPARK", "SPARK_", "AWS_"))}
    env.update(TRACELAKE_AIRFLOW_HOME=str(home), TRACELAKE_DAGS_FOLDER=str(dags), VENV_BIN=str(BIN),
               PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
               TRACELAKE_RAW=RAW, TRACELAKE_WAREHOUSE=str(wh), TRACELAKE_TRACKING_URI=mlflow_server,
               TRACELAKE_STORAGE_OPTIONS=json.dumps(s3.storage_options), GX_ANALYTICS_ENABLED="false",
               TRACELAKE_TASK_RETRIES="0",  # a failed task fails its run at once, no 5-minute retry delay
               # small batches on 2 cores: a JVM that starts fast (C1 JIT only) halves each spark-submit's start
               TRACELAKE_SPARK_CONF=json.dumps({"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 "
                                                "-XX:+UseSerialGC", "spark.driver.memory": "2g"}),
               AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="True", AIRFLOW__CORE__UNIT_TEST_MODE="False",
               AIRFLOW__CORE__PARALLELISM="4",
               AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL="5")
    port = free_port()
    sh = [str(AIRFLOW_SH)]
    started = subprocess.run([*sh, "start", "--port", str(port)], env=env, capture_output=True, text=True, timeout=400)
    try:
        assert started.returncode == 0, started.stderr[-4000:]
        # the intervals: the next three whole minutes; the DAG file appears now (the dag-processor lists the
        # folder every few seconds), so that its start_date is in the future when it is first parsed
        now = datetime.now(timezone.utc)
        w1 = _minute(now) + timedelta(minutes=2 if now.second > 45 else 1)
        marks = [w1 + timedelta(minutes=k) for k in range(4)]  # intervals [w1, w2), [w2, w3), [w3, w4)
        test_schedule = TEST_SCHEDULE.format(start=marks[0].isoformat(), end=marks[2].isoformat())
        (dags / "tracelake_ingest.py").write_text(DAG_WRAPPER.format(
            src=str(REPO / "dags" / "tracelake_ingest.py"), prod=PROD_SCHEDULE, test=test_schedule))

        fs = s3fs.S3FileSystem(skip_instance_cache=True, **s3.storage_options)
        dlrm = [next(torch_corpus.glob(DLRM.format(r=r))) for r in range(3)]
        from jobs.demo.train_ddp import run_demo_training

        # interval 1: the late capture's trace (no manifest yet), a real 2-rank gloo DDP job through capture_hooks
        _sleep_until(marks[0])
        late_created = datetime.now(timezone.utc)
        late = _upload_capture(fs, "late", 0, 1, dlrm[2], late_created, manifest=False)
        old = {k: os.environ.get(k) for k in (*s3.env, "TRACELAKE_SPOOL_DIR")}
        os.environ.update(s3.env, TRACELAKE_SPOOL_DIR=str(tmp / "spool"))
        try:
            ddp = run_demo_training(RAW, "ddp", world_size=2, steps=8)
        finally:
            for k, v in old.items():
                os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
        # interval 2: DLRM ranks 0 and 1, and the late capture's manifest (created in interval 1)
        _sleep_until(marks[1] + timedelta(seconds=1))
        for r in (0, 1):
            _upload_capture(fs, "dlrm", r, 3, dlrm[r], datetime.now(timezone.utc))
        _upload_capture(fs, "late", 0, 1, dlrm[2], late_created)
        # interval 3: DLRM rank 2 (the job is rebuilt from all three ranks)
        _sleep_until(marks[2] + timedelta(seconds=1))
        _upload_capture(fs, "dlrm", 2, 3, dlrm[2], datetime.now(timezone.utc))
        _sleep_until(marks[3] + timedelta(seconds=1))

        fs.invalidate_cache()
        committed = {p: info["LastModified"] for p, info in fs.find("tracelake/raw", detail=True).items()
                     if p.endswith("/manifest.json")}
        late_commit = committed[f"{late}/manifest.json"]
        assert _minute(late_created) == marks[0] and marks[1] <= late_commit < marks[2], (late_created, late_commit)
        assert all(marks[0] <= t < marks[3] for t in committed.values()), committed

        t0 = time.perf_counter()
        _airflow(env, port, "backfill", "create", "--dag-id", "tracelake_ingest", "--from-date", marks[0].isoformat(),
                 "--to-date", marks[2].isoformat(), "--max-active-runs", "1")
        _airflow(env, port, "dags", "unpause", "tracelake_ingest")
        _airflow(env, port, "dags", "unpause", "tracelake_fleet_report")
        db = home / "airflow.db"
        deadline = time.monotonic() + RUNS_TIMEOUT_S
        while True:
            runs = _runs(db, "tracelake_ingest")
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
        timings = {"backfill_wall_s": wall, "ingest": [_timings(db, "tracelake_ingest", r) for r in runs],
                   "fleet_report": [_timings(db, "tracelake_fleet_report", r) for r in fleet]}
        (tmp / "timings.json").write_text(json.dumps(timings, indent=1, default=str))
        print("\nscheduler timings:", json.dumps(timings, indent=1, default=str))
        yield {"runs": runs, "fleet": fleet, "warehouse": wh, "tracking_uri": mlflow_server, "timings": timings,
               "tmp": tmp, "home": home, "db": db, "ddp": ddp, "late": late, "marks": marks,
               "storage_options": s3.storage_options}
    finally:
        subprocess.run([*sh, "stop", "--port", str(port)], env=env, capture_output=True, timeout=300)
        assert subprocess.run([*sh, "status", "--port", str(port)], env=env, capture_output=True).returncode == 3


def test_backfill_runs_every_interval_and_the_asset_triggers_the_fleet_report(scheduled):
    backfill = [r for r in scheduled["runs"] if r["run_type"] == "backfill"]
    marks = scheduled["marks"]
    assert [(_t(r["data_interval_start"]), _t(r["data_interval_end"])) for r in backfill] == list(
        zip(marks[:3], marks[1:])), backfill
    assert [r["state"] for r in backfill] == ["success"] * 3, f"see the task logs under {scheduled['home']}/logs"
    # the unpaused DAG scheduled nothing beyond the backfill (end_date); nothing ran twice
    assert all(r["run_type"] == "backfill" for r in scheduled["runs"]), scheduled["runs"]
    for r in backfill:
        states = {ti["task_id"]: ti["state"] for ti in _task_instances(scheduled["db"], "tracelake_ingest", r["run_id"])}
        assert states == {t: "success" for t in ("settings", "discover", *(st.name for st in INGEST))}, (r, states)
    fleet = scheduled["fleet"]
    assert fleet and all(r["state"] == "success" for r in fleet), fleet
    # unpausing runs the latest daily interval (catchup=False); every other fleet run came from the Asset
    assert {r["run_type"] for r in fleet} <= {"asset_triggered", "scheduled"}, fleet
    assert sum(r["run_type"] == "scheduled" for r in fleet) <= 1, fleet
    last_ingest = max(_t(r["end_date"]) for r in backfill)
    assert any(r["run_type"] == "asset_triggered" and _t(r["end_date"]) >= last_ingest for r in fleet), fleet


def test_the_late_capture_is_ingested_once_by_the_interval_it_landed_in(scheduled):
    import pandas as pd

    caps = pd.read_parquet(scheduled["warehouse"] / "captures")
    late = caps[caps["job_id"].astype(str) == "late"]
    assert len(late) == 1 and late["status"].iloc[0] == "ingested", late
    assert caps["capture_id"].is_unique
    records = {}
    for p in sorted((scheduled["warehouse"] / "_runs" / "ingest").glob("*.json")):
        rec = json.loads(p.read_text())
        records[rec["since"]] = rec["job_ids"]
    marks = scheduled["marks"]
    # interval 1 never saw the late capture (its manifest landed in interval 2), interval 2 took it, 3 did not
    assert "late" not in records[marks[0].isoformat()] and "late" in records[marks[1].isoformat()], records
    assert "late" not in records[marks[2].isoformat()] and "dlrm" in records[marks[2].isoformat()], records
    assert "ddp" in records[marks[0].isoformat()], records


def _without_batch_checks(run: dict) -> dict:
    """An MLflow run's content less the metric ``validation/checks``, which depends on the batch, not the job."""
    return {**run, "metrics": {k: v for k, v in run["metrics"].items() if k != "validation/checks"}}


def test_scheduled_backfill_equals_one_tracelake_run(scheduled, spark, tmp_path):
    """Three scheduled intervals and one ``tracelake run`` over the whole landing zone leave equal warehouse
    tables (per-partition digests), equal fleet tables and equal MLflow runs (params, metrics, tags, status,
    artifact names)."""
    from jobs.pipeline.run import run_pipeline

    wh = tmp_path / "warehouse"
    t0 = time.perf_counter()
    res = run_pipeline(RAW, str(wh), tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}",
                       storage_options=scheduled["storage_options"], spark=spark)
    cli_s = time.perf_counter() - t0
    print(f"\ntracelake run over the same landing zone (in-process, shared local[2] session): {cli_s:.1f} s")
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
        # validation/checks counts the checks of the whole batch a job was validated in (jobs.publish.validation),
        # so it depends on which jobs shared the interval: ddp alone in interval 1 had no kernels/findings rows
        # (30 checks fewer) than in one run over everything. Left out until it counts the job's own tables.
        run, sched = _without_batch_checks(run), _without_batch_checks(sched_runs[key])
        assert run == sched, key
