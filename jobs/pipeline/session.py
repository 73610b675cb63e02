"""The SparkSession of a spark-submit application.

:func:`jobs.spark.get_spark` sets the master explicitly, which would override the ``--master``
given to spark-submit (builder options win over spark-submit's properties). So the SparkContext
is created first, from spark-submit's properties alone (master, deploy mode, memory, …), and
:func:`~jobs.spark.get_spark` then builds the session on it with that same master: the session
gets exactly the SQL settings every tracelake job relies on, in one place.
"""

from __future__ import annotations

import os

from jobs.spark import get_spark


def submit_session(app_name: str):
    """Return the SparkSession of this application (created on first call).

    Under spark-submit (``PYSPARK_GATEWAY_PORT`` set) the master is spark-submit's; run as a plain
    ``python`` script it is :func:`jobs.spark.get_spark`'s default (``$TRACELAKE_SPARK_MASTER`` or
    ``local[*]``).
    """
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return get_spark(app_name=app_name)
    from pyspark import SparkContext  # heavy: pyspark

    sc = SparkContext.getOrCreate()
    return get_spark(master=sc.master, app_name=app_name)
