"""The Airflow DAGs end to end: dag.test() with real spark-submit, real Great Expectations, a real
``mlflow server`` on loopback, on a landing zone of real corpus traces (symlinked) with manifests:
a multi-rank torch job, a CPU-only trace, a Neuron device profile and a truncated (quarantined) trace.

The DAG and ``tracelake run`` run the same declared stages (:mod:`jobs.pipeline.stages`), so over the
same interval they must leave equal warehouse tables and equal MLflow runs
(:func:`test_dag_and_tracelake_run_leave_the_same_tables_and_mlflow_runs`).

Airflow runs in subprocesses (its own AIRFLOW_HOME in tmp, ``airflow db migrate`` first), so its
in-process execution API and configuration never meet this pytest process or its Spark session.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pipeline_compare import FLEET_TABLES, free_port, mlflow_content, rows_digest
from warehouse_digest import WAREHOUSE_TABLES, warehouse_digests

from jobs.pipeline.stages import INGEST

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
BIN = Path(PYTHON).parent
DLRM = "param/dlrm_kineto/worker{r}_step_12.*.pt.trace.json"
TINY = "HolisticTraceAnalysis/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
NEURON = (
    REPO.parent
    / "shared"
    / "corpus"
    / "neuron"
    / "AnchovyPark__npu_profiling_code"
    / "matmul"
    / "neuron_profile_results"
    / "profile_128x128x520.json"
)
#: Jobs of the interval: normalized (all) and with an ingested capture.
JOBS = ["broken", "dlrm", "tiny", "trn"]
#: The interval the ingest run covers: [10:00, 11:00) UTC on 2026-03-01.
SINCE = datetime(2026, 3, 1, 10, tzinfo=UTC)
UNTIL = SINCE + timedelta(hours=1)


def _capture(
    root: Path,
    job: str,
    rank: int,
    world_size: int,
    src: Path,
    committed: datetime | None,
    name: str | None = None,
    kind: str = "kineto_trace",
) -> Path:
    """One landing-zone capture folder: ``src`` symlinked (as ``name``, default ``trace.json[.gz]``), and
    (unless ``committed`` is None) a schema-valid manifest.json written by capture_hooks' builder, with
    mtime ``committed``."""
    from capture_hooks.identity import Identity
    from capture_hooks.manifest import build_manifest, encode_manifest, file_entry
    from schemas.manifest import validate_manifest

    when = committed or SINCE
    folder = root / f"date={when:%Y-%m-%d}" / f"job={job}" / "attempt=0" / f"rank={rank:05d}" / f"cap-{job}-{rank}"
    folder.mkdir(parents=True)
    name = name or ("trace.json.gz" if src.name.endswith(".gz") else "trace.json")
    (folder / name).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, folder / name)
    if committed is None:  # still being written: no manifest yet
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
    manifest = build_manifest(
        identity=ident,
        job_id=job,
        attempt=0,
        capture_id=folder.name,
        created_at_ns=int(when.timestamp() * 1e9),
        step_first=None,
        step_last=None,
        profiler={"name": "torch.profiler"},
        tags={"team": "ranking"},
        files=[file_entry(str(src), name, kind)],
    )
    validate_manifest(manifest)
    (folder / "manifest.json").write_bytes(encode_manifest(manifest))
    os.utime(folder / "manifest.json", (when.timestamp(), when.timestamp()))
    return folder


@pytest.fixture(scope="module")
def landing(tmp_path_factory, torch_corpus) -> Path:
    """dlrm rank 0 committed before the interval and rank 1 inside it (the job must be rebuilt from
    both); a tiny CPU-only trace, a Neuron profile and a truncated trace inside; a job committed after
    the interval; a capture still pending."""
    import gzip

    root = tmp_path_factory.mktemp("landing")
    truncated = tmp_path_factory.mktemp("truncated") / "trace.json"
    truncated.write_bytes(gzip.decompress((torch_corpus / TINY).read_bytes())[:5000])
    dlrm = [next(torch_corpus.glob(DLRM.format(r=r))) for r in range(3)]
    _capture(root, "dlrm", 0, 8, dlrm[0], SINCE - timedelta(minutes=30))
    _capture(root, "dlrm", 1, 8, dlrm[1], SINCE + timedelta(minutes=10))
    _capture(root, "tiny", 0, 1, torch_corpus / TINY, SINCE + timedelta(minutes=59, seconds=59))
    _capture(root, "trn", 0, 1, NEURON, SINCE + timedelta(minutes=20), name="neuron/profile.json", kind="neuron_json")
    _capture(root, "broken", 0, 1, truncated, SINCE + timedelta(minutes=30))
    _capture(root, "later", 0, 8, dlrm[2], UNTIL)  # [since, until) excludes until itself
    _capture(root, "pending", 0, 8, dlrm[2], None)
    return root


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """A migrated Airflow home and a running ``mlflow server`` (both started in parallel); stopped after."""
    tmp = tmp_path_factory.mktemp("airflow_stack")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PYSPARK", "SPARK_"))}
    env.update(
        AIRFLOW_HOME=str(tmp / "airflow"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__DAGS_FOLDER=str(REPO / "dags"),
        AIRFLOW__CORE__UNIT_TEST_MODE="False",
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        GX_ANALYTICS_ENABLED="false",
        TRACELAKE_TASK_RETRIES="0",
    )  # a failed task ends dag.test() instead of waiting for its retry
    mlflow_dir = tmp / "mlflow"
    mlflow = subprocess.Popen(
        [str(REPO / "infra/local/mlflow.sh"), "start", "--port", str(free_port()), "--dir", str(mlflow_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**env, "PYTHON": PYTHON},
    )
    migrate = subprocess.run(
        [str(BIN / "airflow"), "db", "migrate"], env=env, capture_output=True, text=True, timeout=300
    )
    out, err = mlflow.communicate(timeout=300)
    try:
        assert migrate.returncode == 0, migrate.stderr[-3000:]
        assert mlflow.returncode == 0, err[-3000:]
        yield {"env": env, "tracking_uri": out.strip().splitlines()[-1], "tmp": tmp}
    finally:
        subprocess.run(
            [str(REPO / "infra/local/mlflow.sh"), "stop", "--dir", str(mlflow_dir)],
            env={**env, "PYTHON": PYTHON},
            capture_output=True,
            timeout=60,
        )


def _python(code: str, env: dict, timeout: int, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PYTHON, "-c", code, *args], env=env, cwd=str(REPO), capture_output=True, text=True, timeout=timeout
    )


IMPORT_CHECK = """
import json, sys
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder=sys.argv[1] if len(sys.argv) > 1 else None)
heavy = sorted(m for m in ("pyspark", "pandas", "mlflow", "great_expectations", "pyarrow", "jobs.normalize.job")
               if m in sys.modules)
