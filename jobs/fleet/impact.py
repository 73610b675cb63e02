"""Findings ranked by fleet impact: the ``fleet_findings`` table (issue 15).

Per rule and fleet group (the whole fleet, a ``job_name``, a ``model``, a ``hardware``), over a window of
capture dates (default the last 7 days with captures): how many jobs and runs the rule fired in, the
time it cost, and the accelerator-hours per day that fixing it would recover.

The estimate, per run (job_id, attempt) in which the rule fired:

* time lost per step = the rule's ``findings.est_time_lost_per_step_ns`` (the largest when the rule fired
  on several ranks of the run: ranks run in lockstep, so the slowest rank's loss sets the step);
* × the run's job steps in the warehouse (``steps``, ProfilerSteps captured: the profiled window, so the
  hours are those of the captured steps, a lower bound for a run that trained longer); a run without
  ProfilerStep counts its one whole-trace analysis window (its rules judged the whole trace as one window);
* × the accelerators that wait: the run's world size (the manifest's or the trace's ``world_size``, at
  least the ranks traced and at most :data:`WORLD_PER_TRACED_RANK` per rank traced), since a step is as long on
  every rank.

Accelerator-hours per day = that sum over the window's runs ÷ the window's days. Estimates of different
rules overlap (one cause can show in several rules): they rank the rules, they do not add up. Runs whose
capture date is unknown are left out of every window.

``fleet_ops`` ranks op groups (op, shapes, dtype) the same way, by the device time they would save at the attainable
share of their roofline (the ``kernels_below_peak`` estimate, :func:`jobs.analyze.efficiency.ops.recoverable_ops`),
scaled from the traced ranks to the run's accelerators: which kernels are worth tuning, fleet-wide.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from jobs.analyze.efficiency.ops import recoverable_ops
from jobs.analyze.windows import WINDOW_TRACE
from jobs.fleet.stats import NONE_VALUE
from jobs.fleet.window import WINDOW_DAYS, capture_days, check_window_days, window
from schemas import FLEET_FINDINGS, FLEET_OPS

#: Fleet groups of ``fleet_findings`` (a subset of :data:`jobs.fleet.stats.DIMENSIONS`).
IMPACT_DIMENSIONS = ("fleet", "job_name", "model", "hardware")
TOP_JOBS = 3
#: Op groups kept per fleet group in ``fleet_ops`` (the most accelerator-hours first).
TOP_OPS = 100
_NS_PER_HOUR = 3.6e12
#: A run's declared world size weighs its fleet impact up to this many accelerators per rank traced: the capture hooks
#: trace every rank or a sample of them, so a 1-rank capture declaring 2^31 ranks (a corrupt or hostile manifest)
#: cannot outweigh the fleet.
WORLD_PER_TRACED_RANK = 256


def run_sizes(job_steps: pd.DataFrame) -> pd.DataFrame:
    """One row per run of :func:`jobs.fleet.stats.job_steps_frame` rows: ``job_id, attempt, job_name, model,
    hardware, run_date, n_steps`` (job steps: its ProfilerSteps, or 1 for a run with only its whole-trace window),
    ``n_ranks`` (ranks traced) and ``accelerators`` (world size, at least the ranks traced, at most
    :data:`WORLD_PER_TRACED_RANK` per rank traced)."""
    js = job_steps
    if "window" in js.columns:
        is_trace = (js["window"] == WINDOW_TRACE).to_numpy(dtype=bool)
        has_steps = pd.Series(~is_trace, index=js.index).groupby([js["job_id"], js["attempt"]]).transform("any")
        js = js[~is_trace | ~has_steps.to_numpy(dtype=bool)]  # a run's trace window counts only without steps
    n_ranks = js["ranks"].map(len) if "ranks" in js else pd.Series(1, index=js.index)
    world = (
        pd.to_numeric(js["world_size"], errors="coerce") if "world_size" in js else pd.Series(np.nan, index=js.index)
    )
    js = js.assign(_ranks=n_ranks, _world=world)
    g = js.groupby(["job_id", "attempt"], sort=True)
    runs = pd.DataFrame(
        {
            "job_name": g["job_name"].first(),
            "model": g["model"].first(),
            "hardware": g["hardware"].first(),
            "run_date": g["run_date"].first(),
            "n_steps": g["step"].nunique(),
            "n_ranks": g["_ranks"].max().astype(int),
            # the declared world size, bounded by what the captures show: at most WORLD_PER_TRACED_RANK per rank traced
            "accelerators": np.fmax(
                g["_ranks"].max().astype(float),
                np.minimum(g["_world"].max().astype(float), g["_ranks"].max().astype(float) * WORLD_PER_TRACED_RANK),
            ),
        }
    )
    return runs.reset_index()


def by_dimension(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` once per :data:`IMPACT_DIMENSIONS` group kind, with ``dimension`` and its ``value`` (``all`` for
    ``fleet``; :data:`jobs.fleet.stats.NONE_VALUE` where the run does not say)."""
    parts = []
    for d in IMPACT_DIMENSIONS:
        value = "all" if d == "fleet" else rows[d].astype(object).where(rows[d].notna(), NONE_VALUE).astype(str)
        parts.append(rows.assign(dimension=d, value=value))
    return pd.concat(parts, ignore_index=True)


