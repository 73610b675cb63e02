"""Report sections built from warehouse tables (pandas in, :class:`~jobs.publish.report.blocks.Section` out).

Each builder takes the tables it needs from a ``{name: DataFrame}`` dict and returns a section with
a "not available" note when they are missing or empty — a report never fails because another stage
has not produced its table yet. Definitions: HTA 0.5.0 for the temporal and idle-time breakdowns,
``schemas/tables.py`` for every column.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd

from jobs.analyze.critical_path.comm_sites import job_site_groups
from jobs.analyze.efficiency.ops import ATTAINABLE_ROOFLINE_PCT, job_op_groups
from jobs.analyze.efficiency.utilization import job_window_groups
from jobs.analyze.findings.ranking import LOST_UNITS, LOST_WORDS, finding_window
from jobs.analyze.findings.uncertainty import capture_warnings, uncertain_of
from jobs.fleet.regressions import METRICS
from jobs.publish.headline import HEADLINE_LABELS, labels_for, one_headline, whole_trace
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
from jobs.publish.report.glossary import glossary_rows
from jobs.publish.verdict import STATUS_WORDS, STATUSES, Verdict, job_verdict, rule_words

#: The job report's headline tiles, in order (MLflow metric names of :mod:`jobs.publish.headline`).
CARD_ORDER = (
    "step_time_p50_ms",
    "step_time_p90_ms",
    "idle_pct",
    "compute_pct",
    "exposed_comm_pct",
    "cpu_bound_pct",
    "dataloader_pct",
    "n_ranks",
    "n_steps",
    "n_rank_steps",
)


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
    for name in ("captures", "ranks", "steps", "kernels", "collectives", "critical_path", "findings", "rule_coverage"):
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


#: Headline tiles of the job report, in order: MLflow metric name → label (:data:`jobs.publish.headline.HEADLINE_LABELS`,
#: the one label of each number wherever it appears).
CARD_LABELS = {k: HEADLINE_LABELS[k] for k in CARD_ORDER}

#: Column names in prose (``cpu_bound_time_ns``): never printed in the report's own sentences.
COLUMN_NAME_RE = re.compile(r"\b([a-z]+(?:_[a-z0-9]+)*)_(ns|pct|bytes)\b")


def words(text) -> str:
    """``text`` with column names turned into words (``cpu_bound_time_ns`` → "CPU-bound time", ``idle_pct`` →
    "idle %", ``msg_bytes`` → "msg bytes"); ``None`` → ""."""
    if text is None or (isinstance(text, float) and text != text):
        return ""

    def one(m: re.Match) -> str:
        stem = m.group(1).replace("_", " ").replace("cpu bound", "CPU-bound").replace("gpu", "GPU")
        return {"ns": stem, "pct": f"{stem} %", "bytes": f"{stem} bytes"}[m.group(2)]

    return COLUMN_NAME_RE.sub(one, str(text))


def job_headline(tables: dict) -> dict[str, float]:
    """The run's headline numbers (:func:`jobs.publish.headline.one_headline`: ``run_summary`` of its ``steps``,
    ``ranks`` and ``captures``), MLflow names; ``{}`` when the job has no analysis window."""
    return one_headline(_get(tables, "steps"), _get(tables, "ranks"), _get(tables, "captures"))


def job_cards(tables: dict, head: dict[str, float] | None = None) -> list[dict]:
    """Headline tiles: ``head`` (default :func:`job_headline`) labelled with :data:`CARD_LABELS` (whole-trace labels
    for a run without ProfilerStep). One job step: a single step-time tile that says so (no p90). Numbers without
    data (GPU % of a CPU-only trace) are left out."""
    m = job_headline(tables) if head is None else head
    if not m:
        return []
    labels = labels_for(_get(tables, "steps"))
    one_step = m.get("n_steps") == 1 and not whole_trace(_get(tables, "steps"))
    out = []
    for k in CARD_ORDER:
        if k not in m or (one_step and k == "step_time_p90_ms"):
            continue
        label = labels[k]
        if one_step and k == "step_time_p50_ms":
            label = "job step time p50, ms (slowest rank; only 1 step captured: p50 = p90 = that step)"
        out.append({"key": label, "value": fmt_num(m[k], 0 if k.startswith("n_") else 2)})
    caps = _get(tables, "captures")
    if caps is not None and "status" in caps.columns:
        out.append({"key": "files quarantined", "value": str(int((caps["status"] == "quarantined").sum()))})
    return out


def job_verdict_of(tables: dict) -> Verdict:
    """:func:`jobs.publish.verdict.job_verdict` of the job's ``findings`` and ``rule_coverage`` tables."""
    cov = tables.get("rule_coverage") if tables else None
    return job_verdict(_get(tables, "findings"), cov if isinstance(cov, pd.DataFrame) else None)


