"""Normalize the non-Kineto files of a landing zone: Neuron profiles, raw Neuron blobs, xplanes.

Called by :func:`jobs.normalize.job.normalize_file` once the file's kind is known
(:mod:`jobs.landing.formats`); below it (imports nothing of the job), sharing the capture identity of
:mod:`jobs.normalize.identity`. Pure: bytes in, a ``captures`` row and ``events`` rows out.

``captures`` rows (``source`` ``neuron`` or ``xla``):

* Neuron device/system profiles → ``ingested``; ``format`` ``neuron-json``, ``neuron-summary-json``,
  ``neuron-system-json`` or ``neuron-parquet-<schema version>``; ``time_base``
  ``device-relative-ns`` (device ns from profile start), ``epoch-ns`` (system profiles) or ``mixed``;
  ``device_name`` = the instance type; the ``neuron_summary`` rows of the file travel in the private
  key ``_neuron_summary`` (identity added by the driver after job renames);
* raw proprietary files (``.ntff``, ``.neff``, ``ntrace.pb``…, ``.pftrace``) and xplanes that cannot
  be converted here → ``cataloged`` with the reason ``needs neuron-explorer conversion`` /
  ``needs xprof conversion`` (plus the NEFF/NTFF pairing), never dropped; when a converted form of
  the same capture is ingested (``CaptureFile.converted``) the blob is still a ``cataloged`` row
  (the ``captures.status`` contract has two values) whose reason names the converted form, with
  the flag ``converted_form_ingested`` so that counts of real problems can leave it out.
"""

from __future__ import annotations

import posixpath
import traceback
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from jobs.landing.formats import head_text, raw_format, sniff_json
from jobs.normalize.container import DEFAULT_MAX_UNCOMPRESSED_BYTES, decode_container
from jobs.normalize.errors import TraceError
from jobs.normalize.identity import date_of, resolve_rank, with_identity
from jobs.normalize.neuron.events import device_blocks, events_from_blocks
from jobs.normalize.neuron.json_view import parse_neuron_json, parse_summary_json
from jobs.normalize.neuron.parquet import parse_neuron_parquet
from jobs.normalize.neuron.summary import summary_row
from jobs.normalize.neuron.system import parse_system_json, system_blocks
from jobs.normalize.profiler_warnings import merge_warnings, neuron_warnings, warnings_json
from jobs.normalize.xla.xplane import is_xla_trace_path

__all__ = ["BlobDigest", "normalize_neuron", "catalog_blob", "kind_of", "NEURON_SUMMARY_KEY", "source_of"]

#: Private key of a captures row dict that carries its ``neuron_summary`` rows to the driver.
NEURON_SUMMARY_KEY = "_neuron_summary"


@dataclass(frozen=True)
class BlobDigest:
    """Size and sha256 of a raw blob computed while streaming it (the bytes are not kept)."""

    size: int
    sha256: str


def source_of(kind: str) -> str:
    """``captures.source`` / ``events.source`` of a routing kind."""
    if kind in ("xla_trace", "xplane"):
        return "xla"
    if kind.startswith("neuron"):
        return "neuron"
    return "kineto"


def kind_of(task: dict, data) -> str:
    """Routing kind of a task: its discovery kind, or for ``auto`` the sniffed content kind."""
    kind = task.get("kind") or "auto"
    if kind != "auto":
        return kind
    if not isinstance(data, (bytes, bytearray, memoryview)):
        return "kineto"
    sniffed = sniff_json(head_text(bytes(data[: 8 << 20])), task.get("uri", ""))
    if sniffed == "kineto" and is_xla_trace_path(task.get("uri", "")):
        return "xla_trace"
    return sniffed


def catalog_blob(task: dict, row: dict, fmt: str, needs: str) -> dict:
    """A ``cataloged`` ``captures`` row for a raw blob: the reason says it needs conversion, or names
    the converted form that is ingested instead (flag ``converted_form_ingested``)."""
    uri = task["uri"]
    note = f"; {task['note']}" if task.get("note") else ""
    flags = set(row.get("flags") or []) | set(task.get("flags") or [])
    if task.get("converted"):
        flags.add("converted_form_ingested")
        reason = (
            f"{uri}: raw {fmt} kept as a blob, not parsed: its converted form {task['converted']} is ingested{note}"
        )
    else:
        reason = f"{uri}: {needs} ({fmt}{note})"
    row.update(status="cataloged", reason=reason, format=fmt, n_events=0, flags=sorted(flags), container=None)
    return row


def _decode(data: bytes, limit: int) -> bytes:
    doc, _container = decode_container(bytes(data), limit)
    return doc


def _profiles(kind: str, task: dict, data) -> list:
    uri = task["uri"]
    stem = posixpath.basename(uri.rstrip("/")).split(".")[0] or "profile"
    if kind == "neuron_parquet":
        if not isinstance(data, dict):
            raise TraceError("Parquet profile folder read without its member files")
        name = posixpath.basename(uri.rstrip("/"))
        if name in ("parquet", "json"):  # capture-hook layout neuron/<folder>/parquet: name it after <folder>
            name = posixpath.basename(posixpath.dirname(uri.rstrip("/"))) or name
        return [parse_neuron_parquet(data, name, uri)]
    doc = _decode(data, DEFAULT_MAX_UNCOMPRESSED_BYTES)
    if kind == "neuron_json":
        return [parse_neuron_json(doc, stem)]
    if kind == "neuron_summary_json":
        return parse_summary_json(doc, uri)
    if kind == "neuron_system_json":
        return [parse_system_json(doc, stem)]
    raise TraceError(f"unknown Neuron file kind {kind!r}")


