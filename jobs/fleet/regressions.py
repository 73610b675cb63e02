"""Regressions of a job run against the previous runs with the same job name (``regressions`` table).

Pure pandas: one job name's job steps in, one row per (run, metric) out; :mod:`jobs.fleet.job` applies
it to every job name in parallel (Spark ``applyInPandas``).

Method, per run in ``run_key`` order (manifest ``created_at``, else date; then job id, attempt):

* baseline = the steps of the previous ``baseline_runs`` runs (default 5) of the same job name, pooled;
* per metric (:data:`METRICS`) the run's statistic and the baseline's statistic over the pooled steps:
  ``step_time_p50_ns`` / ``step_time_p90_ns`` of the job step time (slowest rank per step,
  :func:`jobs.fleet.stats.reduce_job_steps`), ``idle_pct`` (Σ idle / Σ kernel time × 100, HTA
  ``idle_time_pctg`` time-weighted) and ``exposed_comm_pct`` (Σ exposed comm / Σ rank step time × 100);
* significance: a two-sided Mann-Whitney U test (``scipy.stats.mannwhitneyu``) of the run's per-step
  values against the baseline's per-step values (step time for the step-time metrics, the per-step
  percentage for the others) — rank-based, so a few outlier steps (a checkpoint, a GC pause) neither
  fake nor hide a shift the way a t-test on means would;
* verdict: ``regression`` when the metric moved the bad way by more than the threshold (relative
  ``threshold_pct`` for times, ``threshold_pp`` percentage points for percentages) and p < ``alpha``;
  ``improvement`` the same the good way; ``no_baseline`` for the first run or with fewer than
  ``MIN_STEPS`` steps on a side; else ``unchanged``.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

#: Metrics compared; for each: (per-step sample column, aggregate function name, lower is better).
METRICS = ("step_time_p50_ns", "step_time_p90_ns", "idle_pct", "exposed_comm_pct")
MIN_STEPS = 3
OUTPUT_COLUMNS = [
    "job_name",
    "job_id",
    "attempt",
    "date",
    "run_index",
    "metric",
    "value",
    "baseline",
    "change_pct",
    "delta",
    "p_value",
    "verdict",
    "baseline_runs",
    "n_steps",
    "n_baseline_steps",
]
#: Input columns (one row per job step).
INPUT_COLUMNS = [
    "job_name",
    "job_id",
    "attempt",
    "run_key",
    "run_date",
    "step",
    "step_time_ns",
    "rank_step_time_ns",
    "kernel_time_ns",
    "idle_time_ns",
    "exposed_comm_ns",
]


def _pct(num: pd.Series, den: pd.Series) -> float | None:
    d = float(den.sum())
    return float(num.sum()) / d * 100.0 if d > 0 else None


def _statistic(metric: str, s: pd.DataFrame) -> float | None:
    """The metric over a set of job steps (see module docstring)."""
    if s.empty:
        return None
    if metric == "step_time_p50_ns":
        return float(np.percentile(s["step_time_ns"].to_numpy(dtype=float), 50))
    if metric == "step_time_p90_ns":
        return float(np.percentile(s["step_time_ns"].to_numpy(dtype=float), 90))
    if metric == "idle_pct":
        return _pct(s["idle_time_ns"], s["kernel_time_ns"])
    if metric == "exposed_comm_pct":
        return _pct(s["exposed_comm_ns"], s["rank_step_time_ns"])
    raise ValueError(f"unknown metric {metric!r}; expected one of {METRICS}")


def _samples(metric: str, s: pd.DataFrame) -> np.ndarray:
    """Per-step values the significance test compares (NaN-free)."""
    if metric.startswith("step_time"):
        v = s["step_time_ns"].to_numpy(dtype=float)
    else:
        num, den = (
            ("idle_time_ns", "kernel_time_ns") if metric == "idle_pct" else ("exposed_comm_ns", "rank_step_time_ns")
        )
        n, d = s[num].to_numpy(dtype=float), s[den].to_numpy(dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            v = np.where(d > 0, n / d * 100.0, np.nan)
    return v[np.isfinite(v)]


def _p_value(a: np.ndarray, b: np.ndarray) -> float | None:
    if len(a) < MIN_STEPS or len(b) < MIN_STEPS:
        return None
    from scipy.stats import mannwhitneyu  # heavy: scipy, only for the significance test

    if np.all(a == a[0]) and np.all(b == a[0]):
        return 1.0  # identical constant samples: no shift
    return float(mannwhitneyu(a, b, alternative="two-sided").pvalue)


def find_regressions(
    job_steps: pd.DataFrame,
    baseline_runs: int = 5,
    threshold_pct: float = 5.0,
    threshold_pp: float = 2.0,
    alpha: float = 0.01,
) -> pd.DataFrame:
    """Compare every run of one or more job names with its previous runs.

    Args:
        job_steps: one row per job step with :data:`INPUT_COLUMNS` (times in ns; ``run_key`` orders
            runs; ``run_date`` is the run's first capture date).
        baseline_runs: how many previous runs form the baseline (≥ 1).
        threshold_pct: relative change of a time metric that counts (%).
        threshold_pp: change of a percentage metric that counts (percentage points).
        alpha: significance level of the Mann-Whitney U test.

    Returns:
        ``regressions`` rows (:data:`OUTPUT_COLUMNS`, schema ``schemas.REGRESSIONS``), one per run and metric.

    Raises:
        ValueError: ``baseline_runs`` < 1 or a missing input column.
    """
    if baseline_runs < 1:
        raise ValueError(f"baseline_runs must be >= 1, got {baseline_runs}")
    missing = [c for c in INPUT_COLUMNS if c not in job_steps.columns]
    if missing:
        raise ValueError(f"job steps lack columns {missing}")
    rows = []
    for name, g in job_steps.groupby("job_name", sort=True):
        runs = (
            g.groupby(["job_id", "attempt"], sort=False)
            .agg(run_key=("run_key", "min"), run_date=("run_date", "min"))
            .reset_index()
            .sort_values(["run_key", "job_id", "attempt"], kind="stable")
            .reset_index(drop=True)
        )
        by_run = {
            (r.job_id, r.attempt): g[(g["job_id"] == r.job_id) & (g["attempt"] == r.attempt)] for r in runs.itertuples()
        }
        for i, r in enumerate(runs.itertuples()):
            cur = by_run[(r.job_id, r.attempt)]
            prev = runs.iloc[max(0, i - baseline_runs) : i]
            base_ids = [(p.job_id, p.attempt) for p in prev.itertuples()]
            base = pd.concat([by_run[k] for k in base_ids]) if base_ids else cur.iloc[0:0]
            for metric in METRICS:
                value, baseline = _statistic(metric, cur), _statistic(metric, base)
                a, b = _samples(metric, cur), _samples(metric, base)
                p = _p_value(a, b)
                delta = value - baseline if value is not None and baseline is not None else None
                change = delta / baseline * 100.0 if delta is not None and baseline else None
                verdict = _verdict(metric, delta, change, p, threshold_pct, threshold_pp, alpha)
                rows.append(
                    {
                        "job_name": name,
                        "job_id": r.job_id,
                        "attempt": int(r.attempt),
                        "date": r.run_date,
                        "run_index": i,
                        "metric": metric,
                        "value": value,
                        "baseline": baseline,
                        "change_pct": change,
                        "delta": delta,
                        "p_value": p,
                        "verdict": verdict,
                        "baseline_runs": [f"{j}#{int(t)}" for j, t in base_ids],
                        "n_steps": int(len(cur)),
                        "n_baseline_steps": int(len(base)),
                    }
                )
    return pd.DataFrame(rows, columns=OUTPUT_COLUMNS)


def _verdict(metric: str, delta, change, p, threshold_pct: float, threshold_pp: float, alpha: float) -> str:
    if delta is None or p is None:
        return "no_baseline"
    moved = (
        (abs(change) > threshold_pct if change is not None else False)
        if metric.startswith("step_time")
        else abs(delta) > threshold_pp
    )
    if not moved or not (p < alpha) or math.isnan(p):
        return "unchanged"
    return "regression" if delta > 0 else "improvement"  # every metric here is lower-is-better