def verdict_section(tables: dict, head: dict[str, float] | None = None) -> Section:
    """The answer first: the verdict (:func:`job_verdict_of`), then for a finding the top bottleneck in words, what
    it costs per step (and as a share of the job step time p50 of ``head``, default :func:`job_headline`) and what
    to do, the next two findings, and how the straggler relates to the critical path. Status badge: the verdict."""
    key, title = "verdict", "Verdict"
    v = job_verdict_of(tables)
    f = _get(tables, "findings")
    links = [{"href": "#coverage", "text": "which rules judged this job"}]
    if _get(tables, "captures") is not None:
        links.append({"href": "#capture-flags", "text": "what the capture flags mean"})
    if v.status != "findings" or f is None:
        return Section(key, title, intro=v.headline, status=v.status, links=links)
    f = f.sort_values("rank_order") if "rank_order" in f.columns else f
    top = f.iloc[0]
    lost = top.get("est_time_lost_per_step_ns")
    step_p50 = (job_headline(tables) if head is None else head).get("step_time_p50_ms")
    cost = ""
    window = finding_window(top.get("evidence_json"))
    if lost is not None and lost == lost:
        cost = f" It costs about {float(lost) / 1e6:,.2f} {LOST_WORDS[window]}"
        cost += (
            f", {100 * float(lost) / 1e6 / step_p50:.0f} % of the job step time p50 ({step_p50:,.2f} ms)."
            if step_p50 and window == "step"
            else "."
        )
    todo = top.get("recommendation")
    sec = Section(
        key,
        title,
        intro=f"Top bottleneck: {words(top.get('title'))}.{cost}"
        + (f" What to do: {words(todo)}" if isinstance(todo, str) and todo else ""),
        status=v.status,
        links=links,
    )
    sec.paragraphs.append(v.headline)
    if v.unknown:
        sec.paragraphs.append("Not judged: " + "; ".join(v.unknown) + ".")
    if str(top.get("rule")) == "straggler_rank":
        rel = path_vs_straggler(tables)
        if rel:
            sec.paragraphs.append(rel)
            sec.links.append({"href": "#critical-path", "text": "the critical path"})
    rest = f.iloc[1:3]
    if len(rest):
        sec.tables.append(
            table_view(
                "verdict-next",
                rest.assign(title=[words(t) for t in rest["title"]]),
                [
                    ("title", "next finding", fmt_text, ""),
                    ("est_time_lost_per_step_ns", LOST_UNITS[window], fmt_ms, "num"),
                ],
                caption="Then",
            )
        )
    return sec


