"""Neuron profile tables → ``events`` rows (``source = "neuron"``), canonical model of ARCHITECTURE.md.

Mapping (every row: ``source`` ``neuron``, ``raw_category`` = the Parquet table name, ``parent``
null, ``depth`` 0, ``step`` null; ``args_json`` = the row's remaining non-null fields):

=========================  ====  ==========================  ==================================================
table                      ph    category                    name / placement
=========================  ====  ==========================  ==================================================
``Instruction``            X     ``neuron_instruction``      ``opcode``; ``tid`` = timeline track (below),
                                                             ``thread_name`` = track; ``external_id`` =
                                                             instruction ``id``; args hold ``engine``,
                                                             ``evt_wait_time_ns`` and ``predecessors`` (ids)
``DmaPacketAggregated``    X     ``neuron_dma_block``        ``variable`` (else the queue); DMA queue track
``DmaPacket``              X     ``neuron_dma``              queue family (``qSyncSpillReload0``, or the
                                                             queue type for software-DGE ``Q0-E3`` tracks);
                                                             ``msg_bytes`` = ``transfer_bytes``
``CcOp``                   X     ``neuron_collective``       ``operation``; ``collective`` normalized
                                                             (``AllGather`` → ``allgather``), ``msg_bytes`` =
                                                             max(in, out), ``group_size`` from
                                                             ``replica_group``, ``seq`` = ``op_id``
``CcInstruction``          X     ``neuron_cc_instruction``   ``description``; one track per CC-core
``Throttle``               X     ``neuron_throttle``         ``throttle <type>``; args ``k``, ``n``
``LayerSummary`` (legacy)  X     ``neuron_layer``            layer name
``SemaphoreUpdate``        C     ``neuron_semaphore``        ``semaphore <id>``; args ``value``
``PendingDma``/``DmaUsage``/``HbmUsage``  C  ``neuron_counter``  ``pending_dma`` / ``dma_throughput`` / ``hbm_throughput``
=========================  ====  ==========================  ==================================================

Placement: ``pid`` = ``pcore_idx`` (physical core within the logical NeuronCore, 0 when absent),
``process_name`` = ``NeuronCore <nc>``, ``device`` = NeuronCore index. ``tid`` per track:
engine tracks :data:`TRACK_TIDS` (``Tensor`` 0, ``TensorMatrix`` 1, ``Vector`` 2, ``Scalar`` 3,
``GpSimd`` 4, ``Sync`` 5); DMA queue ``1000 + 16·engine_idx + queue_idx`` (16 queues per DMA
engine); collective stream ``2000 + stream_id``; CC-core ``3000 + core_idx``; semaphores 900,
throttle 901, counters 902, layers 903. ``ts_ns`` is ns from profile start (device clock), so a
device profile's ``captures.time_base`` is ``device-relative-ns``. ``is_gpu`` is true for device
activity (instructions, DMA, collectives).
"""

from __future__ import annotations

import re
import zlib

import msgspec
import numpy as np
import pyarrow as pa

from jobs.normalize.kineto.parse import EVENT_COLUMNS
from jobs.normalize.neuron.profile import NeuronProfile, engine_name
from schemas.tables import EVENTS

__all__ = ["profile_events", "TRACK_TIDS", "normalize_collective", "events_from_blocks", "EventBlock"]

#: Engine timeline tracks → tid (legacy ``label`` / Parquet ``timeline_track``; canonical engines too).
TRACK_TIDS = {"Tensor": 0, "TensorMatrix": 1, "Vector": 2, "Scalar": 3, "GpSimd": 4, "Sync": 5}
_ENGINE_TRACK = {"tensor": "Tensor", "vector": "Vector", "scalar": "Scalar", "gpsimd": "GpSimd", "sync": "Sync"}
_TRACK_LOWER = {k.lower(): k for k in TRACK_TIDS}
_SCHEMA = pa.schema([EVENTS.arrow_schema().field(n) for n in EVENT_COLUMNS])
_QUEUE_SUFFIX = re.compile(r"-Q\d+-E\d+$")
_COLLECTIVES = {
    "allgather": "allgather",
    "allreduce": "allreduce",
    "reducescatter": "reduce_scatter",
    "alltoall": "all_to_all",
    "alltoallv": "all_to_all",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "permute": "permute",
    "collectivepermute": "permute",
    "sendrecv": "sendrecv",
    "send": "send",
    "recv": "recv",
}
_enc = msgspec.json.Encoder()


