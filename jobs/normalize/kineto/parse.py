"""Fast, exact parser of torch.profiler / Kineto Chrome-trace JSON into `events` rows.

``parse_kineto(data, uri)`` turns the raw bytes of one trace file (gzip or plain) into the
``events`` columns of :data:`schemas.tables.EVENTS` (without the identity/partition columns,
which the caller adds) and the capture-level fields of :data:`schemas.tables.CAPTURES`.

Pipeline (speed and memory are product targets, see the module docs it links):

0. Fast path (``engine="auto"``): the C scanner of :mod:`jobs.normalize.kineto.native` reduces the
   streamed JSON to the same columns in one pass (no per-event Python objects); whatever it
   cannot reproduce exactly hands the file to the reference path below. Step 2 is shared.
1. :func:`jobs.normalize.container.iter_decoded` streams the document (gzip detected from magic
   bytes, every member, size cap), :class:`jobs.normalize.kineto.stream.TraceSplitter` cuts it into
   runs of whole events, each decoded by one typed ``msgspec`` call (only the fields we need,
   ``args`` kept as raw JSON text) and reduced to arrays by
   :class:`jobs.normalize.kineto.columns.EventColumns`; Python objects never exist for more than one
   chunk. Files the splitter cannot prove safe to cut (or invalid files) are decoded whole,
   which also yields the precise quarantine reason and runs the lenient repair
   (:mod:`jobs.normalize.kineto.repair`).
2. Vectorized passes over the columns (``_finish``, one function per pass): category normalization,
   exact ns timestamps (:mod:`jobs.normalize.kineto.numbers`), nesting, flows and ProfilerStep
   attribution (:mod:`jobs.normalize.kineto.linkage`), collective metadata.

Format generations handled (``../shared/reference/kineto_and_hta.md`` §2.8): bare-list 2020
traces, legacy categories (``Operator/Runtime/Kernel/Memcpy/Memset``), string tids
(``"stream 7"``), legacy flows (``async``/``launch``, ``async_cpu_to_gpu``, ``forward_backward``),
absolute µs ints/floats and relative µs + ``baseTimeNanoseconds``.

Defects of real traces (``../shared/reference/bug_cases.md``) are tolerated and flagged, never a
reason to lose the file (:data:`FLAGS`, ``meta["flag_counts"]``): non-finite number tokens and raw
control characters are repaired (:mod:`jobs.normalize.kineto.repair`, also while streaming, and in the C
scanner); an event without a valid ``ts`` is dropped, a negative ``dur`` is null; partial overlaps on
a track, merged multi-rank files (launch links keyed by ``(pid, correlation)``), launches that start
before their call ends and truncated traces are detected. Hostile input is refused: nesting depth,
string length (:mod:`jobs.normalize.limits`) and decompressed size are capped.
"""

from __future__ import annotations

import gc
import logging
import os
import posixpath
import re
import time
from dataclasses import dataclass, field

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.normalize.kineto import native
from jobs.normalize.kineto import shapes
from jobs.normalize.kineto.columns import X, EventColumns, bool_np, int_and_mask
from jobs.normalize.container import DEFAULT_MAX_UNCOMPRESSED_BYTES, GZIP_MAGIC, decode_container, iter_decoded
from jobs.normalize.errors import TraceError
from jobs.normalize.limits import (
    DEFAULT_MAX_DEPTH,
    DEFAULT_MAX_STRING_BYTES,
    JsonLimitScanner,
    LimitExceeded,
    check_limits,
    depth_reason,
    validate_limits,
)
from jobs.normalize.kineto.linkage import SliceIndex, correlation_link_keys, track_codes
from jobs.normalize.kineto.native import NativeBail
from jobs.normalize.kineto.numbers import to_int64
from jobs.normalize.kineto.repair import repair_text
from jobs.normalize.kineto.stream import NotSplittable, Repairs, TraceSplitter
from schemas.tables import EVENTS

__all__ = ["parse_kineto", "ParsedTrace", "TraceError", "rank_from_filename", "EVENT_COLUMNS",
           "CATEGORY_ALIASES", "GPU_CATEGORIES"]

