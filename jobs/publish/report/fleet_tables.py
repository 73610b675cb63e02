"""Fleet report sections from the fleet tables (``fleet_stats``, ``fleet_kernels``, ``regressions``,
written by :mod:`jobs.fleet`), and the MLflow metrics of the fleet run taken from them."""

from __future__ import annotations

import re

import pandas as pd

from jobs.publish.report.blocks import Section, fmt_int, fmt_ms, fmt_num, fmt_text, table_view

#: Dimensions shown as "by …" tables, in order, with their headings.
BREAKDOWNS = (("job_name", "job name"), ("model", "model"), ("hardware", "hardware"), ("torch_version", "torch version"))


def _pct(v) -> str:
    return fmt_num(v, 1)


def _rows(df: pd.DataFrame | None, dimension: str, date: str = "all") -> pd.DataFrame:
    if df is None or not len(df):
        return pd.DataFrame()
    return df[(df["dimension"] == dimension) & (df["date"] == date)]


_STATS_SPEC = [("n_runs", "runs", fmt_int, "num"), ("n_ranks", "ranks", fmt_int, "num"),
               ("n_steps", "steps", fmt_int, "num"), ("step_time_p50_ns", "step p50 ms", fmt_ms, "num"),
               ("step_time_p90_ns", "p90 ms", fmt_ms, "num"), ("step_time_p99_ns", "p99 ms", fmt_ms, "num"),
               ("idle_pct", "GPU idle %", _pct, "num"), ("exposed_comm_pct", "exposed comm %", _pct, "num"),
               ("cpu_bound_pct", "CPU-bound %", _pct, "num")]


def breakdown_section(stats: pd.DataFrame | None, kernels: pd.DataFrame | None = None, top: int = 10) -> Section:
    """"Fleet by job name, model, hardware, torch version": one table per dimension (all dates) and
    the fleet's top kernels."""
    sec = Section("fleet-breakdown", "Fleet by job name, model, hardware and torch version",
                  intro="Job step time = the slowest rank's ProfilerStep per step; percentiles over the job steps "
                        "of the group. GPU idle % = Σ idle / Σ kernel time (HTA temporal breakdown, time-weighted); "
                        "exposed communication % and CPU-bound % are shares of the rank step time.")
    for dim, heading in BREAKDOWNS:
        d = _rows(stats, dim)
        if len(d):
            d = d.sort_values(["n_steps", "value"], ascending=[False, True])
            sec.tables.append(table_view(f"by-{dim}", d, [("value", heading, fmt_text, "name"), *_STATS_SPEC],
                                         caption=f"By {heading}", limit=top, total=len(d)))
    k = _rows(kernels, "fleet")
    if len(k):
        sec.tables.append(table_view("fleet-top-kernels", k.sort_values("kernel_rank"), [
            ("kernel_rank", "#", fmt_int, "num"), ("name", "kernel", fmt_text, "name"),
            ("kernel_type", "type", fmt_text, ""), ("n_runs", "runs", fmt_int, "num"), ("n", "launches", fmt_int, "num"),
            ("total_ns", "total ms", fmt_ms, "num"), ("share_pct", "share of kernel time %", _pct, "num")],
            caption="Top kernels of the fleet by total time"))
    if not sec.tables:
        sec.note, sec.status = "Not available: the fleet tables are empty (no analyzed steps yet).", "unavailable"
    return sec


def regressions_section(regressions: pd.DataFrame | None, top: int = 20) -> Section:
    """Runs that regressed (or improved) against the previous runs of the same job name."""
    sec = Section("regressions", "Regressions against previous runs",
                  intro="Each run against the pooled steps of up to 5 previous runs with the same job name; "
                        "a verdict needs the change past the threshold and a two-sided Mann-Whitney U test p < 0.01.")
    r = regressions if isinstance(regressions, pd.DataFrame) else pd.DataFrame()
    moved = r[r["verdict"].isin(["regression", "improvement"])] if len(r) else r
    if not len(r):
        sec.note, sec.status = "Not available: no runs compared yet.", "unavailable"
        return sec
    if not len(moved):
        n = r[["job_id", "attempt"]].drop_duplicates().shape[0]
        sec.note = f"No regression or improvement among {n} run(s)."
        return sec
    moved = moved.assign(order=(moved["verdict"] != "regression").astype(int)).sort_values(
        ["order", "change_pct"], ascending=[True, False])
    sec.tables.append(table_view("regressions", moved, [
        ("verdict", "verdict", fmt_text, ""), ("job_name", "job name", fmt_text, "name"),
        ("job_id", "run", fmt_text, "name"), ("attempt", "attempt", fmt_int, "num"), ("metric", "metric", fmt_text, ""),
        ("value", "value", lambda v: fmt_num(v, 2), "num"), ("baseline", "baseline", lambda v: fmt_num(v, 2), "num"),
        ("change_pct", "change %", _pct, "num"), ("p_value", "p", lambda v: "—" if v != v or v is None else f"{v:.1e}", "num"),
        ("baseline_runs", "baseline runs", fmt_text, "name")], limit=top, total=len(moved)))
    return sec


def _metric_key(text: str) -> str:
    """A value made safe for one segment of an MLflow metric name (letters, digits, ``_ - .`` and space;
    no ``..``, and never empty or ``.``: MLflow refuses names that a path normalization would change)."""
    s = re.sub(r"[^A-Za-z0-9_.\- ]", "_", str(text))[:200].replace("..", "__")
    return s if s.strip(". ") else "_"


def fleet_stats_metrics(stats: pd.DataFrame | None) -> dict[str, float]:
    """Fleet-run metrics from ``fleet_stats`` (all dates): ``fleet/<dimension>/<value>/<stat>`` for
    step_time_p50_ms, step_time_p90_ms, step_time_p99_ms, idle_pct, exposed_comm_pct (``fleet/all/…`` for
    the whole fleet), so MLflow compares hardware, models and torch versions day by day."""
    out: dict[str, float] = {}
    if stats is None or not len(stats):
        return out
    for r in stats[stats["date"] == "all"].to_dict(orient="records"):
        prefix = "fleet/all" if r["dimension"] == "fleet" else f"fleet/{r['dimension']}/{_metric_key(r['value'])}"
        if r["dimension"] == "job":
            continue  # per-run numbers live in the job's own run
        for q in (50, 90, 99):
            v = r.get(f"step_time_p{q}_ns")
            if v is not None and v == v:
                out[f"{prefix}/step_time_p{q}_ms"] = float(v) / 1e6
        for col in ("idle_pct", "exposed_comm_pct"):
            v = r.get(col)
            if v is not None and v == v:
                out[f"{prefix}/{col}"] = float(v)
    return out
