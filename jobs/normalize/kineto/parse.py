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
2. Vectorized passes over the columns (:func:`jobs.normalize.kineto.passes.normalize_columns`, one
   function per pass): category normalization, exact ns timestamps (:mod:`jobs.normalize.kineto.numbers`),
   nesting, flows and ProfilerStep attribution (:mod:`jobs.normalize.kineto.linkage`), collective metadata.

Format generations handled (``../shared/reference/kineto_and_hta.md`` §2.8): bare-list 2020
traces, legacy categories (``Operator/Runtime/Kernel/Memcpy/Memset``), string tids
(``"stream 7"``), legacy flows (``async``/``launch``, ``async_cpu_to_gpu``, ``forward_backward``),
absolute µs ints/floats and relative µs + ``baseTimeNanoseconds``.

Defects of real traces (``../shared/reference/bug_cases.md``) are tolerated and flagged, never a
reason to lose the file (:data:`FLAGS`, ``meta["flag_counts"]``): non-finite number tokens and raw
control characters are repaired (:mod:`jobs.normalize.kineto.repair`, also while streaming, and in the C
scanner), and so are the other local text defects (damage inside strings, an unescaped quote, a decimal
comma, a trailing comma, a missing value, a bare word); a document cut short keeps its complete events
(:func:`_salvage_truncated`); duplicate keys are flagged, the last value kept (:mod:`jobs.normalize.kineto.dupkeys`);
an event without a valid ``ts`` is dropped, a negative ``dur`` is null; partial overlaps on a track, merged
multi-rank files (launch links keyed by ``(pid, correlation)``), launches that start before their call ends and
truncated traces are detected. Hostile input is refused: nesting depth,
string length (:mod:`jobs.normalize.limits`) and decompressed size are capped.
"""

from __future__ import annotations

import gc
import logging
import os
import re
import time
from dataclasses import dataclass, field

import msgspec
import numpy as np
import pyarrow as pa

from jobs.normalize.container import DEFAULT_MAX_UNCOMPRESSED_BYTES, GZIP_MAGIC, decode_container, iter_decoded
from jobs.normalize.errors import TraceError
from jobs.normalize.kineto import native, shapes
from jobs.normalize.kineto.columns import EventColumns
from jobs.normalize.kineto.dupkeys import find_duplicate_keys
from jobs.normalize.kineto.native import NativeBail
from jobs.normalize.kineto.passes import EVENT_COLUMNS, normalize_columns
from jobs.normalize.kineto.repair import REPAIR_FLAGS, repair_text, worth_repairing
from jobs.normalize.kineto.stream import NotSplittable, Repairs, TraceSplitter
from jobs.normalize.limits import (
    DEFAULT_MAX_DEPTH,
    DEFAULT_MAX_STRING_BYTES,
    JsonLimitScanner,
    LimitExceeded,
    check_limits,
    depth_reason,
    validate_limits,
)

# EVENT_COLUMNS (the columns of ParsedTrace.events) is defined with the passes that build the table and
# stays part of this module's API: callers import it from here.
__all__ = ["parse_kineto", "ParsedTrace", "TraceError", "EVENT_COLUMNS"]

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
            and types), one row per ``X``/``i``/``C`` event and per ``B``/``E`` pair (an ``X`` row), ``event_id`` =
            index in traceEvents.
        meta: capture-level fields: ``container``, ``uncompressed_bytes``, ``format``,
            ``time_base``, ``base_time_ns``, ``trace_start_ns``, ``trace_end_ns``, ``n_events``,
            ``n_profiler_steps``, ``host_name``, ``device_name``, ``distributed_backend``,
            ``world_size``, ``rank`` (int from ``distributedInfo`` or None), ``flags`` (list[str],
            see :data:`FLAGS`), ``flag_counts`` (dict: flag → number of events or repairs behind it,
            for the countable flags), ``repair_offset`` (document byte offset of the first lenient
            repair, or None) and ``repair_offsets`` (flag → document byte offsets of the first 10 repairs
            inside strings and next to values: ``invalid_utf8``, ``invalid_escape``, ``lone_surrogate``,
            ``unescaped_quote``, ``trailing_comma``, ``missing_value``, ``bare_word``, ``decimal_comma``; the cut of
            ``truncated_tail``; the repeated keys of ``duplicate_key``).
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
    "invalid_utf8": "invalid UTF-8 bytes inside strings: each invalid sequence read as U+FFFD (count: sequences; "
    "offsets in meta repair_offsets)",
    "invalid_escape": "invalid escapes inside strings (\\q, a \\u without 4 hex digits): the backslash read as a "
    "literal backslash (count: escapes)",
    "lone_surrogate": "lone UTF-16 surrogate escapes inside strings read as U+FFFD (count: escapes)",
    "trailing_comma": "a comma before a closing ] or } removed (count: commas; offsets in meta repair_offsets)",
    "missing_value": "a key without a value (\"k\": ,) read as null (count: keys; offsets in meta repair_offsets)",
    "bare_word": "a bare word as a value (\"k\": N/A) read as a string (count: words; offsets in meta repair_offsets)",
    "decimal_comma": "a locale decimal comma in a number (\"k\": 0,015152; pytorch #191032) read as the decimal point "
    "(count: numbers; offsets of the commas in meta repair_offsets)",
    "unescaped_quote": "unescaped double quotes inside a string value escaped where one closing quote is consistent "
    "(kineto PR #1459; count: string values; offsets of the first quote of each in meta repair_offsets)",
    "truncated_tail": "the document was cut short: every complete event kept, the partial tail (and header keys after "
    "traceEvents) dropped; partial_trace is raised too (count: bytes dropped; offset of the cut in meta "
    "repair_offsets)",
    "duplicate_key": "a key repeated in an event (its own fields, or args correlation/External id/stream/device; "
    "catapult #4343): the last value kept (count: repeated keys; offsets in meta repair_offsets)",
    "correlation_zero": "correlation id 0 (ROCm) read as absent (count: rows)",
    "linked_by_time": "device rows with correlation 0 and no unique External id linked to the last free launch call "
    "before them; they take its correlation (count: rows)",
    "unlinked_device_rows": "device rows with correlation 0 that no launch call could be linked to (count: rows)",
    "stream_overlap_clipped": "device events running past the start of the next one on their stream: dur clipped to "
    "that start, the raw value in dur_raw_ns (count: events; the time removed, ns, in "
    "flag_counts stream_overlap_clipped_ns)",
    "begin_end_pairs": "duration events (ph B/E) paired per (pid, tid) into complete events (count: pairs)",
    "unmatched_begin": "B events never closed by an E on their (pid, tid): kept without a duration (count: events)",
    "unmatched_end": "E events with no open B on their (pid, tid): dropped (count: events)",
    "unsupported_phase": "events of a phase other than X/i/C/B/E/M/s/f were skipped",
    "no_profiler_step": "no ProfilerStep#N annotation",
    "profiler_warnings": "the profiler's own WARNING/ERROR lines, non-zero Record counts or dropped-event counters "
    "(meta profiler_warnings: each tied to the metrics and rules it makes uncertain, "
    "jobs/normalize/profiler_warnings.py)",
}


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
            (:class:`~jobs.normalize.limits.LimitExceeded`), invalid JSON that no repair fixes (with the byte
            offset), truncated JSON without a complete event, not a Chrome trace, no event with a numeric ``ts``).
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
                _LOG.warning(
                    "native Kineto scanner failed on %s; using the Python path", uri or "<bytes>", exc_info=True
                )
        if parsed is None:
            parsed = _parse(data, max_uncompressed_bytes, compact_args, limits)
        _log_repairs(parsed.meta, uri)
        return parsed
    finally:
        if was_enabled:
            gc.enable()


def _log_repairs(meta: dict, uri: str) -> None:
    """Warn about lenient repairs: which, how many, and the byte offset of the first (B02)."""
    counts = {k: v for k, v in meta.get("flag_counts", {}).items() if k in REPAIR_FLAGS}
    if counts:
        what = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
        where = "; ".join(
            f"{k} at bytes {', '.join(map(str, v))}" for k, v in sorted(meta.get("repair_offsets", {}).items())
        )
        _LOG.warning(
            "%s: repaired %s (first at byte %s of the document%s)",
            uri or "<bytes>",
            what,
            meta.get("repair_offset"),
            f"; {where}" if where else "",
        )


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
    """The native path: the C scanner's columns, then the shared passes (raises NativeBail to hand over)."""
    _T.clear()
    _tick("start")
    container = "gzip" if data[:2] == GZIP_MAGIC else "json"
    cols, header, is_list, size, repairs = native.scan_trace(
        data, max_uncompressed_bytes, compact_args, _NATIVE_PIECE_BYTES, limits
    )
    _tick("native-scan")
    return _finish(cols, header, is_list, container, size, repairs)


