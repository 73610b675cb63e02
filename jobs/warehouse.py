"""The storage seam: the one module that reads, writes, replaces and commits warehouse tables.

Tables live at ``{warehouse}/{table}``, Hive-partitioned Parquet (:data:`schemas.TABLES`,
:data:`schemas.FLEET_TABLES`). Stages reach them only through this module: they hand it rows (a Spark
DataFrame, a ``pyarrow.Table``, or the rows their local-executor workers wrote) and read snapshots back.
The commit protocol behind it (:mod:`jobs.commit`: staging, journal, exchange, trash, ``flock``) is
private to this module (import-linter contract "Only the warehouse imports the commit protocol"), so it
can be replaced (by a table format with a transaction log) without touching a stage.

Reads (a snapshot): :func:`read_spark`, :func:`read_arrow`, :func:`read_pandas`, :func:`read_frames`,
:func:`table_columns`, :func:`exists`, :func:`register_views`. A table that was never written reads as
``None`` (Spark, Arrow) or as an empty frame with the table's columns (pandas), and is an empty view of its
declared schema in SQL; every other read error is raised. On a local warehouse each partition (``date=…/job_id=…``) a read sees is complete, old or new,
never partial; a read that overlaps a write can see one job's new rows next to another job's old ones.

Writes:

* :func:`write_table` — replace the rows of the jobs in ``rows`` (and, with ``replace_jobs``, every other
  row of those jobs): crash-safe on a local warehouse, each partition swapped in whole.
* :func:`work_dir`, :func:`stage_rows`, :func:`staged_rows` — the local executor's workers write their rows
  into folders of a run's work area, and the driver hands them to :func:`write_table` without reading them.
* :func:`recover` — finish (or roll back) a write that a killed run left, before anything reads.
* :func:`write_text_atomic` — a small file (a validation mark, a findings document) replaced whole.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import partial
from urllib.parse import quote

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from jobs.commit import CommitResult, move_staged, stage_arrow, write_partitions
from jobs.commit import recover as _recover
from jobs.commit import work_dir as _work_dir
from jobs.commit import write_text_atomic as _write_text_atomic
from jobs.executor import is_local
from schemas import FLEET_TABLES, TABLES, declared

#: Spark's messages for a table folder that does not exist yet or holds no Parquet file.
_NOT_WRITTEN = ("PATH_NOT_FOUND", "UNABLE_TO_INFER_SCHEMA")


def table_path(warehouse: str, table: str) -> str:
    """``{warehouse}/{table}`` (any fsspec URI or local folder)."""
    return posixpath.join(warehouse.rstrip("/"), table)


def read_spark(spark, warehouse: str, table: str, job_ids: list[str] | None = None):
    """A warehouse table as a Spark DataFrame, restricted to ``job_ids`` when given.

    Returns:
        The DataFrame, or ``None`` when the table was never written.

    Raises:
        pyspark's AnalysisException for any other read error (corrupt files, permissions).
    """
    from pyspark.sql import functions as F  # heavy: pyspark, only on the Spark path

    try:
        df = spark.read.parquet(table_path(warehouse, table))
    except Exception as exc:  # noqa: BLE001 — only "not written yet" is expected
        if any(m in str(exc) for m in _NOT_WRITTEN):
            return None
        raise
    if job_ids is not None:
        df = df.filter(F.col("job_id").cast("string").isin([str(j) for j in job_ids]))
    return df


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


def exists(warehouse: str, table: str) -> bool:
    """Whether ``table`` has been written under ``warehouse`` (its folder exists)."""
    fs, root = _fs(table_path(warehouse, table))
    return fs.get_file_info(root).type != pafs.FileType.NotFound


def _fs(path: str):
    return pafs.FileSystem.from_uri(path) if "://" in path else (pafs.LocalFileSystem(), path)


def exact_ints(arrow_type):
    """``types_mapper`` for ``pyarrow.Table.to_pandas``: integers as pandas' nullable integer dtypes."""
    return {
        pa.int8(): pd.Int8Dtype(),
        pa.int16(): pd.Int16Dtype(),
        pa.int32(): pd.Int32Dtype(),
        pa.int64(): pd.Int64Dtype(),
    }.get(arrow_type)


def _dataset(warehouse: str, table: str):
    decl = declared(table)
    fs, root = _fs(table_path(warehouse, table))
    if fs.get_file_info(root).type == pafs.FileType.NotFound:
        return None
    part = ds.partitioning(pa.schema([(p, pa.string()) for p in decl.partition_by]), flavor="hive")
    return ds.dataset(
        root, filesystem=fs, format="parquet", partitioning=part, exclude_invalid_files=True, ignore_prefixes=[".", "_"]
    )


def table_columns(warehouse: str, table: str) -> list[str] | None:
    """The columns ``table`` has in the warehouse (its Parquet schema plus the partition columns), without
    reading rows; ``None`` when it was never written."""
    dataset = _dataset(warehouse, table)
    if dataset is None:
        return None
    return list(dataset.schema.names) if dataset.files else declared(table).names  # no rows left: the declared ones


