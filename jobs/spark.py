"""Spark session for tracelake jobs.

One place that knows how to start Spark the way these jobs need it: the Python workers run
the same interpreter as the driver (``PYSPARK_PYTHON``), the driver binds to loopback by
default. Tables are written through the storage seam (:mod:`jobs.warehouse`: Spark's tasks write Parquet
files, the driver commits them to the Delta table), never by Spark's own writers.
"""

from __future__ import annotations

import os
import sys


def get_spark(master: str | None = None, app_name: str = "tracelake", driver_memory: str = "4g"):
    """Return the active SparkSession, creating one if needed.

    On a standalone master (``spark://…``, e.g. ``infra/local/spark.sh``) each executor asks for
    ``$TRACELAKE_EXECUTOR_MEMORY`` (default ``1g``) of heap and ``$TRACELAKE_EXECUTOR_CORES``
    (default ``1``) cores: the master only places an executor on a worker that offers that much
    (``--memory``/``--cores``), and an application no worker can hold waits forever ("Initial job
    has not accepted any resources"); one core per executor gives one executor (and its Python
    worker) per worker core. YARN and Kubernetes masters keep their own sizing (spark-defaults,
    spark-submit), which builder settings here would override; under spark-submit the context
    exists before this call, so spark-submit's sizing wins on any master. The executors import
    ``jobs`` as installed on the workers (infra/local/README.md, "Spark standalone cluster").

    Args:
        master: Spark master URL; default ``$TRACELAKE_SPARK_MASTER`` or ``local[*]``.
            Ignored when a session already exists (e.g. under ``spark-submit``).
        app_name: application name shown in the Spark UI.
        driver_memory: JVM heap of the driver (local mode runs executors inside it).

    Returns:
        ``pyspark.sql.SparkSession``.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession  # heavy: pyspark

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    master = master or os.environ.get("TRACELAKE_SPARK_MASTER", "local[*]")
    builder = (
        SparkSession.builder.appName(app_name)
        .master(master)
        .config("spark.driver.memory", driver_memory)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", os.environ.get("TRACELAKE_SHUFFLE_PARTITIONS", "8"))
        .config("spark.sql.sources.partitionOverwriteMode", "dynamic")
        # Partition values are read back as declared in schemas/ (`date` is a string, not a DATE).
        .config("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
    )
    if master.startswith("local"):
        builder = builder.config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1")
    elif master.startswith("spark://"):
        builder = builder.config("spark.executor.memory", os.environ.get("TRACELAKE_EXECUTOR_MEMORY", "1g")).config(
            "spark.executor.cores", os.environ.get("TRACELAKE_EXECUTOR_CORES", "1")
        )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
