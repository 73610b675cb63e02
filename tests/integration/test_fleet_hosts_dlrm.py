"""The fleet stage on real traces (host health, Spark's reduction, the reductions kept between runs): four 8-rank
DLRM jobs built from the corpus (``benchmarks/fleet_bench.py``'s
generator), ranks 0-3 and 4-7 on two hosts. The corpus set's rank 7 arrives last at every collective, so
the host holding ranks 4-7 is the slow one of each job. ``node-bad`` holds them in three different jobs;
the fourth job runs 1.5x slower on every rank, on two other hosts. The pipeline runs on the local
executor; ``host_health`` must flag ``node-bad`` alone, and blame no host for the job slow everywhere. Each
rank ran on its own GPU (device pid = rank): of ``node-bad``'s devices, the straggler's (7) is the suspect."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from jobs.warehouse import read_pandas
from schemas import FLEET_TABLES

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT.parent / "shared" / "corpus"


def _hosts(j: int, rank: int) -> str:
    if j < 3:
        return "node-bad" if rank >= 4 else f"node-{'abc'[j]}"
    return "node-e" if rank >= 4 else "node-d"


@pytest.fixture(scope="module")
def fleet_wh(tmp_path_factory, benchmark):
    fb = benchmark("fleet_bench")
    from jobs.pipeline.run import run_pipeline

    base = tmp_path_factory.mktemp("hosts")
    fb.build_fleet(
        str(base / "landing"),
        str(CORPUS),
        n_dlrm=4,
        n_single=0,
        steps=1,
        seed=3,
        straggler_rank=2,
        delay_ms=0.0,
        scale_jitter=0.0,
        clock_jitter_us=0.0,
        straggler_job_index=-1,
        log=lambda *_: None,
        hosts=_hosts,
        job_scale=lambda j: 1.5 if j == 3 else 1.0,
    )
    res = run_pipeline(str(base / "landing"), str(base / "wh"), log_to_mlflow=False, executor="local")
    assert sorted(res.job_ids) == [f"fleet-dlrm-{j:03d}" for j in range(4)]
    fleet = res.record["validation"]["fleet"]  # the fleet stage validated its tables whole
    assert sorted(t["table"] for t in fleet["tables"].values()) == sorted(FLEET_TABLES)
    assert all(t["status"] == "passed" for t in fleet["tables"].values()), fleet
    return base / "wh"


def test_the_bad_host_is_flagged_and_the_slow_job_blames_none(fleet_wh):
    t = read_pandas(str(fleet_wh), ("host_health", "fleet_stats", "fleet_findings"))
    hh = t["host_health"]
    h = hh[hh["kind"] == "host"].set_index("target")
    assert set(h.index) == {"node-a", "node-b", "node-c", "node-bad", "node-d", "node-e"}
    assert list(h.index[h["suspect_hardware"]]) == ["node-bad"]
    bad = h.loc["node-bad"]
    assert (
        bad["n_jobs"] == 3
        and bad["n_slow_jobs"] == 3
        and list(bad["slow_jobs"]) == [f"fleet-dlrm-{j:03d}" for j in range(3)]
    )
    assert bad["last_arrival_ratio"] == pytest.approx(2.0)  # last at every call, with half of each job's ranks
    ev = json.loads(bad["evidence_json"])
    assert [e["ranks"] for e in ev] == [[4, 5, 6, 7]] * 3 and all(e["slow"] for e in ev)
    # the waiting host's steps are longer (+9 %): where collectives say who is last, that is not slowness
    assert bad["step_excess_p50_pct"] < 0 and h.loc["node-a", "step_excess_p50_pct"] > 0
    # the job slow everywhere: 1.5x the others' step time, and neither of its hosts is a suspect
    jobs = t["fleet_stats"]
    jobs = jobs[(jobs["dimension"] == "job") & (jobs["date"] == "all")].set_index("value")["step_time_p50_ns"]
    assert jobs["fleet-dlrm-003#0"] == pytest.approx(1.5 * jobs["fleet-dlrm-000#0"], rel=0.02)
    assert not h.loc["node-d", "suspect_hardware"] and h.loc["node-d", "n_slow_jobs"] == 0
    assert not h.loc["node-e", "suspect_hardware"] and h.loc["node-e", "n_slow_jobs"] == 1
    for host in ("node-a", "node-b", "node-c"):
        assert h.loc[host, "n_slow_jobs"] == 0 and h.loc[host, "last_arrivals"] == 0
    # per device: rank 7's GPU on node-bad, last in 5 of each job's 8 calls against a fair 1; rank 5's GPU, last
    # in 2 of 8 (ratio 2, binomial p 0.26), is chance
    d = hh[hh["kind"] == "device"].set_index("target")
    assert len(d) == 24 and list(d.index[d["suspect_hardware"]]) == ["node-bad/7"]
    assert d.loc["node-bad/7", "last_arrival_ratio"] == pytest.approx(5.0) and d.loc["node-bad/7", "n_slow_jobs"] == 3
    assert d.loc["node-bad/5", "last_arrival_ratio"] == pytest.approx(2.0) and d.loc["node-bad/5", "n_slow_jobs"] == 0
    assert d.loc["node-e/7", "n_slow_jobs"] == 1 and not d.loc["node-e/7", "suspect_hardware"]
    assert not (hh["kind"] == "link").any()  # one process group over both hosts: no other link to compare with
    # the straggler's rule is the fleet's costliest finding, over the four runs
    ff = t["fleet_findings"]
    top = ff[ff["dimension"] == "fleet"].sort_values("impact_rank").iloc[0]
    assert top["rule"] == "straggler_rank" and top["n_runs"] == 4


def test_everywhere_a_user_looks(fleet_wh):
    """The fleet report's host and impact sections, the MCP answers and `tracelake fleet`'s summary."""
    import subprocess

    from jobs.agent import queries
    from jobs.publish.report.html import render_fleet_report
    from jobs.publish.reports import load_fleet_tables
    from jobs.validate.marks import read_table_marks
    from schemas import FLEET_TABLES

    t = load_fleet_tables(str(fleet_wh))
    marks = read_table_marks(str(fleet_wh), FLEET_TABLES)
    assert {k: m["status"] for k, m in marks.items()} == dict.fromkeys(FLEET_TABLES, "passed")
    html = render_fleet_report(
        t.get("ranks"),
        t.get("captures"),
        t.get("steps"),
        t.get("findings"),
        fleet={k: t[k] for k in FLEET_TABLES if k in t},
        fleet_validation=marks,
    )
    assert 'id="fleet-validation"' in html and "Fleet data quality" in html
    assert f"All {len(FLEET_TABLES)} passed." in html
    host = html[html.index('id="host-health"') :]
    assert "Hardware suspects: 1 of 6 host(s), 1 of 24 device(s)" in host and "node-bad/7" in host
    assert 'data-plot="host_job_heatmap"' in host and "last-arrival ratio of 6 hosts in 4 jobs" in host
    assert 'data-plot="recoverable_hours"' in html
    hh = queries.host_health(str(fleet_wh), suspect_only=True)
    assert [(h.kind, h.target) for h in hh.hosts] == [("device", "node-bad/7"), ("host", "node-bad")]
    assert len(hh.hosts[1].evidence) == 3 and hh.hosts[0].device_index == 7
    assert [h.target for h in queries.host_health(str(fleet_wh), host="node-e", kind="host").hosts] == ["node-e"]
    ff = queries.fleet_findings(str(fleet_wh))
    assert ff.rows[0].rule == "straggler_rank" and ff.rows[0].impact_rank == 1
    out = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "fleet", "--warehouse", str(fleet_wh)],
        cwd=str(ROOT),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "2 hardware suspect(s) among 6 host(s), 24 device(s)" in out.stdout
    assert "device node-bad/7: slow in 3 of 3 job(s), last-arrival ratio 5.00" in out.stdout
    assert "straggler_rank" in out.stdout


def test_spark_reduction_gives_the_same_fleet_tables(fleet_wh, spark, tmp_path):
    """The fleet stage on Spark over the same warehouse writes the same host_health and fleet_findings rows."""
    import shutil

    from jobs.fleet.job import run_fleet

    copy = tmp_path / "wh"
    shutil.copytree(fleet_wh, copy)
    from jobs.validate.suites import validate_tables

    res = run_fleet(spark, str(copy), rebuild=True)  # every job reduced on Spark (the local run's are stored)
    assert res.counts["host_health"] == 30 and len(res.reduced_jobs) == 4
    report = validate_tables(spark, str(copy), "fleet")  # the suites on the Spark engine's side too
    assert report.success and len(report.tables) == len(FLEET_TABLES), report.summary()
    for table in ("host_health", "fleet_findings", "fleet_stats"):
        a, b = (read_pandas(str(w), (table,))[table] for w in (fleet_wh, copy))
        key = list(a.columns)
        as_text = [
            sorted(json.dumps(r, sort_keys=True, default=repr) for r in d.to_dict(orient="records"))
            for d in (a, b[key])
        ]
        assert as_text[0] == as_text[1], table


def _replace_job(wh: Path, table: str, job: str, rows=None) -> None:
    """Replace ``job``'s rows of ``table`` with ``rows`` (none: the job leaves the table), as a re-ingest does."""
    from jobs.warehouse import write_table
    from schemas import declared

    if rows is None:
        rows = declared(table).arrow_schema().empty_table()
    write_table(rows, str(wh), table, replace_jobs=[job])


