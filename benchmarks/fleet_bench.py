#!/usr/bin/env python3
"""End-to-end fleet benchmark: a synthetic landing zone of many jobs × ranks × steps, the whole pipeline
(``run_pipeline``: normalize, validate, analyze, validate, fleet statistics, MLflow) on Spark ``local[1]``
and ``local[2]``, for two fleet sizes.

**The fleet** (built once in a temp folder, deterministic for a ``--seed``) is made from real corpus traces
and written the way ``capture_hooks`` writes a landing zone (``landing_path`` layout, ``trace.json.gz`` at
gzip level 1, ``manifest.json`` from ``build_manifest``/``file_entry``, written last):

* *DLRM jobs*: the corpus' matched 8-rank DLRM set (``torch/param/dlrm_kineto``: one ProfilerStep, NCCL
  all-to-all + all-reduce, ranks 0-7 on one host clock). Each rank's step is repeated ``--steps`` times back
  to back (period = the longest rank's span + 1 ms, the same on every rank so that calls still complete
  together; correlation / ``External id`` / flow ids made unique per copy; ``ProfilerStep#10`` becomes
  ``#10``, ``#11``, …). Then each rank's timeline is perturbed: scaled around the job's start by
  ``1 ± --scale-jitter`` (a slightly faster / slower rank) and shifted by a clock offset of up to
  ``± --clock-jitter-us`` (what the collective clock alignment has to undo), all drawn from ``--seed``.
* *single-GPU jobs*: the single-GPU corpus traces of :data:`SINGLE_GPU`, one job of one rank each per
  fleet unit, scaled and shifted the same way. A unit is one DLRM job + these; fleet S has ``--size`` units.
* *one injected straggler*: in one DLRM job (drawn from ``--seed``), rank ``--straggler-rank`` gets
  ``--delay-ms`` of extra compute before every collective: the GPU kernel running before each of its
  communication kernels is stretched by the delay (everything after it moves later), while on the other
  ranks each communication kernel waits that long for it (the kernel is extended by the delay at its
  start, everything after it moves later). Collectives still complete together; the straggler starts each
  one ``delay`` later than it did. The default rank is 2 because rank 7 is the DLRM set's own straggler
  (it arrives last at every call, by ≤ 0.51 ms over rank 2): with the default 1 ms delay rank 2 arrives
  last at every call of that job, and rank 7 stays the straggler of every other DLRM job.

**Measured**, each run a fresh process (``TRACELAKE_SPARK_MASTER=local[N]``, pinned to N CPUs with
``sched_setaffinity``, inherited by the JVM and the Python workers):

* end-to-end: :func:`jobs.pipeline.run.run_pipeline` with MLflow on a SQLite file in the temp folder; the
  stages are timed from the pipeline's own progress hooks (``Starting Spark``, then the declared stages'
  ``Stage.title`` of :data:`jobs.pipeline.stages.INGEST`: ``Normalizing``, the two ``Validating`` stages,
  ``Analyzing``, ``Fleet statistics``, ``Logging`` = MLflow runs and HTML reports; any other stage text
  counts as ``other`` and every span is in the JSON; ``read_tables`` = the result tables ``run_pipeline``
  reads back after the last stage for its summary, timed by wrapping ``jobs.pipeline.run.read_pandas``;
  reads inside a stage count for that stage). MB/s and events/s are the
  uncompressed JSON MB (10^6 bytes) and the ``events`` rows over the pipeline's wall time *without* the
  Spark start (a fixed cost of a few seconds that a long-lived cluster does not pay per batch; printed
  as its own stage);
* normalize only: :func:`jobs.normalize.job.run_normalize` alone on the larger fleet's landing zone in a
  fresh process, the same cores (MB/s over its wall time, without the Spark start). Target: end-to-end
  MB/s ≥ half of it;
* scaling: end-to-end MB/s with 2 cores / with 1 core (target ≥ 1.8×);
* CPU: user + system seconds of every process of the run (driver Python, the JVM, which outlives the
  driver, and the Python workers): this script is their subreaper (``PR_SET_CHILD_SUBREAPER``) and reads
  ``RUSAGE_CHILDREN`` once they have all exited, plus the sampled CPU of the Python workers, which
  PySpark's daemon leaves to the kernel to reap (no rusage counts them; :func:`run_pinned`);
* memory: the process tree of the run is sampled every ``--sample-s`` (``/proc/<pid>/status``): the JVM
  (``VmHWM``: driver and, in local mode, the executor), the Python workers (the sum of their RSS at each
  sample, max over samples; and the largest single worker's ``VmHWM``) and the driver Python (``VmHWM``).
  Two fleet sizes (S and 2S) show whether it stays bounded as the fleet grows;
* the straggler: rank(s) of the ``straggler_rank`` finding of the injected job (must be exactly
  ``[--straggler-rank]``) and the rank with the most last arrivals in its ``collectives``; for the other
  DLRM jobs the set of ranks their findings name (expected: the corpus' own rank 7).

Usage (from the repo root)::

    .venv/bin/python benchmarks/fleet_bench.py [--size 2] [--steps 3] [--cores 1,2] [--seed 7]
        [--straggler-rank 2] [--delay-ms 1.0] [--skip-normalize-only] [--only-size S|2S]
        [--workdir DIR] [--keep] [--timeout 3600] [--json OUT]

Exit status 0 even when a target is missed (a measurement, not a test); 1 when a run failed; 2 on usage errors.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DLRM_DIR = "torch/param/dlrm_kineto"
#: Single-GPU corpus traces of the fleet (corpus key, short name): each fleet unit has one job of each, so
#: that fleet 2S is exactly twice fleet S.
SINGLE_GPU = (
    ("torch/HolisticTraceAnalysis/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz", "v100-ns"),
    ("torch/HolisticTraceAnalysis/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz", "alexnet"),
    ("torch/HolisticTraceAnalysis/triton_example/triton_example.json.gz", "triton"),
)
MB = 1e6
TARGET_SCALING = 1.8
TARGET_E2E_VS_NORMALIZE = 0.5
#: pipeline progress text prefix -> stage name: ``Starting Spark`` of jobs/pipeline/run.py, then the
#: ``Stage.title`` of each stage of ``jobs.pipeline.stages.INGEST``
STAGES = (
    ("Starting Spark", "spark_start"),
    ("Normalizing", "normalize"),
    ("Validating captures", "validate"),
    ("Analyzing", "analyze"),
    ("Validating the analysis", "validate"),
    ("Fleet statistics", "fleet"),
    ("Logging", "mlflow"),
)
STAGE_ORDER = ("spark_start", "normalize", "validate", "analyze", "fleet", "mlflow", "read_tables", "other")
GZIP_LEVEL = 1  # capture_hooks.finalize.GZIP_LEVEL (imported when available)
#: default perturbations of :func:`build_fleet` (the ``--steps``, ``--seed``, ... options of this script)
GENERATOR_DEFAULTS = dict(steps=3, seed=7, straggler_rank=2, delay_ms=1.0, scale_jitter=5e-4, clock_jitter_us=1000.0)


# --------------------------------------------------------------------------------------------------
# building the fleet
# --------------------------------------------------------------------------------------------------


def _loads(data: bytes):
    try:
        import orjson

        return orjson.loads(data)
    except ImportError:  # pragma: no cover
        return json.loads(data)


def _dumps(obj) -> bytes:
    try:
        import orjson

        return orjson.dumps(obj)
    except ImportError:  # pragma: no cover
        return json.dumps(obj, separators=(",", ":")).encode()


def kineto_bytes(doc: dict) -> bytes:
    """``doc`` laid out as Kineto writes a trace: one top-level key per line as ``"key": value`` (with the
    space: HTA 0.5.0 finds a file's rank with the regex ``"rank":\\s+(\\d+)`` line by line, and defaults
    to rank 0 without it), ``traceEvents`` last, the events themselves compact."""
    head = [f"{json.dumps(k)}: {json.dumps(v)}" for k, v in doc.items() if k != "traceEvents"]
    return (
        ("{\n" + "".join(h + ",\n" for h in head) + '"traceEvents": ').encode()
        + _dumps(doc.get("traceEvents", []))
        + b"\n}\n"
    )


def load_trace(path: str) -> dict:
    """A Kineto trace file (``.json`` or ``.json.gz``) as a dict with a ``traceEvents`` list."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    doc = _loads(data)
    if isinstance(doc, list):
        doc = {"traceEvents": doc}
    return doc


