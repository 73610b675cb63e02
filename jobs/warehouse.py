"""The one place that reads and writes warehouse tables: Spark DataFrames, pandas through pyarrow, partition commits.

Tables live at ``{warehouse}/{table}``, Hive-partitioned Parquet (:data:`schemas.TABLES`,
:data:`schemas.FLEET_TABLES`). A table that was never written reads as ``None`` (Spark) or as an
empty frame with the table's columns (pandas); every other read error is raised. Writes replace
whole partitions through :func:`jobs.commit.write_partitions` (crash-safe on local disk).
"""

from __future__ import annotations

import posixpath

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from jobs.commit import CommitResult, write_partitions
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
    """A Spark temp view per warehouse table that exists, named as the table.

    Returns:
        The registered names (tables never written are skipped).
    """
    registered = []
    for name in [*TABLES, *FLEET_TABLES]:
        df = read_spark(spark, warehouse, name)
        if df is not None:
            df.createOrReplaceTempView(name)
            registered.append(name)
    return registered


def write_table(df, warehouse: str, table: str, replace_jobs=None) -> CommitResult:
    """Replace the partitions of ``table`` that ``df`` holds (:func:`jobs.commit.write_partitions`).

    Args:
        df: the rows with the table's columns (partition columns included): a Spark DataFrame, a
            ``pyarrow.Table`` or a staging callable (:func:`jobs.commit.write_partitions`).
        replace_jobs: the jobs ``df`` holds every row of: their other partitions are removed in the same
            commit (no stale rows of a job rebuilt with no rows here, or under another date).
    """
    return write_partitions(df, warehouse, table, declared(table).partition_by, replace_jobs)
