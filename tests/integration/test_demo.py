"""The demo a newcomer runs first (``tracelake demo``): two real 2-rank gloo DDP trainings of one job name, the
second with real extra host work on rank 1. The pipeline must find the straggler (rank 1), what it costs the other
rank, the regression against the first run, and the job report must name the finding."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlparse

import pytest

from jobs.warehouse import read_pandas

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def demo(demo_run):
    return demo_run


def test_the_demo_finds_the_straggler_and_the_regression(demo):
    work, stdout = demo
    found = stdout[stdout.index("what the demo found") :]
    assert re.search(r"Rank 1 arrives last at \d+ of \d+ collectives; the other ranks wait [\d.]+ ms per step", found)
    assert "what to do: Find why rank 1 is late" in found
    said = re.search(
        r"vs demo-\S+-baseline#0: (job step p50 [\d.]+ ms → [\d.]+ ms, \+[\d,]+ % \[[+-][\d,.]+ %, \+[\d,.]+ %\]: "
        r"regression, adjusted p [\d.e-]+; \d+ vs \d+ steps.*)",
        found,
    )
    assert said, found
    t = read_pandas(str(work / "warehouse"), ("findings", "regressions"))
    # the demo's own runs (test_one_answer adds its own traces to the same warehouse)
    f, r = (df[df["job_id"].str.startswith("demo-")] for df in (t["findings"], t["regressions"]))
    slow = f[f["job_id"].str.endswith("-slow")].sort_values("rank_order")
    top = slow.iloc[0]
    assert top["rule"] == "straggler_rank" and list(top["ranks"]) == [1] and top["est_time_lost_per_step_ns"] > 5e6
    # the baseline may have a small natural straggler (2 ranks on 2 cores), never rank 1 paying what was planted
    base = f[f["job_id"].str.endswith("-baseline") & (f["rule"] == "straggler_rank")]
    assert all(
        list(x) != [1] or lost < top["est_time_lost_per_step_ns"] / 3
        for x, lost in zip(base["ranks"], base["est_time_lost_per_step_ns"])
    )
    p50 = r[(r["metric"] == "step_time_p50_ns") & r["job_id"].str.endswith("-slow")].iloc[0]
    assert p50["verdict"] == "regression" and p50["p_adjusted"] < 0.01
    assert said.group(1).strip() == p50["summary"]  # the closing line is the table's row in words
    assert not (f["rule"] == "blocking_sync").any()  # a CPU-only job has no host-device synchronization


def test_the_job_report_it_points_to_names_the_finding(demo):
    _, stdout = demo
    uri = re.search(r"its job report: (file://\S+)", stdout).group(1)
    html = Path(urlparse(uri).path).read_text()
    assert "straggler_rank" in html and "Rank 1 arrives last" in html
    # the run against the baseline run, in the same words as the demo's closing line
    said = re.search(r"vs demo-\S+-baseline#0: (job step p50 .*)", stdout).group(1).strip()
    assert '<section id="regression" class="status-regression"' in html and said in html.replace("&gt;", ">")
    assert "mlflow ui --backend-store-uri sqlite:///" in stdout


def test_mlflow_runs_say_their_top_bottleneck(demo):
    from mlflow.tracking import MlflowClient

    work, _ = demo
    client = MlflowClient(tracking_uri=f"sqlite:///{work}/warehouse/mlflow.db")
    exp = client.get_experiment_by_name("tracelake")
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"  # a classic ML experiment, not GenAI
    runs = client.search_runs([exp.experiment_id], filter_string="tags.`tracelake.top_finding` = 'straggler_rank'")
    slow = [r for r in runs if r.data.tags["tracelake.job_id"].endswith("-slow")]
    assert len(slow) == 1
    assert slow[0].data.metrics["finding/straggler_rank/lost_ms_per_step"] > 5.0
    assert slow[0].data.tags["tracelake.regression"] == "regression"
    r = read_pandas(str(work / "warehouse"), ("regressions",))["regressions"]
    p50 = r[(r["job_id"] == slow[0].data.tags["tracelake.job_id"]) & (r["metric"] == "step_time_p50_ns")].iloc[0]
    assert slow[0].data.tags["tracelake.regression_summary"] == p50["summary"]
