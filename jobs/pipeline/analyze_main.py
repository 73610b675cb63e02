"""spark-submit application: analyze the jobs of an interval's run record (or the given jobs).

``spark-submit jobs/pipeline/analyze_main.py --warehouse W (--record URI | --job J [--job J …])``;
writes the analysis tables (:func:`jobs.analyze.job.run_analyze`) for the jobs with at least one
ingested capture, then rebuilds the fleet tables (:func:`jobs.fleet.job.run_fleet`: fleet_stats,
fleet_kernels, regressions). Nothing to analyze is not an error.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo of this file, when not installed


def main(argv: list[str] | None = None) -> dict:
    """Parse ``argv`` and analyze; returns the row counts written per table."""
    ap = argparse.ArgumentParser(prog="analyze_main", description=__doc__.splitlines()[0])
    ap.add_argument("--warehouse", required=True)
    ap.add_argument("--record", default="")
    ap.add_argument("--job", action="append", default=[])
    args = ap.parse_args(argv)
    if not args.record and not args.job:
        ap.error("give --record or at least one --job")

    from jobs.analyze.job import run_analyze
    from jobs.pipeline.record import read_record
    from jobs.pipeline.session import submit_session

    job_ids = sorted(set(args.job) | set(read_record(args.record)["ingested_job_ids"] if args.record else []))
    if not job_ids:
        print("tracelake analyze: no job with an ingested capture; nothing to do", flush=True)
        return {}
    from jobs.fleet.job import run_fleet

    spark = submit_session("tracelake-analyze")
    counts = run_analyze(spark, args.warehouse, job_ids)
    counts = {**counts, **run_fleet(spark, args.warehouse).counts}  # regressions of these runs vs earlier ones
    print(f"tracelake analyze: jobs {', '.join(job_ids)}: {counts}", flush=True)
    return counts


if __name__ == "__main__":
    main()
