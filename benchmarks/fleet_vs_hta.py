#!/usr/bin/env python3
"""tracelake next to HTA 0.5.0 on the same fleets of real traces, in one run (issue 13): the wall and CPU
time of an HTA script run job after job and of ``tracelake run``, printed against the issue's targets.

**Compared**, on the same trace files, each measurement a fresh process pinned to the same CPUs (the first
``max(--cores)`` CPUs; ``sched_setaffinity``, inherited by every descendant):

* *HTA loop* (``--hta-python``, the venv of ``benchmarks/hta_venv.sh``): for each job in turn a fresh HTA
  process (:func:`child_hta_job`): ``TraceAnalysis(trace_dir=<temp dir of symlinks to the job's rank
  files>)`` (load), ``get_temporal_breakdown``, ``get_idle_time_breakdown`` (all ranks),
  ``get_gpu_kernel_breakdown``, ``get_cuda_kernel_launch_stats`` (all ranks) and ``get_comm_comp_overlap``
  with the options of ``tests/golden/make_hta_golden.py``, then per rank ``critical_path_analysis(rank,
  "ProfilerStep", 0)`` + ``get_critical_path_breakdown()`` as ``benchmarks/analyze_bench.py`` drives it
  (``annotation=""``, the whole trace, for a rank without a ProfilerStep). A failing analysis is recorded
  and the job goes on. The loop's wall time runs from the first job's start to the last job's end.
* ``tracelake run``: ``python -m jobs.cli run --raw <landing zone> --warehouse <fresh folder>`` on its
  default executor, the local one (``jobs/executor.py``: N worker processes on N pinned CPUs, no JVM), or
  with ``--executor spark`` on ``--master local[N]``: everything (normalize, both validation gates, analysis, fleet statistics, MLflow runs and HTML
  reports; MLflow on SQLite in the warehouse), and the same with ``--no-mlflow``.

**Fleets** (``--fleets``):

1. the 8-rank DLRM job (``torch/param/dlrm_kineto``) + the 10 largest single-rank corpus traces, by
   uncompressed JSON bytes;
2. every other corpus job HTA loads (``trace_filter``'s 2 ranks are one job). "HTA loads" = HTA 0.5.0's
   own record in ``tests/golden/hta_0_5_0.json`` (``--golden``) has no ``load`` error;
3. a synthetic fleet of at least ``--synthetic-gb`` GB of JSON (GB = 10^9 bytes) written by
   :func:`fleet_bench.build_fleet` (units of one 8-rank DLRM job of ``--steps`` steps + one job of each
   single-GPU trace of :data:`fleet_bench.SINGLE_GPU`; an even number of units), and its first half
   (the first half of the units, hard links), for the marginal cost and the memory growth.

Corpus jobs are job folders of symlinks in a landing zone (bare traces: the folder is the job); HTA jobs
are one trace dir per job. The *tiny* landing zone is the smallest single-rank corpus trace HTA loads.

**Measured**: wall seconds of each process; CPU seconds of *every* process it starts (the Spark JVM
outlives the driver Python: :func:`fleet_bench.run_pinned` makes this script their subreaper and reads
``RUSAGE_CHILDREN``); peak memory of the process tree (:class:`fleet_bench.TreeSampler`; the local
executor's executors are its worker processes: *executor* = the largest worker's peak RSS; on Spark's
``local[N]`` the one executor is the driver JVM and its Python workers: the largest JVM + workers RSS at
one sample). Each figure is the median of ``--repeat`` runs, the repeats interleaved (HTA, run, run
``--no-mlflow``, then again). Parse-only: ``jobs.normalize.kineto.parse.parse_kineto`` on the fleet's files
in one process on one core; its CPU s are those of the parse calls (``time.process_time``), without the
interpreter start and imports.

**Targets** (:func:`evaluate_targets`; each printed with the measured and the peer figure and ``ok`` /
``MISSED``, or ``n/a`` with the reason when not measured):

1. fleet 3: ``tracelake run`` wall <= 1/3 of the HTA loop's wall;
2. fleets 1 and 2: ``tracelake run`` wall <= 0.8 x the HTA loop's wall;
3. marginal cost, fleet 3 at its two sizes: ``tracelake run`` CPU s per MB of JSON, (CPU(full) - CPU(half))
   / (MB(full) - MB(half)), <= 3 x the same for parse-only;
4. one ``tracelake run`` on the tiny landing zone <= 15 s wall (on Spark: JVM start included);
5. fleet 3: ``tracelake run`` wall on 1 core / on 2 cores >= 1.8;
6. fleet 3: executor peak memory at the full size / at the half size <= 1.25 ("flat" as the fleet doubles).

Usage (from the repo root, with the project venv)::

    .venv/bin/python benchmarks/fleet_vs_hta.py [--fleets 1,2,3] [--repeat 3] [--synthetic-gb 1.0]
        [--cores 1,2] [--hta-python .hta-venv/bin/python] [--timeout 3600] [--json OUT] [--quick]
        [--steps 3] [--seed 7] [--skip-tiny] [--workdir DIR] [--keep] [--executor local|spark]

``--quick``: a smoke run with tiny fleets (fleets 1 and 2: their smallest job; fleet 3: 2 units of one
1-step DLRM job) and ``--repeat 1``; it still prints every target line.

Exit status 0 even when a target is missed (a measurement, not a test); 1 when a run failed; 2 on usage errors.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(BENCH_DIR)
sys.path[:0] = [BENCH_DIR, os.path.join(REPO_ROOT, "tests", "golden"), REPO_ROOT]

import fleet_bench as fb  # noqa: E402  (stdlib-only at import: this file also runs in the HTA venv)
import make_hta_golden as golden  # noqa: E402
from normalize_bench import uncompressed_size  # noqa: E402

MB, GB = 1e6, 1e9
N_LARGEST = 10  # single-rank traces of fleet 1
TARGET_VS_HTA_BIG = 1 / 3  # target 1: tracelake run wall / HTA loop wall on fleet 3
TARGET_VS_HTA_CORPUS = 0.8  # target 2: the same on fleets 1 and 2
TARGET_MARGINAL_VS_PARSE = 3.0  # target 3: marginal CPU s/MB, tracelake run / parse-only
TARGET_TINY_S = 15.0  # target 4: one tracelake run on the tiny landing zone, wall s
TARGET_SCALING = fb.TARGET_SCALING  # target 5: wall 1 core / wall 2 cores
TARGET_MEMORY_FLAT = 1.25  # target 6: executor peak, full / half fleet 3


# --------------------------------------------------------------------------------------------------
# fleets
# --------------------------------------------------------------------------------------------------


@dataclass
class BenchJob:
    """One job: one HTA ``trace_dir`` and one tracelake job folder. ``files``: link name -> trace path."""

    job_id: str
    files: dict[str, str]
    json_bytes: int


@dataclass
class BenchFleet:
    """The jobs of one fleet and the tracelake landing zone that holds them."""

    name: str
    jobs: list[BenchJob]
    landing: str

    @property
    def json_bytes(self) -> int:
        """Uncompressed JSON bytes of all the fleet's files."""
        return sum(j.json_bytes for j in self.jobs)

    @property
    def n_files(self) -> int:
        return sum(len(j.files) for j in self.jobs)

    def info(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "jobs": [j.job_id for j in self.jobs],
            "n_jobs": len(self.jobs),
            "n_files": self.n_files,
            "json_bytes": self.json_bytes,
        }


