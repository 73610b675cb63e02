"""Native fast path of :func:`jobs.normalize.kineto.parse.parse_kineto`: the C event scanner.

The C extension :mod:`jobs.normalize.kineto._kineto_scan` (source ``_kineto_scan.c``, built by
``pip install -e .`` as an optional extension) validates the ``traceEvents`` array as strict JSON
and reduces every event to columns in one pass over the text, in pieces as gunzip produces them
(no per-event Python objects). :func:`scan_trace` turns its output into the same
:class:`~jobs.normalize.kineto.columns.EventColumns` state that the msgspec path builds, so the
vectorized normalization passes (:func:`jobs.normalize.kineto.passes.normalize_columns`) are shared and
the two paths give equal tables.

The scanner applies the lenient repairs of :mod:`jobs.normalize.kineto.repair` itself (non-finite tokens,
control characters; same counts and offsets) and counts duplicate keys as :mod:`jobs.normalize.kineto.dupkeys`
does and the limits of :mod:`jobs.normalize.limits`
(:class:`~jobs.normalize.limits.LimitExceeded`, the same reason as the Python path). Whatever else
it does not reproduce exactly raises :class:`NativeBail` (invalid JSON or UTF-8, truncation, values
of unexpected types in the fields that become columns, numbers beyond the exactly handled range,
a repair inside args kept verbatim); the caller then parses the file with the pure-Python path,
which stays the reference and produces the quarantine reasons.
"""

from __future__ import annotations

import re

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.normalize.container import GZIP_MAGIC, iter_decoded
from jobs.normalize.errors import TraceError
from jobs.normalize.kineto import shapes
from jobs.normalize.kineto.columns import (
    _LABEL_KEY0,
    _NONE_KEY,
    EventColumns,
    collective_columns,
    resolve_id_string,
    to_int64,
)
from jobs.normalize.kineto.stream import Repairs, decode_header
from jobs.normalize.limits import (
    DEFAULT_MAX_DEPTH,
    DEFAULT_MAX_STRING_BYTES,
    LimitExceeded,
    check_limits,
    depth_reason,
    string_reason,
)

try:  # the extension is optional: without a C compiler the package still works (pure Python)
    from jobs.normalize.kineto import _kineto_scan

    if getattr(_kineto_scan, "ABI", None) != 5:  # a stale build of an older interface
        _kineto_scan = None
except ImportError:  # pragma: no cover - depends on the build
    _kineto_scan = None
try:  # ISA-L gunzip: ~3x faster than zlib, same gzip validation (CRC32 and ISIZE checked)
    from isal import isal_zlib as _gunzip
except ImportError:  # pragma: no cover - isal is a declared dependency
    _gunzip = None

__all__ = ["AVAILABLE", "NativeBail", "scan_trace"]

#: True when the C scanner is built and importable.
AVAILABLE = _kineto_scan is not None
_LIMIT = 3  # Scanner.scan status: a limit is exceeded

_START_OBJ = re.compile(rb'"traceEvents"\s*:\s*\[')
_WS = b" \t\r\n"
_LEADING_WS = re.compile(rb"[ \t\r\n]*")
_MAX_HEADER = 64 << 20


class NativeBail(Exception):
    """The native scanner cannot reproduce the reference result for this file (reason in the
    message); parse it with the pure-Python path."""


