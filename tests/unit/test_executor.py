"""The local executor's parts (jobs/executor.py) and what it writes through (jobs/commit.py): the process
pool, Arrow and staged-file writes into the crash-safe commit, work folders and their recovery, and the
pure helpers that make both executors give the same rows. That both leave identical warehouses is
tests/integration/test_executors.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from jobs import commit
from jobs.executor import LocalExecutor, available_cpus, is_local

PARTS = ("date", "job_id")


def _pid_and_square(x: int) -> tuple[int, int]:
    return os.getpid(), x * x


def _fail_on_three(x: int) -> int:
    if x == 3:
        raise ValueError(f"bad item {x}")
    return x


def test_map_runs_in_worker_processes_in_item_order():
    with LocalExecutor(2) as ex:
        out = list(ex.map(_pid_and_square, range(20)))
        assert [sq for _, sq in out] == [i * i for i in range(20)]
        assert os.getpid() not in {pid for pid, _ in out}
        assert list(ex.map(_pid_and_square, [])) == []
    assert is_local(ex) and not is_local(object())
    assert 1 <= available_cpus() <= (os.cpu_count() or 1)


#: A main script that a worker must never run: an Airflow task's main script is Airflow's CLI, whose import fails there.
MAIN_SCRIPT = """
import sys
from contextlib import nullcontext
if __name__ != "__main__":
    raise RuntimeError("a worker ran the main script")
from jobs.executor import LocalExecutor, main_script_hidden
with main_script_hidden() if sys.argv[1] == "hidden" else nullcontext(), LocalExecutor(2) as ex:
    ex.start(wait=False)
    print("squares", list(ex.map(abs, [-1, -2, -3])))
