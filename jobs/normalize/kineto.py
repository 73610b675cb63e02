"""Fast, exact parser of torch.profiler / Kineto Chrome-trace JSON into `events` rows.

``parse_kineto(data, uri)`` turns the raw bytes of one trace file (gzip or plain) into the
``events`` columns of :data:`schemas.tables.EVENTS` (without the identity/partition columns,
which the caller adds) and the capture-level fields of :data:`schemas.tables.CAPTURES`.

Design (speed is a product target, see README): one typed ``msgspec`` decode of only the fields we
need, ``args`` kept as raw JSON text (so ``args_json`` costs a copy, not a re-encode), then numpy /
pyarrow vectorized passes for numbers, nesting, flows and steps. Timestamps are exact integer ns
(:mod:`jobs.normalize.numbers`). Format generations handled (see
``../shared/reference/kineto_and_hta.md`` §2.8): bare-list 2020 traces, legacy categories
(``Operator/Runtime/Kernel/Memcpy/Memset``), string tids (``"stream 7"``), legacy flows
(``async``/``launch``, ``async_cpu_to_gpu``, ``forward_backward``), absolute µs ints/floats and
relative µs + ``baseTimeNanoseconds``.
"""

from __future__ import annotations

import gc
import os
import time
import posixpath
import re
from dataclasses import dataclass, field
from itertools import repeat
from operator import attrgetter, is_not, itemgetter
from typing import Any, Optional, Union

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.normalize.container import DEFAULT_MAX_UNCOMPRESSED_BYTES, decode_container
from jobs.normalize.errors import TraceError
from jobs.normalize.linkage import SliceIndex, track_codes
from jobs.normalize.numbers import micros_to_ns, to_int64
from jobs.normalize.repair import repair_json
from schemas.tables import EVENTS

__all__ = ["parse_kineto", "ParsedTrace", "TraceError", "rank_from_filename", "EVENT_COLUMNS"]

#: Columns produced by :func:`parse_kineto` (EVENTS minus identity/partition columns), in order.
EVENT_COLUMNS: tuple[str, ...] = tuple(
    n for n in EVENTS.names if n not in ("date", "job_id", "attempt", "rank", "capture_id")
)
_SCHEMA = pa.schema([EVENTS.arrow_schema().field(n) for n in EVENT_COLUMNS])

#: Legacy (2020/21) category names -> current names (kineto ActivityType.cpp, 2021-06 rename).
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
_LAUNCH_FLOW_CATS = frozenset({"ac2g", "async_cpu_to_gpu"})
_FWDBWD_FLOW_CATS = frozenset({"fwdbwd", "forward_backward", "fwd_bwd"})
#: Bytes per element of the collective ``dtype`` names written by PyTorch (c10 ScalarType names).
DTYPE_BYTES = {
    "Float": 4, "float": 4, "Float32": 4, "Double": 8, "double": 8, "Half": 2, "BFloat16": 2,
    "Int": 4, "int": 4, "Long": 8, "long": 8, "Short": 2, "Char": 1, "Byte": 1, "Bool": 1,
    "ComplexHalf": 4, "ComplexFloat": 8, "ComplexDouble": 16, "Float8_e4m3fn": 1, "Float8_e5m2": 1,
    "Float8_e4m3fnuz": 1, "Float8_e5m2fnuz": 1, "UInt16": 2, "UInt32": 4, "UInt64": 8,
    "QInt8": 1, "QUInt8": 1, "QInt32": 4,
}
#: NCCL/RCCL kernel-name operation -> collective name (used when the kernel has no args).
_NCCL_OPS = {
    "allreduce": "allreduce", "allgather": "allgather", "reducescatter": "reduce_scatter",
    "broadcast": "broadcast", "reduce": "reduce", "sendrecv": "sendrecv", "send": "send",
    "recv": "recv", "alltoall": "all_to_all", "alltoallv": "all_to_all",
}
_NCCL_RE = r"^(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)"
_STEP_PREFIX = "ProfilerStep#"
_PH_CODES = pa.array(["X", "i", "C", "M", "s", "f"])
_LAUNCH_FLOW_ARR = pa.array(sorted(_LAUNCH_FLOW_CATS))
_FWDBWD_FLOW_ARR = pa.array(sorted(_FWDBWD_FLOW_CATS))
_X, _I, _C, _M, _S, _F = range(6)


# ---------------------------------------------------------------------------------------------
# msgspec shapes: only the fields we need; everything else is skipped by the decoder.


class _Event(msgspec.Struct, gc=False):
    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    id: Any = None
    bp: Any = None
    args: msgspec.Raw = None  # type: ignore[assignment]


class _Doc(msgspec.Struct, gc=False):
    traceEvents: Optional[list[_Event]] = None
    baseTimeNanoseconds: Any = None
    deviceProperties: Any = None
    distributedInfo: Any = None
    host_name: Any = None
    hostname: Any = None


