"""spark-submit application: normalize the jobs with a capture committed in ``[--since, --until)``.

``spark-submit jobs/pipeline/normalize_main.py --raw R --warehouse W [--since ISO] [--until ISO]
[--storage-options JSON] [--record URI]``; writes ``captures``/``events`` partitions
(:func:`jobs.normalize.job.run_normalize`) and, with ``--record``, the interval's run record
(:mod:`jobs.pipeline.record`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo of this file, when not installed


def main(argv: list[str] | None = None) -> dict:
    """Parse ``argv``, normalize, write the record; returns the record."""
    ap = argparse.ArgumentParser(prog="normalize_main", description=__doc__.splitlines()[0])
    ap.add_argument("--raw", required=True)
    ap.add_argument("--warehouse", required=True)
    ap.add_argument("--since", default="")
    ap.add_argument("--until", default="")
    ap.add_argument("--storage-options", default="{}")
    ap.add_argument("--record", default="")
    args = ap.parse_args(argv)

    from jobs.normalize.job import run_normalize
    from jobs.pipeline.record import build_record, write_record
    from jobs.pipeline.session import submit_session

    spark = submit_session("tracelake-normalize")
    res = run_normalize(spark, args.raw, args.warehouse, json.loads(args.storage_options or "{}"),
                        since=args.since or None, until=args.until or None)
    record = build_record(res.captures, res.pending, args.raw, args.since, args.until, n_discovered=res.n_discovered)
    if args.record:
        write_record(args.record, record)
    print(f"tracelake normalize: {record['n_captures']} captures ({record['n_quarantined']} quarantined), "
          f"jobs: {', '.join(record['job_ids']) or '-'}; pending: {len(record['pending'])}", flush=True)
    return record


if __name__ == "__main__":
    main()
