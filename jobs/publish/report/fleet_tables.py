"""Fleet report sections from the fleet tables (``fleet_stats``, ``fleet_kernels``, ``regressions``,
``fleet_findings``, ``host_health``, written by :mod:`jobs.fleet`), and the MLflow metrics of the fleet run
taken from them."""

from __future__ import annotations

import json
import re

import pandas as pd

from jobs.publish.report.blocks import Section, fmt_int, fmt_ms, fmt_num, fmt_text, table_view
from jobs.publish.report.plots import host_job_heatmap, recoverable_hours
from schemas import HEALTH_KINDS

#: Dimensions shown as "by …" tables, in order, with their headings.
BREAKDOWNS = (
    ("job_name", "job name"),
    ("model", "model"),
    ("hardware", "hardware"),
    ("torch_version", "torch version"),
)


def _pct(v) -> str:
    return fmt_num(v, 1)


def _rows(df: pd.DataFrame | None, dimension: str, date: str = "all") -> pd.DataFrame:
    if df is None or not len(df):
        return pd.DataFrame()
    return df[(df["dimension"] == dimension) & (df["date"] == date)]


_STATS_SPEC = [
    ("n_runs", "runs", fmt_int, "num"),
    ("n_ranks", "ranks", fmt_int, "num"),
    ("n_steps", "steps", fmt_int, "num"),
    ("step_time_p50_ns", "step p50 ms", fmt_ms, "num"),
    ("step_time_p90_ns", "p90 ms", fmt_ms, "num"),
    ("step_time_p99_ns", "p99 ms", fmt_ms, "num"),
    ("idle_pct", "GPU idle %", _pct, "num"),
    ("exposed_comm_pct", "exposed comm %", _pct, "num"),
    ("cpu_bound_pct", "CPU-bound %", _pct, "num"),
]


def breakdown_section(stats: pd.DataFrame | None, kernels: pd.DataFrame | None = None, top: int = 10) -> Section:
    """ "Fleet by job name, model, hardware, torch version": one table per dimension (all dates) and
    the fleet's top kernels."""
    sec = Section(
        "fleet-breakdown",
        "Fleet by job name, model, hardware and torch version",
        intro="Job step time = the slowest rank's ProfilerStep per step; percentiles over the job steps "
        "of the group. GPU idle % = Σ idle / Σ kernel time (HTA temporal breakdown, time-weighted); "
        "exposed communication % and CPU-bound % are shares of the rank step time.",
    )
    for dim, heading in BREAKDOWNS:
        d = _rows(stats, dim)
        if len(d):
            d = d.sort_values(["n_steps", "value"], ascending=[False, True])
            sec.tables.append(
                table_view(
                    f"by-{dim}",
                    d,
                    [("value", heading, fmt_text, "name"), *_STATS_SPEC],
                    caption=f"By {heading}",
                    limit=top,
                    total=len(d),
                )
            )
    k = _rows(kernels, "fleet")
    if len(k):
        sec.tables.append(
            table_view(
                "fleet-top-kernels",
                k.sort_values("kernel_rank"),
                [
                    ("kernel_rank", "#", fmt_int, "num"),
                    ("name", "kernel", fmt_text, "name"),
                    ("kernel_type", "type", fmt_text, ""),
                    ("n_runs", "runs", fmt_int, "num"),
                    ("n", "launches", fmt_int, "num"),
                    ("total_ns", "total ms", fmt_ms, "num"),
                    ("share_pct", "share of kernel time %", _pct, "num"),
                ],
                caption="Top kernels of the fleet by total time",
            )
        )
    if not sec.tables:
        sec.note, sec.status = "Not available: the fleet tables are empty (no analyzed steps yet).", "unavailable"
    return sec


