"""The warehouse table transaction (jobs/commit.py: staged data files, one Delta commit) without Spark: a stand-in
DataFrame writes its Hive partitions with pyarrow, exactly where Spark would (``<path>/date=…/job_id=…/part-*.parquet``
+ ``_SUCCESS``).

Crashes are simulated by making the crash hook raise (the commit's code after it does not run, as after ``kill -9``);
the real SIGKILL at ten moments of a commit, with real Spark and the local executor, is
tests/integration/test_crash_rerun.py."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import subprocess
import sys
import threading
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs import commit

PARTS = ("date", "job_id")


class FakeDF:
    """What :func:`jobs.commit.write_partitions` uses of a Spark DataFrame: ``df.mapInArrow(fn, schema).collect()``,
    run here in-process, one row-slice per task (``n_files`` tasks: each writes its own file per partition)."""

    def __init__(self, rows: dict, n_files: int = 2):
        self.table = pa.table(rows)
        self.n_files = n_files

    def mapInArrow(self, fn, schema):  # noqa: N802 — Spark's name
        out, n = [], self.table.num_rows
        for k in range(self.n_files):
            part = self.table.slice(k * n // self.n_files, (k + 1) * n // self.n_files - k * n // self.n_files)
            for batch in fn(iter(part.to_batches())):
                out += batch.to_pylist()
        return SimpleNamespace(collect=lambda: out)


def _rows(jobs: dict[str, int], version: int) -> dict:
    """Rows for ``{job_id: n_rows}``, each row's ``v`` = version (all on date 2024-01-01)."""
    job_ids = [j for j, n in jobs.items() for _ in range(n)]
    return {
        "date": ["2024-01-01"] * len(job_ids),
        "job_id": job_ids,
        "i": list(range(len(job_ids))),
        "v": [version] * len(job_ids),
    }


def _read(wh, table="t", version=None) -> dict[str, set]:
    """What a reader of the table's current (or given) version sees: ``{job_id: {(i, v), …}}``."""
    dt = commit.open_table(os.path.join(wh, table), version)
    if dt is None:
        return {}
    t = dt.to_pyarrow_table()
    out: dict[str, set] = {}
    for j, i, v in zip(t["job_id"].to_pylist(), t["i"].to_pylist(), t["v"].to_pylist()):
        out.setdefault(str(j), set()).add((i, v))
    return out


def _expected(jobs: dict[str, int], version: int) -> dict[str, set]:
    r = _rows(jobs, version)
    out: dict[str, set] = {}
    for j, i, v in zip(r["job_id"], r["i"], r["v"]):
        out.setdefault(j, set()).add((i, v))
    return out


class Crash(BaseException):
    """Stands for SIGKILL: not an Exception, so nothing in the code under test catches it."""


@pytest.fixture
def crash_at(monkeypatch):
    def arm(point):
        def hook(p):
            if p == point:
                raise Crash(p)

        monkeypatch.setattr(commit, "_crash_point", hook)

    return arm


def _worker_files(wh, rows: dict, n_workers: int = 2):
    """A staging callable as the local executor hands it: ``n_workers`` workers' files (a slice of ``rows`` each)."""
    t = pa.table(rows)

    def stage(staging):
        with commit.work_dir(wh) as work:
            for k in range(n_workers):
                part = t.slice(
                    k * t.num_rows // n_workers, (k + 1) * t.num_rows // n_workers - k * t.num_rows // n_workers
                )
                folder = os.path.join(work, f"w{k}")
                commit.stage_arrow(part, folder, PARTS)
                commit.move_staged(folder, staging, f"w{k}", len(PARTS))

    return stage


def _work_left(wh) -> list[str]:
    base = os.path.join(wh, commit.COMMIT_DIR, "work")
    return sorted(os.listdir(base)) if os.path.isdir(base) else []


def test_first_write_commits_every_partition_in_one_version(tmp_path):
    wh = str(tmp_path)
    res = commit.write_partitions(FakeDF(_rows({"a": 3, "b": 2}, 1)), wh, "t", PARTS)
    assert res.partitions == ["date=2024-01-01/job_id=a", "date=2024-01-01/job_id=b"]
    assert res.version == 1 and res.files_added == 3 and res.files_removed == 0 and res.attempts == 1  # 0: create
    assert _read(wh) == _expected({"a": 3, "b": 2}, 1)
    assert _work_left(wh) == []  # Spark's staging folder (and its _SUCCESS, .crc) is gone
    names = commit.open_table(os.path.join(wh, "t")).file_uris()
    assert all(os.path.basename(n).startswith(res.write_id + "-") for n in names)  # <write id>-<task>-<n>