from airflow import plugins_manager
links = sorted(type(link).__name__ for link in plugins_manager.get_operator_extra_links())
print(json.dumps({"errors": {k: str(v) for k, v in bag.import_errors.items()}, "dags": sorted(bag.dag_ids),
                  "heavy": heavy, "links": links}))
"""


def test_dag_folder_imports_with_zero_errors(stack):
    res = _python(IMPORT_CHECK, stack["env"], 180)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["errors"] == {}
    assert {"tracelake_ingest", "tracelake_fleet_report"} <= set(out["dags"])
    # DAG files only wire: parsing them imports no Spark, MLflow, GX (pandas/pyarrow may come with Airflow itself)
    assert not {"pyspark", "mlflow", "great_expectations", "jobs.normalize.job"} & set(out["heavy"]), out["heavy"]
    # the tracelake plugin (an entry point of the package) registers the tasks' "MLflow runs" button with Airflow
    assert "MlflowRunsLink" in out["links"], out["links"]


RUN_DAGS = """
import importlib.util, json, sys, time
from datetime import datetime

def load(path):
    spec = importlib.util.spec_from_file_location(path.rsplit("/", 1)[-1][:-3], path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod

args = json.loads(sys.argv[1])
out = {}
for name, path, var, logical_date, skip in args["runs"]:
    dag = getattr(load(path), var)
    t0 = time.monotonic()
    dr = dag.test(logical_date=datetime.fromisoformat(logical_date), mark_success_pattern=skip or None)
    out[name] = {"state": str(dr.state), "wall_s": time.monotonic() - t0, "since": dr.data_interval_start.isoformat() if dr.data_interval_start else None,
                 "until": dr.data_interval_end.isoformat() if dr.data_interval_end else None,
                 "tasks": {ti.task_id: str(ti.state) for ti in dr.get_task_instances()}}
from airflow.models.asset import AssetEvent, AssetModel
from airflow.models.xcom import XComModel
from airflow.utils.session import create_session
with create_session() as s:
    out["asset_events"] = s.query(AssetEvent).join(AssetModel, AssetEvent.asset_id == AssetModel.id).filter(
        AssetModel.name == "tracelake_warehouse").count()
    out["links"] = {f"{x.dag_id}/{x.task_id}/{x.key}": x.value for x in s.query(XComModel).filter(
        XComModel.key.like("_link_%"))}
print("RESULT " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def dag_runs(stack, landing):
    """Run tracelake_ingest for [SINCE, UNTIL), then tracelake_fleet_report, with dag.test() in one subprocess."""
    wh = stack["tmp"] / "warehouse"
    env = {
        **stack["env"],
        "AIRFLOW_VAR_TRACELAKE_RAW": str(landing),
        "AIRFLOW_VAR_TRACELAKE_WAREHOUSE": str(wh),
        "AIRFLOW_VAR_TRACELAKE_TRACKING_URI": stack["tracking_uri"],
        # the Spark path: every interval on Spark (the default, a small interval on the local executor in each task,
        # is test_a_small_interval_runs_on_the_local_executor_in_each_task)
        "AIRFLOW_VAR_TRACELAKE_LOCAL_MAX_BYTES": "0",
        # small batches on 2 cores: a JVM that starts fast (C1 JIT only) halves each spark-submit's start
        "AIRFLOW_VAR_TRACELAKE_SPARK_CONF": json.dumps(
            {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC", "spark.driver.memory": "2g"}
        ),
    }
    # connection spark_tracelake is deliberately not defined: the stages must default to local mode
    ingest, fleet = str(REPO / "dags/tracelake_ingest.py"), str(REPO / "dags/tracelake_fleet_report.py")
    runs = [
        ["ingest", ingest, "ingest_dag", UNTIL.isoformat(), ""],
        # an hour with no commit (and no earlier successful run): discover skips the rest
        ["ingest_empty", ingest, "ingest_dag", (SINCE - timedelta(hours=1)).isoformat(), ""],
        ["fleet", fleet, "fleet_report_dag", UNTIL.isoformat(), ""],
    ]
    log = stack["tmp"] / "dag_test.log"
    try:
        res = _python(RUN_DAGS, env, 1200, json.dumps({"runs": runs}))
    except subprocess.TimeoutExpired as exc:
        log.write_bytes((exc.stdout or b"") + b"\n--- stderr ---\n" + (exc.stderr or b""))
        raise AssertionError(f"dag.test timed out; log: {log}") from exc
    log.write_text(res.stdout + "\n--- stderr ---\n" + res.stderr)
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("RESULT ")]
    assert res.returncode == 0 and lines, (
        f"dag.test failed (log: {stack['tmp'] / 'dag_test.log'}):\n{res.stderr[-4000:]}"
    )
    return {
        "result": json.loads(lines[-1][len("RESULT ") :]),
        "warehouse": wh,
        "tracking_uri": stack["tracking_uri"],
        "log": stack["tmp"] / "dag_test.log",
    }


def _table(wh: Path, name: str):
    """A warehouse table's rows (its latest Delta snapshot) as pandas, read through the storage seam."""
    from jobs.warehouse import read_pandas

    return read_pandas(str(wh), [name])[name]


def test_ingest_dag_runs_every_stage_for_its_interval(dag_runs):
    ingest = dag_runs["result"]["ingest"]
    assert ingest["state"] == "success", (ingest, dag_runs["log"])
    assert (ingest["since"], ingest["until"]) == (SINCE.isoformat(), UNTIL.isoformat())
    assert ingest["tasks"] == {t: "success" for t in ("settings", "discover", *(st.name for st in INGEST))}
    assert dag_runs["result"]["asset_events"] == 1  # publish marked the warehouse as updated


def test_ingest_dag_skips_an_interval_without_commits(dag_runs):
    empty = dag_runs["result"]["ingest_empty"]
    assert empty["state"] == "success", (empty, dag_runs["log"])
    assert (empty["since"], empty["until"]) == (
        (SINCE - timedelta(hours=2)).isoformat(),
        (SINCE - timedelta(hours=1)).isoformat(),
    )
    assert {t for t, s in empty["tasks"].items() if s == "skipped"} == {"discover", *(st.name for st in INGEST)}
    assert "0 captures in 2026-03-01T08:00–09:00" in dag_runs["log"].read_text(encoding="utf-8")


def test_warehouse_holds_the_jobs_touched_in_the_interval(dag_runs):
    wh = dag_runs["warehouse"]
    caps = _table(wh, "captures")
    # dlrm: rank 1 landed in the interval, rank 0 before it; the job is rebuilt from both so that the
    # (date, job_id) partition overwrite keeps rank 0. "later" (committed at until) and "pending" are not there.
    assert sorted(caps["job_id"].astype(str).unique()) == JOBS
    dlrm = caps[caps["job_id"].astype(str) == "dlrm"]
    assert sorted(dlrm["rank"]) == [0, 1] and set(dlrm["status"]) == {"ingested"}
    assert dlrm["capture_id"].is_unique
    events = _table(wh, "events")
    assert len(events) == int(caps["n_events"].sum()) > 0
    steps, ranks = _table(wh, "steps"), _table(wh, "ranks")
    assert sorted(ranks[ranks["job_id"].astype(str) == "dlrm"]["rank"]) == [0, 1]
    assert (steps["step_time_ns"] > 0).all() and len(steps) > 0
    record = json.loads(next((wh / "_runs" / "ingest").glob("*.json")).read_text())
    assert record["since"] == SINCE.isoformat() and record["job_ids"] == JOBS
    assert record["ingested_job_ids"] == ["dlrm", "tiny", "trn"]
    assert record["n_quarantined"] == 1 and record["quarantined"][0]["job_id"] == "broken"
    assert {n: st["status"] for n, st in record["stages"].items()} == {st.name: "done" for st in INGEST}
    assert any("job=pending" in p for p in record["pending"])
    marks = json.loads((wh / "captures" / "_validation.json").read_text())  # the GX gates marked what they validated
    assert "dlrm" in json.dumps(marks)


def test_mlflow_server_has_one_run_per_job_and_the_fleet_run(dag_runs):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=dag_runs["tracking_uri"])
    exp = client.get_experiment_by_name("tracelake")
    runs = {r.data.tags["tracelake.job_id"]: r for r in client.search_runs([exp.experiment_id])}
    assert set(runs) == set(JOBS)
    dlrm = runs["dlrm"]
    assert dlrm.data.metrics["n_ranks"] == 2 and dlrm.data.params["world_size"] == "8"
    assert dlrm.data.metrics["step_time_p50_ms"] > 0
    assert {"steps.csv", "ranks.csv", "captures.json", "findings.json", "report", "validation"} <= {
        a.path for a in client.list_artifacts(dlrm.info.run_id)
    }  # the job report and validation report too
    assert runs["trn"].data.metrics["neuron/n_profiles"] == 1  # Neuron metrics, as tracelake run logs them
    # the publish task's log says where each run and its job report open on the server's UI
    page = f"{dag_runs['tracking_uri'].rstrip('/')}/#/experiments/{exp.experiment_id}/runs/{dlrm.info.run_id}"
    assert (
        f"MLflow run of job dlrm (attempt 0): {page}; job report: {page}/artifacts/report/job_report.html"
        in dag_runs["log"].read_text(encoding="utf-8")
    )
    # its "MLflow runs" button (an Airflow extra link, stored as an XCom when the task ends): the experiment's page
    links = dag_runs["result"]["links"]
    assert list(links) == ["tracelake_ingest/publish/_link_MlflowRunsLink"], links
    assert f"{dag_runs['tracking_uri'].rstrip('/')}/#/experiments/{exp.experiment_id}" == links[
        "tracelake_ingest/publish/_link_MlflowRunsLink"
    ].strip('"'), links

    fleet = dag_runs["result"]["fleet"]
    assert fleet["state"] == "success", (fleet, dag_runs["log"])
    assert fleet["tasks"] == {"settings": "success", "fleet_report": "success", "maintain": "success"}
    fexp = client.get_experiment_by_name("tracelake-fleet")
    assert fexp is not None
    fruns = client.search_runs([fexp.experiment_id])
    assert len(fruns) == 1
    assert fruns[0].data.metrics["fleet/n_jobs"] == len(JOBS)  # jobs.publish.reports's metric names


def test_dag_and_tracelake_run_leave_the_same_tables_and_mlflow_runs(dag_runs, landing, tmp_path):
    """The scheduled path (its stages spark-submitted) and ``tracelake run`` on its default local executor over
    the same interval: equal warehouse tables (content digests) and equal MLflow content per job (params,
    metrics, tags, status, artifact names)."""
    from jobs.pipeline.run import run_pipeline

    wh = tmp_path / "warehouse"
    res = run_pipeline(
        str(landing),
        str(wh),
        tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}",
        executor="local",
        since=SINCE,
        until=UNTIL,
    )
    assert res.job_ids == JOBS
    dag_wh = dag_runs["warehouse"]
    cli, dag = warehouse_digests(wh), warehouse_digests(dag_wh)
    for table in WAREHOUSE_TABLES:
        assert cli[table], f"{table}: empty, the comparison would prove nothing"
        assert cli[table] == dag[table], table
    for table in FLEET_TABLES:
        assert rows_digest(wh, table) == rows_digest(dag_wh, table), table

    cli_runs, dag_runs_ = mlflow_content(res.tracking_uri), mlflow_content(dag_runs["tracking_uri"])
    assert sorted(cli_runs) == sorted(dag_runs_) == [(j, "0") for j in JOBS]
    for key, run in cli_runs.items():
        assert run == dag_runs_[key], key
    dlrm = cli_runs[("dlrm", "0")]["artifacts"]
    assert {"report/job_report.html", "findings.json", "steps.csv", "ranks.csv"} <= set(dlrm)
    assert any(p.startswith("validation/") for p in dlrm)


