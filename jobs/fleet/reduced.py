"""The fleet stage's stored reductions: the job steps and job kernels of every job, kept in the warehouse between
runs, so a fleet run reduces only the jobs whose rows changed since the last one.

The big per-rank tables (``steps``: one row per rank and step, ``kernels``: per rank, step and kernel) grow with
the whole history; their reductions (:func:`jobs.fleet.stats.job_steps_frame`: one row per job step or
whole-trace window, :func:`jobs.fleet.stats.job_kernels_frame`: one row per (run, date, kernel)) are 1/ranks of
that. Each fleet run:

1. takes a fingerprint of each job's input rows from the Delta logs alone (no data read): per ``job_id``, the
   names of its live data files in :data:`FINGERPRINTED` at the versions the run reads (:func:`fingerprints`). A
   rewrite of a job (re-ingest, re-analysis, a late rank, compaction) gives new file names, so a new fingerprint;
2. re-reduces the jobs whose fingerprint differs from the one stored with their reductions, or that are new,
   from their own partitions only (partition-pruned reads, Spark or the local executor), and drops the jobs
   that left the inputs;
3. commits their rows (:data:`JOB_STEPS`, :data:`JOB_KERNELS`: Delta tables partitioned like their inputs by
   ``date``/``job_id``, each job's rows replaced whole). The fleet stage then derives its tables and the partial
   aggregates (:mod:`jobs.fleet.partials`: :data:`STATS_PARTIALS`, :data:`KERNEL_PARTIALS`) and last calls
   :func:`commit`: :data:`RUNS` (one row per run: its metadata and capture dates, what the next run looks up
   instead of the history) and the state (:data:`STATE`: the fingerprints and the fleet options the derived rows
   were made with). Each write records the input versions (a concurrent run with newer inputs wins,
   :func:`jobs.warehouse.write_table`). A run killed before :func:`commit` reduces those jobs again next time and
   recomputes the dates they had and have (:data:`RUNS` still holds the old ones).

These tables are internal (``_fleet_*``, not in :data:`schemas.FLEET_TABLES`): the fleet tables are derived
from them, readers query those.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

import pandas as pd
import pyarrow as pa

from jobs.analyze.windows import WINDOW_TRACE, analysis_windows
from jobs.executor import is_local
from jobs.fleet.partials import KERNEL_PARTIALS_SCHEMA, STATS_PARTIALS_SCHEMA, as_table
from jobs.fleet.stats import (
    JOB_KERNELS_SCHEMA,
    JOB_STEPS_SCHEMA,
    RUN_COLUMNS,
    RUN_METADATA_SCHEMA,
    STEP_COLUMNS,
    job_kernels_frame,
    job_steps_frame,
    reduce_job_kernels,
    reduce_job_steps,
    run_metadata_frame,
)
from jobs.warehouse import INTERNAL_TABLES, exists, job_files, read_arrow, read_pandas, read_spark, write_table
from schemas import STEPS

#: The input tables a job's reductions are made of.
SOURCES = ("captures", "steps", "ranks", "kernels")
#: The tables whose file names make a job's fingerprint: the sources, and ``findings`` (what changed in a run,
#: :mod:`jobs.fleet.changes`, reads them).
FINGERPRINTED = (*SOURCES, "findings")
#: The stored reductions and state (:data:`jobs.warehouse.INTERNAL_TABLES`, Delta tables under the root).
JOB_STEPS, JOB_KERNELS, RUNS, STATS_PARTIALS, KERNEL_PARTIALS, STATE = INTERNAL_TABLES
#: :data:`STATE` keys: ``job:<job_id>`` → fingerprint, and the fleet options (JSON).
_JOB, _OPTIONS = "job:", "fleet_options"

#: Stored rows: the reduction's columns, then the run metadata (partition columns ``date``, ``job_id`` strings).
SCHEMAS = {
    JOB_STEPS: pa.schema([*JOB_STEPS_SCHEMA, *RUN_METADATA_SCHEMA]),
    JOB_KERNELS: pa.schema([*JOB_KERNELS_SCHEMA, *RUN_METADATA_SCHEMA]),
    RUNS: pa.schema(
        [
            ("job_id", pa.string()),
            ("attempt", pa.int32()),
            *RUN_METADATA_SCHEMA,
            ("dates", pa.list_(pa.string())),  # the capture dates of its job steps and job kernels
            ("n_job_steps", pa.int64()),  # its job steps and whole-trace windows
            ("n_steps", pa.int64()),  # its ProfilerSteps
        ]
    ),
    STATS_PARTIALS: STATS_PARTIALS_SCHEMA,
    KERNEL_PARTIALS: KERNEL_PARTIALS_SCHEMA,
    STATE: pa.schema([("key", pa.string()), ("value", pa.string())]),
}
_PARTITION_BY = {JOB_STEPS: ("date", "job_id"), JOB_KERNELS: ("date", "job_id")}


@dataclass
class Reduced:
    """The fleet's reductions after :func:`update`.

    Attributes:
        runs: :data:`RUNS` rows of every run now; runs_before: those stored before this run (``None``: none were:
            every job was reduced).
        reduced_jobs, dropped_jobs: the job ids reduced again (sorted) and those that left the inputs.
        options_changed: the fleet options differ from those of the last run, or it is the first.
        state: the :data:`STATE` rows :func:`commit` writes; inputs: the input versions read.
    """

    runs: pd.DataFrame
    runs_before: pd.DataFrame | None = None
    reduced_jobs: list[str] = field(default_factory=list)
    dropped_jobs: list[str] = field(default_factory=list)
    options_changed: bool = True
    state: pa.Table | None = None
    inputs: dict = field(default_factory=dict)


def fingerprints(warehouse: str, versions: dict[str, int | None]) -> dict[str, str]:
    """``{job_id: fingerprint}`` of every job in :data:`FINGERPRINTED` at ``versions``: a SHA-1 over the names of
    the job's live data files in each table (Delta log only, no data read)."""
    names: dict[str, list[str]] = {}
    for table in FINGERPRINTED:
        for job, paths in job_files(warehouse, table, versions.get(table)).items():
            names.setdefault(job, []).extend(f"{table}/{p}" for p in paths)
    return {job: hashlib.sha1("\n".join(sorted(paths)).encode()).hexdigest() for job, paths in names.items()}