def test_one_write_of_more_partitions_than_pyarrows_default_limit(tmp_path):
    """pyarrow writes at most 1,024 partitions per call by default: a first fleet run over a big warehouse stores
    more jobs than that in one write."""
    wh = str(tmp_path)
    jobs = {f"j{i:04d}": 1 for i in range(1100)}
    res = commit.write_partitions(pa.table(_rows(jobs, 1)), wh, "t", PARTS)
    assert len(res.partitions) == 1100 and _read(wh) == _expected(jobs, 1)


def test_rewrite_replaces_only_the_partitions_it_has_rows_for_and_keeps_history(tmp_path):
    wh = str(tmp_path)
    commit.write_partitions(FakeDF(_rows({"a": 3, "b": 2}, 1)), wh, "t", PARTS)
    res = commit.write_partitions(pa.table(_rows({"b": 4}, 2)), wh, "t", PARTS)
    assert res.files_removed == 1 and res.version == 2  # the first write's task 2 held all of b
    assert _read(wh) == {**_expected({"a": 3}, 1), **_expected({"b": 4}, 2)}
    assert _read(wh, version=1) == _expected({"a": 3, "b": 2}, 1)  # the old version stays readable
    hist = commit.open_table(os.path.join(wh, "t")).history()
    assert [h["version"] for h in hist] == [2, 1, 0] and hist[0]["tracelake.write_id"] == res.write_id


def test_replace_jobs_drops_the_jobs_other_partitions_in_the_same_commit(tmp_path):
    wh = str(tmp_path)
    rows = _rows({"a": 2}, 1)
    commit.write_partitions(pa.table({**rows, "date": ["2024-01-02", "2024-01-01"]}), wh, "t", PARTS)
    res = commit.write_partitions(pa.table(_rows({"a": 1}, 2)), wh, "t", PARTS, replace_jobs=["a"])
    assert res.dropped == ["date=2024-01-02/job_id=a"] and _read(wh) == _expected({"a": 1}, 2)
    res = commit.write_partitions(pa.table(_rows({}, 3)), wh, "t", PARTS, replace_jobs=["a"])  # a rebuilt, no rows
    assert res.files_removed == 1 and _read(wh) == {}


def test_replace_where_drops_the_named_partitions_rows_or_not_in_the_same_commit(tmp_path):
    """``replace_where={"date": …}`` (the fleet stage's ``regressions`` of the dates it compared again): those dates'
    partitions go, the rows written take their place, a named date without rows leaves none, other dates stay."""
    wh = str(tmp_path)
    days = ("2024-01-01", "2024-01-02", "2024-01-03")
    rows = pa.table({"date": list(days), "run": ["a", "b", "c"]})
    commit.write_partitions(rows, wh, "r", ("date",))
    res = commit.write_partitions(
        pa.table({"date": [days[0]], "run": ["a2"]}), wh, "r", ("date",), replace_where={"date": days[:2]}
    )
    got = commit.open_table(os.path.join(wh, "r")).to_pyarrow_table()
    assert sorted(zip(got["date"].to_pylist(), got["run"].to_pylist())) == [(days[0], "a2"), (days[2], "c")]
    assert res.files_removed == 2 and res.dropped == [f"date={days[1]}"]


def test_empty_rows_commit_nothing(tmp_path):
    wh = str(tmp_path)
    res = commit.write_partitions(pa.table(_rows({}, 1)), wh, "t", PARTS, schema=pa.table(_rows({"x": 1}, 1)).schema)
    assert res.version == -1 and commit.open_table(os.path.join(wh, "t")).version() == 0  # created, empty
    res = commit.write_partitions(pa.table(_rows({}, 1)), wh, "u", PARTS, replace_jobs=["a"])
    assert res.version == -1 and commit.open_table(os.path.join(wh, "u")) is None  # a batch without rows
    assert _work_left(wh) == []


@pytest.mark.parametrize("point", ["t:staged-1", "t:staged-2", "t:staged", "t:committing", "t:committed"])
def test_a_crash_at_any_point_leaves_the_old_or_the_new_version_and_the_rerun_is_clean(tmp_path, crash_at, point):
    wh = str(tmp_path)
    commit.write_partitions(FakeDF(_rows({"a": 4, "b": 4}, 1)), wh, "t", PARTS)
    crash_at(point)
    with pytest.raises(Crash):  # staged-<n>: the local executor's workers' files moved in one by one
        commit.write_partitions(_worker_files(wh, _rows({"a": 2, "b": 2}, 2)), wh, "t", PARTS)
    want = _expected({"a": 2, "b": 2}, 2) if point == "t:committed" else _expected({"a": 4, "b": 4}, 1)
    assert _read(wh) == want
    crash_at("none")
    commit.recover(wh)
    commit.write_partitions(FakeDF(_rows({"a": 2, "b": 2}, 2)), wh, "t", PARTS)
    assert _read(wh) == _expected({"a": 2, "b": 2}, 2) and _work_left(wh) == []


