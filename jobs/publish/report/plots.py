"""Plots for the HTML reports: pandas in, a :class:`Plot` (SVG data URI) out.

Charts are pygal's (SVG built as an element tree, no text rasterizing): a plot costs milliseconds, not the
~0.1 s per plot of matplotlib's Agg text layout, which made plots most of a job report's CPU (issue 29). The
SVG is shown as an ``<img>`` (an image document: no script in it runs, no external fetch) and pygal's
tooltip script is dropped from the tree before it is written, so the file is the drawing only. Names from
traces are text nodes of the tree (XML-escaped by the serializer) shortened to :data:`LABEL_CHARS`
characters. Every function returns ``None`` when its input has nothing to draw.
"""

from __future__ import annotations

import base64
import xml.etree.ElementTree as ET
from dataclasses import dataclass

import numpy as np
import pandas as pd

LABEL_CHARS = 60
#: Colors per category, shared by every plot (colorblind-safe Okabe–Ito palette).
COLORS = {
    "compute": "#0072B2",
    "non_compute": "#E69F00",
    "idle": "#999999",
    "host_busy": "#009E73",
    "host_other": "#CCCCCC",
    "host_wait": "#D55E00",
    "kernel_wait": "#CC79A7",
    "other": "#56B4E9",
    "COMPUTATION": "#0072B2",
    "COMMUNICATION": "#E69F00",
    "MEMORY": "#009E73",
    "OTHER": "#999999",
    # idle-window causes (utilization_windows.cause)
    "sync": "#D55E00",
    "collective": "#E69F00",
    "memcpy": "#009E73",
    "dataloader": "#CC79A7",
    "host": "#0072B2",
    "host_idle": "#999999",
}
#: Width of every plot, px (the page scales it down to fit).
WIDTH = 900
#: Most columns of a heatmap: the calls of a longer trace are grouped into this many (max per group).
HEATMAP_COLUMNS = 32
#: Most bars of a per-rank bar chart: of a larger job, the ranks that matter most to it (slowest, most idle) are drawn.
RANK_BARS = 48
#: Most rows of a heatmap (a dot matrix's size grows with rows × columns): the ranks with the most wait are kept.
HEATMAP_ROWS = 16
_SVG_NS = "http://www.w3.org/2000/svg"


@dataclass
class Plot:
    """One rendered plot: ``key`` (stable id, used by tests), ``title``, ``data_uri`` (SVG), ``alt`` text."""

    key: str
    title: str
    data_uri: str
    alt: str


def short(name, n: int = LABEL_CHARS) -> str:
    """``name`` as text, at most ``n`` characters (``…`` marks the cut)."""
    s = "" if name is None or (isinstance(name, float) and np.isnan(name)) else str(name)
    s = " ".join(s.split())
    return s if len(s) <= n else s[: n - 1] + "…"


def _chart(kind: str, height: float, colors=(), **config):
    """A pygal chart of class ``kind`` (e.g. ``"HorizontalStackedBar"``), :data:`WIDTH` × ``height`` px, series
    drawn in ``colors`` order, legend below, no tooltip script, labels cut only by :func:`short`."""
    import pygal  # heavy: pygal (~60 ms), only when a plot is drawn
    from pygal.etree import etree  # heavy: pygal
    from pygal.style import Style  # heavy: pygal

    etree.to_etree()  # the standard library's trees, which _tree and _plot handle (pygal takes lxml when installed)

    style = Style(
        background="white",
        plot_background="white",
        foreground="#1f2430",
        foreground_strong="#1f2430",
        foreground_subtle="#c9ced6",
        colors=tuple(colors) or ("#0072B2",),
        font_family="sans-serif",
        label_font_size=11,
        major_label_font_size=11,
        legend_font_size=11,
        title_font_size=15,
        opacity=".95",
        opacity_hover=".95",
        transition="0ms",
    )
    return getattr(pygal, kind)(
        width=WIDTH,
        height=int(height),
        style=style,
        js=[],
        explicit_size=True,
        disable_xml_declaration=True,
        legend_at_bottom=True,
        legend_at_bottom_columns=config.pop("legend_columns", 5),
        truncate_label=-1,
        truncate_legend=-1,
        print_values=False,
        max_scale=8,  # at most about 8 ticks on the value axis
        **config,
    )


