"""The sql tool's read-only runner (jobs/agent/readonly_sql.py) on the corpus warehouse with real Spark:
bounded answers, hostile queries refused before anything runs, files outside the warehouse refused, a
slow query cancelled past its time limit with the session still answering."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from jobs.agent import readonly_sql
from jobs.agent.readonly_sql import QueryTimeout, UnsafeQuery, run_readonly
from jobs.sql import readme_examples
from jobs.warehouse import register_views

pytestmark = pytest.mark.integration
README = Path(__file__).resolve().parents[2] / "README.md"


def _json_ok(rows):
    json.dumps(rows, allow_nan=False)  # raises on a value JSON cannot hold


def test_aggregate_over_steps(spark, corpus_warehouse):
    wh, _ = corpus_warehouse
    r = run_readonly(
        spark,
        str(wh),
        "SELECT job_id, count(*) AS n_steps, max(step_time_ns) / 1e6 AS max_ms "
        "FROM steps GROUP BY job_id ORDER BY job_id;",
    )
    assert r.columns == ["job_id", "n_steps", "max_ms"]
    assert r.n_rows == len(r.rows) >= 1 and not r.truncated
    assert all(isinstance(job, str) and n > 0 for job, n, _ in r.rows)
    assert r.elapsed_ms > 0
    _json_ok(r.rows)


def test_max_rows_truncates(spark, corpus_warehouse):
    wh, _ = corpus_warehouse
    r = run_readonly(spark, str(wh), "SELECT * FROM events", max_rows=2)
    assert r.n_rows == 2 and len(r.rows) == 2 and r.truncated
    assert len(r.columns) == len(r.rows[0])
    _json_ok(r.rows)
    exact = run_readonly(spark, str(wh), "SELECT job_id FROM steps LIMIT 3", max_rows=3)
    assert exact.n_rows == 3 and not exact.truncated


def test_readme_examples_run(spark, corpus_warehouse):
    wh, _ = corpus_warehouse
    for query in readme_examples(README.read_text(encoding="utf-8")):
        r = run_readonly(spark, str(wh), query, max_rows=5)
        assert r.n_rows > 0, query
        _json_ok(r.rows)


@pytest.mark.parametrize(
    "query",
    [
        "DROP VIEW steps",
        "CREATE OR REPLACE TEMP VIEW steps AS SELECT 1 AS x",
        "SET spark.sql.shuffle.partitions=1",
        "CACHE TABLE steps",
        "SELECT 1; DROP VIEW steps",
    ],
)
def test_hostile_refused_before_it_runs(spark, corpus_warehouse, query):
    wh, _ = corpus_warehouse
    before = spark.conf.get("spark.sql.shuffle.partitions")
    with pytest.raises(UnsafeQuery):
        run_readonly(spark, str(wh), query)
    assert spark.conf.get("spark.sql.shuffle.partitions") == before
    assert not spark.catalog.isCached("steps")
    assert "step_time_ns" in spark.table("steps").columns
    assert run_readonly(spark, str(wh), "SELECT count(*) AS n FROM steps").rows[0][0] > 0


@pytest.mark.parametrize(
    "query,kind",
    [
        ("DROP VIEW steps", "Drop"),
        ("SET spark.sql.shuffle.partitions=1", "Set"),
        ("ADD JAR /tmp/x.jar", "AddJar"),
        ("EXPLAIN SELECT 1", "Explain"),
        ("INSERT INTO steps SELECT * FROM steps", "Insert"),
        ("CACHE TABLE steps", "CacheTable"),
        ("CREATE TEMP VIEW v AS SELECT 1", "CreateView"),
    ],
)
def test_spark_parser_refuses_commands(spark, corpus_warehouse, query, kind):
    """The second layer alone (as if sqlglot had let the text through): Spark's parser, nothing run."""
    wh, _ = corpus_warehouse
    register_views(spark, str(wh))
    before = spark.conf.get("spark.sql.shuffle.partitions")
    with pytest.raises(UnsafeQuery, match=rf"only SELECT queries are allowed \(Spark parses it as {kind}"):
        readonly_sql._check_spark_plan(spark, query)
    assert spark.conf.get("spark.sql.shuffle.partitions") == before
    assert spark.catalog.tableExists("steps")
    readonly_sql._check_spark_plan(spark, "WITH t AS (SELECT * FROM steps) SELECT count(*) FROM t")