#: Columns produced by :func:`parse_kineto` (EVENTS minus identity/partition columns), in order.
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
    "allreduce": "allreduce", "allgather": "allgather", "reducescatter": "reduce_scatter",
    "broadcast": "broadcast", "reduce": "reduce", "sendrecv": "sendrecv", "send": "send",
    "recv": "recv", "alltoall": "all_to_all", "alltoallv": "all_to_all",
}
_NCCL_RE = r"(?i)^(?:nccl|rccl)(?:dev)?kernel_([a-z]+)"  # any case: nccldevkernel_* too (B16)
_STEP_PREFIX = "ProfilerStep#"
_CHUNK_BYTES = 4 << 20  # decoded bytes per chunk (bounds the Python objects alive at once)
_STREAMING = True  # False: always decode the whole document (tests compare both paths)
_NATIVE_PIECE_BYTES = 1 << 20  # gunzip piece of the native path (smaller pieces: lower peak RSS)
_POOL = pa.default_memory_pool()
_LOG = logging.getLogger(__name__)


@dataclass
class ParsedTrace:
    """Result of :func:`parse_kineto`.

    Attributes:
        events: ``pyarrow.Table`` with the :data:`EVENT_COLUMNS` of the EVENTS schema (same order
            and types), one row per ``X``/``i``/``C`` event, ``event_id`` = index in traceEvents.
        meta: capture-level fields: ``container``, ``uncompressed_bytes``, ``format``,
            ``time_base``, ``base_time_ns``, ``trace_start_ns``, ``trace_end_ns``, ``n_events``,
            ``n_profiler_steps``, ``host_name``, ``device_name``, ``distributed_backend``,
            ``world_size``, ``rank`` (int from ``distributedInfo`` or None), ``flags`` (list[str],
            see :data:`FLAGS`), ``flag_counts`` (dict: flag → number of events or repairs behind it,
            for the countable flags) and ``repair_offset`` (document byte offset of the first lenient
            repair, or None).
    """

    events: pa.Table
    meta: dict = field(default_factory=dict)


