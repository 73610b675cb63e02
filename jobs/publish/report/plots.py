"""Plots for the HTML reports: pandas in, a :class:`Plot` (base64 PNG data URI) out.

matplotlib's object API (``Figure`` on an Agg canvas, no pyplot global state, no GUI backend). Names from
traces are drawn with math-text parsing and LaTeX off (a ``$`` in a kernel name stays a ``$``) and shortened
to :data:`LABEL_CHARS` characters. Every function returns ``None`` when its input has nothing to draw.

Cost: a report renders a handful of plots per job, so each is kept cheap (issue 13): bars are one
``PolyCollection`` per series (:func:`_hbars`, not one ``Rectangle`` artist per bar), and the margins are
fitted in one measuring pass before saving (:func:`_fit`) instead of by the constrained-layout solver,
which measured every artist twice and made ``savefig`` draw the figure twice. What remains is mostly
matplotlib's text rendering (the glyphs of the tick labels).
"""

from __future__ import annotations

import base64
import functools
import io
import warnings
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
}


@dataclass
class Plot:
    """One rendered plot: ``key`` (stable id, used by tests), ``title``, ``data_uri`` (PNG), ``alt`` text."""

    key: str
    title: str
    data_uri: str
    alt: str


def short(name, n: int = LABEL_CHARS) -> str:
    """``name`` as text, at most ``n`` characters (``…`` marks the cut)."""
    s = "" if name is None or (isinstance(name, float) and np.isnan(name)) else str(name)
    s = " ".join(s.split())
    return s if len(s) <= n else s[: n - 1] + "…"


#: Pixels per inch of every plot (figure sizes are in inches).
DPI = 100


