"""Which parser a landing-zone file goes to: by name for binary files, by content for JSON.

Kinds (``CaptureFile.kind``):

=====================  ===========================================================================
``auto``               a ``*.json``/``*.json.gz``/``*.gz`` file: the content decides (:func:`sniff_json`)
``kineto``             torch.profiler / Kineto Chrome trace
``xla_trace``          Chrome trace written by the XLA/JAX profiler or converted from an xplane
``neuron_json``        legacy ``neuron-profile view --output-format json`` device profile
``neuron_summary_json`` ``view --output-format summary-json``
``neuron_system_json`` ``system_profile.json`` (runtime/system trace)
``neuron_parquet``     an Explorer Parquet profile folder (the task's ``uri`` is the folder)
``xplane``             ``*.xplane.pb`` (converted with xprof when available)
``neuron_raw``         proprietary Neuron capture files (``.ntff``, ``.neff``, ``ntrace.pb``,
                       ``trace_info.pb``, ``cpu_util.pb``, ``host_mem.pb``, ``.pftrace``): cataloged (quarantined row)
=====================  ===========================================================================

Content sniffing reads only the head of the (decompressed) document: a JSON list or a
``traceEvents`` key is a Chrome trace (XLA when the path is under ``plugins/profile/`` or the head
has xprof's ``highres-ticks``); a first key among the legacy Neuron keys holding a list is a device profile (Kineto traces can
start with a ``metadata`` object); a
``trace_events`` key is a system profile; an object whose head holds ``total_time`` (possibly after
log lines) is summary-json. Anything else goes to the Kineto parser, whose error names the problem.
"""

from __future__ import annotations

import posixpath
import re
import zlib

__all__ = [
    "kind_from_name",
    "sniff_json",
    "head_text",
    "RAW_SUFFIXES",
    "NEURON_KINDS",
    "MANIFEST_KINDS",
    "raw_format",
    "pair_key",
    "SNIFF_BYTES",
    "table_of_file",
    "is_parquet_profile_dir",
    "rank_from_filename",
]

SNIFF_BYTES = 1 << 20
#: File names that are proprietary Neuron capture blobs (reference §1.2).
RAW_SUFFIXES = (".ntff", ".neff", ".pftrace")
_RAW_PB = ("ntrace.pb", "trace_info.pb", "cpu_util.pb", "host_mem.pb")
NEURON_KINDS = ("neuron_json", "neuron_summary_json", "neuron_system_json", "neuron_parquet", "neuron_raw")
#: Manifest ``files[].kind`` (capture_hooks) → routing kind; kinds not listed are not ingested.
MANIFEST_KINDS = {
    "kineto_trace": "auto",
    "neuron_json": "auto",
    "neuron_summary_json": "neuron_summary_json",
    "neuron_parquet": "neuron_parquet",
    "neuron_raw": "neuron_raw",
    "xplane": "xplane",
    "xla_xplane": "xplane",
    "xla_trace_json": "xla_trace",
}
_LEGACY_FIRST_KEYS = frozenset(
    {
        "summary",
        "metadata",
        "profile_info",
        "model_info",
        "neff_header",
        "neff_node",
        "dma_queues_info",
        "instruction",
        "dma",
        "semaphore_update",
        "active_time",
        "pending_dma",
        "dma_throughput",
        "instruction_usage",
        "ham",
        "layer_summary",
        "nc_mem_usage",
        "warnings",
        "summary_groups",
        "summary_group_order",
        "terminology",
    }
)
_FIRST_KEY = re.compile(rb'^\s*\{\s*"((?:[^"\\]|\\.)*)"\s*:\s*(.)', re.S)
_HASH = re.compile(r"(?:^|_)([0-9a-f]{8,}|\d{6,})(?=_|\.|$)")
_TABLE_FILE = re.compile(r"^([A-Za-z]+)(?:_(\d+))?\.parquet$")


_RANK_RE = re.compile(r"(?<![A-Za-z0-9])(?:rank|worker)[-_.]?(\d+)(?![0-9])", re.I)


