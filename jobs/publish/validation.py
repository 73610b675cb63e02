"""Publish a validation report to MLflow: a job's run gets the report (HTML, JSON, GX's raw results), a
``tracelake.validation`` tag and ends ``FAILED`` when its job failed the gate (:mod:`jobs.validate`)."""

from __future__ import annotations

import json
import time

from jobs.publish.report.html import render_validation_report
from jobs.publish.tracking import RunExtras, client_for, log_texts
from jobs.validate.report import ValidationReport


def report_texts(report: ValidationReport) -> dict[str, str]:
    """The artifacts of ``report`` that are the same for every job's run: ``validation.json`` (the report) and
    ``gx_results.json`` (GX's raw results), as JSON text."""
    return {
        "validation.json": json.dumps(report.to_dict(), indent=1, default=str),
        "gx_results.json": json.dumps({k: t.gx_result for k, t in report.tables.items()}, indent=1, default=str),
    }


def run_validation(
    report: ValidationReport, job_id: str | None, texts: dict[str, str] | None = None, page: str | None = None
) -> RunExtras:
    """What ``report`` adds to a job's MLflow run (:class:`jobs.publish.tracking.RunExtras`): tags
    ``tracelake.validation`` = ``passed``/``failed`` and ``tracelake.validation.failed_tables``; metrics
    ``validation/failed_checks`` and ``validation/checks`` (the checks that looked at the job's rows:
    :meth:`~jobs.validate.report.ValidationReport.job_checks`; stable names); artifacts
    ``validation/validation.html`` (self-contained, our Data Docs page), ``validation/validation.json`` (the
    report) and ``validation/gx_results.json`` (GX's own validation results); failed when the job failed it.

    Args:
        job_id: the run's job (``None``: the whole report's status).
        texts: :func:`report_texts` of ``report`` when already made (one serialization for every run).
        page: ``validation.html`` when already made (one page for every run of a publish run: each run's own
            status is in its tag, metrics and job report); default rendered with the job's status in its subtitle.
    """
    ok = report.success if job_id is None else report.job_success(job_id)
    failed_tables = sorted(
        {t.table for t in report.tables.values() if not t.success and (job_id is None or job_id in t.failed_jobs())}
    )
    n_failed = sum(1 for t in report.tables.values() for c in t.failed if job_id is None or job_id in c.jobs)

    def files() -> dict[str, str]:
        html = page if page is not None else render_validation_report(report, job_id=job_id)
        return {
            f"validation/{name}": text
            for name, text in {"validation.html": html, **(texts or report_texts(report))}.items()
        }

    return RunExtras(
        metrics={"validation/checks": float(report.job_checks(job_id)), "validation/failed_checks": float(n_failed)},
        tags={
            "tracelake.validation": "passed" if ok else "failed",
            "tracelake.validation.failed_tables": ",".join(failed_tables) or "-",
        },
        files=files,
        failed=not ok,
    )


def log_validation(
    tracking_uri: str, run_id: str, report: ValidationReport, job_id: str | None = None, client=None
) -> bool:
    """Attach ``report`` to an existing MLflow run (:func:`run_validation`: tags, metrics, artifacts); mark the run
    ``FAILED`` when its job failed validation. (:func:`jobs.publish.job_runs.publish_jobs` logs the same with each
    run's own calls.)

    Args:
        job_id: the run's job (default: the run's ``tracelake.job_id`` tag); the run fails when
            this job is in :meth:`ValidationReport.failed_jobs`.
        client: an ``MlflowClient`` of ``tracking_uri`` to reuse (default: a new one).

    Returns:
        True when the job passed.
    """
    from mlflow.entities import Metric, RunTag  # heavy: mlflow

    client = client or client_for(tracking_uri)
    job_id = job_id or client.get_run(run_id).data.tags.get("tracelake.job_id")
    more = run_validation(report, job_id)
    now = int(time.time() * 1000)
    client.log_batch(
        run_id,
        metrics=[Metric(k, v, now, 0) for k, v in more.metrics.items()],
        tags=[RunTag(k, v) for k, v in more.tags.items()],
    )
    log_texts(client, run_id, more.files())
    if more.failed:
        client.set_terminated(run_id, status="FAILED")
    return not more.failed
