"""The ``kernels`` table: per (step, kernel name) statistics of one rank's device events.

Source: HTA 0.5.0 ``get_gpu_kernel_breakdown`` second DataFrame (per kernel name: sum, max, min,
mean, std of ``dur``; plain sums, no interval merging), kept for every name and split by step
instead of HTA's top-k / "others" roll-up.

Rows: device activity (:data:`jobs.analyze.trace.model.DEVICE_ACTIVITY_CATEGORIES`: kernels, memcpy,
memset, MTIA/HPU ops) with a duration. HTA also counts every row that carries an integer
``args.stream`` (a ``cpu_op`` with ``args.stream``, ``cuda_sync`` rows such as ``Stream Wait
Event``): we do not — a deliberate difference stated in ``tests/golden/test_hta_stats_parity.py``.
``step`` is the ProfilerStep of the launch (``events.step``), −1 outside any step.

``kernel_type`` is ours (:func:`type_codes`: :func:`jobs.analyze.trace.kernel_types.kernel_types` refined
by the event category): COMMUNICATION when any row of the name carries collective metadata
(``events.collective``: ``Collective name``, or the NCCL/RCCL kernel-name family) or the name
matches the maintained family list (``ncclKernel_*``, ``ncclDevKernel_*``, RCCL, HCCL, Gloo, …) or
``extra_comm_patterns``; ``hta_kernel_type`` is HTA 0.5.0's name-only rule, for comparison.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.analyze.trace.kernel_types import COMMUNICATION, KERNEL_TYPES, hta_kernel_types, kernel_types
from jobs.analyze.trace.model import IDENTITY, NO_STEP, RankTrace, as_rank_trace
from schemas.tables import KERNELS

__all__ = ["kernel_table", "kernel_rows"]

_COMM = KERNEL_TYPES.index(COMMUNICATION)
_MEM = KERNEL_TYPES.index("MEMORY")
_COMP = KERNEL_TYPES.index("COMPUTATION")
_COPY_CATEGORIES = ("gpu_memcpy", "gpu_memset")
_MEMORY_NAME = re.compile(r"(?:hip|cuda|cu)?mem(?:cpy|set)|dma", re.IGNORECASE)


def kernel_rows(trace: RankTrace, rows: np.ndarray) -> np.ndarray:
    """Row indices of the device activity events among ``rows`` (the rows :func:`kernel_table` counts)."""
    return np.flatnonzero(np.asarray(rows, bool) & trace.device_activity)


def type_codes(trace: RankTrace, idx: np.ndarray, extra_comm_patterns: Sequence[str] = ()) -> np.ndarray:
    """Our kernel-type codes (index into :data:`KERNEL_TYPES`) of device rows ``idx``, shape ``(len(idx),)``.

    :func:`jobs.analyze.trace.kernel_types.kernel_types` (collective metadata, communication families,
    name rules), refined by the event category: ``gpu_memcpy``/``gpu_memset`` rows are MEMORY
    whatever their name, unless communication; a ``kernel`` row is MEMORY only when its name
    *starts* like a copy or set (``Memcpy…``, ``hipMemset…``, ``dma…``), so a compute kernel
    named ``_combined_routing_memset`` (vLLM) stays COMPUTATION, as in HTA.
    """
    if idx.size == 0:
        return np.zeros(0, np.int8)
    take = pa.array(idx, pa.int64())
    names = trace.names.take(take)
    if extra_comm_patterns:
        coll = trace.events.column("collective").take(take) if "collective" in trace.columns else None
        codes = kernel_types(names, coll, extra_comm_patterns)
    else:
        codes = trace.kernel_type_codes[idx]
    copy_cat = trace.category_in(_COPY_CATEGORIES)[idx]
    codes = np.where(copy_cat & (codes != _COMM), _MEM, codes)
    loose = (codes == _MEM) & ~copy_cat
    if loose.any():
        anchored = _memory_name_mask(names)
        codes = np.where(loose & ~anchored, _COMP, codes)
    return codes.astype(np.int8)


def _memory_name_mask(names) -> np.ndarray:
    arr = names.combine_chunks() if isinstance(names, pa.ChunkedArray) else names
    enc = pc.dictionary_encode(arr)
    hit = np.array([bool(n and _MEMORY_NAME.match(n)) for n in enc.dictionary.to_pylist()] + [False], bool)
    return hit[enc.indices.fill_null(len(enc.dictionary)).to_numpy(zero_copy_only=False).astype(np.int64)]


def kernel_table(trace: RankTrace | pa.Table, extra_comm_patterns: Sequence[str] = ()) -> pa.Table:
    """``kernels`` rows of one rank's capture.

    Args:
        trace: the capture's :class:`~jobs.analyze.trace.model.RankTrace`; or (convenience for tests
            and benchmarks) its EVENTS rows of ONE (job_id, attempt, rank, capture_id) (at least
            :data:`jobs.analyze.trace.model.REQUIRED_COLUMNS`; ``collective`` used when present),
            modelled first.
        extra_comm_patterns: more communication-kernel name regexes (case-insensitive search),
            e.g. for custom all-reduce kernels.

    Returns:
        Arrow table with exactly the KERNELS schema, one row per (step, name), sorted by step then
        name (0 rows when there is no device event). Times are the model's ns (exact unless it was
        built with HTA's µs rounding).

    Raises:
        ValueError: a required column is missing, or ``events`` mixes several captures/ranks.
    """
    trace = as_rank_trace(trace, who="kernel_table")
    if trace.n == 0:
        return KERNELS.empty()
    ident = trace.identity
    idx = kernel_rows(trace, trace.loaded)
    if idx.size == 0:
        return KERNELS.empty()
    step = np.where(trace.step[idx] == NO_STEP, -1, trace.step[idx])
    names = trace.names.take(pa.array(idx, pa.int64())).combine_chunks()
    enc = pc.dictionary_encode(names)
    name_code = enc.indices.fill_null(len(enc.dictionary)).to_numpy(zero_copy_only=False).astype(np.int64)
    dict_names = enc.dictionary.to_pylist() + [None]
    name_rank = np.empty(len(dict_names), np.int64)
    name_rank[np.argsort(np.array([x or "" for x in dict_names], dtype=object), kind="stable")] = np.arange(
        len(dict_names)
    )
    ours = type_codes(trace, idx, extra_comm_patterns)
    hta = hta_kernel_types(names)
    dur = trace.dur[idx]

    order = np.lexsort((name_code, name_rank[name_code], step))
    step, name_code, ours, hta, dur = step[order], name_code[order], ours[order], hta[order], dur[order]
    new = np.ones(idx.size, bool)
    new[1:] = (step[1:] != step[:-1]) | (name_code[1:] != name_code[:-1])
    starts = np.flatnonzero(new)
    n = np.diff(np.append(starts, idx.size))
    total = np.add.reduceat(dur, starts)
    mean = total / n
    sq = np.add.reduceat((dur.astype(np.float64) - np.repeat(mean, n)) ** 2, starts)
    comm_any = np.maximum.reduceat((ours == _COMM).astype(np.int8), starts).astype(bool)
    type_code = np.where(comm_any, _COMM, ours[starts])
    cols = {
        **{c: pa.array([ident[c]] * starts.size, KERNELS.arrow_schema().field(c).type) for c in IDENTITY},
        "step": pa.array(step[starts], pa.int64()),
        "name": pa.array([dict_names[k] or "" for k in name_code[starts]], pa.string()),
        "kernel_type": pa.array([KERNEL_TYPES[k] for k in type_code], pa.string()),
        "hta_kernel_type": pa.array([KERNEL_TYPES[k] for k in hta[starts]], pa.string()),
        "n": pa.array(n, pa.int64()),
        "total_ns": pa.array(total, pa.int64()),
        "min_ns": pa.array(np.minimum.reduceat(dur, starts), pa.int64()),
        "max_ns": pa.array(np.maximum.reduceat(dur, starts), pa.int64()),
        "mean_ns": pa.array(mean, pa.float64()),
        "std_ns": pa.array(np.sqrt(sq / n), pa.float64()),
    }
    return pa.table([cols[c] for c in KERNELS.names], schema=KERNELS.arrow_schema())
