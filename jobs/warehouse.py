"""The storage seam: the one module that reads, writes, replaces and commits warehouse tables.

Every table lives at ``{warehouse}/{table}`` as a Delta Lake table (:data:`schemas.TABLES`,
:data:`schemas.FLEET_TABLES`): Hive-partitioned Parquet data files plus the transaction log ``_delta_log/``,
written and read with delta-rs (the ``deltalake`` package: no JVM). Stages reach the tables only through this
module: they hand it rows (a Spark DataFrame, a ``pyarrow.Table``, or the rows their local-executor workers
wrote) and read snapshots back. The table transaction behind it (:mod:`jobs.commit`) is private to this module
(import-linter contract "Only the warehouse imports the commit protocol").

Reads (a snapshot — the latest version, or ``as_of`` a version number or time): :func:`read_spark` (the
snapshot's file list; ``format("delta")`` where delta-spark is installed), :func:`read_arrow`,
:func:`read_pandas`, :func:`read_frames`, :func:`table_columns`, :func:`exists`, :func:`require_warehouse`,
:func:`register_views`, :func:`table_versions`, :func:`history`. A table that was never written reads as ``None``
(Spark, Arrow) or as an empty frame with the table's columns (pandas), and is an empty view of its declared schema
in SQL; a table of the pre-Delta layout raises :class:`jobs.commit.CommitError` naming ``tracelake migrate``;
every other read error is raised. A read sees one committed version of each table: never a partial write, on
local disk and on S3. Other engines read the same tables: ``duckdb.sql("SELECT * FROM delta_scan('<wh>/steps')")``,
``polars.read_delta("<wh>/steps")``, ``deltalake.DeltaTable("<wh>/steps").to_pandas()``.

Writes:

* :func:`write_table` — replace the rows of the jobs in ``rows`` (and, with ``replace_jobs``, every other
  row of those jobs) in one Delta commit: atomic, concurrent writers retried, on local disk and S3.
* :func:`work_dir`, :func:`stage_rows`, :func:`staged_rows` — the local executor's workers write their rows
  into folders of a run's work area, and the driver hands them to :func:`write_table` without reading them.
* :func:`recover` — remove dead runs' work folders (a killed commit needs no recovery).
* :func:`maintain` — compact small files, vacuum unreferenced ones; :func:`migrate` — convert a warehouse of
  the old layout once.
* :func:`write_text_atomic` — a small file (a validation mark, a findings document) replaced whole.
"""

from __future__ import annotations

import contextvars
import datetime as _dt
import json
import os
import posixpath
from collections.abc import Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from functools import partial
from urllib.parse import quote, unquote

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from jobs.commit import RETENTION_HOURS as _RETENTION_HOURS
from jobs.commit import CommitError as CommitError  # re-exported: readers and the CLI catch it
from jobs.commit import (
    CommitResult,
    live_files,
    local_root,
    move_staged,
    open_table,
    partition_in,
    stage_arrow,
    write_partitions,
)
from jobs.commit import maintain as _maintain
from jobs.commit import migrate as _migrate
from jobs.commit import recover as _recover
from jobs.commit import table_uri as _table_uri
from jobs.commit import use_storage_options as use_storage_options  # re-exported: run settings carry credentials
from jobs.commit import work_dir as _work_dir
from jobs.commit import write_text_atomic as _write_text_atomic
from jobs.executor import is_local
from schemas import FLEET_TABLES, TABLES, declared

#: Internal tables, not documented for readers (:mod:`schemas` does not declare them): the fleet stage's stored
#: reductions, runs, partial aggregates and the state they were made from (:mod:`jobs.fleet.reduced`).
#: Maintained like the others.
INTERNAL_TABLES = (
    "_fleet_job_steps",
    "_fleet_job_kernels",
    "_fleet_runs",
    "_fleet_stats_partials",
    "_fleet_kernel_partials",
    "_fleet_state",
)
#: The internal tables whose rows of one value stay in files of their own (:func:`jobs.commit.apart`, as the
#: declared tables' ``files_apart``): the partials' merged rows (``run_date = 'all'``), rewritten by most runs,
#: apart from the dated ones, which a run leaves alone.
INTERNAL_FILES_APART = {"_fleet_stats_partials": ("run_date", "all"), "_fleet_kernel_partials": ("run_date", "all")}