def regression_section(tables: dict) -> Section:
    """The run against the previous runs of its job name (``regressions`` rows, :mod:`jobs.fleet.regressions`):
    the job step p50 verdict in words first (``summary``: change, 98 % interval, verdict, what would decide), then
    the other metrics and the baseline runs. Status badge: the step-time verdict."""
    key, title = "regression", "Against previous runs"
    r = _get(tables, "regressions")
    if r is None or not len(r) or "summary" not in r.columns:
        return unavailable(key, title, "the fleet stage has not compared this run with earlier runs of its job name.")
    order = {m: i for i, m in enumerate(METRICS)}
    r = r.assign(_o=r["metric"].map(order).fillna(len(order))).sort_values("_o")
    p50 = r[r["metric"] == "step_time_p50_ns"]
    head = p50.iloc[0] if len(p50) else r.iloc[0]
    runs = head.get("baseline_runs")
    runs = [str(b) for b in runs] if runs is not None and len(runs) else []
    sec = Section(key, title, intro=str(head["summary"]) + ".", status=str(head["verdict"]))
    sec.paragraphs.extend(f"{x.summary}." for x in r.itertuples() if x.metric != head["metric"])
    if runs:
        sec.paragraphs.append(
            "Baseline: the pooled steps of " + ", ".join(runs) + " (the previous runs of its job name). Intervals: "
            "Hodges-Lehmann, 98 %; verdicts on the Benjamini-Hochberg adjusted p over each capture day's runs."
        )
    return sec


def coverage_section(tables: dict) -> Section:
    """Which finding rules judged the job, on what window, which did not and why (``rule_coverage`` rows), with
    the counts per status; says so when the warehouse has no coverage for the job (the verdict cannot be ok)."""
    key, title = "coverage", "Rule coverage"
    intro = (
        "Each bottleneck rule either ran on the ProfilerSteps, ran on the whole trace (no ProfilerStep), was not "
        "applicable (what it judges is absent, e.g. one rank for the straggler rule) or did not run (the data it "
        "needs is missing); only the rules that ran can clear the job."
    )
    v = job_verdict_of(tables)
    cov = tables.get("rule_coverage") if tables else None
    if not v.coverage_known or not isinstance(cov, pd.DataFrame):
        return Section(
            key,
            title,
            intro=intro,
            note="Not available: this warehouse does not record which rules judged the job (analyzed before rule "
            "coverage was recorded), so the verdict cannot say the job is healthy.",
            status="unavailable",
        )
    order = {s: i for i, s in enumerate(STATUSES)}
    c = cov.assign(
        _o=cov["status"].map(order).fillna(len(order)),
        what=[rule_words(r) for r in cov["rule"]],
        status_words=[STATUS_WORDS.get(str(s), str(s)) for s in cov["status"]],
        reason=cov["reason"] if "reason" in cov.columns else None,
    ).sort_values(["_o", "rule"])
    counts = ", ".join(f"{n} {STATUS_WORDS[s]}" for s, n in v.counts.items() if n)
    sec = Section(key, title, intro=intro + f" This job: {counts}.")
    spec = [
        (col, h, fn, k)
        for col, h, fn, k in [
            ("what", "rule", fmt_text, ""),
            ("rule", "rule id", fmt_text, "name"),
            ("status_words", "status", fmt_text, ""),
            ("reason", "why", lambda x: fmt_text(x) if isinstance(x, str) and x else "—", ""),
            ("n_ranks", "ranks judged", fmt_int, "num"),
            ("n_windows", "windows judged", fmt_int, "num"),
            ("n_findings", "findings", fmt_int, "num"),
            ("uncertain", "uncertain because", lambda x: fmt_text(x) if isinstance(x, str) and x else "—", ""),
        ]
        if col in c.columns
    ]
    sec.tables.append(table_view("rule-coverage", c, spec))
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
        ("steps", "ProfilerSteps", fmt_int, "num"),
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
    if len(df) and (df["steps"] == 1).all():
        sec.paragraphs.append(
            "Only one ProfilerStep per rank was captured: each rank's step p50 and max are that one step, so there "
            "is no spread to read; capture more steps (torch.profiler schedule active ≥ 5) for percentiles."
        )
    elif len(df) and (df["steps"] == 0).all():
        sec.paragraphs.append(
            "No ProfilerStep in these traces: the step-time columns are empty and the GPU % are over the whole trace."
        )
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


