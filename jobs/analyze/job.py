"""``jobs.analyze``: ``events`` → ``steps``, ``ranks``, ``kernels``, ``op_efficiency``, ``utilization_windows``,
``collectives``, ``comm_sites``, ``critical_path``.

extract: the ``events`` of the jobs to analyze (partition-pruned on ``job_id``).
transform, in two Arrow-batched stages (the scalable shape of ARCHITECTURE.md):

1. per (job, attempt, rank, capture), in parallel — :func:`rank_stage`: HTA-parity step and rank
   statistics (:mod:`jobs.analyze.hta.breakdown`), kernel statistics, op efficiency against the device's
   roofline (:mod:`jobs.analyze.efficiency.ops`; the driver adds the peaks of the captures' devices), the device's idle
   windows and their host causes (:mod:`jobs.analyze.efficiency.utilization`), the rank's
   critical path and its legs between collectives (:mod:`jobs.analyze.critical_path.rank`), its communication calls
   (:mod:`jobs.analyze.collectives.calls`); Neuron device profiles get their device critical path and tensor-engine windows;
2. per (job, attempt) — :func:`job_stage`: collectives matched across ranks (wait, skew, bus
   bandwidth, clock offsets), their recurring call sites with a what-if on the path, and the cross-rank critical
   path stitched from the per-rank legs.

Both are pure functions of Arrow tables (:func:`rank_tables`, :func:`job_tables`), typed to the declared
schemas, run by either executor (:mod:`jobs.executor`): on Spark in ``applyInArrow``, each output table
carried as Arrow IPC bytes so that one pass yields several tables; on the local executor in its
worker processes, which write the large outputs straight into the run's staging.
Then, per job (small tables; in the local executor's workers, else on the driver), :func:`run_findings` ranks the bottleneck findings
(:mod:`jobs.analyze.findings.ranking`) and writes ``findings``, ``rule_coverage`` (which rules judged the job, on
what windows: :mod:`jobs.analyze.findings.coverage`) plus ``findings_json/<job>/<attempt>/findings.json``.
load: Hive-partitioned Parquet, partitions replaced whole through the crash-safe commit
(:func:`jobs.warehouse.write_table`; idempotent per job).
"""

from __future__ import annotations

import json
import os
import posixpath

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from jobs.analyze.collectives.calls import CALLS_SCHEMA, comm_calls, match_collectives
from jobs.analyze.critical_path.comm_sites import comm_sites
from jobs.analyze.critical_path.cross_rank import job_critical_path
from jobs.analyze.critical_path.rank import BOUNDARIES_SCHEMA, rank_critical_path
from jobs.analyze.efficiency.ops import add_device_peaks, op_efficiency
from jobs.analyze.efficiency.utilization import neuron_utilization_windows, utilization_windows
from jobs.analyze.findings.coverage import rule_coverage
from jobs.analyze.findings.ranking import (
    EVENTS_COLUMNS,
    drop_truncated_steps,
    findings_document,
    job_findings,
    rule_events_filter,
)
from jobs.analyze.hta.breakdown import analyze_rank
from jobs.analyze.hta.kernel_stats import kernel_table
from jobs.analyze.trace.model import IDENTITY, RankTrace, build_rank_trace
from jobs.common.ids import safe_id
from jobs.executor import is_local
from jobs.normalize.neuron.critical_path import critical_path_from_events, critical_path_rows
from jobs.warehouse import (
    read_arrow,
    read_frames,
    read_pandas,
    read_spark,
    recover,
    stage_rows,
    staged_rows,
    work_dir,
    write_table,
    write_text_atomic,
)
from schemas import CRITICAL_PATH, FINDINGS, RANKS, RULE_COVERAGE, TABLES, stage_tables

_GROUP = ["job_id", "attempt", "rank", "capture_id"]
_OUT_SCHEMA = "job_id string, attempt int, table string, n long, ipc binary"
#: The tables the rank and job transforms produce: every table declared for the analyze stage but ``findings`` and
#: ``rule_coverage``, which :func:`run_findings` derives from them afterwards.
OUTPUT_TABLES = {n: t for n, t in stage_tables("analyze").items() if t not in (FINDINGS, RULE_COVERAGE)}
#: Stage 2's inputs, produced by stage 1 per rank.
_INTERNAL = {"_calls": CALLS_SCHEMA, "_legs": BOUNDARIES_SCHEMA}
_IPC_ROWS = 1 << 18  # rows per IPC blob: keeps each Spark cell far below Arrow's 2 GiB


