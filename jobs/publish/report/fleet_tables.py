"""The fleet report from the fleet tables (``fleet_stats``, ``fleet_kernels``, ``regressions``,
``fleet_findings``, ``host_health``, written by :mod:`jobs.fleet`), and the MLflow metrics of the fleet run
taken from them.

One definition per number: every per-job number on the page (header cards, trends, worst offenders, breakdowns)
is a ``fleet_stats`` row — a job's row of date ``all`` is :func:`jobs.fleet.stats.run_summary`'s, the numbers of
its job report and MLflow run. The windowed sections (fleet impact, host health) show their window, and every
section names the jobs it leaves out and why."""

from __future__ import annotations

import json
import re

import pandas as pd

from jobs.analyze.efficiency.ops import ATTAINABLE_ROOFLINE_PCT
from jobs.analyze.windows import analysis_windows
from jobs.fleet.regressions import testing_in_words
from jobs.fleet.stats import RUN_COLUMNS, fleet_stats, job_steps_frame
from jobs.fleet.window import WINDOW_DAYS, capture_days, window
from jobs.publish.report.blocks import Section, fmt_int, fmt_ms, fmt_num, fmt_text, table_view
from jobs.publish.report.plots import fleet_trends, host_job_heatmap, recoverable_hours
from schemas import FLEET_STATS, HEALTH_KINDS

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
    ("step_time_p50_ns", "job step time p50, ms", fmt_ms, "num"),
    ("step_time_p90_ns", "job step time p90, ms", fmt_ms, "num"),
    ("step_time_p99_ns", "job step time p99, ms", fmt_ms, "num"),
    ("idle_pct", "GPU idle, %", _pct, "num"),
    ("exposed_comm_pct", "exposed communication, %", _pct, "num"),
    ("cpu_bound_pct", "CPU-bound, %", _pct, "num"),
]


def breakdown_section(stats: pd.DataFrame | None, kernels: pd.DataFrame | None = None, top: int = 10) -> Section:
    """ "Fleet by job name, model, hardware, torch version": one table per dimension (all dates) and
    the fleet's top kernels."""
    sec = Section(
        "fleet-breakdown",
        "Fleet by job name, model, hardware and torch version",
        intro="Every capture date (the fleet statistics over all dates). Job step time = the slowest rank's ProfilerStep "
        "per step; percentiles over the job steps of the group (jobs without ProfilerStep have none). GPU idle % = "
        "Σ idle / Σ kernel time (HTA temporal breakdown, time-weighted) over the rank windows: ProfilerSteps, or "
        "the whole trace of a rank without ProfilerStep; exposed communication % and CPU-bound % are shares of "
        "the rank window time.",
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


def regressions_section(regressions: pd.DataFrame | None, top: int = 20, stats: pd.DataFrame | None = None) -> Section:
    """Runs that regressed (or improved) against the previous runs of the same job name; with ``stats``
    (``fleet_stats``) the jobs not compared (no ProfilerStep) are named."""
    sec = Section(
        "regressions",
        "Regressions against previous runs",
        intro="Each run against the pooled steps of up to 5 previous runs with the same job name; "
        "a verdict needs the change past the threshold and a two-sided Mann-Whitney U test p < 0.01 after the "
        "Benjamini-Hochberg correction over all tests; 'unchanged' needs the 98 % interval of the change "
        "inside the threshold, else the run is inconclusive.",
    )
    r = regressions if isinstance(regressions, pd.DataFrame) else pd.DataFrame()
    j = job_rows(stats)
    compared = set(r["job_id"].astype(str) + "#" + r["attempt"].astype(int).astype(str)) if len(r) else set()
    skipped = sorted(set(j["value"]) - compared)
    if skipped:
        sec.intro += f" Not compared ({len(skipped)}): {', '.join(skipped)} — no ProfilerStep, no job steps to compare."
    moved = r[r["verdict"].isin(["regression", "improvement"])] if len(r) else r
    if not len(r):
        sec.note, sec.status = "Not available: no runs compared yet.", "unavailable"
        return sec
    tests = testing_in_words(r)
    if tests:
        sec.paragraphs.append("Tested: " + tests)
    if "summary" in r.columns:
        inc = r[(r["verdict"] == "inconclusive") & (r["metric"] == "step_time_p50_ns")]
        if len(inc):
            sec.paragraphs.append(
                f"Inconclusive step time ({len(inc)} run(s)): "
                + "; ".join(f"{x.job_id}#{int(x.attempt)}: {x.summary}" for x in inc.head(5).itertuples())
                + (f"; … {len(inc) - 5} more" if len(inc) > 5 else "")
            )
    if not len(moved):
        n = r[["job_id", "attempt"]].drop_duplicates().shape[0]
        sec.note = f"No regression or improvement among {n} run(s)."
        return sec
    moved = moved.assign(
        order=(moved["verdict"] != "regression").astype(int),
        changed=[changes_summary(v) for v in moved.get("changes_json", [None] * len(moved))],
        interval=[
            _interval(lo, hi, m)
            for lo, hi, m in zip(
                moved.get("change_ci_low_pct", [None] * len(moved)),
                moved.get("change_ci_high_pct", [None] * len(moved)),
                moved["metric"],
            )
        ],
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
                ("interval", "98 % interval", fmt_text, "num"),
                ("p_adjusted", "p adjusted (BH)", _p, "num"),
                ("p_value", "p raw", _p, "num"),
                ("baseline_runs", "baseline runs", fmt_text, "name"),
                ("changed", "what changed", fmt_text, "name"),
            ],
            limit=top,
            total=len(moved),
        )
    )
    return sec


