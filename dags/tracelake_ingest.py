"""tracelake_ingest — every hour: the captures committed in the hour → warehouse → MLflow.

``settings`` resolves the Airflow Variables (``jobs.pipeline.settings``) and the interval;
``discover`` lists the captures whose ``manifest.json`` landed in ``[since, until)`` and skips
the rest of the run when there are none; ``normalize``, ``analyze`` and the ``validate_*`` Great
Expectations gates (``jobs.validate``; a failed check fails the run before anything is published)
are Spark applications submitted with the ``spark_tracelake`` connection (local mode when it is
not defined); ``log_to_mlflow`` creates or updates one MLflow
run per (job, attempt) and marks the warehouse Asset as updated, which triggers
``tracelake_fleet_report``.

Idempotent per interval: every job touched in the interval is rebuilt from all of its committed
captures and its ``(date, job_id)`` partitions are overwritten (``jobs.landing.interval``);
MLflow runs are reused. Large data moves through the warehouse; XCom holds only the settings,
a discovery summary and run ids.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import Asset, CronDataIntervalTimetable, dag, task

from jobs.pipeline import settings as cfg
from jobs.pipeline.operators import TracelakeSparkSubmitOperator


@dag(
    schedule=CronDataIntervalTimetable("@hourly", timezone="UTC"),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
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

    @task.short_circuit
    def discover(conf: dict) -> dict:
        """Summary of the captures committed in the interval; an empty dict skips the run."""
        import json

        from jobs.landing.interval import summarize_interval

        found = summarize_interval(conf["raw"], conf["since"], conf["until"], json.loads(conf["storage_options"]))
        print(f"discovered in [{conf['since']}, {conf['until']}): {found}")
        return found if found["n_new"] else {}

    normalize = TracelakeSparkSubmitOperator(
        task_id="normalize",
        name="tracelake-normalize",
        application=cfg.application("normalize"),
        application_args=["--raw", cfg.xcom("raw"), "--warehouse", cfg.xcom("warehouse"),
                          "--since", cfg.xcom("since"), "--until", cfg.xcom("until"),
                          "--storage-options", cfg.xcom("storage_options"), "--record", cfg.xcom("record")],
    )

    validate_normalize = TracelakeSparkSubmitOperator(
        task_id="validate_normalize",
        name="tracelake-validate-normalize",
        application=cfg.application("validate"),
        application_args=["--warehouse", cfg.xcom("warehouse"), "--record", cfg.xcom("record"), "--stage", "normalize"],
    )

    analyze = TracelakeSparkSubmitOperator(
        task_id="analyze",
        name="tracelake-analyze",
        application=cfg.application("analyze"),
        application_args=["--warehouse", cfg.xcom("warehouse"), "--record", cfg.xcom("record")],
    )

    validate_analyze = TracelakeSparkSubmitOperator(
        task_id="validate_analyze",
        name="tracelake-validate-analyze",
        application=cfg.application("validate"),
        application_args=["--warehouse", cfg.xcom("warehouse"), "--record", cfg.xcom("record"), "--stage", "analyze"],
    )

    @task(outlets=[Asset(name=cfg.WAREHOUSE_ASSET)])
    def log_to_mlflow(conf: dict) -> dict:
        """One MLflow run per (job, attempt) of the interval; returns {"job#attempt": run_id}."""
        from jobs.pipeline.mlflow_log import log_run

        return log_run(conf)

    conf = settings()
    discover(conf) >> normalize >> validate_normalize >> analyze >> validate_analyze >> log_to_mlflow(conf)


ingest_dag = tracelake_ingest()

if __name__ == "__main__":  # python dags/tracelake_ingest.py: one run now, no scheduler (needs `airflow db migrate`)
    ingest_dag.test()