def stored_state(warehouse: str) -> tuple[dict[str, str], str | None]:
    """``({job_id: fingerprint}, fleet options JSON)`` the stored reductions and the fleet tables were made from;
    ``({}, None)`` before the first fleet run."""
    t = read_arrow(warehouse, STATE, columns=["key", "value"])
    state = {} if t is None else dict(zip(t["key"].to_pylist(), t["value"].to_pylist()))
    jobs = {k[len(_JOB) :]: v for k, v in state.items() if k.startswith(_JOB)}
    return jobs, state.get(_OPTIONS)


def update(
    engine, warehouse: str, versions: dict[str, int | None], rebuild: bool = False, options: dict | None = None
) -> Reduced:
    """Bring the stored reductions up to date with the inputs at ``versions``; :func:`commit` ends the run.

    Args:
        engine: a SparkSession (the reductions of the changed jobs on its executors, ``applyInPandas`` per run) or
            a :class:`jobs.executor.LocalExecutor` (pandas).
        warehouse: warehouse root.
        versions: ``{table: version}`` of :data:`FINGERPRINTED` to read (one consistent set,
            :func:`jobs.warehouse.table_versions`); also recorded with the stored rows.
        rebuild: re-reduce every job (ignore the stored reductions); also when no :data:`RUNS` is stored yet.
        options: the fleet options the derived tables are made with (JSON-able; stored, compared with the last).

    Returns:
        :class:`Reduced`.
    """
    rebuild = rebuild or not exists(warehouse, RUNS)
    now = fingerprints(warehouse, versions)
    stored, stored_options = ({}, None) if rebuild else stored_state(warehouse)
    opts = json.dumps(options or {}, sort_keys=True)
    changed = sorted(j for j, fp in now.items() if stored.get(j) != fp)
    dropped = sorted(set(stored) - set(now))
    inputs = {t: versions.get(t) for t in FINGERPRINTED}
    if rebuild:  # every job reduced again; the stored rows of jobs no longer in the inputs go
        dropped = sorted({j for n in (JOB_STEPS, JOB_KERNELS) for j in job_files(warehouse, n)} - set(now))
    new_runs = _reduce_in_batches(engine, warehouse, changed, dropped, versions, inputs)
    before = None if rebuild else _read(warehouse, RUNS)
    touched = {*changed, *dropped}
    kept = before[~before["job_id"].isin(touched)] if before is not None else None
    runs = pd.concat([d for d in (kept, new_runs) if d is not None and len(d)] or [run_rows(None, None)])
    state = None
    if changed or dropped or rebuild or opts != stored_options:
        keys = [*(_JOB + j for j in now), _OPTIONS]
        state = pa.table({"key": keys, "value": [*now.values(), opts]}, schema=SCHEMAS[STATE])
    return Reduced(
        runs.sort_values(["job_id", "attempt"], kind="stable").reset_index(drop=True),
        before,
        changed,
        dropped,
        options_changed=opts != stored_options,
        state=state,
        inputs=inputs,
    )


