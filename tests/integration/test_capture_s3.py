"""Integration: a 2-rank CPU DDP job (gloo) captures into a real S3 server, then ``tracelake run`` ingests it.

The S3 server is SeaweedFS on loopback with real credentials (``s3_server.py``). The training ranks
get the sink and credentials only through the environment (``AWS_*``, ``TRACELAKE_SPOOL_DIR``), as a
job launched with those variables would; the hook uploads in its background thread.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest
import s3fs
from s3_server import s3  # noqa: F401 - fixture

from jobs.demo.train_ddp import run_demo_training
from jobs.warehouse import read_pandas

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "schemas" / "manifest.v1.json").read_text())
TRACELAKE = Path(sys.executable).with_name("tracelake")


def test_ddp_job_lands_in_s3_and_tracelake_run_ingests_both_ranks(s3, tmp_path, monkeypatch):  # noqa: F811
    for key, value in s3.env.items():
        monkeypatch.setenv(key, value)
    spool = tmp_path / "spool"
    monkeypatch.setenv("TRACELAKE_SPOOL_DIR", str(spool))
    raw = "s3://tracelake/raw"

    start = time.perf_counter()
    folders = run_demo_training(raw, "ddp-s3", world_size=2, steps=8)  # raises if a rank reports capture failures
    print(f"2-rank DDP training to S3: {time.perf_counter() - start:.1f} s")

    # both ranks committed one capture each, in the bucket, with valid manifests that match the bytes
    assert len(folders) == 2 and all(f.startswith("s3://tracelake/raw/date=") for f in folders)
    fs = s3fs.S3FileSystem(skip_instance_cache=True, **s3.storage_options)
    manifests = sorted(fs.glob("tracelake/raw/**/manifest.json"))
    assert sorted(m.rsplit("/", 1)[0] for m in manifests) == sorted(f.removeprefix("s3://") for f in folders)
    validator = jsonschema.Draft202012Validator(SCHEMA, format_checker=jsonschema.FormatChecker())
    ranks = {}
    for path in manifests:
        manifest = json.loads(fs.cat(path))
        validator.validate(manifest)
        (entry,) = manifest["files"]
        blob = fs.cat(path.rsplit("/", 1)[0] + "/" + entry["path"])
        assert (len(blob), hashlib.sha256(blob).hexdigest()) == (entry["size_bytes"], entry["sha256"])
        trace = json.loads(gzip.decompress(blob))
        assert trace["distributedInfo"]["rank"] == manifest["rank"]
        assert manifest["step_range"] == {"first": 2, "last": 4} and manifest["world_size"] == 2
        ranks[manifest["rank"]] = path
    assert sorted(ranks) == [0, 1]
    # nothing left behind in the spool (only empty folders may remain)
    assert [p for p in spool.rglob("*") if p.is_file()] == []

    # `tracelake run --raw s3://…` as a user runs it
    warehouse = tmp_path / "warehouse"
    cmd = [
        str(TRACELAKE),
        "run",
        "--raw",
        raw,
        "--warehouse",
        str(warehouse),
        "--no-mlflow",
        "--storage-options",
        json.dumps(s3.storage_options),
    ]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "200"})
    print(f"tracelake run: {time.perf_counter() - start:.1f} s\n{proc.stdout[-3000:]}")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert re.search(r"captures: 2 \(2 ingested, 0 quarantined", proc.stdout), proc.stdout[-2000:]

    captures = read_pandas(str(warehouse), ["captures"], ["ddp-s3"])["captures"]  # through the storage seam
    assert sorted(captures["rank"].astype(int)) == [0, 1]
    assert set(captures["status"]) == {"ingested"}
    assert sorted(captures["manifest_uri"]) == sorted(f"s3://{m}" for m in manifests)
    assert (captures["n_profiler_steps"] == 3).all()  # ProfilerStep#2..#4 of each rank
