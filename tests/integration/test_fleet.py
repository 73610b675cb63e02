"""Fleet statistics and regressions on real traces, through the real pipeline (Spark, MLflow sqlite)."""

from __future__ import annotations

import json
import time

import numpy as np
import pandas as pd
import pytest

pytestmark = pytest.mark.integration

MS = 1_000_000


def _table(spark, wh, name: str):
    """A warehouse table as Spark reads it through the storage seam (its Delta snapshot, not the folder)."""
    from jobs.warehouse import read_spark

    df = read_spark(spark, str(wh), name)
    assert df is not None, f"{name} was never written or holds no rows"
    return df


def _train(landing, job_id: str, sleep_s: float, steps: int = 10, git_sha: str = "aaa111") -> None:
    """A real torch.profiler capture of a tiny CPU model whose steps take ~``sleep_s`` longer."""
    import torch
    from torch import nn

    from capture_hooks import TraceCapture

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with TraceCapture(
        str(landing),
        job_id=job_id,
        tags={"job_name": "nightly-mlp", "model": "mlp-3", "git_sha": git_sha},
        wait=0,
        warmup=1,
        active=steps,
        repeat=1,
        background=False,
        env={},
    ) as cap:
        for _ in range(steps + 2):
            x = torch.randn(16, 32)
            model(x).sum().backward()
            opt.step()
            opt.zero_grad()
            time.sleep(sleep_s)  # the "slower data loader" of the regressed run
            cap.step()
    assert cap.committed, "capture was not committed"


@pytest.fixture(scope="module")
def nightly(spark, tmp_path_factory):
    """Four runs of the job name ``nightly-mlp``: three alike, the fourth 100 ms/step slower, from another commit
    (tag ``git_sha``) on another torch version (its manifest's ``torch_version`` rewritten, as a version bump).

    Steps of ~300 ms, 20 a run: a loaded machine shifts a run's steps by a few ms (sleep overshoot, a slower
    tiny model), which must stay well under the regression threshold (5 %) for the alike runs; with 5 ms
    steps, a run captured while other work loaded the 2 cores was flagged as a regression, and with 10 steps of
    200 ms an alike run came out ``inconclusive`` in CI (its steps spread by load: 201-279 ms seen)."""
    from jobs.pipeline.run import run_pipeline

    base = tmp_path_factory.mktemp("fleet")
    landing, wh = base / "landing", base / "wh"
    for i, sleep_s in enumerate((0.3, 0.3, 0.3, 0.4)):
        _train(landing, f"nightly-{i}", sleep_s, steps=20, git_sha="bbb222" if i == 3 else "aaa111")
    (manifest,) = landing.glob("**/job=nightly-3/**/manifest.json")
    doc = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**doc, "torch_version": "2.99.0"}))
    result = run_pipeline(str(landing), str(wh), tracking_uri=f"sqlite:///{base}/mlflow.db", spark=spark)
    return wh, result, f"sqlite:///{base}/mlflow.db"


