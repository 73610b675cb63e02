"""``python -m jobs.publish.report``: the fleet run (trends, worst offenders, fleet tables) and job reports, on the corpus warehouse."""

from __future__ import annotations

import pytest
from rendered_page import Page

pytestmark = pytest.mark.integration


def test_fleet_run_and_job_reports(spark, corpus_warehouse, tmp_path):
    from mlflow.tracking import MlflowClient

    from jobs.publish.report.__main__ import main
    from jobs.publish.reports import JOB_REPORT_ARTIFACT
    from jobs.publish.tracking import log_jobs
    from jobs.warehouse import read_spark

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
    colls = read_spark(spark, str(wh), "collectives").toPandas()  # the storage seam: the table's Delta snapshot
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


def rows(page: Page, key: str) -> list[dict]:
    return page.tables[key].records()


def test_fleet_report_numbers_agree_with_fleet_stats(corpus_warehouse, tmp_path):
    """Issue 26: every per-job number of the fleet report is its fleet_stats row (run_summary's): DLRM's job
    step time p50 (slowest rank per ProfilerStep, 19.90 ms) and GPU idle % read the same in every table; jobs
    without ProfilerStep are counted, judged on their whole trace and named where left out; the window is shown;
    the straggler ranking names the straggler_rank finding's rank first."""
    from jobs.fleet.stats import run_metadata_frame, run_summary
    from jobs.publish.report.fleet_tables import fleet_metrics, insights_window, window_text
    from jobs.publish.reports import load_fleet_tables, publish_fleet_report

    wh, _ = corpus_warehouse
    out = tmp_path / "fleet.html"
    assert publish_fleet_report(None, str(wh), html=str(out)) is None
    text = out.read_text()
    page = Page(text)
    t = load_fleet_tables(str(wh))
    summary = run_summary(t["steps"], t["ranks"], t["captures"]).set_index("value")
    stats = t["fleet_stats"]
    jobs = stats[(stats["dimension"] == "job") & (stats["date"] == "all")].set_index("value")
    assert sorted(summary.index) == sorted(jobs.index)  # run_summary is the fleet_stats job row
    dlrm = "param-dlrm_kineto#0"
    p50, idle = f"{jobs.loc[dlrm, 'step_time_p50_ns'] / 1e6:,.2f}", f"{jobs.loc[dlrm, 'idle_pct']:.1f}"
    assert p50 == f"{summary.loc[dlrm, 'step_time_p50_ns'] / 1e6:,.2f}" == "19.90"
    seen = 0
    for key in ("worst-idle", "worst-step", "worst-exposed"):
        for row in rows(page, key):
            if row["job"] == dlrm:
                assert (row["job step time p50, ms"], row["GPU idle, %"]) == (p50, idle), key
                seen += 1
    assert seen >= 1  # top 10 per table: DLRM is in some of them
    by_name = {r["job name"]: r for r in rows(page, "by-job_name")}
    runs = run_metadata_frame(t["captures"]).set_index("job")
    name = runs.loc[dlrm, "job_name"]
    if (runs["job_name"] == name).sum() == 1 and name in by_name:  # its job name's only run, in the top rows
        assert (by_name[name]["job step time p50, ms"], by_name[name]["GPU idle, %"]) == (p50, idle)
    date = jobs_dates = stats[(stats["dimension"] == "job") & (stats["date"] != "all")]
    date = jobs_dates.loc[jobs_dates["value"] == dlrm, "date"].min()
    if (jobs_dates["date"] == date).sum() == 1:  # the only job that day: the day's median is DLRM's
        day = {r["date"]: r for r in rows(page, "daily")}[date]
        assert (day["job step time p50, ms: median job that day"], day["GPU idle, %: median job that day"]) == (
            p50,
            idle,
        )
    # cards: words with units, the median over the same rows
    m = fleet_metrics(stats, t["captures"])
    assert page.cards["jobs"] == f"{len(jobs)}" and not any(k.startswith("fleet/") for k in page.cards)
    assert page.cards["job step time p50, ms: median job"] == f"{m['fleet/step_time_p50_ms_median']:,.2f}"
    assert m["fleet/step_time_p50_ms_median"] * 1e6 == pytest.approx(jobs["step_time_p50_ns"].dropna().median())
    assert page.cards["GPU idle, %: median job"] == f"{jobs['idle_pct'].dropna().median():.1f}"
    # jobs without ProfilerStep: counted, with a GPU idle % from their whole trace, named where left out
    trace_only = sorted(jobs.index[jobs["n_steps"] == 0])
    assert trace_only, "the corpus has traces without ProfilerStep (alexnet)"
    worst_idle = {r["job"]: r for r in rows(page, "worst-idle")}
    step_caption = page.tables["worst-step"].caption
    for j in trace_only:
        assert j in step_caption and "no ProfilerStep" in step_caption
        if j in worst_idle:
            assert worst_idle[j]["analysis windows"] == "whole trace" and worst_idle[j]["job step time p50, ms"] == "—"
    # the window of the windowed sections is on the page
    assert f"fleet impact and host health over {window_text(insights_window(stats, t))}" in text
    # straggler ranks: DLRM's rank 7 (the straggler_rank finding's) first
    stragglers = [r for r in rows(page, "stragglers") if r["job"] == dlrm]
    assert stragglers[0]["rank"] == "7" and stragglers[0]["finding"] == "straggler_rank"
    assert stragglers[0]["measured by"] == "last arrivals"


def test_batched_job_reports_equal_one_by_one(corpus_warehouse):
    """The job reports of a publish run, rendered in batches that read their tables once, with the headline logged
    to MLflow handed in (``render_reports(..., heads=headline(...))``), are the pages each run renders alone."""
    import re

    from jobs.publish.headline import headline
    from jobs.publish.report.html import render_job_report
    from jobs.publish.reports import batch_size, load_job_tables, render_reports
    from jobs.warehouse import read_pandas

    wh, _ = corpus_warehouse
    t = read_pandas(str(wh), ("captures", "ranks", "steps"))
    runs = sorted({(str(j), int(a)) for j, a in zip(t["captures"]["job_id"], t["captures"]["attempt"])})[:5]
    heads = headline(t["steps"], t["ranks"], t["captures"])
    pages = dict(render_reports(str(wh), runs, heads=heads))
    assert list(pages) == runs and 1 <= batch_size(len(runs)) <= 16
    stamp = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC")  # the page's generation time
    for job, attempt in runs:
        alone = render_job_report(load_job_tables(str(wh), job, attempt))
        assert stamp.sub("", pages[(job, attempt)]) == stamp.sub("", alone), job
    assert sum("data-plot=" in p for p in pages.values()) >= 3  # the pages have plots to compare