def scan_trace(
    data: bytes,
    max_uncompressed_bytes: int,
    compact_args: bool,
    piece_bytes: int = 4 << 20,
    limits: tuple[int, int] = (DEFAULT_MAX_DEPTH, DEFAULT_MAX_STRING_BYTES),
):
    """Scan one trace file natively.

    Args:
        data: the file's bytes as stored (gzip or plain JSON).
        max_uncompressed_bytes: cap on the decoded size (as :func:`container.iter_decoded`).
        compact_args: compact ``args_json`` (see ``parse_kineto``).
        piece_bytes: decoded bytes per gunzip piece.
        limits: ``(max_depth, max_string_bytes)`` of :mod:`jobs.normalize.limits`.

    Returns:
        ``(cols, header, is_list, total_bytes, repairs)``: filled :class:`EventColumns`, the decoded
        :class:`~jobs.normalize.kineto.shapes.Header` (None for a bare-list trace), whether the document
        is a bare list, the decoded document size in bytes, and the lenient repairs
        (:class:`jobs.normalize.kineto.stream.Repairs`).

    Raises:
        NativeBail: the file needs the pure-Python path (also when the extension is missing).
        LimitExceeded: the document nests too deep or holds a too long string.
        TraceError: from gunzip (truncated/corrupt stream, size cap).
    """
    if _kineto_scan is None:
        raise NativeBail("native scanner not built")
    scanner = _Scan(_kineto_scan.Scanner(compact_args), limits)
    if data[:2] != GZIP_MAGIC:
        if len(data) > max_uncompressed_bytes:
            raise LimitExceeded(f"decompressed size exceeds limit of {max_uncompressed_bytes} bytes")
        header, is_list = _scan_plain(scanner, data)
        total = len(data)
    else:
        pieces = (
            _iter_gunzip(data, max_uncompressed_bytes, piece_bytes)
            if _gunzip is not None
            else iter_decoded(data, max_uncompressed_bytes, piece_bytes)
        )
        header, is_list, total = _scan_pieces(scanner, pieces)
    res = scanner.scanner.result()
    repairs = scanner.repairs
    counts = {"nonfinite_number": int(res["n_nonfinite"]), "control_characters": int(res["n_ctrl"])}
    first = int(res["first_repair"])
    repairs.add({k: v for k, v in counts.items() if v}, first if first >= 0 else None)
    if res["n_dup"]:  # duplicate keys: detected, the last value kept (jobs/normalize/kineto/dupkeys.py)
        repairs.add({"duplicate_key": int(res["n_dup"])}, None, {"duplicate_key": list(res["dup_off"])})
    cols = _columns(res, compact_args)
    if cols.n_invalid_ts and not cols.n_rows:
        raise NativeBail("no event with a valid ts")  # the Python path names the first one
    return cols, header, is_list, total, repairs


class _Scan:
    """The C scanner with the limits applied and the header's repairs (:class:`Repairs`)."""

    def __init__(self, scanner, limits: tuple[int, int]):
        self.scanner = scanner
        self.max_depth, self.max_string = limits
        self.repairs = Repairs()
        self._limits_set = False

    def start(self, is_list: bool) -> None:
        """Set the C limits once the event array is found: the C depth counts from the event object."""
        if not self._limits_set:
            self.scanner.set_limits(self.max_depth - (2 if is_list else 3), self.max_string)
            self._limits_set = True

    def scan(self, buf, start: int, end: int, final: bool, base: int):
        status, pos, reason = self.scanner.scan(buf, start, end, final, base)
        if status == _LIMIT:
            raise LimitExceeded(depth_reason(self.max_depth) if reason == "depth" else string_reason(self.max_string))
        return status, pos, reason


def _iter_gunzip(data: bytes, max_uncompressed_bytes: int, piece_bytes: int):
    """Decoded pieces of a gzip file (every member) with ISA-L: :func:`container.iter_decoded`'s
    container rules, but any problem raises :class:`NativeBail` so that the Python path produces
    the exact quarantine reason; except a limit (:class:`LimitExceeded`: the size cap, the decompression ratio, the
    file's memory and time budget, the same reason on both paths), which must not inflate the file a second time."""
    try:
        yield from iter_decoded(data, max_uncompressed_bytes, piece_bytes, zlib_module=_gunzip)
    except LimitExceeded:  # the size cap, the ratio, the file's budget: decided here, never inflated a second time
        raise
    except TraceError as exc:
        raise NativeBail(f"gunzip: {exc}") from None


def _events_start(buf) -> tuple[int | None, bool]:
    """Position of the ``[`` that opens the event array (None: need more text) and is_list."""
    s = _LEADING_WS.match(buf).end()
    if s == len(buf):
        return None, False
    first = buf[s : s + 1]
    if first == b"[":
        return s, True
    if first == b"{":
        m = _START_OBJ.search(buf)
        if m:
            return m.end() - 1, False
        if len(buf) > _MAX_HEADER:
            raise NativeBail("no traceEvents array near the start")
        return None, False
    raise NativeBail("not a JSON object or array")


