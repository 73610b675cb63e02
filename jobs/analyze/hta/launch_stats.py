"""CUDA kernel launch statistics: launch delay, short kernels, runtime and launch-delay outliers.

Source: HTA 0.5.0 ``get_cuda_kernel_launch_stats(runtime_cutoff=50, launch_delay_cutoff=100,
include_memory_events=True)`` (``hta/analyzers/cuda_kernel_analysis.py``; the flags are those of
its ``visualize_cuda_launch_kernel_info``). Per launch:

* ``cpu_duration`` = duration of the host launch call, ns;
* ``gpu_duration`` = duration of the device work it launched, ns;
* ``launch_delay`` = ``max(0, gpu.ts − (cpu.ts + cpu.dur))``, ns;
* **short kernel**: ``cpu_duration ≤ runtime_cutoff`` and ``gpu_duration < cpu_duration`` (the
  launch costs more than the kernel);
* **runtime outlier**: ``cpu_duration > runtime_cutoff`` (50 µs);
* **launch-delay outlier**: ``launch_delay > launch_delay_cutoff`` (100 µs).

Ours (default) vs HTA-compatibility mode (``hta_compat=True``):

* launch calls: :data:`jobs.analyze.trace.launches.LAUNCH_NAMES` (vendor-neutral: ``hipLaunchKernel``,
  ``cuLaunchKernel(Ex)``, ``cudaGraphLaunch``…) vs HTA's five names;
* join: device activity rows linked by :attr:`RankTrace.launcher` (correlation, External-id fallback)
  vs HTA's inner join of *any* host row (HTA stream −1) whose correlation is that of a launch call
  with *any* row with a stream;
* one row per **launch** (a graph launch with 20 kernels is one launch: delay to its first kernel,
  ``gpu_duration`` = Σ of its kernels) vs one row per (host row, device row) pair. Identical when
  every launch has one device event, as in all non-graph traces.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from jobs.analyze.trace.launches import HTA_LAUNCH_STATS_NAMES, LAUNCH_NAMES, launch_name_mask, pairs_on_key
from jobs.analyze.trace.model import RankTrace

__all__ = ["Launches", "launches", "RUNTIME_CUTOFF_NS", "LAUNCH_DELAY_CUTOFF_NS"]

#: HTA ``runtime_cutoff`` (50 µs), ns.
RUNTIME_CUTOFF_NS = 50_000
#: HTA ``launch_delay_cutoff`` (100 µs), ns.
LAUNCH_DELAY_CUTOFF_NS = 100_000


@dataclass(frozen=True)
class Launches:
    """One entry per launch (arrays of shape ``(m,)``): ``cpu_row`` (row index of the launch call),
    ``cpu_dur_ns``, ``gpu_dur_ns``, ``delay_ns``."""

    cpu_row: np.ndarray
    cpu_dur_ns: np.ndarray
    gpu_dur_ns: np.ndarray
    delay_ns: np.ndarray
    runtime_cutoff_ns: int = RUNTIME_CUTOFF_NS
    launch_delay_cutoff_ns: int = LAUNCH_DELAY_CUTOFF_NS

    @property
    def short(self) -> np.ndarray:
        """Short-kernel flag: ``cpu ≤ runtime_cutoff and gpu < cpu``."""
        return (self.cpu_dur_ns <= self.runtime_cutoff_ns) & (self.gpu_dur_ns < self.cpu_dur_ns)

    @property
    def runtime_outlier(self) -> np.ndarray:
        """``cpu > runtime_cutoff``."""
        return self.cpu_dur_ns > self.runtime_cutoff_ns

    @property
    def delay_outlier(self) -> np.ndarray:
        """``launch_delay > launch_delay_cutoff``."""
        return self.delay_ns > self.launch_delay_cutoff_ns


def launches(
    trace: RankTrace,
    rows: np.ndarray,
    *,
    hta_compat: bool = False,
    launch_names: Sequence[str] = LAUNCH_NAMES,
    runtime_cutoff_ns: int = RUNTIME_CUTOFF_NS,
    launch_delay_cutoff_ns: int = LAUNCH_DELAY_CUTOFF_NS,
) -> Launches:
    """The launches among ``rows`` (see the module docstring for both modes).

    Args:
        trace: the rank's :class:`~jobs.analyze.trace.model.RankTrace`.
        rows: bool mask of shape ``(n,)``: rows that exist for this analysis.
        hta_compat: HTA 0.5.0's join and name list (``launch_names`` ignored).
        launch_names: launch-call names (ours).

    Returns:
        :class:`Launches` (empty when the trace has none of the launch calls: bug case B15).
    """
    rows = np.asarray(rows, bool)
    ts, dur = trace.ts, trace.dur
    if hta_compat:
        corr = trace.hta_correlation
        named = rows & trace.name_in(HTA_LAUNCH_STATS_NAMES)
        keys = np.unique(corr[named])
        keys = keys[keys != -1]
        cand = rows & np.isin(corr, keys)
        cpu = np.flatnonzero(cand & (trace.hta_stream == -1))
        gpu = np.flatnonzero(cand & (trace.hta_stream != -1))
        c, g = pairs_on_key(cpu, gpu, corr)
        cpu_dur, gpu_dur = dur[c], dur[g]
        delay = np.maximum(ts[g] - ts[c] - dur[c], 0)
        return Launches(c, cpu_dur, gpu_dur, delay, runtime_cutoff_ns, launch_delay_cutoff_ns)
    is_launch = (
        trace.host
        & rows
        & (trace.launch_call if tuple(launch_names) == LAUNCH_NAMES else launch_name_mask(trace.names, launch_names))
    )
    launcher = trace.launcher
    dev = np.flatnonzero(rows & trace.device_activity & (launcher >= 0))
    dev = dev[is_launch[launcher[dev]]]
    if dev.size == 0:
        z = np.zeros(0, np.int64)
        return Launches(z, z, z, z, runtime_cutoff_ns, launch_delay_cutoff_ns)
    lau = launcher[dev]
    cpu_rows, inv = np.unique(lau, return_inverse=True)
    first_ts = np.full(cpu_rows.size, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(first_ts, inv, ts[dev])
    gpu_dur = np.bincount(inv, weights=dur[dev], minlength=cpu_rows.size).astype(np.int64)
    delay = np.maximum(first_ts - trace.end[cpu_rows], 0)
    return Launches(cpu_rows, dur[cpu_rows], gpu_dur, delay, runtime_cutoff_ns, launch_delay_cutoff_ns)
