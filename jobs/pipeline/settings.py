"""Names and defaults of the Airflow configuration of the tracelake DAGs (one place, no literals in DAGs).

Airflow Variables (all optional):

=============================  ===============================================================
``tracelake_raw``              landing zone (folder or fsspec URI such as ``s3://bucket/raw``);
                               default ``$AIRFLOW_HOME/tracelake/landing``
``tracelake_warehouse``        warehouse root; default ``$AIRFLOW_HOME/tracelake/warehouse``
``tracelake_tracking_uri``     MLflow tracking URI; default ``sqlite:///<warehouse>/mlflow.db``
``tracelake_storage_options``  fsspec options for the landing zone as JSON (e.g. an S3
                               ``endpoint_url``); an ``s3://`` warehouse uses them too (the
                               stages' own processes; Spark workers elsewhere bring their own
                               credentials); default ``{}``
``tracelake_spark_conf``       extra Spark properties for every stage as JSON, read when the task
                               runs (e.g. executor memory on a cluster); default ``{}``
``tracelake_local_max_bytes``  an interval whose files to normalize hold fewer stored bytes runs
                               its engine stages on the local executor inside each task, not on
                               Spark (:func:`jobs.pipeline.stages.choose_engine`); default
                               :data:`LOCAL_MAX_BYTES`; ``0``: always Spark
=============================  ===============================================================

Airflow Connection ``spark_tracelake`` (type ``spark``): the Spark master the stages are
submitted to (``spark://host:7077``, ``yarn``, ``k8s://…``). When it is not defined the stages run
in local mode (``local[*]``) with the Python interpreter of the Airflow worker.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

from jobs.pipeline.stages import RunSettings

SPARK_CONN_ID = "spark_tracelake"
DEFAULT_SPARK_MASTER = "local[*]"

VAR_RAW = "tracelake_raw"
VAR_WAREHOUSE = "tracelake_warehouse"
VAR_TRACKING_URI = "tracelake_tracking_uri"
VAR_STORAGE_OPTIONS = "tracelake_storage_options"
VAR_SPARK_CONF = "tracelake_spark_conf"
VAR_LOCAL_MAX_BYTES = "tracelake_local_max_bytes"

#: Default of ``tracelake_local_max_bytes``: 64 MB of stored trace files, about three times fleet 1 of
#: ``benchmarks/fleet_vs_hta.py`` (20.6 MB stored, 248.8 MB of JSON: 21.2 s on the local executor on two cores,
#: ``benchmarks/cluster_path.py``), so about a minute by that rate; above it, a cluster's executors beat a task's pool.
LOCAL_MAX_BYTES = 64_000_000

#: Task id of the task that summarizes the interval (its XCom: :func:`jobs.pipeline.stages.discover_interval`, with
#: the engine of the run's stages, :func:`jobs.pipeline.stages.choose_engine`).
DISCOVER_TASK = "discover"

#: Name of the Airflow Asset that stands for the warehouse (updated by ``tracelake_ingest``).
WAREHOUSE_ASSET = "tracelake_warehouse"

#: Task id of the task that resolves the settings of a run (its XCom is a dict, see :func:`resolve`).
SETTINGS_TASK = "settings"

#: Spark properties for every stage; local mode adds :data:`LOCAL_SPARK_CONF`.
SPARK_CONF = {"spark.ui.showConsoleProgress": "false", "spark.sql.session.timeZone": "UTC"}
#: Extra Spark properties in local mode (one machine: no UI, the driver holds the executors).
LOCAL_SPARK_CONF = {"spark.ui.enabled": "false", "spark.driver.memory": "4g"}

#: Default task arguments of the tracelake DAGs: ``$TRACELAKE_TASK_RETRIES`` (default 2) and
#: ``$TRACELAKE_TASK_RETRY_DELAY_S`` (default 300 s), read when the DAG file is parsed (the tests set
#: 0 retries so that a failure ends dag.test() at once).
RETRIES = int(os.environ.get("TRACELAKE_TASK_RETRIES", "2"))
RETRY_DELAY_S = float(os.environ.get("TRACELAKE_TASK_RETRY_DELAY_S", "300"))

#: The ingest DAG's default timetable: hourly data intervals from 2026-01-01 UTC, no end.
INGEST_CRON = "@hourly"
INGEST_START = datetime(2026, 1, 1, tzinfo=UTC)


def ingest_schedule(environ=None) -> tuple[str | timedelta, datetime, datetime | None]:
    """``(schedule, start_date, end_date)`` of ``tracelake_ingest``, read when the DAG file is parsed.

    ``$TRACELAKE_INGEST_SCHEDULE`` sets the data intervals: a cron expression (UTC; default
    :data:`INGEST_CRON`), returned as text, or an ISO 8601 duration such as ``PT20S`` (intervals of that
    length from the start, down to seconds, which cron cannot express), returned as a ``timedelta``;
    ``$TRACELAKE_INGEST_START`` / ``$TRACELAKE_INGEST_END`` (ISO 8601; naive times are UTC) bound them
    (default :data:`INGEST_START`, no end). Set them in the environment of the dag-processor and the
    workers (e.g. ``infra/local/airflow.sh start``).

    Raises:
        ValueError: a bound is not ISO 8601, a duration is not positive, or the end is not after the
            start (names the variable).
    """
    environ = os.environ if environ is None else environ
    text = environ.get("TRACELAKE_INGEST_SCHEDULE") or INGEST_CRON
    # an ISO 8601 duration, or cron (which never starts with P)
    schedule = _duration("TRACELAKE_INGEST_SCHEDULE", text) if text.startswith("P") else text
    start = _env_time(environ, "TRACELAKE_INGEST_START") or INGEST_START
    end = _env_time(environ, "TRACELAKE_INGEST_END")
    if end is not None and end <= start:
        raise ValueError(
            f"$TRACELAKE_INGEST_END ({end.isoformat()}) must be after $TRACELAKE_INGEST_START ({start.isoformat()})"
        )
    return schedule, start, end


def _duration(var: str, text: str) -> timedelta:
    """``text`` (an ISO 8601 duration, e.g. ``PT20S``) as a positive timedelta; ValueError naming ``$var``."""
    import pendulum  # Airflow's own date library (a dependency of it): parses ISO 8601 durations

    try:
        parsed = pendulum.parse(text)
    except ValueError as exc:  # pendulum's ParserError is a ValueError
        raise ValueError(f"${var} must be a cron expression or an ISO 8601 duration, got {text!r}") from exc
    if not isinstance(parsed, timedelta) or parsed.total_seconds() <= 0:
        raise ValueError(f"${var} must be a positive ISO 8601 duration, got {text!r}")
    return timedelta(seconds=parsed.total_seconds())


def _env_time(environ, var: str) -> datetime | None:
    """The time in ``environ[var]`` (ISO 8601, ``Z`` allowed; naive times are UTC), ``None`` when unset or empty.

    Raises:
        ValueError: the value is not ISO 8601 (names the variable).
    """
    text = environ.get(var)
    if not text:
        return None
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ValueError(f"${var} must be an ISO 8601 time, got {text!r}") from exc
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def home() -> Path:
    """``$AIRFLOW_HOME/tracelake`` (``~/airflow/tracelake`` when ``AIRFLOW_HOME`` is unset)."""
    return Path(os.environ.get("AIRFLOW_HOME") or Path.home() / "airflow") / "tracelake"


def application() -> str:
    """Absolute path of the spark-submit application that runs one declared stage (:mod:`jobs.pipeline.submit`)."""
    return str(Path(__file__).resolve().parent / "submit.py")


def settings_arg() -> str:
    """Jinja template for the resolved settings of the current run as JSON (``--settings`` of the application)."""
    return "{{ ti.xcom_pull(task_ids='" + SETTINGS_TASK + "') | tojson }}"


def discovered_arg(key: str) -> str:
    """Jinja template for ``key`` of the discover task's summary (e.g. ``engine``), rendered when a stage task runs."""
    return "{{ ti.xcom_pull(task_ids='" + DISCOVER_TASK + "')['" + key + "'] }}"


