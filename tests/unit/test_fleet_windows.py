"""Fleet statistics over analysis windows (jobs/fleet/stats.py + jobs/analyze/windows.py): a rank capture without
ProfilerStep (alexnet-like) counts in the time-weighted percentages, runs and ranks, never in step time; numbers
computed by hand."""

from __future__ import annotations

import pandas as pd
import pytest

from jobs.analyze.windows import analysis_windows
from jobs.fleet.impact import fleet_findings
from jobs.fleet.job import fleet_frames
from jobs.fleet.stats import fleet_stats, job_steps_frame, profiler_steps, run_summary
from schemas import FLEET_STATS

MS = 1_000_000


def _tables():
    """Run ``steps#0``: 2 ranks × 2 ProfilerSteps on 2026-11-01; run ``trace#0``: 1 rank, no ProfilerStep, a
    1 s trace with 990 ms of 1 s GPU span idle, on 2026-11-02."""
    steps = pd.DataFrame(
        [
            dict(
                date="2026-11-01",
                job_id="steps",
                attempt=0,
                rank=r,
                capture_id=f"c{r}",
                step=s,
                step_time_ns=t * MS,
                kernel_time_ns=t * MS,
                idle_time_ns=t * MS // 4,
                compute_time_ns=t * MS // 2,
                exposed_comm_ns=t * MS // 10,
                cpu_bound_time_ns=0,
                dataloader_time_ns=0,
            )
            for r, s, t in ((0, 0, 10), (1, 0, 12), (0, 1, 20), (1, 1, 16))
        ]
    )
    ranks = pd.DataFrame(
        [
            dict(date="2026-11-01", job_id="steps", attempt=0, rank=r, capture_id=f"c{r}", kernel_time_ns=1)
            for r in (0, 1)
        ]
        + [
            dict(
                date="2026-11-02",
                job_id="trace",
                attempt=0,
                rank=0,
                capture_id="t0",
                kernel_time_ns=1000 * MS,
                idle_time_ns=990 * MS,
                compute_time_ns=5 * MS,
                exposed_comm_ns=0,
                cpu_bound_time_ns=900 * MS,
                dataloader_time_ns=0,
            )
        ]
    )
    captures = pd.DataFrame(
        [
            dict(
                job_id=j,
                attempt=0,
                rank=r,
                capture_id=c,
                status="ingested",
                job_name=j,
                model=None,
                device_name="NVIDIA H100",
                torch_version="2.13.0",
                created_at=None,
                date=d,
                world_size=n,
                trace_start_ns=0,
                trace_end_ns=1000 * MS,
            )
            for j, r, c, d, n in (
                ("steps", 0, "c0", "2026-11-01", 2),
                ("steps", 1, "c1", "2026-11-01", 2),
                ("trace", 0, "t0", "2026-11-02", 1),
            )
        ]
    )
    return steps, ranks, captures


def _row(df, dim, value, date="all"):
    r = df[(df["dimension"] == dim) & (df["value"] == value) & (df["date"] == date)]
    assert len(r) == 1, (dim, value, date)
    return r.iloc[0]


def test_whole_trace_windows_count_in_percentages_not_in_step_time():
    steps, ranks, captures = _tables()
    st = fleet_stats(job_steps_frame(analysis_windows(steps, ranks, captures), captures))
    assert list(st.columns) == FLEET_STATS.names
    trace = _row(st, "job", "trace#0")
    assert pd.isna(trace["step_time_p50_ns"]) and pd.isna(trace["step_time_p99_ns"])
    assert pd.isna(trace["step_time_mean_ns"])
    assert (trace["n_runs"], trace["n_ranks"], trace["n_steps"], trace["n_rank_steps"]) == (1, 1, 0, 1)
    assert trace["idle_pct"] == pytest.approx(99.0)
    assert trace["cpu_bound_pct"] == pytest.approx(90.0)  # of the 1 s trace span
    job = _row(st, "job", "steps#0")
    # job step time = slowest rank per step: 12 ms and 20 ms
    assert job["step_time_p50_ns"] == 16 * MS and (job["n_steps"], job["n_rank_steps"]) == (2, 4)
    assert job["idle_pct"] == pytest.approx(25.0)
    fleet = _row(st, "fleet", "all")
    assert (fleet["n_runs"], fleet["n_ranks"], fleet["n_steps"], fleet["n_rank_steps"]) == (2, 3, 2, 5)
    assert fleet["step_time_p50_ns"] == 16 * MS  # the trace span is no step
    assert fleet["idle_pct"] == pytest.approx((58 / 4 + 990) / (58 + 1000) * 100)
    # the per-date rows: the trace-only date has a GPU idle % and no step time
    day2 = _row(st, "fleet", "all", "2026-11-02")
    assert pd.isna(day2["step_time_p50_ns"]) and day2["idle_pct"] == pytest.approx(99.0)


def test_run_summary_is_the_fleet_stats_job_row():
    steps, ranks, captures = _tables()
    st = fleet_stats(job_steps_frame(analysis_windows(steps, ranks, captures), captures))
    rs = run_summary(steps, ranks, captures).set_index("value")
    assert sorted(rs.index) == ["steps#0", "trace#0"]
    for value in rs.index:
        row = _row(st, "job", value)
        for c in [c for c in FLEET_STATS.names if c != "value"]:
            a, b = rs.loc[value, c], row[c]
            assert (pd.isna(a) and pd.isna(b)) or a == b, (value, c)
    assert rs.loc["trace#0", "job_id"] == "trace" and rs.loc["trace#0", "attempt"] == 0


def test_regressions_read_profiler_steps_and_impact_counts_one_trace_window():
    steps, ranks, captures = _tables()
    js = job_steps_frame(analysis_windows(steps, ranks, captures), captures)
    assert set(profiler_steps(js)["job_id"]) == {"steps"}
    frames = fleet_frames(js, None, {"captures": captures})
    assert set(frames["regressions"]["job_id"]) == {"steps"}  # a trace span is not compared as a step
    findings = pd.DataFrame(
        [
            dict(job_id="trace", attempt=0, rule="low_gpu_utilization", est_time_lost_per_step_ns=500 * MS, title="t"),
            dict(job_id="steps", attempt=0, rule="low_gpu_utilization", est_time_lost_per_step_ns=2 * MS, title="s"),
        ]
    )
    ff = fleet_findings(findings, js).set_index(["dimension", "value"])
    by_name = ff.loc[("job_name", "trace")]
    assert by_name["n_steps"] == 1 and by_name["time_lost_ns"] == 500 * MS  # its one whole-trace window
    assert ff.loc[("job_name", "steps"), "n_steps"] == 2
    assert (ff.loc[("fleet", "all"), "window_start"], ff.loc[("fleet", "all"), "window_end"]) == (
        "2026-10-27",
        "2026-11-02",
    )