def _is_comm_kernel(e: dict) -> bool:
    return (
        e.get("ph") == "X"
        and e.get("cat") in ("kernel", "Kernel")
        and str(e.get("name", "")).startswith(("ncclKernel", "ncclDevKernel", "rcclKernel"))
    )


def _is_compute_kernel(e: dict) -> bool:
    return e.get("ph") == "X" and e.get("cat") in ("kernel", "Kernel") and not _is_comm_kernel(e)


def _end(e: dict):
    return e["ts"] + (e.get("dur") or 0)


def _is_once(e: dict) -> bool:
    """Events kept once per trace (not per step copy): metadata, the profiler span, instant markers."""
    return e.get("ph") in ("M", "i") or e.get("cat") == "Trace"


def repeat_steps(doc: dict, copies: int, period, id_stride: int) -> list[dict]:
    """The trace's events with its step repeated ``copies`` times, copy ``k`` shifted by ``k * period`` µs.

    Correlation / ``External id`` / flow ``id`` values are offset by ``k * id_stride``; a
    ``ProfilerStep#N`` name becomes ``ProfilerStep#(N + k)``. Metadata, instant markers and the
    ``PyTorch Profiler`` span are kept once; the span is stretched over all copies.
    """
    evs = doc["traceEvents"]
    body = [e for e in evs if not _is_once(e)]
    once = [dict(e) for e in evs if _is_once(e)]
    out = []
    for k in range(copies):
        shift, off = k * period, k * id_stride
        for e in body:
            g = dict(e)
            if "ts" in g:
                g["ts"] = e["ts"] + shift
            a = e.get("args")
            if isinstance(a, dict) and k and ("correlation" in a or "External id" in a):
                a = dict(a)
                for key in ("correlation", "External id"):
                    if isinstance(a.get(key), int) and a[key] > 0:
                        a[key] += off
                g["args"] = a
            if k and isinstance(e.get("id"), int):
                g["id"] = e["id"] + off
            name = e.get("name")
            if k and isinstance(name, str) and name.startswith("ProfilerStep#"):
                g["name"] = f"ProfilerStep#{int(name.split('#', 1)[1]) + k}"
            out.append(g)
    for e in once:
        if e.get("cat") == "Trace" and "dur" in e:
            e["dur"] = e["dur"] + (copies - 1) * period
        elif e.get("ph") == "i" and e.get("name") == "Record Window End":
            e["ts"] = e["ts"] + (copies - 1) * period
    return once + out


def straggler_gap_points(events: list[dict], is_straggler: bool) -> list:
    """Where ``delay`` is inserted on one rank of the straggler job, one point per communication kernel (µs).

    Straggler: inside the compute kernel that ran last before the call (its midpoint), never before the
    previous call's end, else at the call's start: the call starts later. Other ranks: 1 µs into the
    communication kernel: it waits longer, its end moves with the straggler's.
    """
    comm = sorted((e for e in events if _is_comm_kernel(e)), key=lambda e: e["ts"])
    if not is_straggler:
        return [e["ts"] + min(1, max(0, (e.get("dur") or 0) - 1)) for e in comm]
    compute = sorted((e for e in events if _is_compute_kernel(e)), key=_end)
    ends = [_end(e) for e in compute]
    import bisect

    points, prev_end = [], None
    for c in comm:
        t = c["ts"]
        i = bisect.bisect_right(ends, c["ts"]) - 1
        if i >= 0:
            mid = compute[i]["ts"] + (compute[i].get("dur") or 0) // 2
            if (prev_end is None or mid >= prev_end) and mid < c["ts"]:
                t = mid
        points.append(t)
        prev_end = _end(c)
    return points


def insert_gaps(events: list[dict], points: list, delay) -> None:
    """Insert ``delay`` µs at each of ``points`` (in place): a time ``p`` moves by ``delay`` × #{points ≤ p};
    an event end ``e`` by ``delay`` × #{points < e} (an event spanning a point is stretched)."""
    import bisect

    pts = sorted(points)
    if not pts:
        return
    for e in events:
        if "ts" not in e or not isinstance(e["ts"], (int, float)):
            continue
        ts = e["ts"]
        end = _end(e) if "dur" in e else None
        new_ts = ts + delay * bisect.bisect_right(pts, ts)
        e["ts"] = new_ts
        if end is not None:
            e["dur"] = max(new_ts, end + delay * bisect.bisect_left(pts, end)) - new_ts


def perturb(events: list[dict], t0, scale: float, shift) -> None:
    """Scale every time around ``t0`` by ``scale`` and add ``shift`` (µs), in place.

    Integer times stay integers (ends are mapped and durations recomputed from them, so nesting is
    kept); float times are rounded to the ns.
    """
    for e in events:
        ts = e.get("ts")
        if not isinstance(ts, (int, float)) or isinstance(ts, bool):
            continue
        dur = e.get("dur")
        if isinstance(ts, int):
            new_ts = t0 + round((ts - t0) * scale) + int(shift)
            if isinstance(dur, (int, float)) and not isinstance(dur, bool):
                end = t0 + round((ts + dur - t0) * scale) + int(shift)
                e["dur"] = int(end - new_ts) if isinstance(dur, int) else float(end - new_ts)
        else:
            new_ts = round(t0 + (ts - t0) * scale + shift, 3)
            if isinstance(dur, (int, float)) and not isinstance(dur, bool):
                e["dur"] = round(dur * scale, 3)
        e["ts"] = new_ts


def _time_bounds(events: list[dict]):
    xs = [e for e in events if e.get("ph") == "X" and isinstance(e.get("ts"), (int, float))]
    return min(e["ts"] for e in xs), max(_end(e) for e in xs)


@dataclass
class CaptureInfo:
    """One written capture."""

    job_id: str
    rank: int
    relative_dir: str
    json_bytes: int
    gz_bytes: int
    n_events: int


@dataclass
class Fleet:
    """What :func:`build_fleet` wrote."""

    root: str
    captures: list[CaptureInfo] = field(default_factory=list)
    dlrm_jobs: list[str] = field(default_factory=list)
    single_jobs: list[str] = field(default_factory=list)
    straggler_job: str | None = None
    straggler_rank: int | None = None

    @property
    def json_bytes(self) -> int:
        return sum(c.json_bytes for c in self.captures)

    @property
    def gz_bytes(self) -> int:
        return sum(c.gz_bytes for c in self.captures)

    @property
    def jobs(self) -> list[str]:
        return self.dlrm_jobs + self.single_jobs

    def subset(self, root: str, jobs: list[str]) -> Fleet:
        """The same captures of ``jobs`` under another root (hard links; copies when linking fails)."""
        keep = set(jobs)
        out = Fleet(
            root=root,
            dlrm_jobs=[j for j in self.dlrm_jobs if j in keep],
            single_jobs=[j for j in self.single_jobs if j in keep],
            straggler_job=self.straggler_job if self.straggler_job in keep else None,
            straggler_rank=self.straggler_rank if self.straggler_job in keep else None,
        )
        for c in self.captures:
            if c.job_id not in keep:
                continue
            src, dst = os.path.join(self.root, c.relative_dir), os.path.join(root, c.relative_dir)
            os.makedirs(dst, exist_ok=True)
            for name in ("trace.json.gz", "manifest.json"):  # manifest last: it commits the capture
                try:
                    os.link(os.path.join(src, name), os.path.join(dst, name))
                except OSError:
                    shutil.copy2(os.path.join(src, name), os.path.join(dst, name))
            out.captures.append(c)
        return out


