"""``tracelake land``: put trace files a team already has into a landing zone as committed captures.

Each trace file becomes one capture folder ``date=…/job=…/attempt=…/rank=NNNNN/{capture_id}/``
(:func:`capture_hooks.sink.landing_path`) holding the file under its own name, then ``manifest.json``
(``schemas/manifest.v1.json``, writer ``tracelake.land``), written last by :class:`capture_hooks.sink.LandingZoneSink`:
the same contract as the capture hooks, so the CLI and the scheduled DAG ingest it with its job name, attempt and tags.

What the manifest says, and where it comes from:

* ``capture_id``: the first 16 hex digits of the file's sha256, so landing the same file again finds its committed
  folder and writes nothing (idempotent); ``files[]``: its path, size and sha256 as stored.
* ``rank`` / ``world_size``: the trace's ``distributedInfo`` (read from the head of the decoded document), else the
  ``rank`` given, else the file name (``rank3``, ``worker3``: :func:`jobs.landing.formats.rank_from_filename`), else
  0 when it is the only file; ``world_size`` the given one, else the trace's, else the ranks landed.
* ``device_name`` and ``accelerator``: the trace's first ``deviceProperties`` entry (``rocm`` for an AMD device,
  ``cuda`` otherwise), ``neuron`` / ``xla`` for those formats, else ``cpu``; ``host`` the one given, else null.
* the date partition and ``created_at``: the date given, else when the trace was captured — its
  ``baseTimeNanoseconds``, or its first absolute ``ts`` (epoch µs, older Kineto) — as the bare ingest dates it (so a
  landed run and the same files ingested bare fall on one date and one fleet window), else the file's modification
  time (UTC).

A file is refused, with the reason and nothing written for it, when it is not a regular file, its name is not a
trace's (:func:`jobs.landing.formats.kind_from_name`), its decoded head is not a JSON trace of a known kind, its rank
is not known or is landed twice in one call (both files named), or its rank is not below the world size.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from capture_hooks.identity import Identity
from capture_hooks.manifest import build_manifest, encode_manifest, utc_timestamp
from capture_hooks.sink import (
    CaptureUpload,
    LandingZoneSink,
    check_capture_file_name,
    landing_path,
    make_path_safe,
    validate_path_component,
)
from jobs.landing.formats import SNIFF_BYTES, kind_from_name, rank_from_filename, sniff_json
from schemas.manifest import validate_manifest, validate_tags

__all__ = ["LANDABLE_KINDS", "Landed", "TraceFacts", "land", "trace_facts"]

WRITER = "tracelake.land"

#: Routing kind (:mod:`jobs.landing.formats`) → the manifest ``files[].kind`` it is landed as.
LANDABLE_KINDS = {
    "kineto": "kineto_trace",
    "xla_trace": "xla_trace_json",
    "neuron_json": "neuron_json",
    "neuron_summary_json": "neuron_summary_json",
    "xplane": "xplane",
}
_PROFILERS = {
    "kineto": "torch.profiler",
    "xla_trace": "xla",
    "xplane": "xla",
    "neuron_json": "neuron-profile",
    "neuron_summary_json": "neuron-profile",
}
_DIST = re.compile(rb'"distributedInfo"\s*:\s*(\{[^{}]*\})')
# when the trace was captured: the first event's ts (µs; epoch µs in older Kineto), plus baseTimeNanoseconds (epoch
# ns) when the trace has one
_BASE = re.compile(rb'"baseTimeNanoseconds"\s*:\s*(\d{1,19})\b')
_FIRST_TS = re.compile(rb'"ts"\s*:\s*"?(\d{1,16})(?:\.(\d{1,3}))?')
_DEVICE = re.compile(rb'"deviceProperties"\s*:\s*\[\s*\{[^{}]*?"name"\s*:\s*"((?:[^"\\]|\\.)*)"')
_AMD = re.compile(r"\b(AMD|Instinct|Radeon|MI\d{3})", re.I)
_CHUNK = 1 << 20
#: How far into the decoded trace ``land`` looks for ``distributedInfo`` and ``deviceProperties`` when the head does
#: not hold them (a large ``metadata`` object can come first), bytes.
SCAN_BYTES = 256 << 20
_EPOCH_2015_NS = 1_420_070_400 * 10**9
_EPOCH_2100_NS = 4_102_444_800 * 10**9


class NotATrace(ValueError):
    """A file ``land`` refuses: the message is the reason."""


@dataclass(frozen=True)
class TraceFacts:
    """What :func:`trace_facts` reads of one file: routing ``kind``, ``rank`` / ``world_size`` from
    ``distributedInfo`` (``None`` when absent), ``device_name``, ``accelerator`` (manifest enum), ``sha256`` and
    ``size_bytes`` of the bytes as stored, ``mtime_ns``; ``captured_ns``: when the trace was captured (epoch ns, from
    ``baseTimeNanoseconds`` or an absolute ``ts``; None when it does not say)."""

    kind: str
    rank: int | None
    world_size: int | None
    device_name: str | None
    accelerator: str
    sha256: str
    size_bytes: int
    mtime_ns: int
    captured_ns: int | None = None


@dataclass
class Landed:
    """The outcome for one input file: ``status`` ``landed`` | ``already`` (its committed folder exists) |
    ``refused`` (``reason`` says why); ``rank`` and ``uri`` (the capture folder) when landed."""

    path: str
    status: str
    reason: str | None = None
    rank: int | None = None
    uri: str | None = None
    facts: TraceFacts | None = field(default=None, repr=False)


def _decoded(path: Path, limit: int):
    """The decoded bytes of a plain or gzip file in chunks, at most ``limit`` bytes in all (a gzip bomb stops
    there).

    Raises:
        NotATrace: a damaged gzip stream.
    """
    n = 0
    with open(path, "rb") as f:
        first = f.read(2)
        d = zlib.decompressobj(zlib.MAX_WBITS | 16) if first == b"\x1f\x8b" else None
        data = first
        while n < limit and data:
            if d is not None:
                try:
                    data = d.decompress(d.unconsumed_tail + data, limit - n)
                except zlib.error as exc:
                    raise NotATrace(f"not a readable gzip file ({exc})") from exc
            out = data[: limit - n]
            n += len(out)
            if out:
                yield out
            data = f.read(_CHUNK) if d is None or not d.unconsumed_tail else b""


def _head(path: Path, limit: int = SNIFF_BYTES) -> bytes:
    """The first ``limit`` decoded bytes of a plain or gzip file."""
    out = bytearray()
    for chunk in _decoded(path, limit):
        out += chunk
    return bytes(out)


def _search(path: Path, patterns: dict[str, re.Pattern], limit: int = SCAN_BYTES) -> dict[str, re.Match]:
    """The first match of each pattern in the first ``limit`` decoded bytes, read in chunks (a match may straddle
    two chunks: each search keeps the last 64 KiB of the one before)."""
    found: dict[str, re.Match] = {}
    tail = b""
    for chunk in _decoded(path, limit):
        window = tail + chunk
        for k, pat in patterns.items():
            if k not in found and (m := pat.search(window)):
                found[k] = m
        if len(found) == len(patterns):
            break
        tail = window[-(64 << 10) :]
    return found


def _digest(path: Path) -> tuple[str, int]:
    h, n = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
            n += len(chunk)
    return h.hexdigest(), n


def trace_facts(path: str | os.PathLike) -> TraceFacts:
    """The facts a manifest needs of one local trace file (module docstring), from its name, the first
    :data:`jobs.landing.formats.SNIFF_BYTES` of its decoded content and a streamed sha256.

    Raises:
        NotATrace: not a regular file, not a trace's name, not a JSON trace of a :data:`LANDABLE_KINDS` kind.
    """
    p = Path(path)
    if p.is_symlink() or not p.is_file():
        what = "a symbolic link" if p.is_symlink() else "not a regular file"
        raise NotATrace(f"{what}: land the trace file itself")
    kind = kind_from_name(p.name)
    if kind is None:
        raise NotATrace("not a trace file name (*.json, *.json.gz, *.gz, *.xplane.pb)")
    head = b""
    if kind == "auto":
        head = _head(p)
        s = head.lstrip()
        if s[:1] not in (b"{", b"["):
            raise NotATrace("not JSON: a trace starts with '{' or '['")
        kind = sniff_json(head, str(p))
        if kind == "kineto" and not s.startswith(b"[") and b'"traceEvents"' not in head:
            raise NotATrace(f"no traceEvents in the first {SNIFF_BYTES >> 20} MiB: not a Chrome/Kineto trace")
    if kind not in LANDABLE_KINDS:
        raise NotATrace(f"a {kind} file: land supports {', '.join(sorted(LANDABLE_KINDS))}")
    pats = {"dist": _DIST, "device": _DEVICE, "base": _BASE, "ts": _FIRST_TS}
    found = {k: m for k, pat in pats.items() if (m := pat.search(head))}
    if head and len(found) < len(pats) and len(head) >= SNIFF_BYTES:  # the head is not the whole document
        found = _search(p, pats)
    rank = world = device = None
    if "dist" in found:
        try:
            info = json.loads(found["dist"].group(1))
            rank, world = _nonneg(info.get("rank")), _nonneg(info.get("world_size"))
        except ValueError:
            pass
    if "device" in found:
        device = json.loads(b'"' + found["device"].group(1) + b'"')
    if kind.startswith("neuron"):
        accel = "neuron"
    elif kind in ("xla_trace", "xplane"):
        accel = "xla"
    elif device:
        accel = "rocm" if _AMD.search(device) else "cuda"
    else:
        accel = "cpu"
    sha, size = _digest(p)
    return TraceFacts(kind, rank, world or None, device, accel, sha, size, p.stat().st_mtime_ns, _captured(found))


def _captured(found: dict[str, re.Match]) -> int | None:
    """Epoch ns of the trace's first event (:data:`_FIRST_TS` µs + :data:`_BASE` ns), None when absent or before 2015
    (a relative clock without a base)."""
    ts = found.get("ts")
    if ts is None:
        return None
    base = found.get("base")
    ns = int(ts.group(1)) * 1000 + int((ts.group(2) or b"0").ljust(3, b"0")) + (int(base.group(1)) if base else 0)
    return ns if _EPOCH_2015_NS <= ns < _EPOCH_2100_NS else None


def _nonneg(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _files(paths: list[str]) -> list[Path]:
    """The files under ``paths`` (a folder: every file below it, sorted; links are listed, not followed)."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir() and not p.is_symlink():
            for d, dirs, names in os.walk(p):
                dirs.sort()
                out += [Path(d) / n for n in sorted(names) if not n.startswith(".")]
        else:
            out.append(p)
    return out


