"""Host-side time per step: data-loader time and CPU-bound time.

HTA 0.5.0 has neither metric as a table (its critical path attributes ``cpu_bound`` edges; newer
HTA versions add data-loading nodes by name), so both definitions are ours, stated here:

* **Data-loader time** — the union of the host ``X`` events whose name matches
  :data:`DATALOADER_PATTERNS` (case-insensitive search: ``enumerate(DataLoader)#…``,
  ``_MultiProcessingDataLoaderIter``, ``torch/utils/data/dataloader.py(…)`` Python frames, …) or a
  configured extra pattern, on all threads, inside the window, ns.
* **CPU-bound time** — time inside the window during which **no device activity runs on any
  stream** (kernels, copies, sets; :data:`jobs.analyze.trace.model.DEVICE_ACTIVITY_CATEGORIES`)
  **while some host thread is inside a** ``cpu_op``, ``cuda_runtime`` **or** ``cuda_driver``
  **event**, excluding data-loader time (so the two never count the same ns). It is the GPU idle time
  the host is responsible for: the host is busy preparing or launching work and the GPU waits.
  GPU idle time while the host is idle too (or in the data loader) is not CPU-bound.

Windows: one per step, ``[ProfilerStep start, start + dur)``; the events are all rows of the rank
(a kernel launched in step N−1 that runs into step N keeps the GPU busy in step N).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.analyze.trace.model import RankTrace
from jobs.common.interval_sets import covered_not_excluded, length_in_windows
from jobs.common.intervals import merge_intervals

__all__ = ["DATALOADER_PATTERNS", "HOST_BUSY_CATEGORIES", "dataloader_mask", "host_time_in_windows"]

#: Data-loading event names (regexes, case-insensitive ``re.search``).
DATALOADER_PATTERNS: tuple[str, ...] = (
    r"dataloader",  # enumerate(DataLoader)#_…DataLoaderIter.__next__, dataloader.py frames
    r"DataLoaderIter",
    r"^DataPipe",  # torchdata
)
#: Host categories that count as "host busy" for CPU-bound time.
HOST_BUSY_CATEGORIES = ("cpu_op", "cuda_runtime", "cuda_driver")


@lru_cache(maxsize=32)
def _compile(extra: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{p})" for p in (*DATALOADER_PATTERNS, *extra)), re.IGNORECASE)


def dataloader_mask(names: pa.Array | pa.ChunkedArray, extra_patterns: Sequence[str] = ()) -> np.ndarray:
    """Rows whose name is a data-loading event (each distinct name tested once); shape ``(n,)``."""
    arr = names.combine_chunks() if isinstance(names, pa.ChunkedArray) else names
    if len(arr) == 0:
        return np.zeros(0, bool)
    if not pa.types.is_dictionary(arr.type):
        arr = pc.dictionary_encode(arr)
    rx = _compile(tuple(extra_patterns))
    hit = np.array([bool(n and rx.search(n)) for n in arr.dictionary.to_pylist()] + [False], bool)
    return hit[arr.indices.fill_null(len(arr.dictionary)).to_numpy(zero_copy_only=False).astype(np.int64)]


def host_time_in_windows(
    trace: RankTrace, rows: np.ndarray, win_starts, win_ends, extra_dataloader_patterns: Sequence[str] = ()
) -> tuple[np.ndarray, np.ndarray]:
    """Data-loader time and CPU-bound time inside each window (module docstring), ns.

    Args:
        trace: the rank's :class:`~jobs.analyze.trace.model.RankTrace`.
        rows: bool mask of shape ``(n,)``: rows that exist for this analysis.
        win_starts, win_ends: shape ``(w,)``, windows ``[start, end)``, ns.
        extra_dataloader_patterns: more data-loading name regexes.

    Returns:
        ``(dataloader_ns, cpu_bound_ns)``: two int64 arrays of shape ``(w,)``.
    """
    rows = np.asarray(rows, bool)
    ts, end = trace.ts, trace.end
    host = rows & trace.host
    dl = np.flatnonzero(host & dataloader_mask(trace.names, extra_dataloader_patterns))
    busy = np.flatnonzero(host & trace.category_in(HOST_BUSY_CATEGORIES))
    gpu = np.flatnonzero(rows & trace.device_activity)
    dl_s, dl_e = merge_intervals(ts[dl], end[dl])
    dataloader = length_in_windows(dl_s, dl_e, win_starts, win_ends)
    cb_s, cb_e = covered_not_excluded(
        ts[busy], end[busy], np.concatenate([ts[gpu], dl_s]), np.concatenate([end[gpu], dl_e])
    )
    return dataloader, length_in_windows(cb_s, cb_e, win_starts, win_ends)
