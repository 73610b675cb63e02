"""Unit tests of the capture upload path: spool, background uploader, retries, outages, size cap, drain.

The training loops run the real torch.profiler (CPU) on a tiny model; the sink is a local landing
zone whose ``write`` can be switched to fail like an unreachable store.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import os
import threading
import time
from pathlib import Path

import jsonschema
import pytest
import torch

from capture_hooks import LandingZoneSink, Spool, TraceCapture, drain_spool
from capture_hooks.config import env_bool, env_bytes, parse_schedule, parse_storage_options
from capture_hooks.spool import SpoolFull, spool_root

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "schemas" / "manifest.v1.json").read_text())
FAST = dict(upload_backoff_s=0.01, upload_backoff_max_s=0.02, retry_interval_s=0.2)


class SwitchSink(LandingZoneSink):
    """A local landing zone that fails like an unreachable store while ``down`` is set."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.down = False
        self.calls = 0
        self.fail_next = 0  # fail this many calls, then work
        self.lose_response_next = 0  # write everything, then raise (the reply was lost)
        self.threads: set[str] = set()

    def write(self, upload):
        self.calls += 1
        self.threads.add(threading.current_thread().name)
        if self.down:
            raise ConnectionError("store unreachable (test)")
        if self.fail_next:
            self.fail_next -= 1
            raise ConnectionError("transient failure (test)")
        uri = super().write(upload)
        if self.lose_response_next:
            self.lose_response_next -= 1
            raise TimeoutError("response lost after the write (test)")
        return uri


def _train(capture: TraceCapture, steps: int, on_step=None) -> int:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    done = 0
    for i in range(steps):
        if on_step is not None:
            on_step(i)
        loss = model(torch.randn(8, 16)).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        capture.step()
        done += 1
    return done


def _landed(root: Path) -> list[dict]:
    """Manifests committed under ``root``, with their trace bytes checked against them."""
    out = []
    validator = jsonschema.Draft202012Validator(SCHEMA, format_checker=jsonschema.FormatChecker())
    for path in sorted(root.rglob("manifest.json")):
        manifest = json.loads(path.read_text())
        validator.validate(manifest)
        for entry in manifest["files"]:
            blob = (path.parent / entry["path"]).read_bytes()
            assert (len(blob), hashlib.sha256(blob).hexdigest()) == (entry["size_bytes"], entry["sha256"])
        out.append(manifest)
    return out


def _steps_in(folder: Path) -> list[int]:
    trace = json.loads(gzip.decompress((folder / "trace.json.gz").read_bytes()))
    return sorted(
        {
            int(e["name"].split("#", 1)[1])
            for e in trace["traceEvents"]
            if str(e.get("name", "")).startswith("ProfilerStep#")
        }
    )


def _spool_files(spool: Path) -> list[Path]:
    return [p for p in spool.rglob("*") if p.is_file()]


# ---------------------------------------------------------------- background upload


def test_uploads_happen_off_the_training_thread(tmp_path):
    sink = SwitchSink(str(tmp_path / "raw"))
    capture = TraceCapture(
        sink, job_id="bg", wait=1, warmup=1, active=2, repeat=3, spool_dir=str(tmp_path / "spool"), env={}, **FAST
    )
    with capture:
        assert _train(capture, 14) == 14
    assert capture.failures == 0 and capture.pending == 0
    assert sink.threads == {"tracelake-upload"}  # never the training (main) thread
    manifests = _landed(tmp_path / "raw")
    assert len(manifests) == len(capture.committed) == 3
    assert sorted((m["step_range"]["first"], m["step_range"]["last"]) for m in manifests) == [(2, 3), (6, 7), (10, 11)]
    # the committed list is in cycle order and each folder's trace holds its own steps
    assert [_steps_in(Path(f)) for f in capture.committed] == [[2, 3], [6, 7], [10, 11]]
    assert _spool_files(tmp_path / "spool") == []


def test_synchronous_mode_commits_at_the_end_of_each_cycle(tmp_path):
    sink = SwitchSink(str(tmp_path / "raw"))
    capture = TraceCapture(
        sink,
        job_id="sync",
        wait=0,
        warmup=1,
        active=1,
        repeat=2,
        background=False,
        spool_dir=str(tmp_path / "spool"),
        env={},
        **FAST,
    )
    seen = []
    with capture:
        _train(capture, 6, on_step=lambda i: seen.append(len(capture.committed)))
    assert seen == [0, 0, 1, 1, 2, 2]  # committed during the loop, no thread needed
    assert sink.threads == {threading.current_thread().name}
    assert len(_landed(tmp_path / "raw")) == 2


def test_transient_errors_are_retried_with_backoff(tmp_path):
    sink = SwitchSink(str(tmp_path / "raw"))
    sink.fail_next = 2  # fewer than upload_retries=3: the first round still succeeds
    capture = TraceCapture(sink, job_id="retry", spool_dir=str(tmp_path / "spool"), env={}, **FAST)
    with capture:
        _train(capture, 6)
    assert sink.calls == 3 and capture.failures == 0
    assert len(_landed(tmp_path / "raw")) == 1


