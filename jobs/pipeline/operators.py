"""``SparkSubmitOperator`` for the tracelake stages: the ``spark_tracelake`` connection, else local mode.

The provider's hook falls back to master ``yarn`` when its connection is missing; tracelake's
embedded default is Spark ``local[*]`` on the Airflow worker instead. In local mode the stage also
gets what a one-machine Spark needs: the worker's own Python interpreter for the driver and the
Python workers (``PYSPARK_PYTHON``), ``spark-submit`` from that interpreter's environment,
loopback networking (``SPARK_LOCAL_IP``) and :data:`jobs.pipeline.settings.LOCAL_SPARK_CONF`.
With a cluster connection nothing is added: the cluster's own configuration applies. With a Spark Connect
connection (host ``sc://…``, or ``local-connect``: the server ``infra/local/spark.sh connect`` runs) there is no
spark-submit: the task's own process runs the stage as a client of that long-running server, so no JVM starts per task.
With ``engine="local"`` (an ingest interval below ``tracelake_local_max_bytes``: :func:`jobs.pipeline.stages.choose_engine`)
there is no Spark at all: the task's process runs the stage on the embedded local executor.
"""

from __future__ import annotations

import json
import os
import sys
from contextlib import contextmanager, nullcontext
from pathlib import Path

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import BaseOperator

from jobs.pipeline import settings
from jobs.pipeline.links import MlflowRunsLink
from jobs.pipeline.stages import (
    STAGES,
    ValidationFailed,
    check_validation,
    local_engine,
    published_links,
    published_page,
    run_stage,
)
from jobs.spark import is_connect_master


def local_environment() -> dict[str, str]:
    """Environment of a local-mode ``spark-submit``: this interpreter, its ``bin/`` first on ``PATH``, loopback."""
    bin_dir = str(Path(sys.executable).parent)
    return {
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PATH": os.pathsep.join([bin_dir, os.environ.get("PATH", "")]),
    }


def connection_master(conn_id: str) -> str | None:
    """Spark master of connection ``conn_id`` (``conn.host``, with the port when there is one), or ``None`` when it does not exist."""
    from airflow.sdk import BaseHook  # heavy: airflow, only inside a task
    from airflow.sdk.exceptions import AirflowNotFoundException  # heavy: airflow, only inside a task

    try:
        conn = BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        return None
    master = conn.host or ""
    if conn.conn_type and conn.conn_type != "spark" and "://" not in master:
        master = f"{conn.conn_type}://{master}"
    return f"{master}:{conn.port}" if conn.port else master


@contextmanager
def _default_connection(conn_id: str, master: str):
    """Define ``conn_id`` as an environment-variable connection to ``master`` for the duration (only used when it is missing everywhere)."""
    key = f"AIRFLOW_CONN_{conn_id.upper()}"
    os.environ[key] = json.dumps({"conn_type": "spark", "host": master})
    try:
        yield
    finally:
        os.environ.pop(key, None)