def idle_windows_section(tables: dict, k: int = 15) -> Section:
    """Where inside the step the devices sit idle and what the host was doing then (``utilization_windows``): a
    strip per rank, then the groups (rank, cause, host op) with the most idle time."""
    key, title = "idle-windows", "Idle windows"
    intro = (
        "Windows of at least 0.5 ms (or 5 % of a short step) during which a rank's GPU runs nothing, with the host "
        "activity that overlaps them: a synchronizing call, a host-side collective, a copy, the data loader, other "
        "host work (CPU-bound) or nothing captured; on a NeuronCore, when its tensor engine runs below 20 % and what "
        "ran instead (DMA, collectives, other engines, semaphore waits). Recurs = share of the rank's steps with "
        "such a window at the same place."
    )
    df = _get(tables, "utilization_windows")
    if df is None:
        return unavailable(key, title, "no idle window (no device activity, or none idle long enough).", intro)
    g = job_window_groups(df).head(k)
    spec = [
        ("rank", "rank", fmt_int, "num"),
        ("cause", "cause", fmt_text, ""),
        ("cause_op", "waiting on", lambda v: P.short(v, 60), "name"),
        ("n_windows", "windows", fmt_int, "num"),
        ("idle_ns", "idle ms", fmt_ms, "num"),
        ("offset_p50_ns", "opens at (ms into step)", fmt_ms, "num"),
        ("step_pct", "% of step", _pct, "num"),
        ("recurs_pct", "recurs %", _pct, "num"),
        ("cause_stack", "stack (longest window)", lambda v: P.short(v, 120), "name"),
    ]
    plot = P.idle_window_strip(df)
    return Section(key, title, intro=intro, plots=[plot] if plot else [], tables=[table_view("idle-windows", g, spec)])


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


def op_efficiency_section(tables: dict, k: int = 15) -> Section:
    """The op groups with the most kernel time against their device's roofline (``op_efficiency``): achieved TFLOP/s
    and GB/s, % of the datasheet peaks, which side of the roofline bounds them."""
    key, title = "op-efficiency", "Op efficiency"
    df = _get(tables, "op_efficiency")
    intro = (
        "Kernel time per op and shapes (over all ranks), with the FLOPs and bytes its shapes imply against the "
        "device's datasheet roofline: % of peak FLOP/s for compute-bound ops, % of peak memory bandwidth for "
        "memory-bound ones (above 100 %: served from on-chip cache)."
    )
    if df is None or not len(df) or "kernel_time_ns" not in df.columns:
        return unavailable(
            key, title, "no modelled op with recorded shapes (profile with `record_shapes=True`).", intro
        )
    g = job_op_groups(df).head(k)
    devices = sorted({str(d) for d in df["device_name"].dropna()}) if "device_name" in df.columns else []
    sources = sorted({str(s) for s in df["peak_source"].dropna()}) if "peak_source" in df.columns else []
    if devices:
        intro += f" Device: {', '.join(devices)}; peaks: {'; '.join(sources)}."
    spec = [
        ("op_name", "op", fmt_text, "name"),
        ("shape_sig", "shapes", lambda v: P.short(v, 80), "name"),
        ("dtype", "dtype", fmt_text, ""),
        ("n_calls", "calls", fmt_int, "num"),
        ("kernel_time_ns", "kernel ms", fmt_ms, "num"),
        ("achieved_tflops", "TFLOP/s", _pct, "num"),
        ("achieved_gbps", "GB/s", lambda v: fmt_num(v, 0), "num"),
        ("peak_flops_pct", "% peak FLOP/s", _pct, "num"),
        ("peak_bandwidth_pct", "% peak bandwidth", _pct, "num"),
        ("bound", "bound", fmt_text, ""),
        ("recoverable_ns", f"ms saved at {ATTAINABLE_ROOFLINE_PCT:.0f} % of roofline", fmt_ms, "num"),
    ]
    return Section(key, title, intro=intro, tables=[table_view("op-efficiency", g, spec)])


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