def conform(name: str, tbl: pa.Table) -> pa.Table:
    """``tbl`` with exactly the columns of the declared schema of output ``name`` (an analysis table or
    ``_calls``/``_legs``), in order and cast to their types; a declared column it lacks is all null.

    Raises:
        pyarrow.ArrowInvalid: a value does not fit its declared type (e.g. a fraction in an integer column).
    """
    schema = OUTPUT_TABLES[name].arrow_schema() if name in OUTPUT_TABLES else _INTERNAL[name]
    cols = [
        tbl.column(f.name).cast(f.type) if f.name in tbl.column_names else pa.nulls(tbl.num_rows, f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(cols, schema=pa.schema([f.with_nullable(True) for f in schema]))


def _with_identity(tbl: pa.Table, trace: RankTrace) -> pa.Table:
    """Fill null identity/partition columns of a per-rank output from the rank's identity."""
    if tbl.num_rows == 0 or trace.n == 0:
        return tbl
    for name in IDENTITY:
        if name in tbl.column_names and tbl.column(name).null_count == tbl.num_rows:
            value = trace.identity[name]
            i = tbl.column_names.index(name)
            tbl = tbl.set_column(
                i, tbl.schema.field(name), pa.array([value] * tbl.num_rows, tbl.schema.field(name).type)
            )
    return tbl


def rank_tables(events: pa.Table) -> dict[str, pa.Table]:
    """Stage 1 for the events of one (job, attempt, rank, capture): every per-rank output.

    Tables: ``steps``, ``ranks``, ``kernels``, ``op_efficiency`` (peaks null: :func:`op_efficiency_with_captures`),
    ``utilization_windows``,
    ``critical_path`` (scope ``rank``), and the inputs of
    stage 2: ``_calls`` (:data:`jobs.analyze.collectives.calls.CALLS_SCHEMA`) and ``_legs``
    (:data:`jobs.analyze.critical_path.rank.BOUNDARIES_SCHEMA`), each :func:`conform`-ed. The events
    are typed once into a :class:`~jobs.analyze.trace.model.RankTrace` that every per-rank analysis
    reads; a Neuron device profile gives its device critical path and its tensor engine's windows only. Rows are put in trace order
    (``event_id``) first, so the results (float sums included) do not depend on how an engine
    ordered the group.
    """
    events = _in_trace_order(events)
    neuron = pc.equal(events.column("source"), "neuron")
    if pc.any(neuron).as_py():
        device = events.filter(neuron)
        windows = pa.Table.from_pandas(neuron_utilization_windows(device), preserve_index=False)
        return {
            "critical_path": conform("critical_path", _neuron_path(device)),
            "utilization_windows": conform("utilization_windows", windows),
        }
    trace = build_rank_trace(events)
    steps, ranks = analyze_rank(trace)
    segments, legs = rank_critical_path(trace)
    out = {
        "steps": steps,
        "ranks": ranks,
        "kernels": _with_identity(kernel_table(trace), trace),
        # the device's peaks once the driver has the captures' device names (_DRIVER_WRITES)
        "op_efficiency": pa.Table.from_pandas(op_efficiency(trace), preserve_index=False),
        "utilization_windows": pa.Table.from_pandas(utilization_windows(trace), preserve_index=False),
        "critical_path": segments,
        "_legs": legs,
        "_calls": comm_calls(trace),
    }
    return {name: conform(name, tbl) for name, tbl in out.items()}


def _in_trace_order(events: pa.Table) -> pa.Table:
    """``events`` sorted by ``event_id`` (the parser's trace order); unchanged when already sorted."""
    ids = events.column("event_id").to_numpy(zero_copy_only=False)
    if len(ids) < 2 or bool((ids[1:] >= ids[:-1]).all()):
        return events
    return events.take(pc.sort_indices(events.column("event_id")))


def _neuron_path(events: pa.Table) -> pa.Table:
    ident = {k: events.column(k)[0].as_py() for k in IDENTITY}
    path, ids = critical_path_from_events(events)
    return pa.Table.from_pylist(critical_path_rows(path, ident, ids), schema=CRITICAL_PATH.arrow_schema())


def job_tables(calls: pa.Table, legs: pa.Table) -> dict[str, pa.Table]:
    """Stage 2 for one (job, attempt): ``collectives`` (calls matched across ranks), their call sites per step with
    the what-if of hiding each (``comm_sites``, :mod:`jobs.analyze.critical_path.comm_sites`) and the cross-rank
    ``critical_path`` rows stitched from the ranks' legs (none without legs), each :func:`conform`-ed.

    Args:
        calls: the job's ``_calls`` rows from :func:`rank_tables`; legs: its ``_legs`` rows.
    """
    collectives = match_collectives(calls)
    out = {"collectives": collectives, "comm_sites": comm_sites(legs, collectives)}
    if legs.num_rows:
        out["critical_path"], _skew = job_critical_path(legs, collectives)
    return {name: conform(name, tbl) for name, tbl in out.items()}


# --------------------------------------------------------------------------- Spark: applyInArrow


def _ipc_rows(job_id, attempt, tables: dict[str, pa.Table]) -> pa.Table:
    """``(job_id, attempt, table, n, ipc)`` rows: each table as Arrow IPC stream bytes of ≤ 2^18 rows."""
    rows = {"job_id": [], "attempt": [], "table": [], "n": [], "ipc": []}
    for name, tbl in tables.items():
        for start in range(0, tbl.num_rows, _IPC_ROWS):
            chunk = tbl.slice(start, _IPC_ROWS)
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, chunk.schema) as w:
                w.write_table(chunk)
            for key, v in (
                ("job_id", job_id),
                ("attempt", attempt),
                ("table", name),
                ("n", chunk.num_rows),
                ("ipc", sink.getvalue().to_pybytes()),
            ):
                rows[key].append(v)
    return pa.table(
        {
            "job_id": pa.array(rows["job_id"], pa.string()),
            "attempt": pa.array(rows["attempt"], pa.int32()),
            "table": pa.array(rows["table"], pa.string()),
            "n": pa.array(rows["n"], pa.int64()),
            "ipc": pa.array(rows["ipc"], pa.binary()),
        }
    )


def _from_ipc(blobs, name: str) -> pa.Table:
    """The rows of output ``name`` from its IPC blobs (an empty table of its schema when none)."""
    parts = [pa.ipc.open_stream(pa.py_buffer(b)).read_all() for b in blobs]
    return pa.concat_tables(parts) if parts else conform(name, pa.table({}))


def rank_stage(events: pa.Table) -> pa.Table:
    """``applyInArrow`` wrapper of :func:`rank_tables`: its outputs as :func:`_ipc_rows`."""
    job_id, attempt = events.column("job_id")[0].as_py(), events.column("attempt")[0].as_py()
    return _ipc_rows(job_id, attempt, rank_tables(events))


def job_stage(rows: pa.Table) -> pa.Table:
    """``applyInArrow`` wrapper of :func:`job_tables` over one job's ``_calls``/``_legs`` :func:`_ipc_rows`."""
    job_id, attempt = rows.column("job_id")[0].as_py(), rows.column("attempt")[0].as_py()
    names, blobs = rows.column("table").to_pylist(), rows.column("ipc").to_pylist()
    calls, legs = (_from_ipc([b for t, b in zip(names, blobs) if t == n], n) for n in ("_calls", "_legs"))
    return _ipc_rows(job_id, attempt, job_tables(calls, legs))


def _decoder(schema: pa.Schema):
    def decode(batches):
        for batch in batches:
            for blob in batch.column("ipc").to_pylist():
                yield from pa.ipc.open_stream(pa.py_buffer(blob)).read_all().cast(schema).to_batches()

    return decode


def _in_key_order(df, key):
    """``df`` sorted by the table's row key (the columns of it that ``df`` has), index reset."""
    cols = [k for k in key if k in df.columns]
    return df.sort_values(cols, kind="stable").reset_index(drop=True) if cols and len(df) else df


def _rows(out, name: str):
    from pyspark.sql import functions as F  # heavy: pyspark

    table = OUTPUT_TABLES[name]
    return (
        out.filter(F.col("table") == name)
        .select("ipc")
        .mapInArrow(_decoder(pa.schema([f.with_nullable(True) for f in table.arrow_schema()])), table.spark_schema())
    )


def _analyze_spark(spark, warehouse: str, job_ids, captures: pa.Table) -> dict[str, int]:
    from pyspark.sql import functions as F  # heavy: pyspark

    events = read_spark(spark, warehouse, "events", job_ids)
    if events is None:
        raise FileNotFoundError(f"{warehouse}: no events table yet (run normalize first)")
    stage1 = events.groupBy(*_GROUP).applyInArrow(rank_stage, _OUT_SCHEMA).cache()
    stage2 = (
        stage1.filter(F.col("table").isin(*_INTERNAL))
        .groupBy("job_id", "attempt")
        .applyInArrow(job_stage, _OUT_SCHEMA)
        .cache()
    )
    try:
        out = stage1.unionByName(stage2)
        counts = {name: 0 for name in OUTPUT_TABLES}
        counts.update({r[0]: int(r[1]) for r in out.groupBy("table").agg(F.sum("n")).collect() if r[0] in counts})
        jobs = _jobs_of(captures)
        for name in OUTPUT_TABLES:
            if not counts[name]:  # no rows (e.g. Neuron-only batches have no steps): the jobs' old rows go
                write_table(OUTPUT_TABLES[name].empty(), warehouse, name, jobs)
            elif name in _DRIVER_WRITES:
                write_table(_DRIVER_WRITES[name](_rows(out, name).toArrow(), captures), warehouse, name, jobs)
            else:  # critical_path (~0.45 rows per event) is written by every partition, the small ones as one file
                df = _rows(out, name)
                write_table(df if name == "critical_path" else df.coalesce(1), warehouse, name, jobs)
    finally:
        stage2.unpersist()
        stage1.unpersist()
    return counts


# --------------------------------------------------------------------------- the local executor


def _stage_outputs(tables: dict[str, pa.Table], folder: str) -> dict[str, int]:
    for name in OUTPUT_TABLES:
        if name not in _DRIVER_WRITES and name in tables and tables[name].num_rows:
            stage_rows(tables[name], folder, name)
    return {name: t.num_rows for name, t in tables.items() if name in OUTPUT_TABLES}


def _rank_task(args: tuple) -> dict:
    """Local worker: :func:`rank_tables` of one rank's events, read from the warehouse."""
    warehouse, (job_id, attempt, rank, capture_id), folder = args
    events = read_arrow(
        warehouse,
        "events",
        [job_id],
        filter=(ds.field("attempt") == attempt) & (ds.field("rank") == rank) & (ds.field("capture_id") == capture_id),
    )
    tables = rank_tables(events)
    return {
        "job": (job_id, attempt),
        "counts": _stage_outputs(tables, folder),
        **{k: tables[k] for k in (*_DRIVER_WRITES, *_INTERNAL) if k in tables},
    }


def _job_task(args: tuple) -> dict:
    """Local worker: :func:`job_tables` of one job's calls and legs."""
    calls, legs, folder = args
    return {"counts": _stage_outputs(job_tables(calls, legs), folder)}


def _analyze_local(ex, warehouse: str, job_ids, captures: pa.Table, work: str) -> dict[str, int]:
    keys = read_arrow(warehouse, "events", job_ids, columns=_GROUP)
    if keys is None:
        raise FileNotFoundError(f"{warehouse}: no events table yet (run normalize first)")
    groups = (
        keys.group_by(_GROUP)
        .aggregate([([], "count_all")])
        .sort_by([("count_all", "descending"), *[(g, "ascending") for g in _GROUP]])
    )
    args = [
        (warehouse, tuple(g[c] for c in _GROUP), os.path.join(work, f"r{i:06d}"))
        for i, g in enumerate(groups.select(_GROUP).to_pylist())
    ]
    results = list(ex.map(_rank_task, args))
    by_job: dict[tuple, dict[str, list]] = {}
    for r in results:
        for k in _INTERNAL:
            by_job.setdefault(r["job"], {n: [] for n in _INTERNAL})[k].append(r.get(k, conform(k, pa.table({}))))
    jargs = [
        (pa.concat_tables(v["_calls"]), pa.concat_tables(v["_legs"]), os.path.join(work, f"j{i:06d}"))
        for i, (_, v) in enumerate(sorted(by_job.items()))
    ]
    results += list(ex.map(_job_task, jargs))
    counts = {name: sum(r["counts"].get(name, 0) for r in results) for name in OUTPUT_TABLES}
    folders = [a[-1] for a in args + jargs]
    jobs = _jobs_of(captures)
    for name in OUTPUT_TABLES:
        if not counts[name]:  # no rows: the jobs' old rows go
            write_table(OUTPUT_TABLES[name].empty(), warehouse, name, jobs)
        elif name in _DRIVER_WRITES:  # ranks, op_efficiency
            rows = pa.concat_tables([r[name] for r in results if name in r])
            write_table(_DRIVER_WRITES[name](rows, captures), warehouse, name, jobs)
        else:
            write_table(staged_rows(name, folders), warehouse, name, jobs)
    return counts


def _jobs_of(captures: pa.Table) -> list[str]:
    """The jobs of the batch (every one of its rows is rebuilt)."""
    return sorted(set(captures.column("job_id").to_pylist()))


# --------------------------------------------------------------------------- the stage


def _from_captures(rows: pa.Table, captures: pa.Table, col: str) -> list:
    """``captures[col]`` of each row's capture (matched on job, attempt, rank, capture), ``None`` where none."""
    cap = {tuple(r[g] for g in _GROUP): r[col] for r in captures.select([*_GROUP, col]).to_pylist()}
    return [cap.get(k) for k in zip(*(rows.column(g).to_pylist() for g in _GROUP))]


def ranks_with_captures(ranks: pa.Table, captures: pa.Table) -> pa.Table:
    """``ranks`` with ``world_size`` and ``device_name`` filled from the rank's capture where it has none."""
    out = ranks
    for col in ("world_size", "device_name"):
        filled = [
            v if v is not None else c
            for v, c in zip(ranks.column(col).to_pylist(), _from_captures(ranks, captures, col))
        ]
        i = out.schema.get_field_index(col)
        out = out.set_column(i, out.schema.field(i), pa.array(filled, out.schema.field(i).type))
    return out.select(RANKS.names)


def op_efficiency_with_captures(rows: pa.Table, captures: pa.Table) -> pa.Table:
    """``op_efficiency`` rows with ``device_name`` from the rank's capture and the peak columns it decides
    (:func:`jobs.analyze.efficiency.ops.add_device_peaks`)."""
    df = rows.to_pandas()
    df["device_name"] = _from_captures(rows, captures, "device_name")
    return conform("op_efficiency", pa.Table.from_pandas(add_device_peaks(df), preserve_index=False))


#: Output tables the driver writes, with what it adds from the captures to the workers' rows; the workers stage
#: every other output table, so a newly declared one is written without being listed anywhere.
_DRIVER_WRITES = {"ranks": ranks_with_captures, "op_efficiency": op_efficiency_with_captures}


def run_analyze(engine, warehouse: str, job_ids: list[str] | None = None) -> dict[str, int]:
    """Analyze ``job_ids`` (all jobs when ``None``) from ``{warehouse}/events``.

    Writes the tables of :data:`OUTPUT_TABLES` under ``warehouse``; ``ranks.world_size`` and
    ``ranks.device_name`` come from ``captures`` where the trace has none.

    Args:
        engine: a SparkSession or a :class:`jobs.executor.LocalExecutor` (:mod:`jobs.executor`).

    Returns:
        Row counts written per table.

    Raises:
        jobs.landing.discover.DiscoveryError: a job id that is not path-safe (before anything is read).
        FileNotFoundError: no ``events``/``captures`` table yet.
    """
    root = warehouse.rstrip("/")
    if job_ids is not None:
        job_ids = [safe_id(j, "job_id", "analyze") for j in job_ids]
    recover(warehouse)  # a normalize killed mid-publish is finished before its events are read
    captures = read_arrow(warehouse, "captures", job_ids)
    if captures is None:
        raise FileNotFoundError(f"{root}: no events/captures table yet (run normalize first)")
    if is_local(engine):
        with work_dir(warehouse) as work:
            counts = _analyze_local(engine, root, job_ids, captures, work)
    else:
        counts = _analyze_spark(engine, root, job_ids, captures)
    counts["findings"] = run_findings(engine, warehouse, job_ids)
    return counts


def run_findings(engine, warehouse: str, job_ids: list[str] | None = None) -> int:
    """Compute and write the ``findings`` and ``rule_coverage`` tables and one ``findings.json`` per (job, attempt).

    The inputs are the analysis tables of the jobs, their ``captures`` (the span of a whole-trace window for a
    rank without ProfilerStep, :func:`jobs.analyze.windows.analysis_windows`) plus the sync calls of ``events``
    (the only raw events the rules need, :func:`jobs.analyze.findings.ranking.rule_events_filter`); steps cut short by a
    truncated trace are left out (:func:`jobs.analyze.findings.ranking.drop_truncated_steps`). ``rule_coverage``
    (:func:`jobs.analyze.findings.coverage.rule_coverage`) gets a row per rule for every job, findings or not, and
    goes into findings.json as ``coverage``. The rules judge each job alone: on the local executor the jobs are
    split among its workers (:func:`_findings_task`), on Spark they run here on the driver.

    Args:
        engine: a SparkSession or a :class:`jobs.executor.LocalExecutor` (reads; the local one also runs the rules).

    Returns:
        Number of findings written.

    Raises:
        jobs.landing.discover.DiscoveryError: a job id that is not path-safe (e.g. ``--job ../x``).
    """
    root = warehouse.rstrip("/")
    jobs = (
        job_ids
        if job_ids is not None
        else sorted(set(read_arrow(warehouse, "captures", columns=["job_id"]).column("job_id").to_pylist()))
    )
    jobs = [safe_id(j, "job_id", f"{root}/findings_json") for j in jobs]  # each becomes a folder name below
    if is_local(engine) and len(jobs) > 1:  # tasks of at most FINDINGS_TASK_JOBS jobs: a worker's memory stays flat
        n = max(min(engine.workers, len(jobs)), -(-len(jobs) // FINDINGS_TASK_JOBS))
        parts = list(engine.map(_findings_task, [(warehouse, jobs[k::n]) for k in range(n)]))
    else:
        parts = [_job_findings(engine, warehouse, jobs)]
    # the parts' schemas differ only in their metadata (each part's input row counts, already in its documents)
    findings = pa.concat_tables([f.replace_schema_metadata(None) for f, _, _ in parts])
    coverage = pa.concat_tables([c.replace_schema_metadata(None) for _, c, _ in parts])
    write_table(findings, root, "findings", jobs)  # a job left without findings keeps none of its old ones
    write_table(coverage, root, "rule_coverage", jobs)
    for (job_id, attempt), doc in sorted(d for _, _, docs in parts for d in docs.items()):
        write_text_atomic(
            posixpath.join(root, "findings_json", job_id, str(attempt), "findings.json"),
            json.dumps(doc, indent=1, default=str),
        )
    return findings.num_rows


#: Jobs of one findings task on the local executor (:func:`run_findings`): one task per worker made a worker's
#: peak grow with the run (fleet 3 of benchmarks/fleet_vs_hta.py: 893 MB at 136 jobs, 627 MB at 68).
FINDINGS_TASK_JOBS = 16


def _findings_task(args: tuple[str, list[str]]):
    """One local worker's share of :func:`run_findings`: ``(warehouse, job ids)`` → :func:`_job_findings`."""
    warehouse, jobs = args
    return _job_findings(None, warehouse, jobs)


def _job_findings(engine, warehouse: str, jobs: list[str]) -> tuple[pa.Table, pa.Table, dict]:
    """The findings, the rule coverage and the ``findings.json`` documents (``{(job, attempt): doc}``) of ``jobs``,
    read from the warehouse (by Spark when ``engine`` is a SparkSession, else with pyarrow)."""
    names = (
        "steps", "ranks", "kernels", "collectives", "critical_path", "neuron_summary", "captures", "op_efficiency",
        "utilization_windows", "comm_sites",
    )  # fmt: skip
    tables = read_pandas(warehouse, names, jobs) if engine is None else read_frames(engine, warehouse, names, jobs)
    tables["steps"] = drop_truncated_steps(tables["steps"], tables["captures"])
    events = read_arrow(warehouse, "events", jobs, columns=list(EVENTS_COLUMNS), filter=rule_events_filter())
    tables["events"] = events.select(list(EVENTS_COLUMNS)).to_pandas()
    # rows in key order, whatever order an engine read them in: the rules break ties by position
    tables = {name: _in_key_order(df, TABLES[name].key) for name, df in tables.items()}
    findings = job_findings(tables)
    coverage = rule_coverage(tables, findings)
    pdf = findings.to_pandas()
    cdf = coverage.select(["job_id", "attempt"]).to_pandas()
    docs = {}
    for job_id in jobs:
        attempts = sorted(
            set(pdf[pdf["job_id"] == job_id]["attempt"]) | set(cdf[cdf["job_id"] == job_id]["attempt"])
        ) or [0]
        for attempt in attempts:
            sub = findings.filter(pc.and_(pc.equal(findings["job_id"], job_id), pc.equal(findings["attempt"], attempt)))
            docs[(job_id, int(attempt))] = findings_document(job_id, int(attempt), sub, coverage=coverage)
    return findings, coverage, docs
