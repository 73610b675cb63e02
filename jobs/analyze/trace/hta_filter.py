"""HTA 0.5.0's loading rules, applied to one rank's ``events`` (vectorized masks).

HTA does not analyze the raw trace: it first drops and filters rows. To reproduce its numbers we
apply the same rules to our ``events`` rows (``schemas.tables.EVENTS``). Sources are HTA 0.5.0
``hta/common/trace_parser.py`` (``_compress_df``, ``round_down_time_stamps``),
``hta/utils/utils.py`` (``normalize_gpu_stream_numbers``), ``hta/common/trace.py``
(``_filter_irrelevant_gpu_kernels``) and ``hta/common/trace_filter.py``
(``_filter_gpu_kernels_with_cuda_sync``):

1. **Loaded rows** (:func:`loaded_mask`): rows with a ``dur`` and a ``cat``, and ``cat != "Trace"``.
   (A negative ``dur`` in the trace — a profiler defect, ``bug_cases.md`` B06 — is already null in
   ``events``, see :mod:`jobs.normalize.kineto.parse`, so such rows are never loaded.)
2. **HTA stream** (:func:`hta_stream`): ``int(args["stream"])``, or −1 when absent or when
   ``int()`` fails (e.g. the string ``"0x0"`` that ROCm writes on ``hipMemcpyWithStream``).
   Every row with a stream other than −1 is a *GPU event* for HTA's temporal breakdown and
   overlap — including a ``cpu_op`` that carries ``args.stream`` (``triton_example``).
   One departure: in a trace where **no** device row (``is_gpu``, from its category) carries a
   stream — Intel XPU traces with empty ``deviceProperties`` (torch-xpu-ops #5284, #2247) — HTA sees
   no GPU work at all; there the device rows take our ``stream`` column, else their tid (the device
   thread), else 0. Traces with any device stream are read exactly as HTA reads them.
3. **Last-step filter** (:func:`last_step_keep_mask`), only when more than one distinct name
   containing ``ProfilerStep`` is present: HTA splits rows into a GPU side
   (``stream >= 0 and correlation >= 0``, or named ``Event Sync``/``Context Sync``) and a CPU
   side (everything else, which includes GPU-side ``gpu_user_annotation`` copies of
   ``ProfilerStep#N``). It keeps CPU-side rows that start before the **latest-starting**
   CPU-side ``ProfilerStep*`` row, and GPU-side rows whose ``correlation`` equals the
   correlation of a kept CPU-side row. ``correlation`` is ``args["correlation"]`` or −1.
4. **µs rounding** (:func:`hta_round_us`, optional): when the trace's timestamps have a fraction
   of a µs, HTA rounds every event inward, ``ts = ceil(ts)``, ``end = floor(ts + dur)``. We keep
   exact ns by default; this function exists so tests can show that rounding alone explains the
   remaining differences from HTA.

Deliberate differences (per-rank, not per-job): HTA decides rule 3 on the *job's* symbol table
(all ranks together); we decide it on the rank's own events. They differ only in a multi-rank job
where one rank has a single ``ProfilerStep`` name and another rank has several.
"""

from __future__ import annotations

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "loaded_mask",
    "hta_stream",
    "hta_correlation",
    "last_step_keep_mask",
    "hta_round_us",
    "profiler_step_name_mask",
]

_SYNC_NAMES = ["Event Sync", "Context Sync"]
_json = msgspec.json.Decoder()


def _np(col, dtype=None, fill=None) -> np.ndarray:
    """Arrow column → numpy, nulls replaced by ``fill``."""
    if fill is not None:
        col = pc.fill_null(col, fill)
    out = col.to_numpy(zero_copy_only=False) if hasattr(col, "to_numpy") else np.asarray(col)
    return out.astype(dtype) if dtype is not None else out


