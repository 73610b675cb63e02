"""The pipeline, declared once: normalize → validate → analyze → validate → fleet → publish.

Every driver runs these declarations: ``tracelake run`` (:func:`jobs.pipeline.run.run_pipeline`, all
stages in one process), the per-stage commands (``python -m jobs.normalize`` …), the spark-submit
application :mod:`jobs.pipeline.submit` (one stage per application) and the Airflow DAGs (one task per
stage). A stage marked *engine* runs its transforms on the engine it is handed (:mod:`jobs.executor`): a
SparkSession under spark-submit and the DAGs, the embedded local executor under ``tracelake run`` by
default. Stages hand their results on through the **run record** (:mod:`jobs.pipeline.record`), a small
JSON file in the warehouse, never through driver memory, so a stage gives the same result whether the
one before it ran in the same process, another spark-submit or another machine.

=====================  ======  ==============================================================
stage                  engine  does
=====================  ======  ==============================================================
``normalize``          yes     landing zone → ``captures``, ``events``, ``neuron_summary``
``validate_normalize`` yes     Great Expectations over those tables of the run's jobs
``analyze``            yes     → ``steps``, ``ranks``, ``kernels``, ``collectives``,
                               ``critical_path``, ``findings``
``validate_analyze``   yes     Great Expectations over the analysis tables
``fleet``              yes     → ``fleet_stats``, ``fleet_kernels``, ``regressions``,
                               ``fleet_findings``, ``host_health`` (all jobs), then Great
                               Expectations over them (whole tables)
``publish``            no      one MLflow run per (job, attempt): params, metrics, tags, CSVs,
                               findings, validation report, HTML job report
``fleet_report``       no      the fleet HTML report and the day's MLflow fleet run
=====================  ======  ==============================================================

A job that fails validation is marked (``<table>/_validation.json``) and its MLflow run ends
``FAILED`` with the validation report attached; it is never silently published.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import cast

from pydantic import BaseModel, Field, field_validator

from jobs.executor import LocalExecutor, is_local, main_script_hidden
from jobs.landing.interval import as_utc, interval_words, summarize_interval
from jobs.pipeline.record import build_record, read_record, write_record
from jobs.publish.tracking import default_tracking_uri
from jobs.spark import get_spark
from jobs.validate.report import ValidationReport
from jobs.warehouse import read_pandas, use_storage_options


class RunSettings(BaseModel):
    """What one pipeline run works on (JSON-ready: passed between Airflow tasks and to spark-submit).

    ``since``/``until`` take a ``datetime``, ISO 8601 text or ``None`` and are kept as UTC ISO text
    (``""`` = open end; ValueError for anything else); ``record`` defaults to
    ``<warehouse>/_runs/ingest/<since>_<until>.json`` (:func:`record_uri`); ``job_ids`` restricts a
    stage run alone to those jobs (``None`` = the jobs of the record, else every job).
    """

    raw: str = ""
    warehouse: str
    tracking_uri: str | None = None  # None: sqlite:///<warehouse>/mlflow.db; "" : no MLflow (fleet_report)
    storage_options: dict = Field(default_factory=dict)  # fsspec options of the landing zone and an s3:// warehouse
    since: str = ""
    until: str = ""
    record: str = ""
    job_ids: list[str] | None = None
    day: str = ""  # fleet run date YYYY-MM-DD (fleet_report; default today UTC)
    report_html: str = ""  # fleet_report: also write the HTML report to this file
    fleet_options: dict = Field(default_factory=dict)  # jobs.fleet.job.run_fleet's rebuild and regression thresholds
    parse_limits: dict = Field(default_factory=dict)  # jobs.normalize.limits.ParseLimits of every trace file
    bare_tags: dict[str, str] = Field(default_factory=dict)  # manifest tags (job_name, model, …) of bare trace files

    @field_validator("since", "until", mode="before")
    @classmethod
    def _utc_iso(cls, value) -> str:
        t = as_utc(value)
        return t.isoformat() if t else ""

    def model_post_init(self, _ctx) -> None:
        """Fill ``record`` and ``tracking_uri`` from the warehouse and the interval; an ``s3://`` warehouse takes
        ``storage_options``' credentials (:func:`jobs.warehouse.use_storage_options`)."""
        use_storage_options(self.warehouse, self.storage_options)
        if not self.record:
            self.record = record_uri(self.warehouse, as_utc(self.since), as_utc(self.until))
        if self.tracking_uri is None:
            self.tracking_uri = default_tracking_uri(self.warehouse)


