"""Read errors of the landing zone: an object's own problem is quarantined, an unreachable store fails the stage."""

from __future__ import annotations

import json

import fsspec
import pyarrow as pa
import pytest
from test_discover import _capture, _manifest

from jobs.landing.discover import discover
from jobs.landing.store import LandingUnavailable, read_problem
from jobs.normalize.job import make_partition_parser


@pytest.mark.parametrize("exc", [FileNotFoundError("gone"), PermissionError("403 Forbidden"), IsADirectoryError("d")])
def test_the_objects_own_problem_is_a_quarantine_reason(exc):
    assert read_problem("s3://b/raw/t.json", exc) == f"cannot read file: {type(exc).__name__}: {exc}"


@pytest.mark.parametrize(
    "exc",
    [
        ConnectionRefusedError("refused"),
        TimeoutError("read timed out"),
        OSError("503 Slow Down"),
        RuntimeError("aiohttp payload error"),
    ],
)
def test_a_failing_store_raises_naming_the_uri(exc):
    with pytest.raises(LandingUnavailable, match=r"s3://b/raw/t\.json: the landing zone cannot be read") as info:
        read_problem("s3://b/raw/t.json", exc)
    assert info.value.__cause__ is exc


def _parse(tasks: list[dict]) -> list[dict]:
    """Capture rows the normalize worker function emits for ``tasks``."""
    parse = make_partition_parser({})
    batch = pa.RecordBatch.from_pydict({"task_json": [json.dumps(t) for t in tasks]})
    rows = []
    for out in parse([batch]):
        rows += [json.loads(c) for c in out.column("_capture_json").to_pylist() if c]
    return rows


def test_a_vanished_file_is_quarantined_and_the_batch_goes_on(tmp_path):
    ok = tmp_path / "ok.json"
    ok.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "aten::mm", "ts": 1, "dur": 2, "pid": 1, "tid": 1}]}))
    rows = _parse(
        [
            {"job_id": "j", "capture_id": "gone", "uri": str(tmp_path / "gone.json")},
            {"job_id": "j", "capture_id": "ok", "uri": str(ok)},
        ]
    )
    by_id = {r["capture_id"]: r for r in rows}
    assert by_id["gone"]["status"] == "quarantined"
    assert "gone.json: cannot read file: FileNotFoundError" in by_id["gone"]["reason"]
    assert by_id["ok"]["status"] == "ingested"


def test_an_unreachable_store_fails_normalize_instead_of_quarantining(tmp_path, monkeypatch):
    def refuse(*a, **k):
        raise ConnectionRefusedError("Could not connect to the endpoint URL")

    monkeypatch.setattr(fsspec, "open", refuse)
    with pytest.raises(LandingUnavailable, match="t.json: the landing zone cannot be read"):
        _parse([{"job_id": "j", "capture_id": "c", "uri": str(tmp_path / "t.json")}])


def _manifest_open_raises(monkeypatch, exc: Exception) -> None:
    """Reading any ``manifest.json`` of the local file system raises ``exc`` (the listing still works)."""
    real_open = fsspec.implementations.local.LocalFileSystem.open

    def failing_open(self, path, *a, **k):
        if str(path).endswith("manifest.json"):
            raise exc
        return real_open(self, path, *a, **k)

    monkeypatch.setattr(fsspec.implementations.local.LocalFileSystem, "open", failing_open)


def test_an_unreadable_manifest_fails_discovery_instead_of_quarantining(tmp_path, monkeypatch):
    _capture(tmp_path, manifest=_manifest())
    _manifest_open_raises(monkeypatch, TimeoutError("read timed out"))
    with pytest.raises(LandingUnavailable, match=r"manifest\.json: the landing zone cannot be read"):
        discover(str(tmp_path))


def test_a_forbidden_manifest_quarantines_its_capture(tmp_path, monkeypatch):
    _capture(tmp_path, manifest=_manifest())
    _manifest_open_raises(monkeypatch, PermissionError("Access Denied"))
    (f,) = discover(str(tmp_path)).files
    assert f.error and "invalid manifest" in f.error and "cannot read file: PermissionError: Access Denied" in f.error


def test_a_failing_listing_names_the_landing_zone(tmp_path, monkeypatch):
    _capture(tmp_path, manifest=_manifest())

    def down(self, *a, **k):
        raise ConnectionRefusedError("Could not connect to the endpoint URL")

    monkeypatch.setattr(fsspec.implementations.local.LocalFileSystem, "find", down)
    with pytest.raises(LandingUnavailable, match=f"{tmp_path}: the landing zone cannot be listed"):
        discover(str(tmp_path))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        discover(str(tmp_path / "nowhere"))
