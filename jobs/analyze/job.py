"""``jobs.analyze``: ``events`` → ``steps``, ``ranks``, ``kernels``, ``collectives``, ``critical_path``.

extract: the ``events`` of the jobs to analyze (partition-pruned on ``job_id``).
transform, in two Arrow-batched stages (the scalable shape of ARCHITECTURE.md):

1. per (job, attempt, rank, capture), in parallel — :func:`rank_stage`: HTA-parity step and rank
   statistics (:mod:`jobs.analyze.hta.breakdown`), kernel statistics, the rank's critical path and its
   legs between collectives (:mod:`jobs.analyze.critical_path.rank`), its communication calls
   (:mod:`jobs.analyze.collectives.calls`); Neuron device profiles get their device critical path;
2. per (job, attempt) — :func:`job_stage`: collectives matched across ranks (wait, skew, bus
   bandwidth, clock offsets) and the cross-rank critical path stitched from the per-rank legs.

Small per-group outputs travel as ``(table, row JSON)`` pairs so one pass yields several tables;
Spark parses them back with ``from_json`` against the declared schemas.
Then, per job on the driver (small tables), :func:`run_findings` ranks the bottleneck findings
(:mod:`jobs.analyze.findings.ranking`) and writes ``findings`` plus ``findings_json/<job>/<attempt>/findings.json``.
load: Hive-partitioned Parquet, partitions replaced whole through the crash-safe commit
(:func:`jobs.warehouse.write_table`; idempotent per job).
"""

from __future__ import annotations

import json
import posixpath

import pyarrow as pa
import pyarrow.compute as pc

from jobs.analyze.collectives.calls import CALLS_SCHEMA, comm_calls, match_collectives
from jobs.analyze.critical_path.cross_rank import job_critical_path
from jobs.analyze.critical_path.rank import BOUNDARIES_SCHEMA, rank_critical_path
from jobs.analyze.findings.ranking import EVENTS_COLUMNS, drop_truncated_steps, findings_document, job_findings
from jobs.analyze.findings.rules import SYNC_NAMES
from jobs.analyze.hta.breakdown import analyze_rank
from jobs.analyze.hta.kernel_stats import kernel_table
from jobs.analyze.trace.model import IDENTITY, RankTrace, build_rank_trace
from jobs.commit import recover, write_text_atomic
from jobs.common.ids import safe_id
from jobs.normalize.neuron.critical_path import critical_path_from_events, critical_path_rows
from jobs.warehouse import read_frames, read_spark, write_table
from schemas import COLLECTIVES, CRITICAL_PATH, FINDINGS, KERNELS, RANKS, STEPS

_GROUP = ["job_id", "attempt", "rank", "capture_id"]
_OUT_SCHEMA = "job_id string, attempt int, table string, row_json string"
OUTPUT_TABLES = {"steps": STEPS, "ranks": RANKS, "kernels": KERNELS, "collectives": COLLECTIVES,
                 "critical_path": CRITICAL_PATH}


def _json_default(v):
    if hasattr(v, "item"):
        return v.item()
    if isinstance(v, (bytes, bytearray)):
        return v.decode("utf-8", "replace")
    raise TypeError(type(v))


def _pairs(job_id, attempt, tables: list[tuple[str, pa.Table]]) -> pa.Table:
    names, rows = [], []
    for tname, tbl in tables:
        for r in tbl.to_pylist():
            names.append(tname)
            rows.append(json.dumps(r, default=_json_default))
    n = len(names)
    return pa.table({"job_id": pa.array([job_id] * n, pa.string()), "attempt": pa.array([attempt] * n, pa.int32()),
                     "table": pa.array(names, pa.string()), "row_json": pa.array(rows, pa.string())})


def _with_identity(tbl: pa.Table, trace: RankTrace) -> pa.Table:
    """Fill null identity/partition columns of a per-rank output from the rank's identity."""
    if tbl.num_rows == 0 or trace.n == 0:
        return tbl
    for name in IDENTITY:
        if name in tbl.column_names and tbl.column(name).null_count == tbl.num_rows:
            value = trace.identity[name]
            i = tbl.column_names.index(name)
            tbl = tbl.set_column(i, tbl.schema.field(name), pa.array([value] * tbl.num_rows, tbl.schema.field(name).type))
    return tbl