def interval_name(since, until) -> str:
    """File-name-safe label of an interval, e.g. ``20260301T100000Z_20260301T110000Z`` (``open`` for no bound)."""
    return "_".join(t.strftime("%Y%m%dT%H%M%SZ") if t else "open" for t in (since, until))


def record_uri(warehouse: str, since=None, until=None) -> str:
    """Where the run record of the interval ``[since, until)`` lives (UTC datetimes or ``None``)."""
    return "/".join([warehouse.rstrip("/"), "_runs", "ingest", interval_name(since, until) + ".json"])


@dataclass(frozen=True)
class Stage:
    """One declared step of a pipeline.

    Attributes:
        name: task id in the DAGs and ``--stage`` of :mod:`jobs.pipeline.submit`.
        spark: runs on an engine (:mod:`jobs.executor`): under Airflow a spark-submit application, else a
            Python task on the driver.
        run: ``run(engine or None, settings, record) -> None``; updates ``record`` in place.
        title: progress text, formatted with the settings' fields and ``n_jobs``.
        needs: record key whose list must be non-empty for the stage to run (``None`` = always).
        recorded: reads and writes the ingest run record (the fleet report keeps none).
        preload: modules the local executor's fork server imports once for its workers (:meth:`LocalExecutor.start
            <jobs.executor.LocalExecutor.start>`) before the stage runs on it.
    """

    name: str
    spark: bool
    run: Callable
    title: str
    needs: str | None = None
    recorded: bool = True
    preload: tuple[str, ...] = ()


class ValidationFailed(RuntimeError):
    """Raised by :func:`check_validation`: jobs of the run failed a Great Expectations check."""


# --------------------------------------------------------------------------- the stages


def _normalize(engine, s: RunSettings, record: dict) -> None:
    from jobs.normalize.job import run_normalize  # the stage's code, loaded when it runs (DAG parsing stays light)

    res = run_normalize(
        engine,
        s.raw,
        s.warehouse,
        s.storage_options,
        since=s.since or None,
        until=s.until or None,
        limits=s.parse_limits,
        bare_tags=s.bare_tags,
    )
    record.clear()
    record.update(build_record(res.captures, res.pending, s.raw, s.since, s.until, n_discovered=res.n_discovered))


def _validate(stage: str) -> Callable:
    def run(engine, s: RunSettings, record: dict) -> None:
        from jobs.validate.suites import (
            validate_tables,  # the stage's code, loaded when it runs (DAG parsing stays light)
        )

        jobs = record["job_ids"] if stage == "normalize" else record["ingested_job_ids"]
        n_discovered = record.get("n_discovered") if stage == "normalize" else None
        report = validate_tables(engine, s.warehouse, stage, jobs, n_discovered=n_discovered)
        record.setdefault("validation", {})[stage] = report.to_dict(with_gx=True)  # GX results travel too
        print(_summary(report), flush=True)

    return run


def _summary(report: ValidationReport) -> str:
    """The report's whole summary when something failed, else its first line (the detail is in the run record)."""
    text = report.summary()
    return text if not report.success else text.partition("\n")[0]


def _analyze(engine, s: RunSettings, record: dict) -> None:
    from jobs.analyze.job import run_analyze  # the stage's code, loaded when it runs (DAG parsing stays light)

    record["analyze_counts"] = run_analyze(engine, s.warehouse, record["ingested_job_ids"])


def _fleet(engine, s: RunSettings, record: dict) -> None:
    from jobs.fleet.job import run_fleet  # the stage's code, loaded when it runs (DAG parsing stays light)
    from jobs.validate.suites import validate_tables  # the stage's code, loaded when it runs (DAG parsing stays light)

    res = run_fleet(engine, s.warehouse, **s.fleet_options)
    record["fleet_counts"] = res.counts
    record["fleet_reduced_jobs"] = len(res.reduced_jobs)
    record["n_regressions"] = int((res.regressions["verdict"] == "regression").sum()) if len(res.regressions) else 0
    report = validate_tables(engine, s.warehouse, "fleet")  # rebuilt whole: validated whole
    record.setdefault("validation", {})["fleet"] = report.to_dict(with_gx=True)
    print(_summary(report), flush=True)


