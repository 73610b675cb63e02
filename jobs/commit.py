"""Table writes as Delta Lake transactions (delta-rs, the ``deltalake`` package): stage data files, commit once.

Every warehouse table (``{warehouse}/{table}``) is a Delta table: Hive-style partition folders of Parquet data
files plus the transaction log ``_delta_log/``. A file is part of the table only once a log entry adds it, so a
write (:func:`write_partitions`) is:

1. **stage** — the rows become Parquet files *inside* the table's partition folders (``date=…/job_id=…/``) under
   names unique to the write (``<write id>-<name>``): a ``pyarrow.Table`` is written there directly by the
   driver, Spark's executors write theirs there with pyarrow (``mapInArrow``: local disk or S3 alike, no Hadoop
   connector), the local executor's workers write into their folders of the run's work area
   (``{warehouse}/_commit/work/…``, :func:`work_dir`) whose files are then moved in (a rename on local disk, a
   copy on an object store). Readers do not see them: readers list the log, not the folders.
2. **commit** — one log entry (``_delta_log/<version>.json``, created only if absent) removes every live file of
   the partitions being replaced (the partitions the rows fill, and with ``replace_jobs`` every partition of
   those jobs) and adds the new files. Its appearance is the commit point: before it the table is the old
   version, after it the new one — for every partition and every reader at once, on local disk and on S3.
3. **conflicts** — two writers of one table both read version *v* and both try to write *v + 1*: the log
   store lets one win. Every write carries the application transaction ``tracelake:<table>`` (Delta
   ``txn`` action), so any two concurrent writes of one table conflict (a blind append of the same new job
   by two runs would otherwise commit twice and duplicate it); the loser re-reads the table, recomputes its
   removes and commits again (:data:`COMMIT_TRIES` tries, jittered backoff, tenacity). Nothing is dropped
   silently: after the last try :class:`CommitError` is raised.

**Keyed writes** (``replace_rows``): a table keyed by its rows rather than its partitions (the fleet tables, the
fleet stage's partials) replaces the rows a predicate matches. Their data files' add actions carry Delta
statistics (min / max / null count of its string and numeric columns, :func:`parquet_stats`), so delta-rs prunes
the live files to those that may hold a matching row; those are scanned for the predicate's columns, a file
holding a match is removed and its other rows written again with the new ones, in one commit. A table may keep
rows apart in files of their own (``files_apart``: the fleet tables' ``date = 'all'`` rows), in these writes and in
:func:`maintain`'s compaction, so that the other files' statistics stay narrow: a daily run then reads and
rewrites what the day touched, not the history. Statistics are written for these tables only (``stats``).

A writer killed at any point leaves the table at its old or its new version; what it staged and never
committed is invisible, and ``tracelake maintain`` (vacuum) deletes it after the retention period. Files a
commit removes stay on disk until a vacuum after the retention period, so a reader that planned on the old
version keeps reading it, and ``--as-of`` can read it.

Object stores: the log entry must be written with put-if-absent. delta-rs does it on local disk (a hard link)
and on S3 with a conditional PUT (``If-None-Match: *``; measured on SeaweedFS 4.48: a second PUT of the same key
gets 412, one winner in 30 of 30 races of 6 writers), so no lock service (DynamoDB) is needed. Measured commit
time (one commit of 5 adds + 5 removes, 200 live files): 12 ms median on local disk, 46 ms on SeaweedFS.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import json
import math
import os
import posixpath
import shutil
import signal
import tempfile
import time
import uuid
from collections.abc import Iterable, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from urllib.parse import quote, unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import DeltaTable, Field, Transaction
from deltalake.exceptions import CommitFailedError, DeltaError
from deltalake.transaction import AddAction, CommitProperties, RemoveAction
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_random_exponential

from schemas import declared

#: Test hook: ``<table>:<point>`` kills this process (its process group when it leads one) with SIGKILL at that
#: point of :func:`write_partitions`. Points: ``staged-<n>`` (after the n-th data file reached the table folder),
#: ``staged`` (every file in, no log entry), ``committing`` (removes computed, log entry not yet written),
#: ``committed`` (log entry written, staging not yet cleaned).
CRASH_ENV = "TRACELAKE_TEST_CRASH_AT"
COMMIT_DIR = "_commit"
#: Commit attempts of one write (conflicting concurrent commits are retried with fresh removes).
COMMIT_TRIES = 12
#: Delta application-transaction id prefix: one id per table, so concurrent writes of a table conflict.
APP_ID = "tracelake"
#: Table properties every table gets (at creation; :func:`maintain` adds them to older tables): a checkpoint every
#: 10 commits (Delta's default interval; delta-rs' is 100), so opening a table replays at most 9 JSON commits after
#: the checkpoint, not up to 99 (a table of 3,810 files: 64 ms to open 79 commits past a checkpoint, 16 ms at one).
TABLE_PROPERTIES = {"delta.checkpointInterval": "10"}
#: Left in a table folder by the first write before it stages files (the table's log does not exist yet): a folder
#: with data files and this mark is a table being created, not one of the pre-Delta layout.
NEW_TABLE_MARK = "_tracelake_table"
#: Leaf columns (in file order) whose min / max / null counts go into a data file's Delta statistics.
STATS_COLUMNS = 32


class CommitError(RuntimeError):
    """A table write that could not be committed: the table is in the old layout, or the commit kept conflicting
    (names the table and what to do)."""


@dataclass
class CommitResult:
    """What one :func:`write_partitions` call did.

    Attributes:
        table: table name.
        write_id: id of this write (sortable: UTC time then a random suffix), also in the log entry.
        version: the table version the write committed; ``-1`` when there was nothing to commit.
        partitions: partition folders written, relative to the table root (``date=…/job_id=…``).
        dropped: partitions of ``replace_jobs`` removed without new rows.
        files_added: data files the commit added.
        files_removed: data files the commit removed (they stay on disk until vacuumed).
        attempts: commit attempts (more than 1: a concurrent writer won and the write was retried).
        skipped: nothing committed: a concurrent write derived the table from newer ``inputs``.
        method: ``delta``.
    """

    table: str
    write_id: str
    version: int = -1
    partitions: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    files_added: int = 0
    files_removed: int = 0
    attempts: int = 0
    skipped: bool = False
    method: str = "delta"


def local_root(warehouse: str) -> str | None:
    """The local path of ``warehouse`` (plain path or ``file://`` URI); ``None`` for any other URI."""
    if warehouse.startswith("file://"):
        return warehouse[len("file://") :] or "/"
    if "://" in warehouse:
        return None
    return warehouse


def storage_options(uri: str) -> dict[str, str] | None:
    """delta-rs storage options for ``uri``: ``None`` on local disk; on ``s3://`` the credentials and endpoint
    come from the usual ``AWS_*`` environment variables (as for pyarrow), plus plain HTTP allowed when
    ``AWS_ENDPOINT_URL`` is ``http://``. delta-rs writes each log entry with a conditional PUT
    (``If-None-Match: *``): no lock service is needed (measured on SeaweedFS: the losing writer gets 412)."""
    if local_root(uri) is not None:
        return None
    opts: dict[str, str] = {}
    if uri.startswith(("s3://", "s3a://")):
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        if endpoint:
            opts["AWS_ENDPOINT_URL"] = endpoint
            if endpoint.startswith("http://"):
                opts["AWS_ALLOW_HTTP"] = "true"
        if not (os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")):
            opts["AWS_REGION"] = "us-east-1"
    return opts


#: fsspec/s3fs storage option → the ``AWS_*`` variable delta-rs, pyarrow and s3fs read it from.
_S3FS_TO_AWS = {
    "key": "AWS_ACCESS_KEY_ID",
    "secret": "AWS_SECRET_ACCESS_KEY",
    "token": "AWS_SESSION_TOKEN",
    "endpoint_url": "AWS_ENDPOINT_URL",
}


def use_storage_options(warehouse: str, options: dict | None) -> list[str]:
    """Let an ``s3://`` warehouse be read and written with the run's fsspec storage options (those of the landing
    zone: ``key``, ``secret``, ``token``, ``endpoint_url``, ``client_kwargs.region_name``/``endpoint_url``), by
    setting the matching ``AWS_*`` variables in this process: the one place every warehouse reader and writer
    (delta-rs, pyarrow, s3fs, the local executor's workers) takes credentials from. Options given win over the
    environment; without options the ``AWS_*`` variables (or an instance role) apply unchanged. Spark executors
    on other machines use their own credentials (instance role, ``spark-env.sh``).

    Returns:
        The names of the variables set (empty for a local warehouse or no options)."""
    if not options or not warehouse.startswith(("s3://", "s3a://")):
        return []
    client = options.get("client_kwargs") or {}
    values = {var: options.get(opt) for opt, var in _S3FS_TO_AWS.items()}
    values["AWS_ENDPOINT_URL"] = values["AWS_ENDPOINT_URL"] or client.get("endpoint_url")
    region = client.get("region_name") or options.get("region_name")
    values.update(AWS_REGION=region, AWS_DEFAULT_REGION=region)
    set_ = {k: str(v) for k, v in values.items() if v}
    os.environ.update(set_)
    return sorted(set_)


def table_uri(warehouse: str, table: str) -> str:
    """``{warehouse}/{table}``: a local path or a URI."""
    root = local_root(warehouse.rstrip("/") or "/")
    return os.path.join(root, table) if root is not None else posixpath.join(warehouse.rstrip("/"), table)


def _fs(uri: str) -> tuple[pafs.FileSystem, str]:
    root = local_root(uri)
    return (pafs.LocalFileSystem(), root) if root is not None else pafs.FileSystem.from_uri(uri)


def open_table(uri: str, version: int | str | _dt.datetime | None = None):
    """The Delta table at ``uri`` (a ``deltalake.DeltaTable``) at its latest version, or at ``version`` (a
    version number, or an ISO 8601 time / ``datetime``: the version current then); ``None`` when no table was
    written there.

    Raises:
        CommitError: ``uri`` holds Parquet files of the pre-Delta layout (no ``_delta_log``).
    """
    opts = storage_options(uri)
    if not DeltaTable.is_deltatable(uri, storage_options=opts):
        fs, base = _fs(uri)
        info = fs.get_file_info(base)
        if info.type != pafs.FileType.Directory:
            return None
        names = [posixpath.basename(i.path) for i in fs.get_file_info(pafs.FileSelector(base))]
        if NEW_TABLE_MARK not in names and any(not _hidden(n) for n in names):
            raise CommitError(
                f"{uri} is a table of the pre-Delta warehouse layout (Parquet folders without _delta_log); "
                "convert the warehouse once with: tracelake migrate --warehouse <warehouse>"
            )
        return None
    if isinstance(version, str):
        version = int(version) if version.isdigit() else _dt.datetime.fromisoformat(version)
    if isinstance(version, int):  # one log replay, up to that version (not the latest, then back)
        return DeltaTable(uri, version=version, storage_options=opts)
    dt = DeltaTable(uri, storage_options=opts)
    if isinstance(version, _dt.datetime):
        dt.load_as_version(_version_at(dt, version, uri))
    return dt


def _version_at(dt, when: _dt.datetime, uri: str) -> int:
    """The newest version whose commit time (the commitInfo timestamp, ms — what ``history`` shows) is at or
    before ``when`` (a time without zone is UTC). delta-rs' own time travel dates a version by its log file's
    modification time, a few ms after the commit time, so the time ``history`` printed could open the version
    before it.

    Raises:
        CommitError: ``when`` is before the table's first version.
    """
    when = when if when.tzinfo else when.replace(tzinfo=_dt.UTC)
    ms = when.timestamp() * 1000
    at = [int(h["version"]) for h in dt.history() if "timestamp" in h and h["timestamp"] <= ms]
    if not at:
        raise CommitError(f"{uri}: no version at {when.isoformat()} (the table's first commit is later)")
    return max(at)


def live_files(dt, where=None) -> list[dict]:
    """The live data files of a Delta table: ``{"path", "size_bytes", "partition": {column: value}}`` each
    (``path`` relative to the table root as the log writes it: a URI, which a remove action repeats as is and
    :func:`urllib.parse.unquote` turns into the file's name). ``where(actions) -> boolean Arrow array``
    over the log's add actions (columns ``path``, ``partition.<column>`` …): only the files it selects, chosen in
    Arrow (a long history is thousands of files; only the selected ones become Python objects)."""
    t = pa.table(dt.get_add_actions(flatten=True))
    if where is not None:
        t = t.filter(where(t))
    # the columns needed only (the actions carry min/max statistics of every column too)
    parts = {n[len("partition.") :]: t[n].to_pylist() for n in t.column_names if n.startswith("partition.")}
    return [
        {"path": path, "size_bytes": int(size), "partition": {k: v[i] for k, v in parts.items()}}
        for i, (path, size) in enumerate(zip(t["path"].to_pylist(), t["size_bytes"].to_pylist()))
    ]


def write_partitions(
    df,
    warehouse: str,
    table: str,
    partition_by=None,
    replace_jobs=None,
    schema: pa.Schema | None = None,
    replace_all: bool = False,
    inputs: dict[str, int | None] | None = None,
    replace_where: Mapping[str, Iterable] | None = None,
    snapshot=None,
    replace_rows: list | None = None,
    files_apart: tuple[str, str] | None = None,
    stats: bool = False,
) -> CommitResult:
    """Replace the partitions of ``{warehouse}/{table}`` that ``df`` has rows for with those rows, in one Delta
    commit (module docstring); or, with ``replace_rows``, the rows matching a predicate.

    Same result as ``df.write.mode("overwrite").partitionBy(...).parquet(path)`` under dynamic partition
    overwrite (partitions absent from ``df`` are kept), atomic for the whole write. An empty ``df`` commits
    nothing (the table is created if missing, unless the write only replaces the rows of ``replace_jobs``: a
    batch without rows in a table never written leaves it unwritten). With ``replace_jobs``, every other
    partition of those jobs is removed in the same commit: a job rebuilt with no rows left in the table, or under
    another ``date``, leaves no stale rows.

    Args:
        df: the rows, with the partition columns: a Spark DataFrame (Spark's executors write them), a
            ``pyarrow.Table``, or a callable ``stage(folder)`` that fills an empty local folder with
            Hive-partitioned Parquet (the local executor's workers' files, moved in by :func:`move_staged`).
        warehouse: warehouse root (local path or URI).
        table: table name (the folder under ``warehouse``).
        partition_by: partition columns; default the declared ones (:func:`schemas.declared`).
        replace_jobs: the job ids ``df`` holds every row of (for a table partitioned by ``job_id``).
        schema: the table's schema when it is created (partition columns included); default the declared one,
            else (a table :mod:`schemas` does not declare) the first data file's, partition columns as strings.
        replace_all: the rows are the whole table (a table rebuilt whole): every live file is removed.
        inputs: ``{table: version}`` the rows were computed from (a derived table). Recorded in the commit; a
            write whose inputs are older than those of the table's last write is skipped (``skipped``): two
            runs that derive the table at once never leave the older derivation on top.
        replace_where: ``{partition column: values}``: every partition with one of those values is removed in the
            same commit, rows or not (``{"date": dates}``: those dates' rows made again, a date left without
            rows leaves none behind).
        snapshot: the table (``deltalake.DeltaTable``) as the caller opened it before, at any older version: brought
            up to date from the log's newer commits instead of opened anew (:func:`jobs.warehouse.versions_cached`).
        replace_rows: a predicate in disjunctive normal form (``[[(column, op, value), …], …]``: OR of ANDs; ops
            ``=``, ``!=``, ``in``): the rows matching it are removed and ``df`` (a ``pyarrow.Table`` whose rows all
            match it) added, in one commit — an update of a table keyed by its rows, not its partitions. Only the
            files whose partition values and min/max statistics (:func:`parquet_stats`, written into its adds)
            may hold a matching row are scanned; a file holding one is written again without it, every other file
            stays. ``[]``: append. Not with ``replace_jobs``, ``replace_all`` or ``replace_where``.
        files_apart: ``(column, value)``: the rows holding the value go to files of their own (:func:`apart`; a
            ``pyarrow.Table``'s rows, with statistics); default the declared table's (:class:`schemas.tables.Table`).
        stats: write Delta min / max statistics into the add actions (:func:`parquet_stats`; a ``pyarrow.Table``'s
            files; always with ``replace_rows`` or ``files_apart``). For tables updated by key, whose files stay few: delta-rs turns
            every file's statistics into a pyarrow expression when it opens a dataset (~2 ms a file at 32 columns,
            measured), too much for the per-job tables' thousands of files.

    Returns:
        :class:`CommitResult`.

    Raises:
        CommitError: the table is of the pre-Delta layout, or the commit still conflicted after
            :data:`COMMIT_TRIES` tries (nothing of this write is visible; what it staged is vacuumed later).
        ValueError: ``replace_rows`` with rows that are not a ``pyarrow.Table`` or with another ``replace_*``.
    """
    decl = _declared_or_none(table)
    if partition_by is None:
        partition_by = decl.partition_by if decl is not None else ()
    partition_by = list(partition_by)
    if schema is None and decl is not None:
        schema = decl.arrow_schema()
    uri = table_uri(warehouse, table)
    write_id = _write_id()
    dt = snapshot if snapshot is not None else open_table(uri)  # the layout check comes before anything is staged
    files_apart = files_apart or getattr(decl, "files_apart", None)
    split = apart(files_apart)
    if replace_rows is not None:
        if not isinstance(df, pa.Table) or replace_jobs is not None or replace_all or replace_where:
            raise ValueError(f"{table}: replace_rows takes a pyarrow.Table and no other replace_* argument")
        if dt is None:
            dt = _create(uri, schema if schema is not None else _arrow_schema_of(df, partition_by), partition_by)
        return _commit_rows(uri, table, df, partition_by, replace_rows, write_id, schema, inputs, dt, split)
    if dt is None:
        _mark_new(uri)  # a concurrent reader must not take the files staged below for the pre-Delta layout
    with _staging(warehouse, table, write_id) as staging:
        added = _stage(df, uri, staging, partition_by, write_id, table, split, stats or files_apart is not None)
    _crash_point(f"{table}:staged")
    if dt is None:
        if not added and replace_jobs is not None:
            _unmark_new(uri)
            return CommitResult(table, write_id)  # a batch without rows leaves a table never written unwritten
        if schema is None:
            if not added:
                return CommitResult(table, write_id)  # nothing to learn the schema of an undeclared table from
            schema = _file_schema(uri, added[0][0], partition_by)
        dt = _create(uri, schema, partition_by)
    return _commit(
        uri, table, added, partition_by, replace_jobs, write_id, schema, replace_all, inputs, replace_where, dt
    )


def _mark_new(uri: str) -> None:
    """Write :data:`NEW_TABLE_MARK` into the (new) table folder."""
    fs, base = _fs(uri)
    fs.create_dir(base, recursive=True)
    with fs.open_output_stream(posixpath.join(base, NEW_TABLE_MARK)) as f:
        f.write(b"a tracelake Delta table being created\n")


def _unmark_new(uri: str) -> None:
    """Remove :data:`NEW_TABLE_MARK` (and the folder, when that leaves it empty): nothing was written after all."""
    fs, base = _fs(uri)
    try:
        fs.delete_file(posixpath.join(base, NEW_TABLE_MARK))
    except FileNotFoundError:  # two runs creating the table at once, both without rows: the other removed it
        pass
    if isinstance(fs, pafs.LocalFileSystem):
        _rmdir_quiet(base)


def _declared_or_none(table: str):
    try:
        return declared(table)
    except KeyError:
        return None


def _file_schema(uri: str, rel: str, partition_by: list[str]) -> pa.Schema:
    """The schema of one staged data file plus the partition columns (strings)."""
    fs, base = _fs(uri)
    data = pq.read_schema(posixpath.join(base, rel), filesystem=fs)
    return pa.schema([*(f for f in data if f.name not in partition_by), *((p, pa.string()) for p in partition_by)])


def _create(uri: str, schema: pa.Schema, partition_by: list[str]):
    """Create the (empty) Delta table at ``uri``; a concurrent creator winning is fine."""
    try:
        return DeltaTable.create(
            uri, schema, partition_by=partition_by, storage_options=storage_options(uri), configuration=TABLE_PROPERTIES
        )
    except DeltaError:
        dt = open_table(uri)
        if dt is None:
            raise
        return dt


def _commit(
    uri,
    table,
    added,
    partition_by,
    replace_jobs,
    write_id,
    schema,
    replace_all=False,
    inputs=None,
    replace_where=None,
    dt=None,
) -> CommitResult:
    """One commit of ``added`` (``(rel path, size, partition values, Delta statistics)``) plus the removes it
    implies, retried on conflict with the removes recomputed from the winner's version. ``dt``: the table opened
    before staging, brought up to date by reading the log's newer commits only (a long history is not replayed
    again)."""
    written = {_key(pv, partition_by) for _, _, pv, _ in added}
    jobs = {str(j) for j in replace_jobs} if replace_jobs is not None and "job_id" in partition_by else set()
    where = {c: {str(v) for v in vs} for c, vs in (replace_where or {}).items() if c in partition_by}
    now = int(time.time() * 1000)
    adds = [AddAction(rel, size, pv, now, True, json.dumps(st)) for rel, size, pv, st in added]
    result = CommitResult(table, write_id, partitions=sorted({_rel(pv, partition_by) for _, _, pv, _ in added}))
    try:
        for attempt in _attempts():
            with attempt:
                result.attempts += 1
                if dt is None:
                    dt = open_table(uri)
                else:
                    dt.update_incremental()  # the commits since it was opened (a winner's, on a retry)
                if schema is not None:
                    _evolve(dt, schema)
                if inputs is not None and _newer_inputs(dt, inputs):
                    result.skipped = True  # a concurrent run derived the table from newer inputs: keep its rows
                    return result
                gone = live_files(dt, None if replace_all else partial(_replaced, partition_by, written, jobs, where))
                if not adds and not gone:
                    return result
                removes = [RemoveAction(f["path"], True, now, f["size_bytes"], f["partition"]) for f in gone]
                result.dropped = sorted(
                    {_rel(f["partition"], partition_by) for f in gone}
                    - {_rel(pv, partition_by) for _, _, pv, _ in added}
                )
                _crash_point(f"{table}:committing")
                committed_on = _transact(dt, table, [*adds, *removes], partition_by, write_id, inputs)
                result.files_removed = len(removes)
    except (CommitFailedError, DeltaError, OSError) as exc:
        raise _commit_error(uri, write_id, exc) from exc
    result.files_added = len(adds)
    result.version = committed_on + 1  # no retries inside delta-rs: the commit took exactly the next version
    _crash_point(f"{table}:committed")
    return result


def _write_id(prefix: str = "") -> str:
    """A write's id: ``prefix``, the UTC time (sortable), a random suffix."""
    return prefix + _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%S%fZ") + "-" + uuid.uuid4().hex[:8]


def _attempts() -> Retrying:
    """The commit attempts of one write: retried on a conflict (:data:`COMMIT_TRIES`, jittered backoff)."""
    return Retrying(
        retry=retry_if_exception_type(CommitFailedError),
        stop=stop_after_attempt(COMMIT_TRIES),
        wait=wait_random_exponential(multiplier=0.05, max=2.0),
        reraise=True,
    )


def _commit_error(uri: str, write_id: str, exc: Exception) -> CommitError:
    """What a failed commit raises: still conflicting after the last attempt, or the store failed (an S3 outage, a
    full disk) around the log entry."""
    if isinstance(exc, CommitFailedError):
        return CommitError(
            f"{uri}: the commit of write {write_id} still conflicted after {COMMIT_TRIES} tries ({exc}); the table "
            "is unchanged by it — run again"
        )
    return CommitError(
        f"{uri}: the commit of write {write_id} failed: {exc}. The table is at its version before this write "
        "(or, if the store took the log entry before failing, at this write's): run again"
    )


def _transact(dt, table: str, actions: list, partition_by, write_id: str, inputs) -> int:
    """Write one log entry of ``actions`` on top of ``dt``'s version (the table's application transaction and our
    metadata with it; no retry inside delta-rs: a concurrent commit raises ``CommitFailedError``). Returns the
    version it was committed on (the entry is that version + 1)."""
    committed_on = int(dt.version())
    n_add = sum(isinstance(a, AddAction) for a in actions)
    dt.create_write_transaction(
        actions,
        mode="append",
        schema=dt.schema(),
        partition_by=partition_by,
        commit_properties=CommitProperties(
            custom_metadata={
                "tracelake.write_id": write_id,
                "tracelake.run": _run_label(),
                "tracelake.files_added": n_add,
                "tracelake.files_removed": len(actions) - n_add,
                **({"tracelake.inputs": json.dumps(inputs, sort_keys=True)} if inputs else {}),
            },
            app_transactions=[Transaction(app_id=f"{APP_ID}:{table}", version=committed_on + 1)],
            max_commit_retries=0,
        ),
    )
    return committed_on


def _commit_rows(
    uri, table, rows: pa.Table, partition_by, predicate: list, write_id, schema, inputs, dt, split
) -> CommitResult:
    """One commit removing the rows matching ``predicate`` (DNF) and adding ``rows`` (:func:`write_partitions`'
    ``replace_rows``): the live files whose partition values and min/max statistics may hold a matching row are
    scanned (the predicate's columns only); those holding one are removed and their other rows written again with
    ``rows`` (each piece of ``split(rows)`` in files of its own). Retried on conflict as :func:`_commit`, the
    files found again."""
    groups = [g for g in predicate if not any(op == "in" and not len(v) for _, op, v in g)]  # an empty IN: no row
    expr = pq.filters_to_expression(groups) if groups else None
    fs, base = _fs(uri)
    result = CommitResult(table, write_id)
    try:
        for attempt in _attempts():
            with attempt:
                result.attempts += 1
                dt.update_incremental()
                if schema is not None:
                    _evolve(dt, schema)
                if inputs is not None and _newer_inputs(dt, inputs):
                    result.skipped = True
                    return result
                gone, kept = _files_matching(dt, groups, expr)
                if not rows.num_rows and not gone:
                    return result
                stored = pa.schema(dt.schema().to_arrow())
                pieces = [t.select(stored.names).cast(stored) for t in (rows, *kept)]
                added = _stage_pieces(pieces, split, fs, base, partition_by, f"{write_id}-{result.attempts}", True)
                now = int(time.time() * 1000)
                adds = [AddAction(rel, size, pv, now, True, json.dumps(st)) for rel, size, pv, st in added]
                removes = [RemoveAction(f["path"], True, now, f["size_bytes"], f["partition"]) for f in gone]
                result.partitions = sorted({_rel(pv, partition_by) for _, _, pv, _ in added})
                _crash_point(f"{table}:committing")
                committed_on = _transact(dt, table, [*adds, *removes], partition_by, write_id, inputs)
    except (CommitFailedError, DeltaError, OSError) as exc:
        raise _commit_error(uri, write_id, exc) from exc
    result.files_added, result.files_removed = len(adds), len(removes)
    result.version = committed_on + 1
    _crash_point(f"{table}:committed")
    return result


def apart(files_apart: tuple[str, str] | None):
    """``split(rows) -> [pyarrow.Table]`` of a table's ``files_apart`` (:class:`schemas.tables.Table`): the rows
    without the value, then those with it (``None``: the rows as one piece)."""
    if files_apart is None:
        return lambda rows: [rows]
    column, value = files_apart

    def split(rows: pa.Table) -> list[pa.Table]:
        has = pc.fill_null(pc.equal(rows[column], value), False)
        return [rows.filter(pc.invert(has)), rows.filter(has)]

    return split


def _stage_pieces(tables, split, fs, base: str, partition_by, prefix: str, stats: bool = False) -> list[tuple]:
    """Stage the rows of ``tables`` (one schema), each piece of ``split`` over their concatenation in files of its
    own (with :func:`parquet_stats` where ``stats``); the :func:`_added` tuples."""
    rows = pa.concat_tables(tables) if tables else None
    if rows is None or not rows.num_rows:
        return []
    pieces = [p for p in split(rows) if p.num_rows]
    return [a for i, p in enumerate(pieces) for a in _stage_arrow_in(p, fs, base, partition_by, f"{prefix}-{i}", stats)]


def _files_matching(dt, groups: list, expr) -> tuple[list[dict], list[pa.Table]]:
    """The live files (:func:`live_files` entries) holding a row of ``expr`` (``groups``: the same predicate as
    DNF tuples, which delta-rs prunes the files by: partition values, then min/max statistics), and each one's
    other rows."""
    if expr is None:
        return [], []
    data = dt.to_pyarrow_dataset(file_pruning_predicate=groups)
    names = {str(n) for n in data.to_table(columns=["__filename"], filter=expr)["__filename"].unique().to_pylist()}
    if not names:
        return [], []
    frags = [frag for frag in data.get_fragments() if frag.path in names]
    paths = {unquote(frag.path) for frag in frags}
    live = {unquote(f["path"]): f for f in live_files(dt, lambda t: _unquoted_in(t["path"], paths))}
    return [live[unquote(f.path)] for f in frags], [f.to_table(schema=data.schema).filter(~expr) for f in frags]


def _unquoted_in(paths: pa.ChunkedArray, wanted: set[str]) -> pa.Array:
    """Which of the log's (URL-quoted) ``paths`` name a file of ``wanted`` (unquoted)."""
    return pa.array([unquote(p) in wanted for p in paths.to_pylist()], pa.bool_())


def _arrow_schema_of(rows: pa.Table, partition_by) -> pa.Schema:
    return pa.schema(
        [*(f for f in rows.schema if f.name not in partition_by), *(rows.schema.field(p) for p in partition_by)]
    )


def _newer_inputs(dt, inputs: dict[str, int | None]) -> bool:
    """Whether the table's last derived write (``tracelake.inputs`` in its commit) was computed from inputs at least
    as new as ``inputs`` everywhere and newer somewhere."""
    for h in dt.history(20):
        last = h.get("tracelake.inputs")
        if last is None:
            continue  # a maintenance commit: look further back
        theirs = json.loads(last) if isinstance(last, str) else dict(last)
        mine = {k: -1 if v is None else int(v) for k, v in inputs.items()}
        other = {k: -1 if theirs.get(k) is None else int(theirs[k]) for k in mine}
        return all(other[k] >= mine[k] for k in mine) and other != mine
    return False


def _evolve(dt, schema: pa.Schema) -> None:
    """Add the declared columns the table lacks (nullable; old versions stay readable: schema evolution)."""
    have = set(pa.schema(dt.schema().to_arrow()).names)
    missing = [f for f in schema if f.name not in have]
    if missing:
        dt.alter.add_columns([Field.from_arrow(f.with_nullable(True)) for f in missing])


def _run_label() -> str:
    """Who wrote: ``$TRACELAKE_RUN_LABEL`` (a DAG run, a CLI run), else ``<host>:<pid>``."""
    return os.environ.get("TRACELAKE_RUN_LABEL") or f"{os.uname().nodename}:{os.getpid()}"


def _key(pv: dict, partition_by: list[str]) -> tuple:
    return tuple(None if pv.get(c) is None else str(pv.get(c)) for c in partition_by)


_NULL_PART, _SEP = "\x00", "\x1f"  # a null partition value, the separator of partition values in a key


def _partition(actions: pa.Table, column: str) -> pa.ChunkedArray:
    """The add actions' values of partition ``column`` as strings, a null one (or a column the table is not
    partitioned by) as :data:`_NULL_PART`."""
    name = f"partition.{column}"
    col = actions[name] if name in actions.column_names else pa.nulls(actions.num_rows)
    return pc.fill_null(pc.cast(col, pa.string()), _NULL_PART)


def partition_in(actions: pa.Table, column: str, values) -> pa.ChunkedArray:
    """Which of the log's add actions (:func:`live_files`' ``where``) lie in a partition of ``column`` with one of
    ``values`` (compared as strings; none: no file)."""
    return pc.is_in(_partition(actions, column), pa.array(sorted({str(v) for v in values}), pa.string()))


def _replaced(partition_by: list[str], written: set, jobs: set, where: dict, actions: pa.Table) -> pa.Array:
    """Which live files (the log's add actions) a write replaces: those of the partitions it writes (``written``:
    :func:`_key` tuples), of the jobs ``jobs`` and of the partition values ``where`` (``{column: values}``)."""
    cols = [_partition(actions, c) for c in partition_by]
    keys = cols[0] if len(cols) == 1 else pc.binary_join_element_wise(*cols, _SEP) if cols else None
    wanted = [_SEP.join(_NULL_PART if v is None else v for v in k) for k in written]
    mask = pc.is_in(keys, pa.array(wanted, pa.string())) if keys is not None else pa.repeat(bool(written), len(actions))
    if jobs:
        mask = pc.or_(mask, partition_in(actions, "job_id", jobs))
    for c, vs in where.items():
        mask = pc.or_(mask, partition_in(actions, c, vs))
    return mask


def _rel(pv: dict, partition_by: list[str]) -> str:
    return "/".join(f"{c}={quote(str(pv.get(c)), safe='')}" for c in partition_by)


@contextmanager
def _staging(warehouse: str, table: str, write_id: str):
    """A folder Spark and the local executor's workers stage into, inside a :func:`work_dir` of ``warehouse`` (the
    table's file system on local disk: files are renamed in; a local temporary folder otherwise); removed
    afterwards, or by the next :func:`recover` when the writer died."""
    with work_dir(warehouse) as work:
        yield os.path.join(work, f"stage-{table}-{write_id}")


def _stage(
    df, uri: str, staging: str, partition_by: list[str], write_id: str, table: str, split, stats: bool = False
) -> list[tuple]:
    """Put ``df``'s rows into the table folder as data files named ``<write id>-<name>`` (a ``pyarrow.Table``'s
    pieces of ``split`` in files of their own, :func:`apart`); returns ``[(path relative to the table root, size in
    bytes, partition values, Delta statistics)]``."""
    fs, base = _fs(uri)
    if isinstance(df, pa.Table):
        return _stage_pieces([df], split, fs, base, partition_by, write_id, stats)
    if not callable(df):
        return _stage_spark(df, uri, partition_by, write_id)
    os.makedirs(staging)
    df(staging)
    return _move_in(staging, fs, base, partition_by, write_id, table)


#: What each Spark task reports of the data files it wrote (:func:`_stage_spark`).
SPARK_WRITTEN = "path string, size long, rows long"


def _stage_spark(df, uri: str, partition_by: list[str], write_id: str) -> list[tuple]:
    """Spark's executors write the rows straight into the table folder with pyarrow (``mapInArrow``: each task its
    own files, named ``<write id>-<partition>-<task attempt>-<n>``; local disk or any URI pyarrow's file systems
    take, no Hadoop connector needed) and report them; the driver collects the list. A failed task attempt's
    files are never reported, so never committed (vacuum deletes them)."""
    fs, base = _fs(uri)
    rows = df.mapInArrow(partial(_write_task, uri, tuple(partition_by), write_id), SPARK_WRITTEN).collect()
    return [_added(base, posixpath.join(base, r["path"]), r["size"], partition_by, r["rows"]) for r in rows]


def _write_task(uri: str, partition_by: tuple, write_id: str, batches):
    """One Spark task of :func:`_stage_spark`: its Arrow batches → Hive-partitioned Parquet files in the table
    folder; yields one batch of ``(path relative to the table root, size, rows)``."""
    from pyspark import TaskContext  # heavy: pyspark (only in Spark's Python workers)

    ctx = TaskContext.get()
    tag = f"{write_id}-{ctx.partitionId():05d}-{ctx.taskAttemptId()}" if ctx else f"{write_id}-{uuid.uuid4().hex[:8]}"
    it = iter(batches)
    first = next(it, None)
    if first is None:
        return
    fs, base = _fs(uri)
    files = _write_arrow(
        pa.RecordBatchReader.from_batches(first.schema, itertools.chain([first], it)), fs, base, partition_by, tag
    )
    if not files:
        return
    yield pa.RecordBatch.from_pydict(
        {
            "path": [posixpath.relpath(path, base) for path, _, _, _ in files],
            "size": [size for _, size, _, _ in files],
            "rows": [n for _, _, n, _ in files],
        },
        schema=pa.schema([("path", pa.string()), ("size", pa.int64()), ("rows", pa.int64())]),
    )


def _stage_arrow_in(
    rows: pa.Table, fs, base: str, partition_by: list[str], write_id: str, stats: bool = False
) -> list[tuple]:
    if rows.num_rows == 0:
        return []
    files = _write_arrow(rows, fs, base, partition_by, f"{write_id}-part", stats)
    return [_added(base, path, size, partition_by, n, st) for path, size, n, st in files]


def _write_arrow(rows, fs, base: str, partition_by, prefix: str, stats: bool = False) -> list[tuple]:
    """Write ``rows`` (a ``pyarrow.Table`` or ``RecordBatchReader``) Hive-partitioned under ``base`` as
    ``<prefix>-<n>.parquet`` files; ``[(path, size in bytes, rows, statistics)]`` of the files written
    (:func:`parquet_stats` with ``stats``, else ``{}``)."""
    written: dict[str, tuple[int, dict]] = {}
    stage_arrow(
        rows,
        base,
        list(partition_by),
        existing="overwrite_or_ignore",
        basename=f"{prefix}-{{i}}.parquet",
        filesystem=fs,
        visitor=lambda w: written.__setitem__(
            w.path, (w.metadata.num_rows, parquet_stats(w.metadata) if stats else {})
        ),
    )
    return [(i.path, int(i.size), *written[i.path]) for i in fs.get_file_info(list(written))]


def _move_in(staging: str, fs, base: str, partition_by: list[str], write_id: str, table: str) -> list[tuple]:
    """Move the staged data files into the table folder (rename on local disk; copy and delete otherwise)."""
    if not os.path.isdir(staging):
        return []
    out = []
    n = 0
    local = isinstance(fs, pafs.LocalFileSystem)
    for rel, files in staged_partitions(staging, len(partition_by)).items():
        dest = posixpath.join(base, rel)
        if local:
            os.makedirs(dest, exist_ok=True)
        for name in files:
            src, dst = os.path.join(staging, rel, name), posixpath.join(dest, f"{write_id}-{name}")
            size, rows = os.path.getsize(src), _num_rows(src, pafs.LocalFileSystem())
            if local:
                os.rename(src, dst)
            else:
                pafs.copy_files(src, dst, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=fs)
                os.remove(src)
            out.append(_added(base, dst, size, partition_by, rows))
            n += 1
            _crash_point(f"{table}:staged-{n}")
    return out


def _num_rows(path: str, fs) -> int:
    """Rows of one Parquet data file (its footer)."""
    with fs.open_input_file(path) as f:
        return int(pq.read_metadata(f).num_rows)


def parquet_stats(md: pq.FileMetaData) -> dict:
    """Delta file statistics (``minValues``, ``maxValues``, ``nullCount``) of a Parquet file's top-level string and
    numeric columns, from its footer's row-group statistics (Delta protocol, "Per-file Statistics"): what lets a
    reader or :func:`write_partitions`' ``replace_rows`` skip files by value, not only by partition. The first
    :data:`STATS_COLUMNS` leaf columns only (Delta's ``dataSkippingNumIndexedCols`` default; a wide table's log
    stays small); columns of other types (timestamps, binary, nested), or without statistics in a row group, are
    left out (a file without a column's statistics is never skipped for it)."""
    lo: dict = {}
    hi: dict = {}
    nulls: dict = {}
    for i in range(min(md.num_columns, STATS_COLUMNS)):
        path = md.schema.column(i).path
        if "." in path:
            continue
        n, ok, mn, mx = 0, True, None, None
        for g in range(md.num_row_groups):
            st = md.row_group(g).column(i).statistics
            if st is None or not st.has_null_count:
                ok = False
                break
            n += st.null_count
            if st.has_min_max:
                a, b = st.min, st.max
                if isinstance(a, bool) or not isinstance(a, (str, int, float)) or not _finite(a) or not _finite(b):
                    ok = False
                    break
                mn, mx = a if mn is None else min(mn, a), b if mx is None else max(mx, b)
        if ok:
            nulls[path] = n
            if mn is not None:
                lo[path], hi[path] = mn, mx
    return {"minValues": lo, "maxValues": hi, "nullCount": nulls}


def _finite(v) -> bool:
    return not isinstance(v, float) or math.isfinite(v)


def _added(base: str, path: str, size: int, partition_by: list[str], num_rows: int, stats: dict | None = None) -> tuple:
    """``(path relative to the table root, size in bytes, partition values, Delta statistics)`` of one staged data
    file (``numRecords``, and ``stats``' min / max / null counts where given)."""
    rel = posixpath.relpath(path, base) if path.startswith("/") else path[len(base) :].lstrip("/")
    segs = rel.split("/")[:-1]
    pv = {}
    for seg in segs:
        k, _, v = seg.partition("=")
        if k in partition_by:
            pv[k] = unquote(v)
    return rel, int(size), pv, {"numRecords": int(num_rows), **(stats or {})}


def _hive(partition_by, types=None):
    types = types or {}
    return ds.partitioning(pa.schema([(p, types.get(p, pa.string())) for p in partition_by]), flavor="hive")


def stage_arrow(
    table,
    folder: str,
    partition_by,
    existing: str = "error",
    basename: str = "part-{i}.parquet",
    filesystem=None,
    visitor=None,
) -> None:
    """Write an Arrow table as Hive-partitioned Parquet under ``folder`` (the layout Spark writes:
    ``date=…/job_id=…/`` folders, partition columns kept out of the files, snappy).

    Args:
        table: a ``pyarrow.Table`` (no rows writes nothing) or a ``pyarrow.dataset.Dataset`` (streamed)
            holding the ``partition_by`` columns.
        folder: a local folder, or a URI pyarrow's file systems take (or a path on ``filesystem``).
        existing: pyarrow's ``existing_data_behavior`` (``error``: ``folder`` must be empty).
        basename: file name template (``{i}`` numbers the files of a partition).
        filesystem: the file system of ``folder`` (default: from ``folder``).
        visitor: pyarrow's ``file_visitor`` (called with each file written).
    """
    if isinstance(table, pa.Table) and table.num_rows == 0:
        return
    if filesystem is None:
        filesystem, folder = _fs(folder)
    part = _hive(partition_by, {p: table.schema.field(p).type for p in partition_by})
    ds.write_dataset(
        table,
        folder,
        filesystem=filesystem,
        format="parquet",
        partitioning=part,
        basename_template=basename,
        existing_data_behavior=existing,
        max_rows_per_group=1 << 17,
        max_rows_per_file=1 << 24,
        max_partitions=1 << 24,  # pyarrow's default 1,024: a first fleet run over a big warehouse writes more jobs
        file_visitor=visitor,
    )


def move_staged(source: str, staging: str, prefix: str, depth: int, relabel=None) -> int:
    """Move the data files of the Hive-partitioned folder ``source`` into ``staging`` (same file system).

    Args:
        source: a worker's output folder (:func:`stage_arrow`); removed when emptied.
        staging: the staging folder :func:`write_partitions` hands to its callable.
        prefix: prepended to each file name (``<prefix>-<name>``), unique per source.
        depth: number of partition columns.
        relabel: ``relabel(rel) -> rel`` maps a partition folder (``date=…/job_id=…``) to another
            (normalize's bare-job renames), default unchanged.

    Returns:
        Number of files moved.
    """
    n = 0
    for rel, files in staged_partitions(source, depth).items() if os.path.isdir(source) else ():
        dest = os.path.join(staging, relabel(rel) if relabel else rel)
        os.makedirs(dest, exist_ok=True)
        for name in files:
            src, dst = os.path.join(source, rel, name), os.path.join(dest, f"{prefix}-{name}")
            try:
                os.rename(src, dst)
            except OSError:  # another file system (a remote warehouse's temporary staging): copy
                shutil.move(src, dst)
            n += 1
    shutil.rmtree(source, ignore_errors=True)
    return n


@contextmanager
def work_dir(warehouse: str):
    """A private folder for one run's worker outputs, removed when the run ends.

    Local warehouses: ``{warehouse}/_commit/work/<id>/`` (the same file system as the staging folders,
    so :func:`move_staged` renames), held by an ``flock`` on ``<id>.lock``: recovery removes the folders
    of dead runs (their lock is free), never a live one's. Other warehouses: a temporary folder.

    Yields:
        The folder's path.
    """
    import fcntl  # POSIX only (the rest of the module imports on any OS)

    root = local_root(warehouse.rstrip("/") or "/")
    if root is None:
        with tempfile.TemporaryDirectory(prefix="tracelake-work-") as tmp:
            yield tmp
        return
    base = os.path.join(root, COMMIT_DIR, "work")
    os.makedirs(base, exist_ok=True)
    name = _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%S%fZ") + "-" + uuid.uuid4().hex[:8]
    fd = os.open(os.path.join(base, name + ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
    folder = os.path.join(base, name)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.makedirs(folder)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        os.remove(os.path.join(base, name + ".lock"))
        os.close(fd)


def _remove_dead_work(root: str) -> list[str]:
    """Remove the work folders of runs that died (their ``flock`` is free); returns their names."""
    import fcntl  # POSIX only (the rest of the module imports on any OS)

    base = os.path.join(root, COMMIT_DIR, "work")
    removed: list[str] = []
    if not os.path.isdir(base):
        return removed
    for name in os.listdir(base):
        if not name.endswith(".lock"):
            continue
        lock = os.path.join(base, name)
        try:
            fd = os.open(lock, os.O_RDWR)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue  # a live run
        shutil.rmtree(os.path.join(base, name[: -len(".lock")]), ignore_errors=True)
        os.remove(lock)
        os.close(fd)
        removed.append(name[: -len(".lock")])
    return removed


def staged_partitions(staging: str, depth: int) -> dict[str, list[str]]:
    """Partition folders of a Spark output folder and their data files.

    Args:
        staging: a Hive-partitioned Parquet output folder.
        depth: number of partition columns.

    Returns:
        ``{"date=…/job_id=…": sorted data file names}``; hidden names (``.``/``_``, e.g. ``.crc``,
        ``_SUCCESS``) are not data files, and folders without data files are left out.
    """
    level = [""]
    for _ in range(depth):
        nxt = []
        for rel in level:
            here = os.path.join(staging, rel)
            for name in sorted(os.listdir(here)):
                if "=" in name and not _hidden(name) and os.path.isdir(os.path.join(here, name)):
                    nxt.append(posixpath.join(rel, name) if rel else name)
        level = nxt
    out = {}
    for rel in level:
        files = data_files(os.path.join(staging, rel))
        if files:
            out[rel] = files
    return out


def data_files(folder: str) -> list[str]:
    """Sorted names of the files a reader reads in ``folder`` (not hidden); ``[]`` when it is absent."""
    try:
        with os.scandir(folder) as it:  # one directory read: file types come with the names
            return sorted(e.name for e in it if not _hidden(e.name) and e.is_file())
    except FileNotFoundError:
        return []


def _rmdir_quiet(path: str) -> None:
    """Remove ``path`` if it is an empty folder (a table's staging folder with no other run in it)."""
    try:
        os.rmdir(path)
    except OSError:
        pass


def _fsync_dir(d: str) -> None:
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _hidden(name: str) -> bool:
    return name.startswith((".", "_"))


def _crash_point(point: str) -> None:
    if os.environ.get(CRASH_ENV) != point:
        return
    if os.getpgid(0) == os.getpid():  # a process-group leader (a test's subprocess): take the JVM along
        os.killpg(os.getpid(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def write_text_atomic(uri: str, text: str) -> None:
    """Write a small text file so readers see the old or the new content, never a truncated one.

    Local paths (and ``file://``): written to a hidden temporary file in the same folder, fsynced, then
    ``os.replace``-d over ``uri`` (atomic on POSIX). Other URIs: one fsspec write (an object-store PUT
    is atomic per object).

    Raises:
        OSError: the folder cannot be created or written.
    """
    root = local_root(uri)
    if root is None:
        import fsspec  # object stores only: keeps fsspec off `tracelake --help` (cli → warehouse → commit)

        with fsspec.open(uri, "w", encoding="utf-8") as f:
            f.write(text)
        return
    folder = os.path.dirname(root) or "."
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{os.path.basename(root)}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, root)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    _fsync_dir(folder)


def recover(warehouse: str) -> list[str]:
    """Remove what dead writers of ``warehouse`` left outside the tables: their work and staging folders (a live
    run's are locked and kept). A commit needs no recovery — a killed writer left each table at its old or new
    version; its staged, uncommitted data files are invisible and vacuumed by ``tracelake maintain``.
    Non-local warehouses: nothing to do.

    Returns:
        The work folders removed (their names).
    """
    root = local_root(warehouse.rstrip("/") or "/")
    if root is None:
        return []
    return _remove_dead_work(root)


# ----------------------------------------------------------------------------- maintenance and migration

#: Files a commit removed are deleted by :func:`maintain` only after this many hours (readers of older versions
#: and ``--as-of`` queries within it keep working; Delta's default ``deletedFileRetentionDuration``).
RETENTION_HOURS = 168


def _convert(uri: str, table: str, decl) -> None:
    """One Delta table over the Hive-partitioned data files already at ``uri``: created, then one commit adding
    every file under its own path (partition values unquoted from the folder names, as the old layout wrote them)."""
    fs, base = _fs(uri)
    partition_by = list(decl.partition_by)
    added = []
    for i in fs.get_file_info(pafs.FileSelector(base, recursive=True)):
        rel = posixpath.relpath(i.path, base)
        if i.type != pafs.FileType.File or any(_hidden(seg) for seg in rel.split("/")):
            continue
        added.append(_added(base, i.path, i.size, partition_by, _num_rows(i.path, fs)))
    schema = decl.arrow_schema() if decl.columns else (_file_schema(uri, added[0][0], partition_by) if added else None)
    if schema is None:
        return
    _create(uri, schema, partition_by)
    write_id = _write_id("migrate-")
    _commit(uri, table, added, partition_by, None, write_id, schema)


def maintain(
    uri: str,
    retention_hours: float = RETENTION_HOURS,
    target_mb: float = 128,
    files_apart: tuple[str, str] | None = None,
) -> dict:
    """Compact the small data files of the Delta table at ``uri`` (bin-packing to ``target_mb`` per partition,
    delta-rs ``optimize.compact``; with ``files_apart`` — default the declared table's, by the folder's name —
    :func:`_compact_apart`: the rows holding the value stay in files of their own), then vacuum the files no version within ``retention_hours`` references
    (removed by a commit, or staged by a writer that died), set :data:`TABLE_PROPERTIES` where missing, and
    checkpoint the log.

    Safe while readers and writers run: compaction is a commit of its own (a writer it races re-reads and
    retries; a compaction that loses the race is skipped, counted in ``"skipped"``); vacuum only deletes files
    that no version younger than the retention needs.

    Returns:
        ``{"files_compacted", "files_added", "files_vacuumed", "skipped", "version"}``.
    """
    dt = open_table(uri)
    out = {"files_compacted": 0, "files_added": 0, "files_vacuumed": 0, "skipped": 0, "version": -1}
    if dt is None:
        return out
    files_apart = files_apart or getattr(_declared_or_none(posixpath.basename(uri.rstrip("/"))), "files_apart", None)
    target = int(target_mb * (1 << 20))
    try:
        if files_apart is None:
            m = dt.optimize.compact(target_size=target)
            out["files_compacted"], out["files_added"] = (
                int(m.get("numFilesRemoved", 0)),
                int(m.get("numFilesAdded", 0)),
            )
        else:
            out["files_compacted"], out["files_added"] = _compact_apart(dt, uri, files_apart, target)
    except CommitFailedError:
        out["skipped"] = 1
    dt = open_table(uri)
    vac = dt.vacuum(retention_hours=int(retention_hours), dry_run=False, enforce_retention_duration=False)
    out["files_vacuumed"] = len(vac)
    have = dt.metadata().configuration
    if any(have.get(k) != v for k, v in TABLE_PROPERTIES.items()):
        try:
            dt.alter.set_table_properties(TABLE_PROPERTIES)  # a table created before they were set
        except CommitFailedError:
            out["skipped"] += 1  # a writer's commit won the race: the next maintain sets them
    dt.create_checkpoint()
    dt.cleanup_metadata()
    out["version"] = int(dt.version())
    return out


def _compact_apart(dt, uri: str, files_apart: tuple[str, str], target_bytes: int) -> tuple[int, int]:
    """Compaction that keeps ``files_apart`` (:func:`apart`): in each partition whose files under ``target_bytes``
    are more than one of a kind, or hold both kinds in one file (its statistics of the column span the value, or
    it has none), those files are read and written again as one file per kind, in one commit (``dataChange``
    false, as delta-rs' compaction; a concurrent writer's commit raises ``CommitFailedError``). A compacted table
    is left as it is. Returns (files removed, files added)."""
    column, value = files_apart
    partition_by = list(dt.metadata().partition_columns)
    acts = pa.table(dt.get_add_actions(flatten=True)).to_pylist()
    groups: dict[tuple, list[dict]] = {}
    for a in acts:
        if a["size_bytes"] < target_bytes:
            groups.setdefault(tuple(a.get(f"partition.{p}") for p in partition_by), []).append(a)

    def kind(a: dict) -> str:
        lo, hi = a.get(f"min.{column}"), a.get(f"max.{column}")
        if lo is not None and lo == hi == value:
            return "apart"
        return "mixed" if lo is None or hi is None or lo <= value <= hi else "rest"

    def untidy(files: list[dict]) -> bool:
        kinds = [kind(a) for a in files]
        return "mixed" in kinds or kinds.count("apart") > 1 or kinds.count("rest") > 1

    todo = [a for files in groups.values() if untidy(files) for a in files]
    if not todo:
        return 0, 0
    data = dt.to_pyarrow_dataset()
    frags = {unquote(f.path): f for f in data.get_fragments()}
    rows = [frags[unquote(a["path"])].to_table(schema=data.schema) for a in todo]
    fs, base = _fs(uri)
    write_id = _write_id("compact-")
    added = _stage_pieces(rows, apart(files_apart), fs, base, partition_by, write_id, True)
    now = int(time.time() * 1000)
    adds = [AddAction(rel, size, pv, now, False, json.dumps(st)) for rel, size, pv, st in added]
    removes = [
        RemoveAction(a["path"], False, now, a["size_bytes"], {p: a.get(f"partition.{p}") for p in partition_by})
        for a in todo
    ]
    _transact(dt, posixpath.basename(uri.rstrip("/")), [*adds, *removes], partition_by, write_id, None)
    return len(removes), len(adds)


def migrate(warehouse: str, tables) -> dict[str, str]:
    """Convert the tables of a warehouse of the pre-Delta layout (Hive-partitioned Parquet folders) into Delta
    tables in place (:func:`_convert`: one log entry adding the existing files under their own paths; no data file
    is rewritten or moved; ``deltalake.convert_to_deltalake`` is not used: it decodes ``%2F`` in a partition
    folder's name and then cannot find the file). Tables already Delta, or never written, are left alone; validation marks and
    MLflow references are untouched.

    Args:
        tables: ``{name: declared schemas.Table}`` to look for.

    Returns:
        ``{table: "converted" | "already delta" | "not written"}``.

    Raises:
        CommitError: the old layout's commit left an interrupted publish (``_commit/journal``): its partitions
            may be half-replaced, so the warehouse is not converted.
    """
    root = local_root(warehouse.rstrip("/") or "/")
    if root is not None:
        journal = os.path.join(root, COMMIT_DIR, "journal")
        pending = [n for n in os.listdir(journal) if n.endswith(".json")] if os.path.isdir(journal) else []
        if pending:
            raise CommitError(
                f"{warehouse}: the old commit protocol left {len(pending)} interrupted publish(es) in {journal} "
                f"({', '.join(sorted(pending))}); finish them with the tracelake release that wrote them "
                "(python -m jobs.commit WAREHOUSE), or re-run those jobs into a new warehouse"
            )
    out = {}
    for name, decl in tables.items():
        uri = table_uri(warehouse, name)
        try:
            dt = open_table(uri)
        except CommitError:
            _convert(uri, name, decl)
            out[name] = "converted"
            continue
        out[name] = "already delta" if dt is not None else "not written"
    if root is not None:
        for old in ("trash", "staging", "journal"):
            shutil.rmtree(os.path.join(root, COMMIT_DIR, old), ignore_errors=True)
        lock = os.path.join(root, COMMIT_DIR, "lock")  # the old protocol's writers' flock file
        if os.path.isfile(lock):
            os.remove(lock)
    return out
