"""The profiler's own warnings about the data it wrote, each tied to the metrics and findings it makes uncertain.

What is read (``captures.profiler_warnings_json``, one list per capture):

* **Kineto**: the logger output libkineto writes into the trace as the top-level arrays ``WARNING`` and ``ERROR``
  (``libkineto/src/output_json.cpp`` ``finalizeTrace``; on-demand and dyno traces carry them, kineto #1336), and of
  ``INFO`` only the ``Record counts:`` line, whose non-zero counters report records Kineto dropped or could not link
  (``CuptiActivityProfiler.cpp``; pytorch #192021: "the only visible trace of the drop is the Record counts:
  Out-of-range = N INFO log line"); a positive ``dropped_events`` counter (``bug_cases.md`` B22).
* **Flags**: a capture flagged ``partial_trace`` (cut short, ``truncated_tail``; ``bug_cases.md`` B22) counts as a
  warning of kind ``partial_trace`` (:func:`flag_warnings`).
* **Neuron**: the profile's ``warnings`` (``message``, ``category``; the legacy JSON's list and the Parquet
  ``Warning`` table), e.g. "Missing additional dynamic DMA metadata, reported DMA values may be inaccurate".

Each warning is matched to a kind of :data:`KINDS` (first match by message), which names the columns it makes
uncertain (``table.column``) and the finding rules that read them (``findings.rule``). A warning no kind matches is
kept as ``unmapped``: listed with its message, tied to no metric. The analysis lowers the confidence of a finding
whose rule a warning of its job names, and says so in its evidence and in ``rule_coverage.uncertain``
(:mod:`jobs.analyze.findings.ranking`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "KINDS",
    "WarningKind",
    "kineto_warnings",
    "neuron_warnings",
    "warnings_json",
    "merge_warnings",
    "flag_warnings",
    "read_warnings",
    "MAX_WARNINGS",
]

#: At most this many distinct warnings are kept per capture (the rest are counted in the last one's ``count``).
MAX_WARNINGS = 20
_MAX_MESSAGE = 300

# GPU-time columns and the rules that read them: what a lost device record changes.
_GPU_TIME = (
    "steps.kernel_time_ns",
    "steps.idle_time_ns",
    "steps.idle_pct",
    "steps.compute_time_ns",
    "steps.comm_time_ns",
    "steps.exposed_comm_ns",
    "steps.n_kernels",
    "ranks.idle_pct",
    "kernels.total_ns",
)
_GPU_TIME_RULES = (
    "low_gpu_utilization",
    "host_bound_launch",
    "exposed_communication",
    "many_tiny_kernels",
    "memcpy_bound",
    "kernels_below_peak",
    "straggler_rank",
)
_LAUNCH = (
    "steps.launch_delay_p50_ns",
    "steps.launch_delay_max_ns",
    "steps.n_launch_delay_outliers",
    "steps.idle_host_wait_ns",
    "steps.idle_kernel_wait_ns",
)


@dataclass(frozen=True)
class WarningKind:
    """One kind of profiler warning.

    Attributes:
        kind: its name (``profiler_warnings_json[].kind``).
        source: ``kineto`` or ``neuron``.
        pattern: regex matched against the message (case-insensitive).
        words: what it means, in words.
        metrics: the ``table.column`` values it makes uncertain.
        rules: the finding rules that read those values.
    """

    kind: str
    source: str
    pattern: str
    words: str
    metrics: tuple[str, ...]
    rules: tuple[str, ...]


#: The kinds, matched in order (the first whose pattern matches the message).
KINDS: tuple[WarningKind, ...] = (
    WarningKind(
        "out_of_range_records",
        "kineto",
        r"out-of-range|out of range",
        "device activity records fell outside the capture window and were dropped (pytorch #192021)",
        _GPU_TIME,
        _GPU_TIME_RULES,
    ),
    WarningKind(
        "dropped_records",
        "kineto",
        r"\bdrop(?:ped|ping)?\b|dropped_events",
        "the profiler dropped activity records (a full buffer; kineto PR #1362)",
        _GPU_TIME,
        _GPU_TIME_RULES,
    ),
    WarningKind(
        "cupti_stopped_early",
        "kineto",
        r"stopped early",
        "device activity collection stopped before the capture ended: the tail has no device records",
        _GPU_TIME,
        _GPU_TIME_RULES,
    ),
    WarningKind(
        "invalid_ext_correlations",
        "kineto",
        r"invalid ext correlation",
        "runtime calls whose CPU op could not be found (invalid External id links): kernel time may be attributed "
        "to the wrong op",
        ("op_efficiency.kernel_time_ns", "op_efficiency.roofline_pct", "op_efficiency.n_kernels"),
        ("kernels_below_peak",),
    ),
    WarningKind(
        "invalid_correlations",
        "kineto",
        r"unexpected cuda event|out-of-order|out of order",
        "kernels whose launch could not be linked (out-of-order CPU/GPU records, unexpected CUDA events)",
        _LAUNCH,
        ("host_bound_launch", "blocking_sync"),
    ),
    WarningKind(
        "device_properties_unavailable",
        "kineto",
        r"device ?propert|getdevicecount|device count",
        "the profiler could not read the device's properties",
        ("ranks.device_name", "op_efficiency.peak_flops_pct", "op_efficiency.roofline_pct"),
        ("kernels_below_peak",),
    ),
    WarningKind(
        "partial_trace",
        "flag",
        r"partial_trace",
        "the trace was cut short (flag partial_trace): its device records stop before its last step ends",
        _GPU_TIME,
        _GPU_TIME_RULES,
    ),
    WarningKind(
        "dma_metadata_missing",
        "neuron",
        r"dma metadata|dma values may be inaccurate",
        "dynamic DMA metadata is missing: DMA figures may be inaccurate (neuron-profile --enable-dge-notifs)",
        (
            "neuron_summary.dma_bytes",
            "neuron_summary.dma_packet_count",
            "neuron_summary.dma_small_packet_pct",
            "neuron_summary.dma_throughput_bytes_per_s",
            "neuron_summary.dma_efficiency_pct",
        ),
        ("neuron_dma_bound", "neuron_small_dma_transfers"),
    ),
    WarningKind(
        "compiler_metrics_missing",
        "neuron",
        r"compiler metrics",
        "the NEFF lacks compiler metrics: model FLOPs and the utilization built on them are the profiler's guesses",
        ("neuron_summary.model_flops", "neuron_summary.mfu_pct", "neuron_summary.arithmetic_intensity"),
        ("neuron_dma_bound",),
    ),
)
_UNMAPPED = "unmapped"
# Kineto's "Record counts:" line: "Out-of-range = 0, Blocklisted runtime = 0, Invalid ext correlations = 0, ..."
_COUNTER = re.compile(r"([A-Za-z][A-Za-z ?\-]*?)\s*=\s*(\d+)")
# Counters that are not problems: runtime calls Kineto filters on purpose (cudaGetDevice …).
_BENIGN = ("blocklisted runtime",)


def _kind(message: str, source: str) -> WarningKind | None:
    low = message.lower()
    for k in KINDS:
        if k.source == source and re.search(k.pattern, low):
            return k
    return None


_DROPPED_N = re.compile(r"dropped\s+(\d+)|(\d+)\s+(?:\w+\s+){0,3}(?:were\s+)?dropped", re.IGNORECASE)


def _entry(message: str, source: str, level: str, count: int | None = None) -> dict:
    k = _kind(message, source)
    if count is None:  # a WARNING line's own figure: "CUPTI dropped 42 activity records" counts 42 records
        m = _DROPPED_N.search(message) if k is not None and k.kind == "dropped_records" else None
        count = int(m.group(1) or m.group(2)) if m else 1
    return {
        "kind": k.kind if k else _UNMAPPED,
        "level": level,
        "count": int(count),
        "message": message.strip()[:_MAX_MESSAGE],
        "words": k.words if k else "a warning tracelake does not map to metrics: read the message",
        "metrics": list(k.metrics) if k else [],
        "rules": list(k.rules) if k else [],
    }


def merge_warnings(entries: Iterable[dict]) -> list[dict]:
    """Distinct (kind, message) entries with their counts summed, at most :data:`MAX_WARNINGS` (several profiles of
    one capture)."""
    out: dict[tuple[str, str], dict] = {}
    for e in entries:
        key = (e["kind"], e["message"])
        if key in out:
            out[key]["count"] += e["count"]
        elif len(out) < MAX_WARNINGS:
            out[key] = e
        else:
            next(reversed(out.values()))["count"] += e["count"]
    return list(out.values())


def _lines(v) -> list[str]:
    if isinstance(v, str):
        return [v]
    if isinstance(v, list):
        return [x for x in v if isinstance(x, str)]
    return []


def kineto_warnings(header) -> list[dict]:
    """The warnings of a Kineto trace's top level (module docstring).

    Args:
        header: the decoded top-level object (``jobs.normalize.kineto.shapes.Header``; None for a bare list).

    Returns:
        Entries ``{kind, level, count, message, words, metrics, rules}``: one per ``WARNING`` / ``ERROR`` line,
        one per non-zero counter of an ``INFO`` ``Record counts:`` line (``count`` = the counter), one for a
        positive ``dropped_events``; empty when the trace has none.
    """
    if header is None:
        return []
    found: list[dict] = []
    for level in ("WARNING", "ERROR"):
        found += [_entry(line, "kineto", level.lower()) for line in _lines(getattr(header, level, None))]
    for line in _lines(getattr(header, "INFO", None)):
        at = line.find("Record counts:")
        if at < 0:
            continue
        for name, n in _COUNTER.findall(line[at + len("Record counts:") :]):
            name = name.strip()
            if int(n) > 0 and name.lower() not in _BENIGN:
                found.append(_entry(f"Record counts: {name} = {n}", "kineto", "info", int(n)))
    for key in ("dropped_events", "droppedEvents"):
        v = getattr(header, key, None)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0:
            found.append(_entry(f"{key} = {int(v)}", "kineto", "counter", int(v)))
    return merge_warnings(found)


def neuron_warnings(rows: Iterable[dict]) -> list[dict]:
    """The warnings of a Neuron profile (``message``, ``category`` rows of its ``Warning`` table).

    Returns:
        Entries as :func:`kineto_warnings`' (``level`` = the row's category, lower case; ``warning`` without one).
    """
    found = []
    for r in rows:
        msg = r.get("message")
        if isinstance(msg, str) and msg.strip():
            cat = r.get("category")
            found.append(_entry(msg, "neuron", cat.strip().lower() if isinstance(cat, str) and cat else "warning"))
    return merge_warnings(found)


def flag_warnings(flags) -> list[dict]:
    """The warnings a capture's ``flags`` stand for (``partial_trace``), as :func:`kineto_warnings`' entries."""
    return [_entry(f, "flag", "flag", 1) for f in (flags or []) if f == "partial_trace"]


def warnings_json(entries: list[dict]) -> str | None:
    """``captures.profiler_warnings_json``: the entries as a JSON list, None when there are none."""
    return json.dumps(entries, sort_keys=True) if entries else None


def read_warnings(value) -> list[dict]:
    """The entries of one ``captures.profiler_warnings_json`` value (null or malformed text: none)."""
    if not isinstance(value, str) or not value:
        return []
    try:
        out = json.loads(value)
    except ValueError:
        return []
    return [e for e in out if isinstance(e, dict)] if isinstance(out, list) else []