def _checked(pieces, limits):
    """The decoded pieces, each checked against the depth / string-length limits first."""
    scanner = JsonLimitScanner(*limits)
    for piece in pieces:
        scanner.feed(piece)
        yield piece


def _parse(
    data: bytes, max_uncompressed_bytes: int, compact_args: bool, limits=(DEFAULT_MAX_DEPTH, DEFAULT_MAX_STRING_BYTES)
) -> ParsedTrace:
    """The reference path: msgspec decode in chunks (whole document when not splittable), then the passes."""
    _T.clear()
    _tick("start")
    container = "gzip" if data[:2] == GZIP_MAGIC else "json"
    cols = EventColumns(compact_args)
    repairs = Repairs()
    try:
        if not _STREAMING:
            raise NotSplittable("streaming disabled")
        splitter = TraceSplitter(
            _checked(iter_decoded(data, max_uncompressed_bytes, _CHUNK_BYTES), limits),
            shapes.EVENT_LIST.decode,
            shapes.HEADER.decode,
            _CHUNK_BYTES,
        )
        n_dup, dup_at = 0, []
        for chunk in splitter:
            try:
                cols.add(chunk.events, _chunk_raw_text(chunk.text))
            except pa.ArrowInvalid:  # invalid UTF-8 that msgspec kept unchecked in raw args text: repaired whole
                raise NotSplittable("invalid UTF-8 in raw args text") from None
            n, at = find_duplicate_keys(chunk.text, chunk.events, chunk.base)
            n_dup, dup_at = n_dup + n, dup_at + at
            del chunk
            _POOL.release_unused()
        header = None if splitter.is_list else splitter.header
        is_list, size = splitter.is_list, splitter.total_bytes
        repairs = splitter.repairs
        _add_duplicates(repairs, n_dup, dup_at)
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
        _add_duplicates(repairs, *find_duplicate_keys(buf, events, 0, document=True))
        del events, top, buf, doc
        _tick("whole")
    return _finish(cols, header, is_list, container, size, repairs)