def rank_stage(events: pa.Table) -> pa.Table:
    """Stage 1 for one (job, attempt, rank, capture): every per-rank output as (table, row JSON) pairs.

    Tables: ``steps``, ``ranks``, ``kernels``, ``critical_path`` (scope ``rank``), and the inputs of
    stage 2: ``_calls`` (:data:`jobs.analyze.collectives.calls.CALLS_SCHEMA`) and ``_legs``
    (:data:`jobs.analyze.critical_path.rank.BOUNDARIES_SCHEMA`). The events are typed once into a
    :class:`~jobs.analyze.trace.model.RankTrace` that every per-rank analysis reads.
    """
    job_id, attempt = events.column("job_id")[0].as_py(), events.column("attempt")[0].as_py()
    neuron = pc.equal(events.column("source"), "neuron")
    if pc.any(neuron).as_py():
        return _pairs(job_id, attempt, [("critical_path", _neuron_path(events.filter(neuron)))])
    trace = build_rank_trace(events)
    steps, ranks = analyze_rank(trace)
    out = [("steps", steps), ("ranks", ranks), ("kernels", _with_identity(kernel_table(trace), trace))]
    segments, legs = rank_critical_path(trace)
    out += [("critical_path", segments), ("_legs", legs), ("_calls", comm_calls(trace))]
    return _pairs(job_id, attempt, out)


def _neuron_path(events: pa.Table) -> pa.Table:
    ident = {k: events.column(k)[0].as_py() for k in IDENTITY}
    path, ids = critical_path_from_events(events)
    return pa.Table.from_pylist(critical_path_rows(path, ident, ids), schema=CRITICAL_PATH.arrow_schema())


def job_stage(pairs: pa.Table) -> pa.Table:
    """Stage 2 for one (job, attempt): ``collectives`` and the cross-rank ``critical_path`` rows.

    Args:
        pairs: the ``_calls`` and ``_legs`` rows that :func:`rank_stage` produced for the job's ranks.
    """
    job_id, attempt = pairs.column("job_id")[0].as_py(), pairs.column("attempt")[0].as_py()
    by_table: dict[str, list[dict]] = {"_calls": [], "_legs": []}
    for t, r in zip(pairs.column("table").to_pylist(), pairs.column("row_json").to_pylist()):
        by_table[t].append(json.loads(r))
    calls = pa.Table.from_pylist(by_table["_calls"], schema=CALLS_SCHEMA)
    legs = pa.Table.from_pylist(by_table["_legs"], schema=BOUNDARIES_SCHEMA)
    collectives = match_collectives(calls)
    out = [("collectives", collectives)]
    if legs.num_rows:
        rows, _skew = job_critical_path(legs, collectives)
        out.append(("critical_path", rows))
    return _pairs(job_id, attempt, out)


