"""The main job: normalize → validate → analyze → validate → fleet statistics → MLflow, on one landing zone.

This is what ``tracelake run`` and the Airflow DAGs call; each stage is also runnable alone
(``python -m jobs.normalize``, ``python -m jobs.analyze``).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field

import pandas as pd

from jobs.warehouse import read_frames


@dataclass
class PipelineResult:
    """Outcome of :func:`run_pipeline`: where results are and the per-job tables (pandas)."""

    warehouse: str
    tracking_uri: str | None
    job_ids: list[str]
    captures: pd.DataFrame
    ranks: pd.DataFrame
    steps: pd.DataFrame
    neuron_summary: pd.DataFrame = field(default_factory=pd.DataFrame)
    pending: list[str] = field(default_factory=list)
    run_ids: dict = field(default_factory=dict)
    validation: object = None  # jobs.validate.report.ValidationReport of the normalize and analyze stages
    regressions: pd.DataFrame = field(default_factory=pd.DataFrame)  # regressions rows (whole warehouse)


@contextmanager
def _stage(progress, text: str):
    if progress is None:
        yield
        return
    task = progress.add_task(text, total=None)
    try:
        yield
    finally:
        progress.update(task, completed=1, total=1, description=f"[green]✓[/green] {text}")


def run_pipeline(raw: str, warehouse: str, tracking_uri: str | None = None, storage_options: dict | None = None,
                 spark=None, progress=None, log_to_mlflow: bool = True, since=None, until=None) -> PipelineResult:
    """Normalize every committed capture under ``raw``, validate, analyze, validate, rebuild the fleet
    tables (:mod:`jobs.fleet`), log to MLflow.

    A job whose tables fail validation is marked (``<table>/_validation.json``) and its MLflow run
    ends ``FAILED`` with the validation report attached; it is never silently published.

    Args:
        raw: landing zone (folder or fsspec URI such as ``s3://bucket/raw``).
        warehouse: warehouse root (local folder; Parquet tables under it).
        tracking_uri: MLflow tracking URI; default ``sqlite:///<warehouse>/mlflow.db``.
        storage_options: fsspec options for ``raw`` (e.g. S3 endpoint and keys).
        spark: an existing SparkSession (default: :func:`jobs.spark.get_spark`).
        progress: a ``rich.progress.Progress`` to report stages on, or ``None``.
        since, until: only the jobs with a capture committed in ``[since, until)`` (UTC ``datetime``
            or ISO string; ``None`` = open end), see :mod:`jobs.landing.interval`.

    Returns:
        :class:`PipelineResult`.
    """
    from jobs.analyze.job import run_analyze
    from jobs.normalize.job import run_normalize
    from jobs.spark import get_spark
    from jobs.publish.tracking import default_tracking_uri, log_jobs
    from jobs.validate.suites import validate_tables

    with _stage(progress, "Starting Spark"):
        spark = spark or get_spark()
    with _stage(progress, f"Normalizing traces from {raw}"):
        norm = run_normalize(spark, raw, warehouse, storage_options, since=since, until=until)
    job_ids = norm.job_ids
    validation = None
    if job_ids:
        with _stage(progress, "Validating captures and events (Great Expectations)"):
            validation = validate_tables(spark, warehouse, "normalize", job_ids, n_discovered=norm.n_discovered)
    if any(c["status"] == "ingested" for c in norm.captures):
        with _stage(progress, f"Analyzing {len(job_ids)} job(s)"):
            run_analyze(spark, warehouse, job_ids)
        with _stage(progress, "Validating the analysis tables (Great Expectations)"):
            validation = validation.merge(validate_tables(spark, warehouse, "analyze", job_ids))
    fleet = None
    if any(c["status"] == "ingested" for c in norm.captures):
        from jobs.fleet.job import run_fleet

        with _stage(progress, "Fleet statistics and regressions against previous runs"):
            fleet = run_fleet(spark, warehouse)
    tables = read_frames(spark, warehouse, ("captures", "ranks", "steps", "neuron_summary", "collectives"), job_ids)
    result = PipelineResult(warehouse=warehouse, tracking_uri=None, job_ids=job_ids, captures=tables["captures"],
                            ranks=tables["ranks"], steps=tables["steps"], neuron_summary=tables["neuron_summary"],
                            pending=norm.pending, validation=validation,
                            regressions=fleet.regressions if fleet is not None else pd.DataFrame())
    if log_to_mlflow and job_ids:
        from jobs.publish.reports import log_job_reports
        from jobs.publish.validation import log_validations

        tracking_uri = tracking_uri or default_tracking_uri(warehouse)
        failed = frozenset(validation.failed_jobs()) if validation is not None else frozenset()
        with _stage(progress, f"Logging {len(job_ids)} job(s) to MLflow"):
            result.run_ids = log_jobs(tracking_uri, warehouse, result.captures, result.ranks, result.steps,
                                      neuron_summary=result.neuron_summary, failed_jobs=failed,
                                      collectives=tables["collectives"], regressions=result.regressions)
            if validation is not None:
                log_validations(tracking_uri, result.run_ids, validation)
        with _stage(progress, "Rendering the HTML report of each job into MLflow"):
            log_job_reports(spark, tracking_uri, warehouse, result.run_ids, validation)
        result.tracking_uri = tracking_uri
    return result