def _publish(engine, s: RunSettings, record: dict) -> None:
    from jobs.publish.job_runs import publish_jobs  # the stage's code, loaded when it runs (DAG parsing stays light)

    runs = publish_jobs(
        cast(str, s.tracking_uri),  # RunSettings.model_post_init filled it
        s.warehouse,
        record["job_ids"],
        validation(record),
        map_fn=engine.map if is_local(engine) else map,
    )
    record["run_ids"] = {f"{job}#{attempt}": run_id for (job, attempt), run_id in sorted(runs.items())}
    record["tracking_uri"] = s.tracking_uri


def _fleet_report(_spark, s: RunSettings, record: dict) -> None:
    from jobs.publish.reports import (
        publish_fleet_report,  # the stage's code, loaded when it runs (DAG parsing stays light)
    )

    record["fleet_run_id"] = publish_fleet_report(
        s.tracking_uri or None, s.warehouse, day=s.day or None, html=s.report_html or None
    )


def _maintain(_spark, s: RunSettings, record: dict) -> None:
    from jobs.warehouse import maintain  # the stage's code, loaded when it runs (DAG parsing stays light)

    record["maintain"] = maintain(s.warehouse)


#: What the Great Expectations stages' workers import (~3 CPU s, paid once by the fork server).
GX_PRELOAD = ("great_expectations", "jobs.validate.gx_engine")

INGEST: tuple[Stage, ...] = (
    Stage("normalize", True, _normalize, "Normalizing traces from {raw}"),
    Stage(
        "validate_normalize",
        True,
        _validate("normalize"),
        "Validating captures and events (Great Expectations)",
        needs="job_ids",
        preload=GX_PRELOAD,
    ),
    Stage("analyze", True, _analyze, "Analyzing {n_jobs} job(s)", needs="ingested_job_ids"),
    Stage(
        "validate_analyze",
        True,
        _validate("analyze"),
        "Validating the analysis tables (Great Expectations)",
        needs="ingested_job_ids",
        preload=GX_PRELOAD,
    ),
    Stage(
        "fleet",
        True,
        _fleet,
        "Fleet statistics and regressions against previous runs",
        needs="ingested_job_ids",
        preload=GX_PRELOAD,
    ),
    Stage("publish", False, _publish, "Logging {n_jobs} job(s) to MLflow with their reports", needs="job_ids"),
)
"""The main job (``tracelake run``, DAG ``tracelake_ingest``)."""

FLEET_REPORT: tuple[Stage, ...] = (
    Stage("fleet_report", False, _fleet_report, "Fleet report and the MLflow fleet run", recorded=False),
    Stage(
        "maintain",
        False,
        _maintain,
        "Compacting small files and vacuuming unreferenced ones (tracelake maintain)",
        recorded=False,
    ),
)
"""The fleet report (DAG ``tracelake_fleet_report``; ``python -m jobs.publish.report``), then the daily warehouse
maintenance (:func:`jobs.warehouse.maintain`)."""

PIPELINES: dict[str, tuple[Stage, ...]] = {"ingest": INGEST, "fleet_report": FLEET_REPORT}
STAGES: dict[str, Stage] = {st.name: st for p in PIPELINES.values() for st in p}


# --------------------------------------------------------------------------- running a stage


def jobs_record(s: RunSettings, job_ids: list[str] | None = None) -> dict:
    """A run record for a stage run alone: ``job_ids``, or every job in the warehouse's ``captures`` when
    ``None`` (``ingested_job_ids``: those with an ingested capture)."""
    caps = read_pandas(s.warehouse, ["captures"], job_ids)["captures"]
    jobs = sorted(set(caps["job_id"].astype(str)) | set(job_ids or []))
    ingested = sorted(set(caps[caps["status"] == "ingested"]["job_id"].astype(str)) | set(job_ids or []))
    return {"since": s.since, "until": s.until, "raw": s.raw, "job_ids": jobs, "ingested_job_ids": ingested}