def _p(v) -> str:
    return "—" if v is None or v != v else f"{v:.1e}"


def _interval(lo, hi, metric: str) -> str:
    """``-3.1 … +8.0 %`` (``pp`` for percentage metrics); ``—`` without an interval."""
    if lo is None or hi is None or lo != lo or hi != hi:
        return "—"
    return f"{lo:+.1f} … {hi:+.1f} {'%' if str(metric).startswith('step_time') else 'pp'}"


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


def impact_section(
    impact: pd.DataFrame | None,
    top: int = 20,
    findings: pd.DataFrame | None = None,
    stats: pd.DataFrame | None = None,
    window_: tuple[str, str, int] | None = None,
) -> Section:
    """ "Findings ranked by fleet impact": the fleet rows of ``fleet_findings`` (a bar chart of the
    recoverable accelerator-hours per day by rule, and the table), with the estimate's assumptions and its window.

    Args:
        impact: ``fleet_findings``; findings: the ``findings`` table (every date), to name the jobs with findings
            outside the window when none is in it; stats: ``fleet_stats`` (the jobs' first capture dates);
        window_: the window when ``impact`` is empty (:func:`insights_window`).
    """
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
        sec.note, sec.status = _no_impact_note(findings, stats, window_), "unavailable"
        return sec
    f = f.sort_values("impact_rank")
    f = f.assign(top_jobs=[", ".join(str(j) for j in (v if v is not None else [])) for v in f["top_jobs"]])
    r0 = f.iloc[0]
    sec.intro += f" Window: {window_text((r0['window_start'], r0['window_end'], int(r0['window_days'])))}."
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


def ops_section(ops: pd.DataFrame | None, top: int = 20, window_: tuple[str, str, int] | None = None) -> Section:
    """ "Kernels worth tuning across the fleet": the fleet rows of ``fleet_ops`` (a bar chart of the recoverable
    accelerator-hours per day by op group, and the table), with the estimate and its window (``window_``: shown
    when ``ops`` is empty)."""
    sec = Section(
        "fleet-ops",
        "Kernels worth tuning across the fleet",
        intro="Per op and shapes, over the window's capture dates: the accelerator-hours per day its kernels would "
        f"save at {ATTAINABLE_ROOFLINE_PCT:.0f} % of their roofline (datasheet peak FLOP/s or memory bandwidth, "
        "whichever bounds them) = Σ over runs of kernel time × (1 − roofline % / "
        f"{ATTAINABLE_ROOFLINE_PCT:.0f} %) × world size / ranks traced, ÷ the window's days. Device time, not step "
        "time: a kernel overlapped by other work shortens the step by less.",
    )
    f = ops[ops["dimension"] == "fleet"] if isinstance(ops, pd.DataFrame) and len(ops) else pd.DataFrame()
    if not len(f):
        sec.note = (
            f"No op with recorded shapes on a device with datasheet peaks in the window {window_text(window_)} "
            "(profile with `record_shapes=True`)."
        )
        sec.status = "unavailable"
        return sec
    f = f.sort_values("impact_rank")
    f = f.assign(
        op=[f"{o} {s}" for o, s in zip(f["op_name"], f["shape_sig"])],
        top_jobs=[", ".join(str(j) for j in (v if v is not None else [])) for v in f["top_jobs"]],
        device_names=[", ".join(str(d) for d in (v if v is not None else [])) for v in f["device_names"]],
    )
    r0 = f.iloc[0]
    sec.intro += f" Window: {window_text((r0['window_start'], r0['window_end'], int(r0['window_days'])))}."
    plot = recoverable_hours(f.head(top), label="op", what="op group")
    if plot is not None:
        sec.plots.append(plot)
    sec.tables.append(
        table_view(
            "fleet-ops",
            f,
            [
                ("impact_rank", "#", fmt_int, "num"),
                ("op", "op and shapes", fmt_text, "name"),
                ("dtype", "dtype", fmt_text, ""),
                ("device_names", "devices", fmt_text, "name"),
                ("n_runs", "runs", fmt_int, "num"),
                ("kernel_time_ns", "kernel ms", fmt_ms, "num"),
                ("roofline_pct", "% roofline", lambda v: fmt_num(v, 1), "num"),
                ("accelerator_hours_per_day", "accelerator-h / day", lambda v: fmt_num(v, 3), "num"),
                ("top_jobs", "top runs", fmt_text, "name"),
            ],
            limit=top,
            total=len(f),
        )
    )
    return sec


