"""tracelake_fleet_report — daily, and whenever tracelake_ingest updates the warehouse.

``settings`` resolves the Airflow Variables (``jobs.pipeline.settings``); ``fleet_report`` submits
``python -m jobs.publish.report`` as a Spark application with the ``spark_tracelake`` connection (local
mode when it is not defined): fleet-wide statistics over every job in the warehouse (step-time
percentiles and idle time by job, device and date), the report, and the MLflow fleet run of the
day (``fleet-<date>`` in experiment ``tracelake-fleet``, reused when re-run the same day).
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import Asset, AssetOrTimeSchedule, CronTriggerTimetable, dag, task

from jobs.pipeline import settings as cfg
from jobs.pipeline.operators import TracelakeSparkSubmitOperator


@dag(
    schedule=AssetOrTimeSchedule(timetable=CronTriggerTimetable("@daily", timezone="UTC"),
                                 assets=[Asset(name=cfg.WAREHOUSE_ASSET)]),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": cfg.RETRIES, "retry_delay": timedelta(seconds=cfg.RETRY_DELAY_S)},
    doc_md=__doc__,
    tags=["tracelake"],
)
def tracelake_fleet_report():
    @task(task_id=cfg.SETTINGS_TASK)
    def settings() -> dict:
        """Variables with their defaults."""
        return cfg.resolve()

    fleet_report = TracelakeSparkSubmitOperator(
        task_id="fleet_report",
        name="tracelake-fleet-report",
        application=cfg.application("module"),
        application_args=["jobs.publish.report", "--warehouse", cfg.xcom("warehouse"), "--tracking-uri", cfg.xcom("tracking_uri")],
    )

    settings() >> fleet_report


fleet_report_dag = tracelake_fleet_report()

if __name__ == "__main__":  # python dags/tracelake_fleet_report.py: one run now, no scheduler (needs `airflow db migrate`)
    fleet_report_dag.test()