def _ingest_alone(env: dict, landing: Path, wh: Path, tmp_path: Path) -> tuple[dict, subprocess.CompletedProcess]:
    """One ingest run of ``[SINCE, UNTIL)`` with ``dag.test()`` in a fresh Airflow home (``env["AIRFLOW_HOME"]``) into
    the warehouse ``wh``, MLflow in ``tmp_path/mlflow.db``; ``(its RESULT entry, the process)``, asserted a success."""
    env = {
        **env,
        "AIRFLOW_VAR_TRACELAKE_RAW": str(landing),
        "AIRFLOW_VAR_TRACELAKE_WAREHOUSE": str(wh),
        "AIRFLOW_VAR_TRACELAKE_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}",
    }
    migrate = subprocess.run([str(BIN / "airflow"), "db", "migrate"], env=env, capture_output=True, text=True,
                             timeout=300)  # fmt: skip
    assert migrate.returncode == 0, migrate.stderr[-3000:]
    runs = [["ingest", str(REPO / "dags/tracelake_ingest.py"), "ingest_dag", UNTIL.isoformat(), ""]]
    res = _python(RUN_DAGS, env, 900, json.dumps({"runs": runs}))
    (tmp_path / "dag_test.log").write_text(res.stdout + "\n--- stderr ---\n" + res.stderr)
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("RESULT ")]
    assert res.returncode == 0 and lines, res.stderr[-4000:]
    ingest = json.loads(lines[-1][len("RESULT ") :])["ingest"]
    assert ingest["state"] == "success", (ingest, tmp_path / "dag_test.log")
    return ingest, res


