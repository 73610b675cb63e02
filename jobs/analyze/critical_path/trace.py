"""What the critical-path graph (:mod:`jobs.analyze.critical_path.graph`) needs of one rank, derived from its model.

:func:`path_trace` derives from the rank's :class:`~jobs.analyze.trace.model.RankTrace` (no second
Arrow → numpy conversion of the columns the model holds) a :class:`PathTrace`: the graph's rows,
int64 ns columns sorted by ``event_id`` (HTA's event index), with the launch
linkage HTA calls ``index_correlation`` resolved to row positions, CUDA-event bookkeeping
(``cudaEventRecord`` → previous launch on the recorded stream, ``cudaStreamWaitEvent`` → next
launch on the waiting stream) and per-stream launch-queue lengths. Everything here is computed once
per rank; each step window then only clips and builds its graph.

Two modes (the only differences):

* ``hta_compat=True`` reproduces HTA 0.5.0 exactly (``hta/common/trace.py``
  ``transform_correlation_to_index``, ``hta/analyzers/trace_counters.py``
  ``_get_queue_length_time_series_for_rank``, ``hta/analyzers/critical_path_analysis.py``
  ``_get_cuda_event_record_df`` / ``_get_cuda_stream_wait_event_df``): rows HTA loads
  (:mod:`jobs.analyze.trace.hta_filter`, including its last-step filter), ``stream``/``correlation``
  read from ``args`` as HTA does, categories as written (``cpu_op``, ``cuda_runtime``,
  ``cuda_driver``), launches = HTA's list of runtime names, and a launch linked to its *last*
  GPU row only (so a ``cudaGraphLaunch`` keeps one of its kernels, HTA's behaviour).
* ``hta_compat=False`` (product): every ``events`` row with a duration that is not negative
  (``bug_cases.md`` B06: a negative duration is a profiler defect, never a path edge); normalized categories
  (legacy ``Operator``/``Runtime`` included); a launch is any CPU runtime/driver call correlated
  with a kernel, memcpy or memset, and **every** GPU row of a launch is linked to it (all kernels
  of a ``cudaGraphLaunch``); one queue entry per (launch, stream). Launches and device rows are
  linked on :func:`jobs.normalize.kineto.linkage.correlation_link_keys` (``(pid, correlation)`` for ids
  that several ranks of a merged file reuse, B19).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.analyze.hta.host_time import DATALOADER_PATTERNS
from jobs.analyze.trace.kernel_types import COMMUNICATION, KERNEL_TYPES, hta_kernel_type
from jobs.analyze.trace.model import RankTrace, as_rank_trace
from jobs.normalize.kineto.linkage import correlation_link_keys, track_codes

__all__ = ["PathTrace", "path_trace", "CPU_NODE_CATEGORIES", "HTA_LAUNCH_NAMES", "BLOCKING_CALLS", "REQUIRED_COLUMNS"]

#: EVENTS columns read (``args_json`` optional: without it ``cuda_sync`` wait links are unknown).
REQUIRED_COLUMNS = (
    "event_id",
    "ph",
    "category",
    "raw_category",
    "name",
    "ts_ns",
    "dur_ns",
    "pid",
    "tid",
    "stream",
    "is_gpu",
    "correlation",
)
#: Categories whose rows become graph nodes on CPU threads (HTA ``get_operator_or_cuda_runtime_query``).
CPU_NODE_CATEGORIES = ("cpu_op", "cuda_runtime", "cuda_driver")
#: HTA 0.5.0 ``get_runtime_launch_events_query`` names.
HTA_LAUNCH_NAMES = (
    "cudaLaunchKernel",
    "cudaLaunchKernelExC",
    "cuLaunchKernel",
    "cudaMemcpyAsync",
    "cudaMemsetAsync",
    "runFunction - job_prep_and_submit_for_execution",
    "hipLaunchKernel",
    "hipExtModuleLaunchKernel",
    "hipMemsetAsync",
    "hipMemcpyAsync",
    "hipMemcpyWithStream",
)
#: HTA ``CPGraph.BLOCKING_SYNC_CALLS``: their own duration gets weight 0 on the path.
BLOCKING_CALLS = (
    "cudaDeviceSynchronize",
    "cudaStreamSynchronize",
    "cudaEventQuery",
    "cudaEventSynchronize",
    "cudaMemcpy",
    "cudaMemcpyAsync",
)
_GPU_SIDE_SYNC = ("Event Sync", "Context Sync")  # cuda_sync rows on stream -1 that HTA puts on the GPU side
_json = msgspec.json.Decoder()
_NO_ID = -(2**40)  # pid/tid key of a row whose pid/tid is null (before the process/thread name fallback)


@dataclass
class PathTrace:
    """Columns of one rank's events, row order = ``event_id`` order (HTA's index order).

    All times are int64 ns. ``link`` is HTA's ``index_correlation`` as a row position (-1 = none).
    Arrays have shape ``(n,)`` unless stated.

    Attributes:
        event_id, ts, dur, end: ids and times; ``dur`` >= 0 is not enforced (HTA keeps negatives).
        stream: CUDA stream (-1 = CPU side, HTA's ``stream``).
        corr: correlation id (-1 = none).
        pid: process id / device (HTA's ``pid``), thread: dense code of (pid, tid).
        name_code, names: dictionary codes and the distinct names (``names[name_code[i]]``).
        node_cat: row is a cpu_op / cuda_runtime / cuda_driver (a CPU graph node when clipped).
        sync_cat: row is a ``cuda_sync`` event. sync_kind: 0 none, 1 Stream Sync, 2 Context Sync,
            3 Event Sync, 4 Stream Wait Event.
        is_blocking: name is one of :data:`BLOCKING_CALLS`.
        gpu_side: HTA's GPU-side rows ((stream >= 0 and corr >= 0) or Event/Context Sync).
        link: for a CPU row, the GPU row it launched (HTA: the last one); for a GPU row, its launch.
        launch_of: for a GPU row, its launching call when that call counts as a launch (HTA's list
            of launch names in compat mode; any runtime/driver call otherwise), else -1.
        q_runtime, q_kernel: launch-queue length of the GPU row's stream right after its launch was
            counted and right after it started (HTA ``queue_length_runtime`` / ``queue_length``);
            -1 when not defined (no launch; product mode: not the first kernel of its launch).
        prev_launch_of_record: ``cudaEventRecord`` correlation -> kernel row launched last on the
            recorded stream before it (dict).
        next_kernel_of_wait: ``cudaStreamWaitEvent`` row -> first kernel launched after it on the
            same thread and waiting stream (dict).
        wait_corr: ``args.wait_on_cuda_event_record_corr_id`` (-1 none).
        comm: GPU row is a communication kernel (HTA name rule in compat mode, ours otherwise).
        data_loading: row is a data-loader annotation/op (name rule, :data:`DATA_LOADING_PATTERN`).
        is_wait_event_row: a ``Stream Wait Event`` row on a stream. is_gpu: ``events.is_gpu``.
        flags: notes about the input (e.g. ``no_cuda_sync_events``).
    """

    n: int
    event_id: np.ndarray
    ts: np.ndarray
    dur: np.ndarray
    end: np.ndarray
    stream: np.ndarray
    corr: np.ndarray
    pid: np.ndarray
    thread: np.ndarray
    name_code: np.ndarray
    names: list
    node_cat: np.ndarray
    sync_cat: np.ndarray
    sync_kind: np.ndarray
    is_blocking: np.ndarray
    gpu_side: np.ndarray
    link: np.ndarray
    launch_of: np.ndarray
    q_runtime: np.ndarray
    q_kernel: np.ndarray
    prev_launch_of_record: dict
    next_kernel_of_wait: dict
    wait_corr: np.ndarray
    comm: np.ndarray
    data_loading: np.ndarray
    is_wait_event_row: np.ndarray
    is_gpu: np.ndarray
    hta_compat: bool
    flags: set = field(default_factory=set)


#: Names of data-loading work: the project's definition (:data:`jobs.analyze.hta.host_time.DATALOADER_PATTERNS`,
#: case-insensitive); CPU time under such an event is attributed to ``data_loading``.
DATA_LOADING_PATTERN = "|".join(f"(?:{p})" for p in DATALOADER_PATTERNS)


def _np(col, dtype, fill) -> np.ndarray:
    return pc.fill_null(col, fill).to_numpy(zero_copy_only=False).astype(dtype, copy=False)


def _bool(col) -> np.ndarray:
    return pc.fill_null(col, False).to_numpy(zero_copy_only=False).astype(bool, copy=False)


def _name_mask(code: np.ndarray, names: list, wanted) -> np.ndarray:
    wanted = set(wanted)
    per = np.array([nm in wanted for nm in names] + [False], bool)
    return per[code]


def path_trace(
    trace: RankTrace | pa.Table, *, hta_compat: bool = False, hta_us_rounding: bool = False, time_base_ns: int = 0
) -> PathTrace:
    """The :class:`PathTrace` of one rank, derived from its :class:`~jobs.analyze.trace.model.RankTrace`.

    The columns the model already holds (times, stream, correlation, names, categories, HTA's
    loading rules) are reused, not read again from Arrow.

    Args:
        trace: the rank's model (its times are used as they are: exact ns, or µs-rounded when it
            was built with ``hta_us_rounding``); or (convenience for tests and benchmarks) EVENTS rows
            of ONE (job, attempt, rank, capture), any row order, with at least :data:`REQUIRED_COLUMNS`
            and :data:`jobs.analyze.trace.model.REQUIRED_COLUMNS` (``args_json`` used when present),
            modelled first.
        hta_compat: reproduce HTA 0.5.0 (see the module docstring).
        hta_us_rounding: for an events table, with ``hta_compat``: round sub-µs times inward as
            HTA does (:func:`jobs.analyze.trace.hta_filter.hta_round_us`).
        time_base_ns: the trace's ``baseTimeNanoseconds`` for that rounding.

    Raises:
        ValueError: a required column is missing.
    """
    rounding = (hta_compat and hta_us_rounding) if isinstance(trace, pa.Table) else None  # a model keeps its own
    trace = as_rank_trace(trace, REQUIRED_COLUMNS, "critical path", hta_us_rounding=rounding, time_base_ns=time_base_ns)
    events = trace.events
    # Work on numpy columns in the table's order; move to event_id order with one permutation
    # (taking the whole table, args_json included, would cost more than the analysis).
    eid_orig = trace.event_id
    order = np.argsort(eid_orig, kind="stable") if (np.diff(eid_orig) < 0).any() else np.arange(len(eid_orig))
    flags: set = set()
    pid_all = np.where(trace.pid_null, _NO_ID, trace.device)
    if hta_compat:
        loaded = trace.loaded
        stream_all = trace.hta_stream
        corr_all = trace.hta_correlation
        ccode_all, cvals = trace.raw_category_codes
    else:
        loaded = trace.is_x & trace.has_dur & (trace.dur >= 0)
        stream_all = np.where(trace.is_gpu, trace.stream, -1)
        corr_all = trace.correlation
        ccode_all, cvals = trace.category_codes
    ts_all, dur_all = trace.ts, trace.dur
    if hta_compat:
        link_key = corr_all
    else:  # B19: ids reused by the ranks of a merged file are keyed by (pid, correlation)
        link_key, _ = correlation_link_keys(corr_all, corr_all >= 0, pid_all, ~trace.is_gpu)
    names = trace.symbols
    code_all = trace.name_code
    keep = trace.hta_keep if hta_compat else loaded
    # event_id order from here on
    loaded, keep, stream_all, corr_all, ts_all, dur_all, code_all, link_key = (
        a[order] for a in (loaded, keep, stream_all, corr_all, ts_all, dur_all, code_all, link_key)
    )

    # HTA links launches and GPU rows over the loaded rows, before its last-step filter.
    gside_all = ((stream_all >= 0) & (corr_all >= 0)) | _name_mask(code_all, names, _GPU_SIDE_SYNC)
    rows = np.flatnonzero(loaded)
    link_loaded = _hta_links(link_key[rows], gside_all[rows])
    kept_rows = np.flatnonzero(keep)
    pos_in_kept = np.full(len(ts_all), -1, np.int64)
    pos_in_kept[kept_rows] = np.arange(len(kept_rows))
    link_all = np.full(len(ts_all), -1, np.int64)
    ok = link_loaded >= 0
    link_all[rows[ok]] = rows[link_loaded[ok]]
    sel = kept_rows
    n = len(sel)
    link = link_all[sel]
    link = np.where(link >= 0, pos_in_kept[np.maximum(link, 0)], -1)
    src = order[sel]  # original table positions of the kept rows, in event_id order

    ts, dur = ts_all[sel], dur_all[sel]
    stream, corr, code = stream_all[sel], corr_all[sel], code_all[sel]
    ccode = ccode_all[src]
    node_cat = _name_mask(ccode, cvals, CPU_NODE_CATEGORIES)
    sync_cat = _name_mask(ccode, cvals, ("cuda_sync",))
    sync_kind = np.zeros(n, np.int8)
    for k, nm in enumerate(("Stream Sync", "Context Sync", "Event Sync", "Stream Wait Event"), start=1):
        sync_kind[_name_mask(code, names, (nm,))] = k
    if not sync_cat.any():
        flags.add("no_cuda_sync_events")
    tid_col = events.column("tid")
    pid = pid_all.copy()
    tid = _np(tid_col, np.int64, _NO_ID).copy()
    for isnull, key, arr in ((trace.pid_null, "process_name", pid), (_bool(pc.is_null(tid_col)), "thread_name", tid)):
        if isnull.any() and key in events.column_names:
            nc = (
                pc.dictionary_encode(pc.fill_null(events.column(key), ""))
                .combine_chunks()
                .indices.to_numpy(zero_copy_only=False)
                .astype(np.int64)
            )
            arr[isnull] = -(2**41) - nc[isnull]
    pid, tid = pid[src], tid[src]
    thread = track_codes(track_codes(pid, tid), trace.is_gpu[src].astype(np.int64))  # host and device never share

    wait_stream = np.full(n, -1, np.int64)
    wait_corr = np.full(n, -1, np.int64)
    if "args_json" in events.column_names and sync_cat.any():
        srow = np.flatnonzero(sync_cat)
        texts = events.column("args_json").take(pa.array(src[srow], pa.int64())).to_pylist()
        for i, t in zip(srow.tolist(), texts):
            try:
                a = _json.decode(t) if t else None
            except msgspec.DecodeError:
                a = None
            if isinstance(a, dict):
                wait_stream[i] = _as_int(a.get("wait_on_stream"))
                wait_corr[i] = _as_int(a.get("wait_on_cuda_event_record_corr_id"))

    is_blocking = _name_mask(code, names, BLOCKING_CALLS)
    gpu_side = gside_all[sel]
    if hta_compat:
        comm_names = np.array([hta_kernel_type(nm) == COMMUNICATION for nm in names] + [False], bool)
        comm = comm_names[code]
    else:
        comm = (trace.kernel_type_codes == KERNEL_TYPES.index(COMMUNICATION))[src]
    comm &= stream >= 0
    dl_re = re.compile(DATA_LOADING_PATTERN, re.IGNORECASE)
    dl_names = np.array([bool(dl_re.search(nm)) for nm in names] + [False], bool)
    data_loading = dl_names[code]

    # launches: CPU rows linked to GPU work
    if hta_compat:
        is_launch = _name_mask(code, names, HTA_LAUNCH_NAMES) & (link >= 0)
    else:
        cat_rt = _name_mask(ccode, cvals, ("cuda_runtime", "cuda_driver"))
        is_launch = cat_rt & (link >= 0)
    is_launch &= ~gpu_side
    # launch_of: GPU row -> its launch row (when that launch is a launch call)
    launch_of = np.full(n, -1, np.int64)
    g = np.flatnonzero(gpu_side & (link >= 0))
    lk = link[g]
    good = is_launch[lk]
    launch_of[g[good]] = lk[good]
    if hta_compat:
        # HTA's queue joins launches and GPU rows on the correlation value (all GPU rows of it).
        corr_launch = np.unique(corr[is_launch])
        gq = np.flatnonzero((stream != -1) & np.isin(corr, corr_launch) & (corr >= 0))
        lq = _first_by_key(corr[is_launch], np.flatnonzero(is_launch), corr[gq])
        q_runtime, q_kernel = _queue_lengths(ts, stream, gq, lq, per_launch_group=False)
    else:
        gq = np.flatnonzero((launch_of >= 0) & (stream != -1) & ~sync_cat)
        q_runtime, q_kernel = _queue_lengths(ts, stream, gq, launch_of[gq], per_launch_group=True)

    is_wait_row = (sync_kind == 4) & (stream != -1)
    prev_rec, next_wait = _event_tables(
        ts,
        stream,
        pid,
        thread,
        corr,
        link,
        launch_of,
        is_launch,
        wait_stream,
        wait_corr,
        code,
        names,
        gpu_side,
        sync_cat,
        hta_compat,
    )
    return PathTrace(
        n=n,
        event_id=eid_orig[src],
        ts=ts,
        dur=dur,
        end=ts + dur,
        stream=stream,
        corr=corr,
        pid=pid,
        thread=thread,
        name_code=code,
        names=names,
        node_cat=node_cat,
        sync_cat=sync_cat,
        sync_kind=sync_kind,
        is_blocking=is_blocking,
        gpu_side=gpu_side,
        link=link,
        launch_of=launch_of,
        q_runtime=q_runtime,
        q_kernel=q_kernel,
        prev_launch_of_record=prev_rec,
        next_kernel_of_wait=next_wait,
        wait_corr=wait_corr,
        comm=comm,
        data_loading=data_loading,
        is_wait_event_row=is_wait_row,
        is_gpu=trace.is_gpu[src],
        hta_compat=hta_compat,
        flags=flags,
    )


def _as_int(v) -> int:
    if isinstance(v, bool) or v is None:
        return -1
    try:
        return int(v)
    except (TypeError, ValueError):
        return -1


def _first_by_key(keys: np.ndarray, vals: np.ndarray, query: np.ndarray) -> np.ndarray:
    """For each query key, the value of the last (largest ``vals``) entry with that key, else -1."""
    if len(keys) == 0:
        return np.full(len(query), -1, np.int64)
    o = np.lexsort((vals, keys))
    k, v = keys[o], vals[o]
    last = np.ones(len(k), bool)
    last[:-1] = k[1:] != k[:-1]
    k, v = k[last], v[last]
    j = np.searchsorted(k, query)
    j = np.minimum(j, len(k) - 1)
    return np.where(k[j] == query, v[j], -1)


def _hta_links(corr: np.ndarray, gside: np.ndarray) -> np.ndarray:
    """HTA ``transform_correlation_to_index`` on loaded rows: positions, -1 when unlinked.

    CPU rows (not GPU side, correlation != -1) link to the last GPU-side row with the same
    correlation; GPU-side rows to the last CPU row with it (HTA's ``df.loc`` assignment: last wins).
    Both modes use it; the product mode then treats every GPU row of a launch via ``launch_of``.
    """
    n = len(corr)
    link = np.full(n, -1, np.int64)
    has = corr != -1
    cpu = np.flatnonzero(has & ~gside)
    gpu = np.flatnonzero(has & gside)
    if len(cpu) and len(gpu):
        link[cpu] = _first_by_key(corr[gpu], gpu, corr[cpu])
        link[gpu] = _first_by_key(corr[cpu], cpu, corr[gpu])
    return link


def _queue_lengths(ts, stream, gq, lq, per_launch_group: bool):
    """HTA launch-queue length per stream: +1 at each launch, -1 at each GPU row start.

    Args:
        gq: GPU rows counted; lq: their launch rows (same length, -1 = none -> not counted).
        per_launch_group: count one queue entry per (launch, stream) (product mode: a graph launch
            is one entry, decremented by its first kernel); rows that are not the first of their
            group get -1 (no launch edge possible).

    Returns:
        (q_runtime, q_kernel) int64 arrays of shape ``(n,)``: queue length right after the row's
        launch was counted, and right after the row started; -1 where not defined.
    """
    n = len(ts)
    q_rt = np.full(n, -1, np.int64)
    q_k = np.full(n, -1, np.int64)
    ok = lq >= 0
    gq, lq = gq[ok], lq[ok]
    if not len(gq):
        return q_rt, q_k
    s = stream[gq]
    if per_launch_group:
        o = np.lexsort((ts[gq], gq, s, lq))
        gq, lq, s = gq[o], lq[o], s[o]
        first = np.ones(len(gq), bool)
        first[1:] = (lq[1:] != lq[:-1]) | (s[1:] != s[:-1])
        rest = gq[~first]
        gq, lq, s = gq[first], lq[first], s[first]
    else:
        rest = np.zeros(0, np.int64)
    m = len(gq)
    # entries: launches (+1, kind 0) then GPU rows (-1, kind 1); sorted by (stream, ts, kind)
    ent_t = np.concatenate((ts[lq], ts[gq]))
    ent_s = np.concatenate((s, s))
    ent_kind = np.concatenate((np.zeros(m, np.int8), np.ones(m, np.int8)))
    ent_d = np.concatenate((np.ones(m, np.int64), -np.ones(m, np.int64)))
    ent_i = np.concatenate((np.arange(m), np.arange(m)))
    o = np.lexsort((ent_i, ent_kind, ent_t, ent_s))
    cum = np.cumsum(ent_d[o])
    qv = np.empty(2 * m, np.int64)
    qv[o] = cum
    # cumsum is global across streams: each stream's entries are balanced (+1 and -1 per row)
    q_rt[gq] = qv[:m]
    q_k[gq] = qv[m:]
    if len(rest):
        q_rt[rest] = -1
        q_k[rest] = -1
    return q_rt, q_k


def _event_tables(
    ts,
    stream,
    pid,
    thread,
    corr,
    link,
    launch_of,
    is_launch,
    wait_stream,
    wait_corr,
    code,
    names,
    gpu_side,
    sync_cat,
    hta_compat,
):
    """HTA ``_get_cuda_event_record_df`` and ``_get_cuda_stream_wait_event_df``.

    Returns:
        ``(prev_rec, next_wait)``: ``{record correlation: kernel row}`` for every ``cudaEventRecord``
        whose recorded stream is known (from the waiting side's ``wait_on_stream``), the kernel
        launched last (by launch ts) on that (device, stream) at or before the record; and
        ``{cudaStreamWaitEvent row: kernel row}``, the first kernel launched at or after the wait by
        the same thread onto the waiting stream.
    """
    prev_rec: dict = {}
    next_wait: dict = {}
    lrows = np.flatnonzero(is_launch)
    if not len(lrows):
        return prev_rec, next_wait
    # one entry per launch: its (last) linked GPU row; product mode: per GPU row of the launch
    if hta_compat:
        l_launch, l_kernel = lrows, link[lrows]
        okk = stream[l_kernel] != -1
        l_launch, l_kernel = l_launch[okk], l_kernel[okk]
    else:
        k = np.flatnonzero(launch_of >= 0)
        k = k[~sync_cat[k]]
        l_launch, l_kernel = launch_of[k], k
    if not len(l_launch):
        return prev_rec, next_wait
    o = np.lexsort((l_kernel, ts[l_launch]))
    l_launch, l_kernel = l_launch[o], l_kernel[o]
    l_ts, l_stream, l_gpu, l_thread = ts[l_launch], stream[l_kernel], pid[l_kernel], thread[l_launch]

    by_gpu_stream = _group_positions(l_gpu, l_stream)
    by_thread_stream = _group_positions(l_thread, l_stream)

    rec_code = _code_of(names, "cudaEventRecord")
    if rec_code is not None:
        w = np.flatnonzero(wait_stream > -1)
        rec_stream: dict = {}
        for i in w.tolist():
            rec_stream.setdefault(int(wait_corr[i]), (int(pid[i]), int(wait_stream[i])))
        recs = np.flatnonzero(code == rec_code)
        for r in recs.tolist():
            key = rec_stream.get(int(corr[r]))
            m = by_gpu_stream.get(key) if key is not None else None
            if m is None:
                continue
            j = np.searchsorted(l_ts[m], ts[r], side="right") - 1
            if j >= 0:
                prev_rec[int(corr[r])] = int(l_kernel[m[j]])
    wcode = _code_of(names, "cudaStreamWaitEvent")
    if wcode is not None and _code_of(names, "Stream Wait Event") is not None:
        waits = np.flatnonzero((code == wcode) & (link >= 0))
        for wr in waits.tolist():
            gw = link[wr]
            if stream[gw] == -1:
                continue
            m = by_thread_stream.get((int(thread[wr]), int(stream[gw])))
            if m is None:
                continue
            j = np.searchsorted(l_ts[m], ts[wr], side="right")
            # HTA: ties sort launches before the wait, so a launch at the same ts is "before" it
            if j < len(m):
                next_wait[int(wr)] = int(l_kernel[m[j]])
    return prev_rec, next_wait


def _group_positions(a: np.ndarray, b: np.ndarray) -> dict:
    """``{(a, b): positions}`` (positions in their original, ascending order) for two int keys."""
    if not len(a):
        return {}
    o = np.lexsort((np.arange(len(a)), b, a))
    ka, kb = a[o], b[o]
    cut = np.flatnonzero((ka[1:] != ka[:-1]) | (kb[1:] != kb[:-1])) + 1
    lo = np.concatenate(([0], cut))
    hi = np.concatenate((cut, [len(o)]))
    return {(int(ka[x]), int(kb[x])): o[x:y] for x, y in zip(lo.tolist(), hi.tolist())}


def _code_of(names: list, name: str):
    try:
        return names.index(name)
    except ValueError:
        return None