def _add_duplicates(repairs: Repairs, n: int, offsets: list) -> None:
    """Record ``n`` duplicate keys (flag ``duplicate_key``, :mod:`jobs.normalize.kineto.dupkeys`) in ``repairs``."""
    if n:
        repairs.add({"duplicate_key": n}, None, {"duplicate_key": offsets})


def _chunk_raw_text(text: memoryview):
    """``raw_text(field, positions)`` of one chunk: the raw ``ts``/``dur`` number text, decoded lazily once."""
    cache: list = []

    def get(field_name: str, pos: np.ndarray) -> list:
        if not cache:
            cache.append(shapes.TIME_LIST.decode(text))
        tev = cache[0]
        return [getattr(tev[i], field_name) for i in pos.tolist()]

    return get


def _document_raw_text(buf: bytes):
    """``raw_text(field, positions)`` of a whole document: the raw ``ts``/``dur`` number text, decoded lazily."""
    cache: list = []

    def get(field_name: str, pos: np.ndarray) -> list:
        if not cache:
            t = shapes.TIME_DOCUMENT.decode(buf)
            cache.append(t if isinstance(t, list) else t.traceEvents)
        tev = cache[0]
        return [getattr(tev[i], field_name) for i in pos.tolist()]

    return get


def _json_reason(exc: Exception) -> str:
    """Quarantine reason for a msgspec JSON decode error (truncated, or invalid at byte N)."""
    msg = str(exc)
    if "truncated" in msg.lower():
        return "truncated JSON: the document ends before it is complete"
    m = re.search(r"\(byte (\d+)\)", msg)
    detail = re.sub(r"\s*\(byte \d+\)", "", msg).replace("JSON is malformed: ", "")
    if m:
        return f"not valid JSON at byte {m.group(1)}: {detail}"
    return f"not valid JSON: {detail}"


def _decode_document(doc: bytes, repairs: Repairs, max_depth: int = DEFAULT_MAX_DEPTH):
    """Strict typed decode; on a JSON syntax error, one lenient repair attempt (recorded in ``repairs``); a
    document cut short keeps its complete events (:func:`_salvage_truncated`).

    Returns ``(decoded, text_decoded)``.

    Raises:
        TraceError: not valid JSON even after the repair (with the byte offset), truncated with no complete
            event, or not a Chrome trace.
        LimitExceeded: nested deeper than the decoder can recurse.
    """
    try:
        return _decode_repairing(doc, repairs, max_depth)
    except TraceError as exc:
        if not str(exc).startswith(_TRUNCATED):
            raise
        salvaged = _salvage_truncated(doc, repairs, max_depth)
        if salvaged is None:
            raise
        return salvaged