def land(
    paths: list[str],
    root: str,
    *,
    job_id: str | None = None,
    job_name: str | None = None,
    attempt: int = 0,
    tags: dict[str, str] | None = None,
    rank: int | None = None,
    world_size: int | None = None,
    host: str | None = None,
    date: str | None = None,
    storage_options: dict | None = None,
) -> list[Landed]:
    """Land the trace files of ``paths`` (files or folders) as the captures of one job run under ``root`` (a local
    folder or an fsspec URI such as ``s3://bucket/raw``): one :class:`Landed` per file, in path order.

    Args:
        job_id: the job folder (path-safe); default the job name (else the one folder or file given) made path-safe,
            then the first 8 hex digits of a hash of the files' sha256: each run lands as its own job, and landing
            the same files again finds the same one.
        job_name, tags: manifest tags (``job_name`` joins ``tags``); attempt: the run's attempt (≥ 0).
        rank: the rank of the one file given (ignored with several files: their traces or names say).
        world_size: the job's ranks (default: the traces', else the ranks landed); host: the host they ran on.
        date: ``YYYY-MM-DD`` of the landing partition (default each file's modification date, UTC).

    Raises:
        ValueError: a bad job id, attempt, rank, world size, date or tag (before anything is written).
        OSError and the fsspec driver's errors: the landing zone cannot be written (files landed before stay).
    """
    files = _files(paths)
    if job_id is not None:
        validate_path_component(job_id, "job_id")
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 0:
        raise ValueError(f"attempt must be a non-negative int, got {attempt!r}")
    if world_size is not None and world_size < 1:
        raise ValueError(f"world_size must be ≥ 1, got {world_size}")
    if date is not None:
        dt.date.fromisoformat(date)  # ValueError names the bad date
    all_tags = {**(tags or {}), **({"job_name": job_name} if job_name else {})}
    validate_tags(all_tags)
    out: list[Landed] = []
    for f in files:
        try:
            out.append(Landed(str(f), "pending", facts=trace_facts(f)))
        except (NotATrace, OSError) as exc:
            out.append(Landed(str(f), "refused", reason=str(exc)))
    ok = [x for x in out if x.facts is not None]
    # each landed run is a job of its own (runs sharing a job name are compared): the name and a hash of the files,
    # the same again when the same files are landed again
    run_hash = hashlib.sha256("".join(sorted(x.facts.sha256 for x in ok if x.facts)).encode()).hexdigest()[:8]
    name = make_path_safe(job_name or (Path(paths[0]).name.split(".")[0] if len(paths) == 1 else "landed"))
    job = job_id or f"{name[:190]}-{run_hash}"
    validate_path_component(job, "job_id")
    for x in ok:
        assert x.facts is not None
        x.rank = x.facts.rank
        if x.rank is None and rank is not None and len(files) == 1:
            x.rank = rank
        if x.rank is None:
            x.rank = rank_from_filename(x.path)
        if x.rank is None and len(ok) == 1:
            x.rank = 0
    by_rank: dict[int, list[Landed]] = {}
    for x in ok:
        if x.rank is None:
            x.status, x.reason = "refused", "no rank: no distributedInfo in the trace, none in its name; land it alone"
        else:
            by_rank.setdefault(x.rank, []).append(x)
    for r, xs in by_rank.items():
        if len(xs) > 1:
            for x in xs:
                x.status = "refused"
                x.reason = f"rank {r} twice in one job run: {', '.join(Path(y.path).name for y in xs)}"
    kept = [x for x in ok if x.status == "pending"]
    world = world_size or max(
        [x.facts.world_size or 0 for x in kept if x.facts] + [max((x.rank or 0 for x in kept), default=0) + 1]
    )
    sink = LandingZoneSink(root, storage_options)
    for x in kept:
        assert x.facts is not None and x.rank is not None
        if x.rank >= world:
            x.status, x.reason = "refused", f"rank {x.rank} is not below the world size {world}"
            continue
        _write(sink, x, job, attempt, world, all_tags, host, date)
    return out