def _figure(width: float, height: float):
    """A ``width`` × ``height`` inch figure on its own Agg canvas (no layout engine: :func:`_png` fits it)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # heavy: matplotlib
    from matplotlib.figure import Figure  # heavy: matplotlib

    fig = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def _hbars(ax, y, width, left=0.0, color=None, label: str | None = None, height: float = 0.8):
    """Horizontal bars centred on ``y`` (data units), as ``ax.barh`` draws them, but as one ``PolyCollection``.

    Args:
        y: bar centres; width: bar lengths (negative: to the left of ``left``); left: bar starts
            (scalar or per bar); color: one color or one per bar; height: bar thickness in y units.

    Returns:
        The collection (a legend entry when ``label`` is given).
    """
    from matplotlib.collections import PolyCollection  # heavy: matplotlib

    y = np.asarray(y, dtype=float)
    w = np.asarray(width, dtype=float)
    x0 = np.broadcast_to(np.asarray(left, dtype=float), w.shape)
    x1, y0, y1 = x0 + w, y - height / 2, y + height / 2
    verts = np.stack([np.column_stack(c) for c in ((x0, y0), (x1, y0), (x1, y1), (x0, y1))], axis=1)
    bars = PolyCollection(verts, facecolors=color, edgecolors="none", linewidths=0, label=label)
    bars.sticky_edges.x.append(float(np.min(x0, initial=0.0)))  # as barh: the value axis starts at the bars' base
    ax.add_collection(bars, autolim=True)
    ax.autoscale_view()
    return bars


def _legend_below(fig, **kwargs):
    """A figure legend centred under the axes, without a frame (:func:`_fit` keeps room for it)."""
    return fig.legend(loc="lower center", frameon=False, **kwargs)


def _fit(fig, pad: float = 4.0) -> None:
    """Fit the subplots to the figure in one measuring pass: every subplot's tight box (tick labels, axis
    labels, title, inset colorbar) inside the figure, ``pad`` pixels from its edges and from each other,
    above the figure's legends.

    The figures here are one column of subplots (``add_subplot()`` or ``subplots(n, 1)``), so the margins
    are the largest overhangs of the tight boxes over the axes, measured once at the figure's default
    subplot positions with its renderer (the text extents are cached for the draw that follows):
    ``tight_layout`` measures twice, constrained layout twice on every draw. The right margin keeps at least
    half of the widest x tick label, in case the wider axes get a tick at their right end.
    """
    renderer = fig.canvas.get_renderer()
    width, height = fig.bbox.width, fig.bbox.height
    floor = max((leg.get_window_extent(renderer).y1 for leg in fig.legends), default=0.0)
    axes = [ax for ax in fig.axes if ax.get_subplotspec() is not None]  # insets ride in their parent's tight box
    boxes = [(ax.bbox, ax.get_tightbbox(renderer)) for ax in axes]
    xtick = max(
        (t.get_window_extent(renderer).width for ax in axes for t in ax.get_xticklabels() if t.get_text()), default=0.0
    )
    left = max(a.x0 - t.x0 for a, t in boxes) + pad
    right = max(max(t.x1 - a.x1 for a, t in boxes), xtick / 2) + pad
    top = boxes[0][1].y1 - boxes[0][0].y1 + pad
    bottom = boxes[-1][0].y0 - boxes[-1][1].y0 + pad + floor
    gap = max((a.y0 - t.y0 + t2.y1 - a2.y1 for (a, t), (a2, t2) in zip(boxes, boxes[1:])), default=0.0) + pad
    n = len(axes)
    axes_height = (height - top - bottom - (n - 1) * gap) / n
    fig.subplots_adjust(
        left=left / width,
        right=1 - right / width,
        bottom=bottom / height,
        top=1 - top / height,
        hspace=gap / axes_height if n > 1 and axes_height > 0 else None,
    )


def _png(fig, key: str, title: str, alt: str) -> Plot:
    _fit(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return Plot(key, title, "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii"), alt)


def _ms(v) -> np.ndarray:
    return pd.to_numeric(v, errors="coerce").astype(float).to_numpy() / 1e6


def _has(df: pd.DataFrame | None, *cols: str) -> bool:
    return df is not None and len(df) > 0 and all(c in df.columns for c in cols)


def _plotting(fn):
    """Run a plot function with math-text and LaTeX off (``$`` and ``\\input`` in names stay literal text,
    whatever the matplotlibrc says) and glyph warnings muted."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        import matplotlib  # heavy: matplotlib

        with warnings.catch_warnings(), matplotlib.rc_context({"text.parse_math": False, "text.usetex": False}):
            warnings.simplefilter("ignore")  # missing glyphs for exotic names are not errors
            return fn(*args, **kwargs)

    return wrapper


