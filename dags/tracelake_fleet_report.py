"""tracelake_fleet_report — daily, and whenever tracelake_ingest updates the warehouse.

One task per declared stage of :data:`jobs.pipeline.stages.FLEET_REPORT`: ``settings`` resolves
the Airflow Variables (:mod:`jobs.pipeline.settings`); ``fleet_report`` renders the fleet report
over every job in the warehouse from the fleet tables the ingest's ``fleet`` stage keeps
(step-time percentiles and idle time by job, device and date, regressions) and logs the MLflow
fleet run of the day (``fleet-<date>`` in experiment ``tracelake-fleet``, replaced when re-run the
same day). It reads the warehouse with pyarrow: no Spark application. Then ``maintain`` compacts the tables'
small files and vacuums the files no version of the last 7 days needs (``tracelake maintain``).
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import Asset, AssetOrTimeSchedule, CronTriggerTimetable, dag, task

from jobs.pipeline import settings as cfg
from jobs.pipeline.stages import FLEET_REPORT, run_stage


@dag(
    schedule=AssetOrTimeSchedule(
        timetable=CronTriggerTimetable("@daily", timezone="UTC"), assets=[Asset(name=cfg.WAREHOUSE_ASSET)]
    ),
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

    conf = settings()
    previous = None
    for stage in FLEET_REPORT:

        @task(task_id=stage.name)
        def run(conf: dict, name: str = stage.name) -> str | None:
            """One declared stage of the fleet report pipeline; returns the fleet run id (fleet_report)."""
            return run_stage(name, conf).get("fleet_run_id")

        this = run(conf)  # every stage gets the settings; they run in the declared order
        if previous is not None:
            previous >> this
        previous = this


fleet_report_dag = tracelake_fleet_report()

if (
    __name__ == "__main__"
):  # python dags/tracelake_fleet_report.py: one run now, no scheduler (needs `airflow db migrate`)
    fleet_report_dag.test()
