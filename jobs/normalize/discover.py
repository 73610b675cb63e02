"""Find the raw trace files of a landing zone (local folder or any fsspec URI).

Landing-zone layout (ARCHITECTURE.md, written by ``capture_hooks``)::

    {raw_root}/date=YYYY-MM-DD/job={job_id}/attempt={attempt}/rank={rank:05d}/{capture_id}/
        trace.json.gz ...
        manifest.json          # written LAST: its presence commits the capture

A capture folder without ``manifest.json`` is still being written and is skipped (counted as
pending). Files dropped in by hand with no manifest (``*.json``, ``*.json.gz``, e.g. a folder of
``tensorboard_trace_handler`` output) are accepted too: their job is the folder they sit in, and
their metadata is inferred from the trace and the path.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from dataclasses import asdict, dataclass, field

import fsspec

TRACE_SUFFIXES = (".json", ".json.gz", ".gz")
_PART_RE = re.compile(r"^(date|job|attempt|rank)=(.+)$")
_SAFE_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._=+@-]{0,199}$")


class DiscoveryError(ValueError):
    """A landing-zone path or manifest that cannot be used (names the path and the problem)."""


@dataclass
class CaptureFile:
    """One raw trace file to normalize, with everything known before it is parsed.

    ``job_id``/``attempt``/``rank`` come from the manifest when there is one, else from the path;
    ``rank`` is ``None`` when only the trace itself can tell. ``error`` is set when the capture is
    already known to be bad (e.g. an invalid manifest): the file is then quarantined with that reason.
    """

    uri: str
    capture_id: str
    job_id: str
    attempt: int = 0
    rank: int | None = None
    rank_source: str | None = None
    world_size: int | None = None
    date: str | None = None
    manifest_uri: str | None = None
    host_name: str | None = None
    device_name: str | None = None
    torch_version: str | None = None
    size_bytes: int | None = None
    error: str | None = None
    bare: bool = True
    tags: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """Plain dict (JSON-serializable) for shipping to Spark workers."""
        d = asdict(self)
        d["tags"] = json.dumps(self.tags, sort_keys=True)
        return d


@dataclass
class Discovery:
    """Result of :func:`discover`: files to normalize and capture folders not yet committed."""

    files: list[CaptureFile]
    pending: list[str]


def safe_id(value: str, what: str, where: str) -> str:
    """Return ``value`` if it is safe as a path segment and partition value, else raise.

    Raises:
        DiscoveryError: naming ``where`` (file or URI) when ``value`` contains a path separator,
            ``..`` or other characters that could escape the landing zone or warehouse.
    """
    value = str(value)
    if not _SAFE_ID_RE.match(value) or ".." in value:
        raise DiscoveryError(f"{where}: unsafe {what} {value!r} (allowed: letters, digits, . _ = + @ -; no '..')")
    return value


def slug(text: str) -> str:
    """A path-safe id from free text (folder names of bare traces): runs of unsafe chars become ``-``."""
    s = re.sub(r"[^A-Za-z0-9._+@=-]+", "-", text).strip("-.")
    s = s.replace("..", ".")
    return s[:200] or "default"


def _is_trace_name(name: str) -> bool:
    return name.endswith(TRACE_SUFFIXES) and name != "manifest.json"


def _path_parts(rel: str) -> dict:
    parts = {}
    for seg in rel.split("/"):
        m = _PART_RE.match(seg)
        if m:
            parts[m.group(1)] = m.group(2)
    return parts


def _int_or_none(v):
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def _from_manifest(fs, protocol: str, folder: str, manifest_path: str, names: list[str], root: str) -> list[CaptureFile]:
    uri = _unstrip(protocol, manifest_path)
    rel = posixpath.relpath(folder, root)
    parts = _path_parts(rel)
    capture_id = posixpath.basename(folder)
    trace_names = [n for n in names if _is_trace_name(n)]
    try:
        with fs.open(manifest_path, "rb") as f:
            manifest = json.loads(f.read())
        if not isinstance(manifest, dict):
            raise DiscoveryError("manifest is not a JSON object")
        from schemas.manifest import validate_manifest

        validate_manifest(manifest)
        job_id = safe_id(manifest["job_id"], "job_id", uri)
        listed = [fi["path"] for fi in manifest.get("files", []) if fi.get("kind", "kineto_trace") == "kineto_trace"]
        for p in listed:
            if p.startswith("/") or ".." in p.split("/"):
                raise DiscoveryError(f"file path {p!r} escapes the capture folder")
        trace_names = sorted(set(trace_names) | set(listed))
        common = dict(
            capture_id=safe_id(capture_id, "capture_id", uri),
            job_id=job_id,
            attempt=int(manifest.get("attempt", 0)),
            rank=int(manifest["rank"]) if manifest.get("rank") is not None else None,
            rank_source="manifest" if manifest.get("rank") is not None else None,
            world_size=_int_or_none(manifest.get("world_size")),
            date=parts.get("date") or (manifest.get("created_at") or "")[:10] or None,
            manifest_uri=uri,
            host_name=manifest.get("host"),
            device_name=manifest.get("device_name"),
            torch_version=manifest.get("torch_version"),
            bare=False,
            tags=manifest.get("tags") or {},
        )
        error = None
    except Exception as exc:  # invalid manifest: quarantine its files, keep going
        reason = f"invalid manifest {uri}: {exc}"
        common = dict(
            capture_id=slug(capture_id),
            job_id=slug(parts.get("job", "unknown")),
            attempt=_int_or_none(parts.get("attempt")) or 0,
            rank=_int_or_none(parts.get("rank")),
            rank_source="path" if parts.get("rank") else None,
            date=parts.get("date"),
            manifest_uri=uri,
            bare=False,
        )
        error = reason
        if not trace_names:
            trace_names = ["manifest.json"]
    out = []
    for n in trace_names:
        p = posixpath.join(folder, n)
        cid = common["capture_id"] if len(trace_names) == 1 else f"{common['capture_id']}.{slug(n)}"
        out.append(CaptureFile(uri=_unstrip(protocol, p), **{**common, "capture_id": cid}, error=error))
    return out


def _unstrip(protocol: str, path: str) -> str:
    if protocol in ("file", "local"):
        return path
    return f"{protocol}://{path}"


def discover(raw_root: str, storage_options: dict | None = None) -> Discovery:
    """List the raw trace files under ``raw_root``.

    Args:
        raw_root: a local folder or an fsspec URI (``s3://bucket/prefix``, ``file:///…``).
        storage_options: passed to fsspec (e.g. ``{"endpoint_url": …, "key": …}`` for s3fs).

    Returns:
        :class:`Discovery` with one :class:`CaptureFile` per trace file (manifest captures first,
        then bare files, each sorted by URI) and the committed-not-yet folders in ``pending``.

    Raises:
        FileNotFoundError: when ``raw_root`` does not exist.
    """
    fs, root = fsspec.core.url_to_fs(raw_root, **(storage_options or {}))
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    root = root.rstrip("/")
    if not fs.exists(root):
        raise FileNotFoundError(f"raw root {raw_root} does not exist")
    if fs.isfile(root):
        listing = {root: fs.info(root)}
        root = posixpath.dirname(root)
    else:
        listing = fs.find(root, detail=True)
    by_dir: dict[str, dict[str, dict]] = {}
    for path, info in listing.items():
        if info.get("type") == "directory":
            continue
        by_dir.setdefault(posixpath.dirname(path), {})[posixpath.basename(path)] = info

    manifest_files: list[CaptureFile] = []
    bare: list[CaptureFile] = []
    pending: list[str] = []
    for folder in sorted(by_dir):
        entries = by_dir[folder]
        rel = posixpath.relpath(folder, root)
        parts = _path_parts(rel)
        if "manifest.json" in entries:
            files = _from_manifest(fs, protocol, folder, posixpath.join(folder, "manifest.json"), sorted(entries), root)
            for f in files:
                info = entries.get(posixpath.basename(f.uri))
                f.size_bytes = info.get("size") if info else None
            manifest_files.extend(files)
            continue
        names = sorted(n for n in entries if _is_trace_name(n))
        if not names:
            continue
        if "job" in parts and "rank" in parts:
            pending.append(_unstrip(protocol, folder))  # landing-zone capture not yet committed
            continue
        job_id = slug(rel.replace("/", "-")) if rel != "." else slug(posixpath.basename(root))
        for n in names:
            relpath = posixpath.normpath(posixpath.join(rel, n))
            cid = hashlib.sha1(relpath.encode()).hexdigest()[:16]
            bare.append(
                CaptureFile(
                    uri=_unstrip(protocol, posixpath.join(folder, n)),
                    capture_id=cid,
                    job_id=job_id,
                    size_bytes=entries[n].get("size"),
                    date=parts.get("date"),
                )
            )
    return Discovery(files=manifest_files + bare, pending=pending)
