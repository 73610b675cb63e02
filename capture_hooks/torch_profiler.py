"""``TraceCapture``: torch.profiler on a schedule, each active cycle landed in the landing zone.

Usage inside a training loop::

    from capture_hooks import TraceCapture

    with TraceCapture(sink="s3://bucket/raw", job_id="llama-7b-0412") as capture:
        for batch in loader:
            train_step(batch)
            capture.step()

or, with no arguments, configured entirely from the environment (``capture_hooks.config``):
``TRACELAKE_SINK=s3://bucket/raw TRACELAKE_JOB_ID=… torchrun train.py``.

Each completed active cycle of the schedule becomes one capture folder (``sink.landing_path``)
holding ``trace.json.gz`` (the Kineto Chrome trace from ``export_chrome_trace``), the Neuron and
XLA files of the cycle when those are captured, and, written last, ``manifest.json``
(``manifest.build_manifest``).

What runs on the training thread, at the end of each active cycle: ``export_chrome_trace`` to an
uncompressed JSON in a local spool folder, ``torch_xla`` ``stop_trace`` (when on) and a listing of
the Neuron output folder (when on). Everything else (gzip, copying and converting Neuron output,
hashing, the upload with retries) runs in a background thread (``capture_hooks.upload``); if the
store is unreachable the capture waits in the spool and is uploaded later.

Never breaks training: any failure to start the profiler, step it, export a trace or upload it is
logged once per stage (``logging`` logger ``capture_hooks``, WARNING with traceback; repeats at
DEBUG), counted in :attr:`TraceCapture.failures`, and the loop goes on. Only configuration errors
(a job id that is not path-safe, malformed ``TRACELAKE_TAGS``…) raise, at construction — before
the loop.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import threading
import time
from collections.abc import Mapping
from typing import Any

from capture_hooks.config import env_bool, env_bytes, parse_schedule, parse_storage_options
from capture_hooks.identity import Identity, detect_identity
from capture_hooks.manifest import build_manifest, utc_date
from capture_hooks.neuron import (
    DEFAULT_DEVICE_PROFILE,
    NeuronCollector,
    default_output_dir,
    neuron_available,
    prepare_runtime_env,
)
from capture_hooks.sink import LandingZoneSink, landing_path, make_path_safe, validate_path_component
from capture_hooks.spool import Spool, SpoolFull, default_spool_base, spool_root
from capture_hooks.upload import BackgroundUploader
from capture_hooks.xla import XlaTracer, collect_xla_files, xla_available

__all__ = ["TraceCapture", "parse_tags", "TRACE_NAME"]

logger = logging.getLogger("capture_hooks")

TRACE_NAME = "trace.json.gz"
_RAW_TRACE = "trace.json"  # exported uncompressed on the training thread, gzipped by the worker
_TAG_KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:-/")
_SCHEDULE_DEFAULTS = {"skip_first": 0, "wait": 1, "warmup": 1, "active": 3, "repeat": 1}
DEFAULT_SPOOL_MAX_BYTES = 2 << 30


def parse_tags(text: str | None) -> dict[str, str]:
    """Parse ``TRACELAKE_TAGS`` syntax ``k=v,k=v`` (whitespace around items trimmed; empty → ``{}``).

    Keys: characters ``[A-Za-z0-9_.:/-]``; values: any text without ``,`` (may be empty).

    Raises:
        ValueError: an item without ``=``, an empty or invalid key, or a repeated key.
    """
    tags: dict[str, str] = {}
    if not text or not text.strip():
        return tags
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        if "=" not in item:
            raise ValueError(f"TRACELAKE_TAGS item {item!r} is not key=value")
        key, value = (part.strip() for part in item.split("=", 1))
        _check_tag(key, value)
        if key in tags:
            raise ValueError(f"TRACELAKE_TAGS repeats key {key!r}")
        tags[key] = value
    return tags


def _check_tag(key: Any, value: Any) -> None:
    if not isinstance(key, str) or not key or not set(key) <= _TAG_KEY_CHARS or len(key) > 128:
        raise ValueError(f"tag key {key!r} must be 1-128 characters from [A-Za-z0-9_.:/-]")
    if not isinstance(value, str):
        raise ValueError(f"tag {key!r} value must be a string, got {type(value).__name__}")


def _attempt_value(value: Any, what: str) -> int:
    try:
        attempt = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} {value!r} is not an integer") from None
    if isinstance(value, bool) or attempt < 0 or (isinstance(value, float) and value != attempt):
        raise ValueError(f"{what} {value!r} must be a non-negative integer")
    return attempt


def _default_job_id(env: Mapping[str, str]) -> str:
    """Job id when none is configured: the SLURM job id, torchrun's rendezvous id, else ``unknown``.

    These are the same on every rank of a job; they are made path-safe, not rejected.
    """
    for name in ("SLURM_JOB_ID", "TORCHELASTIC_RUN_ID"):
        value = (env.get(name) or "").strip()
        if value and value != "none":
            return make_path_safe(value)
    return "unknown"


class TraceCapture:
    """A context manager running ``torch.profiler.profile`` on a schedule and landing each cycle.

    Args:
        sink: landing-zone root (local folder or fsspec URI such as ``s3://bucket/prefix``) or a
            :class:`~capture_hooks.sink.LandingZoneSink`. Default: ``TRACELAKE_SINK``; when neither
            is set, capture is **off** and the object is a no-op.
        job_id: landing-zone job id. Default: ``TRACELAKE_JOB_ID``, else ``SLURM_JOB_ID``, else
            ``TORCHELASTIC_RUN_ID`` (made path-safe), else ``unknown``.
        attempt: attempt number (>= 0). Default: ``TRACELAKE_ATTEMPT``, else the launcher's restart
            count (``TORCHELASTIC_RESTART_COUNT`` / ``SLURM_RESTART_COUNT``), else 0.
        tags: user tags ``{str: str}``, merged over ``TRACELAKE_TAGS`` (``k=v,k=v``); the argument wins.
            The tag ``job_name`` (default ``TRACELAKE_JOB_NAME``, else ``SLURM_JOB_NAME``) names a
            recurring job whose runs are compared for regressions; ``model`` is the model tag of fleet statistics.
        wait, warmup, active, repeat, skip_first: ``torch.profiler.schedule`` arguments, in steps.
            Default: ``TRACELAKE_SCHEDULE``, else 1, 1, 3, 1, 0 (``repeat=0`` repeats until the loop ends).
        record_shapes, profile_memory, with_stack, with_flops, with_modules: passed to
            ``torch.profiler.profile`` (defaults True, False, False, False, False).
        storage_options: fsspec options for a URI sink (e.g. ``{"endpoint_url": …}``). Default:
            ``TRACELAKE_STORAGE_OPTIONS`` (JSON).
        tmp_dir: folder where each cycle is assembled before it enters the spool (default: inside
            the spool folder); nothing is left in it.
        env: environment mapping to read (default ``os.environ``; for tests). Neuron runtime
            variables are written to it when it is mutable.
        background: upload in a background thread (default; ``TRACELAKE_BACKGROUND=0`` or False
            uploads on the training thread at the end of each cycle).
        spool_dir: spool base folder (default ``TRACELAKE_SPOOL_DIR``, else ``{temp}/tracelake-spool``);
            captures wait in ``{spool_dir}/job=…/rank=…/sink=…/`` until uploaded.
        spool_max_bytes: spool size cap in bytes (default ``TRACELAKE_SPOOL_MAX_BYTES``, else 2 GiB);
            a capture that does not fit is dropped (counted in :attr:`dropped`).
        upload_retries, upload_backoff_s, upload_backoff_max_s: attempts per upload round and the
            exponential backoff between them (defaults 3, 0.5 s, 8 s).
        queue_size: capacity of the upload wake-up queue (default 16).
        retry_interval_s: pause between upload rounds while captures are pending (default 30 s).
        flush_timeout_s: how long :meth:`stop` waits for pending uploads (default 60 s; the rest
            stays spooled and keeps being retried until exit).
        exit_timeout_s: how long the interpreter-exit hook waits for pending uploads (default 30 s).
        neuron: capture Neuron runtime profiles. Default ``TRACELAKE_NEURON``, else on when
            ``torch_neuronx`` is importable. When on, the ``NEURON_RT_INSPECT_*`` variables are set
            here (construct the object before the first Neuron device use).
        neuron_output_dir: inspect output folder (default ``NEURON_RT_INSPECT_OUTPUT_DIR`` if set,
            else ``{temp}/tracelake-neuron/{job_id}``).
        neuron_device_profile: ``NEURON_RT_INSPECT_DEVICE_PROFILE`` (``0``, ``1``/``model``, ``session``);
            default: the variable if set, else ``session``.
        neuron_convert: convert with ``neuron-explorer`` / ``neuron-profile`` when on ``PATH`` (default True).
        neuron_conversion_timeout_s: per converter command (default 900 s).
        xla: wrap the profiled steps in ``torch_xla.debug.profiler.start_trace``/``stop_trace``.
            Default ``TRACELAKE_XLA``, else on when ``torch_xla`` is importable and Neuron capture is
            off (the Neuron docs warn that the runtime inspector and framework profilers conflict).

    Activities: CPU, plus CUDA when ``torch.cuda.is_available()``; with CUDA, CUDA sync events
    are enabled through ``torch._C._profiler._ExperimentalConfig(enable_cuda_sync_events=True)``
    when this torch has it.

    Attributes:
        enabled: whether capture is on (a sink is configured and the profiler started).
        committed: URIs of the capture folders committed so far, oldest first (filled by the upload
            thread; complete after :meth:`stop` / :meth:`flush` returned True). Includes captures
            that an earlier process of the same job, rank and sink left in the spool.
        failures: failures swallowed so far: training-thread failures (start, step, export, stop)
            plus captures whose upload failed at least once (even if a later retry succeeded).
        dropped: captures discarded because the spool was full.
        pending: captures spooled and not yet uploaded.
        profiler: the underlying ``torch.profiler.profile`` while active, else ``None``.

    Call :meth:`step` once per training iteration (after the optimizer step), like
    ``profile.step()``: ``ProfilerStep#N`` numbers count calls to :meth:`step` from 0.

    Raises:
        ValueError: at construction only, for configuration that is not usable: a job id that is
            not path-safe (``validate_path_component``), a bad attempt, tags, schedule or
            ``TRACELAKE_*`` variable.
    """

    def __init__(
        self,
        sink: str | LandingZoneSink | None = None,
        *,
        job_id: str | None = None,
        attempt: int | None = None,
        tags: Mapping[str, str] | None = None,
        wait: int | None = None,
        warmup: int | None = None,
        active: int | None = None,
        repeat: int | None = None,
        skip_first: int | None = None,
        record_shapes: bool = True,
        profile_memory: bool = False,
        with_stack: bool = False,
        with_flops: bool = False,
        with_modules: bool = False,
        storage_options: dict[str, Any] | None = None,
        tmp_dir: str | None = None,
        env: Mapping[str, str] | None = None,
        background: bool | None = None,
        spool_dir: str | None = None,
        spool_max_bytes: int | None = None,
        upload_retries: int = 3,
        upload_backoff_s: float = 0.5,
        upload_backoff_max_s: float = 8.0,
        queue_size: int = 16,
        retry_interval_s: float = 30.0,
        flush_timeout_s: float = 60.0,
        exit_timeout_s: float = 30.0,
        neuron: bool | None = None,
        neuron_output_dir: str | None = None,
        neuron_device_profile: str | None = None,
        neuron_convert: bool = True,
        neuron_conversion_timeout_s: float = 900.0,
        xla: bool | None = None,
    ) -> None:
        env = os.environ if env is None else env
        self._env = env

        if storage_options is None:
            storage_options = parse_storage_options(env.get("TRACELAKE_STORAGE_OPTIONS"))
        if sink is None:
            sink = (env.get("TRACELAKE_SINK") or "").strip() or None
        if sink is None:
            self._sink: LandingZoneSink | None = None
        elif isinstance(sink, LandingZoneSink):
            self._sink = sink
        else:
            self._sink = LandingZoneSink(sink, storage_options=storage_options)

        if job_id is None:
            env_job = (env.get("TRACELAKE_JOB_ID") or "").strip()
            job_id = env_job or _default_job_id(env)
        self.job_id = validate_path_component(job_id, "job_id")

        if attempt is None and (env.get("TRACELAKE_ATTEMPT") or "").strip():
            attempt = _attempt_value(env["TRACELAKE_ATTEMPT"].strip(), "TRACELAKE_ATTEMPT")
        self._attempt = None if attempt is None else _attempt_value(attempt, "attempt")

        merged = parse_tags(env.get("TRACELAKE_TAGS"))
        for key, value in (tags or {}).items():
            _check_tag(key, value)
            merged[key] = value
        if "job_name" not in merged:  # runs of one recurring job share a name (fleet regressions)
            name = (env.get("TRACELAKE_JOB_NAME") or env.get("SLURM_JOB_NAME") or "").strip()
            if name:
                name = name[:128]
                _check_tag("job_name", name)
                merged["job_name"] = name
        self.tags = merged

        from_env = parse_schedule(env.get("TRACELAKE_SCHEDULE"))
        given = {"skip_first": skip_first, "wait": wait, "warmup": warmup, "active": active, "repeat": repeat}
        schedule = {k: (v if v is not None else from_env.get(k, _SCHEDULE_DEFAULTS[k])) for k, v in given.items()}
        for name, low in (("wait", 0), ("warmup", 0), ("active", 1), ("repeat", 0), ("skip_first", 0)):
            value = schedule[name]
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"schedule {name}={value!r} must be an int >= {low}")
        self.schedule = schedule
        self._flags = {
            "record_shapes": bool(record_shapes),
            "profile_memory": bool(profile_memory),
            "with_stack": bool(with_stack),
            "with_flops": bool(with_flops),
            "with_modules": bool(with_modules),
        }
        self._tmp_dir = tmp_dir

        # upload settings
        env_background = env_bool(env, "TRACELAKE_BACKGROUND")
        self._background = (
            background if background is not None else (env_background if env_background is not None else True)
        )
        self._spool_base = spool_dir or default_spool_base(env)
        self._spool_max_bytes = (
            spool_max_bytes or env_bytes(env, "TRACELAKE_SPOOL_MAX_BYTES") or DEFAULT_SPOOL_MAX_BYTES
        )
        if upload_retries < 1 or queue_size < 1 or flush_timeout_s < 0 or exit_timeout_s < 0:
            raise ValueError("upload_retries and queue_size must be >= 1; flush/exit timeouts >= 0")
        self._upload_settings = dict(
            retries=upload_retries,
            backoff_s=upload_backoff_s,
            backoff_max_s=upload_backoff_max_s,
            queue_size=queue_size,
            retry_interval_s=retry_interval_s,
            exit_timeout_s=exit_timeout_s,
            convert_neuron=bool(neuron_convert),
            conversion_timeout_s=neuron_conversion_timeout_s,
        )
        self._flush_timeout_s = flush_timeout_s

        # Neuron and XLA
        env_neuron = env_bool(env, "TRACELAKE_NEURON")
        self._neuron = bool(
            neuron if neuron is not None else (env_neuron if env_neuron is not None else neuron_available())
        )
        self._neuron_settings: dict[str, Any] | None = None
        self._neuron_collector: NeuronCollector | None = None
        self._neuron_convert = bool(neuron_convert)
        if self._neuron and self._sink is not None:
            target = env if isinstance(env, dict) or env is os.environ else os.environ
            out_dir = (
                neuron_output_dir
                or (env.get("NEURON_RT_INSPECT_OUTPUT_DIR") or "").strip()
                or default_output_dir(self.job_id)
            )
            if neuron_output_dir:  # an explicit argument wins over the environment
                target["NEURON_RT_INSPECT_OUTPUT_DIR"] = neuron_output_dir
            if neuron_device_profile:
                prepare_runtime_env(out_dir, neuron_device_profile, {})  # validates the value
                target["NEURON_RT_INSPECT_DEVICE_PROFILE"] = neuron_device_profile
            effective = prepare_runtime_env(out_dir, neuron_device_profile or DEFAULT_DEVICE_PROFILE, target)
            self._neuron_settings = {
                "inspect_output_dir": effective["NEURON_RT_INSPECT_OUTPUT_DIR"],
                "device_profile": effective["NEURON_RT_INSPECT_DEVICE_PROFILE"],
            }
            self._neuron_collector = NeuronCollector(effective["NEURON_RT_INSPECT_OUTPUT_DIR"])
        env_xla = env_bool(env, "TRACELAKE_XLA")
        want_xla = (
            xla if xla is not None else (env_xla if env_xla is not None else (xla_available() and not self._neuron))
        )
        self._xla: XlaTracer | None = XlaTracer() if want_xla and self._sink is not None else None

        self.committed: list[str] = []
        self._failures = 0
        self.dropped = 0
        self.profiler = None
        self._activities: list[str] = []
        self._cuda_sync_events = False
        self._logged: set[str] = set()
        self._identity: Identity | None = None
        self._spool: Spool | None = None
        self._uploader: BackgroundUploader | None = None
        self._cycle_staging: str | None = None
        self._cycle = 0
        self._record_start: int | None = None
        self._step_before: int | None = None  # step number while inside profiler.step()
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ public API

    @property
    def enabled(self) -> bool:
        """True while a sink is configured and the profiler is running."""
        return self._sink is not None and self.profiler is not None

    @property
    def sink(self) -> LandingZoneSink | None:
        """The landing-zone sink, or ``None`` when capture is off."""
        return self._sink

    @property
    def failures(self) -> int:
        """Swallowed failures: training-thread failures plus captures whose upload failed at least once."""
        return self._failures + (len(self._uploader.failed) if self._uploader is not None else 0)

    @property
    def pending(self) -> int:
        """Captures spooled and not yet uploaded."""
        return self._uploader.pending if self._uploader is not None else 0

    @property
    def spool_dir(self) -> str | None:
        """This capture's spool folder (known after the first capture), else ``None``."""
        return self._spool.root if self._spool is not None else None

    @property
    def neuron(self) -> bool:
        """Whether Neuron runtime profiles are collected."""
        return self._neuron and self._sink is not None

    @property
    def xla(self) -> bool:
        """Whether torch_xla traces are taken around the profiled steps."""
        return self._xla is not None

    def __enter__(self) -> TraceCapture:
        self.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        self.stop()
        return False  # never swallow the training loop's own exception

    def start(self) -> None:
        """Build and start the profiler (no-op when capture is off). Failures are logged, not raised."""
        if self._sink is None or self.profiler is not None:
            return
        try:
            self.profiler = self._make_profiler()
            self.profiler.__enter__()
            self._note_recording()
        except Exception as exc:  # noqa: BLE001 - must not reach the training loop
            self.profiler = None
            self._fail("start", exc)

    def step(self) -> None:
        """Mark the end of one training iteration (``profile.step()``). Never raises."""
        prof = self.profiler
        if prof is None:
            return
        try:
            self._step_before = prof.step_num
            prof.step()
            self._note_recording()
        except Exception as exc:  # noqa: BLE001
            self._fail("step", exc)
            self._abandon()
        finally:
            self._step_before = None

    def stop(self) -> None:
        """Stop the profiler (a partly recorded cycle is still landed) and wait for pending uploads.

        Waits for one upload round, at most ``flush_timeout_s`` (0: do not wait, e.g. when capture
        stops in the middle of a run). When the store is unreachable the round ends after one
        capture's retries; what is not uploaded stays spooled and is retried in the background every
        ``retry_interval_s`` and at interpreter exit. Never raises.
        """
        prof = self.profiler
        if prof is not None:
            try:
                prof.__exit__(None, None, None)
            except Exception as exc:  # noqa: BLE001
                self._fail("stop", exc)
            finally:
                self.profiler = None
        self._discard_cycle_staging()
        self.flush(self._flush_timeout_s, close_when_done=True)

    def flush(self, timeout: float | None = 60.0, *, close_when_done: bool = False) -> bool:
        """Run an upload round now and wait for it, at most ``timeout`` seconds. Never raises.

        Returns:
            True when nothing is pending afterwards (every capture so far is committed).
        """
        uploader = self._uploader
        if uploader is None:
            return True
        try:
            ok = uploader.flush(timeout)
            if ok and close_when_done:
                uploader.close(0)
            return ok
        except Exception as exc:  # noqa: BLE001
            self._fail("flush", exc)
            return False

    # ------------------------------------------------------------------ internals

    def _make_profiler(self):
        import torch  # heavy: torch
        from torch.profiler import ProfilerActivity, profile, schedule  # heavy: torch

        activities = [ProfilerActivity.CPU]
        self._activities = ["cpu"]
        experimental_config = None
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
            self._activities.append("cuda")
            experimental_config = _cuda_sync_config()
        self._cuda_sync_events = experimental_config is not None
        kwargs: dict[str, Any] = {}
        if experimental_config is not None:
            kwargs["experimental_config"] = experimental_config
        return profile(
            activities=activities,
            schedule=schedule(**self.schedule),
            on_trace_ready=self._on_trace_ready,
            **self._flags,
            **kwargs,
        )

    def _note_recording(self) -> None:
        """Remember the ProfilerStep number at which the current recording window began; start XLA there."""
        from torch.profiler import ProfilerAction  # heavy: torch

        prof = self.profiler
        if prof is None:
            return
        if prof.current_action in (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE):
            if self._record_start is None:
                self._record_start = prof.step_num
                if self._xla is not None:
                    self._start_xla()

    def _start_xla(self) -> None:
        try:
            _, spool, _ = self._runtime()
            self._discard_cycle_staging()
            self._cycle_staging = spool.new_staging(f"cycle{self._cycle}")
            self._xla.start(os.path.join(self._cycle_staging, "xla"))
        except Exception as exc:  # noqa: BLE001
            self._fail("xla", exc)
            self._xla = None  # off for the rest of the run
            self._discard_cycle_staging()

    def _discard_cycle_staging(self) -> None:
        if self._xla is not None and self._xla.active:
            try:
                self._xla.stop()
            except Exception as exc:  # noqa: BLE001
                self._fail("xla", exc)
        if self._cycle_staging is not None:
            shutil.rmtree(self._cycle_staging, ignore_errors=True)
            self._cycle_staging = None

    def _abandon(self) -> None:
        """Best effort stop of a profiler that failed mid-step; capture stays off afterwards."""
        prof, self.profiler = self.profiler, None
        if prof is None:
            return
        try:
            prof.on_trace_ready = None
            prof.__exit__(None, None, None)
        except Exception:  # noqa: BLE001
            logger.debug("tracelake capture: could not stop the profiler after a failure", exc_info=True)
        self._discard_cycle_staging()

    def _fail(self, stage: str, exc: BaseException) -> None:
        with self._lock:
            self._failures += 1
            first = stage not in self._logged
            self._logged.add(stage)
        if first:
            logger.warning(
                "tracelake capture: %s failed (%s: %s); training continues without this capture "
                "(further %s failures are logged at DEBUG)",
                stage,
                type(exc).__name__,
                exc,
                stage,
                exc_info=exc,
            )
        else:
            logger.debug("tracelake capture: %s failed again: %r", stage, exc)

    def _runtime(self) -> tuple[Identity, Spool, BackgroundUploader]:
        """Identity, spool and uploader, created at the first capture (rank is known by then)."""
        if self._identity is None:
            self._identity = detect_identity(self._env)
        if self._spool is None:
            assert self._sink is not None
            root = spool_root(self._spool_base, self._sink.root, self.job_id, self._identity.rank)
            self._spool = Spool(root, self._spool_max_bytes, staging_parent=self._tmp_dir)
        if self._uploader is None:
            self._uploader = BackgroundUploader(
                self._sink,
                self._spool,
                background=self._background,
                on_commit=self.committed.append,
                **self._upload_settings,
            )
        return self._identity, self._spool, self._uploader

    def _on_trace_ready(self, prof) -> None:
        """``on_trace_ready`` callback: export the cycle into the spool and wake the uploader. Never raises."""
        cycle = self._cycle
        self._cycle += 1
        first = self._record_start
        self._record_start = None
        last = self._step_before if self._step_before is not None else prof.step_num
        try:
            name = self._export_and_spool(prof, cycle, first, last)
        except SpoolFull as exc:
            self.dropped += 1
            self._fail("spool", exc)
            return
        except Exception as exc:  # noqa: BLE001
            self._fail("export", exc)
            return
        try:
            assert self._uploader is not None
            self._uploader.submit(name)
        except Exception as exc:  # noqa: BLE001
            self._fail("upload", exc)

    def _export_and_spool(self, prof, cycle: int, first: int | None, last: int | None) -> str:
        identity, spool, _ = self._runtime()
        assert self._sink is not None
        now_ns = time.time_ns()
        capture_id = make_path_safe(f"{identity.host}-{identity.pid}-{cycle}-{now_ns}")
        attempt = self._attempt if self._attempt is not None else (identity.attempt or 0)
        relative_dir = landing_path(
            date=utc_date(now_ns), job_id=self.job_id, attempt=attempt, rank=identity.rank, capture_id=capture_id
        )
        staging, self._cycle_staging = self._cycle_staging, None
        if staging is None:
            staging = spool.new_staging(capture_id)
        try:
            files: list[dict[str, Any]] = []
            xla_info = self._stop_xla(staging, files)
            prof.export_chrome_trace(os.path.join(staging, _RAW_TRACE))
            files.insert(0, {"name": _RAW_TRACE, "kind": "kineto_trace", "gzip": True})
            neuron = self._neuron_plan()
            accelerator = identity.accelerator
            if neuron is not None:
                accelerator = "neuron"
            elif (
                self._xla is not None
                and accelerator == "cpu"
                and (self._env.get("PJRT_DEVICE") or "").upper() not in ("", "CPU")
            ):
                accelerator = "xla"
            manifest = build_manifest(
                identity=dataclasses.replace(identity, accelerator=accelerator),
                job_id=self.job_id,
                attempt=attempt,
                capture_id=capture_id,
                created_at_ns=now_ns,
                step_first=first,
                step_last=last if first is not None else None,
                profiler={
                    "name": "torch.profiler",
                    "schedule": dict(self.schedule),
                    "activities": list(self._activities),
                    **self._flags,
                    "cuda_sync_events": self._cuda_sync_events,
                    "cycle": cycle,
                },
                tags=self.tags,
                files=[],
            )
            meta = {
                "version": 1,
                "sink": self._sink.root,
                "relative_dir": relative_dir,
                "manifest": manifest,
                "files": files,
                "neuron": neuron,
                "xla": xla_info,
            }
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return spool.commit(staging, capture_id, meta, now_ns)

    def _stop_xla(self, staging: str, files: list[dict[str, Any]]) -> dict[str, Any] | None:
        """Stop the cycle's XLA trace and list its files (moved into ``staging`` if needed)."""
        if self._xla is None or not self._xla.active:
            return None
        try:
            log_dir = self._xla.stop()
            if log_dir is None:
                return None
            target = os.path.join(staging, "xla")
            if os.path.abspath(log_dir) != os.path.abspath(target):
                shutil.move(log_dir, target)
            found = collect_xla_files(target, "xla")
        except Exception as exc:  # noqa: BLE001 - keep the torch.profiler trace
            self._fail("xla", exc)
            return {"error": f"{type(exc).__name__}: {exc}"[:500], "files": 0}
        files.extend({"name": name, "kind": kind} for name, kind in found)
        return {"files": len(found)}

    def _neuron_plan(self) -> dict[str, Any] | None:
        if self._neuron_collector is None:
            return None
        try:
            sources = self._neuron_collector.plan()
        except Exception as exc:  # noqa: BLE001
            self._fail("neuron", exc)
            sources = []
        return {"sources": sources, "convert": self._neuron_convert, "settings": dict(self._neuron_settings or {})}


def _cuda_sync_config():
    """``_ExperimentalConfig(enable_cuda_sync_events=True)`` when this torch supports it, else ``None``."""
    try:
        from torch._C._profiler import _ExperimentalConfig  # heavy: torch

        return _ExperimentalConfig(enable_cuda_sync_events=True)
    except Exception:  # noqa: BLE001 - older torch: no such option
        return None
