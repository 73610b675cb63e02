"""Find the raw trace files of a landing zone (local folder or any fsspec URI).

Landing-zone layout (ARCHITECTURE.md, written by ``capture_hooks``)::

    {raw_root}/date=YYYY-MM-DD/job={job_id}/attempt={attempt}/rank={rank:05d}/{capture_id}/
        trace.json.gz ...
        manifest.json          # written LAST: its presence commits the capture

A capture folder without ``manifest.json`` is still being written and is skipped (counted as
pending). Files dropped in by hand with no manifest (``*.json``, ``*.json.gz``, e.g. a folder of
``tensorboard_trace_handler`` output) are accepted too: their job is the folder they sit in, and
their metadata is inferred from the trace and the path.

Path safety: every id that becomes a folder or partition value passes :func:`jobs.common.ids.safe_id`
(job and capture ids), :func:`~jobs.common.ids.safe_date` or :func:`~jobs.common.ids.safe_index` (int32
attempt/rank); a capture whose manifest or landing-zone folders break them is quarantined with a reason
naming the value, and a key with ``.``, ``..`` or empty segments (possible on object stores) is
quarantined under its own URI, never normalized.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import posixpath
import re
import stat
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

import fsspec

from jobs.common.ids import DiscoveryError, safe_date, safe_id, safe_index, shown, slug
from jobs.landing.formats import MANIFEST_KINDS, is_parquet_profile_dir, kind_from_name, pair_key
from jobs.landing.store import LandingUnavailable, listing_failed, read_problem
from schemas.manifest import validate_manifest

TRACE_SUFFIXES = (".json", ".json.gz", ".gz")
# Patterns are used with fullmatch (``$`` would accept a trailing newline); ASCII classes only.
_PART_RE = re.compile(r"(date|job|attempt|rank)=(.*)", re.S)
#: Job id of files whose path could resolve outside the landing zone (``.``/``..``/empty segments).
UNSAFE_PATH_JOB = "unsafe-path"


@dataclass
class CaptureFile:
    """One raw trace file to normalize, with everything known before it is parsed.

    ``job_id``/``attempt``/``rank`` come from the manifest when there is one, else from the path;
    ``rank`` is ``None`` when only the trace itself can tell. ``error`` is set when the capture is
    already known to be bad (e.g. an invalid manifest): the file is then quarantined with that reason.

    Routing (:mod:`jobs.landing.formats`): ``kind`` is ``auto`` (JSON: the content decides),
    ``neuron_parquet`` (``uri`` is an Explorer Parquet folder and ``members`` its ``*.parquet`` file
    names), ``xplane``, ``neuron_raw`` or ``neuron_summary_json``/``xla_trace`` from a manifest kind.
    ``converted`` is the URI of a converted form of a raw file (an NTFF's JSON/Parquet, an xplane's
    ``trace.json.gz``, the full profile a summary-json summarizes), ``note`` the NEFF/NTFF pairing,
    ``flags`` data-quality flags known at discovery (e.g. ``ntff_without_neff``). ``committed_size`` /
    ``committed_sha256``: what the manifest says of the file's bytes (verified when it is read).
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
    cuda_version: str | None = None
    created_at: str | None = None
    size_bytes: int | None = None
    error: str | None = None
    bare: bool = True
    tags: dict = field(default_factory=dict)
    kind: str = "auto"
    members: list[str] = field(default_factory=list)
    converted: str | None = None
    note: str | None = None
    committed_size: int | None = None
    committed_sha256: str | None = None
    flags: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        """Plain dict (JSON-serializable) for shipping to Spark workers."""
        d = asdict(self)
        d["tags"] = json.dumps(self.tags, sort_keys=True)
        return d


@dataclass
class Discovery:
    """Result of :func:`discover`: files to normalize and capture folders not yet committed; ``listing`` is the
    store's listing it was made from (``{path: fsspec info}``: modification times for :mod:`jobs.landing.interval`
    without a second listing)."""

    files: list[CaptureFile]
    pending: list[str]
    listing: dict = field(default_factory=dict, repr=False, compare=False)