def test_ingest_dag_on_a_spark_connect_server_leaves_the_same_tables(dag_runs, stack, landing, tmp_path):
    """Connection ``spark_tracelake`` = a Spark Connect server (``infra/local/spark.sh connect``, here on local[2]):
    no Spark task spark-submits or starts a JVM; each runs its stage as a client of the one server, and the
    warehouse equals the spark-submit run's. Both DAG runs' wall times are printed."""
    spark_dir, home, wh = tmp_path / "spark", tmp_path / "airflow", tmp_path / "warehouse"
    env = {
        **stack["env"],
        "AIRFLOW_HOME": str(home),
        "TRACELAKE_SPARK_DIR": str(spark_dir),
        "TRACELAKE_SPARK_CONNECT_PORT": "0",
        "PYTHON": PYTHON,
    }
    sh = [str(REPO / "infra/local/spark.sh")]
    started = subprocess.run(
        [*sh, "connect", "--master", "local[2]"], env=env, capture_output=True, text=True, timeout=200
    )
    try:
        assert started.returncode == 0, started.stderr[-3000:]
        url = started.stdout.strip().splitlines()[-1]
        host, port = url.rsplit(":", 1)
        env.update(
            AIRFLOW_CONN_SPARK_TRACELAKE=json.dumps({"conn_type": "spark", "host": host, "port": int(port)}),
            AIRFLOW_VAR_TRACELAKE_LOCAL_MAX_BYTES="0",  # Spark, whatever the interval's size
        )
        ingest, res = _ingest_alone(env, landing, wh, tmp_path)
        submitted = dag_runs["result"]["ingest"]["wall_s"]
        print(
            f"\ningest DAG run (dag.test): Spark Connect {ingest['wall_s']:.1f} s, spark-submit per task {submitted:.1f} s"
        )
    finally:
        subprocess.run([*sh, "stop"], env=env, capture_output=True, timeout=120)
    out = res.stdout + res.stderr
    assert f"Spark Connect client of {url}" in out and "spark-submit" not in out.replace("no spark-submit", "")
    got, want = warehouse_digests(wh), warehouse_digests(dag_runs["warehouse"])
    for table in WAREHOUSE_TABLES:
        assert got[table] == want[table], table
    for table in FLEET_TABLES:
        assert rows_digest(wh, table) == rows_digest(dag_runs["warehouse"], table), table


