"""Per-rank analysis: the ``steps`` rows and the ``ranks`` row of one capture.

:func:`analyze_rank` is what the Spark job runs per (job_id, attempt, rank, capture_id) group. It
is pure (Arrow in, Arrow out) and vectorized with numpy.

Definitions (HTA = Holistic Trace Analysis 0.5.0, ``hta/analyzers/breakdown_analysis.py``
``get_temporal_breakdown`` and ``hta/analyzers/communication_analysis.py``
``get_comm_comp_overlap``), over a set of *GPU events* (rows HTA gives a stream, see
:mod:`jobs.analyze.trace.hta_filter`), with intervals ``[ts, ts + dur)`` merged as in
:mod:`jobs.common.intervals` (touching intervals merge):

* ``kernel_time`` = last merged end − first merged start;
* ``idle_time`` = ``kernel_time`` − Σ merged lengths of all GPU events;
* ``compute_time`` = Σ merged lengths of COMPUTATION events; ``comm_time`` likewise for
  COMMUNICATION; kernel type from the name, HTA's rule (:func:`jobs.analyze.trace.kernel_types.hta_kernel_type`,
  so that our percentages agree with HTA), except that a kernel our rule
  (:func:`~jobs.analyze.trace.kernel_types.kernel_type`: collective metadata, case-insensitive NCCL/RCCL/HCCL
  families) calls COMMUNICATION is COMMUNICATION (deliberate difference, ``bug_cases.md`` B16: HTA
  counts ``nccldevkernel_*``/``rccl*`` as computation and reports comm time 0 and overlap NaN). On
  every corpus trace the two rules agree on communication, so HTA parity is unchanged;
* ``non_compute_time`` = ``kernel_time − compute_time − idle_time``;
* ``*_pct`` = 100 × time / ``kernel_time`` (not rounded; HTA rounds to 2 decimals), null when
  ``kernel_time`` is 0;
* ``overlap_pct`` = 100 × |merged COMMUNICATION ∩ merged COMPUTATION| / ``comm_time``, null when
  ``comm_time`` is 0 (HTA: NaN).

With no GPU event every breakdown column is null and ``n_kernels`` is 0 (HTA raises
``IndexError`` there).

``ranks`` uses HTA's whole-trace rules, including its loading and last-step filter; ``steps`` uses
the GPU events whose ``step`` is N, without the last-step filter. Times are exact integer ns; HTA
works in µs and rounds sub-µs traces inward (``analyze_rank(..., hta_us_rounding=True)``
reproduces that for comparisons).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from jobs.analyze.hta.stats import rank_stats, step_stats
from jobs.analyze.trace import hta_filter
from jobs.analyze.trace.kernel_types import KERNEL_TYPES, hta_kernel_types
from jobs.analyze.trace.model import REQUIRED_COLUMNS, RankTrace, as_rank_trace
from jobs.common.intervals import clip_intervals, intersection_length, merge_intervals, total_length
from schemas.tables import RANKS, STEPS

__all__ = ["analyze_rank", "temporal_breakdown", "Breakdown", "cpu_profiler_steps"]

_COMP = KERNEL_TYPES.index("COMPUTATION")
_COMM = KERNEL_TYPES.index("COMMUNICATION")
_STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")
_STEP_CATEGORIES = ("user_annotation", "cpu_op")  # legacy `Operator` is normalized to cpu_op


@dataclass(frozen=True)
class Breakdown:
    """HTA temporal breakdown + comm/comp overlap of one set of GPU events (ns and %).

    Field names are the ``_BREAKDOWN`` columns of ``schemas.tables`` (STEPS and RANKS).
    """

    kernel_time_ns: int | None = None
    idle_time_ns: int | None = None
    compute_time_ns: int | None = None
    non_compute_time_ns: int | None = None
    idle_pct: float | None = None
    compute_pct: float | None = None
    non_compute_pct: float | None = None
    comm_time_ns: int | None = None
    overlap_pct: float | None = None
    n_kernels: int = 0

    def as_dict(self) -> dict:
        """The fields as a dict (column name → value)."""
        return dict(self.__dict__)


def temporal_breakdown(ts_ns, dur_ns, kernel_type_codes) -> Breakdown:
    """HTA temporal breakdown and comm/comp overlap of one set of GPU events.

    Args:
        ts_ns: shape ``(n,)`` event starts, ns.
        dur_ns: shape ``(n,)`` event durations, ns.
        kernel_type_codes: shape ``(n,)`` int codes into
            :data:`jobs.analyze.trace.kernel_types.KERNEL_TYPES`.

    Returns:
        A :class:`Breakdown`; all-null (``n_kernels == 0``) when ``n == 0``.

    Source: HTA 0.5.0 ``get_temporal_breakdown`` / ``_get_idle_time_for_kernels`` /
    ``get_comm_comp_overlap`` (see the module docstring).
    """
    ts = np.asarray(ts_ns, dtype=np.int64)
    end = ts + np.asarray(dur_ns, dtype=np.int64)
    codes = np.asarray(kernel_type_codes)
    n = int(ts.size)
    if n == 0:
        return Breakdown()
    all_s, all_e = merge_intervals(ts, end)
    kernel_time = int(all_e[-1] - all_s[0])
    busy = total_length(all_s, all_e)
    comp_s, comp_e = merge_intervals(ts[codes == _COMP], end[codes == _COMP])
    comm_s, comm_e = merge_intervals(ts[codes == _COMM], end[codes == _COMM])
    compute = total_length(comp_s, comp_e)
    comm = total_length(comm_s, comm_e)
    idle = kernel_time - busy
    non_compute = kernel_time - compute - idle

    def pct(x: int) -> float | None:
        return 100.0 * x / kernel_time if kernel_time > 0 else None

    overlap = (100.0 * intersection_length(comm_s, comm_e, comp_s, comp_e) / comm) if comm > 0 else None
    return Breakdown(
        kernel_time, idle, compute, non_compute, pct(idle), pct(compute), pct(non_compute), comm, overlap, n
    )


def cpu_profiler_steps(trace: RankTrace):
    """CPU-side ``ProfilerStep#N`` rows: (step numbers, starts, durations), one per N, by step.

    When the same N appears more than once (e.g. on two threads) the earliest-starting row wins.
    """
    cand = trace.host & trace.category_in(_STEP_CATEGORIES)
    cand &= hta_filter.profiler_step_name_mask(trace.events)
    idx = np.flatnonzero(cand)
    names = trace.names.take(pa.array(idx, pa.int64())).to_pylist()
    rows = []
    for i, nm in zip(idx, names):
        m = _STEP_NAME.match(nm or "")
        if m:
            rows.append((int(m.group(1)), int(trace.ts[i]), int(trace.dur[i])))
    rows.sort(key=lambda r: (r[0], r[1]))
    seen, steps = set(), []
    for r in rows:
        if r[0] not in seen:
            seen.add(r[0])
            steps.append(r)
    return steps


def analyze_rank(
    trace: RankTrace | pa.Table,
    *,
    hta_us_rounding: bool = False,
    time_base_ns: int = 0,
    extra_comm_patterns: Sequence[str] = (),
    extra_dataloader_patterns: Sequence[str] = (),
) -> tuple[pa.Table, pa.Table]:
    """The ``steps`` rows and the ``ranks`` row of one rank's capture.

    Args:
        trace: the capture's :class:`~jobs.analyze.trace.model.RankTrace`; or (convenience for tests
            and benchmarks) its EVENTS rows (``schemas.tables.EVENTS``, at least
            :data:`jobs.analyze.trace.model.REQUIRED_COLUMNS`) of ONE (job_id, attempt, rank,
            capture_id), in any row order, modelled first.
        hta_us_rounding: reproduce HTA's inward µs rounding of sub-µs traces (for comparisons
            with HTA only; the warehouse keeps exact ns). A model must have been built in that mode.
        time_base_ns: with ``hta_us_rounding``, the trace's ``baseTimeNanoseconds``
            (``captures.base_time_ns``; 0 for absolute-µs traces), see
            :func:`jobs.analyze.trace.hta_filter.hta_round_us`.
        extra_comm_patterns: more communication-kernel name regexes (custom collectives), for
            ``exposed_comm_ns`` (see :func:`jobs.analyze.trace.kernel_types.kernel_type`).
        extra_dataloader_patterns: more data-loading event name regexes, for
            ``dataloader_time_ns`` / ``cpu_bound_time_ns`` (see :mod:`jobs.analyze.hta.host_time`).

    Returns:
        ``(steps, ranks)``: Arrow tables with exactly the STEPS and RANKS schemas. ``steps`` has
        one row per CPU ``ProfilerStep#N`` (0 rows when there is none); ``ranks`` has one row
        (0 rows when ``events`` is empty), with ``world_size`` and ``device_name`` null (the
        caller fills them from ``captures``).

        ranks: HTA whole-trace temporal breakdown and overlap (loading rules and last-step
        filter of :mod:`jobs.analyze.trace.hta_filter`); ``n_steps``, ``step_time_p50_ns`` (median,
        rounded to the ns) and ``step_time_max_ns`` from the CPU ``ProfilerStep#N`` rows.

        steps: ``step_start_ns``/``step_time_ns`` = ts/dur of ``ProfilerStep#N``; the breakdown
        over the GPU events with ``step == N`` (no last-step filter); ``cpu_op_time_ns`` = Σ merged
        intervals of the ``cpu_op`` events with ``step == N`` on all threads, clipped to the step
        (the union of all cpu_ops equals the union of the top-level ones).

        Both tables also carry the HTA-parity statistics of :mod:`jobs.analyze.hta.stats`
        (idle time breakdown, launch statistics, queue length, memcpy bandwidth, host time):
        per step for ``steps``, over HTA's kept rows for ``ranks``.

    Raises:
        ValueError: a required column is missing, ``events`` mixes several captures/ranks, or a
            model built in another time mode than ``hta_us_rounding`` asks for.
    """
    trace = as_rank_trace(
        trace, REQUIRED_COLUMNS, "analyze_rank", hta_us_rounding=hta_us_rounding, time_base_ns=time_base_ns
    )
    if trace.n == 0:
        return STEPS.empty(), RANKS.empty()
    ident, loaded, ts, dur, stream = trace.identity, trace.loaded, trace.ts, trace.dur, trace.hta_stream
    stat_kw = dict(
        extra_comm_patterns=tuple(extra_comm_patterns), extra_dataloader_patterns=tuple(extra_dataloader_patterns)
    )
    gpu = loaded & (stream != -1)

    # Kernel types of the GPU rows only (few distinct names).
    gpu_idx = np.flatnonzero(gpu)
    codes = np.full(trace.n, -1, dtype=np.int8)
    if gpu_idx.size:
        hta_codes = hta_kernel_types(trace.names.take(pa.array(gpu_idx, pa.int64())))
        ours_comm = trace.kernel_type_codes[gpu_idx] == _COMM
        codes[gpu_idx] = np.where(ours_comm, _COMM, hta_codes)

    # ranks: whole trace with HTA's last-step filter.
    keep = trace.hta_keep
    sel = gpu & keep
    rank_bd = temporal_breakdown(ts[sel], dur[sel], codes[sel])

    steps = cpu_profiler_steps(trace)
    step_times = np.array([s[2] for s in steps], dtype=np.int64)
    rank_row = {
        **ident,
        "world_size": None,
        "device_name": None,
        "device_index": _device_index(trace),
        "n_steps": len(steps),
        "step_time_p50_ns": int(np.round(np.median(step_times))) if len(steps) else None,
        "step_time_max_ns": int(step_times.max()) if len(steps) else None,
        **rank_bd.as_dict(),
        **rank_stats(trace, keep, **stat_kw),
    }
    ranks_tbl = pa.Table.from_pylist([rank_row], schema=RANKS.arrow_schema())

    # steps: per ProfilerStep#N, GPU rows with step == N; cpu_op rows with step == N.
    is_cpu_op = loaded & ~trace.is_gpu & trace.category_in(("cpu_op",))
    gpu_by_step = _group_rows(trace.step, gpu)
    cpu_by_step = _group_rows(trace.step, is_cpu_op)
    rows = []
    empty = np.zeros(0, np.int64)
    stats = step_stats(trace, steps, **stat_kw)
    for (n, start, step_dur), st in zip(steps, stats):
        g = gpu_by_step.get(n, empty)
        bd = temporal_breakdown(ts[g], dur[g], codes[g])
        c = cpu_by_step.get(n, empty)
        cs, ce = clip_intervals(ts[c], ts[c] + dur[c], start, start + step_dur)
        ms, me = merge_intervals(cs, ce)
        rows.append(
            {
                **ident,
                "step": n,
                "step_start_ns": start,
                "step_time_ns": step_dur,
                **bd.as_dict(),
                "cpu_op_time_ns": total_length(ms, me),
                **st,
            }
        )
    steps_tbl = pa.Table.from_pylist(rows, schema=STEPS.arrow_schema()) if rows else STEPS.empty()
    return steps_tbl, ranks_tbl


def _device_index(trace) -> int | None:
    """The most frequent device pid of the rank's device activity (lowest on a tie), or ``None``."""
    dev = trace.device[trace.device_activity]
    dev = dev[dev >= 0]
    if not dev.size:
        return None
    values, counts = np.unique(dev, return_counts=True)
    return int(values[np.argmax(counts)])


def _group_rows(step: np.ndarray, mask: np.ndarray) -> dict[int, np.ndarray]:
    """Row indices under ``mask`` grouped by ``step`` value (one sort, no per-step scan)."""
    idx = np.flatnonzero(mask)
    if idx.size == 0:
        return {}
    order = np.argsort(step[idx], kind="stable")
    idx = idx[order]
    vals, starts = np.unique(step[idx], return_index=True)
    bounds = np.append(starts, idx.size)
    return {int(v): idx[bounds[k] : bounds[k + 1]] for k, v in enumerate(vals)}