class _TimeEvent(msgspec.Struct, gc=False):
    ts: msgspec.Raw = None  # type: ignore[assignment]
    dur: msgspec.Raw = None  # type: ignore[assignment]


class _TimeDoc(msgspec.Struct, gc=False):
    traceEvents: Optional[list[_TimeEvent]] = None


class _Args(msgspec.Struct, gc=False):
    correlation: Any = None
    external_id: Any = msgspec.field(default=None, name="External id")
    external_id_legacy: Any = msgspec.field(default=None, name="external id")
    device: Any = None
    stream: Any = None
    collective: Any = msgspec.field(default=None, name="Collective name")
    pg_name: Any = msgspec.field(default=None, name="Process Group Name")
    group_size: Any = msgspec.field(default=None, name="Group size")
    in_nelems: Any = msgspec.field(default=None, name="In msg nelems")
    out_nelems: Any = msgspec.field(default=None, name="Out msg nelems")
    in_size: Any = msgspec.field(default=None, name="In msg size")
    out_size: Any = msgspec.field(default=None, name="Out msg size")
    dtype: Any = None
    seq: Any = msgspec.field(default=None, name="Seq")


_DECODER = msgspec.json.Decoder(Union[_Doc, list[_Event]])
_TIME_DECODER = msgspec.json.Decoder(Union[_TimeDoc, list[_TimeEvent]])
_ARGS_DECODER = msgspec.json.Decoder(list[Optional[_Args]])
_ARGS1_DECODER = msgspec.json.Decoder(Optional[_Args])
_RAW_LIST_DECODER = msgspec.json.Decoder(list[msgspec.Raw])
_EMPTY_ARGS = _Args()
_NULL_RAW = msgspec.Raw(b"null")


@dataclass
class ParsedTrace:
    """Result of :func:`parse_kineto`.

    Attributes:
        events: ``pyarrow.Table`` with the :data:`EVENT_COLUMNS` of the EVENTS schema (same order
            and types), one row per ``X``/``i``/``C`` event, ``event_id`` = index in traceEvents.
        meta: capture-level fields: ``container``, ``uncompressed_bytes``, ``format``,
            ``time_base``, ``base_time_ns``, ``trace_start_ns``, ``trace_end_ns``, ``n_events``,
            ``n_profiler_steps``, ``host_name``, ``device_name``, ``distributed_backend``,
            ``world_size``, ``rank`` (int from ``distributedInfo`` or None), ``flags`` (list[str]).
    """

    events: pa.Table
    meta: dict = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------


_RANK_RE = re.compile(r"(?<![A-Za-z0-9])(?:rank|worker)[-_.]?(\d+)(?![0-9])", re.I)


def rank_from_filename(path: str) -> int | None:
    """Rank encoded in a trace file name (``rank-3``, ``rank3``, ``rank_3``, ``worker3``), else None.

    Only the last path component is inspected; the first match wins.
    """
    m = _RANK_RE.search(posixpath.basename(str(path).replace("\\", "/")))
    return int(m.group(1)) if m else None