def normalize_collective(op) -> str | None:
    """``AllGather``/``all-gather``/``ALL_REDUCE`` → ``allgather``/``allreduce`` (names of ``events.collective``)."""
    if op is None:
        return None
    key = re.sub(r"[^a-z]", "", str(op).lower())
    return _COLLECTIVES.get(key, key or None)


class EventBlock:
    """Columns of one group of event rows (dict of column → list or numpy array, same length)."""

    def __init__(self, n: int, **cols):
        self.n = n
        self.cols = cols


def _track_of(track, engine) -> str:
    if track:
        return _TRACK_LOWER.get(str(track).lower(), str(track))
    return _ENGINE_TRACK.get(engine_name(engine) or "", str(engine or "unknown"))


def _args(t: pa.Table, skip: set, extra: dict | None = None) -> list[str]:
    names = [c for c in t.column_names if c not in skip]
    cols = [t.column(c).to_pylist() for c in names]
    out = []
    for i in range(t.num_rows):
        d = {names[j]: cols[j][i] for j in range(len(names)) if cols[j][i] is not None}
        if extra:
            for k, vals in extra.items():
                if vals[i] is not None:
                    d[k] = vals[i]
        out.append(_enc.encode(d).decode())
    return out


def _col(t: pa.Table, name: str, default=None) -> list:
    return t.column(name).to_pylist() if name in t.column_names else [default] * t.num_rows


def _i(t: pa.Table, name: str, fill=0) -> np.ndarray:
    if name not in t.column_names:
        return np.full(t.num_rows, fill, np.int64)
    return np.asarray(t.column(name).fill_null(fill).to_numpy(zero_copy_only=False), dtype=np.int64)


def _pcore(t: pa.Table) -> np.ndarray:
    return _i(t, "pcore_idx", 0)


def _instruction_block(t: pa.Table, flows: pa.Table | None) -> EventBlock:
    preds: dict = {}
    if flows is not None:
        for a, b in zip(flows.column("in_id").to_pylist(), flows.column("out_id").to_pylist()):
            preds.setdefault(b, []).append(a)
    ids = _col(t, "id")
    tracks = [_track_of(tr, en) for tr, en in zip(_col(t, "timeline_track"), _col(t, "engine"))]
    tid = [TRACK_TIDS.get(tr, 6 + zlib.crc32(tr.encode()) % 90) for tr in tracks]
    extra = {"predecessors": [preds.get(i) for i in ids]}
    return EventBlock(
        t.num_rows,
        ph="X",
        category="neuron_instruction",
        raw_category="Instruction",
        name=_col(t, "opcode"),
        ts_ns=_i(t, "start_ts"),
        dur_ns=_i(t, "duration_ns"),
        pid=_pcore(t),
        tid=tid,
        thread_name=tracks,
        is_gpu=True,
        external_id=ids,
        args_json=_args(t, {"start_ts", "end_ts", "duration_ns", "opcode", "id", "timeline_track", "pcore_idx"}, extra),
    )


def _queue_tid(t: pa.Table) -> np.ndarray:
    return 1000 + 16 * _i(t, "engine_idx", 0) + _i(t, "queue_idx", 0)


def _queue_family(qname, qtype) -> str:
    if qname and str(qname).startswith("q"):
        return _QUEUE_SUFFIX.sub("", str(qname))
    return f"dma {qtype or 'unknown'}"


