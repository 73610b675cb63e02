"""The run record of one ingest interval: what normalize did, read by the later stages.

A small JSON file at ``<warehouse>/_runs/ingest/<since>_<until>.json`` (any fsspec URI), rewritten
whenever the interval is re-run, so the stages after normalize know which jobs to analyze,
validate and log without passing lists through XCom. Spark ignores ``_``-prefixed folders, and no
warehouse table is called ``_runs``.

Fields: ``since``, ``until`` (ISO, ``""`` = open), ``raw``, ``job_ids`` (every job normalized,
sorted), ``ingested_job_ids`` (jobs with at least one ingested capture), ``n_captures``,
``n_quarantined``, ``pending`` (capture folders not yet committed), ``quarantined``
(``[{capture_id, job_id, reason}]``), ``written_at`` (ISO).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import fsspec


def build_record(
    captures: list[dict], pending: list[str], raw: str, since: str, until: str, n_discovered: int | None = None
) -> dict:
    """The record of a normalize run from its ``captures`` rows (pure).

    Args:
        captures: ``captures`` table rows as dicts (``job_id``, ``capture_id``, ``status``, ``reason``).
        pending: capture folders without a manifest yet.
        raw, since, until: what was normalized (ISO strings, ``""`` for an open end).
        n_discovered: raw files handed to normalize (validated later: = ``n_captures``).
    """
    ingested = sorted({c["job_id"] for c in captures if c["status"] == "ingested"})
    quarantined = [
        {"capture_id": c["capture_id"], "job_id": c["job_id"], "reason": c.get("reason")}
        for c in captures
        if c["status"] != "ingested"
    ]
    return {
        "since": since,
        "until": until,
        "raw": raw,
        "job_ids": sorted({c["job_id"] for c in captures}),
        "ingested_job_ids": ingested,
        "n_captures": len(captures),
        "n_discovered": n_discovered,
        "n_quarantined": len(quarantined),
        "pending": list(pending),
        "quarantined": quarantined,
        "written_at": datetime.now(UTC).isoformat(),
    }


def write_record(uri: str, record: dict) -> None:
    """Write ``record`` as JSON to ``uri`` (folders created as needed)."""
    fs, path = fsspec.core.url_to_fs(uri)
    fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    with fs.open(path, "w") as f:
        json.dump(record, f, indent=1, sort_keys=True)


def read_record(uri: str) -> dict:
    """Read the record at ``uri``.

    Raises:
        FileNotFoundError: no record there (normalize has not run for this interval), naming ``uri``.
    """
    try:
        with fsspec.open(uri, "r") as f:
            return json.load(f)
    except FileNotFoundError as exc:
        raise FileNotFoundError(f"{uri}: no run record (normalize has not run for this interval)") from exc
