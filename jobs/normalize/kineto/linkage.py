"""Vectorized structure of a trace: slice nesting, flow binding and ProfilerStep attribution.

All functions are pure numpy over integer ns (deterministic; no float comparisons).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_NONE = -1


def track_codes(pid_key: np.ndarray, tid_key: np.ndarray) -> np.ndarray:
    """Dense int64 code of each (pid, tid) pair (any int64 keys; equal pairs get equal codes).

    Codes are assigned in order of first appearance (hash-based, O(n)).
    """
    if len(pid_key) == 0:
        return np.zeros(0, np.int64)
    p = _codes(pid_key)
    t = _codes(tid_key)
    return _codes(p * (int(t.max()) + 1) + t)


def _codes(keys: np.ndarray) -> np.ndarray:
    return pc.dictionary_encode(pa.array(keys)).indices.to_numpy(zero_copy_only=False).astype(np.int64)


class SliceIndex:
    """``X`` slices of one trace sorted per track by (start asc, end desc, event order asc).

    Attributes (all aligned with the sorted order): ``order`` (positions into the input arrays),
    ``track``, ``start``, ``end``, ``parent_sorted`` (sorted index of the innermost enclosing
    slice or -1), ``depth``; ``track_bounds`` maps a track code to its ``[lo, hi)`` range.
    """

    def __init__(self, track: np.ndarray, start: np.ndarray, end: np.ndarray):
        n = len(track)
        pos = np.arange(n, dtype=np.int64)
        order = np.lexsort((pos, -end, start, track)) if n else pos
        self.order = order
        self.track = track[order]
        self.start = start[order]
        self.end = end[order]
        self.parent_sorted = _previous_greater_equal(self.track, self.end)
        self.depth = _chain_length(self.parent_sorted)
        if n:
            change = np.flatnonzero(np.diff(self.track)) + 1
            los = np.concatenate(([0], change))
            his = np.concatenate((change, [n]))
            self.track_bounds = {int(self.track[lo]): (int(lo), int(hi)) for lo, hi in zip(los, his)}
        else:
            self.track_bounds = {}

    def parents(self) -> tuple[np.ndarray, np.ndarray]:
        """``(parent_pos, depth)`` in input order: parent as input position (-1 at top level)."""
        n = len(self.order)
        parent = np.full(n, _NONE, np.int64)
        depth = np.zeros(n, np.int32)
        ps = self.parent_sorted
        has = ps >= 0
        parent[self.order[has]] = self.order[ps[has]]
        depth[self.order] = self.depth
        return parent, depth

    def improper(self) -> np.ndarray:
        """Per slice (input order): True when it starts inside an earlier slice of its track and ends
        after it (partial overlap, ``bug_cases.md`` B11/B12: A ``[0, 10)``, B ``[5, 15)`` → B).

        Such a slice is kept, with the innermost slice that really encloses it as parent (or none):
        the nesting never drops or clips it. Exact integer comparisons; touching slices
        (``end == start``) do not overlap. For slice ``i`` with parent ``p`` (sorted order), every
        slice between ``p`` and ``i`` ends before ``i``; ``i`` is improper when one of them is still
        open at ``i``'s start, found by climbing parent pointers from ``i - 1`` to ``p``.
        """
        n = len(self.order)
        out = np.zeros(n, bool)
        if n < 2:
            return out
        idx = np.arange(1, n, dtype=np.int64)
        idx = idx[(self.track[idx] == self.track[idx - 1]) & (self.parent_sorted[idx] != idx - 1)]
        p = self.parent_sorted[idx]
        c = idx - 1  # > p here: the previous slice is not the parent
        start = self.start[idx]
        bad = np.zeros(len(idx), bool)
        act = np.arange(len(idx))
        for _ in range(64):
            if not len(act):
                break
            ca = c[act]
            live = (ca > p[act]) & (ca >= 0)
            act, ca = act[live], ca[live]
            still_open = self.end[ca] > start[act]
            bad[act[still_open]] = True
            act = act[~still_open]
            c[act] = self.parent_sorted[ca[~still_open]]
        else:  # pathological depth: finish element-wise
            for k in act.tolist():
                ck = c[k]
                while ck > p[k] and ck >= 0 and self.end[ck] <= start[k]:
                    ck = self.parent_sorted[ck]
                bad[k] = ck > p[k] and ck >= 0
        out[self.order[idx[bad]]] = True
        return out

    def enclosing(self, track: np.ndarray, ts: np.ndarray) -> np.ndarray:
        """Sorted index of the innermost slice on ``track`` with start <= ts <= end, else -1."""
        cand = self._last_start_at_or_before(track, ts)
        # climb to the first ancestor that still contains ts
        for _ in range(64):
            ok = cand >= 0
            bad = np.zeros(len(cand), bool)
            bad[ok] = self.end[cand[ok]] < ts[ok]
            if not bad.any():
                break
            cand[bad] = self.parent_sorted[cand[bad]]
        else:  # pathological depth: finish element-wise
            for i in np.flatnonzero(cand >= 0):
                c = cand[i]
                while c >= 0 and self.end[c] < ts[i]:
                    c = self.parent_sorted[c]
                cand[i] = c
        return cand

    def next_starting(self, track: np.ndarray, ts: np.ndarray) -> np.ndarray:
        """Sorted index of the first slice on ``track`` starting at or after ``ts``, else -1."""
        out = np.full(len(ts), _NONE, np.int64)
        for t in np.unique(track):
            bounds = self.track_bounds.get(int(t))
            if bounds is None:
                continue
            lo, hi = bounds
            sel = np.flatnonzero(track == t)
            k = np.searchsorted(self.start[lo:hi], ts[sel], side="left")
            found = k < hi - lo
            out[sel[found]] = lo + k[found]
        return out

    def _last_start_at_or_before(self, track: np.ndarray, ts: np.ndarray) -> np.ndarray:
        out = np.full(len(ts), _NONE, np.int64)
        for t in np.unique(track):
            bounds = self.track_bounds.get(int(t))
            if bounds is None:
                continue
            lo, hi = bounds
            sel = np.flatnonzero(track == t)
            k = np.searchsorted(self.start[lo:hi], ts[sel], side="right") - 1
            found = k >= 0
            out[sel[found]] = lo + k[found]
        return out


def _previous_greater_equal(track: np.ndarray, end: np.ndarray) -> np.ndarray:
    """For each i (sorted by track, start asc, end desc): nearest j < i on the same track with
    end[j] >= end[i], else -1.

    This equals the classic stack algorithm (pop while top.end < end[i]; the top is the parent),
    i.e. the innermost enclosing slice, with a slice ending exactly at its parent's end nested.
    Computed by synchronous pointer jumping (O(n log n) worst case, a few rounds in practice).
    """
    n = len(end)
    cand = np.arange(n, dtype=np.int64) - 1
    if n:
        first = np.ones(n, bool)
        first[1:] = track[1:] != track[:-1]
        cand[first] = _NONE
    active = np.flatnonzero(cand >= 0)
    while len(active):
        c = cand[active]
        unresolved = end[c] < end[active]
        active = active[unresolved]
        if not len(active):
            break
        cand[active] = cand[cand[active]]
        active = active[cand[active] >= 0]
    return cand


def _chain_length(parent: np.ndarray) -> np.ndarray:
    """Number of ancestors of each node of a parent-pointer forest (-1 = root), by doubling."""
    n = len(parent)
    depth = (parent >= 0).astype(np.int32)
    jump = parent.copy()
    active = np.flatnonzero(jump >= 0)
    while len(active):
        j = jump[active]
        depth[active] += depth[j]
        jump[active] = jump[j]
        active = active[jump[active] >= 0]
    return depth


def correlation_link_keys(corr: np.ndarray, valid: np.ndarray, pid: np.ndarray, is_host: np.ndarray
                          ) -> tuple[np.ndarray, bool]:
    """Keys that join device rows to their host launch rows, safe on merged multi-rank traces.

    A correlation id is unique within one profiled process, so it alone links a kernel to its launch.
    A file merged from several ranks (``bug_cases.md`` B19: TraceFusion-style outputs) reuses the same
    ids in every rank: a correlation value carried by host rows of more than one ``pid`` and by a
    device row is *colliding*, and rows with it are keyed by ``(pid, correlation)`` instead, so that a device row
    links only to a launch of its own pid (merged files give each rank its own pid) and never to
    another rank's. Rows with other correlations keep the plain id (the usual layout, where device
    rows carry the device index as pid, is unchanged).

    Args:
        corr: int64 correlation per row; valid: bool mask of rows that have one.
        pid: int64 process key per row (any int64; ``pid`` column or the parser's pid key).
        is_host: bool mask of host rows (not device-side).

    Returns:
        ``(keys, merged)``: int64 keys (equal keys = same link group; -1 where ``valid`` is False; all
        keys >= 0), and whether any correlation collides. O(n log n) (sorts), independent of the
        number of ranks.
    """
    corr = np.asarray(corr, np.int64)
    pid = np.asarray(pid, np.int64)
    valid = np.asarray(valid, bool) & (corr >= 0)
    keys = np.where(valid, corr, -1)
    host = np.flatnonzero(valid & np.asarray(is_host, bool))
    if host.size < 2:
        return keys, False
    hc = np.sort(corr[host])
    dup = np.unique(hc[1:][hc[1:] == hc[:-1]])  # ids on several host rows (usually none: a fast exit)
    if dup.size == 0:
        return keys, False
    sel = host[np.isin(corr[host], dup)]
    o = np.lexsort((pid[sel], corr[sel]))
    c_s, p_s = corr[sel][o], pid[sel][o]
    first = np.ones(c_s.size, bool)
    first[1:] = (c_s[1:] != c_s[:-1]) | (p_s[1:] != p_s[:-1])  # first row of each distinct (corr, pid)
    vals, counts = np.unique(c_s[first], return_counts=True)
    colliding = vals[counts > 1]
    if colliding.size:  # only ids that link device work (host-only ids may repeat, e.g. MTIA runtime rows)
        colliding = np.intersect1d(colliding, corr[valid & ~np.asarray(is_host, bool)])
    if colliding.size == 0:
        return keys, False
    rows = np.flatnonzero(valid & np.isin(corr, colliding))
    o = np.lexsort((pid[rows], corr[rows]))
    c_s, p_s = corr[rows][o], pid[rows][o]
    new = np.ones(rows.size, bool)
    new[1:] = (c_s[1:] != c_s[:-1]) | (p_s[1:] != p_s[:-1])
    base = int(corr[valid].max()) + 1
    keys[rows[o]] = base + np.cumsum(new) - 1
    return keys, True