def _dma_block(t: pa.Table, aggregated: bool) -> EventBlock:
    qn, qt = _col(t, "queue_name"), _col(t, "queue_type")
    if aggregated:
        names = [v if v and v != "unknown" else _queue_family(q, ty) for v, q, ty in zip(_col(t, "variable"), qn, qt)]
    else:
        names = [_queue_family(q, ty) for q, ty in zip(qn, qt)]
    return EventBlock(
        t.num_rows,
        ph="X",
        category="neuron_dma_block" if aggregated else "neuron_dma",
        raw_category="DmaPacketAggregated" if aggregated else "DmaPacket",
        name=names,
        ts_ns=_i(t, "start_ts"),
        dur_ns=_i(t, "duration_ns"),
        pid=_pcore(t),
        tid=_queue_tid(t),
        thread_name=[q or f"Q{qi}-E{e}" for q, qi, e in zip(qn, _col(t, "queue_idx"), _col(t, "engine_idx"))],
        is_gpu=True,
        external_id=_col(t, "id"),
        msg_bytes=_col(t, "transfer_bytes"),
        args_json=_args(t, {"start_ts", "end_ts", "duration_ns", "id", "pcore_idx", "queue_name"}),
    )


def _group_size(replica_group) -> int | None:
    if not replica_group:
        return None
    try:
        g = msgspec.json.decode(str(replica_group))
    except msgspec.DecodeError:
        return None
    if isinstance(g, list) and g and isinstance(g[0], list):
        return len(g[0])
    return len(g) if isinstance(g, list) else None


def _cc_block(t: pa.Table) -> EventBlock:
    ops = _col(t, "operation")
    msg = [
        max(x for x in (a, b) if x is not None) if (a is not None or b is not None) else None
        for a, b in zip(_col(t, "input_size"), _col(t, "output_size"))
    ]
    return EventBlock(
        t.num_rows,
        ph="X",
        category="neuron_collective",
        raw_category="CcOp",
        name=ops,
        ts_ns=_i(t, "start_ts"),
        dur_ns=_i(t, "duration_ns"),
        pid=_pcore(t),
        tid=2000 + _i(t, "stream_id", 0),
        thread_name=[f"collective stream {s}" for s in _col(t, "stream_id", 0)],
        is_gpu=True,
        collective=[normalize_collective(o) for o in ops],
        msg_bytes=msg,
        seq=_col(t, "op_id"),
        group_size=[_group_size(g) for g in _col(t, "replica_group")],
        pg_name=[None if g is None else f"replica_group_{g}" for g in _col(t, "replica_group_id")],
        args_json=_args(t, {"start_ts", "end_ts", "duration_ns", "operation", "pcore_idx"}),
    )


def _simple_x(
    t: pa.Table, category: str, raw: str, names, tid, thread, start="start_ts", dur="duration_ns", skip=()
) -> EventBlock:
    return EventBlock(
        t.num_rows,
        ph="X",
        category=category,
        raw_category=raw,
        name=names,
        ts_ns=_i(t, start),
        dur_ns=_i(t, dur),
        pid=_pcore(t),
        tid=tid,
        thread_name=thread,
        is_gpu=True,
        args_json=_args(t, {start, dur, "pcore_idx", *skip}),
    )


def _counter(t: pa.Table, name, raw: str, category: str, tid: int, thread: str, skip=()) -> EventBlock:
    return EventBlock(
        t.num_rows,
        ph="C",
        category=category,
        raw_category=raw,
        name=name,
        ts_ns=_i(t, "timestamp"),
        dur_ns=None,
        pid=_pcore(t),
        tid=tid,
        thread_name=thread,
        is_gpu=True,
        args_json=_args(t, {"timestamp", "pcore_idx", *skip}),
    )