def local_max_bytes() -> int:
    """The Variable ``tracelake_local_max_bytes`` (default :data:`LOCAL_MAX_BYTES`; call inside a task).

    Raises:
        ValueError: the Variable is not a non-negative integer.
    """
    from airflow.sdk import Variable  # heavy: airflow, only inside a task

    text = str(Variable.get(VAR_LOCAL_MAX_BYTES, default=LOCAL_MAX_BYTES)).strip()
    if not text.isdigit():
        raise ValueError(f"Airflow Variable {VAR_LOCAL_MAX_BYTES} must be a number of bytes (0 or more), got {text!r}")
    return int(text)


def resolve(since=None, until=None, run_conf: dict | None = None) -> dict:
    """The settings of one DAG run, from Airflow Variables with the defaults above (call inside a task).

    Args:
        since, until: the interval to ingest (UTC datetimes; ``None`` for the fleet report).
        run_conf: ``dag_run.conf``; ``since``/``until`` there (ISO strings) override the interval,
            for manual backfills (e.g. ``{"since": "2026-01-01T00:00:00Z"}``).

    Returns:
        :class:`jobs.pipeline.stages.RunSettings` as a dict (the XCom every stage task reads).

    Raises:
        ValueError: ``tracelake_storage_options`` is not a JSON object, or a bound is not ISO 8601.
    """
    from airflow.sdk import Variable  # heavy: airflow, only inside a task

    run_conf = run_conf or {}
    warehouse = Variable.get(VAR_WAREHOUSE, default=str(home() / "warehouse"))
    storage_options = json.loads(Variable.get(VAR_STORAGE_OPTIONS, default="{}") or "{}")
    if not isinstance(storage_options, dict):
        raise ValueError(f"Airflow Variable {VAR_STORAGE_OPTIONS} must be a JSON object, got {storage_options!r}")
    return RunSettings(
        raw=Variable.get(VAR_RAW, default=str(home() / "landing")),
        warehouse=warehouse,
        tracking_uri=Variable.get(VAR_TRACKING_URI, default="") or None,
        storage_options=storage_options,
        since=run_conf.get("since") or since,
        until=run_conf.get("until") or until,
    ).model_dump()


