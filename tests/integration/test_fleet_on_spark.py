"""A whole fleet derivation on Spark (a first run, ``--rebuild``) runs by group on the executors (issue 29, item 2:
:mod:`jobs.fleet.on_spark`) and equals the local executor's: over a simulated fleet (``benchmarks/fleet_history.py``'s
rows) with a regressed run, every fleet table and partial is the same, and the driver reads back the stored
reductions of the insights' window and of the runs a regression explains only — not the history's."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pytest

pytestmark = pytest.mark.integration

DAYS = 12  # longer than the insights' window (jobs.fleet.window.WINDOW_DAYS = 7)


def _fleet_with_a_regression(fh, wh: Path) -> None:
    """``DAYS`` simulated days of 3 recurring jobs; on the last day the first job's steps take twice as long."""
    from jobs.warehouse import write_table

    # 180 step times in the fleet's group: its KLL sketch (k = 200) holds them all, the percentiles exact
    args = argparse.Namespace(jobs_per_day=3, ranks=2, steps=5, kernels=5)
    fh.add_days(str(wh), 0, DAYS - 1, args, np.random.default_rng(3))
    for table, rows in fh.day_tables(DAYS - 1, 3, 2, 5, 5, np.random.default_rng(4)).items():
        if table == "steps":
            slow = pc.ends_with(rows["job_id"], "-000")
            for c in ("step_time_ns", "kernel_time_ns", "idle_time_ns", "compute_time_ns"):
                i = rows.schema.get_field_index(c)
                rows = rows.set_column(i, c, pc.if_else(slow, pc.multiply(rows[c], 2), rows[c]))
        write_table(rows, str(wh), table)


def _partials(wh: Path, name: str):
    from jobs.fleet.reduced import read_internal_table

    t = read_internal_table(str(wh), name)
    t = t.drop_columns([c for c in t.column_names if c == "step_ns_sketch"])  # KLL bytes: the order of updates
    keys = [k for k in ("dimension", "value", "run_date", "name") if k in t.column_names]
    return t.sort_by([(k, "ascending") for k in keys]).to_pylist()


def test_a_whole_derivation_on_the_executors_equals_the_local_executor(spark, benchmark, tmp_path, monkeypatch):
    from pipeline_compare import FLEET_TABLES, rows_digest

    import jobs.fleet.job as fleet_job
    import jobs.fleet.reduced as reduced
    from jobs.executor import LocalExecutor
    from jobs.fleet.reduced import KERNEL_PARTIALS, STATS_PARTIALS
    from jobs.fleet.window import WINDOW_DAYS

    local, on_spark = tmp_path / "local", tmp_path / "spark"
    _fleet_with_a_regression(benchmark("fleet_history"), local)
    shutil.copytree(local, on_spark)
    with LocalExecutor() as ex:
        expected = fleet_job.run_fleet(ex, str(local))
    read: list = []
    real = fleet_job.read_reductions

    def spy(warehouse, job_ids=None):
        read.append(job_ids)
        return real(warehouse, job_ids)

    monkeypatch.setattr(fleet_job, "read_reductions", spy)
    monkeypatch.setattr(reduced, "REDUCE_BATCH_JOBS", 7)  # 36 jobs: reduced and stored in 6 batches
    got = fleet_job.run_fleet(spark, str(on_spark))

    regressed = got.regressions[got.regressions["verdict"] == "regression"]
    assert len(regressed) and regressed["changes_json"].notna().all()  # explained from the runs read back
    assert got.counts == expected.counts and len(got.reduced_jobs) == 3 * DAYS
    for table in FLEET_TABLES:
        assert rows_digest(on_spark, table) == rows_digest(local, table), table
    for name in (STATS_PARTIALS, KERNEL_PARTIALS):
        assert _partials(on_spark, name) == _partials(local, name), name
    # the driver read back the reductions of the window's jobs and of the explained runs and their baselines only
    window = {f"sim-{d:04d}-{j:03d}" for d in range(DAYS - WINDOW_DAYS, DAYS) for j in range(3)}
    assert len(read) == 1 and set(read[0]) == window | fleet_job.explained_jobs(got.regressions)
    assert len(read[0]) < 3 * DAYS, read[0]
