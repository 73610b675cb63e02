"""HTA-parity statistics of a rank, per step (``steps``) and for the whole trace (``ranks``).

Fills the columns :data:`STAT_COLUMNS` (declared in ``schemas.tables``, ``_HTA_STATS``) from the
per-analysis modules, all in our default mode (HTA's definitions with the deliberate differences
each module states; ``hta_compat=True`` on the module functions reproduces HTA 0.5.0 and is what the
golden tests compare):

===========================  =====================================================================
columns                      module (HTA 0.5.0 source)
===========================  =====================================================================
memory_time_ns,              :mod:`jobs.analyze.trace.kernel_types` (ours) + :mod:`jobs.common.intervals`
exposed_comm_ns              (HTA ``get_comm_comp_overlap`` sweep)
idle_*_ns                    :mod:`jobs.analyze.hta.idle_time` (``get_idle_time_breakdown``)
n_launches, launch_*,        :mod:`jobs.analyze.hta.launch_stats` (``get_cuda_kernel_launch_stats``)
n_short_kernels, n_*_outliers
queue_length_*,              :mod:`jobs.analyze.hta.queue_length` (``get_queue_length_summary``,
blocked_on_full_queue_ns     ``get_time_spent_blocked_on_full_queue``)
memcpy_*                     :mod:`jobs.analyze.hta.memory_bw` (``get_memory_bw_summary`` inputs)
dataloader_time_ns,          :mod:`jobs.analyze.hta.host_time` (ours)
cpu_bound_time_ns
===========================  =====================================================================

Attribution to step N: device events through ``events.step`` (the step of their launch); launches
and queue changes through the row that causes them; idle gaps through the event after the gap;
host time by clipping to the step's ``ProfilerStep#N`` window. The whole-trace values (``ranks``) use
the rows HTA keeps (its last-step filter) and the window from the first start to the last end of
those rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from jobs.analyze.hta.host_time import host_time_in_windows
from jobs.analyze.hta.idle_time import HOST_WAIT, KERNEL_WAIT, OTHER, idle_gaps
from jobs.analyze.hta.kernel_stats import kernel_rows, type_codes
from jobs.analyze.hta.launch_stats import launches
from jobs.analyze.hta.memory_bw import memcpys
from jobs.analyze.hta.queue_length import queue_points
from jobs.analyze.trace.kernel_types import KERNEL_TYPES
from jobs.analyze.trace.model import RankTrace
from jobs.common.intervals import intersection_length, merge_intervals, total_length

__all__ = ["STAT_COLUMNS", "stats_by_group", "step_stats", "rank_stats"]

STAT_COLUMNS = (
    "memory_time_ns",
    "exposed_comm_ns",
    "idle_host_wait_ns",
    "idle_kernel_wait_ns",
    "idle_other_ns",
    "n_launches",
    "launch_runtime_ns",
    "launch_delay_sum_ns",
    "launch_delay_p50_ns",
    "launch_delay_max_ns",
    "n_short_kernels",
    "n_runtime_outliers",
    "n_launch_delay_outliers",
    "queue_length_max",
    "queue_length_mean",
    "blocked_on_full_queue_ns",
    "memcpy_bytes",
    "memcpy_time_ns",
    "memcpy_bw_gbps",
    "dataloader_time_ns",
    "cpu_bound_time_ns",
)
_COMM, _MEM, _COMP = (KERNEL_TYPES.index(t) for t in ("COMMUNICATION", "MEMORY", "COMPUTATION"))


class _Groups:
    """Maps per-row labels to group positions (groups = sorted distinct labels)."""

    def __init__(self, groups: np.ndarray):
        self.groups = np.asarray(groups, np.int64)
        self.size = self.groups.size

    def index(self, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(group position, valid) of each label."""
        gi = np.searchsorted(self.groups, labels)
        ok = gi < self.size
        ok[ok] = self.groups[gi[ok]] == labels[ok]
        return gi, ok

    def sum(self, labels, values) -> np.ndarray:
        gi, ok = self.index(labels)
        return (
            np.bincount(gi[ok], weights=np.asarray(values, np.float64)[ok], minlength=self.size)
            .round()
            .astype(np.int64)
        )

    def count(self, labels, flags=None) -> np.ndarray:
        gi, ok = self.index(labels)
        if flags is not None:
            ok = ok & np.asarray(flags, bool)
        return np.bincount(gi[ok], minlength=self.size).astype(np.int64)

    def split(self, labels, values) -> list[np.ndarray]:
        """Values of each group (one array per group)."""
        gi, ok = self.index(labels)
        gi, vals = gi[ok], np.asarray(values)[ok]
        order = np.argsort(gi, kind="stable")
        gi, vals = gi[order], vals[order]
        bounds = np.searchsorted(gi, np.arange(self.size + 1))
        return [vals[bounds[k] : bounds[k + 1]] for k in range(self.size)]


def _exposed_and_memory(
    trace: RankTrace, rows: np.ndarray, labels: np.ndarray, g: _Groups, extra_comm_patterns: Sequence[str]
) -> tuple[list, list]:
    idx = kernel_rows(trace, rows)
    codes = type_codes(trace, idx, extra_comm_patterns)
    mem, exposed = [0] * g.size, [0] * g.size
    for k, part in enumerate(g.split(labels[idx], np.arange(idx.size))):
        r, c = idx[part], codes[part]
        ts, end = trace.ts[r], trace.end[r]
        ms, me = merge_intervals(ts[c == _MEM], end[c == _MEM])
        cs, ce = merge_intervals(ts[c == _COMM], end[c == _COMM])
        ps, pe = merge_intervals(ts[c == _COMP], end[c == _COMP])
        mem[k] = total_length(ms, me)
        exposed[k] = total_length(cs, ce) - intersection_length(cs, ce, ps, pe)
    return mem, exposed