def window_runs(
    job_steps: pd.DataFrame | None, window_days: int
) -> tuple[pd.DataFrame, pd.Timestamp, pd.Timestamp] | None:
    """``(runs, start, end)``: the :func:`run_sizes` rows of the runs captured in the ``window_days`` capture dates
    ending at the newest one (:func:`jobs.fleet.window.window`), or ``None`` when no run has a capture date."""
    if job_steps is None or not len(job_steps):
        return None
    runs = run_sizes(job_steps)
    runs["day"] = capture_days(runs["run_date"])
    span = window(runs["day"], window_days)
    if span is None:
        return None
    return runs[runs["day"] >= span[0]], span[0], span[1]


def fleet_findings(
    findings: pd.DataFrame | None, job_steps: pd.DataFrame | None, window_days: int = WINDOW_DAYS, top: int = TOP_JOBS
) -> pd.DataFrame:
    """The ``fleet_findings`` table (columns of :data:`schemas.FLEET_FINDINGS`): the module's estimate per
    (dimension, value, rule), over the ``window_days`` capture dates ending at the newest one.

    Args:
        findings: the ``findings`` table (pandas); job_steps: :func:`jobs.fleet.stats.job_steps_frame` rows.
        window_days: days in the window (≥ 1); top: example runs kept per row (``top_jobs``).

    Returns:
        Rows sorted by dimension, value and ``impact_rank`` (1 = most accelerator-hours per day in the
        group); empty when no finding of a dated run has an estimate.

    Raises:
        ValueError: ``window_days`` < 1.
    """
    check_window_days(window_days)
    empty = pd.DataFrame(columns=FLEET_FINDINGS.names)
    if findings is None or not len(findings) or (w := window_runs(job_steps, window_days)) is None:
        return empty
    runs, start, end = w
    f = findings[["job_id", "attempt", "rule", "est_time_lost_per_step_ns", "title"]]
    f = f[pd.to_numeric(f["est_time_lost_per_step_ns"], errors="coerce").notna()]
    f = f.assign(attempt=f["attempt"].astype(int), est=pd.to_numeric(f["est_time_lost_per_step_ns"]).astype(float))
    # one loss per (run, rule): the largest of the rule's findings in the run (ranks run in lockstep)
    f = f.sort_values(["job_id", "attempt", "rule", "est", "title"], ascending=[True, True, True, False, True])
    f = f.drop_duplicates(["job_id", "attempt", "rule"])
    f = f.merge(runs.assign(attempt=runs["attempt"].astype(int)), on=["job_id", "attempt"], how="inner")
    if not len(f):
        return empty
    f["lost_ns"] = f["est"] * f["n_steps"]
    f["accel_ns"] = f["lost_ns"] * f["accelerators"]
    f["run"] = f["job_id"].astype(str) + "#" + f["attempt"].astype(str)
    st = by_dimension(f)
    rows = []
    for (dim, value, rule), g in st.groupby(["dimension", "value", "rule"], sort=True):
        g = g.sort_values(["accel_ns", "run"], ascending=[False, True])
        hours = float(g["accel_ns"].sum()) / _NS_PER_HOUR
        rows.append(
            {
                "dimension": dim,
                "value": value,
                "rule": rule,
                "window_start": start.strftime("%Y-%m-%d"),
                "window_end": end.strftime("%Y-%m-%d"),
                "window_days": int(window_days),
                "n_jobs": int(g["job_id"].nunique()),
                "n_runs": len(g),
                "n_steps": int(g["n_steps"].sum()),
                "time_lost_ns": int(round(g["lost_ns"].sum())),
                "accelerator_hours": hours,
                "accelerator_hours_per_day": hours / window_days,
                "top_jobs": list(g["run"].head(top)),
                "example_title": g["title"].iloc[0],
            }
        )
    out = pd.DataFrame(rows)
    out["impact_rank"] = (
        out.sort_values(["accelerator_hours_per_day", "rule"], ascending=[False, True])
        .groupby(["dimension", "value"])
        .cumcount()
        + 1
    ).sort_index()
    return out.sort_values(["dimension", "value", "impact_rank"]).reset_index(drop=True)[FLEET_FINDINGS.names]


