"""Launch queue length per stream, and time blocked on a full queue.

Source: HTA 0.5.0 ``TraceCounters._get_queue_length_time_series_for_rank``,
``get_queue_length_summary`` and ``get_time_spent_blocked_on_full_queue``
(``hta/analyzers/trace_counters.py``; ``CUDA_MAX_LAUNCH_QUEUE_PER_STREAM = 1024`` in
``hta/common/constants.py``). The queue length of a stream is a step function:

* **+1** at the start of each host launch call, for every device event it launched on the stream;
* **−1** at the start of that device event.

The summary statistics are taken over the change points (HTA's ``describe()`` of the time series,
which is not time-weighted): ``max`` and ``mean`` of the queue length after each change.
**Blocked time** is the time the queue length is ≥ 1024 (from each change point at or above it to
the next change point on the stream). Changes at the same instant are applied in order +1 before
−1 (a device event cannot start before its launch is enqueued); HTA's sort leaves ties unordered.

Ours (default) vs HTA-compatibility mode (``hta_compat=True``):

* launch calls: :data:`jobs.analyze.trace.launches.LAUNCH_NAMES` vs HTA's
  :data:`~jobs.analyze.trace.launches.HTA_QUEUE_NAMES`; links: :attr:`RankTrace.launcher` vs a join on
  HTA's correlation between launch calls that have an ``index_correlation`` partner and rows with
  a stream;
* stream key (device, stream) vs stream.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from jobs.analyze.trace.launches import HTA_QUEUE_NAMES, LAUNCH_NAMES, launch_name_mask, pairs_on_key
from jobs.analyze.trace.model import RankTrace

__all__ = ["QueuePoints", "queue_points", "MAX_QUEUE_LENGTH"]

#: HTA ``CUDA_MAX_LAUNCH_QUEUE_PER_STREAM``.
MAX_QUEUE_LENGTH = 1024


@dataclass(frozen=True)
class QueuePoints:
    """Change points of the per-stream queue length (arrays of shape ``(m,)``), sorted by stream
    then time: ``row`` (the launch call for +1, the device event for −1), ``stream``, ``ts_ns``,
    ``queue_length`` (after the change), ``dur_to_next_ns`` (time to the next change on the
    stream; 0 for the last)."""

    row: np.ndarray
    stream: np.ndarray
    ts_ns: np.ndarray
    queue_length: np.ndarray
    dur_to_next_ns: np.ndarray

    def blocked(self, max_queue_length: int = MAX_QUEUE_LENGTH) -> np.ndarray:
        """Per change point: time spent at ``queue_length ≥ max_queue_length`` after it, ns."""
        return np.where(self.queue_length >= max_queue_length, self.dur_to_next_ns, 0)


def queue_points(
    trace: RankTrace,
    rows: np.ndarray,
    *,
    hta_compat: bool = False,
    launch_names: Sequence[str] = LAUNCH_NAMES,
    enqueue_first: bool = True,
) -> QueuePoints:
    """Queue-length change points of the rank's streams (see the module docstring).

    Args:
        trace: the rank's :class:`~jobs.analyze.trace.model.RankTrace`.
        rows: bool mask of shape ``(n,)``: rows that exist for this analysis.
        hta_compat: HTA 0.5.0's names and join.
        launch_names: launch-call names (ours).
        enqueue_first: at equal timestamps apply +1 before −1 (default; False: −1 first). The two
            orders bound the change-point mean of any order (HTA's sort leaves ties unordered).

    Returns:
        :class:`QueuePoints` (empty when no launch is linked to a device event).
    """
    rows = np.asarray(rows, bool)
    if hta_compat:
        corr = trace.hta_correlation
        partner = trace.hta_partner
        runtime = rows & trace.name_in(HTA_QUEUE_NAMES) & (partner >= 0)
        runtime[runtime] = trace.event_id[partner[runtime]] > 0  # HTA: index_correlation > 0
        gpu = rows & (trace.hta_stream != -1)
        c, g = pairs_on_key(np.flatnonzero(runtime), np.flatnonzero(gpu), corr)
        major = np.zeros(c.size, np.int64)
        minor = trace.hta_stream[g]
    else:
        is_launch = (
            trace.host
            & rows
            & (
                trace.launch_call
                if tuple(launch_names) == LAUNCH_NAMES
                else launch_name_mask(trace.names, launch_names)
            )
        )
        g = np.flatnonzero(rows & trace.device_activity & (trace.stream >= 0) & (trace.launcher >= 0))
        g = g[is_launch[trace.launcher[g]]]
        c = trace.launcher[g]
        major, minor = trace.device[g], trace.stream[g]
    m = c.size
    if m == 0:
        z = np.zeros(0, np.int64)
        return QueuePoints(z, z, z, z, z)
    row = np.concatenate([c, g])
    ts = np.concatenate([trace.ts[c], trace.ts[g]])
    delta = np.concatenate([np.ones(m, np.int64), -np.ones(m, np.int64)])
    kmaj = np.concatenate([major, major])
    kmin = np.concatenate([minor, minor])
    order = np.lexsort((row, -delta if enqueue_first else delta, ts, kmin, kmaj))
    row, ts, delta, kmaj, kmin = row[order], ts[order], delta[order], kmaj[order], kmin[order]
    new = np.ones(row.size, bool)
    new[1:] = (kmaj[1:] != kmaj[:-1]) | (kmin[1:] != kmin[:-1])
    csum = np.cumsum(delta)
    group_start = np.flatnonzero(new)
    base = np.repeat(csum[group_start] - delta[group_start], np.diff(np.append(group_start, row.size)))
    qlen = csum - base
    nxt = np.zeros(row.size, np.int64)
    same_next = ~new[1:]
    nxt[:-1] = np.where(same_next, ts[1:] - ts[:-1], 0)
    return QueuePoints(row, kmin, ts, qlen, nxt)
