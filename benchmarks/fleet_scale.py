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
  corpus jobs), the median of ``--repeat`` each: publishing CPU s per job = (CPU(run) − CPU(``--no-mlflow``)) / jobs,
  every process of the tree counted (target ≤ 0.2), and the wall ratio run / ``--no-mlflow`` (target ≤ 1.3).
  ``--no-publishing`` skips it.

The other targets of the issue (the daily fleet stage at 30 vs 365 days, daily runs) are not measured by this script
yet: it says so. Usage (from the repo root)::

    .venv/bin/python benchmarks/fleet_scale.py [--small 1000] [--large 100000] [--per-day 100] [--repeat 3]
        [--synthetic-gb 1.0] [--cores 2]

The peer is slow on a large zone (it reads every manifest): minutes at 100,000 folders.
"""

from __future__ import annotations

import argparse
import json
import os
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


def measure_publishing(work: str, corpus_root: str, cores: int, repeat: int, timeout_s: float) -> dict:
    """Medians of wall and CPU s of ``tracelake run`` with and without MLflow on fleet 2 of ``fleet_vs_hta.py``.

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
    for kind, mlflow in (("run", True), ("no_mlflow", False)):
        rs = []
        for _ in range(repeat):
            r = fvh.tracelake_run(fleet2.landing, work, cores, mlflow, timeout_s, 0.1)
            if "error" in r:
                raise RuntimeError(f"tracelake run ({kind}) on fleet 2: {r['error']}")
            rs.append(r)
        out[kind] = {k: statistics.median(r[k] for r in rs) for k in ("wall_s", "cpu_s")}
    return out


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
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="fleet_scale-") as tmp:
        rows = [measure_discovery(Path(tmp), n, args.per_day, args.repeat) for n in (args.small, args.large)]
        mem = measure_executor_memory(tmp, args.corpus_root, args.synthetic_gb, args.cores, args.timeout) if (
            args.synthetic_gb > 0
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
        per_job = (run["cpu_s"] - bare["cpu_s"]) / pub["jobs"]
        ratio = run["wall_s"] / bare["wall_s"]
        print(f"target: publishing CPU s per job <= 0.2: {per_job:.2f} ({'ok' if per_job <= 0.2 else 'MISSED'})")
        print(f"target: fleet 2 run / --no-mlflow wall <= 1.3x: {ratio:.2f}x ({'ok' if ratio <= 1.3 else 'MISSED'})")
    for what in (
        "daily fleet stage 365 vs 30 days <= 1.2x, driver peak <= 2 GB",
        "daily runs, last / first day wall <= 1.2x",
        *([] if mem else ["executor peak memory, full / half synthetic fleet <= 1.25x"]),
        *([] if pub else ["publishing CPU s per job <= 0.2, fleet 2 run / --no-mlflow <= 1.3x"]),
    ):
        print(f"target: {what}: not measured by this script yet")
    return 0


if __name__ == "__main__":
    sys.exit(main())