def load_record(s: RunSettings) -> dict:
    """The run record at ``s.record`` (:func:`jobs.pipeline.record.read_record`); without one, :func:`jobs_record`
    of ``s.job_ids``. An explicit ``s.job_ids`` narrows the record's jobs."""
    try:
        record = read_record(s.record)
    except FileNotFoundError:
        return jobs_record(s, s.job_ids)
    if s.job_ids is not None:
        record["job_ids"] = sorted(set(record.get("job_ids", [])) & set(s.job_ids))
        record["ingested_job_ids"] = sorted(set(record.get("ingested_job_ids", [])) & set(s.job_ids))
    return record


def should_run(stage: Stage, record: dict) -> bool:
    """Whether ``stage`` has work: its ``needs`` list in the record is non-empty."""
    return stage.needs is None or bool(record.get(stage.needs))


def run_stage(
    name: str, settings: RunSettings | dict, engine=None, record: dict | None = None, save: bool = True
) -> dict:
    """Run the declared stage ``name`` (no-op when it has no work) and save the run record.

    Args:
        name: a key of :data:`STAGES`.
        settings: :class:`RunSettings` or its dict (an Airflow XCom).
        engine: for an engine stage, a SparkSession or a :class:`jobs.executor.LocalExecutor` (default:
            :func:`jobs.spark.get_spark`); a local executor also serves the other stages (``publish``
            renders its reports in the pool).
        record: the run record (default: read from ``settings.record``, see :func:`load_record`).
        save: write the record back to ``settings.record``.

    Returns:
        The updated run record; ``record["stages"][name]`` says when the stage ran or that it was skipped.

    Raises:
        KeyError: ``name`` is not a declared stage; whatever the stage raises.
    """
    stage = STAGES[name]
    s = settings if isinstance(settings, RunSettings) else RunSettings(**settings)
    if record is None:
        record = load_record(s) if stage.recorded and name != "normalize" else {}
    started = _dt.datetime.now(_dt.UTC).isoformat()
    if should_run(stage, record):
        if stage.spark and engine is None:
            engine = get_spark()
        stage.run(engine if stage.spark or is_local(engine) else None, s, record)  # a pool serves any stage
        status = "done"
    else:
        print(f"tracelake {name}: nothing to do (no {stage.needs})", flush=True)
        status = "skipped"
    record.setdefault("stages", {})[name] = {
        "status": status,
        "started_at": started,
        "finished_at": _dt.datetime.now(_dt.UTC).isoformat(),
    }
    if save and stage.recorded:
        write_record(s.record, record)
    return record


@contextmanager
def local_engine(stages: tuple[Stage, ...]):
    """A :class:`~jobs.executor.LocalExecutor` for running ``stages`` in this process, closed on exit: its workers
    start in the background (this process's imports overlap the fork server's) with the stages' ``preload``, and
    never run this process's main script (:func:`~jobs.executor.main_script_hidden`: an Airflow task's is Airflow's
    CLI). What an ingest DAG task runs a small interval's stage on (:func:`choose_engine`)."""
    with main_script_hidden(), LocalExecutor() as engine:
        engine.start(preload=[m for st in stages for m in st.preload], wait=False)
        yield engine


def run_stages(stages, settings: RunSettings | dict, engine=None, skip=(), on_stage=None) -> dict:
    """Run ``stages`` in order in this process, sharing one engine and the run record.

    Stages without work (:func:`should_run`) are left out. What ``tracelake run`` and
    ``submit.py --pipeline`` do.

    Args:
        stages: a declared pipeline, e.g. :data:`INGEST`.
        settings: :class:`RunSettings` or its dict.
        engine: a SparkSession or a :class:`jobs.executor.LocalExecutor` (default: a SparkSession started
            at the first engine stage).
        skip: names of stages to leave out (``tracelake run --no-mlflow`` skips ``publish``).
        on_stage: ``on_stage(stage, record)`` returns a context manager wrapped around each stage (progress).

    Returns:
        The run record after the last stage.
    """
    s = settings if isinstance(settings, RunSettings) else RunSettings(**settings)
    record: dict = {}
    for stage in stages:
        if stage.name in skip or not should_run(stage, record):
            continue
        if stage.spark and engine is None:
            engine = get_spark()
        with on_stage(stage, record) if on_stage else nullcontext():
            record = run_stage(stage.name, s, engine=engine, record=record)
    return record


