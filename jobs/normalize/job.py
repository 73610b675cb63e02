"""``jobs.normalize``: raw traces in the landing zone → ``captures`` and ``events`` tables.

extract (driver): :func:`jobs.landing.discover.discover` lists the committed captures and bare
traces. transform (Spark's ``mapInArrow``, or the local executor's workers: :mod:`jobs.executor`):
each file is read through fsspec and parsed by
:func:`jobs.normalize.kineto.parse.parse_kineto`; a file that cannot be parsed becomes a quarantined
``captures`` row with the reason, and never stops the other files; a landing zone that cannot be
read (the store down, not the file: :mod:`jobs.landing.store`) fails the stage instead, for its
retry. load (driver): both tables are
written as Hive-partitioned Parquet, each partition replaced whole through the crash-safe commit
(:func:`jobs.warehouse.write_table`), so re-running on the same input replaces the same partitions
and changes nothing, and a killed run never leaves a partial partition behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import traceback
from dataclasses import dataclass, field
from functools import partial

import fsspec
import pyarrow as pa

from jobs.common.ids import slug
from jobs.executor import is_local
from jobs.landing.discover import discover, special_file_kind
from jobs.landing.interval import date_folder, discover_interval
from jobs.landing.store import read_problem
from jobs.normalize.identity import IDENTITY, date_of, resolve_rank, with_identity
from jobs.normalize.kineto.parse import TraceError, parse_kineto
from jobs.normalize.limits import DEFAULT_MAX_UNCOMPRESSED_BYTES, ParseLimits, check_budget, parse_budget
from jobs.normalize.neuron.summary import summary_table
from jobs.normalize.profiler_warnings import warnings_json
from jobs.normalize.route import NEURON_SUMMARY_KEY, BlobDigest, kind_of, normalize_other, source_of
from jobs.normalize.xla import xplane  # module, not names: tests replace xplane.convert_xplane
from jobs.spark import parallelism
from jobs.warehouse import read_arrow, recover, stage_rows, staged_rows, work_dir, write_table
from schemas import CAPTURES, EVENTS, NEURON_SUMMARY

_CAPTURE_COL = "_capture_json"


def work_schema() -> pa.Schema:
    """Schema of the worker output: EVENTS (all nullable) plus the capture-row JSON column.

    A capture row has ``event_id == -1`` and ``_capture_json`` set; event rows leave it null.
    """
    fields = [pa.field(f.name, f.type, nullable=True) for f in EVENTS.arrow_schema()]
    return pa.schema(fields + [pa.field(_CAPTURE_COL, pa.string())])


def normalize_file(
    task: dict, data: bytes | None, read_error: str | None = None, limits: ParseLimits | None = None
) -> tuple[dict, pa.Table | None]:
    """Normalize one raw trace file (pure: bytes in, rows out).

    Args:
        task: a :class:`jobs.landing.discover.CaptureFile` as a dict.
        data: the file's bytes as stored (gzip or plain JSON); for an Explorer Parquet folder
            (``kind`` ``neuron_parquet``) ``{member file name: bytes}``; for a raw blob that is only
            cataloged a :class:`jobs.normalize.route.BlobDigest`; ``None`` when it could not be read.
        read_error: why the file could not be read, if so.
        limits: the parse limits (:class:`~jobs.normalize.limits.ParseLimits`); default the task's ``limits``
            (set by :func:`run_normalize`), else the defaults. A file over them is quarantined.

    Returns:
        ``(capture_row, events)``: a ``captures`` row as a dict, and the ``events`` rows as an
        Arrow table with the EVENTS schema (``None`` when the file is quarantined or has no events).
        Neuron device profiles add their ``neuron_summary`` rows under the row key
        :data:`jobs.normalize.route.NEURON_SUMMARY_KEY`. Routing by kind (:mod:`jobs.landing.formats`):
        Kineto and XLA Chrome traces go to :func:`jobs.normalize.kineto.parse.parse_kineto` (``source``
        ``kineto``/``xla``; an xplane is converted first when xprof is installed), everything else to
        :func:`jobs.normalize.route.normalize_other`.
    """
    row = {c: None for c in CAPTURES.names}
    row.update(
        job_id=task["job_id"],
        attempt=int(task.get("attempt") or 0),
        capture_id=task["capture_id"],
        uri=task["uri"],
        manifest_uri=task.get("manifest_uri"),
        source="kineto",
        world_size=task.get("world_size"),
        size_bytes=task.get("size_bytes"),
        host_name=task.get("host_name"),
        device_name=task.get("device_name"),
        torch_version=task.get("torch_version"),
        runtime_version=task.get("cuda_version"),
        flags=[],
        created_at=task.get("created_at"),
        **tag_columns(task),
    )
    reason = task.get("error") or read_error
    parsed = None
    extra_flags: list[str] = []
    if isinstance(data, BlobDigest):
        row["sha256"], row["size_bytes"] = data.sha256, data.size
        reason = reason or committed_mismatch(task, data.size, data.sha256)
        data = None
    elif isinstance(data, dict):  # Parquet folder: sha256 over the sorted members' names and digests
        h = hashlib.sha256()
        for name in sorted(data):
            h.update(name.encode() + b"\0" + hashlib.sha256(data[name]).digest())
        row["sha256"], row["size_bytes"] = h.hexdigest(), sum(len(v) for v in data.values())
    elif data is not None:
        row["sha256"] = hashlib.sha256(data).hexdigest()
        row["size_bytes"] = len(data)
        reason = reason or committed_mismatch(task, row["size_bytes"], row["sha256"])
    kind = task.get("kind") or "auto"
    if reason is None and kind == "auto":
        kind = kind_of(task, data)
    if reason is None and kind == "xplane" and not task.get("converted") and isinstance(data, bytes):
        try:
            data, extra_flags = xplane.convert_xplane(data, posixpath.basename(task["uri"]))
            kind = "xla_trace"
        except xplane.XprofUnavailable:
            pass  # quarantined below as "needs xprof conversion"
        except TraceError as exc:
            reason = str(exc)
    row["source"] = source_of(kind)
    if reason is None and kind not in ("kineto", "xla_trace"):
        return normalize_other(task, data, row, kind)
    if reason is None:
        lim = limits or ParseLimits(**(task.get("limits") or {}))
        try:
            with parse_budget(lim.max_memory_bytes, lim.max_seconds):  # checked at every decoded piece
                parsed = parse_kineto(
                    data,
                    task["uri"],
                    max_depth=lim.max_depth,
                    max_string_bytes=lim.max_string_bytes,
                    max_uncompressed_bytes=lim.max_uncompressed_bytes,
                )
                check_budget()  # and once the events table is built
        except TraceError as exc:
            reason = str(exc)
        except Exception as exc:  # a parser bug must not stop the batch either
            reason = (
                f"internal error while parsing: {type(exc).__name__}: {exc} [{traceback.format_exc(limit=-1).strip()}]"
            )
    if parsed is None:
        rank = task.get("rank")
        row.update(
            status="quarantined",
            reason=f"{task['uri']}: {reason}",
            rank=int(rank) if rank is not None else 0,
            rank_source=task.get("rank_source") or "default",
            n_events=0,
            date=task.get("date") or "unknown",
        )
        return row, None

    meta = parsed.meta
    rank, rank_source, rank_flags = resolve_rank(meta.get("rank"), task)
    for k in (
        "container",
        "uncompressed_bytes",
        "format",
        "time_base",
        "base_time_ns",
        "trace_start_ns",
        "trace_end_ns",
        "n_profiler_steps",
        "distributed_backend",
    ):
        row[k] = meta.get(k)
    row["n_events"] = parsed.events.num_rows
    row["world_size"] = meta.get("world_size") or task.get("world_size")
    if meta.get("world_size") and task.get("manifest_uri") and task.get("world_size"):
        if int(meta["world_size"]) != int(task["world_size"]):
            rank_flags = [*rank_flags, "world_size_mismatch"]
    row["host_name"] = meta.get("host_name") or task.get("host_name")
    row["device_name"] = meta.get("device_name") or task.get("device_name")
    row["torch_version"] = task.get("torch_version") or meta.get("torch_version")
    row["runtime_version"] = task.get("cuda_version") or meta.get("runtime_version")
    row.update(
        status="ingested",
        rank=rank,
        rank_source=rank_source,
        flags=sorted(
            set(meta.get("flags") or [])
            | set(rank_flags)
            | set(extra_flags)
            | ({"duplicate_capture_id"} & set(task.get("flags") or []))
        ),
        flag_counts_json=json.dumps(meta.get("flag_counts") or {}, sort_keys=True),
        repair_offsets_json=json.dumps(meta["repair_offsets"], sort_keys=True) if meta.get("repair_offsets") else None,
        profiler_warnings_json=warnings_json(meta.get("profiler_warnings") or []),
        date=task.get("date") or date_of(meta.get("trace_start_ns")) or "unknown",
    )
    events = with_identity(parsed.events, row)
    if row["source"] != "kineto" and events.num_rows:
        i = events.schema.get_field_index("source")
        events = events.set_column(i, events.schema.field(i), pa.array([row["source"]] * events.num_rows, pa.string()))
    return row, events


def committed_mismatch(task: dict, size: int, sha256: str) -> str | None:
    """Why a file's bytes are not the ones its manifest committed (``files[].size_bytes`` / ``sha256``), or None
    (none recorded, or equal): a file changed or replaced after its capture was committed is quarantined."""
    want_size, want_sha = task.get("committed_size"), task.get("committed_sha256")
    if want_size is not None and int(want_size) != size:
        return f"{size} bytes, but the manifest committed {int(want_size)}: the file changed after it was committed"
    if want_sha and str(want_sha).lower() != sha256:
        return (
            f"sha256 {sha256[:16]}… differs from the manifest's {str(want_sha)[:16]}…: the file changed after it was "
            "committed"
        )
    return None


def tag_columns(task: dict) -> dict:
    """``job_name``, ``model`` and ``tags_json`` of a capture from its manifest tags.

    ``task["tags"]`` is a JSON object string (or a dict); ``job_name`` is the tag ``job_name`` when set,
    else the job id (runs of a recurring job share the name, each run has its own job id).
    """
    tags = task.get("tags") or {}
    if isinstance(tags, str):
        try:
            tags = json.loads(tags)
        except ValueError:
            tags = {}
    if not isinstance(tags, dict):
        tags = {}
    name = str(tags.get("job_name") or "").strip() or task["job_id"]
    model = str(tags.get("model") or "").strip() or None
    return {"job_name": name, "model": model, "tags_json": json.dumps(tags, sort_keys=True)}


def _read(
    uri: str, storage_options: dict, limit: int = DEFAULT_MAX_UNCOMPRESSED_BYTES
) -> tuple[bytes | None, str | None]:
    """The bytes of ``uri`` as stored, or why not: a local path that is not a regular file now (replaced since
    discovery) is never opened, and at most ``limit`` bytes are read (a file larger than any trace the limits accept,
    or one that never ends, stops there)."""
    if "://" not in uri or uri.startswith("file://"):
        path = uri.removeprefix("file://")
        try:
            mode: int | None = os.stat(path).st_mode
        except OSError:
            mode = None  # gone or unreadable: the open below says which
        kind = special_file_kind(mode) if mode is not None else None
        if kind:
            return None, f"{kind}, not a regular file (replaced since discovery): not opened"
    try:
        with fsspec.open(uri, "rb", **storage_options) as f:
            data = f.read(limit + 1)
    except Exception as exc:  # the object's problem → quarantined; an unreachable store raises
        return None, read_problem(uri, exc)
    if len(data) > limit:
        return None, f"file larger than the limit of {limit} bytes (max_uncompressed_bytes): not read further"
    return data, None


def _read_task(task: dict, storage_options: dict):
    """The input of :func:`normalize_file` for one task: bytes, ``{member: bytes}`` for a Parquet
    folder, or a streamed :class:`jobs.normalize.route.BlobDigest` for a blob that is only cataloged."""
    if task.get("error"):  # quarantined at discovery (a FIFO, a link leaving the landing zone, …): never opened
        return None, None
    limit = int((task.get("limits") or {}).get("max_uncompressed_bytes") or DEFAULT_MAX_UNCOMPRESSED_BYTES)
    kind = task.get("kind") or "auto"
    if kind == "neuron_parquet":
        out = {}
        for m in task.get("members") or []:
            data, err = _read(posixpath.join(task["uri"], m), storage_options, limit)
            if err:
                return None, f"{m}: {err}"
            out[m] = data
        return out, None
    if kind == "neuron_raw" or (kind == "xplane" and (task.get("converted") or not _xprof())):
        return _digest(task["uri"], storage_options)
    return _read(task["uri"], storage_options, limit)


def _xprof() -> bool:
    return xplane.xprof_available()


def _digest(uri: str, storage_options: dict):
    h, size = hashlib.sha256(), 0
    try:
        with fsspec.open(uri, "rb", **storage_options) as f:
            while chunk := f.read(8 << 20):
                h.update(chunk)
                size += len(chunk)
    except Exception as exc:  # the object's problem → quarantined; an unreachable store raises
        return None, read_problem(uri, exc)
    return BlobDigest(size, h.hexdigest()), None


def make_partition_parser(storage_options: dict):
    """A ``mapInArrow`` function: batches of tasks (``task_json`` column) → :func:`work_schema` batches."""

    def parse_partition(batches):
        out_schema = work_schema()
        for batch in batches:
            for task_json in batch.column("task_json").to_pylist():
                task = json.loads(task_json)
                data, err = _read_task(task, storage_options)
                capture, events = normalize_file(task, data, err)
                del data
                if events is not None and events.num_rows:
                    events = events.append_column(_CAPTURE_COL, pa.nulls(events.num_rows, pa.string()))
                    yield from events.cast(out_schema).to_batches(max_chunksize=65536)
                marker = {f.name: None for f in out_schema}
                marker.update(
                    date=capture["date"], job_id=capture["job_id"], event_id=-1, **{_CAPTURE_COL: json.dumps(capture)}
                )
                yield pa.RecordBatch.from_pylist([marker], schema=out_schema)

    return parse_partition


def unique_capture_ids(files: list) -> list:
    """Make ``capture_id`` unique across a batch of :class:`~jobs.landing.discover.CaptureFile` (in place).

    Capture ids are unique per capture folder by construction, but a manifest copied into another job's
    folder repeats its ``capture_id``; the batch is keyed by it, so a repeat would silently drop a file.
    Every file after the first with a given id (in URI order) gets ``<id>.dup-<sha1(uri)[:8]>`` and the flag
    ``duplicate_capture_id``.

    Returns:
        ``files``.
    """
    seen: set[str] = set()
    for f in sorted(files, key=lambda f: f.uri):
        if f.capture_id in seen:
            f.capture_id = (
                f"{f.capture_id}.dup-{hashlib.sha1(f.uri.encode('utf-8', 'surrogateescape')).hexdigest()[:8]}"
            )
            f.flags = sorted(set(f.flags) | {"duplicate_capture_id"})
        seen.add(f.capture_id)
    return files


def disambiguate_bare_jobs(captures: list[dict], tasks: dict[str, dict]) -> dict[str, str]:
    """Job ids for bare traces whose folder holds two files of the same rank.

    Bare traces (no manifest) in one folder form one job when their ranks are distinct (e.g. the
    8 DLRM ranks); when two claim the same (attempt, rank), each file becomes its own job
    (``<folder job>-<file stem>``) so that no two captures collide in ``steps``, and the files that
    claim the same rank get the flag ``duplicate_rank`` (in place). Quarantined files (whose rank is
    unknown) keep the folder's job id.

    Returns:
        ``{capture_id: new_job_id}`` for the captures that change.
    """
    groups: dict[tuple, list[dict]] = {}
    # Neuron device profiles are per NeuronCore, not per rank: a folder of them stays one job
    bare_ingested = [
        c
        for c in captures
        if tasks[c["capture_id"]].get("bare")
        and c["status"] == "ingested"
        and c.get("source", "kineto") in ("kineto", "xla")
    ]
    for c in bare_ingested:
        groups.setdefault((c["job_id"], c["attempt"], c["rank"]), []).append(c)
    clashing_jobs = {k[0] for k, v in groups.items() if len(v) > 1}
    for v in groups.values():  # bug_cases.md B13: flag the files that claim the same rank
        for c in v if len(v) > 1 else ():
            c["flags"] = sorted(set(c.get("flags") or []) | {"duplicate_rank"})
    out: dict[str, str] = {}
    used: set[str] = set()
    for c in sorted(bare_ingested, key=lambda c: c["uri"]):
        if c["job_id"] in clashing_jobs:
            stem = posixpath.basename(c["uri"]).split(".")[0]
            new = slug(f"{c['job_id']}-{stem}")
            # a name the slug changes (``a b`` and ``a-b``; ``..x`` and ``...x``) or repeats: the URI's hash too, so
            # distinct files never merge into one job again
            if not stem or slug(stem) != stem or new in used:
                new = slug(f"{new}-{hashlib.sha1(c['uri'].encode('utf-8', 'surrogateescape')).hexdigest()[:8]}")
            used.add(new)
            out[c["capture_id"]] = new
    return out


def duplicate_ranks(captures: list[dict], tasks: dict[str, dict]) -> set[str]:
    """Quarantine, in place, every ingested capture with a manifest that claims a (job, attempt, rank) an earlier one
    (by URI) claims too, naming both files; returns their capture ids (their events are not written).

    Two manifests that declare the same rank (a copied folder, a relaunch writing into the old run) would put two
    traces under one rank; the job would fail validation and nothing of it be published. Neuron device profiles are
    per NeuronCore (several per rank by design) and are left alone; bare files are split into jobs of their own by
    :func:`disambiguate_bare_jobs`.
    """
    seen: dict[tuple, dict] = {}
    dropped: set[str] = set()
    for c in sorted(captures, key=lambda c: c["uri"]):
        if tasks[c["capture_id"]].get("bare") or c["status"] != "ingested":
            continue
        if c.get("source", "kineto") not in ("kineto", "xla"):
            continue
        key = (c["job_id"], c["attempt"], c["rank"])
        first = seen.setdefault(key, c)
        if first is not c:
            c.update(
                status="quarantined",
                reason=f"{c['uri']}: rank {c['rank']} of job {c['job_id']} attempt {c['attempt']} is declared by "
                f"{first['uri']} too; the first by path is kept",
                n_events=0,
            )
            c["flags"] = sorted(set(c.get("flags") or []) | {"duplicate_rank"})
            dropped.add(c["capture_id"])
    return dropped


@dataclass
class NormalizeResult:
    """What a normalize run did: captures rows (dicts), pending folders, job ids touched."""

    captures: list[dict]
    pending: list[str]
    job_ids: list[str]
    neuron_summary: list[dict] = field(default_factory=list)
    n_discovered: int = 0  # raw files handed to the workers: must equal len(captures) (nothing lost)

    @property
    def n_quarantined(self) -> int:
        return sum(c["status"] == "quarantined" for c in self.captures)


def _known_dates(warehouse: str, job_ids: list[str]) -> set[str]:
    """The landing zone's ``date=`` folders where ``captures`` already has captures of ``job_ids`` (the job
    closure of an interval run: :func:`jobs.landing.interval.discover_interval`)."""
    t = read_arrow(warehouse, "captures", list(job_ids), columns=["uri"])
    if t is None:
        return set()
    return {d for uri in set(t.column("uri").to_pylist()) if uri and (d := date_folder(uri))}


def run_normalize(
    engine,
    raw_root: str,
    warehouse: str,
    storage_options: dict | None = None,
    since=None,
    until=None,
    limits: ParseLimits | dict | None = None,
    bare_tags: dict | None = None,
) -> NormalizeResult:
    """Normalize every committed capture under ``raw_root`` into ``{warehouse}/captures`` and ``/events``.

    ``since``/``until`` (UTC ``datetime`` or ISO string; either may be ``None``) restrict the run to
    the jobs with a capture committed in ``[since, until)``, each rebuilt from all of its captures
    (:mod:`jobs.landing.interval`).

    Args:
        engine: a SparkSession (files parsed in ``mapInArrow`` on the executors) or a
            :class:`jobs.executor.LocalExecutor` (files parsed in its worker processes), see
            :mod:`jobs.executor`.
        limits: parse limits for every file (:class:`~jobs.normalize.limits.ParseLimits` or its dict), carried
            to the workers in each task.
        bare_tags: manifest tags (``job_name``, ``model``, any other) for the trace files without a manifest
            (bare files); a capture with a manifest keeps its own.

    Raises:
        FileNotFoundError: when ``raw_root`` does not exist.
        pydantic.ValidationError: a limit out of range.
        ValueError: ``since`` is not before ``until``.
        jobs.landing.store.LandingUnavailable: the landing zone cannot be read.
    """
    recover(warehouse)  # finish the publish of a run that was killed, before anything reads the tables
    storage_options = storage_options or {}
    if since is not None or until is not None:
        found, _ = discover_interval(raw_root, since, until, storage_options, known=partial(_known_dates, warehouse))
    else:
        found = discover(raw_root, storage_options)
    if not found.files:
        return NormalizeResult(captures=[], pending=found.pending, job_ids=[])
    for f in found.files:
        if f.bare and bare_tags:
            f.tags = {**f.tags, **bare_tags}
    lim = limits if isinstance(limits, ParseLimits) else ParseLimits(**(limits or {}))
    tasks = {f.capture_id: {**f.to_dict(), "limits": lim.model_dump()} for f in unique_capture_ids(found.files)}
    # Largest files first: one file per task keeps memory bounded, and the long ones start first.
    ordered = sorted(tasks.values(), key=lambda t: -(t.get("size_bytes") or 0))
    if is_local(engine):
        with work_dir(warehouse) as work:
            captures, folders = _parse_local(engine, ordered, storage_options, work)
            renames = _rename_bare_jobs(captures, tasks)
            dropped = duplicate_ranks(captures, tasks)
            staged = [c for c in captures if c["capture_id"] not in dropped]
            write_table(_staged_events(staged, folders, renames), warehouse, "events", _jobs(captures))
    else:
        captures = _normalize_spark(engine, ordered, storage_options, warehouse, tasks)
    captures.sort(key=lambda c: (c["job_id"], c["attempt"], c["rank"], c["capture_id"]))
    neuron_rows = neuron_summary_rows(captures)
    jobs = _jobs(captures)  # each job is rebuilt from all of its captures: its old partitions go
    write_table(captures_table(captures), warehouse, "captures", jobs)
    write_table(
        summary_table(neuron_rows) if neuron_rows else NEURON_SUMMARY.empty(), warehouse, "neuron_summary", jobs
    )
    return NormalizeResult(
        captures=captures,
        pending=found.pending,
        job_ids=sorted({c["job_id"] for c in captures}),
        neuron_summary=neuron_rows,
        n_discovered=len(tasks),
    )


def _jobs(captures: list[dict]) -> list[str]:
    return sorted({c["job_id"] for c in captures})


def _rename_bare_jobs(captures: list[dict], tasks: dict) -> dict[str, str]:
    """Apply :func:`disambiguate_bare_jobs` to the capture rows (in place); returns the renames."""
    renames = disambiguate_bare_jobs(captures, tasks)
    for c in captures:
        new_id = renames.get(c["capture_id"])
        if new_id:
            if c.get("job_name") == c["job_id"]:
                c["job_name"] = new_id
            c["job_id"] = new_id
    return renames


def _normalize_spark(spark, ordered: list[dict], storage_options: dict, warehouse: str, tasks: dict) -> list[dict]:
    """Parse the files in ``mapInArrow`` and write ``events``; returns the capture rows (bare jobs renamed)."""
    from pyspark import StorageLevel  # heavy: pyspark
    from pyspark.sql import functions as F  # heavy: pyspark

    n_parts = max(1, min(len(ordered), parallelism(spark) * 4))
    task_df = spark.createDataFrame([(json.dumps(t),) for t in ordered], "task_json string").repartition(n_parts)
    work = task_df.mapInArrow(make_partition_parser(storage_options), _spark_schema(work_schema()))
    work = work.persist(StorageLevel.DISK_ONLY)
    try:
        captures = [json.loads(r[0]) for r in work.filter(F.col("event_id") == -1).select(_CAPTURE_COL).collect()]
        renames = _rename_bare_jobs(captures, tasks)
        dropped = duplicate_ranks(captures, tasks)
        events = work.filter(F.col("event_id") >= 0).drop(_CAPTURE_COL)
        if dropped:
            events = events.filter(~F.col("capture_id").isin(sorted(dropped)))
        if renames:
            mapping = spark.createDataFrame(list(renames.items()), "capture_id string, _new_job string")
            events = (
                events.join(F.broadcast(mapping), on="capture_id", how="left")
                .withColumn("job_id", F.coalesce(F.col("_new_job"), F.col("job_id")))
                .drop("_new_job")
            )
        write_table(events.select(*EVENTS.names), warehouse, "events", _jobs(captures))
    finally:
        work.unpersist()
    return captures


def _parse_task(args: tuple) -> dict:
    """Local executor worker: read and normalize one file, write its events under ``folder``
    (Hive-partitioned Parquet); returns the capture row as the Spark path's JSON marker carries it."""
    task, storage_options, folder = args
    data, err = _read_task(task, storage_options)
    capture, events = normalize_file(task, data, err)
    del data
    if events is not None and events.num_rows:
        stage_rows(events.select(EVENTS.names).cast(_nullable_events()), folder, "events")
    return json.loads(json.dumps(capture))