def table_path(warehouse: str, table: str) -> str:
    """``{warehouse}/{table}`` (any fsspec URI or local folder)."""
    return _table_uri(warehouse, table)


#: A table version to read: a version number, an ISO 8601 time or a ``datetime`` (the version current then), or
#: ``None`` for the latest.
AsOf = int | str | _dt.datetime | None


#: The reads of the current context (:func:`reads_logged`): ``{table: version read}``, or ``None`` when not logging.
_READS: contextvars.ContextVar[dict[str, int] | None] = contextvars.ContextVar("tracelake_reads", default=None)
#: The snapshots opened in the current :func:`reads_logged` context: ``{(table uri, as_of): DeltaTable or None}``.
_PINNED: contextvars.ContextVar[dict | None] = contextvars.ContextVar("tracelake_pinned", default=None)


@contextmanager
def reads_logged() -> Iterator[dict[str, int]]:
    """Log the table versions every read in this context sees (``with reads_logged() as read:`` … ``read`` is
    ``{table: version}``): what an answer states so that it can be reproduced (MCP answers' ``tables_read``).

    Inside the context each table is opened once, at its first read: later reads of it see the same version (one
    consistent snapshot per table for a whole answer, and no second log read)."""
    log: dict[str, int] = {}
    token, pinned = _READS.set(log), _PINNED.set({})
    try:
        yield log
    finally:
        _READS.reset(token)
        _PINNED.reset(pinned)


#: The snapshots opened in the current :func:`versions_cached` context: ``{(table uri, version number): DeltaTable}``
#: (never changed once there) and ``{(table uri, None): DeltaTable}``, the latest (brought up to date at each read).
_VERSIONS: contextvars.ContextVar[dict | None] = contextvars.ContextVar("tracelake_versions", default=None)


@contextmanager
def versions_cached() -> Iterator[None]:
    """Inside the context each table's Delta log is replayed once: a read at a version number (``as_of`` an int,
    a snapshot that never changes) reuses the snapshot of that version opened before (as the latest or at that
    number: :func:`table_versions`, then reads as of them); a read of the latest version, or a write, brings the
    snapshot opened before up to date by reading the log's newer commits only (a stage sees its own writes, and a
    long history's log is not replayed per read)."""
    token = _VERSIONS.set({})
    try:
        yield
    finally:
        _VERSIONS.reset(token)


def _cached_latest(uri: str):
    """The latest snapshot of ``uri`` opened in this :func:`versions_cached` context, or ``None``; it is about to be
    brought up to date (moved to a newer version), so it no longer stands for the version it was opened at."""
    versions = _VERSIONS.get()
    if versions is None:
        return None
    dt = versions.get((uri, None))
    if dt is not None:
        for k in [k for k, v in versions.items() if v is dt and k[1] is not None]:
            del versions[k]
    return dt


def _snapshot_to_write(warehouse: str, table: str):
    """In a :func:`versions_cached` context, the table's latest snapshot for a write (opened and kept there, or
    the one kept; ``None`` when never written); elsewhere ``None`` (the commit opens it)."""
    versions = _VERSIONS.get()
    if versions is None:
        return None
    uri = table_path(warehouse, table)
    dt = _cached_latest(uri) or open_table(uri)
    if dt is not None:
        versions[(uri, None)] = dt
    return dt


def _snapshot(warehouse: str, table: str, as_of: AsOf = None):
    """The table's Delta snapshot (``deltalake.DeltaTable``) at ``as_of``; ``None`` when never written."""
    uri, pinned = table_path(warehouse, table), _PINNED.get()
    key = (uri, as_of.isoformat() if isinstance(as_of, _dt.datetime) else as_of)
    if pinned is not None and key in pinned:
        return pinned[key]
    versions = _VERSIONS.get()
    if versions is not None and isinstance(as_of, int) and key in versions:
        return versions[key]
    dt = _cached_latest(uri) if as_of is None else None
    if dt is not None:
        dt.update_incremental()
    else:
        dt = open_table(uri, as_of)
    if versions is not None and dt is not None:
        if as_of is None:
            versions[(uri, None)] = dt
        versions[(uri, int(dt.version()))] = dt  # a version never changes: a later read at it reuses this one
    if pinned is not None:
        pinned[key] = dt
    log = _READS.get()
    if log is not None and dt is not None:
        log[table] = int(dt.version())
    return dt


