"""``what_changed`` (jobs/fleet/changes.py): what differs between a run and its baseline runs, by hand."""

from __future__ import annotations

import json

import pandas as pd

from jobs.fleet.changes import what_changed


def _steps(job, n, torch="2.13.0", hw="H100", world=8):
    return [
        {"job_id": job, "attempt": 0, "step": s, "torch_version": torch, "hardware": hw, "world_size": world}
        for s in range(n)
    ]


def test_context_kernels_and_findings():
    js = pd.DataFrame(_steps("r0", 4) + _steps("r1", 4) + _steps("r2", 5, torch="2.14.0"))
    caps = pd.DataFrame(
        [
            {"job_id": j, "attempt": 0, "rank": 0, "tags_json": json.dumps(t)}
            for j, t in (
                ("r0", {"job_name": "n", "git_sha": "aaa"}),
                ("r1", {"job_name": "n", "git_sha": "aaa"}),
                ("r2", {"job_name": "n", "git_sha": "bbb", "config": "big"}),
            )
        ]
    )
    kern = pd.DataFrame(
        [
            {"job_id": j, "attempt": 0, "name": k, "kernel_type": "COMPUTATION", "total_ns": ns}
            for j, k, ns in (
                ("r0", "gemm", 400),
                ("r1", "gemm", 400),
                ("r2", "gemm", 1000),
                ("r0", "copy", 40),
                ("r1", "copy", 40),
                ("r2", "new_kernel", 50),
            )
        ]
    )
    finds = pd.DataFrame(
        [
            {"job_id": j, "attempt": 0, "rule": r}
            for j, r in (
                ("r0", "straggler_rank"),
                ("r1", "straggler_rank"),
                ("r0", "many_tiny_kernels"),
                ("r2", "host_bound_launch"),
            )
        ]
    )
    regs = pd.DataFrame(
        [
            {"job_id": "r2", "attempt": 0, "verdict": "regression", "baseline_runs": ["r0#0", "r1#0"]},
            {"job_id": "r2", "attempt": 0, "verdict": "unchanged", "baseline_runs": ["r0#0", "r1#0"]},
            {"job_id": "r0", "attempt": 0, "verdict": "no_baseline", "baseline_runs": []},
        ]
    )
    out = what_changed(regs, js, kern, caps, finds)
    assert out.iloc[1] is None and out.iloc[2] is None
    c = json.loads(out.iloc[0])
    ctx = {x["field"]: (x["run"], x["baseline"]) for x in c["context"]}
    assert ctx == {
        "torch_version": ("2.14.0", ["2.13.0"]),
        "tags.git_sha": ("bbb", ["aaa"]),
        "tags.config": ("big", [None]),
    }
    # per step: gemm 1000/5 = 200 vs (400+400)/8 = 100; copy 0 vs 10; new_kernel 10 vs 0
    k = {x["name"]: (x["run_ns_per_step"], x["baseline_ns_per_step"], x["delta_ns_per_step"]) for x in c["kernels"]}
    assert k == {"gemm": (200.0, 100.0, 100.0), "copy": (0.0, 10.0, -10.0), "new_kernel": (10.0, 0.0, 10.0)}
    assert [x["name"] for x in c["kernels"]][0] == "gemm"
    assert c["findings_appeared"] == ["host_bound_launch"] and c["findings_cleared"] == ["straggler_rank"]
    assert c["baseline_runs"] == ["r0#0", "r1#0"]


def test_nothing_moved():
    regs = pd.DataFrame([{"job_id": "a", "attempt": 0, "verdict": "unchanged", "baseline_runs": []}])
    assert what_changed(regs, pd.DataFrame(_steps("a", 2))).tolist() == [None]
    assert what_changed(regs.iloc[:0], pd.DataFrame(_steps("a", 2))).empty