def test_a_conflicting_commit_is_retried_with_fresh_removes(tmp_path, monkeypatch):
    wh, uri = str(tmp_path), os.path.join(str(tmp_path), "t")
    commit.write_partitions(pa.table(_rows({"a": 2}, 1)), wh, "t", PARTS)
    stale = commit.open_table(uri)  # what a writer that read version 1 holds
    commit.write_partitions(pa.table(_rows({"a": 3}, 2)), wh, "t", PARTS)  # another writer commits version 2
    real, calls = commit.open_table, []

    def first_stale(u, version=None):
        calls.append(u)
        return stale if len(calls) == 1 else real(u, version)

    monkeypatch.setattr(commit, "open_table", first_stale)
    res = commit._commit(
        uri,
        "t",
        commit._stage_arrow_in(pa.table(_rows({"a": 1}, 3)), *commit._fs(uri), list(PARTS), "w3"),
        list(PARTS),
        None,
        "w3",
        None,
    )
    assert res.attempts == 2 and res.files_removed == 1  # the retry removed version 2's file, not version 1's
    monkeypatch.setattr(commit, "open_table", real)
    assert _read(wh) == _expected({"a": 1}, 3)


def test_a_writer_holding_an_older_snapshot_commits_on_top_of_the_newer_one(tmp_path):
    """``write_partitions(snapshot=…)``: the caller's snapshot of version 1, while another writer committed version
    2, is brought up to date from the log before the commit: version 2's file of the job is removed, none lost."""
    wh, uri = str(tmp_path), os.path.join(str(tmp_path), "t")
    commit.write_partitions(pa.table(_rows({"a": 2, "b": 1}, 1)), wh, "t", PARTS)
    held = commit.open_table(uri)
    commit.write_partitions(pa.table(_rows({"a": 3}, 2)), wh, "t", PARTS)
    res = commit.write_partitions(pa.table(_rows({"a": 1}, 3)), wh, "t", PARTS, snapshot=held)
    assert res.version == 3 and res.files_removed == 1 and res.attempts == 1
    assert _read(wh) == {"a": {(0, 3)}, "b": {(2, 1)}}


def test_in_a_versions_cached_context_each_table_log_is_replayed_once(tmp_path, monkeypatch):
    """``jobs.warehouse.versions_cached``: the latest version opened once, then read as of its number without a
    second open; a read of the latest after this context's own write, and after another writer's, sees them
    (the snapshot brought up to date from the log) without opening the table again."""
    from jobs import warehouse

    wh = str(tmp_path)
    commit.write_partitions(pa.table(_rows({"a": 2}, 1)), wh, "t", PARTS)
    opened = []
    real = warehouse.open_table
    monkeypatch.setattr(warehouse, "open_table", lambda uri, version=None: opened.append(version) or real(uri, version))
    rows = lambda t: sorted(t.column("v").to_pylist())  # noqa: E731
    with warehouse.versions_cached():
        v = warehouse.table_version(wh, "t")
        assert rows(warehouse.read_arrow(wh, "t", columns=["v"], as_of=v)) == [1, 1]
        warehouse.write_table(pa.table(_rows({"b": 1}, 2)), wh, "t", partition_by=PARTS, schema=None)
        assert rows(warehouse.read_arrow(wh, "t", columns=["v"])) == [1, 1, 2]
        commit.write_partitions(pa.table(_rows({"a": 1}, 3)), wh, "t", PARTS)  # another writer
        assert rows(warehouse.read_arrow(wh, "t", columns=["v"])) == [2, 3]
        assert opened == [None]
        assert rows(warehouse.read_arrow(wh, "t", columns=["v"], as_of=v)) == [1, 1]  # version v as it was:
    assert opened == [None, v]  # opened at it again (the latest snapshot moved past it)


def _writer(args) -> list[int]:
    """A concurrent writer (its own process): ``n`` rebuilds of jobs among ``jobs``; returns its commit attempts."""
    wh, who, n, jobs = args
    attempts = []
    for k in range(n):
        job = jobs[(k + who) % len(jobs)]
        tag = who * 1000 + k
        rows = pa.table({"date": ["2024-01-01"] * 5, "job_id": [job] * 5, "i": list(range(5)), "v": [tag] * 5})
        attempts.append(commit.write_partitions(rows, wh, "t", PARTS, replace_jobs=[job]).attempts)
    return attempts


