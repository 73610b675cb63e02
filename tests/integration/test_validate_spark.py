"""Great Expectations on Spark over a real warehouse (2 DLRM ranks), and the gate it puts before MLflow.

The warehouse is built by the main job (``run_pipeline(..., log_to_mlflow=False)``) from two real
DLRM traces; a second warehouse gets a corrupted copy of ``steps`` (a duplicated row, a percentage of
150). Validation runs on GX's Spark engine (``pandas_max_rows=0``).
"""

from __future__ import annotations

import json
import shutil

import pytest

pytestmark = pytest.mark.integration

DLRM = "param/dlrm_kineto/worker{r}_step_12.*.pt.trace.json"


@pytest.fixture(scope="module")
def dlrm_wh(spark, torch_corpus, tmp_path_factory):
    from jobs.pipeline.run import run_pipeline

    landing = tmp_path_factory.mktemp("vlanding")
    job = landing / "dlrm2"
    job.mkdir()
    for r in (0, 1):
        src = next(torch_corpus.glob(DLRM.format(r=r)))
        shutil.copyfile(src, job / src.name)
    wh = tmp_path_factory.mktemp("vwh")
    res = run_pipeline(str(landing), str(wh), spark=spark, log_to_mlflow=False)
    assert res.job_ids == ["dlrm2"]
    return landing, wh, res


def test_real_warehouse_passes_on_the_spark_engine(spark, dlrm_wh):
    from jobs.validate.__main__ import main
    from jobs.validate.marks import read_marks
    from jobs.validate.suites import validate_tables
    from jobs.warehouse import read_spark

    landing, wh, res = dlrm_wh
    n_before = read_spark(spark, str(wh), "events").count()
    norm = validate_tables(spark, str(wh), "normalize", res.job_ids, n_discovered=2, pandas_max_rows=0)
    assert norm.success, norm.summary()
    ev = norm.tables["normalize/events"]
    assert ev.engine == "spark" and ev.n_rows == int(res.captures["n_events"].sum()) == n_before
    ana = validate_tables(spark, str(wh), "analyze", res.job_ids)  # small tables: GX pandas engine
    assert ana.success, ana.summary()
    assert ana.tables["analyze/steps"].engine == "pandas" and ana.tables["analyze/ranks"].n_rows == 2
    # marks sit in the table folders; Spark still reads the tables unchanged
    assert (wh / "events" / "_validation.json").is_file()
    marks = read_marks(str(wh), "dlrm2")
    assert {"captures", "events", "steps", "ranks"} <= set(marks) and set(marks.values()) == {"passed"}, marks
    assert read_spark(spark, str(wh), "events").count() == n_before
    # CLI: the whole landing zone is counted (every raw file accounted for)
    assert main(["--warehouse", str(wh), "--stage", "normalize", "--raw", str(landing)]) == 0


@pytest.fixture(scope="module")
def bad_wh(spark, dlrm_wh, tmp_path_factory):
    """A copy of the warehouse whose ``steps`` has a duplicated row (rank 1) and idle_pct 150 (rank 0), read and
    written through the storage seam (each table a Delta table of its own)."""
    from pyspark.sql import functions as F

    from jobs.warehouse import read_spark, write_table

    _, wh, _ = dlrm_wh
    bad = tmp_path_factory.mktemp("badwh")
    for t in ("captures", "ranks"):
        write_table(read_spark(spark, str(wh), t), str(bad), t)
    steps = read_spark(spark, str(wh), "steps")
    steps = steps.withColumn("idle_pct", F.when(F.col("rank") == 0, F.lit(150.0)).otherwise(F.col("idle_pct")))
    steps = steps.unionByName(steps.filter(F.col("rank") == 1))
    write_table(steps, str(bad), "steps")
    return bad


