"""``jobs.fleet``: the whole warehouse → ``fleet_stats``, ``fleet_kernels``, ``regressions``, ``fleet_findings``,
``host_health``.

extract + reduce (:mod:`jobs.fleet.reduced`, on Spark per job run or on the local executor: :mod:`jobs.executor`):
the analysis windows (:func:`jobs.analyze.windows.analysis_windows`: ``steps``, plus one whole-trace window per
rank capture of ``ranks`` without ProfilerStep) → one row per job step or whole-trace window, ``kernels`` → one
row per (run, date, kernel), each joined with the run's job name, model, hardware and torch version from
``captures`` (:func:`jobs.fleet.stats.reduce_job_steps`, :func:`jobs.fleet.stats.reduce_job_kernels`). The
reductions are stored in the warehouse: a run reduces again only the jobs whose rows changed since the last one
(``rebuild``: every job).
transform (pandas, on the driver, over every job's stored reductions and the few columns read of ``findings``,
``captures``, ``ranks`` and ``collectives`` — of the jobs in the insights' window and of the runs compared again
only, :func:`insight_jobs`): :func:`jobs.fleet.stats.fleet_stats`, :func:`jobs.fleet.stats.fleet_kernels`,
:func:`jobs.fleet.regressions.find_regressions` (the run dates a change made stale; the other rows kept),
:func:`jobs.fleet.impact.fleet_findings`, :func:`jobs.fleet.hosts.host_health`.
load: Parquet under ``{warehouse}/{fleet_stats,fleet_kernels,regressions,fleet_findings,host_health}``
through the storage seam's commit (:func:`jobs.warehouse.write_table`), each table replaced whole in one commit
(inputs read as of one set of versions, recorded with the write). The tables are derived whole by each run from
the stored reductions, so a run is idempotent and sees late-arriving jobs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd
import pyarrow as pa

from jobs.executor import is_local
from jobs.fleet.changes import what_changed
from jobs.fleet.hosts import host_health
from jobs.fleet.impact import fleet_findings
from jobs.fleet.reduced import spark_pandas, update
from jobs.fleet.regressions import (
    INPUT_COLUMNS,
    baselines,
    dates_to_compare,
    find_regressions,
    options_with_defaults,
    run_sequence,
)
from jobs.fleet.stats import (
    fleet_kernels,
    fleet_stats,
    profiler_steps,
)
from jobs.fleet.window import WINDOW_DAYS, capture_days, window
from jobs.warehouse import job_dates, read_arrow, read_pandas, read_spark, table_versions, write_table
from schemas import FLEET_TABLES, REGRESSIONS


@dataclass
class FleetResult:
    """What a fleet run wrote: row counts per table, the ``regressions`` rows (pandas) and the job ids whose
    rows it reduced again (:func:`jobs.fleet.reduced.update`)."""

    counts: dict = field(default_factory=dict)
    reduced_jobs: list[str] = field(default_factory=list)
    regressions: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=REGRESSIONS.names))


def fleet_frames(
    job_steps: pd.DataFrame,
    job_kernels: pd.DataFrame | None,
    tables: dict | None = None,
    previous: pd.DataFrame | None = None,
    dates=None,
    **regression_options,
) -> dict:
    """The fleet tables (pandas) from the reduced frames and the columns of :data:`READ_COLUMNS` (pure).

    Args:
        job_steps: :func:`jobs.fleet.stats.job_steps_frame` rows over the analysis windows (whole-trace windows
            feed ``fleet_stats`` and ``fleet_findings``, not ``regressions``); job_kernels:
            :func:`jobs.fleet.stats.job_kernels_frame` rows.
        tables: ``{"findings"|"captures"|"ranks"|"collectives": pandas}`` (a table missing: not written yet); the
            rows of the jobs the window-based tables and ``what_changed`` look at suffice (:func:`insight_jobs`).
        previous, dates: the ``regressions`` rows written last (with the same options) and the run dates to
            compare again (:func:`jobs.fleet.regressions.dates_to_compare`): the other dates' rows are kept;
            default every run compared.
        regression_options: thresholds for :func:`jobs.fleet.regressions.find_regressions`.

    Returns:
        ``{"fleet_stats": …, "fleet_kernels": …, "regressions": …, "fleet_findings": …, "host_health": …}``.
    """
    t = tables or {}
    steps = profiler_steps(job_steps)  # regressions compare ProfilerSteps, not whole-trace windows
    incremental = previous is not None and dates is not None
    regs = (
        find_regressions(steps[INPUT_COLUMNS], dates=dates if incremental else None, **regression_options)
        if len(steps) and (not incremental or dates)
        else pd.DataFrame(columns=REGRESSIONS.names)
    )
    regs["changes_json"] = what_changed(regs, steps, job_kernels, t.get("captures"), t.get("findings"))
    regs = regs[REGRESSIONS.names]
    if incremental:
        kept = previous[~previous["date"].astype(str).isin({str(d) for d in dates})][REGRESSIONS.names]
        parts = [d for d in (kept, regs) if len(d)]
        regs = pd.concat(parts, ignore_index=True) if parts else regs
    return {
        "fleet_stats": fleet_stats(job_steps),
        "fleet_kernels": fleet_kernels(job_kernels),
        "regressions": regs,
        "fleet_findings": fleet_findings(t.get("findings"), job_steps),
        "host_health": host_health(t.get("captures"), t.get("ranks"), t.get("collectives")),
    }


def run_fleet(engine, warehouse: str, rebuild: bool = False, **regression_options) -> FleetResult:
    """Bring the fleet tables of ``warehouse`` up to date: the jobs whose rows changed are reduced again
    (:func:`jobs.fleet.reduced.update`), the fleet tables derived from every job's stored reductions, the
    regressions of the run dates that changed compared again, the per-job tables read only for the jobs the
    insights' windows and the new regression rows look at (:func:`insight_jobs`).

    Args:
        engine: a SparkSession (reduction in Spark) or a :class:`jobs.executor.LocalExecutor` (in pandas).
        warehouse: warehouse root.
        rebuild: reduce every job again and compare every run (``tracelake fleet --rebuild``); the tables are the
            same.
        regression_options: thresholds for :func:`jobs.fleet.regressions.find_regressions`.

    Returns:
        :class:`FleetResult` (nothing is written when no rank has been analyzed yet).
    """
    result = FleetResult()
    # one consistent set of input versions, read as of them and recorded with every fleet table written: a run
    # at the same time that derived the tables from newer inputs keeps its rows (jobs.commit: ``inputs``)
    inputs = table_versions(warehouse, FLEET_INPUTS)
    if inputs.get("captures") is None or (inputs.get("steps") is None and inputs.get("ranks") is None):
        return result
    regression_options = options_with_defaults(**regression_options)
    reduced = update(engine, warehouse, inputs, rebuild=rebuild, options=regression_options)
    result.reduced_jobs = reduced.reduced_jobs
    previous, dates = None, None
    steps_only = profiler_steps(reduced.job_steps)[INPUT_COLUMNS]
    runs = run_sequence(steps_only) if len(steps_only) else None  # every run, in comparison order
    if not rebuild and not reduced.options_changed:  # the last rows were made with these options: keep the fresh
        previous = read_pandas(warehouse, ["regressions"], skip_missing=True).get("regressions")
    baseline = regression_options["baseline_runs"]
    if previous is not None and runs is not None:
        dates = dates_to_compare(runs, previous, {*reduced.reduced_jobs, *reduced.dropped_jobs}, baseline)
    jobs = insight_jobs(engine, warehouse, inputs, reduced.job_steps, runs, dates, baseline)
    tables = _read_columns(engine, warehouse, inputs, jobs)
    frames = fleet_frames(reduced.job_steps, reduced.job_kernels, tables, previous, dates, **regression_options)
    for name, pdf in frames.items():
        result.counts[name] = len(pdf)
        write_fleet_table(pdf, warehouse, name, inputs)  # an empty table is written too: it exists, with 0 rows
    result.regressions = frames["regressions"]
    return result


def insight_jobs(
    engine,
    warehouse: str,
    versions: dict,
    job_steps: pd.DataFrame,
    runs: pd.DataFrame | None,
    dates,
    baseline_runs: int,
) -> dict[str, list[str] | None]:
    """The jobs whose rows of each :data:`READ_COLUMNS` table the fleet tables need (``None``: every job), so a
    fleet run reads the window, not the history:

    * ``host_health`` (``captures``, ``ranks``, ``collectives``): the jobs with a capture on or after the first day
      of its window (:data:`jobs.fleet.window.WINDOW_DAYS` days ending at the newest day of an ingested capture
      that names a host) — from the captures' Delta log and the captures of the newest days
      (:func:`_host_window_jobs`);
    * ``fleet_findings`` (``findings``): the jobs of the runs whose run date is in its window (from ``job_steps``);
    * ``what_changed`` (``captures``, ``findings``): the runs of the regression ``dates`` compared again and their
      baseline runs (every job when ``dates`` is ``None``: every run is compared); ``runs``: every run in
      comparison order (:func:`jobs.fleet.regressions.run_sequence`; ``None`` without ProfilerSteps).
    """
    by_run = job_steps.drop_duplicates(["job_id", "attempt"]) if len(job_steps) else job_steps
    findings_jobs: set[str] = set()
    if len(by_run):
        span = window(capture_days(by_run["run_date"]))
        if span is not None:
            in_window = (capture_days(by_run["run_date"]) >= span[0]).to_numpy(dtype=bool)
            findings_jobs = {str(j) for j in by_run["job_id"][in_window]}
    changes_jobs: set[str] | None = None
    if dates is not None:
        changes_jobs = set()
        if runs is not None:
            compared = {str(d) for d in dates}
            base_of = baselines(runs, baseline_runs)
            for j, a, d in zip(runs["job_id"], runs["attempt"], runs["run_date"]):
                if str(d) in compared:
                    changes_jobs |= {str(j), *(b[0] for b in base_of[(str(j), int(a))])}
    hosts = _host_window_jobs(engine, warehouse, versions)

    def union(*sets):
        return None if any(x is None for x in sets) else sorted(set().union(*sets))

    return {
        "captures": union(hosts, changes_jobs),
        "ranks": hosts,
        "collectives": hosts,
        "findings": union(findings_jobs, changes_jobs),
    }


def _host_window_jobs(engine, warehouse: str, versions: dict) -> list[str] | None:
    """The jobs with a ``captures`` partition on or after the first day of :func:`jobs.fleet.hosts.host_health`'s
    window (a run whose first day is older is out of it), or ``None`` (every job) when the newest days hold no
    ingested capture naming a host. The window's last day is found in the captures of the jobs with a partition
    in the last :data:`WINDOW_DAYS` days of the log: any capture that late is among them."""
    pairs = [(j, d) for j, ds in job_dates(warehouse, "captures", versions.get("captures")).items() for d in ds]
    days = pd.DataFrame(pairs, columns=["job_id", "date"])
    days = days.assign(day=capture_days(days["date"])).dropna(subset=["day"])
    last = days.groupby("job_id")["day"].max().to_dict()
    if not last:
        return []
    first_day = max(last.values()) - pd.Timedelta(days=WINDOW_DAYS - 1)
    recent = sorted(j for j, d in last.items() if d >= first_day)
    cols = ["job_id", "status", "host_name", "date"]
    c = _read_columns(engine, warehouse, versions, {"captures": recent}, {"captures": cols}).get("captures")
    if c is None:
        return None
    named = c[(c["status"] == "ingested") & c["host_name"].notna()]
    newest = capture_days(named["date"]).max() if len(named) else pd.NaT
    if pd.isna(newest) or newest < first_day:
        return None  # the window ends before the log's last days: every job may be in it
    start = newest - pd.Timedelta(days=WINDOW_DAYS - 1)
    return sorted(j for j, d in last.items() if d >= start)


#: What :func:`jobs.fleet.impact.fleet_findings`, :func:`jobs.fleet.hosts.host_health` and
#: :func:`jobs.fleet.changes.what_changed` read of the per-job tables.
READ_COLUMNS = {
    "findings": ("job_id", "attempt", "rule", "est_time_lost_per_step_ns", "title"),
    "captures": ("job_id", "attempt", "rank", "status", "host_name", "device_name", "date", "tags_json"),
    "ranks": ("job_id", "attempt", "rank", "step_time_p50_ns", "device_index"),
    "collectives": (
        "job_id",
        "attempt",
        "rank",
        "match_key",
        "n_ranks_matched",
        "is_last_arrival",
        "pg_name",
        "collective",
        "busbw_gbps",
    ),
}


#: Every table the fleet stage reads (their versions are recorded with the fleet tables it writes).
FLEET_INPUTS = tuple(dict.fromkeys(("captures", "steps", "ranks", "kernels", *READ_COLUMNS)))


def _read_columns(
    engine, warehouse: str, versions: dict, job_ids: dict | None = None, columns: dict | None = None
) -> dict[str, pd.DataFrame]:
    """:data:`READ_COLUMNS` (or ``columns``: ``{table: columns}``) of the tables that exist at ``versions``, as
    pandas (pyarrow on the local executor, else Spark); only the jobs of ``job_ids[table]`` where given (not
    ``None``)."""
    out = {}
    for name, cols in (columns or READ_COLUMNS).items():
        jobs = (job_ids or {}).get(name)
        if is_local(engine):
            t = read_arrow(warehouse, name, job_ids=jobs, columns=list(cols), as_of=versions.get(name))
            if t is not None:
                out[name] = t.to_pandas()
        else:
            df = read_spark(engine, warehouse, name, job_ids=jobs, as_of=versions.get(name))
            if df is not None:
                out[name] = spark_pandas(df.select(*[c for c in cols if c in df.columns]))  # older warehouses lack some
            elif jobs is not None and versions.get(name) is not None:
                out[name] = pd.DataFrame(columns=list(cols))  # no row of these jobs: the table exists
    return out


def write_fleet_table(pdf: pd.DataFrame, warehouse: str, table: str, inputs: dict | None = None) -> None:
    """Write a fleet table (pandas) whole, in one commit: every old row goes (a dimension, date or kind with no
    rows left leaves none behind). ``inputs``: the input table versions it was derived from (a concurrent run's
    derivation from newer inputs is kept: :func:`jobs.warehouse.write_table`)."""
    t = FLEET_TABLES[table]
    rows = pa.Table.from_pandas(pdf[t.names], schema=t.arrow_schema(), preserve_index=False)
    write_table(rows, warehouse, table, replace_all=True, inputs=inputs)