def _nullable_events() -> pa.Schema:
    return pa.schema([f.with_nullable(True) for f in EVENTS.arrow_schema()])


def _parse_local(ex, ordered: list[dict], storage_options: dict, work: str) -> tuple[list[dict], dict[str, str]]:
    """Parse the files in the local executor's workers; returns the capture rows and
    ``{capture_id: folder of its events}``."""
    args = [(t, storage_options, os.path.join(work, f"{i:06d}")) for i, t in enumerate(ordered)]
    captures = list(ex.map(_parse_task, args))
    return captures, {c["capture_id"]: a[2] for c, a in zip(captures, args)}


def _staged_events(captures: list[dict], folders: dict[str, str], renames: dict[str, str]):
    """The ``events`` rows the workers staged (:func:`jobs.warehouse.staged_rows`): every capture's folder, the
    rows of renamed bare jobs under their new job id."""
    staged = [folders[c["capture_id"]] for c in captures]
    return staged_rows(
        "events",
        staged,
        {folders[c["capture_id"]]: renames[c["capture_id"]] for c in captures if renames.get(c["capture_id"])},
    )


def neuron_summary_rows(captures: list[dict]) -> list[dict]:
    """Pop the ``neuron_summary`` rows carried by capture dicts and give them the capture's identity
    (after bare-job renames): ``date``, ``job_id``, ``attempt``, ``rank``, ``capture_id``."""
    out = []
    for c in captures:
        for r in c.pop(NEURON_SUMMARY_KEY, None) or []:
            out.append({**r, **{k: c[k] for k in IDENTITY}})
    return out


def captures_table(captures: list[dict]) -> pa.Table:
    """``captures`` rows (dicts) as an Arrow table with the CAPTURES schema."""
    return pa.Table.from_pylist(
        [{k: c.get(k) for k in CAPTURES.names} for c in captures], schema=CAPTURES.arrow_schema()
    )


def _spark_schema(schema: pa.Schema):
    from pyspark.sql.pandas.types import from_arrow_schema  # heavy: pyspark

    return from_arrow_schema(schema)
