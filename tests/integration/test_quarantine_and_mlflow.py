"""Bad files are quarantined with a reason while good ones ingest; results land in MLflow."""

from __future__ import annotations

import gzip
import json
import shutil

import pytest

pytestmark = pytest.mark.integration

DLRM = "param/dlrm_kineto/worker{r}_step_12.*.pt.trace.json"


@pytest.fixture(scope="module")
def mixed_landing(tmp_path_factory, torch_corpus):
    """Two good DLRM ranks (copied) next to four broken files, one of them (cut in the middle) salvageable."""
    root = tmp_path_factory.mktemp("landing")
    job = root / "mixed"
    job.mkdir()
    for r in (0, 1):
        src = next(torch_corpus.glob(DLRM.format(r=r)))
        shutil.copyfile(src, job / src.name)
    good = next(torch_corpus.glob(DLRM.format(r=2))).read_bytes()
    (job / "truncated.json").write_bytes(good[: len(good) // 2])
    (job / "truncated.json.gz").write_bytes(gzip.compress(good)[:5000])
    (job / "notjson.json").write_bytes(b"this is not json at all")
    (job / "notatrace.json").write_text(json.dumps({"hello": [1, 2, 3]}))
    return root


def test_bad_files_are_quarantined_and_good_files_ingest(spark, mixed_landing, tmp_path):
    from jobs.pipeline.run import run_pipeline
    from jobs.warehouse import read_spark

    wh = tmp_path / "wh"
    res = run_pipeline(str(mixed_landing), str(wh), spark=spark, log_to_mlflow=False)
    caps = res.captures.set_index(res.captures["uri"].str.rsplit("/", n=1).str[-1])
    assert len(caps) == 6
    bad = {"truncated.json.gz", "notjson.json", "notatrace.json"}
    for name in bad:
        assert caps.loc[name, "status"] == "quarantined", name
        assert name in caps.loc[name, "reason"]  # names the file
    assert "gzip" in caps.loc["truncated.json.gz", "reason"].lower()
    # a JSON file cut in the middle keeps its complete events (the Trace Event Format's optional closing ']'),
    # flagged as cut short so the analysis drops the steps it lost
    cut = caps.loc["truncated.json"]
    assert cut["status"] == "ingested" and {"truncated_tail", "partial_trace"} <= set(cut["flags"])
    assert cut["rank"] == 2 and cut["n_events"] > 0
    good = caps[~caps.index.isin(bad)]
    assert set(good["status"]) == {"ingested"} and sorted(good["rank"]) == [0, 1, 2]
    events = read_spark(spark, str(wh), "events")  # the storage seam: the table's Delta snapshot
    assert events is not None and events.count() == int(good["n_events"].sum())


def test_results_are_logged_to_mlflow(spark, mixed_landing, tmp_path):
    from mlflow.tracking import MlflowClient

    from jobs.pipeline.run import run_pipeline

    wh = tmp_path / "wh"
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    res = run_pipeline(str(mixed_landing), str(wh), tracking_uri=uri, spark=spark)
    assert len(res.run_ids) == 1
    run_id = next(iter(res.run_ids.values()))
    client = MlflowClient(tracking_uri=uri)
    run = client.get_run(run_id)
    assert run.data.tags["tracelake.job_id"] == "mixed"
    assert run.data.params["world_size"] == "8"
    assert run.data.params["device_name"].startswith("Tesla V100")
    m = run.data.metrics
    assert m["n_ranks"] == 3 and m["n_quarantined"] == 3
    for key in (
        "step_time_p50_ms",
        "idle_pct",
        "compute_pct",
        "overlap_pct",
        "rank/0/idle_pct",
        "rank/1/step_time_max_ms",
    ):
        assert key in m, key
    arts = {a.path for a in client.list_artifacts(run_id)}
    assert {"steps.csv", "ranks.csv", "captures.json", "findings.json"} <= arts
    # as a performance engineer reads the runs table: the lead metrics sort first and repeat the run's own, the
    # description is the verdict with the top findings, and the run spans the profiled window (DLRM: epoch µs)
    assert sorted(m)[:4] == ["1_job_step_p50_ms", "2_job_step_p90_ms", "3_gpu_idle_pct", "4_exposed_comm_pct"]
    assert m["1_job_step_p50_ms"] == m["step_time_p50_ms"] and m["3_gpu_idle_pct"] == m["idle_pct"]
    findings = json.loads(open(client.download_artifacts(run_id, "findings.json", str(tmp_path))).read())["findings"]
    top = findings[0]
    assert m["5_top_finding_ms_per_step"] == pytest.approx(top["est_time_lost_per_step_ns"] / 1e6, abs=1e-3)
    note = run.data.tags["mlflow.note.content"]
    assert note.startswith(f"**findings**: {len(findings)} finding(s)") and f"1. {top['title']}" in note
    assert "job step time p50" in note
    caps = res.captures[res.captures["status"] == "ingested"]
    assert run.info.start_time == int(caps["trace_start_ns"].min()) // 10**6
    assert (
        run.info.end_time == int(caps["trace_end_ns"].max()) // 10**6 and run.info.end_time - run.info.start_time < 1000
    )
    # a second run of the same job replaces its MLflow run: one live run per job, one point per metric
    res2 = run_pipeline(str(mixed_landing), str(wh), tracking_uri=uri, spark=spark)
    (new_id,) = res2.run_ids.values()
    assert new_id != run_id and client.get_run(run_id).info.lifecycle_stage == "deleted"
    live = client.search_runs([run.info.experiment_id], filter_string="tags.`tracelake.job_id` = 'mixed'")
    assert [r.info.run_id for r in live] == [new_id] and live[0].data.tags["tracelake.replaces"] == run_id
    assert len(client.get_metric_history(new_id, "step_time_p50_ms")) == 1
    assert live[0].data.metrics["n_quarantined"] == 3 and live[0].data.params["world_size"] == "8"