def test_lost_response_does_not_duplicate_the_capture(tmp_path):
    sink = SwitchSink(str(tmp_path / "raw"))
    sink.lose_response_next = 1  # the write landed but the caller saw an error: the retry rewrites the same keys
    capture = TraceCapture(sink, job_id="dup", spool_dir=str(tmp_path / "spool"), env={}, **FAST)
    with capture:
        _train(capture, 6)
    manifests = _landed(tmp_path / "raw")
    assert len(manifests) == 1 and len(capture.committed) == 1
    assert len([p for p in (tmp_path / "raw").rglob("*") if p.is_file()]) == 2  # trace + manifest, once


def test_outage_spools_then_uploads_everything_once(tmp_path, caplog):
    sink = SwitchSink(str(tmp_path / "raw"))
    spool = tmp_path / "spool"
    capture = TraceCapture(
        sink, job_id="outage", wait=1, warmup=0, active=1, repeat=0, spool_dir=str(spool), env={}, **FAST
    )
    pending_during_outage = []

    def weather(i):
        if i == 4:
            sink.down = True
        if i == 14:
            deadline = time.monotonic() + 10
            while capture.failures < 3 and time.monotonic() < deadline:  # the outage lasts until uploads failed
                time.sleep(0.01)
            pending_during_outage.append(capture.pending)
            sink.down = False  # captures after this one find the store back and take the backlog with them

    with caplog.at_level(logging.DEBUG, logger="capture_hooks"):
        with capture:
            assert _train(capture, 20, on_step=weather) == 20
    # wait=1, active=1, repeat=0: a capture every 2 steps -> 10 captures, steps 1,3,5,...,19
    manifests = _landed(tmp_path / "raw")
    assert sorted(m["step_range"]["first"] for m in manifests) == list(range(1, 20, 2))
    assert len({m["capture_id"] for m in manifests}) == 10 and len(capture.committed) == 10
    assert pending_during_outage[0] >= 3  # spooled while the store was down
    assert capture.failures >= 3  # counted, but nothing reached the loop
    assert capture.pending == 0 and _spool_files(spool) == []
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "stays spooled" in warnings[0].getMessage()  # logged once


def test_captures_left_by_a_previous_process_are_uploaded_by_the_next(tmp_path):
    spool = tmp_path / "spool"
    down = SwitchSink(str(tmp_path / "raw"))
    down.down = True
    first = TraceCapture(
        down, job_id="next", active=1, repeat=2, spool_dir=str(spool), flush_timeout_s=0.5, env={}, **FAST
    )
    with first:
        _train(first, 8)
    assert first.committed == [] and first.pending == 2
    first._uploader.close(0)  # the process ends with the store still down

    up = SwitchSink(str(tmp_path / "raw"))  # same landing zone, store back
    second = TraceCapture(up, job_id="next", active=1, repeat=1, spool_dir=str(spool), env={}, **FAST)
    with second:
        _train(second, 4)
    assert len(second.committed) == 3  # its own capture and the two left over, oldest first
    assert [m["profiler"]["cycle"] for m in _landed(tmp_path / "raw")].count(0) == 2
    assert _spool_files(spool) == []


def test_drain_spool_uploads_leftovers_for_the_given_sink_only(tmp_path):
    spool = tmp_path / "spool"
    for name in ("a", "b"):
        sink = SwitchSink(str(tmp_path / name))
        sink.down = True
        capture = TraceCapture(
            sink, job_id="drain", active=1, repeat=1, spool_dir=str(spool), flush_timeout_s=0.2, env={}, **FAST
        )
        with capture:
            _train(capture, 4)
        capture._uploader.close(0)
    committed, pending = drain_spool(str(spool), str(tmp_path / "a"))
    assert len(committed) == 1 and pending == 0
    assert len(_landed(tmp_path / "a")) == 1 and not (tmp_path / "b").exists()
    committed, pending = drain_spool(str(spool), str(tmp_path / "b"))
    assert len(committed) == 1 and _spool_files(spool) == []


def test_worker_crash_is_contained(tmp_path, monkeypatch, caplog):
    import capture_hooks.upload as upload

    def broken(*args, **kwargs):
        raise OSError("disk full (test)")

    monkeypatch.setattr(upload, "finalize_entry", broken)
    capture = TraceCapture(
        str(tmp_path / "raw"),
        job_id="crash",
        active=1,
        repeat=1,
        spool_dir=str(tmp_path / "spool"),
        flush_timeout_s=1.0,
        env={},
        **FAST,
    )
    with caplog.at_level(logging.WARNING, logger="capture_hooks"):
        with capture:
            assert _train(capture, 4) == 4
    assert capture.committed == [] and capture.failures >= 1 and capture.pending == 1  # kept, not lost
    assert any("disk full (test)" in r.getMessage() for r in caplog.records)
    capture._uploader.close(0)


# ---------------------------------------------------------------- spool


def _staged(spool: Spool, size: int, cid: str, t: int) -> str:
    staging = spool.new_staging(cid)
    Path(staging, "trace.json").write_bytes(b"x" * size)
    return spool.commit(staging, cid, {"relative_dir": "x", "manifest": {}, "files": []}, t)


