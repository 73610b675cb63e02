"""spark-submit application: run one declared stage, or a whole declared pipeline (:mod:`jobs.pipeline.stages`).

``spark-submit jobs/pipeline/submit.py --stage NAME --settings JSON`` (one task of a DAG), or
``--pipeline ingest --settings JSON`` (every stage, as ``tracelake run``; ``JSON``: a
:class:`~jobs.pipeline.stages.RunSettings`, as the DAGs' ``settings`` task returns it). The
SparkSession is the one spark-submit configured (:func:`jobs.pipeline.session.submit_session`,
honouring ``--master``); the run record in the warehouse carries what earlier stages did.
``--engine local`` runs the stage's transforms on the embedded local executor (:class:`jobs.executor.LocalExecutor`,
a pool of worker processes in this process's machine, no JVM) instead of Spark: what an ingest DAG task does for an
interval below the local threshold (:func:`jobs.pipeline.stages.choose_engine`).
Exit code 0 when the stage ran or had nothing to do; after ``publish`` (alone or as the end of
``--pipeline ingest``), a job that failed validation fails the application
(:func:`~jobs.pipeline.stages.check_validation`), as it fails the DAG run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo of this file, when not installed

from jobs.pipeline.session import submit_session  # noqa: E402 (after the sys.path line above)
from jobs.pipeline.stages import (  # noqa: E402
    PIPELINES,
    STAGES,
    RunSettings,
    check_validation,
    local_engine,
    run_stage,
    run_stages,
)
from jobs.spark import where_it_runs  # noqa: E402


def main(argv: list[str] | None = None) -> dict:
    """Parse ``argv`` and run the stage; returns the run record after it."""
    ap = argparse.ArgumentParser(prog="submit.py", description=__doc__.splitlines()[0])
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--stage", choices=sorted(STAGES))
    what.add_argument("--pipeline", choices=sorted(PIPELINES))
    ap.add_argument("--settings", required=True, help="RunSettings as JSON")
    ap.add_argument("--engine", choices=("spark", "local"), default="spark", help="where the transforms run")
    args = ap.parse_args(argv)
    settings = RunSettings(**json.loads(args.settings))
    stages = PIPELINES[args.pipeline] if args.pipeline else (STAGES[args.stage],)
    name = args.pipeline or args.stage
    if args.engine == "local":
        with local_engine(stages) as engine:
            print(f"tracelake {name}: starting on the local executor ({engine.workers} worker processes, no Spark)",
                  flush=True)  # fmt: skip
            record = _run(args, stages, settings, engine)
    else:
        spark = submit_session(f"tracelake-{name}") if any(st.spark for st in stages) else None
        print(f"tracelake {name}: starting on {where_it_runs(spark) if spark else 'the driver'}", flush=True)
        record = _run(args, stages, settings, spark)
    print(f"tracelake {args.stage or args.pipeline}: {json.dumps(record.get('stages', {}))}", flush=True)
    if "publish" in record.get("stages", {}) and (args.pipeline or args.stage == "publish"):
        check_validation(record)  # raises ValidationFailed: the application exits non-zero
    return record


def _run(args, stages, settings: RunSettings, engine) -> dict:
    if args.pipeline:
        return run_stages(stages, settings, engine=engine)
    return run_stage(args.stage, settings, engine=engine)


if __name__ == "__main__":
    main()
