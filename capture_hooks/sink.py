"""Landing-zone layout and the sink that writes committed captures to it through fsspec.

Layout (ARCHITECTURE.md, "Landing zone")::

    {root}/date=YYYY-MM-DD/job={job_id}/attempt={attempt}/rank={rank:05d}/{capture_id}/
        trace.json.gz
        manifest.json      <- written LAST: its presence commits the capture

``root`` is a local folder or any fsspec URI (``s3://bucket/prefix``, ``file:///…``,
``memory://…``). A capture folder without ``manifest.json`` is in flight or failed and must not be
read as committed.

:meth:`LandingZoneSink.write` (and its alias :meth:`LandingZoneSink.submit`) is synchronous: it
writes one capture and returns. ``TraceCapture`` does not call it on the training thread; it spools
each capture locally and a background thread (``capture_hooks.upload``) calls :meth:`write` with
retries. On object stores (s3, gs, abfs…) no "folder" is created: keys are written directly, and a
missing bucket is an error (never created implicitly).
"""

from __future__ import annotations

import os
import posixpath
import re
import uuid
from dataclasses import dataclass
from typing import Any

import fsspec.core

__all__ = [
    "CaptureUpload",
    "LandingZoneSink",
    "check_capture_file_name",
    "check_relative_dir",
    "landing_path",
    "make_path_safe",
    "validate_path_component",
]

_SAFE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,199}")
_UNSAFE_CHARS = re.compile(r"[^A-Za-z0-9._-]+")
_LAYOUT = re.compile(r"date=([0-9]{4}-[0-9]{2}-[0-9]{2})/job=([^/]*)/attempt=([0-9]{1,10})/rank=([0-9]{5,10})/([^/]*)")
MANIFEST_NAME = "manifest.json"
_OBJECT_STORES = frozenset({"s3", "s3a", "gs", "gcs", "abfs", "abfss", "az", "adl", "oci", "oss", "r2"})


def validate_path_component(value: Any, what: str = "path component") -> str:
    """Return ``value`` if it is safe as one folder name of the landing zone, else raise.

    Safe: a ``str`` of 1–200 characters from ``[A-Za-z0-9._-]``, not starting with ``.`` or
    ``-``, and not containing ``..``. This rejects path traversal (``..``, ``/``, ``\\``),
    hidden names, whitespace, control characters and ``=`` (which would break Hive-style
    ``key=value`` partition parsing).

    Raises:
        ValueError: naming ``what`` and the offending value.
    """
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string, got {type(value).__name__}: {value!r}")
    if not _SAFE.fullmatch(value) or ".." in value:
        raise ValueError(
            f"{what} {value!r} is not path-safe: use 1-200 characters from [A-Za-z0-9._-], "
            "not starting with '.' or '-', without '..'"
        )
    return value


def make_path_safe(value: str, fallback: str = "unknown") -> str:
    """Turn any string into a value :func:`validate_path_component` accepts.

    Runs of unsafe characters become ``_``, ``..`` becomes ``_``, leading ``.``/``-`` are
    dropped and the result is cut to 200 characters; an empty result becomes ``fallback``.
    """
    safe = _UNSAFE_CHARS.sub("_", str(value))
    while ".." in safe:
        safe = safe.replace("..", "_")
    safe = safe.lstrip(".-")[:200]
    return safe or fallback


def landing_path(*, date: str, job_id: str, attempt: int, rank: int, capture_id: str) -> str:
    """Relative folder of one capture: ``date=…/job=…/attempt=…/rank=NNNNN/{capture_id}``.

    ``date`` is ``YYYY-MM-DD``; ``attempt`` and ``rank`` non-negative ints (rank zero-padded to
    5 digits so that folder order is rank order).

    Raises:
        ValueError: any part is malformed or not path-safe (message names the part).
    """
    if not isinstance(date, str) or not re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", date):  # ASCII digits only
        raise ValueError(f"date {date!r} is not YYYY-MM-DD")
    for name, number in (("attempt", attempt), ("rank", rank)):
        if isinstance(number, bool) or not isinstance(number, int) or number < 0:
            raise ValueError(f"{name} must be a non-negative int, got {number!r}")
    validate_path_component(job_id, "job_id")
    validate_path_component(capture_id, "capture_id")
    return f"date={date}/job={job_id}/attempt={attempt}/rank={rank:05d}/{capture_id}"


def check_relative_dir(relative_dir: Any) -> str:
    """Return ``relative_dir`` if it is exactly a :func:`landing_path` (``date=…/job=…/attempt=N/rank=NNNNN/<id>``
    with path-safe job and capture ids), else raise: a spool entry's folder never lands outside the sink root.

    Raises:
        ValueError: naming the value.
    """
    m = _LAYOUT.fullmatch(relative_dir) if isinstance(relative_dir, str) else None
    if m is None:
        raise ValueError(
            f"capture folder {relative_dir!r} is not date=YYYY-MM-DD/job=…/attempt=N/rank=NNNNN/<capture_id>"
        )
    validate_path_component(m.group(2), "job_id")
    validate_path_component(m.group(5), "capture_id")
    return relative_dir