def test_a_fleet_run_reduces_only_the_jobs_that_changed(fleet_wh, spark, tmp_path):
    """Each run reduces again only the jobs whose rows changed (a re-ingest: new files), drops the jobs gone from
    the inputs, and its fleet tables equal a rebuild's (every job reduced again) — on the local executor and on
    Spark."""
    import shutil

    import pyarrow.compute as pc
    from pipeline_compare import FLEET_TABLES, rows_digest

    from jobs.executor import LocalExecutor
    from jobs.fleet.job import run_fleet
    from jobs.fleet.reduced import JOB_STEPS, SOURCES
    from jobs.warehouse import read_arrow
    from schemas import TABLES

    inc, full = tmp_path / "inc", tmp_path / "full"
    shutil.copytree(fleet_wh, inc)
    before = read_pandas(str(inc), ["fleet_stats"])["fleet_stats"]
    with LocalExecutor() as ex:
        again = run_fleet(ex, str(inc))  # the pipeline's fleet stage stored every job's reductions: nothing to do
        assert again.reduced_jobs == [] and rows_digest(inc, "fleet_stats") == rows_digest(fleet_wh, "fleet_stats")
        # job 1 re-ingested with every step twice as long; job 2 gone from every per-job table
        steps = read_arrow(str(inc), "steps", job_ids=["fleet-dlrm-001"])
        i = steps.schema.get_field_index("step_time_ns")
        _replace_job(inc, "steps", "fleet-dlrm-001", steps.set_column(i, "step_time_ns", pc.multiply(steps[i], 2)))
        for table in TABLES:
            if read_arrow(str(inc), table, columns=["job_id"]) is not None:
                _replace_job(inc, table, "fleet-dlrm-002")
        res = run_fleet(ex, str(inc))
    assert res.reduced_jobs == ["fleet-dlrm-001"]
    shutil.copytree(inc, full)
    with LocalExecutor() as ex:
        assert len(run_fleet(ex, str(full), rebuild=True).reduced_jobs) == 3
    for table in FLEET_TABLES:
        assert rows_digest(inc, table) == rows_digest(full, table), table
    stored = read_arrow(str(inc), JOB_STEPS, columns=["job_id", "step_time_ns"]).to_pandas()
    assert sorted(stored["job_id"].unique()) == ["fleet-dlrm-000", "fleet-dlrm-001", "fleet-dlrm-003"]
    after = read_pandas(str(inc), ["fleet_stats"])["fleet_stats"]
    p50 = {
        name: f[(f["dimension"] == "job") & (f["date"] == "all")].set_index("value")["step_time_p50_ns"]
        for name, f in (("before", before), ("after", after))
    }
    assert p50["after"]["fleet-dlrm-001#0"] == 2 * p50["before"]["fleet-dlrm-001#0"]
    assert (
        "fleet-dlrm-002#0" not in p50["after"].index
        and p50["after"]["fleet-dlrm-000#0"] == p50["before"]["fleet-dlrm-000#0"]
    )

    # Spark reduces the changed job on its executors; the local executor's rebuild gives the same tables
    ranks = read_arrow(str(inc), "ranks", job_ids=["fleet-dlrm-003"])
    for wh in (inc, full):
        _replace_job(wh, "ranks", "fleet-dlrm-003", ranks)  # the same rows, new files
    assert run_fleet(spark, str(inc)).reduced_jobs == ["fleet-dlrm-003"]
    with LocalExecutor() as ex:
        run_fleet(ex, str(full), rebuild=True)
    for table in FLEET_TABLES:
        assert rows_digest(inc, table) == rows_digest(full, table), table
    assert set(SOURCES) <= set(TABLES)