def test_corrupted_batch_is_caught_marked_and_reported(spark, bad_wh, tmp_path):
    from jobs.validate.__main__ import main
    from jobs.validate.marks import read_marks
    from jobs.validate.suites import validate_tables

    report = validate_tables(spark, str(bad_wh), "analyze", ["dlrm2"], pandas_max_rows=0)
    assert not report.success and report.failed_jobs() == {"dlrm2"}
    failed = {c.id: c for c in report.tables["analyze/steps"].failed}
    assert failed["unique:key"].unexpected_count == 2 and failed["unique:key"].jobs == {"dlrm2": 2}
    assert failed["pct_range:idle_pct"].unexpected_count == 1 and failed["pct_range:idle_pct"].partial_unexpected == [
        "150.0"
    ]
    assert report.tables["analyze/ranks"].success
    assert read_marks(str(bad_wh), "dlrm2")["steps"] == "failed"
    out = tmp_path / "report.json"
    assert (
        main(
            [
                "--warehouse",
                str(bad_wh),
                "--stage",
                "analyze",
                "--job",
                "dlrm2",
                "--json",
                str(out),
                "--html",
                str(tmp_path / "report.html"),
            ]
        )
        == 1
    )
    assert json.loads(out.read_text())["failed_jobs"] == ["dlrm2"]
    assert "pct_range:idle_pct" in (tmp_path / "report.html").read_text()


def test_failed_job_run_is_marked_failed_in_mlflow(spark, dlrm_wh, bad_wh, tmp_path):
    from mlflow.tracking import MlflowClient

    from jobs.publish.job_runs import publish_jobs
    from jobs.publish.reports import JOB_REPORT_ARTIFACT, load_job_tables, log_job_report
    from jobs.publish.tracking import log_jobs
    from jobs.publish.validation import log_validation
    from jobs.validate.suites import validate_tables
    from jobs.warehouse import read_frames

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    for wh, ok in ((dlrm_wh[1], True), (bad_wh, False)):
        t = read_frames(spark, str(wh), ("captures", "ranks", "steps"), ["dlrm2"])
        run_id = log_jobs(uri, str(wh), t["captures"], t["ranks"], t["steps"])[("dlrm2", 0)]
        report = validate_tables(spark, str(wh), "analyze", ["dlrm2"], mark=False)
        assert log_validation(uri, run_id, report) is ok
        run = client.get_run(run_id)
        assert run.info.status == ("FINISHED" if ok else "FAILED")
        assert run.data.tags["tracelake.validation"] == ("passed" if ok else "failed")
        assert run.data.metrics["validation/failed_checks"] == (0 if ok else 2)
        arts = {a.path for a in client.list_artifacts(run_id, "validation")}
        assert {"validation/validation.html", "validation/validation.json", "validation/gx_results.json"} <= arts
        tables = load_job_tables(str(wh), "dlrm2", 0)
        assert {"captures", "ranks", "steps"} <= set(tables)
        if not ok:  # the corrupted copy has only those three tables: the others are left out, not empty
            assert set(tables) == {"captures", "ranks", "steps"}
        log_job_report(uri, run_id, tables, validation=report)
        assert JOB_REPORT_ARTIFACT in {a.path for a in client.list_artifacts(run_id, "report")}
        html = open(client.download_artifacts(run_id, JOB_REPORT_ARTIFACT, str(tmp_path)), encoding="utf-8").read()
        assert 'data-plot="step_breakdown"' in html and ("badge failed" in html) is (not ok)
        # the publish stage: the same tags, metrics and files in the run's own calls, the old run replaced
        published = publish_jobs(uri, str(wh), ["dlrm2"], validation=report)[("dlrm2", 0)]
        again = client.get_run(published)
        assert (
            again.data.tags["tracelake.replaces"] == run_id and client.get_run(run_id).info.lifecycle_stage == "deleted"
        )
        assert again.info.status == run.info.status
        for key in ("tracelake.validation", "tracelake.validation.failed_tables"):
            assert again.data.tags[key] == run.data.tags[key], key
        for key in ("validation/checks", "validation/failed_checks", "step_time_p50_ms"):
            assert again.data.metrics[key] == run.data.metrics[key], key
        files = {a.path for a in client.list_artifacts(published)}
        files |= {a.path for d in ("validation", "report") for a in client.list_artifacts(published, d)}
        assert {"steps.csv", "ranks.csv", "captures.json", JOB_REPORT_ARTIFACT} | arts <= files
        page = client.download_artifacts(published, JOB_REPORT_ARTIFACT, str(tmp_path / "published"))
        assert ("badge failed" in open(page, encoding="utf-8").read()) is (not ok)
