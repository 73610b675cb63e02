"""Vectorized normalization passes: the accumulated columns of one Kineto trace -> the ``events`` table.

:func:`normalize_columns` runs the passes in order over the arrays of
:class:`~jobs.normalize.kineto.columns.EventColumns` (filled by the C scanner of
:mod:`jobs.normalize.kineto.native` or by the msgspec decode of :mod:`jobs.normalize.kineto.parse`; both
paths share these passes, so they give equal tables): the flags raised while decoding and the time base
(``_open_rows``), ``B``/``E`` duration events paired (``_begin_end``), exact int64 ns times (``_times``),
categories normalized across format generations (``_categories``), tracks and their names (``_tracks``), device
and stream (``_device_and_stream``), device events clipped where they overrun the next on their stream
(``_clip_stream_overlaps``), slice nesting (``_nesting``), flow binding and correlation ids (``_flows``),
ProfilerStep attribution and the launch-link flags (``_step_attribution``), collective fields (``_collectives``),
then the output columns
(``_event_columns``), the capture metadata (``_capture_meta``) and the cast to the EVENTS schema
(``_to_schema``). The linking algorithms are in :mod:`jobs.normalize.kineto.linkage`.

Every pass reads arrays of the :class:`_Rows` state and adds its own (times int64 ns on the capture's clock);
arrays are dropped as soon as no later pass needs them (peak RSS is a product target). The data-quality
flags raised here are listed in :data:`jobs.normalize.kineto.parse.FLAGS`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.normalize.errors import TraceError
from jobs.normalize.kineto.columns import B, E, EventColumns, X, bool_np, int_and_mask, take_arrow
from jobs.normalize.kineto.linkage import (
    SliceIndex,
    bind_flows,
    correlation_link_keys,
    count_early_launches,
    external_id_links,
    last_step_truncated,
    pair_begin_end,
    profiler_steps,
    time_links,
    track_codes,
)
from jobs.normalize.kineto.numbers import to_int64
from jobs.normalize.kineto.stream import Repairs
from jobs.normalize.profiler_warnings import kineto_warnings
from schemas.tables import EVENTS

__all__ = ["normalize_columns", "EVENT_COLUMNS", "CATEGORY_ALIASES", "GPU_CATEGORIES"]

#: Columns produced by :func:`jobs.normalize.kineto.parse.parse_kineto` (EVENTS minus identity/partition
#: columns), in order.
EVENT_COLUMNS: tuple[str, ...] = tuple(
    n for n in EVENTS.names if n not in ("date", "job_id", "attempt", "rank", "capture_id")
)
_SCHEMA = pa.schema([EVENTS.arrow_schema().field(n) for n in EVENT_COLUMNS])

#: Legacy (2020/21) category names -> current names (kineto ActivityType.cpp, 2021-06 rename;
#: ``gpu_user_Annotation`` typo fixed 2022-05).
CATEGORY_ALIASES = {
    "Operator": "cpu_op",
    "Runtime": "cuda_runtime",
    "Kernel": "kernel",
    "Memcpy": "gpu_memcpy",
    "Memset": "gpu_memset",
    "gpu_user_Annotation": "gpu_user_annotation",
}
#: Normalized categories of device-side activity (rows on GPU/accelerator timelines).
GPU_CATEGORIES = frozenset(
    {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "cuda_sync", "mtia_ccp_events", "hpu_op"}
)
#: NCCL/RCCL kernel-name operation -> collective name (used when the kernel has no args).
_NCCL_OPS = {
    "allreduce": "allreduce",
    "allgather": "allgather",
    "reducescatter": "reduce_scatter",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "sendrecv": "sendrecv",
    "send": "send",
    "recv": "recv",
    "alltoall": "all_to_all",
    "alltoallv": "all_to_all",
}
_NCCL_RE = r"(?i)^(?:nccl|rccl)(?:dev)?kernel_([a-z]+)"  # any case: nccldevkernel_* too (B16)
_NCCL_NAME = re.compile(_NCCL_RE)
_LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")
_DEVICE_ACTIVITY = ("kernel", "gpu_memcpy", "gpu_memset")
_PH_BYTES = np.frombuffer(b"XiC", np.uint8)
#: Names of the host calls that put work on a device (cudaLaunchKernel, hipExtLaunchKernel, hipMemcpyAsync, …).
_LAUNCH_CALL = "launch|memcpy|memset"


def _no_tick(label: str) -> None:
    """Default checkpoint of :func:`normalize_columns`: does nothing."""


def normalize_columns(
    cols: EventColumns,
    header,
    is_list: bool,
    container: str,
    size: int,
    repairs: Repairs | None = None,
    tick: Callable[[str], None] = _no_tick,
) -> tuple[pa.Table, dict]:
    """The accumulated columns of one trace -> ``(events, meta)``, as a sequence of vectorized passes.

    Args:
        cols: the per-chunk columns of every event (consumed: each pass pops what it reads).
        header: the decoded top-level object (:class:`~jobs.normalize.kineto.shapes.Header`), None for a
            bare-list trace.
        is_list: the document is a bare list (2020 writer, Kineto §2.8).
        container: ``"gzip"`` or ``"json"``; size: decoded document size, bytes.
        repairs: lenient repairs made while decoding (B01/B02), or None.
        tick: called with a checkpoint label between groups of passes (development timing,
            ``TRACELAKE_PARSE_PROFILE`` in :mod:`jobs.normalize.kineto.parse`).

    Returns:
        ``(events, meta)``: the ``pyarrow.Table`` of :data:`EVENT_COLUMNS` (EVENTS types; times int64 ns
        on the capture's clock) and the capture-level ``meta`` dict described at
        :class:`jobs.normalize.kineto.parse.ParsedTrace`.

    Each pass reads arrays of the :class:`_Rows` state and adds its own; the passes are shared by the
    native and the pure-Python paths, so both give equal tables. Arrays are dropped as soon as no later
    pass needs them (peak RSS is a product target).

    Raises:
        TraceError: no event has a valid numeric ``ts``, or ``baseTimeNanoseconds`` moves a timestamp
            out of the int64 ns range.
    """
    tick("finish-start")
    r = _open_rows(cols, header, is_list, repairs)
    _begin_end(r)
    _times(r)
    _categories(r)
    _tracks(r)
    _device_and_stream(r)
    _clip_stream_overlaps(r)
    tick("finish-ids")
    slices = _nesting(r)
    tick("finish-nesting")
    _flows(r, slices)
    del slices
    tick("finish-flows")
    _step_attribution(r)
    _collectives(r)
    tick("finish-misc")
    out = _event_columns(r)
    meta = _capture_meta(r, container, size, repairs)
    # free the intermediates before the casts below allocate (peak RSS is a product target)
    del r, cols
    table = _to_schema(out)
    tick("finish-table")
    return table, meta


@dataclass(slots=True)
class _Rows:
    """State handed from pass to pass in :func:`normalize_columns`: per-row arrays aligned with the output
    rows.

    Set by :func:`_open_rows`: ``cols``, ``header``, ``flags`` (set of
    :data:`~jobs.normalize.kineto.parse.FLAGS` keys), ``counts`` (flag → count), ``fmt`` (``list-2020`` /
    ``object``), ``base_ns`` / ``has_base`` (``baseTimeNanoseconds``). Every other field is set by the pass
    that names it in its docstring; numpy arrays have one element per output row (``n``) unless said
    otherwise; times are int64 ns.
    """

    cols: EventColumns
    header: object
    flags: set
    counts: dict
    fmt: str
    base_ns: int
    has_base: bool
    # _times
    n: int = field(init=False)
    rows: np.ndarray = field(init=False)
    row_ph: np.ndarray = field(init=False)
    ts_rel: np.ndarray = field(init=False)
    ts_ns: np.ndarray = field(init=False)
    dur_ns: np.ndarray = field(init=False)
    dur_ok: np.ndarray = field(init=False)
    is_x: np.ndarray = field(init=False)
    xpos: np.ndarray = field(init=False)
    negative: np.ndarray = field(init=False)
    end_ns: np.ndarray = field(init=False)
    # _categories
    raw_cat: pa.Array = field(init=False)
    category: pa.Array = field(init=False)
    is_gpu: np.ndarray = field(init=False)
    # _tracks
    pid_num: np.ndarray = field(init=False)
    pid_ok: np.ndarray = field(init=False)
    pid_key: np.ndarray = field(init=False)
    tid_num: np.ndarray = field(init=False)
    tid_ok: np.ndarray = field(init=False)
    track: np.ndarray = field(init=False)
    f_track: np.ndarray = field(init=False)
    process_name: pa.Array = field(init=False)
    thread_name: pa.Array = field(init=False)
    # _nesting
    parent: np.ndarray = field(init=False)
    depth: np.ndarray = field(init=False)
    # _flows
    flow_id: np.ndarray = field(init=False)
    flow_ok: np.ndarray = field(init=False)
    fb_id: np.ndarray = field(init=False)
    fb_ok: np.ndarray = field(init=False)
    corr_int: np.ndarray = field(init=False)
    corr_ok: np.ndarray = field(init=False)
    corr_zero: np.ndarray = field(init=False)
    # _step_attribution
    name_arr: pa.ChunkedArray = field(init=False)
    ext_arr: pa.Array = field(init=False)
    step: np.ndarray = field(init=False)
    step_ok: np.ndarray = field(init=False)
    n_steps: int = field(init=False)
    # _device_and_stream
    device_val: np.ndarray = field(init=False)
    device_ok: np.ndarray = field(init=False)
    str_np: np.ndarray = field(init=False)
    str_ok: np.ndarray = field(init=False)
    # _clip_stream_overlaps
    dur_raw: tuple | None = field(init=False)
    # _collectives
    coll: dict = field(init=False)

    def flag(self, name: str, count: int | None = None) -> None:
        """Raise data-quality flag ``name`` (:data:`~jobs.normalize.kineto.parse.FLAGS`), with its event count
        when countable."""
        self.flags.add(name)
        if count is not None:
            self.counts[name] = count


def _open_rows(cols: EventColumns, header, is_list: bool, repairs: Repairs | None) -> _Rows:
    """Pass 0: the state, with the flags raised while decoding and the file-level time base.

    Reads the chunk reduction's flags and invalid-``ts`` count and the lenient repairs (B01/B02
    ``nonfinite_number`` / ``control_characters`` and the others of :mod:`~jobs.normalize.kineto.repair`, counted;
    ``partial_trace`` with ``truncated_tail``, a salvaged cut-short document); adds ``invalid_timestamp``
    (events without a numeric ``ts`` were dropped), the format generation (bare list = 2020 writer, Kineto §2.8) and
    ``baseTimeNanoseconds`` (int ns, Kineto 2024-05; 0 when absent).

    Raises:
        TraceError: no event has a valid numeric ``ts``.
    """
    flags = set(cols.flags)
    counts: dict[str, int] = {}
    if repairs is not None:
        counts.update(repairs.counts)
        flags.update(repairs.counts)
        if "truncated_tail" in repairs.counts:  # a salvaged cut-short document: its last steps are cut short too
            flags.add("partial_trace")
    if cols.n_invalid_ts:
        if cols.n_rows == 0:
            raise TraceError(cols.first_invalid_ts or "no event has a valid numeric ts")
        flags.add("invalid_timestamp")
        counts["invalid_timestamp"] = int(cols.n_invalid_ts)
    fmt = "list-2020" if is_list else "object"
    base_ns, has_base = 0, False
    if header is not None and header.baseTimeNanoseconds is not None:
        b = to_int64([header.baseTimeNanoseconds])[0].as_py()
        if b is not None:
            base_ns, has_base = int(b), True
    return _Rows(cols, header, flags, counts, fmt, base_ns, has_base)


def _begin_end(r: _Rows) -> None:
    """Pass 0b: duration events (``ph`` ``B``/``E``) paired into complete ``X`` rows (Perfetto #659, #970).

    Pairs them per (pid, tid) as a stack (:func:`~jobs.normalize.kineto.linkage.pair_begin_end`): the ``B`` row
    becomes an ``X`` row with ``dur`` = its ``E``'s ``ts`` − its ``ts`` (its name, category and args: the ``B``
    event's), the ``E`` rows are removed. A ``B`` never closed stays as an ``X`` row without a duration; an ``E``
    with nothing open is dropped. Flags ``begin_end_pairs`` (count: pairs), ``unmatched_begin`` and
    ``unmatched_end`` (counts: events).
    """
    cols = r.cols
    if not cols.n_rows:
        return
    ph = cols.row_column("ph")
    is_b, is_e = ph == B, ph == E
    if not (is_b.any() or is_e.any()):
        return
    track = track_codes(cols.row_column("pid_key"), cols.row_column("tid_key"))
    ts = cols.row_column("ts")
    begins, ends, lone_b, lone_e = pair_begin_end(is_b, is_e, track, ts)
    dur, dur_ok = cols.row_column("dur"), cols.row_column("dur_ok")
    dur[begins] = ts[ends] - ts[begins]
    dur_ok[begins] = True
    dur[lone_b], dur_ok[lone_b] = 0, False
    ph[is_b] = X
    cols.select_rows(~is_e)
    if len(begins):
        r.flag("begin_end_pairs", len(begins))
    if len(lone_b):
        r.flag("unmatched_begin", len(lone_b))
    if len(lone_e):
        r.flag("unmatched_end", len(lone_e))


def _times(r: _Rows) -> None:
    """Pass 1: start, duration and end of every row, int64 ns.

    Reads ``event_id``, ``ph``, ``ts``, ``dur`` of the columns (already exact ns,
    :mod:`jobs.normalize.kineto.numbers`; Kineto ``ts``/``dur`` are µs, §2.7) and ``base_ns``. Adds
    ``n``, ``rows``, ``row_ph``, ``ts_rel`` (ns before the base), ``ts_ns``, ``dur_ns``, ``dur_ok``,
    ``is_x``, ``xpos`` (positions of ``X`` rows), ``negative`` and ``end_ns`` (``ts + max(dur, 0)``).
    B06: a negative ``dur`` (end time lost) becomes null, flagged and counted; ``missing_duration``
    when an ``X`` event has no valid ``dur``.

    Raises:
        TraceError: ``baseTimeNanoseconds`` moves a timestamp out of the int64 range.
    """
    cols = r.cols
    r.rows = cols.row_array("event_id")
    r.n = len(r.rows)
    r.row_ph = cols.row_array("ph")
    r.ts_rel = cols.row_array("ts")
    r.ts_ns = _add_base(r.ts_rel, r.base_ns)
    dur_ns, dur_ok = cols.row_array("dur"), cols.row_array("dur_ok")
    r.is_x = r.row_ph == X
    r.xpos = np.flatnonzero(r.is_x)
    negative = dur_ok & (dur_ns < 0)  # B06: an invalid duration (e.g. dur = -ts, end time lost)
    if len(r.xpos):
        if not dur_ok[r.xpos].all():
            r.flag("missing_duration")
        if negative.any():  # null in events (never summed as time), flagged and counted
            r.flag("negative_duration", int(negative.sum()))
            dur_ok = dur_ok & ~negative
            dur_ns = np.where(negative, 0, dur_ns)
    r.dur_ns, r.dur_ok, r.negative = dur_ns, dur_ok, negative
    r.end_ns = r.ts_ns + np.maximum(dur_ns, 0)


def _categories(r: _Rows) -> None:
    """Pass 2: category normalized across format generations, and the device-side flag.

    Reads ``raw_category``; adds ``raw_cat`` (as written), ``category`` (:data:`CATEGORY_ALIASES`:
    Kineto's 2021-06 rename and the 2022-05 ``gpu_user_Annotation`` typo fix, ``ActivityType.cpp``)
    and ``is_gpu`` (category in :data:`GPU_CATEGORIES`; bool per row). A JSON object with legacy
    category names is format ``object-legacy-categories``. One lookup per distinct category.
    """
    n = r.n
    raw_cat = r.cols.row_arrow("raw_category")
    cat_dict = raw_cat.dictionary_encode() if n else None
    dict_vals = cat_dict.dictionary.to_pylist() if n else []
    norm_vals = [CATEGORY_ALIASES.get(v, v) for v in dict_vals]
    if r.fmt == "object" and any(v in CATEGORY_ALIASES and v != "gpu_user_Annotation" for v in dict_vals):
        r.fmt = "object-legacy-categories"
    if n:
        category = pa.array(norm_vals, pa.string()).take(cat_dict.indices)
        gpu_by_code = np.array([v in GPU_CATEGORIES for v in norm_vals] + [False], bool)
        is_gpu = gpu_by_code[cat_dict.indices.fill_null(len(norm_vals)).to_numpy(zero_copy_only=False).astype(np.int64)]
    else:
        category, is_gpu = pa.array([], pa.string()), np.zeros(0, bool)
    r.raw_cat, r.category, r.is_gpu = raw_cat, category, is_gpu


def _tracks(r: _Rows) -> None:
    """Pass 3: pid / tid, the (pid, tid, side) track of every row and flow point, and their names.

    Reads the ``pid``/``tid`` values and keys of rows and flow points (Kineto §2.5: numeric strings
    and legacy ``"stream N"`` tids read as numbers, labels such as ``"Spans"`` get keys of their own)
    and the ``M`` metadata names. Adds ``pid_num``/``pid_ok``, ``pid_key``, ``tid_num``/``tid_ok``,
    ``track`` (dense int64 code per row), ``f_track`` (per flow point), ``process_name``
    (``process_name`` metadata of the pid, else its label) and ``thread_name`` (``thread_name``
    metadata of the (pid, tid), else the tid's label). A track is (pid, tid, host or device side): a host thread
    and a device stream that share a (pid, tid) are two tracks.
    """
    cols, n = r.cols, r.n
    r.pid_num, r.pid_ok, r.pid_key = cols.row_array("pid"), cols.row_array("pid_ok"), cols.row_array("pid_key")
    r.tid_num, r.tid_ok, tid_key = cols.row_array("tid"), cols.row_array("tid_ok"), cols.row_array("tid_key")
    f_pid, f_tid = cols.flow_array("pid_key"), cols.flow_array("tid_key")
    # the side is part of the track: host and device rows may share a (pid, tid) (pid 0 / tid 0 on both sides;
    # Kineto PR #1061, HTA #219). A flow point takes the side of the rows of its (pid, tid); where both sides
    # share it, a launch flow's "f" point binds to the device row (ROCm writes some "f" points on host calls)
    base = track_codes(np.concatenate((r.pid_key, f_pid)), np.concatenate((tid_key, f_tid)))
    side = np.concatenate((r.is_gpu, np.zeros(len(f_pid), bool)))
    if len(f_pid):
        n_codes = int(base.max()) + 1
        has_dev = np.bincount(base[:n][r.is_gpu], minlength=n_codes) > 0
        has_host = np.bincount(base[:n][~r.is_gpu], minlength=n_codes) > 0
        f_kind, f_is_f = (np.concatenate(cols.flow[k]) for k in ("kind", "is_f"))
        fb = base[n:]
        side[n:] = np.where(has_dev[fb] & has_host[fb], (f_kind == 1) & f_is_f, has_dev[fb])
    codes = track_codes(base, side.astype(np.int64))
    r.track, r.f_track = codes[:n], codes[n:]
    r.process_name = _lookup_names(r.pid_key, lambda k, pos: cols.proc_names.get(k, cols.pid_labels.get(pos)))
    r.thread_name = _lookup_track_names(r.track, r.pid_key, tid_key, cols.thread_names, cols.tid_labels)


def _nesting(r: _Rows) -> SliceIndex:
    """Pass 4: the innermost enclosing ``X`` slice of every row on its track (``parent``, ``depth``).

    Reads ``track``, ``ts_ns``, ``end_ns``, ``xpos``, ``rows``. Adds ``parent`` (``event_id`` of the
    parent, -1 at top level) and ``depth`` (int32, 0 at top level): ``X`` rows by the stack rule of
    :class:`~jobs.normalize.kineto.linkage.SliceIndex` in exact integer ns (B25), other rows (``i``,
    ``C``) inside the innermost slice enclosing their ``ts``. B11/B12: partial overlaps on a track are
    kept (parent = the slice that really encloses them) and flagged ``improper_nesting``, counted.

    Returns:
        the :class:`~jobs.normalize.kineto.linkage.SliceIndex` of the ``X`` rows, for :func:`_flows`.
    """
    n, xpos, rows = r.n, r.xpos, r.rows
    slices = SliceIndex(r.track[xpos], r.ts_ns[xpos], r.end_ns[xpos])
    parent = np.full(n, -1, np.int64)
    depth = np.zeros(n, np.int32)
    p_x, d_x = slices.parents()
    improper = slices.improper()
    if improper.any():  # B11/B12: partial overlaps on a track are kept and counted
        r.flag("improper_nesting", int(improper.sum()))
    del improper
    has_p = p_x >= 0
    parent[xpos[has_p]] = rows[xpos[p_x[has_p]]]
    depth[xpos] = d_x
    other = np.flatnonzero(~r.is_x)
    if len(other) and len(xpos):
        enc = slices.enclosing(r.track[other], r.ts_ns[other])
        ok = enc >= 0
        parent[other[ok]] = rows[xpos[slices.order[enc[ok]]]]
        depth[other[ok]] = slices.depth[enc[ok]] + 1
    r.parent, r.depth = parent, depth
    return slices


def _flows(r: _Rows, slices: SliceIndex) -> None:
    """Pass 5: flow ids bound to ``X`` rows, and the correlation id of every row.

    Reads the flow points (kind, ``ts``, id, phase, ``bp``), ``f_track``, ``base_ns``, ``xpos``, the
    rows' ``correlation`` and ``is_gpu``. Adds ``flow_id``/``flow_ok`` (launch flows: ``ac2g``, legacy
    ``async_cpu_to_gpu`` and ``async``/``launch``) and ``fb_id``/``fb_ok`` (``fwdbwd``, legacy
    ``forward_backward``/``fwd_bwd``; Kineto §2.3), bound to rows by the Chrome-trace binding points of
    :func:`~jobs.normalize.kineto.linkage.bind_flows`, and ``corr_int``/``corr_ok``: the ``correlation`` arg,
    or for a legacy GPU row that has only a launch flow (2021 Kineto) the flow id.
    """
    n = r.n
    flow_id, flow_ok = np.zeros(n, np.int64), np.zeros(n, bool)
    fb_id, fb_ok = np.zeros(n, np.int64), np.zeros(n, bool)
    if len(r.f_track) and len(r.xpos):
        fi = {k: r.cols.flow_array(k) for k in ("kind", "ts", "ok", "id", "is_f", "bp_e")}
        fi["ts"] = _add_base(fi["ts"], r.base_ns)
        fi["track"] = r.f_track
        bind_flows(fi, r.xpos, slices, flow_id, flow_ok, fb_id, fb_ok)
        del fi
    corr_int, corr_ok = int_and_mask(r.cols.row_arrow("correlation", pa.int64()))
    zero = corr_ok & (corr_int == 0)  # ROCm (roctracer #100): 0 means absent, not an id
    if zero.any():
        corr_ok = corr_ok & ~zero
        r.flag("correlation_zero", int(zero.sum()))
    r.corr_zero = zero
    fill = r.is_gpu & ~corr_ok & flow_ok  # legacy GPU events with only a launch flow
    if fill.any():
        corr_int = np.where(fill, flow_id, corr_int)
        corr_ok = corr_ok | fill
    r.flow_id, r.flow_ok, r.fb_id, r.fb_ok = flow_id, flow_ok, fb_id, fb_ok
    r.corr_int, r.corr_ok = corr_int, corr_ok


def _step_attribution(r: _Rows) -> None:
    """Pass 6: the ProfilerStep of every row, and the flags that come from linking launches.

    Reads ``name``, ``external_id`` of the columns, ``is_x``, ``is_gpu``, ``category``, ``ts_ns``,
    ``end_ns``, ``negative``, ``corr_int``/``corr_ok``, ``pid_key``, ``header``. Adds ``name_arr``,
    ``ext_arr``, ``step``/``step_ok`` and ``n_steps`` (:func:`~jobs.normalize.kineto.linkage.profiler_steps`:
    CPU rows by time inside a ``ProfilerStep#N`` slice, as HTA splits iterations; GPU rows through their
    launch). Launch links are keyed by ``(pid, correlation)`` on merged multi-rank files (B19, flag
    ``merged_ranks``), by a unique ``External id`` where the correlation is missing (B18,
    :func:`~jobs.normalize.kineto.linkage.external_id_links`). Flags ``negative_launch_delay`` (B08,
    counted, :func:`~jobs.normalize.kineto.linkage.count_early_launches`), ``no_profiler_step`` and
    ``partial_trace`` (B22: :func:`~jobs.normalize.kineto.linkage.last_step_truncated` or
    :func:`_dropped_events`).
    """
    n, is_gpu, category = r.n, r.is_gpu, r.category
    name_arr = r.cols.row_arrow("name", chunked=True)
    link_key, merged = correlation_link_keys(r.corr_int, r.corr_ok, r.pid_key, ~is_gpu)
    if merged:
        r.flag("merged_ranks")
    ext_arr = r.cols.row_arrow("external_id", pa.int64())
    ext_id, ext_ok = int_and_mask(ext_arr)
    launch_cat = bool_np(pc.is_in(category, pa.array(_LAUNCH_CATEGORIES))) if n else np.zeros(0, bool)
    link_key = external_id_links(link_key, ext_id, ext_ok, is_gpu, launch_cat)
    if r.corr_zero.any():
        launches = launch_cat & ~is_gpu & bool_np(pc.match_substring_regex(name_arr, _LAUNCH_CALL, ignore_case=True))
        link_key = _link_zero_correlations(r, link_key, launches, category)
    step, step_ok, n_steps = profiler_steps(name_arr, r.is_x, is_gpu, r.ts_ns, r.end_ns, link_key, link_key >= 0)
    early = count_early_launches(
        link_key,
        is_gpu & bool_np(pc.is_in(category, pa.array(_DEVICE_ACTIVITY))) if n else is_gpu,
        launch_cat,
        r.ts_ns,
        r.end_ns,
    )
    if early:  # B08: device work starts before its launch call ends (clock skew): flagged, clamped in stats
        r.flag("negative_launch_delay", early)
    del link_key, ext_id, ext_ok, launch_cat
    if n_steps == 0:
        r.flag("no_profiler_step")
    elif last_step_truncated(name_arr, r.is_x, is_gpu, category, r.ts_ns, r.end_ns, r.negative) or _dropped_events(
        r.header
    ):
        r.flag("partial_trace")
    r.name_arr, r.ext_arr = name_arr, ext_arr
    r.step, r.step_ok, r.n_steps = step, step_ok, n_steps


def _link_zero_correlations(r: _Rows, link_key: np.ndarray, launches: np.ndarray, category) -> np.ndarray:
    """Device rows whose correlation was 0 (``correlation_zero``): linked by External id already where it is
    unique, else by time (:func:`~jobs.normalize.kineto.linkage.time_links`, flag ``linked_by_time``); each linked
    row takes its launch's correlation (so the analysis links it too), the rest are counted
    (``unlinked_device_rows``)."""
    orphans = r.corr_zero & r.is_gpu & bool_np(pc.is_in(category, pa.array(_DEVICE_ACTIVITY)))
    link_key, n_time = time_links(link_key, orphans, launches, r.is_gpu, r.ts_ns)
    if n_time:
        r.flag("linked_by_time", n_time)
    dev = np.flatnonzero(orphans & (link_key >= 0))
    host = np.flatnonzero(launches & (link_key >= 0) & r.corr_ok)
    launch_of = dict(zip(link_key[host].tolist(), host.tolist()))
    for d in dev.tolist():
        h = launch_of.get(int(link_key[d]))
        if h is not None:
            r.corr_int[d], r.corr_ok[d] = r.corr_int[h], True
    left = int((orphans & (link_key < 0)).sum())
    if left:
        r.flag("unlinked_device_rows", left)
    return link_key


def _device_and_stream(r: _Rows) -> None:
    """Pass 3b: device index and stream of every row.

    Reads the ``device``/``stream`` args, ``is_gpu``, ``pid_num``/``pid_ok`` and the stream numbers of
    ``"stream N"`` tids. Adds ``device_val``/``device_ok`` (device-side rows only: the ``device`` arg,
    else the pid, which Kineto sets to the device index on GPU rows, §2.5) and ``str_np``/``str_ok``
    (the ``stream`` arg, else the N of a legacy ``"stream N"`` tid).
    """
    cols = r.cols
    dev_np, dev_ok = int_and_mask(cols.row_arrow("device_arg", pa.int64()))
    r.device_ok = r.is_gpu & (dev_ok | r.pid_ok)
    r.device_val = np.where(dev_ok, dev_np, r.pid_num)
    str_np, str_ok = int_and_mask(cols.row_arrow("stream_arg", pa.int64()))
    if cols.tid_streams:
        pos = np.fromiter(cols.tid_streams.keys(), np.int64, len(cols.tid_streams))
        vals = np.fromiter(cols.tid_streams.values(), np.int64, len(cols.tid_streams))
        use = ~str_ok[pos]
        str_np[pos[use]] = vals[use]
        str_ok[pos[use]] = True
    r.str_np, r.str_ok = str_np, str_ok


def _clip_stream_overlaps(r: _Rows) -> None:
    """Pass 3c: a device event that runs past the start of the next one on its stream is clipped to that start.

    A stream runs its work one item at a time, so such a ``dur`` is a recording error (TraceLens #669: a kernel
    far longer than its step, the job failing its own validation). Per (device, stream), device activity rows
    (kernels, copies, sets) in start order; ``end > next start`` → ``dur_ns`` = next start − start, the trace's value
    kept in ``dur_raw`` (column ``dur_raw_ns``). Flag ``stream_overlap_clipped`` (count: events; the time removed,
    ns, in ``flag_counts["stream_overlap_clipped_ns"]``). Reads ``is_gpu``, ``category``, ``device_val``/``device_ok``,
    ``str_np``/``str_ok``, ``ts_ns``, ``dur_ns``/``dur_ok``; updates ``dur_ns`` and ``end_ns``, adds ``dur_raw``.
    """
    r.dur_raw = None
    act = r.is_gpu & r.str_ok & r.dur_ok & bool_np(pc.is_in(r.category, pa.array(_DEVICE_ACTIVITY))) if r.n else None
    if act is None or act.sum() < 2:
        return
    rows = np.flatnonzero(act)
    dev = np.where(r.device_ok[rows], r.device_val[rows], -1)
    o = rows[np.lexsort((r.rows[rows], r.ts_ns[rows], r.str_np[rows], dev))]
    dev_o = np.where(r.device_ok[o], r.device_val[o], -1)
    same = (dev_o[1:] == dev_o[:-1]) & (r.str_np[o][1:] == r.str_np[o][:-1])
    end = r.ts_ns[o] + r.dur_ns[o]
    over = np.flatnonzero(same & (end[:-1] > r.ts_ns[o][1:]))
    if not len(over):
        return
    cur, nxt = o[over], o[over + 1]
    raw = np.zeros(r.n, np.int64)
    raw_ok = np.zeros(r.n, bool)
    raw[cur], raw_ok[cur] = r.dur_ns[cur], True
    new = r.ts_ns[nxt] - r.ts_ns[cur]
    removed = int((r.dur_ns[cur] - new).sum())
    r.dur_ns = r.dur_ns.copy()
    r.dur_ns[cur] = new
    r.end_ns = r.ts_ns + np.maximum(r.dur_ns, 0)
    r.dur_raw = (raw, raw_ok)
    r.flag("stream_overlap_clipped", len(cur))
    r.counts["stream_overlap_clipped_ns"] = removed


def _collectives(r: _Rows) -> None:
    """Pass 8: collective fields (``collective``, ``pg_name``, ``group_size``, ``msg_bytes`` in bytes, ``seq``).

    Reads the collective args of the columns (Kineto §2.6), ``name_arr`` and ``category``; adds
    ``coll`` (column name → Arrow array), with ``collective`` inferred from the NCCL/RCCL kernel name
    where the kernel carries no ``Collective name`` (:func:`_infer_nccl`, B16: any case, ``ncclDevKernel``).
    """
    coll = r.cols.collective()
    coll["collective"] = _infer_nccl(coll["collective"], r.name_arr, r.category)
    r.coll = coll


def _event_columns(r: _Rows) -> dict:
    """Pass 9: the output columns (name → Arrow array) of :data:`EVENT_COLUMNS`, nulls where not ``ok``."""
    n, coll = r.n, r.coll
    return {
        "event_id": pa.array(r.rows.astype(np.int64, copy=False)),
        "source": _repeat_str(b"kineto", n),
        "ph": pa.Array.from_buffers(
            pa.string(),
            n,
            [None, pa.py_buffer(np.arange(n + 1, dtype=np.int32)), pa.py_buffer(_PH_BYTES[r.row_ph.astype(np.intp)])],
        ),
        "category": r.category,
        "raw_category": r.raw_cat,
        "name": r.name_arr,
        "ts_ns": pa.array(r.ts_ns),
        "dur_ns": _masked(r.dur_ns, r.dur_ok),
        "dur_raw_ns": _masked(*r.dur_raw) if r.dur_raw is not None else pa.nulls(n, pa.int64()),
        "pid": _masked(r.pid_num, r.pid_ok),
        "tid": _masked(r.tid_num, r.tid_ok),
        "process_name": r.process_name,
        "thread_name": r.thread_name,
        "device": _masked(r.device_val, r.device_ok, pa.int32()),
        "stream": _masked(r.str_np, r.str_ok),
        "is_gpu": pa.array(r.is_gpu),
        "correlation": _masked(r.corr_int, r.corr_ok),
        "external_id": r.ext_arr,
        "flow_id": _masked(r.flow_id, r.flow_ok),
        "fwdbwd_flow_id": _masked(r.fb_id, r.fb_ok),
        "parent": _masked(r.parent, r.parent >= 0),
        "depth": pa.array(r.depth, pa.int32()),
        "step": _masked(r.step, r.step_ok),
        "collective": coll["collective"],
        "pg_name": coll["pg_name"],
        "group_size": coll["group_size"].cast(pa.int32(), safe=False),
        "msg_bytes": coll["msg_bytes"],
        "seq": coll["seq"],
        "args_json": r.cols.row_arrow("args_json", chunked=True),
    }


def _capture_meta(r: _Rows, container: str, size: int, repairs: Repairs | None) -> dict:
    """Pass 10: the capture-level fields of :class:`~jobs.normalize.kineto.parse.ParsedTrace` ``meta`` (see there).

    The trace span (``trace_start_ns``/``trace_end_ns``) leaves out rows with a negative duration
    (B06) unless every row has one.
    """
    span = ~r.negative
    if r.n and not span.any():
        span = np.ones(r.n, bool)
    meta = _meta(
        r.header,
        r.fmt,
        container,
        size,
        r.has_base,
        r.base_ns,
        r.ts_ns[span],
        r.end_ns[span],
        r.cols.ts_is_float,
        r.ts_rel,
        r.n,
        r.n_steps,
        sorted(r.flags),
    )
    meta["flag_counts"] = dict(sorted(r.counts.items()))
    meta["repair_offset"] = repairs.first_offset if repairs is not None else None
    meta["repair_offsets"] = dict(sorted(repairs.offsets.items())) if repairs is not None else {}
    return meta


def _to_schema(out: dict) -> pa.Table:
    """Pass 11: ``out`` (emptied as it goes, so each source array is freed once cast) -> the events
    table with the types of :data:`EVENT_COLUMNS` in the EVENTS schema."""
    arrays = []
    for c in EVENT_COLUMNS:
        a = out.pop(c)
        if isinstance(a, pa.Array):
            a = pa.chunked_array([a])
        t = _SCHEMA.field(c).type
        arrays.append(a if a.type == t else a.cast(t))
    return pa.Table.from_arrays(arrays, schema=_SCHEMA)


def _infer_nccl(collective: pa.Array, name_arr, category: pa.Array) -> pa.Array:
    """Fill ``collective`` of NCCL/RCCL kernels that carry no ``Collective name`` from the kernel
    name (``ncclKernel_AllReduce_RING_LL_Sum_float`` -> ``allreduce``, ``ncclDevKernel_SendRecv``
    -> ``sendrecv``). Vectorized: the name pattern is matched once per distinct kernel name."""
    n = len(collective)
    if not n:
        return collective
    need = pc.and_(pc.equal(category, "kernel").fill_null(False), pc.is_null(collective))
    idx = pc.indices_nonzero(need)
    if not len(idx):
        return collective
    names = take_arrow(name_arr, idx)
    nccl = pc.or_(
        pc.starts_with(names, "nccl", ignore_case=True), pc.starts_with(names, "rccl", ignore_case=True)
    ).fill_null(False)
    idx, names = idx.filter(nccl), names.filter(nccl)
    if not len(idx):
        return collective
    enc = names.dictionary_encode()
    ops = pa.array(_nccl_ops(enc.dictionary), pa.string()).take(enc.indices)
    found = ops.is_valid()
    if not pc.any(found).as_py():
        return collective
    mask = np.zeros(n, bool)
    mask[idx.filter(found).to_numpy()] = True
    return pc.replace_with_mask(collective, pa.array(mask), ops.filter(found))


def _nccl_ops(names: pa.Array) -> list:
    """Collective name per NCCL/RCCL kernel name (:data:`_NCCL_OPS`; None where the name has no known op)."""
    out = []
    for nm in names.to_pylist():
        m = _NCCL_NAME.match(nm) if nm else None
        out.append(_NCCL_OPS.get(m.group(1).lower()) if m else None)
    return out


def _dropped_events(header) -> bool:
    """B22: the file itself reports dropped events (a positive ``dropped_events``/``droppedEvents``
    at the top level or in its ``metadata`` object)."""
    if header is None:
        return False
    vals = [getattr(header, "dropped_events", None), getattr(header, "droppedEvents", None)]
    md = getattr(header, "metadata", None)
    if isinstance(md, dict):
        vals += [v for k, v in md.items() if isinstance(k, str) and "dropped" in k.lower()]
    return any(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in vals)


def _repeat_str(value: bytes, n: int) -> pa.Array:
    """``pa.string`` array of ``n`` copies of ``value``."""
    offsets = np.arange(n + 1, dtype=np.int32) * np.int32(len(value))
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(value * n)])


def _masked(vals: np.ndarray, ok: np.ndarray, typ: pa.DataType = pa.int64()) -> pa.Array:
    """numpy values -> Arrow array of ``typ``, null where ``ok`` is False."""
    if len(vals) == 0:
        return pa.array([], typ)
    if ok.all():
        return pa.array(vals, typ)
    return pa.array(vals, typ, mask=~ok)


def _lookup_names(keys: np.ndarray, resolve) -> pa.Array:
    """Per-row name from a per-key resolver, computed once per distinct key."""
    if len(keys) == 0:
        return pa.array([], pa.string())
    codes, first = _factorize(keys)
    names = [resolve(int(keys[p]), int(p)) for p in first.tolist()]
    return pa.array(names, pa.string()).take(pa.array(codes))


def _lookup_track_names(track, pid_key, tid_key, thread_names: dict, tid_labels: dict) -> pa.Array:
    """Per-row thread name: ``thread_name`` metadata of the (pid, tid), else the tid's label (once per track)."""
    if len(track) == 0:
        return pa.array([], pa.string())
    codes, first = _factorize(track)
    names = []
    for p in first.tolist():
        nm = thread_names.get((int(pid_key[p]), int(tid_key[p])))
        names.append(nm if nm is not None else tid_labels.get(p))
    return pa.array(names, pa.string()).take(pa.array(codes))


def _factorize(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(code per element, position of each code's first occurrence), codes in first-seen order."""
    codes = pc.dictionary_encode(pa.array(keys)).indices.to_numpy(zero_copy_only=False).astype(np.int64)
    if not len(codes):
        return codes, np.zeros(0, np.int64)
    # codes are numbered in first-seen order: a code first occurs where the running maximum grows
    seen = np.maximum.accumulate(codes)
    first = np.flatnonzero(np.concatenate(([True], seen[1:] > seen[:-1])))
    return codes, first


def _add_base(rel: np.ndarray, base: int) -> np.ndarray:
    """``rel`` + ``base`` (int64 ns; ``baseTimeNanoseconds``), refusing a result outside int64 (TraceError)."""
    if not base or not len(rel):
        return rel
    hi, lo = int(rel.max()), int(rel.min())
    if hi + base > 2**63 - 1 or lo + base < -(2**63):
        raise TraceError("timestamp out of int64 ns range after adding baseTimeNanoseconds")
    return rel + np.int64(base)


def _meta(header, fmt, container, size, has_base, base_ns, ts_ns, end_ns, ts_is_float, ts_rel, n, n_steps, flags):
    """The capture-level ``meta`` dict (see :class:`~jobs.normalize.kineto.parse.ParsedTrace`) from the header
    and the trace span (int ns)."""
    if has_base:
        time_base = "relative+baseTimeNanoseconds"
    elif n and int(np.abs(ts_rel).max()) >= 10**15:  # >= 1e12 µs (11.6 days): epoch µs, not a relative clock
        time_base = "absolute-us-float" if ts_is_float else "absolute-us-int"
    else:
        time_base = "relative"
    dist = header.distributedInfo if header is not None and isinstance(header.distributedInfo, dict) else {}
    warned = kineto_warnings(header)
    device_name = None
    if header is not None and isinstance(header.deviceProperties, list):
        for d in header.deviceProperties:
            if isinstance(d, dict) and isinstance(d.get("name"), str) and d["name"].strip():
                device_name = d["name"].strip()
                break
    host = None
    if header is not None:
        for h in (header.host_name, header.hostname):
            if isinstance(h, str) and h:
                host = h
                break
    return {
        "container": container,
        "uncompressed_bytes": int(size),
        "format": fmt,
        "time_base": time_base,
        "base_time_ns": int(base_ns),
        "trace_start_ns": int(ts_ns.min()) if n else None,
        "trace_end_ns": int(end_ns.max()) if n else None,
        "n_events": int(n),
        "n_profiler_steps": int(n_steps),
        "host_name": host,
        "device_name": device_name,
        "distributed_backend": dist.get("backend") if isinstance(dist.get("backend"), str) else None,
        "torch_version": _torch_version(header),
        "runtime_version": _runtime_version(header),
        "world_size": _opt_int(dist.get("world_size")),
        "rank": _opt_int(dist.get("rank")),
        "flags": list(flags) + (["profiler_warnings"] if warned else []),
        "profiler_warnings": warned,
    }


def _torch_version(header) -> str | None:
    """``torch_version`` of the trace's top level, else the first one inside its ``metadata`` object (a harness's
    environment, e.g. TraceLens' ``metadata.system.torch_env_info``; searched 4 levels deep), else None."""
    if header is None:
        return None
    if isinstance(header.torch_version, str) and header.torch_version.strip():
        return header.torch_version.strip()[:64]
    todo, depth = [header.metadata], 0
    while todo and depth < 4:
        nxt = []
        for d in todo:
            if isinstance(d, dict):
                v = d.get("torch_version")
                if isinstance(v, str) and v.strip():
                    return v.strip()[:64]
                nxt += [x for x in d.values() if isinstance(x, dict)]
        todo, depth = nxt, depth + 1
    return None


def _runtime_version(header) -> str | None:
    """The CUDA or HIP runtime the trace was recorded with, from Kineto's ``cuda_runtime_version`` (``12090`` →
    ``CUDA 12.9``: CUDA_VERSION = 1000 × major + 10 × minor) or ``hip_runtime_version`` (``60443483`` →
    ``HIP 6.4.43483``: HIP_VERSION = 10⁷ × major + 10⁵ × minor + patch); a version string is kept as written."""
    if header is None:
        return None
    for name, value in (("CUDA", header.cuda_runtime_version), ("HIP", header.hip_runtime_version)):
        if isinstance(value, str) and value.strip() and value.strip().upper() != "N/A":
            return f"{name} {value.strip()[:32]}"
        v = _opt_int(value)
        if v is None or v <= 0:
            continue
        if name == "CUDA":
            return f"CUDA {v // 1000}.{v % 1000 // 10}"
        return f"HIP {v // 10**7}.{v % 10**7 // 10**5}.{v % 10**5}"
    return None


def _opt_int(v) -> int | None:
    """An int from a JSON int, integral float or numeric string (``distributedInfo`` values), else None."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str) and v.strip().lstrip("-").isdigit():
        return int(v.strip())
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return None