def straggler_rank_of(tables: dict) -> int | None:
    """The straggler rank of the job: the ``straggler_rank`` finding's rank, else ``None``."""
    f = _get(tables, "findings")
    if f is None or "rule" not in f.columns:
        return None
    s = f[f["rule"] == "straggler_rank"]
    if not len(s) or "ranks" not in s.columns:
        return None
    r = s.iloc[0]["ranks"]
    try:
        vals = [int(x) for x in r]
    except TypeError:
        return None
    return vals[0] if len(vals) == 1 else None


def _job_path(tables: dict) -> pd.DataFrame | None:
    cp = _get(tables, "critical_path")
    if cp is None or "scope" not in cp.columns or "dur_ns" not in cp.columns:
        return None
    d = cp[cp["scope"] == "job"]
    return d.assign(dur_ns=_num(d, "dur_ns")) if len(d) else None


def path_vs_straggler(tables: dict) -> str:
    """One paragraph relating the cross-rank critical path (``critical_path`` scope ``job``) to the straggler
    finding: the path's largest segment kind and rank (a late start = that rank's part of the path begins late
    relative to the job's step start, i.e. step-start skew, not late arrival at collectives), and whether the
    straggler rank is on the path. ``""`` without a cross-rank path."""
    d = _job_path(tables)
    if d is None or "bound_by" not in d.columns or "rank" not in d.columns:
        return ""
    tot = float(d["dur_ns"].sum())
    if not tot:
        return ""
    by = d.groupby([d["bound_by"].fillna("unattributed"), d["rank"]])["dur_ns"].sum().sort_values(ascending=False)
    (kind, rank), ns = by.index[0], float(by.iloc[0])
    kind_words = BOUND_WORDS.get(str(kind), str(kind).replace("_", " "))
    n_steps = d["step"].nunique() if "step" in d.columns else 1
    per = f" over {n_steps} steps" if n_steps > 1 else ""
    out = (
        f"The cross-rank critical path spends {100 * ns / tot:.0f} % of its length ({ns / 1e6:,.2f} ms{per}) in "
        f"{kind_words} on rank {int(rank)}."
    )
    if str(kind) == "late_start":
        out += (
            f" A late start means rank {int(rank)}'s part of the path begins that long after the job's step start "
            "(the earliest rank's ProfilerStep start, on the job clock aligned on collective completion): it is "
            "step-start skew between ranks, not late arrival at collectives."
        )
    s = straggler_rank_of(tables)
    on_path = sorted({int(r) for r in d["rank"].dropna()})
    if s is not None:
        if s in on_path:
            share = float(d.loc[d["rank"] == s, "dur_ns"].sum())
            out += (
                f" Rank {s}, the straggler of the verdict (last to arrive at most collectives), is on this path: "
                f"{share / 1e6:,.2f} ms ({100 * share / tot:.0f} %) of it."
            )
        else:
            ranks = ", ".join(str(r) for r in on_path)
            out += (
                f" Rank {s}, the straggler of the verdict, is not on this path (it runs on rank {ranks}): the "
                f"straggler finding counts who arrives last at collectives, which makes the other ranks wait inside "
                f"the step, while the path's top segment is where the slowest chain of work began; both cost time, "
                f"in different places."
            )
    return out


#: ``critical_path.bound_by`` in words.
BOUND_WORDS = {
    "late_start": "the late start",
    "cpu_bound": "CPU-bound host work",
    "launch_overhead": "launch overhead",
    "kernel_kernel_gap": "gaps between kernels",
    "compute": "GPU compute",
    "communication": "communication",
    "data_loading": "data loading",
    "sync": "host-device synchronization",
    "collective_wait": "waiting at collectives",
    "unattributed": "unattributed time",
}