def _tree(chart, uid: str):
    """``chart``'s SVG element tree, its id ``chart-<uid>`` (pygal's default is random: the same data now draws the
    same bytes), without pygal's script and the tooltips' ``desc`` data it reads (an image shows no tooltip) or
    comments (today's date)."""
    chart.uuid = uid
    root = chart.render_tree()
    drop = ("script", "desc", ET.Comment)  # pygal's tags are plain names (its root carries the namespace)
    for parent in [root, *root.iter()]:
        for el in [c for c in parent if c.tag in drop]:
            parent.remove(el)
    return root


def _plot(roots: list, key: str, title: str, alt: str) -> Plot:
    """A :class:`Plot` of one chart tree, or of several stacked top to bottom in one SVG (each keeps its own id
    and styles)."""
    if len(roots) == 1:
        root = roots[0]
    else:
        heights = [float(r.get("height")) for r in roots]
        # as pygal writes its root: a plain tag with the namespace as an attribute
        root = ET.Element("svg", xmlns=_SVG_NS, width=str(WIDTH), height=str(sum(heights)),
                          viewBox=f"0 0 {WIDTH} {sum(heights)}")  # fmt: skip
        y = 0.0
        for r, h in zip(roots, heights):
            r.set("y", str(y))
            root.append(r)
            y += h
    svg = ET.tostring(root, encoding="utf-8")
    return Plot(key, title, "data:image/svg+xml;base64," + base64.b64encode(svg).decode("ascii"), alt)


def _ms(v) -> np.ndarray:
    return pd.to_numeric(v, errors="coerce").astype(float).to_numpy() / 1e6


def _has(df: pd.DataFrame | None, *cols: str) -> bool:
    return df is not None and len(df) > 0 and all(c in df.columns for c in cols)


def _values(v) -> list:
    """Floats for pygal, NaN as ``None`` (no bar)."""
    return [None if not np.isfinite(x) else float(x) for x in np.asarray(v, dtype=float)]


def _hbars(labels: list[str], series: list[tuple[str, str, object]], title: str, x_title: str, legend: bool = True,
           legend_columns: int = 5, label_px: int = 22):  # fmt: skip
    """Horizontal (stacked) bars: one bar per label, top to bottom in ``labels`` order; ``series``: ``(legend,
    color, values)`` stacked left to right (a ``None`` value: no bar in that series)."""
    ch = _chart(
        "HorizontalStackedBar",
        130 + label_px * len(labels) + (30 if legend else 0),
        colors=[c for _, c, _ in series],
        title=title,
        x_title=x_title,
        show_legend=legend,
        # pygal's room for the bottom legend is rows = series // columns: with fewer series than columns it
        # reserves none, so columns are never more than the series
        legend_columns=max(1, min(legend_columns, len(series))),
    )
    ch.x_labels = list(reversed(labels))  # pygal draws the first label at the bottom
    for name, _, vals in series:
        ch.add(name, list(reversed(_values(vals))))
    return _tree(ch, "hbars")


def _most(g: pd.DataFrame, key: pd.Series, n: int = RANK_BARS) -> pd.DataFrame:
    """``g`` (one row per rank, rank order) cut to the ``n`` rows of the largest ``key``, kept in rank order."""
    return g if len(g) <= n else g.loc[sorted(key.fillna(-np.inf).nlargest(n).index)]


def _shown(kept: int, total: int) -> str:
    """``"48 of 1,024"`` when rows were left out, else ``"8"``."""
    return f"{kept:,} of {total:,}" if kept < total else f"{kept:,}"


