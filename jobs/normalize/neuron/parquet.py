"""Read a Neuron Explorer Parquet profile directory into :class:`NeuronProfile`.

Layout (``reference/neuron_profiles.md`` §2.5): one folder per processed profile holding one
``<Table>.parquet`` per table, large tables split as ``<Table>_0.parquet``, ``<Table>_1.parquet``…;
a table is written only when the activity exists. The folder is self-describing (``SchemaFields``)
and versioned by ``Metadata.profile_schema_version`` (MAJOR = renames/removals, MINOR = additions).

Versions: schema **7.4.0** (SDK 2.31, Appendix A of the reference) is read by name. Any other
version is read **by field presence**: each field we use is looked up under its 7.4.0 name, then
under the aliases in :data:`FIELD_ALIASES` (legacy-JSON spellings, which later schemas are most likely
to converge on); ``end_ts``/``duration_ns`` are rebuilt from each other; the profile gets the flag
``schema_<version>_by_field_presence`` (``schema_unknown_by_field_presence`` without Metadata). A
table whose start time cannot be found is an error naming the file and field.

Float columns of ``Summary`` and ``Metadata`` are ``float`` (float32) in the schema; they are widened
through their shortest round-trip decimal (``2.8`` GHz stays 2.8, not 2.7999999523) so that the
hardware constants and the recomputed MFU/MBU match the profiler's own values.
"""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from jobs.landing.formats import table_of_file
from jobs.normalize.errors import TraceError
from jobs.normalize.neuron.profile import NeuronProfile, engine_name, nth_exec_from_name

__all__ = ["parse_neuron_parquet", "TABLES_READ", "FIELD_ALIASES", "KNOWN_SCHEMA_MAJOR"]

#: Tables read (the others, e.g. hierarchy and SBUF tables, are not needed for events or metrics).
TABLES_READ = (
    "Metadata",
    "Summary",
    "ExecutionInfo",
    "Instruction",
    "Flow",
    "DmaPacket",
    "DmaPacketAggregated",
    "SemaphoreUpdate",
    "ActiveTime",
    "Throttle",
    "ThrottleSummary",
    "CcOp",
    "CcInstruction",
    "PendingDma",
    "DmaUsage",
    "HbmUsage",
    "Warning",
    "SystemProfileEvents",
    "CpuUsage",
    "HostMemUsage",
    "SystemProfileMetadata",
    "DeviceProfileList",
    "NeffHeader",
)
KNOWN_SCHEMA_MAJOR = 7
#: 7.4.0 field → other spellings accepted by field presence (table → {field: aliases}).
FIELD_ALIASES = {
    "Instruction": {
        "start_ts": ("timestamp",),
        "duration_ns": ("duration",),
        "engine": ("subgroup",),
        "timeline_track": ("label",),
        "evt_wait_time_ns": ("evt_wait_time",),
        "tensor_instruction_type": ("instruction_type",),
        "tensor_elements": ("elements",),
        "scalar_activation_fn": ("activation_fn",),
    },
    "DmaPacket": {
        "start_ts": ("timestamp",),
        "duration_ns": ("duration",),
        "transfer_bytes": ("transfer_size",),
        "read_bytes": ("read_size",),
        "write_bytes": ("write_size",),
        "throughput": ("transfer_rate",),
        "engine_idx": ("dma_engine",),
        "queue_idx": ("dma_queue",),
        "queue_name": ("subgroup",),
    },
    "DmaPacketAggregated": {
        "start_ts": ("timestamp",),
        "duration_ns": ("duration",),
        "transfer_bytes": ("transfer_size",),
        "queue_name": ("subgroup",),
    },
    "ActiveTime": {"start_ts": ("timestamp",)},
    "CcOp": {"start_ts": ("timestamp",), "duration_ns": ("duration",)},
    "CcInstruction": {"start_ts": ("timestamp",), "duration_ns": ("duration",)},
    "SystemProfileEvents": {"start_ts": ("timestamp",), "duration_ns": ("duration",)},
    "Throttle": {"timestamp": ("start_ts",), "duration": ("duration_ns",)},
}
_START = {
    "Throttle": "timestamp",
    "SemaphoreUpdate": "timestamp",
    "PendingDma": "timestamp",
    "DmaUsage": "timestamp",
    "HbmUsage": "timestamp",
    "CpuUsage": "timestamp",
    "HostMemUsage": "timestamp",
}
_TIMELINE = (
    "Instruction",
    "DmaPacket",
    "DmaPacketAggregated",
    "ActiveTime",
    "CcOp",
    "CcInstruction",
    "SystemProfileEvents",
)


def _widen_float32(t: pa.Table) -> pa.Table:
    """float32 columns → float64 through their shortest round-trip decimal (small tables only)."""
    for i, f in enumerate(t.schema):
        if pa.types.is_float32(f.type):
            vals = t.column(i).to_numpy(zero_copy_only=False)
            ok = ~np.isnan(vals)
            wide = np.full(len(vals), np.nan)
            wide[ok] = np.array([float(str(np.float32(v))) for v in vals[ok]])
            t = t.set_column(i, pa.field(f.name, pa.float64()), pa.array(wide, pa.float64(), mask=~ok))
    return t


