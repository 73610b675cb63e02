"""``tracelake compare`` on two real corpus jobs, referenced by their MLflow run ids.

The jobs are HTA's ``trace_diff/control`` (HTA's own TraceDiff input) and ``trace_filter`` (2 ranks
of a similar recommendation model), normalized and analyzed once for the session
(``corpus_warehouse``). Kernel/op sums are checked against Spark SQL over ``events`` written here.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration

A, B = "HolisticTraceAnalysis-trace_diff-control", "HolisticTraceAnalysis-trace_filter"


def test_compare_two_corpus_jobs_by_run_id(spark, corpus_warehouse, tmp_path):
    from mlflow.tracking import MlflowClient

    from jobs.publish.compare import compare_command
    from jobs.publish.tracking import log_jobs
    from jobs.warehouse import read_frames, read_spark

    wh, _ = corpus_warehouse
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    t = read_frames(spark, str(wh), ("captures", "ranks", "steps"), [A, B])
    runs = log_jobs(uri, str(wh), t["captures"], t["ranks"], t["steps"])
    html = tmp_path / "cmp.html"
    c = compare_command(runs[(A, 0)], runs[(B, 0)], warehouse=str(wh), tracking_uri=uri, html=str(html))
    assert (c.a_label, c.b_label) == (f"{A}#0", f"{B}#0") and (c.a_ranks, c.b_ranks) == (1, 2)

    # kernel time per rank and step (mean over ranks), straight from the events with Spark SQL
    read_spark(spark, str(wh), "events", [A, B]).createOrReplaceTempView("cmp_events")  # the storage seam
    direct = {}
    for job in (A, B):
        rows = spark.sql(f"""
            WITH e AS (SELECT * FROM cmp_events WHERE job_id = '{job}' AND ph = 'X' AND dur_ns IS NOT NULL
                       AND step IS NOT NULL)
            SELECT name, sum(dur_ns) / (SELECT count(DISTINCT rank, step) FROM e) AS per_step
            FROM e WHERE is_gpu AND category NOT IN ('gpu_user_annotation', 'cuda_sync') GROUP BY name""").collect()
        direct[job] = {r["name"]: r["per_step"] for r in rows}
    kern = c.ops[c.ops["group"] == "kernel"].set_index("name")
    assert set(kern.index) == set(direct[A]) | set(direct[B])
    for name, v in direct[A].items():
        assert kern.loc[name, "a_ns_per_step"] == pytest.approx(v)
    for name, v in direct[B].items():
        assert kern.loc[name, "b_ns_per_step"] == pytest.approx(v)
    assert set(c.added()[lambda d: d["group"] == "kernel"]["name"]) == set(direct[B]) - set(direct[A])
    assert set(c.removed()[lambda d: d["group"] == "kernel"]["name"]) == set(direct[A]) - set(direct[B])
    assert len(c.slower()) and len(c.faster())

    # a comparison run with its own HTML report
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("tracelake-comparisons")
    (run,) = client.search_runs([exp.experiment_id])
    assert run.data.tags["tracelake.kind"] == "comparison" and run.data.tags["tracelake.compare.a_run"] == runs[(A, 0)]
    assert run.data.metrics["compare/n_added"] == len(c.added())
    assert run.data.metrics["delta/step_time_p50_ms"] == pytest.approx(
        c.metrics.set_index("metric").loc["step_time_p50_ms", "delta"]
    )
    arts = {a.path for a in client.list_artifacts(run.info.run_id, "report")}
    assert "report/comparison.html" in arts and 'data-plot="op_deltas"' in html.read_text()


def test_compare_by_job_id_and_unknown_reference(spark, corpus_warehouse):
    import typer

    from jobs.publish.compare import compare_command

    wh, _ = corpus_warehouse
    c = compare_command(A, f"{A}#0", warehouse=str(wh), no_mlflow=True)
    assert set(c.ops["status"]) == {"unchanged"}
    with pytest.raises(typer.Exit):
        compare_command(A, "no-such-job", warehouse=str(wh), no_mlflow=True)