#: Data-quality flags :func:`parse_kineto` can raise (``ParsedTrace.meta["flags"]``, then
#: ``captures.flags``); the countable ones also appear in ``meta["flag_counts"]``.
FLAGS = {
    "nonfinite_number": "NaN/Infinity/inf/nan tokens (any sign/case) read as null (count: tokens)",
    "control_characters": "raw control characters inside strings kept, read as if escaped (count: characters)",
    "invalid_timestamp": "X/i/C events without a valid numeric ts were dropped (count: events)",
    "negative_duration": "X events with dur < 0: dur_ns is null (never summed as time), the event is left out of "
                         "the trace span (count: events)",
    "missing_duration": "X events without a valid dur",
    "improper_nesting": "slices that start inside another slice of their track and end after it (count: slices)",
    "negative_launch_delay": "device work that starts before its launch call ends (host/device clock skew); "
                             "launch delays are clamped to 0 in the statistics (count: device events)",
    "merged_ranks": "host launches of several pids share correlation ids (a file merged from several ranks); "
                    "launch links are keyed by (pid, correlation)",
    "partial_trace": "the trace looks truncated: events stop well before the last ProfilerStep ends, or the "
                     "file reports dropped events",
    "unsupported_phase": "events of a phase other than X/i/C/M/s/f were skipped",
    "no_profiler_step": "no ProfilerStep#N annotation",
}
_PARTIAL_TAIL_FRACTION = 0.5  # events end before this fraction of the last ProfilerStep: truncated (B22)


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
    engine: str | None = None,
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_string_bytes: int = DEFAULT_MAX_STRING_BYTES,
) -> ParsedTrace:
    """Parse one Kineto/Chrome-trace file into canonical event rows and capture metadata.

    Args:
        data: raw file bytes as stored (gzip — single or multi-member — or plain JSON).
        uri: the file's URI (informational; the caller prefixes it to quarantine reasons).
        max_uncompressed_bytes: cap on the decoded JSON size (default 8 GiB).
        compact_args: write ``args_json`` as compact JSON (no insignificant whitespace, ~10%
            slower); if False the args text is kept byte-for-byte as written.
        engine: ``"auto"`` (default, or ``$TRACELAKE_KINETO_ENGINE`` when set): the native C
            scanner (:mod:`jobs.normalize.kineto.native`) when it is built and can reproduce the
            reference exactly, else the pure-Python path; ``"python"``: always the pure-Python
            path (the reference); ``"native"``: the native scanner only (raises
            :class:`~jobs.normalize.kineto.native.NativeBail` where ``auto`` would fall back; for tests
            and benchmarks). Both paths give equal tables and metadata.
        max_depth: cap on the JSON nesting depth of the document (default 256,
            :mod:`jobs.normalize.limits`); deeper files are quarantined.
        max_string_bytes: cap on the length of one JSON string literal, bytes (default 64 MiB).

    Returns:
        :class:`ParsedTrace` (``events`` Arrow table, ``meta`` dict).

    Raises:
        TraceError: the file must be quarantined; the message names the problem (empty file,
            truncated/corrupt gzip, size limit, nesting depth or string length over the limits
            (:class:`~jobs.normalize.limits.LimitExceeded`), invalid or truncated JSON with the byte
            offset, not a Chrome trace, no event with a numeric ``ts``).
        ValueError: an invalid ``engine`` or limit.
    """
    if engine is None:
        engine = os.environ.get("TRACELAKE_KINETO_ENGINE") or "auto"
    if engine not in ("auto", "python", "native"):
        raise ValueError(f"engine must be 'auto', 'python' or 'native', not {engine!r}")
    validate_limits(max_depth, max_string_bytes)
    limits = (max_depth, max_string_bytes)
    was_enabled = gc.isenabled()
    gc.disable()  # the decoded objects are acyclic; collections would only cost time
    try:
        data = bytes(data) if not isinstance(data, bytes) else data
        parsed = None
        if engine == "native" or (engine == "auto" and _use_native()):
            try:
                parsed = _parse_native(data, max_uncompressed_bytes, compact_args, limits)
            except LimitExceeded:
                raise  # hostile input: decided, never handed to the slower path
            except (NativeBail, TraceError):
                if engine == "native":
                    raise
                # the reference path decides: same result, or the precise quarantine reason
            except Exception:  # a scanner defect must not lose the file: log it, use the reference
                if engine == "native":
                    raise
                _LOG.warning("native Kineto scanner failed on %s; using the Python path", uri or "<bytes>",
                             exc_info=True)
        if parsed is None:
            parsed = _parse(data, max_uncompressed_bytes, compact_args, limits)
        _log_repairs(parsed.meta, uri)
        return parsed
    finally:
        if was_enabled:
            gc.enable()


def _log_repairs(meta: dict, uri: str) -> None:
    """Warn about lenient repairs: which, how many, and the byte offset of the first (B02)."""
    counts = {k: v for k, v in meta.get("flag_counts", {}).items() if k in ("nonfinite_number", "control_characters")}
    if counts:
        what = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
        _LOG.warning("%s: repaired %s (first at byte %s of the document)", uri or "<bytes>", what,
                     meta.get("repair_offset"))


# --------------------------------------------------------------------------------------------
# decoding: chunked (streaming) first, whole-document fallback

_PROFILE = os.environ.get("TRACELAKE_PARSE_PROFILE") == "1"
_T: list = []


def _tick(label: str) -> None:
    """Record a (label, time) checkpoint when ``TRACELAKE_PARSE_PROFILE=1`` (development aid)."""
    if _PROFILE:
        _T.append((label, time.perf_counter()))


def _use_native() -> bool:
    """``engine="auto"``: the native scanner is built and streaming is on."""
    return native.AVAILABLE and _STREAMING


def _parse_native(data: bytes, max_uncompressed_bytes: int, compact_args: bool, limits) -> ParsedTrace:
    _T.clear()
    _tick("start")
    container = "gzip" if data[:2] == GZIP_MAGIC else "json"
    cols, header, is_list, size, repairs = native.scan_trace(data, max_uncompressed_bytes, compact_args,
                                                             _NATIVE_PIECE_BYTES, limits)
    _tick("native-scan")
    return _finish(cols, header, is_list, container, size, repairs)


def _checked(pieces, limits):
    """The decoded pieces, each checked against the depth / string-length limits first."""
    scanner = JsonLimitScanner(*limits)
    for piece in pieces:
        scanner.feed(piece)
        yield piece