def _check_header(scanner: _Scan, prefix: bytes, trailer: bytes, is_list: bool, trailer_offset: int):
    """The document around the event array: whitespace only (bare list) or a header object whose
    ``traceEvents`` is the array just scanned (same proof as :class:`stream.TraceSplitter`), within
    the limits and with the same lenient repair."""
    if is_list:
        if prefix.strip(_WS) or trailer.strip(_WS):
            raise NativeBail("data around the top-level array")
        return None
    check_limits(prefix + b"[]" + trailer, scanner.max_depth, scanner.max_string)
    try:
        header = decode_header(shapes.HEADER.decode, prefix, trailer, scanner.repairs, trailer_offset)
    except msgspec.DecodeError as exc:
        raise NativeBail(f"header does not decode: {exc}") from None
    if header.traceEvents != []:
        raise NativeBail("traceEvents placeholder not found in the header")
    return header


def _scan_plain(scanner: _Scan, data: bytes):
    """Scan a whole plain-JSON document in one call: ``(header, is_list)`` (NativeBail when not scannable)."""
    start, is_list = _events_start(data)
    if start is None:
        raise NativeBail("no traceEvents array")
    scanner.start(is_list)
    status, pos, reason = scanner.scan(data, start + 1, len(data), True, 0)
    if status != _kineto_scan.DONE:
        raise NativeBail(reason or "event array not closed")
    return _check_header(scanner, data[:start], data[pos:], is_list, pos), is_list


def _scan_pieces(scanner: _Scan, pieces):
    """Scan a streamed document. Pieces are scanned in place; only the few bytes of an event cut
    by a piece boundary are copied (with the start of the next piece) into a small stitch. Each scan
    is given the document offset of its buffer (for the offset of the first repair)."""
    total = 0
    it = iter(pieces)
    head = bytearray()
    start, is_list = None, False
    while start is None:
        p = next(it, None)
        if p is None:
            raise NativeBail("no traceEvents array")
        total += len(p)
        head += p
        start, is_list = _events_start(head)
    scanner.start(is_list)
    prefix = bytes(head[:start])
    carry = bytes(head[start + 1 :])  # unconsumed text after the "["
    carry_off = start + 1  # document offset of carry[0]
    del head
    trailer: list = []
    trailer_off = 0
    done = False
    skip_until = 0  # an event larger than a piece: rescan it only when it has doubled (linear, not quadratic)
    for piece in it:
        piece_off = total
        total += len(piece)
        if done:
            trailer.append(bytes(piece))
            continue
        if skip_until and len(carry) + len(piece) < skip_until:
            carry += piece  # a bytearray in this state
            continue
        skip_until = 0
        off, span = 0, _STITCH
        while carry:  # finish the cut event: scan carry + the start of this piece
            stitch = carry + piece[:span]
            status, r, reason = scanner.scan(stitch, 0, len(stitch), False, carry_off)
            if status == _kineto_scan.BAIL:
                raise NativeBail(reason)
            if status == _kineto_scan.DONE:
                trailer += [stitch[r:], piece[span:]]
                trailer_off = carry_off + r
                done, carry, off = True, b"", len(piece)
            elif r >= len(carry):
                off, carry = r - len(carry), b""
            elif span >= len(piece):  # the whole piece is inside one event: keep reading
                carry, off = bytearray(stitch[r:]), len(piece)
                carry_off += r
                skip_until = 2 * len(carry)
                break
            else:
                carry, span = carry[r:], span * 4
                carry_off += r
        if done or off >= len(piece):
            continue
        status, r, reason = scanner.scan(piece, off, len(piece), False, piece_off)
        if status == _kineto_scan.BAIL:
            raise NativeBail(reason)
        if status == _kineto_scan.DONE:
            trailer.append(piece[r:])
            trailer_off = piece_off + r
            done = True
        else:
            carry = piece[r:]
            carry_off = piece_off + r
    if not done:
        status, r, reason = scanner.scan(carry, 0, len(carry), True, carry_off)
        if status != _kineto_scan.DONE:
            raise NativeBail(reason or "event array not closed")
        trailer.insert(0, carry[r:])
        trailer_off = carry_off + r
    header = _check_header(scanner, prefix, b"".join(bytes(t) for t in trailer), is_list, trailer_off)
    return header, is_list, total


_STITCH = 64 << 10


# --------------------------------------------------------------------------------------------
# scanner output -> EventColumns


def _np(res: dict, key: str, dtype) -> np.ndarray:
    """The scanner's output buffer ``key`` as a numpy array of ``dtype`` (zero-copy)."""
    return np.frombuffer(res[key], dtype)