def read_arrow(warehouse: str, table: str, job_ids: list[str] | None = None, columns=None, filter=None):
    """Rows of one table as a ``pyarrow.Table``, without Spark (``pyarrow.dataset``).

    Partition columns (``date``, ``job_id``) are read as strings; ``_``- and ``.``-prefixed files (marks,
    staging) are skipped.

    Args:
        job_ids: only these jobs (partition-pruned; ``None`` = all).
        columns: declared columns to read (default: all that exist, in declaration order).
        filter: a further ``pyarrow.dataset`` expression.

    Returns:
        The table, or ``None`` when it was never written.
    """
    dataset = _dataset(warehouse, table)
    if dataset is None:
        return None
    filt = ds.field("job_id").isin([str(j) for j in job_ids]) if job_ids is not None else None
    if filter is not None:
        filt = filter if filt is None else filt & filter
    wanted = columns if columns is not None else declared(table).names
    if not dataset.files:  # written, but no rows left (an empty batch, or every job's rows replaced)
        schema = declared(table).arrow_schema()
        return schema.empty_table().select([c for c in wanted if c in schema.names])
    return dataset.to_table(filter=filt, columns=[c for c in wanted if c in dataset.schema.names])


def read_pandas(
    warehouse: str, tables, job_ids: list[str] | None = None, exact: bool = False, skip_missing: bool = False
) -> dict[str, pd.DataFrame]:
    """Rows of ``job_ids`` (all rows when ``None``) from the tables ``tables``, as pandas, without Spark.

    Read by :func:`read_arrow` (local folder or any URI pyarrow's file systems take).

    Args:
        exact: integer columns as pandas' nullable integer dtypes (exact ns, no float upcast when a
            column has nulls), as :func:`to_pandas_exact`; else pyarrow's default conversion.
        skip_missing: leave tables that were never written out of the result.

    Returns:
        ``{table: DataFrame with the declared columns that exist, in declaration order}``; a table that
        was never written gives an empty frame with all declared columns (or is left out).
    """
    out = {}
    for name in tables:
        rows = read_arrow(warehouse, name, job_ids)
        if rows is None:
            if not skip_missing:
                out[name] = pd.DataFrame(columns=declared(name).names)
            continue
        out[name] = rows.to_pandas(types_mapper=exact_ints if exact else None)
    return out


def register_views(spark, warehouse: str) -> list[str]:
    """A Spark temp view per documented warehouse table (:data:`schemas.TABLES`, :data:`schemas.FLEET_TABLES`),
    named as the table.

    A table never written, or written with no rows left (e.g. ``fleet_findings`` when no finding falls in the
    window), is registered as an empty view with its declared columns and types, so every documented table
    can be queried (``SELECT * FROM fleet_findings`` returns 0 rows, not TABLE_OR_VIEW_NOT_FOUND).

    Returns:
        The registered names: every table of :data:`schemas.TABLES` and :data:`schemas.FLEET_TABLES`, in order.
    """
    from pyspark.sql.pandas.types import from_arrow_schema  # heavy: pyspark, only on the Spark path

    registered = []
    for name in [*TABLES, *FLEET_TABLES]:
        df = read_spark(spark, warehouse, name)
        if df is None:
            df = spark.createDataFrame([], from_arrow_schema(declared(name).arrow_schema()))
        df.createOrReplaceTempView(name)
        registered.append(name)
    return registered


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


def write_table(rows, warehouse: str, table: str, replace_jobs=None) -> CommitResult:
    """Replace the rows of ``table`` that ``rows`` holds: the partitions (``date=…/job_id=…``) it has rows for
    are replaced whole, the others kept.

    On a local warehouse the write is crash-safe: a run killed at any point leaves every partition complete,
    old or new, and the next write or :func:`recover` finishes it; readers never see a partial partition.
    On an object store each partition is overwritten in place (see :mod:`jobs.commit`).

    Args:
        rows: the rows with the table's columns (partition columns included): a Spark DataFrame, a
            ``pyarrow.Table``, or :func:`staged_rows` (the local executor's workers' files, moved in).
        replace_jobs: the jobs ``rows`` holds every row of: their other partitions are removed in the same
            commit (no stale rows of a job rebuilt with no rows here, or under another date). With it, rows
            for no job leave a table that was never written unwritten.

    Returns:
        What was published (:class:`jobs.commit.CommitResult`).

    Raises:
        ValueError: ``rows`` are staged rows of another table.
        TypeError: ``rows`` is some other callable.
        jobs.commit.CommitError: an earlier interrupted write cannot be finished.
    """
    if isinstance(rows, StagedRows):
        if rows.table != table:
            raise ValueError(f"write_table({table!r}): the staged rows are of {rows.table!r}")
        rows = partial(_move_in, rows)
    elif callable(rows):
        raise TypeError(f"write_table({table!r}): rows must be a Spark DataFrame, a pyarrow.Table or staged_rows()")
    return write_partitions(rows, warehouse, table, declared(table).partition_by, replace_jobs)


def recover(warehouse: str) -> list[str]:
    """Finish the writes a killed run left in ``warehouse`` (those past their commit point are rolled forward,
    the others rolled back) and remove dead runs' work folders. Idempotent; waits for a running write.
    Stages call it before they read. Non-local warehouses: nothing to do.

    Returns:
        The interrupted writes finished (one name each).
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
