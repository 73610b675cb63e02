"""Integration: ``tracelake land`` puts a team's existing traces (the corpus DLRM 8-rank job, a single-rank trace,
a file that is not a trace) into a real S3 landing zone (SeaweedFS on loopback), landing again writes nothing, and
``tracelake run`` ingests the landed job under its job name with the ranks its traces declare."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import s3fs
from s3_server import s3  # noqa: F401 - fixture

from jobs.warehouse import read_pandas

pytestmark = pytest.mark.integration

TRACELAKE = Path(sys.executable).with_name("tracelake")


def _cli(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(TRACELAKE), *args], capture_output=True, text=True, timeout=300, env={**env, "COLUMNS": "300"}
    )


def test_land_into_s3_then_run_ingests_the_job_under_its_name(s3, CORPUS, tmp_path):  # noqa: F811
    env = {**os.environ, **s3.env}
    so = json.dumps(s3.storage_options)
    src = tmp_path / "dlrm"
    shutil.copytree(CORPUS / "torch" / "param" / "dlrm_kineto", src)
    (src / "run_config.json").write_text('{"batch_size": 128}')  # a file a team keeps beside its traces
    raw = "s3://tracelake/raw"

    start = time.perf_counter()
    proc = _cli(
        "land",
        str(src),
        "--to",
        raw,
        "--job-name",
        "dlrm-prod",
        "--tag",
        "model=dlrm",
        "--storage-options",
        so,
        env=env,
    )
    print(f"tracelake land (8 traces → S3): {time.perf_counter() - start:.1f} s\n{proc.stdout}")
    assert proc.returncode == 1, proc.stderr  # the config file is refused, the traces land
    assert "8 landed, 0 already there, 1 refused" in proc.stdout
    assert "run_config.json (no traceEvents" in proc.stdout
    owl = CORPUS / "torch" / "TraceLens" / "h100" / "google_owlv2-large-patch14-ensemble__1016001.json.gz"
    one = _cli("land", str(owl), "--to", raw, "--job-name", "owl-infer", "--storage-options", so, env=env)
    assert one.returncode == 0 and "1 landed" in one.stdout, one.stdout + one.stderr

    fs = s3fs.S3FileSystem(skip_instance_cache=True, **s3.storage_options)
    manifests = sorted(fs.glob("tracelake/raw/**/manifest.json"))
    assert len(manifests) == 9
    keys = sorted(fs.find("tracelake/raw"))
    again = _cli(
        "land",
        str(src),
        "--to",
        raw,
        "--job-name",
        "dlrm-prod",
        "--tag",
        "model=dlrm",
        "--storage-options",
        so,
        env=env,
    )
    assert "0 landed, 8 already there, 1 refused" in again.stdout, again.stdout + again.stderr
    assert sorted(fs.find("tracelake/raw")) == keys  # nothing written again

    warehouse = tmp_path / "warehouse"
    run = _cli("run", "--raw", raw, "--warehouse", str(warehouse), "--no-mlflow", "--storage-options", so, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    caps = read_pandas(str(warehouse), ["captures"])["captures"]
    assert set(caps["status"]) == {"ingested"} and len(caps) == 9
    dlrm = caps[caps["job_name"] == "dlrm-prod"]
    assert sorted(dlrm["rank"].astype(int)) == list(range(8)) and set(dlrm["rank_source"]) == {"distributedInfo"}
    assert set(dlrm["model"]) == {"dlrm"} and set(dlrm["world_size"].astype(int)) == {8}
    assert set(caps.loc[caps["job_name"] == "owl-infer", "device_name"]) == {"NVIDIA H100 80GB HBM3"}
