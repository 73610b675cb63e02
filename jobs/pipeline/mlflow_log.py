"""Log the jobs of an ingest interval to MLflow, reading the warehouse with pyarrow (no Spark).

What the ``log_to_mlflow`` task of ``tracelake_ingest`` runs: the tables of a few jobs are small,
so a JVM is not worth starting for them. The runs themselves are made by
:func:`jobs.publish.tracking.log_jobs` (one run per (job, attempt), reused when re-run).
"""

from __future__ import annotations

from jobs.warehouse import read_pandas


def log_interval(warehouse: str, tracking_uri: str, job_ids: list[str]) -> dict[str, str]:
    """Create or update the MLflow run of every (job, attempt) of ``job_ids``.

    Returns:
        ``{"<job_id>#<attempt>": run_id}`` (empty when ``job_ids`` is).
    """
    from jobs.publish.tracking import log_jobs

    if not job_ids:
        return {}
    t = read_pandas(warehouse, ("captures", "ranks", "steps", "collectives", "regressions"), job_ids)
    runs = log_jobs(tracking_uri, warehouse, t["captures"], t["ranks"], t["steps"], collectives=t["collectives"],
                    regressions=t["regressions"])
    return {f"{job}#{attempt}": run_id for (job, attempt), run_id in sorted(runs.items())}


def log_run(conf: dict) -> dict[str, str]:
    """:func:`log_interval` for the jobs of the interval's run record (``conf``: the run settings)."""
    from jobs.pipeline.record import read_record

    return log_interval(conf["warehouse"], conf["tracking_uri"], read_record(conf["record"])["job_ids"])