def _parse(data: bytes, max_uncompressed_bytes: int, compact_args: bool,
           limits=(DEFAULT_MAX_DEPTH, DEFAULT_MAX_STRING_BYTES)) -> ParsedTrace:
    _T.clear()
    _tick("start")
    container = "gzip" if data[:2] == GZIP_MAGIC else "json"
    cols = EventColumns(compact_args)
    repairs = Repairs()
    try:
        if not _STREAMING:
            raise NotSplittable("streaming disabled")
        splitter = TraceSplitter(_checked(iter_decoded(data, max_uncompressed_bytes, _CHUNK_BYTES), limits),
                                 shapes.EVENT_LIST.decode, shapes.HEADER.decode, _CHUNK_BYTES)
        for chunk in splitter:
            cols.add(chunk.events, _chunk_raw_text(chunk.text))
            del chunk
            _POOL.release_unused()
        header = None if splitter.is_list else splitter.header
        is_list, size = splitter.is_list, splitter.total_bytes
        repairs = splitter.repairs
    except NotSplittable:
        cols = None
    _tick("chunks")
    if cols is None:  # decode the whole document (exact error messages, lenient repair)
        cols = EventColumns(compact_args)
        repairs = Repairs()
        doc, container = decode_container(data, max_uncompressed_bytes)
        if not doc[:4096].strip() and not doc.strip():
            raise TraceError("empty file" if container == "json" else "empty document after gunzip")
        check_limits(doc, *limits)
        top, buf = _decode_document(doc, repairs, limits[0])
        if isinstance(top, list):
            header, events, is_list = None, top, True
        else:
            if top.traceEvents is None:
                raise TraceError("not a Chrome trace: top-level object has no traceEvents")
            header, events, is_list = top, top.traceEvents, False
            top.traceEvents = None
        size = len(doc)
        cols.add(events, _document_raw_text(buf))
        del events, top, buf, doc
        _tick("whole")
    return _finish(cols, header, is_list, container, size, repairs)


def _chunk_raw_text(text: memoryview):
    cache: list = []

    def get(field_name: str, pos: np.ndarray) -> list:
        if not cache:
            cache.append(shapes.TIME_LIST.decode(text))
        tev = cache[0]
        return [getattr(tev[i], field_name) for i in pos.tolist()]

    return get


def _document_raw_text(buf: bytes):
    cache: list = []

    def get(field_name: str, pos: np.ndarray) -> list:
        if not cache:
            t = shapes.TIME_DOCUMENT.decode(buf)
            cache.append(t if isinstance(t, list) else t.traceEvents)
        tev = cache[0]
        return [getattr(tev[i], field_name) for i in pos.tolist()]

    return get


def _json_reason(exc: Exception) -> str:
    msg = str(exc)
    if "truncated" in msg.lower():
        return "truncated JSON: the document ends before it is complete"
    m = re.search(r"\(byte (\d+)\)", msg)
    detail = re.sub(r"\s*\(byte \d+\)", "", msg).replace("JSON is malformed: ", "")
    if m:
        return f"not valid JSON at byte {m.group(1)}: {detail}"
    return f"not valid JSON: {detail}"


def _decode_document(doc: bytes, repairs: Repairs, max_depth: int = DEFAULT_MAX_DEPTH):
    """Strict typed decode; on a JSON syntax error, one lenient repair attempt (recorded in ``repairs``).

    Returns ``(decoded, text_decoded)``."""
    try:
        return shapes.DOCUMENT.decode(doc), doc
    except msgspec.ValidationError as exc:
        raise TraceError(f"not a Chrome trace: {exc}") from None
    except msgspec.DecodeError as exc:
        strict = exc
    except RecursionError:  # only with a max_depth above what the decoder can recurse
        raise LimitExceeded(depth_reason(max_depth)) from None
    repaired, counts, first = repair_text(doc)
    if counts:
        try:
            top = shapes.DOCUMENT.decode(repaired)
        except msgspec.ValidationError as exc:
            raise TraceError(f"not a Chrome trace: {exc}") from None
        except msgspec.DecodeError as exc:
            raise TraceError(_json_reason(exc)) from None
        repairs.add(counts, first)
        return top, repaired
    raise TraceError(_json_reason(strict))


