"""``fleet_findings`` (jobs/fleet/impact.py) on a small hand-built fleet: the ranking and the numbers equal
ones computed by hand from the estimate's definition."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from jobs.fleet.impact import fleet_findings, fleet_ops
from schemas import FLEET_FINDINGS, FLEET_OPS

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


def _op(job, rank, op, shapes, kernel_ns, roofline_pct, attempt=0, device="NVIDIA H100", dtype="c10::BFloat16"):
    return {
        "job_id": job,
        "attempt": attempt,
        "rank": rank,
        "device_name": device,
        "op_name": op,
        "kind": "gemm",
        "shape_sig": shapes,
        "dtype": dtype,
        "precision": "bf16",
        "n_calls": 10,
        "kernel_time_ns": kernel_ns,
        "roofline_pct": roofline_pct,
        "bound": "compute",
        "top_kernel": "sm90_gemm",
    }


def test_fleet_ops_by_hand(fleet):
    _, js = fleet
    oe = pd.DataFrame(
        [
            _op("a", 0, "aten::mm", "[8,8]x[8,8]", 7e9, 35.0),  # half the attainable 70 %: recovers half
            _op("a", 1, "aten::mm", "[8,8]x[8,8]", 7e9, 35.0),
            _op("b", 0, "aten::mm", "[8,8]x[8,8]", 1e9, 7.0),  # 0.9 of it, 2 of 16 ranks traced
            _op("b", 0, "aten::addmm", "[4]x[4,4]", 5e9, 80.0),  # above the attainable share: nothing to gain
            _op("a", 0, "aten::bmm", "[2,2]", 5e9, None, device="unknown"),  # no roofline: left out
            _op("c", 0, "aten::mm", "[8,8]x[8,8]", 9e12, 1.0),  # outside the window
        ]
    )
    out = fleet_ops(oe, js)
    assert list(out.columns) == FLEET_OPS.names
    top = out[out["dimension"] == "fleet"].set_index("op_name")
    mm = top.loc["aten::mm"]
    # a: 3.5 s recoverable on each of its 2 ranks (8 traced, 8 accelerators); b: 0.9 s on rank 0, of the 2 ranks
    # traced of 16 (a traced rank without the op counts as one without recoverable time)
    assert mm["recoverable_ns"] == round(3.5e9 * 2 + 0.9e9)
    assert mm["accelerator_hours"] == pytest.approx((7e9 * 8 / 8 + 0.9e9 * 16 / 2) / H)
    assert mm["accelerator_hours_per_day"] == pytest.approx(mm["accelerator_hours"] / 7)
    assert mm["roofline_pct"] == pytest.approx((35 * 14e9 + 7 * 1e9) / 15e9)
    assert (mm["n_jobs"], mm["n_runs"], mm["n_calls"], mm["kernel_time_ns"]) == (2, 2, 30, 15e9)
    assert list(mm["top_jobs"]) == ["b#0", "a#0"] and list(mm["device_names"]) == ["NVIDIA H100"]
    assert top.loc["aten::addmm", "recoverable_ns"] == 0 and "aten::bmm" not in top.index
    assert list(top.sort_values("impact_rank").index) == ["aten::mm", "aten::addmm"]
    assert (out["recoverable_ns"] <= out["kernel_time_ns"]).all()
    assert set(out.loc[out["dimension"] == "job_name", "value"]) == {"train"}
    assert fleet_ops(oe.iloc[0:0], js).empty and fleet_ops(None, js).empty


def test_a_declared_world_size_weighs_at_most_256_accelerators_per_rank_traced():
    """A corrupt or hostile manifest's world size (a 1-rank 4 ms capture declaring 2^31 - 1 ranks) cannot outweigh
    the fleet: the estimate takes at most WORLD_PER_TRACED_RANK accelerators per rank traced."""
    from jobs.fleet.impact import WORLD_PER_TRACED_RANK, run_sizes

    js = pd.DataFrame(
        _steps("huge", 0, 1, 1, "2026-03-10", "x", world=2147483647)
        + _steps("real", 0, 1, 2, "2026-03-10", "y", world=64)
        + _steps("none", 0, 1, 3, "2026-03-10", "z")
    )
    acc = run_sizes(js).set_index("job_id")["accelerators"]
    assert acc["huge"] == WORLD_PER_TRACED_RANK == 256 and acc["real"] == 64 and acc["none"] == 3
    f = pd.DataFrame([_finding("huge", "host_bound_launch", 4e6)])
    out = fleet_findings(f, js)
    assert out[out["dimension"] == "fleet"]["accelerator_hours"].iloc[0] == pytest.approx(4e6 * 1 * 256 / H)
