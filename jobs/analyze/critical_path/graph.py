"""HTA's critical-path graph of one rank and one time window, built with numpy.

Source: HTA 0.5.0 ``hta/analyzers/critical_path_analysis.py`` (``CPGraph``,
``CriticalPathAnalysis.critical_path_analysis``), ``hta/common/call_stack.py`` (call stacks), see
``../shared/reference/kineto_and_hta.md`` §1.2. :func:`build_graph` produces the same nodes,
edges and weights as HTA, without networkx and without per-event Python:

* **window clip**: CPU rows (stream -1) starting inside ``[start, end]`` with ``dur > 0``; GPU rows
  whose launching CPU row is such a row; every ``Stream Wait Event`` row.
* **nodes**: a start and an end node for every clipped ``cpu_op`` / ``cuda_runtime`` /
  ``cuda_driver`` row and every clipped GPU row with a correlation.
* **CPU edges** (per CPU thread): HTA walks the thread's call stack depth first, the stack built
  from *all* clipped rows of the thread (``CallStackGraph``: sort start/end points with
  ``compare_events``, push on start, pop the top on end). We compute the same push/pop sequence
  as balanced-parenthesis matching (vectorized), keep the node rows' enter/exit entries, and link
  consecutive entries: ``operator`` edges weighted by the time between them (0 when closing a
  blocking CUDA call), ``dependency`` edges (weight 0) between consecutive top-level operators.
* **GPU edges**: for each kernel/memcpy/memset in start order (``cuda_sync`` rows by their end),
  ``operator`` start→end; a ``kernel_launch_delay`` edge from the launching call's start when the
  stream's launch queue was empty (queue length 1 at launch, 0 after the kernel started) and the
  previous kernel on the stream (and the ``Stream Wait Event`` source, if any) ended before the
  launch; otherwise a ``kernel_kernel_delay`` edge from the previous kernel's end on the stream.
  ``sync_dependency`` edges (weight 0): ``Stream Sync`` (last kernel on the stream → end of the
  CPU sync call), ``Context Sync`` (last kernel on every stream → CPU), ``Event Sync`` (kernel
  launched last before the matching ``cudaEventRecord`` on the recorded stream → CPU),
  ``Stream Wait Event`` (that kernel → next kernel launched on the waiting stream).
* negative weights are clamped to 0 in the longest-path search (HTA's ``_validate_graph``).

Deliberate deviations (HTA would fail the whole analysis): a sync edge between two kernels of
one stream is dropped, a kernel whose launching call has no node gets no launch edge; both are
counted in :attr:`CPGraph.flags`.

The graph is laid out for :mod:`jobs.analyze.critical_path.longest`: every CPU thread is one chain of
nodes (its enter/exit sequence), every GPU stream is a chain of kernels broken where a kernel
has no kernel-kernel edge; the remaining edges (launch delays and sync dependencies) are
"cross" edges.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from jobs.analyze.critical_path.trace import PathTrace

__all__ = [
    "CPGraph",
    "build_graph",
    "clip_window",
    "OPERATOR",
    "DEPENDENCY",
    "LAUNCH",
    "KERNEL_KERNEL",
    "SYNC",
    "EDGE_TYPES",
]

OPERATOR, DEPENDENCY, LAUNCH, KERNEL_KERNEL, SYNC = range(5)
#: HTA ``CPEdgeType`` values, indexed by our edge type code.
EDGE_TYPES = (
    "critical_path_operator",
    "critical_path_dependency",
    "critical_path_kernel_launch_delay",
    "critical_path_kernel_kernel_delay",
    "critical_path_sync_dependency",
)
_CPU_ORDER_BASE = 0
_GPU_ORDER_BASE = 1 << 40


@dataclass
class CPGraph:
    """Critical-path DAG of one window (node ids ``0 .. 2E-1``; ``2j`` start, ``2j+1`` end of event j).

    Attributes:
        rt: the :class:`~jobs.analyze.critical_path.trace.PathTrace` rows refer to.
        window: ``(start_ns, end_ns)``.
        ev_row: shape ``(E,)`` trace row of each node event.
        node_ts: shape ``(2E,)`` node time, ns.
        chain: shape ``(2E,)`` node ids in chain layout order (each node once).
        pred_chain: shape ``(2E,)`` True where an edge ``chain[i-1] -> chain[i]`` exists.
        cw, cw_raw, ctype, cattr, corder: that edge's clamped weight, raw weight (ns), type code,
            attributed row (-1 none) and insertion order (HTA's ``G.pred`` order, for ties).
        x_src, x_dst, x_w, x_raw, x_type, x_attr, x_order: the cross edges, same meanings.
        parent_row: shape ``(n,)`` call-stack parent row of CPU-thread rows (-1 none) in the clip.
        flags: counts of deviations / notes (``dropped_same_stream_sync``, ``launch_without_node`` …).
    """

    rt: PathTrace
    window: tuple
    ev_row: np.ndarray
    node_ts: np.ndarray
    chain: np.ndarray
    pred_chain: np.ndarray
    cw: np.ndarray
    cw_raw: np.ndarray
    ctype: np.ndarray
    cattr: np.ndarray
    corder: np.ndarray
    x_src: np.ndarray
    x_dst: np.ndarray
    x_w: np.ndarray
    x_raw: np.ndarray
    x_type: np.ndarray
    x_attr: np.ndarray
    x_order: np.ndarray
    parent_row: np.ndarray
    flags: dict = field(default_factory=dict)

    @property
    def n_nodes(self) -> int:
        """Number of nodes (2 per node event)."""
        return int(len(self.node_ts))

    @property
    def n_edges(self) -> int:
        """Number of edges (chain + cross)."""
        return int(self.pred_chain.sum() + len(self.x_src))


def clip_window(rt: PathTrace, start: int, end: int) -> np.ndarray:
    """HTA's clip of the trace to a window: bool mask of shape ``(n,)``.

    CPU rows (stream -1) with ``start <= ts <= end`` and ``dur > 0``; GPU rows (stream != -1)
    whose launching CPU row is one of them (HTA: the CPU row whose ``index_correlation`` is the GPU
    row, i.e. one GPU row per launch; product mode: every GPU row of the launch); and every
    ``Stream Wait Event`` row.
    """
    cpu = (rt.stream == -1) & (rt.ts >= start) & (rt.ts <= end) & (rt.dur > 0)
    mask = cpu.copy()
    if rt.hta_compat:
        c = np.flatnonzero(cpu & (rt.link >= 0))
        g = rt.link[c]
        g = g[rt.stream[g] != -1]
        mask[g] = True
    else:
        g = np.flatnonzero((rt.stream != -1) & (rt.link >= 0))
        g = g[cpu[rt.link[g]]]
        mask[g] = True
    mask |= rt.is_wait_event_row
    return mask


def build_graph(rt: PathTrace, start: int, end: int) -> CPGraph:
    """Build the critical-path graph of the window ``[start, end]`` (ns, ``rt`` clock).

    Returns:
        A :class:`CPGraph`. Nodes and edges follow HTA 0.5.0 (module docstring).
    """
    flags: dict = {}
    clip = clip_window(rt, start, end)
    is_node = clip & (rt.node_cat | ((rt.stream != -1) & (rt.corr >= 0)))
    ev_row = np.flatnonzero(is_node)
    E = len(ev_row)
    ev_of_row = np.full(rt.n, -1, np.int64)
    ev_of_row[ev_row] = np.arange(E)
    node_ts = np.empty(2 * E, np.int64)
    node_ts[0::2] = rt.ts[ev_row]
    node_ts[1::2] = rt.end[ev_row]

    cpu_nodes, cpu_pred, cpu_raw, cpu_type, cpu_attr, parent_row = _cpu_chains(rt, clip, ev_of_row)
    g = _gpu_edges(rt, clip, ev_of_row, flags)

    in_chain = np.zeros(2 * E, bool)
    in_chain[cpu_nodes] = True
    in_chain[g["nodes"]] = True
    lone = np.flatnonzero(~in_chain)
    chain = np.concatenate((cpu_nodes, g["nodes"], lone)).astype(np.int64)
    pred = np.concatenate((cpu_pred, g["pred"], np.zeros(len(lone), bool)))
    raw = np.concatenate((cpu_raw, g["raw"], np.zeros(len(lone), np.int64)))
    ctype = np.concatenate((cpu_type, g["type"], np.zeros(len(lone), np.int8)))
    cattr = np.concatenate((cpu_attr, g["attr"], np.full(len(lone), -1, np.int64)))
    corder = np.concatenate(
        (_CPU_ORDER_BASE + np.arange(len(cpu_nodes), dtype=np.int64), g["order"], np.zeros(len(lone), np.int64))
    )
    return CPGraph(
        rt=rt,
        window=(int(start), int(end)),
        ev_row=ev_row,
        node_ts=node_ts,
        chain=chain,
        pred_chain=pred,
        cw=np.where(pred, np.maximum(raw, 0), 0),
        cw_raw=np.where(pred, raw, 0),
        ctype=ctype,
        cattr=cattr,
        corder=corder,
        x_src=g["x_src"],
        x_dst=g["x_dst"],
        x_w=np.maximum(g["x_raw"], 0),
        x_raw=g["x_raw"],
        x_type=g["x_type"],
        x_attr=g["x_attr"],
        x_order=g["x_order"],
        parent_row=parent_row,
        flags=flags,
    )


# ------------------------------------------------------------------------------------------------
# CPU threads


def _cpu_chains(rt: PathTrace, clip: np.ndarray, ev_of_row: np.ndarray):
    """Chains of the CPU threads: the enter/exit sequence of node rows in HTA's DFS order.

    Returns ``(nodes, pred, raw_w, type, attr, parent_row)``; ``pred[i]`` says whether an edge links
    ``nodes[i-1] -> nodes[i]`` (False at each thread's first entry).
    """
    n = rt.n
    parent_row = np.full(n, -1, np.int64)
    empty = (
        np.zeros(0, np.int64),
        np.zeros(0, bool),
        np.zeros(0, np.int64),
        np.zeros(0, np.int8),
        np.zeros(0, np.int64),
        parent_row,
    )
    rows = np.flatnonzero(clip)
    if not len(rows):
        return empty
    # a thread is walked (HTA DeviceType.CPU) iff all its clipped rows have stream < 0
    th = rt.thread[rows]
    nth = int(th.max()) + 1
    smax = np.full(nth, -(2**62), np.int64)
    np.maximum.at(smax, th, rt.stream[rows])
    R = rows[smax[th] < 0]
    m = len(R)
    if not m:
        return empty
    t, s, e, d, idx = rt.thread[R], rt.ts[R], rt.end[R], rt.dur[R], rt.event_id[R]
    # HTA compare_events (all durations > 0 here): by time; at equal time ends before starts;
    # starts: longer first, then smaller index; ends: shorter first, then larger index.
    p_t = np.concatenate((t, t))
    p_time = np.concatenate((s, e))
    p_type = np.concatenate((np.ones(m, np.int8), np.zeros(m, np.int8)))
    p_sec = np.concatenate((-d, d))
    p_ter = np.concatenate((idx, -idx))
    o = np.lexsort((p_ter, p_sec, p_type, p_time, p_t))
    is_start_sorted = o < m
    cum = np.cumsum(np.where(is_start_sorted, 1, -1))
    M = 2 * m + 1
    pos = np.empty(2 * m, np.int64)
    pos[o] = np.arange(2 * m)
    spos = pos[:m]  # position of each row's start
    depth = cum[spos]  # stack depth after the push (1 = top level)
    # parent: the last start before it with depth-1 (balanced-parenthesis matching)
    skeys = np.sort(depth * M + spos)
    q = (depth - 1) * M + spos
    j = np.searchsorted(skeys, q) - 1
    okp = (depth >= 2) & (j >= 0)
    jj = np.maximum(j, 0)
    okp &= (skeys[jj] // M) == depth - 1
    row_at_pos = np.full(2 * m, -1, np.int64)
    row_at_pos[spos] = R
    parent_row[R[okp]] = row_at_pos[skeys[jj[okp]] % M]
    # exit (pop) position: the first end after it whose depth-after-pop is depth-1
    epos = np.flatnonzero(~is_start_sorted)
    ekeys = cum[epos] * M + epos  # sorted? depth varies; sort explicitly
    ekeys = np.sort(ekeys)
    k = np.searchsorted(ekeys, q, side="right")
    k = np.minimum(k, len(ekeys) - 1)
    xpos = ekeys[k] % M

    # node rows on these threads: enter/exit entries in position order
    nm = rt.node_cat[R]
    nR = R[nm]
    ent_pos = np.concatenate((spos[nm], xpos[nm]))
    ent_row = np.concatenate((nR, nR))
    ent_enter = np.concatenate((np.ones(len(nR), bool), np.zeros(len(nR), bool)))
    oe = np.argsort(ent_pos, kind="stable")
    ent_row, ent_enter = ent_row[oe], ent_enter[oe]
    ev = ev_of_row[ent_row]
    nodes = np.where(ent_enter, 2 * ev, 2 * ev + 1)
    op_depth_after = np.cumsum(np.where(ent_enter, 1, -1))
    op_depth_before = op_depth_after - np.where(ent_enter, 1, -1)
    th_e = rt.thread[ent_row]
    pred = np.zeros(len(nodes), bool)
    pred[1:] = th_e[1:] == th_e[:-1]
    ts_node = np.where(ent_enter, rt.ts[ent_row], rt.end[ent_row])
    raw = np.zeros(len(nodes), np.int64)
    raw[1:] = ts_node[1:] - ts_node[:-1]
    dep = ent_enter & (op_depth_before == 0)
    raw[dep] = 0
    raw[~ent_enter & rt.is_blocking[ent_row]] = 0
    etype = np.where(dep, DEPENDENCY, OPERATOR).astype(np.int8)
    attr = np.full(len(nodes), -1, np.int64)
    prev_enter = np.zeros(len(nodes), bool)
    prev_enter[1:] = ent_enter[:-1]
    prev_row = np.full(len(nodes), -1, np.int64)
    prev_row[1:] = ent_row[:-1]
    a = np.where(prev_enter, prev_row, np.where(~ent_enter, ent_row, parent_row[np.maximum(prev_row, 0)]))
    attr = np.where(pred & ~dep, a, -1)
    raw[~pred] = 0
    etype[~pred] = OPERATOR
    return nodes, pred, raw, etype, attr, parent_row


# ------------------------------------------------------------------------------------------------
# GPU streams


def _gpu_edges(rt: PathTrace, clip: np.ndarray, ev_of_row: np.ndarray, flags: dict) -> dict:
    """Chains of the GPU streams and the cross (launch / sync) edges, HTA's kernel loop vectorized."""
    i64 = np.int64
    sync_names = (rt.sync_kind == 2) | (rt.sync_kind == 3)
    gk = np.flatnonzero(clip & ((rt.stream != -1) | sync_names) & (rt.corr >= 0))
    sort_by = np.where(rt.sync_cat[gk], rt.end[gk], rt.ts[gk])
    o = np.lexsort((gk, sort_by))
    gk = gk[o]
    spos = np.full(rt.n, -1, i64)
    spos[gk] = np.arange(len(gk))
    is_sync = rt.sync_cat[gk]
    K = gk[~is_sync & (ev_of_row[gk] >= 0)]
    nK = len(K)
    kst = rt.stream[K]
    # previous kernel on the same stream
    ok = np.lexsort((spos[K], kst))
    Ks = K[ok]
    same = np.zeros(nK, bool)
    same[1:] = kst[ok][1:] == kst[ok][:-1]
    prev_sorted = np.full(nK, -1, i64)
    prev_sorted[1:] = Ks[:-1]
    prev_sorted[~same] = -1
    prev = np.full(nK, -1, i64)
    prev[ok] = prev_sorted
    # per stream: kernel rows in order, for "last kernel on stream before position p"
    streams = {}
    if nK:
        bounds = np.flatnonzero(~same)
        ends = np.append(bounds[1:], nK)
        for b, e_ in zip(bounds.tolist(), ends.tolist()):
            streams[int(kst[ok][b])] = Ks[b:e_]

    def last_on_stream(st: int, p: int) -> int:
        ks = streams.get(st)
        if ks is None:
            return -1
        j = np.searchsorted(spos[ks], p) - 1
        return int(ks[j]) if j >= 0 else -1

    xs, xd, xr, xt, xa, xo = [], [], [], [], [], []
    sync_src = {}  # dest kernel row -> (src kernel row, position of the wait row)

    def end_node(row):
        return 2 * ev_of_row[row] + 1

    for r in gk[is_sync].tolist():
        kind = int(rt.sync_kind[r])
        p = int(spos[r])
        if kind in (1, 2):
            rt_row = int(rt.link[r])
            if rt_row < 0 or ev_of_row[rt_row] < 0:
                flags["sync_without_cpu_node"] = flags.get("sync_without_cpu_node", 0) + 1
                continue
            sts = [int(rt.stream[r])] if kind == 1 else list(streams)
            for st in sts:
                k = last_on_stream(st, p)
                if k >= 0:
                    xs.append(end_node(k)), xd.append(end_node(rt_row)), xr.append(0), xt.append(SYNC)
                    xa.append(-1), xo.append(_GPU_ORDER_BASE + 4 * p + 3)
        elif kind in (3, 4):
            src = rt.prev_launch_of_record.get(int(rt.wait_corr[r]))
            if src is None:
                continue
            if kind == 3:
                rt_row = int(rt.link[r])
                if ev_of_row[src] < 0 or rt_row < 0 or ev_of_row[rt_row] < 0:
                    continue
                xs.append(end_node(src)), xd.append(end_node(rt_row)), xr.append(0), xt.append(SYNC)
                xa.append(-1), xo.append(_GPU_ORDER_BASE + 4 * p + 3)
            else:
                wr = int(rt.link[r])
                dest = rt.next_kernel_of_wait.get(wr) if wr >= 0 else None
                if dest is None:
                    continue
                prev_sched = sync_src.get(dest)
                if spos[dest] > p and (prev_sched is None or prev_sched[1] < p):
                    sync_src[dest] = (src, p)

    # kernel loop, vectorized
    ssrc = np.full(nK, -1, i64)
    if sync_src:
        kpos = np.full(rt.n, -1, i64)
        kpos[K] = np.arange(nK)
        for dest, (src, _) in sync_src.items():
            if kpos[dest] < 0 or ev_of_row[src] < 0:
                continue
            if rt.stream[src] == rt.stream[dest]:
                flags["dropped_same_stream_sync"] = flags.get("dropped_same_stream_sync", 0) + 1
                continue
            ssrc[kpos[dest]] = src
    has_prev = prev >= 0
    pe = np.where(has_prev, rt.end[np.maximum(prev, 0)], 0)
    rtr = rt.link[K]
    rts = np.where(rtr >= 0, rt.ts[np.maximum(rtr, 0)], 0)
    has_sync = ssrc >= 0
    se = np.where(has_sync, rt.end[np.maximum(ssrc, 0)], 0)
    rt_node_ok = (rtr >= 0) & (ev_of_row[np.maximum(rtr, 0)] >= 0)
    launch = (
        (rt.q_runtime[K] == 1)
        & (rt.q_kernel[K] == 0)
        & (~has_prev | (pe < rts))
        & (~has_sync | (se < rts))
        & (rtr >= 0)
    )
    if (launch & ~rt_node_ok).any():
        flags["launch_without_node"] = int((launch & ~rt_node_ok).sum())
    launch &= rt_node_ok
    kk = ~launch & has_prev & (~has_sync | (se < pe))
    kev = ev_of_row[K]
    kpos_sorted = spos[K]
    # cross: sync (GPU->GPU) and launch edges
    hs = np.flatnonzero(has_sync)
    xs.extend((2 * ev_of_row[ssrc[hs]] + 1).tolist()), xd.extend((2 * kev[hs]).tolist())
    xr.extend([0] * len(hs)), xt.extend([SYNC] * len(hs)), xa.extend([-1] * len(hs))
    xo.extend((_GPU_ORDER_BASE + 4 * kpos_sorted[hs] + 1).tolist())
    li = np.flatnonzero(launch)
    xs.extend((2 * ev_of_row[rtr[li]]).tolist()), xd.extend((2 * kev[li]).tolist())
    xr.extend((rt.ts[K[li]] - rts[li]).tolist()), xt.extend([LAUNCH] * len(li)), xa.extend([-1] * len(li))
    xo.extend((_GPU_ORDER_BASE + 4 * kpos_sorted[li] + 2).tolist())

    # chains per stream: [start, end] per kernel, start linked to the previous end when kk
    kk_s, pe_s = kk[ok], pe[ok]
    nodes = np.empty(2 * nK, i64)
    nodes[0::2] = 2 * ev_of_row[Ks]
    nodes[1::2] = 2 * ev_of_row[Ks] + 1
    pred = np.empty(2 * nK, bool)
    pred[0::2] = kk_s
    pred[1::2] = True
    raw = np.empty(2 * nK, i64)
    raw[0::2] = np.where(kk_s, rt.ts[Ks] - pe_s, 0)
    raw[1::2] = rt.dur[Ks]
    etype = np.empty(2 * nK, np.int8)
    etype[0::2] = np.where(kk_s, KERNEL_KERNEL, OPERATOR)
    etype[1::2] = OPERATOR
    attr = np.empty(2 * nK, i64)
    attr[0::2] = np.where(kk_s, prev_sorted, -1)
    attr[1::2] = Ks
    order = np.empty(2 * nK, i64)
    order[0::2] = _GPU_ORDER_BASE + 4 * spos[Ks] + 2
    order[1::2] = _GPU_ORDER_BASE + 4 * spos[Ks]
    return {
        "nodes": nodes,
        "pred": pred,
        "raw": raw,
        "type": etype,
        "attr": attr,
        "order": order,
        "x_src": np.array(xs, i64),
        "x_dst": np.array(xd, i64),
        "x_raw": np.array(xr, i64),
        "x_type": np.array(xt, np.int8),
        "x_attr": np.array(xa, i64),
        "x_order": np.array(xo, i64),
    }