def _decode_repairing(doc: bytes, repairs: Repairs, max_depth: int):
    """:func:`_decode_document` without the salvage of a truncated document (a truncated document raises at once:
    the salvage repairs what is left of it).

    Raises:
        TraceError: as :func:`_decode_document`, and ``truncated JSON`` for a document cut short.
        LimitExceeded: nested deeper than the decoder can recurse.
    """
    try:
        top = shapes.DOCUMENT.decode(doc)
        if _utf8(doc):
            return top, doc
        # msgspec keeps raw (args) text and skipped keys unchecked: repaired below like damage in a string
        strict = msgspec.DecodeError("Invalid UTF-8 in raw text")
    except msgspec.ValidationError as exc:
        raise TraceError(f"not a Chrome trace: {exc}") from None
    except msgspec.DecodeError as exc:
        strict = exc
    except RecursionError:  # only with a max_depth above what the decoder can recurse
        raise LimitExceeded(depth_reason(max_depth)) from None
    if "truncated" in str(strict) and not worth_repairing(doc, strict):
        raise TraceError(_json_reason(strict))  # cut short: the salvage decodes (and repairs) what is left
    offsets: dict = {}
    repaired, counts, first = repair_text(doc, 0, offsets)
    if counts:
        try:
            top = shapes.DOCUMENT.decode(repaired)
        except msgspec.ValidationError as exc:
            raise TraceError(f"not a Chrome trace: {exc}") from None
        except msgspec.DecodeError as exc:
            raise TraceError(_json_reason(exc)) from None
        repairs.add(counts, first, offsets)
        return top, repaired
    raise TraceError(_json_reason(strict))


def _utf8(doc: bytes) -> bool:
    """Whether ``doc`` is valid UTF-8."""
    try:
        doc.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


_TRUNCATED = "truncated JSON"
_AFTER_EVENT = re.compile(rb"\s*(?:,\s*(?:\{|$)|$)")  # after an event's "}": the next event, or the cut
_AFTER_ARRAY = re.compile(rb'\s*(?:,\s*(?:"|$)|$)')  # after the event array's "]": a header key, or the cut
_SALVAGE_TRIES = 32


def _salvage_truncated(doc: bytes, repairs: Repairs, max_depth: int):
    """A document cut short (a writer killed mid-export, D11): keep every complete event, drop the tail.

    The Trace Event Format lets the closing ``]`` be missing "to support tracing systems that can not cleanly
    finish writing" (quoted in google/perfetto #926). The cut is put after the last ``}`` that ends an event (the
    next event, or the end of the text, follows it) or after the ``]`` that ends the event array (a header key
    or the end follows it, and an event or ``[`` precedes it), trying the latest first: the document up to it,
    closed with ``]`` / ``]}`` / ``}``, must decode (with the lenient repair). Header members after
    ``traceEvents`` (``distributedInfo``, ``traceName``...) are lost with the tail. Flags ``truncated_tail``
    (count: the bytes dropped; offset: the first byte dropped) and ``partial_trace`` (raised by
    :func:`~jobs.normalize.kineto.passes.normalize_columns`).

    A document cut by a limit never gets here: the size and ratio limits raise
    :class:`~jobs.normalize.limits.LimitExceeded` while inflating (:mod:`jobs.normalize.container`).

    Returns:
        ``(decoded, text_decoded)`` like :func:`_decode_document`, or None: no complete event (the file stays
        quarantined as truncated).
    """
    body = doc.rstrip()
    is_list = body.lstrip()[:1] == b"["
    pos, tries = len(body), 0
    while tries < _SALVAGE_TRIES:
        p = max(body.rfind(b"}", 0, pos), body.rfind(b"]", 0, pos))
        if p < 0:
            return None
        pos = p
        if body[p] == 0x7D:
            if _AFTER_EVENT.match(body, p + 1) is None:
                continue
            closing = b"]" if is_list else b"]}"
        else:
            if is_list or _AFTER_ARRAY.match(body, p + 1) is None or body[:p].rstrip()[-1:] not in (b"}", b"["):
                continue
            closing = b"}"
        tries += 1
        local = Repairs()
        try:
            top, buf = _decode_repairing(body[: p + 1] + closing, local, max_depth)
        except TraceError:
            continue
        events = top if isinstance(top, list) else top.traceEvents
        if not events:
            return None
        cut = p + 1
        repairs.add(local.counts, local.first_offset, local.offsets)
        repairs.add({"truncated_tail": len(doc) - cut}, cut, {"truncated_tail": [cut]})
        return top, buf
    return None


# --------------------------------------------------------------------------------------------
# the shared vectorized passes (jobs.normalize.kineto.passes)


def _finish(
    cols: EventColumns, header, is_list: bool, container: str, size: int, repairs: Repairs | None = None
) -> ParsedTrace:
    """The accumulated columns of either path -> :class:`ParsedTrace`
    (:func:`~jobs.normalize.kineto.passes.normalize_columns`, with the profiling checkpoints)."""
    table, meta = normalize_columns(cols, header, is_list, container, size, repairs, tick=_tick)
    return ParsedTrace(events=table, meta=meta)