def rank_from_filename(path: str) -> int | None:
    """Rank encoded in a trace file name (``rank-3``, ``rank3``, ``rank_3``, ``worker3``), else None.

    Only the last path component is inspected; the first match wins.
    """
    m = _RANK_RE.search(posixpath.basename(str(path).replace("\\", "/")))
    return int(m.group(1)) if m else None


def kind_from_name(path: str) -> str | None:
    """Routing kind from the file name alone; ``auto`` for JSON-like names; ``None`` when not a trace file."""
    name = posixpath.basename(str(path)).lower()
    if name == "manifest.json":
        return None
    if name.endswith(".xplane.pb"):
        return "xplane"
    if name.endswith(RAW_SUFFIXES) or name in _RAW_PB:
        return "neuron_raw"
    if name.endswith(".parquet"):
        return "neuron_parquet"
    if name.endswith((".json", ".json.gz", ".gz")):
        return "auto"
    return None


def table_of_file(name: str) -> tuple[str, int] | None:
    """``("Instruction", 1)`` for ``Instruction_1.parquet`` (a Neuron Explorer table file, large tables split
    as ``<Table>_0.parquet``, ``<Table>_1.parquet``…; ``reference/neuron_profiles.md`` §2.5); ``None`` when
    the name is not a table file."""
    m = _TABLE_FILE.match(name.rsplit("/", 1)[-1])
    if not m:
        return None
    return m.group(1), int(m.group(2) or 0)


def is_parquet_profile_dir(names) -> bool:
    """True when a folder's file names look like an Explorer export (a ``Metadata``, ``Summary``,
    ``Instruction`` or ``SystemProfileEvents`` table file)."""
    tables = {t[0] for t in (table_of_file(n) for n in names) if t}
    return bool(tables & {"Metadata", "Summary", "Instruction", "SystemProfileEvents"})


def raw_format(path: str) -> str:
    """``ntff``, ``neff``, ``pftrace``, ``neuron-system-pb`` or ``xplane`` for a raw blob name."""
    name = posixpath.basename(str(path)).lower()
    if name.endswith(".xplane.pb"):
        return "xplane"
    for suf in RAW_SUFFIXES:
        if name.endswith(suf):
            return suf[1:]
    return "neuron-system-pb"


def pair_key(path: str) -> str | None:
    """The hash that pairs a NEFF with its NTFFs (``neff_<hash>[_vnc_<n>].neff`` ↔
    ``<hash>_instid_<i>_vnc_<n>.ntff`` / ``<hash>_vnc_<n>.ntff``; Neuron docs get-started.rst), else ``None``."""
    name = posixpath.basename(str(path)).lower()
    m = _HASH.search(name)
    return m.group(1) if m else None


def head_text(data: bytes, limit: int = SNIFF_BYTES) -> bytes:
    """The first ``limit`` decoded bytes of a plain or gzip document (a truncated gzip yields what decodes)."""
    if data[:2] == b"\x1f\x8b":
        try:
            d = zlib.decompressobj(zlib.MAX_WBITS | 16)
            return d.decompress(data[: limit * 4 + 1024], limit)
        except zlib.error:
            return b""
    return data[:limit]


def sniff_json(head: bytes, path: str = "") -> str:
    """Kind of a JSON document from its decoded head (see the module docstring)."""
    s = head.lstrip()
    if s.startswith(b"["):
        return "kineto"
    m = _FIRST_KEY.match(s)
    first = m.group(1).decode(errors="replace") if m else None
    if first in _LEGACY_FIRST_KEYS and m.group(2) == b"[":  # every legacy key holds a list
        return "neuron_json"
    if first == "trace_events" or (b'"trace_events"' in s and b'"traceEvents"' not in s):
        return "neuron_system_json"
    if b'"traceEvents"' in s:
        return "xla_trace" if (b'"highres-ticks"' in s or "/plugins/profile/" in path.replace("\\", "/")) else "kineto"
    if b'"total_time"' in s and (first is not None or not s.startswith(b"{")):
        return "neuron_summary_json"
    return "kineto"
