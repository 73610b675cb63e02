"""spark-submit application: ``python -m jobs.validate`` on the jobs of an interval's run record.

``spark-submit jobs/pipeline/validate_main.py --warehouse W --record URI --stage normalize|analyze``:
the jobs come from the record (every normalized job for ``normalize``, the jobs with an ingested
capture for ``analyze``) and are passed as ``--job``; the exit code is ``jobs.validate``'s
(1 when a check failed). A stage without jobs succeeds without validating anything.
"""

from __future__ import annotations

import argparse
import runpy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo of this file, when not installed


def validate_argv(record: dict, stage: str, warehouse: str) -> list[str] | None:
    """Arguments of ``python -m jobs.validate`` for ``stage`` of ``record`` (pure); ``None`` when there is no job."""
    jobs = record["job_ids"] if stage == "normalize" else record["ingested_job_ids"]
    if not jobs:
        return None
    argv = ["--warehouse", warehouse, "--stage", stage]
    if stage == "normalize" and record.get("n_discovered") is not None:
        argv += ["--n-discovered", str(record["n_discovered"])]  # every raw file accounted for
    for j in jobs:
        argv += ["--job", j]
    return argv


def main(argv: list[str] | None = None) -> None:
    """Parse ``argv``, then run ``jobs.validate`` as ``__main__`` in this spark-submit (exits with its code)."""
    ap = argparse.ArgumentParser(prog="validate_main", description=__doc__.splitlines()[0])
    ap.add_argument("--warehouse", required=True)
    ap.add_argument("--record", required=True)
    ap.add_argument("--stage", required=True, choices=["normalize", "analyze"])
    args = ap.parse_args(argv)

    from jobs.pipeline.record import read_record
    from jobs.pipeline.session import submit_session

    v_argv = validate_argv(read_record(args.record), args.stage, args.warehouse)
    if v_argv is None:
        print(f"tracelake validate --stage {args.stage}: no job to validate", flush=True)
        return
    submit_session(f"tracelake-validate-{args.stage}")
    sys.argv = ["jobs.validate", *v_argv]
    runpy.run_module("jobs.validate", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