def _of(kept: int, total: int, what: str) -> str:
    """`` (48 of 1,024 ranks: the slowest)`` for a title when ranks were left out, else ``""``."""
    return f" ({_shown(kept, total)} ranks: {what})" if kept < total else ""


def step_breakdown(steps: pd.DataFrame | None) -> Plot | None:
    """Mean step time per rank, split by HTA's temporal breakdown (compute / non-compute / idle).

    Source: ``steps`` (per-step HTA temporal breakdown). Ranks without GPU activity show host busy
    time (``cpu_op_time_ns``) and the rest of the step instead. Each rank's label gives its median step time. Of
    more than :data:`RANK_BARS` ranks, the slowest (mean step time) are drawn, in rank order.
    """
    if not _has(steps, "rank", "step_time_ns"):
        return None
    cols = [
        "compute_time_ns",
        "non_compute_time_ns",
        "idle_time_ns",
        "cpu_op_time_ns",
        "step_time_ns",
        "kernel_time_ns",
    ]
    s = steps.copy()
    for c in cols:
        s[c] = pd.to_numeric(s[c], errors="coerce") if c in s.columns else np.nan
    g = s.groupby("rank").agg(**{c: (c, "mean") for c in cols}, p50=("step_time_ns", "median")).sort_index()
    if g["step_time_ns"].isna().all():
        return None
    n_ranks = len(g)
    g = _most(g, g["step_time_ns"])
    gpu = g["kernel_time_ns"].notna().to_numpy()
    series = []
    for col, key, label in (
        ("compute_time_ns", "compute", "GPU compute"),
        ("non_compute_time_ns", "non_compute", "GPU non-compute"),
        ("idle_time_ns", "idle", "GPU idle"),
    ):
        v = np.where(gpu, np.nan_to_num(g[col].to_numpy() / 1e6), 0.0)
        if v.any():
            series.append((label, COLORS[key], v))
    busy = np.where(~gpu, np.nan_to_num(g["cpu_op_time_ns"].to_numpy() / 1e6), 0.0)
    rest = np.where(~gpu, np.clip(np.nan_to_num(g["step_time_ns"].to_numpy() / 1e6) - busy, 0, None), 0.0)
    if busy.any():
        series.append(("host busy (no GPU)", COLORS["host_busy"], busy))
    if rest.any():
        series.append(("rest of step (no GPU)", COLORS["host_other"], rest))
    labels = [f"rank {r} (p50 {p / 1e6:.3g} ms)" if np.isfinite(p) else f"rank {r}" for r, p in g["p50"].items()]
    tree = _hbars(
        labels,
        series,
        ("Step time per rank: GPU temporal breakdown (HTA)" if gpu.any() else
         "Step time per rank: host busy time (no GPU activity)") + _of(len(g), n_ranks, "the slowest"),
        "ms per step (mean over steps)",
    )  # fmt: skip
    shown = _shown(len(g), n_ranks)
    return _plot(
        [tree],
        "step_breakdown",
        "Step-time breakdown per rank",
        f"Stacked bars of mean compute, non-compute and idle time per step for {shown} ranks"
        if gpu.any()
        else f"Stacked bars of mean host busy time and the rest of the step for {shown} ranks",
    )