#: Jobs reduced and written per batch (:func:`update`): the driver holds one batch's job steps and job kernels
#: (~10 job steps and ~500 kernel rows per job and date: a batch is ~10^6 rows), never the history's.
REDUCE_BATCH_JOBS = 2000


def _reduce_in_batches(engine, warehouse: str, jobs: list[str], dropped: list[str], versions: dict, inputs: dict):
    """Reduce ``jobs`` and store their rows, :data:`REDUCE_BATCH_JOBS` at a time (one commit per table and batch,
    each replacing its jobs' rows; the first also removes ``dropped``'s); :data:`RUNS` rows of the jobs reduced.
    A run killed between batches leaves every job's rows either as before or made again from the same inputs: the
    stored state (:func:`commit`) is what says which jobs are current."""
    batches = [jobs[i : i + REDUCE_BATCH_JOBS] for i in range(0, len(jobs), REDUCE_BATCH_JOBS)]
    runs = []
    for k, batch in enumerate(batches or [[]]):
        js, jk = _reduce_jobs(engine, warehouse, batch, versions) if batch else (None, None)
        gone = dropped if k == 0 else []
        for name, rows in ((JOB_STEPS, js), (JOB_KERNELS, jk)):
            if batch or gone or not exists(warehouse, name):
                _write(rows, warehouse, name, replace_jobs=[*batch, *gone], replace_all=False, inputs=inputs)
        runs.append(run_rows(js, jk))
    return pd.concat(runs, ignore_index=True) if len(runs) > 1 else runs[0]


def commit(warehouse: str, reduced: Reduced) -> None:
    """End a fleet run (after the fleet tables and partials are written): store :data:`RUNS` and then the state,
    so the next run starts from them."""
    if reduced.state is None:
        return
    write_internal(reduced.runs, warehouse, RUNS, reduced.inputs)
    write_table(
        reduced.state, warehouse, STATE, replace_all=True, inputs=reduced.inputs, schema=SCHEMAS[STATE], partition_by=()
    )


def run_rows(job_steps: pd.DataFrame | None, job_kernels: pd.DataFrame | None) -> pd.DataFrame:
    """:data:`RUNS` rows of the runs in ``job_steps`` and ``job_kernels`` (their stored reductions)."""
    names = SCHEMAS[RUNS].names
    parts = [d.assign(_w=1 if d is job_steps else 0) for d in (job_steps, job_kernels) if d is not None and len(d)]
    if not parts:
        return pd.DataFrame(columns=names)
    meta = list(RUN_METADATA_SCHEMA.names)
    both = pd.concat(
        [p[["job_id", "attempt", "date", "_w", *meta, *(["window"] if "window" in p else [])]] for p in parts]
    )
    both["_s"] = (both["_w"] == 1) & (both["window"] != WINDOW_TRACE) if "window" in both else both["_w"] == 1
    g = both.groupby(["job_id", "attempt"], sort=True)
    out = g[meta].first()
    out["dates"] = g["date"].agg(lambda d: sorted({str(x) for x in d}))
    out["n_job_steps"], out["n_steps"] = g["_w"].sum(), g["_s"].sum()
    return out.reset_index()[names]