def regressions_section(regressions: pd.DataFrame | None, top: int = 20) -> Section:
    """Runs that regressed (or improved) against the previous runs of the same job name."""
    sec = Section(
        "regressions",
        "Regressions against previous runs",
        intro="Each run against the pooled steps of up to 5 previous runs with the same job name; "
        "a verdict needs the change past the threshold and a two-sided Mann-Whitney U test p < 0.01.",
    )
    r = regressions if isinstance(regressions, pd.DataFrame) else pd.DataFrame()
    moved = r[r["verdict"].isin(["regression", "improvement"])] if len(r) else r
    if not len(r):
        sec.note, sec.status = "Not available: no runs compared yet.", "unavailable"
        return sec
    if not len(moved):
        n = r[["job_id", "attempt"]].drop_duplicates().shape[0]
        sec.note = f"No regression or improvement among {n} run(s)."
        return sec
    moved = moved.assign(
        order=(moved["verdict"] != "regression").astype(int),
        changed=[changes_summary(v) for v in moved.get("changes_json", [None] * len(moved))],
    ).sort_values(["order", "change_pct"], ascending=[True, False])
    sec.tables.append(
        table_view(
            "regressions",
            moved,
            [
                ("verdict", "verdict", fmt_text, ""),
                ("job_name", "job name", fmt_text, "name"),
                ("job_id", "run", fmt_text, "name"),
                ("attempt", "attempt", fmt_int, "num"),
                ("metric", "metric", fmt_text, ""),
                ("value", "value", lambda v: fmt_num(v, 2), "num"),
                ("baseline", "baseline", lambda v: fmt_num(v, 2), "num"),
                ("change_pct", "change %", _pct, "num"),
                ("p_value", "p", lambda v: "—" if v != v or v is None else f"{v:.1e}", "num"),
                ("baseline_runs", "baseline runs", fmt_text, "name"),
                ("changed", "what changed", fmt_text, "name"),
            ],
            limit=top,
            total=len(moved),
        )
    )
    return sec


def changes_summary(changes_json) -> str:
    """One line of a ``regressions.changes_json``: the context that differs, the kernel that moved most, the
    findings that appeared and cleared (``""`` when there is nothing)."""
    if not isinstance(changes_json, str) or not changes_json:
        return ""
    c = json.loads(changes_json)
    parts = [f"{x['field']}: {', '.join(str(v) for v in x['baseline'])} → {x['run']}" for x in c.get("context", [])]
    if c.get("kernels"):
        k = c["kernels"][0]
        parts.append(f"kernel {k['name'][:60]} {k['delta_ns_per_step'] / 1e6:+.3f} ms/step")
    if c.get("findings_appeared"):
        parts.append("new findings: " + ", ".join(c["findings_appeared"]))
    if c.get("findings_cleared"):
        parts.append("cleared: " + ", ".join(c["findings_cleared"]))
    return "; ".join(parts)


def impact_section(impact: pd.DataFrame | None, top: int = 20) -> Section:
    """ "Findings ranked by fleet impact": the fleet rows of ``fleet_findings`` (a bar chart of the
    recoverable accelerator-hours per day by rule, and the table), with the estimate's assumptions."""
    sec = Section(
        "fleet-impact",
        "Findings ranked by fleet impact",
        intro="Per finding rule, over the window's capture dates: the accelerator-hours per day fixing it "
        "would recover = Σ over the runs it fired in of its largest estimated time lost per step × "
        "the run's captured job steps × its world size, ÷ the window's days. The captured steps are "
        "the profiled window, so the hours are a lower bound for runs that trained longer; estimates "
        "of different rules overlap (one cause shows in several rules): they rank, they do not add up.",
    )
    f = impact[impact["dimension"] == "fleet"] if isinstance(impact, pd.DataFrame) and len(impact) else pd.DataFrame()
    if not len(f):
        sec.note, sec.status = "Not available: no finding with an estimate in the window.", "unavailable"
        return sec
    f = f.sort_values("impact_rank")
    f = f.assign(top_jobs=[", ".join(str(j) for j in (v if v is not None else [])) for v in f["top_jobs"]])
    sec.intro += f" Window: {f['window_start'].iloc[0]} … {f['window_end'].iloc[0]}."
    plot = recoverable_hours(f.head(top))
    if plot is not None:
        sec.plots.append(plot)
    sec.tables.append(
        table_view(
            "fleet-impact",
            f,
            [
                ("impact_rank", "#", fmt_int, "num"),
                ("rule", "rule", fmt_text, "name"),
                ("n_jobs", "jobs", fmt_int, "num"),
                ("n_runs", "runs", fmt_int, "num"),
                ("n_steps", "steps", fmt_int, "num"),
                ("accelerator_hours_per_day", "accelerator-h / day", lambda v: fmt_num(v, 3), "num"),
                ("top_jobs", "top runs", fmt_text, "name"),
                ("example_title", "example", fmt_text, "name"),
            ],
            limit=top,
            total=len(f),
        )
    )
    return sec


