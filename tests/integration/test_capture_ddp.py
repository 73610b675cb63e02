"""Integration: a real 2-rank CPU DDP job (gloo) captured with TraceCapture into a landing zone."""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import time
from pathlib import Path

import jsonschema
import pytest

from jobs.demo.train_ddp import run_demo_training

pytestmark = pytest.mark.integration

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "schemas" / "manifest.v1.json"
LAYOUT = re.compile(r"date=\d{4}-\d{2}-\d{2}/job=([^/]+)/attempt=(\d+)/rank=(\d{5})/([^/]+)")


@pytest.fixture(scope="module")
def landing(tmp_path_factory):
    root = tmp_path_factory.mktemp("landing")
    start = time.perf_counter()
    folders = run_demo_training(str(root), "ddp-demo", world_size=2, steps=8)
    elapsed = time.perf_counter() - start
    print(f"run_demo_training(world_size=2, steps=8): {elapsed:.1f} s")
    assert elapsed < 60
    return root, folders


def test_one_committed_capture_per_rank(landing):
    root, folders = landing
    assert len(folders) == 2
    found = {}
    for folder in folders:
        match = LAYOUT.fullmatch(Path(folder).relative_to(root).as_posix())
        assert match, folder
        job, attempt, rank, _ = match.groups()
        assert (job, attempt) == ("ddp-demo", "0")
        found[int(rank)] = Path(folder)
        assert sorted(p.name for p in Path(folder).iterdir()) == ["manifest.json", "trace.json.gz"]
    assert sorted(found) == [0, 1]
    # every committed folder is in the result, nothing else was committed
    assert sorted(str(p.parent) for p in Path(root).rglob("manifest.json")) == sorted(folders)


def test_traces_and_manifests_agree(landing):
    _, folders = landing
    schema = json.loads(SCHEMA_PATH.read_text())
    validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())
    for folder in map(Path, folders):
        rank = int(folder.parent.name.removeprefix("rank="))
        raw = (folder / "trace.json.gz").read_bytes()
        assert raw[:2] == b"\x1f\x8b"  # gzip magic
        trace = json.loads(gzip.decompress(raw))

        dist_info = trace["distributedInfo"]
        assert (dist_info["rank"], dist_info["world_size"], dist_info["backend"]) == (rank, 2, "gloo")
        names = [e.get("name", "") for e in trace["traceEvents"]]
        steps = sorted({int(n.split("#", 1)[1]) for n in names if n.startswith("ProfilerStep#")})
        assert steps == [2, 3, 4]  # schedule wait=1, warmup=1, active=3
        assert any("allreduce" in n for n in names)  # DDP gradient all-reduce over gloo

        manifest = json.loads((folder / "manifest.json").read_text())
        validator.validate(manifest)
        assert (manifest["job_id"], manifest["attempt"], manifest["rank"], manifest["world_size"]) == (
            "ddp-demo",
            0,
            rank,
            2,
        )
        assert manifest["launcher"] == "torch.distributed"
        assert manifest["capture_id"] == folder.name
        assert manifest["step_range"] == {"first": 2, "last": 4}
        assert manifest["host"] == trace["host_name"]
        (entry,) = manifest["files"]
        assert entry["path"] == "trace.json.gz" and entry["kind"] == "kineto_trace"
        assert entry["size_bytes"] == len(raw)
        assert entry["sha256"] == hashlib.sha256(raw).hexdigest()