def ingest_interval(data_interval_start, data_interval_end, prev_success_end=None):
    """``(since, until)`` of an ingest run (pure).

    ``until`` is the end of the run's data interval. ``since`` is the start of its data interval, or
    the end of the previous successful run's interval when that is earlier: intervals that were
    missed (scheduler down, failed runs, DAG paused; the DAG does not catch up run by run) are then
    covered by the next successful run.
    """
    since = data_interval_start
    if prev_success_end is not None and (since is None or prev_success_end < since):
        since = prev_success_end
    return since, data_interval_end


def resolve_ingest(context) -> dict:
    """:func:`resolve` for an ingest run, from the task's Airflow context (data interval, previous
    successful run, ``dag_run.conf``)."""
    lazy = context.get("prev_data_interval_end_success")
    try:
        prev_end = getattr(lazy, "__wrapped__", lazy)  # a lazy proxy: this looks the previous run up
    except Exception:  # first run: there is no previous successful run
        prev_end = None
    since, until = ingest_interval(context.get("data_interval_start"), context.get("data_interval_end"), prev_end)
    dag_run = context.get("dag_run")
    return resolve(since, until, run_conf=getattr(dag_run, "conf", None))


def spark_conf_variable() -> dict:
    """Extra Spark properties from the Variable ``tracelake_spark_conf`` (call inside a task).

    Raises:
        ValueError: the Variable is not a JSON object of properties.
    """
    from airflow.sdk import Variable  # heavy: airflow, only inside a task

    text = Variable.get(VAR_SPARK_CONF, default="{}") or "{}"
    conf = json.loads(text)
    if not isinstance(conf, dict):
        raise ValueError(f"Airflow Variable {VAR_SPARK_CONF} must be a JSON object of Spark properties, got {text!r}")
    return {str(k): str(v) for k, v in conf.items()}