@_plotting
def step_breakdown(steps: pd.DataFrame | None) -> Plot | None:
    """Mean step time per rank, split by HTA's temporal breakdown (compute / non-compute / idle).

    Source: ``steps`` (per-step HTA temporal breakdown). Ranks without GPU activity show host busy
    time (``cpu_op_time_ns``) and the rest of the step instead. A black tick marks the median step time.
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
    ranks = [str(r) for r in g.index]
    y = np.arange(len(ranks))
    fig = _figure(9, 1.6 + 0.32 * len(ranks))
    ax = fig.add_subplot()
    gpu = g["kernel_time_ns"].notna()
    left = np.zeros(len(g))
    parts = [
        ("compute_time_ns", "compute", "GPU compute"),
        ("non_compute_time_ns", "non_compute", "GPU non-compute"),
        ("idle_time_ns", "idle", "GPU idle"),
    ]
    for col, key, label in parts:
        v = np.where(gpu, np.nan_to_num(g[col].to_numpy() / 1e6), 0.0)
        if v.any():
            _hbars(ax, y, v, left=left, color=COLORS[key], label=label)
        left += v
    busy = np.where(~gpu, np.nan_to_num(g["cpu_op_time_ns"].to_numpy() / 1e6), 0.0)
    rest = np.where(~gpu, np.clip(np.nan_to_num(g["step_time_ns"].to_numpy() / 1e6) - busy, 0, None), 0.0)
    if busy.any():
        _hbars(ax, y, busy, left=left, color=COLORS["host_busy"], label="host busy (no GPU)")
    if rest.any():
        _hbars(ax, y, rest, left=left + busy, color=COLORS["host_other"], label="rest of step (no GPU)")
    ax.scatter(g["p50"].to_numpy() / 1e6, y, marker="|", s=300, color="black", label="median step time", zorder=3)
    ax.set_yticks(y, [f"rank {r}" for r in ranks])
    ax.invert_yaxis()
    ax.set_xlabel("ms per step (mean over steps)")
    _legend_below(fig, ncols=5, fontsize=8)
    ax.set_title(
        "Step time per rank: GPU temporal breakdown (HTA)"
        if gpu.any()
        else "Step time per rank: host busy time (no GPU activity)"
    )
    return _png(
        fig,
        "step_breakdown",
        "Step-time breakdown per rank",
        f"Stacked bars of mean compute, non-compute and idle time per step for {len(ranks)} ranks"
        if gpu.any()
        else f"Stacked bars of mean host busy time and the rest of the step for {len(ranks)} ranks",
    )


@_plotting
def idle_breakdown(ranks: pd.DataFrame | None, steps: pd.DataFrame | None = None) -> Plot | None:
    """GPU idle time per rank split into host wait / kernel wait / other (HTA idle time breakdown).

    Source: ``ranks`` (whole trace); else Σ over ``steps``.
    """
    cols = ["idle_host_wait_ns", "idle_kernel_wait_ns", "idle_other_ns"]
    src = ranks if _has(ranks, "rank", *cols) else steps if _has(steps, "rank", *cols) else None
    if src is None:
        return None
    g = src.assign(**{c: pd.to_numeric(src[c], errors="coerce") for c in cols}).groupby("rank")[cols].sum(min_count=1)
    if g.isna().all().all() or not np.nansum(g.to_numpy(dtype=float)):
        return None
    y = np.arange(len(g))
    fig = _figure(9, 1.6 + 0.32 * len(g))
    ax = fig.add_subplot()
    left = np.zeros(len(g))
    for col, key, label in zip(cols, ("host_wait", "kernel_wait", "other"), ("host wait", "kernel wait", "other")):
        v = np.nan_to_num(g[col].to_numpy(dtype=float) / 1e6)
        _hbars(ax, y, v, left=left, color=COLORS[key], label=label)
        left += v
    ax.set_yticks(y, [f"rank {r}" for r in g.index])
    ax.invert_yaxis()
    ax.set_xlabel("ms (Σ over streams of the gaps between device events)")
    _legend_below(fig, ncols=3, fontsize=8)
    ax.set_title("Idle time breakdown per rank (HTA)")
    return _png(
        fig,
        "idle_breakdown",
        "Idle-time breakdown per rank",
        f"Stacked bars of host-wait, kernel-wait and other idle time for {len(g)} ranks",
    )


@_plotting
def top_kernels(top: pd.DataFrame | None) -> Plot | None:
    """Horizontal bars of the kernels with the most total time (``top``: name, total_ns, kernel_type)."""
    if not _has(top, "name", "total_ns") or not np.nansum(top["total_ns"].astype(float)):
        return None
    fig = _figure(9, 1.6 + 0.3 * len(top))
    ax = fig.add_subplot()
    y = np.arange(len(top))
    types = top["kernel_type"].fillna("OTHER") if "kernel_type" in top.columns else pd.Series(["OTHER"] * len(top))
    _hbars(ax, y, top["total_ns"].astype(float).to_numpy() / 1e6, color=[COLORS.get(t, COLORS["OTHER"]) for t in types])
    ax.set_yticks(y, [short(n) for n in top["name"]], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("total ms (Σ over ranks and steps)")
    from matplotlib.patches import Patch  # heavy: matplotlib

    seen = [t for t in ("COMPUTATION", "COMMUNICATION", "MEMORY", "OTHER") if t in set(types)]
    _legend_below(fig, handles=[Patch(color=COLORS[t], label=t.lower()) for t in seen], fontsize=8, ncols=4)
    ax.set_title(f"Top {len(top)} kernels by total time")
    return _png(fig, "top_kernels", "Top kernels", f"Bar chart of the {len(top)} kernels with the most total time")


@_plotting
def recoverable_hours(impact: pd.DataFrame | None) -> Plot | None:
    """Horizontal bars of the accelerator-hours per day fixing each finding rule would recover
    (``impact``: the fleet rows of ``fleet_findings``: rule, accelerator_hours_per_day), most first."""
    if not _has(impact, "rule", "accelerator_hours_per_day"):
        return None
    d = impact.sort_values("accelerator_hours_per_day", ascending=False)
    fig = _figure(9, 1.6 + 0.35 * len(d))
    ax = fig.add_subplot()
    y = np.arange(len(d))
    _hbars(ax, y, d["accelerator_hours_per_day"].astype(float).to_numpy(), color=COLORS["host_wait"])
    ax.set_yticks(y, [short(r) for r in d["rule"]], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("accelerator-hours per day (time lost per step × steps × world size, over the window)")
    ax.set_title("Recoverable accelerator-hours by finding rule")
    return _png(
        fig,
        "recoverable_hours",
        "Recoverable accelerator-hours",
        f"Bar chart of the accelerator-hours per day {len(d)} finding rules cost the fleet",
    )


@_plotting
def collective_wait_heatmap(collectives: pd.DataFrame | None) -> Plot | None:
    """Heatmap of ``wait_ns`` (time a rank waited for the slowest rank) by rank × collective call.

    Calls are ordered by their earliest aligned start on the job clock (else ``call_index``).
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
    fig = _figure(10, 1.6 + 0.28 * len(m))
    ax = fig.add_subplot()
    im = ax.imshow(m.to_numpy(dtype=float), aspect="auto", interpolation="nearest", cmap="magma_r")
    ax.set_yticks(np.arange(len(m)), [f"rank {r}" for r in m.index])
    ax.set_xlabel(f"collective call (job order, {m.shape[1]} calls)")
    fig.colorbar(im, cax=ax.inset_axes([1.015, 0.0, 0.018, 1.0]), label="wait for slowest rank, ms")
    ax.set_title("Collective wait by rank and call")
    return _png(
        fig,
        "collective_wait",
        "Collective wait heatmap",
        f"Heatmap of collective wait time, {len(m)} ranks by {m.shape[1]} calls",
    )


