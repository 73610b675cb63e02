"""``fleet_findings`` (jobs/fleet/impact.py) on a small hand-built fleet: the ranking and the numbers equal
ones computed by hand from the estimate's definition."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from jobs.fleet.impact import fleet_findings
from schemas import FLEET_FINDINGS

H = 3.6e12  # ns per hour


def _steps(job, attempt, n_steps, ranks, date, job_name, hardware="NVIDIA H100", world=None, model="m"):
    return [
        {
            "job_id": job,
            "attempt": attempt,
            "step": s,
            "ranks": np.arange(ranks, dtype="int32"),
            "world_size": world,
            "job_name": job_name,
            "model": model,
            "hardware": hardware,
            "run_date": date,
        }
        for s in range(n_steps)
    ]


def _finding(job, rule, est, attempt=0, title=None):
    return {
        "job_id": job,
        "attempt": attempt,
        "rule": rule,
        "est_time_lost_per_step_ns": est,
        "title": title or f"{rule} in {job}",
    }


@pytest.fixture()
def fleet():
    js = pd.DataFrame(
        _steps("a", 0, 10, 8, "2026-03-10", "train")  # 8 ranks, 10 steps
        + _steps("b", 0, 4, 2, "2026-03-09", "train", world=16)  # 2 ranks traced of 16
        + _steps("c", 0, 5, 1, "2026-03-01", "eval", hardware="cpu")  # outside a 7-day window ending 03-10
        + _steps("d", 0, 3, 1, "unknown", "eval")
    )  # no date: never in a window
    f = pd.DataFrame(
        [
            _finding("a", "straggler_rank", 2e6),
            _finding("a", "host_bound_launch", 1e6),
            _finding("a", "host_bound_launch", 3e6, title="rank 3"),  # the rule on two ranks: the larger counts
            _finding("b", "host_bound_launch", 5e6),
            _finding("b", "exposed_communication", None),
            _finding("c", "straggler_rank", 9e9),
            _finding("d", "straggler_rank", 9e9),
        ]
    )
    return f, js


def test_fleet_ranking_by_hand(fleet):
    f, js = fleet
    out = fleet_findings(f, js)
    assert list(out.columns) == FLEET_FINDINGS.names
    top = out[out["dimension"] == "fleet"].set_index("rule")
    # host_bound_launch: a 3 ms × 10 steps × 8 GPUs, b 5 ms × 4 steps × 16 (world size, not the 2 ranks traced)
    hbl = (3e6 * 10 * 8 + 5e6 * 4 * 16) / H
    strag = 2e6 * 10 * 8 / H  # c is outside the window, d has no date
    assert top.loc["host_bound_launch", "accelerator_hours"] == pytest.approx(hbl)
    assert top.loc["host_bound_launch", "accelerator_hours_per_day"] == pytest.approx(hbl / 7)
    assert top.loc["straggler_rank", "accelerator_hours"] == pytest.approx(strag)
    assert list(top.sort_values("impact_rank").index) == ["host_bound_launch", "straggler_rank"]
    assert "exposed_communication" not in top.index  # no estimate
    r = top.loc["host_bound_launch"]
    assert (r["n_jobs"], r["n_runs"], r["n_steps"], r["time_lost_ns"]) == (2, 2, 14, 3e6 * 10 + 5e6 * 4)
    assert list(r["top_jobs"]) == ["b#0", "a#0"] and r["example_title"] == "host_bound_launch in b"
    assert (r["window_start"], r["window_end"], r["window_days"]) == ("2026-03-04", "2026-03-10", 7)
    by_name = out[(out["dimension"] == "job_name")]
    assert set(by_name["value"]) == {"train"} and set(out[out["dimension"] == "hardware"]["value"]) == {"NVIDIA H100"}


def test_window_days(fleet):
    f, js = fleet
    wide = fleet_findings(f, js, window_days=30)
    top = wide[wide["dimension"] == "fleet"].set_index("rule")
    strag = (2e6 * 10 * 8 + 9e9 * 5 * 1) / H  # c now inside; d still has no date
    assert top.loc["straggler_rank", "accelerator_hours"] == pytest.approx(strag)
    assert top.loc["straggler_rank", "impact_rank"] == 1
    assert set(wide[wide["dimension"] == "hardware"]["value"]) == {"NVIDIA H100", "cpu"}
    with pytest.raises(ValueError, match="window_days"):
        fleet_findings(f, js, window_days=0)


def test_empty_inputs():
    assert fleet_findings(None, None).empty and list(fleet_findings(None, None).columns) == FLEET_FINDINGS.names


def test_report_section_and_fleet_run_metrics(fleet):
    from jobs.publish.report.fleet_tables import impact_metrics, impact_section

    f, js = fleet
    out = fleet_findings(f, js)
    sec = impact_section(out)
    assert [p.key for p in sec.plots] == ["recoverable_hours"] and sec.tables and not sec.status
    assert "2026-03-04 … 2026-03-10" in sec.intro
    m = impact_metrics(out)
    fleet_rows = out[out["dimension"] == "fleet"].set_index("rule")
    assert m["fleet/impact/host_bound_launch/accelerator_hours_per_day"] == pytest.approx(
        fleet_rows.loc["host_bound_launch", "accelerator_hours_per_day"]
    )
    assert m["fleet/impact/host_bound_launch/n_runs"] == 2.0
    assert m["fleet/impact/top_accelerator_hours_per_day"] == pytest.approx(
        fleet_rows["accelerator_hours_per_day"].max()
    )
    assert impact_section(None).status == "unavailable" and impact_metrics(None) == {}