def normalize_neuron(task: dict, kind: str, data, row: dict) -> tuple[dict, pa.Table | None]:
    """Normalize one Neuron profile file or Parquet folder into ``row`` and events.

    Args:
        task: the capture task (dict of :class:`jobs.landing.discover.CaptureFile`).
        kind: ``neuron_json``, ``neuron_summary_json``, ``neuron_system_json`` or ``neuron_parquet``.
        data: file bytes, or ``{member name: bytes}`` for a Parquet folder.
        row: the ``captures`` row prepared by the caller (identity, sha256, size).

    Returns:
        ``(row, events)``; events ``None`` when quarantined or when the file has no timeline.

    Raises:
        TraceError: the file cannot be ingested (the caller quarantines it).
    """
    profiles = _profiles(kind, task, data)
    blocks, summaries, flags, time_bases = [], [], set(), set()
    warned: list[dict] = []
    nc = None
    for p in profiles:
        flags |= set(p.flags)
        if "Warning" in p.tables:
            warned += neuron_warnings(p.tables["Warning"].to_pylist())
        dev = device_blocks(p)
        sysb = system_blocks(p)
        if dev:
            time_bases.add("device-relative-ns")
        if sysb:
            time_bases.add("epoch-ns")
        blocks += dev + sysb
        if p.has_device_data:
            summaries.append(summary_row(p))
            if nc is None and p.metadata.get("neuroncore_idx") is not None:
                nc = int(p.metadata["neuroncore_idx"])
    if not blocks and not summaries:
        raise TraceError("Neuron profile without device or system data")
    events = events_from_blocks(blocks, f"NeuronCore {nc or 0}", nc or 0)
    rank, rank_source, rank_flags = resolve_rank(None, task)
    flags |= set(rank_flags) | set(task.get("flags") or [])
    fmt = {
        "neuron_json": "neuron-json",
        "neuron_summary_json": "neuron-summary-json",
        "neuron_system_json": "neuron-system-json",
    }.get(kind)
    if kind == "neuron_parquet":
        fmt = f"neuron-parquet-{profiles[0].metadata.get('profile_schema_version') or 'unknown'}"
    start = end = None
    if events.num_rows:
        ts = events.column("ts_ns")
        ends = pc.add(ts, pc.fill_null(events.column("dur_ns"), 0))
        start, end = pc.min(ts).as_py(), pc.max(ends).as_py()
    instance = next((s.get("instance_type") for s in summaries if s.get("instance_type")), None)
    row.update(
        status="ingested",
        source="neuron",
        format=fmt,
        container=_container(data),
        time_base="mixed" if len(time_bases) > 1 else next(iter(time_bases), None),
        base_time_ns=0,
        trace_start_ns=start,
        trace_end_ns=end,
        n_events=events.num_rows,
        n_profiler_steps=0,
        device_name=instance or row.get("device_name"),
        rank=rank,
        rank_source=rank_source,
        flags=sorted(flags),
        profiler_warnings_json=warnings_json(merge_warnings(warned)),
        date=task.get("date") or (date_of(start) if "epoch-ns" in time_bases else None) or "unknown",
    )
    row[NEURON_SUMMARY_KEY] = summaries
    return row, with_identity(events, row) if events.num_rows else None


def _container(data) -> str | None:
    """``json``/``gzip`` from the magic bytes (the ``captures.container`` vocabulary); None for a Parquet folder."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        return "gzip" if bytes(data[:2]) == b"\x1f\x8b" else "json"
    return None


def normalize_other(task: dict, data, row: dict, kind: str) -> tuple[dict, pa.Table | None]:
    """Neuron profiles, raw blobs and unconvertible xplanes (see the module docstring); never raises."""
    row["source"] = source_of(kind)
    rank = task.get("rank")
    row.update(
        rank=int(rank) if rank is not None else 0,
        rank_source=task.get("rank_source") or "default",
        date=task.get("date") or "unknown",
        n_events=0,
    )
    if kind == "neuron_raw":
        return catalog_blob(task, row, raw_format(task["uri"]), "needs neuron-explorer conversion"), None
    if kind == "xplane":
        return catalog_blob(
            task,
            row,
            "xplane",
            "needs xprof conversion (install the optional xprof package, or ship the profiler's <host>.trace.json.gz)",
        ), None
    if kind == "neuron_summary_json" and task.get("converted"):
        row.update(
            status="cataloged",
            format="neuron-summary-json",
            flags=["converted_form_ingested"],
            reason=f"{task['uri']}: summary of the device profile ingested from {task['converted']} "
            f"(not ingested twice)",
        )
        return row, None
    try:
        return normalize_neuron(task, kind, data, row)
    except TraceError as exc:
        reason = str(exc)
        flag = getattr(exc, "flag", None)  # machine-readable kind of the problem, e.g. unsupported_format_version
        if flag:
            row["flags"] = sorted(set(row.get("flags") or []) | {flag})
    except Exception as exc:  # a parser bug must not stop the batch
        reason = f"internal error while parsing: {type(exc).__name__}: {exc} [{traceback.format_exc(limit=-1).strip()}]"
    row.update(status="quarantined", reason=f"{task['uri']}: {reason}", n_events=0)
    row.pop(NEURON_SUMMARY_KEY, None)
    return row, None