def host_section(health: pd.DataFrame | None, top: int = 30) -> Section:
    """ "Host health across jobs": ``host_health`` as a host × job heatmap of last-arrival ratios and a table of
    hosts, devices and links, suspects first in each."""
    sec = Section(
        "host-health",
        "Host health across jobs",
        intro="Per host and per accelerator, in the runs with two or more of them: how often its ranks arrived "
        "last at the collectives matched across ranks, against its fair share (ratio 1), and the "
        "step-time excess of its ranks over the other ranks of the same run. Slow in a run: ratio ≥ 1.5 "
        "over ≥ 5 matched calls (without collectives: excess ≥ 5 %). Per link (the hosts a process "
        "group spans), its bus bandwidth against the run's other links: slow at ≤ 1/1.5 of theirs. "
        "Slow in ≥ 2 different jobs and in at least half of its jobs: a hardware suspect; a job slow "
        "everywhere blames none of them.",
    )
    h = health if isinstance(health, pd.DataFrame) and len(health) else pd.DataFrame()
    if not len(h):
        sec.note, sec.status = "Not available: no run on two or more hosts or devices in the window.", "unavailable"
        return sec
    sec.intro += f" Window: {h['window_start'].iloc[0]} … {h['window_end'].iloc[0]}."
    h = h.assign(_k=h["kind"].map(HEALTH_KINDS.index)).sort_values(
        ["_k", "suspect_hardware", "n_slow_jobs", "target"], ascending=[True, False, False, True], kind="stable"
    )
    counts = {k: (int(g["suspect_hardware"].sum()), len(g)) for k, g in h.groupby("_k", sort=True)}
    sec.intro += (
        " Hardware suspects: " + ", ".join(f"{n} of {t} {HEALTH_KINDS[k]}(s)" for k, (n, t) in counts.items()) + "."
    )
    hosts = h[h["kind"] == "host"]
    cells = [
        {"host_name": r["target"], "job": e["job"], "last_arrival_ratio": e["last_arrival_ratio"]}
        for r in hosts.head(top).to_dict(orient="records")
        for e in json.loads(r["evidence_json"] or "[]")
    ]
    plot = host_job_heatmap(pd.DataFrame(cells))
    if plot is not None:
        sec.plots.append(plot)
    shown = h.assign(
        suspect=h["suspect_hardware"].map({True: "suspect", False: ""}),
        slow_jobs=[", ".join(str(j) for j in (v if v is not None else [])) for v in h["slow_jobs"]],
    )
    sec.tables.append(
        table_view(
            "host-health",
            shown,
            [
                ("kind", "kind", fmt_text, ""),
                ("target", "host / device / link", fmt_text, "name"),
                ("suspect", "hardware", fmt_text, ""),
                ("n_jobs", "jobs", fmt_int, "num"),
                ("n_slow_jobs", "slow in", fmt_int, "num"),
                ("last_arrival_ratio", "last-arrival ratio", lambda v: fmt_num(v, 2), "num"),
                ("step_excess_p50_pct", "step excess %", _pct, "num"),
                ("busbw_ratio", "bus bandwidth ratio", lambda v: fmt_num(v, 2), "num"),
                ("slow_jobs", "slow jobs", fmt_text, "name"),
            ],
            limit=top,
            total=len(h),
        )
    )
    return sec


