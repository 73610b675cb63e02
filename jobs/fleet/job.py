"""``jobs.fleet``: the whole warehouse → ``fleet_stats``, ``fleet_kernels``, ``regressions``, ``fleet_findings``,
``host_health``.

extract + reduce (one pandas transform, on Spark per job run or on the local executor: :mod:`jobs.executor`):
the analysis windows (:func:`jobs.analyze.windows.analysis_windows`: ``steps``, plus one whole-trace window per
rank capture of ``ranks`` without ProfilerStep — on Spark computed on the driver from the small ``ranks`` and
``captures`` and the distinct rank captures of ``steps``) → one row per job step or whole-trace window,
``kernels`` → one row per (run, date, kernel),
each joined with the run's job name, model, hardware and torch version from ``captures``
(:func:`jobs.fleet.stats.reduce_job_steps`, :func:`jobs.fleet.stats.reduce_job_kernels`).
transform (pandas, on the driver; the reduced frames and the few columns read of ``findings``, ``captures``,
``ranks`` and ``collectives`` are small): :func:`jobs.fleet.stats.fleet_stats`,
:func:`jobs.fleet.stats.fleet_kernels`, :func:`jobs.fleet.regressions.find_regressions`,
:func:`jobs.fleet.impact.fleet_findings`, :func:`jobs.fleet.hosts.host_health`.
load: Parquet under ``{warehouse}/{fleet_stats,fleet_kernels,regressions,fleet_findings,host_health}``
through the storage seam's commit (:func:`jobs.warehouse.write_table`), each table replaced whole in one commit
(inputs read as of one set of versions, recorded with the write). The tables are rebuilt whole by each run, so a
run is idempotent and sees late-arriving jobs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd
import pyarrow as pa

from jobs.analyze.windows import WINDOW_TRACE, analysis_windows
from jobs.executor import is_local
from jobs.fleet.changes import what_changed
from jobs.fleet.hosts import host_health
from jobs.fleet.impact import fleet_findings
from jobs.fleet.regressions import INPUT_COLUMNS, find_regressions
from jobs.fleet.stats import (
    JOB_KERNELS_SCHEMA,
    JOB_STEPS_SCHEMA,
    RUN_COLUMNS,
    STEP_COLUMNS,
    fleet_kernels,
    fleet_stats,
    job_kernels_frame,
    job_steps_frame,
    profiler_steps,
    reduce_job_kernels,
    reduce_job_steps,
    run_metadata_frame,
)
from jobs.warehouse import read_arrow, read_pandas, read_spark, table_versions, write_table
from schemas import FLEET_TABLES, REGRESSIONS


@dataclass
class FleetResult:
    """What a fleet run wrote: row counts per table and the ``regressions`` rows (pandas)."""

    counts: dict = field(default_factory=dict)
    regressions: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=REGRESSIONS.names))


def _pandas(df) -> pd.DataFrame:
    return df.toArrow().to_pandas()


def fleet_frames(
    job_steps: pd.DataFrame, job_kernels: pd.DataFrame | None, tables: dict | None = None, **regression_options
) -> dict:
    """The fleet tables (pandas) from the reduced frames and the columns of :data:`READ_COLUMNS` (pure).

    Args:
        job_steps: :func:`jobs.fleet.stats.job_steps_frame` rows over the analysis windows (whole-trace windows
            feed ``fleet_stats`` and ``fleet_findings``, not ``regressions``); job_kernels: :func:`jobs.fleet.stats.job_kernels_frame` rows.
        tables: ``{"findings"|"captures"|"ranks"|"collectives": pandas}`` (a table missing: not written yet).
        regression_options: thresholds for :func:`jobs.fleet.regressions.find_regressions`.

    Returns:
        ``{"fleet_stats": …, "fleet_kernels": …, "regressions": …, "fleet_findings": …, "host_health": …}``.
    """
    t = tables or {}
    steps_only = profiler_steps(job_steps)  # regressions compare ProfilerSteps, not whole-trace windows
    regs = (
        find_regressions(steps_only[INPUT_COLUMNS], **regression_options)
        if len(steps_only)
        else pd.DataFrame(columns=REGRESSIONS.names)
    )
    regs["changes_json"] = what_changed(regs, steps_only, job_kernels, t.get("captures"), t.get("findings"))
    return {
        "fleet_stats": fleet_stats(job_steps),
        "fleet_kernels": fleet_kernels(job_kernels),
        "regressions": regs[REGRESSIONS.names],
        "fleet_findings": fleet_findings(t.get("findings"), job_steps),
        "host_health": host_health(t.get("captures"), t.get("ranks"), t.get("collectives")),
    }


def run_fleet(engine, warehouse: str, **regression_options) -> FleetResult:
    """Rebuild the fleet tables of ``warehouse``.

    Args:
        engine: a SparkSession (reduction in Spark) or a :class:`jobs.executor.LocalExecutor` (in pandas).
        warehouse: warehouse root.
        regression_options: thresholds for :func:`jobs.fleet.regressions.find_regressions`.

    Returns:
        :class:`FleetResult` (nothing is written when no rank has been analyzed yet).
    """
    result = FleetResult()
    # one consistent set of input versions, read as of them and recorded with every fleet table written: a run
    # at the same time that derived the tables from newer inputs keeps its rows (jobs.commit: ``inputs``)
    inputs = table_versions(warehouse, FLEET_INPUTS)
    if is_local(engine):
        t = read_pandas(warehouse, ("captures", "steps", "ranks", "kernels"), skip_missing=True, versions=inputs)
        if "captures" not in t or ("steps" not in t and "ranks" not in t):
            return result
        windows = analysis_windows(t.get("steps"), t.get("ranks"), t["captures"])
        js = job_steps_frame(windows, t["captures"])
        jk = job_kernels_frame(t["kernels"], t["captures"]) if "kernels" in t else None
    else:
        captures, steps, ranks, kernels = (
            read_spark(engine, warehouse, n, as_of=inputs[n]) for n in ("captures", "steps", "ranks", "kernels")
        )
        if captures is None or (steps is None and ranks is None):
            return result
        js, jk = _reduce_on_spark(captures, steps, kernels, ranks)
    frames = fleet_frames(js, jk, _read_columns(engine, warehouse, inputs), **regression_options)
    for name, pdf in frames.items():
        result.counts[name] = len(pdf)
        write_fleet_table(pdf, warehouse, name, inputs)  # an empty table is written too: it exists, with 0 rows
    result.regressions = frames["regressions"]
    return result


#: The ``ranks`` and ``captures`` columns a whole-trace window is made of (:func:`analysis_windows`).
_WINDOW_RANK_KEY = ("job_id", "attempt", "rank", "capture_id")
_WINDOW_CAPTURE_COLUMNS = ("capture_id", "trace_start_ns", "trace_end_ns")


def _trace_windows_on_driver(captures, steps, ranks) -> pd.DataFrame:
    """The whole-trace windows (:func:`analysis_windows` rows with ``window = "trace"``) from Spark tables: the
    rank captures of ``ranks`` (one row each: small) without a row in ``steps`` (its distinct rank captures)."""
    if ranks is None:
        return pd.DataFrame()
    from schemas import STEPS  # the window's columns are the steps columns

    r = _pandas(ranks.select(*[c for c in STEPS.names if c in ranks.columns]))
    have = _pandas(steps.select(*_WINDOW_RANK_KEY).distinct()) if steps is not None else None
    caps = _pandas(captures.select(*[c for c in _WINDOW_CAPTURE_COLUMNS if c in captures.columns]))
    w = analysis_windows(have.assign(step=0) if have is not None else None, r, caps)
    return w[(w["window"] == WINDOW_TRACE).to_numpy(dtype=bool)]


def _reduce_on_spark(captures, steps, kernels, ranks=None) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """:func:`job_steps_frame` (over the analysis windows) and :func:`job_kernels_frame` with the big reductions
    on Spark's executors: the same pandas transforms per job run (``applyInPandas``), joined on the driver with
    the runs' metadata; the whole-trace windows (one per rank capture without ProfilerStep) are reduced on the
    driver with the same :func:`reduce_job_steps`."""
    from pyspark.sql.pandas.types import from_arrow_schema  # heavy: pyspark

    runs = run_metadata_frame(_pandas(captures.select(*[c for c in RUN_COLUMNS if c in captures.columns])))
    by_run = ["job_id", "attempt"]
    parts = []
    if steps is not None:
        js = (
            steps.select(*STEP_COLUMNS)
            .groupBy(*by_run)
            .applyInPandas(reduce_job_steps, from_arrow_schema(JOB_STEPS_SCHEMA))
        )
        parts.append(_pandas(js))
    trace = _trace_windows_on_driver(captures, steps, ranks)
    if len(trace):
        parts.append(reduce_job_steps(trace))
    parts = [p for p in parts if len(p)]
    js = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=JOB_STEPS_SCHEMA.names)
    js = js.sort_values([*by_run, "step"], kind="stable").merge(runs, on=by_run, how="inner")
    if kernels is None:
        return js, None
    jk = kernels.select(*JOB_KERNELS_SCHEMA.names).groupBy(*by_run)
    jk = _pandas(jk.applyInPandas(reduce_job_kernels, from_arrow_schema(JOB_KERNELS_SCHEMA)))
    return js, jk.sort_values([*by_run, "date", "name"], kind="stable").merge(runs, on=by_run, how="inner")


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


def _read_columns(engine, warehouse: str, versions: dict) -> dict[str, pd.DataFrame]:
    """:data:`READ_COLUMNS` of the tables that exist at ``versions``, as pandas (pyarrow on the local executor,
    else Spark)."""
    out = {}
    for name, cols in READ_COLUMNS.items():
        if is_local(engine):
            t = read_arrow(warehouse, name, columns=list(cols), as_of=versions.get(name))
            if t is not None:
                out[name] = t.to_pandas()
        else:
            df = read_spark(engine, warehouse, name, as_of=versions.get(name))
            if df is not None:
                out[name] = _pandas(df.select(*[c for c in cols if c in df.columns]))  # older warehouses lack some
    return out


def write_fleet_table(pdf: pd.DataFrame, warehouse: str, table: str, inputs: dict | None = None) -> None:
    """Write a fleet table (pandas) whole, in one commit: every old row goes (a dimension, date or kind with no
    rows left leaves none behind). ``inputs``: the input table versions it was derived from (a concurrent run's
    derivation from newer inputs is kept: :func:`jobs.warehouse.write_table`)."""
    t = FLEET_TABLES[table]
    rows = pa.Table.from_pandas(pdf[t.names], schema=t.arrow_schema(), preserve_index=False)
    write_table(rows, warehouse, table, replace_all=True, inputs=inputs)
