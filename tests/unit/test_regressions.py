"""Regressions against previous runs of the same job name (jobs/fleet/regressions.py), on job steps
built so the expected verdicts follow from the construction."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from jobs.fleet.regressions import METRICS, find_regressions

MS = 1_000_000


def _run(job_id: str, key: str, step_ms, idle_frac=0.1, exposed_frac=0.05, name="nightly"):
    rows = []
    for i, t in enumerate(step_ms):
        st = int(t * MS)
        rows.append(
            {
                "job_name": name,
                "job_id": job_id,
                "attempt": 0,
                "run_key": key,
                "run_date": key[:10],
                "step": i,
                "step_time_ns": st,
                "rank_step_time_ns": 2 * st,
                "kernel_time_ns": 2 * st,
                "idle_time_ns": int(2 * st * idle_frac),
                "exposed_comm_ns": int(2 * st * exposed_frac),
            }
        )
    return rows


def _jitter(center, n=10, seed=0):
    rng = np.random.default_rng(seed)
    return list(center * (1 + rng.uniform(-0.01, 0.01, n)))


def _frame(*runs):
    return pd.DataFrame([r for run in runs for r in run])


def _verdicts(out, job):
    r = out[out["job_id"] == job]
    return dict(zip(r["metric"], r["verdict"]))


def test_step_time_regression_is_found_against_previous_runs():
    out = find_regressions(
        _frame(
            _run("r0", "2026-11-01T00:00:00Z", _jitter(100, seed=0)),
            _run("r1", "2026-11-02T00:00:00Z", _jitter(100, seed=1)),
            _run("r2", "2026-11-03T00:00:00Z", _jitter(130, seed=2)),  # 30 % slower
        )
    )
    assert set(out["metric"]) == set(METRICS) and len(out) == 3 * len(METRICS)
    assert set(_verdicts(out, "r0").values()) == {"no_baseline"}
    assert _verdicts(out, "r1")["step_time_p50_ns"] == "unchanged"
    r2 = out[(out["job_id"] == "r2") & (out["metric"] == "step_time_p50_ns")].iloc[0]
    assert r2["verdict"] == "regression"
    assert r2["baseline_runs"] == ["r0#0", "r1#0"] and r2["n_baseline_steps"] == 20 and r2["n_steps"] == 10
    assert r2["change_pct"] == pytest.approx(30, abs=2) and r2["p_value"] < 1e-4
    assert r2["run_index"] == 2
    # same fractions of the step: the percentages did not move
    assert _verdicts(out, "r2")["idle_pct"] == "unchanged"


def test_improvement_and_idle_regression():
    out = find_regressions(
        _frame(
            _run("a", "2026-11-01", _jitter(100, seed=3), idle_frac=0.10),
            _run("b", "2026-11-02", _jitter(80, seed=4), idle_frac=0.25),
        )
    )
    v = _verdicts(out, "b")
    assert v["step_time_p50_ns"] == "improvement" and v["step_time_p90_ns"] == "improvement"
    assert v["idle_pct"] == "regression"
    idle = out[(out["job_id"] == "b") & (out["metric"] == "idle_pct")].iloc[0]
    assert idle["value"] == pytest.approx(25, abs=0.01) and idle["delta"] == pytest.approx(15, abs=0.01)


def test_small_change_or_few_steps_is_not_a_regression():
    out = find_regressions(
        _frame(
            _run("a", "2026-11-01", _jitter(100, seed=5)),
            _run("b", "2026-11-02", _jitter(103, seed=6)),  # 3 % < 5 % threshold, even if significant
            _run("c", "2026-11-03", [200, 210]),  # 2 steps: too few for a test
        )
    )
    assert _verdicts(out, "b")["step_time_p50_ns"] == "unchanged"
    c = out[(out["job_id"] == "c") & (out["metric"] == "step_time_p50_ns")].iloc[0]
    assert c["verdict"] == "no_baseline" and pd.isna(c["p_value"]) and c["value"] == pytest.approx(205 * MS)


def test_baseline_is_the_previous_runs_in_order_and_names_are_separate():
    runs = [_run(f"r{i}", f"2026-11-{i + 1:02d}", _jitter(100, seed=i)) for i in range(8)]
    other = _run("x0", "2026-10-01", _jitter(500, seed=99), name="other-job")
    # rows shuffled: order comes from run_key, not from the input order
    df = _frame(*runs, other).sample(frac=1, random_state=0)
    out = find_regressions(df, baseline_runs=3)
    r7 = out[(out["job_id"] == "r7")].iloc[0]
    assert r7["baseline_runs"] == ["r4#0", "r5#0", "r6#0"] and r7["run_index"] == 7
    assert set(_verdicts(out, "x0").values()) == {"no_baseline"}  # its own name: no baseline


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="baseline_runs"):
        find_regressions(_frame(_run("a", "k", [1, 2, 3])), baseline_runs=0)
    with pytest.raises(ValueError, match="lack columns"):
        find_regressions(pd.DataFrame({"job_name": ["a"]}))