def parse_kineto(
    data: bytes,
    uri: str = "",
    *,
    max_uncompressed_bytes: int = DEFAULT_MAX_UNCOMPRESSED_BYTES,
    compact_args: bool = True,
) -> ParsedTrace:
    """Parse one Kineto/Chrome-trace file into canonical event rows and capture metadata.

    Args:
        data: raw file bytes as stored (gzip — single or multi-member — or plain JSON).
        uri: the file's URI (only used in messages; the caller adds it to reasons).
        max_uncompressed_bytes: cap on the decoded JSON size (default 8 GiB).
        compact_args: write ``args_json`` as compact JSON (no insignificant whitespace); if False
            the args text is kept byte-for-byte as written (faster).

    Returns:
        :class:`ParsedTrace` (``events`` Arrow table, ``meta`` dict).

    Raises:
        TraceError: the file must be quarantined; the message names the problem (empty file,
            truncated/corrupt gzip, size limit, invalid or truncated JSON with the byte offset,
            not a Chrome trace, an event without a numeric ``ts``).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _parse(data, max_uncompressed_bytes, compact_args)
    finally:
        if was_enabled:
            gc.enable()


def _json_reason(exc: Exception) -> str:
    msg = str(exc)
    if "truncated" in msg.lower():
        return "truncated JSON: the document ends before it is complete"
    m = re.search(r"\(byte (\d+)\)", msg)
    detail = re.sub(r"\s*\(byte \d+\)", "", msg).replace("JSON is malformed: ", "")
    if m:
        return f"not valid JSON at byte {m.group(1)}: {detail}"
    return f"not valid JSON: {detail}"


def _decode_document(doc: bytes) -> tuple[Any, bytes, list[str]]:
    try:
        return _DECODER.decode(doc), doc, []
    except msgspec.ValidationError as exc:
        raise TraceError(f"not a Chrome trace: {exc}") from None
    except msgspec.DecodeError as exc:
        strict = exc
    repaired, flags = repair_json(doc)
    if flags:
        try:
            return _DECODER.decode(repaired), repaired, flags
        except msgspec.ValidationError as exc:
            raise TraceError(f"not a Chrome trace: {exc}") from None
        except msgspec.DecodeError as exc:
            raise TraceError(_json_reason(exc)) from None
    raise TraceError(_json_reason(strict))


_PLUCK = {
    name: eval(f"lambda xs: [x.{name} for x in xs]")  # noqa: S307 - fixed attribute names: list comprehension is 2x faster than map(attrgetter)
    for name in _Args.__struct_fields__
}


def _pluck(structs: list, name: str) -> list:
    """``[s.<name> for s in structs]`` (a compiled list comprehension per field)."""
    return _PLUCK[name](structs)


def _phase_codes(ph_list: list) -> np.ndarray:
    """Phase strings -> int8 codes (_X.._F), -1 for any other phase."""
    arr = _str_array(ph_list)
    return pc.index_in(arr, value_set=_PH_CODES).fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int8)


def _take(lst, idx: np.ndarray):
    """``[lst[i] for i in idx]`` as a sequence, fast (C-level itemgetter)."""
    n = len(idx)
    if n == len(lst):
        return lst
    if n == 0:
        return []
    if n == 1:
        return [lst[int(idx[0])]]
    return itemgetter(*idx.tolist())(lst)


def _str_array(values) -> pa.Array:
    """Strings (or None) -> ``pa.string`` array; non-string values are converted with ``str``."""
    try:
        return pa.array(values, type=pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        return pa.array([v if v is None or isinstance(v, str) else _to_text(v) for v in values], type=pa.string())


def _to_text(v) -> str:
    try:
        return msgspec.json.encode(v).decode()
    except Exception:
        return str(v)


_STREAM_TID = re.compile(r"^\s*stream\s+(-?\d+)\s*$")


def _id_keys(values, parse_stream: bool = False):
    """pid/tid values -> (num int64, num_valid bool, key int64, labels {pos: str}, stream_from {pos: int}).

    ``num``: numeric value (ints, numeric strings, ``"stream N"`` -> N when ``parse_stream``).
    ``key``: grouping key; non-numeric strings get distinct negative sentinels.
    ``labels``: the original string of non-numeric values (used as process/thread name).
    """
    n = len(values)
    # mostly ints with a few strings ("Spans", "stream 7", ""): ints vectorized, the rest by value
    arr = pa.array([v if v.__class__ is int else None for v in values], type=pa.int64())
    others = np.flatnonzero(np.asarray(arr.is_null().to_numpy(zero_copy_only=False), bool)) if arr.null_count else None
    if others is not None and len(others) > n // 4:
        return _id_keys_slow(values, parse_stream)
    valid = ~np.asarray(arr.is_null().to_numpy(zero_copy_only=False), bool) if arr.null_count else np.ones(n, bool)
    num = np.array(arr.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
    if others is None or not len(others):
        key = num.copy()
        if arr.null_count:
            key[~valid] = -(2**61)
        return num, valid, key, {}, {}
    sub = [values[i] for i in others.tolist()]
    s_num, s_valid, s_key, s_labels, s_streams = _id_keys_slow(sub, parse_stream)
    key = num.copy()
    num[others] = s_num
    valid[others] = s_valid
    key[others] = s_key
    labels = {int(others[i]): v for i, v in s_labels.items()}
    streams = {int(others[i]): v for i, v in s_streams.items()}
    return num, valid, key, labels, streams


def _id_keys_slow(values, parse_stream: bool):
    n = len(values)
    num = np.zeros(n, np.int64)
    valid = np.zeros(n, bool)
    key = np.zeros(n, np.int64)
    labels: dict[int, str] = {}
    streams: dict[int, int] = {}
    codes: dict[Any, int] = {}
    cache: dict[str, tuple] = {}
    for i, v in enumerate(values):
        t = type(v)
        if t is int:
            if -(2**62) < v < 2**62:
                num[i] = v
                valid[i] = True
                key[i] = v
                continue
            v, t = str(v), str
        if t is str:
            r = cache.get(v)
            if r is None:
                s = v.strip()
                if s.lstrip("-").isdigit() and -(2**62) < int(s) < 2**62:
                    r = (int(s), None)
                else:
                    m = _STREAM_TID.match(v) if parse_stream else None
                    r = (int(m.group(1)), "stream") if m else (None, v)
                cache[v] = r
            x, kind = r
            if x is not None:
                num[i] = x
                valid[i] = True
                key[i] = x
                if kind == "stream":
                    streams[i] = x
                continue
            labels[i] = v
            k = codes.setdefault(v, len(codes))
            key[i] = -(2**62) - k
            continue
        if v is None:
            key[i] = -(2**61)
            continue
        lab = _to_text(v)
        labels[i] = lab
        k = codes.setdefault(("other", lab), len(codes))
        key[i] = -(2**62) - k
    return num, valid, key, labels, streams


def _int_column(values) -> pa.Array:
    return to_int64(values)


_PROFILE = os.environ.get("TRACELAKE_PARSE_PROFILE") == "1"
_T: list = []


def _tick(label: str) -> None:
    """Record a (label, time) checkpoint when ``TRACELAKE_PARSE_PROFILE=1`` (development aid)."""
    if _PROFILE:
        _T.append((label, time.perf_counter()))


def _parse(data: bytes, max_uncompressed_bytes: int, compact_args: bool) -> ParsedTrace:
    _T.clear()
    _tick("start")
    doc, container = decode_container(data, max_uncompressed_bytes)
    _tick("gunzip")
    if not doc[:4096].strip() and not doc.strip():
        raise TraceError("empty file" if container == "json" else "empty document after gunzip")
    top, buf, flags = _decode_document(doc)
    _tick("decode")
    flagset = set(flags)
    header = None
    if isinstance(top, list):
        events = top
        fmt = "list-2020"
    else:
        if top.traceEvents is None:
            raise TraceError("not a Chrome trace: top-level object has no traceEvents")
        events = top.traceEvents
        header = top
        fmt = "object"
    n_all = len(events)

    _tick("before phases")
    # -- phases ---------------------------------------------------------------------------
    ph_code = _phase_codes([e.ph for e in events])
    if (ph_code < 0).any():
        flagset.add("unsupported_phase")
    rows = np.flatnonzero((ph_code >= 0) & (ph_code <= _C))
    flows = np.flatnonzero((ph_code == _S) | (ph_code == _F))
    metas = np.flatnonzero(ph_code == _M)
    n = len(rows)
    row_ph = ph_code[rows]
    everything = np.arange(n_all)

    time_doc: list = []

    def raw_time(field_name: str, subset: np.ndarray):
        def get(pos: np.ndarray):
            if not time_doc:
                t = _TIME_DECODER.decode(buf)
                time_doc.append(t if isinstance(t, list) else t.traceEvents)
            tev = time_doc[0]
            return [getattr(tev[g], field_name) for g in subset[pos].tolist()]

        return get

    _tick("before timestamps")
    # -- timestamps (all events: rows and flow points share them) --------------------------
    base_ns = 0
    has_base = False
    if header is not None and header.baseTimeNanoseconds is not None:
        b = to_int64([header.baseTimeNanoseconds])[0].as_py()
        if b is not None:
            base_ns, has_base = int(b), True
    ts_all_vals = [e.ts for e in events]
    ts_types = set(map(type, ts_all_vals))
    ts_all, ts_all_ok = micros_to_ns(ts_all_vals, raw_time("ts", everything), types=ts_types)
    del ts_all_vals
    ts_rel, ts_ok = ts_all[rows], ts_all_ok[rows]
    if n and not ts_ok.all():
        bad = int(rows[np.flatnonzero(~ts_ok)[0]])
        raise TraceError(f"event {bad} (ph {events[bad].ph!r}) has no valid numeric ts: {events[bad].ts!r}")
    ts_is_float = float in ts_types
    ts_all = _add_base(ts_all, base_ns)
    ts_ns = ts_all[rows]

    rev = _take(events, rows)
    is_x = row_ph == _X
    xpos = np.flatnonzero(is_x)
    dur_ns, dur_ok = micros_to_ns([e.dur for e in rev], raw_time("dur", rows))
    dur_ok &= is_x
    dur_ns[~dur_ok] = 0
    if len(xpos):
        if (dur_ns < 0).any():
            flagset.add("negative_duration")
        if not dur_ok[xpos].all():
            flagset.add("missing_duration")
    end_ns = ts_ns + np.maximum(dur_ns, 0)

    # -- names, categories ----------------------------------------------------------------
    _tick("ts")
    name_all = _str_array([e.name for e in events])
    name_arr = name_all.take(pa.array(rows))
    cat_all = _str_array([e.cat for e in events])
    raw_cat = cat_all.take(pa.array(rows))
    cat_dict = raw_cat.dictionary_encode()
    dict_vals = cat_dict.dictionary.to_pylist()
    norm_vals = [CATEGORY_ALIASES.get(v, v) for v in dict_vals]
    if any(v in CATEGORY_ALIASES and v != "gpu_user_Annotation" for v in dict_vals) and fmt == "object":
        fmt = "object-legacy-categories"
    idx = cat_dict.indices
    category = pa.array(norm_vals, pa.string()).take(idx) if n else pa.array([], pa.string())
    gpu_by_code = np.array([v in GPU_CATEGORIES for v in norm_vals] + [False], bool)
    idx_np = idx.fill_null(len(norm_vals)).to_numpy(zero_copy_only=False).astype(np.int64) if n else np.zeros(0, np.int64)
    is_gpu = gpu_by_code[idx_np]

    _tick("before pid / tid")
    # -- pid / tid ------------------------------------------------------------------------
    pid_all, pid_all_ok, pid_key_all, pid_labels_all, _ = _id_keys([e.pid for e in events])
    tid_all, tid_all_ok, tid_key_all, tid_labels_all, tid_streams_all = _id_keys([e.tid for e in events], parse_stream=True)
    _tick("idkeys")
    track_all = track_codes(pid_key_all, tid_key_all)
    _tick("trackcodes")
    pid_num, pid_ok, pid_key = pid_all[rows], pid_all_ok[rows], pid_key_all[rows]
    tid_num, tid_ok, tid_key = tid_all[rows], tid_all_ok[rows], tid_key_all[rows]
    track = track_all[rows]
    row_pos = np.full(n_all, -1, np.int64)
    row_pos[rows] = np.arange(n)
    pid_labels = {int(row_pos[i]): v for i, v in pid_labels_all.items() if row_pos[i] >= 0}
    tid_labels = {int(row_pos[i]): v for i, v in tid_labels_all.items() if row_pos[i] >= 0}
    tid_streams = {int(row_pos[i]): v for i, v in tid_streams_all.items() if row_pos[i] >= 0}

    _tick("pidtid")
    # -- metadata events: process / thread names -------------------------------------------
    proc_names: dict[int, str] = {}
    thread_names: dict[tuple[int, int], str] = {}
    for i in metas.tolist():
        e = events[i]
        if e.name not in ("process_name", "thread_name") or e.args is None:
            continue
        try:
            a = msgspec.json.decode(e.args)
        except msgspec.DecodeError:
            continue
        nm = a.get("name") if isinstance(a, dict) else None
        if not isinstance(nm, str):
            continue
        if e.name == "process_name":
            proc_names[int(pid_key_all[i])] = nm
        else:
            thread_names[(int(pid_key_all[i]), int(tid_key_all[i]))] = nm
    process_name = _lookup_names(pid_key, lambda k, pos: proc_names.get(k, pid_labels.get(pos)), pid_labels)
    thread_name = _lookup_track_names(track, pid_key, tid_key, thread_names, tid_labels)
    _tick("procnames")
    flow_info = _flow_points(events, flows, cat_all, name_all, ph_code, ts_all, ts_all_ok, track_all) if len(flows) else None
    _tick("flowpoints")

    _tick("before args")
    # -- args -----------------------------------------------------------------------------
    raws = [e.args for e in rev]
    args_json, A, args_buf = _args_columns(raws, compact_args)
    _tick("args_columns")

    def arg(name: str):
        return _pluck(A, name)

    ext = _int_column(arg("external_id"))
    if b'"external id"' in args_buf:
        ext = pc.coalesce(ext, _int_column(arg("external_id_legacy")))
    stream_arg = _int_column(arg("stream"))
    device_arg = _int_column(arg("device"))

    corr_int, corr_ok = _int_and_mask(_int_column(arg("correlation")))

    _tick("argfields")
    # -- structure: nesting ----------------------------------------------------------------
    slices = SliceIndex(track[xpos], ts_ns[xpos], end_ns[xpos])
    _tick("sliceindex")
    parent = np.full(n, -1, np.int64)
    depth = np.zeros(n, np.int32)
    p_x, d_x = slices.parents()
    has_p = p_x >= 0
    parent[xpos[has_p]] = rows[xpos[p_x[has_p]]]
    depth[xpos] = d_x
    other = np.flatnonzero(~is_x)
    if len(other):
        enc = slices.enclosing(track[other], ts_ns[other])
        ok = enc >= 0
        parent[other[ok]] = rows[xpos[slices.order[enc[ok]]]]
        depth[other[ok]] = slices.depth[enc[ok]] + 1

    _tick("before flows")
    # -- flows ----------------------------------------------------------------------------
    flow_id = np.zeros(n, np.int64)
    flow_ok = np.zeros(n, bool)
    fb_id = np.zeros(n, np.int64)
    fb_ok = np.zeros(n, bool)
    if flow_info is not None and len(xpos):
        _bind_flows(flow_info, xpos, slices, flow_id, flow_ok, fb_id, fb_ok)

    # correlation fallback for legacy GPU events with only a launch flow
    fill = is_gpu & ~corr_ok & flow_ok
    if fill.any():
        corr_int = np.where(fill, flow_id, corr_int)
        corr_ok = corr_ok | fill

    _tick("before steps")
    # -- steps ----------------------------------------------------------------------------
    step, step_ok, n_steps = _steps(name_arr, is_x, is_gpu, ts_ns, end_ns, corr_int, corr_ok)
    if n_steps == 0:
        flagset.add("no_profiler_step")

    _tick("before device / stream")
    # -- device / stream ------------------------------------------------------------------
    dev_np, dev_ok = _int_and_mask(device_arg)
    device_ok = is_gpu & (dev_ok | pid_ok)
    device_val = np.where(dev_ok, dev_np, pid_num)
    str_np, str_ok = _int_and_mask(stream_arg)
    if tid_streams:
        pos = np.fromiter(tid_streams.keys(), np.int64, len(tid_streams))
        vals = np.fromiter(tid_streams.values(), np.int64, len(tid_streams))
        take = ~str_ok[pos]
        str_np[pos[take]] = vals[take]
        str_ok[pos[take]] = True

    _tick("before collectives")
    # -- collectives ----------------------------------------------------------------------
    coll_cols = _collective_columns(A, arg, args_buf, name_arr, category, n)

    _tick("before assemble")
    # -- assemble -------------------------------------------------------------------------
    cols = {
        "event_id": pa.array(rows.astype(np.int64)),
        "source": pa.array(["kineto"]).take(pa.array(np.zeros(n, np.int32))),
        "ph": pa.array(["X", "i", "C"]).take(pa.array(row_ph.astype(np.int32))),
        "category": category,
        "raw_category": raw_cat,
        "name": name_arr,
        "ts_ns": pa.array(ts_ns),
        "dur_ns": _masked(dur_ns, dur_ok),
        "pid": _masked(pid_num, pid_ok),
        "tid": _masked(tid_num, tid_ok),
        "process_name": process_name,
        "thread_name": thread_name,
        "device": _masked(device_val, device_ok, pa.int32()),
        "stream": _masked(str_np, str_ok),
        "is_gpu": pa.array(is_gpu),
        "correlation": _masked(corr_int, corr_ok),
        "external_id": ext,
        "flow_id": _masked(flow_id, flow_ok),
        "fwdbwd_flow_id": _masked(fb_id, fb_ok),
        "parent": _masked(parent, parent >= 0),
        "depth": pa.array(depth, pa.int32()),
        "step": _masked(step, step_ok),
        **coll_cols,
        "args_json": args_json,
    }
    table = pa.Table.from_arrays([cols[c].cast(_SCHEMA.field(c).type) if cols[c].type != _SCHEMA.field(c).type else cols[c]
                                  for c in EVENT_COLUMNS], schema=_SCHEMA)

    meta = _meta(header, fmt, container, len(doc), has_base, base_ns, ts_ns, end_ns, ts_is_float, ts_rel, n,
                 n_steps, sorted(flagset))
    _tick("meta")
    return ParsedTrace(events=table, meta=meta)


def _has_float(vals) -> bool:
    try:
        return np.asarray(vals).dtype.kind == "f"
    except Exception:
        return any(type(v) is float for v in vals)


def _add_base(rel: np.ndarray, base: int) -> np.ndarray:
    if not base:
        return rel
    if len(rel):
        hi, lo = int(rel.max()), int(rel.min())
        if hi + base > 2**63 - 1 or lo + base < -(2**63):
            raise TraceError("timestamp out of int64 ns range after adding baseTimeNanoseconds")
    return rel + np.int64(base)


def _int_and_mask(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    ok = ~np.asarray(arr.is_null().to_numpy(zero_copy_only=False), dtype=bool) if arr.null_count else np.ones(len(arr), bool)
    vals = arr.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64) if len(arr) else np.zeros(0, np.int64)
    return vals, ok


def _masked(vals: np.ndarray, ok: np.ndarray, typ: pa.DataType = pa.int64()) -> pa.Array:
    if len(vals) == 0:
        return pa.array([], typ)
    if ok.all():
        return pa.array(vals, typ)
    return pa.array(vals, typ, mask=~ok)


def _lookup_names(keys: np.ndarray, resolve, labels: dict) -> pa.Array:
    """Per-row name from a per-key resolver, computed once per distinct key."""
    if len(keys) == 0:
        return pa.array([], pa.string())
    codes, first = _factorize(keys)
    names = [resolve(int(keys[p]), int(p)) for p in first.tolist()]
    return pa.array(names, pa.string()).take(pa.array(codes))


def _lookup_track_names(track, pid_key, tid_key, thread_names: dict, tid_labels: dict) -> pa.Array:
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
    first = np.full(int(codes.max()) + 1 if len(codes) else 0, len(codes), np.int64)
    np.minimum.at(first, codes, np.arange(len(codes)))
    return codes, first


def _args_columns(raws: list, compact: bool):
    """Raw args per row -> (args_json pa.string array, list of _Args, searchable args bytes)."""
    n = len(raws)
    if n == 0:
        return pa.array([], pa.string()), [], b""
    present = np.fromiter(map(is_not, raws, repeat(None)), bool, n)
    enc = msgspec.json.encode(raws)  # "[r0,r1,...]" with raw text verbatim, null for absent
    if compact:
        enc = msgspec.json.format(enc, indent=-1)
        parts = _RAW_LIST_DECODER.decode(enc)
        lens = np.fromiter(map(len, parts), np.int64, n)
    else:
        lens = np.fromiter(map(len, [r if r is not None else _NULL_RAW for r in raws]), np.int64, n)
    offsets = np.empty(n + 1, np.int32 if len(enc) < 2**31 else np.int64)
    offsets[0] = 1
    np.cumsum(lens + 1, out=offsets[1:])
    offsets[1:] += 1
    typ = pa.binary() if offsets.dtype == np.int32 else pa.large_binary()
    validity = None if present.all() else pa.array(present).buffers()[1]
    arr = pa.Array.from_buffers(typ, n, [validity, pa.py_buffer(offsets), pa.py_buffer(enc)])
    arr = pc.binary_slice(arr, 0, -1).cast(pa.string() if typ == pa.binary() else pa.large_string())
    if arr.type != pa.string():
        arr = arr.cast(pa.string())
    try:
        A = _ARGS_DECODER.decode(enc)
    except msgspec.DecodeError:
        A = []
        for r in raws:
            try:
                A.append(_ARGS1_DECODER.decode(r) if r is not None else None)
            except msgspec.DecodeError:
                A.append(None)
    A = [a if a is not None else _EMPTY_ARGS for a in A]
    return arr, A, enc


def _is_not_none(x) -> bool:
    return x is not None


def _flow_points(events, flows, cat_all, name_all, ph_code, ts_all, ts_ok_all, track_all) -> dict | None:
    """Launch and forward/backward flow points (``s``/``f``) with their ts, id and track."""
    cats = cat_all.take(pa.array(flows))
    launch = np.asarray(pc.is_in(cats, value_set=_LAUNCH_FLOW_ARR).to_numpy(zero_copy_only=False), bool)
    fwdbwd = np.asarray(pc.is_in(cats, value_set=_FWDBWD_FLOW_ARR).to_numpy(zero_copy_only=False), bool)
    legacy = np.flatnonzero(np.asarray(pc.equal(cats, "async").fill_null(False).to_numpy(zero_copy_only=False), bool))
    if len(legacy):
        launch[legacy] |= np.asarray(pc.equal(name_all.take(pa.array(flows[legacy])), "launch").fill_null(False)
                                     .to_numpy(zero_copy_only=False), bool)
    kind = np.where(launch, 1, np.where(fwdbwd, 2, 0)).astype(np.int8)  # 1 launch, 2 fwdbwd
    sel = np.flatnonzero(kind > 0)
    if not len(sel):
        return None
    gidx = flows[sel]
    fev = _take(events, gidx)
    id_np, id_ok = _int_and_mask(to_int64([e.id for e in fev]))
    return {
        "kind": kind[sel],
        "ts": ts_all[gidx],
        "ok": ts_ok_all[gidx] & id_ok,
        "id": id_np,
        "track": track_all[gidx],
        "is_f": ph_code[gidx] == _F,
        "bp_e": _eq([e.bp for e in fev], "e"),
    }


def _eq(values: list, s: str) -> np.ndarray:
    return np.asarray(pc.equal(_str_array(values), s).fill_null(False).to_numpy(zero_copy_only=False), bool)


def _bind_flows(fi: dict, xpos, slices: SliceIndex, flow_id, flow_ok, fb_id, fb_ok) -> None:
    """Bind flow points to X rows: ``s`` and ``f`` with ``bp:"e"`` to the innermost enclosing
    slice on their (pid, tid) at ts; other ``f`` to the next slice starting at/after ts."""
    ts, track, ok = fi["ts"], fi["track"], fi["ok"]
    target = np.full(len(ts), -1, np.int64)
    slice_rows = xpos[slices.order]  # sorted slice index -> row position
    enclosing = ok & (~fi["is_f"] | fi["bp_e"])
    nxt = ok & fi["is_f"] & ~fi["bp_e"]
    if enclosing.any():
        e_idx = np.flatnonzero(enclosing)
        enc = slices.enclosing(track[e_idx], ts[e_idx])
        good = enc >= 0
        target[e_idx[good]] = slice_rows[enc[good]]
    if nxt.any():
        n_idx = np.flatnonzero(nxt)
        nx = slices.next_starting(track[n_idx], ts[n_idx])
        good = nx >= 0
        target[n_idx[good]] = slice_rows[nx[good]]
    for k, out_id, out_ok in ((1, flow_id, flow_ok), (2, fb_id, fb_ok)):
        m = np.flatnonzero((fi["kind"] == k) & (target >= 0))
        if not len(m):
            continue
        tgt = target[m]
        _, first = np.unique(tgt, return_index=True)  # first flow in file order wins
        out_id[tgt[first]] = fi["id"][m[first]]
        out_ok[tgt[first]] = True


def _steps(name_arr, is_x, is_gpu, ts_ns, end_ns, corr, corr_ok):
    n = len(ts_ns)
    step = np.zeros(n, np.int64)
    ok = np.zeros(n, bool)
    if n == 0:
        return step, ok, 0
    is_step = np.asarray(pc.starts_with(name_arr, _STEP_PREFIX).fill_null(False).to_numpy(zero_copy_only=False), bool)
    is_step &= is_x & ~is_gpu
    sidx = np.flatnonzero(is_step)
    nums = []
    keep = []
    for i, nm in zip(sidx.tolist(), name_arr.take(pa.array(sidx)).to_pylist()):
        tail = nm[len(_STEP_PREFIX):]
        if tail.isdigit():
            nums.append(int(tail))
            keep.append(i)
    if not keep:
        return step, ok, 0
    keep = np.array(keep, np.int64)
    nums = np.array(nums, np.int64)
    order = np.lexsort((keep, ts_ns[keep]))
    s_start, s_end, s_num = ts_ns[keep][order], end_ns[keep][order], nums[order]
    cpu = np.flatnonzero(~is_gpu)
    k = np.searchsorted(s_start, ts_ns[cpu], side="right") - 1
    inside = k >= 0
    inside[inside] = ts_ns[cpu[inside]] <= s_end[k[inside]]
    step[cpu[inside]] = s_num[k[inside]]
    ok[cpu[inside]] = True
    # GPU events: through the CPU launch with the same correlation id
    launch = np.flatnonzero(~is_gpu & corr_ok & ok)
    gpu = np.flatnonzero(is_gpu & corr_ok)
    if len(launch) and len(gpu):
        lc = corr[launch]
        o = np.argsort(lc, kind="stable")
        lc_s, ls = lc[o], step[launch][o]
        j = np.searchsorted(lc_s, corr[gpu])
        j_ok = j < len(lc_s)
        j_ok[j_ok] = lc_s[j[j_ok]] == corr[gpu[j_ok]]
        step[gpu[j_ok]] = ls[j[j_ok]]
        ok[gpu[j_ok]] = True
    return step, ok, int(len(np.unique(nums)))


def _collective_columns(A, arg, args_buf: bytes, name_arr: pa.Array, category: pa.Array, n: int) -> dict:
    null_str = pa.nulls(n, pa.string())
    null_i64 = pa.nulls(n, pa.int64())
    out = {"collective": null_str, "pg_name": null_str, "group_size": pa.nulls(n, pa.int32()),
           "msg_bytes": null_i64, "seq": null_i64}
    if b'"Collective name"' in args_buf:
        out["collective"] = _str_array(arg("collective"))
        if b'"Process Group Name"' in args_buf:
            out["pg_name"] = _str_array([None if v is None else str(v) for v in arg("pg_name")])
        if b'"Group size"' in args_buf:
            out["group_size"] = to_int64(arg("group_size")).cast(pa.int32(), safe=False)
        if b'"Seq"' in args_buf:
            out["seq"] = to_int64(arg("seq"))
        has_in = b'"In msg nelems"' in args_buf or b'"In msg size"' in args_buf
        if has_in:
            msg = []
            for a in A:
                if a.collective is None and a.in_nelems is None and a.in_size is None:
                    msg.append(None)
                    continue
                i_n = a.in_nelems if a.in_nelems is not None else a.in_size
                o_n = a.out_nelems if a.out_nelems is not None else a.out_size
                vals = [v for v in (i_n, o_n) if type(v) is int]
                size = DTYPE_BYTES.get(a.dtype) if isinstance(a.dtype, str) else None
                msg.append(max(vals) * size if vals and size else None)
            out["msg_bytes"] = pa.array(msg, pa.int64())
    # name inference for NCCL/RCCL kernels without a "Collective name"
    if n:
        is_kernel = pc.equal(category, "kernel").fill_null(False)
        need = pc.and_(is_kernel, pc.is_null(out["collective"]))
        need = pc.and_(need, pc.match_substring_regex(name_arr, "^(?:nccl|rccl)").fill_null(False))
        if pc.any(need).as_py():
            idx = pc.indices_nonzero(need)
            names = name_arr.take(idx)
            op_names = _nccl_ops(names)
            if any(v is not None for v in op_names):
                coll = out["collective"].to_pylist() if out["collective"].null_count != n else [None] * n
                for i, v in zip(idx.to_pylist(), op_names):
                    if v is not None:
                        coll[i] = v
                out["collective"] = pa.array(coll, pa.string())
    return out


_NCCL_NAME = re.compile(_NCCL_RE)


def _nccl_ops(names: pa.Array) -> list:
    out = []
    for nm in names.to_pylist():
        m = _NCCL_NAME.match(nm) if nm else None
        out.append(_NCCL_OPS.get(m.group(1).lower()) if m else None)
    return out


def _meta(header, fmt, container, size, has_base, base_ns, ts_ns, end_ns, ts_is_float, ts_rel, n, n_steps, flags):
    if has_base:
        time_base = "relative+baseTimeNanoseconds"
    elif n and int(np.abs(ts_rel).max()) >= 10**15:  # >= 1e12 µs: epoch µs, not a relative clock
        time_base = "absolute-us-float" if ts_is_float else "absolute-us-int"
    else:
        time_base = "relative"
    dist = header.distributedInfo if header is not None and isinstance(header.distributedInfo, dict) else {}
    rank = _opt_int(dist.get("rank"))
    world = _opt_int(dist.get("world_size"))
    backend = dist.get("backend") if isinstance(dist.get("backend"), str) else None
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
        "distributed_backend": backend,
        "world_size": world,
        "rank": rank,
        "flags": list(flags),
    }


def _opt_int(v) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str) and v.strip().lstrip("-").isdigit():
        return int(v.strip())
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return None