def _files(dt, job_ids) -> list[dict]:
    """The live data files of a snapshot, only ``job_ids``' when given: ``{"uri"`` (absolute path or URI),
    ``"partition"`` (its partition values)``}``."""
    root = dt.table_uri.rstrip("/")
    if root.startswith("file://"):
        root = root[len("file://") :]
    files = live_files(dt, None if job_ids is None else lambda actions: partition_in(actions, "job_id", job_ids))
    # the log's paths are URIs (Delta protocol: "needs to be decoded to get the data file path")
    return [{"uri": posixpath.join(root, unquote(f["path"])), "partition": f["partition"]} for f in files]


def read_spark(spark, warehouse: str, table: str, job_ids: list[str] | None = None, as_of: AsOf = None):
    """A warehouse table as a Spark DataFrame, restricted to ``job_ids`` when given: the snapshot's data files
    (its Delta log's file list; pyspark ships no Delta reader) read with the table's schema: on local disk by
    Spark's Parquet reader (partition columns from the paths), on an object store by the pyarrow data source of
    :mod:`jobs.spark_files` (no Hadoop S3 connector needed). On a cluster with delta-spark,
    ``spark.read.format("delta").load(path)`` reads the same table.

    Args:
        as_of: a version number or time (:data:`AsOf`); default the latest version.

    Returns:
        The DataFrame, or ``None`` when the table was never written or holds no rows (of ``job_ids``).

    Raises:
        jobs.commit.CommitError: the table is of the pre-Delta layout (run ``tracelake migrate``).
        pyspark's AnalysisException for any other read error (corrupt files, permissions).
    """
    from pyspark.sql.pandas.types import from_arrow_schema  # heavy: pyspark, only on the Spark path

    dt = _snapshot(warehouse, table, as_of)
    if dt is None:
        return None
    files = _files(dt, job_ids)
    if not files:
        return None
    schema = from_arrow_schema(_arrow_schema(dt))
    root = table_path(warehouse, table)
    if "://" not in root:  # local disk: Spark's own Parquet reader, partition columns from the paths
        return spark.read.schema(schema).option("basePath", root).parquet(*(f["uri"] for f in files))
    from jobs.spark_files import NAME, ParquetFiles  # heavy: pyspark's data source API, only for object stores

    spark.dataSource.register(ParquetFiles)
    return spark.read.format(NAME).schema(schema).option("files", json.dumps(files)).load()


def _arrow_schema(dt) -> pa.Schema:
    """A snapshot's schema as ``pyarrow`` (every column nullable, as Parquet files read back)."""
    return pa.schema(dt.schema().to_arrow())


def to_pandas_exact(df) -> pd.DataFrame:
    """A (small) Spark DataFrame as pandas with nullable integer dtypes (exact ns, no float upcast)."""
    return df.toArrow().to_pandas(types_mapper=exact_ints)


def read_frames(engine, warehouse: str, tables, job_ids: list[str]) -> dict[str, pd.DataFrame]:
    """Rows of ``job_ids`` from the (small) tables ``tables`` as pandas: read by Spark and collected, or
    on the local executor (:mod:`jobs.executor`) by :func:`read_pandas` (the same frames).

    Returns:
        ``{table: DataFrame with exactly the declared columns}``; a table never written gives an
        empty frame with those columns.
    """
    if is_local(engine):
        return read_pandas(warehouse, tables, job_ids)
    spark, out = engine, {}
    for name in tables:
        names = declared(name).names
        df = read_spark(spark, warehouse, name, job_ids)
        out[name] = df.select(*names).toPandas() if df is not None else pd.DataFrame(columns=names)
    return out


class NoWarehouse(ValueError):
    """A warehouse path that holds no tracelake table (mistyped, or never written): the message names the path."""