def test_a_small_interval_runs_on_the_local_executor_in_each_task(dag_runs, stack, landing, tmp_path):
    """The default (``tracelake_local_max_bytes`` not set: 64 MB): the interval's 2 MB run each engine stage on the
    local executor inside its task, with no Spark at all; each task's log says so and why, ``publish`` renders in
    the pool too, and the warehouse equals the Spark run's."""
    home, wh = tmp_path / "airflow", tmp_path / "warehouse"
    env = {k: v for k, v in stack["env"].items() if not k.startswith("AIRFLOW_CONN_")}
    env["AIRFLOW_HOME"] = str(home)
    ingest, res = _ingest_alone(env, landing, wh, tmp_path)
    print(f"\ningest DAG run (dag.test): local executor in each task {ingest['wall_s']:.1f} s, "
          f"spark-submit per task {dag_runs['result']['ingest']['wall_s']:.1f} s")  # fmt: skip
    out = res.stdout + res.stderr
    why = "2.1 MB in 5 file(s) < 64.0 MB (tracelake_local_max_bytes): the local executor in each task, no Spark"
    engine_stages = [st.name for st in INGEST if st.spark]
    assert out.count(f"engine: {why}") == 1 + len(engine_stages), out[-4000:]  # discover's log and each stage's
    for name in engine_stages:
        assert f"tracelake {name}: starting on the local executor" in out, name
    assert "spark-submit" not in out and "SparkSession" not in out and "Spark Connect" not in out
    got, want = warehouse_digests(wh), warehouse_digests(dag_runs["warehouse"])
    for table in WAREHOUSE_TABLES:
        assert got[table] == want[table], table
    for table in FLEET_TABLES:
        assert rows_digest(wh, table) == rows_digest(dag_runs["warehouse"], table), table
    assert sorted(mlflow_content(f"sqlite:///{tmp_path / 'mlflow.db'}")) == [(j, "0") for j in JOBS]