def check_path_parts(parts: dict, where: str) -> dict:
    """Validate the Hive-style segments of a landing-zone path (``date=``, ``job=``, ``attempt=``, ``rank=``).

    Args:
        parts: ``{"date"|"job"|"attempt"|"rank": raw text}`` as parsed from the path.
        where: the file or folder named in the error.

    Returns:
        The parts with ``attempt``/``rank`` as ints.

    Raises:
        DiscoveryError: naming ``where`` and the segment, e.g. ``job='..'``, ``date='../x'``,
            ``attempt='-1'``, ``rank='abc'``.
    """
    out: dict = {}
    for key, value in parts.items():
        what = f"landing-zone folder {key}= value"
        if key == "job":
            out[key] = safe_id(value, what, where)
        elif key == "date":
            out[key] = safe_date(value, where, what)
        else:
            out[key] = safe_index(value, what, where)
    return out


def _fallback_id(value, default: str) -> str:
    """A path-safe id for the identity of a quarantined capture: ``value`` when it is safe, else its slug
    plus a short hash of the original (so a hostile name never merges into an existing job)."""
    if value is None:
        return default
    try:
        return safe_id(value, "id", "")
    except DiscoveryError:
        return slug(f"{slug(str(value))}-{hashlib.sha1(str(value).encode('utf-8', 'replace')).hexdigest()[:8]}")


def _fallback_index(value, minimum: int = 0) -> int | None:
    try:
        return safe_index(value, "", "", minimum)
    except DiscoveryError:
        return None


_LOCAL = ("file", "local")


def not_regular(path: str, info: dict, root: str) -> str | None:
    """Why a local landing-zone entry must not be opened, or ``None`` for a regular file (or a symbolic link to one
    inside the landing zone): a FIFO would block the reader for ever, a device (``/dev/zero``) never ends, a socket
    cannot be read, and a link leaving ``root`` would ingest (or show in a reason) a file that is not the landing
    zone's. ``info``: the entry's fsspec ``LocalFileSystem`` info (``lstat``: ``type``, ``islink``, ``mode``)."""
    if info.get("islink"):
        target = os.path.realpath(path)
        real_root = os.path.realpath(root)
        if os.path.commonpath([target, real_root]) != real_root:
            return f"a symbolic link leaving the landing zone (to {target!r}): not followed"
        try:
            mode = os.stat(path).st_mode
        except OSError as exc:
            return f"a broken symbolic link ({type(exc).__name__}): not followed"
        kind = special_file_kind(mode)
        return f"a symbolic link to {kind}: not opened" if kind else None
    if info.get("type") == "file":
        return None
    kind = special_file_kind(int(info.get("mode") or 0)) or "not a regular file"
    return f"{kind}, not a regular file: not opened"