def require_warehouse(warehouse: str) -> None:
    """Check that ``warehouse`` holds a tracelake table: a folder of a documented or internal table (Delta or of
    the pre-Delta layout) right under it. A local folder, or an fsspec URI (``s3://…``: one listing of its root,
    credentials from the ``AWS_*`` variables as for every reader). What the query commands check first, so that a
    mistyped ``--warehouse`` is an error rather than empty tables.

    Raises:
        NoWarehouse: the path does not exist or holds no table folder.
    """
    root = local_root(warehouse)
    names: set[str] = set()
    if root is not None:
        if os.path.isdir(root):
            names = {n for n in os.listdir(root) if os.path.isdir(os.path.join(root, n))}
    else:
        import fsspec  # why: object stores only; keeps fsspec off the local commands' imports

        fs, path = fsspec.core.url_to_fs(warehouse)
        try:
            names = {
                posixpath.basename(e["name"].rstrip("/")) for e in fs.ls(path, detail=True) if e["type"] == "directory"
            }
        except FileNotFoundError:
            names = set()
    if not names & {*TABLES, *FLEET_TABLES, *INTERNAL_TABLES}:
        raise NoWarehouse(f"no warehouse at {warehouse} (no tracelake table there: check the path)")


def exists(warehouse: str, table: str) -> bool:
    """Whether ``table`` has been written under ``warehouse`` (it is a Delta table)."""
    return _snapshot(warehouse, table) is not None


def exact_ints(arrow_type):
    """``types_mapper`` for ``pyarrow.Table.to_pandas``: integers as pandas' nullable integer dtypes."""
    return {
        pa.int8(): pd.Int8Dtype(),
        pa.int16(): pd.Int16Dtype(),
        pa.int32(): pd.Int32Dtype(),
        pa.int64(): pd.Int64Dtype(),
    }.get(arrow_type)


def table_dataset(warehouse: str, table: str, as_of: AsOf = None, partitions: Mapping[str, Iterable] | None = None):
    """The snapshot's ``pyarrow.dataset`` (``None`` when never written); with ``partitions`` (``{partition column:
    values}``), of the files in those partitions only, for the columns the table is partitioned by (delta-rs prunes
    the files before making fragments: a few jobs or dates of a long history cost their files, not the history's)."""
    dt = _snapshot(warehouse, table, as_of)
    if dt is None:
        return None
    cols = dt.metadata().partition_columns
    prune = [(c, "in", sorted({str(v) for v in vs})) for c, vs in (partitions or {}).items() if c in cols]
    return dt.to_pyarrow_dataset(file_pruning_predicate=prune) if prune else dt.to_pyarrow_dataset()


def table_columns(warehouse: str, table: str) -> list[str] | None:
    """The columns ``table`` has in the warehouse (its Delta schema), without reading rows; ``None`` when it was
    never written."""
    dt = _snapshot(warehouse, table)
    return None if dt is None else list(_arrow_schema(dt).names)


def job_rows(warehouse: str, table: str, job_ids: list[str] | None = None) -> dict[str, int] | None:
    """``{job_id: rows}`` of ``table``'s latest version from the Delta log's file statistics (no data read):
    the jobs of ``job_ids`` that have rows (default every job); ``{}`` when never written, ``None`` when a file
    has no row count or no ``job_id`` partition (the rows per job are then unknown)."""
    dt = _snapshot(warehouse, table)
    if dt is None:
        return {}
    add = pa.table(dt.get_add_actions(flatten=True))
    if "partition.job_id" not in add.schema.names or "num_records" not in add.schema.names:
        return None
    wanted = None if job_ids is None else {str(j) for j in job_ids}
    out: dict[str, int] = {}
    for job, n in zip(add["partition.job_id"].to_pylist(), add["num_records"].to_pylist()):
        if job is None or n is None:
            return None
        if wanted is None or job in wanted:
            out[job] = out.get(job, 0) + int(n)
    return out


def _log_columns(warehouse: str, table: str, as_of: AsOf, *columns: str) -> list[list]:
    """Columns of the live files' add actions of ``table`` at ``as_of`` (``path``, ``partition.job_id`` …; a
    partition column the table lacks is all ``None``), as lists — the Delta log only, no per-file objects (a
    year of jobs is thousands of files)."""
    dt = _snapshot(warehouse, table, as_of)
    if dt is None:
        return [[] for _ in columns]
    t = pa.table(dt.get_add_actions(flatten=True))
    return [t[c].to_pylist() if c in t.column_names else [None] * t.num_rows for c in columns]