def write_capture(
    root: str,
    *,
    job_id: str,
    rank: int,
    world_size: int,
    doc: dict,
    host: str,
    pid: int,
    device_name: str | None,
    step_range: tuple[int, int] | None,
    created_ns: int,
) -> CaptureInfo:
    """Write one committed capture the way ``capture_hooks`` does: ``trace.json.gz``, then ``manifest.json``."""
    sys.path.insert(0, REPO_ROOT)
    from capture_hooks.identity import Identity
    from capture_hooks.manifest import build_manifest, encode_manifest, file_entry, utc_date
    from capture_hooks.sink import landing_path, make_path_safe

    try:
        from capture_hooks.finalize import GZIP_LEVEL as level
    except ImportError:  # pragma: no cover
        level = GZIP_LEVEL
    capture_id = make_path_safe(f"{host}-{pid}-0-{created_ns}")
    rel = landing_path(date=utc_date(created_ns), job_id=job_id, attempt=0, rank=rank, capture_id=capture_id)
    folder = os.path.join(root, *rel.split("/"))
    os.makedirs(folder, exist_ok=True)
    data = kineto_bytes(doc)
    trace = os.path.join(folder, "trace.json.gz")
    with (
        open(trace, "wb") as raw,
        gzip.GzipFile(filename="trace.json", mode="wb", fileobj=raw, compresslevel=level, mtime=0) as gz,
    ):
        gz.write(data)
    identity = Identity(
        rank=rank,
        local_rank=rank % 8,
        world_size=world_size,
        node=rank // 8,
        attempt=0,
        launcher="torchrun" if world_size > 1 else "default",
        host=host,
        pid=pid,
        accelerator="cuda",
        device_name=device_name,
        torch_version="2.1.0",
        cuda_version="12.1",
        driver_version=None,
    )
    manifest = build_manifest(
        identity=identity,
        job_id=job_id,
        attempt=0,
        capture_id=capture_id,
        created_at_ns=created_ns,
        step_first=step_range[0] if step_range else None,
        step_last=step_range[1] if step_range else None,
        profiler={
            "name": "torch.profiler",
            "schedule": {"skip_first": 0, "wait": 1, "warmup": 1, "active": 1, "repeat": 1},
            "activities": ["CPU", "CUDA"],
        },
        tags={"bench": "fleet"},
        files=[file_entry(trace, "trace.json.gz", "kineto_trace")],
    )
    with open(os.path.join(folder, "manifest.json"), "wb") as f:
        f.write(encode_manifest(manifest))
    n_events = sum(1 for e in doc["traceEvents"] if e.get("ph") in ("X", "i", "C"))
    return CaptureInfo(job_id, rank, rel, len(data), os.path.getsize(trace), n_events)


def _step_numbers(events: list[dict]) -> tuple[int, int] | None:
    ns = [
        int(e["name"].split("#", 1)[1])
        for e in events
        if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("name", "").split("#", 1)[1].isdigit()
    ]
    return (min(ns), max(ns)) if ns else None


def build_fleet(
    root: str,
    corpus_root: str,
    n_dlrm: int,
    n_single: int,
    steps: int,
    seed: int,
    straggler_rank: int,
    delay_ms: float,
    scale_jitter: float,
    clock_jitter_us: float,
    straggler_job_index: int | None = None,
    log=print,
    hosts=None,
    job_scale=None,
) -> Fleet:
    """Write ``n_dlrm`` 8-rank DLRM jobs and ``n_single`` single-GPU jobs under ``root`` (module docstring).

    The straggler goes into DLRM job ``straggler_job_index`` (default: drawn from ``seed``; ``-1``: none);
    the perturbations are drawn from one ``random.Random(seed)``, job after job. ``hosts(j, rank)``: the host
    name of DLRM job ``j``'s rank (default ``fleet-<j>-node0`` for every rank); ``job_scale(j)``: a factor on
    every rank's time scale of DLRM job ``j`` (a job slow everywhere; default 1).

    Raises:
        FileNotFoundError: a corpus trace is missing.
        ValueError: the DLRM set is not 8 ranks, or ``straggler_rank`` is not one of them.
    """
    rng = random.Random(seed)
    dlrm_paths = sorted(
        os.path.join(corpus_root, DLRM_DIR, n)
        for n in os.listdir(os.path.join(corpus_root, DLRM_DIR))
        if n.endswith(".json") or n.endswith(".json.gz")
    )
    base = {}
    for p in dlrm_paths:
        doc = load_trace(p)
        base[int(doc["distributedInfo"]["rank"])] = doc
    if sorted(base) != list(range(8)):
        raise ValueError(f"{DLRM_DIR}: expected ranks 0-7, found {sorted(base)}")
    if straggler_rank not in base:
        raise ValueError(f"--straggler-rank {straggler_rank}: the DLRM jobs have ranks 0-7")
    bounds = {r: _time_bounds(d["traceEvents"]) for r, d in base.items()}
    t_lo, t_hi = min(b[0] for b in bounds.values()), max(b[1] for b in bounds.values())
    period = (t_hi - t_lo) + 1000  # µs, same for every rank: copies of one call still complete together
    ids = [0]
    for d in base.values():
        for e in d["traceEvents"]:
            a = e.get("args")
            if isinstance(a, dict):
                ids += [v for k in ("correlation", "External id") if isinstance(v := a.get(k), int)]
            if isinstance(e.get("id"), int):
                ids.append(e["id"])
    stride = max(ids) + 1
    if straggler_job_index is None:
        straggler_job_index = rng.randrange(max(n_dlrm, 1))
    fleet = Fleet(root=root)
    delay = int(round(delay_ms * 1000))
    job_gap_us = 600 * 10**6  # jobs 10 minutes apart
    for j in range(n_dlrm):
        job = f"fleet-dlrm-{j:03d}"
        injected = j == straggler_job_index
        if injected:
            fleet.straggler_job, fleet.straggler_rank = job, straggler_rank
        slow = job_scale(j) if job_scale is not None else 1.0
        jitter = {
            r: ((1.0 + rng.uniform(-scale_jitter, scale_jitter)) * slow, rng.uniform(-clock_jitter_us, clock_jitter_us))
            for r in range(8)
        }
        for r in range(8):
            doc = base[r]
            events = repeat_steps(doc, steps, period, stride)
            if injected:
                insert_gaps(events, straggler_gap_points(events, r == straggler_rank), delay)
            scale, clock = jitter[r]
            perturb(events, t_lo, scale, clock + j * job_gap_us)
            out = {**{k: v for k, v in doc.items() if k != "traceEvents"}, "traceEvents": events}
            created = int((_time_bounds(events)[1] + 5e6) * 1000)
            fleet.captures.append(
                write_capture(
                    root,
                    job_id=job,
                    rank=r,
                    world_size=8,
                    doc=out,
                    host=hosts(j, r) if hosts is not None else f"fleet-{j:03d}-node0",
                    pid=40000 + r,
                    device_name=doc["deviceProperties"][0]["name"],
                    step_range=_step_numbers(events),
                    created_ns=created,
                )
            )
        fleet.dlrm_jobs.append(job)
        log(f"  built {job} (8 ranks x {steps} steps){' <- straggler rank %d' % straggler_rank if injected else ''}")
    singles = {}
    for i in range(n_single):
        key, short = SINGLE_GPU[i % len(SINGLE_GPU)]
        if key not in singles:
            singles[key] = load_trace(os.path.join(corpus_root, key))
        doc = singles[key]
        job = f"fleet-1gpu-{i:03d}-{short}"
        events = [dict(e) for e in doc["traceEvents"]]
        t0, _ = _time_bounds(events)
        # one rank: no clock to align; the shift stays >= 0 so that relative times stay >= 0
        scale, clock = 1.0 + rng.uniform(-scale_jitter, scale_jitter), rng.uniform(0, clock_jitter_us)
        perturb(events, t0, scale, clock + i * job_gap_us)
        out = {**{k: v for k, v in doc.items() if k != "traceEvents"}, "traceEvents": events}
        t_end = _time_bounds(events)[1]
        # commit time: trace end (+ baseTimeNanoseconds of relative traces) + 5 s; the date= partition
        created = int(doc.get("baseTimeNanoseconds") or 0) + int(t_end * 1000)
        created = max(created, 1_600_000_000 * 10**9) + 5 * 10**9
        dev = (doc.get("deviceProperties") or [{}])[0].get("name") or None
        fleet.captures.append(
            write_capture(
                root,
                job_id=job,
                rank=0,
                world_size=1,
                doc=out,
                host=f"fleet-1gpu-{i:03d}",
                pid=50000 + i,
                device_name=dev,
                step_range=_step_numbers(events),
                created_ns=created,
            )
        )
        fleet.single_jobs.append(job)
    return fleet