def read_reductions(warehouse: str, job_ids=None) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """The stored job steps and job kernels of ``job_ids`` (``None``: every job), as :func:`update`'s frames."""
    return _read(warehouse, JOB_STEPS, job_ids), _read(warehouse, JOB_KERNELS, job_ids, none_if_missing=True)


def read_internal(warehouse: str, name: str) -> pd.DataFrame | None:
    """An unpartitioned internal table (:data:`RUNS`, :data:`STATS_PARTIALS`, :data:`KERNEL_PARTIALS`) as pandas;
    ``None`` when it was never written."""
    t = read_internal_table(warehouse, name)
    return None if t is None else t.to_pandas()


def read_internal_table(warehouse: str, name: str, run_dates=None) -> pa.Table | None:
    """:func:`read_internal` as Arrow, in :data:`SCHEMAS`' columns and types; ``None`` when never written. With
    ``run_dates``, the partials of those run dates only (the files whose statistics exclude them are skipped)."""
    parts = None if run_dates is None else {"run_date": run_dates}
    t = read_arrow(warehouse, name, columns=SCHEMAS[name].names, partitions=parts)
    return None if t is None else internal_table(t, name)


def internal_table(rows: pd.DataFrame | pa.Table, name: str) -> pa.Table:
    """``rows`` as an Arrow table of internal table ``name``'s schema (:data:`SCHEMAS`; pandas converted, Arrow cast),
    without pandas metadata, so that tables of one name concatenate."""
    return as_table(rows, SCHEMAS[name])


def write_internal(
    rows: pd.DataFrame | pa.Table, warehouse: str, name: str, inputs: dict, replace_rows: list | None = None
) -> None:
    """Replace an unpartitioned internal table whole with ``rows`` (pandas or Arrow; one commit), or only the rows
    the predicate ``replace_rows`` matches (:func:`jobs.warehouse.write_table`); the partials' files carry min / max
    statistics, their merged rows in files of their own (:data:`jobs.warehouse.INTERNAL_FILES_APART`: updated by
    key, by run date)."""
    schema = SCHEMAS[name]
    t = internal_table(rows, name)
    if replace_rows is not None:
        write_table(t, warehouse, name, inputs=inputs, schema=schema, partition_by=(), replace_rows=replace_rows)
    else:
        write_table(t, warehouse, name, replace_all=True, inputs=inputs, schema=schema, partition_by=())


def _write(rows: pd.DataFrame | None, warehouse: str, name: str, replace_jobs, replace_all: bool, inputs) -> None:
    """Replace ``replace_jobs``' rows of a stored reduction with ``rows`` (every row when ``replace_all``)."""
    schema = SCHEMAS[name]
    if rows is None:
        rows = pd.DataFrame(columns=schema.names)
    t = pa.Table.from_pandas(rows[schema.names], schema=schema, preserve_index=False)
    write_table(t, warehouse, name, replace_jobs, replace_all, inputs, schema=schema, partition_by=_PARTITION_BY[name])


def _read(warehouse: str, name: str, job_ids=None, none_if_missing: bool = False) -> pd.DataFrame | None:
    """A stored table (of ``job_ids`` only, where given) as pandas, sorted as the reductions return them; an
    empty frame (or ``None``) when it holds no row."""
    t = read_arrow(warehouse, name, job_ids=job_ids, columns=SCHEMAS[name].names)
    if t is None or not t.num_rows:
        return None if none_if_missing else pd.DataFrame(columns=SCHEMAS[name].names)
    df = t.to_pandas()
    keys = {JOB_STEPS: ["job_id", "attempt", "step"], JOB_KERNELS: ["job_id", "attempt", "date", "name"]}
    return df.sort_values(keys.get(name, ["job_id", "attempt"]), kind="stable").reset_index(drop=True)


