"""tracelake capture hooks: code that runs inside training jobs and writes the landing zone.

Depends only on torch, fsspec and the standard library (it is installed into other people's
jobs). Public API:

- :class:`TraceCapture` — torch.profiler on a schedule; each active cycle is committed as
  ``{root}/date=…/job=…/attempt=…/rank=NNNNN/{capture_id}/{trace.json.gz, [neuron/…], [xla/…], manifest.json}``,
  uploaded by a background thread through a local spool (retries, backoff, size cap).
- :func:`hf_callback` / :func:`lightning_callback` — the same for the Hugging Face ``Trainer`` and
  PyTorch Lightning (those packages are imported only when these are called).
- :class:`BackgroundUploader`, :class:`Spool`, :func:`drain_spool` — the upload machinery;
  ``drain_spool`` uploads what a finished job left spooled.
- :func:`prepare_neuron_env` — set the Neuron runtime inspect variables early (before the runtime starts).
- :func:`detect_identity` / :func:`launch_info_from_env` — rank, world size, node, attempt, host,
  accelerator of the calling process.
- :class:`LandingZoneSink`, :func:`landing_path`, :func:`validate_path_component` — the layout.
- :func:`build_manifest` — ``manifest.json`` (schema ``schemas/manifest.v1.json``).

Environment (see ``capture_hooks.config``): ``TRACELAKE_SINK``, ``TRACELAKE_JOB_ID``,
``TRACELAKE_TAGS`` (``k=v,k=v``), ``TRACELAKE_ATTEMPT``, ``TRACELAKE_SCHEDULE``,
``TRACELAKE_STORAGE_OPTIONS``, ``TRACELAKE_BACKGROUND``, ``TRACELAKE_SPOOL_DIR``,
``TRACELAKE_SPOOL_MAX_BYTES``, ``TRACELAKE_NEURON``, ``TRACELAKE_XLA``.
"""

from capture_hooks.identity import Identity, LaunchInfo, detect_identity, launch_info_from_env
from capture_hooks.integrations import hf_callback, lightning_callback
from capture_hooks.manifest import SCHEMA_VERSION, build_manifest, encode_manifest, file_entry
from capture_hooks.neuron import prepare_runtime_env as prepare_neuron_env
from capture_hooks.sink import (
    CaptureUpload,
    LandingZoneSink,
    landing_path,
    make_path_safe,
    validate_path_component,
)
from capture_hooks.spool import Spool
from capture_hooks.torch_profiler import TRACE_NAME, TraceCapture, parse_tags
from capture_hooks.upload import BackgroundUploader, drain_spool

__all__ = [
    "SCHEMA_VERSION",
    "TRACE_NAME",
    "BackgroundUploader",
    "CaptureUpload",
    "Identity",
    "LandingZoneSink",
    "LaunchInfo",
    "Spool",
    "TraceCapture",
    "build_manifest",
    "detect_identity",
    "drain_spool",
    "encode_manifest",
    "file_entry",
    "hf_callback",
    "landing_path",
    "launch_info_from_env",
    "lightning_callback",
    "make_path_safe",
    "parse_tags",
    "prepare_neuron_env",
    "validate_path_component",
]
