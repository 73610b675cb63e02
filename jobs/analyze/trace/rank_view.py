"""One rank's events as numpy arrays, computed once and shared by the per-step statistics.

:class:`RankView` wraps the Arrow ``events`` of one (job, attempt, rank, capture) and exposes, lazily
and vectorized, the per-row arrays the analyses need: times (exact ns, or HTA's µs rounding), HTA's
loading rules (:mod:`jobs.analyze.trace.hta_filter`), the ``step`` of every row, and the **launch links**
between host calls and device events.

Launch links (who launched a device event):

* :attr:`RankView.launcher` — ours: the host row (not ``is_gpu``) with the same ``correlation``;
  when several host rows share it, the earliest-starting one (the outermost call). On a file merged
  from several ranks that reuse correlation ids (``bug_cases.md`` B19), a reused id links only rows
  of the same ``pid`` (:func:`jobs.normalize.kineto.linkage.correlation_link_keys`), never another rank's. A device row
  without a ``correlation`` is joined on ``external_id`` (``args["External id"]``) when exactly one
  host *launch call* (:func:`jobs.analyze.trace.launches.launch_name_mask`) carries that External id and
  exactly one such device row does (bug case B18: ROCm traces whose device events have only
  ``External id``).
* :attr:`RankView.hta_partner` — HTA 0.5.0 ``transform_correlation_to_index``
  (``hta/common/trace.py``): over the loaded rows, GPU side = ``stream >= 0 and correlation >= 0``
  (HTA's stream and correlation, see :mod:`jobs.analyze.trace.hta_filter`) or named ``Event Sync`` /
  ``Context Sync``; host side = the other rows with a correlation; a GPU-side row's partner is the
  host-side row with the same correlation, and a host-side row's partner the GPU-side row, the
  **last** one in trace order when several (pandas assignment order). Used only in
  HTA-compatibility mode.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.analyze.trace import hta_filter
from jobs.analyze.trace.launches import launch_name_mask
from jobs.normalize.kineto.linkage import correlation_link_keys

__all__ = ["RankView", "NO_STEP", "DEVICE_ACTIVITY_CATEGORIES"]

#: ``step`` value of rows outside any ProfilerStep.
NO_STEP = np.iinfo(np.int64).min
#: Normalized categories of device *activity* (what occupies a stream): kernels, copies, sets,
#: MTIA/HPU ops. Not ``gpu_user_annotation`` (a span over other activity) nor ``cuda_sync``
#: (a wait record).
DEVICE_ACTIVITY_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset", "mtia_ccp_events", "hpu_op")
_SYNC_NAMES = ("Event Sync", "Context Sync")


def _np(col, dtype, fill) -> np.ndarray:
    return pc.fill_null(col, fill).to_numpy(zero_copy_only=False).astype(dtype)


def _mask(col) -> np.ndarray:
    return pc.fill_null(col, False).to_numpy(zero_copy_only=False).astype(bool)


class RankView:
    """Per-row numpy arrays of one rank's events (all of shape ``(n,)``), computed on first use.

    Args:
        events: EVENTS rows of one capture (typed: :func:`jobs.analyze.hta.breakdown.typed_events`).
            Required: ``ph category raw_category name ts_ns dur_ns stream is_gpu correlation step``;
            optional (defaults in brackets): ``event_id`` [row position], ``external_id`` [none],
            ``pid`` [none], ``collective`` [none], ``args_json`` [none].
        ts_ns, dur_ns: start and duration of every row, ns (already µs-rounded when comparing
            with HTA, see :func:`jobs.analyze.trace.hta_filter.hta_round_us`); null durations as 0.
        loaded: :func:`jobs.analyze.trace.hta_filter.loaded_mask`.
        hta_stream: :func:`jobs.analyze.trace.hta_filter.hta_stream`.
    """

    def __init__(self, events: pa.Table, ts_ns: np.ndarray, dur_ns: np.ndarray, loaded: np.ndarray,
                 hta_stream: np.ndarray):
        self.events = events
        self.n = events.num_rows
        self.ts = np.asarray(ts_ns, np.int64)
        self.dur = np.asarray(dur_ns, np.int64)
        self.end = self.ts + self.dur
        self.loaded = np.asarray(loaded, bool)
        self.hta_stream = np.asarray(hta_stream, np.int64)

    # -- plain columns ---------------------------------------------------------------------------

    def _opt(self, name: str, fill: int) -> np.ndarray:
        if name not in self.events.column_names:
            return np.full(self.n, fill, np.int64)
        return _np(self.events.column(name), np.int64, fill)

    @cached_property
    def event_id(self) -> np.ndarray:
        """``event_id`` (position in ``traceEvents``), or the row position when absent."""
        if "event_id" not in self.events.column_names:
            return np.arange(self.n, dtype=np.int64)
        return _np(self.events.column("event_id"), np.int64, -1)

    @cached_property
    def names(self) -> pa.ChunkedArray:
        """``name`` column (Arrow)."""
        return self.events.column("name")

    @cached_property
    def is_gpu(self) -> np.ndarray:
        return _mask(self.events.column("is_gpu"))

    @cached_property
    def is_x(self) -> np.ndarray:
        return _mask(pc.equal(self.events.column("ph"), "X"))

    @cached_property
    def step(self) -> np.ndarray:
        """``step`` (ProfilerStep N), :data:`NO_STEP` when null."""
        return _np(self.events.column("step"), np.int64, NO_STEP)

    @cached_property
    def stream(self) -> np.ndarray:
        """Our ``stream`` column, −1 when null."""
        return _np(self.events.column("stream"), np.int64, -1)

    @cached_property
    def device(self) -> np.ndarray:
        """``pid`` (device index for device rows), −1 when null or absent."""
        return self._opt("pid", -1)

    @cached_property
    def correlation(self) -> np.ndarray:
        """Our ``correlation`` column (args.correlation or the launch-flow id), −1 when null."""
        return _np(self.events.column("correlation"), np.int64, -1)

    @cached_property
    def external_id(self) -> np.ndarray:
        """``external_id``, −1 when null or absent."""
        return self._opt("external_id", -1)

    @cached_property
    def hta_correlation(self) -> np.ndarray:
        """HTA's correlation (:func:`jobs.analyze.trace.hta_filter.hta_correlation`)."""
        return hta_filter.hta_correlation(self.events)

    def category_in(self, values) -> np.ndarray:
        """Rows whose normalized ``category`` is in ``values``."""
        return _mask(pc.is_in(self.events.column("category"), pa.array(list(values), pa.string())))

    def raw_category_in(self, values) -> np.ndarray:
        """Rows whose ``raw_category`` (``cat`` as written) is in ``values``."""
        return _mask(pc.is_in(self.events.column("raw_category"), pa.array(list(values), pa.string())))

    def name_in(self, values) -> np.ndarray:
        """Rows whose ``name`` is exactly one of ``values``."""
        return _mask(pc.is_in(self.names, pa.array(list(values), pa.string())))

    # -- derived masks ---------------------------------------------------------------------------

    @cached_property
    def host(self) -> np.ndarray:
        """Loaded host rows: ``X`` events that are not device-side."""
        return self.loaded & ~self.is_gpu & self.is_x

    @cached_property
    def device_activity(self) -> np.ndarray:
        """Loaded device rows in :data:`DEVICE_ACTIVITY_CATEGORIES`."""
        return self.loaded & self.is_gpu & self.category_in(DEVICE_ACTIVITY_CATEGORIES)

    @cached_property
    def launch_call(self) -> np.ndarray:
        """Loaded host rows named like a launch call (:func:`jobs.analyze.trace.launches.launch_name_mask`)."""
        return self.host & launch_name_mask(self.names)

    # -- launch links ----------------------------------------------------------------------------

    @cached_property
    def launcher(self) -> np.ndarray:
        """Per row: row index of the host call that launched it (ours, see module doc), else −1.

        Set for :attr:`device_activity` rows only.
        """
        out = np.full(self.n, -1, np.int64)
        corr, _ = correlation_link_keys(self.correlation, self.correlation >= 0, self.device, ~self.is_gpu)
        dev = np.flatnonzero(self.device_activity & (corr >= 0))
        cpu = np.flatnonzero(self.host & (corr >= 0))
        if dev.size and cpu.size:
            # earliest-starting host row per correlation (ties: first row)
            order = np.lexsort((cpu, self.ts[cpu], corr[cpu]))
            cpu_sorted = cpu[order]
            keys = corr[cpu_sorted]
            first = np.ones(keys.size, bool)
            first[1:] = keys[1:] != keys[:-1]
            ukeys, urows = keys[first], cpu_sorted[first]
            j = np.searchsorted(ukeys, corr[dev])
            ok = j < ukeys.size
            ok[ok] = ukeys[j[ok]] == corr[dev[ok]]
            out[dev[ok]] = urows[j[ok]]
        # B18: device rows without correlation, joined on a unique External id of a launch call.
        ext = self.external_id
        dev_nc = np.flatnonzero(self.device_activity & (corr < 0) & (ext >= 0))
        launches = np.flatnonzero(self.launch_call & (ext >= 0))
        if dev_nc.size and launches.size:
            lk, lc = np.unique(ext[launches], return_counts=True)
            dk, dc = np.unique(ext[dev_nc], return_counts=True)
            unique_keys = np.intersect1d(lk[lc == 1], dk[dc == 1])
            if unique_keys.size:
                l_sel = launches[np.isin(ext[launches], unique_keys)]
                d_sel = dev_nc[np.isin(ext[dev_nc], unique_keys)]
                lo = np.argsort(ext[l_sel])
                do = np.argsort(ext[d_sel])
                out[d_sel[do]] = l_sel[lo]
        return out

    @cached_property
    def hta_partner(self) -> np.ndarray:
        """Per row: HTA's ``index_correlation`` partner row index (see module doc), else −1.

        Set both ways: a GPU-side row points to its host-side row and a host-side row to its
        GPU-side row (the last one in trace order when several).
        """
        out = np.full(self.n, -1, np.int64)
        corr = self.hta_correlation
        has = self.loaded & (corr != -1)
        gpu_side = ((self.hta_stream >= 0) & (corr >= 0)) | self.name_in(_SYNC_NAMES)
        cpu = np.flatnonzero(has & ~gpu_side)
        gpu = np.flatnonzero(has & gpu_side)
        if cpu.size == 0 or gpu.size == 0:
            return out
        for src, dst in ((gpu, cpu), (cpu, gpu)):
            # last row of the other side (trace order) with the same correlation
            order = np.lexsort((-self.event_id[dst], corr[dst]))
            dst_sorted = dst[order]
            keys = corr[dst_sorted]
            first = np.ones(keys.size, bool)
            first[1:] = keys[1:] != keys[:-1]
            ukeys, urows = keys[first], dst_sorted[first]
            j = np.searchsorted(ukeys, corr[src])
            ok = j < ukeys.size
            ok[ok] = ukeys[j[ok]] == corr[src[ok]]
            out[src[ok]] = urows[j[ok]]
        return out
