"""Order-independent content digests of warehouse tables, per partition, for tests that compare runs.

A table's digest is ``{(date, job_id): sorted row hashes}``; a row hash is the SHA-1 of the row as
canonical JSON (columns in name order). Equal digests = the same multiset of rows in every partition,
whatever the files, their names and the row order; a doubled row or a missing one changes it.
"""

from __future__ import annotations

import hashlib
import json

import pyarrow as pa

from jobs import warehouse as _seam
from schemas import TABLES, stage_tables

#: Every job table (normalize and analyze write them), as declared in :mod:`schemas.tables`.
WAREHOUSE_TABLES = tuple(TABLES)
NORMALIZE_TABLES = tuple(stage_tables("normalize"))
ANALYZE_TABLES = tuple(stage_tables("analyze"))


def read_arrow(warehouse, table: str) -> pa.Table | None:
    """The latest snapshot of ``{warehouse}/{table}`` read through the storage seam
    (:func:`jobs.warehouse.read_arrow`: the Delta table's live files only, partition columns as strings);
    ``None`` if it was never written or holds no rows."""
    tbl = _seam.read_arrow(str(warehouse), table)
    if tbl is None or tbl.num_rows == 0:
        return None
    return tbl


def _row_hash(row: dict) -> str:
    return hashlib.sha1(json.dumps(row, sort_keys=True, default=repr).encode()).hexdigest()


def partition_digests(tbl: pa.Table | None) -> dict[tuple[str, str], tuple[str, ...]]:
    """``{(date, job_id): sorted row hashes}`` of one table (``{}`` for ``None``)."""
    if tbl is None:
        return {}
    out: dict[tuple[str, str], list[str]] = {}
    for row in tbl.select(sorted(tbl.column_names)).to_pylist():
        out.setdefault((row["date"], row["job_id"]), []).append(_row_hash(row))
    return {k: tuple(sorted(v)) for k, v in out.items()}


def warehouse_digests(warehouse, tables=WAREHOUSE_TABLES) -> dict[str, dict]:
    """``{table: partition_digests}`` for ``tables`` of ``warehouse``."""
    return {t: partition_digests(read_arrow(warehouse, t)) for t in tables}


def spark_partition_counts(spark, warehouse, table: str) -> dict[tuple[str, str], int]:
    """Rows per (date, job_id) as Spark reads the table through the storage seam
    (:func:`jobs.warehouse.read_spark`; ``{}`` if never written or empty)."""
    df = _seam.read_spark(spark, str(warehouse), table)
    if df is None:
        return {}
    rows = df.groupBy("date", "job_id").count().collect()
    return {(r["date"], r["job_id"]): r["count"] for r in rows}
