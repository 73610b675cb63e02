"""Publish the jobs of one pipeline run: the MLflow run of each (job, attempt), its validation report and HTML report.

The ``publish`` stage of :mod:`jobs.pipeline.stages`. Reads the warehouse with pyarrow (no Spark: the
tables of a few jobs are small), so a scheduler runs it as a plain Python task.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from jobs.publish.headline import headline
from jobs.publish.report.html import render_validation_report
from jobs.publish.reports import JOB_REPORT_ARTIFACT, render_reports
from jobs.publish.tracking import EXPERIMENT, RunExtras, client_for, log_jobs, run_link
from jobs.publish.validation import report_texts, run_validation
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
        map_fn: renders the HTML job reports (:func:`jobs.publish.reports.render_reports`): the builtin
            ``map``, or a process pool's (:meth:`jobs.executor.LocalExecutor.map`).

    One MLflow client (and so one tracking store) serves the whole run; each run's validation report
    (:func:`jobs.publish.validation.run_validation`) and job report (``report/job_report.html``) go in with its own
    calls (:func:`jobs.publish.tracking.log_jobs`: one ``log_batch``, one ``log_artifacts``).

    Returns:
        ``{(job_id, attempt): run_id}`` (empty when ``job_ids`` is).
    """
    if not job_ids:
        return {}
    client = client_for(tracking_uri)
    t = read_pandas(warehouse, RUN_TABLES, list(job_ids))
    # the job reports render in the workers while this process logs the runs (the runs of log_jobs: captures');
    # both show the headline of one run_summary over every run
    runs = sorted({(str(j), int(a)) for j, a in zip(t["captures"]["job_id"], t["captures"]["attempt"])})
    heads = headline(t["steps"], t["ranks"], t["captures"])
    pages = ready(render_reports(warehouse, runs, validation, map_fn, heads=heads))
    # the run-wide validation artifacts made once: the same files in every run
    texts = report_texts(validation) if validation is not None else None
    page = render_validation_report(validation) if validation is not None else None

    def extras(run: tuple[str, int]) -> RunExtras:
        more = run_validation(validation, run[0], texts, page) if validation is not None else RunExtras()
        files = more.files
        more.files = lambda: {**(files() if files is not None else {}), JOB_REPORT_ARTIFACT: pages(run)}
        return more

    failed = frozenset(validation.failed_jobs()) if validation is not None else frozenset()
    return log_jobs(
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
        extras=extras,
    )


def _experiment_id(tracking_uri: str) -> str:
    """The id of the job runs' experiment (:data:`~jobs.publish.tracking.EXPERIMENT`) on ``tracking_uri``, ``"0"``
    when it does not exist."""
    exp = client_for(tracking_uri).get_experiment_by_name(EXPERIMENT)
    return exp.experiment_id if exp is not None else "0"


def run_links(tracking_uri: str, run_ids: dict[str, str]) -> list[str]:
    """One line per published run: where it and its job report open (:func:`jobs.publish.tracking.run_link`).

    Args:
        run_ids: ``{"<job_id>#<attempt>": run_id}`` (the run record's ``run_ids``).
    """
    if not run_ids:
        return []
    eid = _experiment_id(tracking_uri)
    return [
        f"MLflow run of job {key.rsplit('#', 1)[0]} (attempt {key.rsplit('#', 1)[1]}): "
        f"{run_link(tracking_uri, eid, run_id)}; job report: {run_link(tracking_uri, eid, run_id, JOB_REPORT_ARTIFACT)}"
        for key, run_id in sorted(run_ids.items())
    ]


def runs_page(tracking_uri: str, run_ids: dict[str, str]) -> str:
    """One web page for the published runs (Airflow's "MLflow runs" link): the run's page when there is one run, else
    the experiment's page, on an ``http(s)://`` tracking server; ``""`` for any other tracking URI or no run.

    Args:
        run_ids: ``{"<job_id>#<attempt>": run_id}`` (the run record's ``run_ids``).
    """
    if not run_ids or not tracking_uri.startswith(("http://", "https://")):
        return ""
    eid = _experiment_id(tracking_uri)
    if len(run_ids) == 1:
        return run_link(tracking_uri, eid, next(iter(run_ids.values())))
    return f"{tracking_uri.rstrip('/')}/#/experiments/{eid}"


def ready(pairs: Iterator[tuple[tuple[str, int], str]]) -> Callable[[tuple[str, int]], str]:
    """``run`` → its page, from :func:`jobs.publish.reports.render_reports`' ``(run, page)`` pairs, taken in order
    as they are asked for (the pages of the runs before it kept until asked)."""
    got: dict[tuple[str, int], str] = {}

    def page(run: tuple[str, int]) -> str:
        while run not in got:
            key, html = next(pairs)
            got[key] = html
        return got.pop(run)

    return page