# --------------------------------------------------------------------------------------------------
# children: one measurement each, JSON on the last stdout line
# --------------------------------------------------------------------------------------------------


class _StageClock:
    """Stands in for a ``rich.progress.Progress``: records when each pipeline stage starts and ends."""

    def __init__(self):
        self.spans: list[tuple[str, float, float | None]] = []
        self.reads: list[tuple[float, float]] = []  # jobs.pipeline.run.read_pandas calls

    def add_task(self, text, total=None):
        self.spans.append((str(text), time.perf_counter(), None))
        return len(self.spans) - 1

    def update(self, task, **_):
        text, t0, _end_t = self.spans[task]
        self.spans[task] = (text, t0, time.perf_counter())

    def by_stage(self, total_s: float) -> dict[str, float]:
        """Seconds per stage; ``read_tables`` = the pipeline reading its result tables back outside any
        stage (calls inside a stage count for that stage); ``other`` = the rest of ``total_s``."""
        out = {s: 0.0 for s in STAGE_ORDER}
        for text, t0, t1 in self.spans:
            name = next((n for prefix, n in STAGES if text.startswith(prefix)), "other")
            out[name] += (t1 or t0) - t0
        for r0, r1 in self.reads:
            if not any(t0 <= r0 and r1 <= (t1 or t0) for _, t0, t1 in self.spans):
                out["read_tables"] += r1 - r0
        out["other"] = max(0.0, total_s - sum(v for k, v in out.items() if k != "other"))
        return out

    def wrap(self, fn):
        """``fn`` recording the span of each call in :attr:`reads`."""

        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.reads.append((t0, time.perf_counter()))

        return timed


def _child_env_setup() -> None:
    sys.path.insert(0, REPO_ROOT)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def _straggler_check(spark, warehouse: str) -> dict[str, Any]:
    """Per job: ranks named by its ``straggler_rank`` findings, and the rank with the most last arrivals
    (both tables read through the storage seam: their Delta snapshots, not the folders)."""
    from pyspark.sql import functions as F

    from jobs.warehouse import read_spark

    out: dict[str, Any] = {}
    findings = read_spark(spark, warehouse, "findings")
    if findings is not None:  # None: no findings table (or no rows)
        f = findings.filter(F.col("rule") == "straggler_rank").select("job_id", "ranks").toPandas()
        for job, g in f.groupby("job_id"):
            out.setdefault(job, {})["finding_ranks"] = sorted({int(r) for rs in g["ranks"] for r in rs})
    collectives = read_spark(spark, warehouse, "collectives")
    if collectives is None:
        return out
    c = (
        collectives.groupBy("job_id", "rank")
        .agg(F.sum(F.col("is_last_arrival").cast("int")).alias("last"), F.count("*").alias("calls"))
        .toPandas()
    )
    for job, g in c.groupby("job_id"):
        top = g.sort_values(["last", "rank"], ascending=[False, True]).iloc[0]
        out.setdefault(job, {}).update(
            {"most_last_rank": int(top["rank"]), "last_arrivals": int(top["last"]), "calls": int(top["calls"])}
        )
    return out


def child_pipeline(raw: str, warehouse: str, tracking_uri: str) -> dict[str, Any]:
    """``run_pipeline`` once, timed per stage; then the straggler check (not timed)."""
    _child_env_setup()
    import jobs.pipeline.run
    from jobs.pipeline.run import run_pipeline

    clock = _StageClock()
    jobs.pipeline.run.read_pandas = clock.wrap(jobs.pipeline.run.read_pandas)  # the name run_pipeline calls
    t0 = time.perf_counter()
    result = run_pipeline(raw, warehouse, tracking_uri=tracking_uri, progress=clock, executor="spark")  # cluster sizing
    wall = time.perf_counter() - t0
    from jobs.spark import get_spark

    spark = get_spark()
    caps = result.captures
    failed = sorted(result.validation.failed_jobs()) if result.validation is not None else []
    spans = [(text, round(a - t0, 2), round((b or a) - t0, 2)) for text, a, b in clock.spans]
    out = {
        "wall_s": wall,
        "stages_s": clock.by_stage(wall),
        "master": spark.sparkContext.master,
        "spans": spans,
        "read_spans": [(round(a - t0, 2), round(b - t0, 2)) for a, b in clock.reads],
        "n_captures": int(len(caps)),
        "n_ingested": int((caps["status"] == "ingested").sum()),
        "n_events": int(caps["n_events"].fillna(0).sum()),
        "uncompressed_bytes": int(caps["uncompressed_bytes"].fillna(0).sum()),
        "n_jobs": len(result.job_ids),
        "n_runs": len(result.run_ids),
        "validation_failed_jobs": failed,
        "stragglers": _straggler_check(spark, warehouse),
    }
    spark.stop()
    return out


def child_normalize(raw: str, warehouse: str) -> dict[str, Any]:
    """``run_normalize`` once (after the Spark start, timed apart)."""
    _child_env_setup()
    from jobs.normalize.job import run_normalize
    from jobs.spark import get_spark

    t0 = time.perf_counter()
    spark = get_spark()
    t1 = time.perf_counter()
    res = run_normalize(spark, raw, warehouse)
    t2 = time.perf_counter()
    out = {
        "spark_start_s": t1 - t0,
        "normalize_s": t2 - t1,
        "master": spark.sparkContext.master,
        "n_captures": len(res.captures),
        "n_events": int(sum(c.get("n_events") or 0 for c in res.captures)),
        "uncompressed_bytes": int(sum(c.get("uncompressed_bytes") or 0 for c in res.captures)),
    }
    spark.stop()
    return out


# --------------------------------------------------------------------------------------------------
# parent: run a child, pinned, with the memory of its process tree sampled
# --------------------------------------------------------------------------------------------------


def _status(pid: int) -> dict[str, int]:
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    out[line.split(":")[0]] = int(line.split()[1]) * 1024
    except OSError:
        pass
    return out