def idle_breakdown(ranks: pd.DataFrame | None, steps: pd.DataFrame | None = None) -> Plot | None:
    """GPU idle time per rank split into host wait / kernel wait / other (HTA idle time breakdown).

    Source: ``ranks`` (whole trace); else Σ over ``steps``. Of more than :data:`RANK_BARS` ranks, the most idle are
    drawn, in rank order.
    """
    cols = ["idle_host_wait_ns", "idle_kernel_wait_ns", "idle_other_ns"]
    src = ranks if _has(ranks, "rank", *cols) else steps if _has(steps, "rank", *cols) else None
    if src is None:
        return None
    g = src.assign(**{c: pd.to_numeric(src[c], errors="coerce") for c in cols}).groupby("rank")[cols].sum(min_count=1)
    if g.isna().all().all() or not np.nansum(g.to_numpy(dtype=float)):
        return None
    n_ranks = len(g)
    g = _most(g, g.sum(axis=1))
    series = [
        (label, COLORS[key], np.nan_to_num(g[col].to_numpy(dtype=float) / 1e6))
        for col, key, label in zip(cols, ("host_wait", "kernel_wait", "other"), ("host wait", "kernel wait", "other"))
    ]
    tree = _hbars(
        [f"rank {r}" for r in g.index],
        series,
        "Idle time breakdown per rank (HTA)" + _of(len(g), n_ranks, "the most idle"),
        "ms (Σ over streams of the gaps between device events)",
    )
    shown = _shown(len(g), n_ranks)
    return _plot(
        [tree],
        "idle_breakdown",
        "Idle-time breakdown per rank",
        f"Stacked bars of host-wait, kernel-wait and other idle time for {shown} ranks",
    )


def top_kernels(top: pd.DataFrame | None) -> Plot | None:
    """Horizontal bars of the kernels with the most total time (``top``: name, total_ns, kernel_type), one color
    (and legend entry) per kernel type."""
    if not _has(top, "name", "total_ns") or not np.nansum(top["total_ns"].astype(float)):
        return None
    types = top["kernel_type"].fillna("OTHER") if "kernel_type" in top.columns else pd.Series(["OTHER"] * len(top))
    types = types.where(types.isin(["COMPUTATION", "COMMUNICATION", "MEMORY"]), "OTHER").to_numpy()
    ms = top["total_ns"].astype(float).to_numpy() / 1e6
    series = [
        (t.lower(), COLORS[t], np.where(types == t, ms, np.nan))
        for t in ("COMPUTATION", "COMMUNICATION", "MEMORY", "OTHER")
        if (types == t).any()
    ]
    tree = _hbars(
        [short(n) for n in top["name"]], series, f"Top {len(top)} kernels by total time",
        "total ms (Σ over ranks and steps)", legend_columns=4, label_px=20,
    )  # fmt: skip
    return _plot([tree], "top_kernels", "Top kernels", f"Bar chart of the {len(top)} kernels with the most total time")


def recoverable_hours(impact: pd.DataFrame | None, label: str = "rule", what: str = "finding rule") -> Plot | None:
    """Horizontal bars of the accelerator-hours per day fixing each ``label`` would recover (``impact``: the fleet
    rows of ``fleet_findings`` (``rule``) or ``fleet_ops`` (a ``label`` column the caller adds), with
    ``accelerator_hours_per_day``), most first; ``what`` names the bars in words."""
    if not _has(impact, label, "accelerator_hours_per_day"):
        return None
    d = impact.sort_values("accelerator_hours_per_day", ascending=False)
    tree = _hbars(
        [short(r) for r in d[label]],
        [("accelerator-hours per day", COLORS["host_wait"], d["accelerator_hours_per_day"].astype(float))],
        f"Recoverable accelerator-hours by {what}",
        "accelerator-hours per day (recoverable time × world size, over the window)",
        legend=False,
    )
    return _plot(
        [tree],
        "recoverable_hours" if label == "rule" else f"recoverable_hours_{label}",
        "Recoverable accelerator-hours",
        f"Bar chart of the accelerator-hours per day {len(d)} {what}s cost the fleet",
    )


def _heatmap(m: pd.DataFrame, title: str, x_title: str, row_labels: list[str], col_labels: list[str]):
    """A heatmap as pygal's dot matrix: one row per row of ``m`` (top to bottom), one column per column, each
    dot's area the cell's value (NaN: no dot)."""
    ch = _chart(
        "Dot",
        130 + 24 * len(m) + 8 * max((len(c) for c in col_labels), default=0),
        colors=["#D55E00"] * len(m),  # one color: the dot area is the value
        title=title,
        x_title=x_title,
        show_legend=False,
        x_label_rotation=45,
    )
    ch.x_labels = col_labels
    for label, (_, row) in zip(reversed(row_labels), m.iloc[::-1].iterrows()):  # pygal: first series at the bottom
        ch.add(label, _values(row.to_numpy(dtype=float)))
    return _tree(ch, "heatmap")


