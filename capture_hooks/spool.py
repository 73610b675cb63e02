"""Local spool: each capture waits here, on local disk, until the landing zone has it.

Layout of one spool folder (one per sink, job and rank; see :func:`spool_root`)::

    {spool}/.staging-{pid}-{capture_id}/      being written by the training thread (ignored by readers)
    {spool}/{created_ns:020d}-{capture_id}/   staged: files + capture.json, ready to finalize and upload
    {spool}/{...}.claim-{pid}/                claimed by the upload worker of process {pid}

A staged entry holds the exported files and ``capture.json`` (:data:`META_NAME`): where the capture
goes (``relative_dir``), the manifest without its file list, and what the worker still has to do
(gzip the trace, copy and convert Neuron output). The worker turns it into a finished capture folder
(``manifest.json`` present), uploads it and removes the entry. Names sort by creation time, so
captures are uploaded oldest first.

Claims are renames, so two processes never upload the same entry at once; a claim left by a
process that no longer exists is released by the next reader. Only the standard library is used.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import time
from collections.abc import Mapping
from typing import Any

__all__ = [
    "META_NAME",
    "Spool",
    "SpoolFull",
    "default_spool_base",
    "read_meta",
    "spool_root",
    "tree_size",
    "write_bytes_atomic",
]

logger = logging.getLogger("capture_hooks")

META_NAME = "capture.json"
_READY = re.compile(r"^\d{20}-[A-Za-z0-9_][A-Za-z0-9._-]*$")
_CLAIM = re.compile(r"^(?P<name>\d{20}-[A-Za-z0-9_][A-Za-z0-9._-]*)\.claim-(?P<pid>\d+)$")
_STAGING = re.compile(r"^\.staging-(?P<pid>\d+)-")


class SpoolFull(Exception):
    """A capture did not fit under the spool size cap (it was discarded)."""


def default_spool_base(env: Mapping[str, str]) -> str:
    """``TRACELAKE_SPOOL_DIR``, else ``{system temp}/tracelake-spool``."""
    return (env.get("TRACELAKE_SPOOL_DIR") or "").strip() or os.path.join(tempfile.gettempdir(), "tracelake-spool")


def spool_root(base: str, sink_root: str, job_id: str, rank: int) -> str:
    """Spool folder of one (sink, job, rank): ``{base}/job={job_id}/rank={rank:05d}/sink={sha1(sink)[:12]}``.

    ``job_id`` must already be path-safe. Keying by sink keeps captures meant for another landing
    zone out of this one's queue and size cap.
    """
    digest = hashlib.sha1(sink_root.encode("utf-8")).hexdigest()[:12]
    return os.path.join(base, f"job={job_id}", f"rank={rank:05d}", f"sink={digest}")


def tree_size(path: str) -> int:
    """Total size in bytes of the regular files under ``path`` (0 when it does not exist)."""
    total = 0
    for folder, _, names in os.walk(path):
        for name in names:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                pass
    return total


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    except OSError:
        return False
    return True


class Spool:
    """One spool folder (see the module docstring) with a size cap.

    Args:
        root: the folder (created on first use).
        max_bytes: cap on the bytes of all entries; a capture that would exceed it is discarded
            when staged (:class:`SpoolFull`), older captures are kept.
        staging_parent: where captures are assembled before they enter the spool (default: ``root``;
            a folder on another filesystem works, entries are then copied in).
    """

    def __init__(self, root: str, max_bytes: int, staging_parent: str | None = None) -> None:
        if max_bytes <= 0:
            raise ValueError(f"spool max_bytes must be > 0, got {max_bytes}")
        self.root = root
        self.max_bytes = int(max_bytes)
        self.staging_parent = staging_parent or root

    def __repr__(self) -> str:
        return f"Spool({self.root!r}, max_bytes={self.max_bytes})"

    # ------------------------------------------------------------- training thread side

    def new_staging(self, capture_id: str) -> str:
        """Create and return an empty staging folder for ``capture_id`` (path-safe)."""
        os.makedirs(self.staging_parent, exist_ok=True)
        return tempfile.mkdtemp(prefix=f".staging-{os.getpid()}-{capture_id}-", dir=self.staging_parent)

    def commit(self, staging: str, capture_id: str, meta: Mapping[str, Any], created_ns: int) -> str:
        """Write ``capture.json`` into ``staging`` and move it into the spool; returns the entry name.

        Raises:
            SpoolFull: the entry would push the spool over ``max_bytes`` (``staging`` is removed).
            OSError: the spool is not writable (``staging`` is removed).
        """
        try:
            _write_json_atomic(os.path.join(staging, META_NAME), meta)
            size = tree_size(staging)
            used = self.size_bytes()
            if used + size > self.max_bytes:
                raise SpoolFull(
                    f"spool {self.root} holds {used} bytes; a capture of {size} bytes would exceed the cap of "
                    f"{self.max_bytes} bytes"
                )
            name = f"{created_ns:020d}-{capture_id}"
            os.makedirs(self.root, exist_ok=True)
            dest = os.path.join(self.root, name)
            if os.path.dirname(os.path.abspath(staging)) == os.path.abspath(self.root):
                os.rename(staging, dest)
            else:  # staged elsewhere (tmp_dir): copy in under a staging name, then rename
                tmp = os.path.join(self.root, f".staging-{os.getpid()}-{name}")
                shutil.copytree(staging, tmp)
                os.rename(tmp, dest)
                shutil.rmtree(staging, ignore_errors=True)
            return name
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise

    # ------------------------------------------------------------- reader side

    def size_bytes(self) -> int:
        """Bytes held by staged and claimed entries (staging folders of this process excluded)."""
        total = 0
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return 0
        for name in names:
            if _READY.match(name) or _CLAIM.match(name):
                total += tree_size(os.path.join(self.root, name))
        return total

    def ready(self) -> list[str]:
        """Names of entries ready to upload, oldest first.

        Releases claims of dead processes and removes staging folders of dead processes on the way.
        """
        try:
            names = sorted(os.listdir(self.root))
        except FileNotFoundError:
            return []
        out = []
        for name in names:
            path = os.path.join(self.root, name)
            claim = _CLAIM.match(name)
            staging = _STAGING.match(name)
            if claim and not _pid_alive(int(claim["pid"])):
                try:
                    os.rename(path, os.path.join(self.root, claim["name"]))
                    out.append(claim["name"])
                except OSError:
                    pass
            elif staging and not _pid_alive(int(staging["pid"])):
                shutil.rmtree(path, ignore_errors=True)
            elif _READY.match(name) and not claim:
                out.append(name)
        return sorted(set(out))

    def claim(self, name: str) -> str | None:
        """Claim entry ``name`` for this process; returns the claimed path, ``None`` if gone or taken."""
        src = os.path.join(self.root, name)
        dest = f"{src}.claim-{os.getpid()}"
        try:
            os.rename(src, dest)
        except OSError:
            return None
        return dest

    def release(self, claimed: str) -> None:
        """Put a claimed entry back (upload failed; it is retried later)."""
        name = os.path.basename(claimed).rsplit(".claim-", 1)[0]
        try:
            os.rename(claimed, os.path.join(self.root, name))
        except OSError:
            logger.debug("tracelake capture: could not release spool entry %s", claimed, exc_info=True)

    def remove(self, claimed: str) -> None:
        """Delete a claimed entry (its capture is committed in the landing zone)."""
        shutil.rmtree(claimed, ignore_errors=True)


def read_meta(entry: str) -> dict[str, Any]:
    """The ``capture.json`` of a spool entry.

    Raises:
        OSError, ValueError: missing or not JSON.
    """
    with open(os.path.join(entry, META_NAME), encoding="utf-8") as f:
        meta = json.load(f)
    if not isinstance(meta, dict):
        raise ValueError(f"{entry}/{META_NAME} is not a JSON object")
    return meta


def _write_json_atomic(path: str, obj: Any) -> None:
    tmp = f"{path}.{os.getpid()}.{time.monotonic_ns()}.part"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, sort_keys=True)
    os.replace(tmp, path)


def write_bytes_atomic(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary name and a rename."""
    tmp = f"{path}.{os.getpid()}.{time.monotonic_ns()}.part"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