def comm_sites_section(tables: dict, k: int = 12) -> Section:
    """The collective call sites that recur exposed in the steps, with what hiding each would save on the job's
    critical path (``comm_sites``)."""
    key, title = "comm-sites", "Recurring communication waits"
    intro = (
        "Each collective call site (process group, collective, size, position in the step) per step: its exposed "
        "time (no computation overlaps it; the largest rank's), the ranks' wait for the last arrival (on a send/recv: "
        "the pipeline bubble), the compute before it on the critical path, and what hiding its exposed part would "
        "save on the step's cross-rank critical path (the path taken again without it). Means per step."
    )
    df = _get(tables, "comm_sites")
    if df is None:
        return unavailable(key, title, "no matched collectives (single rank, or no communication).", intro)
    g = job_site_groups(df).head(k)
    spec = [
        ("site", "call site", lambda v: P.short(v, 70), "name"),
        ("n_steps", "steps", fmt_int, "num"),
        ("exposed_steps_pct", "exposed in % of steps", _pct, "num"),
        ("exposed_max_ns", "exposed ms", fmt_ms, "num"),
        ("wait_max_ns", "wait ms", fmt_ms, "num"),
        ("preceding_compute_ns", "compute before ms", fmt_ms, "num"),
        ("saving_ns", "saving ms", fmt_ms, "num"),
        ("last_arrival_rank", "last rank", fmt_int, "num"),
    ]
    return Section(key, title, intro=intro, tables=[table_view("comm-sites", g, spec)])


def critical_path_section(tables: dict) -> Section:
    """Critical-path attribution (share of path time per ``bound_by``), per-step lengths, longest segments, and the
    paragraph relating the cross-rank path to the straggler (:func:`path_vs_straggler`)."""
    key, title = "critical-path", "Critical path"
    cp = _get(tables, "critical_path")
    intro = (
        "Segments of the critical path per step (HTA critical-path graph per rank; across ranks, following "
        "collectives to the rank that arrived last) and what each is bound by."
    )
    if cp is None or "dur_ns" not in cp.columns:
        return unavailable(key, title, "no critical-path rows (not computed yet for this job).", intro)
    scope = "job" if "scope" in cp.columns and (cp["scope"] == "job").any() else "rank"
    d = cp[cp["scope"] == scope] if "scope" in cp.columns else cp
    d = d.assign(dur_ns=_num(d, "dur_ns"))
    shown = (
        "Showing the cross-rank path: the chain of work across ranks that set each job step's time."
        if scope == "job"
        else "Showing each rank's own path (no cross-rank path: one rank, or no matched collectives)."
    )
    sec = Section(key, title, intro=intro + " " + shown)
    rel = path_vs_straggler(tables) if scope == "job" else ""
    if rel:
        sec.paragraphs.append(rel)
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
                share.assign(what=[BOUND_WORDS.get(str(b), str(b)) for b in share["bound_by"]]),
                [
                    ("what", "bound by", fmt_text, ""),
                    ("dur_ns", "time ms", fmt_ms, "num"),
                    ("pct", "% of path", _pct, "num"),
                ],
            )
        )
    if "path_length_ns" in d.columns:
        if scope == "job":
            g = d.groupby("step") if "step" in d.columns else d.groupby(lambda _: 0)
            per = g.agg(length=("path_length_ns", "max"), segments=("dur_ns", "size")).reset_index()
            per["ranks"] = [", ".join(str(int(r)) for r in sorted(set(x.dropna()))) for _, x in g["rank"]]
            spec = [("step", "step", fmt_int, "num")] if "step" in per.columns else []
            spec += [
                ("ranks", "ranks on the path", fmt_text, ""),
                ("length", "path length ms", fmt_ms, "num"),
                ("segments", "segments", fmt_int, "num"),
            ]
            caption = "Per step (cross-rank path)"
        else:
            paths = [c for c in ("step", "path_rank") if c in d.columns]
            per = d.groupby(paths).agg(length=("path_length_ns", "max"), segments=("dur_ns", "size")).reset_index()
            spec = [(p, "rank" if p == "path_rank" else p, fmt_int, "num") for p in paths] + [
                ("length", "path length ms", fmt_ms, "num"),
                ("segments", "segments", fmt_int, "num"),
            ]
            caption = "Per step and rank"
        sec.tables.append(table_view("cp-steps", per, spec, caption=caption, limit=20, total=len(per)))
    seg = d.sort_values("dur_ns", ascending=False)
    if "bound_by" in seg.columns:
        seg = seg.assign(
            bound_by=[BOUND_WORDS.get(str(b), str(b)) if b == b and b is not None else "—" for b in seg["bound_by"]]
        )
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