def _ignores_sigchld(pid: int) -> bool:
    """Whether process ``pid`` ignores ``SIGCHLD`` (bit 17 of ``SigIgn`` in ``/proc/<pid>/status``). The
    kernel then reaps its children itself and their CPU time reaches no ``RUSAGE_CHILDREN``: PySpark's
    ``pyspark/daemon.py`` does this for the Python workers it forks."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("SigIgn:"):
                    return bool(int(line.split()[1], 16) >> 16 & 1)
    except (OSError, ValueError):
        pass
    return False


class TreeSampler(threading.Thread):
    """Samples the RSS and CPU time of a process tree: the root (driver Python), JVMs and the Python workers
    under a JVM.

    Peaks (bytes): ``driver_python`` and ``jvm`` are the largest ``VmHWM`` seen per process (the JVM of
    local mode is driver + executor); ``python_workers`` is the largest sum of the workers' ``VmRSS`` at one
    sample, ``python_worker_max`` the largest single worker's ``VmHWM``; ``local_worker_max`` the largest
    ``VmHWM`` of a local-executor process (a Python descendant of the root — the fork server or one of its
    workers —, no JVM in the tree); ``executor`` the
    largest JVM + workers RSS sum at one sample, or on the local executor its largest worker. CPU: every process once seen stays sampled until it is gone
    (also after the root exits); ``auto_reaped`` holds the pids whose parent ignores ``SIGCHLD``.
    """

    def __init__(self, pid: int, interval_s: float):
        super().__init__(daemon=True)
        self.pid, self.interval_s = pid, interval_s
        self.stop_event = threading.Event()
        self.peak = {
            "driver_python": 0,
            "jvm": 0,
            "python_workers": 0,
            "python_worker_max": 0,
            "local_worker_max": 0,
            "executor": 0,
        }
        self.n_workers_seen: set[int] = set()
        self.cpu_s: dict[int, float] = {}  # pid -> user + system CPU seconds at its last sample
        self.auto_reaped: set[int] = set()
        self.samples = 0
        self._procs: dict[int, Any] = {}  # pid -> psutil.Process, every process seen

    def _classify(self, kids):
        import psutil

        kinds = {}
        jvms = set()
        for p in kids:
            try:
                if p.name().startswith("java"):
                    jvms.add(p.pid)
                    kinds[p.pid] = "jvm"
            except psutil.Error:
                continue
        for p in kids:
            if p.pid in kinds:
                continue
            try:
                if "python" in p.name() and any(a.pid in jvms for a in p.parents()):
                    kinds[p.pid] = "worker"
                elif "python" in p.name() and not jvms:
                    # a process of the local executor (jobs/executor.py): its workers are the fork server's
                    # children, so grandchildren of the root — not direct children, as before the fork server
                    kinds[p.pid] = "local"
            except psutil.Error:
                continue
        return kinds

    @property
    def total_cpu_s(self) -> float:
        """CPU seconds of the tree (each process at its last sample: a process's last interval is lost)."""
        return sum(self.cpu_s.values())

    def _track(self, kids) -> None:
        """Remember new processes, and which of them the kernel will reap (:func:`_ignores_sigchld`)."""
        import psutil

        for p in kids:
            if p.pid in self._procs:
                continue
            self._procs[p.pid] = p
            try:
                if _ignores_sigchld(p.ppid()):
                    self.auto_reaped.add(p.pid)
            except psutil.Error:
                continue

    def _cpu(self) -> None:
        import psutil

        for pid, p in self._procs.items():
            try:
                if p.is_running():  # also False when the pid was reused
                    t = p.cpu_times()
                    self.cpu_s[pid] = t.user + t.system
            except psutil.Error:
                continue

    def run(self) -> None:
        import psutil

        try:
            root = psutil.Process(self.pid)
        except psutil.Error:
            return
        self._procs[self.pid] = root
        while not self.stop_event.is_set():
            try:
                kids = root.children(recursive=True)
            except psutil.Error:  # the root has exited: its orphans are still sampled for CPU
                kids = []
            self._track(kids)
            self._cpu()
            kinds = self._classify(kids)
            rss = {"jvm": 0, "worker": 0, "local": 0}
            for pid, kind in kinds.items():
                st = _status(pid)
                if not st:
                    continue
                rss[kind] += st.get("VmRSS", 0)
                if kind == "jvm":
                    self.peak["jvm"] = max(self.peak["jvm"], st.get("VmHWM", 0))
                elif kind == "local":
                    self.peak["local_worker_max"] = max(self.peak["local_worker_max"], st.get("VmHWM", 0))
                else:
                    self.n_workers_seen.add(pid)
                    self.peak["python_worker_max"] = max(self.peak["python_worker_max"], st.get("VmHWM", 0))
            self.peak["driver_python"] = max(self.peak["driver_python"], _status(self.pid).get("VmHWM", 0))
            self.peak["python_workers"] = max(self.peak["python_workers"], rss["worker"])
            self.peak["executor"] = max(
                self.peak["executor"], rss["jvm"] + rss["worker"], self.peak["local_worker_max"]
            )
            self.samples += 1
            self.stop_event.wait(self.interval_s)


def _become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux ``PR_SET_CHILD_SUBREAPER``).

    A descendant whose parent exits first (the Spark JVM outlives the driver Python that started it) is
    then re-parented to this process instead of init, so that waiting for it adds its CPU time to
    ``RUSAGE_CHILDREN`` here. False where the call is not available.
    """
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0  # 36 = PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        return False


def _children_cpu_s() -> float:
    """User + system CPU seconds of this process's terminated, waited-for descendants (``RUSAGE_CHILDREN``)."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _reap_orphans(deadline_s: float | None) -> tuple[int, set[int]]:
    """Wait for the descendants re-parented to this process (see :func:`_become_subreaper`); after
    ``deadline_s`` seconds kill the ones left. ``None``: only collect those that already exited.
    Returns how many were killed and the pids reaped."""
    import psutil

    t_end, killed, reaped = time.monotonic() + (deadline_s or 0.0), 0, set()
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return killed, reaped
        if pid:
            reaped.add(pid)
            continue
        if deadline_s is None:
            return killed, reaped
        if time.monotonic() > t_end:
            for c in psutil.Process().children():
                try:
                    c.kill()
                    killed += 1
                except psutil.Error:
                    pass
            t_end = float("inf")
        time.sleep(0.05)


