"""Entry points and settings for running the ``jobs`` stages under a scheduler (Airflow).

- ``normalize_main.py``, ``analyze_main.py``, ``validate_main.py``, ``module_main.py``: spark-submit
  applications (thin: parse arguments, take the SparkSession spark-submit started
  (:mod:`jobs.submit.session`), call the stage);
- :mod:`jobs.submit.record`: the per-interval run record normalize writes for the later stages;
- :mod:`jobs.submit.mlflow_log`: log an interval's jobs to MLflow, reading the warehouse without Spark;
- :mod:`jobs.submit.settings`: Airflow Variable/Connection names and their defaults;
- :mod:`jobs.submit.operators`: ``SparkSubmitOperator`` that defaults to local mode.

Only ``operators`` and the ``settings`` functions called inside tasks import Airflow; nothing else
in ``jobs`` imports this package.
"""
