"""The warehouse commit protocol (jobs/commit.py) without Spark: a stand-in DataFrame writes its Hive
partitions with pyarrow, exactly where Spark would (``<path>/date=…/job_id=…/part-*.parquet`` + ``_SUCCESS``).

Crashes are simulated by making the crash hook raise (no clean-up code runs after it, as after
``kill -9``); the real SIGKILL and real Spark are in tests/integration/test_crash_rerun.py."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import uuid

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from jobs import commit

PARTS = ("date", "job_id")


class _Writer:
    def __init__(self, table: pa.Table, n_files: int, calls: list):
        self.table, self.n_files, self.calls = table, n_files, calls
        self._mode, self._cols, self._opts = "errorifexists", [], {}

    def mode(self, m):
        self._mode = m
        return self

    def option(self, k, v):
        self._opts[k] = v
        return self

    def partitionBy(self, *cols):
        self._cols = list(cols)
        return self

    def parquet(self, path):
        self.calls.append((self._mode, dict(self._opts), tuple(self._cols), path))
        if "://" in path:
            return
        if self._mode == "errorifexists" and os.path.exists(path):
            raise FileExistsError(path)
        job = uuid.uuid4().hex
        for key in sorted(set(zip(*[self.table.column(c).to_pylist() for c in self._cols]))):
            mask = None
            for c, v in zip(self._cols, key):
                m = pa.compute.equal(self.table.column(c), v)
                mask = m if mask is None else pa.compute.and_(mask, m)
            rows = self.table.filter(mask).drop_columns(self._cols)
            folder = os.path.join(path, *[f"{c}={v}" for c, v in zip(self._cols, key)])
            os.makedirs(folder)
            for i in range(self.n_files):  # one row-slice per file, like one file per Spark task
                pq.write_table(
                    rows.slice(
                        i * rows.num_rows // self.n_files,
                        (i + 1) * rows.num_rows // self.n_files - i * rows.num_rows // self.n_files,
                    ),
                    os.path.join(folder, f"part-{i:05d}-{job}.c000.parquet"),
                )
                open(os.path.join(folder, f".part-{i:05d}-{job}.c000.parquet.crc"), "wb").close()
        os.makedirs(path, exist_ok=True)
        open(os.path.join(path, "_SUCCESS"), "w").close()


class FakeDF:
    """What :func:`jobs.commit.write_partitions` uses of a Spark DataFrame: ``df.write…parquet(path)``."""

    def __init__(self, rows: dict, n_files: int = 2):
        self.table = pa.table(rows)
        self.n_files = n_files
        self.calls: list = []

    @property
    def write(self):
        return _Writer(self.table, self.n_files, self.calls)


def _rows(jobs: dict[str, int], version: int) -> dict:
    """Rows for ``{job_id: n_rows}``, each row's ``v`` = version (all on date 2024-01-01)."""
    job_ids = [j for j, n in jobs.items() for _ in range(n)]
    return {
        "date": ["2024-01-01"] * len(job_ids),
        "job_id": job_ids,
        "i": list(range(len(job_ids))),
        "v": [version] * len(job_ids),
    }


def _read(wh, table="t") -> dict[str, set]:
    """What a pyarrow reader sees: ``{job_id: {(i, v), …}}``."""
    path = os.path.join(wh, table)
    if not os.path.isdir(path):
        return {}
    d = ds.dataset(path, format="parquet", partitioning="hive")
    if not d.files:
        return {}
    t = d.to_table()
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


def _leftovers(wh) -> list[str]:
    out = []
    for sub in ("staging", "journal"):
        for dirpath, dirnames, filenames in os.walk(os.path.join(wh, commit.COMMIT_DIR, sub)):
            out += [os.path.join(dirpath, n) for n in filenames + dirnames]
    return out


def test_first_write_publishes_every_partition_and_leaves_nothing_behind(tmp_path):
    wh = str(tmp_path)
    res = commit.write_partitions(FakeDF(_rows({"a": 4, "b": 3}, 1)), wh, "t", PARTS)
    assert res.partitions == ["date=2024-01-01/job_id=a", "date=2024-01-01/job_id=b"]
    assert _read(wh) == _expected({"a": 4, "b": 3}, 1)
    assert _leftovers(wh) == []


