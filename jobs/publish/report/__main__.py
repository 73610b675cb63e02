"""``python -m jobs.publish.report``: the fleet report (and MLflow fleet run), or job reports on their runs.

``python -m jobs.publish.report --warehouse W [--tracking-uri U] [--html F] [--no-mlflow] [--day YYYY-MM-DD]``
runs the declared ``fleet_report`` stage (:mod:`jobs.pipeline.stages`): the fleet report over every
job in the warehouse, from the fleet tables the ``fleet`` stage keeps, and the day's fleet run
(:func:`jobs.publish.reports.publish_fleet_report`). With ``--job J`` (repeatable) it instead renders the
job report of each job's latest attempt, logs it to the job's MLflow run (found by its
``tracelake.job_id``/``tracelake.attempt`` tags) and, with ``--html``, writes it to ``F`` (one job).
"""

from __future__ import annotations

import argparse
import sys

from jobs.common.ids import DiscoveryError, safe_id
from jobs.pipeline.stages import RunSettings, run_stage
from jobs.publish.report.html import render_job_report
from jobs.publish.reports import load_job_tables, log_job_report
from jobs.publish.tracking import EXPERIMENT, client_for, default_tracking_uri


def _job_run(client, exp_name: str, job: str, attempt: int) -> str | None:
    safe_id(job, "job id", "--job")  # quoted into the MLflow filter below: no quote may break out of it
    exp = client.get_experiment_by_name(exp_name)
    if exp is None:
        return None
    found = client.search_runs(
        [exp.experiment_id],
        filter_string=f"tags.`tracelake.job_id` = '{job}' and tags.`tracelake.attempt` = '{attempt}'",
        max_results=1,
    )
    return found[0].info.run_id if found else None


def main(argv: list[str] | None = None) -> int:
    """Parse arguments and publish; returns the exit code (2 when a ``--job`` has no rows)."""
    p = argparse.ArgumentParser(prog="python -m jobs.publish.report", description=__doc__.splitlines()[0])
    p.add_argument("--warehouse", required=True)
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default: sqlite:///<warehouse>/mlflow.db)")
    p.add_argument("--job", action="append", help="publish this job's report instead of the fleet report")
    p.add_argument("--html", help="also write the (fleet or single job) report here")
    p.add_argument("--day", help="fleet run date YYYY-MM-DD (default: today, UTC)")
    p.add_argument("--no-mlflow", action="store_true")
    a = p.parse_args(argv)

    uri = None if a.no_mlflow else (a.tracking_uri or default_tracking_uri(a.warehouse))
    if not a.job:
        s = RunSettings(warehouse=a.warehouse, tracking_uri=uri or "", day=a.day or "", report_html=a.html or "")
        run_id = run_stage("fleet_report", s).get("fleet_run_id")
        if run_id:
            print(f"fleet run {run_id} (experiment tracelake-fleet)")
        return 0

    client = client_for(uri) if uri else None
    code = 0
    for job in a.job:
        try:
            safe_id(job, "job id", "--job")
        except DiscoveryError as exc:
            print(exc, file=sys.stderr)
            code = 2
            continue
        tables = load_job_tables(a.warehouse, job)
        caps = tables.get("captures")
        if caps is None or not len(caps):
            print(f"job {job}: no rows in {a.warehouse}/captures", file=sys.stderr)
            code = 2
            continue
        attempt = int(caps["attempt"].max())
        tables = {k: v[v["attempt"] == attempt] if "attempt" in v.columns else v for k, v in tables.items()}
        if a.html:
            with open(a.html, "w", encoding="utf-8") as f:
                f.write(render_job_report(tables))
        run_id = _job_run(client, EXPERIMENT, job, attempt) if client else None
        if run_id:
            log_job_report(uri, run_id, tables)
            print(f"job {job}#{attempt}: report logged to run {run_id}")
        elif client:
            print(f"job {job}#{attempt}: no MLflow run (run the main job first)", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