def test_a_job_moved_to_another_date_by_a_run_killed_before_its_end(fleet_wh, tmp_path, monkeypatch):
    """Job 1 re-ingested 3 days later; the fleet run dies after writing the fleet tables and partials, before it
    stores the runs and state (from which the next run learns the job's old date). The next run reduces the job
    again and makes its old and new dates again: every fleet table equals a rebuild's."""
    import shutil
    from datetime import date, timedelta

    import pyarrow as pa
    from pipeline_compare import FLEET_TABLES, rows_digest

    import jobs.fleet.job as fleet_job
    from jobs.executor import LocalExecutor
    from jobs.warehouse import read_arrow
    from schemas import TABLES

    inc, full = tmp_path / "inc", tmp_path / "full"
    shutil.copytree(fleet_wh, inc)
    moved, old_day = "fleet-dlrm-001", None
    for table in TABLES:
        rows = read_arrow(str(inc), table, job_ids=[moved])
        if rows is None or not rows.num_rows:
            continue
        old_day = rows["date"][0].as_py()
        day = (date.fromisoformat(old_day) + timedelta(days=3)).isoformat()
        i = rows.schema.get_field_index("date")
        _replace_job(inc, table, moved, rows.set_column(i, "date", pa.array([day] * rows.num_rows, pa.string())))

    def killed(*_args, **_kw):
        raise RuntimeError("killed before the runs and state were stored")

    with LocalExecutor() as ex:
        monkeypatch.setattr(fleet_job, "commit", killed)
        with pytest.raises(RuntimeError, match="killed"):
            fleet_job.run_fleet(ex, str(inc))
        monkeypatch.undo()
        assert fleet_job.run_fleet(ex, str(inc)).reduced_jobs == [moved]
        shutil.copytree(inc, full)
        assert len(fleet_job.run_fleet(ex, str(full), rebuild=True).reduced_jobs) == 4
    for table in FLEET_TABLES:
        assert rows_digest(inc, table) == rows_digest(full, table), table
    stats = read_pandas(str(inc), ["fleet_stats"])["fleet_stats"]
    job_dates = set(stats[(stats["dimension"] == "job") & (stats["value"] == f"{moved}#0")]["date"])
    assert job_dates == {"all", day} and old_day not in job_dates


