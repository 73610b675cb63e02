"""``manifest.json``: the record that commits one capture in the landing zone.

Format: ``schemas/manifest.v1.json`` (JSON Schema draft 2020-12, ``schema_version`` ``"1"``).
This module builds the document; it does not validate against the schema at run time (that
would add ``jsonschema`` to training jobs) — the tests do.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
from collections.abc import Mapping
from typing import Any

from capture_hooks.identity import Identity

__all__ = ["SCHEMA_VERSION", "WRITER", "build_manifest", "encode_manifest", "file_entry", "utc_date", "utc_timestamp"]

SCHEMA_VERSION = "1"
WRITER = "tracelake.capture_hooks.torch_profiler"
_CHUNK = 1 << 20


def utc_timestamp(time_ns: int) -> str:
    """RFC 3339 UTC timestamp with microseconds, e.g. ``2025-05-01T12:00:00.123456Z``."""
    moment = _dt.datetime.fromtimestamp(time_ns / 1e9, tz=_dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def utc_date(time_ns: int) -> str:
    """UTC date ``YYYY-MM-DD`` of a ``time.time_ns()`` value (the landing zone ``date=`` partition)."""
    return _dt.datetime.fromtimestamp(time_ns / 1e9, tz=_dt.UTC).strftime("%Y-%m-%d")


def file_entry(local_path: str, name: str, kind: str) -> dict[str, Any]:
    """Manifest entry of one file: ``{path, size_bytes, sha256, kind}``.

    ``name`` is the path relative to the capture folder; ``size_bytes`` and ``sha256`` describe
    the bytes as stored (a ``.json.gz`` is hashed compressed). Reads the file in 1 MiB chunks.

    Raises:
        OSError: ``local_path`` unreadable.
    """
    digest = hashlib.sha256()
    size = 0
    with open(local_path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    if size != os.path.getsize(local_path):  # changed while hashing
        raise OSError(f"{local_path} changed while it was hashed")
    return {"path": name, "size_bytes": size, "sha256": digest.hexdigest(), "kind": kind}


def build_manifest(
    *,
    identity: Identity,
    job_id: str,
    attempt: int,
    capture_id: str,
    created_at_ns: int,
    step_first: int | None,
    step_last: int | None,
    profiler: Mapping[str, Any],
    tags: Mapping[str, str],
    files: list[dict[str, Any]],
) -> dict[str, Any]:
    """The manifest of one capture as a JSON-ready dict (schema ``manifest.v1.json``).

    ``step_first``/``step_last``: the first and last ``ProfilerStep#N`` number recorded in the
    capture (inclusive; ``None`` when unknown). ``profiler``: the profiler settings (schedule,
    activities, flags). ``created_at_ns``: ``time.time_ns()`` when the capture was exported.
    ``attempt`` is the effective attempt (argument / ``TRACELAKE_ATTEMPT`` / launcher restart
    count / 0), which may differ from ``identity.attempt``.
    """
    step_range = None
    if step_first is not None and step_last is not None:
        step_range = {"first": int(step_first), "last": int(step_last)}
    return {
        "schema_version": SCHEMA_VERSION,
        "writer": WRITER,
        "job_id": job_id,
        "attempt": int(attempt),
        "rank": identity.rank,
        "local_rank": identity.local_rank,
        "world_size": identity.world_size,
        "node": identity.node,
        "launcher": identity.launcher,
        "capture_id": capture_id,
        "host": identity.host,
        "pid": identity.pid,
        "accelerator": identity.accelerator,
        "device_name": identity.device_name,
        "torch_version": identity.torch_version,
        "cuda_version": identity.cuda_version,
        "driver_version": identity.driver_version,
        "step_range": step_range,
        "profiler": dict(profiler),
        "tags": dict(tags),
        "created_at": utc_timestamp(created_at_ns),
        "files": list(files),
    }


def encode_manifest(manifest: Mapping[str, Any]) -> bytes:
    """UTF-8 JSON bytes of a manifest (sorted keys, 2-space indent, trailing newline)."""
    return (json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")