# --------------------------------------------------------------------------------------------
# vectorized normalization over the accumulated columns


def _finish(cols: EventColumns, header, is_list: bool, container: str, size: int,
            repairs: Repairs | None = None) -> ParsedTrace:
    """The per-chunk columns of one trace -> :class:`ParsedTrace`, as a sequence of vectorized passes.

    Each pass reads arrays of the :class:`_Rows` state and adds its own (all times int64 ns on the
    capture's clock); the passes are shared by the native and the pure-Python paths, so both give equal
    tables. Arrays are dropped as soon as no later pass needs them (peak RSS is a product target).

    Raises:
        TraceError: no event has a valid numeric ``ts``, or ``baseTimeNanoseconds`` moves a timestamp
            out of the int64 ns range.
    """
    _tick("finish-start")
    r = _open_rows(cols, header, is_list, repairs)
    _times(r)
    _categories(r)
    _tracks(r)
    _tick("finish-ids")
    slices = _nesting(r)
    _tick("finish-nesting")
    _flows(r, slices)
    del slices
    _tick("finish-flows")
    _step_attribution(r)
    _device_and_stream(r)
    _collectives(r)
    _tick("finish-misc")
    out = _event_columns(r)
    meta = _capture_meta(r, container, size, repairs)
    # free the intermediates before the casts below allocate (peak RSS is a product target)
    del r, cols
    table = _to_schema(out)
    _tick("finish-table")
    return ParsedTrace(events=table, meta=meta)