def test_regression_of_the_slow_run_is_found_and_logged(spark, nightly):
    from mlflow.tracking import MlflowClient

    wh, result, uri = nightly
    reg = result.regressions
    p50 = reg[reg["metric"] == "step_time_p50_ns"].set_index("job_id")
    assert list(p50.sort_values("run_index").index) == ["nightly-0", "nightly-1", "nightly-2", "nightly-3"]
    assert p50.loc["nightly-0", "verdict"] == "no_baseline"
    # the alike runs: 'unchanged' or, when load spreads a run's steps, 'inconclusive'; flagged only when a loaded
    # machine really moved their steps (CI saw both ways on 2 busy cores): then the steps table shows the move
    steps = _table(spark, wh, "steps").toPandas()
    job_step = steps[steps["step"] >= 0].groupby(["job_id", "step"])["step_time_ns"].max()
    quiet = []
    for job, base in (("nightly-1", ["nightly-0"]), ("nightly-2", ["nightly-0", "nightly-1"])):
        verdict = p50.loc[job, "verdict"]
        moved = job_step.loc[job].median() / job_step.loc[base].median() - 1
        if verdict == "regression":
            assert moved > 0.025, (job, moved)
        elif verdict == "improvement":
            assert moved < -0.025, (job, moved)
        else:
            assert verdict in {"unchanged", "inconclusive"}
            quiet.append(job)
    slow = p50.loc["nightly-3"]
    assert slow["verdict"] == "regression" and slow["p_value"] < 0.01
    assert list(slow["baseline_runs"]) == ["nightly-0#0", "nightly-1#0", "nightly-2#0"]
    # the step-time change is the injected 100 ms per step (more when load slowed the run: CI saw 127 ms), and what
    # the steps table shows: the run's median step against the baseline runs' (outliers dropped aside)
    shown = job_step.loc["nightly-3"].median() - job_step.loc[["nightly-0", "nightly-1", "nightly-2"]].median()
    assert slow["delta"] >= 80 * MS and slow["delta"] == pytest.approx(shown, rel=0.15)
    # what changed: the version bump and the commit, next to the kernels that moved (jobs/fleet/changes.py)
    changes = json.loads(slow["changes_json"])
    ctx = {c["field"]: (c["run"], c["baseline"]) for c in changes["context"]}
    assert ctx["torch_version"][0] == "2.99.0" and ctx["torch_version"][1] != ["2.99.0"]
    assert ctx["tags.git_sha"] == ("bbb222", ["aaa111"]) and "tags.model" not in ctx
    assert changes["baseline_runs"] == ["nightly-0#0", "nightly-1#0", "nightly-2#0"] and len(changes["kernels"]) <= 5
    assert p50.loc[quiet, "changes_json"].isna().all()  # runs not flagged: nothing to explain

    client = MlflowClient(tracking_uri=uri)
    run = client.get_run(result.run_ids[("nightly-3", 0)])
    assert run.data.tags["tracelake.regression"] == "regression"
    assert run.data.tags["tracelake.job_name"] == "nightly-mlp" and run.data.tags["tracelake.model"] == "mlp-3"
    assert run.data.metrics["regression/step_time_p50_ns/change_pct"] == pytest.approx(
        slow["change_pct"], abs=0.005
    )  # 2 decimals
    first = client.get_run(result.run_ids[("nightly-0", 0)])
    assert first.data.tags["tracelake.regression"] == "no_baseline"


def test_fleet_stats_match_the_steps_table(spark, nightly):
    wh, result, _ = nightly
    stats = _table(spark, wh, "fleet_stats").toPandas()
    steps = _table(spark, wh, "steps").toPandas()
    steps = steps[steps["step"] >= 0]
    job_step = steps.groupby(["job_id", "attempt", "step"])["step_time_ns"].max()
    name = stats[
        (stats["dimension"] == "job_name") & (stats["value"] == "nightly-mlp") & (stats["date"] == "all")
    ].iloc[0]
    assert name["n_runs"] == 4 and name["n_steps"] == len(job_step) and name["n_rank_steps"] == len(steps)
    for q in (50, 90, 99):
        assert name[f"step_time_p{q}_ns"] == pytest.approx(np.percentile(job_step.to_numpy(dtype=float), q), abs=1)
    one = stats[(stats["dimension"] == "job") & (stats["value"] == "nightly-3#0") & (stats["date"] == "all")].iloc[0]
    assert one["step_time_p50_ns"] == pytest.approx(
        np.percentile(job_step.loc["nightly-3"].to_numpy(dtype=float), 50), abs=1
    )
    # every dimension is present; CPU-only traces: hardware `cpu`, no GPU idle %
    assert set(stats["dimension"]) == {"fleet", "job_name", "job", "model", "hardware", "torch_version"}
    hw = stats[(stats["dimension"] == "hardware") & (stats["date"] == "all")]
    assert list(hw["value"]) == ["cpu"] and hw["idle_pct"].isna().all()
    model = stats[(stats["dimension"] == "model") & (stats["date"] == "all")]
    assert list(model["value"]) == ["mlp-3"]
    # per-date rows add up to the all-dates row
    fleet = stats[stats["dimension"] == "fleet"]
    assert fleet[fleet["date"] != "all"]["n_steps"].sum() == fleet[fleet["date"] == "all"]["n_steps"].iloc[0]


