"""Who and when a capture is: its rank, its date, and the identity columns its events carry.

Shared by the Spark job (:mod:`jobs.normalize.job`, Kineto and XLA traces) and the per-file routing
of the other formats (:mod:`jobs.normalize.route`, Neuron profiles), so both give a capture the same
``rank``/``rank_source``, ``date`` and ``events`` identity columns.
"""

from __future__ import annotations

import posixpath
from datetime import UTC, datetime

import pyarrow as pa

from jobs.landing.formats import rank_from_filename
from schemas import EVENTS

__all__ = ["IDENTITY", "date_of", "resolve_rank", "with_identity"]

#: Identity and partition columns of every ``events`` row (and of ``neuron_summary`` rows), in EVENTS order.
IDENTITY = ("date", "job_id", "attempt", "rank", "capture_id")
# Earliest plausible epoch for a trace clock (2015-01-01): smaller values are relative clocks.
_EPOCH_MIN_NS = 1_420_070_400 * 10**9


def date_of(ns: int | None) -> str | None:
    """UTC date ``YYYY-MM-DD`` of an epoch timestamp in ns; ``None`` for a missing or relative clock
    (before 2015-01-01)."""
    if ns is None or ns < _EPOCH_MIN_NS:
        return None
    return datetime.fromtimestamp(ns / 1e9, tz=UTC).strftime("%Y-%m-%d")


def resolve_rank(trace_rank, task: dict) -> tuple[int, str, list[str]]:
    """Rank of a capture: ``distributedInfo``, else the manifest, else the file name, else 0.

    Returns:
        ``(rank, rank_source, flags)``; ``flags`` holds ``rank_assumed_0`` in the last case, and ``rank_mismatch``
        when the trace's ``distributedInfo`` names another rank than its manifest (the trace's rank is used: it is
        what the profiled process reported).
    """
    if trace_rank is not None:
        declared = task.get("rank") if task.get("manifest_uri") else None
        mismatch = declared is not None and int(declared) != int(trace_rank)
        return int(trace_rank), "distributedInfo", ["rank_mismatch"] if mismatch else []
    if task.get("rank") is not None:
        return int(task["rank"]), task.get("rank_source") or "manifest", []
    r = rank_from_filename(posixpath.basename(task["uri"]))
    if r is not None:
        return r, "filename", []
    return 0, "default", ["rank_assumed_0"]


def with_identity(events: pa.Table, capture: dict) -> pa.Table:
    """Prepend the identity/partition columns of ``capture`` to parsed events (EVENTS order)."""
    n = events.num_rows
    schema = EVENTS.arrow_schema()
    cols = {}
    for name in IDENTITY:
        cols[name] = (
            pa.array([capture[name]] * n, type=schema.field(name).type) if n else pa.array([], schema.field(name).type)
        )
    for name in EVENTS.names:
        if name not in cols:
            cols[name] = events.column(name)
    return pa.table([cols[n_] for n_ in EVENTS.names], schema=schema)