def loaded_mask(events: pa.Table) -> np.ndarray:
    """Rows HTA keeps at load: ``dur`` and ``cat`` present, ``cat != "Trace"``.

    Args:
        events: rows with at least ``dur_ns`` and ``raw_category`` (``cat`` as written).

    Returns:
        bool array of shape ``(n,)``.
    """
    cat = events.column("raw_category")
    ok = pc.and_(pc.is_valid(events.column("dur_ns")), pc.is_valid(cat))
    ok = pc.and_(ok, pc.not_equal(pc.fill_null(cat, ""), "Trace"))
    return _np(ok, bool)


def _int_like_python(v) -> int:
    """Python's ``int(v)`` as HTA applies it to ``args["stream"]``, −1 where it would fail."""
    if v is None or isinstance(v, (list, dict)):
        return -1
    try:
        return int(v)
    except (ValueError, TypeError, OverflowError):
        return -1


def _arg_values(args_json: pa.ChunkedArray | pa.Array, rows: np.ndarray, key: str) -> list:
    vals = []
    texts = args_json.take(pa.array(rows, pa.int64())).to_pylist()
    for t in texts:
        try:
            obj = _json.decode(t) if t else None
        except msgspec.DecodeError:
            obj = None
        vals.append(obj.get(key) if isinstance(obj, dict) else None)
    return vals


def hta_stream(events: pa.Table, hta_rule: bool = False) -> np.ndarray:
    """HTA's ``stream`` of every row: ``int(args["stream"])`` or −1 (and the XPU departure of the module doc).

    Rows whose ``args_json`` has no ``"stream"`` key get −1, even when our ``stream`` column is
    set from a ``"stream N"`` tid (legacy traces; HTA reads args only). Device rows (``is_gpu``)
    with the key take our ``stream`` column (or, when our parser could not read it, the raw value converted with
    Python's ``int()`` as HTA does). Host rows are −1 whatever their args say: a ``cpu_op`` with ``args.stream``
    (a Triton launcher) is host work; HTA counts such a row as GPU time, and so does ``hta_rule=True`` (reading
    the trace as HTA does, for comparisons with HTA only). Without an ``args_json`` column our ``stream`` column is
    used as is.

    Returns:
        int64 array of shape ``(n,)``.
    """
    stream = _np(events.column("stream"), np.int64, -1)
    if "args_json" not in events.column_names:
        return stream
    has_stream_col = _np(pc.is_valid(events.column("stream")), bool)
    is_gpu = _np(events.column("is_gpu"), bool, False)
    args = events.column("args_json")
    mentions = _np(pc.match_substring(pc.fill_null(args, ""), '"stream"'), bool)
    ours = stream
    stream = np.where(mentions, stream, -1)
    # rows whose args are read again: those the value of is HTA's; outside HTA's rule a host row ends −1 anyway
    recheck = np.flatnonzero(mentions & ~(is_gpu & has_stream_col) & (is_gpu | hta_rule))
    if recheck.size:
        stream[recheck] = [_int_like_python(v) for v in _arg_values(args, recheck, "stream")]
    if is_gpu.any() and not (mentions & is_gpu).any():  # device rows without any stream (XPU)
        tid = _np(events.column("tid"), np.int64, -1) if "tid" in events.column_names else np.full(len(ours), -1)
        fallback = np.where(has_stream_col, ours, np.where(tid >= 0, tid, 0))
        stream = np.where(is_gpu, fallback, stream)
    if hta_rule:  # reading the trace as HTA does, for comparisons with HTA only
        return stream
    # a host row whose args carry a stream (a Triton launcher's cpu_op with args.stream) is host work: the
    # category decides the side, never the arguments alone (issue 33; HTA counts such a row as GPU time)
    return np.where(is_gpu, stream, -1)


def hta_correlation(events: pa.Table) -> np.ndarray:
    """HTA's ``correlation``: ``args["correlation"]`` or −1 (int64, shape ``(n,)``).

    Our ``correlation`` column may hold a launch-flow id for device rows without
    ``args.correlation``; HTA does not see those, so they become −1 here.
    """
    corr = _np(events.column("correlation"), np.int64, -1)
    if "args_json" in events.column_names:
        mentions = _np(pc.match_substring(pc.fill_null(events.column("args_json"), ""), '"correlation"'), bool)
        corr = np.where(mentions, corr, -1)
    return corr