def _string_array(res: dict, prefix: str, n: int) -> pa.Array:
    """A string column from the scanner's int32 offsets, UTF-8 data and validity bytes (zero copy
    of the offsets and the data)."""
    ok = _np(res, prefix + "_ok", np.bool_)
    nulls = int(n - np.count_nonzero(ok))
    validity = pa.py_buffer(np.packbits(ok, bitorder="little")) if nulls else None
    return pa.Array.from_buffers(
        pa.string(), n, [validity, pa.py_buffer(res[prefix + "_off"]), pa.py_buffer(res[prefix + "_data"])], nulls
    )


class _Ids:
    """pid/tid values from the scanner (kind 0 int, 1 interned string, 2 null/missing) -> the
    ``(num, valid, key)`` of :func:`jobs.normalize.kineto.columns.id_keys`; string labels get the key
    ``_LABEL_KEY0 - code`` (one code per distinct string, shared by pid and tid)."""

    def __init__(self, res: dict):
        off = _np(res, "id_off", np.int64)
        data = bytes(res["id_data"])
        self.strings = [data[off[i] : off[i + 1]].decode() for i in range(len(off) - 1)]
        self._lut: dict[bool, tuple] = {}

    def lut(self, parse_stream: bool):
        if parse_stream not in self._lut:
            m = len(self.strings)
            num = np.zeros(m, np.int64)
            valid = np.zeros(m, bool)
            stream = np.zeros(m, bool)
            for i, v in enumerate(self.strings):
                x, is_stream = resolve_id_string(v, parse_stream)
                if x is not None:
                    num[i], valid[i], stream[i] = x, True, is_stream
            key = np.where(valid, num, _LABEL_KEY0 - np.arange(m, dtype=np.int64))
            self._lut[parse_stream] = (num, valid, key, stream)
        return self._lut[parse_stream]

    def columns(self, kind: np.ndarray, val: np.ndarray, parse_stream: bool):
        """-> ``(num, valid, key, label_pos, stream_pos)``; the last two are positions of
        string labels and of ``"stream N"`` values (None when there are none)."""
        is_int = kind == 0
        if is_int.all():
            return val, np.ones(len(val), bool), val, None, None
        num = np.where(is_int, val, 0)
        valid = is_int.copy()
        key = np.where(is_int, val, _NONE_KEY)
        spos = np.flatnonzero(kind == 1)
        label_pos = stream_pos = None
        if len(spos):
            lnum, lvalid, lkey, lstream = self.lut(parse_stream)
            codes = val[spos]
            num[spos] = lnum[codes]
            valid[spos] = lvalid[codes]
            key[spos] = lkey[codes]
            label_pos = spos[~lvalid[codes]]
            stream_pos = spos[lstream[codes]]
        return num, valid, key, label_pos, stream_pos

    def one(self, kind: int, val: int, parse_stream: bool) -> int:
        """Key of a single pid/tid."""
        if kind == 0:
            return int(val)
        if kind == 2:
            return _NONE_KEY
        return int(self.lut(parse_stream)[2][val])


