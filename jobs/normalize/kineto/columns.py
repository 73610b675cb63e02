"""Per-chunk extraction of decoded trace events into columnar arrays.

:class:`EventColumns` receives lists of decoded :class:`~jobs.normalize.kineto.shapes.Event` (a chunk
of the trace, or the whole trace) and keeps only compact numpy/Arrow arrays, so the Python
objects of one chunk can be freed before the next is decoded. Every step is a list
comprehension or a vectorized numpy/pyarrow call; no per-event Python branching on the hot path.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from itertools import repeat
from operator import is_not, itemgetter

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.normalize.kineto import shapes
from jobs.normalize.kineto.numbers import micros_to_ns, to_int64

PH_NAMES = ("X", "i", "C", "M", "s", "f", "B", "E")
X, I, C, M, S, F, B, E = range(8)  # noqa: E741 - the Chrome trace phase letters
#: Phases that become rows (``B``/``E`` are paired into ``X`` rows by the passes).
ROW_PHASES = (X, I, C, B, E)
_PH_ARR = pa.array(PH_NAMES)
_LAUNCH_FLOW_ARR = pa.array(["ac2g", "async_cpu_to_gpu"])
_FWDBWD_FLOW_ARR = pa.array(["forward_backward", "fwd_bwd", "fwdbwd"])
_STREAM_TID = re.compile(r"^\s*stream\s+(-?\d+)\s*$")
_NONE_KEY = -(2**61)
_INT_ONLY = {int}
_LABEL_KEY0 = -(2**62)

#: Bytes per element of the tensor element types PyTorch writes: c10 ScalarType names (the collective ``dtype``
#: arg) and the C++ type names of record_function ``Input type`` (the analyze stage's fallback from ``Input Dims``).
DTYPE_BYTES = {
    "Float": 4,
    "float": 4,
    "Float32": 4,
    "Double": 8,
    "double": 8,
    "Half": 2,
    "BFloat16": 2,
    "Int": 4,
    "int": 4,
    "Long": 8,
    "long": 8,
    "Short": 2,
    "Char": 1,
    "Byte": 1,
    "Bool": 1,
    "ComplexHalf": 4,
    "ComplexFloat": 8,
    "ComplexDouble": 16,
    "Float8_e4m3fn": 1,
    "Float8_e5m2": 1,
    "Float8_e4m3fnuz": 1,
    "Float8_e5m2fnuz": 1,
    "UInt16": 2,
    "UInt32": 4,
    "UInt64": 8,
    "QInt8": 1,
    "QUInt8": 1,
    "QInt32": 4,
    "c10::Half": 2,
    "c10::BFloat16": 2,
    "long int": 8,
    "long long": 8,
    "short int": 2,
    "short": 2,
    "signed char": 1,
    "unsigned char": 1,
    "char": 1,
    "bool": 1,
    "c10::complex<float>": 8,
    "c10::complex<double>": 16,
    "c10::Float8_e4m3fn": 1,
    "c10::Float8_e5m2": 1,
}

_PLUCK = {
    # a compiled list comprehension per attribute: ~2x faster than map(attrgetter(...))
    name: eval(f"lambda xs: [x.{name} for x in xs]")  # noqa: S307 - fixed, known attribute names
    for name in ("ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "bp", "args", *shapes.Args.__struct_fields__)
}


def pluck(structs, name: str) -> list:
    """``[s.<name> for s in structs]``."""
    return _PLUCK[name](structs)


def take(seq, idx: np.ndarray):
    """``[seq[i] for i in idx]`` as a sequence (C-level itemgetter)."""
    n = len(idx)
    if n == len(seq):
        return seq
    if n == 0:
        return []
    if n == 1:
        return [seq[int(idx[0])]]
    return itemgetter(*idx.tolist())(seq)


def str_array(values) -> pa.Array:
    """Strings (or None) -> ``pa.string``; other JSON values are written as compact JSON text."""
    try:
        return pa.array(values, type=pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        return pa.array([v if v is None or isinstance(v, str) else to_text(v) for v in values], type=pa.string())


def to_text(v) -> str:
    """A JSON value as compact JSON text (``str(v)`` when it cannot be encoded)."""
    try:
        return msgspec.json.encode(v).decode()
    except Exception:
        return str(v)


def bool_np(arr) -> np.ndarray:
    """Arrow boolean array -> numpy bool array, null read as False."""
    return np.asarray(arr.fill_null(False).to_numpy(zero_copy_only=False), bool)


def take_arrow(arr, idx) -> pa.Array:
    """``arr.take(idx)`` as a plain array; a one-chunk ChunkedArray is taken from its chunk (a
    ChunkedArray take concatenates all chunks first: a transient copy of the whole column)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.chunk(0) if arr.num_chunks == 1 else arr.combine_chunks()
    return arr.take(idx)


