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
#: … and the Spark Connect server ``infra/local/spark.sh connect`` runs.
LOCAL_CONNECT = "local-connect"
#: Seconds to wait for a standalone master's port before giving up (a JVM would retry for about a minute).
CONNECT_TIMEOUT_S = 5.0
HOW_TO_START = "start one with `infra/local/spark.sh start` (it prints its URL; `infra/local/spark.sh url` finds it)"
HOW_TO_CONNECT = "start one with `infra/local/spark.sh connect` (it prints its sc:// URL)"


class SparkUnavailable(RuntimeError):
    """The Spark master asked for cannot be found or reached; the message is one line naming it and what to do."""


def local_cluster_dir() -> Path:
    """State folder of ``infra/local/spark.sh``: ``$TRACELAKE_SPARK_DIR``, default ``${TMPDIR:-/tmp}/tracelake-spark``."""
    return Path(os.environ.get("TRACELAKE_SPARK_DIR") or Path(os.environ.get("TMPDIR") or "/tmp") / "tracelake-spark")


def resolve_master(master: str) -> str:
    """``master`` with :data:`LOCAL_CLUSTER` replaced by the running local cluster's ``spark://127.0.0.1:P``, and
    :data:`LOCAL_CONNECT` by its Spark Connect server's ``sc://127.0.0.1:P``.

    Reads ``master.pid`` and ``ports`` (``connect.pid`` and ``connect.port``) of :func:`local_cluster_dir`, written
    by ``infra/local/spark.sh start`` (``connect``).

    Raises:
        SparkUnavailable: ``local-cluster`` (``local-connect``) asked for and none runs.
    """
    if master not in (LOCAL_CLUSTER, LOCAL_CONNECT):
        return master
    d = local_cluster_dir()
    pid_file, port_file, name, scheme, what, how = (
        ("master.pid", "ports", "master", "spark", "local Spark cluster", HOW_TO_START)
        if master == LOCAL_CLUSTER
        else ("connect.pid", "connect.port", "connect", "sc", "Spark Connect server", HOW_TO_CONNECT)
    )
    try:
        os.kill(int((d / pid_file).read_text().strip()), 0)
        ports = dict(line.split() for line in (d / port_file).read_text().splitlines() if line.strip())
        return f"{scheme}://127.0.0.1:{int(ports[name])}"
    except (OSError, ValueError, KeyError):
        raise SparkUnavailable(f"--master {master}: no {what} runs (state folder {d}); {how}") from None


def check_master(master: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Fail fast when a standalone master (``spark://host:port[,host:port]``) or a Spark Connect server
    (``sc://host[:port]``, port 15002 by default) accepts no connection on any address.

    Other masters (``local[…]``, ``yarn``, ``k8s://…``) are left to Spark.

    Raises:
        SparkUnavailable: no address of ``master`` accepted a TCP connection within ``timeout_s`` seconds.
    """
    if master.startswith("sc://"):  # Spark Connect: sc://host[:port][/;params], port 15002 by default
        hostport = master.removeprefix("sc://").split("/")[0].split(";")[0]
        addresses = [hostport if ":" in hostport else f"{hostport}:15002"]
    elif master.startswith("spark://"):
        addresses = master.removeprefix("spark://").split(",")
    else:
        return
    reasons = []
    for hostport in addresses:
        host, _, port = hostport.rpartition(":")
        try:
            with socket.create_connection((host, int(port)), timeout=timeout_s):
                return
        except (OSError, ValueError) as exc:
            reasons.append(f"{hostport}: {getattr(exc, 'strerror', None) or exc}")
    how = HOW_TO_CONNECT if master.startswith("sc://") else HOW_TO_START
    raise SparkUnavailable(f"cannot reach the Spark master {master} ({'; '.join(reasons)}); {how}")


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


def session_conf() -> dict[str, str]:
    """The SQL settings every tracelake session runs with, a classic one or a Spark Connect one."""
    return {
        "spark.sql.shuffle.partitions": os.environ.get("TRACELAKE_SHUFFLE_PARTITIONS", "8"),
        "spark.sql.sources.partitionOverwriteMode": "dynamic",
        # Partition values are read back as declared in schemas/ (`date` is a string, not a DATE).
        "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
    }


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
        master: Spark master URL, ``sc://host:port`` (a Spark Connect server's session: no JVM in this process),
            or ``local-cluster`` / ``local-connect`` (:func:`resolve_master`); default ``$TRACELAKE_SPARK_MASTER``
            or ``local[*]``. Ignored when a session already exists (e.g. under ``spark-submit``).
        app_name: application name shown in the Spark UI.
        driver_memory: JVM heap of the driver (local mode runs executors inside it).

    Returns:
        ``pyspark.sql.SparkSession``.

    Raises:
        SparkUnavailable: ``local-cluster`` / ``local-connect`` with none running, or a ``spark://`` master or
            ``sc://`` server that accepts no connection (:func:`check_master`, in seconds).
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
    if master.startswith("sc://"):  # Spark Connect: a long-running server's session, no JVM here
        return SparkSession.builder.remote(master).config(map=session_conf()).getOrCreate()
    java_opts = f"-Dlog4j2.configurationFile={_log4j_to_file(spark_log_file())}"
    builder = (
        SparkSession.builder.appName(app_name)
        .master(master)
        .config("spark.driver.memory", driver_memory)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config(map=session_conf())
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


def is_connect(spark) -> bool:
    """Whether ``spark`` is a Spark Connect session (a client of a server: no SparkContext, no JVM here)."""
    return getattr(spark, "_jsparkSession", None) is None


def parallelism(spark) -> int:
    """Task slots of ``spark``'s cluster: ``SparkContext.defaultParallelism``; on Spark Connect (no SparkContext on
    the client) the server's ``spark.default.parallelism`` when set, else ``spark.sql.shuffle.partitions``."""
    if not is_connect(spark):
        return int(spark.sparkContext.defaultParallelism)
    return int(spark.conf.get("spark.default.parallelism", None) or spark.conf.get("spark.sql.shuffle.partitions"))


def is_connect_master(master: str) -> bool:
    """Whether ``master`` names a Spark Connect server (``sc://…`` or :data:`LOCAL_CONNECT`)."""
    return master.startswith("sc://") or master == LOCAL_CONNECT


def where_it_runs(spark) -> str:
    """``spark``'s master for a log line: ``local[*]``, ``spark://…``, or ``Spark Connect (server on local[*])``."""
    master = spark.conf.get("spark.master")
    return f"Spark Connect (server on {master})" if is_connect(spark) else master