def child_env(cores: int, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a pipeline child on ``cores`` CPUs: ``TRACELAKE_SPARK_MASTER=local[cores]``,
    ``PYTHONPATH`` = this checkout, Spark's Python = this interpreter, Spark bound to 127.0.0.1."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TRACELAKE_SPARK_MASTER")}
    env.update(
        TRACELAKE_SPARK_MASTER=f"local[{cores}]",
        PYTHONPATH=REPO_ROOT,
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_LOCAL_IP="127.0.0.1",
    )
    env.update(extra or {})
    return env


def run_pinned(
    cmd: list[str], cores: int, timeout: float, sample_s: float, env: dict[str, str] | None = None, cwd: str = REPO_ROOT
) -> dict[str, Any]:
    """Run ``cmd`` in a fresh process (own session) pinned to the first ``cores`` CPUs of this process
    (``sched_setaffinity``, inherited by every descendant), with its process tree sampled.

    Returns ``returncode``, ``stdout``, ``stderr``, ``process_s`` (wall s from start until the process
    exited and its output closed), ``cpu_s``, ``cpu_s_sampled`` (:attr:`TreeSampler.total_cpu_s`),
    ``memory`` (:class:`TreeSampler` peaks, bytes), ``samples``, ``n_python_workers``, ``cpus``,
    ``orphans_killed``; ``{"error": ...}`` when it ran past ``timeout`` s (the whole session is killed).

    ``cpu_s`` = user + system CPU s of *every* descendant: this process is their subreaper and waits for
    all of them (the Spark JVM outlives the driver), so ``RUSAGE_CHILDREN`` counts each process whose
    parents all waited for their children; to it are added the last samples of the processes the kernel
    reaped because their parent ignores ``SIGCHLD`` (PySpark's Python workers), which no rusage counts
    (``cpu_auto_reaped_s``; their last sampling interval is lost). Without the subreaper call (not Linux):
    the sampled figure (``cpu_exact`` False). Not thread-safe: it waits for any child of this process,
    so run one at a time.
    """
    cpus = sorted(os.sched_getaffinity(0))[:cores]
    exact = _become_subreaper()
    _reap_orphans(None)
    cpu0 = _children_cpu_s()
    t0 = time.perf_counter()
    p = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env=env,
        start_new_session=True,
        preexec_fn=lambda: os.sched_setaffinity(0, cpus),
    )
    sampler = TreeSampler(p.pid, sample_s)
    sampler.start()
    try:
        try:
            stdout, stderr = p.communicate(timeout=timeout)
        except BaseException as exc:
            try:
                os.killpg(p.pid, 9)
            except ProcessLookupError:
                pass
            p.communicate()
            _reap_orphans(5)
            if isinstance(exc, subprocess.TimeoutExpired):
                return {"error": f"timed out after {timeout:g} s"}
            raise
        process_s = time.perf_counter() - t0
        killed, reaped = _reap_orphans(60)
    finally:
        sampler.stop_event.set()
        sampler.join(timeout=5)
    auto = sum(sampler.cpu_s.get(pid, 0.0) for pid in sampler.auto_reaped - reaped - {p.pid})
    cpu_s = _children_cpu_s() - cpu0 + auto if exact else sampler.total_cpu_s
    return {
        "returncode": p.returncode,
        "stdout": stdout,
        "stderr": stderr,
        "process_s": process_s,
        "cpu_s": cpu_s,
        "cpu_s_sampled": sampler.total_cpu_s,
        "cpu_auto_reaped_s": auto,
        "cpu_exact": exact,
        "cores": cores,
        "cpus": cpus,
        "memory": dict(sampler.peak),
        "samples": sampler.samples,
        "n_python_workers": len(sampler.n_workers_seen),
        "orphans_killed": killed,
    }


def stderr_tail(text: str, n: int = 4) -> str:
    """The last ``n`` lines of a child's stderr on one line."""
    return " | ".join((text or "").strip().splitlines()[-n:])


def run_child(kind: str, args: list[str], cores: int, timeout: float, sample_s: float) -> dict[str, Any]:
    """Run ``--_child kind args…`` with :func:`run_pinned` and ``local[cores]``: the child's JSON result
    plus ``process_s``, ``cpu_s``, ``memory`` and the other figures of :func:`run_pinned`."""
    cmd = [sys.executable, os.path.abspath(__file__), "--_child", kind, *args]
    r = run_pinned(cmd, cores, timeout, sample_s, env=child_env(cores))
    if "error" in r:
        return r
    if r["returncode"] != 0:
        return {"error": f"exit {r['returncode']}: {stderr_tail(r['stderr'])}"}
    try:
        out = json.loads(r["stdout"].strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"error": f"no result line; stderr: {stderr_tail(r['stderr'])}"}
    out.update({k: v for k, v in r.items() if k not in ("returncode", "stdout", "stderr")})
    return out


# --------------------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------------------


def _mb(b) -> str:
    return "-" if b is None else f"{b / MB:,.0f}"


def _rate(x, s) -> float | None:
    return x / s if x and s else None


def _f(x, spec=".1f") -> str:
    return "-" if x is None else format(x, spec)


def summarize(size_label: str, fleet: Fleet, runs: dict[int, dict], norm: dict[int, dict]) -> dict[str, Any]:
    """Figures of one fleet size: per core count e2e and normalize-only rates, stages, memory, straggler."""
    res: dict[str, Any] = {
        "size": size_label,
        "jobs": len(fleet.jobs),
        "dlrm_jobs": len(fleet.dlrm_jobs),
        "single_gpu_jobs": len(fleet.single_jobs),
        "captures": len(fleet.captures),
        "json_bytes": fleet.json_bytes,
        "gz_bytes": fleet.gz_bytes,
        "generated_events": sum(c.n_events for c in fleet.captures),
        "by_cores": {},
    }
    for cores, r in sorted(runs.items()):
        row: dict[str, Any] = {"error": r.get("error")}
        if "error" not in r:
            work_s = r["wall_s"] - r["stages_s"]["spark_start"]
            row.update(
                e2e_s=work_s,
                wall_s=r["wall_s"],
                process_s=r["process_s"],
                cpu_s=r["cpu_s"],
                e2e_mbps=_rate(r["uncompressed_bytes"] / MB, work_s),
                e2e_events_per_s=_rate(r["n_events"], work_s),
                mb_per_cpu_s=_rate(r["uncompressed_bytes"] / MB, r["cpu_s"]),
                n_events=r["n_events"],
                uncompressed_bytes=r["uncompressed_bytes"],
                n_captures=r["n_captures"],
                n_ingested=r["n_ingested"],
                n_runs=r["n_runs"],
                validation_failed_jobs=r["validation_failed_jobs"],
                stages_s=r["stages_s"],
                memory=r["memory"],
                n_python_workers=r["n_python_workers"],
                spans=r.get("spans"),
                read_spans=r.get("read_spans"),
            )
            st = r["stragglers"]
            inj = st.get(fleet.straggler_job, {}) if fleet.straggler_job else {}
            others = {j: st.get(j, {}) for j in fleet.dlrm_jobs if j != fleet.straggler_job}
            row["straggler"] = {
                "job": fleet.straggler_job,
                "injected_rank": fleet.straggler_rank,
                "finding_ranks": inj.get("finding_ranks", []),
                "most_last_rank": inj.get("most_last_rank"),
                "last_arrivals": inj.get("last_arrivals"),
                "calls": inj.get("calls"),
                "found": fleet.straggler_job is not None and inj.get("finding_ranks") == [fleet.straggler_rank],
                "other_dlrm_finding_ranks": sorted({x for v in others.values() for x in v.get("finding_ranks", [])}),
                "injected_rank_flagged_elsewhere": sorted(
                    j for j, v in others.items() if fleet.straggler_rank in v.get("finding_ranks", [])
                ),
            }
        n = norm.get(cores)
        if n is not None:
            row["normalize_only"] = (
                n if "error" in n else {**n, "mbps": _rate(n["uncompressed_bytes"] / MB, n["normalize_s"])}
            )
        res["by_cores"][cores] = row
    c = res["by_cores"]
    if 1 in c and 2 in c and c[1].get("e2e_mbps") and c[2].get("e2e_mbps"):
        res["scaling_2_vs_1"] = c[2]["e2e_mbps"] / c[1]["e2e_mbps"]
    return res