def special_file_kind(mode: int) -> str | None:
    """``a FIFO`` / ``a socket`` / ``a device`` for such a mode (``stat.st_mode``), else None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def _is_trace_name(name: str) -> bool:
    return name.endswith(TRACE_SUFFIXES) and name != "manifest.json"


def _path_parts(rel: str) -> dict:
    parts = {}
    for seg in rel.split("/"):
        m = _PART_RE.fullmatch(seg)
        if m:
            parts[m.group(1)] = m.group(2)
    return parts


def _is_date(value) -> bool:
    try:
        safe_date(value, "")
        return True
    except DiscoveryError:
        return False


def _inside(rel: str) -> bool:
    """True when ``rel`` ('/'-separated, relative) stays inside its folder: no absolute path, no empty,
    ``.`` or ``..`` segment, no backslash, NUL or other control character."""
    if not isinstance(rel, str) or not rel or rel.startswith("/"):
        return False
    if "\\" in rel or any(ord(ch) < 32 or ord(ch) == 127 for ch in rel):
        return False
    return all(seg not in ("", ".", "..") for seg in rel.split("/"))


def _rel(path: str, root: str) -> str:
    """``path`` relative to ``root`` without normalizing it (``posixpath.relpath`` would collapse an
    object-store key's ``a/../b`` into another key); ``.`` for the root itself."""
    if path == root:
        return "."
    if root in ("", "/"):
        return path.lstrip("/")
    return path[len(root) + 1 :] if path.startswith(root + "/") else posixpath.relpath(path, root)


def _int_or_none(v):
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def _from_manifest(
    fs, protocol: str, folder: str, manifest_path: str, names: list[str], root: str
) -> list[CaptureFile]:
    """Capture files of one committed capture folder; ``names`` are paths relative to it (any depth).

    The manifest and the landing-zone path must both be safe (:func:`check_path_parts`, :func:`safe_id`,
    int32 ``attempt``/``rank``/``world_size``, file paths inside the folder); otherwise every file of the
    capture is quarantined with the reason (naming the capture folder or ``manifest.json``, and the bad
    value) under a path-safe fallback identity.
    """
    uri = _unstrip(protocol, manifest_path)
    parts = _path_parts(_rel(folder, root))
    capture_id = posixpath.basename(folder)
    trace_names = [n for n in names if "/" not in n and _is_trace_name(n)]
    kinds: dict[str, str] = {}
    problem = "unsafe landing-zone path"
    try:
        path_parts = check_path_parts(parts, _unstrip(protocol, folder))
        problem = f"invalid manifest {uri}"
        try:
            with fs.open(manifest_path, "rb") as f:
                text = f.read()
        except Exception as exc:  # gone or forbidden: quarantined below; an unreachable store raises
            raise DiscoveryError(read_problem(uri, exc)) from exc
        manifest = json.loads(text)
        if not isinstance(manifest, dict):
            raise DiscoveryError("manifest is not a JSON object")
        validate_manifest(manifest)
        job_id = safe_id(manifest["job_id"], "job_id", uri)
        attempt = safe_index(manifest.get("attempt", 0), "attempt", uri)
        rank = safe_index(manifest["rank"], "rank", uri) if manifest.get("rank") is not None else None
        if manifest.get("world_size") is not None:
            world = safe_index(manifest["world_size"], "world_size", uri, minimum=1)
            check_manifest_facts(rank, world, manifest.get("created_at"))
        else:
            check_manifest_facts(rank, None, manifest.get("created_at"))
        listed = [fi["path"] for fi in manifest.get("files", []) if fi.get("kind", "kineto_trace") in MANIFEST_KINDS]
        for p in listed:
            if not _inside(p):
                raise DiscoveryError(f"file path {shown(p)} escapes the capture folder")
        kinds = {
            fi["path"]: MANIFEST_KINDS[fi.get("kind", "kineto_trace")]
            for fi in manifest.get("files", [])
            if fi.get("kind", "kineto_trace") in MANIFEST_KINDS
        }
        trace_names = sorted(set(trace_names) | set(listed) | {n for n in names if "/" in n})
        common = dict(
            capture_id=safe_id(capture_id, "capture_id", uri),
            job_id=job_id,
            attempt=attempt,
            rank=rank,
            rank_source="manifest" if rank is not None else None,
            world_size=_int_or_none(manifest.get("world_size")),
            date=path_parts.get("date") or (manifest.get("created_at") or "")[:10] or None,
            manifest_uri=uri,
            host_name=manifest.get("host"),
            device_name=manifest.get("device_name"),
            torch_version=manifest.get("torch_version"),
            cuda_version=manifest.get("cuda_version"),
            created_at=manifest.get("created_at"),
            bare=False,
            tags=manifest.get("tags") or {},
        )
        committed = {
            fi["path"]: (fi.get("size_bytes"), fi.get("sha256")) for fi in manifest.get("files", []) if "path" in fi
        }
        error = None
    except LandingUnavailable:
        raise
    except Exception as exc:  # invalid manifest or unsafe path: quarantine its files, keep going
        reason = f"{problem}: {exc}"
        rank = _fallback_index(parts.get("rank"))
        date = parts.get("date")
        common = dict(
            capture_id=_fallback_id(capture_id, "capture"),
            job_id=_fallback_id(parts.get("job"), "unknown"),
            attempt=_fallback_index(parts.get("attempt")) or 0,
            rank=rank,
            rank_source="path" if rank is not None else None,
            date=date if date is not None and _is_date(date) else None,
            manifest_uri=uri,
            bare=False,
        )
        error = reason
        committed = {}
        if not trace_names:
            trace_names = ["manifest.json"]
    if error is not None:
        routed = [_Routed(n, "auto") for n in trace_names]
    else:
        routed = route_files(trace_names, kinds)
    out = []
    for r in routed:
        p = posixpath.join(folder, r.rel) if r.rel != "." else folder
        cid = common["capture_id"] if len(routed) == 1 else f"{common['capture_id']}.{slug(r.rel)}"
        size, sha = committed.get(r.rel, (None, None))
        out.append(
            CaptureFile(
                uri=_unstrip(protocol, p),
                **{**common, "capture_id": cid},
                error=error,
                committed_size=size,
                committed_sha256=sha,
                **r.fields(protocol, folder),
            )
        )
    return out


#: The largest world size a manifest may declare (2^20 accelerators); a larger one is a corrupt or hostile value
#: that would weigh a capture a million-fold in the fleet estimates.
MAX_WORLD_SIZE = 1 << 20
#: Capture times before this (the first torch.profiler Kineto traces are of 2020) or more than a day ahead of now are
#: not plausible.
_EARLIEST = "2015-01-01"


def check_manifest_facts(rank: int | None, world_size: int | None, created_at) -> None:
    """Check a manifest's fields against each other and the clock: ``rank`` below ``world_size``, ``world_size`` at
    most :data:`MAX_WORLD_SIZE`, ``created_at`` an RFC 3339 time between 2015 and a day from now.

    Raises:
        DiscoveryError: naming the field and its value (the capture is quarantined with it).
    """
    if world_size is not None and world_size > MAX_WORLD_SIZE:
        raise DiscoveryError(f"world_size {world_size} is not plausible (more than {MAX_WORLD_SIZE} accelerators)")
    if rank is not None and world_size is not None and rank >= world_size:
        raise DiscoveryError(f"rank {rank} is not below world_size {world_size}")
    if created_at is None:
        return
    try:
        t = dt.datetime.fromisoformat(str(created_at).replace("Z", "+00:00"))
    except ValueError:
        raise DiscoveryError(f"created_at {shown(created_at)} is not an RFC 3339 time") from None
    t = t if t.tzinfo else t.replace(tzinfo=dt.UTC)
    now = dt.datetime.now(dt.UTC)
    if t < dt.datetime.fromisoformat(_EARLIEST).replace(tzinfo=dt.UTC) or t > now + dt.timedelta(days=1):
        raise DiscoveryError(f"created_at {shown(created_at)} is not a plausible capture time")


@dataclass
class _Routed:
    """A routable file (or Parquet folder) relative to a group root, with its links (see :func:`route_files`)."""

    rel: str
    kind: str
    members: list[str] = field(default_factory=list)
    converted: str | None = None
    note: str | None = None
    flags: list[str] = field(default_factory=list)

    def fields(self, protocol: str, root: str) -> dict:
        conv = None
        if self.converted is not None:
            conv = _unstrip(protocol, posixpath.join(root, self.converted))
        return dict(kind=self.kind, members=list(self.members), converted=conv, note=self.note, flags=list(self.flags))


def route_files(rel_paths: list[str], kinds: dict[str, str] | None = None) -> list[_Routed]:
    """Routable files among paths relative to one group root (a capture folder or the landing root).

    ``*.parquet`` files are grouped by folder into one ``neuron_parquet`` entry per Explorer export
    (``rel`` = the folder); other names are routed by :func:`jobs.landing.formats.kind_from_name`
    unless ``kinds`` (manifest ``files[].kind`` mapped by ``formats.MANIFEST_KINDS``) says otherwise;
    files of no known kind are left out. Then each raw file, xplane and ``summary.json`` is linked to a
    converted form when one is present (``converted``): same folder and stem (``profile.ntff`` ↔
    ``profile.json``), the capture-hook layout (``neuron/<folder>/raw/…`` ↔ ``neuron/<folder>/parquet``
    or ``json``), ``<host>.xplane.pb`` ↔ ``<host>.trace.json.gz``; NTFFs and NEFFs are paired by the
    hash in their names (``note``; flag ``ntff_without_neff`` when an NTFF has no NEFF).

    Returns:
        Entries sorted by ``rel``.
    """
    kinds = kinds or {}
    by_dir: dict[str, list[str]] = {}
    out: list[_Routed] = []
    for rel in sorted(set(rel_paths)):
        kind = kinds.get(rel) or kind_from_name(rel)
        if kind is None:
            continue
        if kind == "neuron_parquet" or rel.endswith(".parquet"):
            by_dir.setdefault(posixpath.dirname(rel) or ".", []).append(posixpath.basename(rel))
            continue
        out.append(_Routed(rel, kind))
    for d, members in sorted(by_dir.items()):
        if is_parquet_profile_dir(members):
            out.append(_Routed(d, "neuron_parquet", members=sorted(members)))
    profiles = [
        r.rel
        for r in out
        if r.kind in ("auto", "neuron_parquet", "neuron_json", "xla_trace")
        and posixpath.basename(r.rel) != "summary.json"
    ]
    for r in out:
        _link(r, out, profiles, pair_key)
    return sorted(out, key=lambda r: r.rel)


def _link(r: _Routed, routed: list[_Routed], profiles: list[str], pair_key) -> None:
    d, base = posixpath.dirname(r.rel), posixpath.basename(r.rel)
    if r.kind == "xplane":
        host = base[: -len(".xplane.pb")]
        for cand in (f"{host}.trace.json.gz", f"{host}.trace.json"):
            c = posixpath.join(d, cand)
            if c in profiles:
                r.converted = c
        return
    if r.kind == "neuron_raw":
        stem = base.rsplit(".", 1)[0]
        for p in profiles:
            if posixpath.dirname(p) == d and posixpath.basename(p).split(".")[0] == stem:
                r.converted = p
        if r.converted is None and "/raw/" in f"/{r.rel}":
            top = f"/{r.rel}".split("/raw/")[0].lstrip("/")
            for p in profiles:
                if (p + "/").startswith(top + "/" if top else "") and "/raw/" not in f"/{p}/":
                    r.converted = p
                    break
        low = base.lower()
        if low.endswith((".ntff", ".neff")):
            key = pair_key(base)
            other = ".neff" if low.endswith(".ntff") else ".ntff"
            sibs = [x.rel for x in routed if posixpath.dirname(x.rel) == d and x.rel.lower().endswith(other)]
            mates = [x for x in sibs if key is not None and pair_key(posixpath.basename(x)) == key]
            if not mates and key is None and len(sibs) == 1 and other == ".neff":
                mates = sibs  # native PyTorch layout: profile_nc_0_session_0.ntff + the folder's one NEFF
            if mates:
                r.note = f"paired with {', '.join(posixpath.basename(m) for m in mates[:4])}" + (
                    f" (+{len(mates) - 4} more)" if len(mates) > 4 else ""
                )
            elif other == ".neff" and r.converted is None:
                r.flags.append("ntff_without_neff")
        return
    if base == "summary.json" or r.kind == "neuron_summary_json":
        # capture-hook layout: neuron/<folder>/summary.json next to neuron/<folder>/parquet/ or json/<x>.json
        for x in routed:
            if x.kind == "neuron_parquet" and posixpath.dirname(x.rel) == d and posixpath.basename(x.rel) == "parquet":
                r.converted = x.rel
                return
            if x.rel.endswith(".json") and posixpath.dirname(x.rel) == posixpath.join(d, "json"):
                r.converted = x.rel
                return


def _is_routable(name: str) -> bool:
    return kind_from_name(name) is not None


def _capture_root(folder: str, rel: str) -> str:
    """The landing-zone capture folder (``…/rank=NNNNN/<capture_id>``) that ``folder`` is in."""
    segs = rel.split("/")
    for i, seg in enumerate(segs):
        if seg.startswith("rank=") and i + 1 < len(segs):
            depth = len(segs) - (i + 2)
            out = folder
            for _ in range(depth):
                out = posixpath.dirname(out)
            return out
    return folder


def _size_of(infos: dict[str, dict], rel: str, members: list[str]) -> int | None:
    if members:
        sizes = [infos.get(posixpath.normpath(posixpath.join(rel, m)), {}).get("size") for m in members]
        return sum(x for x in sizes if x is not None) if any(x is not None for x in sizes) else None
    info = infos.get(rel)
    return info.get("size") if info else None


def _unstrip(protocol: str, path: str) -> str:
    if protocol in ("file", "local"):
        return path
    return f"{protocol}://{path}"


def discover(raw_root: str, storage_options: dict | None = None, prefixes: Iterable[str] | None = None) -> Discovery:
    """List the raw trace files under ``raw_root``.

    Args:
        raw_root: a local folder or an fsspec URI (``s3://bucket/prefix``, ``file:///…``).
        storage_options: passed to fsspec (e.g. ``{"endpoint_url": …, "key": …}`` for s3fs).
        prefixes: list only these folders of ``raw_root`` (e.g. ``date=2026-12-05``; one missing is empty);
            ``None`` lists everything (:func:`jobs.landing.interval.date_prefixes` says which an interval needs).

    Returns:
        :class:`Discovery` with one :class:`CaptureFile` per trace file (manifest captures first,
        then bare files, each sorted by URI) and the committed-not-yet folders in ``pending``.

    Raises:
        FileNotFoundError: when ``raw_root`` does not exist.
        LandingUnavailable: the store failed while listing, or while reading a manifest (not the
            object's own problem: :mod:`jobs.landing.store`).
    """
    fs, root = fsspec.core.url_to_fs(raw_root, **(storage_options or {}))
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    root = root.rstrip("/")
    try:
        exists = fs.exists(root)
        if exists and fs.isfile(root):
            listing = {root: fs.info(root)}
            root = posixpath.dirname(root)
        elif exists and prefixes is not None:
            listing = {}
            for prefix in prefixes:
                try:
                    listing.update(fs.find(posixpath.join(root, prefix), detail=True))
                except FileNotFoundError:  # a prefix with nothing under it
                    continue
        elif exists:
            listing = fs.find(root, detail=True)
    except Exception as exc:  # the store failed (a missing root is `exists` False): nothing to quarantine
        raise listing_failed(raw_root, exc) from exc
    if not exists:
        raise FileNotFoundError(f"raw root {raw_root} does not exist")
    by_dir: dict[str, dict[str, dict]] = {}
    unsafe: list[CaptureFile] = []
    refused: dict[str, str] = {}  # local entries never opened: path → why
    for path, info in listing.items():
        if info.get("type") == "directory":
            continue
        if protocol in _LOCAL and (why := not_regular(path, info, root)) is not None:
            refused[path] = why
        rel_p = _rel(path, root)
        if any(seg in ("", ".", "..") for seg in rel_p.split("/")) and rel_p != ".":
            # an object-store key such as raw/job=../../x/t.json: quarantined under its own URI, never
            # normalized (that would name another object) and never grouped with a capture
            name = posixpath.basename(path)
            if _is_routable(name) or name == "manifest.json":
                unsafe.append(
                    CaptureFile(
                        uri=_unstrip(protocol, path),
                        job_id=UNSAFE_PATH_JOB,
                        size_bytes=info.get("size"),
                        capture_id=hashlib.sha1(rel_p.encode("utf-8", "surrogateescape")).hexdigest()[:16],
                        error=f"unsafe path {shown(rel_p)} under the landing zone: a '.', '..' or empty segment "
                        "could resolve to another file; not ingested",
                    )
                )
            continue
        by_dir.setdefault(posixpath.dirname(path), {})[posixpath.basename(path)] = info

    # a manifest that is not a regular file is never opened: its folder is reported, not committed
    manifest_roots = {
        f for f in by_dir if "manifest.json" in by_dir[f] and posixpath.join(f, "manifest.json") not in refused
    }
    for f in sorted(by_dir):
        m = posixpath.join(f, "manifest.json")
        if m in refused:
            unsafe.append(
                CaptureFile(
                    uri=_unstrip(protocol, m),
                    job_id=UNSAFE_PATH_JOB,
                    capture_id=hashlib.sha1(m.encode("utf-8", "surrogateescape")).hexdigest()[:16],
                    error=refused[m],
                )
            )

    def owner(folder: str) -> str | None:
        """The deepest capture folder (one with a manifest) that is ``folder`` or holds it: its ancestors walked
        up, O(depth) (a scan of every capture folder per folder was quadratic: 18 s for 20,000 captures)."""
        f = folder
        while True:
            if f in manifest_roots:
                return f
            parent = posixpath.dirname(f)
            if parent == f:
                return None
            f = parent

    manifest_files: list[CaptureFile] = []
    bare_rel: dict[str, dict] = {}
    pending: list[str] = []
    under: dict[str, dict[str, dict]] = {}
    for folder in sorted(by_dir):
        entries = by_dir[folder]
        m = owner(folder)
        if m is not None:
            for n, info in entries.items():
                rel_n = _rel(posixpath.join(folder, n), m)
                if rel_n != "manifest.json":
                    under.setdefault(m, {})[rel_n] = info
            continue
        rel = _rel(folder, root)
        parts = _path_parts(rel)
        names = sorted(n for n in entries if _is_routable(n))
        if not names:
            continue
        if "job" in parts and "rank" in parts:
            capture_root = _capture_root(folder, rel)
            if _unstrip(protocol, capture_root) not in pending:
                pending.append(_unstrip(protocol, capture_root))  # landing-zone capture not yet committed
            continue
        for n in names:
            bare_rel[n if rel == "." else f"{rel}/{n}"] = entries[n]
    for m in sorted(manifest_roots):
        files_under = under.get(m, {})
        files = _from_manifest(fs, protocol, m, posixpath.join(m, "manifest.json"), sorted(files_under), root)
        for f in files:
            rel_f = posixpath.relpath(f.uri.split("://", 1)[-1] if protocol not in ("file", "local") else f.uri, m)
            f.size_bytes = _size_of(files_under, rel_f, f.members)
        manifest_files.extend(files)

    bare: list[CaptureFile] = []
    for r in route_files(sorted(bare_rel)):
        folder_rel = posixpath.dirname(r.rel) if r.kind != "neuron_parquet" else r.rel
        job_rel = folder_rel if r.kind != "neuron_parquet" else (posixpath.dirname(r.rel) or r.rel)
        parts = _path_parts(folder_rel)
        job_id = slug(job_rel.replace("/", "-")) if job_rel not in ("", ".") else slug(posixpath.basename(root))
        cid = hashlib.sha1(posixpath.normpath(r.rel).encode()).hexdigest()[:16]
        abs_path = posixpath.join(root, r.rel) if r.rel != "." else root
        date, error = parts.get("date"), None
        if date is not None and not _is_date(date):  # a date= folder is the partition: it must be a date
            error = f"unsafe path: landing-zone folder date= value {shown(date)} is not a calendar date YYYY-MM-DD"
            date = None
        bare.append(
            CaptureFile(
                uri=_unstrip(protocol, abs_path),
                capture_id=cid,
                job_id=job_id,
                size_bytes=_size_of(bare_rel, r.rel, r.members),
                date=date,
                error=error,
                **r.fields(protocol, root),
            )
        )
    for f in [*manifest_files, *bare]:  # named and quarantined with the reason, never read
        path = f.uri.split("://", 1)[-1] if protocol not in _LOCAL else f.uri
        if f.error is None and path in refused:
            f.error = refused[path]  # the reason is prefixed with the file's URI where it is shown
    return Discovery(
        files=manifest_files + bare + sorted(unsafe, key=lambda f: f.uri), pending=pending, listing=listing
    )