def job_files(warehouse: str, table: str, as_of: AsOf = None) -> dict[str, list[str]]:
    """``{job_id: [data file path, …]}`` of ``table``'s live files at ``as_of`` (Delta log only, no data read;
    paths relative to the table root, sorted); ``{}`` when never written. A rewrite of a job's rows (re-ingest,
    compaction) names new files."""
    out: dict[str, list[str]] = {}
    for job, path in zip(*_log_columns(warehouse, table, as_of, "partition.job_id", "path")):
        if job is not None:
            out.setdefault(str(job), []).append(path)
    return {job: sorted(paths) for job, paths in out.items()}


def job_dates(warehouse: str, table: str, as_of: AsOf = None) -> dict[str, list[str]]:
    """``{job_id: [date, …]}``: the ``date`` partitions of each job's live files in ``table`` at ``as_of``, sorted
    (Delta log only, no data read); ``{}`` when never written."""
    out: dict[str, set[str]] = {}
    for job, date in zip(*_log_columns(warehouse, table, as_of, "partition.job_id", "partition.date")):
        if job is not None and date is not None:
            out.setdefault(str(job), set()).add(str(date))
    return {job: sorted(dates) for job, dates in out.items()}


def table_rows(warehouse: str, table: str) -> int | None:
    """The rows of ``table``'s latest version from the Delta log's file statistics (no data read); ``None`` when
    never written or a file has no row count."""
    dt = _snapshot(warehouse, table)
    if dt is None:
        return None
    add = pa.table(dt.get_add_actions(flatten=True))
    if "num_records" not in add.schema.names or add["num_records"].null_count:
        return None
    return int(pc.sum(add["num_records"]).as_py() or 0)


def table_version(warehouse: str, table: str) -> int | None:
    """The latest version of ``table`` (Delta log version); ``None`` when never written."""
    dt = _snapshot(warehouse, table)
    return None if dt is None else int(dt.version())


def read_arrow(
    warehouse: str,
    table: str,
    job_ids: list[str] | None = None,
    columns=None,
    filter=None,
    as_of: AsOf = None,
    partitions: Mapping[str, Iterable] | None = None,
):
    """Rows of one table as a ``pyarrow.Table``, without Spark: the snapshot's ``pyarrow.dataset`` (delta-rs).

    Partition columns (``date``, ``job_id``) are strings.

    Args:
        job_ids: only these jobs (partition-pruned; ``None`` = all).
        columns: declared columns to read (default: all that exist, in declaration order).
        filter: a further ``pyarrow.dataset`` expression.
        as_of: a version number or time (:data:`AsOf`); default the latest version.
        partitions: ``{string column: values}``: only the rows with one of those values in each column
            (``{"date": dates}``), partition-pruned where the table is partitioned by it.

    Returns:
        The table, or ``None`` when it was never written.

    Raises:
        jobs.commit.CommitError: the table is of the pre-Delta layout (run ``tracelake migrate``).
    """
    wanted_parts = {**(partitions or {}), **({"job_id": job_ids} if job_ids is not None else {})}
    dataset = table_dataset(warehouse, table, as_of, wanted_parts)
    if dataset is None:
        return None
    filt = None
    for c, vs in wanted_parts.items():
        f = ds.field(c).isin(pa.array(sorted({str(v) for v in vs}), type=pa.string()))
        filt = f if filt is None else filt & f
    if filter is not None:
        filt = filter if filt is None else filt & filter
    wanted = columns if columns is not None else declared(table).names
    return dataset.to_table(filter=filt, columns=[c for c in wanted if c in dataset.schema.names])


def read_pandas(
    warehouse: str,
    tables,
    job_ids: list[str] | None = None,
    exact: bool = False,
    skip_missing: bool = False,
    versions: Mapping[str, int | None] | None = None,
) -> dict[str, pd.DataFrame]:
    """Rows of ``job_ids`` (all rows when ``None``) from the tables ``tables``, as pandas, without Spark.

    Read by :func:`read_arrow` (local folder or any URI pyarrow's file systems take).

    Args:
        exact: integer columns as pandas' nullable integer dtypes (exact ns, no float upcast when a
            column has nulls), as :func:`to_pandas_exact`; else pyarrow's default conversion.
        skip_missing: leave tables that were never written out of the result.
        versions: ``{table: version}`` to read (:func:`table_versions`: one consistent set); default the latest.

    Returns:
        ``{table: DataFrame with the declared columns that exist, in declaration order}``; a table that
        was never written gives an empty frame with all declared columns (or is left out).
    """
    out = {}
    for name in tables:
        rows = read_arrow(warehouse, name, job_ids, as_of=(versions or {}).get(name))
        if rows is None:
            if not skip_missing:
                out[name] = pd.DataFrame(columns=declared(name).names)
            continue
        out[name] = rows.to_pandas(types_mapper=exact_ints if exact else None)
    return out