def validation(record: dict):
    """The merged :class:`~jobs.validate.report.ValidationReport` of the record's validate stages, or ``None``."""
    merged = None
    for stage in ("normalize", "analyze"):
        d = record.get("validation", {}).get(stage)
        if d is not None:
            r = ValidationReport.from_dict(d)
            merged = r if merged is None else merged.merge(r)
    return merged


def check_validation(record: dict) -> None:
    """Raise :class:`ValidationFailed` naming the jobs that failed validation in this run, or the fleet tables that
    did (after publishing)."""
    report = validation(record)
    if report is not None and not report.success:
        raise ValidationFailed(
            f"validation failed for job(s) {', '.join(sorted(report.failed_jobs()))}; their MLflow "
            f"runs are FAILED with the validation report attached\n{report.summary()}"
        )
    fleet = record.get("validation", {}).get("fleet")
    if fleet is not None and not (r := ValidationReport.from_dict(fleet)).success:
        bad = sorted(t.table for t in r.tables.values() if not t.success)
        raise ValidationFailed(
            f"fleet table(s) {', '.join(bad)} failed validation (rebuilt by the fleet stage; "
            f"the job runs are unaffected)\n{r.summary()}"
        )


def published_links(record: dict) -> list[str]:
    """Where the ``publish`` stage's MLflow runs and job reports open, one line a run
    (:func:`jobs.publish.job_runs.run_links`); none when it published nothing."""
    if not record.get("run_ids"):
        return []
    from jobs.publish.job_runs import run_links  # mlflow: loaded when asked (DAG parsing stays light)

    return run_links(record["tracking_uri"], record["run_ids"])


def published_page(record: dict) -> str:
    """The one page of the ``publish`` stage's MLflow runs (:func:`jobs.publish.job_runs.runs_page`), ``""`` when there
    is none."""
    if not record.get("run_ids"):
        return ""
    from jobs.publish.job_runs import runs_page  # mlflow: loaded when asked (DAG parsing stays light)

    return runs_page(record["tracking_uri"], record["run_ids"])


def empty_interval(settings: RunSettings | dict) -> str:
    """Why an ingest run of ``settings`` has nothing to do: ``0 captures in 2026-12-03T16:00–17:00``."""
    s = settings if isinstance(settings, RunSettings) else RunSettings(**settings)
    return f"0 captures in {interval_words(s.since or None, s.until or None)}"


def discover_interval(settings: RunSettings | dict) -> dict:
    """What an ingest run of ``settings``' interval would normalize (:func:`jobs.landing.interval.summarize_interval`,
    ``bytes`` included): the scheduler skips a run whose ``n_new`` is 0."""
    s = settings if isinstance(settings, RunSettings) else RunSettings(**settings)
    return summarize_interval(s.raw, s.since or None, s.until or None, s.storage_options)


def choose_engine(found: dict, max_bytes: int) -> tuple[str, str]:
    """Where an ingest run's engine stages run: ``("local", why)`` when the interval's files to normalize
    (``found["bytes"]``, stored bytes, of :func:`discover_interval`) are fewer than ``max_bytes``, else
    ``("spark", why)``. ``why`` is the line each stage task logs, e.g. ``8.3 MB in 10 file(s) < 64.0 MB
    (tracelake_local_max_bytes): the local executor in each task, no Spark``.

    The local executor (:mod:`jobs.executor`) leaves the same tables as Spark; it saves a small interval the Spark
    session of each task (seconds of fixed cost per task) at the price of the task's own CPUs."""
    size, n = int(found.get("bytes") or 0), found.get("n_files", 0)
    what, limit = f"{size / 1e6:.1f} MB in {n} file(s)", f"{max_bytes / 1e6:.1f} MB (tracelake_local_max_bytes)"
    if size < max_bytes:
        return "local", f"{what} < {limit}: the local executor in each task, no Spark"
    return "spark", f"{what} >= {limit}: Spark"
