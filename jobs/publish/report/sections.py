"""Report sections built from warehouse tables (pandas in, :class:`~jobs.publish.report.blocks.Section` out).

Each builder takes the tables it needs from a ``{name: DataFrame}`` dict and returns a section with
a "not available" note when they are missing or empty — a report never fails because another stage
has not produced its table yet. Definitions: HTA 0.5.0 for the temporal and idle-time breakdowns,
``schemas/tables.py`` for every column.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from jobs.fleet.stats import job_step_times
from jobs.publish.report import plots as P
from jobs.publish.report.blocks import (
    Section,
    fmt_int,
    fmt_ms,
    fmt_num,
    fmt_smart,
    fmt_text,
    fmt_us,
    table_view,
    unavailable,
)
from jobs.publish.tracking import job_metrics


def _get(tables: dict, name: str) -> pd.DataFrame | None:
    df = tables.get(name) if tables else None
    return df if isinstance(df, pd.DataFrame) and len(df) else None


def _num(df: pd.DataFrame, col: str) -> pd.Series:
    if col not in df.columns:
        return pd.Series(np.nan, index=df.index, dtype=float)
    return pd.to_numeric(df[col], errors="coerce").astype(float)


def _pct(v) -> str:
    return fmt_num(v, 1)


def _first(df: pd.DataFrame | None, col: str):
    if df is None or col not in df.columns:
        return None
    vals = df[col].dropna()
    return vals.iloc[0] if len(vals) else None


# ----------------------------------------------------------------------------- job report


def job_identity(tables: dict) -> tuple[str, str]:
    """``(job_id, attempt)`` as text from the first table that has them (``unknown`` otherwise)."""
    for name in ("captures", "ranks", "steps", "kernels", "collectives", "critical_path", "findings"):
        df = _get(tables, name)
        if df is not None and "job_id" in df.columns:
            jobs = sorted({str(j) for j in df["job_id"].dropna()})
            att = _first(df, "attempt")
            return ", ".join(jobs) or "unknown", "?" if att is None else str(int(att))
    return "unknown", "?"


def job_subtitle(tables: dict) -> str:
    """World size, device, trace format, rank and capture counts."""
    caps, ranks = _get(tables, "captures"), _get(tables, "ranks")
    bits = []
    ws = _first(ranks, "world_size") or _first(caps, "world_size")
    if ws is not None:
        bits.append(f"world size {int(ws)}")
    dev = _first(ranks, "device_name") or _first(caps, "device_name")
    bits.append(f"device {dev}" if dev is not None else "device not recorded in the trace")
    if caps is not None:
        n_q = int((caps["status"] == "quarantined").sum()) if "status" in caps.columns else 0
        bits.append(f"{len(caps)} capture(s), {n_q} quarantined")
        fmt = _first(caps, "format")
        if fmt is not None:
            bits.append(f"trace format {fmt}")
    if ranks is not None:
        bits.append(f"{ranks['rank'].nunique()} rank(s) analyzed")
    return " · ".join(bits)


#: Headline tiles of the job report: MLflow metric (:func:`jobs.publish.tracking.job_metrics`) → label with its unit.
CARD_LABELS = {
    "step_time_p50_ms": "job step time p50, ms (slowest rank per step)",
    "step_time_max_ms": "longest job step, ms",
    "idle_pct": "GPU idle, % of kernel time",
    "compute_pct": "GPU compute, % of kernel time",
    "non_compute_pct": "GPU non-compute, % of kernel time",
    "overlap_pct": "comm/compute overlap, %",
    "idle_pct_max": "worst rank's GPU idle, %",
    "n_ranks": "ranks",
    "n_steps": "rank-steps",
}


def job_cards(tables: dict) -> list[dict]:
    """Headline tiles: the MLflow metrics of :func:`jobs.publish.tracking.job_metrics`, labelled in words with
    their unit (:data:`CARD_LABELS`); the GPU tiles are left out of a job without GPU activity."""
    ranks, steps = _get(tables, "ranks"), _get(tables, "steps")
    if ranks is None:
        return []
    steps = steps if steps is not None else pd.DataFrame(columns=["rank", "step_time_ns"])
    try:
        m = job_metrics(ranks, steps)
    except KeyError:
        return []
    out = [
        {"key": label, "value": fmt_num(m[k], 0 if k.startswith("n_") else 2)}
        for k, label in CARD_LABELS.items()
        if k in m
    ]
    caps = _get(tables, "captures")
    if caps is not None and "status" in caps.columns:
        out.append({"key": "files quarantined", "value": str(int((caps["status"] == "quarantined").sum()))})
    return out


def verdict_section(tables: dict) -> Section:
    """The answer first: the top bottleneck in words, what it costs per step (and as a share of the job step time)
    and what to do, then the next two findings."""
    key, title = "verdict", "Verdict"
    f, steps = _get(tables, "findings"), _get(tables, "steps")
    if f is None:
        return Section(
            key, title, intro="No bottleneck found: no finding rule fired on this job's traces.", status="ok"
        )
    f = f.sort_values("rank_order") if "rank_order" in f.columns else f
    top = f.iloc[0]
    lost = top.get("est_time_lost_per_step_ns")
    step_p50 = None
    if steps is not None and len(steps) and {"step", "step_time_ns"} <= set(steps.columns):
        times = job_step_times(steps)
        step_p50 = float(times.median()) if len(times) else None
    cost = ""
    if lost is not None and lost == lost:
        cost = f" It costs about {float(lost) / 1e6:,.2f} ms per step"
        cost += (
            f", {100 * float(lost) / step_p50:.0f} % of the job step time ({step_p50 / 1e6:,.2f} ms)."
            if step_p50
            else "."
        )
    todo = top.get("recommendation")
    sec = Section(
        key,
        title,
        intro=f"Top bottleneck: {fmt_text(top.get('title'))}.{cost}"
        + (f" What to do: {fmt_text(todo)}" if isinstance(todo, str) and todo else ""),
    )
    rest = f.iloc[1:3]
    if len(rest):
        sec.tables.append(
            table_view(
                "verdict-next",
                rest,
                [("title", "next finding", fmt_text, ""), ("est_time_lost_per_step_ns", "ms/step", fmt_ms, "num")],
                caption="Then",
            )
        )
    return sec


def step_section(tables: dict) -> Section:
    """Step-time breakdown per rank (plot) and the per-rank summary table."""
    key, title = "step-time", "Step time per rank"
    intro = (
        "Mean per ProfilerStep of HTA's temporal breakdown of the GPU events attributed to the step "
        "(compute, non-compute = communication/memory/other, idle), or host busy time on ranks without GPU "
        "activity; median step time marked."
    )
    steps, ranks = _get(tables, "steps"), _get(tables, "ranks")
    if steps is None and ranks is None:
        return unavailable(
            key, title, "no `steps` or `ranks` rows for this job (no ProfilerStep, or not analyzed).", intro
        )
    sec = Section(key, title, intro=intro)
    plot = P.step_breakdown(steps)
    if plot:
        sec.plots.append(plot)
    else:
        sec.note = "Not available: no ProfilerStep annotations, so no per-step breakdown (whole-trace numbers below)."
    rows = []
    for r in sorted(set((ranks["rank"] if ranks is not None else steps["rank"]).dropna().astype(int))):
        s = steps[steps["rank"] == r] if steps is not None else pd.DataFrame()
        rr = (
            ranks[ranks["rank"] == r].iloc[0]
            if ranks is not None and (ranks["rank"] == r).any()
            else pd.Series(dtype=object)
        )
        st = _num(s, "step_time_ns") if len(s) else pd.Series(dtype=float)
        busy = (_num(s, "cpu_op_time_ns").sum() / st.sum() * 100) if len(s) and st.sum() else np.nan
        n = len(s)
        rows.append(
            {
                "rank": r,
                "steps": n,
                "p50": st.median() if n else rr.get("step_time_p50_ns"),
                "max": st.max() if n else rr.get("step_time_max_ns"),
                "idle_pct": rr.get("idle_pct"),
                "compute_pct": rr.get("compute_pct"),
                "non_compute_pct": rr.get("non_compute_pct"),
                "overlap_pct": rr.get("overlap_pct"),
                "exposed": (_num(s, "exposed_comm_ns").mean() if n else rr.get("exposed_comm_ns")),
                "busy": busy,
            }
        )
    spec = [
        ("rank", "rank", fmt_int, "num"),
        ("steps", "steps", fmt_int, "num"),
        ("p50", "step p50 ms", fmt_ms, "num"),
        ("max", "step max ms", fmt_ms, "num"),
        ("idle_pct", "GPU idle %", _pct, "num"),
        ("compute_pct", "GPU compute %", _pct, "num"),
        ("non_compute_pct", "GPU non-compute %", _pct, "num"),
        ("overlap_pct", "comm/comp overlap %", _pct, "num"),
        ("exposed", "exposed comm ms/step", fmt_ms, "num"),
        ("busy", "host busy %", _pct, "num"),
    ]
    df = pd.DataFrame(rows)
    gpu_cols = ("idle_pct", "compute_pct", "non_compute_pct", "overlap_pct")
    caption = "Per rank (GPU % over the whole trace: HTA get_temporal_breakdown)"
    if df[list(gpu_cols)].isna().all().all():  # a CPU-only job: say so once instead of four empty columns
        spec = [c for c in spec if c[0] not in gpu_cols]
        caption = "Per rank (no GPU activity in these traces: the GPU columns are left out; host busy % = CPU ops / step time)"
    sec.tables.append(table_view("ranks", df, spec, caption=caption))
    return sec


def idle_section(tables: dict) -> Section:
    """HTA idle-time breakdown per rank (host wait / kernel wait / other)."""
    key, title = "idle-time", "Idle-time breakdown"
    intro = (
        "HTA get_idle_time_breakdown: each gap between device events on a stream is host wait (the launch "
        "came after the previous event ended), kernel wait (< 30 µs) or other; Σ over streams."
    )
    plot = P.idle_breakdown(_get(tables, "ranks"), _get(tables, "steps"))
    if plot is None:
        return unavailable(
            key, title, "no GPU idle time breakdown (CPU-only trace, or `ranks`/`steps` missing).", intro
        )
    return Section(key, title, intro=intro, plots=[plot])


def top_kernels_frame(tables: dict, k: int = 15) -> tuple[pd.DataFrame | None, str]:
    """Kernels by total time over all ranks and steps: ``(frame, source)``.

    From ``kernels`` (HTA get_gpu_kernel_breakdown per kernel) when present, else from ``events``
    (device events with a duration). Columns: name, kernel_type, n, total_ns, mean_ns, share_pct.
    """
    kern, ev = _get(tables, "kernels"), _get(tables, "events")
    if kern is not None and {"name", "total_ns"} <= set(kern.columns):
        k_ = kern.assign(
            total_ns=_num(kern, "total_ns"),
            n=_num(kern, "n"),
            kernel_type=kern["kernel_type"] if "kernel_type" in kern.columns else None,
        )
        g = k_.groupby("name", dropna=False).agg(
            n=("n", "sum"), total_ns=("total_ns", "sum"), kernel_type=("kernel_type", "first")
        )
        src = "kernels"
    elif ev is not None and {"name", "dur_ns", "is_gpu"} <= set(ev.columns):
        d = ev[ev["is_gpu"].fillna(False).astype(bool) & ev["dur_ns"].notna()]
        if not len(d):
            return None, ""
        g = (
            d.assign(dur_ns=_num(d, "dur_ns"))
            .groupby("name", dropna=False)
            .agg(n=("dur_ns", "size"), total_ns=("dur_ns", "sum"))
        )
        g["kernel_type"] = None
        src = "events"
    else:
        return None, ""
    if not len(g):
        return None, ""
    g = g.reset_index()
    total = g["total_ns"].sum()
    g["mean_ns"] = g["total_ns"] / g["n"].replace(0, np.nan)
    g["share_pct"] = g["total_ns"] / total * 100 if total else np.nan
    return g.sort_values(["total_ns", "name"], ascending=[False, True]).head(k).reset_index(drop=True), src


def kernels_section(tables: dict, k: int = 15) -> Section:
    """Top kernels by total time (plot and table)."""
    key, title = "top-kernels", "Top kernels"
    top, src = top_kernels_frame(tables, k)
    intro = "Σ duration over all ranks and steps, per kernel name (HTA get_gpu_kernel_breakdown, no merging)."
    if top is None:
        return unavailable(key, title, "no GPU kernels (CPU-only trace, or `kernels` not computed yet).", intro)
    if src == "events":
        intro += " Computed from `events` (the `kernels` table is not available)."
    spec = [
        ("name", "kernel", lambda v: P.short(v, 240), "name"),
        ("kernel_type", "type", fmt_text, ""),
        ("n", "launches", fmt_int, "num"),
        ("total_ns", "total ms", fmt_ms, "num"),
        ("mean_ns", "mean µs", fmt_us, "num"),
        ("share_pct", "% of kernel time", _pct, "num"),
    ]
    sec = Section(key, title, intro=intro, tables=[table_view("top-kernels", top, spec)])
    plot = P.top_kernels(top)
    if plot:
        sec.plots.append(plot)
    return sec


def collectives_section(tables: dict) -> Section:
    """Collective wait heatmap by rank × call; stragglers per rank; the calls with the most skew."""
    key, title = "collectives", "Collective wait"
    intro = (
        "wait = last arrival − own arrival at each collective call, on the job clock aligned on collective "
        "completion; the rank that arrives last is the straggler of the call."
    )
    col = _get(tables, "collectives")
    if col is None:
        return unavailable(
            key, title, "no `collectives` rows (single rank, no communication kernels, or not computed yet).", intro
        )
    sec = Section(key, title, intro=intro)
    plot = P.collective_wait_heatmap(col)
    if plot:
        sec.plots.append(plot)
    c = col.assign(
        wait_ns=_num(col, "wait_ns"),
        busbw=_num(col, "busbw_gbps"),
        last=col["is_last_arrival"].fillna(False).astype(bool) if "is_last_arrival" in col.columns else False,
    )
    per_rank = (
        c.groupby("rank")
        .agg(calls=("wait_ns", "size"), wait=("wait_ns", "sum"), last=("last", "sum"), busbw=("busbw", "mean"))
        .reset_index()
    )
    sec.tables.append(
        table_view(
            "collective-ranks",
            per_rank,
            [
                ("rank", "rank", fmt_int, "num"),
                ("calls", "calls", fmt_int, "num"),
                ("wait", "total wait ms", fmt_ms, "num"),
                ("last", "times last to arrive", fmt_int, "num"),
                ("busbw", "mean bus bandwidth GB/s", _pct, "num"),
            ],
            caption="Per rank",
        )
    )
    if "skew_ns" in c.columns and "match_key" in c.columns:
        last_rank = c[c["last"]].groupby("match_key")["rank"].first() if c["last"].any() else pd.Series(dtype=float)
        c = c.assign(
            collective=c["collective"] if "collective" in c.columns else None,
            msg_bytes=_num(c, "msg_bytes"),
            skew_ns=_num(c, "skew_ns"),
        )
        calls = (
            c.groupby("match_key")
            .agg(
                collective=("collective", "first"),
                skew=("skew_ns", "max"),
                msg=("msg_bytes", "max"),
                n=("rank", "nunique"),
            )
            .reset_index()
        )
        calls["last_rank"] = calls["match_key"].map(last_rank)
        calls = calls.sort_values("skew", ascending=False)
        sec.tables.append(
            table_view(
                "collective-calls",
                calls,
                [
                    ("match_key", "call", fmt_text, "name"),
                    ("collective", "collective", fmt_text, ""),
                    ("msg", "message bytes", fmt_int, "num"),
                    ("n", "ranks", fmt_int, "num"),
                    ("skew", "skew ms", fmt_ms, "num"),
                    ("last_rank", "last to arrive", fmt_int, "num"),
                ],
                caption="Calls with the largest arrival skew",
                limit=10,
                total=len(calls),
            )
        )
    return sec


def critical_path_section(tables: dict) -> Section:
    """Critical-path attribution (share of path time per ``bound_by``), per-step lengths, longest segments."""
    key, title = "critical-path", "Critical path"
    cp = _get(tables, "critical_path")
    intro = (
        "Segments of the critical path per step (HTA critical-path graph per rank; across ranks, following "
        "collectives to the rank that arrived last) and what each is bound by."
    )
    if cp is None or "dur_ns" not in cp.columns:
        return unavailable(key, title, "no `critical_path` rows (not computed yet for this job).", intro)
    scope = "job" if "scope" in cp.columns and (cp["scope"] == "job").any() else "rank"
    d = cp[cp["scope"] == scope] if "scope" in cp.columns else cp
    d = d.assign(dur_ns=_num(d, "dur_ns"))
    sec = Section(key, title, intro=intro + f" Showing scope `{scope}`.")
    if "bound_by" in d.columns:
        share = d.groupby(d["bound_by"].fillna("unattributed"))["dur_ns"].sum().rename("dur_ns").reset_index()
        tot = share["dur_ns"].sum()
        share["pct"] = share["dur_ns"] / tot * 100 if tot else 0.0
        share = share.sort_values("dur_ns", ascending=False)
        plot = P.critical_path_attribution(share)
        if plot:
            sec.plots.append(plot)
        sec.tables.append(
            table_view(
                "cp-share",
                share,
                [
                    ("bound_by", "bound by", fmt_text, ""),
                    ("dur_ns", "time ms", fmt_ms, "num"),
                    ("pct", "% of path", _pct, "num"),
                ],
            )
        )
    paths = [c for c in ("step", "path_rank") if c in d.columns]
    if paths and "path_length_ns" in d.columns:
        per = d.groupby(paths).agg(length=("path_length_ns", "max"), segments=("dur_ns", "size")).reset_index()
        sec.tables.append(
            table_view(
                "cp-steps",
                per,
                [(p, p.replace("_", " "), fmt_int, "num") for p in paths]
                + [("length", "path length ms", fmt_ms, "num"), ("segments", "segments", fmt_int, "num")],
                caption="Per step",
                limit=20,
                total=len(per),
            )
        )
    seg = d.sort_values("dur_ns", ascending=False)
    spec = [
        (c, h, f, k)
        for c, h, f, k in [
            ("step", "step", fmt_int, "num"),
            ("rank", "rank", fmt_int, "num"),
            ("name", "event", lambda v: P.short(v, 240), "name"),
            ("bound_by", "bound by", fmt_text, ""),
            ("dur_ns", "µs", fmt_us, "num"),
        ]
        if c in seg.columns
    ]
    sec.tables.append(table_view("cp-segments", seg, spec, caption="Longest segments", limit=10, total=len(seg)))
    return sec


def findings_section(tables: dict) -> Section:
    """Ranked findings with evidence and recommendation."""
    key, title = "findings", "Findings"
    f = _get(tables, "findings")
    intro = "Bottlenecks ranked by estimated time lost per step, with evidence and what to try."
    if f is None:
        return unavailable(key, title, "no findings for this job (none fired, or findings not computed yet).", intro)
    f = f.sort_values("rank_order") if "rank_order" in f.columns else f
    if "ranks" in f.columns:  # "all" rather than every rank listed
        n_ranks = _get(tables, "ranks")
        n = n_ranks["rank"].nunique() if n_ranks is not None and "rank" in n_ranks.columns else None
        f = f.assign(
            ranks=[
                (
                    "all"
                    if n and v is not None and len(v) == n and n > 1
                    else ", ".join(str(x) for x in v)
                    if v is not None
                    else ""
                )
                for v in f["ranks"]
            ]
        )
    spec = [
        (c, h, fn, k)
        for c, h, fn, k in [
            ("rank_order", "#", fmt_int, "num"),
            ("title", "finding", fmt_text, ""),
            ("est_time_lost_per_step_ns", "est. lost ms/step", fmt_ms, "num"),
            ("recommendation", "what to do", fmt_text, ""),
            ("ranks", "ranks", fmt_text, ""),
            ("confidence", "confidence", lambda v: fmt_num(v, 2), "num"),
            ("rule", "rule", fmt_text, ""),
            ("metric", "metric", fmt_text, ""),
            ("value", "value", lambda v: fmt_num(v, 2), "num"),
        ]
        if c in f.columns
    ]
    sec = Section(key, title, intro=intro, tables=[table_view("findings", f, spec)])
    if "evidence_json" in f.columns:
        for r in f.head(10).to_dict(orient="records"):
            ev = r.get("evidence_json")
            try:
                text = json.dumps(json.loads(ev), indent=1) if isinstance(ev, str) else fmt_text(ev)
            except ValueError:
                text = str(ev)
            sec.details.append({"summary": f"evidence: {fmt_text(r.get('finding_id', r.get('title')))}", "text": text})
    return sec


def quality_section(tables: dict, validation=None) -> Section:
    """Data validation status of the job (if a report is given) and the quarantined files."""
    key, title = "data-quality", "Data quality"
    caps = _get(tables, "captures")
    sec = Section(
        key,
        title,
        intro="Great Expectations suites derived from schemas/ (jobs/validate/suites.py) and "
        "files quarantined by normalize.",
    )
    if validation is None:
        sec.note = "Not available: no validation report attached to this report."
    else:
        job_id, _ = job_identity(tables)
        ok = validation.job_success(job_id) if job_id != "unknown" else validation.success
        sec.status = "passed" if ok else "failed"
        rows = [
            {"table": k, "check": c.id, "unexpected": c.jobs.get(job_id, c.unexpected_count), "doc": c.doc}
            for k, t in validation.tables.items()
            for c in t.failed
            if job_id in c.jobs or job_id == "unknown"
        ]
        if rows:
            sec.tables.append(
                table_view(
                    "validation-failures",
                    pd.DataFrame(rows),
                    [
                        ("table", "table", fmt_text, "name"),
                        ("check", "check", fmt_text, "name"),
                        ("unexpected", "unexpected rows", fmt_text, "num"),
                        ("doc", "why", fmt_text, ""),
                    ],
                    caption="Failed checks",
                )
            )
    if caps is not None and "status" in caps.columns:
        q = caps[caps["status"] == "quarantined"]
        if len(q):
            sec.tables.append(
                table_view(
                    "quarantined",
                    q,
                    [("uri", "file", fmt_text, "name"), ("reason", "reason", fmt_text, "")],
                    caption="Quarantined files",
                )
            )
    return sec


def captures_section(tables: dict) -> Section:
    """One row per raw trace file of the job."""
    key, title = "captures", "Captures"
    caps = _get(tables, "captures")
    if caps is None:
        return unavailable(key, title, "no `captures` rows for this job.")
    caps = caps.sort_values([c for c in ("rank", "uri") if c in caps.columns])
    spec = [
        (c, h, fn, k)
        for c, h, fn, k in [
            ("rank", "rank", fmt_int, "num"),
            ("status", "status", fmt_text, ""),
            ("format", "format", fmt_text, ""),
            ("time_base", "time base", fmt_text, ""),
            ("n_events", "events", fmt_int, "num"),
            ("n_profiler_steps", "steps", fmt_int, "num"),
            ("size_bytes", "bytes", fmt_int, "num"),
            ("flags", "flags", fmt_text, ""),
            ("uri", "file", fmt_text, "name"),
        ]
        if c in caps.columns
    ]
    return Section(key, title, tables=[table_view("captures", caps, spec, limit=100, total=len(caps))])


# ----------------------------------------------------------------------------- fleet report
# The fleet report's sections, cards and metrics live in :mod:`jobs.publish.report.fleet_tables`: every per-job
# number there is a ``fleet_stats`` row (the definition of :func:`jobs.fleet.stats.run_summary`).


# ----------------------------------------------------------------------------- comparison report


def comparison_subtitle(c) -> str:
    """Ranks and steps used for per-step normalization on each side."""
    return (
        f"A = {c.a_label}: {c.a_ranks} rank(s), {fmt_num(c.a_steps, 1)} step(s)/rank · "
        f"B = {c.b_label}: {c.b_ranks} rank(s), {fmt_num(c.b_steps, 1)} step(s)/rank · "
        "ms/step is per rank and step: the mean over ranks, and the slowest rank's"
    )


def comparison_cards(c) -> list[dict]:
    """Counts of kernels/ops added, removed, slower, faster; findings appeared and cleared."""
    counts = c.ops["status"].value_counts() if len(c.ops) else {}
    out = [{"key": k, "value": str(int(counts.get(k, 0)))} for k in ("added", "removed", "slower", "faster")]
    if c.findings is not None and len(c.findings):
        fc = c.findings["status"].value_counts()
        out += [{"key": f"findings {k}", "value": str(int(fc.get(k, 0)))} for k in ("appeared", "cleared")]
    return out


def comparison_sections(c, limit: int = 25) -> list[Section]:
    """Metric deltas, largest per-step time changes, kernels/ops by status, findings appeared/cleared."""
    secs = []
    m = Section(
        "metrics", "Metric deltas", intro="Job metrics with the MLflow names of jobs/publish/tracking.py; Δ = B − A."
    )
    if len(c.metrics):
        m.tables.append(
            table_view(
                "metric-deltas",
                c.metrics,
                [
                    ("metric", "metric", fmt_text, "name"),
                    ("a", "A", fmt_smart, "num"),
                    ("b", "B", fmt_smart, "num"),
                    ("delta", "Δ", fmt_smart, "num"),
                    ("delta_pct", "Δ %", _pct, "num"),
                ],
            )
        )
    else:
        m.note, m.status = "Not available: neither job has `ranks` rows.", "unavailable"
    secs.append(m)
    ops = Section(
        "ops",
        "Kernels and ops",
        intro=(
            "Per name, from `events`: calls and duration per rank and ProfilerStep, the mean over ranks "
            "(a rank without the name counts 0) and the max over ranks. Kernels are device activity "
            "(not gpu_user_annotation spans); ops are host cpu_op events (not ProfilerStep#N). "
            f"slower/faster: |Δ| ≥ {c.min_rel * 100:.0f}% and ≥ {c.min_abs_ns / 1e3:.0f} µs per step."
        ),
    )
    plot = P.op_deltas(c.ops)
    if plot:
        ops.plots.append(plot)
    spec = [
        ("group", "kind", fmt_text, ""),
        ("name", "name", lambda v: P.short(v, 240), "name"),
        ("a_n_per_step", "A calls/step", lambda v: fmt_num(v, 1), "num"),
        ("b_n_per_step", "B calls/step", lambda v: fmt_num(v, 1), "num"),
        ("a_ns_per_step", "A ms/step (mean rank)", lambda v: fmt_ms(v, 3), "num"),
        ("b_ns_per_step", "B ms/step (mean rank)", lambda v: fmt_ms(v, 3), "num"),
        ("delta_ns_per_step", "Δ ms/step (mean rank)", lambda v: fmt_ms(v, 3), "num"),
        ("delta_pct", "Δ %", _pct, "num"),
        ("a_max_rank_ns_per_step", "A ms/step (max rank)", lambda v: fmt_ms(v, 3), "num"),
        ("b_max_rank_ns_per_step", "B ms/step (max rank)", lambda v: fmt_ms(v, 3), "num"),
    ]
    for status, caption in (
        ("added", "Added in B"),
        ("removed", "Removed in B"),
        ("slower", "Slower in B"),
        ("faster", "Faster in B"),
    ):
        d = c.ops[c.ops["status"] == status] if len(c.ops) else c.ops
        if len(d):
            d = d.reindex(d["delta_ns_per_step"].abs().sort_values(ascending=False).index)
            ops.tables.append(
                table_view(f"ops-{status}", d, spec, caption=f"{caption} ({len(d)})", limit=limit, total=len(d))
            )
    if not ops.tables:
        ops.note = "No kernel or op changed beyond the thresholds." if len(c.ops) else "Not available: no events."
    secs.append(ops)
    f = Section("findings", "Findings", intro="By finding id (rule + scope): appeared in B, cleared in B, or in both.")
    if c.findings is not None and len(c.findings):
        for status in ("appeared", "cleared", "persisting"):
            d = c.findings[c.findings["status"] == status]
            if len(d):
                f.tables.append(
                    table_view(
                        f"findings-{status}",
                        d,
                        [
                            ("finding_id", "finding", fmt_text, "name"),
                            ("title", "title", fmt_text, ""),
                            ("a_est_ns", "A est. lost ms/step", fmt_ms, "num"),
                            ("b_est_ns", "B est. lost ms/step", fmt_ms, "num"),
                        ],
                        caption=f"{status} ({len(d)})",
                    )
                )
    else:
        f.note, f.status = "Not available: no `findings` rows for either job.", "unavailable"
    secs.append(f)
    if c.notes:
        secs.append(
            Section(
                "notes", "Notes", details=[{"summary": "how this comparison was computed", "text": "\n".join(c.notes)}]
            )
        )
    return secs
