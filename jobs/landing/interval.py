"""Restrict landing-zone discovery to the captures committed in a time interval ``[since, until)``.

What the scheduled ingest (``dags/tracelake_ingest.py``) and ``tracelake run --since … --until …``
use to process only what is new.

*Commit time.* A capture is committed when its ``manifest.json`` lands (``capture_hooks`` writes
it last). Its commit time is the manifest's modification time in the landing zone (local
``mtime``, S3 ``LastModified``, GCS ``updated``): the time it became visible to readers. The
manifest's own ``created_at`` (the writer's clock at export) is only a fallback for stores that
report no time, because a capture spooled on a node and uploaded later would otherwise fall into
an interval that was already processed and never be ingested. A bare trace (no manifest) is
committed at its own modification time.

*Job closure.* Warehouse tables are partitioned by ``(date, job_id)`` and written with dynamic
partition overwrite, so a partition must always be rebuilt from *all* of its captures: if only
the captures committed in the interval were normalized, a job whose ranks land in two different
hours would lose the earlier ranks when the later hour overwrites the partition. The interval
therefore selects the *jobs* that received at least one capture in ``[since, until)``, and every
committed capture of those jobs is normalized again (whatever its commit time). Re-running an
interval rebuilds the same jobs from everything committed for them, so it replaces their
partitions and never loses or duplicates rows.

*Listing by prefix.* A landing zone written by ``capture_hooks`` is laid out by capture date
(``date=YYYY-MM-DD/job=…/…``). An interval then lists only the ``date=`` folders it can touch
(:func:`date_prefixes`): from :data:`LATENESS` before ``since`` (a capture spooled on a node and uploaded
late keeps its creation date) to a day after ``until`` (clock skew), not the whole history. The job
closure then needs the touched jobs' captures in other dates: :func:`discover_interval` lists the date
folders where the warehouse's ``captures`` table already has captures of those jobs (``known``), and no
others. A capture landing more than :data:`LATENESS` after its creation date is found by the next run
without ``since`` (``tracelake run``). A landing zone whose top level is not ``date=`` folders is listed
whole, as before.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import fsspec

from jobs.landing.discover import CaptureFile, Discovery, discover
from jobs.landing.store import listing_failed

# fsspec ``info()`` keys that carry a modification time, in order of preference
# (local: mtime; s3fs: LastModified; gcsfs: updated; adlfs: last_modified; memory: created).
_TIME_KEYS = ("mtime", "LastModified", "last_modified", "updated", "modified", "created")
#: Longest list :func:`summarize_interval` returns (it goes to Airflow's XCom).
SUMMARY_LIST_MAX = 20
#: How long after its creation date a capture may land and still be found by an interval run of a landing zone
#: laid out by date (:func:`date_prefixes`): spooled captures of a node that was cut off for up to 2 days.
LATENESS = timedelta(days=2)
_DATE_FOLDER = re.compile(r"^date=(\d{4}-\d{2}-\d{2})$")


@dataclass
class IntervalSelection:
    """Result of :func:`select_committed`.

    ``files``: the capture files to normalize (every file of every touched job).
    ``new``: capture files committed in ``[since, until)`` (a subset of ``files``).
    ``job_ids``: the touched jobs (discovery job ids), sorted.
    ``undated``: URIs of capture files whose commit time is unknown; they are never selected by an
    interval (run ``tracelake run`` without ``--since``/``--until`` to ingest them).
    """

    files: list[CaptureFile]
    new: list[CaptureFile]
    job_ids: list[str]
    undated: list[str] = field(default_factory=list)


def as_utc(value) -> datetime | None:
    """A timezone-aware UTC ``datetime`` from ``None``, a ``datetime`` or an ISO 8601 string.

    Naive datetimes and strings without an offset are taken as UTC; a trailing ``Z`` is accepted.
    Numbers are seconds since the Unix epoch.

    Raises:
        ValueError: a string that is not ISO 8601 (names the value).
    """
    if value is None or value == "":
        return None
    if isinstance(value, (int, float)):
        return datetime.fromtimestamp(float(value), tz=UTC)
    if isinstance(value, str):
        text = value.strip()
        if text.endswith("Z"):
            text = text[:-1] + "+00:00"
        try:
            value = datetime.fromisoformat(text)
        except ValueError as exc:
            raise ValueError(f"not an ISO 8601 date-time: {value!r}") from exc
    if not isinstance(value, datetime):
        raise ValueError(f"not a date-time: {value!r}")
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def in_interval(t: datetime | None, since: datetime | None, until: datetime | None) -> bool:
    """``since <= t < until`` (an open end when ``since``/``until`` is ``None``); ``False`` when ``t`` is unknown."""
    if t is None:
        return False
    return (since is None or t >= since) and (until is None or t < until)


def commit_key(f: CaptureFile) -> str:
    """The URI whose time commits ``f``: its ``manifest.json``, or the trace file itself when bare."""
    return f.manifest_uri or f.uri


def info_time(info: Mapping) -> datetime | None:
    """Modification time (UTC) from an fsspec ``info()``/``find(detail=True)`` entry, or ``None``.

    Accepts epoch seconds (``mtime``), ``datetime`` objects (``LastModified``) and ISO strings
    (``updated``), whichever key the filesystem uses.
    """
    for key in _TIME_KEYS:
        v = info.get(key)
        if v is None or v == "":
            continue
        try:
            return as_utc(v)
        except ValueError:
            continue
    return None


def manifest_created_at(doc) -> datetime | None:
    """``created_at`` of a manifest document (dict or JSON bytes) as UTC, or ``None`` when absent/invalid."""
    try:
        if isinstance(doc, (bytes, str)):
            doc = json.loads(doc)
        return as_utc(doc.get("created_at"))
    except (ValueError, AttributeError, TypeError):
        return None


def select_committed(
    files: Iterable[CaptureFile], commit_times: Mapping[str, datetime | None], since, until
) -> IntervalSelection:
    """The capture files to normalize for the interval ``[since, until)`` (pure).

    Args:
        files: discovered capture files (:func:`jobs.landing.discover.discover`).
        commit_times: ``{commit_key(f): commit time (UTC) or None}``, see :func:`commit_key`.
        since, until: interval bounds (``datetime``, ISO string or ``None`` for an open end).

    Returns:
        :class:`IntervalSelection`: every file of every job that has at least one file committed in
        the interval (the job closure explained in the module docstring), in discovery order.

    Raises:
        ValueError: ``since`` is not before ``until``, or a bound is not a date-time.
    """
    since, until = as_utc(since), as_utc(until)
    if since is not None and until is not None and since >= until:
        raise ValueError(f"empty interval: since {since.isoformat()} is not before until {until.isoformat()}")
    files = list(files)
    new = [f for f in files if in_interval(commit_times.get(commit_key(f)), since, until)]
    touched = {f.job_id for f in new}
    undated = sorted({f.uri for f in files if commit_times.get(commit_key(f)) is None})
    return IntervalSelection(
        files=[f for f in files if f.job_id in touched], new=new, job_ids=sorted(touched), undated=undated
    )


def commit_times(
    raw_root: str, files: Iterable[CaptureFile], storage_options: dict | None = None, listing: dict | None = None
) -> dict[str, datetime | None]:
    """Commit time of every capture file (edge: lists ``raw_root`` once, unless ``listing`` — the one
    :func:`~jobs.landing.discover.discover` made — is given; reads a manifest only when the store reports no
    time for it).

    Returns:
        ``{commit_key(f): UTC datetime or None}``.
    """
    files = list(files)
    if not files:  # nothing to date: no listing (an interval whose dates hold nothing)
        return {}
    fs, root = fsspec.core.url_to_fs(raw_root, **(storage_options or {}))
    root = root.rstrip("/")
    if not listing:
        listing = {root: fs.info(root)} if fs.isfile(root) else fs.find(root, detail=True)
    times: dict[str, datetime | None] = {}
    for f in files:
        key = commit_key(f)
        if key in times:
            continue
        path = fs._strip_protocol(key)
        info = listing.get(path) or listing.get(posixpath.normpath(path))
        t = info_time(info) if info else None
        if t is None and f.manifest_uri:
            try:
                with fs.open(path, "rb") as fh:
                    t = manifest_created_at(fh.read())
            except OSError:
                t = None
        times[key] = t
    return times


def restrict_to_interval(
    found: Discovery, raw_root: str, since, until, storage_options: dict | None = None
) -> tuple[Discovery, IntervalSelection]:
    """``found`` restricted to the jobs with a capture committed in ``[since, until)``.

    Pending (not yet committed) folders are kept as they are.

    Returns:
        ``(discovery of the selected files, the selection)``.
    """
    times = commit_times(raw_root, found.files, storage_options, found.listing)
    selection = select_committed(found.files, times, since, until)
    return Discovery(files=selection.files, pending=found.pending, listing=found.listing), selection


def date_prefixes(
    raw_root: str, since, until, storage_options: dict | None = None, lateness: timedelta = LATENESS
) -> list[str] | None:
    """The ``date=YYYY-MM-DD`` folders of ``raw_root`` an interval run must list: dates from ``since`` −
    ``lateness`` to ``until`` + 1 day (``until`` open: today + 1 day). ``None`` (list everything) when ``since``
    is open, ``raw_root`` is a file, or its top level holds anything but ``date=`` folders (hidden names aside).

    Raises:
        LandingUnavailable: the store failed while listing the top level.
    """
    since, until = as_utc(since), as_utc(until)
    if since is None:
        return None
    fs, root = fsspec.core.url_to_fs(raw_root, **(storage_options or {}))
    root = root.rstrip("/")
    try:
        if not fs.isdir(root):
            return None
        names = [posixpath.basename(p.rstrip("/")) for p in fs.ls(root, detail=False)]
    except FileNotFoundError:
        return None
    except Exception as exc:  # the store failed: nothing to decide from
        raise listing_failed(raw_root, exc) from exc
    names = [n for n in names if not n.startswith((".", "_"))]
    dates = {n: m.group(1) for n in names if (m := _DATE_FOLDER.match(n))}
    if not names or len(dates) != len(names):
        return None
    lo = (since - lateness).date().isoformat()
    hi = ((until or datetime.now(UTC)) + timedelta(days=1)).date().isoformat()
    return sorted(n for n, d in dates.items() if lo <= d <= hi)


def date_folder(uri: str) -> str | None:
    """The first ``date=YYYY-MM-DD`` folder in ``uri`` (where a capture of a date-laid-out landing zone lives), or
    ``None``."""
    return next((seg for seg in uri.split("/") if _DATE_FOLDER.match(seg)), None)


def discover_interval(
    raw_root: str,
    since,
    until,
    storage_options: dict | None = None,
    known: Callable[[list[str]], set[str]] | None = None,
) -> tuple[Discovery, IntervalSelection]:
    """:func:`restrict_to_interval` of a discovery that lists only what the interval can touch: the
    :func:`date_prefixes` of a landing zone laid out by date, plus, for the job closure, the ``date=`` folders
    ``known(job_ids)`` names for the touched jobs (where the warehouse already has captures of them). Jobs found
    only in those extra folders are not added: the touched jobs are the window's.

    Returns:
        ``(discovery of the selected files, the selection)``.

    Raises:
        FileNotFoundError, LandingUnavailable: as :func:`~jobs.landing.discover.discover`.
        ValueError: ``since`` is not before ``until``.
    """
    prefixes = date_prefixes(raw_root, since, until, storage_options)
    found = discover(raw_root, storage_options, prefixes)
    restricted, sel = restrict_to_interval(found, raw_root, since, until, storage_options)
    if prefixes is None or known is None or not sel.job_ids:
        return restricted, sel
    extra = sorted(set(known(sel.job_ids)) - set(prefixes))
    if not extra:
        return restricted, sel
    more, touched = discover(raw_root, storage_options, extra), set(sel.job_ids)
    files = found.files + [f for f in more.files if f.job_id in touched]
    merged = Discovery(files=files, pending=found.pending + more.pending, listing={**found.listing, **more.listing})
    return restrict_to_interval(merged, raw_root, since, until, storage_options)


def interval_words(since, until) -> str:
    """``[since, until)`` as a person reads it: ``2026-12-03T16:00–17:00`` (one day), ``2026-12-03T16:00–2026-12-04T01:00``
    (two), ``…`` for an open end; times in UTC (:func:`as_utc`)."""
    lo, hi = as_utc(since), as_utc(until)
    left = f"{lo:%Y-%m-%dT%H:%M}" if lo else "…"
    if hi is None:
        return f"{left}–…"
    return f"{left}–{hi:%H:%M}" if lo and hi.date() == lo.date() else f"{left}–{hi:%Y-%m-%dT%H:%M}"


def summarize_interval(raw_root: str, since, until, storage_options: dict | None = None) -> dict:
    """What an interval run would normalize, as a small JSON-ready dict (edge: lists the interval's
    :func:`date_prefixes` of ``raw_root``, or all of it).

    Returns:
        ``{"n_new": captures committed in the interval, "n_files": files to normalize (the job closure within the
        listed folders; the run adds the touched jobs' captures in older dates), "bytes": their stored size,
        "job_ids": touched jobs, "n_pending"/"pending": capture folders not yet committed,
        "n_undated"/"undated": files with no commit time}`` (the two lists cut to their first
        :data:`SUMMARY_LIST_MAX` entries).
    """
    found, sel = discover_interval(raw_root, since, until, storage_options)
    return {
        "n_new": len(sel.new),
        "n_files": len(sel.files),
        "bytes": sum(f.size_bytes or 0 for f in sel.files),
        "job_ids": sel.job_ids,
        "n_pending": len(found.pending),
        "pending": list(found.pending)[:SUMMARY_LIST_MAX],
        "n_undated": len(sel.undated),
        "undated": sel.undated[:SUMMARY_LIST_MAX],
    }