def run_analyze(spark, warehouse: str, job_ids: list[str] | None = None) -> dict[str, int]:
    """Analyze ``job_ids`` (all jobs when ``None``) from ``{warehouse}/events``.

    Writes the tables of :data:`OUTPUT_TABLES` under ``warehouse``; ``ranks.world_size`` and
    ``ranks.device_name`` come from ``captures``.

    Returns:
        Row counts written per table.

    Raises:
        jobs.landing.discover.DiscoveryError: a job id that is not path-safe (before anything is read).
    """
    from pyspark.sql import functions as F  # heavy: pyspark

    root = warehouse.rstrip("/")
    if job_ids is not None:
        job_ids = [safe_id(j, "job_id", "analyze") for j in job_ids]
    recover(warehouse)  # a normalize killed mid-publish is finished before its events are read
    events, captures = (read_spark(spark, warehouse, t, job_ids) for t in ("events", "captures"))
    if events is None or captures is None:
        raise FileNotFoundError(f"{root}: no events/captures table yet (run normalize first)")
    stage1 = events.groupBy(*_GROUP).applyInArrow(rank_stage, _OUT_SCHEMA).cache()
    stage1.count()  # materialize once: otherwise stage 2's shuffle and the first write each run the rank stage
    stage2 = (stage1.filter(F.col("table").isin("_calls", "_legs"))
              .groupBy("job_id", "attempt").applyInArrow(job_stage, _OUT_SCHEMA).cache())
    out = stage1.unionByName(stage2)
    try:
        frames = {name: _rows(out, name, table) for name, table in OUTPUT_TABLES.items()}
        cap = captures.select(*_GROUP, F.col("world_size").alias("_ws"), F.col("device_name").alias("_dev"))
        frames["ranks"] = (frames["ranks"].join(cap, on=_GROUP, how="left")
                           .withColumn("world_size", F.coalesce("world_size", "_ws"))
                           .withColumn("device_name", F.coalesce("device_name", "_dev"))
                           .select(*RANKS.names))
        counts = {}
        for name, df in frames.items():
            counts[name] = df.count()
            if counts[name]:  # an empty frame writes no partition (e.g. Neuron-only batches have no steps)
                write_table(df.coalesce(1), root, name)
    finally:
        stage2.unpersist()
        stage1.unpersist()
    counts["findings"] = run_findings(spark, warehouse, job_ids)
    return counts


def run_findings(spark, warehouse: str, job_ids: list[str] | None = None) -> int:
    """Compute and write the ``findings`` table and one ``findings.json`` per (job, attempt).

    The inputs are the analysis tables of the jobs plus the sync calls of ``events`` (the only raw
    events a rule needs, :data:`jobs.analyze.findings.rules.SYNC_NAMES`); steps cut short by a truncated
    trace are left out (:func:`jobs.analyze.findings.ranking.drop_truncated_steps`).

    Returns:
        Number of findings written.

    Raises:
        jobs.landing.discover.DiscoveryError: a job id that is not path-safe (e.g. ``--job ../x``).
    """
    from pyspark.sql import functions as F

    root = warehouse.rstrip("/")
    jobs = job_ids if job_ids is not None else [
        r[0] for r in read_spark(spark, warehouse, "captures").select("job_id").distinct().collect()]
    jobs = [safe_id(j, "job_id", f"{root}/findings_json") for j in jobs]  # each becomes a folder name below
    tables = read_frames(spark, warehouse, ("steps", "ranks", "kernels", "collectives", "critical_path",
                                            "neuron_summary", "captures"), jobs)
    tables["steps"] = drop_truncated_steps(tables["steps"], tables.pop("captures"))
    events = read_spark(spark, warehouse, "events", jobs).filter(
        F.col("category").isin("cuda_runtime", "cpu_op", "cuda_driver")
        & F.col("name").isin(list(SYNC_NAMES)))
    tables["events"] = events.select(*EVENTS_COLUMNS).toPandas()
    findings = job_findings(tables)
    if findings.num_rows:
        df = spark.createDataFrame(findings.to_pandas(), schema=FINDINGS.spark_schema())
        write_table(df.coalesce(1), root, "findings")
    pdf = findings.to_pandas()
    for job_id in jobs:
        attempts = sorted(set(pdf[pdf["job_id"] == job_id]["attempt"])) or [0]
        for attempt in attempts:
            sub = findings.filter(pc.and_(pc.equal(findings["job_id"], job_id), pc.equal(findings["attempt"], attempt)))
            doc = findings_document(job_id, int(attempt), sub)
            write_text_atomic(posixpath.join(root, "findings_json", job_id, str(attempt), "findings.json"),
                              json.dumps(doc, indent=1, default=str))
    return findings.num_rows


def _rows(out, name: str, table):
    from pyspark.sql import functions as F

    return (out.filter(F.col("table") == name)
            .select(F.from_json("row_json", table.spark_schema()).alias("r")).select("r.*")
            .select(*table.names))
