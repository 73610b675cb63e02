"""The pipeline declaration and its drivers: ``tracelake run``, spark-submit applications, Airflow settings and operators.

Every driver runs the same declared stages, so scheduled and CLI runs leave the same tables and MLflow runs.
"""
