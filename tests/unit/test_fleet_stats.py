"""Fleet statistics over job steps and job kernels (jobs/fleet/stats.py, pandas half), on frames
whose aggregates are computed by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from jobs.fleet.stats import DIMENSIONS, fleet_kernels, fleet_stats
from schemas import FLEET_KERNELS, FLEET_STATS

MS = 1_000_000


def _job_steps():
    rows = []
    # run a (H100, model m): 4 steps on 2 ranks on day 1; run b (cpu, untagged): 2 steps on 1 rank on day 2
    for i, t in enumerate((10, 20, 30, 40)):
        rows.append(
            dict(
                job_id="a",
                attempt=0,
                step=i,
                date="2026-11-01",
                step_time_ns=t * MS,
                rank_step_time_ns=2 * t * MS,
                kernel_time_ns=2 * t * MS,
                idle_time_ns=t * MS // 2,
                compute_time_ns=t * MS,
                exposed_comm_ns=t * MS // 10,
                cpu_bound_time_ns=0,
                dataloader_time_ns=0,
                n_rank_steps=2,
                ranks=[0, 1],
                job_name="nightly",
                job="a#0",
                model="m",
                hardware="NVIDIA H100",
                torch_version="2.13.0",
                run_key="k1",
                run_date="2026-11-01",
            )
        )
    for i, t in enumerate((5, 7)):
        rows.append(
            dict(
                job_id="b",
                attempt=0,
                step=i,
                date="2026-11-02",
                step_time_ns=t * MS,
                rank_step_time_ns=t * MS,
                kernel_time_ns=None,
                idle_time_ns=None,
                compute_time_ns=None,
                exposed_comm_ns=None,
                cpu_bound_time_ns=t * MS // 5,
                dataloader_time_ns=None,
                n_rank_steps=1,
                ranks=[0],
                job_name="b",
                job="b#0",
                model=None,
                hardware="cpu",
                torch_version="2.13.0",
                run_key="k2",
                run_date="2026-11-02",
            )
        )
    return pd.DataFrame(rows)


def _row(df, dim, value, date="all"):
    r = df[(df["dimension"] == dim) & (df["value"] == value) & (df["date"] == date)]
    assert len(r) == 1, (dim, value, date)
    return r.iloc[0]


def test_fleet_stats_groups_and_definitions():
    out = fleet_stats(_job_steps())
    assert list(out.columns) == FLEET_STATS.names
    assert set(out["dimension"]) == set(DIMENSIONS)
    a = _row(out, "job", "a#0")
    assert (a["n_runs"], a["n_ranks"], a["n_steps"], a["n_rank_steps"]) == (1, 2, 4, 8)
    times = np.array([10, 20, 30, 40]) * MS
    for q in (50, 90, 99):
        assert a[f"step_time_p{q}_ns"] == round(np.percentile(times, q))
    assert a["idle_pct"] == pytest.approx(25.0)  # Σ t/2 / Σ 2t
    assert a["compute_pct"] == pytest.approx(50.0)
    assert a["exposed_comm_pct"] == pytest.approx(5.0)  # Σ t/10 / Σ 2t
    fleet = _row(out, "fleet", "all")
    assert (fleet["n_runs"], fleet["n_ranks"], fleet["n_steps"]) == (2, 3, 6)
    # the CPU run has no kernel time: fleet idle % is over the GPU rank-steps only
    assert fleet["idle_pct"] == pytest.approx(25.0)
    assert fleet["cpu_bound_pct"] == pytest.approx((1 + 1.4) * MS / ((200 + 12) * MS) * 100)
    assert pd.isna(_row(out, "hardware", "cpu")["idle_pct"])
    assert _row(out, "model", "(none)")["n_runs"] == 1 and _row(out, "model", "m")["n_steps"] == 4
    day2 = _row(out, "fleet", "all", "2026-11-02")
    assert day2["n_steps"] == 2 and day2["step_time_p50_ns"] == 6 * MS
    assert _row(out, "job_name", "nightly")["n_runs"] == 1


def test_fleet_kernels_top_per_group():
    jk = pd.DataFrame(
        [
            dict(
                job_id="a",
                attempt=0,
                date="2026-11-01",
                name="gemm",
                kernel_type="COMPUTATION",
                n=10,
                total_ns=600,
                job="a#0",
                job_name="n",
                model="m",
                hardware="H100",
                torch_version="2.13",
            ),
            dict(
                job_id="a",
                attempt=0,
                date="2026-11-01",
                name="nccl",
                kernel_type="COMMUNICATION",
                n=5,
                total_ns=300,
                job="a#0",
                job_name="n",
                model="m",
                hardware="H100",
                torch_version="2.13",
            ),
            dict(
                job_id="b",
                attempt=0,
                date="2026-11-02",
                name="nccl",
                kernel_type="COMMUNICATION",
                n=5,
                total_ns=500,
                job="b#0",
                job_name="n",
                model="m",
                hardware="H100",
                torch_version="2.13",
            ),
            dict(
                job_id="b",
                attempt=0,
                date="2026-11-02",
                name="copy",
                kernel_type="MEMORY",
                n=1,
                total_ns=100,
                job="b#0",
                job_name="n",
                model="m",
                hardware="H100",
                torch_version="2.13",
            ),
        ]
    )
    out = fleet_kernels(jk, top=2)
    assert list(out.columns) == FLEET_KERNELS.names
    fl = out[(out["dimension"] == "fleet") & (out["date"] == "all")].sort_values("kernel_rank")
    assert list(fl["name"]) == ["nccl", "gemm"]  # 800 > 600; copy is cut by top=2
    assert list(fl["total_ns"]) == [800, 600] and list(fl["n_runs"]) == [2, 1]
    assert fl["share_pct"].tolist() == pytest.approx([800 / 1500 * 100, 600 / 1500 * 100])
    day1 = out[(out["dimension"] == "job") & (out["value"] == "a#0") & (out["date"] == "2026-11-01")]
    assert list(day1.sort_values("kernel_rank")["name"]) == ["gemm", "nccl"]


def test_empty_inputs_give_empty_tables():
    assert fleet_stats(pd.DataFrame()).empty and list(fleet_stats(None).columns) == FLEET_STATS.names
    assert fleet_kernels(None).empty
