"""Read ``neuron-profile view --output-format json`` and ``summary-json`` into :class:`NeuronProfile`.

Legacy full-profile JSON (verified on the corpus, ``reference/neuron_profiles.md`` §2.1 and
Appendix B): one object with 21 top-level keys, each a list of objects. The crosswalk to the
Parquet schema 7.4.0 (§2.7) is applied here so that everything downstream reads one model:

============================  ===========================================================
legacy                        Parquet 7.4.0
============================  ===========================================================
``instruction``               ``Instruction``: ``timestamp``→``start_ts`` (+``end_ts``),
                              ``duration``→``duration_ns``, ``label``→``timeline_track``,
                              ``subgroup``→``engine`` (canonical name), ``evt_wait_time``→
                              ``evt_wait_time_ns``, ``instruction_type``→
                              ``tensor_instruction_type``, ``activation_fn``→
                              ``scalar_activation_fn``, ``elements``→``tensor_elements``
                              (``raw_flops`` = 2 × elements); ``predecessors[]``→``Flow``
``dma`` (``aggregated=no``)   ``DmaPacket``: ``transfer_size/read_size/write_size/transfer_rate``
                              → ``transfer_bytes/read_bytes/write_bytes/throughput``;
                              ``dma_engine/dma_queue/subgroup``→``engine_idx/queue_idx/queue_name``
``dma`` (``aggregated=yes``)  ``DmaPacketAggregated``
``semaphore_update``          ``SemaphoreUpdate``
``active_time``               ``ActiveTime`` (engine canonicalized)
``ham``                       ``Throttle`` (``type`` int code kept as text)
``pending_dma``               ``PendingDma``
``dma_throughput``            ``DmaUsage`` (+ ``HbmUsage`` from the ``hbm_*`` fields)
``layer_summary``             ``LayerSummary`` (legacy only; no Parquet equivalent)
``metadata``/``profile_info``/``model_info``/``neff_header``  → ``NeuronProfile.metadata``
``summary[0]``                ``NeuronProfile.summary``
============================  ===========================================================

summary-json (``view --output-format summary-json``, §2.2): ``{"<profile key>": {flat Summary}}``,
possibly preceded by log lines; one :class:`NeuronProfile` (summary only) per key.
"""

from __future__ import annotations

import json
import posixpath

import msgspec
import pyarrow as pa

from jobs.normalize.errors import TraceError
from jobs.normalize.neuron.profile import NeuronProfile, UnsupportedFormatVersion, engine_name, nth_exec_from_name

__all__ = [
    "parse_neuron_json",
    "parse_summary_json",
    "is_legacy_profile",
    "is_summary_json",
    "LEGACY_KEYS",
    "legacy_to_tables",
    "metadata_from_legacy",
]

#: Top-level keys that identify a legacy full-profile JSON (any two suffice).
LEGACY_KEYS = (
    "instruction",
    "dma",
    "semaphore_update",
    "active_time",
    "metadata",
    "profile_info",
    "model_info",
    "neff_header",
    "dma_queues_info",
    "summary_groups",
    "terminology",
)
_I64, _F64, _STR, _I32 = pa.int64(), pa.float64(), pa.string(), pa.int32()
_U64_WRAP = 1 << 64


def _i64(v):
    """int64 of an id/counter (strings accepted; unsigned ids ≥ 2^63 wrap to two's complement)."""
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, list):
        return _i64(v[0]) if v else None
    try:
        i = int(v)
    except (TypeError, ValueError):
        try:
            i = int(float(v))
        except (TypeError, ValueError):
            return None
    if i >= 1 << 63:
        i -= _U64_WRAP
    return i


def _f64(v):
    if v is None or isinstance(v, bool):
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _s(v):
    if v is None:
        return None
    if isinstance(v, (list, dict)):
        return json.dumps(v, separators=(",", ":"))
    return str(v)


def _table(rows: list[dict], spec: list[tuple]) -> pa.Table:
    """Arrow table from row dicts; ``spec`` = ``[(out_name, getter(row) -> value, arrow type)]``."""
    cols, fields = [], []
    for name, get, typ in spec:
        cols.append(pa.array([get(r) for r in rows], typ))
        fields.append(pa.field(name, typ))
    return pa.Table.from_arrays(cols, schema=pa.schema(fields))


def _g(key, conv):
    return lambda r: conv(r.get(key))