def glossary_section(tables: dict) -> Section:
    """The capture flags raised on this job's files, each in words with what it means for the numbers
    (:mod:`jobs.publish.report.glossary`)."""
    key, title = "capture-flags", "Capture flags"
    intro = (
        "Data-quality flags normalize raised on this job's trace files (the files are still analyzed unless "
        "quarantined): what each means and what it does to the numbers."
    )
    rows = glossary_rows(_get(tables, "captures"))
    if not len(rows):
        return Section(key, title, intro=intro, note="No capture of this job carries a flag.")
    spec = [
        ("flag", "flag", fmt_text, "name"),
        ("n_captures", "files", fmt_int, "num"),
        ("meaning", "what happened", fmt_text, ""),
        ("effect", "what it means for the numbers", fmt_text, ""),
    ]
    sec = Section(key, title, intro=intro, tables=[table_view("capture-flags", rows, spec)])
    warned = pd.DataFrame(capture_warnings(_get(tables, "captures")))
    if len(warned):
        sec.paragraphs.append(
            "Profiler warnings: what the profiler itself said about its data, and the numbers and rules each makes "
            "uncertain (the findings of those rules have their confidence halved)."
        )
        warned = warned.assign(rules=[", ".join(rule_words(r) for r in rs) or "—" for rs in warned["rules"]])
        sec.tables.append(
            table_view(
                "profiler-warnings",
                warned.sort_values(["rank", "kind"], na_position="first"),
                [
                    ("rank", "rank", fmt_int, "num"),
                    ("words", "what the profiler warned", fmt_text, ""),
                    ("count", "count", fmt_int, "num"),
                    ("message", "its message", fmt_text, ""),
                    ("rules", "uncertain judgments", fmt_text, ""),
                ],
                limit=50,
                total=len(warned),
            )
        )
    return sec


#: The sections a finding's evidence rows are listed in: key → link text.
_DRILL_SECTIONS = {
    "capture-flags": "the profiler warnings",
    "idle-windows": "the idle windows behind them",
    "comm-sites": "the communication call sites",
    "op-efficiency": "the op groups against the roofline",
}