def _write(sink: LandingZoneSink, x: Landed, job: str, attempt: int, world: int, tags, host, date) -> None:
    """Write one checked file and its manifest (or find them committed already)."""
    facts, name = x.facts, Path(x.path).name
    assert facts is not None and x.rank is not None
    check_capture_file_name(name)
    capture_id = facts.sha256[:16]
    when = facts.captured_ns or facts.mtime_ns
    day = date or dt.datetime.fromtimestamp(when / 1e9, tz=dt.UTC).strftime("%Y-%m-%d")
    rel = landing_path(date=day, job_id=job, attempt=attempt, rank=x.rank, capture_id=capture_id)
    if sink.committed(rel):
        x.status, x.uri = "already", sink.uri_of(rel)
        return
    ident = Identity(
        rank=x.rank,
        local_rank=None,
        world_size=world,
        node=None,
        attempt=attempt,
        launcher="landed",
        host=host,  # type: ignore[arg-type]  # null: the manifest says the host is unknown
        pid=0,
        accelerator=facts.accelerator,
        device_name=facts.device_name,
        torch_version=None,
        cuda_version=None,
        driver_version=None,
    )
    created = date and f"{date}T00:00:00.000000Z"
    manifest = build_manifest(
        identity=ident,
        job_id=job,
        attempt=attempt,
        capture_id=capture_id,
        created_at_ns=when,
        step_first=None,
        step_last=None,
        profiler={"name": _PROFILERS[facts.kind]},
        tags=tags,
        files=[
            {"path": name, "size_bytes": facts.size_bytes, "sha256": facts.sha256, "kind": LANDABLE_KINDS[facts.kind]}
        ],
    )
    manifest.update(writer=WRITER, created_at=created or utc_timestamp(when))
    manifest.pop("pid", None)
    validate_manifest(manifest)
    x.uri = sink.write(CaptureUpload(rel, ((x.path, name),), encode_manifest(manifest)))
    x.status = "landed"