def _read_tables(files: dict[str, bytes], uri: str) -> dict[str, pa.Table]:
    parts: dict[str, list[tuple[int, pa.Table]]] = {}
    for name, data in files.items():
        t = table_of_file(name)
        if t is None or t[0] not in TABLES_READ:
            continue
        try:
            tbl = pq.read_table(io.BytesIO(data))
        except Exception as exc:
            raise TraceError(f"{name}: not a readable Parquet file: {type(exc).__name__}: {exc}") from None
        parts.setdefault(t[0], []).append((t[1], tbl))
    out = {}
    for table, chunks in parts.items():
        chunks.sort(key=lambda c: c[0])
        tabs = [c[1] for c in chunks]
        try:
            out[table] = pa.concat_tables(tabs, promote_options="permissive") if len(tabs) > 1 else tabs[0]
        except pa.ArrowInvalid as exc:
            raise TraceError(f"{table}_*.parquet: split files have incompatible schemas: {exc}") from None
    return out


def _apply_aliases(name: str, t: pa.Table) -> tuple[pa.Table, bool]:
    """Rename alias fields to 7.4.0 names and rebuild ``end_ts``/``duration_ns``; returns (table, used_alias)."""
    used = False
    for field, aliases in FIELD_ALIASES.get(name, {}).items():
        if field in t.column_names:
            continue
        for a in aliases:
            if a in t.column_names:
                t = t.rename_columns([field if c == a else c for c in t.column_names])
                used = True
                break
    if name in _TIMELINE:
        cols = t.column_names
        if "start_ts" not in cols:
            raise TraceError(f"{name}.parquet: no start time field (start_ts or timestamp)")
        if "end_ts" not in cols and "duration_ns" in cols:
            t = t.append_column("end_ts", pc.add(t.column("start_ts"), t.column("duration_ns")))
        elif "duration_ns" not in cols and "end_ts" in cols:
            t = t.append_column("duration_ns", pc.subtract(t.column("end_ts"), t.column("start_ts")))
        elif "end_ts" not in cols:
            raise TraceError(f"{name}.parquet: neither end_ts nor duration_ns")
    elif name in _START and _START[name] not in t.column_names:
        raise TraceError(f"{name}.parquet: no {_START[name]} field")
    return t, used


def _canonical_engines(t: pa.Table, column: str = "engine") -> pa.Table:
    if column not in t.column_names:
        return t
    i = t.column_names.index(column)
    vals = [engine_name(v) for v in t.column(i).to_pylist()]
    return t.set_column(i, pa.field(column, pa.string()), pa.array(vals, pa.string()))


def _first_row(t: pa.Table | None) -> dict:
    if t is None or not t.num_rows:
        return {}
    return {k: v[0] for k, v in _widen_float32(t.slice(0, 1)).to_pydict().items()}


def parse_neuron_parquet(files: dict[str, bytes], profile_id: str, uri: str = "") -> NeuronProfile:
    """Parse one Explorer Parquet profile folder.

    Args:
        files: ``{file name: bytes}`` of the folder's ``*.parquet`` files (other names are ignored).
        profile_id: the profile's name (its folder).
        uri: the folder URI (for messages).

    Returns:
        :class:`NeuronProfile` with ``source_format`` ``neuron-parquet``; ``time_base`` is
        ``epoch-ns`` when the folder holds only system-profile tables.

    Raises:
        TraceError: no table file, an unreadable file, split files that do not concatenate, or a
            timeline table without a start time.
    """
    tables = _read_tables(files, uri)
    if not tables:
        raise TraceError("no Neuron Explorer table file (<Table>.parquet) in the folder")
    flags: list[str] = []
    md_row = _first_row(tables.get("Metadata"))
    version = md_row.get("profile_schema_version")
    major = None
    if isinstance(version, str) and version.split(".")[0].isdigit():
        major = int(version.split(".")[0])
    strict = major == KNOWN_SCHEMA_MAJOR
    if not strict and any(n in tables for n in ("Metadata", "Instruction", "Summary")):
        flags.append(f"schema_{version}_by_field_presence" if version else "schema_unknown_by_field_presence")
    for name in list(tables):
        if name in ("Metadata", "Summary"):
            continue
        t, used = _apply_aliases(name, tables[name])
        if name in ("Instruction", "ActiveTime"):
            t = _canonical_engines(t)
        tables[name] = t
        if used and "renamed_fields_read_by_alias" not in flags:
            flags.append("renamed_fields_read_by_alias")
    summary = _first_row(tables.pop("Summary", None))
    md = dict(md_row)
    tables.pop("Metadata", None)
    ex = tables.get("ExecutionInfo")
    if ex is not None and ex.num_rows:
        md["neff_name"] = ex.column("neff_name").to_pylist()[0] if "neff_name" in ex.column_names else None
        if ex.num_rows > 1:
            flags.append("multiple_executions")
    md["profiler_version"] = md.get("explorer_version")
    md["nth_exec"] = nth_exec_from_name(md.get("profile_name"))
    device = any(n in tables for n in ("Instruction", "DmaPacket", "ActiveTime", "CcOp")) or bool(summary)
    system = "SystemProfileEvents" in tables
    if not md_row and device:
        flags.append("no_metadata")
    if "Warning" in tables:
        flags.append("profiler_warnings")
    if device and system:
        flags.append("device_and_system_clocks_not_aligned")
    prof = NeuronProfile(
        profile_id=profile_id,
        source_format="neuron-parquet",
        tables=tables,
        summary=summary,
        metadata=md,
        time_base="epoch-ns" if system and not device else "device-relative-ns",
        flags=flags,
    )
    return prof
