"""Critical path per (job, step): one rank's path (HTA's graph) and the legs between collectives.

Per rank (Spark: ``groupBy(job_id, attempt, rank, capture_id).applyInArrow``):
:func:`rank_critical_path` returns the ``critical_path`` rows with ``scope = "rank"`` and the
*boundaries* (:data:`BOUNDARIES_SCHEMA`) that :func:`jobs.analyze.critical_path.cross_rank.job_critical_path`
stitches across ranks (per job).

Single-rank path (source: HTA 0.5.0 ``CriticalPathAnalysis.critical_path_analysis``,
``../shared/reference/kineto_and_hta.md`` §1.2): the graph of :mod:`jobs.analyze.critical_path.graph` over the
window of one CPU ``ProfilerStep#N`` (the whole trace, step -1, when there is none), longest path by
:mod:`jobs.analyze.critical_path.longest`. Path length = Σ edge weights, negative weights clamped to 0 as HTA's
longest-path search does (HTA's ``total_duration_us`` × 1000; HTA's summary adds the unclamped
weights of the same edges, which differs only if a negative-weight edge lies on the path); time HTA
weights 0 (dependency edges, sync edges, blocking CUDA calls) is not in it.

Attribution (``bound_by``), HTA's ``bound_by`` refined:

======================  =========================================  ==============================
ours                    edges                                      HTA 0.5.0
======================  =========================================  ==============================
``cpu_bound``           operator edges attributed to a CPU row      ``cpu_bound``
``data_loading``        same, row or an ancestor is data loading   ``cpu_bound``
                        (:data:`jobs.analyze.critical_path.trace.DATA_LOADING_PATTERN`)
``sync``                sync-dependency edges and the (0-weight)   ``""`` / ``cpu_bound`` (0 µs)
                        duration of blocking CUDA calls
``launch_overhead``     kernel launch delay edges                  ``gpu_kernel_launch_overhead``
``kernel_kernel_gap``   kernel-kernel delay edges                  ``gpu_kernel_kernel_overhead``
``compute``             GPU operator edges, not communication      ``gpu_compute_bound``
``communication``       GPU operator edges of comm kernels         ``gpu_communication_bound``
``collective_wait``     (job scope only) wait for a late rank      —
``late_start``          (job scope only) job step start → origin   —
                        of the path on a rank, see cp_cross_rank
======================  =========================================  ==============================

Communication kernels: HTA's name rule in compat mode, ours
(:func:`jobs.analyze.trace.kernel_types.kernel_types`: collective metadata + families) otherwise.
Zero-weight ``dependency`` edges are not written.

Legs (the boundaries): the longest path computed again with every communication kernel's end node
as an origin (its incoming edges ignored). For each communication kernel in the step, the leg is
the best path ending at the kernel's start ("arrival"); it starts at the end of an earlier
collective on this rank (``from_kind = "collective"``) or at a path origin (``"origin"``). One more
leg ends at the end of the rank's own critical path (``to_kind = "step_end"``). A leg's length is
the local work the rank needed between the two, in HTA's weights, split by ``bound_by``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from jobs.analyze.critical_path.graph import DEPENDENCY, KERNEL_KERNEL, LAUNCH, OPERATOR, SYNC, CPGraph, build_graph
from jobs.analyze.critical_path.longest import LongestPath, PathEdges, longest_path
from jobs.analyze.critical_path.trace import PathTrace, path_trace
from jobs.analyze.trace.model import IDENTITY, RankTrace, as_rank_trace
from schemas.tables import CRITICAL_PATH

__all__ = [
    "BOUND_BY",
    "HTA_BOUND_BY",
    "BOUNDARIES_SCHEMA",
    "CriticalPath",
    "critical_path",
    "hta_critical_path",
    "hta_window",
    "rank_critical_path",
    "profiler_steps",
    "edge_bound_by",
]

#: ``bound_by`` categories (codes are indices).
BOUND_BY = (
    "cpu_bound",
    "launch_overhead",
    "kernel_kernel_gap",
    "compute",
    "communication",
    "data_loading",
    "sync",
    "collective_wait",
    "late_start",
)
_CPU, _LAUNCH, _KK, _COMP, _COMM, _DL, _SYNC, _WAIT = range(8)
_DEP = -1
#: Our category -> HTA 0.5.0 ``bound_by`` (for comparisons).
HTA_BOUND_BY = {
    "cpu_bound": "cpu_bound",
    "data_loading": "cpu_bound",
    "sync": "",
    "launch_overhead": "gpu_kernel_launch_overhead",
    "kernel_kernel_gap": "gpu_kernel_kernel_overhead",
    "compute": "gpu_compute_bound",
    "communication": "gpu_communication_bound",
}
_EDGE_NAMES = {
    LAUNCH: "kernel_launch_delay",
    KERNEL_KERNEL: "kernel_kernel_gap",
    SYNC: "sync_dependency",
    DEPENDENCY: "dependency",
}
_STEP = re.compile(r"^ProfilerStep#(\d+)$")

#: Schema of the per-rank boundaries (legs) consumed by
#: :func:`jobs.analyze.critical_path.cross_rank.job_critical_path`.
BOUNDARIES_SCHEMA = pa.schema(
    [
        pa.field("date", pa.string()),
        pa.field("job_id", pa.string()),
        pa.field("attempt", pa.int32()),
        pa.field("rank", pa.int32()),
        pa.field("capture_id", pa.string()),
        pa.field("step", pa.int64()),
        pa.field("window_start_ns", pa.int64()),  # rank clock: start of the step window (ProfilerStep#N)
        pa.field("leg", pa.int64()),  # 0-based, by to_ts_ns
        pa.field("to_kind", pa.string()),  # "collective" (arrival at a comm kernel) | "step_end"
        pa.field("to_event_id", pa.int64()),  # comm kernel / event at the end of the rank's path
        pa.field("to_name", pa.string()),
        pa.field("to_ts_ns", pa.int64()),  # rank clock: kernel start / path end
        pa.field("to_end_ns", pa.int64()),  # rank clock: kernel end (collective legs)
        pa.field("from_kind", pa.string()),  # "collective" (end of an earlier comm kernel) | "origin"
        pa.field("from_event_id", pa.int64()),
        pa.field("from_name", pa.string()),
        pa.field("from_ts_ns", pa.int64()),  # rank clock
        pa.field("length_ns", pa.int64()),  # local longest path from -> to, HTA weights
        *[pa.field(f"{c}_ns", pa.int64()) for c in BOUND_BY[:7]],
        pa.field("rank_path_length_ns", pa.int64()),  # the rank's own critical path length for the step
    ]
)


@dataclass
class CriticalPath:
    """One window's critical path.

    Attributes:
        rt, graph, lp: the inputs and the longest-path result.
        edges: :class:`~jobs.analyze.critical_path.longest.PathEdges` of the path, in order.
        bound_by: int codes into :data:`BOUND_BY` per edge (-1 = dependency edge).
        length_ns: path length (Σ weights), ns.
    """

    rt: PathTrace
    graph: CPGraph
    lp: LongestPath
    edges: PathEdges
    bound_by: np.ndarray

    @property
    def length_ns(self) -> int:
        """Σ clamped edge weights along the path, ns (HTA ``total_duration_us`` × 1000)."""
        return self.edges.length

    def breakdown_ns(self, hta_names: bool = False) -> dict:
        """Σ weight per ``bound_by`` (ours, or HTA 0.5.0's names with ``hta_names``), ns."""
        out: dict = {}
        for code in np.unique(self.bound_by).tolist():
            w = int(self.edges.w[self.bound_by == code].sum())
            name = BOUND_BY[code] if code >= 0 else "dependency"
            if hta_names:
                name = HTA_BOUND_BY.get(name, "")
            out[name] = out.get(name, 0) + w
        return out


def _under(flag: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """flag[r] or flag of any ancestor of r (pointer doubling on the parent forest)."""
    out = flag.copy()
    jump = parent.copy()
    act = np.flatnonzero(jump >= 0)
    while len(act):
        out[act] |= out[jump[act]]
        jump[act] = jump[jump[act]]
        act = act[jump[act] >= 0]
    return out


def edge_bound_by(g: CPGraph, etype: np.ndarray, attr: np.ndarray, w: np.ndarray, dl_under: np.ndarray) -> np.ndarray:
    """``bound_by`` code of edges (module table); -1 for dependency edges."""
    rt = g.rt
    a = np.maximum(attr, 0)
    cpu = rt.stream[a] < 0
    op = np.where(
        cpu,
        np.where(dl_under[a], _DL, np.where((w == 0) & rt.is_blocking[a], _SYNC, _CPU)),
        np.where(rt.comm[a], _COMM, _COMP),
    )
    return np.select(
        [etype == KERNEL_KERNEL, etype == LAUNCH, etype == SYNC, etype == DEPENDENCY, attr < 0],
        [_KK, _LAUNCH, _SYNC, _DEP, _CPU],
        op,
    ).astype(np.int8)


def critical_path(rt: PathTrace, start: int, end: int) -> CriticalPath:
    """Critical path of the window ``[start, end]`` (ns on ``rt``'s clock).

    Returns:
        :class:`CriticalPath` (empty path when the window holds no graph node).
    """
    g = build_graph(rt, start, end)
    lp = longest_path(g)
    if lp.end < 0:
        z = np.zeros(0, np.int64)
        edges = PathEdges(z, z, z, z, np.zeros(0, np.int8), z)
    else:
        edges, _ = lp.path_to(lp.end, stop_at_reset=False)
    dl = _under(rt.data_loading, g.parent_row)
    return CriticalPath(rt, g, lp, edges, edge_bound_by(g, edges.type, edges.attr, edges.w, dl))


def hta_window(rt: PathTrace, annotation: str, instance_id=0) -> tuple[int, int]:
    """HTA's analysis window (``critical_path_analysis(annotation, instance_id)``).

    ``annotation == ""``: the whole trace (min ts, max end of the loaded rows). Otherwise the rows
    whose name contains ``annotation`` (any category, event order); ``instance_id`` an int (one
    row) or an inclusive ``(first, last)`` pair.

    Raises:
        ValueError: no row matches ``annotation``.
    """
    if annotation == "":
        return int(rt.ts.min()), int(rt.end.max())
    hit = np.array([annotation in nm for nm in rt.names] + [False], bool)[rt.name_code]
    rows = np.flatnonzero(hit)
    if not len(rows):
        raise ValueError(f"critical path: no event name contains {annotation!r}")
    lo, hi = instance_id if isinstance(instance_id, tuple) else (instance_id or 0, instance_id or 0)
    sel = rows[lo : hi + 1]
    return int(rt.ts[sel].min()), int(rt.end[sel].max())


def hta_critical_path(
    trace: RankTrace | pa.Table,
    annotation: str = "ProfilerStep",
    instance_id=0,
    *,
    hta_us_rounding: bool = False,
    time_base_ns: int = 0,
) -> CriticalPath:
    """HTA 0.5.0 ``critical_path_analysis(rank, annotation, instance_id)`` on one rank.

    Same graph, weights and path length as HTA (``hta_compat`` mode of
    :func:`jobs.analyze.critical_path.trace.path_trace`); ``hta_us_rounding`` reproduces HTA's µs rounding of
    sub-µs traces. See ``tests/golden/test_critical_path_parity.py``.

    Args:
        trace: the rank's :class:`~jobs.analyze.trace.model.RankTrace` (built with the wanted
            ``hta_us_rounding``), or its EVENTS rows (convenience, modelled first).
        annotation, instance_id: HTA's window (:func:`hta_window`).
        hta_us_rounding, time_base_ns: for an events table, HTA's µs rounding and the trace's
            ``baseTimeNanoseconds``.

    Raises:
        ValueError: no event name contains ``annotation``, or a required column is missing.
    """
    rt = path_trace(trace, hta_compat=True, hta_us_rounding=hta_us_rounding, time_base_ns=time_base_ns)
    start, end = hta_window(rt, annotation, instance_id)
    return critical_path(rt, start, end)


def profiler_steps(rt: PathTrace) -> list[tuple[int, int, int]]:
    """CPU ``ProfilerStep#N`` windows ``(N, start_ns, end_ns)`` by N (earliest row wins per N)."""
    match = [(_STEP.match(nm)) for nm in rt.names]
    num = np.array([int(m.group(1)) if m else -1 for m in match] + [-1], np.int64)[rt.name_code]
    rows = np.flatnonzero((num >= 0) & ~rt.is_gpu & (rt.stream == -1))
    out, seen = [], set()
    for r in rows[np.lexsort((rt.ts[rows], num[rows]))].tolist():
        if int(num[r]) not in seen:
            seen.add(int(num[r]))
            out.append((int(num[r]), int(rt.ts[r]), int(rt.end[r])))
    return out


def rank_critical_path(trace: RankTrace | pa.Table) -> tuple[pa.Table, pa.Table]:
    """The rank's critical path per step and its legs between collectives.

    Args:
        trace: the rank's :class:`~jobs.analyze.trace.model.RankTrace` (product mode: exact ns); or
            (convenience for tests and benchmarks) its EVENTS rows of ONE (job_id, attempt, rank,
            capture_id), any order (columns of :data:`jobs.analyze.critical_path.trace.REQUIRED_COLUMNS`
            and :data:`jobs.analyze.trace.model.REQUIRED_COLUMNS`; ``args_json`` and ``collective``
            used when present), modelled first.

    Returns:
        ``(segments, boundaries)``:

        * ``segments``: CRITICAL_PATH columns, ``scope = "rank"``, ``path_rank = rank``; one row
          per path edge with weight > 0, plus the sync edges and blocking calls (``bound_by =
          "sync"``, ``dur_ns = 0``); ``start_ns``/``end_ns`` = times of the edge's two nodes on the
          rank's clock, ``dur_ns`` = edge weight, ``path_length_ns`` = Σ ``dur_ns`` of the step.
        * ``boundaries``: :data:`BOUNDARIES_SCHEMA` rows (module docstring).

    Raises:
        ValueError: a required column is missing or ``events`` mixes captures.
    """
    trace = as_rank_trace(trace, IDENTITY, "rank_critical_path")
    if trace.n == 0:
        return CRITICAL_PATH.empty(), BOUNDARIES_SCHEMA.empty_table()
    ident = trace.identity
    rt = path_trace(trace)
    if rt.n == 0:
        return CRITICAL_PATH.empty(), BOUNDARIES_SCHEMA.empty_table()
    steps = profiler_steps(rt) or [(-1, int(rt.ts.min()), int(rt.end.max()))]
    seg_parts, leg_rows = [], []
    for step, start, end in steps:
        cp = critical_path(rt, start, end)
        seg_parts.append(_segments_table(cp, ident, step))
        leg_rows.extend(_legs(cp, ident, step))
    segs = pa.concat_tables(seg_parts) if seg_parts else CRITICAL_PATH.empty()
    legs = pa.Table.from_pylist(leg_rows, schema=BOUNDARIES_SCHEMA) if leg_rows else BOUNDARIES_SCHEMA.empty_table()
    return segs, legs


def _const(value, n: int, typ: pa.DataType) -> pa.Array:
    """``n`` copies of one value (a dictionary take: no Python list of ``n`` items)."""
    return pa.array([value], typ).take(pa.array(np.zeros(n, np.int32)))


def _segments_table(cp: CriticalPath, ident: dict, step: int) -> pa.Table:
    e, bb, g, rt = cp.edges, cp.bound_by, cp.graph, cp.rt
    keep = (bb >= 0) & ((e.w > 0) | (bb == _SYNC))
    idx = np.flatnonzero(keep)
    n = len(idx)
    attr = e.attr[idx]
    typ = e.type[idx]
    has_ev = (attr >= 0) & (typ == OPERATOR)
    ev_id = np.where(has_ev, rt.event_id[np.maximum(attr, 0)], 0)
    # names: the event's name, else the edge kind (appended to the name dictionary)
    kinds = sorted(_EDGE_NAMES)
    kind_code = np.full(max(kinds) + 1, len(rt.names), np.int64)  # default: "edge"
    kind_code[kinds] = len(rt.names) + 1 + np.arange(len(kinds))
    name_idx = np.where(has_ev, rt.name_code[np.maximum(attr, 0)], kind_code[np.clip(typ, 0, max(kinds))])
    names = pa.array(rt.names + ["edge"] + [_EDGE_NAMES[k] for k in kinds], pa.string()).take(pa.array(name_idx))
    cols = {
        "date": _const(ident["date"], n, pa.string()),
        "job_id": _const(ident["job_id"], n, pa.string()),
        "attempt": pa.array(np.full(n, ident["attempt"], np.int32)),
        "step": pa.array(np.full(n, step, np.int64)),
        "scope": _const("rank", n, pa.string()),
        "path_rank": pa.array(np.full(n, ident["rank"], np.int32)),
        "path_capture_id": _const(ident["capture_id"], n, pa.string()),
        "segment": pa.array(np.arange(n, dtype=np.int64)),
        "rank": pa.array(np.full(n, ident["rank"], np.int32)),
        "capture_id": _const(ident["capture_id"], n, pa.string()),
        "event_id": pa.array(ev_id, pa.int64(), mask=~has_ev),
        "name": names,
        "start_ns": pa.array(g.node_ts[e.src[idx]]),
        "end_ns": pa.array(g.node_ts[e.dst[idx]]),
        "dur_ns": pa.array(e.w[idx]),
        "bound_by": pa.array(list(BOUND_BY), pa.string()).take(pa.array(bb[idx].astype(np.int64))),
        "path_length_ns": pa.array(np.full(n, cp.length_ns, np.int64)),
    }
    return pa.table([cols[c] for c in CRITICAL_PATH.names], schema=CRITICAL_PATH.arrow_schema())


def _legs(cp: CriticalPath, ident: dict, step: int) -> list[dict]:
    """Boundaries of one step (module docstring)."""
    g, rt = cp.graph, cp.rt
    if cp.lp.end < 0:
        return []
    comm_ev = np.flatnonzero(rt.comm[g.ev_row] & (rt.stream[g.ev_row] != -1) & ~rt.sync_cat[g.ev_row])
    resets = 2 * comm_ev + 1
    lp = longest_path(g, resets=resets) if len(comm_ev) else cp.lp
    targets = [(2 * int(j), "collective") for j in comm_ev.tolist()] + [(int(cp.lp.end), "step_end")]
    walks = [lp.walk(node, stop_at_reset=True) for node, _ in targets]
    rank_len = cp.length_ns
    sums = _category_sums(g, [w[0] for w in walks])
    rows = []
    for (node, kind), (_seq, origin), cat in zip(targets, walks, sums):
        ev_to = int(g.ev_row[node // 2])
        ev_from = int(g.ev_row[origin // 2])
        from_coll = bool(lp.is_reset[origin])
        rows.append(
            {
                **ident,
                "step": step,
                "window_start_ns": int(g.window[0]),
                "leg": 0,
                "to_kind": kind,
                "to_event_id": int(rt.event_id[ev_to]),
                "to_name": rt.names[int(rt.name_code[ev_to])],
                "to_ts_ns": int(g.node_ts[node]),
                "to_end_ns": int(rt.end[ev_to]) if kind == "collective" else int(g.node_ts[node]),
                "from_kind": "collective" if from_coll else "origin",
                "from_event_id": int(rt.event_id[ev_from]),
                "from_name": rt.names[int(rt.name_code[ev_from])],
                "from_ts_ns": int(g.node_ts[origin]),
                "length_ns": int(lp.dist[node]),
                **{f"{c}_ns": int(v) for c, v in zip(BOUND_BY[:7], cat)},
                "rank_path_length_ns": rank_len,
            }
        )
    rows.sort(key=lambda r: (r["to_ts_ns"], r["to_kind"] == "step_end", r["to_event_id"]))
    for i, r in enumerate(rows):
        r["leg"] = i
    return rows


def _category_sums(g: CPGraph, seqs: list) -> list[np.ndarray]:
    """Σ weight per ``bound_by`` (first 7 categories) of each walk, via per-category prefix sums."""
    rt = g.rt
    dl = _under(rt.data_loading, g.parent_row)
    chain_bb = edge_bound_by(g, g.ctype, g.cattr, g.cw, dl)
    x_bb = edge_bound_by(g, g.x_type, g.x_attr, g.x_w, dl) if len(g.x_src) else np.zeros(0, np.int8)
    out = [np.zeros(7, np.int64) for _ in seqs]
    lo_l, hi_l, owner, xk, xowner = [], [], [], [], []
    for i, seq in enumerate(seqs):
        for lo, hi, k in seq:
            if k < 0:
                lo_l.append(lo), hi_l.append(hi), owner.append(i)
            else:
                xk.append(k), xowner.append(i)
    if lo_l:
        lo, hi, own = np.array(lo_l), np.array(hi_l), np.array(owner)
        for c in range(7):
            P = np.concatenate(([0], np.cumsum(np.where(chain_bb == c, g.cw, 0))))
            tot = np.zeros(len(seqs), np.int64)
            np.add.at(tot, own, P[hi] - P[lo])
            for i in np.flatnonzero(tot).tolist():
                out[i][c] += int(tot[i])
    for k, i in zip(xk, xowner):
        c = int(x_bb[k])
        if 0 <= c < 7:
            out[i][c] += int(g.x_w[k])
    return out