def test_concurrent_writers_lose_and_duplicate_nothing(tmp_path):
    """Three processes rebuild (and first create) jobs of one table at once: every job ends with the rows of exactly
    one rebuild (5 rows, one tag) — none lost, none doubled; the conflicts were retried."""
    wh = str(tmp_path)
    jobs = ["a", "b", "new"]
    with mp.get_context("spawn").Pool(3) as pool:
        attempts = pool.map(_writer, [(wh, w, 8, jobs) for w in range(3)])
    t = commit.open_table(os.path.join(wh, "t")).to_pyarrow_table().to_pylist()
    for job in jobs:
        rows = [r for r in t if r["job_id"] == job]
        assert len(rows) == 5 and len({r["v"] for r in rows}) == 1 and sorted(r["i"] for r in rows) == list(range(5))
    assert sum(map(len, attempts)) == 24
    assert commit.open_table(os.path.join(wh, "t")).version() >= 24


def test_readers_see_whole_versions_while_writes_commit(tmp_path):
    """A reader reads the table while it is rewritten 30 times: each read is one whole version (60 rows, one v)."""
    wh, uri = str(tmp_path), os.path.join(str(tmp_path), "t")
    commit.write_partitions(FakeDF(_rows({"a": 60}, 0), n_files=10), wh, "t", PARTS)
    stop, bad, n_seen = threading.Event(), [], [0]

    def reader():
        while not stop.is_set():
            t = commit.open_table(uri).to_pyarrow_table()
            n_seen[0] += 1
            if t.num_rows != 60 or len(set(t["v"].to_pylist())) != 1:
                bad.append((t.num_rows, sorted(set(t["v"].to_pylist()))))

    th = threading.Thread(target=reader)
    th.start()
    try:
        for v in range(1, 31):
            commit.write_partitions(FakeDF(_rows({"a": 60}, v), n_files=10), wh, "t", PARTS)
    finally:
        stop.set()
        th.join()
    assert n_seen[0] > 0 and bad == []
    assert _read(wh) == _expected({"a": 60}, 30)


def test_a_new_declared_column_keeps_old_versions_readable(tmp_path):
    wh, uri = str(tmp_path), os.path.join(str(tmp_path), "t")
    old = pa.table(_rows({"a": 2}, 1))
    commit.write_partitions(old, wh, "t", PARTS, schema=old.schema)
    wider = old.append_column("note", pa.array(["x", "y"], pa.string()))
    commit.write_partitions(
        pa.table(_rows({"b": 1}, 2)).append_column("note", pa.array(["z"])), wh, "t", PARTS, schema=wider.schema
    )
    t = commit.open_table(uri).to_pyarrow_table()
    assert "note" in t.schema.names and sorted(zip(t["job_id"].to_pylist(), t["note"].to_pylist())) == [
        ("a", None),
        ("a", None),
        ("b", "z"),
    ]
    assert "note" not in commit.open_table(uri, 1).to_pyarrow_table().schema.names  # version 1 as it was


def test_the_log_is_checkpointed_every_ten_commits_and_maintain_sets_it_on_older_tables(tmp_path):
    """A table made here checkpoints its log every 10 commits (``delta.checkpointInterval``), so an open replays at
    most 9 JSON commits; a table created without the property gets it from ``maintain``."""
    from deltalake import DeltaTable

    wh = str(tmp_path)
    for v in range(21):
        commit.write_partitions(pa.table(_rows({f"j{v}": 1}, v)), wh, "t", PARTS)
    log = os.listdir(os.path.join(wh, "t", "_delta_log"))
    assert sorted(f for f in log if f.endswith(".checkpoint.parquet")) == [
        f"{v:020d}.checkpoint.parquet" for v in (9, 19)
    ]
    old = os.path.join(wh, "old")
    DeltaTable.create(old, pa.schema([("date", pa.string()), ("x", pa.int64())]), partition_by=["date"])
    assert "delta.checkpointInterval" not in commit.open_table(old).metadata().configuration
    commit.maintain(old)
    assert commit.open_table(old).metadata().configuration == commit.TABLE_PROPERTIES