def test_fleet_on_the_corpus_dlrm_job(spark, corpus_warehouse):
    """Run the fleet job over the corpus warehouse: the 8-rank DLRM job's group and its top kernels."""
    from jobs.fleet.job import run_fleet

    wh, _ = corpus_warehouse
    res = run_fleet(spark, str(wh))
    assert res.counts["fleet_stats"] > 0 and res.counts["fleet_kernels"] > 0
    stats = _table(spark, wh, "fleet_stats").toPandas()
    steps = _table(spark, wh, "steps").toPandas()
    caps = _table(spark, wh, "captures").toPandas()
    dlrm_job = caps[caps["uri"].str.contains("dlrm")]["job_id"].iloc[0]
    row = stats[(stats["dimension"] == "job") & (stats["value"] == f"{dlrm_job}#0") & (stats["date"] == "all")].iloc[0]
    assert row["n_ranks"] == 8
    s = steps[(steps["job_id"] == dlrm_job) & (steps["step"] >= 0)]
    assert row["idle_pct"] == pytest.approx(s["idle_time_ns"].sum() / s["kernel_time_ns"].sum() * 100, rel=1e-9)
    assert row["exposed_comm_pct"] == pytest.approx(
        s["exposed_comm_ns"].sum() / s["step_time_ns"].sum() * 100, rel=1e-9
    )
    kern = _table(spark, wh, "fleet_kernels").toPandas()
    top = kern[(kern["dimension"] == "job") & (kern["value"] == f"{dlrm_job}#0") & (kern["date"] == "all")]
    k = _table(spark, wh, "kernels").toPandas()
    expect = k[k["job_id"] == dlrm_job].groupby("name")["total_ns"].sum().sort_values(ascending=False)
    assert list(top.sort_values("kernel_rank")["name"]) == list(expect.index[:10])
    assert top["share_pct"].sum() == pytest.approx(expect.iloc[:10].sum() / expect.sum() * 100)
    # one hardware group per accelerator model in the corpus, each with its runs counted once
    hw = stats[(stats["dimension"] == "hardware") & (stats["date"] == "all")]
    assert hw["n_runs"].sum() == stats[(stats["dimension"] == "fleet") & (stats["date"] == "all")]["n_runs"].iloc[0]
    # fleet_findings from Spark's reduction equals the pandas one over the same tables (jobs/fleet/impact.py), over
    # the analysis windows (a run without ProfilerStep counts: its newest capture date can end the window)
    from jobs.analyze.windows import analysis_windows
    from jobs.fleet.impact import fleet_findings
    from jobs.fleet.stats import job_steps_frame
    from jobs.warehouse import read_pandas

    found = _table(spark, wh, "findings").toPandas()
    ranks = _table(spark, wh, "ranks").toPandas()
    windows = job_steps_frame(analysis_windows(steps, ranks, caps), caps)
    assert len(fleet_findings(found, windows, window_days=3650)) > 0  # every finding of the corpus, ranked
    expect_ff = fleet_findings(found, windows)
    got_ff = read_pandas(str(wh), ["fleet_findings"])["fleet_findings"][expect_ff.columns]  # may have 0 rows
    assert res.counts["fleet_findings"] == len(expect_ff) == len(got_ff)
    key = ["dimension", "value", "rule"]
    got_ff = got_ff.sort_values(key).reset_index(drop=True)
    expect_ff = expect_ff.sort_values(key).reset_index(drop=True)
    assert (
        got_ff[key + ["impact_rank", "n_runs", "n_steps", "time_lost_ns"]]
        .astype(str)
        .equals(expect_ff[key + ["impact_rank", "n_runs", "n_steps", "time_lost_ns"]].astype(str))
    )
    assert np.allclose(
        got_ff["accelerator_hours"].astype(float), expect_ff["accelerator_hours"].astype(float), rtol=1e-12
    )
    # fleet_ops: the same from op_efficiency; over every date, corpus op groups on known devices rank by their
    # recoverable accelerator-hours, none saving more than its own kernel time
    from jobs.fleet.impact import fleet_ops

    oe = _table(spark, wh, "op_efficiency").toPandas()
    every = fleet_ops(oe, windows, window_days=3650)
    assert len(every) > 0 and (every["recoverable_ns"] <= every["kernel_time_ns"]).all()
    assert every["accelerator_hours"].max() > 0
    expect_ops = fleet_ops(oe, windows)
    got_ops = read_pandas(str(wh), ["fleet_ops"])["fleet_ops"]
    assert res.counts["fleet_ops"] == len(expect_ops) == len(got_ops)
    ok = ["dimension", "value", "op_name", "shape_sig", "dtype", "impact_rank", "recoverable_ns"]
    assert (
        got_ops.sort_values(ok)[ok]
        .astype(str)
        .reset_index(drop=True)
        .equals(expect_ops.sort_values(ok)[ok].astype(str).reset_index(drop=True))
    )
    # res.regressions: the runs this run compared again (none when nothing changed); counts: the whole table
    assert isinstance(res.regressions, pd.DataFrame) and len(res.regressions) <= res.counts["regressions"]
    assert res.counts["regressions"] == len(read_pandas(str(wh), ["regressions"])["regressions"]) > 0
