"""``python -m jobs.publish.report``: the fleet run (trends, worst offenders, fleet tables) and job reports, on the corpus warehouse."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration


def test_fleet_run_and_job_reports(spark, corpus_warehouse, tmp_path):
    from mlflow.tracking import MlflowClient

    from jobs.publish.report.__main__ import main
    from jobs.publish.reports import JOB_REPORT_ARTIFACT
    from jobs.publish.tracking import log_jobs

    wh, result = corpus_warehouse
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    html = tmp_path / "fleet.html"
    for _ in range(2):  # re-run the same day: the day's fleet run is reused
        assert main(["--warehouse", str(wh), "--tracking-uri", uri, "--day", "2026-11-30", "--html", str(html)]) == 0
    assert main(["--warehouse", str(wh), "--tracking-uri", uri, "--day", "2026-12-01"]) == 0
    exp = client.get_experiment_by_name("tracelake-fleet")
    runs = {r.data.tags["tracelake.fleet_date"]: r for r in client.search_runs([exp.experiment_id])}
    assert sorted(runs) == ["2026-11-30", "2026-12-01"]
    run = runs["2026-11-30"]
    assert run.info.run_name == "fleet-2026-11-30" and run.info.status == "FINISHED"
    m = run.data.metrics
    assert m["fleet/n_jobs"] == len(result.ranks.groupby(["job_id", "attempt"])) and m["fleet/n_captures"] == len(
        result.captures
    )
    n_dates = result.captures["date"].astype(str).nunique()
    history = client.get_metric_history(run.info.run_id, "fleet/daily/n_jobs")
    assert len(history) == n_dates  # one point per capture date, not duplicated by the re-run
    assert sum(p.value for p in history) == m["fleet/n_jobs"]
    # the re-run replaced the day's run: one point per metric, the first run deleted
    assert len(client.get_metric_history(run.info.run_id, "fleet/n_jobs")) == 1
    replaced = run.data.tags["tracelake.replaces"]
    assert client.get_run(replaced).info.lifecycle_stage == "deleted"
    assert "report/fleet_report.html" in {a.path for a in client.list_artifacts(run.info.run_id, "report")}
    text = html.read_text()
    assert 'data-plot="fleet_trends"' in text and 'data-table="worst-idle"' in text
    # the fleet tables rebuilt by the report: breakdown by hardware etc. and per-hardware metrics
    assert 'data-table="by-hardware"' in text and 'data-table="fleet-top-kernels"' in text
    hw = [k for k in m if k.startswith("fleet/hardware/") and k.endswith("/step_time_p50_ms")]
    with_steps = result.captures[
        result.captures["job_id"].isin(set(result.steps["job_id"])) & (result.captures["status"] == "ingested")
    ]
    assert len(hw) == with_steps["device_name"].fillna("cpu").nunique() >= 5  # hardware of the jobs with steps
    assert m["fleet/all/step_time_p99_ms"] >= m["fleet/all/step_time_p90_ms"] >= m["fleet/all/step_time_p50_ms"] > 0

    job = "param-dlrm_kineto"
    colls = spark.read.parquet(str(wh / "collectives")).toPandas()
    run_id = log_jobs(
        uri,
        str(wh),
        result.captures[result.captures["job_id"] == job],
        result.ranks[result.ranks["job_id"] == job],
        result.steps[result.steps["job_id"] == job],
        collectives=colls,
    )[(job, 0)]
    dlrm = client.get_run(run_id).data
    # DLRM: rank 7 is the rank most often last to arrive at the matched all-to-all / all-reduce calls
    last = colls[(colls["job_id"] == job) & colls["is_last_arrival"] & (colls["n_ranks_matched"] >= 2)]
    expect = last.groupby("rank")["match_key"].nunique().idxmax()
    assert dlrm.metrics["straggler/rank"] == expect == 7 and dlrm.tags["tracelake.straggler_rank"] == "7"
    assert dlrm.metrics["collectives/n_calls"] == colls[colls["job_id"] == job]["match_key"].nunique()
    assert 0 < dlrm.metrics["exposed_comm_pct"] < 100
    assert (
        main(["--warehouse", str(wh), "--tracking-uri", uri, "--job", job, "--html", str(tmp_path / "job.html")]) == 0
    )
    assert JOB_REPORT_ARTIFACT in {a.path for a in client.list_artifacts(run_id, "report")}
    job_html = (tmp_path / "job.html").read_text()
    assert 'data-plot="step_breakdown"' in job_html and 'data-plot="top_kernels"' in job_html
    assert main(["--warehouse", str(wh), "--no-mlflow", "--job", "no-such-job"]) == 2