def test_maintain_compacts_and_vacuums_without_changing_what_readers_see(tmp_path):
    wh, uri = str(tmp_path), os.path.join(str(tmp_path), "t")
    for v in range(6):  # 6 versions, the job's files replaced each time: 5 × 4 removed files on disk
        commit.write_partitions(FakeDF(_rows({"a": 8}, v), n_files=4), wh, "t", PARTS)
    before = _read(wh)
    on_disk = lambda: sum(len(f) for _, _, f in os.walk(os.path.join(uri, "date=2024-01-01")))  # noqa: E731
    assert on_disk() == 24
    out = commit.maintain(uri, retention_hours=0)
    assert out["files_compacted"] == 4 and out["files_added"] == 1 and out["files_vacuumed"] == 24
    assert on_disk() == 1 and _read(wh) == before


def _fragmenting_writer(args) -> int:
    """A concurrent writer (its own process): ``n`` rebuilds of jobs among ``jobs``, each as 5 one-row files (many
    small files for a compaction to merge); returns its commit attempts."""
    wh, who, n, jobs = args
    attempts = 0
    for k in range(n):
        job = jobs[(k + who) % len(jobs)]
        rows = {"date": ["2024-01-01"] * 5, "job_id": [job] * 5, "i": list(range(5)), "v": [who * 1000 + k] * 5}
        attempts += commit.write_partitions(FakeDF(rows, n_files=5), wh, "t", PARTS, replace_jobs=[job]).attempts
    return attempts


def test_maintain_while_writers_and_readers_run_loses_and_resurrects_nothing(tmp_path):
    """``maintain`` runs again and again while two processes rebuild jobs and a thread reads: every read is whole
    versions (each job exactly one rebuild's 5 rows — a compaction that raced a rebuild would bring the replaced rows
    back beside the new ones), at least one compaction landed, and the end state holds every job once."""
    wh, uri = str(tmp_path), os.path.join(str(tmp_path), "t")
    jobs = ["a", "b", "c"]
    for job in jobs:
        rows = {"date": ["2024-01-01"] * 5, "job_id": [job] * 5, "i": list(range(5)), "v": [-1] * 5}
        commit.write_partitions(FakeDF(rows, n_files=5), wh, "t", PARTS, replace_jobs=[job])
    stop, bad, n_seen = threading.Event(), [], [0]

    def whole(t) -> list:
        wrong = []
        for job in jobs:
            rows = [(r["i"], r["v"]) for r in t if r["job_id"] == job]
            if sorted(i for i, _ in rows) != list(range(5)) or len({v for _, v in rows}) != 1:
                wrong.append((job, sorted(rows)))
        return wrong

    def reader():
        while not stop.is_set():
            bad.extend(whole(commit.open_table(uri).to_pyarrow_table().to_pylist()))
            n_seen[0] += 1

    th = threading.Thread(target=reader)
    th.start()
    outs = []
    try:
        with mp.get_context("spawn").Pool(2) as pool:
            writing = pool.map_async(_fragmenting_writer, [(wh, w, 10, jobs) for w in range(2)])
            while not writing.ready():
                outs.append(commit.maintain(uri))
            attempts = writing.get()
        outs.append(commit.maintain(uri))
    finally:
        stop.set()
        th.join()
    assert n_seen[0] > 0 and bad == [], bad[:3]
    assert sum(o["files_compacted"] for o in outs) > 0, outs
    assert whole(commit.open_table(uri).to_pyarrow_table().to_pylist()) == []
    assert sum(attempts) >= 20


def test_a_table_of_the_old_layout_is_named_and_migrate_converts_it(tmp_path):
    from schemas import Table

    wh = str(tmp_path)
    folder = tmp_path / "t" / "date=2024-01-01" / "job_id=bare-x%2F1"
    folder.mkdir(parents=True)
    pq.write_table(pa.table({"i": [0, 1], "v": [7, 7]}), folder / "part-0.parquet")
    with pytest.raises(commit.CommitError, match="pre-Delta warehouse layout.*tracelake migrate"):
        commit.open_table(str(tmp_path / "t"))
    # a first write's files staged before its table exists (a concurrent reader's view) are not the old layout
    (tmp_path / "n" / "date=2024-01-01").mkdir(parents=True)
    pq.write_table(pa.table({"i": [0]}), tmp_path / "n" / "date=2024-01-01" / "x.parquet")
    (tmp_path / "n" / commit.NEW_TABLE_MARK).write_text("")
    assert commit.open_table(str(tmp_path / "n")) is None
    decl = Table(name="t", doc="", columns=(), partition_by=PARTS)
    assert commit.migrate(wh, {"t": decl, "u": decl}) == {"t": "converted", "u": "not written"}
    assert _read(wh) == {"bare-x/1": {(0, 7), (1, 7)}}  # the quoted job id read back as it was written
    assert commit.migrate(wh, {"t": decl}) == {"t": "already delta"}
    (tmp_path / commit.COMMIT_DIR / "journal").mkdir(parents=True)
    (tmp_path / commit.COMMIT_DIR / "journal" / "t@1.json").write_text("{}")
    with pytest.raises(commit.CommitError, match="interrupted publish"):
        commit.migrate(wh, {"t": decl})


