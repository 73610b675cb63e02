"""Idle time breakdown per stream: host wait, kernel wait, other.

Source: HTA 0.5.0 ``get_idle_time_breakdown`` / ``_analyze_idle_time_for_stream``
(``hta/analyzers/breakdown_analysis.py``). Per stream, the device events sorted by start
(**not merged**); for each event after the first, ``gap = ts − end of the previous event`` on the
stream, and the gap is:

* **host_wait** when the launching host call started after the previous event ended
  (``launcher.ts > prev_end``: "the Host/CPU was not enqueuing kernels fast enough");
* else **kernel_wait** when ``gap < consecutive_kernel_delay`` (30 µs; HTA's docstring says ns,
  its unit is µs);
* else **other** (e.g. waiting on an event recorded on another stream).

An event without a known launcher can never be host_wait. Each gap belongs to the later event (so
per step: the gaps before the step's device events, whatever step the previous event had).

Ours vs HTA-compatibility mode (``hta_compat=True``, used by the golden tests):

=====================  =========================================  ============================================
                       ours (default)                             ``hta_compat``
=====================  =========================================  ============================================
events                 device activity (kernel, memcpy, memset,   rows with HTA's stream ≠ −1 and ``cat`` in
                       MTIA/HPU) with a stream                    kernel/Kernel/gpu_memcpy/Memcpy/gpu_memset/
                                                                  Memset/mtia_ccp_events
stream key             (device, stream)                           stream only (two GPUs' stream 7 mix)
launcher               :attr:`RankTrace.launcher` (correlation,   HTA's ``index_correlation`` partner; an
                       External id fallback)                      event with a correlation but no partner
                                                                  takes the ``ts`` of trace event 0 (HTA
                                                                  joins its index 0), kept for parity
negative gaps          0 (overlap on one stream is not idle)      summed as they are (HTA)
=====================  =========================================  ============================================

Negative gaps (an event starting before the previous one on the stream ended) appear only with
HTA's µs rounding or with concurrent rows on one stream id; HTA sums them, we clip them at 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from jobs.analyze.trace.model import RankTrace

__all__ = [
    "IdleGaps",
    "idle_gaps",
    "IDLE_CATEGORIES",
    "HOST_WAIT",
    "KERNEL_WAIT",
    "OTHER",
    "CONSECUTIVE_KERNEL_DELAY_NS",
    "HTA_IDLE_RAW_CATEGORIES",
]

HOST_WAIT, KERNEL_WAIT, OTHER = 0, 1, 2
#: Category names, indexed by the codes above (HTA's names).
IDLE_CATEGORIES = ("host_wait", "kernel_wait", "other")
#: HTA's default ``consecutive_kernel_delay`` (30 µs), ns.
CONSECUTIVE_KERNEL_DELAY_NS = 30_000
#: ``cat`` values HTA 0.5.0 selects for the idle breakdown.
HTA_IDLE_RAW_CATEGORIES = ("kernel", "Kernel", "gpu_memset", "Memset", "gpu_memcpy", "Memcpy", "mtia_ccp_events")


@dataclass(frozen=True)
class IdleGaps:
    """One entry per device event that has a predecessor on its stream (arrays of shape ``(m,)``).

    ``row``: row index of the event; ``stream``: its stream; ``gap_ns``: idle gap before it, ns
    (clipped at 0 unless ``hta_compat``); ``category``: :data:`HOST_WAIT`, :data:`KERNEL_WAIT` or
    :data:`OTHER`.
    """

    row: np.ndarray
    stream: np.ndarray
    gap_ns: np.ndarray
    category: np.ndarray

    def sum_by_category(self) -> dict[str, int]:
        """Σ gap per category name over all streams, ns."""
        return {c: int(self.gap_ns[self.category == k].sum()) for k, c in enumerate(IDLE_CATEGORIES)}


def idle_gaps(
    trace: RankTrace,
    rows: np.ndarray,
    *,
    hta_compat: bool = False,
    consecutive_kernel_delay_ns: int = CONSECUTIVE_KERNEL_DELAY_NS,
) -> IdleGaps:
    """Classify the gap before every device event on its stream (HTA idle time breakdown).

    Args:
        trace: the rank's :class:`~jobs.analyze.trace.model.RankTrace`.
        rows: bool mask of shape ``(n,)``: the rows that exist for this analysis (e.g. all loaded
            rows, or HTA's last-step-filtered rows). Launchers outside ``rows`` are unknown.
        hta_compat: reproduce HTA 0.5.0 exactly (see the module table).
        consecutive_kernel_delay_ns: kernel_wait threshold, ns (HTA default 30 µs).

    Returns:
        :class:`IdleGaps` (empty arrays when there is no device event).
    """
    rows = np.asarray(rows, bool)
    ts, end = trace.ts, trace.end
    if hta_compat:
        sel = np.flatnonzero(rows & (trace.hta_stream != -1) & trace.raw_category_in(HTA_IDLE_RAW_CATEGORIES))
        key_major = np.zeros(sel.size, np.int64)
        key_minor = trace.hta_stream[sel]
        partner = trace.hta_partner[sel]
        has_rt = partner >= 0
        has_rt[has_rt] = rows[partner[has_rt]]
        rt_ts = np.where(has_rt, ts[np.maximum(partner, 0)], 0)
        # HTA joins index_correlation 0 (a correlation without partner) to trace event 0.
        ev0 = np.flatnonzero(rows & (trace.event_id == 0))
        if ev0.size:
            quirk = (partner < 0) & (trace.hta_correlation[sel] >= 0)
            rt_ts = np.where(quirk, ts[ev0[0]], rt_ts)
            has_rt = has_rt | quirk
    else:
        sel = np.flatnonzero(rows & trace.device_activity & (trace.stream >= 0))
        key_major = trace.device[sel]
        key_minor = trace.stream[sel]
        launcher = trace.launcher[sel]
        has_rt = launcher >= 0
        has_rt[has_rt] = rows[launcher[has_rt]]
        rt_ts = np.where(has_rt, ts[np.maximum(launcher, 0)], 0)
    if sel.size == 0:
        z = np.zeros(0, np.int64)
        return IdleGaps(z, z, z, np.zeros(0, np.int8))
    order = np.lexsort((trace.event_id[sel], ts[sel], key_minor, key_major))
    sel, key_major, key_minor = sel[order], key_major[order], key_minor[order]
    has_rt, rt_ts = has_rt[order], rt_ts[order]
    same = np.zeros(sel.size, bool)
    same[1:] = (key_major[1:] == key_major[:-1]) & (key_minor[1:] == key_minor[:-1])
    cur = np.flatnonzero(same)
    prev_end = end[sel[cur - 1]]
    gap = ts[sel[cur]] - prev_end
    host_wait = has_rt[cur] & (rt_ts[cur] > prev_end)
    kernel_wait = ~host_wait & (gap < consecutive_kernel_delay_ns)
    cat = np.full(cur.size, OTHER, np.int8)
    cat[kernel_wait] = KERNEL_WAIT
    cat[host_wait] = HOST_WAIT
    if not hta_compat:
        gap = np.maximum(gap, 0)
    return IdleGaps(sel[cur], key_minor[cur], gap.astype(np.int64), cat)