def profiler_step_name_mask(events: pa.Table) -> np.ndarray:
    """Rows whose name contains ``ProfilerStep`` (HTA's test, any category, CPU or GPU)."""
    return _np(pc.match_substring(pc.fill_null(events.column("name"), ""), "ProfilerStep"), bool)


def last_step_keep_mask(
    events: pa.Table, loaded: np.ndarray, stream: np.ndarray, corr: np.ndarray, ts_ns: np.ndarray
) -> np.ndarray:
    """HTA's last-step filter (``include_last_profiler_step=False``).

    Args:
        events: the rank's rows (``name`` is read).
        loaded: :func:`loaded_mask`; rows outside it are never kept.
        stream: :func:`hta_stream`.
        corr: :func:`hta_correlation`.
        ts_ns: start of every row, ns (possibly µs-rounded, see :func:`hta_round_us`).

    Returns:
        bool array of shape ``(n,)``: the rows HTA keeps. Equal to ``loaded`` when the rank has at
        most one distinct ``ProfilerStep`` name, or no CPU-side one (HTA would then compare with
        NaN and drop every row; we keep them instead).
    """
    step_named = profiler_step_name_mask(events) & loaded
    if step_named.sum() == 0:
        return loaded.copy()
    names = events.column("name").filter(pa.array(step_named))
    if len(pc.unique(names)) <= 1:
        return loaded.copy()
    is_sync = _np(pc.is_in(pc.fill_null(events.column("name"), ""), pa.array(_SYNC_NAMES)), bool)
    gpu_side = ((stream >= 0) & (corr >= 0)) | is_sync
    cpu_side = loaded & ~gpu_side
    cpu_steps = cpu_side & step_named
    if not cpu_steps.any():
        return loaded.copy()
    last_start = ts_ns[cpu_steps].max()
    keep_cpu = cpu_side & (ts_ns < last_start)
    keep_gpu = loaded & gpu_side & np.isin(corr, np.unique(corr[keep_cpu]))
    return keep_cpu | keep_gpu


def hta_round_us(ts_ns: np.ndarray, dur_ns: np.ndarray, offset_ns: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """HTA's inward µs rounding of sub-µs traces: ``ts = ceil(ts)``, ``end = floor(ts + dur)``.

    HTA does this on the trace's own float µs values (``json.loads`` doubles), so we rebuild
    those doubles: ``(ts_ns - offset_ns) / 1000`` correctly rounded, where ``offset_ns`` is the
    trace's ``baseTimeNanoseconds`` (0 for traces written with absolute µs). On absolute-µs
    traces (about 1.7e15 µs) a double has a 0.25 µs spacing, and HTA inherits that error; this
    reproduces it. Applied only when some ``ts_ns`` is not a whole µs (HTA rounds only when its
    ``ts`` column is float).

    Args:
        ts_ns, dur_ns: int64 arrays of shape ``(n,)``, ns.
        offset_ns: ns subtracted before the conversion to µs (the trace's time base).

    Returns:
        ``(ts_ns, dur_ns)`` rounded (int64, whole µs; ``dur`` may be negative for sub-µs events,
        as in HTA), or the inputs unchanged.
    """
    ts_ns = np.asarray(ts_ns, dtype=np.int64)
    dur_ns = np.asarray(dur_ns, dtype=np.int64)
    rel = ts_ns - np.int64(offset_ns)
    if not np.any(rel % 1000):
        return ts_ns, dur_ns
    ts_us = (rel // 1000).astype(np.float64) + (rel % 1000) / 1000.0
    dur_us = (dur_ns // 1000).astype(np.float64) + (dur_ns % 1000) / 1000.0
    ts_r = np.ceil(ts_us)
    end_r = np.floor(ts_us + dur_us)
    return ts_r.astype(np.int64) * 1000 + np.int64(offset_ns), (end_r - ts_r).astype(np.int64) * 1000
