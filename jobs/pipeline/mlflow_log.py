"""Log the jobs of an ingest interval to MLflow, reading the warehouse with pyarrow (no Spark).

What the ``log_to_mlflow`` task of ``tracelake_ingest`` runs: the tables of a few jobs are small,
so a JVM is not worth starting for them. The runs themselves are made by
:func:`jobs.publish.tracking.log_jobs` (one run per (job, attempt), reused when re-run).
"""

from __future__ import annotations

import posixpath

import pandas as pd


def read_job_tables(warehouse: str, job_ids: list[str], names=("captures", "ranks", "steps")) -> dict[str, pd.DataFrame]:
    """Rows of ``job_ids`` from the Hive-partitioned warehouse tables ``names``, as pandas.

    Partition columns (``date``, ``job_id``) are read as strings. A table that does not exist yet
    gives an empty frame with the table's columns.

    Returns:
        ``{table name: DataFrame with the columns of schemas.TABLES[name], in order}``.
    """
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.fs as pafs

    from schemas import FLEET_TABLES, TABLES

    out = {}
    for name in names:
        table = TABLES.get(name) or FLEET_TABLES[name]
        path = posixpath.join(warehouse.rstrip("/"), name)
        fs, root = pafs.FileSystem.from_uri(path) if "://" in path else (pafs.LocalFileSystem(), path)
        if fs.get_file_info(root).type == pafs.FileType.NotFound:
            out[name] = pd.DataFrame(columns=table.names)
            continue
        part = ds.partitioning(pa.schema([(p, pa.string()) for p in table.partition_by]), flavor="hive")
        dataset = ds.dataset(root, filesystem=fs, format="parquet", partitioning=part,
                             exclude_invalid_files=True, ignore_prefixes=[".", "_"])
        rows = dataset.to_table(filter=ds.field("job_id").isin(list(job_ids)),
                                columns=[c for c in table.names if c in dataset.schema.names])
        out[name] = rows.to_pandas()
    return out


def log_interval(warehouse: str, tracking_uri: str, job_ids: list[str]) -> dict[str, str]:
    """Create or update the MLflow run of every (job, attempt) of ``job_ids``.

    Returns:
        ``{"<job_id>#<attempt>": run_id}`` (empty when ``job_ids`` is).
    """
    from jobs.publish.tracking import log_jobs

    if not job_ids:
        return {}
    t = read_job_tables(warehouse, job_ids, names=("captures", "ranks", "steps", "collectives", "regressions"))
    runs = log_jobs(tracking_uri, warehouse, t["captures"], t["ranks"], t["steps"], collectives=t["collectives"],
                    regressions=t["regressions"])
    return {f"{job}#{attempt}": run_id for (job, attempt), run_id in sorted(runs.items())}


def log_run(conf: dict) -> dict[str, str]:
    """:func:`log_interval` for the jobs of the interval's run record (``conf``: the run settings)."""
    from jobs.pipeline.record import read_record

    return log_interval(conf["warehouse"], conf["tracking_uri"], read_record(conf["record"])["job_ids"])
