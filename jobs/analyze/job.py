"""``jobs.analyze``: ``events`` → ``steps`` and ``ranks`` tables.

extract: the ``events`` of the jobs to analyze (partition-pruned on ``job_id``). transform: one
Python function per (job, attempt, rank, capture) — :func:`jobs.analyze.breakdown.analyze_rank`,
run by Spark ``applyInArrow`` — computes HTA's temporal breakdown per step and for the whole
trace. load: Hive-partitioned Parquet with dynamic partition overwrite (idempotent).
"""

from __future__ import annotations

import json
import posixpath

import pyarrow as pa

from schemas import KERNELS, RANKS, STEPS

_GROUP = ["job_id", "attempt", "rank", "capture_id"]
_OUT_SCHEMA = "table string, row_json string"


def _json_default(v):
    if hasattr(v, "item"):
        return v.item()
    raise TypeError(type(v))


def analyze_group(events: pa.Table) -> pa.Table:
    """Run :func:`analyze_rank` on one rank's events; rows come back as (table, row JSON) pairs.

    Small per-rank outputs travel as JSON so one pass yields several tables; Spark parses them
    back with ``from_json`` against the declared schemas.
    """
    from jobs.analyze.breakdown import analyze_rank
    from jobs.analyze.kernel_stats import kernel_table

    steps, ranks = analyze_rank(events)
    kernels = _with_identity(kernel_table(events), events, KERNELS)
    names, rows = [], []
    for tname, tbl in (("steps", steps), ("ranks", ranks), ("kernels", kernels)):
        for r in tbl.to_pylist():
            names.append(tname)
            rows.append(json.dumps(r, default=_json_default))
    return pa.table({"table": pa.array(names, pa.string()), "row_json": pa.array(rows, pa.string())})


def _with_identity(tbl: pa.Table, events: pa.Table, table) -> pa.Table:
    """Fill the identity/partition columns of a per-rank output from the rank's events (first row)."""
    if tbl.num_rows == 0 or events.num_rows == 0:
        return tbl
    for name in ("date", "job_id", "attempt", "rank", "capture_id"):
        if name in tbl.column_names and tbl.column(name).null_count == tbl.num_rows:
            value = events.column(name)[0].as_py()
            i = tbl.column_names.index(name)
            tbl = tbl.set_column(i, tbl.schema.field(name), pa.array([value] * tbl.num_rows, tbl.schema.field(name).type))
    return tbl


def run_analyze(spark, warehouse: str, job_ids: list[str] | None = None) -> dict[str, int]:
    """Analyze ``job_ids`` (all jobs when ``None``) from ``{warehouse}/events``.

    Writes ``{warehouse}/steps``, ``/ranks`` and ``/kernels``; ``ranks.world_size`` and
    ``ranks.device_name`` come from ``captures``.

    Returns:
        Row counts written per table.
    """
    from pyspark.sql import functions as F

    root = warehouse.rstrip("/")
    events = spark.read.parquet(posixpath.join(root, "events"))
    captures = spark.read.parquet(posixpath.join(root, "captures"))
    if job_ids is not None:
        events = events.filter(F.col("job_id").isin(list(job_ids)))
        captures = captures.filter(F.col("job_id").isin(list(job_ids)))
    out = events.groupBy(*_GROUP).applyInArrow(analyze_group, _OUT_SCHEMA).cache()
    try:
        steps = _rows(out, "steps", STEPS)
        ranks = _rows(out, "ranks", RANKS)
        kernels = _rows(out, "kernels", KERNELS)
        cap = captures.select(*_GROUP, F.col("world_size").alias("_ws"), F.col("device_name").alias("_dev"))
        ranks = (ranks.join(cap, on=_GROUP, how="left")
                 .withColumn("world_size", F.coalesce("world_size", "_ws"))
                 .withColumn("device_name", F.coalesce("device_name", "_dev"))
                 .select(*RANKS.names))
        counts = {}
        for name, df in (("steps", steps), ("ranks", ranks), ("kernels", kernels)):
            df = df.coalesce(1)
            df.write.mode("overwrite").partitionBy("date", "job_id").parquet(posixpath.join(root, name))
            counts[name] = spark.read.parquet(posixpath.join(root, name)).filter(
                F.col("job_id").isin(list(job_ids)) if job_ids is not None else F.lit(True)).count()
    finally:
        out.unpersist()
    return counts


def _rows(out, name: str, table):
    from pyspark.sql import functions as F

    return (out.filter(F.col("table") == name)
            .select(F.from_json("row_json", table.spark_schema()).alias("r")).select("r.*")
            .select(*table.names))