def test_the_window_insights_read_only_the_jobs_in_their_window(fleet_wh, tmp_path):
    """A job captured 30 days before the others is out of the 7-day window of ``host_health`` and
    ``fleet_findings``: the fleet run reads none of its captures, ranks, collectives or findings, and writes the
    rows that reading every job gives."""
    import shutil
    from datetime import date, timedelta

    import pyarrow as pa

    from jobs.executor import LocalExecutor
    from jobs.fleet.job import FLEET_INPUTS, _read_columns, fleet_frames, insight_jobs, run_fleet
    from jobs.fleet.reduced import read_reductions, update
    from jobs.warehouse import read_arrow, table_versions
    from schemas import FLEET_TABLES, TABLES

    wh = tmp_path / "wh"
    shutil.copytree(fleet_wh, wh)
    old = "fleet-dlrm-000"
    for table in TABLES:
        rows = read_arrow(str(wh), table, job_ids=[old])
        if rows is None or not rows.num_rows:
            continue
        day = (date.fromisoformat(rows["date"][0].as_py()) - timedelta(days=30)).isoformat()
        i = rows.schema.get_field_index("date")
        _replace_job(wh, table, old, rows.set_column(i, "date", pa.array([day] * rows.num_rows, pa.string())))
    with LocalExecutor() as ex:
        assert run_fleet(ex, str(wh)).reduced_jobs == [old]
        inputs = table_versions(str(wh), FLEET_INPUTS)
        reduced = update(ex, str(wh), inputs)
        jobs = insight_jobs(ex, str(wh), inputs, reduced.runs, None, set(), 5)
        everything = fleet_frames(*read_reductions(str(wh)), _read_columns(ex, str(wh), inputs))
    assert reduced.reduced_jobs == []
    others = [f"fleet-dlrm-{j:03d}" for j in (1, 2, 3)]
    assert {t: jobs[t] for t in ("captures", "ranks", "collectives", "findings")} == dict.fromkeys(
        ("captures", "ranks", "collectives", "findings"), others
    )
    written = read_pandas(str(wh), ("host_health", "fleet_findings"))
    assert len(written["host_health"]) and len(written["fleet_findings"])
    for table in ("host_health", "fleet_findings"):
        schema = FLEET_TABLES[table].arrow_schema()
        as_text = [
            sorted(
                json.dumps(r, sort_keys=True, default=repr)
                for r in pa.Table.from_pandas(d[schema.names], schema=schema, preserve_index=False).to_pylist()
            )
            for d in (written[table], everything[table])
        ]
        assert as_text[0] == as_text[1], table