def hta_loadable(golden_path: str) -> set[str] | None:
    """Job ids (``discover_jobs`` ids) that HTA 0.5.0 loaded in its golden record (status ``done``, no
    ``load`` error); None when the file is missing."""
    if not os.path.exists(golden_path):
        return None
    with open(golden_path) as f:
        jobs = json.load(f)["jobs"]
    return {j for j, v in jobs.items() if v.get("status") == "done" and "load" not in v.get("errors", {})}


def select_corpus_fleets(
    jobs: dict[str, list[str]],
    json_bytes: dict[str, int],
    loadable: set[str],
    n_largest: int = N_LARGEST,
    dlrm: str = fb.DLRM_DIR,
) -> tuple[list[str], list[str], str]:
    """Fleets 1 and 2 and the tiny job from the corpus listing (module docstring).

    ``jobs``: job id -> corpus keys (``make_hta_golden.discover_jobs``); ``json_bytes``: corpus key ->
    uncompressed bytes; only ``loadable`` jobs are used. Returns (fleet 1, fleet 2, tiny): fleet 1 =
    ``dlrm`` + the ``n_largest`` largest single-file jobs (ties by id), fleet 2 = the other jobs, sorted,
    tiny = the smallest single-file job.
    """
    size = {j: sum(json_bytes[k] for k in keys) for j, keys in jobs.items()}
    usable = [j for j in sorted(jobs) if j in loadable]
    single = sorted((j for j in usable if len(jobs[j]) == 1 and j != dlrm), key=lambda j: (-size[j], j))
    fleet1 = ([dlrm] if dlrm in usable else []) + single[:n_largest]
    fleet2 = [j for j in usable if j not in fleet1]
    tiny = min(single, key=lambda j: (size[j], j))
    return fleet1, fleet2, tiny


def smallest(job_ids: list[str], size: Callable[[str], int]) -> list[str]:
    """The one smallest job of ``job_ids`` (the ``--quick`` fleets)."""
    return [min(job_ids, key=lambda j: (size(j), j))] if job_ids else []


def job_folder(job_id: str) -> str:
    """The landing-zone folder (= tracelake job id) of a corpus job: its key, path-safe, without suffix."""
    from jobs.common.ids import slug  # the project venv only (this file also runs in the HTA venv)

    base = job_id[: -len(".json.gz")] if job_id.endswith(".json.gz") else job_id.removesuffix(".json")
    return slug(base)


def corpus_fleet(
    name: str, job_ids: list[str], jobs: dict[str, list[str]], json_bytes: dict[str, int], corpus_root: str, work: str
) -> BenchFleet:
    """A landing zone ``<work>/<name>/landing/<job folder>/<file>`` of symlinks to the corpus files."""
    landing = os.path.join(work, name.replace(" ", "-"), "landing")
    out = []
    for j in job_ids:
        files = {os.path.basename(k): os.path.join(corpus_root, k) for k in jobs[j]}
        if len(files) != len(jobs[j]):
            raise ValueError(f"{j}: two files with one name")
        folder = os.path.join(landing, job_folder(j))
        if os.path.exists(folder):
            raise ValueError(f"{j}: landing folder {folder} taken by another job")
        os.makedirs(folder)
        for link, path in files.items():
            os.symlink(path, os.path.join(folder, link))
        out.append(BenchJob(j, files, sum(json_bytes[k] for k in jobs[j])))
    return BenchFleet(name, out, landing)


def from_synthetic(name: str, fleet: fb.Fleet) -> BenchFleet:
    """A :class:`BenchFleet` over a :func:`fleet_bench.build_fleet` landing zone (one link per rank)."""
    by_job: dict[str, BenchJob] = {}
    for c in fleet.captures:
        j = by_job.setdefault(c.job_id, BenchJob(c.job_id, {}, 0))
        j.files[f"rank-{c.rank:05d}.trace.json.gz"] = os.path.join(fleet.root, c.relative_dir, "trace.json.gz")
        j.json_bytes += c.json_bytes
    return BenchFleet(name, [by_job[j] for j in fleet.jobs], fleet.root)


