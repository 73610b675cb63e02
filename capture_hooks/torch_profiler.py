"""``TraceCapture``: torch.profiler on a schedule, each active cycle committed to the landing zone.

Usage inside a training loop::

    from capture_hooks import TraceCapture

    with TraceCapture(sink="s3://bucket/raw", job_id="llama-7b-0412") as capture:
        for batch in loader:
            train_step(batch)
            capture.step()

Each completed active cycle of the schedule becomes one capture folder (``sink.landing_path``)
holding ``trace.json.gz`` (the Kineto Chrome trace from ``export_chrome_trace``) and, written
last, ``manifest.json`` (``manifest.build_manifest``).

Never breaks training: any failure to start the profiler, step it, export a trace or write it
is logged once per stage (``logging`` logger ``capture_hooks``, WARNING with traceback; repeats at
DEBUG), counted in :attr:`TraceCapture.failures`, and the loop goes on. Only configuration errors
(a job id that is not path-safe, malformed ``TRACELAKE_TAGS``…) raise, at construction — before
the loop.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from typing import Any, Mapping

from capture_hooks.identity import Identity, detect_identity
from capture_hooks.manifest import build_manifest, encode_manifest, file_entry, utc_date
from capture_hooks.sink import CaptureUpload, LandingZoneSink, landing_path, make_path_safe, validate_path_component

__all__ = ["TraceCapture", "parse_tags", "TRACE_NAME"]

logger = logging.getLogger("capture_hooks")

TRACE_NAME = "trace.json.gz"
_TAG_KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:-/")


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
        wait, warmup, active, repeat, skip_first: ``torch.profiler.schedule`` arguments, in steps
            (defaults 1, 1, 3, 1, 0; ``repeat=0`` repeats until the loop ends).
        record_shapes, profile_memory, with_stack, with_flops, with_modules: passed to
            ``torch.profiler.profile`` (defaults True, False, False, False, False).
        storage_options: fsspec options for a URI sink (e.g. ``{"endpoint_url": …}``).
        tmp_dir: folder for the exported trace before it is written to the sink (default: the
            system temp folder); each cycle's temp files are removed after writing.
        env: environment mapping to read (default ``os.environ``; for tests).

    Activities: CPU, plus CUDA when ``torch.cuda.is_available()``; with CUDA, CUDA sync events
    are enabled through ``torch._C._profiler._ExperimentalConfig(enable_cuda_sync_events=True)``
    when this torch has it.

    Attributes:
        enabled: whether capture is on (a sink is configured and the profiler started).
        committed: URIs of the capture folders committed so far, in order.
        failures: number of failures swallowed so far (start, step, export/sink, stop).
        profiler: the underlying ``torch.profiler.profile`` while active, else ``None``.

    Call :meth:`step` once per training iteration (after the optimizer step), like
    ``profile.step()``: ``ProfilerStep#N`` numbers count calls to :meth:`step` from 0.

    Raises:
        ValueError: at construction only, for configuration that is not usable: a job id that is
            not path-safe (``validate_path_component``), a bad attempt, tags or schedule.
    """

    def __init__(
        self,
        sink: str | LandingZoneSink | None = None,
        *,
        job_id: str | None = None,
        attempt: int | None = None,
        tags: Mapping[str, str] | None = None,
        wait: int = 1,
        warmup: int = 1,
        active: int = 3,
        repeat: int = 1,
        skip_first: int = 0,
        record_shapes: bool = True,
        profile_memory: bool = False,
        with_stack: bool = False,
        with_flops: bool = False,
        with_modules: bool = False,
        storage_options: dict[str, Any] | None = None,
        tmp_dir: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        env = os.environ if env is None else env
        self._env = env

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
        self.tags = merged

        for name, value, low in (("wait", wait, 0), ("warmup", warmup, 0), ("active", active, 1),
                                 ("repeat", repeat, 0), ("skip_first", skip_first, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"schedule {name}={value!r} must be an int >= {low}")
        self.schedule = {"skip_first": skip_first, "wait": wait, "warmup": warmup, "active": active, "repeat": repeat}
        self._flags = {
            "record_shapes": bool(record_shapes),
            "profile_memory": bool(profile_memory),
            "with_stack": bool(with_stack),
            "with_flops": bool(with_flops),
            "with_modules": bool(with_modules),
        }
        self._tmp_dir = tmp_dir

        self.committed: list[str] = []
        self.failures = 0
        self.profiler = None
        self._activities: list[str] = []
        self._cuda_sync_events = False
        self._logged: set[str] = set()
        self._identity: Identity | None = None
        self._cycle = 0
        self._record_start: int | None = None
        self._step_before: int | None = None  # step number while inside profiler.step()

    # ------------------------------------------------------------------ public API

    @property
    def enabled(self) -> bool:
        """True while a sink is configured and the profiler is running."""
        return self._sink is not None and self.profiler is not None

    @property
    def sink(self) -> LandingZoneSink | None:
        """The landing-zone sink, or ``None`` when capture is off."""
        return self._sink

    def __enter__(self) -> "TraceCapture":
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
        """Stop the profiler; a partly recorded cycle is still exported and committed. Never raises."""
        prof = self.profiler
        if prof is None:
            return
        try:
            prof.__exit__(None, None, None)
        except Exception as exc:  # noqa: BLE001
            self._fail("stop", exc)
        finally:
            self.profiler = None

    # ------------------------------------------------------------------ internals

    def _make_profiler(self):
        import torch
        from torch.profiler import ProfilerActivity, profile, schedule

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
        """Remember the ProfilerStep number at which the current recording window began."""
        from torch.profiler import ProfilerAction

        prof = self.profiler
        if prof is None:
            return
        if prof.current_action in (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE):
            if self._record_start is None:
                self._record_start = prof.step_num

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

    def _fail(self, stage: str, exc: BaseException) -> None:
        self.failures += 1
        if stage not in self._logged:
            self._logged.add(stage)
            logger.warning(
                "tracelake capture: %s failed (%s: %s); training continues without this capture "
                "(further %s failures are logged at DEBUG)",
                stage, type(exc).__name__, exc, stage, exc_info=exc,
            )
        else:
            logger.debug("tracelake capture: %s failed again: %r", stage, exc)

    def _on_trace_ready(self, prof) -> None:
        """``on_trace_ready`` callback: export the cycle and commit it. Never raises."""
        cycle = self._cycle
        self._cycle += 1
        first = self._record_start
        self._record_start = None
        last = self._step_before if self._step_before is not None else prof.step_num
        try:
            self._export_and_commit(prof, cycle, first, last)
        except Exception as exc:  # noqa: BLE001
            self._fail("export", exc)

    def _export_and_commit(self, prof, cycle: int, first: int | None, last: int | None) -> None:
        if self._identity is None:
            self._identity = detect_identity(self._env)
        identity = self._identity
        now_ns = time.time_ns()
        capture_id = make_path_safe(f"{identity.host}-{identity.pid}-{cycle}-{now_ns}")
        attempt = self._attempt if self._attempt is not None else (identity.attempt or 0)
        relative_dir = landing_path(
            date=utc_date(now_ns), job_id=self.job_id, attempt=attempt, rank=identity.rank, capture_id=capture_id
        )
        assert self._sink is not None
        tmp = tempfile.mkdtemp(prefix="tracelake-", dir=self._tmp_dir)
        try:
            local_trace = os.path.join(tmp, TRACE_NAME)
            prof.export_chrome_trace(local_trace)  # a .gz path is gzipped by torch
            files = [file_entry(local_trace, TRACE_NAME, "kineto_trace")]
            manifest = build_manifest(
                identity=identity,
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
                files=files,
            )
            upload = CaptureUpload(relative_dir, ((local_trace, TRACE_NAME),), encode_manifest(manifest))
            self.committed.append(self._sink.submit(upload))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def _cuda_sync_config():
    """``_ExperimentalConfig(enable_cuda_sync_events=True)`` when this torch supports it, else ``None``."""
    try:
        from torch._C._profiler import _ExperimentalConfig

        return _ExperimentalConfig(enable_cuda_sync_events=True)
    except Exception:  # noqa: BLE001 - older torch: no such option
        return None