def test_rewrite_replaces_only_the_partitions_it_has_rows_for(tmp_path):
    wh = str(tmp_path)
    commit.write_partitions(FakeDF(_rows({"a": 4, "b": 3}, 1)), wh, "t", PARTS)
    commit.write_partitions(FakeDF(_rows({"b": 5, "c": 2}, 2)), wh, "t", PARTS)
    want = _expected({"a": 4}, 1) | _expected({"b": 5, "c": 2}, 2)
    assert _read(wh) == want
    # nothing doubled: partition b holds only the second write's files
    assert len(commit.data_files(os.path.join(wh, "t", "date=2024-01-01", "job_id=b"))) == 2
    assert _leftovers(wh) == []


def test_empty_frame_publishes_nothing(tmp_path):
    wh = str(tmp_path)
    res = commit.write_partitions(
        FakeDF(
            {
                "date": pa.array([], pa.string()),
                "job_id": pa.array([], pa.string()),
                "i": pa.array([], pa.int64()),
                "v": pa.array([], pa.int64()),
            }
        ),
        wh,
        "t",
        PARTS,
    )
    assert res.partitions == [] and os.path.isdir(os.path.join(wh, "t")) and _leftovers(wh) == []


@pytest.mark.parametrize("point", ["t:staged", "t:journaled", "t:published-1", "t:published-2", "t:published"])
def test_crash_at_every_point_leaves_whole_partitions_and_recovery_rolls_forward(tmp_path, crash_at, point):
    wh = str(tmp_path)
    old, new = {"a": 4, "b": 3}, {"a": 6, "b": 2, "c": 3}
    commit.write_partitions(FakeDF(_rows(old, 1)), wh, "t", PARTS)
    crash_at(point)
    with pytest.raises(Crash):
        commit.write_partitions(FakeDF(_rows(new, 2)), wh, "t", PARTS)
    seen = _read(wh)
    before, after = _expected(old, 1), _expected(new, 2)
    for job in set(before) | set(after):  # each partition: old complete, or new complete (c: absent = old)
        assert seen.get(job) in (before.get(job), after.get(job)), (point, job)
    published = {"t:staged": 0, "t:journaled": 0, "t:published-1": 1, "t:published-2": 2, "t:published": 3}[point]
    assert sum(seen.get(j) == after[j] != before.get(j) for j in after) == published
    rolled = commit.recover(wh)
    if point == "t:staged":  # before the commit point: rolled back, the table as it was
        assert rolled == [] and _read(wh) == before
    else:
        assert len(rolled) == 1 and _read(wh) == after
    assert _leftovers(wh) == []
    assert commit.recover(wh) == []  # idempotent


def test_the_next_write_recovers_first(tmp_path, crash_at, monkeypatch):
    wh = str(tmp_path)
    commit.write_partitions(FakeDF(_rows({"a": 4}, 1)), wh, "t", PARTS)
    crash_at("t:journaled")
    with pytest.raises(Crash):
        commit.write_partitions(FakeDF(_rows({"a": 5, "b": 1}, 2)), wh, "t", PARTS)
    monkeypatch.setattr(commit, "_crash_point", lambda p: None)
    res = commit.write_partitions(FakeDF(_rows({"b": 2}, 3)), wh, "u", PARTS)  # another table, same warehouse
    assert len(res.recovered) == 1
    assert _read(wh) == _expected({"a": 5, "b": 1}, 2) and _read(wh, "u") == _expected({"b": 2}, 3)
    assert _leftovers(wh) == []


