"""Longest path on a :class:`~jobs.analyze.critical_path.graph.CPGraph` (numpy, no networkx).

Definition (networkx ``dag_longest_path`` as HTA calls it): ``dist[v] = max(0, max over edges
u→v of dist[u] + w)`` in topological order, the path ends at a node of maximal ``dist`` and is
followed back through the best predecessor of each node until a node without predecessors.

Algorithm. The graph is a set of chains (CPU threads, GPU stream runs) plus cross edges (launch
delays, sync dependencies). Cut every chain at the nodes that receive a cross edge: each piece
(a *segment*) has incoming edges only at its head, so with non-negative weights
``dist = dist[head] + (prefix weight from the head)`` inside it. Only the segment heads need a
topological order: Kahn's algorithm on the small segment DAG, processed frontier by frontier
with numpy. Cost O(nodes + edges) plus a few numpy calls per frontier.

``resets`` (node ids) turn nodes into path origins: their incoming edges are ignored and their
``dist`` is 0. :mod:`jobs.analyze.critical_path.rank` uses this to measure the work between
collectives ("legs").

Cycles cannot occur in a well-formed trace; if timestamps make one (HTA would refuse the graph),
the segment with the earliest head is forced and ``flags["cycle_broken"]`` counts it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from jobs.analyze.critical_path.graph import CPGraph

__all__ = ["LongestPath", "longest_path", "PathEdges"]


@dataclass
class PathEdges:
    """Edges of one path, in path order (arrays of equal length ``k``).

    ``src``/``dst`` node ids, ``w`` clamped weight (ns), ``raw`` weight before clamping, ``type``
    edge type code, ``attr`` attributed trace row (-1 none).
    """

    src: np.ndarray
    dst: np.ndarray
    w: np.ndarray
    raw: np.ndarray
    type: np.ndarray
    attr: np.ndarray

    @property
    def length(self) -> int:
        """Σ clamped weights, ns."""
        return int(self.w.sum())


@dataclass
class LongestPath:
    """Result of :func:`longest_path` (see module docstring).

    ``dist`` shape ``(2E,)``: longest path length ending at each node, ns. ``end`` the node where
    the longest path ends (-1 for an empty graph). ``flags`` notes.
    """

    g: CPGraph
    dist: np.ndarray
    pos: np.ndarray
    seg: np.ndarray
    headpos: np.ndarray
    best_inc: np.ndarray
    inc_src: np.ndarray
    inc_kind: np.ndarray
    is_reset: np.ndarray
    W: np.ndarray
    end: int
    flags: dict = field(default_factory=dict)

    @property
    def length(self) -> int:
        """Length of the longest path, ns."""
        return int(self.dist[self.end]) if self.end >= 0 else 0

    def walk(self, node: int, stop_at_reset: bool = True) -> tuple[list, int]:
        """The best path ending at ``node`` as pieces, and the node it starts at.

        The walk follows each segment back to its head, then the head's best incoming edge (ties:
        the edge HTA added first), until a node without predecessors or, with ``stop_at_reset``, a
        reset node (an anchor). Pieces, in path order: ``(lo, hi, -1)`` = chain edges at layout
        positions ``lo .. hi-1`` (edge i joins ``chain[i-1] -> chain[i]``), ``(0, 0, k)`` = cross edge k.
        """
        g = self.g
        seq = []
        v = int(node)
        while True:
            p = int(self.pos[v])
            s = int(self.seg[p])
            h = int(self.headpos[s])
            if p > h:
                seq.append((h + 1, p + 1, -1))
            e = int(self.best_inc[s])
            if e < 0 or (stop_at_reset and self.is_reset[g.chain[h]]):
                start = int(g.chain[h])
                break
            kind = int(self.inc_kind[e])
            seq.append((h, h + 1, -1) if kind < 0 else (0, 0, kind))
            v = int(self.inc_src[e])
        seq.reverse()
        return seq, start

    def path_to(self, node: int, stop_at_reset: bool = True) -> tuple[PathEdges, int]:
        """Edges (path order) of the best path ending at ``node``, and the node it starts at."""
        seq, start = self.walk(node, stop_at_reset)
        return self._edges(seq), start

    def _edges(self, seq) -> PathEdges:
        g = self.g
        cols = ([], [], [], [], [], [])
        for lo, hi, k in seq:
            if k < 0:
                idx = np.arange(lo, hi)
                parts = (g.chain[idx - 1], g.chain[idx], g.cw[idx], g.cw_raw[idx], g.ctype[idx], g.cattr[idx])
            else:
                sl = slice(k, k + 1)
                parts = (g.x_src[sl], g.x_dst[sl], g.x_w[sl], g.x_raw[sl], g.x_type[sl], g.x_attr[sl])
            for c, part in zip(cols, parts):
                c.append(part)
        if not cols[0]:
            z = np.zeros(0, np.int64)
            return PathEdges(z, z, z, z, np.zeros(0, np.int8), z)
        return PathEdges(*(np.concatenate(c) for c in cols))


def longest_path(g: CPGraph, resets: np.ndarray | None = None) -> LongestPath:
    """Longest path lengths of every node of ``g`` (module docstring).

    Args:
        g: the graph.
        resets: optional node ids whose incoming edges are ignored (path origins).

    Returns:
        :class:`LongestPath`.
    """
    N = g.n_nodes
    flags: dict = {}
    chain = g.chain
    pos = np.empty(N, np.int64)
    pos[chain] = np.arange(N)
    is_reset = np.zeros(N, bool)
    if resets is not None and len(resets):
        is_reset[np.asarray(resets, np.int64)] = True
    xkeep = ~is_reset[g.x_dst] if len(g.x_dst) else np.zeros(0, bool)
    has_x = np.zeros(N, bool)
    has_x[g.x_dst[xkeep]] = True
    node_reset_at = is_reset[chain]
    head = ~g.pred_chain | has_x[chain] | node_reset_at
    seg = np.cumsum(head) - 1
    headpos = np.flatnonzero(head)
    S = len(headpos)
    W = np.cumsum(g.cw)
    # incoming entries of each segment head: chain predecessor, cross edges
    hc = headpos[g.pred_chain[headpos] & ~node_reset_at[headpos]]
    xi = np.flatnonzero(xkeep)
    inc_seg = np.concatenate((seg[hc], seg[pos[g.x_dst[xi]]]))
    inc_src = np.concatenate((chain[np.maximum(hc - 1, 0)], g.x_src[xi]))
    inc_w = np.concatenate((g.cw[hc], g.x_w[xi]))
    inc_order = np.concatenate((g.corder[hc], g.x_order[xi]))
    inc_kind = np.concatenate((np.full(len(hc), -1, np.int64), xi.astype(np.int64)))
    src_seg = seg[pos[inc_src]] if len(inc_src) else np.zeros(0, np.int64)
    selfloop = src_seg == inc_seg
    if selfloop.any():
        flags["cycle_broken"] = int(selfloop.sum())
        keep = ~selfloop
        inc_seg, inc_src, inc_w, inc_order, inc_kind, src_seg = (
            a[keep] for a in (inc_seg, inc_src, inc_w, inc_order, inc_kind, src_seg)
        )
    # CSR by destination segment, with entries sorted by insertion order inside each
    o = np.lexsort((inc_order, inc_seg))
    inc_seg, inc_src, inc_w, inc_order, inc_kind, src_seg = (
        a[o] for a in (inc_seg, inc_src, inc_w, inc_order, inc_kind, src_seg)
    )
    dptr = np.searchsorted(inc_seg, np.arange(S + 1))
    # CSR by source segment (destination segments to decrement)
    so = np.argsort(src_seg, kind="stable")
    out_dst = inc_seg[so]
    sptr = np.searchsorted(src_seg[so], np.arange(S + 1))
    indeg = np.diff(dptr).astype(np.int64)
    headval = np.zeros(S, np.int64)
    best_inc = np.full(S, -1, np.int64)
    done = np.zeros(S, bool)
    frontier = np.flatnonzero(indeg == 0)
    remaining = S
    head_ts = g.node_ts[chain[headpos]] if S else np.zeros(0, np.int64)
    while remaining:
        if not len(frontier):  # cycle: force the earliest pending segment
            pend = np.flatnonzero(~done)
            frontier = pend[np.argmin(head_ts[pend])][None]
            flags["cycle_broken"] = flags.get("cycle_broken", 0) + 1
        f = frontier
        lo, hi = dptr[f], dptr[f + 1]
        lens = hi - lo
        tot = int(lens.sum())
        if tot:
            idx = np.repeat(lo - np.cumsum(np.concatenate(([0], lens[:-1]))), lens) + np.arange(tot)
            ss = src_seg[idx]
            ok = done[ss]
            sp = pos[inc_src[idx]]
            val = headval[ss] + W[sp] - W[headpos[ss]] + inc_w[idx]
            val = np.where(ok, val, -1)
            grp = np.repeat(np.arange(len(f)), lens)
            # best per group: max value, ties -> smallest insertion order (entries are sorted by it)
            og = np.lexsort((idx, -val, grp))
            first = np.ones(len(og), bool)
            first[1:] = grp[og][1:] != grp[og][:-1]
            win = og[first]
            gsel = grp[win]
            good = val[win] >= 0
            headval[f[gsel[good]]] = np.maximum(val[win][good], 0)
            best_inc[f[gsel[good]]] = idx[win][good]
        done[f] = True
        remaining -= len(f)
        lo, hi = sptr[f], sptr[f + 1]
        lens = hi - lo
        tot = int(lens.sum())
        if tot:
            idx = np.repeat(lo - np.cumsum(np.concatenate(([0], lens[:-1]))), lens) + np.arange(tot)
            d = out_dst[idx]
            u, c = np.unique(d, return_counts=True)
            indeg[u] -= c
            frontier = u[(indeg[u] <= 0) & ~done[u]]
        else:
            frontier = np.zeros(0, np.int64)
    dist = headval[seg] + W - W[headpos[seg]]
    dist_node = np.empty(N, np.int64)
    dist_node[chain] = dist
    if N:
        mx = dist_node.max()
        cand = np.flatnonzero(dist_node == mx)
        end = int(cand[np.lexsort((cand, g.node_ts[cand]))[0]])
    else:
        end = -1
    return LongestPath(
        g=g,
        dist=dist_node,
        pos=pos,
        seg=seg,
        headpos=headpos,
        best_inc=best_inc,
        inc_src=inc_src,
        inc_kind=inc_kind,
        is_reset=is_reset,
        W=W,
        end=end,
        flags=flags,
    )