def _end(r):
    ts, d = _i64(r.get("timestamp")), _i64(r.get("duration"))
    return None if ts is None else ts + (d or 0)


def _raw_flops(r):
    e = _i64(r.get("elements"))
    return None if e is None else 2 * e


def _flops_transpose(r):
    e = _i64(r.get("elements"))
    if e is None:
        return None
    return 2 * e if str(r.get("instruction_type") or "").upper() == "TRANSPOSE" else 0


_INSTRUCTION = [
    ("start_ts", _g("timestamp", _i64), _I64),
    ("end_ts", _end, _I64),
    ("duration_ns", _g("duration", _i64), _I64),
    ("engine", lambda r: engine_name(r.get("subgroup") or r.get("label")), _STR),
    ("timeline_track", _g("label", _s), _STR),
    ("pcore_idx", _g("pcore_idx", _i64), _I64),
    ("opcode", _g("opcode", _s), _STR),
    ("operands", _g("operands", _s), _STR),
    ("compiler_opcode", _g("compiler_opcode", _s), _STR),
    ("compiler_operands", _g("compiler_operands", _s), _STR),
    ("id", _g("id", _i64), _I64),
    ("pc", _g("pc", _i64), _I64),
    ("compiler_pc", _g("compiler_pc", _i64), _I64),
    ("penguin_id", _g("penguin_id", _s), _STR),
    ("raw_penguin_id", _g("raw_penguin_id", _i64), _I64),
    ("bir_id", _g("bir_id", _s), _STR),
    ("raw_bir_id", _g("raw_bir_id", _i64), _I64),
    ("bir_instruction_name", _g("bir_instruction_name", _s), _STR),
    ("evt_wait_time_ns", _g("evt_wait_time", _i64), _I64),
    ("hlo_attrs", _g("hlo_attrs", _s), _STR),
    ("hlo_name", _g("hlo_name", _s), _STR),
    ("raw_hlo_id", _g("raw_hlo_id", _i64), _I64),
    ("raw_framework_id", _g("raw_framework_id", _i64), _I64),
    ("layer", _g("layer", _s), _STR),
    *[
        (k, _g(k, _i64), _I64)
        for k in (
            "hbm_read_bytes",
            "hbm_write_bytes",
            "sbuf_read_bytes",
            "sbuf_write_bytes",
            "spill_save_bytes",
            "spill_reload_bytes",
            "psum_read_bytes",
            "psum_write_bytes",
            "psum_read_sbuf_write_bytes",
            "input_queue_bytes",
            "output_queue_bytes",
            "weight_queue_bytes",
        )
    ],
    ("tensor_instruction_type", _g("instruction_type", _s), _STR),
    ("tensor_elements", _g("elements", _i64), _I64),
    ("raw_flops", _raw_flops, _I64),
    ("flops_transpose", _flops_transpose, _I64),
    ("scalar_activation_fn", _g("activation_fn", _s), _STR),
]

_DMA_PACKET = [
    ("start_ts", _g("timestamp", _i64), _I64),
    ("end_ts", _end, _I64),
    ("duration_ns", _g("duration", _i64), _I64),
    ("pcore_idx", _g("pcore_idx", _i64), _I64),
    ("id", _g("id", _i64), _I64),
    ("packet_idx", _g("packet_idx", _i64), _I64),
    ("packet_aggregation_id", _g("packet_aggregation_id", _i64), _I64),
    ("engine_idx", _g("dma_engine", _i64), _I64),
    ("read_bytes", _g("read_size", _i64), _I64),
    ("write_bytes", _g("write_size", _i64), _I64),
    ("transfer_bytes", _g("transfer_size", _i64), _I64),
    ("throughput", _g("transfer_rate", _f64), _F64),
    ("queue_type", _g("queue_type", _s), _STR),
    ("variable", _g("variable", _s), _STR),
    ("queue_name", _g("subgroup", _s), _STR),
    ("queue_idx", _g("dma_queue", _i64), _I64),
    ("crc", _g("crc", _i64), _I64),
    (
        "is_cc_dma",
        lambda r: None if r.get("is_cc_dma") is None else str(r.get("is_cc_dma")).lower() == "yes",
        pa.bool_(),
    ),
]