def device_blocks(p: NeuronProfile) -> list[EventBlock]:
    """Event blocks of the device tables of ``p`` (see the module table)."""
    blocks = []
    t = p.table("Instruction")
    if t is not None:
        blocks.append(_instruction_block(t, p.table("Flow")))
    for name, agg in (("DmaPacketAggregated", True), ("DmaPacket", False)):
        t = p.table(name)
        if t is not None:
            blocks.append(_dma_block(t, agg))
    t = p.table("CcOp")
    if t is not None:
        blocks.append(_cc_block(t))
    t = p.table("CcInstruction")
    if t is not None:
        cores = _i(t, "core_idx", 0)
        blocks.append(
            _simple_x(
                t,
                "neuron_cc_instruction",
                "CcInstruction",
                _col(t, "description"),
                3000 + cores,
                [f"CC-core {c}" for c in cores],
                skip={"description"},
            )
        )
    t = p.table("Throttle")
    if t is not None:
        blocks.append(
            _simple_x(
                t,
                "neuron_throttle",
                "Throttle",
                [f"throttle {ty}" for ty in _col(t, "type")],
                901,
                "Throttle",
                start="timestamp",
                dur="duration",
            )
        )
    t = p.table("LayerSummary")
    if t is not None:
        blocks.append(_simple_x(t, "neuron_layer", "LayerSummary", _col(t, "name"), 903, "Layers", skip={"name"}))
    t = p.table("SemaphoreUpdate")
    if t is not None:
        blocks.append(
            _counter(
                t, [f"semaphore {i}" for i in _col(t, "id")], "SemaphoreUpdate", "neuron_semaphore", 900, "Semaphores"
            )
        )
    for name, label in (("PendingDma", "pending_dma"), ("DmaUsage", "dma_throughput"), ("HbmUsage", "hbm_throughput")):
        t = p.table(name)
        if t is not None:
            blocks.append(_counter(t, label, name, "neuron_counter", 902, "Counters"))
    return blocks


def events_from_blocks(
    blocks: list[EventBlock], process_name: str | None, device: int | None, first_event_id: int = 0
) -> pa.Table:
    """Concatenate event blocks into a table with the :data:`jobs.normalize.kineto.parse.EVENT_COLUMNS` schema.

    ``event_id`` numbers rows from ``first_event_id`` in block order; ``process_name``/``device`` fill
    rows whose block did not set them; ``source`` is ``neuron``.
    """
    tables = []
    next_id = first_event_id
    for b in blocks:
        if not b.n:
            continue
        cols = {}
        for c in EVENT_COLUMNS:
            typ = _SCHEMA.field(c).type
            v = b.cols.get(c)
            if c == "event_id":
                v = np.arange(next_id, next_id + b.n, dtype=np.int64)
            elif c == "source":
                v = b.cols.get("source", "neuron")
            elif c == "process_name" and v is None:
                v = process_name
            elif c == "device" and v is None:
                v = device
            elif c == "depth" and v is None:
                v = 0
            elif c == "is_gpu" and v is None:
                v = False
            if v is None or isinstance(v, (str, bool, int, float)):
                arr = pa.array([v] * b.n, typ) if v is not None else pa.nulls(b.n, typ)
            else:
                arr = pa.array(v, typ) if not isinstance(v, np.ndarray) else pa.array(v).cast(typ)
            cols[c] = arr
        next_id += b.n
        tables.append(pa.Table.from_arrays([cols[c] for c in EVENT_COLUMNS], schema=_SCHEMA))
    if not tables:
        return _SCHEMA.empty_table()
    return pa.concat_tables(tables)


def profile_events(p: NeuronProfile, first_event_id: int = 0) -> pa.Table:
    """All device ``events`` rows of one profile (EVENT_COLUMNS order and types)."""
    nc = p.metadata.get("neuroncore_idx")
    nc = int(nc) if nc is not None else 0
    return events_from_blocks(device_blocks(p), f"NeuronCore {nc}", nc, first_event_id)
