"""Set operations on unions of half-open ``[start, end)`` intervals, and their length per window.

Complements :mod:`jobs.common.intervals` (merge, intersection of two merged sets): here the inputs
need not be merged, and the result is measured inside many windows at once (one per step), all
vectorized with numpy (one sort, prefix sums, ``searchsorted``). Times are int64 ns.
"""

from __future__ import annotations

import numpy as np

__all__ = ["covered_not_excluded", "length_in_windows"]


def _i64(a) -> np.ndarray:
    return np.asarray(a, dtype=np.int64)


def covered_not_excluded(starts, ends, excl_starts=(), excl_ends=()) -> tuple[np.ndarray, np.ndarray]:
    """Time covered by some interval of the first set and by none of the second.

    Args:
        starts, ends: shape ``(n,)``, intervals of the covering set (any order, may overlap).
        excl_starts, excl_ends: shape ``(k,)``, intervals excluded (any order, may overlap).

    Returns:
        ``(s, e)``: sorted, disjoint, non-empty segments (int64, shape ``(m,)``) whose union is
        ``∪[starts, ends) \\ ∪[excl_starts, excl_ends)``. Zero-length inputs cover nothing.
    """
    s, e, xs, xe = _i64(starts), _i64(ends), _i64(excl_starts), _i64(excl_ends)
    if s.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    times = np.concatenate([s, e, xs, xe])
    da = np.concatenate([np.ones(s.size, np.int64), -np.ones(e.size, np.int64), np.zeros(xs.size + xe.size, np.int64)])
    db = np.concatenate([np.zeros(s.size + e.size, np.int64), np.ones(xs.size, np.int64), -np.ones(xe.size, np.int64)])
    order = np.argsort(times, kind="stable")
    t = times[order]
    on = (np.cumsum(da[order]) > 0) & (np.cumsum(db[order]) == 0)
    seg = np.flatnonzero(on[:-1] & (t[1:] > t[:-1]))
    if seg.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    ss, ee = t[seg], t[seg + 1]
    # join segments that touch (a tie of boundaries split them)
    brk = np.ones(ss.size, bool)
    brk[1:] = ss[1:] > ee[:-1]
    first = np.flatnonzero(brk)
    last = np.append(first[1:], ss.size) - 1
    return ss[first], ee[last]


def length_in_windows(seg_starts, seg_ends, win_starts, win_ends) -> np.ndarray:
    """Length of the part of disjoint sorted segments inside each window.

    Args:
        seg_starts, seg_ends: shape ``(m,)``, sorted disjoint segments (e.g. from
            :func:`covered_not_excluded` or :func:`jobs.common.intervals.merge_intervals`).
        win_starts, win_ends: shape ``(w,)``, windows ``[start, end)`` (any order, may overlap).

    Returns:
        int64 array of shape ``(w,)``, ns.
    """
    s, e = _i64(seg_starts), _i64(seg_ends)
    ws, we = _i64(win_starts), _i64(win_ends)
    out = np.zeros(ws.size, np.int64)
    if s.size == 0 or ws.size == 0:
        return out
    cum = np.concatenate([[0], np.cumsum(e - s)])
    lo = np.searchsorted(e, ws, side="right")  # first segment ending after the window start
    hi = np.searchsorted(s, we, side="left")  # segments starting before the window end
    ok = hi > lo
    tot = cum[hi] - cum[lo]
    first_cut = np.where(ok, np.maximum(ws - s[np.minimum(lo, s.size - 1)], 0), 0)
    last_cut = np.where(ok, np.maximum(e[np.maximum(hi - 1, 0)] - we, 0), 0)
    out[ok] = (tot - first_cut - last_cut)[ok]
    return np.maximum(out, 0)
