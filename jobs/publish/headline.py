"""A job run's headline numbers and their labels: one definition, one label, everywhere.

The numbers are :func:`jobs.fleet.stats.run_summary`'s (the run's ``fleet_stats`` row of dimension ``job``); this
module only renames them to the MLflow metric names and gives each its label in words with its unit. The job
report's tiles, the MLflow run's metrics (:func:`jobs.publish.tracking.job_metrics`), ``tracelake run``'s printed
summary, ``tracelake compare``'s metric deltas and the MCP job answers all read :func:`headline` and label with
:data:`HEADLINE_LABELS`, so a number never has two values or two names.

Definitions (``jobs/fleet/stats.py``): job step time = per ProfilerStep the slowest rank's step time (exact
percentiles over the job steps); GPU idle / compute % = Σ idle (compute) time ÷ Σ the GPU's active span × 100 over
the run's analysis windows (HTA temporal breakdown, time-weighted); exposed communication / CPU-bound / data-loading
% = Σ that time ÷ Σ rank step time × 100 over rank-steps.
"""

from __future__ import annotations

import pandas as pd

from jobs.fleet.stats import RUN_COLUMNS, run_summary
from schemas import FLEET_STATS

#: MLflow metric name → ``(run_summary column, scale)``: value = column ÷ scale.
HEADLINE_COLUMNS: dict[str, tuple[str, float]] = {
    "step_time_p50_ms": ("step_time_p50_ns", 1e6),
    "step_time_p90_ms": ("step_time_p90_ns", 1e6),
    "step_time_p99_ms": ("step_time_p99_ns", 1e6),
    "idle_pct": ("idle_pct", 1.0),
    "compute_pct": ("compute_pct", 1.0),
    "exposed_comm_pct": ("exposed_comm_pct", 1.0),
    "cpu_bound_pct": ("cpu_bound_pct", 1.0),
    "dataloader_pct": ("dataloader_pct", 1.0),
    "n_ranks": ("n_ranks", 1.0),
    "n_steps": ("n_steps", 1.0),
    "n_rank_steps": ("n_rank_steps", 1.0),
}

#: MLflow metric name → its label in words with its unit (report tiles, CLI, compare, MCP field docs).
HEADLINE_LABELS: dict[str, str] = {
    "step_time_p50_ms": "job step time p50, ms (slowest rank per step)",
    "step_time_p90_ms": "job step time p90, ms (slowest rank per step)",
    "step_time_p99_ms": "job step time p99, ms (slowest rank per step)",
    "idle_pct": "GPU idle, % of the GPU's active span (HTA temporal breakdown)",
    "compute_pct": "GPU compute, % of the GPU's active span (HTA temporal breakdown)",
    "exposed_comm_pct": "exposed communication, % of rank step time",
    "cpu_bound_pct": "CPU-bound, % of rank step time",
    "dataloader_pct": "data loading, % of rank step time",
    "n_ranks": "ranks",
    "n_steps": "job steps (ProfilerSteps, all ranks together)",
    "n_rank_steps": "rank-steps (one rank's ProfilerStep each)",
}

#: Every job metric's label (MLflow name → words with unit): the headline numbers and the others of
#: :func:`jobs.publish.tracking.job_metrics` and ``compare``.
METRIC_LABELS: dict[str, str] = {
    **HEADLINE_LABELS,
    "step_time_max_ms": "longest job step, ms (slowest rank per step)",
    "non_compute_pct": "GPU non-compute, % of the GPU's active span (100 − idle − compute)",
    "overlap_pct": "comm/compute overlap, % of communication time (HTA, mean over ranks)",
    "idle_pct_max": "worst rank's GPU idle, % of its whole trace's active span",
    "n_events": "events parsed (ingested captures)",
    "n_quarantined": "captures quarantined",
}

#: Labels of the same numbers when the run has no ProfilerStep: its windows are each rank's whole trace.
WHOLE_TRACE_LABELS: dict[str, str] = {
    **HEADLINE_LABELS,
    "step_time_p50_ms": "whole-trace duration, ms (no ProfilerStep: the trace is one window)",
    "step_time_p90_ms": "whole-trace duration p90, ms (no ProfilerStep)",
    "step_time_p99_ms": "whole-trace duration p99, ms (no ProfilerStep)",
    "n_steps": "job steps (none captured: no ProfilerStep)",
    "n_rank_steps": "rank windows (one rank's whole trace each)",
}


def _minimal_captures(ranks: pd.DataFrame | None, steps: pd.DataFrame | None) -> pd.DataFrame:
    """A stand-in ``captures`` frame (one ``ingested`` row per rank capture) for callers without the table."""
    src = ranks if ranks is not None and len(ranks) else steps
    if src is None or not len(src):
        return pd.DataFrame(columns=["job_id", "attempt", "status", "capture_id", "date"])
    cols = [c for c in ("job_id", "attempt", "capture_id", "date", "rank") if c in src.columns]
    out = src[cols].drop_duplicates().copy()
    out["status"] = "ingested"
    for c in ("job_name", "model", "device_name", "torch_version", "created_at", "world_size", "date"):
        if c not in out.columns:
            out[c] = None
    return out.reset_index(drop=True)


