"""A Neuron capture goes through the main job and shows up in MLflow with its hardware metrics and findings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

NEURON = Path(__file__).resolve().parents[2].parent / "shared" / "corpus" / "neuron" / "AnchovyPark__npu_profiling_code"


def test_neuron_profiles_reach_mlflow_with_hardware_metrics_and_findings(spark, tmp_path):
    from mlflow.tracking import MlflowClient

    from jobs.pipeline.run import run_pipeline

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    res = run_pipeline(str(NEURON), str(tmp_path / "wh"), tracking_uri=uri, spark=spark)
    caps = res.captures
    assert set(caps[caps["uri"].str.endswith(".json")]["status"]) == {"ingested"}
    raw = caps[caps["uri"].str.endswith(".ntff")]
    assert len(raw) == 3 and set(raw["status"]) == {"cataloged"}  # kept, never silently dropped
    assert len(res.neuron_summary) == 3
    client = MlflowClient(tracking_uri=uri)
    runs = [client.get_run(r) for r in res.run_ids.values()]
    metrics = {k: v for run in runs for k, v in run.data.metrics.items()}
    for key in ("neuron/n_profiles", "neuron/mfu_pct", "neuron/mbu_pct", "neuron/total_time_ms"):
        assert key in metrics, key
    assert 0 < metrics["neuron/mfu_pct"] < 100
    run_id = next(iter(res.run_ids.values()))
    assert "neuron_findings.json" in {a.path for a in client.list_artifacts(run_id)}
    findings = json.loads(Path(client.download_artifacts(run_id, "neuron_findings.json", str(tmp_path))).read_text())
    assert isinstance(findings, list)