def _no_impact_note(findings: pd.DataFrame | None, stats: pd.DataFrame | None, w: tuple[str, str, int] | None) -> str:
    """Why no finding is ranked: the window, and the jobs with estimated findings outside it, with their dates."""
    note = f"No finding with an estimate in the window {window_text(w)}."
    if findings is None or not len(findings) or "est_time_lost_per_step_ns" not in findings.columns:
        return note + " No analyzed job has a finding with an estimate."
    est = findings[pd.to_numeric(findings["est_time_lost_per_step_ns"], errors="coerce").notna()]
    if not len(est):
        return note + " No analyzed job has a finding with an estimate."
    runs = est.assign(job=est["job_id"].astype(str) + "#" + est["attempt"].astype(int).astype(str))
    dates = job_rows(stats).set_index("value")["first_date"]
    per = runs.groupby("job").size().sort_index()
    named = [f"{job} (captured {dates.get(job, '?')}): {n} finding(s)" for job, n in per.items()]
    return (
        note + f" Outside it: {'; '.join(named)}. The window ranks what the fleet loses now (the last "
        f"{w[2] if w else WINDOW_DAYS} days with captures); findings of every date are listed under "
        "Worst offenders, by estimated time lost per step."
    )


def host_section(health: pd.DataFrame | None, top: int = 30, window_: tuple[str, str, int] | None = None) -> Section:
    """ "Host health across jobs": ``host_health`` as a host × job heatmap of last-arrival ratios and a table of
    hosts, devices and links, suspects first in each (``window_``: the window shown when ``health`` is empty)."""
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
        sec.note = f"No run on two or more hosts or devices in the window {window_text(window_)}."
        sec.status = "unavailable"
        return sec
    days = h["window_days"].iloc[0] if "window_days" in h.columns else None
    if days is None or days != days:  # a warehouse written before host_health had window_days
        days = (pd.Timestamp(h["window_end"].iloc[0]) - pd.Timestamp(h["window_start"].iloc[0])).days + 1
    sec.intro += f" Window: {window_text((h['window_start'].iloc[0], h['window_end'].iloc[0], int(days)))}."
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
        intro="The fleet stage derives these tables from every job, then validates them whole with Great "
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


# ----------------------------------------------------------------------------- the fleet report's per-job numbers
#
# One definition per number: every per-job number of the fleet report (header cards, trends, worst offenders, the
# breakdowns) is a ``fleet_stats`` row (jobs/fleet/stats.py) — the job rows of date ``all`` are what
# :func:`jobs.fleet.stats.run_summary` returns, so the job report, MLflow and the CLI show the same numbers.

#: Stable names of the fleet run's headline metrics (the fleet MLflow run logs these), with their card labels.
FLEET_METRICS = {
    "fleet/n_jobs": "jobs",
    "fleet/n_ranks": "rank captures",
    "fleet/n_captures": "captures",
    "fleet/n_quarantined": "files quarantined",
    "fleet/idle_pct_median": "GPU idle, %: median job",
    "fleet/idle_pct_p90": "GPU idle, %: p90 job",
    "fleet/step_time_p50_ms_median": "job step time p50, ms: median job",
    "fleet/exposed_comm_pct_median": "exposed communication, %: median job",
}
_NO_STEP = "no ProfilerStep (judged on its whole trace): job step time not defined"
_NO_GPU = "no GPU activity: GPU idle % not defined"