_DMA_AGGREGATED = [
    ("start_ts", _g("timestamp", _i64), _I64),
    ("end_ts", _end, _I64),
    ("duration_ns", _g("duration", _i64), _I64),
    ("id", _g("id", _i64), _I64),
    ("pcore_idx", _g("pcore_idx", _i64), _I64),
    ("block_id", _g("block_id", _i64), _I64),
    ("queue_idx", _g("dma_queue", _i64), _I64),
    ("queue_name", _g("subgroup", _s), _STR),
    ("queue_type", _g("queue_type", _s), _STR),
    ("op", _g("op", _s), _STR),
    ("variable", _g("variable", _s), _STR),
    ("read_bytes", _g("read_size", _i64), _I64),
    ("write_bytes", _g("write_size", _i64), _I64),
    ("transfer_bytes", _g("transfer_size", _i64), _I64),
    ("throughput", _g("transfer_rate", _f64), _F64),
    ("source", _g("source", _s), _STR),
    ("dest", _g("dest", _s), _STR),
    ("semaphore_id", _g("semaphore_id", _s), _STR),
    ("trigger", _g("trigger", _i64), _I64),
    ("engine_idx", _g("dma_engine", _i64), _I64),
]

_SEMAPHORE = [
    ("timestamp", _g("timestamp", _i64), _I64),
    ("id", _g("id", _s), _STR),
    ("value", _g("value", _i64), _I64),
    ("pcore_idx", _g("pcore_idx", _i64), _I64),
]
_ACTIVE = [
    ("start_ts", _g("start_ts", _i64), _I64),
    ("end_ts", _g("end_ts", _i64), _I64),
    ("engine", lambda r: engine_name(r.get("engine")), _STR),
    ("pcore_idx", _g("pcore_idx", _i64), _I64),
    ("duration_ns", _g("duration_ns", _i64), _I64),
]
_THROTTLE = [
    ("duration", _g("duration", _i64), _I64),
    ("k", _g("k", _i64), _I64),
    ("n", _g("n", _i64), _I64),
    ("timestamp", _g("timestamp", _i64), _I64),
    ("type", _g("type", _s), _STR),
    ("pcore_idx", _g("pcore_idx", _i64), _I64),
]
_PENDING = [("timestamp", _g("timestamp", _i64), _I64), ("value", _g("value", _i64), _I64)]
_DMA_USAGE = [
    ("timestamp", _g("timestamp", _i64), _I64),
    ("current_throughput", _g("transfer_rate", _f64), _F64),
    ("total_transfer_bytes", _g("total_transfer_bytes", _i64), _I64),
]
_HBM_USAGE = [
    ("timestamp", _g("timestamp", _i64), _I64),
    ("current_throughput", _g("hbm_transfer_rate", _f64), _F64),
    ("total_transfer_bytes", _g("hbm_total_transfer_bytes", _i64), _I64),
]
_LAYER = [
    ("name", _g("name", _s), _STR),
    ("start_ts", _g("start", _i64), _I64),
    ("end_ts", _g("end", _i64), _I64),
    ("duration_ns", _g("duration", _i64), _I64),
    ("tensor_engine_flop_count", _g("tensor_engine_flop_count", _i64), _I64),
    ("tensor_engine_model_flop_count", _g("tensor_engine_model_flop_count", _i64), _I64),
    ("tensor_engine_mfu", _g("tensor_engine_mfu", _f64), _F64),
]
_WARNING = [("message", _g("message", _s), _STR), ("category", _g("category", _s), _STR)]


def _flows(instructions: list[dict]) -> pa.Table:
    """``Flow`` rows from legacy ``predecessors``: edge predecessor (``in``) → instruction (``out``).

    Docs (Flow): ``in_id`` = input flow, ``out_id`` = output flow, ``gap_time`` = end of the input
    event → start of the output event (computed here from the instruction times when both ends are
    instructions of this profile; null otherwise).
    """
    ends = {}
    for r in instructions:
        i = _i64(r.get("id"))
        if i is not None:
            ends[i] = _end(r)
    in_id, out_id, dep, gap = [], [], [], []
    for r in instructions:
        preds = r.get("predecessors")
        if not preds:
            continue
        me, start = _i64(r.get("id")), _i64(r.get("timestamp"))
        for p in preds:
            pid = _i64(p.get("id") if isinstance(p, dict) else p)
            if pid is None or me is None:
                continue
            in_id.append(pid)
            out_id.append(me)
            dep.append(p.get("type") if isinstance(p, dict) else None)
            e = ends.get(pid)
            gap.append(None if e is None or start is None else start - e)
    n = len(in_id)
    return pa.table(
        {
            "in_id": pa.array(in_id, _I64),
            "out_id": pa.array(out_id, _I64),
            "in_table": pa.array(["instruction"] * n, _STR),
            "out_table": pa.array(["instruction"] * n, _STR),
            "dependency_type": pa.array(dep, _STR),
            "gap_time": pa.array(gap, _I64),
        }
    )


