"""torch_xla profiles: ``torch_xla.debug.profiler.start_trace`` / ``stop_trace`` around the profiled steps.

``start_trace(log_dir)`` / ``stop_trace()`` (pytorch/xla ``torch_xla/debug/profiler.py``; the
session is exported by ``TslProfilerSessionWrapper::Export`` with ``also_export_trace_json``) write
``{log_dir}/plugins/profile/{YYYY_MM_DD_HH_MM_SS}/{host}.xplane.pb`` and ``{host}.trace.json.gz``
(``reference/neuron_profiles.md`` §4). The files keep that TensorBoard log-dir layout under
``xla/`` in the capture folder, so ``xprof`` / TensorBoard can read ``{capture}/xla`` directly.

File kinds: ``xplane`` (``*.xplane.pb``, XSpace protobuf), ``xla_trace_json`` (``*.trace.json.gz``
or ``*.trace.json``, Chrome trace), ``xla_other`` (anything else the profiler wrote).
"""

from __future__ import annotations

import importlib.util
import os

from capture_hooks.sink import make_path_safe

__all__ = ["XlaTracer", "collect_xla_files", "xla_available", "xla_kind"]


def xla_available() -> bool:
    """True when ``torch_xla`` is importable (checked without importing it)."""
    try:
        return importlib.util.find_spec("torch_xla") is not None
    except (ImportError, ValueError):
        return False


def xla_kind(name: str) -> str:
    """Manifest file kind of a file written by the XLA profiler (see the module docstring)."""
    if name.endswith(".xplane.pb"):
        return "xplane"
    if name.endswith((".trace.json.gz", ".trace.json")):
        return "xla_trace_json"
    return "xla_other"


class XlaTracer:
    """One ``torch_xla.debug.profiler`` trace session at a time.

    :meth:`start` and :meth:`stop` raise what torch_xla raises (the caller logs and disables XLA
    capture); ``ImportError`` / ``AttributeError`` when torch_xla or ``start_trace`` is missing.
    """

    def __init__(self) -> None:
        self.log_dir: str | None = None

    @property
    def active(self) -> bool:
        """True between :meth:`start` and :meth:`stop`."""
        return self.log_dir is not None

    def start(self, log_dir: str) -> None:
        """``torch_xla.debug.profiler.start_trace(log_dir)``."""
        import torch_xla.debug.profiler as xp  # optional: torch_xla (only on XLA devices)

        os.makedirs(log_dir, exist_ok=True)
        xp.start_trace(log_dir)
        self.log_dir = log_dir

    def stop(self) -> str | None:
        """``torch_xla.debug.profiler.stop_trace()``; returns the log dir of the session (``None`` if none)."""
        log_dir, self.log_dir = self.log_dir, None
        if log_dir is None:
            return None
        import torch_xla.debug.profiler as xp  # optional: torch_xla (only on XLA devices)

        xp.stop_trace()
        return log_dir


def collect_xla_files(log_dir: str, prefix: str) -> list[tuple[str, str]]:
    """``(name, kind)`` of every file under ``log_dir``, names ``{prefix}/{relative path}``.

    Path segments that are not path-safe are renamed in place (``make_path_safe``) so that the
    manifest path and the stored object agree.
    """
    out = []
    for parent, dirs, names in os.walk(log_dir):
        for d in list(dirs):
            safe = make_path_safe(d)
            if safe != d:
                os.rename(os.path.join(parent, d), os.path.join(parent, safe))
                dirs[dirs.index(d)] = safe
        for name in names:
            safe = make_path_safe(name)
            if safe != name:
                os.rename(os.path.join(parent, name), os.path.join(parent, safe))
            rel = os.path.relpath(os.path.join(parent, safe), log_dir).replace(os.sep, "/")
            out.append((f"{prefix}/{rel}", xla_kind(safe)))
    return sorted(out)