def test_a_failed_spark_write_commits_nothing_and_leaves_no_staging(tmp_path):
    wh = str(tmp_path)
    commit.write_partitions(pa.table(_rows({"a": 1}, 1)), wh, "t", PARTS)

    class Failing(FakeDF):
        def mapInArrow(self, fn, schema):  # noqa: N802 — Spark's name
            raise RuntimeError("executor lost")

    with pytest.raises(RuntimeError, match="executor lost"):
        commit.write_partitions(Failing(_rows({"a": 5}, 2)), wh, "t", PARTS)
    assert _read(wh) == _expected({"a": 1}, 1) and _work_left(wh) == []
    assert commit.local_root("file:///x/wh") == "/x/wh" and commit.local_root("/x/wh") == "/x/wh"
    assert commit.local_root("s3://b/wh") is None
    assert commit.storage_options("/x") is None and isinstance(commit.storage_options("s3://b/wh"), dict)


def test_crash_hook_kills_with_sigkill(tmp_path):
    env = dict(os.environ, **{commit.CRASH_ENV: "t:staged"})
    code = (
        "from jobs import commit; commit._crash_point('t:committing'); print('alive', flush=True); "
        "commit._crash_point('t:staged'); print('not reached')"
    )
    p = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        start_new_session=True,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    )
    assert p.returncode == -9 and p.stdout.strip() == "alive"


def test_write_text_atomic_replaces_whole_file(tmp_path):
    from jobs.commit import write_text_atomic

    target = tmp_path / "a" / "findings.json"
    write_text_atomic(str(target), "old")
    write_text_atomic(str(target), "new content")
    assert target.read_text() == "new content"
    assert [p.name for p in target.parent.iterdir()] == ["findings.json"]  # no temporary left behind


def test_other_engines_read_the_same_table_and_history_names_the_writes(tmp_path, monkeypatch):
    """Polars (its own Delta reader over delta-rs) reads what the seam wrote; the seam's history and ``as_of`` reads
    name and reproduce each version."""
    import polars as pl

    from jobs.warehouse import history, read_arrow, table_versions, write_table
    from schemas import CAPTURES

    wh = str(tmp_path)
    monkeypatch.setenv("TRACELAKE_RUN_LABEL", "test-run-1")
    schema = pa.schema([f.with_nullable(True) for f in CAPTURES.arrow_schema()])  # the columns not given are null
    one = [{"date": "2024-01-01", "job_id": j, "capture_id": f"c{j}", "rank": 0} for j in ("a", "b")]
    write_table(pa.Table.from_pylist(one, schema=schema), wh, "captures", ["a", "b"])
    monkeypatch.setenv("TRACELAKE_RUN_LABEL", "test-run-2")
    write_table(pa.Table.from_pylist(one[:1], schema=schema), wh, "captures", ["a", "b"])
    assert table_versions(wh, ["captures", "steps"]) == {"captures": 2, "steps": None}
    h = history(wh, "captures")
    assert [(x["version"], x["run"], x["files_added"], x["files_removed"]) for x in h] == [
        (2, "test-run-2", 1, 2),
        (1, "test-run-1", 2, 0),
        (0, None, None, None),
    ]
    assert sorted(pl.read_delta(os.path.join(wh, "captures"))["job_id"].to_list()) == ["a"]
    assert sorted(read_arrow(wh, "captures", as_of=1)["job_id"].to_pylist()) == ["a", "b"]
    # a log file written a while after its commit time (a loaded machine, an object store's clock) still dates the
    # version by its commit time, the one history printed
    log = os.path.join(wh, "captures", "_delta_log", f"{1:020d}.json")
    os.utime(log, (os.stat(log).st_atime + 5, os.stat(log).st_mtime + 5))
    assert sorted(read_arrow(wh, "captures", as_of=h[1]["time"])["job_id"].to_pylist()) == ["a", "b"]
    with pytest.raises(commit.CommitError, match="no version at"):
        read_arrow(wh, "captures", as_of="2001-01-01T00:00:00")


