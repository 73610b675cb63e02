"""Publish a validation report to MLflow: a job's run gets the report (HTML, JSON, GX's raw results), a
``tracelake.validation`` tag and ends ``FAILED`` when its job failed the gate (:mod:`jobs.validate`)."""

from __future__ import annotations

import json
import time

from jobs.publish.report.html import render_validation_report
from jobs.publish.reports import log_texts
from jobs.validate.report import ValidationReport


def report_texts(report: ValidationReport) -> dict[str, str]:
    """The artifacts of ``report`` that are the same for every job's run: ``validation.json`` (the report) and
    ``gx_results.json`` (GX's raw results), as JSON text."""
    return {
        "validation.json": json.dumps(report.to_dict(), indent=1, default=str),
        "gx_results.json": json.dumps({k: t.gx_result for k, t in report.tables.items()}, indent=1, default=str),
    }


def log_validation(
    tracking_uri: str,
    run_id: str,
    report: ValidationReport,
    job_id: str | None = None,
    client=None,
    texts: dict[str, str] | None = None,
    page: str | None = None,
) -> bool:
    """Attach ``report`` to an MLflow run; mark the run ``FAILED`` when its job failed validation.

    Logs artifacts ``validation/validation.html`` (self-contained, our Data Docs page),
    ``validation/validation.json`` (the report) and ``validation/gx_results.json`` (GX's own
    validation results); tags ``tracelake.validation`` = ``passed``/``failed`` and
    ``tracelake.validation.failed_tables``; metrics ``validation/failed_checks`` and
    ``validation/checks`` (the checks that looked at the job's rows:
    :meth:`~jobs.validate.report.ValidationReport.job_checks`; stable names).

    Args:
        job_id: the run's job (default: the run's ``tracelake.job_id`` tag); the run fails when
            this job is in :meth:`ValidationReport.failed_jobs`.
        client: an ``MlflowClient`` of ``tracking_uri`` to reuse (default: a new one).
        texts: :func:`report_texts` of ``report`` when already made (one serialization for every run).
        page: ``validation.html`` when already made (:func:`log_validations`: the run's page, rendered once for
            every job; default: rendered here with the job's status in its subtitle).

    Returns:
        True when the job passed.
    """
    from mlflow.entities import Metric, RunTag  # heavy: mlflow
    from mlflow.tracking import MlflowClient  # heavy: mlflow

    client = client or MlflowClient(tracking_uri=tracking_uri)
    job_id = job_id or client.get_run(run_id).data.tags.get("tracelake.job_id")
    ok = report.success if job_id is None else report.job_success(job_id)
    failed_tables = sorted(
        {t.table for t in report.tables.values() if not t.success and (job_id is None or job_id in t.failed_jobs())}
    )
    n_checks = report.job_checks(job_id)
    n_failed = sum(1 for t in report.tables.values() for c in t.failed if job_id is None or job_id in c.jobs)
    now = int(time.time() * 1000)
    client.log_batch(
        run_id,
        metrics=[
            Metric("validation/checks", float(n_checks), now, 0),
            Metric("validation/failed_checks", float(n_failed), now, 0),
        ],
        tags=[
            RunTag("tracelake.validation", "passed" if ok else "failed"),
            RunTag("tracelake.validation.failed_tables", ",".join(failed_tables) or "-"),
        ],
    )
    texts = texts or report_texts(report)
    page = page if page is not None else render_validation_report(report, job_id=job_id)
    log_texts(client, run_id, {"validation.html": page, **texts}, "validation")
    if not ok:
        client.set_terminated(run_id, status="FAILED")
    return ok


def log_validations(tracking_uri: str, run_ids: dict, report: ValidationReport, client=None) -> dict:
    """:func:`log_validation` for every run of :func:`jobs.publish.tracking.log_jobs` (``{(job, attempt): run_id}``),
    with one MLflow client for all of them (``client``, default: a new one) and the artifacts made once: the JSON
    texts and the run's ``validation.html`` (every job's page alike; each run's own status is in its
    ``tracelake.validation`` tag, its ``validation/…`` metrics and its job report's data-quality section).

    Returns:
        ``{(job, attempt): passed?}``.
    """
    if not run_ids:
        return {}
    from mlflow.tracking import MlflowClient  # heavy: mlflow

    client = client or MlflowClient(tracking_uri=tracking_uri)
    texts, page = report_texts(report), render_validation_report(report)
    return {
        key: log_validation(tracking_uri, run_id, report, job_id=key[0], client=client, texts=texts, page=page)
        for key, run_id in run_ids.items()
    }