def test_files_outside_the_warehouse_refused(spark, corpus_warehouse, tmp_path, monkeypatch):
    wh, _ = corpus_warehouse
    outside = tmp_path / "elsewhere"
    spark.range(3).write.parquet(str(outside))
    with pytest.raises(UnsafeQuery, match="file-reading table reference parquet"):
        run_readonly(spark, str(wh), f"SELECT * FROM parquet.`{outside}`")

    # the third layer alone: a view (as if registered by mistake) over files outside the warehouse
    real = readonly_sql.register_views

    def with_outside(spark_, warehouse):
        spark_.read.parquet(str(outside)).createOrReplaceTempView("outside_view")
        return [*real(spark_, warehouse), "outside_view"]

    monkeypatch.setattr(readonly_sql, "register_views", with_outside)
    with pytest.raises(UnsafeQuery, match="the query reads files outside the warehouse: .*elsewhere"):
        run_readonly(spark, str(wh), "SELECT s.job_id FROM steps s CROSS JOIN outside_view")
    assert run_readonly(spark, str(wh), "SELECT job_id FROM steps LIMIT 1").n_rows == 1
    spark.catalog.dropTempView("outside_view")


def _running_tasks(spark) -> int:
    return sum(e.numRunningTasks() for e in spark.sparkContext._jsc.sc().statusTracker().getExecutorInfos())


def test_slow_query_cancelled(spark, corpus_warehouse):
    """Minutes of work (every event x 2,000 events, hashed) cancelled after 1 s. Cancelling is cooperative: a
    task stops at its next kill check (here each scan batch: 4,096 rows x 2,000); an events x events x events
    cross join would keep its tasks spinning on the cores long after the cancel."""
    wh, _ = corpus_warehouse
    slow = (
        "SELECT count(*) AS n, sum(hash(a.name, b.dur_ns)) AS h "
        "FROM events a CROSS JOIN (SELECT dur_ns FROM events LIMIT 2000) b"
    )
    t0 = time.monotonic()
    with pytest.raises(QueryTimeout, match=r"the query ran past 1 s and was cancelled"):
        run_readonly(spark, str(wh), slow, timeout_s=1)
    assert time.monotonic() - t0 < 30
    tracker = spark.sparkContext.statusTracker()
    deadline = time.monotonic() + 60  # a killed task stops at its next check: seconds on a loaded 2-core machine
    while (_running_tasks(spark) or tracker.getActiveJobsIds()) and time.monotonic() < deadline:
        time.sleep(0.2)
    still = [(j, tracker.getJobInfo(j)) for j in tracker.getActiveJobsIds()]
    assert _running_tasks(spark) == 0 and not still, f"the cancelled query's jobs still run: {still}"
    r = run_readonly(spark, str(wh), "SELECT count(*) AS n FROM steps", timeout_s=60)
    assert r.columns == ["n"] and r.rows[0][0] > 0
    # the job group was the worker thread's: this thread's jobs carry none
    assert spark.sparkContext.getLocalProperty("spark.jobGroup.id") is None


def test_unbounded_non_equi_join_refused(spark, corpus_warehouse):
    """Two large inputs joined without an equality condition would outlive their time limit; refused before
    anything runs. A join with a condition, or against a small side, still runs."""
    wh, _ = corpus_warehouse
    with pytest.raises(UnsafeQuery, match="without an equality condition"):
        run_readonly(spark, str(wh), "SELECT count(*) AS n FROM events a CROSS JOIN events b", timeout_s=5)
    assert not spark.sparkContext.statusTracker().getActiveJobsIds()
    r = run_readonly(
        spark,
        str(wh),
        "SELECT count(*) AS n FROM steps s JOIN ranks r ON s.job_id = r.job_id "
        "AND s.attempt = r.attempt AND s.rank = r.rank",
        timeout_s=60,
    )
    assert r.rows[0][0] > 0
