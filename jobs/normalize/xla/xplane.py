"""torch_xla / JAX profiles: ``*.xplane.pb`` → Chrome trace (offline, with ``xprof``) → Kineto path.

The profilers write ``<logdir>/plugins/profile/<run>/<host>.xplane.pb`` (XSpace protobuf) and, for
``start_trace``/``stop_trace`` and ``jax.profiler.trace``, ``<host>.trace.json.gz`` (Chrome trace)
next to it (``reference/neuron_profiles.md`` §4). The Chrome trace is normalized by
:func:`jobs.normalize.kineto.parse.parse_kineto` like a torch.profiler trace, with ``source = "xla"``.

An xplane without a converted sibling is converted here when the optional ``xprof`` package is
importable (verified offline on CPU with xprof 2.24.2: ``xprof.convert.raw_to_tool_data.
xspace_to_tool_data([path], "trace_viewer", {})``; it imports lazily, nothing of it is needed
otherwise). The conversion caps the number of events at 1,000,000 unless
``TF_PROFILER_TRACE_VIEWER_MAX_EVENTS`` is set (openxla/xla PR #44702): :func:`convert_xplane` sets it
to :data:`DEFAULT_MAX_EVENTS` (or ``TRACELAKE_XPROF_MAX_EVENTS``) for the call and flags the trace
``xprof_truncated`` when the output reaches the limit. xprof writes cache files next to its input,
so the bytes are copied to a private temp folder first. Without xprof the file is a quarantined ``captures`` row with
the reason ``needs xprof conversion``.
"""

from __future__ import annotations

import importlib.util
import os
import posixpath
import re
import tempfile
import threading

from jobs.normalize.errors import TraceError

__all__ = [
    "convert_xplane",
    "xprof_available",
    "XprofUnavailable",
    "DEFAULT_MAX_EVENTS",
    "is_xla_trace_path",
    "count_trace_events",
    "max_events",
]

#: Event cap passed to xprof (``TF_PROFILER_TRACE_VIEWER_MAX_EVENTS``); ~2 GB of JSON.
DEFAULT_MAX_EVENTS = 10_000_000
_ENV = "TF_PROFILER_TRACE_VIEWER_MAX_EVENTS"
_LOCK = threading.Lock()  # the cap is a process-wide environment variable


class XprofUnavailable(RuntimeError):
    """``xprof`` (the optional converter) is not installed."""


def xprof_available() -> bool:
    """True when ``xprof.convert.raw_to_tool_data`` can be imported."""
    try:
        return importlib.util.find_spec("xprof") is not None
    except (ImportError, ValueError):
        return False


def max_events() -> int:
    """The event cap: ``TRACELAKE_XPROF_MAX_EVENTS`` when set to an integer, else :data:`DEFAULT_MAX_EVENTS`."""
    try:
        return int(os.environ.get("TRACELAKE_XPROF_MAX_EVENTS", DEFAULT_MAX_EVENTS))
    except ValueError:
        return DEFAULT_MAX_EVENTS


def is_xla_trace_path(path: str) -> bool:
    """True for a Chrome trace written by the XLA/JAX profiler (``…/plugins/profile/<run>/<host>.trace.json[.gz]``)."""
    p = str(path).replace("\\", "/")
    return "/plugins/profile/" in p and posixpath.basename(p).endswith((".trace.json.gz", ".trace.json"))


def count_trace_events(doc: bytes) -> int:
    """Number of non-metadata events (``"ph":"X"``/``"i"``/``"C"``…) in a trace_viewer JSON text, fast."""
    return len(re.findall(rb'"ph"\s*:\s*"[^M"]', doc))


def convert_xplane(
    data: bytes, name: str = "host.xplane.pb", limit: int | None = None, _convert=None
) -> tuple[bytes, list[str]]:
    """Convert one XSpace protobuf to Chrome-trace JSON with xprof's ``trace_viewer`` tool.

    Args:
        data: the ``.xplane.pb`` bytes.
        name: its file name (xprof derives the host name from it).
        limit: event cap (default :func:`max_events`).
        _convert: test hook replacing ``xspace_to_tool_data(paths, tool, params)``.

    Returns:
        ``(trace JSON bytes, flags)``; flags holds ``xprof_truncated`` when the event count reached the cap.

    Raises:
        XprofUnavailable: xprof is not installed.
        TraceError: xprof could not convert the file (the message says why).
    """
    if _convert is None:
        try:
            from xprof.convert import raw_to_tool_data  # optional: xprof (only to convert xplane files)
        except ImportError as exc:
            raise XprofUnavailable(f"xprof not importable: {exc}") from None
        _convert = raw_to_tool_data.xspace_to_tool_data
    limit = limit or max_events()
    base = posixpath.basename(name) or "host.xplane.pb"
    if not base.endswith(".xplane.pb"):
        base += ".xplane.pb"
    with tempfile.TemporaryDirectory(prefix="tracelake-xplane-") as tmp, _LOCK:
        path = os.path.join(tmp, base)
        with open(path, "wb") as f:
            f.write(data)
        old = os.environ.get(_ENV)
        os.environ[_ENV] = str(limit)
        try:
            out, _ctype = _convert([path], "trace_viewer", {"use_saved_result": False})
        except Exception as exc:
            raise TraceError(f"xprof could not convert the xplane: {type(exc).__name__}: {exc}") from None
        finally:
            if old is None:
                os.environ.pop(_ENV, None)
            else:
                os.environ[_ENV] = old
    if not out:
        raise TraceError("xprof could not convert the xplane: empty trace_viewer output")
    doc = out.encode() if isinstance(out, str) else bytes(out)
    flags = ["xprof_converted"]
    if count_trace_events(doc) >= limit:
        flags.append("xprof_truncated")
    return doc, flags