def _quiet(_text: str) -> None:
    pass


def synthetic_units(target_bytes: float, unit_bytes: int) -> int:
    """Units of the synthetic fleet: the smallest even count (>= 2) whose JSON reaches ``target_bytes``."""
    return max(2, 2 * math.ceil(target_bytes / (2 * unit_bytes)))


def build_synthetic(
    work: str, corpus_root: str, target_gb: float, steps: int, seed: int, quick: bool, log: Callable[[str], None]
) -> tuple[BenchFleet, BenchFleet]:
    """Fleet 3 at its full and half size. A unit is one DLRM job + one job per :data:`fleet_bench.SINGLE_GPU`
    trace (``--quick``: one 1-step DLRM job, 2 units); the unit's size comes from building one first."""
    gen = {**fb.GENERATOR_DEFAULTS, "steps": 1 if quick else steps, "seed": seed}
    per_unit = (1, 0) if quick else (1, len(fb.SINGLE_GPU))
    if quick:
        units = 2
    else:
        probe = fb.build_fleet(
            os.path.join(work, "probe"), corpus_root, n_dlrm=per_unit[0], n_single=per_unit[1], log=_quiet, **gen
        )
        units = synthetic_units(target_gb * GB, probe.json_bytes)
        shutil.rmtree(probe.root, ignore_errors=True)
        log(f"fleet 3: one unit is {probe.json_bytes / MB:,.1f} MB JSON -> {units} units")
    big = fb.build_fleet(
        os.path.join(work, "fleet3", "landing"),
        corpus_root,
        n_dlrm=units * per_unit[0],
        n_single=units * per_unit[1],
        straggler_job_index=0,
        log=_quiet,
        **gen,
    )
    h = units // 2
    half = big.subset(
        os.path.join(work, "fleet3-half", "landing"),
        big.dlrm_jobs[: h * per_unit[0]] + big.single_jobs[: h * per_unit[1]],
    )
    return from_synthetic("fleet 3", big), from_synthetic("fleet 3 (half)", half)


# --------------------------------------------------------------------------------------------------
# children
# --------------------------------------------------------------------------------------------------


def hta_critical_path(ta: Any, rank: int) -> None:
    """HTA's critical path of one rank and its ``bound_by`` breakdown: the first ``ProfilerStep`` instance
    (``instance_id=0``, HTA's default), the whole trace (``annotation=""``) when the rank has no step.

    Raises:
        RuntimeError: HTA returned no graph or reported failure.
    """
    sym = ta.t.symbol_table.get_sym_id_map()
    step_ids = [v for k, v in sym.items() if "ProfilerStep" in k]
    has_step = bool(step_ids) and bool(ta.t.get_trace(rank)["name"].isin(step_ids).any())
    res = ta.critical_path_analysis(
        rank=rank, annotation="ProfilerStep" if has_step else "", instance_id=0 if has_step else None
    )
    if res is None:
        raise RuntimeError("critical_path_analysis returned None")
    graph, ok = res
    if not ok:
        raise RuntimeError("critical_path_analysis reported failure")
    graph.get_critical_path_breakdown()


def child_hta_job(spec_path: str) -> dict[str, Any]:
    """One HTA job (spec: ``link_dir``, ``files``): load, the five analyses, the critical path of each rank;
    seconds per step (``seconds``, critical path summed over ranks) and errors (``make_hta_golden._err``)."""
    with open(spec_path) as f:
        spec = json.load(f)
    golden.link_trace_dir(spec["link_dir"], spec["files"])
    t = time.perf_counter()
    from hta.trace_analysis import TraceAnalysis  # the HTA venv only

    logging.getLogger("hta").setLevel(logging.ERROR)
    out: dict[str, Any] = {"import_s": time.perf_counter() - t, "seconds": {}, "errors": {}, "ranks": []}

    def timed(name: str, fn: Callable[[], Any]) -> None:
        t0 = time.perf_counter()
        try:
            fn()
        except Exception as exc:  # HTA fails on some traces: record it, go on
            out["errors"][name] = golden._err(exc)
        out["seconds"][name] = out["seconds"].get(name, 0.0) + time.perf_counter() - t0

    box: dict[str, Any] = {}
    timed("load", lambda: box.update(ta=TraceAnalysis(trace_dir=spec["link_dir"])))
    ta = box.get("ta")
    if ta is not None:
        ranks = sorted(int(r) for r in ta.t.trace_files)
        out["ranks"] = ranks
        timed("temporal_breakdown", lambda: ta.get_temporal_breakdown(visualize=False))
        timed(
            "idle_time_breakdown",
            lambda: ta.get_idle_time_breakdown(
                ranks=ranks, visualize=False, consecutive_kernel_delay=golden.IDLE_CONSECUTIVE_KERNEL_DELAY
            ),
        )
        timed("gpu_kernel_breakdown", lambda: ta.get_gpu_kernel_breakdown(visualize=False, **golden.KERNEL_BREAKDOWN))
        timed(
            "cuda_kernel_launch_stats",
            lambda: ta.get_cuda_kernel_launch_stats(ranks=ranks, visualize=False, **golden.LAUNCH_STATS),
        )
        timed("comm_comp_overlap", lambda: ta.get_comm_comp_overlap(visualize=False))
        for r in ranks:
            timed(f"critical_path rank {r}", lambda r=r: hta_critical_path(ta, r))
        cp = [k for k in out["seconds"] if k.startswith("critical_path rank")]
        out["seconds"]["critical_path"] = sum(out["seconds"].pop(k) for k in cp)
    shutil.rmtree(spec["link_dir"], ignore_errors=True)
    return out