def collective_wait_heatmap(collectives: pd.DataFrame | None) -> Plot | None:
    """Heatmap of ``wait_ns`` (time a rank waited for the slowest rank) by rank × collective call.

    Calls are ordered by their earliest aligned start on the job clock (else ``call_index``); more than
    :data:`HEATMAP_COLUMNS` calls are grouped into that many runs of consecutive calls, each cell the group's
    longest wait; of more than :data:`HEATMAP_ROWS` ranks, the ranks with the most total wait are drawn (the title
    says how many of how many).
    """
    if not _has(collectives, "rank", "match_key", "wait_ns"):
        return None
    c = collectives.copy()
    c["wait_ms"] = _ms(c["wait_ns"])
    order_col = (
        "aligned_start_ns" if "aligned_start_ns" in c.columns and c["aligned_start_ns"].notna().any() else "call_index"
    )
    order = (
        c.groupby("match_key")[order_col].min().sort_values(kind="stable")
        if order_col in c.columns
        else pd.Series(range(c["match_key"].nunique()), index=sorted(c["match_key"].unique()))
    )
    m = c.pivot_table(index="rank", columns="match_key", values="wait_ms", aggfunc="max").reindex(columns=order.index)
    if m.empty or m.isna().all().all():
        return None
    n, n_ranks = m.shape[1], len(m)
    if n_ranks > HEATMAP_ROWS:
        m = m.loc[sorted(m.sum(axis=1, min_count=1).fillna(0.0).nlargest(HEATMAP_ROWS).index)]
    if n > HEATMAP_COLUMNS:
        group = np.arange(n) * HEATMAP_COLUMNS // n
        m = m.T.groupby(group).max().T
        edges = [int(np.flatnonzero(group == g)[0]) for g in range(HEATMAP_COLUMNS)] + [n]
        cols = [f"{a + 1}–{b}" if b - a > 1 else str(a + 1) for a, b in zip(edges, edges[1:])]
    else:
        cols = [str(i + 1) for i in range(n)]
    tree = _heatmap(
        m,
        f"Collective wait by rank and call{_of(len(m), n_ranks, 'the most total wait')} (dot area: wait for the "
        "slowest rank, ms)",
        f"collective call (job order, {n} calls)",
        [f"rank {r}" for r in m.index],
        cols,
    )
    return _plot(
        [tree],
        "collective_wait",
        "Collective wait heatmap",
        f"Heatmap of collective wait time, {_shown(len(m), n_ranks)} ranks by {n} calls",
    )


def host_job_heatmap(cells: pd.DataFrame | None) -> Plot | None:
    """Heatmap of hosts × jobs: each cell the host's last-arrival ratio in that job (1 = its fair share of
    the collectives' last arrivals; ``cells``: host_name, job, last_arrival_ratio), suspects' rows first; at most
    :data:`HEATMAP_ROWS` hosts and :data:`HEATMAP_COLUMNS` jobs, the first ones in ``cells``' order."""
    if not _has(cells, "host_name", "job", "last_arrival_ratio"):
        return None
    m = cells.pivot_table(index="host_name", columns="job", values="last_arrival_ratio", aggfunc="max", sort=False)
    if m.empty or m.isna().all().all():
        return None
    m = m.iloc[:HEATMAP_ROWS, :HEATMAP_COLUMNS]
    tree = _heatmap(
        m,
        "Hosts by job: how often their ranks arrive last at collectives (dot area: last-arrival ratio)",
        "job (ratio 1 = the host's fair share of last arrivals)",
        [short(h, 30) for h in m.index],
        [short(j, 18) for j in m.columns],
    )
    return _plot(
        [tree],
        "host_job_heatmap",
        "Host × job heatmap",
        f"Heatmap of the last-arrival ratio of {len(m)} hosts in {m.shape[1]} jobs",
    )