def test_a_derivation_from_older_inputs_never_lands_on_a_newer_one(tmp_path):
    """Two runs derive a table (the fleet tables) at once: the one computed from older input versions, committing
    last, is skipped; ``replace_all`` replaces the whole table (a date with no rows left keeps none)."""
    wh = str(tmp_path)
    new = pa.table(_rows({"a": 2}, 2))
    res = commit.write_partitions(new, wh, "t", PARTS, replace_all=True, inputs={"steps": 5, "kernels": 3})
    assert not res.skipped
    stale = pa.table({**_rows({"b": 1}, 1), "date": ["2024-01-02"]})
    res = commit.write_partitions(stale, wh, "t", PARTS, replace_all=True, inputs={"steps": 4, "kernels": 3})
    assert res.skipped and res.version == -1 and _read(wh) == _expected({"a": 2}, 2)
    newer = pa.table({**_rows({"b": 1}, 3), "date": ["2024-01-02"]})
    res = commit.write_partitions(newer, wh, "t", PARTS, replace_all=True, inputs={"steps": 6, "kernels": 3})
    assert not res.skipped and _read(wh) == _expected({"b": 1}, 3)  # the 2024-01-01 rows went with replace_all


def test_storage_options_give_an_s3_warehouse_its_credentials(monkeypatch):
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_REGION"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    opts = {"key": "k", "secret": "s", "endpoint_url": "http://127.0.0.1:9", "client_kwargs": {"region_name": "r"}}
    assert commit.use_storage_options("/local/wh", opts) == []  # a local warehouse needs none
    assert os.environ["AWS_DEFAULT_REGION"] == "eu-west-1" and "AWS_ACCESS_KEY_ID" not in os.environ
    assert commit.use_storage_options("s3://b/wh", opts) == [
        "AWS_ACCESS_KEY_ID", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_REGION", "AWS_SECRET_ACCESS_KEY",
    ]  # fmt: skip
    assert os.environ["AWS_ENDPOINT_URL"] == "http://127.0.0.1:9" and os.environ["AWS_DEFAULT_REGION"] == "r"
    assert commit.storage_options("s3://b/wh/t") == {"AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_ALLOW_HTTP": "true"}
    assert commit.use_storage_options("s3://b/wh", {}) == []


def _keyed(day: str, runs: list[str], n: int) -> pa.Table:
    """Rows of a fleet-like table keyed by (dimension, value, date): ``runs``' rows of ``day`` and their ``all``
    rows, each ``n``."""
    rows = [(d, r, date, n) for d in ("job", "fleet") for r in runs for date in (day, "all")]
    return pa.table(
        {k: [r[i] for r in rows] for i, k in enumerate(("dimension", "value", "date", "n"))},
        schema=pa.schema(
            [("dimension", pa.string()), ("value", pa.string()), ("date", pa.string()), ("n", pa.int64())]
        ),
    )


def test_added_files_carry_min_max_statistics_where_asked(tmp_path):
    """``stats=True`` (the tables updated by key) writes Delta statistics (min / max / null count of the string and
    numeric columns) into the add actions: what prunes files by value. Other writes carry the row count only (delta-rs
    makes a pyarrow expression of every file's statistics when it opens a dataset: costly over thousands of files)."""
    wh = str(tmp_path)
    commit.write_partitions(pa.table(_rows({"a": 3, "b": 1}, 1)), wh, "keyed", PARTS, stats=True)
    commit.write_partitions(pa.table(_rows({"a": 3}, 2)), wh, "plain", PARTS)
    acts = pa.table(commit.open_table(os.path.join(wh, "keyed")).get_add_actions(flatten=True)).to_pylist()
    assert len(acts) == 2 and all(a["min.v"] == a["max.v"] == 1 and a["null_count.v"] == 0 for a in acts)
    assert {a["partition.job_id"]: (a["min.i"], a["max.i"], a["num_records"]) for a in acts} == {
        "a": (0, 2, 3),
        "b": (3, 3, 1),
    }
    (plain,) = pa.table(commit.open_table(os.path.join(wh, "plain")).get_add_actions(flatten=True)).to_pylist()
    assert plain.get("min.v") is None and plain["num_records"] == 3
    nan = pa.table({"x": pa.array([1.0, float("nan")]), "s": ["a", None]})
    buf = pa.BufferOutputStream()
    pq.write_table(nan, buf)
    stats = commit.parquet_stats(pq.read_metadata(pa.BufferReader(buf.getvalue())))
    assert stats["nullCount"]["s"] == 1 and stats["minValues"]["s"] == "a"
    json.dumps(stats, allow_nan=False)  # no NaN or infinite bound: the log entry stays valid JSON