def validation_section(marks: dict | None) -> Section:
    """ "Fleet data quality": the Great Expectations result of each fleet table's last validation as a
    whole (:func:`jobs.validate.marks.read_table_marks`), failed checks named."""
    sec = Section(
        "fleet-validation",
        "Fleet data quality",
        intro="The fleet stage rebuilds these tables from every job, then validates them whole with Great "
        "Expectations (schemas/expectations.py: keys unique, counts and ratios ≥ 0, percentiles "
        "ordered, a target slow in at most the jobs it ran in).",
    )
    if not marks:
        sec.note, sec.status = "Not available: no fleet table written yet.", "unavailable"
        return sec
    rows = pd.DataFrame(
        [
            {
                "table": t,
                "status": m.get("status", "unvalidated"),
                "validated_at": m.get("validated_at"),
                "failed": ", ".join(f"{f['id']} ({f.get('unexpected_count')})" for f in m.get("failed", [])),
            }
            for t, m in marks.items()
        ]
    )
    bad = rows[rows["status"] != "passed"]
    sec.status = "failed" if len(bad) else "ok"
    sec.intro += (
        f" {len(bad)} of {len(rows)} table(s) not passed: {', '.join(bad['table'])}."
        if len(bad)
        else f" All {len(rows)} passed."
    )
    sec.tables.append(
        table_view(
            "fleet-validation",
            rows,
            [
                ("table", "table", fmt_text, "name"),
                ("status", "status", fmt_text, ""),
                ("validated_at", "validated at", fmt_text, ""),
                ("failed", "failed checks (rows)", fmt_text, "name"),
            ],
        )
    )
    return sec


def host_metrics(health: pd.DataFrame | None) -> dict[str, float]:
    """Fleet-run metrics from ``host_health``: ``fleet/hosts/n_<kind>`` and ``fleet/hosts/n_suspect_<kind>`` per
    kind (host, device, link), and per suspect ``fleet/hosts/<target>/last_arrival_ratio`` (or ``busbw_ratio``)
    and ``…/n_slow_jobs``."""
    if health is None or not len(health):
        return {}
    out = {}
    for kind, g in health.groupby("kind", sort=True):
        out[f"fleet/hosts/n_{kind}"] = float(len(g))
        out[f"fleet/hosts/n_suspect_{kind}"] = float(g["suspect_hardware"].sum())
    for r in health[health["suspect_hardware"].astype(bool)].to_dict(orient="records"):
        key = f"fleet/hosts/{_metric_key(r['target'])}"
        for col in ("last_arrival_ratio", "busbw_ratio"):
            if r.get(col) is not None and r[col] == r[col]:
                out[f"{key}/{col}"] = float(r[col])
        out[f"{key}/n_slow_jobs"] = float(r["n_slow_jobs"])
    return out


def impact_metrics(impact: pd.DataFrame | None) -> dict[str, float]:
    """Fleet-run metrics from ``fleet_findings`` (the fleet rows): ``fleet/impact/<rule>/accelerator_hours_per_day``
    and ``fleet/impact/<rule>/n_runs``, and ``fleet/impact/top_accelerator_hours_per_day``."""
    out: dict[str, float] = {}
    if impact is None or not len(impact):
        return out
    f = impact[impact["dimension"] == "fleet"]
    for r in f.to_dict(orient="records"):
        v = r.get("accelerator_hours_per_day")
        if v is not None and v == v:
            out[f"fleet/impact/{_metric_key(r['rule'])}/accelerator_hours_per_day"] = float(v)
            out[f"fleet/impact/{_metric_key(r['rule'])}/n_runs"] = float(r["n_runs"])
    if len(f):
        out["fleet/impact/top_accelerator_hours_per_day"] = float(f["accelerator_hours_per_day"].max())
    return out


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