def register_views(spark, warehouse: str, as_of: AsOf = None) -> list[str]:
    """A Spark temp view per documented warehouse table (:data:`schemas.TABLES`, :data:`schemas.FLEET_TABLES`),
    named as the table, each over its snapshot (the latest version, or the one current at ``as_of``).

    A table never written, or written with no rows left (e.g. ``fleet_findings`` when no finding falls in the
    window), is registered as an empty view with its declared columns and types, so every documented table
    can be queried (``SELECT * FROM fleet_findings`` returns 0 rows, not TABLE_OR_VIEW_NOT_FOUND).

    Args:
        as_of: a version number (of every table: rarely meaningful) or a time (:data:`AsOf`); a table created after
            that time is an empty view.

    Returns:
        The registered names: every table of :data:`schemas.TABLES` and :data:`schemas.FLEET_TABLES`, in order.
    """
    from pyspark.sql.pandas.types import from_arrow_schema  # heavy: pyspark, only on the Spark path

    registered = []
    for name in [*TABLES, *FLEET_TABLES]:
        try:
            df = read_spark(spark, warehouse, name, as_of=as_of)
        except Exception as exc:  # noqa: BLE001 — a table younger than as_of has no version then
            if as_of is None or "version" not in str(exc).lower():
                raise
            df = None
        if df is None:
            df = spark.createDataFrame([], from_arrow_schema(declared(name).arrow_schema()))
        df.createOrReplaceTempView(name)
        registered.append(name)
    return registered


def table_versions(warehouse: str, tables=None) -> dict[str, int | None]:
    """``{table: latest version}`` of ``tables`` (default every documented table); ``None`` for a table never
    written. What a reader states so that its answer can be reproduced (``--as-of``)."""
    return {t: table_version(warehouse, t) for t in (tables or [*TABLES, *FLEET_TABLES])}


def history(warehouse: str, table: str, limit: int | None = None) -> list[dict]:
    """The commits of ``table``, newest first: ``{"version", "time"`` (ISO 8601 UTC), ``"operation"``,
    ``"write_id"``, ``"run"`` (who wrote it: ``$TRACELAKE_RUN_LABEL`` or host:pid), ``"files_added"``,
    ``"files_removed"}``; ``[]`` when never written (Delta log, ``DESCRIBE HISTORY``)."""
    dt = _snapshot(warehouse, table)
    if dt is None:
        return []
    out = []
    for h in dt.history(limit):
        m = h.get("operationMetrics") or {}
        out.append(
            {
                "version": int(h.get("version", -1)),
                "time": _dt.datetime.fromtimestamp(h["timestamp"] / 1000, _dt.UTC).isoformat(timespec="milliseconds"),
                "operation": str(h.get("operation", "")),
                "write_id": h.get("tracelake.write_id"),
                "run": h.get("tracelake.run"),
                "files_added": h.get("tracelake.files_added", m.get("num_added_files")),
                "files_removed": h.get("tracelake.files_removed", m.get("num_removed_files")),
            }
        )
    return out


# ----------------------------------------------------------------------------- writes


@dataclass(frozen=True)
class StagedRows:
    """Rows of one table that local-executor workers wrote with :func:`stage_rows`, for :func:`write_table`.

    Made by :func:`staged_rows`. Attributes: ``table``; ``folders``, the workers' folders in order;
    ``job_ids``, ``{folder: job id}`` for the folders whose rows belong to another job than they were written
    under (normalize's renamed bare jobs).
    """

    table: str
    folders: tuple[str, ...]
    job_ids: Mapping[str, str]


