"""Spark session for tracelake jobs.

One place that knows how to start Spark the way these jobs need it: the Python workers run
the same interpreter as the driver (``PYSPARK_PYTHON``), the driver binds to loopback by
default. Tables are written through the storage seam (:mod:`jobs.warehouse`: Spark's tasks write Parquet
files, the driver commits them to the Delta table), never by Spark's own writers.
"""

from __future__ import annotations

import os
import socket
import sys
import tempfile
from pathlib import Path

#: ``--master`` / ``$TRACELAKE_SPARK_MASTER`` value that names the cluster ``infra/local/spark.sh`` runs.
LOCAL_CLUSTER = "local-cluster"
#: Seconds to wait for a standalone master's port before giving up (a JVM would retry for about a minute).
CONNECT_TIMEOUT_S = 5.0
HOW_TO_START = "start one with `infra/local/spark.sh start` (it prints its URL; `infra/local/spark.sh url` finds it)"


class SparkUnavailable(RuntimeError):
    """The Spark master asked for cannot be found or reached; the message is one line naming it and what to do."""


def local_cluster_dir() -> Path:
    """State folder of ``infra/local/spark.sh``: ``$TRACELAKE_SPARK_DIR``, default ``${TMPDIR:-/tmp}/tracelake-spark``."""
    return Path(os.environ.get("TRACELAKE_SPARK_DIR") or Path(os.environ.get("TMPDIR") or "/tmp") / "tracelake-spark")


def resolve_master(master: str) -> str:
    """``master`` with :data:`LOCAL_CLUSTER` replaced by the running local cluster's ``spark://127.0.0.1:P``.

    Reads ``master.pid`` and ``ports`` of :func:`local_cluster_dir` (written by ``infra/local/spark.sh start``).

    Raises:
        SparkUnavailable: ``local-cluster`` asked for and no local cluster runs.
    """
    if master != LOCAL_CLUSTER:
        return master
    d = local_cluster_dir()
    try:
        pid = int((d / "master.pid").read_text().strip())
        os.kill(pid, 0)
        ports = dict(line.split() for line in (d / "ports").read_text().splitlines() if line.strip())
        return f"spark://127.0.0.1:{int(ports['master'])}"
    except (OSError, ValueError, KeyError):
        raise SparkUnavailable(
            f"--master {LOCAL_CLUSTER}: no local Spark cluster runs (state folder {d}); {HOW_TO_START}"
        ) from None


def check_master(master: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Fail fast when a standalone master (``spark://host:port[,host:port]``) accepts no connection on any address.

    Other masters (``local[…]``, ``yarn``, ``k8s://…``) are left to Spark.

    Raises:
        SparkUnavailable: no address of ``master`` accepted a TCP connection within ``timeout_s`` seconds.
    """
    if not master.startswith("spark://"):
        return
    reasons = []
    for hostport in master.removeprefix("spark://").split(","):
        host, _, port = hostport.rpartition(":")
        try:
            with socket.create_connection((host, int(port)), timeout=timeout_s):
                return
        except (OSError, ValueError) as exc:
            reasons.append(f"{hostport}: {exc.strerror or exc}" if isinstance(exc, OSError) else f"{hostport}: {exc}")
    raise SparkUnavailable(f"cannot reach the Spark master {master} ({'; '.join(reasons)}); {HOW_TO_START}")


def spark_log_file() -> Path:
    """Where the driver JVM of a session :func:`get_spark` starts writes its log (Java stack traces included):
    ``$TRACELAKE_SPARK_LOG``, default ``<tmp>/tracelake-<uid>/spark-driver-<pid>.log``."""
    path = os.environ.get("TRACELAKE_SPARK_LOG")
    if path:
        return Path(path)
    return Path(tempfile.gettempdir()) / f"tracelake-{os.getuid()}" / f"spark-driver-{os.getpid()}.log"


def _log4j_to_file(log: Path) -> str:
    """A log4j2 configuration (its path) that sends every driver JVM log line to ``log``, none to the terminal."""
    log.parent.mkdir(parents=True, exist_ok=True)
    conf = log.with_suffix(".log4j2.properties")
    conf.write_text(
        "rootLogger.level = warn\n"
        "rootLogger.appenderRef.file.ref = file\n"
        "appender.file.type = File\n"
        "appender.file.name = file\n"
        f"appender.file.fileName = {log}\n"
        "appender.file.layout.type = PatternLayout\n"
        "appender.file.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex\n",
        encoding="utf-8",
    )
    return str(conf)


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

    The driver JVM's log (Java stack traces included) goes to :func:`spark_log_file`, not to the terminal.

    Args:
        master: Spark master URL, or ``local-cluster`` (:func:`resolve_master`); default
            ``$TRACELAKE_SPARK_MASTER`` or ``local[*]``. Ignored when a session already exists (e.g. under
            ``spark-submit``).
        app_name: application name shown in the Spark UI.
        driver_memory: JVM heap of the driver (local mode runs executors inside it).

    Returns:
        ``pyspark.sql.SparkSession``.

    Raises:
        SparkUnavailable: ``local-cluster`` with no local cluster running, or a ``spark://`` master that accepts no
            connection (:func:`check_master`, in seconds).
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession  # heavy: pyspark

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    master = resolve_master(master or os.environ.get("TRACELAKE_SPARK_MASTER", "local[*]"))
    check_master(master)
    java_opts = f"-Dlog4j2.configurationFile={_log4j_to_file(spark_log_file())}"
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
        .config("spark.driver.extraJavaOptions", java_opts)
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