@dataclass(slots=True)
class _Rows:
    """State handed from pass to pass in :func:`_finish`: per-row arrays aligned with the output rows.

    Set by :func:`_open_rows`: ``cols``, ``header``, ``flags`` (set of :data:`FLAGS` keys), ``counts``
    (flag → count), ``fmt`` (``list-2020`` / ``object``), ``base_ns`` / ``has_base``
    (``baseTimeNanoseconds``). Every other field is set by the pass that names it in its docstring;
    numpy arrays have one element per output row (``n``) unless said otherwise; times are int64 ns.
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
    # _collectives
    coll: dict = field(init=False)

    def flag(self, name: str, count: int | None = None) -> None:
        """Raise data-quality flag ``name`` (:data:`FLAGS`), with its event count when countable."""
        self.flags.add(name)
        if count is not None:
            self.counts[name] = count


def _open_rows(cols: EventColumns, header, is_list: bool, repairs: Repairs | None) -> _Rows:
    """Pass 0: the state, with the flags raised while decoding and the file-level time base.

    Reads the chunk reduction's flags and invalid-``ts`` count and the lenient repairs (B01/B02
    ``nonfinite_number`` / ``control_characters``, counted); adds ``invalid_timestamp`` (events without a
    numeric ``ts`` were dropped), the format generation (bare list = 2020 writer, Kineto §2.8) and
    ``baseTimeNanoseconds`` (int ns, Kineto 2024-05; 0 when absent).

    Raises:
        TraceError: no event has a valid numeric ``ts``.
    """
    flags = set(cols.flags)
    counts: dict[str, int] = {}
    if repairs is not None:
        counts.update(repairs.counts)
        flags.update(repairs.counts)
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
    """Pass 3: pid / tid, the (pid, tid) track of every row and flow point, and their names.

    Reads the ``pid``/``tid`` values and keys of rows and flow points (Kineto §2.5: numeric strings
    and legacy ``"stream N"`` tids read as numbers, labels such as ``"Spans"`` get keys of their own)
    and the ``M`` metadata names. Adds ``pid_num``/``pid_ok``, ``pid_key``, ``tid_num``/``tid_ok``,
    ``track`` (dense int64 code per row), ``f_track`` (per flow point), ``process_name``
    (``process_name`` metadata of the pid, else its label) and ``thread_name`` (``thread_name``
    metadata of the (pid, tid), else the tid's label).
    """
    cols, n = r.cols, r.n
    r.pid_num, r.pid_ok, r.pid_key = cols.row_array("pid"), cols.row_array("pid_ok"), cols.row_array("pid_key")
    r.tid_num, r.tid_ok, tid_key = cols.row_array("tid"), cols.row_array("tid_ok"), cols.row_array("tid_key")
    f_pid, f_tid = cols.flow_array("pid_key"), cols.flow_array("tid_key")
    codes = track_codes(np.concatenate((r.pid_key, f_pid)), np.concatenate((tid_key, f_tid)))
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
    :func:`_bind_flows`, and ``corr_int``/``corr_ok``: the ``correlation`` arg, or for a legacy GPU row
    that has only a launch flow (2021 Kineto) the flow id.
    """
    n = r.n
    flow_id, flow_ok = np.zeros(n, np.int64), np.zeros(n, bool)
    fb_id, fb_ok = np.zeros(n, np.int64), np.zeros(n, bool)
    if len(r.f_track) and len(r.xpos):
        fi = {k: r.cols.flow_array(k) for k in ("kind", "ts", "ok", "id", "is_f", "bp_e")}
        fi["ts"] = _add_base(fi["ts"], r.base_ns)
        fi["track"] = r.f_track
        _bind_flows(fi, r.xpos, slices, flow_id, flow_ok, fb_id, fb_ok)
        del fi
    corr_int, corr_ok = int_and_mask(r.cols.row_arrow("correlation", pa.int64()))
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
    ``ext_arr``, ``step``/``step_ok`` and ``n_steps`` (:func:`_steps`: CPU rows by time inside a
    ``ProfilerStep#N`` slice, as HTA splits iterations; GPU rows through their launch). Launch links are
    keyed by ``(pid, correlation)`` on merged multi-rank files (B19, flag ``merged_ranks``), by a unique
    ``External id`` where the correlation is missing (B18). Flags ``negative_launch_delay`` (B08,
    counted), ``no_profiler_step`` and ``partial_trace`` (B22: truncated or dropped events).
    """
    n, is_gpu, category = r.n, r.is_gpu, r.category
    name_arr = r.cols.row_arrow("name", chunked=True)
    link_key, merged = correlation_link_keys(r.corr_int, r.corr_ok, r.pid_key, ~is_gpu)
    if merged:
        r.flag("merged_ranks")
    ext_arr = r.cols.row_arrow("external_id", pa.int64())
    ext_id, ext_ok = int_and_mask(ext_arr)
    launch_cat = bool_np(pc.is_in(category, pa.array(_LAUNCH_CATEGORIES))) if n else np.zeros(0, bool)
    link_key = _external_id_links(link_key, ext_id, ext_ok, is_gpu, launch_cat)
    step, step_ok, n_steps = _steps(name_arr, r.is_x, is_gpu, r.ts_ns, r.end_ns, link_key, link_key >= 0)
    early = _early_launches(link_key, is_gpu & bool_np(pc.is_in(category, pa.array(_DEVICE_ACTIVITY))) if n
                            else is_gpu, launch_cat, r.ts_ns, r.end_ns)
    if early:  # B08: device work starts before its launch call ends (clock skew): flagged, clamped in stats
        r.flag("negative_launch_delay", early)
    del link_key, ext_id, ext_ok, launch_cat
    if n_steps == 0:
        r.flag("no_profiler_step")
    elif (_partial(name_arr, r.is_x, is_gpu, category, r.ts_ns, r.end_ns, r.negative)
          or _dropped_events(r.header)):
        r.flag("partial_trace")
    r.name_arr, r.ext_arr = name_arr, ext_arr
    r.step, r.step_ok, r.n_steps = step, step_ok, n_steps


def _device_and_stream(r: _Rows) -> None:
    """Pass 7: device index and stream of every row.

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
        "ph": pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(np.arange(n + 1, dtype=np.int32)),
                                                     pa.py_buffer(_PH_BYTES[r.row_ph.astype(np.intp)])]),
        "category": r.category,
        "raw_category": r.raw_cat,
        "name": r.name_arr,
        "ts_ns": pa.array(r.ts_ns),
        "dur_ns": _masked(r.dur_ns, r.dur_ok),
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
    """Pass 10: the capture-level fields of :class:`ParsedTrace` ``meta`` (see there).

    The trace span (``trace_start_ns``/``trace_end_ns``) leaves out rows with a negative duration
    (B06) unless every row has one.
    """
    span = ~r.negative
    if r.n and not span.any():
        span = np.ones(r.n, bool)
    meta = _meta(r.header, r.fmt, container, size, r.has_base, r.base_ns, r.ts_ns[span], r.end_ns[span],
                 r.cols.ts_is_float, r.ts_rel, r.n, r.n_steps, sorted(r.flags))
    meta["flag_counts"] = dict(sorted(r.counts.items()))
    meta["repair_offset"] = repairs.first_offset if repairs is not None else None
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
    names = _take(name_arr, idx)
    nccl = pc.or_(pc.starts_with(names, "nccl", ignore_case=True),
                 pc.starts_with(names, "rccl", ignore_case=True)).fill_null(False)
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