@_plotting
def host_job_heatmap(cells: pd.DataFrame | None) -> Plot | None:
    """Heatmap of hosts × jobs: each cell the host's last-arrival ratio in that job (1 = its fair share of
    the collectives' last arrivals; ``cells``: host_name, job, last_arrival_ratio), suspects' rows first."""
    if not _has(cells, "host_name", "job", "last_arrival_ratio"):
        return None
    m = cells.pivot_table(index="host_name", columns="job", values="last_arrival_ratio", aggfunc="max", sort=False)
    if m.empty or m.isna().all().all():
        return None
    fig = _figure(10, 1.8 + 0.3 * len(m))
    ax = fig.add_subplot()
    im = ax.imshow(m.to_numpy(dtype=float), aspect="auto", interpolation="nearest", cmap="magma_r", vmin=0.0)
    ax.set_yticks(np.arange(len(m)), [short(h, 30) for h in m.index], fontsize=8)
    ax.set_xticks(np.arange(m.shape[1]), [short(j, 18) for j in m.columns], rotation=45, ha="right", fontsize=7)
    fig.colorbar(im, cax=ax.inset_axes([1.015, 0.0, 0.018, 1.0]), label="last-arrival ratio (1 = fair share)")
    ax.set_title("Hosts by job: how often their ranks arrive last at collectives")
    return _png(
        fig,
        "host_job_heatmap",
        "Host × job heatmap",
        f"Heatmap of the last-arrival ratio of {len(m)} hosts in {m.shape[1]} jobs",
    )