def critical_path_attribution(share: pd.DataFrame | None) -> Plot | None:
    """Bars of the critical-path time per ``bound_by`` (``share``: bound_by, dur_ns, pct)."""
    if not _has(share, "bound_by", "pct") or not len(share):
        return None
    tree = _hbars(
        [short(b) for b in share["bound_by"]],
        [("% of critical-path time", "#0072B2", share["pct"].astype(float))],
        "What the critical path is bound by",
        "% of critical-path time",
        legend=False,
    )
    return _plot([tree], "critical_path", "Critical-path summary", "Bar chart of critical-path time by attribution")


def _counts(v) -> list[int]:
    """Whole-number ticks from 0 to the largest of ``v`` (about 5 of them)."""
    top = int(np.nanmax(np.asarray(v, dtype=float), initial=0.0))
    return list(range(0, top + 1, max(1, -(-top // 5))))


def fleet_trends(daily: pd.DataFrame | None) -> Plot | None:
    """Lines over capture date: median GPU idle % and median step time of the jobs, jobs per day (three charts
    stacked; the step time on a log scale when it spans more than 50×).

    ``daily``: date, n_jobs, idle_pct_median, step_time_p50_ms_median.
    """
    if not _has(daily, "date") or len(daily) == 0:
        return None
    d = daily.sort_values("date")
    dates = [short(v, 12) for v in d["date"]]
    st = d["step_time_p50_ms_median"].astype(float)
    log = bool(st.notna().sum() > 1 and st.min() > 0 and st.max() / st.min() > 50)
    charts = [
        ("Line", "Fleet trends by capture date: GPU idle, % (median job)", "idle_pct_median", COLORS["idle"], {}),
        ("Line", "job step time p50, ms (median job)", "step_time_p50_ms_median", COLORS["compute"],
         {"logarithmic": log}),
        ("Line", "jobs", "n_jobs", COLORS["host_busy"], {"fill": True, "y_labels": _counts(d["n_jobs"])}),
    ]  # fmt: skip
    trees = []
    for i, (kind, title, col, color, extra) in enumerate(charts):
        ch = _chart(kind, 230 if i == len(charts) - 1 else 170, colors=[color], title=title, show_legend=False,
                    x_label_rotation=45, show_x_labels=i == len(charts) - 1, **extra)  # fmt: skip
        ch.x_labels = dates
        ch.add(title, _values(d[col].astype(float)))
        trees.append(_tree(ch, f"trend-{i}"))
    return _plot(trees, "fleet_trends", "Trends over time", f"Line charts of fleet metrics over {len(d)} dates")


def op_deltas(ops: pd.DataFrame | None, k: int = 20) -> Plot | None:
    """Diverging bars of the largest per-step time changes B − A (``ops``: name, delta_ns_per_step)."""
    if not _has(ops, "name", "delta_ns_per_step"):
        return None
    o = ops.assign(_abs=ops["delta_ns_per_step"].astype(float).abs())
    o = o[o["_abs"] > 0].sort_values("_abs", ascending=False).head(k)
    if not len(o):
        return None
    v = o["delta_ns_per_step"].astype(float).to_numpy() / 1e6
    tree = _hbars(
        [short(f"[{c}] {n}") for c, n in zip(o.get("group", [""] * len(o)), o["name"])],
        [
            ("slower in B", "#D55E00", np.where(v > 0, v, np.nan)),
            ("faster in B", "#009E73", np.where(v < 0, v, np.nan)),
        ],
        f"Largest per-step time changes ({len(o)})",
        "Δ ms per step (B − A)",
        legend_columns=2,
        label_px=20,
    )
    return _plot(
        [tree], "op_deltas", "Kernel and op time changes", f"Diverging bar chart of {len(o)} per-step time changes"
    )


def idle_window_strip(windows: pd.DataFrame | None) -> Plot | None:
    """Per rank, a strip of its step (0–100 % of the step) with the device's idle windows drawn where they open,
    coloured by cause; all steps of the rank are overlaid, each at ``1 / steps`` opacity, so a window that recurs at
    the same place is dark and a one-off is faint. Of more than :data:`HEATMAP_ROWS` ranks, those with the most
    idle time are drawn, in rank order.

    Source: ``utilization_windows`` (:mod:`jobs.analyze.efficiency.utilization`). Pygal has no Gantt chart: the
    strip is an SVG element tree built here (text escaped by the serializer).
    """
    if not _has(windows, "rank", "step", "offset_ns", "dur_ns", "step_time_ns", "cause"):
        return None
    w = windows.assign(
        _o=pd.to_numeric(windows["offset_ns"], errors="coerce")
        / pd.to_numeric(windows["step_time_ns"], errors="coerce"),
        _d=pd.to_numeric(windows["dur_ns"], errors="coerce") / pd.to_numeric(windows["step_time_ns"], errors="coerce"),
    ).dropna(subset=["_o", "_d"])
    if not len(w):
        return None
    idle = w.groupby("rank")["dur_ns"].sum()
    ranks = sorted(idle.nlargest(HEATMAP_ROWS).index) if len(idle) > HEATMAP_ROWS else sorted(idle.index)
    left, top, row, bar = 90, 40, 26, 18
    plot_w = WIDTH - left - 20
    causes = [c for c in ("sync", "collective", "memcpy", "dataloader", "host", "host_idle") if c in set(w["cause"])]
    height = top + row * len(ranks) + 60
    root = ET.Element("svg", xmlns=_SVG_NS, width=str(WIDTH), height=str(height), viewBox=f"0 0 {WIDTH} {height}")
    title = "Device idle windows inside the step, per rank (all steps overlaid: darker = recurs)"
    ET.SubElement(root, "text", x=str(left), y="20", style="font: 15px sans-serif").text = title
    for i, rank in enumerate(ranks):
        y = top + i * row
        ET.SubElement(root, "text", x=str(left - 8), y=str(y + bar - 4), style="font: 11px sans-serif",
                      **{"text-anchor": "end"}).text = f"rank {rank}"  # fmt: skip
        ET.SubElement(root, "rect", x=str(left), y=str(y), width=str(plot_w), height=str(bar), fill="#f3f4f6")
        mine = w[w["rank"] == rank]
        alpha = max(1.0 / max(mine["step"].nunique(), 1), 0.08)
        for o, d, c in zip(mine["_o"], mine["_d"], mine["cause"]):
            ET.SubElement(root, "rect", x=f"{left + plot_w * min(max(o, 0), 1):.1f}", y=str(y),
                          width=f"{max(plot_w * min(d, 1), 1):.1f}", height=str(bar), fill=COLORS.get(c, "#999999"),
                          **{"fill-opacity": f"{alpha:.3f}"})  # fmt: skip
    y = top + row * len(ranks) + 14
    for pct in (0, 25, 50, 75, 100):
        ET.SubElement(root, "text", x=f"{left + plot_w * pct / 100:.1f}", y=str(y), style="font: 11px sans-serif",
                      **{"text-anchor": "middle"}).text = f"{pct} % of step"  # fmt: skip
    for k, c in enumerate(causes):
        x = left + k * 130
        ET.SubElement(root, "rect", x=str(x), y=str(y + 14), width="12", height="12", fill=COLORS[c])
        ET.SubElement(root, "text", x=str(x + 16), y=str(y + 24), style="font: 11px sans-serif").text = c
    alt = "; ".join(f"rank {r}: {idle[r] / 1e6:.1f} ms idle in windows" for r in ranks[:8])
    return _plot([root], "idle-windows", title, alt)
