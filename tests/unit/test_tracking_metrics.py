"""Collective, straggler and regression metrics logged to MLflow (jobs/publish/tracking.py), on tiny frames."""

from __future__ import annotations

import pandas as pd
import pytest

from jobs.publish.tracking import collective_metrics, regression_metrics


def _calls():
    """3 calls on 3 ranks; rank 2 arrives last in calls 0 and 1, rank 0 in call 2."""
    rows = []
    last = {0: 2, 1: 2, 2: 0}
    for call in range(3):
        for rank in range(3):
            is_last = rank == last[call]
            rows.append(
                {
                    "job_id": "j",
                    "attempt": 0,
                    "rank": rank,
                    "match_key": f"pg0/allreduce/{call}",
                    "wait_ns": 0 if is_last else 4_000_000,
                    "skew_ns": 4_000_000 + call,
                    "is_last_arrival": is_last,
                    "n_ranks_matched": 3,
                    "busbw_gbps": 10.0 * (rank + 1),
                }
            )
    # an unmatched call (seen on one rank only) must not count toward the straggler
    rows.append(
        {
            "job_id": "j",
            "attempt": 0,
            "rank": 1,
            "match_key": "pg0/allreduce/9",
            "wait_ns": 0,
            "skew_ns": 0,
            "is_last_arrival": True,
            "n_ranks_matched": 1,
            "busbw_gbps": None,
        }
    )
    return pd.DataFrame(rows)


def test_collective_and_straggler_metrics():
    steps = pd.DataFrame({"step_time_ns": [100, 100], "exposed_comm_ns": [10, 30]})
    m, tags = collective_metrics(_calls(), steps)
    assert m["exposed_comm_pct"] == pytest.approx(20.0)
    assert m["collectives/n_calls"] == 4
    assert m["straggler/rank"] == 2 and tags == {"tracelake.straggler_rank": "2"}
    assert m["straggler/last_arrival_pct"] == pytest.approx(200 / 3)
    assert m["collectives/skew_ms_max"] == pytest.approx(4.000002)
    assert m["collectives/wait_ms_mean"] == pytest.approx(6 * 4 / 10)  # 6 waiting rank-calls of 10 rows
    assert m["collectives/busbw_gbps_p50"] == pytest.approx(20.0)


def test_cpu_only_job_has_no_exposed_communication_metric():
    steps = pd.DataFrame({"step_time_ns": [100], "exposed_comm_ns": [0], "kernel_time_ns": [None]})
    m, _ = collective_metrics(_calls(), steps)
    assert "exposed_comm_pct" not in m and m["straggler/rank"] == 2


def test_no_collectives_gives_no_straggler():
    m, tags = collective_metrics(None, pd.DataFrame({"step_time_ns": [5], "exposed_comm_ns": [None]}))
    assert m == {} and tags == {}


def test_regression_metrics_and_overall_verdict():
    regs = pd.DataFrame(
        [
            {
                "metric": "step_time_p50_ns",
                "change_pct": 12.0,
                "delta": 1.2e6,
                "p_value": 1e-5,
                "verdict": "regression",
            },
            {"metric": "idle_pct", "change_pct": None, "delta": -3.0, "p_value": 0.001, "verdict": "improvement"},
        ]
    )
    m, tags = regression_metrics(regs)
    assert tags == {"tracelake.regression": "regression"}
    assert m["regression/step_time_p50_ns/change_pct"] == 12.0 and m["regression/idle_pct/delta"] == -3.0
    assert "regression/idle_pct/change_pct" not in m
    first = pd.DataFrame(
        [{"metric": "idle_pct", "change_pct": None, "delta": None, "p_value": None, "verdict": "no_baseline"}]
    )
    assert regression_metrics(first) == ({}, {"tracelake.regression": "no_baseline"})