def legacy_to_tables(doc: dict) -> dict[str, pa.Table]:
    """The Parquet-named tables of one legacy JSON document (see the module crosswalk)."""

    def rows(key):
        v = doc.get(key)
        return [r for r in v if isinstance(r, dict)] if isinstance(v, list) else []

    dma = rows("dma")
    packets = [r for r in dma if str(r.get("aggregated", "no")).lower() != "yes"]
    aggregated = [r for r in dma if str(r.get("aggregated", "no")).lower() == "yes"]
    ins = rows("instruction")
    out = {
        "Instruction": _table(ins, _INSTRUCTION),
        "Flow": _flows(ins),
        "DmaPacket": _table(packets, _DMA_PACKET),
        "DmaPacketAggregated": _table(aggregated, _DMA_AGGREGATED),
        "SemaphoreUpdate": _table(rows("semaphore_update"), _SEMAPHORE),
        "ActiveTime": _table(rows("active_time"), _ACTIVE),
        "Throttle": _table(rows("ham"), _THROTTLE),
        "PendingDma": _table(rows("pending_dma"), _PENDING),
        "DmaUsage": _table(rows("dma_throughput"), _DMA_USAGE),
        "HbmUsage": _table(rows("dma_throughput"), _HBM_USAGE),
        "LayerSummary": _table(rows("layer_summary"), _LAYER),
        "Warning": _table(rows("warnings"), _WARNING),
    }
    return {k: v for k, v in out.items() if v.num_rows}


def _first(doc: dict, key: str) -> dict:
    v = doc.get(key)
    if isinstance(v, list) and v and isinstance(v[0], dict):
        return v[0]
    return v if isinstance(v, dict) else {}


def metadata_from_legacy(doc: dict) -> dict:
    """``Metadata`` (Parquet names) from the legacy ``metadata``, ``profile_info``, ``model_info``,
    ``neff_header`` and ``summary`` objects.

    Legacy → Parquet: ``pe_num_rows``/``pe_num_cols``/``pe_clock_freq`` → ``tensor_engine_num_rows``/
    ``_num_cols``/``_clock_freq`` (GHz); ``pe_clock_others`` → ``neuroncore_clock_freq`` (GHz, the
    base clock: ``neuroncore_cycle_count`` = ``total_time`` × 1.4e9 on the corpus).
    """
    md, info, model, neff, summ = (
        _first(doc, k) for k in ("metadata", "profile_info", "model_info", "neff_header", "summary")
    )
    out = dict(md)
    ren = {
        "pe_num_rows": "tensor_engine_num_rows",
        "pe_num_cols": "tensor_engine_num_cols",
        "pe_clock_freq": "tensor_engine_clock_freq",
        "pe_clock_others": "neuroncore_clock_freq",
    }
    for old, new in ren.items():
        if old in md and new not in out:
            out[new] = md[old]
    out["profiler_version"] = info.get("profiler_version") or summ.get("profiler_version")
    out["instance_type"] = summ.get("instance_type")
    for k in ("runtime_version", "compiler_version", "driver_version", "collectives_version"):
        if summ.get(k) is not None:
            out[k] = summ[k]
    out["neff_name"] = info.get("neff_name") or neff.get("network_name")
    out["ntff_name"] = info.get("ntff_filename")
    out["neuroncore_idx"] = _i64(model.get("nc_idx", summ.get("nc_idx")))
    out["neuron_device_idx"] = _i64(model.get("nd_idx", summ.get("nd_idx")))
    out["nth_exec"] = nth_exec_from_name(info.get("ntff_filename"))
    lnc = _i64(neff.get("number_of_neuroncores_per_lnc"))
    if lnc and not out.get("num_physical_cores"):
        out["num_physical_cores"] = lnc
    return out


def is_legacy_profile(doc) -> bool:
    """True for a legacy ``view --output-format json`` document (an object with ≥ 2 :data:`LEGACY_KEYS`)."""
    return isinstance(doc, dict) and sum(k in doc for k in LEGACY_KEYS) >= 2 and "traceEvents" not in doc