"""


@pytest.mark.parametrize("hidden", [True, False])
def test_workers_started_with_the_main_script_hidden_never_run_it(tmp_path, hidden):
    script = tmp_path / "main.py"
    script.write_text(MAIN_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    res = subprocess.run([sys.executable, str(script), "hidden" if hidden else "shown"], env=env, capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    if hidden:
        assert res.returncode == 0 and "squares [1, 2, 3]" in res.stdout, res.stderr[-2000:]
    else:  # the control: without it multiprocessing runs the main script in each worker
        assert res.returncode != 0 and "a worker ran the main script" in res.stderr, res.stdout + res.stderr[-2000:]


def test_a_failing_item_raises_its_error():
    with LocalExecutor(2) as ex, pytest.raises(ValueError, match="bad item 3"):
        list(ex.map(_fail_on_three, range(6)))


def test_workers_default_to_the_env_then_the_cpus(monkeypatch):
    monkeypatch.setenv("TRACELAKE_LOCAL_WORKERS", "3")
    assert LocalExecutor().workers == 3
    monkeypatch.delenv("TRACELAKE_LOCAL_WORKERS")
    assert LocalExecutor().workers == available_cpus()


def _table(jobs: dict[str, int], version: int) -> pa.Table:
    job_ids = [j for j, n in jobs.items() for _ in range(n)]
    return pa.table(
        {
            "date": ["2024-01-01"] * len(job_ids),
            "job_id": job_ids,
            "i": list(range(len(job_ids))),
            "v": [version] * len(job_ids),
        }
    )


def _read(wh, table="t") -> dict[str, set]:
    t = commit.open_table(os.path.join(wh, table)).to_pyarrow_table()  # the table's current Delta version
    out: dict[str, set] = {}
    for j, i, v in zip(t["job_id"].to_pylist(), t["i"].to_pylist(), t["v"].to_pylist()):
        out.setdefault(str(j), set()).add((i, v))
    return out


def _nothing_in(folder) -> bool:
    return not any(files for _, _, files in os.walk(folder))


def test_arrow_rows_replace_only_their_partitions(tmp_path):
    wh = str(tmp_path)
    res = commit.write_partitions(_table({"a": 3, "b": 2}, 1), wh, "t", PARTS)
    assert res.partitions == ["date=2024-01-01/job_id=a", "date=2024-01-01/job_id=b"]
    commit.write_partitions(_table({"b": 4}, 2), wh, "t", PARTS)
    got = _read(wh)
    assert got["a"] == {(i, 1) for i in range(3)} and got["b"] == {(i, 2) for i in range(4)}
    files = commit.open_table(str(tmp_path / "t")).file_uris()
    live_b = [f for f in files if "job_id=b" in f]  # the replaced file stays on disk, out of the table, till vacuum
    assert len(live_b) == 1 and live_b[0].endswith("-part-0.parquet") and res.write_id not in live_b[0]
    # the partition columns live in the folder names, as Spark writes them
    assert "job_id" not in ds.dataset(str(tmp_path / "t" / "date=2024-01-01" / "job_id=b")).schema.names
    assert _nothing_in(tmp_path / commit.COMMIT_DIR / "work")


def test_staged_worker_files_are_moved_in_and_relabelled(tmp_path):
    wh = str(tmp_path / "wh")
    with commit.work_dir(wh) as work:
        assert work.startswith(os.path.join(wh, commit.COMMIT_DIR, "work"))
        w1, w2 = os.path.join(work, "000001"), os.path.join(work, "000002")
        commit.stage_arrow(_table({"a": 2}, 1), w1, PARTS)
        commit.stage_arrow(_table({"old": 3}, 1), w2, PARTS)

        def stage(staging):
            assert commit.move_staged(w1, staging, "000001", 2) == 1
            relabel = lambda rel: rel.replace("job_id=old", "job_id=new")  # noqa: E731
            assert commit.move_staged(w2, staging, "000002", 2, relabel) == 1
            assert commit.move_staged(os.path.join(work, "absent"), staging, "x", 2) == 0

        res = commit.write_partitions(stage, wh, "t", PARTS)
        assert res.partitions == ["date=2024-01-01/job_id=a", "date=2024-01-01/job_id=new"]
        assert not os.path.exists(w1) and not os.path.exists(w2)
    assert _read(wh) == {"a": {(0, 1), (1, 1)}, "new": {(0, 1), (1, 1), (2, 1)}}
    assert os.listdir(os.path.join(wh, commit.COMMIT_DIR, "work")) == []  # the run's folder and lock are gone


def test_the_same_rows_written_again_replace_the_partition(tmp_path):
    """Two writes of the same shape stage files of the same names: each write's names are its own, so
    the second is published (the commit tells a published partition by its file names)."""
    wh = str(tmp_path)
    for version in (1, 2):
        commit.write_partitions(_table({"a": 2}, version), wh, "t", PARTS)
        assert _read(wh) == {"a": {(0, version), (1, version)}}

    def stage(staging, version):
        with commit.work_dir(wh) as work:
            commit.stage_arrow(_table({"a": 2}, version), os.path.join(work, "000000"), PARTS)
            commit.move_staged(os.path.join(work, "000000"), staging, "000000", 2)

    for version in (3, 4):
        commit.write_partitions(lambda st, v=version: stage(st, v), wh, "t", PARTS)
        assert _read(wh) == {"a": {(0, version), (1, version)}}


def test_a_failing_stage_publishes_nothing(tmp_path):
    wh = str(tmp_path)
    commit.write_partitions(_table({"a": 1}, 1), wh, "t", PARTS)

    def stage(staging):
        commit.stage_arrow(_table({"a": 5}, 2), staging + "/x", PARTS)
        raise RuntimeError("worker died")

    with pytest.raises(RuntimeError, match="worker died"):
        commit.write_partitions(stage, wh, "t", PARTS)
    assert _read(wh) == {"a": {(0, 1)}}
    assert _nothing_in(tmp_path / commit.COMMIT_DIR / "work")


def test_recovery_removes_dead_runs_work_folders_not_live_ones(tmp_path):
    wh = str(tmp_path)
    base = tmp_path / commit.COMMIT_DIR / "work"
    base.mkdir(parents=True)
    (base / "dead").mkdir()
    (base / "dead" / "f.parquet").write_bytes(b"x")
    (base / "dead.lock").write_bytes(b"")  # nobody holds its flock: the run died
    with commit.work_dir(wh) as live:
        open(os.path.join(live, "f"), "w").close()
        commit.recover(wh)
        assert os.path.exists(live)
        assert not (base / "dead").exists() and not (base / "dead.lock").exists()
    assert os.listdir(base) == []


def test_conform_gives_the_declared_schema():
    from jobs.analyze.job import conform
    from schemas import KERNELS

    t = conform("kernels", pa.table({"name": ["k"], "n": pa.array([3], pa.int64()), "extra": [1]}))
    assert t.schema.names == KERNELS.names
    assert t.column("n").type == KERNELS.arrow_schema().field("n").type and t.column("n").to_pylist() == [3]
    assert t.column("job_id").to_pylist() == [None]
    with pytest.raises(pa.ArrowInvalid):
        conform("kernels", pa.table({"n": [1.5]}))  # a fraction does not fit a count


def test_rank_outputs_do_not_depend_on_row_order():
    from jobs.analyze.job import _in_trace_order

    t = pa.table({"event_id": [3, 1, 2, 0], "v": ["d", "b", "c", "a"]})
    assert _in_trace_order(t).column("v").to_pylist() == ["a", "b", "c", "d"]
    ordered = pa.table({"event_id": [0, 1], "v": ["a", "b"]})
    assert _in_trace_order(ordered) is ordered


def test_job_steps_frame_is_sparks_reduction():
    from jobs.fleet.stats import job_kernels_frame, job_steps_frame

    caps = pd.DataFrame(
        {
            "job_id": ["j", "j", "q"],
            "attempt": [0, 0, 0],
            "status": ["ingested"] * 2 + ["quarantined"],
            "job_name": [None, None, "x"],
            "model": ["m", None, None],
            "device_name": [None, "H100", None],
            "torch_version": [None, None, None],
            "created_at": [None, None, None],
            "date": ["2024-01-02", "2024-01-01", "2024-01-01"],
        }
    )
    steps = pd.DataFrame(
        {
            "job_id": ["j"] * 3,
            "attempt": [0] * 3,
            "step": [1, 1, -1],
            "rank": [1, 0, 0],
            "date": ["2024-01-02", "2024-01-01", "2024-01-01"],
            "step_time_ns": [10, 30, 99],
            "kernel_time_ns": [None, 5, 1],
            "idle_time_ns": [1, 2, 3],
            "compute_time_ns": [1, 1, 1],
            "exposed_comm_ns": [None, None, 0],
            "cpu_bound_time_ns": [0, 0, 0],
            "dataloader_time_ns": [0, 0, 0],
        }
    )
    js = job_steps_frame(steps, caps)
    assert len(js) == 1  # the step outside any ProfilerStep (-1) is left out
    r = js.iloc[0]
    assert (r["date"], r["step_time_ns"], r["rank_step_time_ns"], r["n_rank_steps"]) == ("2024-01-01", 30, 40, 2)
    assert r["kernel_time_ns"] == 5 and pd.isna(r["exposed_comm_ns"])  # Spark's sum: nulls skipped, all-null is null
    assert list(r["ranks"]) == [0, 1] and r["ranks"].dtype == np.int32
    assert (r["job_name"], r["job"], r["model"], r["hardware"], r["torch_version"], r["run_key"]) == (
        "j",
        "j#0",
        "m",
        "H100",
        "(none)",
        "2024-01-01",
    )
    kernels = pd.DataFrame(
        {
            "job_id": ["j", "j"],
            "attempt": [0, 0],
            "date": ["2024-01-01"] * 2,
            "name": ["k", "k"],
            "kernel_type": [None, "COMPUTATION"],
            "n": [2, 3],
            "total_ns": [10, 20],
        }
    )
    jk = job_kernels_frame(kernels, caps)
    assert jk[["name", "kernel_type", "n", "total_ns"]].values.tolist() == [["k", "COMPUTATION", 5, 30]]