def _columns(res: dict, compact_args: bool) -> EventColumns:
    """The scanner's output buffers -> the :class:`EventColumns` state the msgspec path would build."""
    cols = EventColumns(compact_args)
    n = int(res["n_rows"])
    cols.n_events = int(res["n_events"])
    cols.n_rows = n
    cols.ts_is_float = bool(res["ts_float"])
    cols.n_invalid_ts = int(res["n_invalid_ts"])
    if res["n_unsupported"]:
        cols.flags.add("unsupported_phase")
    ids = _Ids(res)
    R = {}
    R["event_id"] = _np(res, "event_id", np.int64)
    R["ph"] = _np(res, "ph", np.int8)
    R["ts"] = _np(res, "ts", np.int64)
    R["dur"] = _np(res, "dur", np.int64)
    R["dur_ok"] = _np(res, "dur_ok", np.bool_)
    for f, parse_stream in (("pid", False), ("tid", True)):
        num, valid, key, label_pos, stream_pos = ids.columns(
            _np(res, f + "_kind", np.int8), _np(res, f, np.int64), parse_stream
        )
        R[f], R[f + "_ok"], R[f + "_key"] = num, valid, key
        if label_pos is not None and len(label_pos):
            codes = _np(res, f, np.int64)[label_pos]
            labels = dict(zip(label_pos.tolist(), (ids.strings[c] for c in codes.tolist())))
            (cols.pid_labels if f == "pid" else cols.tid_labels).update(labels)
        if f == "tid" and stream_pos is not None and len(stream_pos):
            cols.tid_streams.update(zip(stream_pos.tolist(), num[stream_pos].tolist()))
    R["name"] = _string_array(res, "name", n)
    R["raw_category"] = _string_array(res, "cat", n)
    args_json = _string_array(res, "args", n)
    R["args_json"] = args_json

    # integer args keys: C parsed the integers; string values (state 2) are resolved here
    ints = {
        k: [_np(res, k, np.int64), _np(res, k + "_st", np.int8)]
        for k in ("correlation", "external_id", "external_id_legacy", "stream", "device")
    }
    need = np.zeros(n, bool)
    for _, st in ints.values():
        need |= st == 2
    py_rows = np.flatnonzero(need)
    overrides = {}
    if len(py_rows):
        A = _decode_args(args_json, py_rows)
        ext = to_int64([a.external_id for a in A])
        legacy = to_int64([a.external_id_legacy for a in A])
        overrides = {
            "correlation": to_int64([a.correlation for a in A]),
            "external_id": pc.coalesce(ext, legacy),
            "stream": to_int64([a.stream for a in A]),
            "device": to_int64([a.device for a in A]),
        }
    out = {}
    for k in ("correlation", "external_id", "stream", "device"):
        val, st = ints[k]
        ok = st == 1
        if k == "external_id":
            lval, lst = ints["external_id_legacy"]
            use = ~ok & (lst == 1)
            if use.any():
                val = np.where(use, lval, val)
                ok = ok | use
        if k in overrides:
            o_val = overrides[k]
            o_ok = ~np.asarray(o_val.is_null().to_numpy(zero_copy_only=False), bool)
            val = np.array(val, np.int64)
            ok = np.array(ok, bool)
            val[py_rows] = np.asarray(o_val.fill_null(0).to_numpy(zero_copy_only=False), np.int64)
            ok[py_rows] = o_ok
        out[k] = pa.array(val, pa.int64(), mask=~ok) if not ok.all() else pa.array(val, pa.int64())
    R["correlation"] = out["correlation"]
    R["external_id"] = out["external_id"]
    R["stream_arg"] = out["stream"]
    R["device_arg"] = out["device"]

    # collective columns: the few rows with collective keys, decoded in Python
    coll_rows = np.flatnonzero(_np(res, "coll", np.bool_))
    coll = {}
    if len(coll_rows):
        sub = collective_columns(_decode_args(args_json, coll_rows))
        where = np.full(n, -1, np.int64)
        where[coll_rows] = np.arange(len(coll_rows))
        take = pa.array(where, mask=where < 0)
        coll = {k: v.take(take) for k, v in sub.items()}
    for k, v in R.items():
        cols.rows[k] = [v]
    cols.rows["coll"] = [(n, coll)]

    # flows
    F = cols.flow
    fk = _np(res, "f_kind", np.int8)
    if len(fk):
        F["kind"] = [fk]
        F["ts"] = [_np(res, "f_ts", np.int64)]
        F["ok"] = [_np(res, "f_ok", np.bool_)]
        F["id"] = [_np(res, "f_id", np.int64)]
        F["pid_key"] = [ids.columns(_np(res, "f_pid_kind", np.int8), _np(res, "f_pid", np.int64), False)[2]]
        F["tid_key"] = [ids.columns(_np(res, "f_tid_kind", np.int8), _np(res, "f_tid", np.int64), True)[2]]
        F["is_f"] = [_np(res, "f_is_f", np.bool_)]
        F["bp_e"] = [_np(res, "f_bp_e", np.bool_)]

    # process / thread names (file order: a later M event overrides an earlier one)
    for which, pk, pv, tk, tv, name in res["metas"]:
        p_key = ids.one(pk, pv, False)
        if which == 1:
            cols.proc_names[p_key] = name
        else:
            cols.thread_names[(p_key, ids.one(tk, tv, True))] = name
    return cols


def _decode_args(args_json: pa.Array, rows: np.ndarray) -> list:
    """Decoded :class:`shapes.Args` of the given rows (empty Args where args is not an object)."""
    out = []
    for text in args_json.take(pa.array(rows)).to_pylist():
        try:
            out.append(shapes.ARGS_ONE.decode(text) if text is not None else _EMPTY)
        except msgspec.DecodeError:
            out.append(_EMPTY)
    return out


_EMPTY = shapes.Args()