def is_summary_json(doc) -> bool:
    """True for summary-json: an object of objects each holding ``total_time`` (or a flat Summary)."""
    if not isinstance(doc, dict) or not doc or "traceEvents" in doc or is_legacy_profile(doc):
        return False
    if "total_time" in doc and not isinstance(doc["total_time"], dict):
        return True
    return all(isinstance(v, dict) for v in doc.values()) and any("total_time" in v for v in doc.values())


def _decode(data: bytes):
    try:
        return msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise TraceError(f"not valid JSON: {exc}") from None


#: Newest format versions this reader knows (``metadata[0]``): the NTFF the profile was made from
#: (the corpus sample is NTFF 5, Explorer exports carry 6) and the legacy JSON's ``data_version``
#: (8 on every known file). A newer one is quarantined (:class:`UnsupportedFormatVersion`,
#: ``bug_cases.md`` B26) rather than read with field meanings that may have changed.
KNOWN_MAX_VERSIONS = {"ntff_version": 6, "data_version": 8}


def check_format_version(doc: dict) -> None:
    """Check the declared format versions of a legacy profile first (before reading any table).

    Raises:
        UnsupportedFormatVersion: a version in ``metadata`` is newer than :data:`KNOWN_MAX_VERSIONS`
            (reason: ``unsupported Neuron profile format: ntff_version 9 (this reader knows up to 6)``).
    """
    md = _first(doc, "metadata")
    bad = []
    for key, known in KNOWN_MAX_VERSIONS.items():
        v = _i64(md.get(key))
        if v is not None and v > known:
            bad.append(f"{key} {v} (this reader knows up to {known})")
    if bad:
        raise UnsupportedFormatVersion("unsupported Neuron profile format: " + ", ".join(bad))


def parse_neuron_json(data: bytes, profile_id: str) -> NeuronProfile:
    """Parse one legacy full-profile JSON (decoded bytes) into a :class:`NeuronProfile`.

    Raises:
        UnsupportedFormatVersion: the profile declares a newer format version (checked first).
        TraceError: invalid JSON, or a document that is not a legacy Neuron profile.
    """
    doc = _decode(data)
    if not is_legacy_profile(doc):
        raise TraceError("not a neuron-profile JSON: no instruction/metadata/profile_info lists")
    check_format_version(doc)
    summary = _first(doc, "summary")
    prof = NeuronProfile(
        profile_id=profile_id,
        source_format="neuron-json",
        tables=legacy_to_tables(doc),
        summary=dict(summary),
        metadata=metadata_from_legacy(doc),
    )
    if not summary:
        prof.flags.append("no_summary")
    if not _first(doc, "metadata"):
        prof.flags.append("no_metadata")
    if "Warning" in prof.tables:
        prof.flags.append("profiler_warnings")
    return prof


def parse_summary_json(data: bytes, uri: str = "") -> list[NeuronProfile]:
    """Parse ``summary-json`` output into one summary-only :class:`NeuronProfile` per profile key.

    Log lines before the JSON are skipped (some tool versions print them, §2.2). A flat Summary
    object (no key level) becomes one profile named after the file.

    Raises:
        TraceError: no JSON object, or not a summary.
    """
    text = bytes(data)
    start = text.find(b"{")
    if start < 0:
        raise TraceError("not a summary-json: no JSON object")
    doc = _decode(text[start:])
    if not is_summary_json(doc):
        raise TraceError("not a summary-json: no object with total_time")
    stem = posixpath.basename(uri).split(".")[0] or "summary"
    items = [(stem, doc)] if "total_time" in doc and not isinstance(doc["total_time"], dict) else list(doc.items())
    out = []
    for key, summ in items:
        if not isinstance(summ, dict):
            continue
        md = {
            "profiler_version": summ.get("profiler_version"),
            "instance_type": summ.get("instance_type"),
            "neuroncore_idx": _i64(summ.get("nc_idx")),
            "neuron_device_idx": _i64(summ.get("nd_idx")),
        }
        for k in ("runtime_version", "compiler_version", "driver_version", "collectives_version"):
            if summ.get(k) is not None:
                md[k] = summ[k]
        out.append(
            NeuronProfile(
                profile_id=str(key),
                source_format="neuron-summary-json",
                summary=dict(summ),
                metadata=md,
                flags=["summary_only"],
            )
        )
    return out
