#!/usr/bin/env python3
"""Fleet scale (issue 29): what a daily run costs as the history grows. Prints each target with ``ok``/``MISSED``.

Measured so far:

* **discovery** — one hourly interval's discovery (:func:`jobs.landing.interval.discover_interval`: the interval's
  ``date=`` folders only) in a landing zone of ``--small`` capture folders (``--per-day`` a day, so small/per-day
  days of history) and of ``--large`` folders, on local disk; target: large / small ≤ 2×. The peer, measured in the
  same run: the whole-zone listing every interval did before (``discover`` of everything, then
  :func:`~jobs.landing.interval.restrict_to_interval`).

* **executor memory** — the largest local-executor worker's peak RSS (:class:`fleet_bench.TreeSampler`) of one
  ``tracelake run --no-mlflow`` on the synthetic fleet of ``fleet_vs_hta.py`` (fleet 3: ``--synthetic-gb`` GB of
  JSON, DLRM jobs and single-GPU jobs built from the corpus) and on its first half, pinned to ``--cores`` CPUs;
  target: full / half ≤ 1.25× (flat as the fleet doubles). ``--synthetic-gb 0`` skips it.

* **publishing** — ``tracelake run`` and ``tracelake run --no-mlflow`` on fleet 2 of ``fleet_vs_hta.py`` (8 small
  corpus jobs) and on fleet 2 with every job eight times (64 jobs), ``--repeat`` times each, the four runs of a
  repetition back to back (the two kinds in turn first), every process of the tree counted, each run into a new
  warehouse (so a new sqlite MLflow store). Publishing CPU s per job (target ≤ 0.2) is the slope: what the 56 more
  jobs add to publishing, ((CPU(run) − CPU(``--no-mlflow``)) at 64 jobs − the same at 8) / 56, the median over the
  repetitions of each one's paired differences (a 2-vCPU machine's speed drifts by more than the figure between
  runs minutes apart); the set-up a run pays once whatever its jobs (importing MLflow, creating the store's tables)
  is the intercept, printed beside it. Beside it, the same slope of the ``publish`` stage's own CPU s
  (``stage_cpu.py``: every process of the tree while the stage runs), which the other stages' noise does not reach.
  Target: the wall ratio run / ``--no-mlflow`` on fleet 2 ≤ 1.3. ``--no-publishing`` skips it.

* **daily runs** — the demo's captures (``make demo``: two 2-rank DDP jobs of job name ``demo-ddp``, taken from
  ``--demo-landing``, or captured once with :func:`jobs.demo.train_ddp.run_demo_training` when not given) copied
  into ``--days`` consecutive days (new job ids, capture ids and commit times on each day), then one
  ``tracelake run --since DAY --until DAY+1`` per day into one warehouse, in day order; target: the last day's wall /
  the first day's ≤ 1.2 (a day costs what it brings, not what the history holds). ``--days 0`` skips it.

The other target of the issue (the daily fleet stage at 30 vs 365 days of a simulated fleet) is measured by
``benchmarks/fleet_history.py`` (rows written straight into the tables): this script says so. Usage (from the repo root)::

    .venv/bin/python benchmarks/fleet_scale.py [--small 1000] [--large 100000] [--per-day 100] [--repeat 3]
        [--synthetic-gb 1.0] [--cores 2]

The peer is slow on a large zone (it reads every manifest): minutes at 100,000 folders.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks"), str(ROOT / "tests" / "golden")]

from jobs.landing.discover import discover  # noqa: E402
from jobs.landing.interval import discover_interval, restrict_to_interval  # noqa: E402

#: The interval measured: the last hour of the newest day; this many captures land in it.
NEW_IN_INTERVAL = 10


def build_zone(root: Path, n: int, per_day: int, end: datetime) -> tuple[datetime, datetime]:
    """``n`` committed capture folders (``date=…/job=…/attempt=0/rank=00000/cap/{trace.json, manifest.json}``),
    ``per_day`` a day, ending on ``end``'s day; the manifests' mtimes are their creation times, and the last
    :data:`NEW_IN_INTERVAL` land in ``end``'s last hour. Returns that hour ``(since, until)``."""
    until = end.replace(minute=0, second=0, microsecond=0)
    since = until - timedelta(hours=1)
    days = -(-n // per_day)
    k = 0
    for d in range(days):
        day = until - timedelta(days=days - 1 - d)
        for i in range(min(per_day, n - k)):
            k += 1
            last = k > n - NEW_IN_INTERVAL
            t = since + timedelta(seconds=30 * (n - k + 1)) if last else day - timedelta(hours=2, seconds=i)
            folder = root / f"date={t:%Y-%m-%d}" / f"job=j{k:06d}" / "attempt=0" / "rank=00000" / "cap"
            folder.mkdir(parents=True)
            (folder / "trace.json").write_text("{}")
            doc = {"job_id": f"j{k:06d}", "created_at": t.isoformat()}
            (folder / "manifest.json").write_text(json.dumps(doc))
            os.utime(folder / "manifest.json", (t.timestamp(), t.timestamp()))
    return since, until


def _median_s(fn, repeat: int) -> float:
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def measure_discovery(base: Path, n: int, per_day: int, repeat: int) -> dict:
    """Seconds (medians) of one interval's discovery by prefix and by whole listing in a zone of ``n`` folders."""
    zone = base / f"zone-{n}"
    since, until = build_zone(zone, n, per_day, datetime(2026, 12, 5, 12, tzinfo=UTC))
    _, sel = discover_interval(str(zone), since, until)
    _, whole = restrict_to_interval(discover(str(zone)), str(zone), since, until)
    assert sel.job_ids == whole.job_ids and len(sel.new) == NEW_IN_INTERVAL, (sel.job_ids, whole.job_ids)
    prefix_s = _median_s(lambda: discover_interval(str(zone), since, until), repeat)
    t = time.perf_counter()  # the peer once (minutes on a large zone); the check above was its warm-up
    restrict_to_interval(discover(str(zone)), str(zone), since, until)
    whole_s = time.perf_counter() - t
    shutil.rmtree(zone)
    return {"folders": n, "prefix_s": prefix_s, "whole_s": whole_s}


def measure_executor_memory(work: str, corpus_root: str, gb: float, cores: int, timeout_s: float) -> dict:
    """The executor peak (bytes) and wall (s) of ``tracelake run --no-mlflow`` on fleet 3 of ``fleet_vs_hta.py``
    at ``gb`` GB of JSON and on its half (:func:`fleet_vs_hta.build_synthetic`, 3 steps, seed 7).

    Raises:
        RuntimeError: a run failed.
    """
    import fleet_vs_hta as fvh  # the synthetic fleet and the measured run of that benchmark

    big, half = fvh.build_synthetic(work, corpus_root, gb, 3, 7, False, print)
    out = {}
    for name, f in (("full", big), ("half", half)):
        r = fvh.tracelake_run(f.landing, work, cores, False, timeout_s, 0.1)
        if "error" in r:
            raise RuntimeError(f"tracelake run on {name} fleet 3: {r['error']}")
        out[name] = {"jobs": len(f.jobs), "json_mb": f.json_bytes / 1e6, "executor": r["memory"]["executor"],
                     "wall_s": r["wall_s"]}  # fmt: skip
    return out


#: Publishing's second fleet size: fleet 2 with every job this many times.
PUBLISH_COPIES = 8


def copies(landing: str, n: int) -> str:
    """A landing zone beside ``landing`` with each of its job folders ``n`` times (``<folder>``, ``<folder>-copy1``,
    …: other job ids, the same files, as links): the fleet of ``landing`` with ``n`` times the jobs."""
    out = landing.rstrip("/") + f"-x{n}"
    for job in sorted(os.listdir(landing)):
        for name in [job] + [f"{job}-copy{i}" for i in range(1, n)]:
            os.makedirs(os.path.join(out, name))
            for f in os.listdir(os.path.join(landing, job)):
                os.symlink(os.path.realpath(os.path.join(landing, job, f)), os.path.join(out, name, f))
    return out


def measure_publishing(work: str, corpus_root: str, cores: int, repeat: int, timeout_s: float) -> dict:
    """Medians of wall and CPU s of ``tracelake run`` with and without MLflow on fleet 2 of ``fleet_vs_hta.py`` and on
    fleet 2 with every job :data:`PUBLISH_COPIES` times (:func:`copies`).

    Raises:
        RuntimeError: a run failed.
    """
    import fleet_vs_hta as fvh  # the corpus fleets and the measured run of that benchmark
    import make_hta_golden as golden  # which corpus files make a job
    from normalize_bench import uncompressed_size

    jobs = golden.discover_jobs(corpus_root)
    size = {k: uncompressed_size(os.path.join(corpus_root, k)) for keys in jobs.values() for k in keys}
    loadable = fvh.hta_loadable(str(ROOT / "tests" / "golden" / "hta_0_5_0.json")) or set(jobs)
    fleet2 = fvh.corpus_fleet(
        "fleet 2", fvh.select_corpus_fleets(jobs, size, loadable)[1], jobs, size, corpus_root, work
    )
    out: dict = {"jobs": len(fleet2.jobs)}
    landings = {"x1": fleet2.landing, "xn": copies(fleet2.landing, PUBLISH_COPIES)}
    runs: dict[str, list] = {}
    for i in range(repeat):
        # each repetition runs the four back to back, the two kinds in turn first: a drift of the machine's speed
        # over the minutes falls on both sides of each difference
        for size_key, landing in landings.items():
            for kind, mlflow in sorted((("run", True), ("no_mlflow", False)), reverse=bool(i % 2)):
                r = fvh.tracelake_run(landing, work, cores, mlflow, timeout_s, 0.1, stages=mlflow)
                if "error" in r:
                    raise RuntimeError(f"tracelake run ({kind}) on fleet 2 ({size_key}): {r['error']}")
                out.setdefault("ingested", r["ingested"])
                if size_key == "xn" and r["ingested"] != PUBLISH_COPIES * out["ingested"]:  # every copy taken
                    raise RuntimeError(f"tracelake run ({kind}) on fleet 2 x{PUBLISH_COPIES}: {r['ingested']} "
                                       f"ingested, {out['ingested']} at x1")  # fmt: skip
                runs.setdefault(kind if size_key == "x1" else f"{kind}_xn", []).append(r)
    for key, rs in runs.items():
        out[key] = {k: statistics.median(r[k] for r in rs) for k in ("wall_s", "cpu_s")}
    # publishing CPU s of each repetition (run − --no-mlflow, measured back to back) at both sizes
    out["publishing_cpu_s"] = {
        size: [r["cpu_s"] - b["cpu_s"] for r, b in zip(runs[f"run{sfx}"], runs[f"no_mlflow{sfx}"])]
        for size, sfx in (("x1", ""), ("xn", "_xn"))
    }
    # and the publish stage's own CPU s (stage_cpu.py: the MLflow runs, validation and job reports, fleet report)
    out["publish_stage_cpu_s"] = {
        size: [r["stages"].get("publish", {}).get("cpu_s", float("nan")) for r in runs[f"run{sfx}"]]
        for size, sfx in (("x1", ""), ("xn", "_xn"))
    }
    return out


def copy_into_days(demo: Path, zone: Path, days: int, first: datetime) -> list[datetime]:
    """Every capture folder under ``demo`` (``…/<capture id>/{manifest.json, trace…}``) copied into ``zone`` once per
    day from ``first``: ``date=DAY/job=<job>-dNN/…/<capture id>-dNN/``, the manifest's ``job_id``, ``capture_id``
    and ``created_at`` (noon of the day, also its mtime: the commit time) rewritten. Returns the days' midnights."""
    caps = sorted(m.parent for m in demo.rglob("manifest.json"))
    if not caps:
        raise FileNotFoundError(f"{demo}: no capture folder (manifest.json)")
    out = []
    for d in range(days):
        day = first + timedelta(days=d)
        noon = day + timedelta(hours=12)
        for cap in caps:
            doc = json.loads((cap / "manifest.json").read_text())
            job, cid = f"{doc['job_id']}-d{d:02d}", f"{doc['capture_id']}-d{d:02d}"
            rel = cap.relative_to(demo).parts[1:-1]  # job=…/attempt=…/rank=… below the date folder
            parts = [f"job={job}" if p.startswith("job=") else p for p in rel]
            dest = zone.joinpath(f"date={day:%Y-%m-%d}", *parts, cid)
            dest.mkdir(parents=True)
            for f in cap.iterdir():
                if f.name != "manifest.json":
                    os.link(f, dest / f.name)
            doc.update(job_id=job, capture_id=cid, created_at=noon.isoformat().replace("+00:00", "Z"))
            (dest / "manifest.json").write_text(json.dumps(doc))
            os.utime(dest / "manifest.json", (noon.timestamp(), noon.timestamp()))
        out.append(day)
    return out


def measure_daily_runs(work: str, demo_landing: str | None, days: int, mlflow: bool, timeout_s: float) -> list[float]:
    """Wall s of one ``tracelake run --since DAY --until DAY+1`` per day (:func:`copy_into_days`), in day order,
    into one warehouse (local executor).

    Raises:
        RuntimeError: a run failed.
    """
    import subprocess

    demo = Path(demo_landing) if demo_landing else Path(work) / "demo-landing"
    if not demo_landing:
        from jobs.demo.train_ddp import run_demo_training  # torch: only when the captures must be taken here

        run_demo_training(str(demo), "demo-ddp-base", job_name="demo-ddp", steps=10)
    zone, wh = Path(work) / "daily-landing", Path(work) / "daily-warehouse"
    walls = []
    per_day = len(list(demo.rglob("manifest.json")))
    for day in copy_into_days(demo, zone, days, datetime(2026, 11, 1, tzinfo=UTC)):
        cmd = [sys.executable, "-m", "jobs.cli", "run", "--raw", str(zone), "--warehouse", str(wh), "--executor",
               "local", "--since", day.isoformat(), "--until", (day + timedelta(days=1)).isoformat()]  # fmt: skip
        t = time.perf_counter()
        r = subprocess.run(cmd + ([] if mlflow else ["--no-mlflow"]), cwd=ROOT, capture_output=True, text=True,
                           timeout=timeout_s)  # fmt: skip
        walls.append(time.perf_counter() - t)
        if r.returncode != 0:
            raise RuntimeError(f"tracelake run for {day:%Y-%m-%d}: exit {r.returncode}: {r.stderr[-2000:]}")
        m = re.search(r"captures: (\d+) \((\d+) ingested", r.stdout)
        if not m or int(m.group(2)) != per_day:  # each day's run took that day's captures, no more, no fewer
            raise RuntimeError(f"tracelake run for {day:%Y-%m-%d}: expected {per_day} ingested, got {m and m.group(0)}")
    return walls


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", type=int, default=1000)
    ap.add_argument("--large", type=int, default=100_000)
    ap.add_argument("--per-day", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--synthetic-gb", type=float, default=1.0, help="fleet 3's JSON GB (0: no memory target)")
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--corpus-root", default=str(ROOT.parent / "shared" / "corpus"))
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds one tracelake run may take")
    ap.add_argument("--no-publishing", action="store_true", help="skip the publishing target")
    ap.add_argument("--days", type=int, default=30, help="daily runs (0: no daily-runs target)")
    ap.add_argument("--demo-landing", help="a landing zone of demo captures (default: capture them here, torch)")
    ap.add_argument("--daily-no-mlflow", action="store_true", help="daily runs with --no-mlflow")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="fleet_scale-") as tmp:
        rows = [measure_discovery(Path(tmp), n, args.per_day, args.repeat) for n in (args.small, args.large)]
        mem = measure_executor_memory(tmp, args.corpus_root, args.synthetic_gb, args.cores, args.timeout) if (
            args.synthetic_gb > 0
        ) else None  # fmt: skip
        daily = measure_daily_runs(tmp, args.demo_landing, args.days, not args.daily_no_mlflow, args.timeout) if (
            args.days > 0
        ) else None  # fmt: skip
        pub = None if args.no_publishing else measure_publishing(tmp, args.corpus_root, args.cores, args.repeat,
                                                                 args.timeout)  # fmt: skip
    print(f"discovery of one hourly interval ({NEW_IN_INTERVAL} new captures, {args.per_day} folders a day; by prefix: "
          f"median of {args.repeat}, whole zone: once; local disk)")  # fmt: skip
    print(f"{'folders':>9} {'by prefix s':>12} {'whole zone s (peer)':>20}")
    for r in rows:
        print(f"{r['folders']:>9,} {r['prefix_s']:>12.3f} {r['whole_s']:>20.3f}")
    small, large = rows
    ratio = large["prefix_s"] / small["prefix_s"]
    peer = large["whole_s"] / small["whole_s"]
    verdict = "ok" if ratio <= 2 else "MISSED"
    print(f"target: discovery {large['folders']:,} vs {small['folders']:,} folders <= 2x: {ratio:.2f}x ({verdict}); "
          f"the whole-zone listing (before): {peer:.1f}x")  # fmt: skip
    if mem:
        print(f"tracelake run --no-mlflow on fleet 3 of fleet_vs_hta.py, local executor on {args.cores} cores")
        print(f"{'fleet 3':>8} {'jobs':>5} {'JSON MB':>8} {'wall s':>7} {'executor peak MB':>17}")
        for k, m in mem.items():
            print(f"{k:>8} {m['jobs']:>5} {m['json_mb']:>8,.1f} {m['wall_s']:>7.1f} {m['executor'] / 1e6:>17,.0f}")
        grow = mem["full"]["executor"] / mem["half"]["executor"]
        print(f"target: executor peak memory, full / half synthetic fleet <= 1.25x: {grow:.2f}x "
              f"({'ok' if grow <= 1.25 else 'MISSED'}; input x{mem['full']['json_mb'] / mem['half']['json_mb']:.2f})")  # fmt: skip
    if pub:
        run, bare = pub["run"], pub["no_mlflow"]
        print(f"fleet 2 of fleet_vs_hta.py ({pub['jobs']} jobs), local executor on {args.cores} cores, median of "
              f"{args.repeat}: tracelake run {run['wall_s']:.1f} s wall / {run['cpu_s']:.1f} CPU s, --no-mlflow "
              f"{bare['wall_s']:.1f} / {bare['cpu_s']:.1f}")  # fmt: skip
        run2, bare2, n2 = pub["run_xn"], pub["no_mlflow_xn"], PUBLISH_COPIES * pub["jobs"]
        print(f"the same fleet with every job {PUBLISH_COPIES} times ({n2} jobs): tracelake run {run2['wall_s']:.1f} s "
              f"wall / {run2['cpu_s']:.1f} CPU s, --no-mlflow {bare2['wall_s']:.1f} / {bare2['cpu_s']:.1f}")  # fmt: skip
        each = pub["publishing_cpu_s"]
        pub1, pub2 = statistics.median(each["x1"]), statistics.median(each["xn"])
        slopes = [(b - a) / (n2 - pub["jobs"]) for a, b in zip(each["x1"], each["xn"])]
        per_job = statistics.median(slopes)
        fixed = pub1 - per_job * pub["jobs"]
        ratio = run["wall_s"] / bare["wall_s"]
        print(f"target: publishing CPU s per job <= 0.2: {per_job:.2f} ({'ok' if per_job <= 0.2 else 'MISSED'}; "
              f"publishing CPU s {pub1:.1f} at {pub['jobs']} jobs, {pub2:.1f} at {n2}: set-up once per "
              f"run {fixed:.1f} s; each repetition: {', '.join(f'{x:.2f}' for x in slopes)})")  # fmt: skip
        stage = pub["publish_stage_cpu_s"]
        stage_slopes = [(b - a) / (n2 - pub["jobs"]) for a, b in zip(stage["x1"], stage["xn"])]
        print(f"  the publish stage alone (stage_cpu.py, every process): {statistics.median(stage_slopes):.2f} CPU s "
              f"per job ({'ok' if statistics.median(stage_slopes) <= 0.2 else 'MISSED'}; "
              f"{statistics.median(stage['x1']):.1f} CPU s at {pub['jobs']} jobs, {statistics.median(stage['xn']):.1f} "
              f"at {n2}; each repetition: {', '.join(f'{x:.2f}' for x in stage_slopes)})")  # fmt: skip
        print(f"target: fleet 2 run / --no-mlflow wall <= 1.3x: {ratio:.2f}x ({'ok' if ratio <= 1.3 else 'MISSED'})")
    if daily:
        mode = "--no-mlflow" if args.daily_no_mlflow else "with MLflow"
        print(f"daily runs ({mode}, local executor), wall s per day: " + " ".join(f"{w:.1f}" for w in daily))
        grow = daily[-1] / daily[0]
        print(f"target: daily runs, last / first day wall <= 1.2x: {grow:.2f}x ({'ok' if grow <= 1.2 else 'MISSED'}; "
              f"{len(daily)} days, first {daily[0]:.1f} s, last {daily[-1]:.1f} s; last / second day, without the "
              f"first run's set-up: {daily[-1] / daily[min(1, len(daily) - 1)]:.2f}x)")  # fmt: skip
    print("target: daily fleet stage 365 vs 30 days <= 1.2x, driver peak <= 2 GB: see benchmarks/fleet_history.py")
    for what in (
        *([] if daily else ["daily runs, last / first day wall <= 1.2x"]),
        *([] if mem else ["executor peak memory, full / half synthetic fleet <= 1.25x"]),
        *([] if pub else ["publishing CPU s per job <= 0.2, fleet 2 run / --no-mlflow <= 1.3x"]),
    ):
        print(f"target: {what}: not measured by this script yet")
    return 0


if __name__ == "__main__":
    sys.exit(main())