@_plotting
def critical_path_attribution(share: pd.DataFrame | None) -> Plot | None:
    """Bars of the critical-path time per ``bound_by`` (``share``: bound_by, dur_ns, pct)."""
    if not _has(share, "bound_by", "pct") or not len(share):
        return None
    fig = _figure(9, 1.2 + 0.35 * len(share))
    ax = fig.add_subplot()
    y = np.arange(len(share))
    _hbars(ax, y, share["pct"].astype(float).to_numpy(), color="#0072B2")
    ax.set_yticks(y, [short(b) for b in share["bound_by"]])
    ax.invert_yaxis()
    ax.set_xlabel("% of critical-path time")
    ax.set_title("What the critical path is bound by")
    return _png(fig, "critical_path", "Critical-path summary", "Bar chart of critical-path time by attribution")


@_plotting
def fleet_trends(daily: pd.DataFrame | None) -> Plot | None:
    """Lines over capture date: median GPU idle % and median step time of the jobs, jobs per day.

    ``daily``: date, n_jobs, idle_pct_median, step_time_p50_ms_median.
    """
    if not _has(daily, "date") or len(daily) == 0:
        return None
    d = daily.sort_values("date")
    x = np.arange(len(d))
    fig = _figure(10, 5.5)
    a1, a2, a3 = fig.subplots(3, 1, sharex=True)
    a1.plot(x, d["idle_pct_median"].astype(float), marker="o", color=COLORS["idle"])
    a1.set_ylabel("GPU idle, %\n(median job)")
    st = d["step_time_p50_ms_median"].astype(float)
    a2.plot(x, st, marker="o", color=COLORS["compute"])
    if st.notna().sum() > 1 and st.min() > 0 and st.max() / st.min() > 50:
        a2.set_yscale("log")
        # plain numbers: the default log labels are math text ($10^{4}$), drawn literally with math text off
        from matplotlib.ticker import FuncFormatter, NullFormatter  # heavy: matplotlib

        a2.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
        a2.yaxis.set_minor_formatter(NullFormatter())
    a2.set_ylabel("job step time p50, ms\n(median job)")
    a3.bar(x, d["n_jobs"].astype(float), color=COLORS["host_busy"])
    a3.set_ylabel("jobs")
    a3.set_xticks(x, [short(v, 12) for v in d["date"]], rotation=45, ha="right", fontsize=8)
    a1.set_title("Fleet trends by capture date")
    return _png(fig, "fleet_trends", "Trends over time", f"Line charts of fleet metrics over {len(d)} dates")


@_plotting
def op_deltas(ops: pd.DataFrame | None, k: int = 20) -> Plot | None:
    """Diverging bars of the largest per-step time changes B − A (``ops``: name, delta_ns_per_step)."""
    if not _has(ops, "name", "delta_ns_per_step"):
        return None
    o = ops.assign(_abs=ops["delta_ns_per_step"].astype(float).abs())
    o = o[o["_abs"] > 0].sort_values("_abs", ascending=False).head(k)
    if not len(o):
        return None
    fig = _figure(10, 1.2 + 0.3 * len(o))
    ax = fig.add_subplot()
    v = o["delta_ns_per_step"].astype(float).to_numpy() / 1e6
    y = np.arange(len(o))
    _hbars(ax, y, v, color=np.where(v > 0, "#D55E00", "#009E73"))
    ax.axvline(0, color="black", lw=0.8)
    ax.set_yticks(y, [short(f"[{c}] {n}") for c, n in zip(o.get("group", [""] * len(o)), o["name"])], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("Δ ms per step (B − A; red = slower in B)")
    ax.set_title(f"Largest per-step time changes ({len(o)})")
    return _png(
        fig, "op_deltas", "Kernel and op time changes", f"Diverging bar chart of {len(o)} per-step time changes"
    )
