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
