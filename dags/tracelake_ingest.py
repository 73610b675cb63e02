"""tracelake_ingest — every hour: the captures committed in the hour → warehouse → MLflow.

The interval length and bounds can be changed with ``$TRACELAKE_INGEST_SCHEDULE`` (cron, or an ISO 8601
duration such as ``PT20S``),
``$TRACELAKE_INGEST_START`` and ``$TRACELAKE_INGEST_END`` (:func:`jobs.pipeline.settings.ingest_schedule`).

One task per declared stage of :data:`jobs.pipeline.stages.INGEST` (the stages ``tracelake run``
runs, in the same order): ``settings`` resolves the Airflow Variables and the interval
(:mod:`jobs.pipeline.settings`); ``discover`` is skipped, with the rest of the run, when no capture was
committed in ``[since, until)`` (its log: "0 captures in 2026-12-03T16:00–17:00"), and chooses the engine: an
interval below ``tracelake_local_max_bytes`` runs each engine stage on the local executor inside its task
(:func:`jobs.pipeline.stages.choose_engine`; each task's log says which ran); else each engine stage is a spark-submit
of :mod:`jobs.pipeline.submit` with the ``spark_tracelake`` connection (local mode when it is not
defined; a client of it when it is a Spark Connect server); ``publish`` (MLflow runs, validation and HTML reports) is a Python task
(:class:`~jobs.pipeline.operators.TracelakeStageOperator`; its "MLflow runs" button opens what it logged) and marks the
warehouse Asset as updated, which triggers ``tracelake_fleet_report``. A job that failed a Great
Expectations check is published as a FAILED run, and then the run fails.

Idempotent per interval: every job touched in the interval is rebuilt from all of its committed
captures and its ``(date, job_id)`` partitions are replaced; MLflow runs are replaced. Stages hand
their results on through the run record in the warehouse; XCom holds only the settings.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import Asset, CronDataIntervalTimetable, DeltaDataIntervalTimetable, dag, task
from airflow.sdk.exceptions import AirflowSkipException

from jobs.pipeline import settings as cfg
from jobs.pipeline.operators import TracelakeSparkSubmitOperator, TracelakeStageOperator
from jobs.pipeline.stages import INGEST, choose_engine, discover_interval, empty_interval

INGEST_SCHEDULE, INGEST_START, INGEST_END = cfg.ingest_schedule()  # hourly from 2026-01-01 unless the environment says


@dag(
    schedule=CronDataIntervalTimetable(INGEST_SCHEDULE, timezone="UTC")
    if isinstance(INGEST_SCHEDULE, str)
    else DeltaDataIntervalTimetable(INGEST_SCHEDULE),
    start_date=INGEST_START,
    end_date=INGEST_END,
    catchup=False,  # a run covers every interval since the last successful one (settings.ingest_interval)
    max_active_runs=1,
    default_args={"retries": cfg.RETRIES, "retry_delay": timedelta(seconds=cfg.RETRY_DELAY_S)},
    doc_md=__doc__,
    tags=["tracelake"],
)
def tracelake_ingest():
    @task(task_id=cfg.SETTINGS_TASK)
    def settings(**context) -> dict:
        """Variables with their defaults, and the interval [since, until) of this run."""
        return cfg.resolve_ingest(context)

    @task(task_id=cfg.DISCOVER_TASK)
    def discover(conf: dict) -> dict:
        """Summary of the captures committed in the interval, with the engine of the stages; none skips this task
        and every stage after it, the reason ("0 captures in 2026-12-03T16:00–17:00") in the task's log."""
        found = discover_interval(conf)
        print(f"discovered in [{conf['since']}, {conf['until']}): {found}")
        if not found["n_new"]:
            raise AirflowSkipException(empty_interval(conf))
        found["engine"], found["engine_reason"] = choose_engine(found, cfg.local_max_bytes())
        print(f"engine: {found['engine_reason']}")
        return found

    conf = settings()
    upstream = discover(conf)
    for stage in INGEST:
        final = stage is INGEST[-1]
        if stage.spark:
            op = TracelakeSparkSubmitOperator(
                task_id=stage.name,
                name=f"tracelake-{stage.name}",
                application=cfg.application(),
                application_args=["--stage", stage.name, "--settings", cfg.settings_arg()],
                engine=cfg.discovered_arg("engine"),
                engine_reason=cfg.discovered_arg("engine_reason"),
            )
        else:
            op = TracelakeStageOperator(
                task_id=stage.name,
                stage=stage.name,
                settings=cfg.settings_arg(),
                engine=cfg.discovered_arg("engine"),
                final=final,
                outlets=[Asset(name=cfg.WAREHOUSE_ASSET)] if final else [],
            )
        upstream >> op
        upstream = op


ingest_dag = tracelake_ingest()

if __name__ == "__main__":  # python dags/tracelake_ingest.py: one run now, no scheduler (needs `airflow db migrate`)
    ingest_dag.test()