def sizing(results: list[dict], executor_cores: int = 4, headroom: float = 1.5) -> dict[str, float]:
    """The placeholders of the sizing guide in ``infra/cluster/README.md`` (names without braces).

    From the largest fleet: ``MBPS_PER_CORE`` (end-to-end MB/s on 1 core), ``MB_PER_CPU_S`` (mean over the
    core counts), ``SCALING_EFFICIENCY`` (2-core/1-core ratio ÷ 2), ``GZ_RATIO``; over all runs: the JVM and
    single Python worker peaks (MB = 10^6 bytes); ``MEM_GROWTH_2S_VS_S`` (executor peak, largest ÷ smallest fleet, most
    cores); ``CORES_PER_TB_DAY`` = 10^6 MB / (T1 × E × 86400 s) × headroom and its CPU-time variant
    10^6 / (C × 86400) × headroom; ``MEM_GB_PER_CORE`` for ``executor_cores``-core executors:
    (max(4 GiB, JVM peak) + cores × worker peak × 1.5 + max(384 MiB, 10 % heap)) / cores, in GiB.
    Keys whose inputs are missing are left out.
    """
    out: dict[str, float] = {}
    ok = [r for r in results if any(not c.get("error") for c in r["by_cores"].values())]
    if not ok:
        return out
    big = max(ok, key=lambda r: r["json_bytes"])
    runs = {c: v for c, v in big["by_cores"].items() if not v.get("error")}
    out["GZ_RATIO"] = big["json_bytes"] / big["gz_bytes"]
    if 1 in runs:
        out["MBPS_PER_CORE"] = runs[1]["e2e_mbps"]
    cpu = [v["mb_per_cpu_s"] for v in runs.values() if v.get("mb_per_cpu_s")]
    if cpu:
        out["MB_PER_CPU_S"] = sum(cpu) / len(cpu)
    if "scaling_2_vs_1" in big:
        out["SCALING_EFFICIENCY"] = big["scaling_2_vs_1"] / 2
    all_runs = [v for r in ok for v in r["by_cores"].values() if not v.get("error")]
    jvm = max(v["memory"]["jvm"] for v in all_runs)  # bytes
    worker = max(v["memory"]["python_worker_max"] for v in all_runs)
    out["JVM_PEAK_MB"], out["PY_WORKER_PEAK_MB"] = jvm / MB, worker / MB
    small = min(ok, key=lambda r: r["json_bytes"])
    if small is not big:
        c = max(set(small["by_cores"]) & set(big["by_cores"]), default=None)
        a, b = small["by_cores"].get(c, {}), big["by_cores"].get(c, {})
        if a.get("memory") and b.get("memory") and a["memory"]["executor"]:
            out["MEM_GROWTH_2S_VS_S"] = b["memory"]["executor"] / a["memory"]["executor"]
    if "MBPS_PER_CORE" in out and "SCALING_EFFICIENCY" in out:
        out["CORES_PER_TB_DAY"] = 1e6 / (out["MBPS_PER_CORE"] * out["SCALING_EFFICIENCY"] * 86400) * headroom
    if "MB_PER_CPU_S" in out:
        out["CORES_PER_TB_DAY_CPU"] = 1e6 / (out["MB_PER_CPU_S"] * 86400) * headroom
    heap = max(4 * 2**30, jvm)
    total = heap + executor_cores * worker * 1.5 + max(384 * 2**20, 0.1 * heap)
    out["MEM_GB_PER_CORE"] = total / executor_cores / 2**30
    return out


def print_report(results: list[dict]) -> None:
    """The compact table (one row per fleet size × cores), stages, memory, targets."""
    print()
    hdr = (
        f"{'fleet':5s} {'cores':>5s} {'jobs':>4s} {'files':>5s} {'JSON MB':>8s} {'gz MB':>6s} {'events':>11s} "
        f"{'e2e s':>7s} {'MB/s':>6s} {'ev/s':>9s} {'MB/cpu-s':>8s} {'norm MB/s':>9s} {'e2e/norm':>8s}"
    )
    print("end to end (run_pipeline without the Spark start; MB = 10^6 bytes of uncompressed JSON)")
    print(hdr)
    print("-" * len(hdr))
    for r in results:
        for cores, c in r["by_cores"].items():
            if c.get("error"):
                print(f"{r['size']:5s} {cores:>5d}  failed: {c['error']}")
                continue
            n = c.get("normalize_only") or {}
            ratio = c["e2e_mbps"] / n["mbps"] if n.get("mbps") else None
            print(
                f"{r['size']:5s} {cores:>5d} {r['jobs']:>4d} {r['captures']:>5d} {_mb(r['json_bytes']):>8s} "
                f"{r['gz_bytes'] / MB:>6.1f} {c['n_events']:>11,d} {c['e2e_s']:>7.1f} {_f(c['e2e_mbps'], '.3g'):>6s} "
                f"{_f(c['e2e_events_per_s'], ',.0f'):>9s} {_f(c['mb_per_cpu_s'], '.2f'):>8s} "
                f"{_f(n.get('mbps'), '.3g'):>9s} {_f(ratio, '.2f'):>8s}"
            )
    print()
    print(
        "seconds per stage (spark_start is not in e2e s; validate = both Great Expectations gates; "
        "fleet = fleet statistics and regressions; mlflow = runs + HTML reports)"
    )
    hdr = f"{'fleet':5s} {'cores':>5s} " + " ".join(f"{s:>11s}" for s in STAGE_ORDER)
    print(hdr)
    print("-" * len(hdr))
    for r in results:
        for cores, c in r["by_cores"].items():
            if not c.get("error"):
                print(
                    f"{r['size']:5s} {cores:>5d} "
                    + " ".join(f"{c['stages_s'].get(s, 0.0):>11.1f}" for s in STAGE_ORDER)
                )
    print()
    print("peak memory, MB (local mode: the executor is the driver JVM + its Python workers)")
    hdr = (
        f"{'fleet':5s} {'cores':>5s} {'JVM':>7s} {'py workers':>10s} {'1 worker':>8s} {'executor':>8s} "
        f"{'driver py':>9s} {'workers':>7s}"
    )
    print(hdr)
    print("-" * len(hdr))
    for r in results:
        for cores, c in r["by_cores"].items():
            if not c.get("error"):
                m = c["memory"]
                print(
                    f"{r['size']:5s} {cores:>5d} {_mb(m['jvm']):>7s} {_mb(m['python_workers']):>10s} "
                    f"{_mb(m['python_worker_max']):>8s} {_mb(m['executor']):>8s} {_mb(m['driver_python']):>9s} "
                    f"{c['n_python_workers']:>7d}"
                )
    print()
    for r in results:
        if "scaling_2_vs_1" in r:
            s = r["scaling_2_vs_1"]
            print(
                f"fleet {r['size']}: 2 cores / 1 core = {s:.2f}x  (target >= {TARGET_SCALING:g}x: "
                f"{'ok' if s >= TARGET_SCALING else 'MISSED'})"
            )
        for cores, c in r["by_cores"].items():
            n = c.get("normalize_only") or {}
            if not c.get("error") and n.get("mbps"):
                ratio = c["e2e_mbps"] / n["mbps"]
                print(
                    f"fleet {r['size']}, {cores} core(s): end-to-end {c['e2e_mbps']:.1f} MB/s = {ratio:.2f} x "
                    f"normalize-only {n['mbps']:.1f} MB/s (target >= {TARGET_E2E_VS_NORMALIZE:g}: "
                    f"{'ok' if ratio >= TARGET_E2E_VS_NORMALIZE else 'MISSED'})"
                )
            if not c.get("error"):
                s = c["straggler"]
                bad = (
                    [] if c["n_ingested"] == c["n_captures"] else [f"{c['n_captures'] - c['n_ingested']} not ingested"]
                )
                if c["validation_failed_jobs"]:
                    bad.append(f"validation failed: {', '.join(c['validation_failed_jobs'])}")
                print(
                    f"fleet {r['size']}, {cores} core(s): injected straggler {s['job']} rank {s['injected_rank']}: "
                    f"{'FOUND' if s['found'] else 'NOT FOUND'} (straggler_rank finding ranks {s['finding_ranks']}; "
                    f"most last arrivals: rank {s['most_last_rank']}, {s['last_arrivals']}/{s['calls']} calls); "
                    f"other DLRM jobs' straggler ranks {s['other_dlrm_finding_ranks']} (corpus: 7)"
                    + (
                        f"; injected rank also flagged in {s['injected_rank_flagged_elsewhere']}"
                        if s["injected_rank_flagged_elsewhere"]
                        else ""
                    )
                    + (f"; {'; '.join(bad)}" if bad else "")
                )
    if len(results) >= 2:
        a, b = results[0], results[-1]
        for cores in a["by_cores"]:
            ca, cb = a["by_cores"].get(cores, {}), b["by_cores"].get(cores, {})
            if ca.get("memory") and cb.get("memory"):
                ga = cb["memory"]["executor"] / ca["memory"]["executor"] if ca["memory"]["executor"] else float("nan")
                print(
                    f"{cores} core(s): input x{b['json_bytes'] / a['json_bytes']:.2f} ({a['size']} -> {b['size']}), "
                    f"executor peak x{ga:.2f}, JVM peak x{cb['memory']['jvm'] / max(ca['memory']['jvm'], 1):.2f}, "
                    f"Python workers peak x{cb['memory']['python_workers'] / max(ca['memory']['python_workers'], 1):.2f}"
                )
    size = sizing(results)
    if size:
        print()
        print(
            "sizing guide placeholders (infra/cluster/README.md): "
            + ", ".join(f"{{{{{k}}}}} = {v:.0f}" if v >= 100 else f"{{{{{k}}}}} = {v:.3g}" for k, v in size.items())
        )