def work_dir(warehouse: str) -> AbstractContextManager[str]:
    """A private folder for one run's worker outputs (``with work_dir(wh) as work:``), removed when the run ends.

    Give each worker its own folder under it (:func:`stage_rows`). On a local warehouse it lies on the
    warehouse's file system, so :func:`write_table` moves the workers' files in without copying them; a
    run killed meanwhile leaves a folder that the next :func:`recover` removes (never a live run's).
    """
    return _work_dir(warehouse)


def stage_rows(rows: pa.Table, folder: str, table: str) -> None:
    """A worker writes its rows of ``table`` into its own ``folder`` of the run's :func:`work_dir`.

    Nothing is published: the driver hands the folders to :func:`write_table` through :func:`staged_rows`.
    A worker may stage several tables into one folder (each goes to its own sub-folder); a table with no
    rows writes nothing.

    Args:
        rows: the table's rows, partition columns included (``date``, ``job_id``).
        folder: the worker's folder (created when missing); its name prefixes the file names published.
        table: the warehouse table the rows are for.
    """
    stage_arrow(rows, os.path.join(folder, table), declared(table).partition_by)


def staged_rows(table: str, folders: Iterable[str], job_ids: Mapping[str, str] | None = None) -> StagedRows:
    """The rows of ``table`` that workers staged in ``folders`` (:func:`stage_rows`), to hand to :func:`write_table`.

    Args:
        folders: the workers' folders; one without rows of ``table`` adds none.
        job_ids: ``{folder: job id}``: every row of that folder is written under this job instead of its own
            (the folder's rows are all of one job).

    Raises:
        ValueError: two folders share a name (their file names would collide), or ``job_ids`` names a folder
            not in ``folders``.
    """
    folders = tuple(folders)
    job_ids = dict(job_ids or {})
    names = [os.path.basename(f.rstrip("/")) for f in folders]
    if len(set(names)) != len(names):
        raise ValueError(f"staged_rows({table!r}): worker folders must have distinct names, got {names}")
    if set(job_ids) - set(folders):
        raise ValueError(
            f"staged_rows({table!r}): job_ids for folders not staged: {sorted(set(job_ids) - set(folders))}"
        )
    return StagedRows(table, folders, job_ids)


def _move_in(rows: StagedRows, staging: str) -> None:
    """The commit's staging callable of ``rows``: every worker's files moved into ``staging``."""
    depth = len(declared(rows.table).partition_by)
    for folder in rows.folders:
        job_id = rows.job_ids.get(folder)
        relabel = partial(_relabel_job, job_id) if job_id is not None else None
        move_staged(os.path.join(folder, rows.table), staging, os.path.basename(folder.rstrip("/")), depth, relabel)


def _relabel_job(job_id: str, rel: str) -> str:
    """The partition folder ``rel`` (``date=…/job_id=old``) of the job ``job_id`` (``date=…/job_id=<job_id>``)."""
    return "/".join(f"job_id={quote(job_id, safe='')}" if seg.startswith("job_id=") else seg for seg in rel.split("/"))