def child_parse_only(list_path: str) -> dict[str, Any]:
    """``parse_kineto(raw, path)`` on each file of the list, in this one process; CPU s of the parse calls."""
    sys.path.insert(0, REPO_ROOT)
    from jobs.normalize.kineto.parse import parse_kineto  # the project venv only

    with open(list_path) as f:
        paths = json.load(f)
    rows, parse_cpu = 0, 0.0
    for p in paths:
        with open(p, "rb") as f:
            raw = f.read()
        c = time.process_time()
        rows += parse_kineto(raw, p).events.num_rows
        parse_cpu += time.process_time() - c
    return {"n_files": len(paths), "rows": rows, "parse_cpu_s": parse_cpu}


# --------------------------------------------------------------------------------------------------
# measurements (parent)
# --------------------------------------------------------------------------------------------------


def _result_line(r: dict[str, Any]) -> dict[str, Any]:
    """The child's JSON result (last stdout line) merged with the figures of ``run_pinned``."""
    if "error" in r:
        return r
    figures = {k: v for k, v in r.items() if k not in ("returncode", "stdout", "stderr")}
    if r["returncode"] != 0:
        return {**figures, "error": f"exit {r['returncode']}: {fb.stderr_tail(r['stderr'])}"}
    try:
        return {**json.loads(r["stdout"].strip().splitlines()[-1]), **figures}
    except (IndexError, ValueError):
        return {**figures, "error": f"no result line; stderr: {fb.stderr_tail(r['stderr'])}"}


def hta_loop(
    fleet: BenchFleet, hta_python: str, cores: int, timeout: float, sample_s: float, work: str
) -> dict[str, Any]:
    """One sequential pass of the HTA script over the fleet, a fresh pinned process per job.

    ``wall_s``: first start to last end (s); ``cpu_s``: CPU s of all the jobs' processes; ``jobs``: per job
    ``process_s``, ``cpu_s``, ``seconds`` per HTA step, ``errors``; ``failed_jobs``: jobs whose process failed.
    """
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    per_job, t0 = {}, time.perf_counter()
    for i, job in enumerate(fleet.jobs):
        spec = os.path.join(work, f"hta-job{i}.json")
        with open(spec, "w") as f:
            json.dump({"link_dir": os.path.join(work, f"hta-job{i}.links"), "files": job.files}, f)
        r = _result_line(
            fb.run_pinned(
                [hta_python, os.path.abspath(__file__), "--_hta-job", spec], cores, timeout, sample_s, env=env
            )
        )
        per_job[job.job_id] = {
            k: r.get(k) for k in ("process_s", "cpu_s", "seconds", "errors", "ranks", "error") if k in r
        } | {"peak_rss": (r.get("memory") or {}).get("driver_python")}
    wall = time.perf_counter() - t0
    failed = sorted(j for j, v in per_job.items() if "error" in v)
    return {
        "wall_s": wall,
        "cpu_s": sum(v.get("cpu_s") or 0.0 for v in per_job.values()),
        "jobs": per_job,
        "failed_jobs": failed,
        "peak_rss": max((v["peak_rss"] or 0 for v in per_job.values()), default=0),
        **({"error": f"{len(failed)} job(s) failed: {per_job[failed[0]]['error']}"} if failed else {}),
    }


def tracelake_run(
    landing: str,
    work: str,
    cores: int,
    mlflow: bool,
    timeout: float,
    sample_s: float,
    executor: str = "local",
    stages: bool = False,
    master: str | None = None,
) -> dict[str, Any]:
    """``python -m jobs.cli run`` on ``landing`` into a fresh warehouse (removed after), pinned to ``cores``
    CPUs: the default local executor (one worker per CPU), or ``executor="spark"`` on ``local[cores]`` (``master``:
    on that Spark master instead, e.g. a cluster's ``spark://…`` or a Connect server's ``sc://…``).

    ``wall_s`` (process wall s, JVM start included), ``cpu_s`` (all descendants), ``memory`` (peaks,
    bytes), ``captures`` / ``ingested`` (from the command's summary line); with ``stages``, the CLI run through
    ``stage_cpu.py`` and ``stages``: ``{stage: {"wall_s", "cpu_s"}}``.
    """
    wh = tempfile.mkdtemp(prefix="wh-", dir=work)
    cli = [os.path.join(os.path.dirname(os.path.abspath(__file__)), "stage_cpu.py")] if stages else ["-m", "jobs.cli"]
    cmd = [sys.executable, *cli, "run", "--raw", landing, "--warehouse", wh]
    cmd += ["--master", master or f"local[{cores}]"] if executor == "spark" else ["--executor", "local"]
    cmd += [] if mlflow else ["--no-mlflow"]
    r = fb.run_pinned(cmd, cores, timeout, sample_s, env=fb.child_env(cores))
    shutil.rmtree(wh, ignore_errors=True)
    if "error" in r:
        return r
    m = re.search(r"captures: (\d+) \((\d+) ingested", r["stdout"])
    out = {
        "wall_s": r["process_s"],
        "captures": int(m.group(1)) if m else None,
        "ingested": int(m.group(2)) if m else None,
        **{k: v for k, v in r.items() if k not in ("returncode", "stdout", "stderr")},
    }
    if stages:
        found = re.findall(r"^STAGE (\S+) ([\d.]+) ([\d.]+)$", r["stderr"], flags=re.M)
        out["stages"] = {name: {"wall_s": float(w), "cpu_s": float(c)} for name, w, c in found}
    if r["returncode"] != 0:
        out["error"] = f"exit {r['returncode']}: {fb.stderr_tail(r['stderr'])}"
    return out