def _reduce_jobs(engine, warehouse: str, job_ids: list[str], versions: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """:func:`job_steps_frame` and :func:`job_kernels_frame` rows of ``job_ids`` (empty frames when none)."""
    empty = (pd.DataFrame(columns=SCHEMAS[JOB_STEPS].names), pd.DataFrame(columns=SCHEMAS[JOB_KERNELS].names))
    if is_local(engine):
        t = read_pandas(warehouse, SOURCES, job_ids, skip_missing=True, versions=versions)
        if "captures" not in t or ("steps" not in t and "ranks" not in t):
            return empty
        windows = analysis_windows(t.get("steps"), t.get("ranks"), t["captures"])
        js = job_steps_frame(windows, t["captures"]) if len(windows) else empty[0]
        jk = job_kernels_frame(t["kernels"], t["captures"]) if "kernels" in t and len(t["kernels"]) else empty[1]
        return js, jk
    captures, steps, ranks, kernels = (
        read_spark(engine, warehouse, n, job_ids=job_ids, as_of=versions.get(n)) for n in SOURCES
    )
    if captures is None or (steps is None and ranks is None):
        return empty
    js, jk = _reduce_on_spark(captures, steps, kernels, ranks)
    return js, (jk if jk is not None else empty[1])


def spark_pandas(df) -> pd.DataFrame:
    """A (small) Spark DataFrame as pandas, pyarrow's default conversion (the fleet stage's driver-side frames)."""
    return df.toArrow().to_pandas()


#: The ``ranks`` and ``captures`` columns a whole-trace window is made of (:func:`analysis_windows`).
_WINDOW_RANK_KEY = ("job_id", "attempt", "rank", "capture_id")
_WINDOW_CAPTURE_COLUMNS = ("capture_id", "trace_start_ns", "trace_end_ns")


def _trace_windows_on_driver(captures, steps, ranks) -> pd.DataFrame:
    """The whole-trace windows (:func:`analysis_windows` rows with ``window = "trace"``) from Spark tables: the
    rank captures of ``ranks`` (one row each: small) without a row in ``steps`` (its distinct rank captures)."""
    if ranks is None:
        return pd.DataFrame()
    r = spark_pandas(ranks.select(*[c for c in STEPS.names if c in ranks.columns]))
    have = spark_pandas(steps.select(*_WINDOW_RANK_KEY).distinct()) if steps is not None else None
    caps = spark_pandas(captures.select(*[c for c in _WINDOW_CAPTURE_COLUMNS if c in captures.columns]))
    w = analysis_windows(have.assign(step=0) if have is not None else None, r, caps)
    return w[(w["window"] == WINDOW_TRACE).to_numpy(dtype=bool)]


def _reduce_on_spark(captures, steps, kernels, ranks=None) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """:func:`job_steps_frame` (over the analysis windows) and :func:`job_kernels_frame` with the big reductions
    on Spark's executors: the same pandas transforms per job run (``applyInPandas``), joined on the driver with
    the runs' metadata; the whole-trace windows (one per rank capture without ProfilerStep) are reduced on the
    driver with the same :func:`reduce_job_steps`."""
    from pyspark.sql.pandas.types import from_arrow_schema  # heavy: pyspark

    runs = run_metadata_frame(spark_pandas(captures.select(*[c for c in RUN_COLUMNS if c in captures.columns])))
    by_run = ["job_id", "attempt"]
    parts = []
    if steps is not None:
        js = (
            steps.select(*STEP_COLUMNS)
            .groupBy(*by_run)
            .applyInPandas(reduce_job_steps, from_arrow_schema(JOB_STEPS_SCHEMA))
        )
        parts.append(spark_pandas(js))
    trace = _trace_windows_on_driver(captures, steps, ranks)
    if len(trace):
        parts.append(reduce_job_steps(trace))
    parts = [p for p in parts if len(p)]
    js = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=JOB_STEPS_SCHEMA.names)
    js = js.sort_values([*by_run, "step"], kind="stable").merge(runs, on=by_run, how="inner")
    if kernels is None:
        return js, None
    jk = kernels.select(*JOB_KERNELS_SCHEMA.names).groupBy(*by_run)
    jk = spark_pandas(jk.applyInPandas(reduce_job_kernels, from_arrow_schema(JOB_KERNELS_SCHEMA)))
    return js, jk.sort_values([*by_run, "date", "name"], kind="stable").merge(runs, on=by_run, how="inner")