def fleet_ops(
    op_efficiency: pd.DataFrame | None,
    job_steps: pd.DataFrame | None,
    window_days: int = WINDOW_DAYS,
    top: int = TOP_JOBS,
    top_ops: int = TOP_OPS,
) -> pd.DataFrame:
    """The ``fleet_ops`` table (columns of :data:`schemas.FLEET_OPS`): op groups (op name, shape signature, dtype)
    ranked per fleet group by the accelerator-hours per day that running them at the attainable share of their
    roofline would recover, over the same window as :func:`fleet_findings`.

    Per run: Σ over its traced ranks of :func:`jobs.analyze.efficiency.ops.recoverable_ops` (ns of device time, over
    the captured trace) × accelerators / ranks traced (the untraced ranks of a data-parallel job run the same ops).

    Args:
        op_efficiency: the ``op_efficiency`` table (pandas); job_steps: :func:`jobs.fleet.stats.job_steps_frame`
            rows; window_days: days in the window (≥ 1); top: example runs per row; top_ops: rows kept per group.

    Returns:
        Rows sorted by dimension, value and ``impact_rank`` (1 = most accelerator-hours per day in the group); empty
        when no op of a dated run has a roofline (unknown device, no recorded shapes).

    Raises:
        ValueError: ``window_days`` < 1.
    """
    check_window_days(window_days)
    empty = pd.DataFrame(columns=FLEET_OPS.names)
    if op_efficiency is None or not len(op_efficiency) or (w := window_runs(job_steps, window_days)) is None:
        return empty
    runs, start, end = w
    o = recoverable_ops(op_efficiency)
    o = o.assign(attempt=pd.to_numeric(o["attempt"]).astype(int))
    o = o.merge(runs.assign(attempt=runs["attempt"].astype(int)), on=["job_id", "attempt"], how="inner")
    if not len(o):
        return empty
    num = {c: pd.to_numeric(o[c], errors="coerce").fillna(0.0) for c in ("n_calls", "kernel_time_ns", "roofline_pct")}
    o = o.assign(**num, dtype=o["dtype"].fillna(NONE_VALUE), device_name=o["device_name"].fillna(NONE_VALUE))
    o["accel_ns"] = o["recoverable_ns"] * o["accelerators"] / o["n_ranks"].clip(lower=1)
    o["_weighted_pct"] = o["roofline_pct"] * o["kernel_time_ns"]
    o["run"] = o["job_id"].astype(str) + "#" + o["attempt"].astype(str)
    # whatever order an engine read the rows in: a group's kind, bound and top kernel are its longest row's
    o = o.sort_values(
        ["kernel_time_ns", "run", "rank", "top_kernel"], ascending=[False, True, True, True], na_position="last"
    )
    keys = ["dimension", "value", "op_name", "shape_sig", "dtype"]
    st = by_dimension(o)
    per_run = st.groupby([*keys, "run"], sort=False)["accel_ns"].sum().rename("run_ns").reset_index()
    per_run = per_run.sort_values([*keys, "run_ns", "run"], ascending=[True] * 5 + [False, True])
    tops = per_run.groupby(keys, sort=False)["run"].agg(lambda r: list(r.head(top)))
    g = st.groupby(keys, sort=True)
    out = g.agg(
        kind=("kind", "first"),
        precision=("precision", "first"),
        bound=("bound", "first"),
        n_jobs=("job_id", "nunique"),
        n_runs=("run", "nunique"),
        n_calls=("n_calls", "sum"),
        kernel_time_ns=("kernel_time_ns", "sum"),
        recoverable_ns=("recoverable_ns", "sum"),
        accel_ns=("accel_ns", "sum"),
        weighted=("_weighted_pct", "sum"),
        top_kernel=("top_kernel", "first"),
    ).reset_index()
    out["device_names"] = list(g["device_name"].agg(lambda d: sorted(set(d))))
    out["top_jobs"] = out.set_index(keys).index.map(tops).tolist()
    out["roofline_pct"] = out["weighted"] / out["kernel_time_ns"].astype(float).replace(0, np.nan)
    out["accelerator_hours"] = out["accel_ns"] / _NS_PER_HOUR
    out["accelerator_hours_per_day"] = out["accelerator_hours"] / window_days
    out["window_start"], out["window_end"] = start.strftime("%Y-%m-%d"), end.strftime("%Y-%m-%d")
    out["window_days"] = int(window_days)
    for c in ("n_calls", "kernel_time_ns", "recoverable_ns"):
        out[c] = out[c].round().astype("int64")
    order = out.sort_values(
        ["accelerator_hours_per_day", "op_name", "shape_sig", "dtype"], ascending=[False] + [True] * 3
    )
    out["impact_rank"] = (order.groupby(["dimension", "value"]).cumcount() + 1).sort_index()
    out = out[out["impact_rank"] <= top_ops]
    return out.sort_values(["dimension", "value", "impact_rank"]).reset_index(drop=True)[FLEET_OPS.names]