def check_capture_file_name(name: Any) -> str:
    """Return ``name`` if it is a '/'-separated path of :func:`validate_path_component` segments (stays inside
    the capture folder), else raise.

    Raises:
        ValueError: naming the value.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"capture file name {name!r} must be a non-empty string")
    for seg in name.split("/"):
        validate_path_component(seg, f"capture file name {name!r}: segment")
    return name


@dataclass(frozen=True)
class CaptureUpload:
    """One capture ready to be written.

    ``relative_dir``: the capture folder relative to the sink root (from :func:`landing_path`);
    ``files``: ``(local_path, name)`` pairs, ``name`` relative to the capture folder;
    ``manifest``: the encoded ``manifest.json`` (written last).
    """

    relative_dir: str
    files: tuple[tuple[str, str], ...]
    manifest: bytes


class LandingZoneSink:
    """Writes :class:`CaptureUpload` s under ``root`` (local folder or fsspec URI).

    The filesystem is opened lazily on the first write, so a missing protocol driver (e.g.
    ``s3fs``) or bad credentials surface as a write failure, never at construction.
    ``storage_options`` are passed to ``fsspec.core.url_to_fs``.
    """

    def __init__(self, root: str, storage_options: dict[str, Any] | None = None) -> None:
        if not isinstance(root, str) or not root.strip():
            raise ValueError(f"sink root must be a non-empty string, got {root!r}")
        self.root = root
        self.storage_options = dict(storage_options or {})
        self._fs = None
        self._root_path: str | None = None

    def __repr__(self) -> str:
        return f"LandingZoneSink({self.root!r})"

    def _filesystem(self):
        if self._fs is None:
            fs, path = fsspec.core.url_to_fs(self.root, **self.storage_options)
            self._fs, self._root_path = fs, path.rstrip("/") or "/"
        return self._fs, self._root_path

    def _has_directories(self) -> bool:
        """False for object stores, where "folders" are key prefixes: no mkdir calls (and never a bucket creation)."""
        protocol = self._fs.protocol
        protocols = (protocol,) if isinstance(protocol, str) else tuple(protocol)
        return not set(protocols) & _OBJECT_STORES

    def _is_local(self) -> bool:
        protocol = self._fs.protocol
        protocols = (protocol,) if isinstance(protocol, str) else tuple(protocol)
        return "file" in protocols or "local" in protocols

    def uri(self, path: str) -> str:
        """The URI of a path of this sink: a plain path for a plain local root, else with protocol."""
        if "://" not in self.root:
            return path
        return self._fs.unstrip_protocol(path)

    def committed(self, relative_dir: str) -> bool:
        """True when the capture folder ``relative_dir`` (a :func:`landing_path`) already holds its ``manifest.json``.

        Raises:
            ValueError: ``relative_dir`` is not a landing path; OSError and fsspec errors: the root is unreadable.
        """
        check_relative_dir(relative_dir)
        fs, root = self._filesystem()
        return bool(fs.exists(posixpath.join(root, relative_dir, MANIFEST_NAME)))

    def uri_of(self, relative_dir: str) -> str:
        """The URI of the capture folder ``relative_dir`` of this sink."""
        _, root = self._filesystem()
        return self.uri(posixpath.join(root, check_relative_dir(relative_dir)))

    def submit(self, upload: CaptureUpload) -> str:
        """Write a capture now (same as :meth:`write`); returns the capture folder URI once committed.

        Kept for callers of the first API; background upload is ``capture_hooks.upload``.

        Raises:
            OSError and fsspec errors: as :meth:`write`.
        """
        return self.write(upload)

    def write(self, upload: CaptureUpload) -> str:
        """Write the files of ``upload``, then ``manifest.json``; returns the capture folder URI.

        On a local filesystem each file is written under a temporary ``.name.part`` name and
        renamed, so a reader never sees a partial file; object stores publish a PUT atomically.

        Raises:
            ValueError: ``relative_dir`` or a file name that could land outside the capture folder.
            OSError (unwritable root, disk full) or the fsspec driver's errors.
        """
        check_relative_dir(upload.relative_dir)
        for _, name in upload.files:
            check_capture_file_name(name)
        fs, root = self._filesystem()
        capture_dir = posixpath.join(root, upload.relative_dir)
        if self._has_directories():
            fs.makedirs(capture_dir, exist_ok=True)
        for local_path, name in upload.files:
            self._put(fs, local_path, posixpath.join(capture_dir, name))
        manifest_path = posixpath.join(capture_dir, MANIFEST_NAME)
        if self._is_local():
            tmp = posixpath.join(capture_dir, f".{MANIFEST_NAME}.{uuid.uuid4().hex}.part")
            with fs.open(tmp, "wb") as f:
                f.write(upload.manifest)
            os.replace(tmp, manifest_path)
        else:
            with fs.open(manifest_path, "wb") as f:
                f.write(upload.manifest)
        return self.uri(capture_dir)

    def _put(self, fs, local_path: str, dest: str) -> None:
        parent = posixpath.dirname(dest)
        if parent and self._has_directories():
            fs.makedirs(parent, exist_ok=True)
        if self._is_local():
            tmp = posixpath.join(parent, f".{posixpath.basename(dest)}.{uuid.uuid4().hex}.part")
            fs.put_file(local_path, tmp)
            os.replace(tmp, dest)
        else:
            fs.put_file(local_path, dest)