def int_and_mask(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """int64 Arrow array -> (values with 0 for null, valid mask)."""
    n = len(arr)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, bool)
    ok = ~np.asarray(arr.is_null().to_numpy(zero_copy_only=False), bool) if arr.null_count else np.ones(n, bool)
    vals = np.array(arr.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
    return vals, ok


def id_keys(values: list, label_codes: dict, parse_stream: bool = False):
    """pid/tid values -> ``(num, valid, key, labels, streams)``.

    ``num``/``valid``: numeric value (ints, numeric strings, ``"stream N"`` -> N with
    ``parse_stream``). ``key``: grouping key (int64); each distinct non-numeric string gets a
    negative sentinel from ``label_codes`` (shared across chunks). ``labels``: ``{position: str}``
    of non-numeric values; ``streams``: ``{position: N}`` for ``"stream N"`` tids.
    """
    n = len(values)
    if set(map(type, values)) == _INT_ONLY:  # the common chunk: all ints, no Python-level loop
        try:
            num = np.array(pa.array(values, type=pa.int64()).to_numpy(), dtype=np.int64)
            return num, np.ones(n, bool), num.copy(), {}, {}
        except (OverflowError, pa.ArrowInvalid):  # an id past int64 (a damaged trace): named by its text
            pass
    arr = pa.array([v if v.__class__ is int and -(2**63) <= v < 2**63 else None for v in values], type=pa.int64())
    num = np.array(arr.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
    if not arr.null_count:
        return num, np.ones(n, bool), num.copy(), {}, {}
    valid = ~np.asarray(arr.is_null().to_numpy(zero_copy_only=False), bool)
    key = num.copy()
    labels: dict[int, str] = {}
    streams: dict[int, int] = {}
    cache: dict[str, tuple] = {}
    for i in np.flatnonzero(~valid).tolist():
        v = values[i]
        if v is None:
            key[i] = _NONE_KEY
            continue
        if not isinstance(v, str):
            v = to_text(v)
        r = cache.get(v)
        if r is None:
            r = cache[v] = resolve_id_string(v, parse_stream)
        x, is_stream = r
        if x is not None:
            num[i] = x
            valid[i] = True
            key[i] = x
            if is_stream:
                streams[i] = x
        else:
            labels[i] = v
            key[i] = _LABEL_KEY0 - label_codes.setdefault(v, len(label_codes))
    return num, valid, key, labels, streams


def resolve_id_string(v: str, parse_stream: bool = False) -> tuple[int | None, bool]:
    """A string pid/tid -> ``(number, is_stream)``: numeric strings (``"140"``) -> their value,
    ``"stream N"`` -> ``(N, True)`` when ``parse_stream`` (tids), anything else -> ``(None, False)``
    (a label such as ``"Spans"``)."""
    s = v.strip()
    if s.lstrip("-").isdigit() and -(2**62) < int(s) < 2**62:
        return int(s), False
    m = _STREAM_TID.match(v) if parse_stream else None
    return (int(m.group(1)), True) if m and int(m.group(1)) < 2**62 else (None, False)


def phase_codes(ph_list: list) -> np.ndarray:
    """Phase strings -> int8 codes (X, i, C, M, s, f, B, E = 0..7), -1 for any other phase."""
    return (
        pc.index_in(str_array(ph_list), value_set=_PH_ARR).fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int8)
    )


def args_columns(raws: list, compact: bool) -> tuple[pa.Array, list, bytes]:
    """Raw ``args`` per row -> ``(args_json, decoded Args per row, args text)``.

    ``args_json`` is the args object as JSON text (compact when ``compact``: no insignificant
    whitespace), null where the event has no ``args``. The args of all rows are decoded in one
    msgspec call from one buffer.
    """
    n = len(raws)
    if n == 0:
        return pa.array([], pa.string()), [], b""
    present = np.fromiter(map(is_not, raws, repeat(None)), bool, n)
    if not present.all():
        raws = [r if r is not None else shapes.EMPTY_OBJECT for r in raws]
    enc = msgspec.json.encode(raws)  # "[r0,r1,...]": raw text verbatim
    if compact:
        enc = msgspec.json.format(enc, indent=-1)
        lens = np.fromiter(map(len, shapes.RAW_LIST.decode(enc)), np.int64, n)
    else:
        lens = np.fromiter(map(len, raws), np.int64, n)
    big = len(enc) >= 2**31 - 1
    offsets = np.empty(n + 1, np.int64 if big else np.int32)
    offsets[0] = 1
    np.cumsum(lens + 1, out=offsets[1:])
    offsets[1:] += 1
    typ = pa.large_binary() if big else pa.binary()
    validity = None if present.all() else pa.array(present).buffers()[1]
    arr = pa.Array.from_buffers(typ, n, [validity, pa.py_buffer(offsets), pa.py_buffer(enc)])
    arr = pc.binary_slice(arr, 0, -1).cast(pa.large_string() if big else pa.string())  # drop "," / "]"
    if big:
        arr = arr.cast(pa.string())
    try:
        decoded = shapes.ARGS_LIST.decode(enc)
    except msgspec.DecodeError:  # an args value that is not an object
        decoded = []
        for r in raws:
            try:
                decoded.append(shapes.ARGS_ONE.decode(r))
            except msgspec.DecodeError:
                decoded.append(_EMPTY_ARGS)
    return arr, decoded, enc


_EMPTY_ARGS = shapes.Args()


def collective_args(A: list, enc: bytes) -> dict[str, pa.Array]:
    """Collective columns from args: ``Collective name``, ``Process Group Name``, ``Group size``,
    ``Seq`` and ``msg_bytes`` = max(``In msg nelems``, ``Out msg nelems``) × dtype bytes
    (``In/Out msg size`` on pre-2024 traces). All null when the chunk has no collective args."""
    if not any(k in enc for k in COLLECTIVE_KEYS):  # fast skip: no row has any of the keys
        return {}
    return collective_columns(A)


#: args keys whose presence in a row makes :func:`collective_columns` read it.
COLLECTIVE_KEYS = (b'"Collective name"', b'"Process Group Name"', b'"Group size"', b'"Seq"')


def collective_columns(A: list) -> dict[str, pa.Array]:
    """Collective columns of decoded :class:`~jobs.normalize.kineto.shapes.Args` rows (see
    :func:`collective_args`); each value depends on its own row only."""
    n = len(A)
    out = {"collective": str_array(pluck(A, "collective"))}
    out["pg_name"] = str_array(
        [None if v is None else (v if isinstance(v, str) else to_text(v)) for v in pluck(A, "pg_name")]
    )
    out["group_size"] = to_int64(pluck(A, "group_size"))
    out["seq"] = to_int64(pluck(A, "seq"))
    msg = [None] * n
    for i in np.flatnonzero(bool_np(pc.is_valid(out["collective"]))).tolist():
        a = A[i]
        i_n = a.in_nelems if a.in_nelems is not None else a.in_size
        o_n = a.out_nelems if a.out_nelems is not None else a.out_size
        vals = [v for v in (i_n, o_n) if type(v) is int]
        size = DTYPE_BYTES.get(a.dtype) if isinstance(a.dtype, str) else None
        msg[i] = max(vals) * size if vals and size else None
    out["msg_bytes"] = pa.array(msg, pa.int64())
    return out


class EventColumns:
    """Accumulates columns of decoded events, chunk by chunk (see module doc).

    Row columns (``X``/``i``/``C`` events, file order) are lists of per-chunk arrays; flow points
    (``s``/``f``) and process/thread names from ``M`` events are kept separately.
    """

    def __init__(self, compact_args: bool = True):
        self.compact_args = compact_args
        self.n_events = 0  # events seen (all phases): global offset of the next chunk
        self.n_rows = 0
        self.flags: set[str] = set()
        self.ts_is_float = False
        self.label_codes: dict[str, int] = {}
        self.rows: dict[str, list] = {
            k: []
            for k in (
                "event_id",
                "ph",
                "ts",
                "dur",
                "dur_ok",
                "pid",
                "pid_ok",
                "pid_key",
                "tid",
                "tid_ok",
                "tid_key",
                "name",
                "raw_category",
                "args_json",
                "correlation",
                "external_id",
                "stream_arg",
                "device_arg",
                "coll",
            )
        }
        self.pid_labels: dict[int, str] = {}
        self.tid_labels: dict[int, str] = {}
        self.tid_streams: dict[int, int] = {}
        self.flow: dict[str, list] = {k: [] for k in ("kind", "ts", "ok", "id", "pid_key", "tid_key", "is_f", "bp_e")}
        self.proc_names: dict[int, str] = {}
        self.thread_names: dict[tuple[int, int], str] = {}
        self.has_legacy_external_id = False
        self.n_invalid_ts = 0  # X/i/C events dropped because their ts is missing, non-numeric or non-finite
        self.first_invalid_ts: str | None = None  # description of the first one (quarantine reason)

    def add(self, E: list, raw_text: Callable[[str, np.ndarray], list]) -> None:
        """Extract one chunk of decoded events.

        Args:
            E: decoded events of the chunk, in file order.
            raw_text: ``raw_text(field, positions)`` -> raw JSON text of ``field`` (``ts``/``dur``) of
                the events at chunk-local ``positions`` (for the exact decimal path).

        ``X``/``i``/``C`` events without a valid numeric ``ts`` (missing, null, non-numeric, or a
        non-finite token repaired to null) are not rows: they are counted in ``n_invalid_ts`` (the
        caller flags ``invalid_timestamp``, and quarantines the file when no row is left).
        """
        o = self.n_events
        m = len(E)
        self.n_events += m
        if m == 0:
            return
        code = phase_codes(pluck(E, "ph"))
        if (code < 0).any():
            self.flags.add("unsupported_phase")
        rows = np.flatnonzero(np.isin(code, ROW_PHASES))
        flows = np.flatnonzero((code == S) | (code == F))
        metas = np.flatnonzero(code == M)
        nr = len(rows)

        ts_vals = pluck(E, "ts")
        types = set(map(type, ts_vals))
        ts, ts_ok = micros_to_ns(ts_vals, lambda pos: raw_text("ts", pos), types)
        del ts_vals
        if float in types:
            self.ts_is_float = True
        if nr and not ts_ok[rows].all():  # dropped and counted (flag invalid_timestamp), see n_invalid_ts
            bad = rows[~ts_ok[rows]]
            if self.first_invalid_ts is None:
                e = E[int(bad[0])]
                self.first_invalid_ts = f"event {o + int(bad[0])} (ph {e.ph!r}) has no valid numeric ts: {e.ts!r}"
            self.n_invalid_ts += len(bad)
            rows = rows[ts_ok[rows]]
            nr = len(rows)

        pid, pid_ok, pid_key, pid_labels, _ = id_keys(pluck(E, "pid"), self.label_codes)
        tid, tid_ok, tid_key, tid_labels, tid_streams = id_keys(pluck(E, "tid"), self.label_codes, parse_stream=True)
        names = str_array(pluck(E, "name"))
        cats = str_array(pluck(E, "cat"))

        # metadata events: process / thread names
        for i in metas.tolist():
            e = E[i]
            if e.name not in ("process_name", "thread_name") or e.args is None:
                continue
            try:
                a = msgspec.json.decode(e.args)
            except msgspec.DecodeError:
                continue
            nm = a.get("name") if isinstance(a, dict) else None
            if isinstance(nm, str):
                if e.name == "process_name":
                    self.proc_names[int(pid_key[i])] = nm
                else:
                    self.thread_names[(int(pid_key[i]), int(tid_key[i]))] = nm

        if len(flows):
            self._add_flows(E, flows, cats, names, code, ts, ts_ok, pid_key, tid_key)

        if nr == 0:
            return
        R = self.rows
        rows_pa = pa.array(rows)
        row_of = np.full(m, -1, np.int64)
        row_of[rows] = np.arange(self.n_rows, self.n_rows + nr)
        for src, dst in ((pid_labels, self.pid_labels), (tid_labels, self.tid_labels), (tid_streams, self.tid_streams)):
            for i, v in src.items():
                if row_of[i] >= 0:
                    dst[int(row_of[i])] = v
        R["event_id"].append(rows + o)
        R["ph"].append(code[rows])
        R["ts"].append(ts[rows])
        R["pid"].append(pid[rows])
        R["pid_ok"].append(pid_ok[rows])
        R["pid_key"].append(pid_key[rows])
        R["tid"].append(tid[rows])
        R["tid_ok"].append(tid_ok[rows])
        R["tid_key"].append(tid_key[rows])
        R["name"].append(names.take(rows_pa) if nr != m else names)
        R["raw_category"].append(cats.take(rows_pa) if nr != m else cats)

        rev = take(E, rows)
        dur, dur_ok = micros_to_ns(pluck(rev, "dur"), lambda pos: raw_text("dur", rows[pos]))
        dur_ok &= code[rows] == X
        dur[~dur_ok] = 0
        R["dur"].append(dur)
        R["dur_ok"].append(dur_ok)

        args_json, A, enc = args_columns(pluck(rev, "args"), self.compact_args)
        del rev
        R["args_json"].append(args_json)
        R["correlation"].append(to_int64(pluck(A, "correlation")))
        ext = to_int64(pluck(A, "external_id"))
        if b'"external id"' in enc:
            ext = pc.coalesce(ext, to_int64(pluck(A, "external_id_legacy")))
        R["external_id"].append(ext)
        R["stream_arg"].append(to_int64(pluck(A, "stream")))
        R["device_arg"].append(to_int64(pluck(A, "device")))
        R["coll"].append((nr, collective_args(A, enc)))
        self.n_rows += nr

    def _add_flows(self, E, flows, cats, names, code, ts, ts_ok, pid_key, tid_key) -> None:
        """Append the launch (kind 1) and fwdbwd (kind 2) flow points among ``E[flows]`` to ``self.flow``."""
        fcats = cats.take(pa.array(flows))
        launch = bool_np(pc.is_in(fcats, value_set=_LAUNCH_FLOW_ARR))
        fwdbwd = bool_np(pc.is_in(fcats, value_set=_FWDBWD_FLOW_ARR))
        legacy = np.flatnonzero(bool_np(pc.equal(fcats, "async")))
        if len(legacy):  # 2021: cat "async", name "launch"
            launch[legacy] |= bool_np(pc.equal(names.take(pa.array(flows[legacy])), "launch"))
        kind = np.where(launch, 1, np.where(fwdbwd, 2, 0)).astype(np.int8)  # 1 launch, 2 fwdbwd
        sel = np.flatnonzero(kind)
        if not len(sel):
            return
        g = flows[sel]
        fev = take(E, g)
        fid, fid_ok = int_and_mask(to_int64(pluck(fev, "id")))
        F_ = self.flow
        F_["kind"].append(kind[sel])
        F_["ts"].append(ts[g])
        F_["ok"].append(ts_ok[g] & fid_ok)
        F_["id"].append(fid)
        F_["pid_key"].append(pid_key[g])
        F_["tid_key"].append(tid_key[g])
        F_["is_f"].append(code[g] == F)
        F_["bp_e"].append(bool_np(pc.equal(str_array(pluck(fev, "bp")), "e")))

    # ----------------------------------------------------------------------------- results

    def row_column(self, name: str):
        """A row column as one array, kept (its per-chunk parts joined in place): numpy columns are writable."""
        parts = self.rows[name]
        if len(parts) != 1:
            parts[:] = [np.concatenate(parts) if isinstance(parts[0], np.ndarray) else pa.concat_arrays(parts)]
        elif isinstance(parts[0], np.ndarray) and not parts[0].flags.writeable:  # a view of the scanner's buffer
            parts[0] = parts[0].copy()
        return parts[0]

    def select_rows(self, keep: np.ndarray) -> None:
        """Keep only the rows where ``keep`` (bool per row) is True, in every row column and row-keyed label."""
        idx = np.flatnonzero(keep)
        taker = pa.array(idx)
        for name, parts in self.rows.items():
            if name == "coll":
                continue
            col = self.row_column(name)
            parts[0] = col[idx] if isinstance(col, np.ndarray) else col.take(taker)
        coll = self.collective()  # joined, nulls where absent
        self.rows["coll"] = [(len(idx), {k: v.take(taker) for k, v in coll.items()})]
        new = np.cumsum(keep) - 1
        for labels in (self.pid_labels, self.tid_labels, self.tid_streams):
            kept = {int(new[i]): v for i, v in labels.items() if keep[i]}
            labels.clear()
            labels.update(kept)
        self.n_rows = len(idx)

    def row_array(self, name: str) -> np.ndarray:
        """Concatenated row column (consumed: the per-chunk parts are released)."""
        parts = self.rows.pop(name, [])
        if not parts:
            return np.zeros(0, bool if name.endswith("_ok") else np.int8 if name == "ph" else np.int64)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def row_arrow(self, name: str, typ: pa.DataType = pa.string(), chunked: bool = False):
        """Concatenated (or chunked) Arrow row column (consumed)."""
        parts = self.rows.pop(name, [])
        if not parts:
            return pa.array([], typ)
        if chunked:
            return pa.chunked_array(parts, type=typ)
        return parts[0] if len(parts) == 1 else pa.concat_arrays(parts)

    def collective(self) -> dict[str, pa.Array]:
        """Collective columns over all rows (null where absent)."""
        types = {
            "collective": pa.string(),
            "pg_name": pa.string(),
            "group_size": pa.int64(),
            "msg_bytes": pa.int64(),
            "seq": pa.int64(),
        }
        out = {}
        coll = self.rows.pop("coll", [])
        for k, t in types.items():
            parts = [d[k] if k in d else pa.nulls(nr, t) for nr, d in coll]
            out[k] = pa.concat_arrays(parts) if len(parts) > 1 else (parts[0] if parts else pa.array([], t))
        return out

    def flow_array(self, name: str) -> np.ndarray:
        """Concatenated flow-point column (consumed)."""
        parts = self.flow.pop(name, [])
        return np.concatenate(parts) if len(parts) > 1 else (parts[0] if parts else np.zeros(0, np.int64))