def stats_by_group(
    trace: RankTrace,
    rows: np.ndarray,
    labels: np.ndarray,
    groups,
    win_starts,
    win_ends,
    *,
    extra_comm_patterns: Sequence[str] = (),
    extra_dataloader_patterns: Sequence[str] = (),
) -> list[dict]:
    """The :data:`STAT_COLUMNS` of each group of rows.

    Args:
        trace: the rank's :class:`~jobs.analyze.trace.model.RankTrace`.
        rows: bool mask of shape ``(n,)``: the rows analyzed (e.g. loaded rows, or HTA-kept rows).
        labels: int64 array of shape ``(n,)``: the group label of every row (e.g. ``step``).
        groups: the group labels to report, shape ``(G,)``; rows with another label are ignored.
        win_starts, win_ends: shape ``(G,)``: each group's time window for host time, ns.
        extra_comm_patterns: more communication-kernel name regexes.
        extra_dataloader_patterns: more data-loading name regexes.

    Returns:
        One dict per group (column name → value; None where the statistic is undefined).
    """
    rows = np.asarray(rows, bool)
    labels = np.asarray(labels, np.int64)
    order = np.argsort(np.asarray(groups, np.int64), kind="stable")
    g = _Groups(np.asarray(groups, np.int64)[order])
    G = g.size
    out: dict[str, list] = {}

    out["memory_time_ns"], out["exposed_comm_ns"] = _exposed_and_memory(trace, rows, labels, g, extra_comm_patterns)

    gaps = idle_gaps(trace, rows)
    gl = labels[gaps.row]
    for col, code in (("idle_host_wait_ns", HOST_WAIT), ("idle_kernel_wait_ns", KERNEL_WAIT), ("idle_other_ns", OTHER)):
        out[col] = g.sum(gl, np.where(gaps.category == code, gaps.gap_ns, 0))

    la = launches(trace, rows)
    ll = labels[la.cpu_row]
    out["n_launches"] = g.count(ll)
    out["launch_runtime_ns"] = g.sum(ll, la.cpu_dur_ns)
    out["launch_delay_sum_ns"] = g.sum(ll, la.delay_ns)
    delays = g.split(ll, la.delay_ns)
    out["launch_delay_p50_ns"] = [int(np.round(np.median(d))) if d.size else None for d in delays]
    out["launch_delay_max_ns"] = [int(d.max()) if d.size else None for d in delays]
    out["n_short_kernels"] = g.count(ll, la.short)
    out["n_runtime_outliers"] = g.count(ll, la.runtime_outlier)
    out["n_launch_delay_outliers"] = g.count(ll, la.delay_outlier)

    q = queue_points(trace, rows)
    ql = labels[q.row]
    qs = g.split(ql, q.queue_length)
    out["queue_length_max"] = [int(v.max()) if v.size else None for v in qs]
    out["queue_length_mean"] = [float(v.mean()) if v.size else None for v in qs]
    out["blocked_on_full_queue_ns"] = g.sum(ql, q.blocked())

    m = memcpys(trace, rows)
    ml = labels[m.row]
    known = m.bytes >= 0
    out["memcpy_bytes"] = g.sum(ml, np.where(known, m.bytes, 0))
    out["memcpy_time_ns"] = g.sum(ml, m.dur_ns)
    gi, ok = g.index(ml)
    known_time = np.bincount(gi[ok], weights=np.where(known, m.copy_time_ns, 0.0)[ok], minlength=G)
    out["memcpy_bw_gbps"] = [float(b) / t if t > 0 else None for b, t in zip(out["memcpy_bytes"], known_time)]

    ws = np.asarray(win_starts, np.int64)[order]
    we = np.asarray(win_ends, np.int64)[order]
    out["dataloader_time_ns"], out["cpu_bound_time_ns"] = host_time_in_windows(
        trace, rows, ws, we, extra_dataloader_patterns
    )

    result = [None] * G
    for k in range(G):
        result[order[k]] = {c: _py(out[c][k]) for c in STAT_COLUMNS}
    return result


def _py(v):
    if v is None:
        return None
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    return v


def step_stats(trace: RankTrace, steps: Sequence[tuple[int, int, int]], **kw) -> list[dict]:
    """:data:`STAT_COLUMNS` per ``(step, start_ns, dur_ns)`` (loaded rows, by ``events.step``)."""
    if not steps:
        return []
    nums = np.array([s[0] for s in steps], np.int64)
    starts = np.array([s[1] for s in steps], np.int64)
    ends = starts + np.array([s[2] for s in steps], np.int64)
    return stats_by_group(trace, trace.loaded, trace.step, nums, starts, ends, **kw)


def rank_stats(trace: RankTrace, keep: np.ndarray, **kw) -> dict:
    """:data:`STAT_COLUMNS` of the whole trace over the rows HTA keeps (``keep``)."""
    keep = np.asarray(keep, bool)
    sel = keep & trace.loaded
    lo = int(trace.ts[sel].min()) if sel.any() else 0
    hi = int(trace.end[sel].max()) if sel.any() else 0
    return stats_by_group(
        trace, keep, np.zeros(trace.n, np.int64), np.zeros(1, np.int64), np.array([lo]), np.array([hi]), **kw
    )[0]
