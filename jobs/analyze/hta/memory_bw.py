"""Memcpy volume, time and bandwidth.

Source: HTA 0.5.0 ``get_memory_bw_summary`` (``hta/analyzers/trace_counters.py``) reads Kineto's
per-copy ``args["memory bandwidth (GB/s)"]``, which Kineto computes as ``bytes / duration``. We
aggregate the same quantities per step instead of building HTA's time series:

* ``memcpy_bytes`` = Σ ``args["bytes"]`` of the ``gpu_memcpy`` events (legacy ``Memcpy``), bytes;
* ``memcpy_time_ns`` = Σ their durations, ns (not merged: concurrent copies on two streams
  both count);
* ``memcpy_bw_gbps`` = Σ bytes / Σ copy time over the copies whose ``bytes`` is known (bytes per
  ns = GB/s, 1 GB = 1e9 bytes), the duration-weighted mean bandwidth; null when that time is 0.

  Copy time: Kineto computes its bandwidth arg from the exact duration, but traces written in
  whole µs truncate ``dur`` (a 1.9 µs copy is written ``dur: 1``), so ``bytes / dur`` overstates the
  bandwidth of short copies by up to 2× and more. When the arg is present and the duration it
  implies, ``bytes / bw``, lies in ``[dur, dur + 1 µs)`` (checked on every corpus trace), that
  implied duration is the copy time; otherwise ``dur``.

Memsets are not copies and are left out (HTA plots them as a fourth series).
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec
import numpy as np
import pyarrow as pa

from jobs.analyze.trace.model import RankTrace

__all__ = ["Memcpys", "memcpys", "MEMCPY_CATEGORIES"]

MEMCPY_CATEGORIES = ("gpu_memcpy",)
_KINETO_BW = "memory bandwidth (GB/s)"
_decode = msgspec.json.Decoder()


@dataclass(frozen=True)
class Memcpys:
    """One entry per memcpy (arrays of shape ``(m,)``): ``row``, ``bytes`` (−1 when the trace has no
    ``bytes`` arg), ``dur_ns``, ``kineto_gbps`` (Kineto's own bandwidth arg, NaN when absent)."""

    row: np.ndarray
    bytes: np.ndarray
    dur_ns: np.ndarray
    kineto_gbps: np.ndarray

    @property
    def copy_time_ns(self) -> np.ndarray:
        """Per copy: Kineto-implied exact duration ``bytes / bw`` when it lies in
        ``[dur, dur + 1 µs)``, else ``dur``; ns (float)."""
        ok = (self.bytes > 0) & np.isfinite(self.kineto_gbps) & (self.kineto_gbps > 0)
        implied = np.where(ok, self.bytes / np.where(ok, self.kineto_gbps, 1.0), 0.0)
        ok &= (implied >= self.dur_ns - 0.5) & (implied < self.dur_ns + 1000)
        return np.where(ok, implied, self.dur_ns.astype(np.float64))


def _num(v, default):
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else default


def memcpys(trace: RankTrace, rows: np.ndarray) -> Memcpys:
    """The memcpy events among ``rows`` with their sizes (``args_json`` parsed for these rows only).

    Args:
        trace: the rank's :class:`~jobs.analyze.trace.model.RankTrace`.
        rows: bool mask of shape ``(n,)``.

    Returns:
        :class:`Memcpys` (empty when there is no copy).
    """
    sel = np.flatnonzero(np.asarray(rows, bool) & trace.loaded & trace.is_gpu & trace.category_in(MEMCPY_CATEGORIES))
    nbytes = np.full(sel.size, -1, np.int64)
    gbps = np.full(sel.size, np.nan)
    if sel.size and "args_json" in trace.events.column_names:
        texts = trace.events.column("args_json").take(pa.array(sel, pa.int64())).to_pylist()
        for k, t in enumerate(texts):
            try:
                a = _decode.decode(t) if t else None
            except msgspec.DecodeError:
                a = None
            if isinstance(a, dict):
                b = _num(a.get("bytes"), -1)
                nbytes[k] = int(b) if b >= 0 else -1
                gbps[k] = float(_num(a.get(_KINETO_BW), np.nan))
    return Memcpys(sel, nbytes, trace.dur[sel], gbps)