class TracelakeSparkSubmitOperator(SparkSubmitOperator):
    """Submit a tracelake stage with connection :data:`~jobs.pipeline.settings.SPARK_CONN_ID` or, when it
    is not defined, in local mode (:data:`~jobs.pipeline.settings.DEFAULT_SPARK_MASTER`).

    Takes the arguments of ``SparkSubmitOperator``; ``conn_id`` defaults to ``spark_tracelake`` and
    ``conf`` to :data:`~jobs.pipeline.settings.SPARK_CONF`, with the Variable ``tracelake_spark_conf``
    (read when the task runs) on top. ``engine`` (templated): ``spark`` (default), or ``local`` to run the stage in
    the task's process on the local executor, logging ``engine_reason`` (templated) first.
    """

    template_fields = (*SparkSubmitOperator.template_fields, "engine", "engine_reason")

    def __init__(
        self,
        *,
        conn_id: str = settings.SPARK_CONN_ID,
        default_master: str = settings.DEFAULT_SPARK_MASTER,
        conf: dict | None = None,
        engine: str = "spark",
        engine_reason: str = "",
        **kwargs,
    ) -> None:
        super().__init__(conn_id=conn_id, conf={**settings.SPARK_CONF, **(conf or {})}, **kwargs)
        self.tracelake_conn_id = conn_id
        self.default_master = default_master
        self.engine = engine
        self.engine_reason = engine_reason

    def execute(self, context):
        run = context.get("dag_run")
        ti = context.get("ti")
        if run is not None and ti is not None:  # the warehouse history names the task that wrote each version
            label = f"airflow:{run.dag_id}/{run.run_id}/{ti.task_id}"
            self.env_vars = {**(self.env_vars or {}), "TRACELAKE_RUN_LABEL": label}
        if self.engine_reason:
            self.log.info("engine: %s", self.engine_reason)
        if self.engine == "local":
            self.log.info("running the stage on the local executor in this task's process (no Spark)")
            self._in_task(["--engine", "local"])
            return None
        if self.engine != "spark":
            raise ValueError(f"engine must be 'spark' or 'local', got {self.engine!r}")
        master = connection_master(self.tracelake_conn_id)
        if master is not None and is_connect_master(master):
            self.log.info("running the stage as a Spark Connect client of %s (no spark-submit, no JVM here)", master)
            self._in_task([], {"TRACELAKE_SPARK_MASTER": master})
            return None
        if (master or self.default_master).startswith("local"):
            self.env_vars = {**local_environment(), **(self.env_vars or {})}
            self.conf = {**settings.LOCAL_SPARK_CONF, **(self.conf or {})}
        self.conf = {**(self.conf or {}), **settings.spark_conf_variable()}
        if master is not None:
            return super().execute(context)
        self.log.info(
            "connection %s is not defined: running in local mode (%s)", self.tracelake_conn_id, self.default_master
        )
        with _default_connection(self.tracelake_conn_id, self.default_master):
            return super().execute(context)

    def _in_task(self, extra_args: list[str], env: dict[str, str] | None = None) -> None:
        """Run the stage in this task's process (:mod:`jobs.pipeline.submit`'s ``main`` with ``extra_args``, ``env``
        added to the environment): as a Spark Connect client (the transforms run on the server's executors) or on
        the local executor; no spark-submit, no driver JVM."""
        from jobs.pipeline.submit import main  # heavy: the stages' code, loaded when the task runs

        os.environ.update({**(env or {}), **(self.env_vars or {})})
        main([str(a) for a in self.application_args or []] + extra_args)  # the run record is in the warehouse


class TracelakeStageOperator(BaseOperator):
    """A declared stage that needs no Spark (``publish``), run in the task's process.

    Args:
        stage: a key of :data:`jobs.pipeline.stages.STAGES`.
        settings: the run's settings as JSON (templated: :func:`jobs.pipeline.settings.settings_arg`).
        engine: ``local`` to give the stage a local executor (the reports render in its pool), else ``spark``
            (templated: ``discover``'s choice, :func:`jobs.pipeline.stages.choose_engine`).
        final: the run's last stage: after it, a job that failed validation fails the task
            (``AirflowFailException``: a retry would publish the same again).

    The task's log names each MLflow run and job report it produced (:func:`jobs.pipeline.stages.published_links`), and
    its "MLflow runs" button (:class:`jobs.pipeline.links.MlflowRunsLink`) opens them. Returns the run ids (XCom).
    """

    template_fields = ("settings", "engine")
    operator_extra_links = (MlflowRunsLink(),)

    def __init__(self, *, stage: str, settings: str, engine: str = "spark", final: bool = False, **kwargs) -> None:
        super().__init__(**kwargs)
        self.stage, self.settings, self.engine, self.final = stage, settings, engine, final
        self.mlflow_page = ""

    def execute(self, context) -> dict:
        from airflow.sdk.exceptions import AirflowFailException  # heavy: airflow, only inside a task

        conf = json.loads(self.settings)
        with local_engine((STAGES[self.stage],)) if self.engine == "local" else nullcontext() as engine:
            record = run_stage(self.stage, conf, engine=engine)
        for line in published_links(record):  # where this task's MLflow runs and job reports open
            print(line, flush=True)
        self.mlflow_page = published_page(record)
        if self.final:
            try:
                check_validation(record)
            except ValidationFailed as exc:
                raise AirflowFailException(str(exc)) from exc
        return record.get("run_ids", {})
