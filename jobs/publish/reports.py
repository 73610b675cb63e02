"""Publish reports to MLflow: the job report on each job's run, the fleet run, comparison runs.

I/O edge of :mod:`jobs.publish.report`: reads warehouse tables (Spark → pandas) and logs HTML artifacts and
metrics. Experiments: job runs live in ``tracelake`` (:mod:`jobs.publish.tracking`; the job report is the
artifact ``report/job_report.html``), fleet runs in ``tracelake-fleet`` (``fleet-<YYYY-MM-DD>``, one
per day, replaced when re-run that day), comparisons in ``tracelake-comparisons`` (:mod:`jobs.publish.compare`).

Fleet metric names (stable; :data:`jobs.publish.report.fleet_tables.FLEET_METRICS`, every per-job number a
``fleet_stats`` row as on the fleet report): ``fleet/n_jobs``, ``fleet/n_ranks``, ``fleet/n_captures``,
``fleet/n_quarantined``, ``fleet/idle_pct_median``, ``fleet/idle_pct_p90``,
``fleet/step_time_p50_ms_median``, ``fleet/exposed_comm_pct_median`` (``fleet/overlap_pct_median`` is gone:
``fleet_stats`` has no overlap); and per capture date
``fleet/daily/n_jobs``, ``fleet/daily/idle_pct_median``, ``fleet/daily/step_time_p50_ms_median``
(MLflow step = days since 1970-01-01, timestamp = that date, so the metric chart is the trend over
time; a date already logged in the run is not logged again).
"""

from __future__ import annotations

import datetime as _dt
import os
import time
from collections.abc import Iterator

import pandas as pd

from jobs.common.ids import safe_date
from jobs.publish.report.fleet_tables import (
    fleet_daily,
    fleet_metrics,
    fleet_stats_metrics,
    fleet_stats_of,
    host_metrics,
    impact_metrics,
)
from jobs.publish.report.html import render_fleet_report, render_job_report
from jobs.publish.tracking import client_for, experiment_id, log_texts, replace_run
from jobs.validate.marks import read_table_marks
from jobs.warehouse import exact_ints, read_arrow, read_pandas
from schemas import FLEET_TABLES

FLEET_EXPERIMENT = "tracelake-fleet"
COMPARE_EXPERIMENT = "tracelake-comparisons"
#: Tables a job report reads (``events`` is left out: too large; top kernels come from ``kernels``).
REPORT_TABLES = (
    "captures",
    "ranks",
    "steps",
    "kernels",
    "op_efficiency",
    "utilization_windows",
    "collectives",
    "comm_sites",
    "critical_path",
    "findings",
    "rule_coverage",
    "regressions",
)
JOB_REPORT_ARTIFACT = "report/job_report.html"


def load_job_tables(
    warehouse: str, job_id: str, attempt: int | None = None, names: tuple[str, ...] = REPORT_TABLES
) -> dict[str, pd.DataFrame]:
    """The warehouse rows of one job (and attempt) as pandas, exact integer dtypes.

    Tables never written are left out of the dict (the report then says "not available").
    """
    tables = load_jobs_tables(warehouse, [job_id], names)
    if attempt is None:
        return tables
    return {
        name: df[(df["attempt"] == int(attempt)).fillna(False).to_numpy(dtype=bool)].reset_index(drop=True)
        if "attempt" in df.columns
        else df
        for name, df in tables.items()
    }


def log_text(client, run_id: str, text: str, artifact_path: str) -> None:
    """Log ``text`` (UTF-8) as the run's artifact ``artifact_path`` (e.g. ``report/job_report.html``)."""
    log_texts(client, run_id, {artifact_path: text})


def log_job_report(tracking_uri: str, run_id: str, tables: dict, validation=None, client=None) -> str:
    """Render :func:`jobs.publish.report.html.render_job_report` and log it to the job's run.

    Args:
        tables: the job's tables (pandas), e.g. from :func:`load_job_tables`.
        validation: optional :class:`jobs.validate.report.ValidationReport` shown in "Data quality".
        client: an ``MlflowClient`` of ``tracking_uri`` to reuse (default: a new one).

    Returns:
        The artifact path (``report/job_report.html``).
    """
    client = client or client_for(tracking_uri)
    log_text(client, run_id, render_job_report(tables, validation=validation), JOB_REPORT_ARTIFACT)
    return JOB_REPORT_ARTIFACT


def _day(date: str) -> int | None:
    try:
        return (_dt.date.fromisoformat(str(date)[:10]) - _dt.date(1970, 1, 1)).days
    except ValueError:
        return None


