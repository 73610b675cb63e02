"""Landing-zone discovery: committed captures, pending folders, bare traces, unsafe ids."""

from __future__ import annotations

import json

import pytest

from jobs.common.ids import DiscoveryError, safe_id, slug
from jobs.landing.discover import discover


def _manifest(**over):
    m = {
        "schema_version": "1",
        "job_id": "llm-7b",
        "attempt": 1,
        "rank": 3,
        "local_rank": 3,
        "world_size": 4,
        "node": 0,
        "host": "h1",
        "accelerator": "cpu",
        "device_name": None,
        "torch_version": "2.13.0",
        "cuda_version": None,
        "created_at": "2026-11-30T10:00:00Z",
        "step_range": {"first": 2, "last": 4},
        "capture_id": "c1",
        "profiler": {"name": "torch.profiler", "schedule": {"wait": 1, "warmup": 1, "active": 3, "repeat": 1}},
        "tags": {"model": "mlp"},
        "files": [{"path": "trace.json.gz", "size_bytes": 10, "sha256": "0" * 64, "kind": "kineto_trace"}],
    }
    m.update(over)
    return m


def _capture(root, job="llm-7b", rank=3, cid="c1", manifest=None):
    d = root / "date=2026-11-30" / f"job={job}" / "attempt=1" / f"rank={rank:05d}" / cid
    d.mkdir(parents=True)
    (d / "trace.json.gz").write_bytes(b"x" * 10)
    if manifest is not None:
        (d / "manifest.json").write_text(json.dumps(manifest))
    return d


def test_committed_capture_uses_manifest_identity(tmp_path):
    from schemas.manifest import manifest_schema

    pytest.importorskip("jsonschema")
    manifest_schema("1")  # the schema file ships with the package
    _capture(tmp_path, manifest=_manifest())
    found = discover(str(tmp_path))
    assert found.pending == []
    (f,) = found.files
    assert (f.job_id, f.attempt, f.rank, f.rank_source, f.world_size, f.date) == (
        "llm-7b",
        1,
        3,
        "manifest",
        4,
        "2026-11-30",
    )
    assert f.capture_id == "c1" and f.error is None and not f.bare
    assert f.uri.endswith("c1/trace.json.gz") and f.manifest_uri.endswith("c1/manifest.json")
    assert f.created_at == "2026-11-30T10:00:00Z" and f.tags == {"model": "mlp"}


def test_tag_columns_name_recurring_jobs():
    from jobs.normalize.job import tag_columns

    tagged = tag_columns({"job_id": "run-17", "tags": json.dumps({"job_name": "llm-pretrain", "model": "llama-7b"})})
    assert tagged == {
        "job_name": "llm-pretrain",
        "model": "llama-7b",
        "tags_json": '{"job_name": "llm-pretrain", "model": "llama-7b"}',
    }
    assert tag_columns({"job_id": "bare-folder", "tags": "{}"}) == {
        "job_name": "bare-folder",
        "model": None,
        "tags_json": "{}",
    }
    assert tag_columns({"job_id": "j", "tags": "not json"})["job_name"] == "j"


def test_capture_without_manifest_is_pending_not_ingested(tmp_path):
    d = _capture(tmp_path, manifest=None)
    found = discover(str(tmp_path))
    assert found.files == [] and found.pending == [str(d)]


def test_invalid_manifest_quarantines_with_reason(tmp_path):
    _capture(tmp_path, manifest={"schema_version": "1", "job_id": "x"})
    (f,) = discover(str(tmp_path)).files
    assert f.error and "invalid manifest" in f.error and "manifest.json" in f.error


def test_path_escaping_job_id_is_rejected(tmp_path):
    _capture(tmp_path, manifest=_manifest(job_id="../../x"))
    (f,) = discover(str(tmp_path)).files
    assert f.error and "job_id" in f.error
    with pytest.raises(DiscoveryError, match="unsafe job_id"):
        safe_id("../../x", "job_id", "m.json")


def test_bare_traces_form_one_job_per_folder(tmp_path):
    d = tmp_path / "team" / "run 1"
    d.mkdir(parents=True)
    for n in ("rank-0.pt.trace.json", "rank-1.pt.trace.json.gz", "notes.txt"):
        (d / n).write_bytes(b"{}")
    found = discover(str(tmp_path))
    assert [f.job_id for f in found.files] == ["team-run-1", "team-run-1"]
    assert all(f.bare and f.rank is None for f in found.files)
    assert len({f.capture_id for f in found.files}) == 2
    assert slug("a/b c") == "a-b-c"


def test_missing_root_raises(tmp_path):
    with pytest.raises(FileNotFoundError):
        discover(str(tmp_path / "nope"))


def test_bare_rank_clash_splits_the_folder_into_one_job_per_file():
    from jobs.normalize.job import disambiguate_bare_jobs

    caps = [
        {"capture_id": "a", "job_id": "runs", "attempt": 0, "rank": 0, "status": "ingested", "uri": "/x/runs/a.json"},
        {
            "capture_id": "b",
            "job_id": "runs",
            "attempt": 0,
            "rank": 0,
            "status": "ingested",
            "uri": "/x/runs/b.json.gz",
        },
        {
            "capture_id": "c",
            "job_id": "runs",
            "attempt": 0,
            "rank": 0,
            "status": "quarantined",
            "uri": "/x/runs/c.json",
        },
        {"capture_id": "d", "job_id": "dlrm", "attempt": 0, "rank": 0, "status": "ingested", "uri": "/x/dlrm/w0.json"},
        {"capture_id": "e", "job_id": "dlrm", "attempt": 0, "rank": 1, "status": "ingested", "uri": "/x/dlrm/w1.json"},
    ]
    tasks = {c["capture_id"]: {"bare": True} for c in caps}
    assert disambiguate_bare_jobs(caps, tasks) == {"a": "runs-a", "b": "runs-b"}


def test_repeated_capture_id_across_jobs_keeps_both_files(tmp_path):
    """A capture folder copied into another job repeats its manifest capture_id: both files stay in the batch."""
    from jobs.normalize.job import unique_capture_ids

    pytest.importorskip("jsonschema")
    _capture(tmp_path, job="job-a", manifest=_manifest(job_id="job-a"))
    _capture(tmp_path, job="job-b", manifest=_manifest(job_id="job-b"))
    files = unique_capture_ids(discover(str(tmp_path)).files)
    ids = {f.job_id: f.capture_id for f in files}
    assert len(files) == 2 and len(set(ids.values())) == 2
    assert ids["job-a"] == "c1" and ids["job-b"].startswith("c1.dup-")
    assert [f.flags for f in files if f.job_id == "job-b"] == [["duplicate_capture_id"]]
    assert safe_id(ids["job-b"], "capture_id", "test") == ids["job-b"]