def test_replace_rows_rewrites_only_the_files_holding_a_matching_row(tmp_path):
    """A keyed write (``replace_rows``): the rows matching the predicate go, the new rows come, in one commit; the
    files whose statistics rule the predicate out are not touched, and a file holding a match is written again
    without it (its other rows kept)."""
    wh, uri = str(tmp_path), os.path.join(str(tmp_path), "k")
    for day, runs in (("2025-01-01", ["r1", "r2"]), ("2025-01-02", ["r3"])):
        again = [[("date", "in", [day])], [("date", "=", "all"), ("value", "in", runs)]]
        commit.write_partitions(
            _keyed(day, runs, 1), wh, "k", ["dimension"], replace_rows=again, files_apart=("date", "all")
        )
    before = set(commit.open_table(uri).file_uris())
    assert len(before) == 8  # 2 days x 2 dimensions x (dated, all)
    # day 3 is new: nothing on record can hold its keys, nothing is read or removed
    day3 = [[("date", "in", ["2025-01-03"])], [("date", "=", "all"), ("value", "in", ["r4"])]]
    res = commit.write_partitions(
        _keyed("2025-01-03", ["r4"], 1), wh, "k", ["dimension"], replace_rows=day3, files_apart=("date", "all")
    )
    assert res.files_removed == 0 and res.files_added == 4 and before <= set(commit.open_table(uri).file_uris())
    # r1 made again on day 1: the day-1 files go (their rows of r2 written again), the others stay
    redo = [[("date", "in", ["2025-01-01"])], [("date", "=", "all"), ("value", "in", ["r1"])]]
    res = commit.write_partitions(
        _keyed("2025-01-01", ["r1"], 7), wh, "k", ["dimension"], replace_rows=redo, files_apart=("date", "all")
    )
    assert res.files_removed == 4 and res.attempts == 1
    got = commit.open_table(uri).to_pyarrow_table().to_pylist()
    n = {(r["dimension"], r["value"], r["date"]): r["n"] for r in got}
    assert len(got) == len(n) == 14  # r1 and r2 lost their day-1 rows, r1 has new ones; nothing doubled
    assert n[("job", "r1", "2025-01-01")] == n[("fleet", "r1", "all")] == 7 and n[("job", "r2", "all")] == 1
    assert ("job", "r2", "2025-01-01") not in n and n[("job", "r3", "2025-01-02")] == 1
    # an empty IN matches no row: an append
    res = commit.write_partitions(
        _keyed("2025-01-04", ["r5"], 1), wh, "k", ["dimension"], replace_rows=[[("value", "in", [])]]
    )
    assert res.files_removed == 0 and len(commit.open_table(uri).to_pyarrow_table()) == 18


def test_replace_rows_retries_a_conflict_and_keeps_the_winners_rows(tmp_path, monkeypatch):
    """Another writer commits between this write's scan and its log entry: the commit conflicts, the files are found
    again on the new version, and neither write's rows are lost or doubled."""
    wh, uri = str(tmp_path), os.path.join(str(tmp_path), "k")
    commit.write_partitions(_keyed("2025-01-01", ["r1"], 1), wh, "k", ["dimension"], replace_rows=[])
    fired = []

    def other_writer(point):
        if point == "k:committing" and not fired:
            fired.append(point)
            commit.write_partitions(_keyed("2025-01-02", ["r2"], 2), wh, "k", ["dimension"], replace_rows=[])

    monkeypatch.setattr(commit, "_crash_point", other_writer)
    res = commit.write_partitions(
        _keyed("2025-01-01", ["r1"], 5), wh, "k", ["dimension"], replace_rows=[[("value", "=", "r1")]]
    )
    assert res.attempts == 2 and fired
    got = commit.open_table(uri).to_pyarrow_table().to_pylist()
    assert sorted((r["value"], r["n"]) for r in got) == [("r1", 5)] * 4 + [("r2", 2)] * 4


def test_replace_rows_names_the_table_when_given_rows_it_cannot_key(tmp_path):
    """A keyed write takes a pyarrow.Table and no other replace_* argument; anything else is refused before a file
    is staged, naming the table."""
    wh = str(tmp_path)
    with pytest.raises(ValueError, match="k: replace_rows takes a pyarrow.Table"):
        commit.write_partitions(FakeDF(_rows({"a": 1}, 1)), wh, "k", PARTS, replace_rows=[])
    with pytest.raises(ValueError, match="k: replace_rows takes a pyarrow.Table"):
        commit.write_partitions(pa.table(_rows({"a": 1}, 1)), wh, "k", PARTS, replace_rows=[], replace_all=True)
    assert not os.path.exists(os.path.join(wh, "k"))
