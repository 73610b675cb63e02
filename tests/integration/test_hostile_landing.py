"""Issue 33, landing zone: one bad entry of each kind beside good traces, through ``tracelake run`` as a user runs it
(the local executor): the run ends in bounded time, every bad entry is quarantined with its reason (never opened
when it is not a regular file), the good ones are analyzed, and no file name reaches the terminal raw."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

from jobs.warehouse import read_pandas

pytestmark = pytest.mark.integration

TRACELAKE = Path(sys.executable).with_name("tracelake")
TF = Path("HolisticTraceAnalysis") / "trace_filter"


def _bomb(path: Path) -> int:
    """A ``.json.gz`` that decodes to 512 MiB of one JSON document (about 1000:1); returns its size."""
    co = zlib.compressobj(9, zlib.DEFLATED, 31)
    with open(path, "wb") as f:
        f.write(co.compress(b'{"traceEvents": ['))
        block = b" " * (1 << 24)
        for _ in range(32):
            f.write(co.compress(block))
        f.write(co.compress(b"]}") + co.flush())
    return path.stat().st_size


def _manifest(trace: bytes, job: str, rank: int, cid: str, **over) -> dict:
    m = {
        "schema_version": "1",
        "job_id": job,
        "attempt": 0,
        "rank": rank,
        "local_rank": 0,
        "world_size": 2,
        "node": 0,
        "host": "h1",
        "accelerator": "cuda",
        "device_name": None,
        "torch_version": None,
        "cuda_version": None,
        "created_at": "2026-11-30T10:00:00Z",
        "step_range": None,
        "capture_id": cid,
        "profiler": {"name": "torch.profiler"},
        "tags": {},
        "files": [
            {"path": "trace.json.gz", "size_bytes": len(trace), "sha256": hashlib.sha256(trace).hexdigest()}
            | {"kind": "kineto_trace"}
        ],
    }
    return {**m, **over}


def _commit(root: Path, job: str, rank: int, cid: str, trace: bytes, **over) -> Path:
    d = root / "date=2026-11-30" / f"job={job}" / "attempt=0" / f"rank={rank:05d}" / cid
    d.mkdir(parents=True)
    (d / "trace.json.gz").write_bytes(over.pop("stored", trace))
    (d / "manifest.json").write_text(json.dumps(_manifest(trace, job, rank, cid, **over)))
    return d


def test_hostile_entries_are_quarantined_with_their_reason_and_the_run_ends(CORPUS, tmp_path):
    raw = tmp_path / "raw"
    r0 = (CORPUS / "torch" / TF / "sampled_rank-0.json.gz").read_bytes()
    r1 = (CORPUS / "torch" / TF / "sampled_rank-1.json.gz").read_bytes()
    # bare traces: the good one, then hostile entries beside it
    bare = raw / "team"
    bare.mkdir(parents=True)
    shutil.copy(CORPUS / "torch" / TF / "sampled_rank-1.json.gz", bare / "rank1.json.gz")
    os.mkfifo(bare / "rank2.json")
    os.symlink("/dev/zero", bare / "rank3.json")
    os.symlink("/etc/passwd", bare / "rank4.json")
    outside = tmp_path / "elsewhere.json.gz"
    outside.write_bytes(r0)
    os.symlink(outside, bare / "rank5.json.gz")
    _bomb(bare / "rank6.json.gz")
    (bare / "rank7\x1b]8;;https:x\x07.json").write_bytes(b"\x1bc not a trace")
    # two files without a manifest and without a rank, whose names a slug would make equal: two jobs
    clash = raw / "clash"
    clash.mkdir()
    (clash / "a b.pt.trace.json.gz").write_bytes(r0)
    (clash / "a-b.pt.trace.json.gz").write_bytes(r0)
    # manifests: a good capture, the same rank declared twice, a rank past the world size, an impossible date,
    # an implausible world size, bytes that are not the ones committed
    _commit(raw, "m", 0, "c0", r0)
    _commit(raw, "m", 1, "c1", r1)
    _commit(raw, "m", 1, "c1b", r1)
    _commit(raw, "bad", 3, "w", r0)
    _commit(raw, "bad", 0, "d", r0, created_at="9999-99-99T99:99:99Z")
    _commit(raw, "bad", 1, "ws", r0, world_size=2147483647)
    _commit(raw, "bad", 0, "sha", r0, stored=r1)
    # a manifest whose rank the trace contradicts (the trace's distributedInfo says rank 0 of 128)
    _commit(raw, "mm", 1, "mis", r0, world_size=128)

    start = time.monotonic()
    proc = subprocess.run(
        [str(TRACELAKE), "run", "--raw", str(raw), "--warehouse", str(tmp_path / "wh"), "--no-mlflow"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "400"},
    )  # fmt: skip
    took = time.monotonic() - start
    print(f"tracelake run over the hostile landing zone: {took:.1f} s\n{proc.stdout[-4000:]}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "\x1b" not in proc.stdout + proc.stderr and "\\x1b]8;;https:x\\x07.json" in proc.stdout
    caps = read_pandas(str(tmp_path / "wh"), ["captures"])["captures"].to_dict("records")

    def key(uri: str) -> str:  # a committed capture by its folder, a bare file by its name
        p = Path(uri)
        return p.parent.name if "/date=" in uri and p.name == "trace.json.gz" else p.name

    why = {key(r["uri"]): r["reason"] for r in caps if r["status"] == "quarantined"}
    ingested = sorted((r["job_id"], key(r["uri"])) for r in caps if r["status"] == "ingested")
    assert "a FIFO (named pipe), not a regular file: not opened" in why["rank2.json"]
    assert "symbolic link leaving the landing zone (to '/dev/zero')" in why["rank3.json"]
    assert "(to '/etc/passwd')" in why["rank4.json"] and "root:" not in why["rank4.json"]
    assert f"(to {str(outside)!r})" in why["rank5.json.gz"]
    assert "decompression ratio above the limit of 200:1" in why["rank6.json.gz"]
    assert "rank 1 of job m attempt 0 is declared by" in why["c1b"] and "/c1/trace.json.gz" in why["c1b"]
    assert "rank 3 is not below world_size 2" in why["w"]
    assert "created_at '9999-99-99T99:99:99Z' is not an RFC 3339 time" in why["d"]
    assert "world_size 2147483647 is not plausible" in why["ws"]
    assert "the file changed after it was committed" in why["sha"]
    clash_jobs = sorted(j for j, _ in ingested if j.startswith("clash-"))
    assert len(clash_jobs) == 2 and clash_jobs[0] != clash_jobs[1]  # "a b" and "a-b" stay two captures, two jobs
    assert [x for x in ingested if not x[0].startswith("clash-")] == [
        ("m", "c0"),
        ("m", "c1"),
        ("mm", "mis"),
        ("team", "rank1.json.gz"),
    ]
    flags = {key(r["uri"]): list(r["flags"]) for r in caps if r["status"] == "ingested"}
    rank_of = {key(r["uri"]): r["rank"] for r in caps if r["status"] == "ingested"}
    assert "rank_mismatch" in flags["mis"] and "world_size_mismatch" not in flags["mis"] and rank_of["mis"] == 0
    assert "world_size_mismatch" in flags["c0"] and "rank_mismatch" not in flags["c0"]  # manifest 2, trace 128
