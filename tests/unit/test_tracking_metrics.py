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
    assert "exposed_comm_pct" not in m  # a headline number: job_metrics (run_summary) logs it
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
    noisy = pd.DataFrame(
        [
            {
                "metric": "step_time_p50_ns",
                "change_pct": 900.0,
                "delta": 5e7,
                "p_value": 0.065,
                "p_adjusted": 0.13,
                "change_ci_low_pct": -21.0,
                "change_ci_high_pct": 1290.0,
                "verdict": "inconclusive",
            },
            {"metric": "idle_pct", "change_pct": 1.0, "delta": 0.1, "p_value": 0.5, "verdict": "unchanged"},
        ]
    )
    m, tags = regression_metrics(noisy)
    assert tags == {"tracelake.regression": "inconclusive"}  # not "unchanged": one metric could not be decided
    assert m["regression/step_time_p50_ns/change_ci_low_pct"] == -21.0
    assert m["regression/step_time_p50_ns/p_adjusted"] == 0.13


def _job(n_steps: int, ranks=(0, 1)):
    """steps/ranks/captures of one run: each rank-step 10 ms + rank ms, GPU span = the step, 25 % of it idle,
    exposed communication 1 ms per rank-step."""
    ms = 1_000_000
    key = {"date": "2026-01-01", "job_id": "j", "attempt": 0}
    steps = pd.DataFrame(
        [
            {
                **key,
                "rank": r,
                "capture_id": f"c{r}",
                "step": s,
                "step_time_ns": (10 + r) * ms,
                "kernel_time_ns": (10 + r) * ms,
                "idle_time_ns": (10 + r) * ms // 4,
                "compute_time_ns": (10 + r) * ms // 2,
                "exposed_comm_ns": ms,
            }
            for r in ranks
            for s in range(n_steps)
        ]
    )
    rk = pd.DataFrame(
        [
            {**key, "rank": r, "capture_id": f"c{r}", "idle_pct": 25.0, "compute_pct": 50.0, "overlap_pct": None}
            for r in ranks
        ]
    )
    meta = dict.fromkeys(("job_name", "model", "device_name", "torch_version", "created_at", "world_size"))
    caps = pd.DataFrame([{**key, **meta, "rank": r, "capture_id": f"c{r}", "status": "ingested"} for r in ranks])
    return steps, rk, caps


def test_job_metrics_headline_is_run_summary_with_job_and_rank_step_counts():
    from jobs.fleet.stats import run_summary
    from jobs.publish.tracking import job_metrics

    steps, ranks, caps = _job(3)
    m = job_metrics(ranks, steps, caps)
    row = run_summary(steps, ranks, caps).iloc[0]
    assert m["n_steps"] == 3 and m["n_rank_steps"] == 6 and m["n_ranks"] == 2  # job steps vs rank-steps
    assert m["step_time_p50_ms"] == row["step_time_p50_ns"] / 1e6 == 11.0  # slowest rank per step
    assert m["step_time_p90_ms"] == row["step_time_p90_ns"] / 1e6
    assert m["idle_pct"] == pytest.approx(row["idle_pct"]) and m["idle_pct"] == pytest.approx(25.0)
    assert m["exposed_comm_pct"] == pytest.approx(row["exposed_comm_pct"]) == pytest.approx(200 / 21)
    assert m["non_compute_pct"] == pytest.approx(100 - m["idle_pct"] - m["compute_pct"])


def _coverage(statuses: dict[str, str], reason: str | None = None) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "date": "d",
                "job_id": "j",
                "attempt": 0,
                "rule": r,
                "status": st,
                "reason": None if st == "ran" else reason,
                "n_ranks": 1,
                "n_windows": 1,
                "n_findings": 0,
            }
            for r, st in statuses.items()
        ]
    )


def test_verdict_tags_never_say_none_unless_the_job_was_judged_ok():
    from jobs.publish.tracking import finding_metrics

    ok = _coverage({"host_bound_launch": "ran", "straggler_rank": "not_applicable"}, "one rank")
    m, t = finding_metrics(None, ok)
    assert t == {"tracelake.top_finding": "none", "tracelake.verdict": "ok"}
    assert m["coverage/n_rules_ran"] == 1 and m["coverage/n_rules_not_applicable"] == 1
    assert m["coverage/n_rules_not_run"] == 0
    cpu = _coverage(
        {"host_bound_launch": "not_run", "low_gpu_utilization": "not_run"}, "CPU-only trace: no GPU activity"
    )
    m, t = finding_metrics(pd.DataFrame(columns=["rule", "rank_order", "est_time_lost_per_step_ns"]), cpu)
    assert t == {"tracelake.top_finding": "not_judged", "tracelake.verdict": "not_judged"}
    part = _coverage({"host_bound_launch": "ran", "low_gpu_utilization": "not_run"}, "no GPU activity")
    assert finding_metrics(None, part)[1]["tracelake.verdict"] == "partly_judged"
    m, t = finding_metrics(None, None)  # an old warehouse: no rule_coverage table
    assert t == {"tracelake.top_finding": "coverage_unknown", "tracelake.verdict": "coverage_unknown"}
    assert not any(k.startswith("coverage/") for k in m)
    f = pd.DataFrame([{"rule": "blocking_sync", "rank_order": 1, "est_time_lost_per_step_ns": 2_000_000}])
    m, t = finding_metrics(f, ok)
    assert t == {"tracelake.top_finding": "blocking_sync", "tracelake.verdict": "findings"}
    assert m["finding/blocking_sync/lost_ms_per_step"] == 2.0


def test_run_link_opens_the_run_on_a_server_and_names_it_elsewhere():
    from jobs.publish.tracking import run_link

    assert run_link("http://127.0.0.1:5000/", "3", "abc") == "http://127.0.0.1:5000/#/experiments/3/runs/abc"
    assert (
        run_link("https://mlflow.example", "3", "abc", "report/job_report.html")
        == "https://mlflow.example/#/experiments/3/runs/abc/artifacts/report/job_report.html"
    )
    assert run_link("sqlite:///w/mlflow.db", "3", "abc") == "run abc of sqlite:///w/mlflow.db"


def test_a_half_made_sqlite_store_is_moved_aside_and_built_again(tmp_path):
    """Issue 33: a run killed while MLflow created its tables left ``mlflow.db`` half made, and every later run
    failed with "table … already exists". A new store is built in a temporary file and renamed into place; a
    half-made one (tables without MLflow's schema version) is moved aside and built again."""
    import sqlite3

    from mlflow.tracking import MlflowClient

    from jobs.publish.tracking import sqlite_store_ready

    db = tmp_path / "mlflow.db"
    with sqlite3.connect(db) as con:  # what a kill during creation leaves: some tables, no alembic_version row
        con.execute("CREATE TABLE experiments (experiment_id INTEGER PRIMARY KEY, name TEXT)")
    sqlite_store_ready(db)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("mlflow.db")) == [
        "mlflow.db",
        next(p.name for p in tmp_path.iterdir() if p.name.startswith("mlflow.db.broken-")),
    ]
    assert not list(tmp_path.glob(".mlflow.db.*.creating"))
    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    assert client.get_experiment(client.create_experiment("after-the-crash")).name == "after-the-crash"
    before = db.stat().st_mtime_ns
    sqlite_store_ready(db)  # a complete store is left as it is
    assert db.stat().st_mtime_ns == before