def test_spool_cap_keeps_older_captures_and_drops_new_ones(tmp_path):
    spool = Spool(str(tmp_path / "s"), max_bytes=600)
    first = _staged(spool, 400, "c1", 1)
    with pytest.raises(SpoolFull, match="cap of 600 bytes"):
        _staged(spool, 400, "c2", 2)
    assert spool.ready() == [first]
    assert [p.name for p in (tmp_path / "s").iterdir()] == [first]  # the dropped staging folder is gone


def test_capture_dropped_when_spool_is_full_is_counted_and_logged_once(tmp_path, caplog):
    sink = SwitchSink(str(tmp_path / "raw"))
    sink.down = True
    capture = TraceCapture(
        sink,
        job_id="full",
        active=1,
        repeat=3,
        spool_dir=str(tmp_path / "spool"),
        spool_max_bytes=1,
        flush_timeout_s=0.2,
        env={},
        **FAST,
    )
    with caplog.at_level(logging.WARNING, logger="capture_hooks"):
        with capture:
            assert _train(capture, 8) == 8
    assert capture.dropped == 3 and capture.failures == 3 and capture.pending == 0
    assert sum("spool failed" in r.getMessage() for r in caplog.records) == 1


def test_claims_of_dead_processes_are_released(tmp_path):
    spool = Spool(str(tmp_path / "s"), max_bytes=1 << 20)
    name = _staged(spool, 10, "c1", 1)
    claimed = spool.claim(name)
    assert claimed and spool.ready() == []  # claimed by us (alive): not offered again
    os.rename(claimed, claimed.rsplit(".claim-", 1)[0] + ".claim-999999999")  # a pid that does not exist
    assert spool.ready() == [name]


def test_spool_root_is_keyed_by_sink_job_and_rank(tmp_path):
    a = spool_root(str(tmp_path), "s3://b/raw", "job", 3)
    assert a.startswith(str(tmp_path / "job=job" / "rank=00003" / "sink="))
    assert a != spool_root(str(tmp_path), "s3://b/other", "job", 3)


# ---------------------------------------------------------------- configuration from the environment


def test_schedule_storage_options_and_upload_settings_from_env(tmp_path):
    env = {
        "TRACELAKE_SINK": str(tmp_path / "raw"),
        "TRACELAKE_JOB_ID": "envjob",
        "TRACELAKE_SCHEDULE": "wait=0, warmup=1, active=2, repeat=1",
        "TRACELAKE_STORAGE_OPTIONS": '{"auto_mkdir": true}',
        "TRACELAKE_BACKGROUND": "0",
        "TRACELAKE_SPOOL_DIR": str(tmp_path / "spool"),
        "TRACELAKE_SPOOL_MAX_BYTES": "64M",
    }
    capture = TraceCapture(env=env)
    assert capture.schedule == {"skip_first": 0, "wait": 0, "warmup": 1, "active": 2, "repeat": 1}
    assert capture.sink.storage_options == {"auto_mkdir": True}
    assert capture._background is False and capture._spool_max_bytes == 64 << 20
    with capture:
        _train(capture, 4)
    (manifest,) = _landed(tmp_path / "raw")
    assert manifest["job_id"] == "envjob" and manifest["step_range"] == {"first": 1, "last": 2}
    assert capture.spool_dir.startswith(str(tmp_path / "spool"))
    # an argument beats the environment
    assert TraceCapture(active=5, env=env).schedule["active"] == 5


@pytest.mark.parametrize(
    "name,value,needle",
    [
        ("TRACELAKE_SCHEDULE", "wait=1,bogus=2", "TRACELAKE_SCHEDULE"),
        ("TRACELAKE_SCHEDULE", "active=-1", "TRACELAKE_SCHEDULE"),
        ("TRACELAKE_STORAGE_OPTIONS", "[1, 2]", "JSON object"),
        ("TRACELAKE_STORAGE_OPTIONS", "{nope", "not JSON"),
        ("TRACELAKE_BACKGROUND", "maybe", "TRACELAKE_BACKGROUND"),
        ("TRACELAKE_SPOOL_MAX_BYTES", "lots", "TRACELAKE_SPOOL_MAX_BYTES"),
        ("TRACELAKE_NEURON", "2", "TRACELAKE_NEURON"),
    ],
)
def test_bad_environment_fails_at_construction(tmp_path, name, value, needle):
    with pytest.raises(ValueError, match=needle):
        TraceCapture(str(tmp_path), job_id="j", env={name: value})


def test_config_parsers():
    assert parse_schedule("") == {} and parse_schedule("skip_first=2,active=1") == {"skip_first": 2, "active": 1}
    assert parse_storage_options(" ") == {}
    assert env_bool({"X": "Yes"}, "X") is True and env_bool({"X": "off"}, "X") is False and env_bool({}, "X") is None
    assert env_bytes({"X": "2G"}, "X") == 2 << 30 and env_bytes({"X": "1.5KiB"}, "X") == 1536
    assert env_bytes({"X": "4096"}, "X") == 4096
