"""``tracelake run``: every stage of :data:`jobs.pipeline.stages.INGEST` in one process, on one landing zone.

The same declared stages the DAGs and the spark-submit application run (:mod:`jobs.pipeline.stages`),
in order, sharing one engine and the run record; afterwards the per-job tables are read back for the
CLI's summary. The engine (:mod:`jobs.executor`) is the embedded local executor unless a SparkSession,
a Spark master or ``executor="spark"`` is given: one machine needs no JVM.
"""

from __future__ import annotations

import importlib
import threading
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import cast

import pandas as pd

from jobs.executor import LocalExecutor
from jobs.pipeline.stages import INGEST, RunSettings, run_stages, validation
from jobs.publish.tracking import open_store_in_background
from jobs.spark import get_spark
from jobs.warehouse import read_pandas

#: Modules the driver itself needs only in later stages (scipy.stats: the fleet's rank tests, and the findings'
#: binomial test when a one-job run keeps the rules on the driver; ~0.9 CPU s to import): imported in a thread while
#: the first stages run in the workers.
DRIVER_LATER = ("scipy.stats",)


def import_in_background(names=DRIVER_LATER) -> threading.Thread:
    """Import ``names`` in a daemon thread (a failure is left for the stage that imports them to raise)."""

    def load() -> None:
        for name in names:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001
                pass

    thread = threading.Thread(target=load, name="tracelake-driver-imports", daemon=True)
    thread.start()
    return thread


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
    regressions: pd.DataFrame = field(default_factory=pd.DataFrame)  # regressions rows of the run's jobs
    findings: pd.DataFrame = field(default_factory=pd.DataFrame)  # findings rows of the run's jobs
    record: dict = field(default_factory=dict)  # the run record (jobs.pipeline.record)


@contextmanager
def _stage(progress, text: str):
    if progress is None:
        yield
        return
    task = progress.add_task(text, total=None)
    try:
        yield
    except BaseException:
        progress.update(task, completed=1, total=1, description=f"[red]✗[/red] {text}")
        raise
    progress.update(task, completed=1, total=1, description=f"[green]✓[/green] {text}")


def run_pipeline(
    raw: str,
    warehouse: str,
    tracking_uri: str | None = None,
    storage_options: dict | None = None,
    spark=None,
    progress=None,
    log_to_mlflow: bool = True,
    since=None,
    until=None,
    master: str | None = None,
    executor: str | None = None,
    bare_tags: dict | None = None,
) -> PipelineResult:
    """Run the declared ingest stages (:data:`jobs.pipeline.stages.INGEST`) on ``raw``.

    Normalize every committed capture under ``raw``, validate, analyze, validate, rebuild the fleet
    tables, publish (MLflow runs, validation and HTML reports). A job whose tables fail validation
    is marked and its MLflow run ends ``FAILED`` with the validation report attached.

    Args:
        raw: landing zone (folder or fsspec URI such as ``s3://bucket/raw``).
        warehouse: warehouse root (local folder; Parquet tables under it).
        tracking_uri: MLflow tracking URI; default ``sqlite:///<warehouse>/mlflow.db``.
        storage_options: fsspec options for ``raw`` (e.g. S3 endpoint and keys).
        spark: an existing SparkSession to run on (Spark executor).
        progress: a ``rich.progress.Progress`` to report stages on, or ``None``.
        log_to_mlflow: ``False`` leaves out the ``publish`` stage.
        since, until: only the jobs with a capture committed in ``[since, until)`` (UTC ``datetime``
            or ISO string; ``None`` = open end), see :mod:`jobs.landing.interval`.
        master: run on Spark with this master URL (``spark://…`` for a standalone cluster, ``local[2]``).
        executor: ``local`` (default without ``spark``/``master``: :class:`jobs.executor.LocalExecutor`,
            no JVM) or ``spark`` (:func:`jobs.spark.get_spark`; master ``$TRACELAKE_SPARK_MASTER`` or
            ``local[*]``).
        bare_tags: manifest tags (``job_name``, ``model``, …) for the trace files without a manifest.

    Raises:
        ValueError: an unknown ``executor``.

    Returns:
        :class:`PipelineResult`.
    """
    s = RunSettings(
        raw=raw,
        warehouse=warehouse,
        tracking_uri=tracking_uri or None,
        storage_options=storage_options or {},
        since=since,
        until=until,
        bare_tags=bare_tags or {},
    )
    kind = "spark" if spark is not None or master else (executor or "local")
    if kind not in ("local", "spark"):
        raise ValueError(f"unknown executor {kind!r}: expected 'local' or 'spark'")
    if kind == "spark" and spark is None:
        with _stage(progress, f"Starting Spark ({master})" if master else "Starting Spark"):
            spark = get_spark(master=master)

    def on_stage(stage, record):
        n_jobs = len(record.get(stage.needs or "job_ids", []))
        return _stage(progress, stage.title.format(**s.model_dump(), n_jobs=n_jobs))

    with LocalExecutor() if kind == "local" else nullcontext(spark) as engine:
        store = None
        try:
            if kind == "local":
                # The driver imports mlflow and opens (or creates) the MLflow store in a thread while the fork
                # server imports Great Expectations once, for every worker to inherit, and the first stages run in
                # the workers (the fork server is a new process: no thread of the driver is copied into it).
                uri = cast(str, s.tracking_uri)  # RunSettings.model_post_init filled it
                store = open_store_in_background(uri) if log_to_mlflow else None
                with _stage(progress, f"Starting {engine.workers} worker processes"):
                    engine.start(preload=[m for st in INGEST for m in st.preload])
                import_in_background()

            def on_stage_ready(stage, record):
                if stage.name == "publish" and store is not None:
                    store.join()
                return on_stage(stage, record)

            record = run_stages(
                INGEST, s, engine=engine, skip=() if log_to_mlflow else ("publish",), on_stage=on_stage_ready
            )
        finally:  # never leave with the store half created (a new SQLite file is migrated by the thread)
            if store is not None:
                store.join()
    job_ids = record.get("job_ids", [])
    t = read_pandas(warehouse, ("captures", "ranks", "steps", "neuron_summary", "regressions", "findings"), job_ids)
    run_ids = {(k.rsplit("#", 1)[0], int(k.rsplit("#", 1)[1])): v for k, v in record.get("run_ids", {}).items()}
    return PipelineResult(
        warehouse=warehouse,
        tracking_uri=s.tracking_uri if "run_ids" in record else None,
        job_ids=job_ids,
        captures=t["captures"],
        ranks=t["ranks"],
        steps=t["steps"],
        neuron_summary=t["neuron_summary"],
        pending=record.get("pending", []),
        run_ids=run_ids,
        validation=validation(record),
        regressions=t["regressions"],
        findings=t["findings"],
        record=record,
    )