def write_table(
    rows,
    warehouse: str,
    table: str,
    replace_jobs=None,
    replace_all: bool = False,
    inputs=None,
    schema: pa.Schema | None = None,
    partition_by=None,
    replace_where: Mapping[str, Iterable] | None = None,
    replace_rows: list | None = None,
    stats: bool = False,
) -> CommitResult:
    """Replace the rows of ``table`` that ``rows`` holds: the partitions (``date=…/job_id=…``) it has rows for
    are replaced whole, the others kept — in one Delta commit (:mod:`jobs.commit`); or, with ``replace_rows``,
    the rows a predicate matches.

    The write is atomic on any warehouse location: a run killed at any point leaves the table at its old or its
    new version; a concurrent writer of the same table makes this one re-read and retry, never lose or
    duplicate rows.

    Args:
        rows: the rows with the table's columns (partition columns included): a Spark DataFrame, a
            ``pyarrow.Table``, or :func:`staged_rows` (the local executor's workers' files, moved in).
        replace_jobs: the jobs ``rows`` holds every row of: their other partitions are removed in the same
            commit (no stale rows of a job rebuilt with no rows here, or under another date). With it, rows
            for no job leave a table that was never written unwritten.
        replace_all: ``rows`` are the whole table (a fleet table rebuilt whole): every other row goes.
        inputs: ``{table: version}`` the rows were derived from (:func:`table_versions`); a write derived from
            older inputs than the table's last write is skipped (two runs at once: the newer derivation stays).
        schema, partition_by: those of an internal table :mod:`schemas` does not declare (e.g. the fleet stage's
            stored reductions, :mod:`jobs.fleet.reduced`); default the declared ones.
        replace_where: ``{partition column: values}`` whose partitions go in the same commit, rows or not
            (``{"date": dates}``: the ``regressions`` of those dates made again).
        replace_rows: a predicate in disjunctive normal form whose rows ``rows`` (a ``pyarrow.Table``) replace:
            only the files that may hold one are read and rewritten (:func:`jobs.commit.write_partitions`).
        stats: write the data files' min / max statistics into the log (a ``pyarrow.Table``'s; a table updated by
            ``replace_rows`` then skips them by value).

    Returns:
        What was committed (:class:`jobs.commit.CommitResult`: version, partitions, files added and removed).

    Raises:
        ValueError: ``rows`` are staged rows of another table.
        TypeError: ``rows`` is some other callable.
        jobs.commit.CommitError: the table is of the pre-Delta layout, or the commit kept conflicting.
    """
    if isinstance(rows, StagedRows):
        if rows.table != table:
            raise ValueError(f"write_table({table!r}): the staged rows are of {rows.table!r}")
        rows = partial(_move_in, rows)
    elif callable(rows):
        raise TypeError(f"write_table({table!r}): rows must be a Spark DataFrame, a pyarrow.Table or staged_rows()")
    if partition_by is None:
        partition_by = declared(table).partition_by
    return write_partitions(
        rows,
        warehouse,
        table,
        partition_by,
        replace_jobs,
        schema=schema,
        replace_all=replace_all,
        inputs=inputs,
        replace_where=replace_where,
        snapshot=_snapshot_to_write(warehouse, table),
        replace_rows=replace_rows,
        stats=stats,
        files_apart=INTERNAL_FILES_APART.get(table),
    )


def maintain(warehouse: str, tables=None, retention_hours: float | None = None) -> dict[str, dict]:
    """Compact small files and vacuum unreferenced ones in every table of ``warehouse`` (internal ones included) or
    of ``tables``, then
    remove dead runs' work folders (:func:`jobs.commit.maintain`, safe while readers and writers run).

    Args:
        retention_hours: keep files any version of the last this-many hours needs (default
            :data:`jobs.commit.RETENTION_HOURS`, 7 days).

    Returns:
        ``{table: {"files_compacted", "files_added", "files_vacuumed", "skipped", "version"}}`` for the tables
        written.
    """
    out = {}
    for t in tables or [*TABLES, *FLEET_TABLES, *INTERNAL_TABLES]:
        if not exists(warehouse, t):
            continue
        hours = _RETENTION_HOURS if retention_hours is None else retention_hours
        out[t] = _maintain(table_path(warehouse, t), hours, files_apart=INTERNAL_FILES_APART.get(t))
    _recover(warehouse)
    return out


def migrate(warehouse: str) -> dict[str, str]:
    """Convert a warehouse of the pre-Delta layout in place, once (:func:`jobs.commit.migrate`): every documented
    table becomes a Delta table over its existing files.

    Returns:
        ``{table: "converted" | "already delta" | "not written"}``.

    Raises:
        jobs.commit.CommitError: the old layout left an interrupted publish (the message says what to do).
    """
    return _migrate(warehouse, {t: declared(t) for t in [*TABLES, *FLEET_TABLES]})


def recover(warehouse: str) -> list[str]:
    """Remove the work and staging folders of runs that died (a live run's are kept). A killed commit needs no
    roll-forward: each table is at its old or new version. Idempotent; stages call it before they write.
    Non-local warehouses: nothing to do.

    Returns:
        The dead runs' work folders removed.
    """
    return _recover(warehouse)


def write_text_atomic(uri: str, text: str) -> None:
    """Write a small text file (a mark, a findings document) so readers see the old or the new content, never
    a truncated one: on local disk a temporary file fsynced and renamed over ``uri``; on an object store
    one PUT. ``uri`` is a local path, a ``file://`` URI or an fsspec URI.

    Raises:
        OSError: the folder cannot be created or written.
    """
    _write_text_atomic(uri, text)