def parse_only(fleet: BenchFleet, work: str, timeout: float, sample_s: float) -> dict[str, Any]:
    """:func:`child_parse_only` over the fleet's files, one process on one core. ``cpu_s``: CPU s of the
    ``parse_kineto`` calls (no interpreter start or import); ``process_cpu_s``: the whole process."""
    lst = os.path.join(work, f"parse-{len(fleet.jobs)}.json")
    with open(lst, "w") as f:
        json.dump([p for j in fleet.jobs for p in j.files.values()], f)
    r = _result_line(
        fb.run_pinned(
            [sys.executable, os.path.abspath(__file__), "--_parse-only", lst], 1, timeout, sample_s, env=fb.child_env(1)
        )
    )
    if "error" in r:
        return r
    return {**r, "wall_s": r["process_s"], "process_cpu_s": r["cpu_s"], "cpu_s": r["parse_cpu_s"]}


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the runs without an error: ``wall_s``, ``cpu_s`` and each ``memory`` peak; ``runs`` kept."""
    ok = [r for r in runs if "error" not in r]
    out: dict[str, Any] = {
        "n_runs": len(runs),
        "n_ok": len(ok),
        "errors": [r["error"] for r in runs if "error" in r],
        "runs": runs,
    }
    for k in ("wall_s", "cpu_s", "peak_rss"):
        vals = [r[k] for r in ok if r.get(k) is not None]
        out[k] = statistics.median(vals) if vals else None
    mems = [r["memory"] for r in ok if r.get("memory")]
    out["memory"] = {k: statistics.median(m[k] for m in mems) for k in mems[0]} if mems else None
    for k in ("captures", "ingested"):
        if ok and k in ok[0]:
            out[k] = ok[0][k]
    return out


# --------------------------------------------------------------------------------------------------
# targets
# --------------------------------------------------------------------------------------------------


def _ratio(a, b) -> float | None:
    return a / b if a is not None and b else None


def _line(
    n: int,
    what: str,
    figures: str,
    value: float | None,
    bound: float,
    at_most: bool,
    spec: str,
    missing: str | None = None,
    note: str = "",
    unit: str = "x",
) -> dict[str, Any]:
    """One target line: ``target N: what: figures = value (target <= bound): ok|MISSED [note]``, or
    ``n/a (missing)`` when ``value`` is None."""
    if value is None:
        return {
            "target": n,
            "what": what,
            "status": "n/a",
            "value": None,
            "bound": bound,
            "text": f"target {n}: {what}: n/a ({missing or 'not measured'})",
        }
    ok = value <= bound if at_most else value >= bound
    rel = "<=" if at_most else ">="
    status = "ok" if ok else "MISSED"
    sep = " " if unit == "s" else ""
    text = (
        f"target {n}: {what}: {figures} = {format(value, spec)}{sep}{unit} "
        f"(target {rel} {format(bound, spec)}{sep}{unit}): {status}"
    )
    return {
        "target": n,
        "what": what,
        "status": status,
        "value": value,
        "bound": bound,
        "text": text + (f" [{note}]" if note else ""),
    }


def _s(x) -> str:
    return "-" if x is None else f"{x:,.1f} s"


def _mb(n_bytes: int) -> str:
    return f"{n_bytes / MB:,.1f}" if n_bytes >= MB else f"{n_bytes / MB:.3f}"


def _fleet_label(f: dict[str, Any]) -> str:
    jobs, files = f["n_jobs"], f["n_files"]
    return (
        f"{f['name']} ({jobs} job{'s' if jobs != 1 else ''}, {files} file{'s' if files != 1 else ''}, "
        f"{_mb(f['json_bytes'])} MB JSON)"
    )


def _why(*medians: dict[str, Any], default: str = "not measured") -> str:
    """Why a figure is missing: the first error of the given medians (:func:`median_of`), else ``default``."""
    for m in medians:
        if m.get("errors"):
            return m["errors"][0]
    return default


def evaluate_targets(res: dict[str, Any]) -> list[dict[str, Any]]:
    """The six targets (module docstring) from the results of :func:`main`; each a dict with ``target``,
    ``status`` (``ok`` | ``MISSED`` | ``n/a``), ``value`` (the ratio or seconds compared), ``bound``, ``text``."""
    fleets, cores = res.get("fleets", {}), res.get("cores", [])
    top = str(max(cores)) if cores else None
    out = []

    def run_of(f, key="run", c=None):
        return ((f.get("tracelake") or {}).get(key) or {}).get(str(c) if c else top) or {}

    def vs_hta(n: int, k: str, bound: float) -> dict[str, Any]:
        f = fleets.get(k)
        if not f:
            return _line(n, f"fleet {k}", "", None, bound, True, ".2f", f"fleet {k} not run")
        hta, run, no_ml = f.get("hta") or {}, run_of(f), run_of(f, "run_no_mlflow")
        note = (
            ""
            if k != "3" or f["json_bytes"] >= GB
            else f"smoke size: {f['json_bytes'] / GB:.3f} GB, the target is for >= 1 GB"
        )
        return _line(
            n,
            _fleet_label(f),
            f"tracelake run {_s(run.get('wall_s'))} (--no-mlflow "
            f"{_s(no_ml.get('wall_s'))}) vs HTA loop {_s(hta.get('wall_s'))}",
            _ratio(run.get("wall_s"), hta.get("wall_s")),
            bound,
            True,
            ".2f",
            res.get("hta_skipped") or _why(hta, run),
            note,
        )

    out.append(vs_hta(1, "3", TARGET_VS_HTA_BIG))
    out += [vs_hta(2, k, TARGET_VS_HTA_CORPUS) for k in ("1", "2")]
    f3 = fleets.get("3")
    half = (f3 or {}).get("half")
    if f3 and half:
        d_mb = (f3["json_bytes"] - half["json_bytes"]) / MB
        runs = (run_of(f3), run_of(half))
        parses = tuple((f3.get("parse_only") or {}).get(k) or {} for k in ("full", "half"))

        def marginal(full, part):
            a, b = full.get("cpu_s"), part.get("cpu_s")
            return (a - b) / d_mb if a is not None and b is not None and d_mb > 0 else None

        e2e, parse = marginal(*runs), marginal(*parses)
        figs = (
            f"tracelake run {e2e:.4f} CPU s/MB vs parse-only {parse:.4f} CPU s/MB"
            if e2e is not None and parse is not None
            else ""
        )
        ratio = e2e / parse if e2e is not None and parse is not None and parse > 0 else None
        out.append(
            _line(
                3,
                f"marginal CPU per MB, fleet 3 at {_mb(half['json_bytes'])} -> {_mb(f3['json_bytes'])} MB JSON",
                figs,
                ratio,
                TARGET_MARGINAL_VS_PARSE,
                True,
                ".2f",
                _why(*runs, *parses, default="parse-only CPU did not grow with the fleet"),
            )
        )
    else:
        out.append(_line(3, "marginal CPU per MB", "", None, TARGET_MARGINAL_VS_PARSE, True, ".2f", "fleet 3 not run"))
    tiny = res.get("tiny")
    if tiny:
        r = run_of(tiny)
        out.append(
            _line(
                4,
                f"fixed cost, tiny landing zone ({tiny['jobs'][0]}, {_mb(tiny['json_bytes'])} MB JSON)",
                "tracelake run wall, JVM start included",
                r.get("wall_s"),
                TARGET_TINY_S,
                True,
                ".1f",
                _why(r),
                unit="s",
            )
        )
    else:
        out.append(_line(4, "fixed cost, tiny landing zone", "", None, TARGET_TINY_S, True, ".1f", "--skip-tiny"))
    if f3 and 1 in cores and 2 in cores:
        r1, r2 = run_of(f3, c=1), run_of(f3, c=2)
        out.append(
            _line(
                5,
                f"scaling 1 -> 2 cores, {_fleet_label(f3)}",
                f"tracelake run {_s(r1.get('wall_s'))} on 1 core vs {_s(r2.get('wall_s'))} on 2 cores",
                _ratio(r1.get("wall_s"), r2.get("wall_s")),
                TARGET_SCALING,
                False,
                ".2f",
                _why(r1, r2),
            )
        )
    else:
        out.append(
            _line(
                5,
                "scaling 1 -> 2 cores, fleet 3",
                "",
                None,
                TARGET_SCALING,
                False,
                ".2f",
                "fleet 3 not run" if not f3 else "--cores must include 1 and 2",
            )
        )
    if f3 and half:
        runs = (run_of(f3), run_of(half))
        m_full, m_half = ((r.get("memory") or {}).get("executor") for r in runs)
        grow = f3["json_bytes"] / half["json_bytes"] if half["json_bytes"] else float("nan")
        figs = (
            f"executor peak {m_full / MB:,.0f} MB vs {m_half / MB:,.0f} MB at the half size (input x{grow:.2f})"
            if m_full and m_half
            else ""
        )
        what = "JVM + Python workers" if (runs[0].get("memory") or {}).get("jvm") else "local worker process"
        out.append(
            _line(
                6,
                f"memory per executor ({what}, {top} CPUs), {f3['name']}",
                figs,
                _ratio(m_full, m_half),
                TARGET_MEMORY_FLAT,
                True,
                ".2f",
                _why(*runs, default="no memory sample"),
            )
        )
    else:
        out.append(
            _line(6, "memory per executor, fleet 3", "", None, TARGET_MEMORY_FLAT, True, ".2f", "fleet 3 not run")
        )
    return out


def print_report(res: dict[str, Any]) -> None:
    """One row per fleet (medians), then the target lines."""
    top = str(max(res["cores"]))
    print()
    others = ", ".join(str(c) for c in res["cores"] if str(c) != top)
    also = f" (fleet 3's tracelake run also on {others})" if others and "3" in res["fleets"] else ""
    print(
        f"medians of {res['repeat']} run(s) on {top} pinned CPU(s){also}; wall s / CPU s of all processes; "
        "MB = 10^6 bytes of JSON"
    )
    hdr = (
        f"{'fleet':15s} {'jobs':>5s} {'files':>5s} {'JSON MB':>9s} {'HTA wall':>9s} {'HTA cpu':>9s} "
        f"{'run wall':>9s} {'run cpu':>9s} {'nomlf wall':>10s} {'nomlf cpu':>9s} {'run/HTA':>7s}"
    )
    print(hdr)
    print("-" * len(hdr))
    rows = [(k, f) for k, f in res["fleets"].items()] + [
        ("half", res["fleets"]["3"]["half"]) if "3" in res["fleets"] else (None, None)
    ]
    rows += [("tiny", res["tiny"])] if res.get("tiny") else []
    for _k, f in rows:
        if not f:
            continue
        h = f.get("hta") or {}
        t = f.get("tracelake") or {}
        r, n = (t.get("run") or {}).get(top, {}), (t.get("run_no_mlflow") or {}).get(top, {})
        ratio = _ratio(r.get("wall_s"), h.get("wall_s"))
        print(
            f"{f['name'][:15]:15s} {f['n_jobs']:>5d} {f['n_files']:>5d} {_mb(f['json_bytes']):>9s} "
            f"{fb._f(h.get('wall_s')):>9s} {fb._f(h.get('cpu_s')):>9s} {fb._f(r.get('wall_s')):>9s} "
            f"{fb._f(r.get('cpu_s')):>9s} {fb._f(n.get('wall_s')):>10s} {fb._f(n.get('cpu_s')):>9s} "
            f"{fb._f(ratio, '.2f'):>7s}"
        )
        for c, rc in sorted((t.get("run") or {}).items()):
            if c != top:
                print(
                    f"{'':15s} tracelake run on {c} core(s): wall {fb._f(rc.get('wall_s'))} s, "
                    f"CPU {fb._f(rc.get('cpu_s'))} s"
                )
        for kind, p in sorted((f.get("parse_only") or {}).items()):
            print(f"{'':15s} parse-only ({kind} size, 1 core): CPU {fb._f(p.get('cpu_s'), '.2f')} s")
        errs = [
            e
            for x in [h] + list((t.get("run") or {}).values()) + list((t.get("run_no_mlflow") or {}).values())
            for e in x.get("errors", [])
        ]
        if errs:
            print(f"{'':15s} errors: {errs[0]}" + (f" (+{len(errs) - 1} more)" if len(errs) > 1 else ""))
        short = [
            run
            for kind in t.values()
            for med in kind.values()
            for run in med.get("runs", [])
            if run.get("captures") is not None and run.get("ingested") != run["captures"]
        ]
        if short:
            print(
                f"{'':15s} {len(short)} tracelake run(s) did not ingest every capture "
                f"({short[0]['ingested']} of {short[0]['captures']})"
            )
        hta_errs = sorted(
            {
                a.split(" rank")[0]
                for v in (h.get("runs") or [{}])[0].get("jobs", {}).values()
                for a in (v.get("errors") or {})
            }
        )
        if hta_errs:
            print(f"{'':15s} HTA analyses that raised on some job: {', '.join(hta_errs)}")
    print()
    for t in res["targets"]:
        print(t["text"])


# --------------------------------------------------------------------------------------------------


def _measure_fleet(
    f: BenchFleet, a: argparse.Namespace, work: str, cores: list[int], hta: bool, no_mlflow: bool
) -> dict[str, Any]:
    """The interleaved repeats of one fleet: the HTA loop (``hta``), ``tracelake run`` on each of ``cores``
    and ``--no-mlflow`` (``no_mlflow``) on the largest; HTA and the comparisons on ``max(cores)``."""
    top = max(cores)
    plan: list[tuple[str, Callable[[], dict]]] = []
    if hta:
        plan.append(("hta", lambda: hta_loop(f, a.hta_python, top, a.timeout, a.sample_s, work)))
    plan.append((f"run/{top}", lambda: tracelake_run(f.landing, work, top, True, a.timeout, a.sample_s, a.executor)))
    if no_mlflow:
        plan.append(
            (
                f"run_no_mlflow/{top}",
                lambda: tracelake_run(f.landing, work, top, False, a.timeout, a.sample_s, a.executor),
            )
        )
    for c in cores:
        if c != top:
            plan.append(
                (f"run/{c}", lambda c=c: tracelake_run(f.landing, work, c, True, a.timeout, a.sample_s, a.executor))
            )
    runs: dict[str, list[dict]] = {k: [] for k, _ in plan}
    for i in range(a.repeat):
        for k, fn in plan:
            label = f"HTA loop on {top}" if k == "hta" else "tracelake {} on {}".format(*k.split("/"))
            print(f"{f.name}: {label} core(s) ({i + 1}/{a.repeat}) ...", flush=True)
            r = fn()
            runs[k].append(r)
            print(f"  {r.get('error') or '%.1f s wall, %.1f s CPU' % (r['wall_s'], r['cpu_s'])}", flush=True)
    out: dict[str, Any] = f.info() | {"tracelake": {}}
    for k, rs in runs.items():
        if k == "hta":
            out["hta"] = median_of(rs)
        else:
            kind, c = k.split("/")
            out["tracelake"].setdefault(kind, {})[c] = median_of(rs)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fleets", default="1,2,3", help="which fleets, comma separated (default 1,2,3)")
    ap.add_argument(
        "--repeat", type=int, help="fresh-process runs per measurement, median reported (default 3; --quick: 1)"
    )
    ap.add_argument("--synthetic-gb", type=float, default=1.0, help="fleet 3 JSON size, GB = 10^9 bytes (default 1.0)")
    ap.add_argument(
        "--steps",
        type=int,
        default=fb.GENERATOR_DEFAULTS["steps"],
        help="ProfilerSteps per synthetic DLRM trace (default 3)",
    )
    ap.add_argument("--seed", type=int, default=fb.GENERATOR_DEFAULTS["seed"])
    ap.add_argument(
        "--cores",
        default="1,2",
        help="core counts (default 1,2): comparisons on the largest; fleet 3's "
        "tracelake run also on the others (target 5)",
    )
    ap.add_argument(
        "--hta-python",
        default=os.path.join(REPO_ROOT, ".hta-venv", "bin", "python"),
        help="the HTA venv's python (default <repo>/.hta-venv/bin/python; HTA is skipped with a "
        "message when it is missing)",
    )
    ap.add_argument("--corpus-root", default=os.path.join(REPO_ROOT, "..", "shared", "corpus"))
    ap.add_argument(
        "--golden",
        default=os.path.join(REPO_ROOT, "tests", "golden", "hta_0_5_0.json"),
        help="HTA's golden record: which corpus jobs HTA loads",
    )
    ap.add_argument("--quick", action="store_true", help="smoke run: tiny fleets, --repeat 1")
    ap.add_argument(
        "--executor",
        choices=("local", "spark"),
        default="local",
        help="tracelake run's executor (default local, as `tracelake run`; spark: --master local[N])",
    )
    ap.add_argument("--skip-tiny", action="store_true", help="no tiny-landing-zone run (target 4)")
    ap.add_argument("--timeout", type=float, default=3600.0, help="per child process, seconds")
    ap.add_argument("--sample-s", type=float, default=0.2, help="memory sampling period, seconds")
    ap.add_argument("--workdir", help="landing zones and warehouses (default: a temp dir, removed)")
    ap.add_argument("--keep", action="store_true", help="keep the work dir")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--_hta-job", dest="hta_job", help=argparse.SUPPRESS)
    ap.add_argument("--_parse-only", dest="parse_list", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.hta_job or a.parse_list:
        print(json.dumps(child_hta_job(a.hta_job) if a.hta_job else child_parse_only(a.parse_list)))
        return 0
    a.repeat = a.repeat or (1 if a.quick else 3)
    try:
        which = sorted({int(x) for x in a.fleets.split(",") if x.strip()})
        cores = sorted({int(x) for x in a.cores.split(",") if x.strip()})
    except ValueError:
        ap.error("--fleets and --cores take comma-separated integers, e.g. 1,2,3")
    if not set(which) <= {1, 2, 3}:
        ap.error(f"--fleets {a.fleets!r}: fleets are 1, 2 and 3")
    available = len(os.sched_getaffinity(0))
    if not cores or min(cores) < 1 or max(cores) > available:
        ap.error(f"--cores {a.cores!r}: this machine has {available} usable CPU(s)")
    if a.repeat < 1 or a.synthetic_gb <= 0 or a.steps < 1:
        ap.error("--repeat, --synthetic-gb and --steps must be positive")
    corpus_root = os.path.abspath(a.corpus_root)
    if not os.path.isdir(os.path.join(corpus_root, fb.DLRM_DIR)):
        print(f"{os.path.join(corpus_root, fb.DLRM_DIR)}: corpus not found (--corpus-root)", file=sys.stderr)
        return 2
    hta = os.path.exists(a.hta_python)
    hta_skipped = None if hta else f"HTA skipped: {a.hta_python} missing (create it with benchmarks/hta_venv.sh)"
    if hta_skipped:
        print(hta_skipped)

    jobs = golden.discover_jobs(corpus_root)
    json_bytes = {k: uncompressed_size(os.path.join(corpus_root, k)) for keys in jobs.values() for k in keys}
    loadable = hta_loadable(a.golden)
    if loadable is None:
        print(f"{a.golden} missing: using every corpus job (HTA failures show as errors)")
        loadable = set(jobs)
    fleet1, fleet2, tiny = select_corpus_fleets(jobs, json_bytes, loadable)
    if a.quick:
        size = lambda j: sum(json_bytes[k] for k in jobs[j])  # noqa: E731
        fleet1, fleet2 = smallest([j for j in fleet1 if len(jobs[j]) == 1], size), smallest(fleet2, size)

    work = a.workdir or tempfile.mkdtemp(prefix="bench-fleet_vs_hta-")
    os.makedirs(work, exist_ok=True)
    res: dict[str, Any] = {
        "args": {k: v for k, v in vars(a).items() if k not in ("hta_job", "parse_list")},
        "cores": cores,
        "repeat": a.repeat,
        "cpu_count": os.cpu_count(),
        "fleets": {},
        "hta_skipped": hta_skipped,
    }
    failed = False
    try:
        selected = {1: fleet1, 2: fleet2}
        for n in which:
            if n == 3:
                size = "--quick: 2 one-step DLRM jobs" if a.quick else f">= {a.synthetic_gb:g} GB JSON"
                print(f"building fleet 3 ({size}) in {work} ...", flush=True)
                t = time.perf_counter()
                big, half = build_synthetic(work, corpus_root, a.synthetic_gb, a.steps, a.seed, a.quick, print)
                print(
                    f"built in {time.perf_counter() - t:.0f} s: {big.n_files} files, {big.json_bytes / MB:,.1f} MB "
                    f"JSON; half: {half.n_files} files, {half.json_bytes / MB:,.1f} MB",
                    flush=True,
                )
                out = _measure_fleet(big, a, work, cores, hta, no_mlflow=True)
                out["half"] = _measure_fleet(half, a, work, [max(cores)], False, no_mlflow=False)
                out["parse_only"] = {}
                for kind, f in (("full", big), ("half", half)):
                    print(f"{f.name}: parse-only ...", flush=True)
                    out["parse_only"][kind] = median_of(
                        [parse_only(f, work, a.timeout, a.sample_s) for _ in range(a.repeat)]
                    )
            else:
                f = corpus_fleet(f"fleet {n}", selected[n], jobs, json_bytes, corpus_root, work)
                out = _measure_fleet(f, a, work, [max(cores)], hta, no_mlflow=True)
            res["fleets"][str(n)] = out
        if not a.skip_tiny:
            f = corpus_fleet("tiny", [tiny], jobs, json_bytes, corpus_root, work)
            res["tiny"] = _measure_fleet(f, a, work, [max(cores)], False, no_mlflow=False)
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    for f in list(res["fleets"].values()) + [res["fleets"].get("3", {}).get("half"), res.get("tiny")]:
        if f:
            m = [f.get("hta") or {}] + [v for kind in f.get("tracelake", {}).values() for v in kind.values()]
            failed |= any(x.get("errors") for x in m)
    res["targets"] = evaluate_targets(res)
    print_report(res)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(res, fh, indent=1, sort_keys=True, default=str)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