_PH_BYTES = np.frombuffer(b"XiC", np.uint8)


def _repeat_str(value: bytes, n: int) -> pa.Array:
    """``pa.string`` array of ``n`` copies of ``value``."""
    offsets = np.arange(n + 1, dtype=np.int32) * np.int32(len(value))
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(value * n)])


def _take(arr, idx) -> pa.Array:
    """``arr.take(idx)`` as a plain array; a one-chunk ChunkedArray is taken from its chunk (a
    ChunkedArray take concatenates all chunks first: a transient copy of the whole column)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.chunk(0) if arr.num_chunks == 1 else arr.combine_chunks()
    return arr.take(idx)


def _bind_flows(fi: dict, xpos, slices: SliceIndex, flow_id, flow_ok, fb_id, fb_ok) -> None:
    """Bind flow points to X rows: ``s`` and ``f`` with ``bp:"e"`` to the innermost enclosing
    slice on their (pid, tid) at ts; other ``f`` to the next slice starting at/after ts. When
    several flows of a kind bind to one row, the first in file order wins."""
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
        _, first = np.unique(tgt, return_index=True)
        out_id[tgt[first]] = fi["id"][m[first]]
        out_ok[tgt[first]] = True


def _steps(name_arr, is_x, is_gpu, ts_ns, end_ns, corr, corr_ok):
    """ProfilerStep number per row: CPU rows by start time inside a CPU ``ProfilerStep#N`` slice
    (the latest-starting one), GPU rows through the first CPU row with the same link key (the
    correlation id, see :func:`jobs.normalize.kineto.linkage.correlation_link_keys` and
    :func:`_external_id_links`)."""
    n = len(ts_ns)
    step = np.zeros(n, np.int64)
    ok = np.zeros(n, bool)
    if n == 0:
        return step, ok, 0
    is_step = bool_np(pc.starts_with(name_arr, _STEP_PREFIX)) & is_x & ~is_gpu
    sidx = np.flatnonzero(is_step)
    nums, keep = [], []
    for i, nm in zip(sidx.tolist(), _take(name_arr, pa.array(sidx)).to_pylist()):
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


_NCCL_NAME = re.compile(_NCCL_RE)
_SPAN_CATEGORIES = ("user_annotation", "gpu_user_annotation")
_LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")
_DEVICE_ACTIVITY = ("kernel", "gpu_memcpy", "gpu_memset")


def _external_id_links(key: np.ndarray, ext: np.ndarray, ext_ok: np.ndarray, is_gpu: np.ndarray,
                       launch_cat: np.ndarray) -> np.ndarray:
    """B18: device rows without a correlation join their launch on ``External id`` when exactly one
    runtime/driver row (``cuda_runtime``/``cuda_driver``, e.g. ``hipLaunchKernel``) and exactly one
    such device row carry it; the pair gets a fresh link key (above every existing one)."""
    dev = np.flatnonzero(is_gpu & (key < 0) & ext_ok)
    host = np.flatnonzero(launch_cat & ~is_gpu & ext_ok)
    if not len(dev) or not len(host):
        return key
    hk, hc = np.unique(ext[host], return_counts=True)
    dk, dc = np.unique(ext[dev], return_counts=True)
    both = np.intersect1d(hk[hc == 1], dk[dc == 1])
    if not len(both):
        return key
    key = key.copy()
    base = int(key.max()) + 1 if len(key) else 0
    for rows in (host, dev):
        sel = rows[np.isin(ext[rows], both)]
        key[sel] = base + np.searchsorted(both, ext[sel])
    return key


def _early_launches(key: np.ndarray, device: np.ndarray, launch_cat: np.ndarray, ts_ns: np.ndarray,
                    end_ns: np.ndarray) -> int:
    """Number of device-activity rows that start before the launch call they are linked to ends
    (``bug_cases.md`` B08: host/device clock skew under CUPTI; launch delay < 0)."""
    dev = np.flatnonzero(device & (key >= 0))
    host = np.flatnonzero(launch_cat & (key >= 0))
    if not len(dev) or not len(host):
        return 0
    order = np.argsort(key[host], kind="stable")
    hk, hrow = key[host][order], host[order]
    j = np.searchsorted(hk, key[dev])
    ok = j < len(hk)
    ok[ok] = hk[j[ok]] == key[dev[ok]]
    return int((ts_ns[dev[ok]] < end_ns[hrow[j[ok]]]).sum())


def _partial(name_arr, is_x, is_gpu, category, ts_ns, end_ns, negative) -> bool:
    """B22: is the trace truncated? True when the events inside the last CPU ``ProfilerStep#N``
    (not annotations, not ``ProfilerStep`` copies, not negative durations) all end before
    :data:`_PARTIAL_TAIL_FRACTION` of the step: a profiler that stops collecting at a buffer limit
    leaves the enclosing step annotation intact while host and device events stop abruptly."""
    is_step = bool_np(pc.starts_with(name_arr, _STEP_PREFIX))
    cpu_steps = np.flatnonzero(is_step & is_x & ~is_gpu)
    if not len(cpu_steps):
        return False
    last = cpu_steps[np.argmax(ts_ns[cpu_steps])]
    s0, s1 = int(ts_ns[last]), int(end_ns[last])
    if s1 <= s0:
        return False
    span = bool_np(pc.is_in(category, pa.array(_SPAN_CATEGORIES)))
    work = ~is_step & ~span & ~negative & (ts_ns >= s0) & (ts_ns <= s1)
    if not work.any():
        return False
    return int(end_ns[work].max()) < s0 + _PARTIAL_TAIL_FRACTION * (s1 - s0)


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


def _nccl_ops(names: pa.Array) -> list:
    out = []
    for nm in names.to_pylist():
        m = _NCCL_NAME.match(nm) if nm else None
        out.append(_NCCL_OPS.get(m.group(1).lower()) if m else None)
    return out


def _lookup_names(keys: np.ndarray, resolve) -> pa.Array:
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
    if not len(codes):
        return codes, np.zeros(0, np.int64)
    # codes are numbered in first-seen order: a code first occurs where the running maximum grows
    seen = np.maximum.accumulate(codes)
    first = np.flatnonzero(np.concatenate(([True], seen[1:] > seen[:-1])))
    return codes, first


def _add_base(rel: np.ndarray, base: int) -> np.ndarray:
    if not base or not len(rel):
        return rel
    hi, lo = int(rel.max()), int(rel.min())
    if hi + base > 2**63 - 1 or lo + base < -(2**63):
        raise TraceError("timestamp out of int64 ns range after adding baseTimeNanoseconds")
    return rel + np.int64(base)


def _masked(vals: np.ndarray, ok: np.ndarray, typ: pa.DataType = pa.int64()) -> pa.Array:
    if len(vals) == 0:
        return pa.array([], typ)
    if ok.all():
        return pa.array(vals, typ)
    return pa.array(vals, typ, mask=~ok)


def _meta(header, fmt, container, size, has_base, base_ns, ts_ns, end_ns, ts_is_float, ts_rel, n, n_steps, flags):
    if has_base:
        time_base = "relative+baseTimeNanoseconds"
    elif n and int(np.abs(ts_rel).max()) >= 10**15:  # >= 1e12 µs (11.6 days): epoch µs, not a relative clock
        time_base = "absolute-us-float" if ts_is_float else "absolute-us-int"
    else:
        time_base = "relative"
    dist = header.distributedInfo if header is not None and isinstance(header.distributedInfo, dict) else {}
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
        "world_size": _opt_int(dist.get("world_size")),
        "rank": _opt_int(dist.get("rank")),
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
