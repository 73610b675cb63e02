"""tracelake capture hooks: code that runs inside training jobs and writes the landing zone.

Depends only on torch, fsspec and the standard library (it is installed into other people's
jobs). Public API:

- :class:`TraceCapture` — torch.profiler on a schedule; each active cycle is committed as
  ``{root}/date=…/job=…/attempt=…/rank=NNNNN/{capture_id}/{trace.json.gz, manifest.json}``.
- :func:`detect_identity` / :func:`launch_info_from_env` — rank, world size, node, attempt, host,
  accelerator of the calling process.
- :class:`LandingZoneSink`, :func:`landing_path`, :func:`validate_path_component` — the layout.
- :func:`build_manifest` — ``manifest.json`` (schema ``schemas/manifest.v1.json``).

Environment: ``TRACELAKE_SINK``, ``TRACELAKE_JOB_ID``, ``TRACELAKE_TAGS`` (``k=v,k=v``),
``TRACELAKE_ATTEMPT``.
"""

from capture_hooks.identity import Identity, LaunchInfo, detect_identity, launch_info_from_env
from capture_hooks.manifest import SCHEMA_VERSION, build_manifest, encode_manifest, file_entry
from capture_hooks.sink import (
    CaptureUpload,
    LandingZoneSink,
    landing_path,
    make_path_safe,
    validate_path_component,
)
from capture_hooks.torch_profiler import TRACE_NAME, TraceCapture, parse_tags

__all__ = [
    "SCHEMA_VERSION",
    "TRACE_NAME",
    "CaptureUpload",
    "Identity",
    "LandingZoneSink",
    "LaunchInfo",
    "TraceCapture",
    "build_manifest",
    "detect_identity",
    "encode_manifest",
    "file_entry",
    "landing_path",
    "launch_info_from_env",
    "make_path_safe",
    "parse_tags",
    "validate_path_component",
]
