"""The daily fleet stage writes what the day touched (issue 29): over a simulated fleet (``benchmarks/fleet_history.py``'s
rows written straight into the warehouse), each day's run replaces the fleet tables' and partials' rows by key — the
number of files a run removes is the same on day 3 as on day 8 — and the tables equal a ``--rebuild``."""

from __future__ import annotations

import argparse
import json
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

pytestmark = pytest.mark.integration


def _last_commit(wh: Path, table: str) -> tuple[list[dict], list[dict]]:
    """(add, remove) actions of the table's last log entry."""
    log = wh / table / "_delta_log"
    last = max(log.glob("*.json"), key=lambda p: int(p.stem))
    actions = [json.loads(line) for line in last.read_text().splitlines() if line.strip()]
    return [a["add"] for a in actions if "add" in a], [a["remove"] for a in actions if "remove" in a]


def test_a_daily_run_rewrites_what_the_day_touched_and_equals_a_rebuild(tmp_path, benchmark):
    from pipeline_compare import FLEET_TABLES, rows_digest

    from jobs.executor import LocalExecutor
    from jobs.fleet.job import run_fleet
    from jobs.fleet.reduced import KERNEL_PARTIALS, STATS_PARTIALS
    from jobs.warehouse import maintain, open_table

    fh = benchmark("fleet_history")
    args = argparse.Namespace(jobs_per_day=3, ranks=2, steps=4, kernels=5)
    wh, rng = tmp_path / "wh", np.random.default_rng(3)
    removed: dict[int, dict[str, int]] = {}
    with LocalExecutor() as ex:
        for day in range(8):
            fh.add_days(str(wh), day, day + 1, args, rng)
            assert len(run_fleet(ex, str(wh)).reduced_jobs) == 3  # the day's jobs only
            removed[day] = {t: len(_last_commit(wh, t)[1]) for t in ("fleet_kernels", "fleet_stats", STATS_PARTIALS)}
    # from the second day on, a run removes the same files whatever the history: the wide groups' `all` rows, and
    # the partials' merged rows (one file), never a dated partial
    assert removed[2] == removed[7] and removed[7]["fleet_kernels"] > 0 and removed[7][STATS_PARTIALS] == 1
    gone = {r["path"] for r in _last_commit(wh, STATS_PARTIALS)[1]}
    for a in (a for a in _all_adds(wh, STATS_PARTIALS) if a["path"] in gone):
        stats = json.loads(a["stats"])
        assert stats["minValues"]["run_date"] == stats["maxValues"]["run_date"] == "all"
    adds, removes = _last_commit(wh, "fleet_stats")
    gone = {r["path"] for r in removes}
    before = [a for a in _all_adds(wh, "fleet_stats") if a["path"] in gone]
    assert len(before) == len(gone)
    for a in before:  # each file removed held `all` rows of a wide group only (its statistics say so)
        stats = json.loads(a["stats"])
        assert stats["minValues"]["date"] == stats["maxValues"]["date"] == "all"
        assert a["partitionValues"]["dimension"] != "job"
    # maintenance compacts the small files but keeps the `all` rows apart: the next day still removes only those
    digests = {t: rows_digest(wh, t) for t in FLEET_TABLES}
    done = maintain(str(wh), retention_hours=0)
    assert done["fleet_stats"]["files_compacted"] > 0 and done["fleet_stats"]["skipped"] == 0
    assert {t: rows_digest(wh, t) for t in FLEET_TABLES} == digests
    for table in ("fleet_stats", "fleet_kernels"):
        acts = pa.table(open_table(str(wh / table)).get_add_actions(flatten=True)).to_pylist()
        per = Counter(a["partition.dimension"] for a in acts)
        assert max(per.values()) <= 2 and set(per) == {"job", "fleet", "job_name", "model", "hardware", "torch_version"}
        assert all(a["min.date"] == a["max.date"] == "all" or a["max.date"] < "all" for a in acts)  # one kind a file
    for table in (STATS_PARTIALS, KERNEL_PARTIALS):  # unpartitioned: the merged rows in a file of their own
        acts = pa.table(open_table(str(wh / table)).get_add_actions(flatten=True)).to_pylist()
        assert len(acts) <= 2 and all(a["min.run_date"] == "all" or a["max.run_date"] < "all" for a in acts), acts
    again = maintain(str(wh), tables=["fleet_stats", "fleet_kernels"], retention_hours=0)
    assert all(m["files_compacted"] == m["files_added"] == 0 for m in again.values()), again  # compacted: left alone
    with LocalExecutor() as ex:
        fh.add_days(str(wh), 8, 9, args, rng)
        run_fleet(ex, str(wh))
    assert {t: len(_last_commit(wh, t)[1]) for t in removed[7]} == removed[7]
    _assert_equals_a_rebuild(wh, tmp_path / "full")


def _assert_equals_a_rebuild(wh: Path, full: Path) -> None:
    """Every fleet table of ``wh`` equals the one ``--rebuild`` makes in a copy of it (``full``)."""
    from pipeline_compare import FLEET_TABLES, rows_digest

    from jobs.executor import LocalExecutor
    from jobs.fleet.job import run_fleet

    shutil.copytree(wh, full)
    with LocalExecutor() as ex:
        run_fleet(ex, str(full), rebuild=True)
    for table in FLEET_TABLES:
        assert rows_digest(wh, table) == rows_digest(full, table), table


def _all_adds(wh: Path, table: str) -> list[dict]:
    """Every add action ever written to the table's log (checkpoints aside: the test's tables stay small)."""
    out = []
    for p in sorted((wh / table / "_delta_log").glob("*.json"), key=lambda p: int(p.stem)):
        out += [json.loads(line)["add"] for line in p.read_text().splitlines() if '"add"' in line]
    return out


def test_partials_without_merged_rows_are_merged_whole_once(tmp_path, benchmark):
    """A warehouse whose partials predate the merged rows (``run_date = 'all'``): the next run merges every run
    date's partials, writes the merged rows, and its tables equal a ``--rebuild``."""
    import pyarrow.compute as pc

    from jobs.executor import LocalExecutor
    from jobs.fleet.job import run_fleet
    from jobs.fleet.reduced import KERNEL_PARTIALS, STATS_PARTIALS, read_internal_table, write_internal

    fh = benchmark("fleet_history")
    args = argparse.Namespace(jobs_per_day=3, ranks=2, steps=4, kernels=5)
    wh, rng = tmp_path / "wh", np.random.default_rng(5)
    with LocalExecutor() as ex:
        for day in range(3):
            fh.add_days(str(wh), day, day + 1, args, rng)
            run_fleet(ex, str(wh))
        for name in (STATS_PARTIALS, KERNEL_PARTIALS):
            rows = read_internal_table(str(wh), name)
            write_internal(rows.filter(pc.not_equal(rows["run_date"], "all")), str(wh), name, {})
        fh.add_days(str(wh), 3, 4, args, rng)
        run_fleet(ex, str(wh))
    for name in (STATS_PARTIALS, KERNEL_PARTIALS):
        run_dates = read_internal_table(str(wh), name)["run_date"].to_pylist()
        assert "all" in run_dates and len(set(run_dates)) == 5, name  # four days and the merged rows
    _assert_equals_a_rebuild(wh, tmp_path / "full")