# --------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--size",
        type=int,
        default=1,
        help="fleet S: this many units of one 8-rank DLRM job + one job per single-GPU trace; the "
        "second fleet is 2S (default 1)",
    )
    ap.add_argument(
        "--steps", type=int, default=GENERATOR_DEFAULTS["steps"], help="ProfilerSteps per DLRM trace (default 3)"
    )
    ap.add_argument("--cores", default="1,2", help="core counts, comma separated (default 1,2)")
    ap.add_argument("--only-size", choices=["S", "2S"], help="run one fleet size only")
    ap.add_argument("--seed", type=int, default=GENERATOR_DEFAULTS["seed"])
    ap.add_argument("--straggler-rank", type=int, default=GENERATOR_DEFAULTS["straggler_rank"])
    ap.add_argument(
        "--delay-ms",
        type=float,
        default=GENERATOR_DEFAULTS["delay_ms"],
        help="straggler's extra compute before each collective",
    )
    ap.add_argument(
        "--scale-jitter",
        type=float,
        default=GENERATOR_DEFAULTS["scale_jitter"],
        help="per-rank time scale 1 +- this (default 5e-4)",
    )
    ap.add_argument(
        "--clock-jitter-us",
        type=float,
        default=GENERATOR_DEFAULTS["clock_jitter_us"],
        help="per-rank clock offset +- this (µs)",
    )
    ap.add_argument("--skip-normalize-only", action="store_true")
    ap.add_argument("--corpus-root", default=os.path.join(REPO_ROOT, "..", "shared", "corpus"))
    ap.add_argument("--workdir", help="landing zones, warehouses, MLflow (default: a temp dir, removed)")
    ap.add_argument("--keep", action="store_true", help="keep --workdir / the temp dir")
    ap.add_argument("--timeout", type=float, default=3600.0, help="per child process, seconds")
    ap.add_argument("--sample-s", type=float, default=0.2, help="memory sampling period, seconds")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--_child", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a._child:
        kind, *rest = a._child
        out = child_pipeline(*rest) if kind == "pipeline" else child_normalize(*rest)
        print(json.dumps(out, default=str))
        return 0
    if a.size < 1 or a.steps < 1:
        ap.error("--size and --steps must be >= 1")
    try:
        cores = sorted({int(x) for x in a.cores.split(",") if x.strip()})
    except ValueError:
        ap.error(f"--cores {a.cores!r}: expected e.g. 1,2")
    available = len(os.sched_getaffinity(0))
    if not cores or min(cores) < 1 or max(cores) > available:
        ap.error(f"--cores {a.cores!r}: this machine has {available} usable CPU(s)")
    if not os.path.isdir(os.path.join(a.corpus_root, DLRM_DIR)):
        print(f"{os.path.join(a.corpus_root, DLRM_DIR)}: corpus not found (--corpus-root)", file=sys.stderr)
        return 2
    work = a.workdir or tempfile.mkdtemp(prefix="fleet_bench_")
    os.makedirs(work, exist_ok=True)
    sizes = [("S", a.size), ("2S", 2 * a.size)]
    if a.only_size:
        sizes = [s for s in sizes if s[0] == a.only_size]
    results, failed = [], False
    try:
        n_max = max(n for _, n in sizes)
        t = time.perf_counter()
        print(f"building the fleet in {work} (seed {a.seed}) ...", flush=True)
        big = build_fleet(
            os.path.join(work, f"landing-{n_max}"),
            a.corpus_root,
            n_dlrm=n_max,
            n_single=len(SINGLE_GPU) * n_max,
            steps=a.steps,
            seed=a.seed,
            straggler_rank=a.straggler_rank,
            delay_ms=a.delay_ms,
            scale_jitter=a.scale_jitter,
            clock_jitter_us=a.clock_jitter_us,
            straggler_job_index=random.Random(a.seed).randrange(min(n for _, n in sizes)),
            log=lambda s: print(s, flush=True),
        )
        print(
            f"built in {time.perf_counter() - t:.0f} s: {len(big.captures)} captures, "
            f"{big.json_bytes / MB:,.0f} MB JSON ({big.gz_bytes / MB:,.1f} MB gzip)",
            flush=True,
        )
        for label, n in sizes:
            fleet = (
                big
                if n == n_max
                else big.subset(
                    os.path.join(work, f"landing-{n}"), big.dlrm_jobs[:n] + big.single_jobs[: len(SINGLE_GPU) * n]
                )
            )
            runs, norm = {}, {}
            for c in cores:
                wh = os.path.join(work, f"wh-{n}-{c}")
                uri = "sqlite:///" + os.path.join(work, f"mlflow-{n}-{c}.db")
                print(
                    f"fleet {label} ({len(fleet.jobs)} jobs, {fleet.json_bytes / MB:,.0f} MB): pipeline on "
                    f"local[{c}] ...",
                    flush=True,
                )
                runs[c] = run_child("pipeline", [fleet.root, wh, uri], c, a.timeout, a.sample_s)
                print(f"  {runs[c].get('error') or 'done in %.0f s' % runs[c]['process_s']}", flush=True)
                failed |= "error" in runs[c]
                shutil.rmtree(wh, ignore_errors=True)
                if not a.skip_normalize_only and n == n_max:
                    wh = os.path.join(work, f"wh-norm-{n}-{c}")
                    print(f"fleet {label}: normalize only on local[{c}] ...", flush=True)
                    norm[c] = run_child("normalize", [fleet.root, wh], c, a.timeout, a.sample_s)
                    print(f"  {norm[c].get('error') or 'done in %.0f s' % norm[c]['process_s']}", flush=True)
                    failed |= "error" in norm[c]
                    shutil.rmtree(wh, ignore_errors=True)
            results.append(summarize(label, fleet, runs, norm))
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    print_report(results)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(
                {
                    "args": {k: v for k, v in vars(a).items() if k != "_child"},
                    "cpu_count": os.cpu_count(),
                    "results": results,
                    "sizing": sizing(results),
                },
                f,
                indent=1,
                sort_keys=True,
                default=str,
            )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
