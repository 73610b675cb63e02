"""Crash-safe replacement of warehouse partitions: stage, journal, publish by rename, roll forward.

Why not Spark's dynamic partition overwrite alone: its job commit
(``HadoopMapReduceCommitProtocol.commitJob`` with ``dynamicPartitionOverwrite``) stages the output in
``<table>/.spark-staging-<job>/`` and then, partition by partition, *recursively deletes* the live
partition folder and renames the staged one into its place. A reader listing the table meanwhile sees a
partition with part of its old files, or none; a ``kill -9`` of the driver in that loop leaves such a
partition behind for good (measured: a partition left with 197 of its 200 old files, and the new data
orphaned in the hidden staging folder), plus a mix of new and old partitions.

The protocol (:func:`write_partitions`), for one table write of one run:

1. **stage** — Spark (or the local executor, :mod:`jobs.executor`) writes the rows, Hive-partitioned, into
   ``{warehouse}/_commit/staging/{table}/{run_id}/`` (outside the table root, so readers never see it;
   Spark's own ``_temporary`` and ``_SUCCESS`` live there).
2. **journal** — the intent file ``{warehouse}/_commit/journal/{table}@{run_id}.json`` lists every
   staged partition folder (``date=…/job_id=…``) and its data files. It is written to a temporary name,
   fsynced and renamed: its appearance is the commit point. Before it: the run rolls *back* (the next
   writer deletes the staging folder; the table was never touched). After it: the run rolls *forward*.
3. **publish** — each partition folder is swapped in whole: where the partition exists, with one
   ``renameat2(RENAME_EXCHANGE)`` (Linux ≥ 3.15 on ext4, xfs, btrfs, tmpfs) that atomically exchanges
   the live folder and the staged one (the old one lands in the staging folder); else with one
   ``rename``. A partition whose live data files are exactly the journal's is already published, so
   publishing is idempotent and a crash anywhere in the loop is finished by re-running the loop.
4. **clean up** — move the staging folder (now holding the replaced partitions) to
   ``{warehouse}/_commit/trash/`` and delete the journal. Replaced partitions are deleted by a later
   recovery once :data:`TRASH_GRACE_S` has passed, not at once: a reader that opened the partition
   folder just before the swap is still reading that folder's entries (the old inode), and deleting
   them under it would hand it a silently shortened file list (seen in the unit test that lists a
   partition while it is replaced, with an immediate delete: listings of 1 and 0 of 30 files).

:func:`recover` (run by every :func:`write_partitions` before it writes, and by
``python -m jobs.commit WAREHOUSE``) rolls forward every journal left by a crashed run, deletes
unjournaled staging folders and empties the trash of what is past its grace period. Writers of one
warehouse are serialized by an ``flock`` on ``{warehouse}/_commit/lock`` (released by the kernel when
the holder dies, even by ``kill -9``); readers take no lock.

What holds, and where:

* **Local file system, Linux, exchange supported** (the tested case): at every instant each partition
  folder is either its old complete version or its new complete version, never partial, never absent
  (a new partition appears whole). Nothing hidden is ever read: Spark's file index and
  ``pyarrow.dataset`` skip names starting with ``.`` or ``_`` — the staging and journal live under
  ``_commit``. Not atomic *across* partitions or tables: during a publish (or after a crash in it,
  until the next writer recovers) a reader can see job A new and job B old, or ``events`` new and
  ``captures`` old. A reader that listed a partition before it was swapped opens the listed file names
  under the live path, where they no longer exist: it fails with file-not-found (never reads a mix)
  and must retry. Guards against process crashes (``kill -9``, OOM); Spark does not fsync its
  Parquet files, so not against power loss. Disk: a replaced partition stays in the trash for at least
  :data:`TRASH_GRACE_S`, until the next write after that.
* **Local file system without exchange** (other kernels, some FUSE/overlay mounts): the old folder is
  renamed out, then the new one in; each is atomic, so a partition is old, absent for the instant
  between the two renames (or, after a crash there, until recovery), or new — never partial.
* **Object stores (S3, GCS, Azure) and other non-local URIs**: there is no atomic rename of a folder
  (a "rename" is a copy of every object plus a delete), so no per-partition guarantee can be made by
  renaming. For those warehouses :func:`write_partitions` falls back to Spark's dynamic partition
  overwrite (``spark.sql.sources.partitionOverwriteMode=dynamic``, see :mod:`jobs.spark`), or for
  the local executor's Arrow rows to pyarrow's ``existing_data_behavior="delete_matching"`` (each
  partition written is emptied, then written), and the window above applies. Crash-safe partition
  replacement on an object store needs a table format with a transaction log (Delta Lake, Apache
  Iceberg, Apache Hudi), not a different rename order.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime as _dt
import errno
import json
import os
import posixpath
import shutil
import signal
import tempfile
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from schemas import TABLES

#: Test hook: ``<table>:<point>`` kills this process (its process group when it leads one) with
#: SIGKILL at that point of :func:`write_partitions`. Points: ``staged`` (Spark output complete, no
#: journal), ``journaled`` (journal written, nothing published), ``published-<n>`` (after the n-th
#: partition), ``published`` (all published, before clean-up).
CRASH_ENV = "TRACELAKE_TEST_CRASH_AT"
COMMIT_DIR = "_commit"
JOURNAL_FORMAT = "tracelake-commit/1"
#: Seconds a replaced partition is kept (in ``_commit/trash``) before a later recovery deletes it.
TRASH_GRACE_S = 600.0

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


class CommitError(RuntimeError):
    """A journal that cannot be rolled forward (names the journal and the partition)."""


@dataclass
class CommitResult:
    """What one :func:`write_partitions` call did.

    Attributes:
        table: table name.
        run_id: id of this write (sortable: UTC time then a random suffix); ``""`` for the Spark fallback.
        partitions: partition folders published, relative to the table root (``date=…/job_id=…``).
        method: ``exchange`` (atomic swap), ``rename`` (rename out, rename in), ``spark`` (object-store
            fallback: Spark's dynamic partition overwrite) or ``overwrite`` (object-store fallback of the
            local executor: pyarrow's ``delete_matching``).
        recovered: journals of earlier crashed runs rolled forward first (their file names).
        dropped: partitions of the replaced jobs removed (``replace_jobs`` of :func:`write_partitions`).
    """

    table: str
    run_id: str
    partitions: list[str] = field(default_factory=list)
    method: str = "exchange"
    recovered: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)


def local_root(warehouse: str) -> str | None:
    """The local path of ``warehouse`` (plain path or ``file://`` URI); ``None`` for any other URI."""
    if warehouse.startswith("file://"):
        return warehouse[len("file://") :] or "/"
    if "://" in warehouse:
        return None
    return warehouse


def write_partitions(df, warehouse: str, table: str, partition_by=None, replace_jobs=None) -> CommitResult:
    """Replace the partitions of ``{warehouse}/{table}`` that ``df`` has rows for with those rows.

    Same result as ``df.write.mode("overwrite").partitionBy(...).parquet(path)`` under dynamic
    partition overwrite (partitions absent from ``df`` are kept), made crash-safe by the protocol of
    this module. An empty ``df`` publishes nothing (the table root is created if missing, unless the write only
    replaces the rows of ``replace_jobs``: a batch without rows in a table never written leaves it unwritten). With
    ``replace_jobs``, every other partition of those jobs (``job_id=`` folders) is removed in the same commit:
    a job rebuilt with no rows left in the table, or under another ``date``, leaves no stale rows.

    Args:
        df: the rows, with the partition columns: a Spark DataFrame (Spark's executors stage it), a
            ``pyarrow.Table`` (staged by :func:`stage_arrow`), or a callable ``stage(folder)`` that fills
            the empty staging folder with Hive-partitioned Parquet (the local executor's workers'
            files, moved in by :func:`move_staged`).
        warehouse: warehouse root (local path or URI); non-local URIs use the fallback below.
        table: table name (the folder under ``warehouse``).
        partition_by: partition columns; default ``schemas.TABLES[table].partition_by``.
        replace_jobs: the job ids ``df`` holds every row of (for a table partitioned by ``job_id``).

    Returns:
        :class:`CommitResult`.

    Raises:
        CommitError: a journal of an earlier run cannot be rolled forward (its staging was removed).
    """
    if partition_by is None:
        partition_by = TABLES[table].partition_by
    partition_by = list(partition_by)
    root = local_root(warehouse.rstrip("/") or "/")
    if root is None:
        return _write_remote(df, posixpath.join(warehouse.rstrip("/"), table), partition_by, replace_jobs)
    with _locked(root):
        recovered = _recover(root)
        run_id = _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%S%fZ") + "-" + uuid.uuid4().hex[:8]
        staging = os.path.join(root, COMMIT_DIR, "staging", table, run_id)
        try:
            _stage(df, staging, partition_by)
        except BaseException:  # a failed Spark job or worker: nothing was published, drop what it staged
            shutil.rmtree(staging, ignore_errors=True)
            _rmdir_quiet(os.path.dirname(staging))
            raise
        _crash_point(f"{table}:staged")
        partitions = staged_partitions(staging, len(partition_by)) if os.path.isdir(staging) else {}  # empty df
        drop = [
            rel
            for rel in stale_partitions(os.path.join(root, table), partition_by, replace_jobs)
            if rel not in partitions
        ]
        if partitions or drop or replace_jobs is None:  # a write that only replaces jobs' rows creates no table
            os.makedirs(os.path.join(root, table), exist_ok=True)
        if not partitions and not drop:
            shutil.rmtree(staging, ignore_errors=True)
            _rmdir_quiet(os.path.dirname(staging))
            return CommitResult(table, run_id, method=_method(), recovered=recovered)
        os.makedirs(staging, exist_ok=True)
        journal = {
            "format": JOURNAL_FORMAT,
            "table": table,
            "run_id": run_id,
            "staging": os.path.relpath(staging, root),
            "partitions": partitions,
            "drop": drop,
            "created_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        }
        path = _write_journal(root, journal)
        _crash_point(f"{table}:journaled")
        _publish(root, journal, path, crash_points=True)
        return CommitResult(table, run_id, sorted(partitions), _method(), recovered, dropped=drop)


def stale_partitions(folder: str, partition_by, job_ids) -> list[str]:
    """The partitions (``date=…/job_id=…``) of the table folder (a local path or fsspec URI) that belong to
    ``job_ids``: the ones a rebuild of those jobs replaces. ``[]`` without ``job_ids`` or a ``job_id`` partition
    column."""
    partition_by = list(partition_by)
    if not job_ids or "job_id" not in partition_by:
        return []
    import fsspec  # heavy-ish: only when jobs are replaced

    fs, base = fsspec.core.url_to_fs(folder)
    want = {str(j) for j in job_ids}
    level = [""]
    for col in partition_by:
        nxt = []
        for rel in level:
            here = posixpath.join(base, rel) if rel else base
            try:
                names = [posixpath.basename(p.rstrip("/")) for p in fs.ls(here, detail=False)]
            except FileNotFoundError:
                names = []
            for name in sorted(names):
                key, _, value = name.partition("=")
                if key != col or _hidden(name):
                    continue
                if col == "job_id" and unquote(value) not in want:
                    continue
                sub = posixpath.join(rel, name) if rel else name
                if fs.isdir(posixpath.join(base, sub)):
                    nxt.append(sub)
        level = nxt
    return level


def _stage(df, staging: str, partition_by: list[str]) -> None:
    """Write ``df`` (see :func:`write_partitions`) Hive-partitioned into the new folder ``staging``.

    Arrow rows and staged files get names unique to this write (``<staging folder name>-<name>``), as
    Spark's carry its job id: publishing tells a published partition by its file names.
    """
    if isinstance(df, pa.Table) or callable(df):
        if isinstance(df, pa.Table):
            stage_arrow(df, staging, partition_by)
        else:
            os.makedirs(staging)
            df(staging)
        tag = os.path.basename(staging.rstrip("/"))
        for rel, files in staged_partitions(staging, len(partition_by)).items() if os.path.isdir(staging) else ():
            for name in files:
                os.rename(os.path.join(staging, rel, name), os.path.join(staging, rel, f"{tag}-{name}"))
    else:
        df.write.mode("errorifexists").partitionBy(*partition_by).parquet(staging)


def _write_remote(df, path: str, partition_by: list[str], replace_jobs=None) -> CommitResult:
    """The object-store fallback: each partition written is replaced by one overwrite, not atomically
    (see the module docstring). Spark: dynamic partition overwrite; Arrow and staged files: pyarrow's
    ``delete_matching`` (the partitions written are emptied first, the others kept). The other partitions of
    ``replace_jobs`` are deleted first."""
    stale = stale_partitions(path, partition_by, replace_jobs)
    if stale:
        import fsspec  # heavy-ish: only when jobs are replaced

        fs, base = fsspec.core.url_to_fs(path)
        for rel in stale:
            fs.rm(posixpath.join(base, rel), recursive=True)

    if not isinstance(df, pa.Table) and not callable(df):
        (
            df.write.mode("overwrite")
            .option("partitionOverwriteMode", "dynamic")
            .partitionBy(*partition_by)
            .parquet(path)
        )
        return CommitResult(table=posixpath.basename(path), run_id="", method="spark")
    with tempfile.TemporaryDirectory(prefix="tracelake-stage-") as tmp:
        staging = os.path.join(tmp, "staging")
        _stage(df, staging, partition_by)
        parts = staged_partitions(staging, len(partition_by)) if os.path.isdir(staging) else {}
        if parts:
            staged = ds.dataset(staging, format="parquet", partitioning=_hive(partition_by), ignore_prefixes=[".", "_"])
            stage_arrow(
                staged,
                path,
                partition_by,
                existing="delete_matching",
                basename=f"part-{uuid.uuid4().hex[:12]}-{{i}}.parquet",
            )
    return CommitResult(table=posixpath.basename(path), run_id="", partitions=sorted(parts), method="overwrite")


def _hive(partition_by, types=None):
    types = types or {}
    return ds.partitioning(pa.schema([(p, types.get(p, pa.string())) for p in partition_by]), flavor="hive")


def stage_arrow(table, folder: str, partition_by, existing: str = "error", basename: str = "part-{i}.parquet") -> None:
    """Write an Arrow table as Hive-partitioned Parquet under ``folder`` (the layout Spark writes:
    ``date=…/job_id=…/`` folders, partition columns kept out of the files, snappy).

    Args:
        table: a ``pyarrow.Table`` (no rows writes nothing) or a ``pyarrow.dataset.Dataset`` (streamed)
            holding the ``partition_by`` columns.
        folder: a local folder, or a URI pyarrow's file systems take.
        existing: pyarrow's ``existing_data_behavior`` (``error``: ``folder`` must be empty).
        basename: file name template (``{i}`` numbers the files of a partition).
    """
    if isinstance(table, pa.Table) and table.num_rows == 0:
        return
    fs, base = pafs.FileSystem.from_uri(folder) if "://" in folder else (pafs.LocalFileSystem(), folder)
    part = _hive(partition_by, {p: table.schema.field(p).type for p in partition_by})
    ds.write_dataset(
        table,
        base,
        filesystem=fs,
        format="parquet",
        partitioning=part,
        basename_template=basename,
        existing_data_behavior=existing,
        max_rows_per_group=1 << 17,
        max_rows_per_file=1 << 24,
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
            os.rename(os.path.join(source, rel, name), os.path.join(dest, f"{prefix}-{name}"))
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


def _remove_dead_work(root: str) -> None:
    """Remove the work folders of runs that died (their ``flock`` is free)."""
    import fcntl  # POSIX only (the rest of the module imports on any OS)

    base = os.path.join(root, COMMIT_DIR, "work")
    if not os.path.isdir(base):
        return
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


def recover(warehouse: str) -> list[str]:
    """Roll forward every journaled publish of ``warehouse`` and delete unjournaled staging folders.

    Safe to run at any time (takes the writers' lock) and idempotent. Non-local warehouses: no-op.

    Returns:
        File names of the journals rolled forward.

    Raises:
        CommitError: as :func:`write_partitions`.
    """
    root = local_root(warehouse.rstrip("/") or "/")
    if root is None or not os.path.isdir(os.path.join(root, COMMIT_DIR)):
        return []
    with _locked(root):
        return _recover(root)


def pending_journals(warehouse: str) -> list[str]:
    """Paths of the journals of ``warehouse`` not yet rolled forward (oldest first)."""
    d = os.path.join(warehouse, COMMIT_DIR, "journal")
    try:
        return [os.path.join(d, n) for n in sorted(os.listdir(d)) if n.endswith(".json")]
    except FileNotFoundError:
        return []


def _recover(root: str) -> list[str]:
    done = []
    journaled = set()
    for path in pending_journals(root):
        with open(path) as f:
            journal = json.load(f)
        _publish(root, journal, path)
        journaled.add(journal["staging"])
        done.append(os.path.basename(path))
    staging_root = os.path.join(root, COMMIT_DIR, "staging")
    if os.path.isdir(staging_root):
        for table in os.listdir(staging_root):
            for run in os.listdir(os.path.join(staging_root, table)):
                rel = os.path.join(COMMIT_DIR, "staging", table, run)
                if rel not in journaled:  # crashed before its commit point: roll back
                    shutil.rmtree(os.path.join(root, rel), ignore_errors=True)
            _rmdir_quiet(os.path.join(staging_root, table))
    empty_trash(root)
    _remove_dead_work(root)
    # Spark's own staging of an interrupted dynamic overwrite (writes made before this protocol)
    for table in os.listdir(root):
        tdir = os.path.join(root, table)
        if _hidden(table) or not os.path.isdir(tdir):
            continue
        for name in os.listdir(tdir):
            if name.startswith(".spark-staging-"):
                shutil.rmtree(os.path.join(tdir, name), ignore_errors=True)
    return done


def _publish(root: str, journal: dict, journal_path: str, crash_points: bool = False) -> None:
    table = journal["table"]
    staging = os.path.join(root, journal["staging"])
    for rel in journal.get("drop", []):  # the job's other partitions: moved aside like replaced ones (idempotent)
        final = os.path.join(root, table, rel)
        if os.path.isdir(final):
            dest = os.path.join(staging, ".replaced", rel)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            os.rename(final, dest)
            _rmdir_quiet(os.path.dirname(final))
    for i, (rel, files) in enumerate(sorted(journal["partitions"].items()), start=1):
        final = os.path.join(root, table, rel)
        staged = os.path.join(staging, rel)
        if data_files(final) != sorted(files):  # not yet published
            if not os.path.isdir(staged):
                raise CommitError(
                    f"{journal_path}: partition {table}/{rel} is not published and its staged "
                    f"copy {staged} is missing; the table is left as it is"
                )
            _swap_in(staged, final, os.path.join(staging, ".replaced", rel))
        if crash_points:
            _crash_point(f"{table}:published-{i}")
    if crash_points:
        _crash_point(f"{table}:published")
    _retire(root, staging, journal["run_id"])
    os.remove(journal_path)
    _fsync_dir(os.path.dirname(journal_path))


def _retire(root: str, staging: str, run_id: str) -> None:
    """Move a published run's staging folder (now the replaced partitions) to the trash."""
    if not os.path.isdir(staging):
        return
    if not any(not _hidden(f) for _, _, files in os.walk(staging) for f in files):  # nothing was replaced
        shutil.rmtree(staging, ignore_errors=True)
        _rmdir_quiet(os.path.dirname(staging))
        return
    trash = os.path.join(root, COMMIT_DIR, "trash")
    os.makedirs(trash, exist_ok=True)
    dest = os.path.join(trash, f"{os.path.basename(os.path.dirname(staging))}@{run_id}")
    if os.path.exists(dest):
        shutil.rmtree(dest)
    os.rename(staging, dest)
    os.utime(dest)  # the grace period counts from now
    _rmdir_quiet(os.path.dirname(staging))


def _rmdir_quiet(path: str) -> None:
    """Remove ``path`` if it is an empty folder (a table's staging folder with no other run in it)."""
    try:
        os.rmdir(path)
    except OSError:
        pass


def empty_trash(warehouse: str, older_than_s: float | None = None) -> list[str]:
    """Delete replaced partitions retired more than ``older_than_s`` seconds ago (default
    :data:`TRASH_GRACE_S`); returns the trash entries deleted. Called by every recovery."""
    older_than_s = TRASH_GRACE_S if older_than_s is None else older_than_s
    trash = os.path.join(warehouse, COMMIT_DIR, "trash")
    try:
        names = sorted(os.listdir(trash))
    except FileNotFoundError:
        return []
    now, out = time.time(), []
    for name in names:
        path = os.path.join(trash, name)
        if now - os.stat(path).st_mtime >= older_than_s:
            shutil.rmtree(path, ignore_errors=True)
            out.append(name)
    return out


def _swap_in(staged: str, final: str, replaced: str) -> None:
    """Put the folder ``staged`` at ``final``: atomic exchange when ``final`` exists, else rename."""
    os.makedirs(os.path.dirname(final), exist_ok=True)
    if not os.path.exists(final):
        os.rename(staged, final)
        return
    if _exchange(staged, final):
        return
    if os.path.exists(replaced):
        shutil.rmtree(replaced)
    os.makedirs(os.path.dirname(replaced), exist_ok=True)
    os.rename(final, replaced)
    os.rename(staged, final)


_EXCHANGE_OK: bool | None = None


def _renameat2():
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


def _exchange(a: str, b: str) -> bool:
    """Atomically exchange the paths ``a`` and ``b``; ``False`` when the system cannot."""
    global _EXCHANGE_OK
    if _EXCHANGE_OK is False:
        return False
    fn = _renameat2()
    if fn is None:
        _EXCHANGE_OK = False
        return False
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        _EXCHANGE_OK = True
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        _EXCHANGE_OK = False
        return False
    raise OSError(err, f"renameat2(RENAME_EXCHANGE) {a} <-> {b}: {os.strerror(err)}")


def _method() -> str:
    return "rename" if _EXCHANGE_OK is False or _renameat2() is None else "exchange"


def _write_journal(root: str, journal: dict) -> str:
    d = os.path.join(root, COMMIT_DIR, "journal")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, f"{journal['table']}@{journal['run_id']}.json")
    tmp = os.path.join(d, f".{journal['table']}@{journal['run_id']}.tmp")
    with open(tmp, "w") as f:
        json.dump(journal, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(d)
    return path


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


@contextmanager
def _locked(root: str):
    import fcntl  # POSIX only (the rest of the module imports on any OS)

    d = os.path.join(root, COMMIT_DIR)
    os.makedirs(d, exist_ok=True)
    fd = os.open(os.path.join(d, "lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _hidden(name: str) -> bool:
    return name.startswith((".", "_"))


def _crash_point(point: str) -> None:
    if os.environ.get(CRASH_ENV) != point:
        return
    if os.getpgid(0) == os.getpid():  # a process-group leader (a test's subprocess): take the JVM along
        os.killpg(os.getpid(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def main(argv: list[str] | None = None) -> int:
    """``python -m jobs.commit WAREHOUSE``: roll forward interrupted publishes; prints what it did."""
    p = argparse.ArgumentParser(prog="python -m jobs.commit", description=main.__doc__)
    p.add_argument("warehouse")
    a = p.parse_args(argv)
    done = recover(a.warehouse)
    print(f"rolled forward {len(done)} interrupted publish(es)" + "".join(f"\n  {n}" for n in done))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


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