def log_fleet_report(
    tracking_uri: str,
    warehouse: str | None,
    ranks: pd.DataFrame | None,
    captures: pd.DataFrame | None,
    steps: pd.DataFrame | None = None,
    findings: pd.DataFrame | None = None,
    day: str | None = None,
    fleet: dict | None = None,
    fleet_validation: dict | None = None,
    collectives: pd.DataFrame | None = None,
) -> str:
    """Log the fleet run of ``day``: fleet metrics, daily trend metrics, the fleet report.

    The run is ``fleet-<day>`` in experiment ``tracelake-fleet`` (tags ``tracelake.kind=fleet``,
    ``tracelake.fleet_date``), replaced when re-run the same day (:func:`jobs.publish.tracking.replace_run`:
    one run a day, one point per metric), so MLflow's run comparison over the
    fleet runs shows the fleet metrics day by day; each run also carries the per-capture-date history
    (``fleet/daily/*``). Artifact: ``report/fleet_report.html``.

    Args:
        ranks, captures, steps, findings: the tables over all jobs (pandas).
        day: ``YYYY-MM-DD`` (default: today, UTC).
        fleet: the fleet tables (:data:`schemas.FLEET_TABLES`, :mod:`jobs.fleet`) as pandas: adds the
            ``fleet/<dimension>/<value>/…``, ``fleet/impact/…`` and ``fleet/hosts/…`` metrics
            (:mod:`jobs.publish.report.fleet_tables`) and the impact, host, breakdown and regression sections.
        fleet_validation: the fleet tables' marks (:func:`jobs.validate.marks.read_table_marks`): the tag
            ``tracelake.validation`` (``passed`` when every one passed, else ``failed``) and the report's section.
        collectives: :data:`FLEET_COLLECTIVE_COLUMNS` of ``collectives``: the report's straggler ranks.

    Returns:
        The fleet run id.

    Raises:
        jobs.common.ids.DiscoveryError: ``day`` is not a calendar date (it is quoted into an
            MLflow filter and the run name).
    """
    from mlflow.entities import Metric, RunTag  # heavy: mlflow

    day = safe_date(day or _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d"), "fleet report", "day")
    client = client_for(tracking_uri)
    exp = experiment_id(client, FLEET_EXPERIMENT, tracking_uri, warehouse)
    run_id = replace_run(
        client, exp, f"tags.`tracelake.kind` = 'fleet' and tags.`tracelake.fleet_date` = '{day}'", f"fleet-{day}"
    )
    now = int(time.time() * 1000)

    fleet = fleet or {}
    stats = fleet_stats_of(fleet, ranks, captures, steps)  # the numbers of the report: fleet_stats rows
    values = {
        **fleet_metrics(stats, captures),
        **fleet_stats_metrics(fleet.get("fleet_stats")),
        **impact_metrics(fleet.get("fleet_findings")),
        **host_metrics(fleet.get("host_health")),
    }
    metrics = [Metric(k, v, now, 0) for k, v in sorted(values.items())]
    for r in fleet_daily(stats, captures).to_dict(orient="records"):
        d = _day(r["date"])
        if d is None:
            continue
        for col in ("n_jobs", "idle_pct_median", "step_time_p50_ms_median"):
            v = r.get(col)
            if v is not None and v == v:
                metrics.append(Metric(f"fleet/daily/{col}", float(v), d * 86_400_000, d))
    tags = [RunTag("tracelake.kind", "fleet"), RunTag("tracelake.fleet_date", day)]
    if warehouse:
        tags.append(RunTag("tracelake.warehouse", str(warehouse)))
    if fleet_validation:
        ok = all(m.get("status") == "passed" for m in fleet_validation.values())
        tags.append(RunTag("tracelake.validation", "passed" if ok else "failed"))
    client.log_batch(run_id, metrics=metrics, tags=tags)  # MLflow splits it into batches it accepts
    log_text(
        client,
        run_id,
        render_fleet_report(
            ranks,
            captures,
            steps,
            findings,
            fleet=fleet,
            fleet_validation=fleet_validation,
            collectives=collectives,
        ),
        "report/fleet_report.html",
    )
    client.set_terminated(run_id, status="FINISHED")
    return run_id


def load_jobs_tables(
    warehouse: str, job_ids: list[str], names: tuple[str, ...] = REPORT_TABLES
) -> dict[str, pd.DataFrame]:
    """The warehouse rows of several jobs as pandas, exact integer dtypes (one read per table, not per
    job and table; pyarrow, no Spark). Tables never written are left out of the dict."""
    return read_pandas(warehouse, names, list(job_ids), exact=True, skip_missing=True)


def _by_run(tables: dict[str, pd.DataFrame], runs) -> dict[tuple[str, int], dict[str, pd.DataFrame]]:
    """The rows of each ``(job_id, attempt)`` of ``runs`` in ``tables`` (a table without ``attempt``: the job's rows),
    each table grouped once, not scanned once per run: ``{run: {table name: rows}}``, every table in each run's dict
    (no row of the run: empty, with the table's columns)."""
    out: dict[tuple[str, int], dict[str, pd.DataFrame]] = {run: {} for run in runs}
    for name, df in tables.items():
        keys = [df["job_id"].astype(str)]
        if "attempt" in df.columns:
            keys.append(pd.to_numeric(df["attempt"], errors="coerce").fillna(-1).astype("int64"))
        groups = df.groupby(keys, sort=False).indices if len(df) else {}
        for job_id, attempt in runs:
            idx = groups.get((job_id, attempt) if len(keys) == 2 else job_id)
            out[(job_id, attempt)][name] = (df.iloc[idx] if idx is not None else df.iloc[0:0]).reset_index(drop=True)
    return out


def render_reports(
    warehouse: str, runs, validation=None, map_fn=map, heads: dict | None = None
) -> Iterator[tuple[tuple[str, int], str]]:
    """Start rendering the HTML job report of every ``(job, attempt)`` of ``runs``: :func:`render_run_reports` over
    batches of :func:`batch_size` runs through ``map_fn`` (a process pool's map submits them all at once and returns
    at once, so the driver can log the MLflow runs meanwhile).

    Args:
        heads: ``{(job, attempt): headline metrics}`` (:func:`jobs.publish.headline.headline`, the numbers logged to
            MLflow) for the reports' tiles and verdict; ``None``: each report computes its own.

    Returns:
        ``((job, attempt), HTML)`` pairs, in ``runs`` order; taking one waits for its batch.
    """
    keys = [(str(job), int(attempt)) for job, attempt in runs]
    n = batch_size(len(keys))
    batches = [keys[i : i + n] for i in range(0, len(keys), n)]
    args = [(warehouse, b, validation, None if heads is None else {k: heads.get(k, {}) for k in b}) for b in batches]
    return zip(keys, (page for pages in map_fn(render_run_reports, args) for page in pages))


def batch_size(n_runs: int, most: int = 16) -> int:
    """Runs per :func:`render_run_reports` task: the runs spread over two tasks per CPU of this process (so a pool
    keeps every worker busy), at most ``most`` (a batch's tables are held in memory together)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(most, -(-n_runs // (2 * cpus))))


def render_run_reports(args: tuple) -> list[str]:
    """The HTML job reports of a batch ``(warehouse, [(job_id, attempt), …], validation, heads)``
    (:func:`render_job_report` of each run), the batch's tables read once (:func:`load_jobs_tables`): a module-level
    function, so a process pool can run it. ``heads``: ``{(job_id, attempt): headline metrics}`` or ``None``."""
    warehouse, runs, validation, heads = args
    tables = _by_run(load_jobs_tables(warehouse, sorted({job for job, _ in runs})), runs)
    return [
        render_job_report(tables[run], validation=validation, head=None if heads is None else heads[run])
        for run in runs
    ]


#: The ``collectives`` columns the fleet report reads (straggler ranks: last arrivals at matched calls).
FLEET_COLLECTIVE_COLUMNS = ("job_id", "attempt", "rank", "match_key", "n_ranks_matched", "is_last_arrival")


def load_fleet_tables(warehouse: str) -> dict[str, pd.DataFrame]:
    """``ranks``, ``captures``, ``steps``, ``findings`` of every job, :data:`FLEET_COLLECTIVE_COLUMNS` of
    ``collectives``, and the fleet tables (:data:`schemas.FLEET_TABLES`) (pandas, exact integer dtypes; tables
    never written left out, an empty one kept with its columns)."""
    out = read_pandas(
        warehouse, ("ranks", "captures", "steps", "findings", *FLEET_TABLES), exact=True, skip_missing=True
    )
    co = read_arrow(warehouse, "collectives", columns=list(FLEET_COLLECTIVE_COLUMNS))
    if co is not None:
        out["collectives"] = co.to_pandas(types_mapper=exact_ints)
    return out


def publish_fleet_report(
    tracking_uri: str | None, warehouse: str, day: str | None = None, html: str | None = None
) -> str | None:
    """The fleet report over every job of the warehouse: written to ``html`` when given, and logged as the
    day's fleet run (:func:`log_fleet_report`) unless ``tracking_uri`` is ``None``.

    Reads the fleet tables as the ``fleet`` stage left them (it does not recompute them).

    Returns:
        The fleet run id, or ``None`` without MLflow.
    """

    t = load_fleet_tables(warehouse)
    fleet = {k: t[k] for k in FLEET_TABLES if k in t}
    marks = read_table_marks(warehouse, FLEET_TABLES)
    if html:
        with open(html, "w", encoding="utf-8") as f:
            f.write(
                render_fleet_report(
                    t.get("ranks"),
                    t.get("captures"),
                    t.get("steps"),
                    t.get("findings"),
                    fleet=fleet,
                    fleet_validation=marks,
                    collectives=t.get("collectives"),
                )
            )
    if not tracking_uri:
        return None
    return log_fleet_report(
        tracking_uri,
        warehouse,
        t.get("ranks"),
        t.get("captures"),
        t.get("steps"),
        t.get("findings"),
        day=day,
        fleet=fleet,
        fleet_validation=marks,
        collectives=t.get("collectives"),
    )