#: Key columns a one-run frame may lack (hand-built rows): filled with these values.
_KEY_DEFAULTS = {"job_id": "job", "attempt": 0, "date": "unknown"}


def _keyed(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with the run keys ``run_summary`` groups by: a missing ``job_id``/``attempt``/``date`` gets a
    placeholder (one run), a missing ``capture_id`` one per rank."""
    missing = [c for c in (*_KEY_DEFAULTS, "capture_id") if c not in df.columns]
    if not missing:
        return df
    out = df.copy()
    for c in missing:
        if c == "capture_id":
            out[c] = ["rank-" + str(r) for r in out["rank"]] if "rank" in out.columns else "capture"
        else:
            out[c] = _KEY_DEFAULTS[c]
    return out


def headline_rows(
    steps: pd.DataFrame | None, ranks: pd.DataFrame | None, captures: pd.DataFrame | None
) -> pd.DataFrame:
    """:func:`jobs.fleet.stats.run_summary` of the given rows (any number of runs), tolerant of missing tables.

    Args:
        steps, ranks, captures: the runs' rows; ``captures`` may be None (a stand-in built from ``ranks``: every
            rank capture counted as ingested).

    Returns:
        ``run_summary``'s frame (one row per run with analysis windows; empty, same columns, when there is none).
    """
    steps = steps if steps is not None else pd.DataFrame(columns=["rank", "step"])
    for c in _KEY_DEFAULTS:  # one frame hand-built without keys: take the other's (a single run)
        if ranks is not None and c in steps.columns and c not in ranks.columns and steps[c].nunique() == 1:
            ranks = ranks.assign(**{c: steps[c].iloc[0]})
        if ranks is not None and c in ranks.columns and c not in steps.columns and ranks[c].nunique() == 1:
            steps = steps.assign(**{c: ranks[c].iloc[0]})
    steps = _keyed(steps)
    ranks = _keyed(ranks) if ranks is not None else None
    if captures is None or not len(captures) or "status" not in captures.columns:
        captures = _minimal_captures(ranks, steps)
    captures = _keyed(captures).assign(**{c: None for c in RUN_COLUMNS if c not in captures.columns})
    empty = pd.DataFrame(columns=[*FLEET_STATS.names, "job_id", "attempt"])
    if not len(captures) or (not len(steps) and (ranks is None or not len(ranks))):
        return empty
    return run_summary(steps, ranks, captures)


def headline_metrics(row) -> dict[str, float]:
    """The MLflow-named headline metrics of one :func:`headline_rows` row (a mapping or Series; ``None`` → ``{}``).

    Returns:
        ``{name: value}`` for the names of :data:`HEADLINE_COLUMNS` whose value is known (null/NaN left out).
    """
    if row is None:
        return {}
    out: dict[str, float] = {}
    for name, (col, scale) in HEADLINE_COLUMNS.items():
        v = row.get(col) if hasattr(row, "get") else None
        if v is None or v is pd.NA:
            continue
        try:
            f = float(v)
        except (TypeError, ValueError):
            continue
        if f == f:
            out[name] = f / scale
    return out


def headline(
    steps: pd.DataFrame | None, ranks: pd.DataFrame | None, captures: pd.DataFrame | None
) -> dict[tuple[str, int], dict[str, float]]:
    """``{(job_id, attempt): headline metrics}`` of every run in the rows (:func:`headline_metrics` per run)."""
    rows = headline_rows(steps, ranks, captures)
    return {(str(r["job_id"]), int(r["attempt"])): headline_metrics(r) for _, r in rows.iterrows()}


def one_headline(
    steps: pd.DataFrame | None, ranks: pd.DataFrame | None, captures: pd.DataFrame | None
) -> dict[str, float]:
    """The headline metrics of the one run in the rows (the first when there are several; ``{}`` when none)."""
    rows = headline_rows(steps, ranks, captures)
    return headline_metrics(rows.iloc[0]) if len(rows) else {}


def whole_trace(steps: pd.DataFrame | None) -> bool:
    """True when the run has no ProfilerStep (no ``steps`` row with step ≥ 0): its windows are whole traces."""
    if steps is None or not len(steps) or "step" not in steps.columns:
        return True
    return not (pd.to_numeric(steps["step"], errors="coerce") >= 0).any()


def labels_for(steps: pd.DataFrame | None) -> dict[str, str]:
    """:data:`HEADLINE_LABELS`, or :data:`WHOLE_TRACE_LABELS` for a run without ProfilerStep."""
    return WHOLE_TRACE_LABELS if whole_trace(steps) else HEADLINE_LABELS
