"""Shared by the tests that compare a scheduled run with ``tracelake run`` (``test_dags.py``, ``test_scheduler.py``):
row digests of the fleet tables and the content of the MLflow runs, both independent of paths, run ids and order.

The per-partition digests of the warehouse tables are in :mod:`warehouse_digest`.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

from jobs.warehouse import read_pandas
from schemas import stage_tables

#: The fleet tables (rebuilt over every job of the warehouse by the ``fleet`` stage).
FLEET_TABLES = tuple(stage_tables("fleet"))


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rows_digest(wh: Path, table: str) -> list[str]:
    """The rows of a (fleet) table as sorted canonical JSON (order- and file-independent)."""
    df = read_pandas(str(wh), [table])[table]
    return sorted(json.dumps(r, sort_keys=True, default=repr) for r in df.to_dict(orient="records"))


def artifact_paths(client, run_id: str, path: str | None = None) -> list[str]:
    """Every artifact path of an MLflow run (recursive)."""
    out = []
    for a in client.list_artifacts(run_id, path):
        out += artifact_paths(client, run_id, a.path) if a.is_dir else [a.path]
    return out


def mlflow_content(tracking_uri: str) -> dict:
    """Per (job, attempt) of experiment ``tracelake``: params, metrics, tags (less MLflow's own, the
    warehouse path and the ids of the runs a run replaced, which differ between two warehouses), status and
    every artifact's path; active runs only (a replaced run is deleted)."""
    from mlflow.tracking import MlflowClient  # heavy: mlflow

    client = MlflowClient(tracking_uri=tracking_uri)
    exp = client.get_experiment_by_name("tracelake")
    out = {}
    for r in client.search_runs([exp.experiment_id]):
        tags = {
            k: v
            for k, v in r.data.tags.items()
            if not k.startswith("mlflow.") and k not in ("tracelake.warehouse", "tracelake.replaces")
        }
        out[(tags["tracelake.job_id"], tags["tracelake.attempt"])] = {
            "params": r.data.params,
            "metrics": r.data.metrics,
            "tags": tags,
            "status": r.info.status,
            "artifacts": sorted(artifact_paths(client, r.info.run_id)),
        }
    return out
