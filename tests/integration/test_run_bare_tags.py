"""``tracelake run --job-name … --tag k=v`` on bare traces (no manifest): their runs share a job name, so the
second is compared with the first; a capture with a manifest keeps its own tags; bad tags are refused.

Two folders, each with one real rank of HTA's ``trace_filter`` example, run through the CLI as a user runs it
(local executor, no JVM).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
TRACE_FILTER = (
    "HolisticTraceAnalysis/trace_filter/sampled_rank-0.json.gz",
    "HolisticTraceAnalysis/trace_filter/sampled_rank-1.json.gz",
)


def _tracelake(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "jobs.cli", *args], cwd=str(ROOT), capture_output=True, text=True, timeout=600
    )


def test_bare_traces_take_the_job_name_and_tags_of_the_command(CORPUS, tmp_path):
    from jobs.warehouse import read_pandas

    raw, wh = tmp_path / "traces", tmp_path / "wh"
    for folder, rel in zip(("run-a", "run-b"), TRACE_FILTER):
        (raw / folder).mkdir(parents=True)
        shutil.copy(CORPUS / "torch" / rel, raw / folder / Path(rel).name)
    out = _tracelake(
        "run",
        "--raw",
        str(raw),
        "--warehouse",
        str(wh),
        "--no-mlflow",
        "--job-name",
        "nightly-recsys",
        "--tag",
        "model=recsys",
        "--tag",
        "team=perf",
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    t = read_pandas(str(wh), ("captures", "regressions"), None)
    caps = t["captures"].set_index("job_id")
    assert sorted(caps.index) == ["run-a", "run-b"]
    assert set(caps["job_name"]) == {"nightly-recsys"} and set(caps["model"]) == {"recsys"}
    assert json.loads(caps.loc["run-a", "tags_json"]) == {
        "job_name": "nightly-recsys",
        "model": "recsys",
        "team": "perf",
    }
    reg = t["regressions"]
    b = reg[reg["job_id"] == "run-b"]
    assert len(b) and set(b["run_index"]) == {1}  # compared with the first run of its job name, not alone
    assert all(list(x) == ["run-a#0"] for x in b["baseline_runs"])

    # without --job-name each folder is its own job name: nothing to compare with
    out = _tracelake("run", "--raw", str(raw), "--warehouse", str(tmp_path / "wh2"), "--no-mlflow")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    reg2 = read_pandas(str(tmp_path / "wh2"), ("regressions",), None)["regressions"]
    assert set(reg2["run_index"]) == {0} and set(reg2["verdict"]) == {"no_baseline"}


def test_bad_tags_are_refused_before_anything_runs(tmp_path):
    for bad, says in (
        (["--tag", "model"], "is not KEY=VALUE"),
        (["--tag", "a=1", "--tag", "a=2"], "given twice"),
        (["--tag", "bad key=1"], "does not match"),
        (["--job-name", " "], "must not be empty"),
    ):
        out = _tracelake("run", "--raw", str(tmp_path), "--warehouse", str(tmp_path / "wh"), "--no-mlflow", *bad)
        assert out.returncode == 2 and says in out.stderr and bad[0] in out.stderr, out.stderr
    assert not (tmp_path / "wh").exists()