def test_recovery_is_idempotent_when_itself_interrupted(tmp_path, crash_at, monkeypatch):
    wh = str(tmp_path)
    commit.write_partitions(FakeDF(_rows({"a": 4, "b": 3}, 1)), wh, "t", PARTS)
    crash_at("t:published-1")
    with pytest.raises(Crash):
        commit.write_partitions(FakeDF(_rows({"a": 1, "b": 1}, 2)), wh, "t", PARTS)
    # recovery dies after re-publishing (a no-op for a, the swap for b) but before its clean-up
    real_retire = commit._retire

    def dying_retire(*a):
        raise Crash("retire")

    monkeypatch.setattr(commit, "_retire", dying_retire)
    with pytest.raises(Crash):
        commit.recover(wh)
    assert _read(wh) == _expected({"a": 1, "b": 1}, 2)
    monkeypatch.setattr(commit, "_retire", real_retire)
    assert len(commit.recover(wh)) == 1 and _read(wh) == _expected({"a": 1, "b": 1}, 2)
    assert _leftovers(wh) == []


def test_rename_fallback_between_the_two_renames(tmp_path, crash_at, monkeypatch):
    """Without RENAME_EXCHANGE a partition is renamed out, then in: after a crash between the two it is
    absent (never partial) until recovery puts the new one in."""
    monkeypatch.setattr(commit, "_exchange", lambda a, b: False)
    wh = str(tmp_path)
    commit.write_partitions(FakeDF(_rows({"a": 4}, 1)), wh, "t", PARTS)
    real_rename = os.rename
    calls = []

    def rename(src, dst):
        calls.append(src)
        real_rename(src, dst)
        if len(calls) == 1:  # the live partition has just been moved out
            raise Crash(src)

    monkeypatch.setattr(commit.os, "rename", rename)
    with pytest.raises(Crash):
        commit.write_partitions(FakeDF(_rows({"a": 2}, 2)), wh, "t", PARTS)
    monkeypatch.setattr(commit.os, "rename", real_rename)
    assert _read(wh) == {}
    commit.recover(wh)
    assert _read(wh) == _expected({"a": 2}, 2) and _leftovers(wh) == []


def test_journal_without_its_staging_is_an_error_that_names_it(tmp_path, crash_at):
    wh = str(tmp_path)
    commit.write_partitions(FakeDF(_rows({"a": 4}, 1)), wh, "t", PARTS)
    crash_at("t:journaled")
    with pytest.raises(Crash):
        commit.write_partitions(FakeDF(_rows({"a": 2}, 2)), wh, "t", PARTS)
    import shutil

    shutil.rmtree(os.path.join(wh, commit.COMMIT_DIR, "staging"))
    with pytest.raises(commit.CommitError, match=r"t@.*\.json: partition t/date=2024-01-01/job_id=a"):
        commit.recover(wh)
    assert _read(wh) == _expected({"a": 4}, 1)  # left as it was


def test_recovery_removes_spark_staging_orphans(tmp_path):
    wh = str(tmp_path)
    commit.write_partitions(FakeDF(_rows({"a": 4}, 1)), wh, "t", PARTS)
    orphan = os.path.join(wh, "t", ".spark-staging-0a1b", "date=2024-01-01", "job_id=a")
    os.makedirs(orphan)
    commit.recover(wh)
    assert not os.path.exists(os.path.join(wh, "t", ".spark-staging-0a1b"))
    assert _read(wh) == _expected({"a": 4}, 1)


def test_readers_never_see_a_partial_or_missing_partition_during_publishes(tmp_path):
    """A reader lists the partition while it is replaced 40 times: each listing is one whole version
    (Spark's own commit deletes the live folder file by file: listings with part of the old files)."""
    if commit._renameat2() is None:
        pytest.skip("no renameat2 on this system (the rename fallback has an absent instant)")
    wh = str(tmp_path)
    part = os.path.join(wh, "t", "date=2024-01-01", "job_id=a")
    commit.write_partitions(FakeDF(_rows({"a": 60}, 0), n_files=30), wh, "t", PARTS)
    stop, bad, n_seen = threading.Event(), [], [0]

    def reader():
        while not stop.is_set():
            seen = commit.data_files(part)
            n_seen[0] += 1
            writes = {name.split("-", 2)[2] for name in seen}  # part-<task>-<write id>.c000.parquet
            if len(seen) != 30 or len(writes) != 1:
                bad.append((len(seen), len(writes)))

    t = threading.Thread(target=reader)
    t.start()
    try:
        for v in range(1, 41):
            df = FakeDF(_rows({"a": 60}, v), n_files=30)
            assert commit.write_partitions(df, wh, "t", PARTS).method == "exchange"
    finally:
        stop.set()
        t.join()
    assert n_seen[0] > 0 and bad == []
    assert _read(wh) == _expected({"a": 60}, 40)


