"""Publish the jobs of one pipeline run: the MLflow run of each (job, attempt), its validation report and HTML report.

The ``publish`` stage of :mod:`jobs.pipeline.stages`. Reads the warehouse with pyarrow (no Spark: the
tables of a few jobs are small), so a scheduler runs it as a plain Python task.
"""

from __future__ import annotations

from jobs.publish.headline import headline
from jobs.publish.reports import log_job_reports, render_reports
from jobs.publish.tracking import log_jobs
from jobs.publish.validation import log_validations
from jobs.warehouse import read_pandas

#: Tables the MLflow runs are made from (:func:`jobs.publish.tracking.log_jobs`).
RUN_TABLES = (
    "captures",
    "ranks",
    "steps",
    "neuron_summary",
    "collectives",
    "regressions",
    "findings",
    "rule_coverage",
)


def publish_jobs(
    tracking_uri: str, warehouse: str, job_ids: list[str], validation=None, map_fn=map
) -> dict[tuple[str, int], str]:
    """Create or update the MLflow run of every (job, attempt) of ``job_ids``, with the validation report and
    the job's HTML report attached.

    Args:
        tracking_uri: MLflow tracking URI.
        warehouse: warehouse root.
        job_ids: the jobs of the run (every job normalized, quarantined-only ones included).
        validation: the run's :class:`~jobs.validate.report.ValidationReport` (``None``: not validated);
            runs of jobs that failed it end ``FAILED``.
        map_fn: renders the HTML job reports (:func:`jobs.publish.reports.log_job_reports`): the builtin
            ``map``, or a process pool's (:meth:`jobs.executor.LocalExecutor.map`).

    One MLflow client (and so one tracking store) serves the whole run: the runs, the validation reports
    and the job reports.

    Returns:
        ``{(job_id, attempt): run_id}`` (empty when ``job_ids`` is).
    """
    if not job_ids:
        return {}
    from mlflow.tracking import MlflowClient  # heavy: mlflow

    client = MlflowClient(tracking_uri=tracking_uri)
    t = read_pandas(warehouse, RUN_TABLES, list(job_ids))
    # the job reports render in the workers while this process logs the runs (the runs of log_jobs: captures');
    # both show the headline of one run_summary over every run
    runs = sorted({(str(j), int(a)) for j, a in zip(t["captures"]["job_id"], t["captures"]["attempt"])})
    heads = headline(t["steps"], t["ranks"], t["captures"])
    pages = render_reports(warehouse, runs, validation, map_fn, heads=heads)
    failed = frozenset(validation.failed_jobs()) if validation is not None else frozenset()
    run_ids = log_jobs(
        tracking_uri,
        warehouse,
        t["captures"],
        t["ranks"],
        t["steps"],
        neuron_summary=t["neuron_summary"],
        failed_jobs=failed,
        collectives=t["collectives"],
        regressions=t["regressions"],
        findings=t["findings"],
        client=client,
        rule_coverage=t["rule_coverage"],
        heads=heads,
    )
    if validation is not None:
        log_validations(tracking_uri, run_ids, validation, client=client)
    log_job_reports(tracking_uri, warehouse, run_ids, validation, client=client, pages=pages)
    return run_ids
