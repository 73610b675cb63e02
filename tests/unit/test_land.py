"""``tracelake land`` (jobs/landing/land.py) on local disk: real corpus traces land as committed captures that
discovery reads back with their job name, rank and tags; bad files are refused with the reason; landing again
writes nothing."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.landing.discover import discover
from jobs.landing.land import land, trace_facts
from schemas.manifest import validate_manifest

TRACELAKE = Path(sys.executable).with_name("tracelake")


@pytest.fixture()
def dlrm(CORPUS) -> Path:
    return CORPUS / "torch" / "param" / "dlrm_kineto"


def _manifests(root: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(root.rglob("manifest.json"))]


def test_a_multi_rank_folder_lands_as_one_job_run_and_again_writes_nothing(dlrm, tmp_path):
    zone = tmp_path / "raw"
    done = land([str(dlrm)], str(zone), job_name="dlrm team", tags={"model": "dlrm"}, host="node-7")
    assert [x.status for x in done] == ["landed"] * 8 and sorted(x.rank for x in done) == list(range(8))
    ms = _manifests(zone)
    assert len(ms) == 8
    for m in ms:
        validate_manifest(m)
        (f,) = m["files"]
        blob = next(dlrm.glob(f["path"])).read_bytes()
        assert (f["size_bytes"], f["sha256"]) == (len(blob), hashlib.sha256(blob).hexdigest())
        assert m["capture_id"] == f["sha256"][:16] and m["writer"] == "tracelake.land"
        assert (m["world_size"], m["host"], m["accelerator"]) == (8, "node-7", "cuda")
        assert re.fullmatch(r"dlrm_team-[0-9a-f]{8}", m["job_id"])  # each landed run a job of its own
        assert m["device_name"] == "Tesla V100-SXM2-32GB" and m["tags"] == {"job_name": "dlrm team", "model": "dlrm"}
        # the rank is the trace's own distributedInfo, not a guess
        assert json.loads(blob)["distributedInfo"]["rank"] == m["rank"]
    found = discover(str(zone))
    files = sorted(found.files, key=lambda c: c.rank)
    assert [c.rank for c in files] == list(range(8)) and {c.job_id for c in files} == {ms[0]["job_id"]}
    assert all(not c.bare and c.tags["job_name"] == "dlrm team" and c.error is None for c in files)
    before = sorted((p, p.stat().st_mtime_ns) for p in zone.rglob("*") if p.is_file())
    again = land([str(dlrm)], str(zone), job_name="dlrm team", tags={"model": "dlrm"}, host="node-7")
    assert [x.status for x in again] == ["already"] * 8
    assert sorted((p, p.stat().st_mtime_ns) for p in zone.rglob("*") if p.is_file()) == before


def test_a_landed_trace_is_dated_when_it_was_captured_as_the_bare_ingest_dates_it(dlrm, CORPUS, tmp_path):
    """Not by when the file was copied: absolute-µs ts (DLRM, 2023) and baseTimeNanoseconds + relative ts (OWLv2)."""
    from jobs.normalize.identity import date_of  # why: only this test compares with the bare ingest's date
    from jobs.normalize.kineto.parse import parse_kineto  # why: idem

    owl = CORPUS / "torch" / "TraceLens" / "h100" / "google_owlv2-large-patch14-ensemble__1016001.json.gz"
    for src, want in ((next(dlrm.glob("worker0_*")), "2023-09-07"), (owl, "2025-07-18")):
        copy = tmp_path / "in" / src.name
        copy.parent.mkdir(exist_ok=True)
        shutil.copy(src, copy)  # a fresh mtime: today
        assert date_of(parse_kineto(src.read_bytes(), str(src)).meta["trace_start_ns"]) == want
        (x,) = land([str(copy)], str(tmp_path / "zone"))
        assert x.status == "landed" and f"/date={want}/" in x.uri
        (m,) = [json.loads(p.read_text()) for p in Path(x.uri).rglob("manifest.json")]
        assert m["created_at"].startswith(want)


def test_bad_files_are_refused_with_the_reason_and_the_good_ones_land(CORPUS, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    tf = CORPUS / "torch" / "HolisticTraceAnalysis" / "trace_filter"
    shutil.copy(tf / "sampled_rank-1.json.gz", src)
    (src / "notes.json").write_text("hello")
    (src / "config.json").write_text('{"lr": 0.1}')
    (src / "README.txt").write_text("a trace folder")
    os.symlink("/etc/hostname", src / "rank5.json")
    os.mkfifo(src / "rank6.json")
    shutil.copy(tf / "sampled_rank-0.json.gz", src / "a.json.gz")
    shutil.copy(tf / "sampled_rank-0.json.gz", src / "b.json.gz")
    zone = tmp_path / "raw"
    done = {Path(x.path).name: x for x in land([str(src)], str(zone), job_id="tf")}
    assert done["sampled_rank-1.json.gz"].status == "landed" and done["sampled_rank-1.json.gz"].rank == 1
    why = {n: x.reason for n, x in done.items() if x.status == "refused"}
    assert why["notes.json"].startswith("not JSON")
    assert "no traceEvents" in why["config.json"] and "not a trace file name" in why["README.txt"]
    assert why["rank5.json"].startswith("a symbolic link") and why["rank6.json"].startswith("not a regular file")
    assert "rank 0 twice" in why["a.json.gz"] and "b.json.gz" in why["a.json.gz"] and "a.json.gz" in why["b.json.gz"]
    assert [m["rank"] for m in _manifests(zone)] == [1]  # nothing of a refused file was written


def test_two_runs_of_one_job_name_land_as_two_jobs_and_the_same_run_again_as_itself(CORPUS, tmp_path):
    """The README's recurring job: nightly runs share a job name, each lands as its own job (so the runs are
    compared), and landing a run again finds it."""
    tf = CORPUS / "torch" / "HolisticTraceAnalysis" / "trace_filter"
    zone = str(tmp_path / "raw")
    (a,) = land([str(tf / "sampled_rank-0.json.gz")], zone, job_name="nightly")
    (b,) = land([str(tf / "sampled_rank-1.json.gz")], zone, job_name="nightly", rank=0)
    (again,) = land([str(tf / "sampled_rank-0.json.gz")], zone, job_name="nightly")
    jobs = {m["capture_id"]: m["job_id"] for m in _manifests(tmp_path / "raw")}
    assert len(set(jobs.values())) == 2 and again.status == "already" and again.uri == a.uri
    assert {m["tags"]["job_name"] for m in _manifests(tmp_path / "raw")} == {"nightly"} and b.status == "landed"


def test_rank_from_the_file_name_or_given_and_checked_against_the_world_size(CORPUS, tmp_path):
    owl = CORPUS / "torch" / "TraceLens" / "h100" / "google_owlv2-large-patch14-ensemble__1016001.json.gz"
    facts = trace_facts(owl)
    assert facts.rank is None and facts.accelerator == "cuda" and facts.device_name.startswith("NVIDIA H100")
    (x,) = land([str(owl)], str(tmp_path / "a"), rank=3, world_size=4, attempt=2, date="2026-01-02")
    assert (x.status, x.rank) == ("landed", 3) and "/date=2026-01-02/" in x.uri and "/attempt=2/rank=00003/" in x.uri
    (y,) = land([str(owl)], str(tmp_path / "b"), rank=3, world_size=2)
    assert y.status == "refused" and y.reason == "rank 3 is not below the world size 2"
    mi = CORPUS / "torch" / "HolisticTraceAnalysis" / "amd_trace" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    assert trace_facts(mi).accelerator == "rocm"
    with pytest.raises(ValueError, match="job_id"):
        land([str(owl)], str(tmp_path / "c"), job_id="../up")
    with pytest.raises(ValueError, match="tag"):
        land([str(owl)], str(tmp_path / "c"), tags={"bad key": "x"})


def test_the_cli_prints_one_line_per_file_escaped_and_exits_1_on_a_refusal(CORPUS, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(CORPUS / "torch" / "HolisticTraceAnalysis" / "trace_filter" / "sampled_rank-1.json.gz", src)
    (src / "evil\x1b]8;;https:x\x07.json").write_text("nope")
    cmd = [str(TRACELAKE), "land", str(src), "--to", str(tmp_path / "raw"), "--job-name", "tf", "--tag", "model=m"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "300"})
    assert proc.returncode == 1, proc.stderr
    assert "\x1b" not in proc.stdout and "\\x1b]8;;https:x\\x07.json (not JSON" in proc.stdout
    assert "landed: " in proc.stdout and "1 landed, 0 already there, 1 refused" in proc.stdout