def fleet_stats_of(
    fleet: dict | None,
    ranks: pd.DataFrame | None = None,
    captures: pd.DataFrame | None = None,
    steps: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """The ``fleet_stats`` rows the fleet report shows: ``fleet["fleet_stats"]`` (the fleet stage's table) when
    given with rows, else the same function over ``steps``, ``ranks`` and ``captures``
    (:func:`jobs.fleet.stats.fleet_stats` over :func:`jobs.analyze.windows.analysis_windows`).

    Returns:
        Columns of :data:`schemas.FLEET_STATS`; empty without captures or analyzed ranks.
    """
    st = (fleet or {}).get("fleet_stats")
    if isinstance(st, pd.DataFrame) and len(st):
        return st
    have = [t is not None and len(t) for t in (ranks, steps)]
    if captures is None or not len(captures) or not any(have):
        return pd.DataFrame(columns=FLEET_STATS.names)
    caps = captures.assign(**{c: None for c in RUN_COLUMNS if c not in captures.columns})
    if "status" not in captures.columns:
        caps["status"] = "ingested"
    return fleet_stats(job_steps_frame(analysis_windows(steps, ranks, caps), caps))


def job_rows(stats: pd.DataFrame | None, date: str | None = "all") -> pd.DataFrame:
    """The ``fleet_stats`` rows of dimension ``job`` of ``date`` (``None``: every capture date, not ``all``).

    Returns:
        Those rows plus ``job_id``, ``attempt`` (int), ``first_date`` (the job's earliest capture date with an
        analysis window) and ``windows`` (``ProfilerSteps`` or ``whole trace``: a job without ProfilerStep).
    """
    cols = [*FLEET_STATS.names, "job_id", "attempt", "first_date", "windows"]
    if stats is None or not len(stats):
        return pd.DataFrame(columns=cols)
    j = stats[stats["dimension"] == "job"]
    first = j[j["date"] != "all"].groupby("value")["date"].min()
    out = (j[j["date"] == date] if date is not None else j[j["date"] != "all"]).copy()
    parts = out["value"].astype(str).str.rsplit("#", n=1)
    out["job_id"] = parts.str[0]
    out["attempt"] = parts.str[1].astype(int)
    out["first_date"] = out["value"].map(first)
    out["windows"] = ["ProfilerSteps" if n and n > 0 else "whole trace" for n in out["n_steps"].fillna(0)]
    return out.reset_index(drop=True)[cols]


def _median(s: pd.Series) -> float | None:
    v = pd.to_numeric(s, errors="coerce").dropna()
    return float(v.median()) if len(v) else None


def fleet_metrics(stats: pd.DataFrame | None, captures: pd.DataFrame | None = None) -> dict[str, float]:
    """The fleet run's headline metrics (names in :data:`FLEET_METRICS`; one without data is omitted).

    From the ``fleet_stats`` rows (:func:`job_rows` of date ``all``: one per job run with an analysis window):
    ``fleet/n_jobs`` (job runs), ``fleet/n_ranks`` (the fleet row's rank captures), the median and p90 over jobs
    of the job's GPU idle % (null ones — no GPU activity — left out), the median over jobs of the job step time
    p50 (ms; jobs without ProfilerStep left out) and of exposed communication %; from ``captures``:
    ``fleet/n_captures`` and ``fleet/n_quarantined``.
    """
    j = job_rows(stats)
    m: dict[str, float] = {"fleet/n_jobs": float(len(j))}
    if captures is not None and len(
        captures
    ):  # every job run of the warehouse, analyzed or not (named in the subtitle)
        m["fleet/n_jobs"] = float(len(captures[["job_id", "attempt"]].astype({"attempt": int}).drop_duplicates()))
    f = stats[(stats["dimension"] == "fleet") & (stats["date"] == "all")] if stats is not None and len(stats) else []
    if len(f):
        m["fleet/n_ranks"] = float(f["n_ranks"].iloc[0])
    if captures is not None and len(captures):
        m["fleet/n_captures"] = float(len(captures))
        m["fleet/n_quarantined"] = float((captures["status"] == "quarantined").sum())
    idle = pd.to_numeric(j["idle_pct"], errors="coerce").dropna()
    if len(idle):
        m["fleet/idle_pct_median"] = float(idle.median())
        m["fleet/idle_pct_p90"] = float(idle.quantile(0.9))
    p50 = _median(j["step_time_p50_ns"])
    if p50 is not None:
        m["fleet/step_time_p50_ms_median"] = p50 / 1e6
    comm = _median(j["exposed_comm_pct"])
    if comm is not None:
        m["fleet/exposed_comm_pct_median"] = comm
    return m


def fleet_cards(stats: pd.DataFrame | None, captures: pd.DataFrame | None = None) -> list[dict]:
    """:func:`fleet_metrics` as header cards labelled in words with units (:data:`FLEET_METRICS`)."""
    m = fleet_metrics(stats, captures)
    return [
        {"key": label, "value": fmt_num(m[k], 0 if "/n_" in k else (2 if "_ms" in k else 1))}
        for k, label in FLEET_METRICS.items()
        if k in m
    ]


def fleet_daily(stats: pd.DataFrame | None, captures: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per capture date, from the ``fleet_stats`` job rows of that date: ``n_jobs`` (jobs with an analysis window
    that day), ``idle_pct_median`` (median over them of the job's GPU idle % that day), ``step_time_p50_ms_median``
    (median of the job step time p50, ms), and ``n_quarantined`` (captures of that date quarantined)."""
    cols = ["date", "n_jobs", "idle_pct_median", "step_time_p50_ms_median", "n_quarantined"]
    j = job_rows(stats, None)
    d = pd.DataFrame(
        {
            "n_jobs": j.groupby("date").size(),
            "idle_pct_median": j.groupby("date")["idle_pct"].agg(_median),
            "step_time_p50_ms_median": j.groupby("date")["step_time_p50_ns"].agg(_median) / 1e6,
        }
    )
    if captures is not None and len(captures):
        q = (captures["status"] == "quarantined").groupby(captures["date"].astype(str)).sum()
        d = d.join(q.rename("n_quarantined"), how="outer")
        d["n_jobs"] = d["n_jobs"].fillna(0)
    else:
        d["n_quarantined"] = 0
    if not len(d):
        return pd.DataFrame(columns=cols)
    return d.rename_axis("date").reset_index().sort_values("date").reset_index(drop=True)[cols]


def left_out(rows: pd.DataFrame, col: str) -> str:
    """`` Left out: a#0 (reason); …`` for the :func:`job_rows` rows whose ``col`` is null, with why (``""``
    when none is)."""
    miss = rows[pd.to_numeric(rows[col], errors="coerce").isna()] if len(rows) else rows
    if not len(miss):
        return ""
    why = _NO_STEP if col.startswith("step_time") else _NO_GPU if col in ("idle_pct", "compute_pct") else "no value"
    return f" Left out ({len(miss)}): " + "; ".join(f"{v} — {why}" for v in miss["value"]) + "."


def insights_window(stats: pd.DataFrame | None, fleet: dict | None = None) -> tuple[str, str, int] | None:
    """``(start, end, days)`` of the window of the windowed fleet tables (``fleet_findings``, ``host_health``):
    as stored in ``fleet_findings`` when it has rows, else :func:`jobs.fleet.window.window` over the jobs' first
    capture dates (:func:`job_rows`), as :func:`jobs.fleet.impact.fleet_findings` computes it, with
    :data:`jobs.fleet.window.WINDOW_DAYS`; ``None`` without a dated job."""
    f = (fleet or {}).get("fleet_findings")
    if isinstance(f, pd.DataFrame) and len(f):
        r = f.iloc[0]
        return str(r["window_start"]), str(r["window_end"]), int(r["window_days"])
    span = window(capture_days(job_rows(stats)["first_date"]), WINDOW_DAYS)
    if span is None:
        return None
    return span[0].strftime("%Y-%m-%d"), span[1].strftime("%Y-%m-%d"), WINDOW_DAYS


def window_text(w: tuple[str, str, int] | None) -> str:
    """``2024-07-09 … 2024-07-15 (7 days, ending at the newest capture date)``."""
    if w is None:
        return "no dated capture"
    return f"{w[0]} … {w[1]} ({w[2]} day{'s' if w[2] != 1 else ''}, ending at the newest capture date)"


def fleet_subtitle(stats: pd.DataFrame | None, captures: pd.DataFrame | None = None, fleet: dict | None = None) -> str:
    """Jobs, rank captures and capture dates covered, the window of the windowed sections, and the jobs with
    captures but no analysis window (all their captures quarantined or not yet analyzed)."""
    j = job_rows(stats)
    f = stats[(stats["dimension"] == "fleet") & (stats["date"] == "all")] if stats is not None and len(stats) else []
    n_ranks = int(f["n_ranks"].iloc[0]) if len(f) else 0
    dates = sorted(j["first_date"].dropna().astype(str).unique()) if len(j) else []
    if captures is not None and len(captures):
        dates = sorted(set(dates) | set(captures["date"].astype(str)))
    rng = f"{dates[0]} … {dates[-1]}" if dates else "no dates"
    out = (
        f"{int(fleet_metrics(stats, captures)['fleet/n_jobs'])} job(s) · {n_ranks} rank capture(s) · capture dates {rng} · fleet impact and host health over "
        f"{window_text(insights_window(stats, fleet))}"
    )
    if captures is not None and len(captures):
        missing = without_windows(j, captures)
        if missing:
            out += f" · without step or GPU statistics ({len(missing)}): " + "; ".join(
                f"{run} — {why}" for run, why in sorted(missing.items())
            )
    return out


def without_windows(jobs: pd.DataFrame, captures: pd.DataFrame) -> dict[str, str]:
    """``{job#attempt: why}`` of the job runs in ``captures`` with no :func:`job_rows` row (no analysis window):
    every capture quarantined, Neuron device profiles only (their statistics are the Neuron ones), or no
    analyzed trace yet."""
    have = set(zip(jobs["job_id"], jobs["attempt"])) if len(jobs) else set()
    out = {}
    for (job, attempt), c in captures.astype({"attempt": int}).groupby(["job_id", "attempt"], sort=True):
        if (job, attempt) in have:
            continue
        ingested = c[c["status"] == "ingested"]
        if not len(ingested):
            why = "every capture quarantined" if (c["status"] == "quarantined").all() else "no ingested capture"
        elif "source" in c and set(ingested["source"].astype(str)) <= {"neuron", "xla"}:
            why = "Neuron or XLA device profiles only: see their device statistics, not the step breakdown"
        else:
            why = "no analyzed trace yet"
        out[f"{job}#{attempt}"] = why
    return out


_JOB_SPEC = [
    ("value", "job", fmt_text, "name"),
    ("first_date", "date", fmt_text, ""),
    ("windows", "analysis windows", fmt_text, ""),
    ("n_ranks", "ranks", fmt_int, "num"),
    ("n_steps", "steps", fmt_int, "num"),
    ("idle_pct", "GPU idle, %", _pct, "num"),
    ("step_time_p50_ns", "job step time p50, ms", fmt_ms, "num"),
    ("exposed_comm_pct", "exposed communication, %", _pct, "num"),
    ("cpu_bound_pct", "CPU-bound, %", _pct, "num"),
]


def trends_section(stats: pd.DataFrame | None, captures: pd.DataFrame | None = None) -> Section:
    """ "Trends over time": :func:`fleet_daily` as a plot and a table."""
    sec = Section(
        "trends",
        "Trends over time",
        intro="Per capture date, over the jobs with an analysis window that day (each job's fleet statistics of "
        "that date): the jobs, and the median over them of the job's GPU idle % (HTA temporal breakdown, "
        "time-weighted over its rank windows) and of its job step time p50 (slowest rank per ProfilerStep).",
    )
    daily = fleet_daily(stats, captures)
    if not len(daily):
        sec.note, sec.status = "Not available: no analyzed jobs yet.", "unavailable"
        return sec
    j = job_rows(stats, None)
    sec.intro += left_out(j.drop_duplicates("value"), "step_time_p50_ns") + left_out(
        j.drop_duplicates("value"), "idle_pct"
    )
    plot = fleet_trends(daily)
    if plot is not None:
        sec.plots.append(plot)
    sec.tables.append(
        table_view(
            "daily",
            daily,
            [
                ("date", "date", fmt_text, ""),
                ("n_jobs", "jobs", fmt_int, "num"),
                ("idle_pct_median", "GPU idle, %: median job that day", _pct, "num"),
                (
                    "step_time_p50_ms_median",
                    "job step time p50, ms: median job that day",
                    lambda v: fmt_num(v, 2),
                    "num",
                ),
                ("n_quarantined", "files quarantined", fmt_int, "num"),
            ],
        )
    )
    return sec


def straggler_ranks(
    collectives: pd.DataFrame | None, findings: pd.DataFrame | None = None, ranks: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Per rank of each multi-rank job, the ``straggler_rank`` finding's measure
    (jobs/analyze/findings/rules.py): over the collectives matched on ≥ 2 ranks, ``calls`` (its distinct calls),
    ``last`` (those where it arrived last), ``last_pct`` = 100 × last / calls, ``fair_pct`` = 100 / n (n = the
    job's median ranks per call), ``ratio`` = last_pct / fair_pct; ``named`` (the job's straggler_rank finding
    names it), ``step_p50_ns`` (``ranks.step_time_p50_ns``), ``measure`` = ``last arrivals``.

    A multi-rank job without a collective matched across ranks is ranked by step time instead (``measure`` =
    ``step time``, as host_health does without collectives): ``ratio`` = the rank's step p50 ÷ the median over
    the job's ranks, ``calls``/``last``/``last_pct``/``fair_pct`` null.

    Returns:
        Those columns plus ``job_id``, ``attempt``, ``rank``, ``job`` (``job_id#attempt``): the jobs measured by
        last arrivals first, ordered by their most-late rank's ratio; in each job the named rank first, then by
        ``ratio``.
    """
    cols = [
        "job",
        "job_id",
        "attempt",
        "rank",
        "measure",
        "calls",
        "last",
        "last_pct",
        "fair_pct",
        "ratio",
        "named",
        "step_p50_ns",
    ]
    by = ["job_id", "attempt", "rank"]
    parts = []
    c = collectives if collectives is not None and "is_last_arrival" in collectives.columns else pd.DataFrame()
    if len(c):
        c = c[pd.to_numeric(c["n_ranks_matched"], errors="coerce").fillna(0) >= 2]
    if len(c):
        c = c.assign(attempt=c["attempt"].astype(int), rank=c["rank"].astype(int))
        c = c.assign(_last=c["is_last_arrival"].astype("boolean").fillna(False).astype(bool))
        per = pd.DataFrame(
            {
                "calls": c.groupby(by)["match_key"].nunique(),
                "last": c[c["_last"]].groupby(by)["match_key"].nunique(),
            }
        ).fillna({"last": 0})
        per = per.reset_index()
        n = c.groupby(["job_id", "attempt", "match_key"])["rank"].nunique().groupby(["job_id", "attempt"]).median()
        per["fair_pct"] = 100.0 / per.set_index(["job_id", "attempt"]).index.map(n).astype(float)
        per["last_pct"] = 100.0 * per["last"] / per["calls"]
        per["ratio"] = per["last_pct"] / per["fair_pct"]
        per["measure"], per["_kind"] = "last arrivals", 0
        parts.append(per)
    p50 = pd.Series(dtype=float)
    if ranks is not None and len(ranks) and "step_time_p50_ns" in ranks.columns:
        r = ranks.assign(
            attempt=ranks["attempt"].astype(int),
            rank=ranks["rank"].astype(int),
            _p50=pd.to_numeric(ranks["step_time_p50_ns"], errors="coerce").astype(float),
        )
        p50 = r.groupby(by)["_p50"].first()
        done = {(j, a) for p in parts for j, a in zip(p["job_id"], p["attempt"])}
        keep = [(j, a) not in done for j, a in zip(r["job_id"], r["attempt"])] & r["_p50"].notna().to_numpy()
        r = r[keep].reset_index(drop=True)
        med = r.groupby(["job_id", "attempt"])["_p50"].transform("median")
        n_ranks = r.groupby(["job_id", "attempt"])["rank"].transform("nunique")
        r = r.assign(ratio=r["_p50"] / med)[((n_ranks > 1) & (med > 0)).to_numpy()]
        if len(r):
            parts.append(r[[*by, "ratio"]].assign(measure="step time", _kind=1))
    if not parts:
        return pd.DataFrame(columns=cols)
    per = pd.concat(parts, ignore_index=True)
    for col in ("calls", "last", "last_pct", "fair_pct"):
        if col not in per.columns:
            per[col] = None
    named: set = set()
    if findings is not None and len(findings) and "ranks" in findings.columns:
        for f in findings[findings["rule"] == "straggler_rank"].itertuples():
            for k in f.ranks if f.ranks is not None else []:
                named.add((str(f.job_id), int(f.attempt), int(k)))
    per["named"] = [(j, a, k) in named for j, a, k in zip(per["job_id"].astype(str), per["attempt"], per["rank"])]
    per["step_p50_ns"] = per.set_index(by).index.map(p50) if len(p50) else None
    per["job"] = per["job_id"].astype(str) + "#" + per["attempt"].astype(str)
    per["_top"] = per.groupby("job")["ratio"].transform("max")
    per = per.sort_values(
        ["_kind", "_top", "job", "named", "ratio", "rank"],
        ascending=[True, False, True, False, False, True],
        kind="stable",
    )
    return per.reset_index(drop=True)[cols]


def stragglers_table(
    collectives: pd.DataFrame | None,
    findings: pd.DataFrame | None,
    ranks: pd.DataFrame | None,
    top: int,
):
    """The "Straggler ranks" table of :func:`straggler_ranks` (``None`` without a multi-rank job)."""
    s = straggler_ranks(collectives, findings, ranks)
    if not len(s):
        return None
    caption = (
        "Straggler ranks: how often each rank arrived last at the collectives matched across its job's ranks "
        "(the straggler_rank finding's measure: last arrivals ÷ matched calls, against the fair share 1 ÷ ranks "
        "per call; × fair share = their ratio), the rank the job's straggler_rank finding names first."
    )
    by_step = sorted(set(s.loc[s["measure"] == "step time", "job"]))
    if by_step:
        caption += (
            f" Without a collective matched across ranks ({len(by_step)}: {', '.join(by_step)}): by step time, "
            "× fair share = the rank's step p50 ÷ the median over the job's ranks."
        )
    return table_view(
        "stragglers",
        s.assign(named=s["named"].map({True: "straggler_rank", False: ""})),
        [
            ("job", "job", fmt_text, "name"),
            ("rank", "rank", fmt_int, "num"),
            ("named", "finding", fmt_text, ""),
            ("measure", "measured by", fmt_text, ""),
            ("last", "last arrivals", fmt_int, "num"),
            ("calls", "matched calls", fmt_int, "num"),
            ("last_pct", "last-arrival %", _pct, "num"),
            ("fair_pct", "fair share %", _pct, "num"),
            ("ratio", "× fair share", lambda v: fmt_num(v, 2), "num"),
            ("step_p50_ns", "rank step p50 ms", fmt_ms, "num"),
        ],
        caption=caption,
        limit=top,
        total=len(s),
    )


def worst_section(
    stats: pd.DataFrame | None,
    captures: pd.DataFrame | None = None,
    findings: pd.DataFrame | None = None,
    collectives: pd.DataFrame | None = None,
    ranks: pd.DataFrame | None = None,
    top: int = 10,
) -> Section:
    """ "Worst offenders": jobs by GPU idle %, job step time p50 and exposed communication % (``fleet_stats`` job
    rows, all dates), straggler ranks (:func:`stragglers_table`), quarantined files, findings by time lost."""
    sec = Section(
        "worst-offenders",
        "Worst offenders",
        intro=f"Top {top} per criterion, every capture date. Job numbers are the jobs' fleet statistics (the "
        "numbers of their job reports): job step time = the slowest rank per ProfilerStep; GPU idle % = Σ idle ÷ "
        "Σ kernel time over the job's rank windows (its ProfilerSteps, or its whole trace without ProfilerStep).",
    )
    j = job_rows(stats)
    for col, key, caption in (
        ("idle_pct", "worst-idle", "Jobs with the most GPU idle time"),
        ("step_time_p50_ns", "worst-step", "Jobs with the longest job step time p50"),
    ):
        d = j[pd.to_numeric(j[col], errors="coerce").notna()].sort_values([col, "value"], ascending=[False, True])
        if len(d):
            sec.tables.append(
                table_view(key, d, _JOB_SPEC, caption=caption + "." + left_out(j, col), limit=top, total=len(d))
            )
    comm = pd.to_numeric(j["exposed_comm_pct"], errors="coerce").fillna(0)
    if (comm > 0).any():
        d = j[comm > 0].sort_values(["exposed_comm_pct", "value"], ascending=[False, True])
        none = sorted(j.loc[comm <= 0, "value"])
        cap = "Jobs with the most exposed communication (% of rank window time no computation overlaps)."
        if none:
            cap += f" Not listed ({len(none)}): {', '.join(none)} — no exposed communication."
        sec.tables.append(table_view("worst-exposed", d, _JOB_SPEC, caption=cap, limit=top, total=len(d)))
    view = stragglers_table(collectives, findings, ranks, top)
    if view is not None:
        sec.tables.append(view)
    if captures is not None and len(captures):
        q = captures[captures["status"] == "quarantined"]
        if len(q):
            sec.tables.append(
                table_view(
                    "quarantined",
                    q,
                    [
                        ("job_id", "job", fmt_text, "name"),
                        ("uri", "file", fmt_text, "name"),
                        ("reason", "reason", fmt_text, ""),
                    ],
                    caption="Quarantined files",
                    limit=top,
                    total=len(q),
                )
            )
    if isinstance(findings, pd.DataFrame) and len(findings) and "est_time_lost_per_step_ns" in findings.columns:
        f = findings.assign(
            est=pd.to_numeric(findings["est_time_lost_per_step_ns"], errors="coerce"),
            job=findings["job_id"].astype(str)
            + ("#" + findings["attempt"].astype(str) if "attempt" in findings.columns else ""),
        )
        f = f.sort_values("est", ascending=False)
        spec = [
            ("job", "job", fmt_text, "name"),
            ("date", "date", fmt_text, ""),
            ("title", "finding", fmt_text, ""),
            ("rule", "rule", fmt_text, "name"),
            ("est", "est. lost ms/step", fmt_ms, "num"),
        ]
        sec.tables.append(
            table_view(
                "top-findings",
                f,
                [s for s in spec if s[0] in f.columns],
                caption="Findings with the most estimated time lost per step (every capture date)",
                limit=top,
                total=len(f),
            )
        )
    if not sec.tables:
        sec.note, sec.status = "Not available: no analyzed jobs yet.", "unavailable"
    return sec


def fleet_report_sections(
    ranks: pd.DataFrame | None,
    captures: pd.DataFrame | None,
    steps: pd.DataFrame | None = None,
    findings: pd.DataFrame | None = None,
    fleet: dict | None = None,
    collectives: pd.DataFrame | None = None,
    fleet_validation: dict | None = None,
    top: int = 10,
) -> tuple[str, list[dict], list[Section]]:
    """``(subtitle, cards, sections)`` of the fleet report, every per-job number from :func:`fleet_stats_of`.

    Sections: trends, findings ranked by fleet impact, kernels worth tuning, host health, the breakdown by job name / model / hardware /
    torch version, regressions (the last four with ``fleet``), worst offenders, and the fleet tables' data quality
    (with ``fleet_validation``).
    """
    ranks = ranks if isinstance(ranks, pd.DataFrame) and len(ranks) else None
    captures = captures if isinstance(captures, pd.DataFrame) and len(captures) else None
    stats = fleet_stats_of(fleet, ranks, captures, steps)
    w = insights_window(stats, fleet)
    secs = [trends_section(stats, captures)]
    if fleet is not None:
        secs += [
            impact_section(fleet.get("fleet_findings"), findings=findings, stats=stats, window_=w),
            ops_section(fleet.get("fleet_ops"), window_=w),
            host_section(fleet.get("host_health"), window_=w),
            breakdown_section(stats, fleet.get("fleet_kernels"), top),
            regressions_section(fleet.get("regressions"), stats=stats),
        ]
    secs.append(worst_section(stats, captures, findings, collectives, ranks, top))
    if fleet_validation is not None:
        secs.append(validation_section(fleet_validation))
    return fleet_subtitle(stats, captures, fleet), fleet_cards(stats, captures), secs