def test_object_store_warehouse_falls_back_to_spark_dynamic_overwrite(tmp_path):
    df = FakeDF(_rows({"a": 1}, 1))
    res = commit.write_partitions(df, "s3a://bucket/wh/", "t", PARTS)
    assert res.method == "spark"
    assert df.calls == [("overwrite", {"partitionOverwriteMode": "dynamic"}, PARTS, "s3a://bucket/wh/t")]
    assert commit.local_root("file:///x/wh") == "/x/wh" and commit.local_root("/x/wh") == "/x/wh"
    assert commit.local_root("s3://b/wh") is None


def test_crash_hook_kills_with_sigkill(tmp_path):
    env = dict(os.environ, **{commit.CRASH_ENV: "t:staged"})
    code = (
        "from jobs import commit; commit._crash_point('t:journaled'); print('alive', flush=True); "
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


def test_replaced_partitions_wait_in_the_trash_for_the_grace_period(tmp_path, monkeypatch):
    wh = str(tmp_path)
    commit.write_partitions(FakeDF(_rows({"a": 4}, 1)), wh, "t", PARTS)
    old_files = commit.data_files(os.path.join(wh, "t", "date=2024-01-01", "job_id=a"))
    commit.write_partitions(FakeDF(_rows({"a": 2}, 2)), wh, "t", PARTS)
    trash = os.path.join(wh, commit.COMMIT_DIR, "trash")
    (entry,) = os.listdir(trash)
    assert commit.data_files(os.path.join(trash, entry, "date=2024-01-01", "job_id=a")) == old_files
    assert commit.recover(wh) == [] and os.listdir(trash) == [entry]  # younger than the grace period
    monkeypatch.setattr(commit, "TRASH_GRACE_S", 0.0)
    commit.recover(wh)
    assert os.listdir(trash) == [] and _read(wh) == _expected({"a": 2}, 2)


def test_a_failed_spark_write_publishes_nothing_and_leaves_no_staging(tmp_path):
    wh = str(tmp_path)
    commit.write_partitions(FakeDF(_rows({"a": 4}, 1)), wh, "t", PARTS)

    class Failing(FakeDF):
        @property
        def write(self):
            w = _Writer(self.table, self.n_files, self.calls)

            def parquet(path):
                _Writer.parquet(w, path)
                raise RuntimeError("executor lost")

            w.parquet = parquet
            return w

    with pytest.raises(RuntimeError, match="executor lost"):
        commit.write_partitions(Failing(_rows({"a": 1, "b": 1}, 2)), wh, "t", PARTS)
    assert _read(wh) == _expected({"a": 4}, 1) and _leftovers(wh) == []


def test_recover_command_reports_what_it_rolled_forward(tmp_path, crash_at, monkeypatch, capsys):
    wh = str(tmp_path)
    crash_at("t:journaled")
    with pytest.raises(Crash):
        commit.write_partitions(FakeDF(_rows({"a": 2}, 1)), wh, "t", PARTS)
    assert len(commit.pending_journals(wh)) == 1 and _read(wh) == {}
    assert commit.main([wh]) == 0
    assert "rolled forward 1 interrupted publish" in capsys.readouterr().out
    assert commit.pending_journals(wh) == [] and _read(wh) == _expected({"a": 2}, 1)


def test_write_text_atomic_replaces_whole_file(tmp_path):
    from jobs.commit import write_text_atomic

    target = tmp_path / "a" / "findings.json"
    write_text_atomic(str(target), "old")
    write_text_atomic(str(target), "new content")
    assert target.read_text() == "new content"
    assert [p.name for p in target.parent.iterdir()] == ["findings.json"]  # no temporary left behind
