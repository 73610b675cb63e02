"""Airflow extra links of the tracelake tasks, and the plugin that registers them (entry point ``airflow.plugins``).

A task sets the link's URL on its operator while it runs (``operator.mlflow_page``); Airflow's task runner stores it
as the XCom ``_link_MlflowRunsLink`` when the task ends, and the UI shows it as a button on the task. The module
imports nothing of tracelake: the scheduler and the api-server load it with the plugins.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin
from airflow.sdk import BaseOperatorLink


class MlflowRunsLink(BaseOperatorLink):
    """Button "MLflow runs": where the MLflow runs the task produced open (the ``publish`` task: its run's page for
    one job, else the experiment's page; :func:`jobs.publish.job_runs.runs_page`), or empty when the tracking URI has
    no web UI (SQLite)."""

    name = "MLflow runs"

    def get_link(self, operator, *, ti_key) -> str:
        """The page the operator recorded while it ran (``""`` when none)."""
        return str(getattr(operator, "mlflow_page", "") or "")


class TracelakePlugin(AirflowPlugin):
    """Registers :class:`MlflowRunsLink` with Airflow (``pyproject.toml``: ``[project.entry-points."airflow.plugins"]``)."""

    name = "tracelake"
    operator_extra_links = [MlflowRunsLink()]