def drill_down(evidence_json) -> tuple[str, list[str]]:
    """``(text, section keys)``: a finding's evidence rows in words — its ``links`` (``utilization_windows`` by rank,
    step and window id; ``comm_sites`` by step and site) and the op groups ``kernels_below_peak`` names — and the
    report sections (:data:`_DRILL_SECTIONS`) that list those tables; ``("", [])`` when it has none."""
    try:
        ev = json.loads(evidence_json) if isinstance(evidence_json, str) and evidence_json else {}
    except ValueError:
        return "", []
    parts, keys = [], []
    links = ev.get("links") or {}
    w = links.get("utilization_windows") or []
    if w:
        keys.append("idle-windows")
        parts.append(
            "windows: "
            + "; ".join(
                f"rank {x.get('rank')} step {x.get('step')} #{x.get('window_id')} {fmt_ms(x.get('dur_ns'))} ms "
                f"{x.get('cause')}" + (f" ({x.get('cause_op')})" if x.get("cause_op") else "")
                for x in w[:3]
            )
        )
    c = links.get("comm_sites") or []
    if c:
        keys.append("comm-sites")
        parts.append(
            "call sites: "
            + "; ".join(
                f"step {x.get('step')} {x.get('site')} {fmt_ms(x.get('exposed_max_ns'))} ms exposed" for x in c[:3]
            )
        )
    ops = (ev.get("details") or {}).get("op_groups") or []
    if ops:
        keys.append("op-efficiency")
        parts.append(
            "op groups: "
            + "; ".join(
                f"{x.get('op_name')} {P.short(str(x.get('shape_sig')), 40)} {fmt_ms(x.get('recoverable_ns'))} ms"
                for x in ops[:3]
            )
        )
    doubt = uncertain_of(evidence_json)
    if doubt:
        keys.append("capture-flags")
        parts.append(f"uncertain: {doubt}")
    return " · ".join(parts), keys


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
    windows = {finding_window(e) for e in f["evidence_json"]} if "evidence_json" in f.columns else {"step"}
    lost_unit = LOST_UNITS[windows.pop() if len(windows) == 1 else "mixed"]
    spec = [
        (c, h, fn, k)
        for c, h, fn, k in [
            ("rank_order", "#", fmt_int, "num"),
            ("title", "finding", fmt_text, ""),
            ("est_time_lost_per_step_ns", f"est. lost {lost_unit}", fmt_ms, "num"),
            ("recommendation", "what to do", fmt_text, ""),
            ("ranks", "ranks", fmt_text, ""),
            ("confidence", "confidence", lambda v: fmt_num(v, 2), "num"),
            ("rule", "rule", fmt_text, ""),
            ("metric", "metric", fmt_text, ""),
            ("value", "value", lambda v: fmt_num(v, 2), "num"),
        ]
        if c in f.columns
    ]
    f = f.assign(**{c: [words(x) for x in f[c]] for c in ("title", "recommendation") if c in f.columns})
    drills = [drill_down(e) for e in f["evidence_json"]] if "evidence_json" in f.columns else []
    if any(text for text, _ in drills):
        f = f.assign(drill=[text for text, _ in drills])
        spec.insert(4, ("drill", "evidence rows", fmt_text, ""))
    sec = Section(key, title, intro=intro, tables=[table_view("findings", f, spec)])
    for target in sorted({k for _, keys in drills for k in keys}, key=list(_DRILL_SECTIONS).index):
        sec.links.append({"href": f"#{target}", "text": _DRILL_SECTIONS[target]})
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
    sec = Section(key, title, tables=[table_view("captures", caps, spec, limit=100, total=len(caps))])
    if "flags" in caps.columns and len(glossary_rows(caps)):
        sec.links.append({"href": "#capture-flags", "text": "what each flag means (capture flags glossary)"})
    return sec


# ----------------------------------------------------------------------------- fleet report
# The fleet report's sections, cards and metrics live in :mod:`jobs.publish.report.fleet_tables`: every per-job
# number there is a ``fleet_stats`` row (the definition of :func:`jobs.fleet.stats.run_summary`).


# ----------------------------------------------------------------------------- comparison report


def comparison_subtitle(c) -> str:
    """Ranks and steps used for per-step normalization on each side."""
    return (
        f"A = {c.a_label}: {c.a_ranks} rank(s), {fmt_smart(c.a_steps, 1)} step(s)/rank · "
        f"B = {c.b_label}: {c.b_ranks} rank(s), {fmt_smart(c.b_steps, 1)} step(s)/rank · "
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
    """The headline (how the jobs differ when unlike; the job step time and the findings that changed), metric
    deltas, largest per-step time changes, kernels/ops by status, findings appeared/cleared."""
    lines = c.headline()
    head = Section("headline", "What changed", intro=lines[0], paragraphs=lines[1:])
    if c.warnings:
        head.status = "unlike_jobs"
        head.paragraphs.insert(
            0, f"Warning: the jobs differ in {'; '.join(c.warnings)}: the deltas compare unlike runs."
        )
    secs = [head]
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
                    ("label", "what it is", fmt_text, ""),
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
