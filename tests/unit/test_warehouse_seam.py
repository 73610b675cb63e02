"""The storage seam's write path for the local executor (jobs/warehouse.py): workers stage rows with
``stage_rows``, the driver hands the folders to ``write_table`` through ``staged_rows``. The commit protocol
behind it is tests/unit/test_commit.py and test_executor.py; that the stages import nothing else of it is the
import-linter contract "Only the warehouse imports the commit protocol" (test_import_graph.py)."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from jobs.warehouse import (
    read_arrow,
    reads_logged,
    recover,
    stage_rows,
    staged_rows,
    table_version,
    work_dir,
    write_table,
)


def _rows(job_id: str, n: int) -> pa.Table:
    return pa.table({"date": ["2024-01-01"] * n, "job_id": [job_id] * n, "step": list(range(n))})


def _jobs(wh: str, table: str) -> dict[str, list[int]]:
    """``{job_id: sorted steps}`` of the table's latest Delta snapshot, read through the seam (not the folder:
    files a later commit removed stay on disk until vacuumed)."""
    t = read_arrow(wh, table, columns=["job_id", "step"])
    assert t is not None, f"{table} was never written"
    out: dict[str, list[int]] = {}
    for j, s in zip(t["job_id"].to_pylist(), t["step"].to_pylist()):
        out.setdefault(str(j), []).append(s)
    return {j: sorted(v) for j, v in out.items()}


def test_staged_rows_are_moved_in_under_their_jobs(tmp_path):
    wh = str(tmp_path / "wh")
    with work_dir(wh) as work:
        w1, w2, w3 = (os.path.join(work, f"r{i:06d}") for i in range(3))
        stage_rows(_rows("a", 2), w1, "steps")
        stage_rows(_rows("bare", 3), w2, "steps")
        stage_rows(_rows("a", 1), w3, "kernels")  # another table only: adds no steps
        stage_rows(_rows("a", 0), w3, "steps")  # no rows: nothing written
        res = write_table(staged_rows("steps", [w1, w2, w3], {w2: "bare-x/1"}), wh, "steps", ["a", "bare"])
        assert res.partitions == ["date=2024-01-01/job_id=a", "date=2024-01-01/job_id=bare-x%2F1"]
        assert not os.path.exists(os.path.join(w1, "steps")) and os.path.exists(os.path.join(w3, "kernels"))
    assert _jobs(wh, "steps") == {"a": [0, 1], "bare-x/1": [0, 1, 2]}
    (name,) = os.listdir(os.path.join(wh, "steps", "date=2024-01-01", "job_id=a"))
    assert name.endswith("-r000000-part-0.parquet")  # <this write>-<worker folder>-<file>
    assert recover(wh) == []


def test_staged_rows_refuse_what_would_collide_or_go_astray(tmp_path):
    with pytest.raises(ValueError, match="distinct names"):
        staged_rows("steps", [str(tmp_path / "x" / "000001"), str(tmp_path / "y" / "000001")])
    with pytest.raises(ValueError, match="not staged"):
        staged_rows("steps", [str(tmp_path / "a")], {str(tmp_path / "b"): "j"})
    with pytest.raises(ValueError, match="of 'kernels'"):
        write_table(staged_rows("kernels", []), str(tmp_path), "steps")
    with pytest.raises(TypeError, match="staged_rows"):
        write_table(lambda staging: None, str(tmp_path), "steps")
    assert not os.path.exists(tmp_path / "steps")


def test_one_answer_reads_one_version_of_each_table(tmp_path):
    """Inside ``reads_logged`` (an MCP answer) a table is opened once: a write that lands between two reads of it
    is not seen by the second, and the answer states the version it read; outside, the next read sees the write."""
    wh = str(tmp_path / "wh")
    write_table(_rows("a", 2), wh, "steps", ["a"])
    v = table_version(wh, "steps")
    with reads_logged() as read:
        assert _jobs(wh, "steps") == {"a": [0, 1]}
        write_table(_rows("b", 1), wh, "steps", ["b"])  # version v + 1
        assert _jobs(wh, "steps") == {"a": [0, 1]}
    assert read == {"steps": v} and table_version(wh, "steps") == v + 1
    assert _jobs(wh, "steps") == {"a": [0, 1], "b": [0]}


def test_the_spark_readers_file_list_of_some_jobs_or_none(tmp_path):
    """``read_spark``'s file list (``_files``): the live files of the jobs asked for, chosen over the log's add
    actions; no job at all is no file (not an error), and a job id that the log quotes is matched as written."""
    from jobs.warehouse import _files, _snapshot

    wh = str(tmp_path / "wh")
    write_table(pa.concat_tables([_rows("a", 2), _rows("b", 1), _rows("x/1", 1)]), wh, "steps")
    dt = _snapshot(wh, "steps")
    assert _files(dt, []) == []
    assert [f["partition"]["job_id"] for f in _files(dt, ["a", "x/1"])] in (["a", "x/1"], ["x/1", "a"])
    assert sorted(f["partition"]["job_id"] for f in _files(dt, None)) == ["a", "b", "x/1"]
    assert all(os.path.exists(f["uri"]) for f in _files(dt, None))
